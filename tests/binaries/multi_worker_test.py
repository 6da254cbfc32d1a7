"""Several TFF workers on 127.0.0.1: launcher, agreement, worker failure.

Loopback only: every worker here is started by this test or its subprocesses.
"""

import os
import signal
import subprocess
import sys

from absl.testing import absltest
from absl.testing import flagsaver
from absl.testing import parameterized
import numpy as np
import tensorflow_federated as tff

import tff_aggregators

from experiments import registry
from tff_aggregators import runtime
from experiments import training
from tests import test_utils


class LauncherTest(absltest.TestCase):
  def _start_launcher(self, marker):
    process = subprocess.Popen(
      [sys.executable, '-m', 'experiments.workers', '--num_workers=2'],
      env=test_utils.marked_environment(marker),
      cwd=test_utils.REPO_ROOT,
      stdout=subprocess.PIPE,
      stderr=subprocess.DEVNULL,
      text=True,
    )
    line = process.stdout.readline().strip()
    self.assertStartsWith(line, '--workers=127.0.0.1:')
    addresses = line[len('--workers=') :].split(',')
    self.assertLen(addresses, 2)
    for address in addresses:
      runtime.connect(address, timeout=30)
    self.assertLen(test_utils.pids_with_marker(marker), 3)
    return process

  def test_stops_its_workers_on_sigterm(self):
    marker = test_utils.new_marker()
    process = self._start_launcher(marker)
    process.send_signal(signal.SIGTERM)
    self.assertEqual(process.wait(timeout=30), 0)
    self.assertTrue(
      test_utils.wait_until(lambda: not test_utils.pids_with_marker(marker), 10)
    )

  def test_workers_die_with_a_killed_launcher(self):
    marker = test_utils.new_marker()
    process = self._start_launcher(marker)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    self.assertTrue(
      test_utils.wait_until(
        lambda: not test_utils.pids_with_marker(marker), 10
      ),
      f'left behind: {test_utils.pids_with_marker(marker)}',
    )


def _train(name, task, num_workers, output_dir):
  runtime.use_local_workers(num_workers)
  process = registry.build_process(
    name,
    registry.ProcessInputs(
      model_fn=task.model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
      server_optimizer='sgd',
      clients_per_round=4,
      num_clients=len(task.datasets.train_data.client_ids),
      proxy_data=task.datasets.eval_preprocess_fn(
        task.datasets.test_data.take(50)
      ).unbatch(),
    ),
  )
  training.train(
    process,
    task,
    training.TrainingConfig(
      rounds=2, clients_per_round=4, seed=0, output_dir=output_dir
    ),
  )
  return training.read_metrics(output_dir)


def _tiny_processes():
  """Every method's builder on the tiny model (cheap to build and run).

  Plain FedGLAD and FedLWS only in `make full_test`: their aggregators run
  in the persistent-client entries too, where only the client work differs.
  """
  model_fn = test_utils.tiny_model_fn
  client = tff.learning.optimizers.build_sgdm(0.5)
  rng = np.random.default_rng(0)
  proxy = (
    rng.normal(size=(20, 3)).astype(np.float32),
    rng.integers(0, 2, size=20).astype(np.int64),
  )
  cda = dict(num_clients=6, max_clients=4, warmup_rounds=1, seed=1)

  def persistent(client_store=None):
    return tff_aggregators.build_stateful_client_work(
      model_fn,
      tff.learning.optimizers.build_sgdm(0.5, momentum=0.9),
      num_clients=6,
      max_clients=4,
      client_store=client_store,
    )

  # FedAvg over two workers is WorkerFailureTest's; FedGLAD's Adam/Yogi
  # finalizer is server-side only (its aggregation is FedGLAD's SGD one).
  processes = {}
  if test_utils.is_full_suite():
    processes['fedglad'] = tff_aggregators.build_fedglad_process(
      model_fn, client, gamma=0.5
    )
    # The exact tau needs two aggregation phases, which TFF's multi-worker
    # runtime cannot split; the one-pass mode can.
    processes['fedlws'] = tff_aggregators.build_fedlws_process(
      model_fn, client, beta=0.5, tau_mode='rms'
    )
  return processes | {
    'fedlaw': tff_aggregators.build_fedlaw_process(
      model_fn,
      client,
      proxy_data=proxy,
      max_clients=4,
      server_epochs=3,
      proxy_batch_size=8,
      server_lr=0.05,
    ),
    'fedsa': tff_aggregators.build_fedsa_process(
      model_fn, client, max_clients=4, num_categories=2, max_clusters=2
    ),
    'fedcda': tff_aggregators.build_fedcda_process(model_fn, client, **cda),
    'fedcda_history_in_driver': tff_aggregators.build_fedcda_process(
      model_fn,
      client,
      history_store=tff_aggregators.InMemoryHistoryStore(),
      **cda,
    ),
    # Persistent client momentum: the states in the TFF state, and in a
    # driver-side store (only the cohort's rows enter the round).
    'fedglad_persistent_clients': tff_aggregators.build_fedglad_process(
      model_fn, client, gamma=0.5, client_work=persistent()
    ),
    'fedlws_persistent_clients_in_memory': (
      tff_aggregators.build_fedlws_process(
        model_fn,
        client,
        beta=0.5,
        tau_mode='rms',
        client_work=persistent(tff_aggregators.InMemoryClientStore()),
      )
    ),
  }


def _leaves(structure, path=''):
  """(path, float array) for every leaf of nested dicts/lists/tuples."""
  if isinstance(structure, dict):
    for key, value in structure.items():
      yield from _leaves(value, f'{path}/{key}')
  elif isinstance(structure, (list, tuple)):
    for i, value in enumerate(structure):
      yield from _leaves(value, f'{path}/{i}')
  else:
    yield path, np.asarray(structure, np.float64)


_CLIENTS_WITH_STATE = '/client_work/client_states/clients_with_state'


class TinyAgreementTest(absltest.TestCase):
  """Every method, 2 rounds on the tiny model: 1 and 2 workers agree.

  Also with persistent client momentum (the states in the TFF state, and in
  a driver-side store), whose rows must reach the right clients on each
  worker.

  In the default suite (the Fashion-MNIST runs of `AgreementTest` are in
  `make full_test`, and so are plain FedGLAD and FedLWS): clients split over
  two workers must not change the result; the collected rows arrive in the
  workers' completion order.
  """

  def test_every_method_agrees_on_one_and_two_workers(self):
    runtime.use_local_worker()
    processes = _tiny_processes()
    datasets = test_utils.tiny_client_datasets(6)
    cohorts = [[0, 1, 2, 3], [1, 2, 4, 5]]
    first = next(iter(processes.values()))
    initial = first.get_model_weights(first.initialize())
    results = []
    for num_workers in (1, 2):
      runtime.use_local_workers(num_workers)
      run = {}
      for name, process in processes.items():
        state = process.set_model_weights(process.initialize(), initial)
        for ids in cohorts:
          cohort = [datasets[i] for i in ids]
          if name.startswith('fedcda') or 'persistent' in name:
            cohort = tff_aggregators.with_client_ids(cohort, ids)
          output = process.next(state, cohort)
          state = output.state
        run[name] = (process.get_model_weights(state).trainable, output.metrics)
      results.append(run)
    runtime.use_local_worker()
    for name in processes:
      (weights_one, metrics_one), (weights_two, metrics_two) = (
        results[0][name],
        results[1][name],
      )
      for a, b in zip(weights_one, weights_two, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=name)
      one, two = dict(_leaves(metrics_one)), dict(_leaves(metrics_two))
      self.assertEqual(one.keys(), two.keys())
      if 'persistent' in name:  # Cohorts {0, 1, 2, 3} and {1, 2, 4, 5}.
        self.assertEqual(one[_CLIENTS_WITH_STATE], 6, name)
      for key in one:
        a, b = one[key], two[key]
        if key.endswith('/lambda'):  # Follows the collected rows' order.
          a, b = np.sort(a), np.sort(b)
        np.testing.assert_allclose(
          a, b, rtol=1e-5, atol=1e-6, err_msg=f'{name}: {key}'
        )
      self.assertGreater(  # The rounds did train.
        np.abs(
          np.concatenate(
            [np.ravel(a - b) for a, b in zip(weights_one, initial.trainable)]
          )
        ).max(),
        1e-3,
        name,
      )


class AgreementTest(parameterized.TestCase):
  @parameterized.named_parameters(
    [(n, n, {}) for n in registry.names()]
    + [('fedcda_history_in_driver', 'fedcda', {'fedcda_history': 'memory'})]
  )
  def test_one_and_two_workers_agree(self, name, method_flags):
    # Each repeats, on Fashion-MNIST through the experiment binaries, a path
    # TinyAgreementTest covers for every method in the default suite.
    test_utils.skip_unless_full_suite(self, 'repeats a covered path')
    task = test_utils.small_fmnist_task(self.create_tempdir().full_path)
    # FedLWS's exact tau needs two aggregation phases, which TFF's
    # multi-worker runtime cannot split; its one-pass mode can.
    # FedCDA's selection starts after one warm-up round.
    # 5 FedLAW server epochs, not 100: the server's code is the same with 1
    # or 2 workers; what may differ is how the clients are split.
    with flagsaver.flagsaver(
      fedlws_tau_mode='rms',
      fedcda_warmup=1,
      fedlaw_server_epochs=5,
      **method_flags,
    ):
      one = _train(name, task, 1, self.create_tempdir().full_path)
      two = _train(name, task, 2, self.create_tempdir().full_path)
    for row_one, row_two in zip(one, two, strict=True):
      self.assertEqual(row_one.keys(), row_two.keys())
      for key in row_one:
        if key == 'round_seconds':
          continue
        a, b = (
          test_utils.metric_values(row_one[key]),
          test_utils.metric_values(row_two[key]),
        )
        if key.endswith('/lambda'):
          # Per-client values follow the collected rows, whose block order
          # is the workers' completion order (see CollectAllFactory).
          a, b = np.sort(a), np.sort(b)
        np.testing.assert_allclose(
          a, b, rtol=1e-5, atol=1e-6, err_msg=f'{name}: {key}'
        )


class WorkerFailureTest(absltest.TestCase):
  def test_killed_worker_gives_a_clear_error_and_the_run_resumes(self):
    data_dir = self.create_tempdir().full_path
    test_utils.write_fashion_mnist_subset(data_dir, 600, 200)
    marker = test_utils.new_marker()

    def args(output_dir, workers=None):
      flags = dict(
        rounds=5,
        num_clients=6,
        clients_per_round=4,
        model='mlp',
        batch_size=20,
        data_dir=data_dir,
        output_dir=output_dir,
      )
      if workers:
        flags['workers'] = ','.join(w.address for w in workers)
      return [f'--{k}={v}' for k, v in flags.items()]

    reference_dir = self.create_tempdir().full_path
    test_utils.run_module(
      'experiments.fmnist', args(reference_dir), marker=marker
    )

    output_dir = self.create_tempdir().full_path
    workers = runtime.start_local_workers(2)
    process = test_utils.start_module(
      'experiments.fmnist',
      args(output_dir, workers),
      marker=marker,
      log_path=os.path.join(output_dir, 'failed.log'),
    )
    checkpoint = os.path.join(
      output_dir, training.CHECKPOINT_DIR, 'program_state_2'
    )
    self.assertTrue(
      test_utils.wait_until(
        lambda: os.path.exists(checkpoint) or process.poll() is not None, 300
      )
    )
    os.kill(workers[1].pid, signal.SIGKILL)
    self.assertEqual(process.wait(timeout=120), 1)
    with open(os.path.join(output_dir, 'failed.log')) as f:
      log = f.read()
    self.assertIn(
      f'error: The TFF worker at {workers[1].address} is not reachable', log
    )
    self.assertNotIn('Traceback', log)
    for worker in workers:
      worker.stop()

    # Restarted with new workers, the run resumes and matches a run that
    # never failed (on one local worker).
    workers = runtime.start_local_workers(2)
    result = test_utils.run_module(
      'experiments.fmnist', args(output_dir, workers), marker=marker
    )
    self.assertRegex(result.stderr, 'Resuming from the checkpoint of round')
    for worker in workers:
      worker.stop()
    resumed = test_utils.metrics_without_timing(output_dir)
    reference = test_utils.metrics_without_timing(reference_dir)
    self.assertLen(resumed, 5)
    for a, b in zip(resumed, reference):
      for key in a:
        self.assertAlmostEqual(float(a[key]), float(b[key]), places=5, msg=key)


if __name__ == '__main__':
  absltest.main()
