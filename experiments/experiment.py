"""Flags and `main` shared by the experiment binaries on partitioned data sets.

A binary sets its defaults (`set_defaults`) and names its data set to
`image_classification_main`; everything else (partition, model, aggregator,
optimisers, the training loop, outputs) is common.
"""

from collections.abc import Callable
import atexit
import collections
import dataclasses
import json
import os
import signal
from typing import Optional

import logging as logging_lib

from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from experiments import baseline_tasks
from experiments import data as data_lib
from experiments import models
from experiments import partition
from experiments import registry
from experiments import run_files
from tff_aggregators import runtime
from experiments import tasks
from experiments import training
from tff_aggregators.client_works import stateful

_SERVER_OPTIMIZERS = ('sgd', 'sgdm', 'adam', 'yogi')
_CLIENT_OPTIMIZERS = ('sgd', 'adam')

AGGREGATOR = flags.DEFINE_string(
  'aggregator', 'fedavg', 'Aggregation method (see --helpfull for the list).'
)
ROUNDS = flags.DEFINE_integer('rounds', 100, 'Number of training rounds.')
NUM_CLIENTS = flags.DEFINE_integer(
  'num_clients', 20, 'Clients the training split is partitioned into.'
)
CLIENTS_PER_ROUND = flags.DEFINE_integer(
  'clients_per_round', 10, 'Clients sampled (without replacement) per round.'
)
LOCAL_EPOCHS = flags.DEFINE_integer(
  'local_epochs', 1, 'Passes over the client data per round.'
)
BATCH_SIZE = flags.DEFINE_integer('batch_size', 64, 'Client batch size.')
CLIENT_OPTIMIZER = flags.DEFINE_enum(
  'client_optimizer', 'sgd', _CLIENT_OPTIMIZERS, 'Client optimiser.'
)
CLIENT_LR = flags.DEFINE_float(
  'client_lr',
  None,
  'Client learning rate. Default 0.05; femnist, stackoverflow, '
  "cifar100_federated: Reddi et al.'s tuned value for --server_optimizer.",
)
CLIENT_LR_DECAY = flags.DEFINE_float(
  'client_lr_decay',
  1.0,
  'Per-round decay: round r (1-based) uses client_lr * decay**(r-1).',
)
CLIENT_MOMENTUM = flags.DEFINE_float(
  'client_momentum',
  0.0,
  'Client SGD momentum (reset every round unless '
  '--client_optimizer_state=persistent).',
)
CLIENT_OPTIMIZER_STATE = flags.DEFINE_enum(
  'client_optimizer_state',
  'reset',
  list(registry.CLIENT_OPTIMIZER_STATES),
  'Client optimiser state (SGD momentum, Adam moments): reset every round '
  "(TFF's clients) or persistent per client between the rounds it takes "
  'part in (build_stateful_client_work, docs/stateful_clients.md).',
)
CLIENT_STATE_STORE = flags.DEFINE_enum(
  'client_state_store',
  'state',
  list(registry.CLIENT_STATE_STORES),
  'Where persistent client optimiser states live: the TFF state (every '
  "client's row broadcast each round; small populations), a NumPy array "
  'in the driver (memory, checkpointed) or a memory-mapped file in '
  f'<output_dir>/{registry.CLIENT_STATE_DIR} (disk, only clients seen take '
  "space); with memory and disk a round carries only the cohort's rows.",
)
MAX_CLIENT_STATE_MIB = flags.DEFINE_integer(
  'max_client_state_mib',
  64,
  'Refuse persistent client optimiser states in the TFF state (clients x '
  'optimiser slots x parameters x 4 bytes) above this; with '
  "--client_state_store=memory|disk, the cohort's rows.",
)
CLIENT_TRAIN_FRACTION = flags.DEFINE_float(
  'client_train_fraction',
  1.0,
  'Each client trains on this first fraction of its examples, in an order '
  "shuffled once per (seed, client); FedLWS's code: 0.7 (30% held out for "
  'local validation).',
)
WEIGHT_DECAY = flags.DEFINE_float(
  'weight_decay',
  0.0,
  'PyTorch-style coupled weight decay on every weight (as L2 loss wd/2).',
)
PROXIMAL_STRENGTH = flags.DEFINE_float(
  'proximal_strength', 0.0, 'FedProx mu on the clients (0: plain SGD).'
)
SERVER_OPTIMIZER = flags.DEFINE_enum(
  'server_optimizer',
  'sgd',
  _SERVER_OPTIMIZERS,
  'Server optimiser: sgd (FedAvg), sgdm (FedAvgM), adam, yogi.',
)
SERVER_LR = flags.DEFINE_float(
  'server_lr',
  None,
  'Server learning rate. Default 1.0; femnist, stackoverflow, '
  "cifar100_federated: Reddi et al.'s tuned value for --server_optimizer.",
)
SERVER_MOMENTUM = flags.DEFINE_float(
  'server_momentum', 0.9, 'Momentum of --server_optimizer=sgdm.'
)
SERVER_BETA1 = flags.DEFINE_float('server_beta1', 0.9, 'Adam/Yogi beta1.')
SERVER_BETA2 = flags.DEFINE_float('server_beta2', 0.999, 'Adam/Yogi beta2.')
SERVER_EPSILON = flags.DEFINE_float(
  'server_epsilon', 1e-7, 'Adam/Yogi epsilon (TFF default).'
)
PARTITION = flags.DEFINE_enum(
  'partition',
  'dirichlet',
  partition.METHODS,
  'How clients split the data: dirichlet (per-class Dirichlet shares over '
  'clients, FedLAW/FedLWS/FedCDA), label_skew (equal-size clients, each '
  'with Dirichlet(alpha * p) label proportions, FedGLAD), iid, shards.',
)
ALPHA = flags.DEFINE_float(
  'alpha',
  0.5,
  'Dirichlet concentration of --partition=dirichlet and '
  'label_skew (smaller: more skewed labels).',
)
SHARDS_PER_CLIENT = flags.DEFINE_integer(
  'shards_per_client', 2, 'Label shards per client for --partition=shards.'
)
MODEL = flags.DEFINE_string(
  'model',
  'lenet',
  f'Model: {", ".join(sorted(models.MODELS))} (partitioned data sets); '
  "TFF's model ids for femnist, stackoverflow, cifar100_federated.",
)
NORMALIZATION = flags.DEFINE_enum(
  'normalization',
  'unit',
  sorted(tasks.NORMALIZATIONS),
  'Pixel scaling: unit = [0, 1], symmetric = [-1, 1].',
)
SEED = flags.DEFINE_integer(
  'seed', 0, 'Seeds the partition, initial model, cohorts and shuffling.'
)
EVAL_EVERY = flags.DEFINE_integer(
  'eval_every',
  1,
  'Evaluate every N rounds (and in each of the last --summary_rounds).',
)
OUTPUT_DIR = flags.DEFINE_string(
  'output_dir',
  None,
  'Run directory (metrics, summary, plot, checkpoints); a run restarted '
  'with the same directory resumes. Relative paths are taken from the '
  'directory bazel was run in. Default: runs/<task>/<aggregator>_seed<seed>.',
)
DATA_DIR = flags.DEFINE_string('data_dir', None, 'Where the data set is.')
PROXY_SIZE = flags.DEFINE_integer(
  'proxy_size',
  None,
  'Server proxy set (FedLAW), held out from evaluation for every method: '
  'image binaries draw it class-balanced from the test split (default 10 '
  'per class); femnist, stackoverflow, cifar100_federated take the first '
  'examples of the shuffled held-out clients (default 1000). 0: none.',
)
PROXY_DISTRIBUTION = flags.DEFINE_enum(
  'proxy_distribution',
  'balanced',
  partition.PROXY_DISTRIBUTIONS,
  'Proxy set class distribution: balanced, or long-tailed (ratio 10).',
)
DOWNLOAD = flags.DEFINE_bool(
  'download', False, 'Let tensorflow-datasets download a missing data set.'
)
EVAL_EXAMPLES = flags.DEFINE_integer(
  'eval_examples',
  None,
  'Evaluate on a fixed, seeded sample of this many held-out examples '
  '(default: all; stackoverflow: 10,000 validation examples).',
)
ACCURACY_METRIC = flags.DEFINE_string(
  'accuracy_metric',
  'sparse_categorical_accuracy',
  'Evaluation metric reported as accuracy (all are in the metrics CSV).',
)
SUMMARY_ROUNDS = flags.DEFINE_integer(
  'summary_rounds', 10, 'The summary averages accuracy over these last rounds.'
)
CACHE_DIR = flags.DEFINE_string(
  'cache_dir',
  '~/.tff',
  'femnist/stackoverflow/cifar100_federated: directory of the TFF SQLite '
  'files (emnist_all.sqlite, stackoverflow.sqlite, cifar100.sqlite).',
)
USE_SYNTHETIC_DATA = flags.DEFINE_bool(
  'use_synthetic_data',
  False,
  "femnist/stackoverflow/cifar100_federated: TFF's small synthetic data "
  '(smoke runs).',
)
MAX_CLIENT_EXAMPLES = flags.DEFINE_integer(
  'max_client_examples',
  None,
  'Cap on the examples a client uses per round (stackoverflow: 1000).',
)
SEQUENCE_LENGTH = flags.DEFINE_integer(
  'sequence_length', 20, 'stackoverflow: words per sequence.'
)
VOCAB_SIZE = flags.DEFINE_integer(
  'vocab_size', 10_000, 'stackoverflow: vocabulary size.'
)
CROP_SIZE = flags.DEFINE_integer(
  'crop_size', 24, 'cifar100_federated: crop height and width.'
)
DISTORT_TRAIN_IMAGES = flags.DEFINE_bool(
  'distort_train_images',
  True,
  'cifar100_federated: random crops and flips in training (Reddi et al.); '
  "off: central crops. TFF's distortion is not seeded.",
)
MAX_CONCURRENT_COMPUTATION_CALLS = flags.DEFINE_integer(
  'max_concurrent_computation_calls',
  -1,
  'Parallel client computations in the local TFF worker (-1: no limit); '
  'for --workers, set it where the workers are started.',
)
WORKERS = flags.DEFINE_list(
  'workers',
  None,
  'host:port,... of running TFF workers (`bazel run //experiments:workers`, '
  "or worker_binary --port=P on each host); each round's clients are split "
  'over them. Default: one local worker.',
)

OVERWRITE = flags.DEFINE_bool(
  'overwrite',
  False,
  'Start over: delete the run files in --output_dir (config, metrics, '
  'checkpoints, ...) instead of resuming the run there.',
)
MAX_EMPTY_ROUNDS = flags.DEFINE_integer(
  'max_empty_rounds',
  1,
  'Stop with an error after this many consecutive rounds to which no '
  'client contributed (all dropped as non-finite or of zero weight); '
  '0: never stop.',
)
CHANCE_ROUNDS = flags.DEFINE_integer(
  'chance_rounds',
  5,
  'Warn (log and summary.json) when test accuracy stays at chance for this '
  'many consecutive evaluated rounds; 0: never.',
)
KEEP_CHECKPOINTS = flags.DEFINE_integer(
  'keep_checkpoints',
  3,
  'Checkpoints kept in <output_dir>/checkpoints (the newest rounds); a '
  'damaged newest one falls back to the next.',
)

# Flags that do not change results; a run may resume with other values.
_NON_RUN_FLAGS = frozenset(
  [
    'rounds',
    'eval_every',
    'output_dir',
    'data_dir',
    'download',
    'cache_dir',
    'max_concurrent_computation_calls',
    'summary_rounds',
    'accuracy_metric',
    'workers',
    'overwrite',
    'max_empty_rounds',
    'chance_rounds',
    'keep_checkpoints',
    'max_client_state_mib',
  ]
)
# Flags of one kind of binary only.
_PARTITION_FLAGS = (
  'num_clients',
  'partition',
  'alpha',
  'shards_per_client',
  'normalization',
  'data_dir',
  'download',
  'proxy_distribution',
)
BASELINE_PROXY_SIZE = 1000
_BASELINE_TASK_FLAGS = (
  'cache_dir',
  'use_synthetic_data',
  'eval_examples',
  'max_client_examples',
  'sequence_length',
  'vocab_size',
  'crop_size',
  'distort_train_images',
)


def _require(
  names: tuple[str, ...], check: Callable[[object], bool], requirement: str
) -> None:
  """Validates each flag in `names` at parsing time (None: not given)."""
  for name in names:
    flags.register_validator(
      name,
      lambda v, check=check: v is None or check(v),
      message=f'--{name} must be {requirement}.',
    )


def _finite_positive(value) -> bool:
  return bool(np.isfinite(value)) and value > 0


_require(
  (
    'rounds',
    'num_clients',
    'clients_per_round',
    'local_epochs',
    'batch_size',
    'eval_every',
    'summary_rounds',
    'shards_per_client',
    'keep_checkpoints',
    'sequence_length',
    'vocab_size',
    'crop_size',
    'eval_examples',
    'max_client_examples',
    'max_client_state_mib',
  ),
  lambda v: v >= 1,
  'at least 1',
)
_require(
  ('proxy_size', 'max_empty_rounds', 'chance_rounds'),
  lambda v: v >= 0,
  'at least 0',
)
_require(
  ('weight_decay', 'proximal_strength'),
  lambda v: bool(np.isfinite(v)) and v >= 0,
  'finite and at least 0',
)
_require(
  ('client_lr', 'server_lr', 'alpha', 'server_epsilon'),
  _finite_positive,
  'finite and positive',
)
_require(
  ('client_momentum', 'server_momentum', 'server_beta1', 'server_beta2'),
  lambda v: 0 <= v < 1,
  'in [0, 1)',
)
_require(
  ('client_lr_decay', 'client_train_fraction'),
  lambda v: 0 < v <= 1,
  'in (0, 1]',
)
_require(
  ('max_concurrent_computation_calls',),
  lambda v: v == -1 or v >= 1,
  '-1 (no limit) or at least 1',
)
_require(
  (
    'fedcda_k',
    'fedcda_batches',
    'fedcda_max_state_mb',
    'fedlaw_server_epochs',
    'fedlaw_proxy_batch_size',
    'fedsa_classes',
    'fedsa_clusters',
  ),
  lambda v: v >= 1,
  'at least 1',
)
_require(('fedcda_warmup',), lambda v: v >= 0, 'at least 0')
_require(('fedlaw_server_lr',), _finite_positive, 'finite and positive')
flags.register_validator(
  'aggregator',
  lambda v: v in registry.names(),
  message=f'--aggregator must be one of {", ".join(registry.names())}.',
)


class _ProjectInfoOnly(logging_lib.Filter):
  """Passes warnings and errors, and INFO records of this project only."""

  _ROOTS = tuple(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep + d
    for d in ('experiments', 'tff_aggregators')
  )

  def filter(self, record: logging_lib.LogRecord) -> bool:
    return record.levelno >= logging_lib.WARNING or os.path.abspath(
      record.pathname
    ).startswith(self._ROOTS)


def quiet_other_info_logs() -> None:
  """Keeps the console to one progress line per round (see `--verbosity`).

  TensorFlow, TFF and tfds log every checkpoint write and dataset load at
  INFO; at the default verbosity only this project's INFO lines are shown.
  """
  if logging.get_verbosity() <= logging.INFO:
    logging.get_absl_handler().addFilter(_ProjectInfoOnly())
    tf.get_logger().setLevel(logging_lib.WARNING)


def set_defaults(**defaults) -> None:
  """Sets a binary's flag defaults (before `app.run`)."""
  for name, value in defaults.items():
    flags.FLAGS.set_default(name, value)


def _run_flags(aggregator: str) -> dict[str, object]:
  """The flags that change the results of a run of `aggregator`, by name.

  Leaves out the flags that do not (`_NON_RUN_FLAGS`) and the options of the
  other registered methods (`--<method>_...`).
  """
  others = tuple(f'{m}_' for m in registry.names() if m != aggregator)
  values = {}
  for module, module_flags in flags.FLAGS.flags_by_module_dict().items():
    if module.startswith('experiments.'):
      for flag in module_flags:
        if flag.name not in _NON_RUN_FLAGS and not flag.name.startswith(others):
          values[flag.name] = flag.value
  values['aggregator'] = aggregator
  return collections.OrderedDict(sorted(values.items()))


def _changed_settings(
  output_dir: str, run_flags: dict[str, object]
) -> dict[str, tuple]:
  """The run flags whose values differ from the run saved in `output_dir`."""
  path = os.path.join(output_dir, run_files.CONFIG_JSON)
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    previous = json.load(f)
  changed = {}
  for name, value in run_flags.items():
    # A flag newer than the saved run ran at its default there.
    saved = previous.get(name, _default(name))
    if saved != value:
      changed[name] = (saved, value)
  return changed


def _default(name: str) -> object:
  return flags.FLAGS[name].default if name in flags.FLAGS else None


def _check_resumable(output_dir: str, run_flags: dict[str, object]) -> bool:
  """Whether to start over in `output_dir`; refuses other settings.

  Reads only. A directory without a completed round (a run refused or
  stopped in its first round) may take new settings; one with completed
  rounds needs --overwrite or another --output_dir.
  """
  if OVERWRITE.value:
    return True
  changed = _changed_settings(output_dir, run_flags)
  if not changed:
    return False
  if not run_files.completed_rounds(output_dir):
    logging.info(
      '%s holds no completed round: starting over with the new settings.',
      output_dir,
    )
    return True
  raise SystemExit(
    f'error: {output_dir} holds a run with other settings '
    f'(flag: (saved, now)) {changed}. To start over, add --overwrite '
    '(deletes that run) or use another --output_dir.'
  )


def _write_run_files(
  output_dir: str,
  run_flags: dict[str, object],
  partition_info: Optional[dict[str, np.ndarray]],
  start_over: bool,
) -> None:
  """Creates the run directory and writes its config (and partition)."""
  if start_over:
    run_files.remove_run(output_dir)
  os.makedirs(output_dir, exist_ok=True)
  training.write_json(
    os.path.join(output_dir, run_files.CONFIG_JSON), run_flags
  )
  if partition_info is not None:
    training.write_json(
      os.path.join(output_dir, run_files.PARTITION_JSON), partition_info
    )


def _resolve_learning_rates(client_lr: float, server_lr: float) -> None:
  """Sets --client_lr and --server_lr to these defaults where not given."""
  if CLIENT_LR.value is None:
    flags.FLAGS.client_lr = client_lr
  if SERVER_LR.value is None:
    flags.FLAGS.server_lr = server_lr


def _check_cohort_size(population: int, source: str) -> None:
  if CLIENTS_PER_ROUND.value > population:
    raise SystemExit(
      f'error: --clients_per_round={CLIENTS_PER_ROUND.value} exceeds '
      f'{source} (clients are sampled without replacement): lower it.'
    )


def _refuse_flags(names: tuple[str, ...], binary: str) -> None:
  given = [f'--{n}' for n in names if flags.FLAGS[n].present]
  if given:
    raise SystemExit(f'error: {", ".join(given)} do not apply to {binary}.')


def _server_optimizer() -> tff.learning.optimizers.Optimizer:
  name, lr = SERVER_OPTIMIZER.value, SERVER_LR.value
  if name == 'sgd':
    return tff.learning.optimizers.build_sgdm(learning_rate=lr)
  if name == 'sgdm':
    return tff.learning.optimizers.build_sgdm(
      learning_rate=lr, momentum=SERVER_MOMENTUM.value
    )
  build = (
    tff.learning.optimizers.build_adam
    if name == 'adam'
    else tff.learning.optimizers.build_yogi
  )
  return build(
    learning_rate=lr,
    beta_1=SERVER_BETA1.value,
    beta_2=SERVER_BETA2.value,
    epsilon=SERVER_EPSILON.value,
  )


def _client_optimizer() -> tff.learning.optimizers.Optimizer:
  if CLIENT_OPTIMIZER.value == 'adam':
    return tff.learning.optimizers.build_adam(learning_rate=CLIENT_LR.value)
  return tff.learning.optimizers.build_sgdm(
    learning_rate=CLIENT_LR.value,
    momentum=CLIENT_MOMENTUM.value or None,
  )


def load_partitioned_task(
  dataset: str,
) -> tuple[
  tff.simulation.baselines.BaselineTask,
  dict[str, np.ndarray],
  Optional[tf.data.Dataset],
]:
  """Loads the data set, partitions it over clients and builds the task.

  With `--proxy_size` (default 10 per class) a server proxy set is taken out
  of the test split first (`partition.proxy_split`), for every aggregator, so
  all are evaluated on the same remaining examples.

  Args:
    dataset: A name in `data.DATASETS`.

  Returns:
    The task, the partition's description (client sizes, label counts, proxy
    indices into the test split) and the proxy set (unbatched model-input
    (x, y) examples, or None).
  """
  _refuse_flags(_BASELINE_TASK_FLAGS, dataset)
  _check_cohort_size(NUM_CLIENTS.value, f'--num_clients={NUM_CLIENTS.value}')
  _resolve_learning_rates(0.05, 1.0)
  if MODEL.value not in models.MODELS:
    raise SystemExit(
      f'error: --model={MODEL.value} is not one of '
      f'{", ".join(sorted(models.MODELS))}.'
    )
  try:
    image_data = data_lib.load(
      dataset, run_files.resolve_path(DATA_DIR.value), DOWNLOAD.value
    )
    client_indices = partition.partition(
      PARTITION.value,
      image_data.train_labels,
      NUM_CLIENTS.value,
      alpha=ALPHA.value,
      shards_per_client=SHARDS_PER_CLIENT.value,
      seed=SEED.value,
    )
    proxy_size = PROXY_SIZE.value
    if proxy_size is None:
      proxy_size = 10 * image_data.num_classes
    proxy_indices = rest = None
    if proxy_size:
      proxy_indices, rest = partition.proxy_split(
        image_data.test_labels,
        proxy_size,
        image_data.num_classes,
        distribution=PROXY_DISTRIBUTION.value,
        seed=SEED.value,
      )
  except (data_lib.DataNotFoundError, ValueError) as e:
    raise SystemExit(f'error: {e}') from e
  full_test = image_data
  if proxy_indices is not None:
    image_data = dataclasses.replace(
      image_data,
      test_images=image_data.test_images[rest],
      test_labels=image_data.test_labels[rest],
    )
  label_counts = partition.label_counts(
    image_data.train_labels, client_indices, image_data.num_classes
  )
  empty = int(np.sum(label_counts.sum(axis=1) == 0))
  if empty:
    logging.warning(
      '%d of %d clients have no data (they report weight 0 when sampled); '
      'a larger --alpha avoids this.',
      empty,
      NUM_CLIENTS.value,
    )
  task = tasks.create_image_task(
    image_data,
    client_indices,
    model=MODEL.value,
    batch_size=BATCH_SIZE.value,
    local_epochs=LOCAL_EPOCHS.value,
    normalization=NORMALIZATION.value,
    weight_decay=WEIGHT_DECAY.value,
  )
  info = collections.OrderedDict(
    client_sizes=label_counts.sum(axis=1), label_counts=label_counts
  )
  proxy_data = None
  if proxy_indices is not None:
    info['proxy_test_indices'] = proxy_indices
    proxy_data = task.datasets.eval_preprocess_fn(
      tf.data.Dataset.from_tensor_slices(
        collections.OrderedDict(
          image=full_test.test_images[proxy_indices],
          label=full_test.test_labels[proxy_indices],
        )
      )
    ).unbatch()
  return task, info, proxy_data


def default_output_dir(task_name: str, aggregator: str) -> str:
  return run_files.resolve_path(
    OUTPUT_DIR.value or f'runs/{task_name}/{aggregator}_seed{SEED.value}'
  )


def _chance_accuracy(
  partition_info: Optional[dict[str, np.ndarray]],
) -> Optional[float]:
  if partition_info is None:
    return None
  return 1.0 / np.shape(partition_info['label_counts'])[1]


def _use_workers() -> None:
  """Starts the local TFF worker, or connects to --workers."""
  try:
    if WORKERS.value:
      if MAX_CONCURRENT_COMPUTATION_CALLS.present:
        raise SystemExit(
          'error: with --workers, set '
          '--max_concurrent_computation_calls where the '
          'workers are started.'
        )
      runtime.use_workers(WORKERS.value)
    else:
      _start_local_worker()
  except (TimeoutError, RuntimeError) as e:
    raise SystemExit(f'error: {e}') from e


def _start_local_worker() -> None:
  """The local worker, deaf to the terminal's Ctrl-C and to SIGTERM.

  A Ctrl-C reaches the whole process group; the worker must finish the
  current round so that the loop can save it and stop (see
  `training.train`). It inherits ignored SIGINT and SIGTERM, and is killed
  at exit (it holds no state).
  """
  signals = (signal.SIGINT, signal.SIGTERM)
  previous = {s: signal.signal(s, signal.SIG_IGN) for s in signals}
  try:
    worker = runtime.use_local_worker(MAX_CONCURRENT_COMPUTATION_CALLS.value)
  finally:
    for signum, handler in previous.items():
      signal.signal(signum, handler)
  atexit.register(_kill, worker.pid)


def _kill(pid: int) -> None:
  try:
    os.kill(pid, signal.SIGKILL)
  except ProcessLookupError:
    pass


def _build_process(
  task: tff.simulation.baselines.BaselineTask,
  aggregator: str,
  output_dir: str,
  proxy_data: Optional[tf.data.Dataset],
) -> tff.learning.templates.LearningProcess:
  """The aggregator's process; a setting that cannot work exits with why."""
  try:
    return registry.build_process(
      aggregator,
      registry.ProcessInputs(
        model_fn=task.model_fn,
        client_optimizer_fn=_client_optimizer(),
        server_optimizer_fn=_server_optimizer(),
        server_optimizer=SERVER_OPTIMIZER.value,
        proximal_strength=PROXIMAL_STRENGTH.value,
        clients_per_round=CLIENTS_PER_ROUND.value,
        proxy_data=proxy_data,
        seed=SEED.value,
        num_clients=len(task.datasets.train_data.client_ids),
        output_dir=output_dir,
        local_epochs=LOCAL_EPOCHS.value,
        client_optimizer_state=CLIENT_OPTIMIZER_STATE.value,
        max_client_state_bytes=MAX_CLIENT_STATE_MIB.value * 2**20,
        client_state_store=CLIENT_STATE_STORE.value,
      ),
    )
  except ValueError as e:  # A method's settings that cannot work.
    raise SystemExit(f'error: --aggregator={aggregator}: {e}') from e


def _check_client_state(task: tff.simulation.baselines.BaselineTask) -> None:
  """With persistent client state: logs its size, refuses it above the limit.

  In the TFF state (`--client_state_store=state`) the table of every client
  (clients x optimiser slots x parameters x 4 bytes) is broadcast to each
  client of a round; in a driver-side store (memory, disk) each client has
  two slots there and a round carries the cohort's rows only. Runs before
  anything is written; nothing with reset state.
  """
  if CLIENT_OPTIMIZER_STATE.value != 'persistent':
    return
  population = len(task.datasets.train_data.client_ids)
  cohort = CLIENTS_PER_ROUND.value
  store = CLIENT_STATE_STORE.value
  size = stateful.state_size(task.model_fn, _client_optimizer(), population)
  table = size
  if store != 'state':
    table = stateful.state_size(task.model_fn, _client_optimizer(), cohort)
  if table.total_bytes > MAX_CLIENT_STATE_MIB.value * 2**20:
    fix = (
      '--client_state_store=memory or disk (only the cohort enters a '
      'round), a smaller population (--num_clients)'
      if store == 'state'
      else 'a smaller --clients_per_round'
    )
    raise SystemExit(
      'error: --client_optimizer_state=persistent needs '
      f'{table.describe()} of client optimiser state in the TFF state, '
      f'above --max_client_state_mib={MAX_CLIENT_STATE_MIB.value}: use '
      f'{fix}, a stateless client optimiser (--client_optimizer=sgd '
      '--client_momentum=0) or --client_optimizer_state=reset, or raise '
      '--max_client_state_mib.'
    )
  broadcast = cohort * table.total_bytes / 2**20
  if store == 'state':
    where = 'in the server state, broadcast to each of the'
  else:
    where = (
      f'in a driver-side store ({store}: two slots per client, at most '
      f'{2 * size.total_bytes / 2**20:,.1f} MiB'
      + (', only clients seen take space' if store == 'disk' else '')
      + "); the cohort's rows go to each of the"
    )
  line = (
    f'Persistent client optimiser state: {size.describe()} {where} '
    f'{cohort} clients of a round ({broadcast:,.1f} MiB per round).'
  )
  logging.info('%s', line)
  print(line, flush=True)


def run(
  task: tff.simulation.baselines.BaselineTask,
  *,
  aggregator: str,
  output_dir: str,
  partition_info: Optional[dict[str, np.ndarray]] = None,
  eval_data: Optional[tf.data.Dataset] = None,
  proxy_data: Optional[tf.data.Dataset] = None,
) -> collections.OrderedDict[str, object]:
  """Trains `aggregator` on `task` with the flags' settings into `output_dir`.

  Resumes when `output_dir` holds a run with the same settings.

  Args:
    task: The task.
    aggregator: A registered aggregator name.
    output_dir: The run directory.
    partition_info: Written to `partition.json` when given.
    eval_data: Evaluation data (default: the task's test data).
    proxy_data: The server proxy set, for methods that use one (FedLAW).

  Returns:
    The run's summary (see `training.train`).
  """
  if aggregator not in registry.names():
    raise SystemExit(
      f'error: unknown aggregator {aggregator!r}; choose one of '
      f'{", ".join(registry.names())}.'
    )
  run_flags = _run_flags(aggregator)
  start_over = _check_resumable(output_dir, run_flags)
  _check_client_state(task)
  _use_workers()
  process = _build_process(task, aggregator, output_dir, proxy_data)
  if CLIENT_LR_DECAY.value != 1.0:
    try:  # Before anything is written.
      training.check_client_lr_schedule(process, CLIENT_LR.value)
    except ValueError as e:
      raise SystemExit(f'error: --aggregator={aggregator}: {e}') from e
  _write_run_files(output_dir, run_flags, partition_info, start_over)
  logging.info('%s: writing to %s', aggregator, output_dir)
  config = training.TrainingConfig(
    rounds=ROUNDS.value,
    clients_per_round=CLIENTS_PER_ROUND.value,
    seed=SEED.value,
    output_dir=output_dir,
    eval_every=EVAL_EVERY.value,
    client_lr=CLIENT_LR.value,
    client_lr_decay=CLIENT_LR_DECAY.value,
    accuracy_metric=ACCURACY_METRIC.value,
    summary_rounds=SUMMARY_ROUNDS.value,
    max_empty_rounds=MAX_EMPTY_ROUNDS.value or None,
    chance_rounds=CHANCE_ROUNDS.value or None,
    keep_checkpoints=KEEP_CHECKPOINTS.value,
    chance_accuracy=_chance_accuracy(partition_info),
    client_train_fraction=CLIENT_TRAIN_FRACTION.value,
  )
  try:
    return training.train(
      process, task, config, eval_data=eval_data, label=aggregator
    )
  except training.StopRequested as e:  # Logged when the signal came.
    raise SystemExit(128 + e.args[0]) from e
  except (
    runtime.WorkerUnavailableError,
    training.TrainingDivergedError,
    training.CheckpointDamagedError,
  ) as e:
    raise SystemExit(f'error: {e}') from e
  except ValueError as e:
    if 'aggregate dependent on another' not in str(e):
      raise
    raise SystemExit(
      f'error: --aggregator={aggregator} aggregates twice in a round (the '
      "second phase depends on the first), which TFF 0.87's multi-worker "
      'runtime cannot split over workers. Run it on one worker, or use its '
      'one-pass option (FedLWS: --fedlws_tau_mode=rms).'
    ) from e


def without_traceback(main: Callable[[list[str]], None]):
  """`main`, with a Ctrl-C outside the training loop ending in one line."""

  def wrapped(argv: list[str]) -> None:
    try:
      main(argv)
    except KeyboardInterrupt:
      logging.warning('Interrupted; the saved rounds, if any, are intact.')
      raise SystemExit(128 + signal.SIGINT) from None

  return wrapped


def image_classification_main(dataset: str) -> Callable[[list[str]], None]:
  """Returns the `main` of a binary training on a partitioned image data set.

  Args:
    dataset: A name in `data.DATASETS`; also names the default output
      directory.
  """

  def main(argv: list[str]) -> None:
    if len(argv) > 1:
      raise SystemExit(f'error: unexpected arguments {argv[1:]}')
    quiet_other_info_logs()
    task, partition_info, proxy_data = load_partitioned_task(dataset)
    summary = run(
      task,
      aggregator=AGGREGATOR.value,
      output_dir=default_output_dir(dataset, AGGREGATOR.value),
      partition_info=partition_info,
      proxy_data=proxy_data,
    )
    logging.info('summary: %s', dict(summary))

  return without_traceback(main)


def baseline_task_main(name: str) -> Callable[[list[str]], None]:
  """Returns the `main` of a binary on one of TFF's federated data sets.

  Args:
    name: One of `baseline_tasks.TASKS`; also names the output directory.
  """

  def main(argv: list[str]) -> None:
    if len(argv) > 1:
      raise SystemExit(f'error: unexpected arguments {argv[1:]}')
    quiet_other_info_logs()
    _refuse_flags(_PARTITION_FLAGS, name)
    _resolve_learning_rates(
      *baseline_tasks.SETTINGS[name].learning_rates[SERVER_OPTIMIZER.value]
    )
    try:
      task = baseline_tasks.create_task(
        name,
        cache_dir=run_files.resolve_path(CACHE_DIR.value),
        use_synthetic_data=USE_SYNTHETIC_DATA.value,
        model=MODEL.value,
        batch_size=BATCH_SIZE.value,
        local_epochs=LOCAL_EPOCHS.value,
        max_client_examples=MAX_CLIENT_EXAMPLES.value,
        sequence_length=SEQUENCE_LENGTH.value,
        vocab_size=VOCAB_SIZE.value,
        crop_size=CROP_SIZE.value,
        distort_train_images=DISTORT_TRAIN_IMAGES.value,
      )
    except (data_lib.DataNotFoundError, ValueError) as e:
      raise SystemExit(f'error: {e}') from e
    population = len(task.datasets.train_data.client_ids)
    if USE_SYNTHETIC_DATA.value and CLIENTS_PER_ROUND.value > population:
      logging.warning(
        'Synthetic %s has %d clients: sampling %d per round.',
        name,
        population,
        population,
      )
      flags.FLAGS.clients_per_round = population
    _check_cohort_size(population, f'the {population} clients of {name}')
    proxy_size = PROXY_SIZE.value
    if proxy_size is None:
      proxy_size = BASELINE_PROXY_SIZE
    eval_data, proxy_data = baseline_tasks.evaluation_data(
      task,
      num_examples=EVAL_EXAMPLES.value,
      seed=SEED.value,
      proxy_size=proxy_size,
    )
    summary = run(
      task,
      aggregator=AGGREGATOR.value,
      output_dir=default_output_dir(name, AGGREGATOR.value),
      eval_data=eval_data,
      proxy_data=proxy_data,
    )
    logging.info('summary: %s', dict(summary))

  return without_traceback(main)
