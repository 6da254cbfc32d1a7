"""TFF execution contexts whose worker processes never outlive this process.

`import tensorflow_federated` installs a context that lazily starts
`tensorflow_federated/data/worker_binary` and kills it only in a `__del__`
that usually does not run at exit: the worker survives with PPID 1, keeps our
stdout/stderr open and hangs pipes (see `../shared/notes/tff-0.87.md`).

Importing this module replaces that context by one that refuses to run
(naming the fix), and `use_local_worker` installs a context driving a worker
this module starts itself: the kernel kills the worker when this process dies
(`PR_SET_PDEATHSIG`, so even after SIGKILL), and an `atexit` handler stops it
cleanly on a normal exit. Every binary and test calls it before running a TFF
computation.
"""

import atexit
import ctypes
import os
import signal
import subprocess
import sys
import time
from typing import Optional

from absl import logging
import grpc
import portpicker
import tensorflow_federated as tff

_PR_SET_PDEATHSIG = 1
_MAX_MESSAGE_BYTES = 2 * 1000 * 1000 * 1000
_GRPC_OPTIONS = [
    ('grpc.max_message_length', _MAX_MESSAGE_BYTES),
    ('grpc.max_receive_message_length', _MAX_MESSAGE_BYTES),
    ('grpc.max_send_message_length', _MAX_MESSAGE_BYTES),
]


class _NoWorkerContext(tff.framework.SyncContext):
  """The default context until a worker is set up: running is an error."""

  def invoke(self, comp, arg):
    raise RuntimeError(
        'No TFF worker is set up in this process: call '
        'experiments.runtime.use_local_worker() before running a TFF '
        'computation.'
    )


# Drops TFF's own default context now (its lazily started worker would
# outlive this process; its `__del__` fails noisily at interpreter exit).
tff.framework.set_default_context(_NoWorkerContext())


def worker_binary_path() -> str:
  """Returns the path of the `worker_binary` shipped in the TFF wheel."""
  path = os.path.join(
      os.path.dirname(tff.__file__), 'data', 'worker_binary'
  )
  if not os.path.isfile(path):
    raise FileNotFoundError(
        f'TFF worker binary not found at {path}; reinstall '
        'tensorflow-federated==0.87.0 (see README, "Set-up").'
    )
  return path


def _die_with_parent(parent_pid: int) -> None:
  """Runs in the child before exec: SIGKILL it when the parent dies."""
  libc = ctypes.CDLL('libc.so.6', use_errno=True)
  libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
  if os.getppid() != parent_pid:  # The parent died before prctl took effect.
    os._exit(1)  # pylint: disable=protected-access


class WorkerProcess:
  """A local `worker_binary` tied to the lifetime of this process."""

  def __init__(
      self,
      *,
      max_concurrent_computation_calls: int = -1,
      port: Optional[int] = None,
      env: Optional[dict[str, str]] = None,
  ):
    self.max_concurrent_computation_calls = max_concurrent_computation_calls
    self.port = port or portpicker.pick_unused_port()
    self.address = f'127.0.0.1:{self.port}'
    parent_pid = os.getpid()
    self._process = subprocess.Popen(
        [
            worker_binary_path(),
            f'--port={self.port}',
            '--max_concurrent_computation_calls='
            f'{max_concurrent_computation_calls}',
        ],
        stdout=subprocess.DEVNULL,
        stderr=sys.stderr,
        env=env,
        preexec_fn=lambda: _die_with_parent(parent_pid),
    )
    atexit.register(self.stop)

  @property
  def pid(self) -> int:
    return self._process.pid

  def poll(self) -> Optional[int]:
    """Returns the exit code, or None while the worker runs."""
    return self._process.poll()

  def stop(self, timeout: float = 5.0) -> None:
    """Stops the worker: SIGINT, then SIGKILL after `timeout` seconds."""
    if self._process.poll() is not None:
      return
    self._process.send_signal(signal.SIGINT)
    try:
      self._process.wait(timeout)
    except subprocess.TimeoutExpired:
      self._process.kill()
      self._process.wait()


def connect(address: str, *, timeout: float = 60.0,
            worker: Optional[WorkerProcess] = None):
  """Returns a ready gRPC stub for the TFF worker at `address`."""
  channel = grpc.insecure_channel(address, _GRPC_OPTIONS)
  stub = tff.framework.RemoteExecutorGrpcStub(channel)
  deadline = time.monotonic() + timeout
  while not stub.is_ready:
    if worker is not None and worker.poll() is not None:
      raise RuntimeError(
          f'The TFF worker for {address} exited with code {worker.poll()} '
          'before it was ready.'
      )
    if time.monotonic() > deadline:
      raise TimeoutError(
          f'No TFF worker answered at {address} within {timeout:.0f} s. '
          'Check that the worker is running and the address is right.'
      )
    time.sleep(0.05)
  return stub


def _executor_factory(stub, worker_address: str):
  """Executor factory over one worker, with a clear error if it is gone."""

  def stack_fn(cardinalities):
    if not stub.is_ready:
      raise RuntimeError(
          f'The TFF worker at {worker_address} is not reachable (it was '
          'stopped or crashed). Restart the run with the same flags to resume '
          'from its last checkpoint.'
      )
    cardinalities.setdefault(tff.CLIENTS, 0)
    executor = tff.framework.RemoteExecutor(stub)
    executor.set_cardinalities(cardinalities)
    return executor

  return tff.framework.ResourceManagingExecutorFactory(stack_fn)


_local_worker: Optional[WorkerProcess] = None


def use_local_worker(max_concurrent_computation_calls: int = -1):
  """Sets TFF's default context to a local worker bound to this process.

  Idempotent for the same `max_concurrent_computation_calls`: a second call
  with another value restarts the worker.

  Args:
    max_concurrent_computation_calls: Caps parallel client computations in the
      worker (-1: no cap), as in
      `tff.backends.native.set_sync_local_cpp_execution_context`.

  Returns:
    The `WorkerProcess`.
  """
  global _local_worker
  if _local_worker is not None and _local_worker.poll() is None:
    if _local_worker.max_concurrent_computation_calls == (
        max_concurrent_computation_calls
    ):
      return _local_worker
    _local_worker.stop()
  worker = WorkerProcess(
      max_concurrent_computation_calls=max_concurrent_computation_calls
  )
  stub = connect(worker.address, worker=worker)
  context = tff.framework.SyncExecutionContext(
      _executor_factory(stub, worker.address),
      compiler_fn=tff.backends.native.desugar_and_transform_to_native,
      transform_args=tff.tensorflow.transform_args,
      transform_result=tff.tensorflow.transform_result,
  )
  tff.framework.set_default_context(context)
  logging.info('TFF worker pid %d on %s', worker.pid, worker.address)
  _local_worker = worker
  return worker
