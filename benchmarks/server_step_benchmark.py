r"""The server step alone (aggregation + finalizer) of every method.

  bazel run //benchmarks:server_step_benchmark -- \
      --benchmark_output_dir=$PWD/benchmarks/results

For cohorts n and models of about D parameters (a 784-h-10 MLP, h chosen for
D; FedLAW's proxy set is 100 random 784-pixel inputs), each method's
aggregation process and finalizer, composed from the library's building
blocks as its `build_<method>_process` composes them, run in one TFF
computation: the n client updates are made on the clients
(`common.random_value` from each client's seed, client weights 1..n), the
new model is consumed at the server (only its checksum returns), and the
aggregator's and finalizer's states go back and forth through the driver as
in a `LearningProcess`. Reports seconds per call (median of `--repeats`
after a warm-up, fewer past `--budget_seconds`; FedCDA after K priming
calls, so every client holds K models), the ratio to FedAvg's (`MeanFactory`
+ TFF's SGD finalizer) on the
same inputs, the peak memory of a local worker started for each
measurement, and the seconds of making the updates alone (shared by every
column). No client training: this is what each method adds on the server.
Cells above `--max_gb` (n D 4 bytes) are skipped; methods that refuse a size
say why (e.g. FedCDA's in-state history above its `max_state_bytes`).
Writes `<--benchmark_name>.json` and `.md` after every row (`--resume`
continues a stopped grid).
"""

import experiments  # noqa: F401  # pylint: disable=unused-import,g-bad-import-order
# (Sets TensorFlow's C++ log level before TensorFlow loads.)

import collections
import json
import os
import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from benchmarks import common
from experiments import run_files
from tff_aggregators import value_types
from tff_aggregators.aggregators import collect
from tff_aggregators.aggregators import fedglad
from tff_aggregators.aggregators import fedlws_stats
from tff_aggregators.finalizers import fedcda
from tff_aggregators.finalizers import fedlaw
from tff_aggregators.finalizers import fedlws
from tff_aggregators.finalizers import fedsa

_OUTPUT_DIR = flags.DEFINE_string(
  'benchmark_output_dir', None, 'Where to write the results (required).'
)
_NAME = flags.DEFINE_string(
  'benchmark_name', 'server_step_benchmark', 'Output file name stem.'
)
_COHORTS = flags.DEFINE_list('cohorts', ['10', '50', '100'], 'Cohort sizes.')
_SIZES = flags.DEFINE_list(
  'sizes', ['100000', '1000000', '10000000'], 'Model parameters D.'
)
_METHODS = flags.DEFINE_list(
  'methods',
  ['fedavg', 'fedglad', 'fedlws', 'fedlaw', 'fedsa', 'fedcda'],
  'Methods (fedavg first: the ratios are to it).',
)
_REPEATS = flags.DEFINE_integer('repeats', 3, 'Timed calls per cell.')
_BUDGET = flags.DEFINE_float(
  'budget_seconds',
  120.0,
  'Fewer timed calls (at least one) once a measurement has taken this '
  'long (FedLAW at 10M parameters takes minutes per call).',
)
_RESUME = flags.DEFINE_bool(
  'resume',
  False,
  'Keep the cells already in <--benchmark_name>.json and measure the rest '
  '(the results are written after every row).',
)
_MAX_GB = flags.DEFINE_float(
  'max_gb', 4.0, 'Skip cells whose client updates exceed this (n D 4 B).'
)

_INPUTS = 784
_OUTPUTS = 10
_PROXY_EXAMPLES = 100


def _hidden_units(size: int) -> int:
  """The hidden width giving the 784-h-10 MLP about `size` parameters."""
  return max(1, round((size - _OUTPUTS) / (_INPUTS + 1 + _OUTPUTS)))


def _model_fn(hidden: int):
  def model_fn():
    keras_model = tf.keras.Sequential(
      [
        tf.keras.layers.Dense(
          hidden, activation='relu', input_shape=(_INPUTS,)
        ),
        tf.keras.layers.Dense(_OUTPUTS),
      ]
    )
    return tff.learning.models.from_keras_model(
      keras_model,
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=(
        tf.TensorSpec([None, _INPUTS]),
        tf.TensorSpec([None], tf.int64),
      ),
    )

  return model_fn


def _server_parts(method, model_fn, weights_type, update_type, n):
  """(aggregation process, finalizer) of `method`, as its builder makes them."""
  trainable = weights_type.trainable
  weight = tff.TensorType(np.float32)
  sgd = tff.learning.optimizers.build_sgdm(1.0)
  apply_sgd = tff.learning.templates.build_apply_optimizer_finalizer(
    sgd, weights_type
  )
  if method == 'fedavg':
    return tff.aggregators.MeanFactory().create(trainable, weight), apply_sgd
  if method == 'fedglad':
    return fedglad.FedGladFactory().create(trainable, weight), apply_sgd
  if method == 'fedlws':
    groups = fedlws.model_layer_groups(model_fn, 'layer')
    return (
      fedlws_stats.FedLwsStatsFactory(groups).create(trainable, weight),
      fedlws.build_fedlws_finalizer(sgd, weights_type, groups=groups, beta=0.1),
    )
  collector = collect.CollectAllFactory(n).create(update_type, weight)
  if method == 'fedlaw':
    rng = np.random.default_rng(1)
    proxy = tf.data.Dataset.from_tensor_slices(
      (
        rng.standard_normal((_PROXY_EXAMPLES, _INPUTS)).astype(np.float32),
        rng.integers(0, _OUTPUTS, _PROXY_EXAMPLES),
      )
    )
    return collector, fedlaw.build_fedlaw_finalizer(
      model_fn, weights_type, proxy, max_clients=n
    )
  if method == 'fedsa':
    return collector, fedsa.build_fedsa_finalizer(weights_type)
  if method == 'fedcda':
    return collector, fedcda.build_fedcda_finalizer(
      weights_type,
      update_type,
      num_clients=n,
      max_clients=n,
      options=fedcda.FedCdaOptions(
        num_batches=max(3, -(-n // 3)), warmup_rounds=0
      ),
    )
  raise ValueError(f'Unknown method {method!r}.')


def _update(method, update_type, seed):
  """In TF: the client's update from its seed (FedCDA's is identified)."""
  if method != 'fedcda':
    return common.random_value(update_type, seed)
  return collections.OrderedDict(
    delta=common.random_value(update_type['delta'], seed),
    loss=tf.constant(1.0),
    client_id=tf.cast(seed, tf.float32),
  )


def _step(method, aggregator, finalizer, weights_type, update_type):
  """(agg state, fin state, weights, seeds) -> (agg state, fin state, sum)."""

  @tff.tensorflow.computation(np.int32)
  def make(seed):
    return _update(method, update_type, seed)

  @tff.tensorflow.computation(np.int32)
  def client_weight(seed):
    return tf.cast(seed, tf.float32) + 1.0

  @tff.tensorflow.computation(weights_type)
  def model_checksum(weights):
    return common.checksum(weights.trainable)

  @tff.federated_computation(
    aggregator.initialize.type_signature.result,
    finalizer.initialize.type_signature.result,
    tff.FederatedType(weights_type, tff.SERVER),
    tff.FederatedType(np.int32, tff.CLIENTS),
  )
  def step(aggregator_state, finalizer_state, weights, seeds):
    aggregated = aggregator.next(
      aggregator_state,
      tff.federated_map(make, seeds),
      tff.federated_map(client_weight, seeds),
    )
    finalized = finalizer.next(finalizer_state, weights, aggregated.result)
    return (
      aggregated.state,
      finalized.state,
      tff.federated_map(model_checksum, finalized.result),
    )

  return step


def _updates_alone(update_type):
  """Seconds of making the n updates and summing each on its client."""

  @tff.tensorflow.computation(np.int32)
  def make_and_sum(seed):
    return common.checksum(_update('fedavg', update_type, seed))

  @tff.federated_computation(tff.FederatedType(np.int32, tff.CLIENTS))
  def updates_alone(seeds):
    return tff.federated_map(make_and_sum, seeds)

  return updates_alone


def _weights_and_types(size):
  model_fn = _model_fn(_hidden_units(size))
  weights = tf.nest.map_structure(
    lambda v: v.numpy(), tff.learning.models.ModelWeights.from_model(model_fn())
  )
  weights_type = tff.types.to_type(
    tf.nest.map_structure(lambda x: tff.TensorType(x.dtype, x.shape), weights)
  )
  return model_fn, weights, weights_type


def _time(method, n, size):
  model_fn, weights, weights_type = _weights_and_types(size)
  update_type = weights_type.trainable
  if method == 'fedcda':
    update_type = tff.types.to_type(
      collections.OrderedDict(
        delta=weights_type.trainable, loss=np.float32, client_id=np.float32
      )
    )
  aggregator, finalizer = _server_parts(
    method, model_fn, weights_type, update_type, n
  )
  step = _step(method, aggregator, finalizer, weights_type, update_type)
  seeds = list(range(n))
  states = [aggregator.initialize(), finalizer.initialize()]

  def call():
    states[0], states[1], total = step(states[0], states[1], weights, seeds)
    if not np.isfinite(total):
      raise FloatingPointError(f'{method}: non-finite model at n={n}, D={size}')
    return total

  if method == 'fedcda':
    for _ in range(fedcda.FedCdaOptions().memory_size):
      call()
  seconds, _ = common.median_seconds(call, _REPEATS.value, _BUDGET.value)
  return seconds


def main(argv):
  output_dir = common.output_dir(argv, _OUTPUT_DIR.value)
  done = {}
  json_path = os.path.join(output_dir, f'{_NAME.value}.json')
  if _RESUME.value and os.path.exists(json_path):
    with open(json_path) as f:
      done = {(r['clients'], r['size']): r for r in json.load(f)['rows']}
  rows = []
  for size in (int(s) for s in _SIZES.value):
    for n in (int(c) for c in _COHORTS.value):
      if (n, size) in done:
        rows.append(done[(n, size)])
        continue
      row = collections.OrderedDict(clients=n, size=size, parameters=size)
      gigabytes = n * size * 4 / 2**30
      if gigabytes > _MAX_GB.value:
        row['skipped'] = f'client updates {gigabytes:.1f} GB > --max_gb'
      else:
        _, _, weights_type = _weights_and_types(size)
        row['parameters'] = sum(
          value_types.num_elements(t)
          for t in value_types.leaf_types(weights_type.trainable)
        )
        updates_alone = _updates_alone(weights_type.trainable)
        (row['updates_alone'], _), _ = common.on_fresh_worker(
          lambda updates_alone=updates_alone, n=n: common.median_seconds(
            lambda: updates_alone(list(range(n))), _REPEATS.value
          )
        )
        for method in _METHODS.value:
          try:
            row[method], row[f'{method}_worker_mb'] = common.on_fresh_worker(
              lambda method=method, n=n, size=size: _time(method, n, size)
            )
          except ValueError as e:  # A method refusing the size.
            row[method] = f'refused: {e}'
          except common.WorkerDiedError as e:
            row[method] = f'failed: {e}'
      print(dict(row), flush=True)
      rows.append(row)
      # After each row: a long run's partial grid survives.
      _write_results(output_dir, rows)


def _write_results(output_dir, rows):
  """`<--benchmark_name>.json` and `.md` of the rows so far."""
  results = collections.OrderedDict(
    date=time.strftime('%Y-%m-%d'),
    cpus=os.cpu_count(),
    repeats=_REPEATS.value,
    budget_seconds=_BUDGET.value,
    rows=rows,
  )
  run_files.write_json(os.path.join(output_dir, f'{_NAME.value}.json'), results)
  methods = _METHODS.value
  lines = [
    '| clients | parameters | updates alone s | '
    + ' | '.join(f'{m} s (x FedAvg, worker GB)' for m in methods)
    + ' |',
    '|---|---|---|' + '---|' * len(methods),
  ]
  for r in rows:
    alone = r.get('updates_alone')
    cells = [f'{alone:.3f}' if alone is not None else '-']
    for m in methods:
      value = r.get(m, r.get('skipped', ''))
      if isinstance(value, float):
        base = r.get(methods[0])
        ratio = f'{value / base:.2f}x, ' if isinstance(base, float) else ''
        gigabytes = r[f'{m}_worker_mb'] / 1024
        cells.append(f'{value:.3f} ({ratio}{gigabytes:.1f})')
      else:
        cells.append(str(value)[:60])
    lines.append(
      f'| {r["clients"]} | {r["parameters"]:,} | ' + ' | '.join(cells) + ' |'
    )
  run_files.write_text(
    os.path.join(output_dir, f'{_NAME.value}.md'), '\n'.join(lines) + '\n'
  )


if __name__ == '__main__':
  app.run(main)
