"""FedAvg client work that also reports the client's id and training loss.

Methods that keep per-client state on the server (FedCDA's history of each
client's models) need a stable client id with every update, and FedCDA's
objective needs the client's training loss. TFF has no client ids inside
computations, so each client's data carries it:

  client_data = with_client_ids(datasets, ids)
  # [OrderedDict(data=<dataset>, client_id=<dataset of one int32>), ...]

The local training is that of `tff.learning.templates.
build_model_delta_client_work` (the same loop over the batches, optimizer
hyperparameters in the state, metrics and weights). The update is

  OrderedDict(delta=<initial - trained trainable weights>,
              loss=<the client's mean training loss of its last epoch>,
              client_id=<the id as float32, exact below 2**24>)

with the usual weight (0 for a non-finite update). FedCDA's f_n is the mean
training loss of the last local epoch (spec 2.5): with `local_epochs=E` the
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

from tensorflow_federated.python.learning import loop_builder
from tensorflow_federated.python.learning import tensor_utils

from tff_aggregators.client_works import with_hparams

DATA = 'data'
CLIENT_ID = 'client_id'
DELTA = 'delta'
LOSS = 'loss'
MAX_CLIENT_ID = 2**24  # Ids travel as float32 in the update.


def with_client_ids(
    datasets: Sequence[tf.data.Dataset], client_ids: Sequence[int]
) -> list[collections.OrderedDict]:
  """Pairs each client's dataset with its integer id, as the work expects."""
  if len(datasets) != len(client_ids):
    raise ValueError(
        f'{len(datasets)} datasets but {len(client_ids)} client ids.'
    )
  result = []
  for dataset, client_id in zip(datasets, client_ids):
    if not 0 <= int(client_id) < MAX_CLIENT_ID:
      raise ValueError(
          f'Client ids must be integers in [0, 2**24), got {client_id}.'
      )
    result.append(collections.OrderedDict([
        (DATA, dataset),
        (CLIENT_ID, tf.data.Dataset.from_tensors(np.int32(client_id))),
    ]))
  return result


def expects_client_ids(process: Any) -> bool:
  """Whether `process.next`'s client data is `with_client_ids`'s structure.

  A process that is not a TFF computation (FedCDA with an external history
  store) says so with a boolean attribute `expects_client_ids`.
  """
  declared = getattr(process, 'expects_client_ids', None)
  if isinstance(declared, bool):
    return declared
  client_data = process.next.type_signature.parameter[1]
  member = getattr(client_data, 'member', None)
  if not isinstance(member, tff.StructType):
    return False
  return CLIENT_ID in dir(member)


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
    A `ClientWorkProcess` whose client data is `with_client_ids`'s.
  """
  if local_epochs is not None and int(local_epochs) < 1:
    raise ValueError(f'local_epochs must be >= 1, got {local_epochs}.')

  def client_data_type(element_type):
    return tff.types.to_type(collections.OrderedDict([
        (DATA, tff.SequenceType(element_type)),
        (CLIENT_ID, tff.SequenceType(tff.TensorType(np.int32))),
    ]))

  def client_update(hparams, initial_weights, client_data):
    train = _build_training(model_fn, optimizer, client_weighting,
                            loop_implementation, local_epochs)
    client_id = client_data[CLIENT_ID].reduce(
        tf.constant(-1, tf.int32), lambda unused, x: x
    )
    delta, weight, loss, outputs = train(
        initial_weights, client_data[DATA], hparams)
    value = collections.OrderedDict([
        (DELTA, delta),
        (LOSS, loss),
        (CLIENT_ID, tf.cast(client_id, tf.float32)),
    ])
    return (
        tff.learning.templates.ClientResult(
            update=value, update_weight=weight
        ),
        outputs,
    )

  return with_hparams.build_client_work(
      model_fn, optimizer, client_update,
      client_data_type_fn=client_data_type,
      metrics_aggregator=metrics_aggregator)


def _build_training(model_fn, optimizer, client_weighting,
                    loop_implementation, local_epochs):
  """The local training of TFF's model-delta client work, plus the loss.

  The loop, non-finite handling and weights are those of
  `build_model_delta_update_with_tff_optimizer` (TFF 0.87); the loop state
  also accumulates the loss of the last epoch's examples.
  """
  model = model_fn()
  training_loop = loop_builder.build_training_loop(
      loop_implementation=loop_implementation
  )

  def batch_size(output):
    if output.num_examples is None:
      return tf.shape(output.predictions, out_type=tf.int64)[0]
    return tf.cast(output.num_examples, tf.int64)

  @tf.function
  def train(initial_weights, data, hparams):
    weights = tff.learning.models.ModelWeights.from_model(model)
    tf.nest.map_structure(lambda a, b: a.assign(b), weights, initial_weights)
    if local_epochs is None:
      last_epoch_start = tf.constant(0.0, tf.float64)
    else:  # The examples before the last of E passes.
      total = data.reduce(
          tf.constant(0, tf.int64),
          lambda n, batch: n + tf.cast(
              tf.shape(tf.nest.flatten(batch)[0], out_type=tf.int64)[0],
              tf.int64))
      last_epoch_start = (tf.cast(total, tf.float64) * (local_epochs - 1)
                          / local_epochs)

    def reduce_fn(state, batch):
      num_examples, loss_sum, loss_count, optimizer_state = state
      with tf.GradientTape() as tape:
        output = model.forward_pass(batch, training=True)
      gradients = tape.gradient(output.loss, weights.trainable)
      optimizer_state, updated = optimizer.next(
          optimizer_state,
          tuple(tf.nest.flatten(weights.trainable)),
          tuple(tf.nest.flatten(gradients)),
      )
      tf.nest.map_structure(
          lambda a, b: a.assign(b), weights.trainable,
          tf.nest.pack_sequence_as(weights.trainable, updated))
      n = batch_size(output)
      seen = tf.cast(num_examples + n, tf.float64)
      share = tf.clip_by_value(seen - last_epoch_start, 0.0,
                               tf.cast(n, tf.float64))
      return (num_examples + n,
              loss_sum + share * tf.cast(output.loss, tf.float64),
              loss_count + share, optimizer_state)

    def initial_state():
      specs = tf.nest.map_structure(
          lambda v: tf.TensorSpec(v.shape, v.dtype),
          tuple(tf.nest.flatten(weights.trainable)),
      )
      optimizer_state = optimizer.set_hparams(
          optimizer.initialize(specs), hparams)
      zero = tf.constant(0.0, tf.float64)
      return (tf.constant(0, tf.int64), zero, zero, optimizer_state)

    num_examples, loss_sum, loss_count, _ = training_loop(
        reduce_fn, data, initial_state)
    delta = tf.nest.map_structure(
        tf.subtract, initial_weights.trainable, weights.trainable)
    delta, non_finite = tensor_utils.zero_all_if_any_non_finite(delta)
    if non_finite > 0:  # No weight, no metrics, as TFF's client work.
      weight = tf.constant(0.0, tf.float32)
      model.reset_metrics()
    elif client_weighting == tff.learning.ClientWeighting.NUM_EXAMPLES:
      weight = tf.cast(num_examples, tf.float32)
    else:
      weight = tf.constant(1.0, tf.float32)
    loss = tf.cast(tf.math.divide_no_nan(loss_sum, loss_count), tf.float32)
    return delta, weight, loss, model.report_local_unfinalized_metrics()

  return train
