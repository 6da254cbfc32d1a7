"""A learning process whose clients' optimizer states live in a client store.

`build_stateful_client_work(..., client_store=store)` keeps in its TFF
state only the cohort's rows (`row_ids`, `client_states`, `has_state`,
max_clients rows). This driver wraps any `tff.learning.templates.
LearningProcess` composed with that client work (the builders here with
`client_work=`, or `tff.learning.templates.compose_learning_process` by
hand) and moves the rows between the store and the round:

  ids   <- the client id of the first element of each client's data (-1 for
           an empty dataset)
  table <- for each id, the store's current row (its newest slot), or none
  run the wrapped process's round on that state
  store <- each row the round wrote (`has_state`), into the id's other slot

A client not in the round keeps its row untouched. Each client has two
slots (`programs/client_store.py`): the round writes the one the state does
not read and then stamps it, so a round interrupted after its write leaves
the store valid for the last checkpoint, and resuming it continues exactly
as the uninterrupted run would.

State: `OrderedDict(process=<the wrapped process's state>, round=int32,
stamps=int32 [N, 2], rows=<the store's rows: [N, 2, D] float32 in memory,
empty for a memory-mapped store>)`, a structure of NumPy arrays that
`tff.program` state managers save. Metrics are the wrapped process's, with
`client_work/client_states/clients_with_state` counted over the store.
"""

import collections
import collections.abc
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators.algorithms import checks
from tff_aggregators.client_works import identified
from tff_aggregators.client_works import stateful
from tff_aggregators.programs import client_store

_WHAT = 'the client optimizer states'
_NUM_SLOTS = 2


def cohort_ids(
  client_data: list[tf.data.Dataset], read_untagged: bool = True
) -> np.ndarray:
  """Each dataset's client id; -1 for an empty dataset.

  The id `with_client_ids` tagged the dataset object with, else the one in
  its first element (which reads the data up to it: a shuffled dataset
  fills its shuffle buffer first); -1 for an untagged dataset when not
  `read_untagged`.
  """
  ids = []
  for dataset in client_data:
    tagged = identified.tagged_client_id(dataset)
    if tagged is None and read_untagged:
      first = [e[identified.CLIENT_ID] for e in dataset.take(1)]
      tagged = int(first[0]) if first else identified.NO_ID
    ids.append(identified.NO_ID if tagged is None else tagged)
  return np.array(ids, np.int32)


def check_round(
  client_data: list[tf.data.Dataset],
  client_work: stateful.StatefulClientWork,
  builder: str,
  read_untagged: bool = True,
) -> np.ndarray:
  """The cohort's ids (`cohort_ids`); raises before a round it cannot run.

  One line naming the fix for data without ids, a cohort above
  `max_clients`, and ids outside [0, num_clients) or repeated, where TFF's
  runtime would fail later with a serialization error or a worker's
  assertion.
  """
  identified.check_identified_cohort(
    client_data, client_work.max_clients, builder
  )
  checks.check_cohort_size(client_data, client_work.max_clients, builder)
  ids = cohort_ids(client_data, read_untagged)
  identified.check_client_ids(
    [int(i) for i in ids if i != identified.NO_ID],
    client_work.num_clients,
    builder,
  )
  return ids


def _check_in_state_round(client_data, client_work) -> None:
  """`check_round` for a client work whose table is in the TFF state.

  Reads no data: untagged datasets' ids are checked in the round.
  """
  check_round(client_data, client_work, stateful.BUILDER, read_untagged=False)


class ClientStateStoreProcess:
  """A learning process with its client states in a store; module docstring.

  The wrapped process is a `LearningProcess` (its state's `client_work`) or
  FedCDA's `FedCdaStoreProcess` (its state's `['client_work']`).

  Behaves as a `tff.learning.templates.LearningProcess` (`initialize`,
  `next`, `get_model_weights`, `set_model_weights`, `get_hparams`,
  `set_hparams`), also under `tff.learning.programs.train_model`.
  """

  expects_client_ids = True  # `identified.expects_client_ids` reads it.

  def __init__(
    self,
    process: tff.learning.templates.LearningProcess,
    client_work: stateful.StoredStateClientWork,
  ):
    self._process = process
    self._work = client_work
    self._store = client_work.client_store
    self._sizes = [s.shape.num_elements() for s in client_work.leaf_specs]
    # One value at least: an optimizer without state (plain SGD) keeps none,
    # and a file cannot map zero bytes.
    self._width = max(sum(self._sizes), 1)
    self._store.open(client_work.num_clients, _NUM_SLOTS, self._width, _WHAT)

  def initialize(self) -> collections.OrderedDict:
    return collections.OrderedDict(
      process=self._process.initialize(),
      round=np.int32(0),
      stamps=np.full([self._work.num_clients, _NUM_SLOTS], -1, np.int32),
      rows=self._store.initial_models(),
    )

  def get_model_weights(self, state) -> tff.learning.models.ModelWeights:
    return self._process.get_model_weights(state['process'])

  def set_model_weights(self, state, weights):
    return _replace(
      state, process=self._process.set_model_weights(state['process'], weights)
    )

  def get_hparams(self, state):
    return self._process.get_hparams(state['process'])

  def set_hparams(self, state, hparams):
    return _replace(
      state, process=self._process.set_hparams(state['process'], hparams)
    )

  def next(
    self, state, client_data: list[tf.data.Dataset]
  ) -> tff.learning.templates.LearningProcessOutput:
    """One round: the cohort's rows in, the wrapped round, the rows out."""
    ids = check_round(
      client_data, self._work, f'{stateful.BUILDER}(client_store=...)'
    )
    self._store.check_all(state['stamps'])
    inner = state['process']
    inner = _with_work_state(
      inner, self._cohort_table(state, ids, _work_state(inner))
    )
    output = checks.run_round(self._process.next, inner, client_data)
    return client_store.finish_round(
      output, lambda output: self._finish_round(state, output)
    )

  def _cohort_table(self, state, ids, work_state):
    """The client work state with the cohort's rows from the store."""
    rows = self._store.models(state['rows'])
    stamps = np.asarray(state['stamps'])
    m = self._work.max_clients
    row_ids = np.full([m], identified.NO_ID, np.int32)
    row_ids[: len(ids)] = ids
    seen = row_ids >= 0
    has_state = np.zeros([m], bool)
    has_state[seen] = stamps[row_ids[seen]].max(axis=1) >= 0
    flat = np.zeros([m, self._width], np.float32)
    readable = np.nonzero(has_state)[0]
    if readable.size:
      clients = row_ids[readable]
      flat[readable] = rows[clients, stamps[clients].argmax(axis=1)]
    work_state = collections.OrderedDict(work_state)
    work_state[stateful.CLIENT_STATES] = self._unflatten(flat)
    work_state[stateful.HAS_STATE] = has_state
    work_state[stateful.ROW_IDS] = row_ids
    return work_state

  def _unflatten(self, flat: np.ndarray) -> tuple[np.ndarray, ...]:
    leaves = np.split(flat, np.cumsum(self._sizes)[:-1], axis=1)
    return tuple(
      np.reshape(leaf, [flat.shape[0]] + spec.shape.as_list()).astype(
        spec.dtype.as_numpy_dtype
      )
      for leaf, spec in zip(leaves, self._work.leaf_specs)
    )

  def _finish_round(self, state, output):
    """Writes the round's rows into the store; the new state and metrics."""
    work_state = _work_state(output.state)
    row_ids = np.asarray(work_state[stateful.ROW_IDS])
    written = np.asarray(work_state[stateful.HAS_STATE]) & (row_ids >= 0)
    clients = row_ids[written]
    stamps = np.array(state['stamps'])
    t = int(state['round'])
    state_rows = self._store.for_round(state['rows'], t)
    rows = self._store.models(state_rows)
    slots = client_store.write_slots(stamps[clients])
    rows[clients, slots] = np.concatenate(
      [
        np.reshape(np.asarray(leaf, np.float32)[written], [clients.size, -1])
        for leaf in work_state[stateful.CLIENT_STATES]
      ]
      + [np.zeros([clients.size, self._width - sum(self._sizes)], np.float32)],
      axis=1,
    )
    self._store.wrote(clients, slots, t)
    stamps[clients, slots] = t
    new_state = collections.OrderedDict(
      process=output.state,
      round=np.int32(t + 1),
      stamps=stamps,
      rows=state_rows,
    )
    return tff.learning.templates.LearningProcessOutput(
      new_state, _with_count(output.metrics, stamps)
    )


def _with_count(metrics, stamps):
  """`metrics` with `clients_with_state` counted over the whole store."""
  metrics = collections.OrderedDict(metrics)
  work = collections.OrderedDict(metrics['client_work'])
  counts = collections.OrderedDict(work[stateful.CLIENT_STATES])
  counts[stateful.CLIENTS_WITH_STATE] = np.int32(
    np.sum(stamps.max(axis=1) >= 0)
  )
  work[stateful.CLIENT_STATES] = counts
  metrics['client_work'] = work
  return metrics


def _work_state(state):
  """The client work's part of a wrapped process's state."""
  if isinstance(state, collections.abc.Mapping):  # FedCDA's store process.
    return state['client_work']
  return state.client_work  # tff.learning's LearningAlgorithmState.


def _with_work_state(state, work_state):
  if isinstance(state, collections.abc.Mapping):
    return _replace(state, client_work=work_state)
  return state._replace(client_work=work_state)


def _replace(state, **values):
  state = collections.OrderedDict(state)
  state.update(values)
  return state


def with_client_store(
  process: tff.learning.templates.LearningProcess,
  client_work: tff.learning.templates.ClientWorkProcess,
) -> Any:
  """`process` with `client_work`'s client states in its `client_store`.

  Args:
    process: A `LearningProcess` composed with `client_work` (e.g. by
      `tff.learning.templates.compose_learning_process`).
    client_work: `build_stateful_client_work(..., client_store=...)`'s.

  Returns:
    A `ClientStateStoreProcess`. If `client_work` has no store (its states
    are then in the TFF state), `process` whose `next` first checks the
    cohort in Python (`check_round`: ids given, in range, not repeated; at
    most `max_clients` clients); any other client work: `process` itself.
  """
  if not isinstance(client_work, stateful.StatefulClientWork):
    return process
  if not isinstance(process, tff.learning.templates.LearningProcess):
    raise TypeError(
      'with_client_store wraps a tff.learning.templates.LearningProcess, '
      f'got {type(process).__name__} (the builders here wrap their own).'
    )
  work_type = process.initialize.type_signature.result.member.client_work
  if work_type != client_work.initialize.type_signature.result.member:
    raise ValueError(
      'with_client_store: the process was not composed with this '
      'client_work (its client work state differs); pass the same '
      'client work object to both.'
    )
  if not isinstance(client_work, stateful.StoredStateClientWork):
    return checks.with_round_check(
      process, lambda data: _check_in_state_round(data, client_work)
    )
  return ClientStateStoreProcess(process, client_work)
