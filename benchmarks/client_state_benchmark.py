r"""Per-round time of persistent client optimizer state against FedAvg.

  bazel run //benchmarks:client_state_benchmark -- \
      --benchmark_output_dir=$PWD/benchmarks/results

`build_stateful_client_work` keeps each client's optimizer state (here SGD's
momentum) from one round it takes part in to the next. Where the states
live decides what a round carries:
- `tff_state` (`client_store=None`): the table of every client's state is
  in the TFF state, crosses the driver/worker boundary and is broadcast to
  every client each round;
- `memory` (`InMemoryClientStore()`) and `disk` (`MemmapClientStore(dir)`):
  the states live in the driver (a NumPy array or a memory-mapped file) and
  only the cohort's rows enter the round.
These three and TFF's FedAvg (`tff.learning.algorithms.
build_weighted_fed_avg`, whose clients restart from a fresh optimizer state
every round) train the same synthetic task, cohorts and initial model, one
after the other in this process, each on a local worker started for it:
`--benchmark_num_clients` clients of `--benchmark_examples_per_client`
random 784-feature examples (labels 0-9 from a fixed random linear
teacher), batches of 10, a 784 -> 10 dense Keras model (7,850 parameters,
its initial kernel seeded), cohorts of `--benchmark_clients_per_round`
sampled with `--benchmark_seed`, client SGD lr 0.05 momentum 0.9, one local
epoch, server SGD lr 1.0.
Reports the median seconds of `process.next` over the rounds after
`--warmup_rounds` (the driver's store reads and writes included), its ratio
to FedAvg's, the peak resident memory of the driver (reset before each run)
and of the worker, and the size of the TFF-state table. The three
placements must give the same final model (checked to 1e-6). Writes
`<--benchmark_name>.json` and `.md` to `--benchmark_output_dir`.
"""

import experiments  # noqa: F401  # pylint: disable=unused-import,g-bad-import-order
# (Sets TensorFlow's C++ log level before TensorFlow loads.)

import collections
import os
import platform
import tempfile
import time

from absl import app
from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from benchmarks import common
from experiments import run_files
import tff_aggregators
from tff_aggregators.algorithms import client_works
from tff_aggregators.client_works import stateful

_OUTPUT_DIR = flags.DEFINE_string(
  'benchmark_output_dir', None, 'Where to write the results (required).'
)
_NAME = flags.DEFINE_string(
  'benchmark_name', 'client_state_benchmark', 'Output file name stem.'
)
_ROUNDS = flags.DEFINE_integer('benchmark_rounds', 8, 'Rounds per run.')
_WARMUP = flags.DEFINE_integer(
  'warmup_rounds', 2, 'Rounds excluded from the median (tracing, caches).'
)
_NUM_CLIENTS = flags.DEFINE_integer(
  'benchmark_num_clients', 2000, 'Population.'
)
_COHORT = flags.DEFINE_integer(
  'benchmark_clients_per_round', 10, 'Cohort size.'
)
_EXAMPLES = flags.DEFINE_integer(
  'benchmark_examples_per_client', 20, 'Examples per client.'
)
_SEED = flags.DEFINE_integer(
  'benchmark_seed', 0, 'Seed of the data and the cohorts.'
)
_NOTE = flags.DEFINE_string(
  'benchmark_note',
  '',
  'A sentence on the conditions (e.g. other load on the machine), written '
  'under the date in both outputs.',
)

_FEATURES, _CLASSES, _BATCH = 784, 10, 10
_CLIENT_LR, _MOMENTUM = 0.05, 0.9
_RUNS = collections.OrderedDict(
  fedavg='TFF FedAvg (client state reset every round)',
  tff_state="stateful, every client's row in the TFF state",
  memory='stateful, InMemoryClientStore()',
  disk='stateful, MemmapClientStore(tempdir)',
)
_TOLERANCE = 1e-6


def _model_fn() -> tff.learning.models.VariableModel:
  keras_model = tf.keras.Sequential(
    [
      tf.keras.layers.Dense(
        _CLASSES,
        input_shape=(_FEATURES,),
        kernel_initializer=tf.keras.initializers.GlorotUniform(_SEED.value),
      )
    ]
  )
  return tff.learning.models.from_keras_model(
    keras_model,
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    input_spec=(
      tf.TensorSpec([None, _FEATURES], tf.float32),
      tf.TensorSpec([None], tf.int64),
    ),
  )


def _client_optimizer():
  return tff.learning.optimizers.build_sgdm(_CLIENT_LR, momentum=_MOMENTUM)


def _client_dataset(client: int) -> tf.data.Dataset:
  """Client `client`'s examples, the same whenever they are made."""
  teacher = np.random.default_rng([_SEED.value, 1]).normal(
    size=(_FEATURES, _CLASSES)
  )
  rng = np.random.default_rng([_SEED.value, 0, client])
  # Unit-norm inputs on average, so that lr 0.05 with momentum is stable.
  x = (rng.normal(size=(_EXAMPLES.value, _FEATURES)) / 28).astype(np.float32)
  y = np.argmax(x @ teacher + 0.1 * rng.normal(size=(len(x), _CLASSES)), 1)
  return tf.data.Dataset.from_tensor_slices((x, y.astype(np.int64))).batch(
    _BATCH
  )


def _cohorts() -> list[np.ndarray]:
  rng = np.random.default_rng(_SEED.value)
  return [
    rng.choice(_NUM_CLIENTS.value, size=_COHORT.value, replace=False)
    for _ in range(_ROUNDS.value)
  ]


def _stateful_fedavg(client_store):
  """FedAvg composed around the stateful client work (as the tests do)."""
  size = stateful.state_size(_model_fn, _client_optimizer(), _NUM_CLIENTS.value)
  work = tff_aggregators.build_stateful_client_work(
    _model_fn,
    _client_optimizer(),
    num_clients=_NUM_CLIENTS.value,
    max_clients=_COHORT.value,
    max_state_bytes=max(size.total_bytes, stateful.DEFAULT_MAX_STATE_BYTES),
    client_store=client_store,
  )
  # TFF's FedAvg composition around `work` (wrapped for its store).
  return client_works.compose_with_server_optimizer(
    _model_fn,
    work,
    tff.aggregators.MeanFactory(),
    tff.learning.optimizers.build_sgdm(1.0),
  )


def _reset_driver_peak() -> bool:
  """Resets this process's VmHWM to its current RSS (Linux); True if done."""
  try:
    with open('/proc/self/clear_refs', 'w') as f:
      f.write('5')
    return True
  except OSError:
    return False


def _driver_peak_mb() -> float:
  with open('/proc/self/status') as f:
    for line in f:
      if line.startswith('VmHWM:'):
        return int(line.split()[1]) / 1024
  raise ValueError('No VmHWM in /proc/self/status.')


def _train(run, initial_weights, cohorts, store_dir):
  """Trains `run`; its round seconds, final model and last metrics."""
  if run == 'fedavg':
    process = tff.learning.algorithms.build_weighted_fed_avg(
      _model_fn,
      client_optimizer_fn=_client_optimizer(),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
    )
  else:
    process = _stateful_fedavg(
      {
        'tff_state': lambda: None,
        'memory': tff_aggregators.InMemoryClientStore,
        'disk': lambda: tff_aggregators.MemmapClientStore(store_dir),
      }[run]()
    )
  state = process.initialize()
  if initial_weights is not None:
    state = process.set_model_weights(state, initial_weights)
  initial = process.get_model_weights(state)
  seconds = []
  for ids in cohorts:
    data = [_client_dataset(int(i)) for i in ids]
    if run != 'fedavg':
      data = tff_aggregators.with_client_ids(data, [int(i) for i in ids])
    started = time.monotonic()
    output = process.next(state, data)
    seconds.append(time.monotonic() - started)
    state = output.state
    logging.info('%s: round %d, %.2f s', run, len(seconds), seconds[-1])
  weights = [np.asarray(w) for w in process.get_model_weights(state).trainable]
  return seconds, initial, weights, output.metrics


def _measure(run, initial_weights, cohorts):
  reset = _reset_driver_peak()
  with tempfile.TemporaryDirectory() as store_dir:
    (seconds, initial, weights, metrics), worker_mb = common.on_fresh_worker(
      lambda: _train(run, initial_weights, cohorts, store_dir)
    )
    disk_mb = (
      sum(
        os.stat(os.path.join(store_dir, name)).st_blocks * 512
        for name in os.listdir(store_dir)
      )
      / 2**20
    )
  if not all(np.all(np.isfinite(w)) for w in weights):
    raise FloatingPointError(f'{run}: the final model is not finite.')
  work = metrics['client_work']
  result = collections.OrderedDict(
    description=_RUNS[run],
    median_round_seconds=float(np.median(seconds[_WARMUP.value :])),
    round_seconds=seconds,
    driver_peak_rss_mb=_driver_peak_mb(),
    driver_peak_reset=reset,
    worker_peak_rss_mb=worker_mb,
    last_round_train_loss=float(work['train']['loss']),
  )
  if 'client_states' in work:
    result['clients_with_state'] = int(
      work['client_states']['clients_with_state']
    )
  if run == 'disk':
    result['store_on_disk_mib'] = disk_mb
  return result, initial, weights


def _check_same_models(models):
  """The three placements train the same model (to `_TOLERANCE`)."""
  for run in ('memory', 'disk'):
    for got, want in zip(models[run], models['tff_state']):
      np.testing.assert_allclose(
        got, want, rtol=_TOLERANCE, atol=_TOLERANCE, err_msg=run
      )
  return max(
    float(np.max(np.abs(a - b)))
    for run in ('memory', 'disk')
    for a, b in zip(models[run], models['tff_state'])
  )


def _markdown(results) -> str:
  machine = results['machine']
  lines = [
    f'Measured {results["date"]} {results["started_utc"]}-'
    f'{results["finished_utc"]} UTC on {machine["cpus"]} cores, '
    f'{machine["memory_gb"]} GB ({machine["platform"]}), TFF '
    f'{results["tff_version"]}; load average '
    f'{results["load_average_before"]:.2f} before the run.',
  ]
  if results['note']:
    lines += ['', results['note']]
  s = results['setting']
  lines += [
    '',
    f'{s["num_clients"]:,} clients of {s["examples_per_client"]} examples, '
    f'a {s["parameters"]:,}-parameter model, cohorts of '
    f'{s["clients_per_round"]}, {results["rounds"]} rounds (median of '
    f'rounds {results["warmup_rounds"] + 1}-{results["rounds"]}). '
    f'Table in the TFF state: {s["tff_state_table"]}; with a store, '
    f'the cohort table: {s["cohort_table_mib"]:.2f} MiB.',
    '',
    '| run | client state | s/round (median) | ratio to FedAvg '
    '| driver peak RSS (MB) | worker peak RSS (MB) |',
    '|---|---|---|---|---|---|',
  ]
  for run, r in results['runs'].items():
    lines.append(
      f'| {run} | {r["description"]} | {r["median_round_seconds"]:.3f} | '
      f'{r["ratio_to_fedavg"]:.2f} | {r["driver_peak_rss_mb"]:.0f} | '
      f'{r["worker_peak_rss_mb"]:.0f} |'
    )
  lines += [
    '',
    'Final models of tff_state, memory and disk: largest difference '
    f'{results["max_model_difference"]:.1e} (checked below {_TOLERANCE:g}); '
    "FedAvg's (momentum reset every round) differs from theirs by up to "
    f'{results["fedavg_vs_tff_state_difference"]:.1e}.',
  ]
  return '\n'.join(lines) + '\n'


def main(argv):
  output_dir = common.output_dir(argv, _OUTPUT_DIR.value)
  if _WARMUP.value >= _ROUNDS.value:
    raise SystemExit('error: --warmup_rounds must be below --benchmark_rounds.')
  size = stateful.state_size(_model_fn, _client_optimizer(), _NUM_CLIENTS.value)
  cohort_size = stateful.state_size(
    _model_fn, _client_optimizer(), _COHORT.value
  )
  cohorts = _cohorts()
  load_before = os.getloadavg()[0]
  started = time.time()
  runs = collections.OrderedDict()
  models = {}
  initial_weights = None
  for run in _RUNS:
    logging.info('%s: %s', run, _RUNS[run])
    runs[run], initial, models[run] = _measure(run, initial_weights, cohorts)
    if initial_weights is None:  # FedAvg's initial model, for every run.
      initial_weights = initial
  difference = _check_same_models(models)
  for r in runs.values():
    r['ratio_to_fedavg'] = (
      r['median_round_seconds'] / runs['fedavg']['median_round_seconds']
    )
  results = collections.OrderedDict(
    date=time.strftime('%Y-%m-%d', time.gmtime(started)),
    started_utc=time.strftime('%H:%M', time.gmtime(started)),
    finished_utc=time.strftime('%H:%M', time.gmtime()),
    machine=collections.OrderedDict(
      cpus=os.cpu_count(),
      memory_gb=round(
        os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30, 1
      ),
      platform=platform.platform(),
    ),
    tff_version=tff.__version__,
    load_average_before=load_before,
    note=_NOTE.value,
    rounds=_ROUNDS.value,
    warmup_rounds=_WARMUP.value,
    setting=collections.OrderedDict(
      num_clients=_NUM_CLIENTS.value,
      clients_per_round=_COHORT.value,
      examples_per_client=_EXAMPLES.value,
      batch_size=_BATCH,
      parameters=size.parameters,
      client_optimizer=f'sgdm lr {_CLIENT_LR} momentum {_MOMENTUM}',
      seed=_SEED.value,
      cohorts=[c.tolist() for c in cohorts],
      tff_state_table=size.describe(),
      tff_state_table_mib=size.total_bytes / 2**20,
      cohort_table_mib=cohort_size.total_bytes / 2**20,
    ),
    runs=runs,
    max_model_difference=difference,
    fedavg_vs_tff_state_difference=max(
      float(np.max(np.abs(a - b)))
      for a, b in zip(models['fedavg'], models['tff_state'])
    ),
    total_seconds=time.time() - started,
  )
  run_files.write_json(os.path.join(output_dir, f'{_NAME.value}.json'), results)
  run_files.write_text(
    os.path.join(output_dir, f'{_NAME.value}.md'), _markdown(results)
  )
  logging.info('\n%s', _markdown(results))


if __name__ == '__main__':
  app.run(main)
