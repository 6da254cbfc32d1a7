r"""The server step alone (aggregation + finalizer) of every method.

  bazel run //benchmarks:server_step_benchmark -- \
      --benchmark_output_dir=$PWD/benchmarks/results

For cohorts n and models of D parameters (a Dense layer with D weights and
biases; FedLAW's proxy set is 100 random inputs of it), each method's
aggregation process and finalizer, composed from the library's building
blocks as its `build_<method>_process` composes them, run in one TFF
computation on n random client updates: seconds per call (median of
`--repeats` after a warm-up), the ratio to FedAvg's (`MeanFactory` + TFF's
SGD finalizer) on the same inputs, and the time per collected element. No
client training: this is what each method adds on the server. Cells whose
client updates exceed `--max_gb` (n D 4 bytes: they all cross the driver and
the worker) are skipped and reported; methods that refuse a size say why.
Writes `<--benchmark_name>.json` and `.md`.
"""

import experiments  # pylint: disable=unused-import,g-bad-import-order
# (Sets TensorFlow's C++ log level before TensorFlow loads.)

import collections
import os
import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from experiments import experiment
from experiments import run_files
from experiments import runtime
from tff_aggregators import value_types
from tff_aggregators.aggregators import collect
from tff_aggregators.aggregators import fedglad
from tff_aggregators.aggregators import fedlws_stats
from tff_aggregators.finalizers import fedcda
from tff_aggregators.finalizers import fedlaw
from tff_aggregators.finalizers import fedlws
from tff_aggregators.finalizers import fedsa

_OUTPUT_DIR = flags.DEFINE_string(
    'benchmark_output_dir', None, 'Where to write the results (required).')
_NAME = flags.DEFINE_string(
    'benchmark_name', 'server_step_benchmark', 'Output file name stem.')
_COHORTS = flags.DEFINE_list('cohorts', ['10', '50', '100'], 'Cohort sizes.')
_SIZES = flags.DEFINE_list(
    'sizes', ['100000', '1000000', '10000000'], 'Model parameters D.')
_METHODS = flags.DEFINE_list(
    'methods', ['fedavg', 'fedglad', 'fedlws', 'fedlaw', 'fedsa', 'fedcda'],
    'Methods (fedavg first: the ratios are to it).')
_REPEATS = flags.DEFINE_integer('repeats', 3, 'Timed calls per cell.')
_MAX_GB = flags.DEFINE_float(
    'max_gb', 0.5, 'Skip cells whose client updates exceed this (n D 4 B).')

_OUTPUTS = 10
_PROXY_EXAMPLES = 100


def _model_fn(inputs: int):
  def model_fn():
    keras_model = tf.keras.Sequential(
        [tf.keras.layers.Dense(_OUTPUTS, input_shape=(inputs,))])
    return tff.learning.models.from_keras_model(
        keras_model,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=(tf.TensorSpec([None, inputs]),
                    tf.TensorSpec([None], tf.int64)))
  return model_fn


def _server_parts(method, model_fn, weights_type, update_type, n, inputs):
  """(aggregation process, finalizer) of `method`, as its builder makes them."""
  trainable = weights_type.trainable
  weight = tff.TensorType(np.float32)
  sgd = tff.learning.optimizers.build_sgdm(1.0)
  apply_sgd = tff.learning.templates.build_apply_optimizer_finalizer(
      sgd, weights_type)
  if method == 'fedavg':
    return tff.aggregators.MeanFactory().create(trainable, weight), apply_sgd
  if method == 'fedglad':
    return fedglad.FedGladFactory().create(trainable, weight), apply_sgd
  if method == 'fedlws':
    groups = fedlws.model_layer_groups(model_fn, 'layer')
    return (fedlws_stats.FedLwsStatsFactory(groups).create(trainable, weight),
            fedlws.build_fedlws_finalizer(sgd, weights_type, groups=groups,
                                          beta=0.1))
  collector = collect.CollectAllFactory(n).create(update_type, weight)
  if method == 'fedlaw':
    rng = np.random.default_rng(1)
    proxy = tf.data.Dataset.from_tensor_slices((
        rng.standard_normal((_PROXY_EXAMPLES, inputs)).astype(np.float32),
        rng.integers(0, _OUTPUTS, _PROXY_EXAMPLES)))
    return collector, fedlaw.build_fedlaw_finalizer(
        model_fn, weights_type, proxy, max_clients=n)
  if method == 'fedsa':
    return collector, fedsa.build_fedsa_finalizer(weights_type)
  if method == 'fedcda':
    return collector, fedcda.build_fedcda_finalizer(
        weights_type, update_type, num_clients=n, max_clients=n,
        options=fedcda.FedCdaOptions(num_batches=max(3, -(-n // 3)),
                                     warmup_rounds=0))
  raise ValueError(f'Unknown method {method!r}.')


def _step(aggregator, finalizer, weights_type):
  value_type = aggregator.next.type_signature.parameter[1]

  @tff.federated_computation(
      aggregator.initialize.type_signature.result,
      finalizer.initialize.type_signature.result,
      tff.FederatedType(weights_type, tff.SERVER),
      value_type,
      tff.FederatedType(np.float32, tff.CLIENTS),
  )
  def step(aggregator_state, finalizer_state, weights, values, client_weights):
    aggregated = aggregator.next(aggregator_state, values, client_weights)
    return finalizer.next(finalizer_state, weights, aggregated.result).result

  return step


def _time(method, n, size):
  inputs = (size - _OUTPUTS) // _OUTPUTS
  model_fn = _model_fn(inputs)
  weights = tf.nest.map_structure(
      lambda v: v.numpy(),
      tff.learning.models.ModelWeights.from_model(model_fn()))
  weights_type = tff.types.to_type(
      tf.nest.map_structure(lambda x: tff.TensorType(x.dtype, x.shape),
                            weights))
  rng = np.random.default_rng(0)
  deltas = [[1e-3 * rng.standard_normal(np.shape(x)).astype(np.float32)
             for x in weights.trainable] for _ in range(n)]
  update_type = weights_type.trainable
  values = deltas
  if method == 'fedcda':
    update_type = tff.types.to_type(collections.OrderedDict(
        delta=weights_type.trainable, loss=np.float32, client_id=np.float32))
    values = [collections.OrderedDict(delta=d, loss=np.float32(1.0),
                                      client_id=np.float32(i))
              for i, d in enumerate(deltas)]
  aggregator, finalizer = _server_parts(
      method, model_fn, weights_type, update_type, n, inputs)
  step = _step(aggregator, finalizer, weights_type)
  arguments = (aggregator.initialize(), finalizer.initialize(), weights,
               values, [1.0 + i for i in range(n)])
  step(*arguments)  # Warm-up: tracing, worker caches.
  times = []
  for _ in range(_REPEATS.value):
    started = time.monotonic()
    step(*arguments)
    times.append(time.monotonic() - started)
  return float(np.median(times)), sum(
      value_types.num_elements(t)
      for t in value_types.leaf_types(weights_type.trainable))


def main(argv):
  if len(argv) > 1:
    raise SystemExit(f'error: unexpected arguments {argv[1:]}')
  if not _OUTPUT_DIR.value:
    raise SystemExit('error: --benchmark_output_dir is required.')
  experiment.quiet_other_info_logs()
  output_dir = experiment.resolve_path(_OUTPUT_DIR.value)
  os.makedirs(output_dir, exist_ok=True)
  runtime.use_local_worker()
  rows = []
  for size in (int(s) for s in _SIZES.value):
    for n in (int(c) for c in _COHORTS.value):
      row = collections.OrderedDict(clients=n, parameters=size)
      gigabytes = n * size * 4 / 2**30
      if gigabytes > _MAX_GB.value:
        row['skipped'] = f'client updates {gigabytes:.1f} GB > --max_gb'
      else:
        for method in _METHODS.value:
          try:
            seconds, d = _time(method, n, size)
            row[method] = seconds
            row['parameters'] = d
          except ValueError as e:  # A method refusing the size.
            row[method] = f'refused: {e}'
      print(dict(row), flush=True)
      rows.append(row)
  results = collections.OrderedDict(
      date=time.strftime('%Y-%m-%d'), cpus=os.cpu_count(),
      repeats=_REPEATS.value, rows=rows)
  run_files.write_json(
      os.path.join(output_dir, f'{_NAME.value}.json'), results)
  methods = _METHODS.value
  lines = ['| clients | parameters | ' + ' | '.join(
      f'{m} s (x FedAvg)' for m in methods) + ' |',
           '|---|---|' + '---|' * len(methods)]
  for r in rows:
    cells = []
    for m in methods:
      value = r.get(m, r.get('skipped', ''))
      if isinstance(value, float):
        base = r.get(methods[0])
        ratio = f' ({value / base:.2f}x)' if isinstance(base, float) else ''
        cells.append(f'{value:.3f}{ratio}')
      else:
        cells.append(str(value)[:60])
    lines.append(f'| {r["clients"]} | {r["parameters"]:,} | '
                 + ' | '.join(cells) + ' |')
  with open(os.path.join(output_dir, f'{_NAME.value}.md'), 'w') as f:
    f.write('\n'.join(lines) + '\n')
  print('\n'.join(lines))


if __name__ == '__main__':
  app.run(main)
