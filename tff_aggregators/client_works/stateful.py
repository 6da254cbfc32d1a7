"""FedAvg client work whose client optimizer state persists per client.

TFF's model-delta client work starts every client from
`optimizer.initialize` each round, so a client's momentum (or Adam moments)
is lost between rounds. Here each client keeps its optimizer state from the
last round it took part in, as a PyTorch client that keeps its optimizer
object does. The rule, for client k of a round, with the current
hyperparameters h (the process's `get_hparams`, e.g. a learning-rate
schedule's):

  s_k <- set_hparams(S[k] if client k has trained before
                     else initialize(trainable specs), h)
  train on the client's data exactly as TFF's model-delta client work
  S[k] <- the optimizer state after the last local step (not written if the
          delta is non-finite or the dataset is empty)

Clients not in the round keep S[k] untouched. S holds the optimizer state
without its hyperparameters (SGD with momentum: the accumulator, one value
per parameter; Adam: two moments and the step count).

Where S lives: in the client work's TFF state, a table with one
[num_clients, *shape] tensor per leaf of the per-client optimizer state and
a bool [num_clients] "has state" flag. `next` broadcasts the table, each
client takes its row by its id (carried in its data: `with_client_ids`,
elements `OrderedDict(data=<batch>, client_id=int32)`, read in the same
single pass over the data as the training), and returns its new row with
its id; `CollectAllFactory(max_clients)` brings the rows to the server,
where they are written into the table by id. Memory: num_clients x
optimizer slots x parameters x 4 bytes in the state, and the same again
broadcast to every client each round; refused above `max_state_bytes`.

Large populations (`client_store=`): the states live in a keyed per-client
store on the server (`tff_aggregators/programs/client_store.py`, the one
FedCDA's history uses: in memory, or memory-mapped on disk), and the TFF
state holds only the cohort's rows with their ids (`row_ids`, max_clients
rows). Before a round the driver process (`stored_client_state.py`) reads
the cohort's ids from the first element of each client's data and fills
the cohort table from the store; each client takes the row whose id is its
own; after the round the driver writes the collected rows back. So the
round carries max_clients rows whatever the population, and the rule above
is unchanged (the same client, the same state).

The client's result (`update` = initial minus trained trainable weights,
`update_weight` = its examples or 1, 0 for a non-finite update) and the
`train` metrics are those of `tff.learning.templates.
build_model_delta_client_work`, so any aggregator and finalizer composes
with it through `tff.learning.templates.compose_learning_process`.
"""

import collections
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators import tff_compat
from tff_aggregators.aggregators import collect
from tff_aggregators.client_works import identified
from tff_aggregators.client_works import proximal
from tff_aggregators.client_works import with_hparams
from tff_aggregators.finalizers import on_collected
from tff_aggregators.programs import client_store as client_store_lib

# Keys of the client work's state.
HPARAMS = 'hparams'
CLIENT_STATES = 'client_states'  # One [num_clients, *shape] per state leaf.
HAS_STATE = 'has_state'  # bool [num_clients]: the client has trained.
ROW_IDS = 'row_ids'  # With a client store: the cohort's ids, row by row.
# Keys of a client's row and of the measurements.
ROW_STATE = 'state'
ROWS_WRITTEN = 'rows_written'
CLIENTS_WITH_STATE = 'clients_with_state'

DEFAULT_MAX_STATE_BYTES = 64 * 2**20
BUILDER = 'build_stateful_client_work'


def client_state_leaves(
  optimizer: tff.learning.optimizers.Optimizer, state: Any
) -> list[Any]:
  """The leaves of an optimizer state without its hyperparameters.

  In `tf.nest.flatten` order (keys sorted) of the state with the
  hyperparameter keys removed: the order of the client work's
  `client_states` table (Adam: accumulator, preconditioner, step).
  """
  if not isinstance(state, Mapping):
    raise TypeError(
      f"{BUILDER} needs an optimizer whose state is a mapping (as TFF's "
      f'optimizers have), got {type(state).__name__}.'
    )
  hparam_keys = set(optimizer.get_hparams(state))
  return tf.nest.flatten(
    collections.OrderedDict(
      (k, v) for k, v in state.items() if k not in hparam_keys
    )
  )


def with_client_state_leaves(optimizer, state, leaves):
  """`state` with its non-hyperparameter leaves replaced by `leaves`."""
  hparam_keys = set(optimizer.get_hparams(state))
  slots = collections.OrderedDict(
    (k, v) for k, v in state.items() if k not in hparam_keys
  )
  updated = collections.OrderedDict(state)
  updated.update(tf.nest.pack_sequence_as(slots, list(leaves)))
  return updated


def _leaf_specs(model_fn, optimizer):
  """(trainable specs, per-client state leaf specs), from a throwaway graph."""
  with tf.Graph().as_default():
    model = model_fn()
    specs = tuple(
      tf.TensorSpec(v.shape, v.dtype) for v in model.trainable_variables
    )
    leaves = client_state_leaves(optimizer, optimizer.initialize(specs))
    leaf_specs = [
      tf.TensorSpec(
        tf.convert_to_tensor(x).shape, tf.convert_to_tensor(x).dtype
      )
      for x in leaves
    ]
  return specs, leaf_specs


@dataclasses.dataclass(frozen=True)
class StateSize:
  """The size of the table of client optimizer states.

  Attributes:
    num_clients: The population (rows of the table).
    parameters: The model's trainable parameters.
    bytes_per_client: A client's optimizer state without hyperparameters.
  """

  num_clients: int
  parameters: int
  bytes_per_client: int

  @property
  def slots(self) -> float:
    """Optimizer values per parameter (1 for momentum, about 2 for Adam)."""
    return self.bytes_per_client / (4 * max(self.parameters, 1))

  @property
  def total_bytes(self) -> int:
    """The table: every client's state plus its "has state" flag."""
    return self.num_clients * (self.bytes_per_client + 1)

  def describe(self) -> str:
    """`<clients> clients x <slots> optimizer slots x <parameters> ...`."""
    return (
      f'{self.num_clients:,} clients x {self.slots:.3g} optimizer slots x '
      f'{self.parameters:,} parameters x 4 bytes = '
      f'{self.total_bytes / 2**20:,.1f} MiB'
    )


def _state_size(num_clients, trainable_specs, leaf_specs) -> StateSize:
  return StateSize(
    num_clients=int(num_clients),
    parameters=sum(s.shape.num_elements() for s in trainable_specs),
    bytes_per_client=sum(
      s.shape.num_elements() * s.dtype.size for s in leaf_specs
    ),
  )


def state_size(
  model_fn: Callable[[], tff.learning.models.VariableModel],
  optimizer: tff.learning.optimizers.Optimizer,
  num_clients: int,
) -> StateSize:
  """The table `build_stateful_client_work` would keep, without building it."""
  return _state_size(num_clients, *_leaf_specs(model_fn, optimizer))


def check_state_bytes(
  num_clients: int, trainable_specs, leaf_specs, max_state_bytes: int
) -> int:
  """The table's bytes; raises `ValueError` above `max_state_bytes`."""
  size = _state_size(num_clients, trainable_specs, leaf_specs)
  if size.total_bytes > max_state_bytes:
    raise ValueError(
      f'{BUILDER}: the client optimizer states take {size.num_clients:,} '
      f'clients x {size.slots:.3g} optimizer slots x {size.parameters:,} '
      'parameters x 4 bytes, plus 1 byte a client = '
      f'{size.total_bytes:,} bytes, above max_state_bytes='
      f'{max_state_bytes:,}; in the TFF state they are broadcast to every '
      'client. Pass client_store=tff_aggregators.InMemoryClientStore() or '
      'MemmapClientStore(directory) (only the cohort enters the round), or '
      'raise max_state_bytes.'
    )
  return size.total_bytes


def _check_counts(num_clients, max_clients):
  for name, value in (
    ('num_clients', num_clients),
    ('max_clients', max_clients),
  ):
    if (
      not isinstance(value, (int, np.integer))
      or isinstance(value, bool)
      or value < 1
    ):
      raise ValueError(
        f'{BUILDER}: {name} must be a positive int, got {value!r}.'
      )
  if max_clients > num_clients:
    raise ValueError(
      f'{BUILDER}: max_clients={max_clients} is more than num_clients='
      f'{num_clients}: a round samples at most the whole population; pass '
      'max_clients <= num_clients.'
    )
  if num_clients >= identified.MAX_CLIENT_ID:
    raise ValueError(
      f'{BUILDER}: num_clients={num_clients} must be below 2**24 (ids '
      'travel as float32).'
    )


def build_stateful_client_work(
  model_fn: Callable[[], tff.learning.models.VariableModel],
  optimizer: tff.learning.optimizers.Optimizer,
  *,
  num_clients: int,
  max_clients: int,
  client_weighting: tff.learning.ClientWeighting = (
    tff.learning.ClientWeighting.NUM_EXAMPLES
  ),
  metrics_aggregator=None,
  loop_implementation: tff.learning.LoopImplementation = (
    tff.learning.LoopImplementation.DATASET_REDUCE
  ),
  max_state_bytes: int = DEFAULT_MAX_STATE_BYTES,
  proximal_strength: float = 0.0,
  client_store: Optional[client_store_lib.ClientStore] = None,
  with_loss_and_id: bool = False,
  local_epochs: Optional[int] = None,
) -> tff.learning.templates.ClientWorkProcess:
  """TFF's model-delta client work with per-client optimizer state.

  Args:
    model_fn: No-arg callable returning a `tff.learning.models.VariableModel`.
    optimizer: The client `tff.learning.optimizers.Optimizer`; its
      hyperparameters are the process's (`get_hparams`/`set_hparams`).
    num_clients: N, the population: client ids are in [0, N).
    max_clients: The largest cohort of a round (`CollectAllFactory`'s).
    client_weighting: As in `build_model_delta_client_work`.
    metrics_aggregator: As in `build_model_delta_client_work`.
    loop_implementation: As in `build_model_delta_client_work`.
    max_state_bytes: The largest table of client states accepted in the
      TFF state (all clients' rows; with a `client_store`, the cohort's).
    proximal_strength: mu >= 0: FedProx's clients (`proximal.py`, the
      gradient plus mu (w - w_global) at every step) when positive; the
      persistent state is the wrapped optimizer's, as without it.
    client_store: None (default): every client's state in the TFF state.
      A `tff_aggregators.InMemoryClientStore()` or `MemmapClientStore(
      directory)`: the states live in that store on the server, outside
      TFF, and only the cohort's rows enter the round (module docstring,
      "Large populations"); the builders here (`client_work=`) then return
      a driver process, and a process composed by hand is wrapped with
      `tff_aggregators.with_client_store(process, client_work)`.
    with_loss_and_id: False: the update is the model delta (TFF's). True:
      `OrderedDict(delta, loss, client_id)`, the identified client work's,
      which FedCDA needs (`build_fedcda_process(client_work=...)`).
    local_epochs: With `with_loss_and_id`, as in
      `build_identified_client_work`: the loss is the last of E passes.

  Returns:
    A `ClientWorkProcess` whose client data is `with_client_ids`'s, whose
    state is `OrderedDict(hparams, client_states, has_state)` (plus
    `row_ids` with a `client_store`) and whose measurements are
    `OrderedDict(train, client_states=OrderedDict(rows_written,
    clients_with_state))`: a `StatefulClientWork`, a
    `StoredStateClientWork` with a `client_store`.

  Raises:
    TypeError: On a bad model_fn, optimizer or client_weighting.
    ValueError: On bad counts, or a table above `max_state_bytes`.
  """
  with_hparams.check_model_fn(model_fn, BUILDER)
  if not isinstance(optimizer, tff.learning.optimizers.Optimizer):
    raise TypeError(
      f'{BUILDER}: the client optimizer must be a tff.learning.optimizers.'
      f'Optimizer (e.g. tff.learning.optimizers.build_sgdm), got '
      f'{optimizer!r}.'
    )
  _check_counts(num_clients, max_clients)
  if not (
    isinstance(proximal_strength, (int, float)) and proximal_strength >= 0
  ):
    raise ValueError(
      f'{BUILDER}: proximal_strength must be a number >= 0, got '
      f'{proximal_strength!r}.'
    )
  if not isinstance(client_weighting, tff.learning.ClientWeighting):
    raise TypeError(
      f'{BUILDER}: client_weighting must be a '
      f'tff.learning.ClientWeighting, got {client_weighting!r}.'
    )
  client_store_lib.check_store(client_store, 'client_store')
  identified.check_local_epochs(local_epochs)
  trainable_specs, leaf_specs = _leaf_specs(model_fn, optimizer)
  # The table in the TFF state: every client's row, or the cohort's.
  table_rows = num_clients if client_store is None else max_clients
  check_state_bytes(table_rows, trainable_specs, leaf_specs, max_state_bytes)

  @tff.tensorflow.computation
  def initial_state():
    return collections.OrderedDict(
      [
        (
          HPARAMS,
          optimizer.get_hparams(
            optimizer.initialize(tf.TensorSpec([], tf.float32))
          ),
        ),
        (
          CLIENT_STATES,
          tuple(
            tf.zeros([table_rows] + s.shape.as_list(), s.dtype)
            for s in leaf_specs
          ),
        ),
        (HAS_STATE, tf.zeros([table_rows], tf.bool)),
      ]
      + ([] if client_store is None else [(ROW_IDS, tf.fill([table_rows], -1))])
    )

  process = _build_process(
    model_fn,
    optimizer,
    initial_state,
    leaf_specs,
    client_weighting=client_weighting,
    loop_implementation=loop_implementation,
    metrics_aggregator=metrics_aggregator,
    num_clients=num_clients,
    max_clients=max_clients,
    proximal_strength=float(proximal_strength),
    loss_report=(local_epochs,) if with_loss_and_id else None,
  )
  if client_store is None:
    return StatefulClientWork(
      process, num_clients=num_clients, max_clients=max_clients
    )
  return StoredStateClientWork(
    process,
    client_store=client_store,
    num_clients=num_clients,
    max_clients=max_clients,
    leaf_specs=leaf_specs,
  )


class StatefulClientWork(tff.learning.templates.ClientWorkProcess):
  """`build_stateful_client_work`'s process, with the counts it was built for.

  The builders taking a `client_work` compare their own `num_clients` and
  `max_clients` with these before composing.

  Attributes:
    num_clients: The population N (client ids are in [0, N)).
    max_clients: The largest cohort of a round.
  """

  def __init__(
    self,
    process: tff.learning.templates.ClientWorkProcess,
    *,
    num_clients: int,
    max_clients: int,
  ):
    super().__init__(
      process.initialize,
      process.next,
      get_hparams_fn=process.get_hparams,
      set_hparams_fn=process.set_hparams,
    )
    self.num_clients = num_clients
    self.max_clients = max_clients


class StoredStateClientWork(StatefulClientWork):
  """The stateful client work whose client states live in a `ClientStore`.

  Its TFF state holds the cohort's rows only (`row_ids`, `client_states`,
  `has_state` over `max_clients` rows); a driver process
  (`tff_aggregators.with_client_store`) fills them from the store before
  each round and writes them back after it.

  Attributes:
    client_store: The `ClientStore` of every client's optimizer state.
    num_clients: The population N.
    max_clients: The cohort table's rows.
    leaf_specs: The `tf.TensorSpec`s of a client's optimizer state leaves.
  """

  def __init__(
    self,
    process: tff.learning.templates.ClientWorkProcess,
    *,
    client_store: client_store_lib.ClientStore,
    num_clients: int,
    max_clients: int,
    leaf_specs: list[tf.TensorSpec],
  ):
    super().__init__(process, num_clients=num_clients, max_clients=max_clients)
    self.client_store = client_store
    self.leaf_specs = leaf_specs


def _row_type(leaf_specs):
  """A client's row: its id and its state leaves, all float32."""
  return tff.types.to_type(
    collections.OrderedDict(
      [
        (identified.CLIENT_ID, tff.TensorType(np.float32)),
        (
          ROW_STATE,
          tuple(
            tff.TensorType(np.float32, s.shape.as_list()) for s in leaf_specs
          ),
        ),
      ]
    )
  )


def _build_process(
  model_fn,
  optimizer,
  initial_state,
  leaf_specs,
  *,
  client_weighting,
  loop_implementation,
  metrics_aggregator,
  num_clients,
  max_clients,
  proximal_strength,
  loss_report,
):
  """The `ClientWorkProcess` around the client update and the table write."""
  if metrics_aggregator is None:
    metrics_aggregator = tff.learning.metrics.sum_then_finalize
  with tf.Graph().as_default():
    model = model_fn()
    metrics_aggregation_fn = metrics_aggregator(model.metric_finalizers())
  data_type = tff.SequenceType(
    tff.types.to_type(
      collections.OrderedDict(
        [
          (identified.DATA, tff.types.tensorflow_to_type(model.input_spec)),
          (identified.CLIENT_ID, tff.TensorType(np.int32)),
        ]
      )
    )
  )
  weights_type = tff.learning.models.weights_type_from_model(model)
  state_type = initial_state.type_signature.result
  row_type = _row_type(leaf_specs)
  collector = collect.CollectAllFactory(max_clients).create(
    row_type, tff.TensorType(np.float32)
  )

  @tff.tensorflow.computation(state_type, weights_type, data_type)
  def client_update(state, initial_weights, client_data):
    train = _build_training(
      model_fn,
      optimizer,
      client_weighting,
      loop_implementation,
      num_clients,
      proximal_strength,
      loss_report,
    )
    return train(
      initial_weights,
      client_data,
      state[HPARAMS],
      tuple(state[CLIENT_STATES]),
      state[HAS_STATE],
      _row_ids(state),
    )

  @tff.tensorflow.computation(state_type, on_collected.collected_type(row_type))
  def write_rows(state, collected):
    return _write_rows(state, collected, row_type, num_clients)

  @tff.federated_computation
  def init_fn():
    return tff.federated_eval(initial_state, tff.SERVER)

  @tff.federated_computation(
    init_fn.type_signature.result,
    tff.FederatedType(weights_type, tff.CLIENTS),
    tff.FederatedType(data_type, tff.CLIENTS),
  )
  def next_fn(state, weights, client_data):
    client_result, outputs, rows, writes = tff.federated_map(
      client_update, (tff.federated_broadcast(state), weights, client_data)
    )
    collected = collector.next(collector.initialize(), rows, writes)
    new_state, counts = tff.federated_map(write_rows, (state, collected.result))
    measurements = tff.federated_zip(
      collections.OrderedDict(
        train=metrics_aggregation_fn(outputs), client_states=counts
      )
    )
    return tff.templates.MeasuredProcessOutput(
      new_state, client_result, measurements
    )

  return tff.learning.templates.ClientWorkProcess(
    init_fn,
    next_fn,
    get_hparams_fn=_get_hparams(state_type),
    set_hparams_fn=_set_hparams(state_type),
  )


def _get_hparams(state_type):
  @tff.tensorflow.computation(state_type)
  def get_hparams_fn(state):
    return state[HPARAMS]

  return get_hparams_fn


def _set_hparams(state_type):
  @tff.tensorflow.computation(state_type, state_type[HPARAMS])
  def set_hparams_fn(state, hparams):
    return collections.OrderedDict(
      (name, hparams if name == HPARAMS else state[name])
      for name in _state_names(state_type)
    )

  return set_hparams_fn


def _state_names(state) -> list[str]:
  """The keys of a client work state (a mapping, TFF type or struct)."""
  if isinstance(state, Mapping):
    return list(state)
  return tff.structure.name_list(state)


def _row_ids(state):
  """The cohort table's ids, or None for a table of every client."""
  return state[ROW_IDS] if ROW_IDS in _state_names(state) else None


def _positions(row_ids, client_ids):
  """(rows of `client_ids` in the table, whether each has a row).

  A table of every client has client k in row k; a cohort table (with a
  client store) has it in the first row whose id is k, if any.
  """
  if row_ids is None:
    return client_ids, tf.ones_like(client_ids, tf.bool)
  matches = tf.equal(tf.expand_dims(client_ids, -1), row_ids)
  return (
    tf.argmax(tf.cast(matches, tf.int32), axis=-1, output_type=tf.int32),
    tf.reduce_any(matches, axis=-1),
  )


def _write_rows(state, collected, row_type, num_clients):
  """The table with the collected rows written by client id, and counts.

  A row is written if its write flag (the collected weight) is positive,
  its values finite and its id in [0, num_clients).
  """
  rows = collect.unflatten(collected['values'], row_type)
  ids = tf.cast(tf.round(rows[identified.CLIENT_ID]), tf.int32)
  positions, found = _positions(_row_ids(state), ids)
  valid = tf.logical_and(
    tf.logical_and(
      collected['weights'] > 0,
      tf.reduce_all(tf.math.is_finite(collected['values']), 1),
    ),
    tf.logical_and(tf.logical_and(ids >= 0, ids < num_clients), found),
  )
  index = tf.boolean_mask(positions, valid)[:, tf.newaxis]

  def write(table, values):
    values = tf.boolean_mask(values, valid)
    if table.dtype.is_integer:
      values = tf.round(values)
    return tf.tensor_scatter_nd_update(
      table, index, tf.cast(values, table.dtype)
    )

  client_states = tuple(
    write(table, values)
    for table, values in zip(state[CLIENT_STATES], rows[ROW_STATE])
  )
  has_state = tf.tensor_scatter_nd_update(
    state[HAS_STATE], index, tf.ones(tf.shape(index)[:1], tf.bool)
  )
  new_state = collections.OrderedDict(
    [
      (HPARAMS, state[HPARAMS]),
      (CLIENT_STATES, client_states),
      (HAS_STATE, has_state),
    ]
  )
  if ROW_IDS in _state_names(state):
    new_state[ROW_IDS] = state[ROW_IDS]
  counts = collections.OrderedDict(
    [
      (ROWS_WRITTEN, tf.shape(index, out_type=tf.int32)[0]),
      (CLIENTS_WITH_STATE, tf.reduce_sum(tf.cast(has_state, tf.int32))),
    ]
  )
  return new_state, counts


def _build_training(
  model_fn,
  optimizer,
  client_weighting,
  loop_implementation,
  num_clients,
  proximal_strength,
  loss_report,
):
  """TFF's model-delta local training, starting from the client's state.

  The loop, non-finite handling and weights are those of
  `build_model_delta_update_with_tff_optimizer` (TFF 0.87). The data is
  read once: the loop state holds the client id (`NO_ID` until the first
  batch) and, at the first batch, the optimizer state is replaced by the
  client's saved one (`_start_state`) before the step. It also keeps each
  batch's size and loss: with `loss_report` (`(local_epochs,)`) the update
  is FedCDA's (delta, last epoch's loss, id), as the identified client
  work's.
  """
  model = model_fn()
  training_loop = tff_compat.build_training_loop(loop_implementation)

  @tf.function
  def train(initial_weights, data, hparams, table, has_state, row_ids):
    weights = identified.start_weights(model, initial_weights)
    specs = tuple(
      tf.TensorSpec(v.shape, v.dtype)
      for v in tf.nest.flatten(weights.trainable)
    )
    start = _start_state(
      optimizer, specs, hparams, (table, has_state, row_ids), num_clients
    )
    step_optimizer = optimizer  # FedProx: the same state, another gradient.
    if proximal_strength:
      step_optimizer = proximal.ProximalOptimizer(
        optimizer, proximal_strength, initial_weights.trainable
      )

    def reduce_fn(state, element):
      num_examples, client_id, optimizer_state, sizes, losses = state
      optimizer_state = tf.cond(
        tf.equal(client_id, identified.NO_ID),
        lambda: start(element[identified.CLIENT_ID]),
        lambda: optimizer_state,
      )
      optimizer_state, output = identified.local_step(
        model,
        step_optimizer,
        weights,
        optimizer_state,
        element[identified.DATA],
      )
      n = identified.batch_examples(output)
      return (
        num_examples + n,
        identified.one_client_id(client_id, element[identified.CLIENT_ID]),
        optimizer_state,
        sizes.write(sizes.size(), tf.cast(n, tf.float64)),
        losses.write(losses.size(), tf.cast(output.loss, tf.float64)),
      )

    def initial_state():
      array = lambda: tf.TensorArray(
        tf.float64, size=0, dynamic_size=True, element_shape=[]
      )
      return (
        tf.constant(0, tf.int64),
        tf.constant(identified.NO_ID, tf.int32),
        start(None),
        array(),
        array(),
      )

    num_examples, client_id, optimizer_state, sizes, losses = training_loop(
      reduce_fn, data, initial_state
    )
    loss = None
    if loss_report is not None:
      loss = identified.last_epoch_loss(
        sizes.stack(), losses.stack(), loss_report[0]
      )
    return _client_outputs(
      model,
      initial_weights,
      weights,
      num_examples,
      client_id,
      optimizer,
      optimizer_state,
      client_weighting,
      loss,
    )

  return train


def _start_state(optimizer, specs, hparams, saved_states, num_clients):
  """`start(client_id)`: the optimizer state the client starts from.

  `start(None)` is TFF's fresh state; `start(id)` the client's saved leaves
  if it has trained before, else the fresh state; both with `hparams` set.
  `saved_states` is the state's (table, has_state, row_ids or None).
  """
  table, has_state, row_ids = saved_states

  def fresh():
    return tf.nest.map_structure(
      tf.convert_to_tensor,
      optimizer.set_hparams(optimizer.initialize(specs), hparams),
    )

  def saved(position):
    leaves = [tf.gather(leaf, position) for leaf in table]
    state = with_client_state_leaves(
      optimizer, optimizer.initialize(specs), leaves
    )
    return tf.nest.map_structure(
      tf.convert_to_tensor, optimizer.set_hparams(state, hparams)
    )

  def start(client_id):
    if client_id is None:
      return fresh()
    checks = [
      tf.debugging.assert_non_negative(
        client_id, message=identified.negative_message()
      ),
      tf.debugging.assert_less(
        client_id,
        num_clients,
        message=identified.outside_message(None, num_clients, BUILDER),
      ),
    ]
    with tf.control_dependencies(checks):
      client_id = tf.identity(client_id)
    position, found = _positions(row_ids, client_id)
    if row_ids is not None:  # A cohort table: the driver must have filled it.
      with tf.control_dependencies(
        [
          tf.debugging.assert_equal(
            found,
            True,
            message=(
              f'{BUILDER}(client_store=...): the round has no row for this '
              "client (the driver fills the cohort's rows): wrap the process "
              'with tff_aggregators.with_client_store(process, client_work), '
              'as the builders here do.'
            ),
          )
        ]
      ):
        position = tf.identity(position)
    return tf.cond(
      tf.logical_and(found, tf.gather(has_state, position)),
      lambda: saved(position),
      fresh,
    )

  return start


def _client_outputs(
  model,
  initial_weights,
  weights,
  num_examples,
  client_id,
  optimizer,
  optimizer_state,
  client_weighting,
  loss=None,
):
  """(ClientResult, metrics, row, write flag) as TFF's client work gives.

  With a `loss`, the update is the identified client work's (FedCDA's):
  `OrderedDict(delta, loss, client_id)`.
  """
  delta, weight, non_finite = identified.delta_and_weight(
    model, initial_weights, weights, num_examples, client_weighting
  )
  written = tf.logical_and(
    tf.equal(non_finite, 0), tf.not_equal(client_id, identified.NO_ID)
  )
  row = collections.OrderedDict(
    [
      (identified.CLIENT_ID, tf.cast(client_id, tf.float32)),
      (
        ROW_STATE,
        tuple(
          tf.cast(leaf, tf.float32)
          for leaf in client_state_leaves(optimizer, optimizer_state)
        ),
      ),
    ]
  )
  update = delta
  if loss is not None:
    update = collections.OrderedDict(
      [
        (identified.DELTA, delta),
        (identified.LOSS, loss),
        (identified.CLIENT_ID, tf.cast(client_id, tf.float32)),
      ]
    )
  return (
    tff.learning.templates.ClientResult(update=update, update_weight=weight),
    model.report_local_unfinalized_metrics(),
    row,
    tf.cast(written, tf.float32),
  )
