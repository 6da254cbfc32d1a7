"""FedAvg client work that also reports the client's id and training loss.

Methods that keep per-client state on the server (FedCDA's history of each
client's models) need a stable client id with every update, and FedCDA's
objective needs the client's training loss. TFF has no client ids inside
computations, so each element of a client's dataset carries it, and the
client data stays a plain list of datasets (what `tff.program` data sources
and `tff.learning.programs.train_model` pass):

  client_data = with_client_ids(datasets, ids)
  # each element: OrderedDict(data=<the original element>, client_id=int32)

Integer ids index the population, [0, num_clients). TFF's string client ids
(`tff.simulation.datasets.ClientData.client_ids`) map to their position in
that list; `tff_aggregators.IdentifiedDataSource` does it and saves a
fingerprint of the list with the program state (docs/methods/fedcda.md).

The local training is that of `tff.learning.templates.
build_model_delta_client_work` (the same loop over the batches, optimizer
hyperparameters in the state, metrics and weights). The update is

  OrderedDict(delta=<initial - trained trainable weights>,
              loss=<the client's mean training loss of its last epoch>,
              client_id=<the id as float32, exact below 2**24>)

with the usual weight (0 for a non-finite update). An empty dataset reports
id -1 and weight 0. FedCDA's f_n is the client's mean training loss of its
last local epoch (the paper's objective, eq. 8): with `local_epochs=E` the
client data is taken to be its examples repeated E times (as the
experiments' preprocessing makes it, `repeat(E).batch(B)`), and the loss is
the example-weighted mean over the last 1/E of the examples seen (a batch
straddling two epochs counts with the share of its examples in the last
one, at its mean loss). With `local_epochs=None` the loss is over all local
steps.
"""

import collections
from collections.abc import Callable, Sequence
from typing import Any, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators import tff_compat
from tff_aggregators.client_works import with_hparams

DATA = 'data'
CLIENT_ID = 'client_id'
DELTA = 'delta'
LOSS = 'loss'
MAX_CLIENT_ID = 2**24  # Ids travel as float32 in the update.
NO_ID = -1  # What an empty dataset reports.
_ID_ATTRIBUTE = '_tff_aggregators_client_id'


def attach_client_id(
  dataset: tf.data.Dataset, client_id: int
) -> tf.data.Dataset:
  """`dataset`, each element as `OrderedDict(data=element, client_id=id)`.

  The returned dataset object also carries the id as a Python attribute
  (`tagged_client_id` reads it), so a driver can learn a cohort's ids
  without reading the data.
  """
  if not _is_int(client_id):
    raise ValueError(outside_message(client_id))
  ids = tf.data.Dataset.from_tensors(np.int32(client_id)).repeat()
  tagged = tf.data.Dataset.zip((dataset, ids)).map(
    lambda element, i: collections.OrderedDict(
      [(DATA, element), (CLIENT_ID, i)]
    )
  )
  setattr(tagged, _ID_ATTRIBUTE, int(client_id))
  return tagged


def tagged_client_id(dataset: tf.data.Dataset) -> Optional[int]:
  """The id `attach_client_id` gave this dataset object, if it did."""
  return getattr(dataset, _ID_ATTRIBUTE, None)


def check_client_ids(
  client_ids: Sequence[Any],
  num_clients: Optional[int] = None,
  builder: Optional[str] = None,
) -> list[int]:
  """The cohort's ids as ints; raises on a duplicate or an id out of range.

  `builder`: the builder (or function) given `num_clients`, named in the
  message.
  """
  limit = MAX_CLIENT_ID if num_clients is None else num_clients
  checked = []
  for client_id in client_ids:
    if isinstance(client_id, (str, bytes)):
      raise ValueError(
        f'Client id {client_id!r} is a string; clients are indexed by '
        'integers in [0, num_clients). For TFF ClientData use '
        'tff_aggregators.IdentifiedDataSource(client_data), or map each id '
        'to its position in client_data.client_ids.'
      )
    if not _is_int(client_id) or not 0 <= client_id < limit:
      raise ValueError(outside_message(client_id, num_clients, builder))
    checked.append(int(client_id))
  duplicates = sorted({i for i in checked if checked.count(i) > 1})
  if duplicates:
    raise ValueError(
      f'Client id {duplicates[0]} appears more than once in the cohort '
      f"{checked}; sample each round's clients without replacement."
    )
  return checked


def _is_int(client_id: Any) -> bool:
  return isinstance(client_id, (int, np.integer)) and not isinstance(
    client_id, (bool, np.bool_)
  )


def check_tagged_ids(
  client_data: Sequence[Any], num_clients: int, builder: str
) -> None:
  """`check_client_ids` on the ids `attach_client_id` tagged (reads no data).

  Catches datasets tagged one by one, which `with_client_ids` did not check;
  datasets without a tag are checked inside the round.
  """
  tags = [tagged_client_id(dataset) for dataset in client_data]
  check_client_ids([t for t in tags if t is not None], num_clients, builder)


def outside_message(
  client_id: Any = None,
  num_clients: Optional[int] = None,
  builder: Optional[str] = None,
) -> str:
  """One line for an id that is not an integer in [0, num_clients), and the fix.

  Args:
    client_id: The id; None inside a graph, where the id is not known and the
      message is for an id at or above `num_clients` (`negative_message` is
      for the other side).
    num_clients: The population; None when none was given, the bound then
      being `MAX_CLIENT_ID`.
    builder: The builder (or function) given `num_clients`.
  """
  name = 'A client id' if client_id is None else f'Client id {client_id!r}'
  if num_clients is None:
    bound = f'[0, {MAX_CLIENT_ID})'
  else:
    given = f' given to {builder}' if builder else ''
    bound = f'the population [0, num_clients={num_clients}){given}'
  if client_id is not None:
    if not _is_int(client_id):
      where = '' if num_clients is None else f' in {bound}'
      return f'{name} is not an integer: pass int client ids{where}.'
    if client_id < 0:
      return negative_message(client_id)
  if num_clients is None:
    fix = (
      'ids travel as float32, exact only below 2**24; number clients 0, 1, ...'
    )
  elif builder == 'with_client_ids':
    fix = (
      'pass ids in that range, or give with_client_ids a larger num_clients.'
    )
  elif builder:
    fix = (
      'give tff_aggregators.with_client_ids ids in that range, or build with '
      'a larger num_clients.'
    )
  else:
    fix = 'pass ids in that range.'
  return f'{name} is outside {bound}: {fix}'


def negative_message(client_id: Any = None) -> str:
  """One line for a negative id (None: inside a graph, id not known)."""
  name = 'A client id' if client_id is None else f'Client id {client_id!r}'
  return (
    f'{name} is negative: clients are indexed by non-negative integers; give '
    'tff_aggregators.with_client_ids(datasets, ids) ids from 0 up.'
  )


def with_client_ids(
  datasets: Sequence[tf.data.Dataset],
  client_ids: Sequence[int],
  *,
  num_clients: Optional[int] = None,
) -> list[tf.data.Dataset]:
  """The cohort's datasets with each client's integer id in every element.

  Args:
    datasets: One `tf.data.Dataset` per client of the round.
    client_ids: Their distinct integer ids, in [0, num_clients).
    num_clients: The population, to refuse ids outside it (optional).

  Returns:
    The datasets as `attach_client_id` makes them, ready for `next`.

  Raises:
    ValueError: On a count mismatch, a string, duplicate or out-of-range id.
  """
  if len(datasets) != len(client_ids):
    raise ValueError(
      f'{len(datasets)} datasets but {len(client_ids)} client ids.'
    )
  ids = check_client_ids(
    client_ids, num_clients, None if num_clients is None else 'with_client_ids'
  )
  for dataset in datasets:
    if not isinstance(dataset, tf.data.Dataset):
      raise TypeError(
        f'with_client_ids takes tf.data.Datasets, got {type(dataset).__name__}.'
      )
  return [attach_client_id(d, i) for d, i in zip(datasets, ids)]


def carries_client_ids(element_spec: Any) -> bool:
  """Whether a dataset's `element_spec` is `attach_client_id`'s."""
  return isinstance(element_spec, collections.abc.Mapping) and set(
    element_spec
  ) == {DATA, CLIENT_ID}


def expects_client_ids(process: Any) -> bool:
  """Whether `process.next`'s client data must carry client ids.

  A process that is not a TFF computation (FedCDA with an external history
  store) says so with a boolean attribute `expects_client_ids`.
  """
  declared = getattr(process, 'expects_client_ids', None)
  if isinstance(declared, bool):
    return declared
  client_data = process.next.type_signature.parameter[1]
  element = getattr(getattr(client_data, 'member', None), 'element', None)
  if not isinstance(element, tff.StructType):
    return False
  return CLIENT_ID in dir(element)


def check_identified_cohort(
  client_data: Any, max_clients: int, builder: str
) -> None:
  """Raises before a round if its client data cannot carry FedCDA's ids."""
  if not isinstance(client_data, (list, tuple)):
    raise TypeError(
      f'The client data of a {builder} round is a list of tf.data.Datasets '
      f'(one per client), got {type(client_data).__name__}.'
    )
  for dataset in client_data:
    spec = getattr(dataset, 'element_spec', None)
    if not carries_client_ids(spec):
      raise ValueError(
        f"{builder} needs each client's id in its data: pass "
        'tff_aggregators.with_client_ids(datasets, ids) (integer ids in '
        '[0, num_clients)) or use tff_aggregators.IdentifiedDataSource; '
        f'got elements {spec}.'
      )


def check_local_epochs(local_epochs: Optional[int]) -> None:
  """Raises `ValueError` unless `local_epochs` is None or at least 1."""
  if local_epochs is not None and int(local_epochs) < 1:
    raise ValueError(f'local_epochs must be >= 1, got {local_epochs}.')


def build_identified_client_work(
  model_fn: Callable[[], tff.learning.models.VariableModel],
  optimizer: tff.learning.optimizers.Optimizer,
  *,
  client_weighting: tff.learning.ClientWeighting = (
    tff.learning.ClientWeighting.NUM_EXAMPLES
  ),
  metrics_aggregator=None,
  loop_implementation: tff.learning.LoopImplementation = (
    tff.learning.LoopImplementation.DATASET_REDUCE
  ),
  local_epochs: Optional[int] = None,
) -> tff.learning.templates.ClientWorkProcess:
  """TFF's model-delta client work, reporting the client id and loss too.

  Args:
    model_fn: No-arg callable returning a `tff.learning.models.VariableModel`.
    optimizer: The client `tff.learning.optimizers.Optimizer`; its
      hyperparameters are the process's (`get_hparams`/`set_hparams`).
    client_weighting: As in `build_model_delta_client_work`.
    metrics_aggregator: As in `build_model_delta_client_work`.
    loop_implementation: As in `build_model_delta_client_work`.
    local_epochs: E, the passes over its examples the client data holds:
      the loss is the last pass's. None: the loss is over all local steps.

  Returns:
    A `ClientWorkProcess` whose client data is `with_client_ids`'s: each
    element `OrderedDict(data=<model input>, client_id=int32)`.
  """
  check_local_epochs(local_epochs)

  def client_data_type(element_type):
    return tff.SequenceType(
      tff.types.to_type(
        collections.OrderedDict(
          [
            (DATA, element_type),
            (CLIENT_ID, tff.TensorType(np.int32)),
          ]
        )
      )
    )

  def client_update(hparams, initial_weights, client_data):
    train = _build_training(
      model_fn, optimizer, client_weighting, loop_implementation, local_epochs
    )
    delta, weight, loss, client_id, outputs = train(
      initial_weights, client_data, hparams
    )
    value = collections.OrderedDict(
      [
        (DELTA, delta),
        (LOSS, loss),
        (CLIENT_ID, tf.cast(client_id, tf.float32)),
      ]
    )
    return (
      tff.learning.templates.ClientResult(update=value, update_weight=weight),
      outputs,
    )

  return with_hparams.build_client_work(
    model_fn,
    optimizer,
    client_update,
    client_data_type_fn=client_data_type,
    metrics_aggregator=metrics_aggregator,
  )


def last_epoch_loss(batch_sizes, batch_losses, local_epochs):
  """The example-weighted mean loss of the last of `local_epochs` passes.

  Args:
    batch_sizes: float64 [B], the examples of each batch, in training order.
    batch_losses: float64 [B], each batch's mean loss.
    local_epochs: E, or None for the mean over all batches.

  Returns:
    float32 scalar; 0 for no batches. A batch straddling two epochs counts
    with the share of its examples in the last one.
  """
  seen = tf.cumsum(batch_sizes)
  if local_epochs is None:
    start = tf.constant(0.0, tf.float64)
  else:  # The examples before the last of E passes.
    start = tf.reduce_sum(batch_sizes) * (local_epochs - 1) / local_epochs
  share = tf.clip_by_value(seen - start, 0.0, batch_sizes)
  return tf.cast(
    tf.math.divide_no_nan(
      tf.reduce_sum(share * batch_losses), tf.reduce_sum(share)
    ),
    tf.float32,
  )


def delta_and_weight(
  model, initial_weights, weights, num_examples, client_weighting
):
  """(delta, weight, non_finite) of a trained client, as TFF's client work.

  A non-finite delta becomes zeros of weight 0 and the client's metrics are
  reset (`build_model_delta_client_work`, TFF 0.87). Runs in a tf.function.
  """
  delta = tf.nest.map_structure(
    tf.subtract, initial_weights.trainable, weights.trainable
  )
  delta, non_finite = tff_compat.zero_all_if_any_non_finite(delta)
  if non_finite > 0:  # No weight, no metrics, as TFF's client work.
    weight = tf.constant(0.0, tf.float32)
    model.reset_metrics()
  elif client_weighting == tff.learning.ClientWeighting.NUM_EXAMPLES:
    weight = tf.cast(num_examples, tf.float32)
  else:
    weight = tf.constant(1.0, tf.float32)
  return delta, weight, non_finite


def batch_examples(output) -> tf.Tensor:
  """A batch's examples (int64), as TFF's client work counts them."""
  if output.num_examples is None:
    return tf.shape(output.predictions, out_type=tf.int64)[0]
  return tf.cast(output.num_examples, tf.int64)


def one_client_id(carried_id: tf.Tensor, element_id: tf.Tensor) -> tf.Tensor:
  """`element_id`, checked (in the graph) against the id carried so far.

  A client's elements must all carry its one id (`NO_ID` before the first
  element): a dataset with two ids would read one client's state and report
  under another's id, so the round fails instead. Its cost is below what we
  could measure: on the MLP, rounds with and without it differed by +7 us a
  step (one batch) at batch size 10 and by -1.5 ms a step at batch size 50,
  against about 2.2 ms a step with TFF's per-round cost included
  (2026-12-07, 2-core development machine, beside another job).
  """
  check = tf.debugging.Assert(
    tf.logical_or(
      tf.equal(carried_id, NO_ID), tf.equal(carried_id, element_id)
    ),
    [
      'A client id changes within one dataset (more than one client id in '
      'it): give each client its own dataset with '
      'tff_aggregators.with_client_ids(datasets, ids). Ids (first, then):',
      carried_id,
      element_id,
    ],
  )
  # -1 is what an empty dataset reports: an element must not carry it.
  non_negative = tf.debugging.assert_non_negative(
    element_id, message=negative_message()
  )
  with tf.control_dependencies([check, non_negative]):
    return tf.identity(element_id)


def start_weights(model, initial_weights) -> tff.learning.models.ModelWeights:
  """The model's weights (variables), set to `initial_weights`."""
  weights = tff.learning.models.ModelWeights.from_model(model)
  tf.nest.map_structure(lambda a, b: a.assign(b), weights, initial_weights)
  return weights


def local_step(model, optimizer, weights, optimizer_state, batch):
  """One step of TFF's local training; (new optimizer state, output).

  The gradient of the batch's loss through `model.forward_pass`, the
  optimizer's `next` on the flattened trainable weights, and the new
  weights assigned, as `build_model_delta_update_with_tff_optimizer`.
  """
  with tf.GradientTape() as tape:
    output = model.forward_pass(batch, training=True)
  gradients = tape.gradient(output.loss, weights.trainable)
  optimizer_state, updated = optimizer.next(
    optimizer_state,
    tuple(tf.nest.flatten(weights.trainable)),
    tuple(tf.nest.flatten(gradients)),
  )
  tf.nest.map_structure(
    lambda a, b: a.assign(b),
    weights.trainable,
    tf.nest.pack_sequence_as(weights.trainable, updated),
  )
  return optimizer_state, output


def _build_training(
  model_fn, optimizer, client_weighting, loop_implementation, local_epochs
):
  """The local training of TFF's model-delta client work, plus id and loss.

  The loop, non-finite handling and weights are those of
  `build_model_delta_update_with_tff_optimizer` (TFF 0.87). The data is
  read once, as TFF's work reads it (a second pass would see another order
  of a dataset shuffled with `reshuffle_each_iteration`): the loop state
  also keeps the client id and each batch's size and loss, from which the
  last epoch's loss is computed after the loop (`last_epoch_loss`).
  """
  model = model_fn()
  training_loop = tff_compat.build_training_loop(loop_implementation)

  @tf.function
  def train(initial_weights, data, hparams):
    weights = start_weights(model, initial_weights)

    def reduce_fn(state, element):
      num_examples, client_id, sizes, losses, optimizer_state = state
      optimizer_state, output = local_step(
        model, optimizer, weights, optimizer_state, element[DATA]
      )
      n = batch_examples(output)
      index = sizes.size()
      return (
        num_examples + n,
        one_client_id(client_id, element[CLIENT_ID]),
        sizes.write(index, tf.cast(n, tf.float64)),
        losses.write(index, tf.cast(output.loss, tf.float64)),
        optimizer_state,
      )

    def initial_state():
      specs = tf.nest.map_structure(
        lambda v: tf.TensorSpec(v.shape, v.dtype),
        tuple(tf.nest.flatten(weights.trainable)),
      )
      optimizer_state = optimizer.set_hparams(
        optimizer.initialize(specs), hparams
      )
      array = lambda: tf.TensorArray(
        tf.float64, size=0, dynamic_size=True, element_shape=[]
      )
      return (
        tf.constant(0, tf.int64),
        tf.constant(NO_ID, tf.int32),
        array(),
        array(),
        optimizer_state,
      )

    num_examples, client_id, sizes, losses, _ = training_loop(
      reduce_fn, data, initial_state
    )
    delta, weight, _ = delta_and_weight(
      model, initial_weights, weights, num_examples, client_weighting
    )
    loss = last_epoch_loss(sizes.stack(), losses.stack(), local_epochs)
    return (
      delta,
      weight,
      loss,
      client_id,
      model.report_local_unfinalized_metrics(),
    )

  return train
