"""TFF execution contexts whose worker processes never outlive this process.

`import tensorflow_federated` installs a context that lazily starts
`tensorflow_federated/data/worker_binary` and kills it only in a `__del__`
that usually does not run at exit: the worker survives with PPID 1, keeps our
stdout/stderr open and hangs pipes (`python script.py | tail` never ends;
docs/runtime.md).

Importing this module replaces that context by one that refuses to run
(naming the fix), and `use_local_worker` installs a context driving a worker
this module starts itself: the kernel kills the worker when this process dies
(`PR_SET_PDEATHSIG`, so even after SIGKILL), and an `atexit` handler stops it
cleanly on a normal exit. Every binary and test calls it before running a TFF
computation. In your own script:

  from tff_aggregators import runtime
  runtime.use_local_worker()                 # synchronous calls, as usual
  context = runtime.native_federated_context()  # for tff.learning.programs

TFF's secure sums (`tff.aggregators.SecureSumFactory`, ...) run only with
`use_local_worker(simulate_secure_aggregation=True)`, which replaces them by
plain sums (a simulation, no privacy; docs/privacy.md).
"""

import atexit
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
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
      'tff_aggregators.runtime.use_local_worker() before running a TFF '
      'computation.'
    )


# Drops TFF's own default context now (its lazily started worker would
# outlive this process; its `__del__` fails noisily at interpreter exit).
tff.framework.set_default_context(_NoWorkerContext())


def worker_binary_path() -> str:
  """Returns the path of the `worker_binary` shipped in the TFF wheel."""
  path = os.path.join(os.path.dirname(tff.__file__), 'data', 'worker_binary')
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

  def memory_mb(self, field: str = 'VmHWM') -> float:
    """The worker's memory in MB from `/proc/<pid>/status` (Linux).

    Args:
      field: `VmHWM` (peak resident, the default) or `VmRSS` (resident now).
    """
    with open(f'/proc/{self.pid}/status') as f:
      for line in f:
        if line.startswith(f'{field}:'):
          return int(line.split()[1]) / 1024  # The file gives kB.
    raise ValueError(f'No {field} in /proc/{self.pid}/status.')

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


def connect(
  address: str, *, timeout: float = 60.0, worker: Optional[WorkerProcess] = None
):
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


class WorkerUnavailableError(RuntimeError):
  """A TFF worker stopped answering."""


def _executor_factory(stub, address: str):
  """Executor factory over one worker, with a clear error if it is gone."""

  def stack_fn(cardinalities):
    if not stub.is_ready:
      raise WorkerUnavailableError(
        f'The TFF worker at {address} is not reachable (it was stopped or '
        'crashed). Restart the run with the same flags to resume from its '
        'last checkpoint.'
      )
    cardinalities.setdefault(tff.CLIENTS, 0)
    # Each result is released in the worker as soon as the driver drops it.
    # (TFF's default batches 20 releases, and a released result frees the
    # values its computation made: with collect-all, up to 20 rounds of every
    # client's model stayed in the worker.)
    executor = tff.framework.RemoteExecutor(stub, dispose_batch_size=1)
    executor.set_cardinalities(cardinalities)
    return executor

  return tff.framework.ResourceManagingExecutorFactory(stack_fn)


def _secure_intrinsics(block) -> set[str]:
  """The `federated_secure_*` intrinsics anywhere in a building block."""
  found, pending = set(), [block]
  while pending:
    node = pending.pop()
    if isinstance(node, tff.framework.Intrinsic) and node.uri.startswith(
      'federated_secure'
    ):
      found.add(node.uri)
    pending.extend(node.children())
  return found


def compile_native(comp):
  """TFF's native compiler, refusing secure sums with the fix named.

  The worker cannot run `federated_secure_*` intrinsics; without this check
  it fails deep in the runtime with "Cannot embed a federated value".
  """
  secure = _secure_intrinsics(comp.to_building_block())
  if secure:
    raise ValueError(
      f"This computation uses {', '.join(sorted(secure))}, which TFF's "
      'local runtime cannot run: simulate it with '
      'runtime.use_local_worker(simulate_secure_aggregation=True) '
      '(secure sums become plain sums; docs/privacy.md).'
    )
  return tff.backends.native.desugar_and_transform_to_native(comp)


def compile_simulating_secure_aggregation(comp):
  """TFF's test-backend compiler: secure sums become plain sums, then native.

  `tff.backends.test.replace_secure_intrinsics_with_bodies` rewrites
  `federated_secure_sum`, `federated_secure_sum_bitwidth`,
  `federated_secure_modular_sum` and `federated_secure_select` into their
  insecure equivalents (a `federated_aggregate` that checks each client's
  value against the declared bound, a plain sum then a modulus, a plain
  select); `tff.backends.native.desugar_and_transform_to_native` then
  compiles for the worker as usual. This is the compiler of
  `tff.backends.test.create_sync_test_cpp_execution_context`.
  """
  comp = tff.backends.test.replace_secure_intrinsics_with_bodies(comp)
  return tff.backends.native.desugar_and_transform_to_native(comp)


def _compile_to_mergeable_simulating_secure_aggregation(comp):
  comp = tff.backends.test.replace_secure_intrinsics_with_bodies(comp)
  return tff.backends.native.compile_to_mergeable_comp_form(comp)


def _context(
  stub,
  address: str,
  *,
  asynchronous: bool,
  simulate_secure_aggregation: bool = False,
):
  context_class = (
    tff.framework.AsyncExecutionContext
    if asynchronous
    else tff.framework.SyncExecutionContext
  )
  return context_class(
    _executor_factory(stub, address),
    compiler_fn=(
      compile_simulating_secure_aggregation
      if simulate_secure_aggregation
      else compile_native
    ),
    transform_args=tff.tensorflow.transform_args,
    transform_result=tff.tensorflow.transform_result,
  )


# The workers of the current context: address -> stub.
_stubs: dict[str, object] = {}
_local_workers: list[WorkerProcess] = []


def use_workers(
  addresses: Sequence[str],
  *,
  local_workers: Sequence[WorkerProcess] = (),
  timeout: float = 60.0,
  simulate_secure_aggregation: bool = False,
) -> None:
  """Runs TFF computations on the workers at `addresses` (`host:port`).

  One worker: a plain synchronous context. Several: TFF's mergeable-comp
  context (`tff.backends.native.set_mergeable_comp_execution_context`), which
  splits each round's clients over the workers and merges their partial
  aggregates (`merge` of `federated_aggregate`) in worker order.

  Args:
    addresses: Worker addresses; started with `worker_binary --port=P` on any
      host, or by `start_local_workers` / `//experiments:workers`.
    local_workers: The `WorkerProcess`es behind local addresses, so that a
      worker that dies while connecting is reported at once.
    timeout: Seconds to wait for each worker to answer.
    simulate_secure_aggregation: Run computations that use TFF's secure
      intrinsics (`tff.aggregators.SecureSumFactory`,
      `tff.learning.secure_aggregator`, ...) by replacing each secure sum by
      a plain sum; see `use_local_worker`.
  """
  if not addresses:
    raise ValueError('use_workers needs at least one address.')
  processes = {w.address: w for w in local_workers}
  stubs = {
    a: connect(a, timeout=timeout, worker=processes.get(a)) for a in addresses
  }
  _install_context(
    addresses, stubs, simulate_secure_aggregation=simulate_secure_aggregation
  )
  _stubs.clear()
  _stubs.update(stubs)
  logging.info('TFF computations run on %s', ', '.join(addresses))


def _install_context(
  addresses: Sequence[str], stubs, *, simulate_secure_aggregation: bool = False
) -> None:
  if len(addresses) == 1:
    (address,) = addresses
    tff.framework.set_default_context(
      _context(
        stubs[address],
        address,
        asynchronous=False,
        simulate_secure_aggregation=simulate_secure_aggregation,
      )
    )
  elif simulate_secure_aggregation:
    # The mergeable compiler splits the computation at its aggregations, so
    # the secure sums are replaced before it runs.
    tff.framework.set_default_context(
      tff.framework.MergeableCompExecutionContext(
        [
          _context(
            stubs[a], a, asynchronous=True, simulate_secure_aggregation=True
          )
          for a in addresses
        ],
        compiler_fn=_compile_to_mergeable_simulating_secure_aggregation,
      )
    )
  else:
    tff.backends.native.set_mergeable_comp_execution_context(
      [_context(stubs[a], a, asynchronous=True) for a in addresses]
    )


def unreachable_workers() -> list[str]:
  """Addresses of the current context's workers that no longer answer."""
  return [a for a, stub in _stubs.items() if not stub.is_ready]


def start_local_workers(
  num_workers: int,
  *,
  max_concurrent_computation_calls: int = -1,
  gpus: Sequence[str] = (),
  ports: Sequence[int] = (),
) -> list[WorkerProcess]:
  """Starts `num_workers` local workers bound to this process.

  Args:
    num_workers: How many.
    max_concurrent_computation_calls: Per worker (-1: no cap).
    gpus: GPU ids; worker i sees only `gpus[i % len(gpus)]`
      (`CUDA_VISIBLE_DEVICES`), so each worker pins its sessions to its GPU.
      Empty: the workers see what this process sees.
    ports: Their ports (default: free ports).
  """
  workers = []
  for i in range(num_workers):
    env = None
    if gpus:
      env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(gpus[i % len(gpus)]))
    workers.append(
      WorkerProcess(
        max_concurrent_computation_calls=max_concurrent_computation_calls,
        port=ports[i] if ports else None,
        env=env,
      )
    )
  return workers


def use_local_workers(
  num_workers: int = 1,
  *,
  max_concurrent_computation_calls: int = -1,
  simulate_secure_aggregation: bool = False,
) -> list[WorkerProcess]:
  """Runs TFF computations on `num_workers` local workers bound to this process.

  Idempotent for the same arguments; otherwise the previous local workers are
  stopped and new ones started.

  Args:
    num_workers: 1 is TFF's usual local runtime; more split clients over
      several processes (see `use_workers`).
    max_concurrent_computation_calls: Caps parallel client computations in each
      worker (-1: no cap), as in
      `tff.backends.native.set_sync_local_cpp_execution_context`.
    simulate_secure_aggregation: Replace secure sums by plain sums; see
      `use_local_worker`.

  Returns:
    The `WorkerProcess`es.
  """
  alive = [w for w in _local_workers if w.poll() is None]
  if (
    len(alive) == num_workers == len(_local_workers)
    and all(
      w.max_concurrent_computation_calls == max_concurrent_computation_calls
      for w in alive
    )
    and set(_stubs) == {w.address for w in alive}
  ):
    # Same workers; the synchronous context again (after, e.g.,
    # `native_federated_context`).
    _install_context(
      [w.address for w in alive],
      _stubs,
      simulate_secure_aggregation=simulate_secure_aggregation,
    )
    return list(alive)
  for worker in _local_workers:
    worker.stop()
  workers = start_local_workers(
    num_workers,
    max_concurrent_computation_calls=max_concurrent_computation_calls,
  )
  use_workers(
    [w.address for w in workers],
    local_workers=workers,
    simulate_secure_aggregation=simulate_secure_aggregation,
  )
  _local_workers[:] = workers
  logging.info('Local TFF worker pids %s', [w.pid for w in workers])
  return workers


def native_federated_context(
  max_concurrent_computation_calls: int = -1,
  *,
  simulate_secure_aggregation: bool = False,
) -> tff.program.NativeFederatedContext:
  """A `tff.program.NativeFederatedContext` on a local worker of this process.

  What `tff.learning.programs.train_model` and other `tff.program` logic run
  in. It is installed as the default context and returned:

    context = runtime.native_federated_context()
    asyncio.run(tff.learning.programs.train_model(...))

  The worker is `use_local_worker`'s (started if needed); it ends with this
  process. `simulate_secure_aggregation`: as in `use_local_worker` (secure
  sums run as plain sums; simulation only).
  """
  worker = use_local_worker(
    max_concurrent_computation_calls,
    simulate_secure_aggregation=simulate_secure_aggregation,
  )
  context = tff.program.NativeFederatedContext(
    _context(
      _stubs[worker.address],
      worker.address,
      asynchronous=True,
      simulate_secure_aggregation=simulate_secure_aggregation,
    )
  )
  tff.framework.set_default_context(context)
  return context


def use_local_worker(
  max_concurrent_computation_calls: int = -1,
  *,
  simulate_secure_aggregation: bool = False,
) -> WorkerProcess:
  """`use_local_workers(1, ...)`: TFF's usual local runtime, safely.

  Args:
    max_concurrent_computation_calls: As in `use_local_workers`.
    simulate_secure_aggregation: False (default): TFF's native compiler, which
      cannot run secure intrinsics: a computation using
      `tff.aggregators.SecureSumFactory` (or `tff.learning.secure_aggregator`,
      `ddp_secure_aggregator`, `secure_sum_then_finalize`) fails in the worker
      with "Cannot embed a federated value". True: the compiler of TFF's test
      context (`compile_simulating_secure_aggregation`) on this module's
      worker. SIMULATION ONLY: each secure sum is replaced by a plain sum
      (after the same clipping and quantization the secure aggregator does on
      the clients), so there is no cryptographic protection and no privacy
      here; the numbers are those a secure-aggregation deployment would
      compute. docs/privacy.md lists which methods compose with it.
  """
  (worker,) = use_local_workers(
    1,
    max_concurrent_computation_calls=max_concurrent_computation_calls,
    simulate_secure_aggregation=simulate_secure_aggregation,
  )
  return worker
