"""A keyed per-client store outside TFF: N clients x slots x D float32.

Two server-side uses keep a row of D values per client and slot, read and
written only for the clients of a round:

  * FedCDA's history (`build_fedcda_process(history_store=...)`): K+1 slots
    of each client's recent models.
  * Persistent client optimizer state (`build_stateful_client_work(
    client_store=...)`): 2 slots of each client's optimizer state.

The driver writes a client's new row into the slot whose round stamp is
oldest (never the one the current state reads), then records the stamp. So
a round interrupted after its write (a crash before that round's checkpoint)
leaves the store valid for the previous checkpoint, and resuming re-runs the
round identically. The stamps live in the process state (saved with every
checkpoint); the rows live here:

  * `InMemoryClientStore()`: a NumPy array in the process state, saved with
    every checkpoint. For rows that fit in RAM.
  * `MemmapClientStore(directory)`: a memory-mapped file
    `<directory>/models.f32` of N x slots x D float32, sparse on disk (only
    the clients seen take space). It also records each slot's stamp
    (`stamps.i32`) and refuses a process state the file has moved past by
    more than one round (e.g. an older checkpoint), naming the rounds.

FedCDA's `HistoryStore`, `InMemoryHistoryStore` and `MemmapHistoryStore`
are these classes under the names FedCDA's documentation uses.
"""

from collections.abc import Callable
import json
import os
import shutil
from typing import Any, Optional

from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

DEFAULT_MAX_MEMORY_BYTES = 8 * 2**30


class ClientStore:
  """Where per-client rows live: an array-like [N, slots, D] of float32."""

  what = 'the client store'  # The subject of error messages.

  def open(
    self, num_clients: int, num_slots: int, size: int, what: str = ''
  ) -> None:
    """Prepares the store for N clients x slots x D values."""
    raise NotImplementedError

  def initial_models(self) -> np.ndarray:
    """The rows part of the initial process state."""
    raise NotImplementedError

  def models(self, state_models: np.ndarray) -> np.ndarray:
    """The array to read and write, given the state's rows entry."""
    raise NotImplementedError

  def check(self, ids: np.ndarray, stamps: np.ndarray) -> None:
    """Raises if the store's slots of `ids` are not those of `stamps`.

    Except each client's write slot (its oldest or an empty one,
    `write_slots`), which the state never reads: a run interrupted after a
    round's write and before its checkpoint left a newer row there, and
    the re-run round (whatever its cohort) writes there again.
    """

  def for_round(self, state_models: np.ndarray, round_num: int) -> Any:
    """The state's rows entry a round at `round_num` may write into."""
    del round_num
    return state_models

  def wrote(self, ids: np.ndarray, slots: np.ndarray, round_num: int) -> None:
    """Records that `slots` of `ids` now hold round `round_num`'s rows."""

  def check_all(self, stamps: np.ndarray) -> None:
    """`check` over every client; a driver calls it before each round.

    So a store that does not belong to the state (another run's directory,
    an emptied one, a state older than the store's last round) is refused
    before the round, whichever clients it samples. O(N x slots) integer
    comparisons: a few milliseconds for 100,000 clients.
    """
    self.check(np.arange(len(stamps)), np.asarray(stamps))

  @property
  def in_state(self) -> bool:
    """Whether the rows are part of the process state (and checkpoint)."""
    return True


class InMemoryClientStore(ClientStore):
  """The rows as a NumPy array in the process state (checkpointed).

  The whole array (N x slots x D x 4 bytes, also for clients not seen yet)
  is part of every checkpoint a `tff.program` state manager keeps; for a
  large population use `MemmapClientStore`, whose checkpoints hold only the
  stamps.

  Args:
    max_bytes: Refuse a larger array (N x slots x D x 4 bytes; default 8
      GiB); use `MemmapClientStore` above it.
  """

  def __init__(self, max_bytes: int = DEFAULT_MAX_MEMORY_BYTES):
    self._max_bytes = max_bytes
    self._shape = None
    self._last_write = (None, -1)  # The array a round wrote into, its round.

  def open(self, num_clients, num_slots, size, what=''):
    what = what or self.what
    nbytes = num_clients * num_slots * size * 4
    if nbytes > self._max_bytes:
      raise ValueError(
        f'{what} in memory would hold {num_clients} clients x '
        f'{num_slots} slots x {size:,} values = {nbytes / 2**30:,.2f} '
        f'GiB, above max_bytes={self._max_bytes / 2**30:,.2f} GiB. Use '
        f'{_memmap_name(self)}(directory) (on disk, only seen clients take '
        'space) or raise max_bytes if the machine has the memory.'
      )
    self._shape = (num_clients, num_slots, size)

  def initial_models(self):
    return np.zeros(self._shape, np.float32)

  def models(self, state_models):
    return state_models

  def for_round(self, state_models, round_num):
    """`state_models`, or a copy of it when it is not the run's newest.

    Rounds write in place (no copy of N x slots x D per round). A round
    from an older state that shares the array (`next(s0)` twice) would
    overwrite what the newer state reads, so then the array is copied.
    """
    array, written = self._last_write
    if state_models is array and round_num != written + 1:
      state_models = np.array(state_models)
    self._last_write = (state_models, round_num)
    return state_models


class MemmapClientStore(ClientStore):
  """The rows in a memory-mapped file under `directory` (sparse on disk).

  Args:
    directory: Where `models.f32`, `stamps.i32` and `shape.json` go. A run
      resumed from its checkpoint must use the same directory; a new run
      needs a new (or emptied) directory.
  """

  def __init__(self, directory: str):
    self._directory = directory
    self._models = None
    self._stamps = None
    self._pending = None
    self._what = self.what

  @property
  def in_state(self):
    return False

  @property
  def directory(self) -> str:
    return self._directory

  def open(self, num_clients, num_slots, size, what=''):
    """Records the shape; the files are opened at first use.

    So a binary can build its process before it clears an old run from
    its output directory (`--overwrite`).
    """
    self._what = what or self.what
    self._pending = (num_clients, num_slots, size)
    self._models = None

  def _ensure_open(self) -> None:
    if self._models is None:
      self._open_files(*self._pending)

  def _open_files(self, num_clients, num_slots, size):
    what = self._what
    os.makedirs(self._directory, exist_ok=True)
    shape = [num_clients, num_slots, size]
    shape_path = os.path.join(self._directory, 'shape.json')
    mode = _check_shape(shape_path, shape, what, self._directory)
    models_path = os.path.join(self._directory, 'models.f32')
    if mode == 'w+':
      _warn_disk(self._directory, num_clients * num_slots * size * 4, what)
    try:
      self._models = np.memmap(
        models_path, np.float32, mode, shape=tuple(shape)
      )
      self._stamps = np.memmap(
        os.path.join(self._directory, 'stamps.i32'),
        np.int32,
        mode,
        shape=(num_clients, num_slots),
      )
    except (OSError, ValueError) as e:
      raise ValueError(
        f'Cannot map the file of {what} {models_path} of {num_clients} '
        f'clients x {num_slots} slots x {size:,} values = '
        f'{num_clients * num_slots * size * 4 / 2**40:,.2f} TiB (sparse: '
        f'only seen clients take space): {e}. Use a file system that allows '
        'files this large, fewer slots, a smaller model, or fewer clients.'
      ) from e
    if mode == 'w+':
      self._stamps[:] = -1
      self._stamps.flush()
      temporary = f'{shape_path}.tmp'
      with open(temporary, 'w') as f:
        json.dump(shape, f)
      os.replace(temporary, shape_path)

  def initial_models(self):
    self._ensure_open()
    return np.zeros([0], np.float32)  # The rows stay on disk.

  def models(self, state_models):
    del state_models
    self._ensure_open()
    return self._models

  def check(self, ids, stamps):
    self._ensure_open()
    found = self._stamps[ids]
    stale = found != stamps
    stale[np.arange(len(ids)), write_slots(stamps)] = False
    behind = np.logical_and(stale, found < stamps)
    for mask, problem, fix in (
      (
        behind,
        "does not hold this run's rows",
        " (another run's or an emptied directory). Pass the directory the "
        'run started with.',
      ),
      (
        stale,
        'has moved past the process state',
        '. The store can only be one round ahead of the state (an '
        'interrupted round); resume from the latest checkpoint, or start a '
        'new run with a new store directory.',
      ),
    ):
      if np.any(mask):
        first = np.nonzero(mask)[0][0]
        raise ValueError(
          f'The store of {self._what} in {self._directory} {problem}: client '
          f"{ids[first]}'s slots hold rounds "
          f'{self._stamps[ids[first]].tolist()} where the state expects '
          f'{stamps[first].tolist()}{fix}'
        )

  def wrote(self, ids, slots, round_num):
    self._ensure_open()
    self._models.flush()  # Data before the stamps that vouch for it.
    self._stamps[ids, slots] = round_num
    self._stamps.flush()


def _memmap_name(store: ClientStore) -> str:
  """The memory-mapped class of the same family (FedCDA's or generic)."""
  return getattr(store, 'memmap_name', 'MemmapClientStore')


def _check_shape(shape_path: str, shape: list[int], what, directory) -> str:
  """'r+' for a store of this shape, 'w+' for a new one; raises otherwise."""
  if not os.path.exists(shape_path):
    return 'w+'
  with open(shape_path) as f:
    found = json.load(f)
  if found != shape:
    raise ValueError(
      f'The store of {what} in {directory} holds clients x slots x values '
      f'= {found}, but this process needs {shape}. Use a new directory for '
      'a new configuration.'
    )
  return 'r+'


def _warn_disk(directory: str, worst: int, what: str) -> None:
  free = shutil.disk_usage(directory).free
  if worst > free:
    logging.warning(
      'The store of %s in %s may grow to %.1f GiB if every client is seen '
      '(%.1f GiB free); it grows with the clients seen.',
      what,
      directory,
      worst / 2**30,
      free / 2**30,
    )


def write_slots(stamps: np.ndarray) -> np.ndarray:
  """Each client's slot a round writes: an empty one, else its oldest.

  Args:
    stamps: int32 [clients, slots], each slot's round (-1: empty).
  """
  return np.argmin(stamps, axis=1).astype(np.int32)


def check_store(store: Optional[ClientStore], argument: str) -> None:
  """Raises `TypeError` unless `store` is None or a `ClientStore`."""
  if store is not None and not isinstance(store, ClientStore):
    raise TypeError(
      f'{argument} must be a tff_aggregators ClientStore '
      '(InMemoryClientStore() or MemmapClientStore(directory)), got '
      f'{type(store).__name__}.'
    )


def finish_round(outputs: Any, finish: Callable[[Any], Any]) -> Any:
  """`finish(outputs)`, or a value reference to it if `outputs` has some.

  Under `tff.learning.programs.train_model` (TFF's native program context)
  a computation returns value references; the driver's part of the round
  then runs when `tff.program.materialize_value` resolves the returned
  `tff.program.MaterializableValueReference`.
  """
  if any(
    isinstance(x, tff.program.MaterializableValueReference)
    for x in tf.nest.flatten(outputs)
  ):
    return _PendingRound(finish, outputs)
  return finish(outputs)


class _PendingRound(tff.program.MaterializableValueReference):
  """A round whose TFF part is still running (native program context)."""

  def __init__(self, finish, outputs):
    self._finish = finish
    self._outputs = outputs

  @property
  def type_signature(self):
    return None  # A Python-side result, not a TFF value.

  async def get_value(self) -> Any:
    return self._finish(await tff.program.materialize_value(self._outputs))
