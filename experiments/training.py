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


class TrainingDivergedError(RuntimeError):
  """The model or the training loss became non-finite."""


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
    if not 0 < self.client_lr_decay <= 1:
      raise ValueError(
          f'client_lr_decay must be in (0, 1], got {self.client_lr_decay}.'
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


class ClientSampler:
  """Seeded cohorts and client datasets, identical for every aggregator.

  Only the sampled clients' datasets are built, through the client data's
  `serializable_dataset_fn`: TFF's `create_tf_dataset_for_client` first checks
  the id against the list of all ids, which costs O(population) per client
  (0.17 s per cohort of 50 among Stack Overflow's 342,477 clients), and ids
  drawn from `client_ids` need no check. So a round's cost does not depend on
  the population size.
  """

  def __init__(
      self,
      datasets: tff.simulation.baselines.BaselineTaskDatasets,
      clients_per_round: int,
      seed: int,
  ):
    self._dataset_fn = datasets.train_data.serializable_dataset_fn
    self._preprocess_fn = datasets.train_preprocess_fn or (lambda d: d)
    self._client_ids = list(datasets.train_data.client_ids)
    if clients_per_round > len(self._client_ids):
      raise ValueError(
          f'clients_per_round={clients_per_round} exceeds the '
          f'{len(self._client_ids)} clients of the task.'
      )
    self._clients_per_round = clients_per_round
    self._seed = seed
    self._index = {c: i for i, c in enumerate(self._client_ids)}

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
    buffer = size if size > 0 else _MAX_SHUFFLE_BUFFER
    seed = _derived_seed(
        self._seed, round_num, zlib.crc32(client_id.encode())
    )
    dataset = dataset.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)
    return self._preprocess_fn(dataset)

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


def _summarise(config: TrainingConfig) -> dict[str, Any]:
  rows = read_metrics(config.output_dir)
  rounds, accuracies = accuracy_curve(rows, config.accuracy_metric)
  last = [a for r, a in zip(rounds, accuracies)
          if r > config.rounds - config.summary_rounds]
  seconds = [float(r['round_seconds']) for r in rows]
  return collections.OrderedDict(
      rounds=len(rows),
      final_accuracy=accuracies[-1] if accuracies else None,
      last_rounds_mean_accuracy=float(np.mean(last)) if last else None,
      last_rounds=config.summary_rounds,
      best_accuracy=max(accuracies) if accuracies else None,
      median_round_seconds=float(np.median(seconds)) if seconds else None,
      total_train_seconds=float(np.sum(seconds)),
  )


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
        f'{dict(client_hparams)} (TFF 0.87\'s own FedProx, '
        '`tff.learning.algorithms.build_weighted_fed_prox`, has none; '
        '`tff_aggregators.build_weighted_fed_prox` has). Use that, or '
        '--client_lr_decay=1.'
    )
  client_hparams['learning_rate'] = np.float32(learning_rate)
  return process.set_hparams(state, hparams)


async def _train(
    process: tff.learning.templates.LearningProcess,
    sampler: ClientSampler,
    evaluator: Optional[CentralEvaluator],
    initial_weights: tff.learning.models.ModelWeights,
    config: TrainingConfig,
) -> None:
  """The loop; see `train`."""
  state = process.set_model_weights(process.initialize(), initial_weights)
  if config.schedules_client_lr:  # Fails now, not after the first round.
    _set_client_learning_rate(process, state, config.client_lr)
  state_manager = tff.program.FileProgramStateManager(
      os.path.join(config.output_dir, CHECKPOINT_DIR),
      prefix=run_files.CHECKPOINT_PREFIX,
      keep_total=2,
  )
  metrics_manager = tff.program.GroupingReleaseManager([
      tff.program.CSVFileReleaseManager(
          os.path.join(config.output_dir, METRICS_CSV)
      ),
      tff.program.TensorBoardReleaseManager(
          os.path.join(config.output_dir, TENSORBOARD_DIR)
      ),
  ])
  saved, version = await state_manager.load_latest((state, 0))
  if saved is None:
    start_round = 0
    await state_manager.save((state, start_round), version=start_round)
  else:
    state, start_round = saved
    start_round = int(start_round)
    logging.info('Resuming from the checkpoint of round %d.', version)
    adopt_state = getattr(process, 'adopt_state', None)
    if adopt_state is not None:  # FedCDA: a warm-up state of another K.
      state = adopt_state(state)

  cohort_fn = (
      sampler.identified_cohort
      if identified.expects_client_ids(process)
      else sampler.cohort
  )
  for round_num in range(start_round + 1, config.rounds + 1):
    started = time.monotonic()
    if config.schedules_client_lr:
      learning_rate = config.client_lr * config.client_lr_decay ** (
          round_num - 1
      )
      state = _set_client_learning_rate(process, state, learning_rate)
    output = process.next(state, cohort_fn(round_num))
    round_seconds = time.monotonic() - started
    weights = process.get_model_weights(output.state)
    train_loss = (
        output.metrics.get('client_work', {}).get('train', {}).get('loss')
    )
    released = collections.OrderedDict(
        round_seconds=round_seconds, train=output.metrics
    )
    if config.schedules_client_lr:
      released['client_lr'] = learning_rate
    if evaluator is not None and _should_evaluate(config, round_num):
      released['test'] = evaluator(weights)
    if not _all_finite((weights, train_loss, released.get('test'))):
      raise TrainingDivergedError(
          f'Round {round_num} produced a non-finite model, training loss or '
          f'test metric (training loss {train_loss}, test '
          f'{dict(released.get("test", {}))}). The state of round '
          f'{round_num - 1} is kept in {config.output_dir}; lower the learning '
          'rates (--client_lr, --server_lr) or check the data, then restart.'
      )
    if output.metrics.get('finalizer', {}).get('update_non_finite'):
      logging.warning(
          'Round %d: the aggregated update was not finite and was not '
          'applied (the model is unchanged).', round_num
      )
    state = output.state
    # Metrics first: a kill before the save re-runs this round, whose release
    # then replaces the row; the reverse order would lose the row.
    await metrics_manager.release(released, key=round_num)
    await state_manager.save((state, round_num), version=round_num)
    accuracy = released.get('test', {}).get(config.accuracy_metric)
    logging.info(
        'round %4d/%d  train loss %s  test accuracy %s  %.2f s',
        round_num,
        config.rounds,
        f'{train_loss:.4f}' if train_loss is not None else '-',
        f'{accuracy:.4f}' if accuracy is not None else '-',
        round_seconds,
    )


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
  """
  os.makedirs(config.output_dir, exist_ok=True)
  sampler = ClientSampler(task.datasets, config.clients_per_round, config.seed)
  if eval_data is None:
    eval_data = task.datasets.get_centralized_test_data()
  evaluator = CentralEvaluator(task.model_fn, eval_data)
  initial_weights = initial_model_weights(task.model_fn, config.seed)
  asyncio.run(_train(process, sampler, evaluator, initial_weights, config))
  summary = _summarise(config)
  write_json(os.path.join(config.output_dir, SUMMARY_JSON), summary)
  rounds, accuracies = accuracy_curve(
      read_metrics(config.output_dir), config.accuracy_metric
  )
  plotting.plot_accuracy(
      {label: (rounds, accuracies)},
      os.path.join(config.output_dir, ACCURACY_PNG),
  )
  return summary
