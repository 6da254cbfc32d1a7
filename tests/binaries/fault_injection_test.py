"""Fault injection on `//experiments:fmnist` as a user runs it (docs/faults.md).

Each fault is checked for its message, its exit code, and that nothing was
lost: a refused command writes no file, a stopped or damaged run resumes to
the same metrics as an uninterrupted one. Tiny runs (MLP, 6 clients, real
Fashion-MNIST subset, 1-3 rounds); repeats of a covered path need
`make full_test`.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from absl import flags
from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from experiments import experiment  # noqa: F401 (its flags' validators)
from experiments import registry
from experiments import run_files
from tests import test_utils

_MODULE = 'experiments.fmnist'


def setUpModule():
  global _DATA_DIR, _MARKER
  _DATA_DIR = os.path.join(absltest.get_default_test_tmpdir(), 'fmnist')
  test_utils.write_fashion_mnist_subset(_DATA_DIR, 600, 200)
  _MARKER = test_utils.new_marker()


def tearDownModule():
  stray = test_utils.pids_with_marker(_MARKER)
  for pid in stray:
    os.kill(pid, signal.SIGKILL)
  assert not stray, f'processes left behind: {stray}'


def _args(output_dir, **overrides):
  flags = dict(
    rounds=3,
    num_clients=6,
    clients_per_round=3,
    model='mlp',
    batch_size=20,
    client_lr=0.05,
    data_dir=_DATA_DIR,
    output_dir=output_dir,
    seed=1,
    fedcda_warmup=0,
  )
  flags.update(overrides)
  return [f'--{k}={v}' for k, v in flags.items()]


def _run(output_dir, **overrides):
  return test_utils.run_module(
    _MODULE, _args(output_dir, **overrides), marker=_MARKER, check=False
  )


class _FaultTest(parameterized.TestCase):
  def assert_refused(self, result, output_dir, message):
    """Exit 1, one line naming the problem, no traceback, no file."""
    problems = test_utils.problem_lines(result.stderr)
    self.assertEqual(result.returncode, 1, result.stderr[-2000:])
    self.assertLen(problems, 1, problems)
    self.assertIn(message, problems[0])
    self.assertNotIn('Traceback', result.stderr)
    self.assertFalse(
      os.path.exists(output_dir), os.listdir(os.path.dirname(output_dir))
    )


class BadFlagsTest(_FaultTest):
  def test_refused_at_parsing(self):
    output_dir = os.path.join(self.create_tempdir().full_path, 'run')
    self.assert_refused(
      _run(output_dir, rounds=0), output_dir, '--rounds must be at least 1'
    )
    # The full suite also runs the corrected command (RunDirectoryTest runs
    # the binary in `make test`).
    if test_utils.is_full_suite():
      self.assertEqual(_run(output_dir, rounds=1).returncode, 0)

  def test_every_validator(self):
    # In process: the same absl validators `app.run` applies at parsing.
    for name, value in (
      ('rounds', 0),
      ('local_epochs', 0),
      ('batch_size', 0),
      ('clients_per_round', 0),
      ('client_lr', -1.0),
      ('server_lr', float('inf')),
      ('proxy_size', -1),
      ('client_momentum', 1.0),
      ('fedcda_k', 0),
      ('aggregator', 'nope'),
    ):
      with (
        self.subTest(name),
        self.assertRaisesRegex(
          flags.IllegalFlagValueError, f'--{name} must be'
        ),
      ):
        flags.FLAGS[name].value = value
        flags.FLAGS.validate_all_flags()
      flags.FLAGS[name].unparse()

  # (name, flags, message, in `make test` too); the others repeat a path.
  @parameterized.named_parameters(
    (
      'cohort_above_population',
      dict(clients_per_round=20),
      '--clients_per_round=20 exceeds --num_clients=6',
      True,
    ),
    (
      'fedcda_adam',
      dict(aggregator='fedcda', server_optimizer='adam'),
      'use --server_optimizer=sgd',
      True,
    ),
    (
      'local_epochs',
      dict(local_epochs=0),
      '--local_epochs must be at least 1',
      False,
    ),
    (
      'batch_size',
      dict(batch_size=0),
      '--batch_size must be at least 1',
      False,
    ),
    (
      'no_cohort',
      dict(clients_per_round=0),
      '--clients_per_round must be at least 1',
      False,
    ),
    (
      'fedlaw_without_proxy',
      dict(aggregator='fedlaw', proxy_size=0),
      '--proxy_size > 0',
      False,
    ),
    (
      'overflowing_lr',
      dict(server_lr='1e400'),
      '--server_lr must be finite and positive',
      False,
    ),
  )
  def test_refused_before_anything_is_written(
    self, overrides, message, in_default_suite
  ):
    if not in_default_suite:
      test_utils.skip_unless_full_suite(self, 'the same validation path')
    output_dir = os.path.join(self.create_tempdir().full_path, 'run')
    self.assert_refused(_run(output_dir, **overrides), output_dir, message)

  def test_labels_outside_the_classes(self):
    data_dir = self.create_tempdir().full_path
    subset = test_utils.write_fashion_mnist_subset(data_dir, 60, 20)
    labels = subset.train_labels.copy()
    labels[5] = 12
    test_utils._write_idx(  # pylint: disable=protected-access
      os.path.join(data_dir, 'train-labels-idx1-ubyte.gz'),
      labels.astype(np.uint8),
    )
    output_dir = os.path.join(self.create_tempdir().full_path, 'run')
    result = test_utils.run_module(
      _MODULE, _args(output_dir, data_dir=data_dir), marker=_MARKER, check=False
    )
    self.assert_refused(result, output_dir, 'outside the 10 classes')


class DivergenceTest(_FaultTest):
  @parameterized.parameters(*registry.names())
  def test_diverging_clients_stop_the_run(self, aggregator):
    if aggregator != 'fedavg':  # training_test maps every method's counts.
      test_utils.skip_unless_full_suite(self, 'the same loop check')
    output_dir = self.create_tempdir().full_path
    result = _run(output_dir, aggregator=aggregator, client_lr=1e4)
    problems = test_utils.problem_lines(result.stderr)
    self.assertEqual(result.returncode, 1, result.stderr[-2000:])
    self.assertNotIn('Traceback', result.stderr)
    self.assertIn('no client contributed', problems[-1])
    self.assertIn('lower --client_lr', problems[-1])
    # Nothing after the initial state was saved.
    self.assertEqual(run_files.latest_checkpoint(output_dir), 0)

  def test_tolerated_empty_rounds_are_counted(self):
    test_utils.skip_unless_full_suite(self, 'training_test checks the limit')
    output_dir = self.create_tempdir().full_path
    result = _run(output_dir, rounds=2, client_lr=1e4, max_empty_rounds=3)
    self.assertEqual(result.returncode, 0, result.stderr[-2000:])
    rows = run_files.read_metrics(output_dir)
    self.assertEqual(
      [r['clients/num_dropped_clients'] for r in rows], ['3', '3']
    )
    self.assertIn('no client contributed', result.stderr)


class RunDirectoryTest(_FaultTest):
  """Resuming, refusing, damaged checkpoints and stops, on one reference."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    # A fresh directory: a reference left by an earlier run (another
    # version of the binary) must not be resumed as this one.
    cls.root = tempfile.mkdtemp(dir=absltest.get_default_test_tmpdir())
    cls.reference = os.path.join(cls.root, 'reference')
    test_utils.run_module(_MODULE, _args(cls.reference), marker=_MARKER)
    cls.expected = test_utils.metrics_without_timing(cls.reference)
    cls.two_rounds = os.path.join(cls.root, 'two_rounds')
    test_utils.run_module(
      _MODULE, _args(cls.two_rounds, rounds=2), marker=_MARKER
    )

  def _copy_of_two_rounds(self):
    output_dir = os.path.join(self.create_tempdir().full_path, 'run')
    shutil.copytree(self.two_rounds, output_dir)
    return output_dir

  def assert_resumes_to_reference(self, output_dir):
    result = _run(output_dir)
    self.assertEqual(result.returncode, 0, result.stderr[-2000:])
    self.assertEqual(
      test_utils.metrics_without_timing(output_dir), self.expected
    )
    return result

  def test_other_methods_options_and_finished_runs(self):
    result = _run(self.reference, fedcda_k=7, fedlaw_server_epochs=3)
    self.assertEqual(result.returncode, 0, result.stderr[-2000:])
    self.assertIn('holds the finished run of 3 rounds', result.stderr)
    self.assertEqual(
      test_utils.metrics_without_timing(self.reference), self.expected
    )

  def test_fewer_rounds_than_saved(self):
    test_utils.skip_unless_full_suite(self, 'the same resume path')
    result = _run(self.reference, rounds=2)
    self.assertEqual(result.returncode, 0)
    self.assertIn('more than --rounds=2', result.stderr)

  def test_other_settings_are_refused_until_overwrite(self):
    output_dir = self._copy_of_two_rounds()
    result = _run(output_dir, alpha=0.1)
    self.assertEqual(result.returncode, 1)
    self.assertIn("'alpha': (0.5, 0.1)", result.stderr)
    self.assertIn('--overwrite', result.stderr)
    self.assertNotIn('Traceback', result.stderr)
    self.assertEqual(run_files.latest_checkpoint(output_dir), 2)
    result = _run(output_dir, alpha=0.1, rounds=1, overwrite=True)
    self.assertEqual(result.returncode, 0, result.stderr[-2000:])
    self.assertLen(run_files.read_metrics(output_dir), 1)

  def test_damaged_checkpoint_and_a_kill_during_a_write(self):
    output_dir = self._copy_of_two_rounds()
    # A truncated variables file in the newest checkpoint (round 2).
    variables = os.path.join(
      run_files.checkpoint_path(output_dir, 2), 'variables'
    )
    data_file = [
      os.path.join(variables, n)
      for n in os.listdir(variables)
      if n.startswith('variables.data')
    ][0]
    with open(data_file, 'r+b') as f:
      f.truncate(100)
    # What a kill inside the write of round 3 leaves: a partial temporary
    # directory beside the intact checkpoints of earlier rounds.
    partial = run_files.checkpoint_path(output_dir, 3) + '_temp1234'
    os.makedirs(os.path.join(partial, 'variables'))
    with open(os.path.join(partial, 'saved_model.pb'), 'wb') as f:
      f.write(b'partial')
    result = self.assert_resumes_to_reference(output_dir)
    self.assertIn(
      f'Checkpoint of round 2 is damaged: {data_file}', result.stderr
    )
    self.assertIn('Resuming from the checkpoint of round 1', result.stderr)
    self.assertFalse(os.path.exists(partial))
    self.assertTrue(
      os.path.exists(run_files.checkpoint_path(output_dir, 2) + '.damaged')
    )

  def test_a_real_kill_while_saving(self):
    test_utils.skip_unless_full_suite(self, 'timing-dependent repeat')
    output_dir = os.path.join(self.create_tempdir().full_path, 'run')
    checkpoints = os.path.join(output_dir, run_files.CHECKPOINT_DIR)
    process = test_utils.start_module(
      _MODULE, _args(output_dir), marker=_MARKER, log_path=None
    )
    deadline = time.monotonic() + 300
    while process.poll() is None and time.monotonic() < deadline:
      if os.path.isdir(checkpoints) and any(
        '_temp' in n for n in os.listdir(checkpoints)
      ):
        process.send_signal(signal.SIGKILL)
        break
      time.sleep(0.001)
    process.wait()
    self.assert_resumes_to_reference(output_dir)

  def test_sigint_stops_after_a_saved_round(self):
    output_dir = os.path.join(self.create_tempdir().full_path, 'run')
    log_path = os.path.join(self.create_tempdir().full_path, 'log')
    with open(log_path, 'w') as log:
      # Its own session: the signal goes to the group, as Ctrl-C does.
      process = subprocess.Popen(
        [sys.executable, '-m', _MODULE] + _args(output_dir),
        env=test_utils.marked_environment(_MARKER),
        cwd=test_utils.REPO_ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
      )
    self.assertTrue(
      test_utils.wait_until(
        lambda: run_files.latest_checkpoint(output_dir) == 0, 300
      )
    )
    os.killpg(process.pid, signal.SIGINT)
    self.assertEqual(process.wait(300), 128 + signal.SIGINT)
    with open(log_path) as f:
      stderr = f.read()
    self.assertNotIn('Traceback', stderr)
    saved = run_files.latest_checkpoint(output_dir)
    self.assertLess(saved, 3, 'the run ended before the signal')
    self.assertEqual(stderr.count('SIGINT'), 1, stderr[-2000:])
    self.assertLen(run_files.read_metrics(output_dir), saved)
    self.assertEqual(
      test_utils.metrics_without_timing(output_dir), self.expected[:saved]
    )


if __name__ == '__main__':
  absltest.main()
