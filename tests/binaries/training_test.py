"""The training loop: seeded cohorts, FedAvg end to end, divergence, resume."""

import collections
import json
import os
import signal
import time

from absl.testing import absltest
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators import runtime
from experiments import tasks
from experiments import training
from tests import test_utils
import tff_aggregators


class _CountingClientData(tasks.PartitionedClientData):
  """Counts the client datasets built."""

  built = 0

  def create_tf_dataset_for_client(self, client_id):
    type(self).built += 1
    return super().create_tf_dataset_for_client(client_id)


def _task_datasets(num_clients=8, size=6, local_epochs=1, batch_size=100):
  examples = collections.OrderedDict(
    image=np.zeros((num_clients * size, 28, 28, 1), np.uint8),
    label=np.arange(num_clients * size, dtype=np.int64),
  )
  indices = np.split(np.arange(num_clients * size), num_clients)
  return tff.simulation.baselines.BaselineTaskDatasets(
    train_data=_CountingClientData(examples, indices),
    test_data=tf.data.Dataset.range(1),
    train_preprocess_fn=lambda d: d.repeat(local_epochs).batch(batch_size),
  )


def _labels(dataset) -> list[int]:
  return [int(y) for b in dataset.as_numpy_iterator() for y in b['label']]


class ClientSamplerTest(absltest.TestCase):
  def test_cohorts_are_a_function_of_seed_and_round(self):
    datasets = _task_datasets()
    a = training.ClientSampler(datasets, 3, seed=7)
    b = training.ClientSampler(datasets, 3, seed=7)
    other = training.ClientSampler(datasets, 3, seed=8)
    cohorts = [a.client_ids(r) for r in range(1, 11)]
    self.assertEqual(cohorts, [b.client_ids(r) for r in range(1, 11)])
    self.assertNotEqual(cohorts, [other.client_ids(r) for r in range(1, 11)])
    self.assertGreater(len({tuple(c) for c in cohorts}), 1)
    for cohort in cohorts:
      self.assertLen(set(cohort), 3)  # Without replacement.

  def test_builds_only_the_sampled_clients(self):
    sampler = training.ClientSampler(_task_datasets(), 3, seed=0)
    _CountingClientData.built = 0
    self.assertLen(sampler.cohort(1), 3)
    self.assertEqual(_CountingClientData.built, 3)

  def test_shuffling_is_seeded_per_round_and_client(self):
    sampler = training.ClientSampler(
      _task_datasets(size=20, local_epochs=2), 2, seed=0
    )
    first = _labels(sampler.client_dataset(1, '3'))
    self.assertEqual(first, _labels(sampler.client_dataset(1, '3')))
    self.assertNotEqual(first, _labels(sampler.client_dataset(2, '3')))
    epoch1, epoch2 = first[:20], first[20:]
    self.assertEqual(sorted(epoch1), list(range(60, 80)))
    self.assertEqual(sorted(epoch2), sorted(epoch1))
    self.assertNotEqual(epoch1, epoch2)  # Reshuffled every epoch.

  def test_cohort_larger_than_population(self):
    with self.assertRaisesRegex(ValueError, 'exceeds the 8 clients'):
      training.ClientSampler(_task_datasets(), 9, seed=0)


class TrainingConfigTest(absltest.TestCase):
  def test_invalid_settings(self):
    for kwargs, message in [
      (dict(rounds=0), 'rounds'),
      (dict(clients_per_round=0), 'clients_per_round'),
      (dict(eval_every=0), 'eval_every'),
      (dict(client_lr_decay=1.5), 'client_lr_decay'),
    ]:
      arguments = dict(rounds=2, clients_per_round=2, seed=0, output_dir='/t')
      arguments.update(kwargs)
      with self.subTest(message), self.assertRaisesRegex(ValueError, message):
        training.TrainingConfig(**arguments)


def _small_task(directory: str) -> tff.simulation.baselines.BaselineTask:
  return test_utils.small_fmnist_task(directory)


def _fedavg(task, server_lr=1.0):
  return tff.learning.algorithms.build_weighted_fed_avg(
    task.model_fn,
    client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
    server_optimizer_fn=tff.learning.optimizers.build_sgdm(server_lr),
  )


class FedAvgTrainingTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    runtime.use_local_worker()

  def test_initial_weights_follow_the_seed(self):
    task = _small_task(self.create_tempdir().full_path)
    a = training.initial_model_weights(task.model_fn, 3)
    b = training.initial_model_weights(task.model_fn, 3)
    c = training.initial_model_weights(task.model_fn, 4)
    tf.nest.map_structure(np.testing.assert_array_equal, a, b)
    self.assertFalse(np.array_equal(a.trainable[0], c.trainable[0]))

  def test_two_rounds_on_real_fashion_mnist(self):
    task = _small_task(self.create_tempdir().full_path)
    output_dir = self.create_tempdir().full_path
    summary = training.train(
      _fedavg(task),
      task,
      training.TrainingConfig(
        rounds=2,
        clients_per_round=4,
        seed=0,
        output_dir=output_dir,
        client_lr=0.1,
        client_lr_decay=0.5,
      ),
      label='fedavg',
    )
    rows = training.read_metrics(output_dir)
    self.assertEqual([r['key'] for r in rows], ['1', '2'])
    losses = [float(r['train/client_work/train/loss']) for r in rows]
    self.assertLess(losses[1], losses[0])
    self.assertEqual([float(r['client_lr']) for r in rows], [0.1, 0.05])
    accuracies = [float(r['test/sparse_categorical_accuracy']) for r in rows]
    self.assertGreater(accuracies[-1], 0.3)  # Chance is 0.1.
    self.assertEqual(summary['rounds'], 2)
    self.assertAlmostEqual(summary['final_accuracy'], accuracies[-1])
    self.assertAlmostEqual(
      summary['last_rounds_mean_accuracy'], np.mean(accuracies)
    )
    with open(os.path.join(output_dir, training.SUMMARY_JSON)) as f:
      self.assertEqual(json.load(f)['rounds'], 2)
    with open(os.path.join(output_dir, training.ACCURACY_PNG), 'rb') as f:
      self.assertEqual(f.read(8), b'\x89PNG\r\n\x1a\n')
    self.assertNotEmpty(os.listdir(os.path.join(output_dir, 'tensorboard')))

  def test_a_loaded_state_passes_through_adopt_state(self):
    task = _small_task(self.create_tempdir().full_path)
    output_dir = self.create_tempdir().full_path
    config = lambda rounds: training.TrainingConfig(
      rounds=rounds, clients_per_round=2, seed=0, output_dir=output_dir
    )
    process = _fedavg(task)
    training.train(process, task, config(1))

    class Adopting:  # FedCDA's store process has `adopt_state`.
      adopted = []

      def __getattr__(self, name):
        return getattr(process, name)

      def adopt_state(self, state):
        self.adopted.append(state)
        return process.set_model_weights(state, saved_weights)

    saved_weights = tf.nest.map_structure(
      np.zeros_like, training.initial_model_weights(task.model_fn, 0)
    )
    training.train(Adopting(), task, config(2))
    self.assertLen(Adopting.adopted, 1)
    rows = training.read_metrics(output_dir)
    self.assertEqual([r['key'] for r in rows], ['1', '2'])
    # Round 2 started from the adopted (all-zero) model: chance accuracy.
    self.assertLess(
      float(rows[1]['test/sparse_categorical_accuracy']),
      float(rows[0]['test/sparse_categorical_accuracy']),
    )

  def test_divergence_stops_with_a_clear_error(self):
    task = _small_task(self.create_tempdir().full_path)
    output_dir = self.create_tempdir().full_path
    with self.assertRaisesRegex(
      training.TrainingDivergedError, r'Round 1 .*non-finite.*--server_lr'
    ):
      training.train(
        # TFF rejects non-finite updates, but a 1e38 server step makes a
        # finite model whose outputs (test loss) are not.
        _fedavg(task, server_lr=1e38),
        task,
        training.TrainingConfig(
          rounds=3, clients_per_round=4, seed=0, output_dir=output_dir
        ),
      )
    # The diverged round was not saved.
    self.assertEqual(
      sorted(os.listdir(os.path.join(output_dir, training.CHECKPOINT_DIR))),
      ['program_state_0'],
    )


class DroppedClientsTest(absltest.TestCase):
  """Every method's measurements map to one dropped-clients measurement."""

  def _dropped(self, metrics, num_empty=0):
    counts = training.dropped_clients(metrics, 5, num_empty)
    return None if counts is None else tuple(counts.values())

  def test_each_method_s_measurements(self):
    trained = dict(client_work=dict(train=dict(num_examples=100)))
    cases = {
      # FedAvg (TFF's finalizer): all or nothing.
      'fedavg': (dict(finalizer=dict(update_non_finite=1)), (5, 5, 0)),
      'fedavg_ok': (dict(finalizer=dict(update_non_finite=0)), (0, 0, 0)),
      # FedLAW and FedSA: native; the collect-all aggregator (FedCDA).
      'native': (dict(finalizer=dict(num_dropped_clients=2)), (2, 2, 0)),
      'collect': (
        dict(
          aggregator=dict(num_non_finite_clients=1, num_zero_weight_clients=2)
        ),
        (3, 3, 0),
      ),
      # FedLWS: contributing clients per layer group.
      'fedlws': (dict(aggregator=dict(num_clients=[4.0, 4.0])), (1, 1, 0)),
      'unknown': (dict(finalizer=dict(gamma=1.0)), None),
    }
    for name, (metrics, want) in cases.items():
      with self.subTest(name):
        self.assertEqual(self._dropped(dict(metrics, **trained)), want)
    # No example trained: every client was dropped (FedGLAD reports no more).
    self.assertEqual(
      self._dropped(dict(client_work=dict(train=dict(num_examples=0)))),
      (5, 5, 0),
    )
    # Clients without data count as zero weight, the rest as non-finite.
    self.assertEqual(
      self._dropped(dict(finalizer=dict(num_dropped_clients=3)), 1), (3, 2, 1)
    )

  def test_empty_rounds_stop_at_the_limit(self):
    config = training.TrainingConfig(
      rounds=5,
      clients_per_round=5,
      seed=0,
      output_dir='/nonexistent',
      max_empty_rounds=2,
      client_lr=1e4,
    )
    empty = training.dropped_clients(
      dict(finalizer=dict(update_non_finite=1)), 5, 0
    )
    streak = training._check_contributed(config, 1, empty, 5, 0)  # pylint: disable=protected-access
    self.assertEqual(streak, 1)
    with self.assertRaisesRegex(
      training.NoClientContributedError,
      r'Round 2: no client contributed; 5 of 5 updates were non-finite.*'
      r'lower --client_lr \(now 10000.0\)',
    ):
      training._check_contributed(config, 2, empty, 5, streak)  # pylint: disable=protected-access

  def test_chance_and_loss_warnings(self):
    config = training.TrainingConfig(
      rounds=6,
      clients_per_round=5,
      seed=0,
      output_dir='/nonexistent',
      chance_rounds=3,
      chance_accuracy=0.1,
    )
    warnings = training._chance_warnings(  # pylint: disable=protected-access
      config, [1, 2, 3, 4], [0.05, 0.1, 0.12, 0.3]
    )
    self.assertLen(warnings, 1)
    self.assertIn('at chance', warnings[0])
    self.assertEmpty(
      training._chance_warnings(  # pylint: disable=protected-access
        config, [1, 2, 3], [0.05, 0.3, 0.1]
      )
    )
    rows = [
      {'key': '1', 'train/client_work/train/loss': '2.3'},
      {'key': '2', 'train/client_work/train/loss': '1e18'},
      {'key': '3', 'train/client_work/train/loss': 'nan'},
    ]
    warnings = training._loss_warnings(rows)  # pylint: disable=protected-access
    self.assertLen(warnings, 1)
    self.assertIn('rounds [2, 3]', warnings[0])


class ScheduleTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    runtime.use_local_worker()

  def test_decay_needs_client_hparams(self):
    task = _small_task(self.create_tempdir().full_path)
    fedprox = tff.learning.algorithms.build_weighted_fed_prox(
      task.model_fn, 0.01, tff.learning.optimizers.build_sgdm(0.1)
    )
    output_dir = self.create_tempdir().full_path
    config = dict(
      rounds=1,
      clients_per_round=2,
      seed=0,
      output_dir=output_dir,
      client_lr=0.1,
    )
    with self.assertRaisesRegex(
      ValueError, 'tff_aggregators.build_weighted_fed_prox.*--client_lr_decay=1'
    ):
      training.train(
        fedprox, task, training.TrainingConfig(client_lr_decay=0.9, **config)
      )
    self.assertFalse(
      os.path.exists(os.path.join(output_dir, training.CHECKPOINT_DIR))
    )
    # Without a decay FedProx trains, and no learning rate is released.
    training.train(fedprox, task, training.TrainingConfig(**config))
    self.assertNotIn('client_lr', training.read_metrics(output_dir)[0])
    # This project's FedProx takes the schedule.
    ours = tff_aggregators.build_weighted_fed_prox(
      model_fn=task.model_fn,
      proximal_strength=0.01,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
    )
    output_dir = self.create_tempdir().full_path
    config.update(rounds=2, output_dir=output_dir)
    training.train(
      ours, task, training.TrainingConfig(client_lr_decay=0.5, **config)
    )
    self.assertEqual(
      [float(row['client_lr']) for row in training.read_metrics(output_dir)],
      [0.1, 0.05],
    )


class BinaryTest(absltest.TestCase):
  """`//experiments:fmnist` as a user runs it, on a real-data subset."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.data_dir = os.path.join(absltest.get_default_test_tmpdir(), 'fmnist')
    test_utils.write_fashion_mnist_subset(cls.data_dir, 600, 200)

  def _args(self, output_dir, rounds=5, **overrides):
    flags = dict(
      rounds=rounds,
      num_clients=6,
      clients_per_round=3,
      model='mlp',
      batch_size=20,
      client_lr=0.05,
      client_lr_decay=0.9,
      data_dir=self.data_dir,
      output_dir=output_dir,
      seed=1,
    )
    flags.update(overrides)
    return [f'--{k}={v}' for k, v in flags.items()]

  def _kill_when(self, output_dir, marker, predicate):
    """Starts a run and SIGKILLs it as soon as `predicate()` holds."""
    process = test_utils.start_module(
      'experiments.fmnist',
      self._args(output_dir),
      marker=marker,
      log_path=os.path.join(output_dir, 'killed.log'),
    )
    deadline = time.monotonic() + 300
    while not predicate() and process.poll() is None:
      self.assertLess(time.monotonic(), deadline, 'the kill point never came')
      time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    self.assertEqual(process.wait(), -signal.SIGKILL, 'the run ended early')

  def test_killed_runs_resume_and_refuse_other_settings(self):
    marker = test_utils.new_marker()
    reference_dir = self.create_tempdir().full_path
    test_utils.run_module(
      'experiments.fmnist', self._args(reference_dir), marker=marker
    )
    expected = test_utils.metrics_without_timing(reference_dir)

    def round_2_released(output_dir):
      path = os.path.join(output_dir, training.METRICS_CSV)
      if not os.path.exists(path):
        return False
      with open(path) as f:
        return '\n2,' in f.read()

    def round_2_saved(output_dir):
      return os.path.exists(
        os.path.join(output_dir, training.CHECKPOINT_DIR, 'program_state_2')
      )

    for kill_point in (round_2_released, round_2_saved):
      with self.subTest(kill_point.__name__):
        if kill_point is round_2_saved:
          # The common case; a kill between the two steps is the hard one.
          test_utils.skip_unless_full_suite(self, 'round_2_released is harder')
        output_dir = self.create_tempdir().full_path
        self._kill_when(
          output_dir, marker, lambda k=kill_point, d=output_dir: k(d)
        )
        result = test_utils.run_module(
          'experiments.fmnist', self._args(output_dir), marker=marker
        )
        self.assertRegex(
          result.stderr, r'Resuming from the checkpoint of round [1234]'
        )
        self.assertEqual(
          test_utils.metrics_without_timing(output_dir), expected
        )
        for name in [training.SUMMARY_JSON, 'partition.json', 'accuracy.png']:
          self.assertTrue(os.path.exists(os.path.join(output_dir, name)))

    # The finished run's directory refuses other settings.
    result = test_utils.run_module(
      'experiments.fmnist',
      self._args(reference_dir, alpha=0.1),
      marker=marker,
      check=False,
    )
    self.assertEqual(result.returncode, 1)
    self.assertIn('holds a run with other settings', result.stderr)
    self.assertIn("'alpha': (0.5, 0.1)", result.stderr)
    self.assertEqual(test_utils.metrics_without_timing(reference_dir), expected)
    self.assertEmpty(test_utils.pids_with_marker(marker), 'worker left behind')

  def test_missing_data_is_a_clear_error(self):
    result = test_utils.run_module(
      'experiments.fmnist',
      self._args(self.create_tempdir().full_path, data_dir='/nonexistent'),
      marker=test_utils.new_marker(),
      check=False,
    )
    self.assertEqual(result.returncode, 1)
    self.assertIn('apt-get install dataset-fashion-mnist', result.stderr)
    self.assertNotIn('Traceback', result.stderr)


if __name__ == '__main__':
  absltest.main()
