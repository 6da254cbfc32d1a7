"""The federated training loop shared by every experiment binary.

Built on TFF's program library: `tff.program.FileProgramStateManager` saves the
learning process state after every round (atomically: a temporary directory
renamed into place), and `tff.program.CSVFileReleaseManager` and
`tff.program.TensorBoardReleaseManager` release the metrics. A run killed at
any point resumes from its last saved round when restarted with the same
output directory, and gives the same results as an uninterrupted run: cohorts
and client shuffling are functions of (seed, round, client), and the learning
rate schedule is re-applied from the round number. A process with an
`adopt_state` method (FedCDA with its history in the driver) passes every
loaded state through it, so it can start from a related run's checkpoint.

Failures are loud and leave the saved rounds intact: a non-finite model or
metric stops the run (`TrainingDivergedError`), as do `max_empty_rounds`
rounds in a row to which no client contributed (`NoClientContributedError`);
each round's dropped clients are released under one name for every method
(`clients/num_dropped_clients`, see `dropped_clients`); a damaged newest
checkpoint falls back to the previous one (`CheckpointManager`); SIGINT or
SIGTERM stops the loop once the current round is saved (`StopRequested`); and
`summary.json` lists `warnings` (accuracy stuck at chance, exploding loss).

`tff.learning.programs.train_model` is not used: it releases only the client
work's training metrics (dropping the aggregator and finalizer measurements
every method here reports) and evaluates with a federated process, where these
experiments evaluate centrally on a test split.
"""

import asyncio
import collections
from collections.abc import Callable
import dataclasses
import os
import shutil
import signal
import threading
import time
from typing import Any, Optional
import zlib

from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from experiments import plotting
from experiments import run_files
from tff_aggregators.client_works import identified

METRICS_CSV = run_files.METRICS_CSV
SUMMARY_JSON = run_files.SUMMARY_JSON
write_json = run_files.write_json
read_metrics = run_files.read_metrics
accuracy_curve = run_files.accuracy_curve
ACCURACY_PNG = 'accuracy.png'
CHECKPOINT_DIR = run_files.CHECKPOINT_DIR
TENSORBOARD_DIR = run_files.TENSORBOARD_DIR
_MAX_SHUFFLE_BUFFER = 100_000
# The measurement every method's dropped clients are released under (in the
# `clients` group of metrics.csv and TensorBoard: `clients/<name>`).
NUM_DROPPED_CLIENTS = 'num_dropped_clients'
NUM_NON_FINITE_CLIENTS = 'num_non_finite_clients'
NUM_ZERO_WEIGHT_CLIENTS = 'num_zero_weight_clients'


class TrainingDivergedError(RuntimeError):
  """The model or the training loss became non-finite."""


class NoClientContributedError(TrainingDivergedError):
  """Too many consecutive rounds in which every client was dropped."""


class CheckpointDamagedError(RuntimeError):
  """No saved round of a run directory can be read."""


class StopRequested(Exception):
  """SIGINT or SIGTERM arrived; the loop stopped after a saved round."""


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
  """Settings of the loop (the process and task are built by the caller).

  Attributes:
    rounds: Total number of rounds (a resumed run continues up to it).
    clients_per_round: Cohort size, sampled without replacement each round.
    seed: Seeds cohorts, client shuffling and the initial model.
    output_dir: Where metrics, summary, plot and checkpoints go.
    eval_every: Evaluate every this many rounds, and in each of the last
      `summary_rounds` rounds (the papers' metric needs them).
    client_lr: Base client learning rate, scheduled as
      `client_lr * client_lr_decay ** (round - 1)` through the process's
      `client_work` `learning_rate` hyperparameter when the decay is not 1.
    client_lr_decay: Per-round multiplicative decay of the client learning
      rate; 1 leaves the process's own learning rate untouched.
    accuracy_metric: Name of the evaluation metric reported as accuracy.
    summary_rounds: The summary's accuracy is the mean over this many last
      rounds (10 in the papers).
    max_empty_rounds: Stop with `NoClientContributedError` after this many
      consecutive rounds to which no client contributed (every client dropped
      as non-finite or of zero weight); None: never stop.
    chance_rounds: Warn (log and `summary.json` `warnings`) when the test
      accuracy stays at or below 1.25 x `chance_accuracy` for this many
      consecutive evaluated rounds; None: never.
    chance_accuracy: The accuracy of guessing (1 / classes), if known.
    keep_checkpoints: The newest checkpoints kept; a damaged newest one falls
      back to the next.
    client_train_fraction: Each client trains on this first fraction of its
      examples, in an order shuffled once per (seed, client)
      (`ClientSampler`); 1 leaves the client data untouched.
  """

  rounds: int
  clients_per_round: int
  seed: int
  output_dir: str
  eval_every: int = 1
  client_lr: Optional[float] = None
  client_lr_decay: float = 1.0
  accuracy_metric: str = 'sparse_categorical_accuracy'
  summary_rounds: int = 10
  max_empty_rounds: Optional[int] = None
  chance_rounds: Optional[int] = None
  chance_accuracy: Optional[float] = None
  keep_checkpoints: int = 3
  client_train_fraction: float = 1.0

  @property
  def schedules_client_lr(self) -> bool:
    return self.client_lr is not None and self.client_lr_decay != 1.0

  def __post_init__(self):
    if self.rounds < 1:
      raise ValueError(f'rounds must be >= 1, got {self.rounds}.')
    if self.clients_per_round < 1:
      raise ValueError(
        f'clients_per_round must be >= 1, got {self.clients_per_round}.'
      )
    if self.eval_every < 1:
      raise ValueError(f'eval_every must be >= 1, got {self.eval_every}.')
    for name in ('max_empty_rounds', 'chance_rounds', 'keep_checkpoints'):
      value = getattr(self, name)
      if value is not None and value < 1:
        raise ValueError(f'{name} must be >= 1 (or None), got {value}.')
    if not 0 < self.client_lr_decay <= 1:
      raise ValueError(
        f'client_lr_decay must be in (0, 1], got {self.client_lr_decay}.'
      )
    if not 0 < self.client_train_fraction <= 1:
      raise ValueError(
        'client_train_fraction must be in (0, 1], got '
        f'{self.client_train_fraction}.'
      )


def _derived_seed(*parts: int) -> int:
  return int(np.random.SeedSequence(parts).generate_state(1)[0])


def cohort_indices(
  seed: int, round_num: int, population: int, size: int
) -> np.ndarray:
  """The clients (indices) of round `round_num`, in the order they are run.

  A function of (seed, round) only, so a resumed or repeated run samples the
  same cohorts, and a logged per-client measurement (FedLAW's lambda, in
  cohort order) can be put back on its client.
  """
  rng = np.random.default_rng([seed, round_num])
  return rng.choice(population, size, replace=False)


def num_train_examples(size: int, fraction: float) -> int:
  """The examples of a client of `size` kept by `--client_train_fraction`.

  floor(fraction x size), at least 1 for a client with any data.
  """
  if fraction >= 1 or size <= 0:
    return size
  return max(1, int(np.floor(fraction * size + 1e-9)))


class ClientSampler:
  """Seeded cohorts and client datasets, identical for every aggregator.

  Only the sampled clients' datasets are built, through the client data's
  `serializable_dataset_fn`: TFF's `create_tf_dataset_for_client` first checks
  the id against the list of all ids, which costs O(population) per client
  (0.17 s per cohort of 50 among Stack Overflow's 342,477 clients), and ids
  drawn from `client_ids` need no check. So a round's cost does not depend on
  the population size.

  With `train_fraction < 1` a client trains on the first
  `num_train_examples(size, train_fraction)` of its examples in an order
  shuffled once by (seed, client), the same every round (the rest is held
  out, as the FedLWS authors' code keeps 30% for local validation); with 1
  its data is untouched.
  """

  def __init__(
    self,
    datasets: tff.simulation.baselines.BaselineTaskDatasets,
    clients_per_round: int,
    seed: int,
    train_fraction: float = 1.0,
  ):
    self._dataset_fn = datasets.train_data.serializable_dataset_fn
    self._preprocess_fn = datasets.train_preprocess_fn or (lambda d: d)
    self._client_ids = list(datasets.train_data.client_ids)
    if clients_per_round > len(self._client_ids):
      raise ValueError(
        f'clients_per_round={clients_per_round} exceeds the '
        f'{len(self._client_ids)} clients of the task.'
      )
    if not 0 < train_fraction <= 1:
      raise ValueError(
        f'train_fraction must be in (0, 1], got {train_fraction}.'
      )
    self._clients_per_round = clients_per_round
    self._seed = seed
    self._train_fraction = train_fraction
    self._counts = {}  # Client id -> examples, of datasets of unknown size.
    self._index = {c: i for i, c in enumerate(self._client_ids)}
    self._sizes = {}  # Client id -> examples (-1: unknown), once built.

  def client_ids(self, round_num: int) -> list[str]:
    """The cohort of `round_num`, a function of (seed, round) only."""
    chosen = cohort_indices(
      self._seed, round_num, len(self._client_ids), self._clients_per_round
    )
    return [self._client_ids[i] for i in chosen]

  def client_dataset(self, round_num: int, client_id: str) -> tf.data.Dataset:
    """The client's raw data, shuffled by (seed, round, client), preprocessed.

    Every local epoch sees a new order (`reshuffle_each_iteration`).
    """
    dataset = self._dataset_fn(client_id)
    size = int(dataset.cardinality())
    if self._train_fraction < 1:
      dataset, size = self._training_examples(client_id, dataset, size)
    self._sizes[client_id] = size if size >= 0 else -1
    buffer = size if size > 0 else _MAX_SHUFFLE_BUFFER
    seed = _derived_seed(self._seed, round_num, zlib.crc32(client_id.encode()))
    dataset = dataset.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)
    return self._preprocess_fn(dataset)

  def _training_examples(
    self, client_id: str, dataset: tf.data.Dataset, size: int
  ) -> tuple[tf.data.Dataset, int]:
    """The client's first `train_fraction` of examples, shuffled once."""
    if size < 0:  # Unknown (TFF's SQLite data sets): counted once.
      if client_id not in self._counts:
        self._counts[client_id] = int(
          dataset.reduce(np.int64(0), lambda n, _: n + 1)
        )
      size = self._counts[client_id]
    kept = num_train_examples(size, self._train_fraction)
    seed = _derived_seed(self._seed, zlib.crc32(client_id.encode()))
    dataset = dataset.shuffle(
      max(size, 1), seed=seed, reshuffle_each_iteration=False
    ).take(kept)
    return dataset, kept

  def num_empty_clients(self, round_num: int) -> int:
    """Clients of the built cohort of `round_num` known to hold no data."""
    return sum(self._sizes.get(c) == 0 for c in self.client_ids(round_num))

  def cohort(self, round_num: int) -> list[tf.data.Dataset]:
    return [
      self.client_dataset(round_num, c) for c in self.client_ids(round_num)
    ]

  def identified_cohort(self, round_num: int) -> list[Any]:
    """The cohort with each client's index in the task's client ids."""
    ids = self.client_ids(round_num)
    return identified.with_client_ids(
      [self.client_dataset(round_num, c) for c in ids],
      [self._index[c] for c in ids],
    )


class CentralEvaluator:
  """Evaluates model weights on a centralised dataset with the task's model.

  Uses the `tff.learning.models.VariableModel` of `model_fn` (its metrics and
  finalizers), so any task's metrics work unchanged.
  """

  def __init__(
    self,
    model_fn: Callable[[], tff.learning.models.VariableModel],
    dataset: tf.data.Dataset,
  ):
    self._model = model_fn()
    self._dataset = dataset

  @tf.function
  def _unfinalized_metrics(self):
    self._model.reset_metrics()
    for batch in self._dataset:
      self._model.forward_pass(batch, training=False)
    return self._model.report_local_unfinalized_metrics()

  def __call__(
    self, weights: tff.learning.models.ModelWeights
  ) -> collections.OrderedDict[str, np.ndarray]:
    weights.assign_weights_to(self._model)
    unfinalized = self._unfinalized_metrics()
    finalizers = self._model.metric_finalizers()
    # Keras finalizers are `tf.function`s that create a metric's variables,
    # made to be traced inside a TFF computation; run their Python eagerly.
    return collections.OrderedDict(
      (name, np.asarray(_eager(finalizers[name])(value)))
      for name, value in unfinalized.items()
    )


def _eager(fn):
  return getattr(fn, 'python_function', fn)


def initial_model_weights(
  model_fn: Callable[[], tff.learning.models.VariableModel], seed: int
) -> tff.learning.models.ModelWeights:
  """The model of `model_fn` initialised from `seed` (as NumPy arrays)."""
  tf.keras.utils.set_random_seed(seed)
  model = model_fn()
  return tf.nest.map_structure(
    lambda v: v.numpy(), tff.learning.models.ModelWeights.from_model(model)
  )


def _all_finite(structure) -> bool:
  """Whether every float in `structure` (None leaves ignored) is finite."""
  return all(
    np.all(np.isfinite(x))
    for x in tf.nest.flatten(structure)
    if x is not None and np.issubdtype(np.asarray(x).dtype, np.floating)
  )


class CheckpointManager(tff.program.FileProgramStateManager):
  """TFF's file state manager keeping the newest rounds, past damaged ones.

  Saving is TFF's: a SavedModel written into `<checkpoint>_temp<k>` and
  renamed into place, the oldest checkpoint removed only afterwards, so a
  kill during a write leaves every earlier checkpoint intact (the partial
  temporary directory is removed at the next load). Loading tries the newest
  checkpoint first; a damaged one is logged (which file), renamed to
  `<checkpoint>.damaged` and the next newest is tried.
  """

  def __init__(self, root_dir: str, keep: int):
    super().__init__(
      root_dir,
      prefix=run_files.CHECKPOINT_PREFIX,
      keep_total=keep,
      keep_first=False,
    )
    self._root = root_dir

  async def load_latest(self, structure):
    self._remove_partial_writes()
    versions = await self.get_versions() or []
    for version in reversed(versions):
      try:
        return await self.load(version, structure), version
      except Exception as e:  # pylint: disable=broad-except
        self._set_aside(version, e)  # Any read error: damaged.
    if not versions:
      return None, 0
    raise CheckpointDamagedError(
      f'Every checkpoint in {self._root} is damaged; start over with '
      '--overwrite (or another --output_dir).'
    )

  def _remove_partial_writes(self) -> None:
    for name in os.listdir(self._root):
      if name.startswith(run_files.CHECKPOINT_PREFIX) and '_temp' in name:
        shutil.rmtree(os.path.join(self._root, name), ignore_errors=True)

  def _set_aside(self, version: int, error: Exception) -> None:
    path = os.path.join(self._root, f'{run_files.CHECKPOINT_PREFIX}{version}')
    logging.warning(
      'Checkpoint of round %d is damaged: %s (%s: %s). Falling back to the '
      'previous checkpoint; the damaged one is kept as %s.damaged.',
      version,
      _damaged_file(path),
      type(error).__name__,
      error,
      path,
    )
    if os.path.exists(path + '.damaged'):
      shutil.rmtree(path + '.damaged')
    os.rename(path, path + '.damaged')


def _damaged_file(path: str) -> str:
  """The first file of a SavedModel checkpoint at `path` that cannot be read."""
  graph = os.path.join(path, 'saved_model.pb')
  if not os.path.isfile(graph):
    return graph
  prefix = os.path.join(path, 'variables', 'variables')
  try:
    reader = tf.train.load_checkpoint(prefix)
  except Exception:  # pylint: disable=broad-except
    return prefix + '.index'
  try:
    for name in reader.get_variable_to_shape_map():
      reader.get_tensor(name)
  except Exception:  # pylint: disable=broad-except
    return ', '.join(tf.io.gfile.glob(prefix + '.data-*'))
  return path


def _find(structure: Any, name: str) -> Any:
  """The first value under key `name` in nested dicts (breadth first)."""
  level = [structure]
  while level:
    for d in level:
      if name in d:
        return d[name]
    level = [v for d in level for v in d.values() if isinstance(v, dict)]
  return None


def _num_dropped(metrics: dict[str, Any], cohort_size: int) -> Optional[int]:
  """Clients that contributed nothing, from a process's own measurements.

  No client counted in the client work's `num_examples` means none
  contributed (any method on TFF's client work: FedGLAD's measurements
  report nothing else). Otherwise, the name each method reports it under:
  `num_dropped_clients` (this project's FedLAW and FedSA finalizers),
  `num_non_finite_clients` + `num_zero_weight_clients` (the collect-all
  aggregator: FedLAW, FedSA, FedCDA), the contributing
  `num_clients` (FedLWS's statistics, per layer group), or, for TFF's own
  FedAvg finalizer, `update_non_finite` (1: no client contributed; a partial
  drop is not visible). None if the process reports none of these.
  """
  examples = metrics.get('client_work', {}).get('train', {}).get('num_examples')
  if examples is not None and not examples:  # TFF's client work resets a
    return cohort_size  # dropped client's metrics: none trained.
  native = _find(metrics, NUM_DROPPED_CLIENTS)
  if native is not None:
    return int(native)
  aggregator = metrics.get('aggregator', {})
  if NUM_ZERO_WEIGHT_CLIENTS in aggregator:
    return int(
      aggregator[NUM_ZERO_WEIGHT_CLIENTS]
      + aggregator.get(NUM_NON_FINITE_CLIENTS, 0)
    )
  contributing = aggregator.get('num_clients')
  if contributing is not None:
    return cohort_size - int(np.max(contributing))
  finalizer = metrics.get('finalizer', {})
  if 'update_non_finite' in finalizer:
    return cohort_size if finalizer['update_non_finite'] else 0
  return None


def dropped_clients(
  metrics: dict[str, Any], cohort_size: int, num_empty: int
) -> Optional[collections.OrderedDict[str, int]]:
  """One round's dropped clients under one name for every method.

  `num_dropped_clients` contributed nothing to the round's update; of them,
  `num_zero_weight_clients` hold no examples and `num_non_finite_clients`
  produced a non-finite update (TFF's client work turns such an update into
  a zero one of weight 0, so a zero weight with data means non-finite).

  Args:
    metrics: The round's process measurements.
    cohort_size: The round's sampled clients.
    num_empty: Sampled clients known to hold no examples.

  Returns:
    The three counts, or None if the process reports no way to tell.
  """
  dropped = _num_dropped(metrics, cohort_size)
  if dropped is None:
    return None
  dropped = min(max(dropped, num_empty), cohort_size)
  return collections.OrderedDict(
    [
      (NUM_DROPPED_CLIENTS, dropped),
      (NUM_NON_FINITE_CLIENTS, dropped - num_empty),
      (NUM_ZERO_WEIGHT_CLIENTS, num_empty),
    ]
  )


def _summarise(config: TrainingConfig) -> dict[str, Any]:
  rows = read_metrics(config.output_dir)
  rounds, accuracies = accuracy_curve(rows, config.accuracy_metric)
  last = [
    a
    for r, a in zip(rounds, accuracies)
    if r > config.rounds - config.summary_rounds
  ]
  seconds = [float(r['round_seconds']) for r in rows]
  warnings = _chance_warnings(config, rounds, accuracies) + _loss_warnings(rows)
  return collections.OrderedDict(
    rounds=len(rows),
    final_accuracy=accuracies[-1] if accuracies else None,
    last_rounds_mean_accuracy=float(np.mean(last)) if last else None,
    last_rounds=config.summary_rounds,
    best_accuracy=max(accuracies) if accuracies else None,
    median_round_seconds=float(np.median(seconds)) if seconds else None,
    total_train_seconds=float(np.sum(seconds)),
    dropped_clients=int(sum(float(r.get(_DROPPED_COLUMN) or 0) for r in rows)),
    rejected_steps=int(sum(float(r.get(_REJECTED_COLUMN) or 0) for r in rows)),
    warnings=warnings,
  )


_DROPPED_COLUMN = f'clients/{NUM_DROPPED_CLIENTS}'
_REJECTED_COLUMN = 'train/finalizer/update_non_finite'
_LOSS_COLUMN = 'train/client_work/train/loss'
# A cross-entropy above this means the clients diverge (ln 10000 is 9.2).
_DIVERGING_LOSS = 1e3
# Accuracy up to this many times 1 / classes is "at chance".
_CHANCE_FACTOR = 1.25


def _chance_warnings(
  config: TrainingConfig, rounds: list[int], accuracies: list[float]
) -> list[str]:
  """A warning if accuracy stayed at chance for `chance_rounds` in a row."""
  if not config.chance_rounds or not config.chance_accuracy:
    return []
  limit = _CHANCE_FACTOR * config.chance_accuracy
  streak = longest = 0
  for accuracy in accuracies:
    streak = streak + 1 if accuracy <= limit else 0
    longest = max(longest, streak)
  if longest < config.chance_rounds:
    return []
  return [
    f'test accuracy stayed at chance (<= {limit:.4f}) for {longest} '
    f'evaluated rounds in a row (of {len(rounds)}): the model is not '
    'learning; lower --client_lr or --server_lr.'
  ]


def _loss_warnings(rows: list[dict[str, str]]) -> list[str]:
  """A warning if a round's training loss was non-finite or exploding."""
  bad = [
    int(r['key'])
    for r in rows
    if r.get(_LOSS_COLUMN) and not float(r[_LOSS_COLUMN]) <= _DIVERGING_LOSS
  ]
  if not bad:
    return []
  return [
    f'training loss non-finite or above {_DIVERGING_LOSS:g} in rounds '
    f'{bad[:10]}{"..." if len(bad) > 10 else ""}: clients diverge; '
    'lower --client_lr.'
  ]


def _should_evaluate(config: TrainingConfig, round_num: int) -> bool:
  return (
    round_num % config.eval_every == 0
    or round_num > config.rounds - config.summary_rounds
  )


def _set_client_learning_rate(process, state, learning_rate: float):
  hparams = process.get_hparams(state)
  client_hparams = hparams.get('client_work', {})
  if 'learning_rate' not in client_hparams:
    raise ValueError(
      'A client learning-rate decay needs a process whose client work has '
      'a `learning_rate` hyperparameter, and this one has '
      f"{dict(client_hparams)} (TFF 0.87's own FedProx, "
      '`tff.learning.algorithms.build_weighted_fed_prox`, has none; '
      '`tff_aggregators.build_weighted_fed_prox` has). Use that, or '
      '--client_lr_decay=1.'
    )
  client_hparams['learning_rate'] = np.float32(learning_rate)
  return process.set_hparams(state, hparams)


class _StopOnSignal:
  """Turns SIGINT and SIGTERM into a stop once the current round is saved.

  The first signal logs one line and sets `signum`; the loop stops after its
  next checkpoint. A second signal stops at once (`StopRequested`); the saved
  rounds are intact either way (checkpoint writes are atomic). Outside the
  main thread signals cannot be caught and nothing is installed.
  """

  _SIGNALS = (signal.SIGINT, signal.SIGTERM)

  def __init__(self, describe: Callable[[], str]):
    self._describe = describe
    self._previous = {}
    self.signum = None

  def __enter__(self) -> '_StopOnSignal':
    if threading.current_thread() is threading.main_thread():
      self._previous = {
        s: signal.signal(s, self._handle) for s in self._SIGNALS
      }
    return self

  def __exit__(self, *unused) -> None:
    for signum, handler in self._previous.items():
      signal.signal(signum, handler)

  def _handle(self, signum, unused_frame) -> None:
    if self.signum is not None:
      raise StopRequested(signum)
    self.signum = signum
    logging.warning('%s: %s', signal.Signals(signum).name, self._describe())


async def _load_or_save_initial(process, state_manager, state):
  """(state, round) of the newest intact checkpoint, or saves round 0's."""
  saved, version = await state_manager.load_latest((state, 0))
  if saved is None:
    await state_manager.save((state, 0), version=0)
    return state, 0
  state, start_round = saved
  logging.info('Resuming from the checkpoint of round %d.', version)
  adopt_state = getattr(process, 'adopt_state', None)
  if adopt_state is not None:  # FedCDA: a warm-up state of another K.
    state = adopt_state(state)
  return state, int(start_round)


def _check_finite(
  config: TrainingConfig, round_num: int, weights, train_loss, test
) -> None:
  if not _all_finite((weights, train_loss, test)):
    raise TrainingDivergedError(
      f'Round {round_num} produced a non-finite model, training loss or '
      f'test metric (training loss {train_loss}, test '
      f'{ {k: float(v) for k, v in (test or {}).items()} }). The state '
      f'of round {round_num - 1} is kept in {config.output_dir}; lower '
      'the learning rates (--client_lr, --server_lr) or check the data, '
      'and start over (--overwrite, or the same command if no round was '
      'completed yet).'
    )


def _check_contributed(
  config: TrainingConfig,
  round_num: int,
  dropped: Optional[dict[str, int]],
  cohort_size: int,
  empty_streak: int,
) -> int:
  """The new count of consecutive empty rounds; raises at the limit."""
  if dropped is None or dropped[NUM_DROPPED_CLIENTS] < cohort_size:
    return 0
  empty_streak += 1
  if dropped[NUM_NON_FINITE_CLIENTS]:
    cause = (
      f'{dropped[NUM_NON_FINITE_CLIENTS]} of {cohort_size} updates '
      'were non-finite (client training diverged): lower --client_lr '
      f'(now {config.client_lr})'
    )
  else:
    cause = (
      f'the {cohort_size} sampled clients hold no examples: raise '
      '--alpha or lower --num_clients'
    )
  message = f'Round {round_num}: no client contributed; {cause}.'
  if config.max_empty_rounds and empty_streak >= config.max_empty_rounds:
    raise NoClientContributedError(
      f'{message} Stopped after {empty_streak} such round(s) in a row '
      '(--max_empty_rounds raises the limit); the state of round '
      f'{round_num - 1} is kept in {config.output_dir}.'
    )
  logging.warning('%s The model is unchanged.', message)
  return empty_streak


class _Watch:
  """Warns, once each, of an exploding loss or accuracy stuck at chance.

  In the round it happens (`summary.json` lists both again at the end);
  "stuck" is `config.chance_rounds` evaluated rounds in a row.
  """

  def __init__(self, config: TrainingConfig):
    self._config = config
    self._warned_loss = self._warned_chance = False
    self._chance_streak = 0

  def observe(self, round_num: int, train_loss, accuracy) -> None:
    if not self._warned_loss and _diverging(train_loss):
      self._warned_loss = True
      logging.warning(
        'Round %d: training loss %s (above %g): clients '
        'diverge; lower --client_lr.',
        round_num,
        train_loss,
        _DIVERGING_LOSS,
      )
    config = self._config
    if (
      accuracy is None
      or not config.chance_rounds
      or (not config.chance_accuracy)
    ):
      return
    at_chance = accuracy <= _CHANCE_FACTOR * config.chance_accuracy
    self._chance_streak = self._chance_streak + 1 if at_chance else 0
    if self._chance_streak >= config.chance_rounds and not (
      self._warned_chance
    ):
      self._warned_chance = True
      logging.warning(
        'Round %d: test accuracy at chance for %d evaluations '
        'in a row: the model is not learning; lower '
        '--client_lr or --server_lr.',
        round_num,
        self._chance_streak,
      )


def _diverging(train_loss) -> bool:
  return train_loss is not None and not train_loss <= _DIVERGING_LOSS


def _step_rejected(metrics: dict[str, Any]) -> bool:
  return bool(metrics.get('finalizer', {}).get('update_non_finite'))


def _format_loss(loss: Optional[float]) -> str:
  if loss is None:
    return '-'
  return f'{loss:.4f}' if abs(loss) < 1e6 else f'{loss:.4g}'


def _log_round(config, round_num, released, train_loss, round_seconds):
  accuracy = released.get('test', {}).get(config.accuracy_metric)
  examples = _find(released['train'], 'num_examples')
  if examples is not None and not examples:
    train_loss = None  # No client's loss counted (all dropped).
  logging.info(
    'round %4d/%d  train loss %s  test accuracy %s  dropped %s  %.2f s',
    round_num,
    config.rounds,
    _format_loss(train_loss),
    f'{accuracy:.4f}' if accuracy is not None else '-',
    released.get('clients', {}).get(NUM_DROPPED_CLIENTS, '-'),
    round_seconds,
  )


def _run_round(
  process, state, sampler, cohort_fn, evaluator, config, round_num
):
  """Runs one round; returns (output, the values to release, train loss)."""
  started = time.monotonic()
  if config.schedules_client_lr:
    learning_rate = config.client_lr * config.client_lr_decay ** (round_num - 1)
    state = _set_client_learning_rate(process, state, learning_rate)
  output = process.next(state, cohort_fn(round_num))
  released = collections.OrderedDict(
    round_seconds=time.monotonic() - started, train=output.metrics
  )
  dropped = dropped_clients(
    output.metrics,
    config.clients_per_round,
    sampler.num_empty_clients(round_num),
  )
  if dropped is not None:
    released['clients'] = dropped
  if config.schedules_client_lr:
    released['client_lr'] = learning_rate
  if evaluator is not None and _should_evaluate(config, round_num):
    released['test'] = evaluator(process.get_model_weights(output.state))
  train_loss = (
    output.metrics.get('client_work', {}).get('train', {}).get('loss')
  )
  return output, released, train_loss


def check_client_lr_schedule(process, client_lr: float) -> None:
  """Raises ValueError if `process` has no client learning rate to set."""
  _set_client_learning_rate(process, process.initialize(), client_lr)


async def _train(
  process: tff.learning.templates.LearningProcess,
  sampler: ClientSampler,
  evaluator: Optional[CentralEvaluator],
  initial_weights: tff.learning.models.ModelWeights,
  config: TrainingConfig,
) -> Optional[int]:
  """The loop (see `train`); returns the signal that stopped it, if any."""
  round_num = 0
  with _StopOnSignal(
    lambda: (
      f'stopping once round {round_num} is saved; '
      'rerun the same command to resume.'
    )
  ) as stop:
    state, start_round, state_manager = await _start(
      process, initial_weights, config
    )
    if _finished(config, start_round):
      return None
    metrics_manager = _metrics_manager(config)
    cohort_fn = (
      sampler.identified_cohort
      if identified.expects_client_ids(process)
      else sampler.cohort
    )
    empty_streak, watch = 0, _Watch(config)
    for round_num in range(start_round + 1, config.rounds + 1):
      if stop.signum is not None:  # It came before this round started.
        return stop.signum
      output, released, train_loss = _run_round(
        process, state, sampler, cohort_fn, evaluator, config, round_num
      )
      _check_finite(
        config,
        round_num,
        process.get_model_weights(output.state),
        train_loss,
        released.get('test'),
      )
      empty_streak = _check_contributed(
        config,
        round_num,
        released.get('clients'),
        config.clients_per_round,
        empty_streak,
      )
      watch.observe(
        round_num,
        train_loss,
        released.get('test', {}).get(config.accuracy_metric),
      )
      if not empty_streak and _step_rejected(output.metrics):
        logging.warning(
          'Round %d: the server step was non-finite or overflowed and was '
          'rejected (the model is unchanged): lower --server_lr.',
          round_num,
        )
      state = output.state
      # Metrics first: a kill before the save re-runs this round, whose
      # release then replaces the row; the reverse order would lose the row.
      await metrics_manager.release(released, key=round_num)
      await state_manager.save((state, round_num), version=round_num)
      _log_round(
        config, round_num, released, train_loss, released['round_seconds']
      )
  return stop.signum


async def _start(process, initial_weights, config):
  """(state, its round, the checkpoint manager): resumed or initial."""
  state = process.set_model_weights(process.initialize(), initial_weights)
  if config.schedules_client_lr:  # Fails now, not after the first round.
    _set_client_learning_rate(process, state, config.client_lr)
  state_manager = CheckpointManager(
    os.path.join(config.output_dir, CHECKPOINT_DIR), config.keep_checkpoints
  )
  state, start_round = await _load_or_save_initial(
    process, state_manager, state
  )
  return state, start_round, state_manager


def _metrics_manager(config: TrainingConfig):
  return tff.program.GroupingReleaseManager(
    [
      tff.program.CSVFileReleaseManager(
        os.path.join(config.output_dir, METRICS_CSV)
      ),
      tff.program.TensorBoardReleaseManager(
        os.path.join(config.output_dir, TENSORBOARD_DIR)
      ),
    ]
  )


def _finished(config: TrainingConfig, start_round: int) -> bool:
  """Whether the saved run already has `config.rounds` (says so if so)."""
  if start_round == config.rounds:
    logging.info(
      '%s holds the finished run of %d rounds: nothing to train.',
      config.output_dir,
      start_round,
    )
  elif start_round > config.rounds:
    logging.warning(
      '%s already holds %d rounds, more than --rounds=%d: nothing to '
      'train. For a shorter run, use another --output_dir or --overwrite.',
      config.output_dir,
      start_round,
      config.rounds,
    )
  return start_round >= config.rounds


def train(
  process: tff.learning.templates.LearningProcess,
  task: tff.simulation.baselines.BaselineTask,
  config: TrainingConfig,
  *,
  eval_data: Optional[tf.data.Dataset] = None,
  label: str = '',
) -> collections.OrderedDict[str, Any]:
  """Trains `process` on `task`, resuming from `config.output_dir` if possible.

  Writes to `config.output_dir`: `metrics.csv` (one row per round: process
  measurements under `train/`, test metrics under `test/`, `round_seconds`),
  `tensorboard/`, `checkpoints/` (the last rounds' program state),
  `summary.json` and `accuracy.png`.

  Args:
    process: The learning process (FedAvg or any method of this project).
    task: The task.
    config: The loop settings.
    eval_data: Batched evaluation data; default: the task's centralised test
      data after its `eval_preprocess_fn`.
    label: Legend label of the accuracy plot.

  Returns:
    The summary written to `summary.json`.

  Raises:
    TrainingDivergedError: A non-finite model or metric, or (its subclass
      `NoClientContributedError`) `config.max_empty_rounds` empty rounds in
      a row; the rounds before are saved.
    CheckpointDamagedError: No saved round of the directory can be read.
    StopRequested: SIGINT or SIGTERM (its signal number is `args[0]`); the
      summary of the saved rounds is written first.
  """
  os.makedirs(config.output_dir, exist_ok=True)
  sampler = ClientSampler(
    task.datasets,
    config.clients_per_round,
    config.seed,
    config.client_train_fraction,
  )
  if eval_data is None:
    eval_data = task.datasets.get_centralized_test_data()
  evaluator = CentralEvaluator(task.model_fn, eval_data)
  initial_weights = initial_model_weights(task.model_fn, config.seed)
  stopped_by = asyncio.run(
    _train(process, sampler, evaluator, initial_weights, config)
  )
  summary = _summarise(config)
  for warning in summary['warnings']:
    logging.warning('%s', warning)
  write_json(os.path.join(config.output_dir, SUMMARY_JSON), summary)
  rounds, accuracies = accuracy_curve(
    read_metrics(config.output_dir), config.accuracy_metric
  )
  plotting.plot_accuracy(
    {label: (rounds, accuracies)},
    os.path.join(config.output_dir, ACCURACY_PNG),
  )
  if stopped_by is not None:
    raise StopRequested(stopped_by)
  return summary
