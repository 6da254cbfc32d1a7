"""Build-time and per-round checks every `build_<method>_process` shares.

A builder refuses what it cannot run at build time, with one line naming the
argument and the fix, instead of failing in round 1 inside TFF's runtime:

* `check_model_fn`: a `tff.learning.models.FunctionalModel` (these builders
  compose TFF's `VariableModel` client works).
* `check_cohort_size`: the builders that collect every client's update
  (`CollectAllFactory`: FedLAW, FedSA, FedCDA) hold at most `max_clients`
  rows; a larger cohort is refused before the round's computation runs.
  `cohort_limit(max_clients, builder)` is that check as a round check.

`with_round_check(process, check)` returns the same
`tff.learning.templates.LearningProcess` whose `next` runs `check(client_data)`
in Python first; everything else (types, `initialize`, `get_model_weights`,
composition with `tff.learning.programs.train_model`) is unchanged. When
`next` runs the round at once (a called computation, not the references
`train_model`'s context returns), a round that one of this library's
in-graph assertions stops (what no Python check can see, e.g. an id in data
without a tag) raises `ValueError` with that assertion's one line, chained
to the runtime's error, instead of a gRPC error whose `details` hold it.
"""

from collections.abc import Callable
import functools
import re
from typing import Any, Optional

import tensorflow_federated as tff

from tff_aggregators.client_works import with_hparams

check_model_fn = with_hparams.check_model_fn


def check_max_clients(max_clients: int, builder: str) -> int:
  if (
    isinstance(max_clients, bool)
    or int(max_clients) != max_clients
    or (max_clients < 1)
  ):
    raise ValueError(
      f'{builder}: max_clients (the largest cohort a round may have) must '
      f'be a positive integer, got {max_clients!r}.'
    )
  return int(max_clients)


def check_cohort_size(client_data: Any, max_clients: int, builder: str) -> None:
  """Raises `ValueError` if the round has more clients than `max_clients`."""
  size = len(client_data) if isinstance(client_data, (list, tuple)) else None
  if size is not None and size > max_clients:
    raise ValueError(
      f'This round has {size} clients, more than max_clients={max_clients} '
      f'given to {builder}: build the process with max_clients >= the '
      'cohort size.'
    )


def cohort_limit(max_clients: int, builder: str) -> Callable[[Any], None]:
  """`check_cohort_size` for one builder's `max_clients`, as a round check."""
  return functools.partial(
    check_cohort_size, max_clients=max_clients, builder=builder
  )


_ASSERTION = re.compile(r'assertion failed: \[(.*?)\]', re.DOTALL)
# How this library's in-graph assertion messages begin. Their first string
# holds the whole line and no ']' (the match ends at the first one).
_LIBRARY_MESSAGES = (
  'A client id ',
  'FedCDA: ',
  'CollectAllFactory(',
  'build_stateful_client_work',
)


def failed_round_line(error: BaseException) -> Optional[str]:
  """The line of this library's assertion that stopped a round, if one did."""
  for match in _ASSERTION.finditer(str(error)):
    # TF escapes the quotes of an assertion's strings.
    line = match.group(1).replace("\\'", "'").replace('\\"', '"').strip()
    if line.startswith(_LIBRARY_MESSAGES):
      return line
  return None


def run_round(next_fn: Callable[..., Any], *args, **kwargs) -> Any:
  """`next_fn(...)`; a round stopped by our assertion raises its line."""
  try:
    return next_fn(*args, **kwargs)
  except Exception as error:  # pylint: disable=broad-exception-caught
    line = failed_round_line(error)
    if line is None:
      raise
    raise ValueError(line) from error


class _CheckedNext:
  """A computation's stand-in that checks the client data, then calls it."""

  def __init__(
    self, computation: tff.Computation, check: Callable[[Any], None]
  ):
    self._computation = computation
    self._check = check

  def __call__(self, state, client_data, *args, **kwargs):
    self._check(client_data)
    return run_round(self._computation, state, client_data, *args, **kwargs)

  def __getattr__(self, name):  # type_signature, etc.
    return getattr(self._computation, name)


class _CheckedDriverProcess:
  """A driver process whose `next` checks its client data first."""

  def __init__(self, process: Any, check: Callable[[Any], None]):
    self._process = process
    self._check = check

  def next(self, state, client_data):
    self._check(client_data)
    return run_round(self._process.next, state, client_data)

  def __getattr__(self, name):  # initialize, get_model_weights, ...
    return getattr(self._process, name)


class _CheckedLearningProcess(tff.learning.templates.LearningProcess):
  """A `LearningProcess` whose `next` checks its client data in Python."""

  def __init__(
    self,
    process: tff.learning.templates.LearningProcess,
    check: Callable[[Any], None],
  ):
    super().__init__(
      process.initialize,
      process.next,
      process.get_model_weights,
      process.set_model_weights,
      get_hparams_fn=process.get_hparams,
      set_hparams_fn=process.set_hparams,
    )
    self._unchecked = process
    self._check = check
    self._checked_next = _CheckedNext(process.next, check)

  @property
  def next(self):
    return self._checked_next


def with_round_check(
  process: tff.learning.templates.LearningProcess,
  check: Callable[[Any], None],
) -> tff.learning.templates.LearningProcess:
  """`process`, whose `next` first runs `check(client_data)` in Python.

  `process` may also be a driver process (e.g. `with_client_store`'s), whose
  methods are Python ones.
  """
  if not isinstance(process, tff.learning.templates.LearningProcess):
    return _CheckedDriverProcess(process, check)
  if isinstance(process, _CheckedLearningProcess):  # Its check, then `check`.
    first = process._check  # pylint: disable=protected-access

    def both(client_data):
      first(client_data)
      check(client_data)

    process, check = process._unchecked, both  # pylint: disable=protected-access
  return _CheckedLearningProcess(process, check)
