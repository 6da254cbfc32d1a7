"""No TFF worker outlives the process that started it."""

import signal
import subprocess
import sys
import textwrap

from absl.testing import absltest
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators import runtime
from tests import test_utils
from tff_aggregators.aggregators import collect

_PROGRAM = textwrap.dedent("""
    import sys, time
    import numpy as np
    import tensorflow_federated as tff
    from tff_aggregators import runtime
    worker = runtime.use_local_worker()

    @tff.tensorflow.computation(np.float32)
    def double(x):
      return x * 2

    assert double(3.0) == 6.0
    print(worker.pid, flush=True)
    if sys.argv[1] == 'hang':
      time.sleep(600)
    sys.stdin.readline()  # 'exit': leave when the test closes stdin.
""")


class RuntimeTest(absltest.TestCase):
  def _start(self, mode: str, marker: str) -> subprocess.Popen:
    return subprocess.Popen(
      [sys.executable, '-c', _PROGRAM, mode],
      env=test_utils.marked_environment(marker),
      cwd=test_utils.REPO_ROOT,
      stdin=subprocess.PIPE,
      stdout=subprocess.PIPE,
      stderr=subprocess.DEVNULL,
      text=True,
    )

  def test_worker_stops_at_normal_exit(self):
    marker = test_utils.new_marker()
    process = self._start('exit', marker)
    worker_pid = int(process.stdout.readline())
    self.assertIn(worker_pid, test_utils.pids_with_marker(marker))
    process.stdin.close()
    self.assertEqual(process.wait(timeout=120), 0)
    self.assertTrue(
      test_utils.wait_until(
        lambda: not test_utils.pids_with_marker(marker), 10
      ),
      f'left behind: {test_utils.pids_with_marker(marker)}',
    )

  def test_worker_dies_with_killed_parent(self):
    marker = test_utils.new_marker()
    process = self._start('hang', marker)
    worker_pid = int(process.stdout.readline())
    self.assertIn(worker_pid, test_utils.pids_with_marker(marker))
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    self.assertTrue(
      test_utils.wait_until(
        lambda: not test_utils.pids_with_marker(marker), 10
      ),
      f'left behind: {test_utils.pids_with_marker(marker)}',
    )

  def test_use_local_worker_reuses_and_restarts(self):
    first = runtime.use_local_worker(max_concurrent_computation_calls=-1)
    self.assertIs(runtime.use_local_worker(-1), first)
    second = runtime.use_local_worker(max_concurrent_computation_calls=2)
    self.assertIsNot(second, first)
    self.assertIsNotNone(first.poll())  # The first worker was stopped.
    second.stop()
    self.assertIsNotNone(second.poll())

  def test_computations_need_a_worker(self):
    marker = test_utils.new_marker()
    program = textwrap.dedent("""
        import numpy as np
        import tensorflow_federated as tff
        from tff_aggregators import runtime

        @tff.tensorflow.computation(np.float32)
        def double(x):
          return x * 2

        double(1.0)
    """)
    result = subprocess.run(
      [sys.executable, '-c', program],
      env=test_utils.marked_environment(marker),
      cwd=test_utils.REPO_ROOT,
      capture_output=True,
      text=True,
      timeout=120,
    )
    self.assertNotEqual(result.returncode, 0)
    self.assertIn(
      'call tff_aggregators.runtime.use_local_worker()', result.stderr
    )
    self.assertEmpty(test_utils.pids_with_marker(marker))

  def test_worker_frees_each_call_s_values(self):
    # Every client's 4 MB value, collected at the server, 6 times: the
    # worker must not keep earlier calls' values. With TFF's default of
    # releasing results in batches of 20 it grew ~630 MB over the 6 calls;
    # releasing each at once, it moves by ~100 MB (allocator noise).
    clients, size = 10, 1_000_000
    value_type = tff.TensorType(np.float32, [size])
    process = collect.CollectAllFactory(clients).create(
      value_type, tff.TensorType(np.float32)
    )

    @tff.tensorflow.computation(np.int32)
    def make(seed):
      return tf.random.stateless_uniform([size], seed=tf.stack([seed, 0]))

    @tff.tensorflow.computation(np.int32)
    def unit_weight(seed):
      del seed
      return tf.constant(1.0)

    @tff.tensorflow.computation
    def total(collected):
      return tf.reduce_sum(collected['values'])

    @tff.federated_computation(tff.FederatedType(np.int32, tff.CLIENTS))
    def call(seeds):
      output = process.next(
        process.initialize(),
        tff.federated_map(make, seeds),
        tff.federated_map(unit_weight, seeds),
      )
      return tff.federated_map(total, output.result)

    worker = runtime.use_local_worker()
    resident = []
    for _ in range(6):
      call(list(range(clients)))
      resident.append(worker.memory_mb('VmRSS'))
    self.assertLess(resident[-1] - resident[0], 300, f'worker MB: {resident}')

  def test_worker_memory_reads_peak_and_resident(self):
    worker = runtime.use_local_worker()
    resident = worker.memory_mb('VmRSS')
    self.assertGreater(resident, 1)
    self.assertGreaterEqual(worker.memory_mb(), resident)
    with self.assertRaisesRegex(ValueError, 'NoSuchField'):
      worker.memory_mb('NoSuchField')

  def test_unreachable_worker_error_names_the_address(self):
    with self.assertRaisesRegex(TimeoutError, '127.0.0.1:1'):
      runtime.connect('127.0.0.1:1', timeout=0.5)


if __name__ == '__main__':
  absltest.main()
