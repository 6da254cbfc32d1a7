"""FedCDA with the client history in a keyed store outside TFF.

The in-state FedCDA finalizer (`tff_aggregators.finalizers.fedcda`) keeps the
history N x K x D in its TFF state, which TFF serialises every round. Here a
TFF computation runs the round's client side (broadcast, the identified
client work, `CollectAllFactory`) and returns the collected rows to Python;
the cache update and selection run in the driver on a `HistoryStore`, with
the same TF selection code (`fedcda.build_selection`), so both backends
compute the same models. Only the participants' rows are read or written per
round (plus every seen client's selected model with
`divergence='tensorwise_norm'`).

Stores (the keyed per-client store of `tff_aggregators/programs/
client_store.py`, one slot more than K per client, see below):
  * `InMemoryHistoryStore()`: a NumPy array in the process state, saved
    with every checkpoint. For histories that fit in RAM.
  * `MemmapHistoryStore(directory)`: a memory-mapped file
    `<directory>/models.f32` of N x (K+1) x D float32, sparse on disk (only
    the rows of clients seen take space: clients seen x (K+1) x D x 4
    bytes). For large populations or models. The process state (and so the
    checkpoint) holds only the per-slot losses and round stamps, the
    selections and the running sums.

Why K+1 slots: a round writes a participant's new model into its oldest
slot, which is never a candidate nor a selection (those are among the K
newest). So a round interrupted after its write (a crash before the
checkpoint of that round) leaves the store valid for the previous
checkpoint: resuming re-runs the round and continues identically. The
memory-mapped store also records the stamp of what each slot holds
(`<directory>/stamps.i32`) and refuses to run from a state that the file
has moved past by more than one round (for example resuming an older
checkpoint), naming the rounds.

The process behaves like a `tff.learning.templates.LearningProcess`:
`initialize`, `next(state, client_data)` (client data as
`identified.with_client_ids` makes it; under `tff.learning.programs.
train_model` too), `get_model_weights`,
`set_model_weights`, `get_hparams`/`set_hparams` (the client work's), and its
state is a structure of NumPy arrays that `tff.program` state managers save.
`adopt_state` turns a loaded warm-up state of a larger memory size into this
process's (the training loop calls it on every checkpoint it loads), so an
ablation over K can start from another K's warm-up.
"""

import collections
from typing import Any, Optional

from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators.aggregators import collect
from tff_aggregators.algorithms import checks
from tff_aggregators.client_works import identified
from tff_aggregators.finalizers import fedcda
from tff_aggregators.programs import client_store

DEFAULT_MAX_MEMORY_BYTES = client_store.DEFAULT_MAX_MEMORY_BYTES
_WHAT = "FedCDA's history"

# FedCDA's names for the keyed per-client store (`programs/client_store.py`).
HistoryStore = client_store.ClientStore


class InMemoryHistoryStore(client_store.InMemoryClientStore):
  """FedCDA's history as a NumPy array in the process state (checkpointed).

  Args:
    max_bytes: Refuse a larger history (N x (K+1) x D x 4 bytes; default 8
      GiB); use `MemmapHistoryStore` above it.
  """

  what = _WHAT
  memmap_name = 'MemmapHistoryStore'


class MemmapHistoryStore(client_store.MemmapClientStore):
  """FedCDA's history in a memory-mapped file under `directory`.

  Args:
    directory: Where `models.f32`, `stamps.i32` and `shape.json` go. A run
      resumed from its checkpoint must use the same directory; a new run
      needs a new (or emptied) directory.
  """

  what = _WHAT


def check_round(client_data, *, num_clients: int, max_clients: int) -> None:
  """Raises before a FedCDA round whose client data it cannot take.

  Either history: the in-state process's round check and this process's.
  """
  builder = 'build_fedcda_process'
  identified.check_identified_cohort(client_data, max_clients, builder)
  checks.check_cohort_size(client_data, max_clients, builder)
  identified.check_tagged_ids(client_data, num_clients, builder)


class FedCdaStoreProcess:
  """FedCDA with the history in a `HistoryStore`; see the module docstring.

  Built by `tff_aggregators.build_fedcda_process(..., history_store=...)`.
  """

  expects_client_ids = True  # `identified.expects_client_ids` reads it.

  def __init__(
    self,
    *,
    initial_model_weights_fn: tff.Computation,
    client_work: tff.learning.templates.ClientWorkProcess,
    aggregator: tff.templates.AggregationProcess,
    update_type: tff.Type,
    num_clients: int,
    max_clients: int,
    options: fedcda.FedCdaOptions,
    history_store: HistoryStore,
  ):
    model_weights_type = initial_model_weights_fn.type_signature.result
    trainable_type = model_weights_type.trainable
    self._update_type = fedcda.check_update_type(update_type, trainable_type)
    self._initial_model_weights_fn = initial_model_weights_fn
    self._client_work = client_work
    self._aggregator = aggregator
    self._options = options
    self._num_clients = num_clients
    self._max_clients = max_clients
    self._num_slots = options.memory_size + 1
    self._size = collect.flat_size(trainable_type)
    self._store = history_store
    self._store.open(num_clients, self._num_slots, self._size, _WHAT)
    self._select = tf.function(
      fedcda.build_selection(
        options, max_clients, fedcda.leaf_sizes(trainable_type)
      ),
      reduce_retracing=True,
    )
    self._parse = tf.function(
      lambda w, values, weights: fedcda.participants(
        w,
        collections.OrderedDict(values=values, weights=weights),
        self._update_type,
        num_clients,
      ),
      reduce_retracing=True,
    )
    self._unflatten = tf.function(
      lambda flat: collect.unflatten(flat, trainable_type)
    )

    client_data_type = client_work.next.type_signature.parameter[2]

    @tff.federated_computation(
      tff.FederatedType(model_weights_type, tff.SERVER),
      client_work.initialize.type_signature.result,
      aggregator.initialize.type_signature.result,
      client_data_type,
    )
    def collect_round(weights, work_state, aggregator_state, client_data):
      work = client_work.next(
        work_state, tff.federated_broadcast(weights), client_data
      )
      aggregated = aggregator.next(
        aggregator_state, work.result.update, work.result.update_weight
      )
      return (
        aggregated.result,
        work.state,
        aggregated.state,
        work.measurements,
        aggregated.measurements,
      )

    self._collect_round = collect_round

  def initialize(self) -> collections.OrderedDict:
    n, s = self._num_clients, self._num_slots
    return collections.OrderedDict(
      global_model_weights=self._initial_model_weights_fn(),
      client_work=self._client_work.initialize(),
      aggregator=self._aggregator.initialize(),
      round=np.int32(0),
      history=self._store.initial_models(),
      losses=np.zeros([n, s], np.float32),
      stamps=np.full([n, s], -1, np.int32),
      selected=np.full([n], -1, np.int32),
      **fedcda.initial_sums(self._size),
    )

  def get_model_weights(self, state) -> tff.learning.models.ModelWeights:
    return state['global_model_weights']

  def set_model_weights(self, state, weights):
    state = collections.OrderedDict(state)
    state['global_model_weights'] = tff.learning.models.ModelWeights(
      trainable=tf.nest.map_structure(np.asarray, list(weights.trainable)),
      non_trainable=tf.nest.map_structure(
        np.asarray, list(weights.non_trainable)
      ),
    )
    return state

  def get_hparams(self, state) -> collections.OrderedDict:
    return collections.OrderedDict(
      client_work=self._client_work.get_hparams(state['client_work'])
    )

  def set_hparams(self, state, hparams):
    state = collections.OrderedDict(state)
    state['client_work'] = self._client_work.set_hparams(
      state['client_work'], hparams['client_work']
    )
    return state

  def adopt_state(self, state) -> collections.OrderedDict:
    """A loaded state as this process's, also from a warm-up with K' >= K.

    The warm-up (rounds t < T_w; paper Algorithm 1) is FedAvg
    and selects every participant's newest model whatever the memory size,
    and the history of memory size K holds each client's K+1 newest models
    (filled in warm-up too; module docstring). So a state whose `round` (rounds
    completed) is at most T_w, of a run that differs from this one only in
    K' >= K, is this process's state of that round once each client keeps
    its K+1 newest slots (in another slot order, which nothing reads): an
    ablation over K can start from another K's warm-up checkpoint, and it
    continues as a run with K from round 1 would
    (`tests/library/fedcda_store_test.py`). A state with K+1 slots is
    returned as it is. The source's warm-up is not in its state: the caller
    keeps it at least as long as the state's round.

    Args:
      state: The state a checkpoint held (`tff.program` managers load it
        with this process's `initialize()` as the structure).

    Returns:
      The state, with `history`, `losses`, `stamps` and `selected` over this
      process's K+1 slots (the newest first).

    Raises:
      ValueError: The state has fewer slots or other clients or parameters,
        is past this process's warm-up, or selected an older model (so it
        left its warm-up); or a history is not in the state (either
        process with a `MemmapHistoryStore`).
    """
    stamps = np.asarray(state['stamps'])
    n, s = self._num_clients, self._num_slots
    if stamps.shape == (n, s):
      return state
    history = np.asarray(state['history'])
    if (
      not self._store.in_state
      or stamps.ndim != 2
      or stamps.shape[0] != n
      or stamps.shape[1] < s
      or history.shape != stamps.shape + (self._size,)
    ):
      raise ValueError(
        f'A FedCDA state of {stamps.shape} clients x slots, history '
        f"{history.shape}, cannot become this process's ({n} clients x "
        f'{s} slots x {self._size} parameters, in '
        f'{type(self._store).__name__}): it needs the same clients and '
        'model, at least as many slots, and the history in the state '
        '(InMemoryHistoryStore) in both runs.'
      )
    round_num = int(state['round'])
    if round_num > self._options.warmup_rounds:
      raise ValueError(
        f'The state is of round {round_num}, past the warm-up '
        f'({self._options.warmup_rounds} rounds); only a warm-up state '
        'is the same for every memory size.'
      )
    order = np.argsort(-stamps, axis=1, kind='stable')
    selected = np.asarray(state['selected'])
    seen = selected >= 0
    if np.any(order[seen, 0] != selected[seen]):
      raise ValueError(
        'The state selected an older model for some client, so it is '
        'past its warm-up; only a warm-up state is the same for every '
        'memory size.'
      )
    kept = order[:, :s]
    rows = np.arange(n)[:, None]
    state = collections.OrderedDict(state)
    state['history'] = history[rows, kept]
    state['losses'] = np.asarray(state['losses'])[rows, kept]
    state['stamps'] = stamps[rows, kept]
    state['selected'] = np.where(seen, 0, -1).astype(np.int32)
    logging.info(
      'FedCDA: a state of %d slots per client adopted as one of '
      '%d (round %d, in warm-up).',
      stamps.shape[1],
      s,
      round_num,
    )
    return state

  def next(
    self, state, client_data: list[Any]
  ) -> tff.learning.templates.LearningProcessOutput:
    """One round: TFF runs the clients, the driver updates the store.

    Under `tff.learning.programs.train_model` (TFF's native program
    context) the round's client side returns value references: the result
    is then a `tff.program.MaterializableValueReference` to the round's
    `LearningProcessOutput`, which `tff.program.materialize_value` resolves
    (the store is updated then).
    """
    self._check_round(state, client_data)
    self._store.check_all(state['stamps'])
    weights = state['global_model_weights']
    collected = checks.run_round(
      self._collect_round,
      weights,
      state['client_work'],
      state['aggregator'],
      client_data,
    )
    return client_store.finish_round(
      collected, lambda outputs: self._finish_round(state, outputs)
    )

  def _check_round(self, state, client_data) -> None:
    check_round(
      client_data, num_clients=self._num_clients, max_clients=self._max_clients
    )
    if np.shape(state['stamps']) != (self._num_clients, self._num_slots):
      raise ValueError(
        f'The state has {np.shape(state["stamps"])} clients x slots, this '
        f'process has ({self._num_clients}, {self._num_slots}) (K + 1 '
        'slots); a state of another memory size passes through '
        '`adopt_state` first.'
      )

  def _participants(self, w, collected):
    try:
      return tuple(
        x.numpy()
        for x in self._parse(
          w,
          np.asarray(collected['values'], np.float32),
          np.asarray(collected['weights'], np.float32),
        )
      )
    except tf.errors.InvalidArgumentError as e:
      line = checks.failed_round_line(e)
      if line is None:
        line = e.message.splitlines()[0] if e.message else str(e)
      raise ValueError(
        f'{line.rstrip(".")} (the history is unchanged).'
      ) from None

  def _finish_round(
    self, state, outputs
  ) -> tff.learning.templates.LearningProcessOutput:
    """The driver's part of a round, from the client side's outputs."""
    weights = state['global_model_weights']
    (
      collected,
      work_state,
      aggregator_state,
      work_metrics,
      aggregator_metrics,
    ) = outputs
    w = np.concatenate(
      [np.ravel(np.asarray(x, np.float32)) for x in weights.trainable]
    )
    ids, models, losses, part_weights = self._participants(w, collected)
    t = int(state['round'])
    history = self._store.for_round(state['history'], t)
    store = self._store.models(history)
    stamps = np.array(state['stamps'])
    stored_losses = np.array(state['losses'])
    selected = np.array(state['selected'])
    # The participants' old selections, before the cache write.
    old_slots = selected[ids]
    old_models = store[ids, np.maximum(old_slots, 0)]
    old_losses = stored_losses[ids, np.maximum(old_slots, 0)]
    fixed_models = np.zeros([0, self._size], np.float32)
    if self._options.divergence == 'tensorwise_norm':
      others = np.nonzero(selected >= 0)[0]
      others = others[~np.isin(others, ids)]
      fixed_models = store[others, selected[others]]
    # The new model goes into an empty slot, else the oldest: never a
    # candidate nor a selection (K+1 slots).
    slots = client_store.write_slots(stamps[ids])
    store[ids, slots] = models
    self._store.wrote(ids, slots, t)
    stored_losses[ids, slots] = losses
    stamps[ids, slots] = t
    sums = collections.OrderedDict((name, state[name]) for name in fedcda.SUMS)
    ranked_slots = fedcda.rank_slots(
      stamps[ids], self._options.memory_size
    ).numpy()  # [P, K]
    ranked_ids = np.broadcast_to(ids[:, None], ranked_slots.shape)
    ranks, new, sums, measurements = self._select(
      np.int32(t),
      w,
      ids,
      models,
      part_weights,
      sums,
      old_slots >= 0,
      old_models,
      old_losses,
      store[ranked_ids, ranked_slots],
      stored_losses[ranked_ids, ranked_slots],
      stamps[ranked_ids, ranked_slots] >= 0,
      fixed_models,
    )
    measurements = fedcda.with_dropped(
      measurements, np.asarray(collected['weights']), np.int32(len(ids))
    )
    selected[ids] = np.take_along_axis(
      ranked_slots, ranks.numpy()[:, None], axis=1
    )[:, 0]
    new_trainable = tf.nest.map_structure(
      lambda x: x.numpy(), self._unflatten(new)
    )
    new_state = collections.OrderedDict(
      global_model_weights=tff.learning.models.ModelWeights(
        trainable=list(tf.nest.flatten(new_trainable)),
        non_trainable=weights.non_trainable,
      ),
      client_work=work_state,
      aggregator=aggregator_state,
      round=np.int32(t + 1),
      history=history,
      losses=stored_losses,
      stamps=stamps,
      selected=selected,
      **{name: value.numpy() for name, value in sums.items()},
    )
    metrics = collections.OrderedDict(
      distributor=(),
      client_work=work_metrics,
      aggregator=aggregator_metrics,
      finalizer=tf.nest.map_structure(lambda x: x.numpy(), measurements),
    )
    return tff.learning.templates.LearningProcessOutput(new_state, metrics)


def check_store(history_store: Optional[HistoryStore]) -> None:
  if history_store is not None and not isinstance(
    history_store, client_store.ClientStore
  ):
    raise TypeError(
      'history_store must be a tff_aggregators HistoryStore '
      '(InMemoryHistoryStore() or MemmapHistoryStore(directory)), got '
      f'{type(history_store).__name__}.'
    )
