"""--client_optimizer_state on the binaries (docs/stateful_clients.md).

Persistent client state with momentum 0 is the reset run exactly; with
momentum it changes the result from the second round (a client sampled
again resumes its momentum); a stopped run resumes to the uninterrupted one;
1 and 2 workers agree; what cannot work is refused in one line before
anything is written. Repeats of paths that the library tests and
multi_worker_test cover run in `make full_test` only. Tiny runs: the MLP
on 600 real Fashion-MNIST examples, 6 clients, 3 per round (seed 1: rounds
1 and 2 share clients 2 and 5), run in this process as the binary's `main`;
the refusals as a user runs them.
"""

import os
import signal
import tempfile

from absl import flags
from absl.testing import absltest
from absl.testing import flagsaver
import numpy as np
import tensorflow_federated as tff

from experiments import experiment
from experiments import registry
from experiments import run_files
from experiments import training
from tests import test_utils
import tff_aggregators
from tff_aggregators import runtime
from tff_aggregators.algorithms import stored_client_state

_MODULE = 'experiments.fmnist'
_STATES = 'train/client_work/client_states/clients_with_state'
_LOSS = 'train/client_work/train/loss'


def _new_directory() -> str:
  """A new directory (the default test tmpdir outlives a run of the test)."""
  root = absltest.get_default_test_tmpdir()
  os.makedirs(root, exist_ok=True)
  return tempfile.mkdtemp(dir=root)


def setUpModule():
  global _DATA_DIR, _MARKER
  _DATA_DIR = _new_directory()
  test_utils.write_fashion_mnist_subset(_DATA_DIR, 600, 200)
  _MARKER = test_utils.new_marker()


def tearDownModule():
  runtime.use_local_worker()
  stray = test_utils.pids_with_marker(_MARKER)
  for pid in stray:
    os.kill(pid, signal.SIGKILL)
  assert not stray, f'processes left behind: {stray}'


def _flags(output_dir, **overrides):
  values = dict(
    aggregator='fedavg',
    rounds=3,
    num_clients=6,
    clients_per_round=3,
    model='mlp',
    batch_size=20,
    client_lr=0.05,
    client_momentum=0.9,
    data_dir=_DATA_DIR,
    output_dir=output_dir,
    seed=1,
  )
  values.update(overrides)
  return values


def _train(output_dir, **overrides):
  """Runs the fmnist binary's `main` here; its metrics without timing."""
  with flagsaver.flagsaver(**_flags(output_dir, **overrides)):
    experiment.image_classification_main('fmnist')(['fmnist'])
  return test_utils.metrics_without_timing(output_dir)


def _common(rows, other_rows):
  """Both runs' rows on the columns they share (persistent adds some)."""
  keys = set(rows[0]) & set(other_rows[0])
  return (
    [{k: r[k] for k in keys} for r in rows],
    [{k: r[k] for k in keys} for r in other_rows],
  )


class PersistentStateTest(absltest.TestCase):
  """FedAvg with client momentum 0.9, persistent against reset."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.persistent = _train(
      _new_directory(), client_optimizer_state='persistent'
    )

  def test_momentum_persists_from_the_second_round(self):
    reset = _train(self.create_tempdir().full_path)
    self.assertNotIn(_STATES, reset[0])
    # Clients with a saved state: {1, 2, 5}, then 4, then 0 (3 never trains).
    self.assertEqual([r[_STATES] for r in self.persistent], ['3', '4', '5'])
    persistent, reset = _common(self.persistent, reset)
    self.assertEqual(persistent[0], reset[0])  # Every client starts fresh.
    for round_num in (2, 3):  # Clients 2 and 5 (then 1, 4) resume.
      self.assertNotEqual(
        persistent[round_num - 1][_LOSS], reset[round_num - 1][_LOSS]
      )

  def test_momentum_zero_is_the_reset_run_exactly(self):
    test_utils.skip_unless_full_suite(
      self, "EveryMethodTest runs the binaries' processes"
    )
    reset = _train(self.create_tempdir().full_path, rounds=2, client_momentum=0)
    persistent = _train(
      self.create_tempdir().full_path,
      rounds=2,
      client_momentum=0,
      client_optimizer_state='persistent',
    )
    self.assertEqual([r[_STATES] for r in persistent], ['3', '4'])
    self.assertIn('test/loss', reset[0])
    # Every training and test metric, as written: the same models.
    self.assertEqual(*_common(persistent, reset))

  def test_a_stopped_run_resumes_to_the_uninterrupted_one(self):
    output_dir = self.create_tempdir().full_path
    _train(output_dir, rounds=1, client_optimizer_state='persistent')
    self.assertEqual(run_files.latest_checkpoint(output_dir), 1)
    with self.assertLogs(level='INFO') as logs:
      resumed = _train(output_dir, client_optimizer_state='persistent')
    self.assertIn(
      'Resuming from the checkpoint of round 1', '\n'.join(logs.output)
    )
    self.assertEqual(resumed, self.persistent)

  def test_one_and_two_workers_agree(self):
    # FedLWS with the states in memory (its one-pass tau: the exact one needs
    # two aggregation phases, which TFF's multi-worker runtime cannot split),
    # and FedAvg with the states in the TFF state.
    test_utils.skip_unless_full_suite(
      self, 'multi_worker_test runs both stores on the tiny model'
    )
    runs = [
      (
        dict(
          aggregator='fedlws',
          fedlws_tau_mode='rms',
          client_optimizer_state='persistent',
          client_state_store='memory',
        ),
        None,
      ),
    ]
    runs.append((dict(client_optimizer_state='persistent'), self.persistent))
    for overrides, one in runs:
      if one is None:
        one = _train(self.create_tempdir().full_path, **overrides)
      workers = runtime.start_local_workers(2)
      try:
        two = _train(
          self.create_tempdir().full_path,
          workers=[w.address for w in workers],
          **overrides,
        )
      finally:
        for worker in workers:
          worker.stop()
        runtime.use_local_worker()
      self.assertEqual(two[0].keys(), one[0].keys())
      for row_two, row_one in zip(two, one, strict=True):
        for key, value in row_one.items():
          np.testing.assert_allclose(
            test_utils.metric_values(row_two[key]),
            test_utils.metric_values(value),
            rtol=1e-5,
            atol=1e-6,
            err_msg=f'{overrides}: {key}',
          )

  def test_client_stores_give_the_state_run(self):
    # In memory (full suite: the store's own test covers it): the whole run.
    # On disk: stopped after round 1, resumed.
    if test_utils.is_full_suite():
      memory = _train(
        self.create_tempdir().full_path,
        client_optimizer_state='persistent',
        client_state_store='memory',
      )
      self.assertEqual(memory, self.persistent)
    output_dir = self.create_tempdir().full_path
    disk = dict(client_optimizer_state='persistent', client_state_store='disk')
    _train(output_dir, rounds=1, **disk)
    self.assertTrue(
      os.path.exists(
        os.path.join(output_dir, registry.CLIENT_STATE_DIR, 'models.f32')
      )
    )
    self.assertEqual(_train(output_dir, **disk), self.persistent)
    # Starting over in the same directory clears the old store first.
    again = _train(output_dir, rounds=1, overwrite=True, **disk)
    self.assertEqual(again, self.persistent[:1])

  def test_the_flags_are_run_flags(self):
    run_flags = experiment._run_flags('fedavg')  # pylint: disable=protected-access
    self.assertEqual(run_flags['client_optimizer_state'], 'reset')
    self.assertEqual(run_flags['client_train_fraction'], 1.0)
    self.assertEqual(run_flags['client_state_store'], 'state')
    self.assertNotIn('max_client_state_mib', run_flags)  # Refuses or runs.
    # A run saved before these flags existed resumes at their defaults.
    output_dir = self.create_tempdir().full_path
    training.write_json(
      os.path.join(output_dir, run_files.CONFIG_JSON), dict(seed=0)
    )
    changed = experiment._changed_settings  # pylint: disable=protected-access
    self.assertEqual(changed(output_dir, run_flags), {})
    run_flags['client_optimizer_state'] = 'persistent'
    self.assertEqual(
      changed(output_dir, run_flags),
      dict(client_optimizer_state=('reset', 'persistent')),
    )


def _tiny_process(name, **inputs):
  """The registry's process for `name` on the tiny model, 4 of 6 clients."""
  return registry.build_process(
    name,
    registry.ProcessInputs(
      model_fn=test_utils.tiny_model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.5),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
      server_optimizer='sgd',
      clients_per_round=4,
      num_clients=6,
      **inputs,
    ),
  )


class EveryMethodTest(absltest.TestCase):
  """Each supported method's registry process, on the tiny model."""

  def test_momentum_zero_persistent_is_reset_for_every_method(self):
    runtime.use_local_worker()
    rng = np.random.default_rng(0)
    proxy = (
      rng.normal(size=(20, 3)).astype(np.float32),
      rng.integers(0, 2, size=20).astype(np.int64),
    )
    # Batches of 2: several local steps, so FedProx's term acts.
    datasets = [
      d.unbatch().batch(2) for d in test_utils.tiny_client_datasets(6)
    ]
    cohorts = [[0, 1, 2, 3], [1, 2, 4, 5]]
    # TFF's state (FedAvg), collected rows (FedLAW), client ids (FedCDA) and
    # FedProx's client work; the full suite adds the other builders, whose
    # client work is the same (that they take it: the test below).
    methods = [('fedavg', 0.0), ('fedlaw', 0.0), ('fedcda', 0.0)]
    methods += [('fedavg', 0.1)]
    if test_utils.is_full_suite():
      methods += [(n, 0.0) for n in ('fedglad', 'fedlws', 'fedsa')]
      methods += [(n, 0.1) for n in ('fedglad', 'fedlws', 'fedsa')]
    with flagsaver.flagsaver(
      fedlaw_server_epochs=2, fedlaw_proxy_batch_size=8, fedcda_warmup=1
    ):
      for name, proximal_strength in methods:
        models = {}
        for state in ('reset', 'persistent'):
          process = _tiny_process(
            name,
            proxy_data=proxy,
            client_optimizer_state=state,
            proximal_strength=proximal_strength,
          )
          if state == 'reset':
            initial = process.get_model_weights(process.initialize())
          server_state = process.set_model_weights(
            process.initialize(), initial
          )
          for ids in cohorts:
            cohort = [datasets[i] for i in ids]
            if state == 'persistent' or name == 'fedcda':
              cohort = tff_aggregators.with_client_ids(cohort, ids)
            output = process.next(server_state, cohort)
            server_state = output.state
          models[state] = test_utils.flat_trainable(
            process.get_model_weights(server_state)
          )
          if state == 'persistent':
            self.assertEqual(
              output.metrics['client_work']['client_states'][
                'clients_with_state'
              ],
              6,
              name,
            )
        np.testing.assert_array_equal(
          models['persistent'],
          models['reset'],
          err_msg=f'{name}, proximal_strength={proximal_strength}',
        )
        self.assertFalse(
          np.array_equal(models['reset'], test_utils.flat_trainable(initial))
        )

  def test_every_builder_takes_the_persistent_client_work(self):
    # Built only: the momentum-0 runs above cover FedAvg, FedLAW and FedCDA
    # in this suite; here the registry's other builders get the stateful
    # client work (in the TFF state, or in a store: a driver process).
    stores = {'fedglad': 'state', 'fedlws': 'memory', 'fedsa': 'state'}
    for name, store in stores.items():
      process = _tiny_process(
        name, client_optimizer_state='persistent', client_state_store=store
      )
      if store == 'memory':
        self.assertIsInstance(
          process, stored_client_state.ClientStateStoreProcess, name
        )
      else:
        self.assertIn(
          'clients_with_state', str(process.next.type_signature.result), name
        )


class RefusalTest(absltest.TestCase):
  def assert_refused(self, overrides, *messages):
    """Exit 1, one line naming the problem, no traceback, no file."""
    output_dir = os.path.join(self.create_tempdir().full_path, 'run')
    values = _flags(output_dir, client_optimizer_state='persistent')
    values.update(overrides)
    result = test_utils.run_module(
      _MODULE,
      [f'--{k}={v}' for k, v in values.items()],
      marker=_MARKER,
      check=False,
    )
    problems = test_utils.problem_lines(result.stderr)
    self.assertEqual(result.returncode, 1, result.stderr[-2000:])
    self.assertLen(problems, 1, problems)
    for message in messages:
      self.assertIn(message, problems[0])
    self.assertNotIn('Traceback', result.stderr)
    self.assertFalse(os.path.exists(output_dir))

  def test_a_state_above_the_limit(self):
    # 6 clients x 1 slot (momentum) x 199,210 MLP parameters x 4 bytes.
    self.assert_refused(
      dict(max_client_state_mib=4),
      'error: --client_optimizer_state=persistent needs 6 clients x 1 '
      'optimizer slots x 199,210 parameters x 4 bytes = 4.6 MiB',
      'above --max_client_state_mib=4: use --client_state_store=memory or '
      'disk (only the cohort enters a round)',
      '--client_optimizer_state=reset, or raise --max_client_state_mib',
    )
    # In a store only the cohort's 3 rows are in the TFF state.
    self.assert_refused(
      dict(max_client_state_mib=2, client_state_store='disk'),
      'needs 3 clients x 1 optimizer slots x 199,210 parameters x 4 bytes = '
      '2.3 MiB of client optimiser state in the TFF state',
      'use a smaller --clients_per_round',
    )

  def test_fedprox_is_accepted_at_parsing(self):
    # In process: the validator `app.run` applies at parsing.
    with flagsaver.flagsaver():
      flags.FLAGS.proximal_strength = 0.1
      flags.FLAGS.client_optimizer_state = 'persistent'  # No error.
      self.assertEqual(flags.FLAGS.client_optimizer_state, 'persistent')

  def test_the_size_is_printed_before_training(self):
    output_dir = self.create_tempdir().full_path
    with (
      flagsaver.flagsaver(
        **_flags(output_dir, client_optimizer_state='persistent')
      ),
      absltest.mock.patch('builtins.print') as printed,
    ):
      experiment._check_client_state(  # pylint: disable=protected-access
        experiment.load_partitioned_task('fmnist')[0]
      )
    printed.assert_called_once()
    self.assertEqual(
      printed.call_args.args[0],
      'Persistent client optimiser state: 6 clients x 1 optimizer slots x '
      '199,210 parameters x 4 bytes = 4.6 MiB in the server state, '
      'broadcast to each of the 3 clients of a round (13.7 MiB per round).',
    )
    with (
      flagsaver.flagsaver(
        **_flags(
          output_dir,
          client_optimizer_state='persistent',
          client_state_store='disk',
        )
      ),
      absltest.mock.patch('builtins.print') as printed,
    ):
      experiment._check_client_state(  # pylint: disable=protected-access
        experiment.load_partitioned_task('fmnist')[0]
      )
    self.assertEqual(
      printed.call_args.args[0],
      'Persistent client optimiser state: 6 clients x 1 optimizer slots x '
      '199,210 parameters x 4 bytes = 4.6 MiB in a driver-side store (disk: '
      'two slots per client, at most 9.1 MiB, only clients seen take '
      "space); the cohort's rows go to each of the 3 clients of a round "
      '(6.8 MiB per round).',
    )


if __name__ == '__main__':
  absltest.main()
