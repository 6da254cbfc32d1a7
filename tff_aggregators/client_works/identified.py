"""FedAvg client work that also reports the client's id and training loss.

Methods that keep per-client state on the server (FedCDA's history of each
client's models) need a stable client id with every update, and FedCDA's
objective needs the client's training loss. TFF has no client ids inside
computations, so each client's data carries it:

  client_data = with_client_ids(datasets, ids)
  # [OrderedDict(data=<dataset>, client_id=<dataset of one int32>), ...]

The local training is TFF's own (the update of
`tff.learning.templates.build_model_delta_client_work`, same optimizer
hyperparameters in the state, same metrics). The update is

  OrderedDict(delta=<initial - trained trainable weights>,
              loss=<the client's mean training loss over its local steps>,
              client_id=<the id as float32, exact below 2**24>)

with the usual weight (0 for a non-finite update). The loss is TFF's loss
metric of the client, i.e. over all local epochs (FedCDA's paper uses the
last epoch; identical with one local epoch).
"""

import collections
from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tensorflow_federated.python.learning.templates import model_delta_client_work

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


def expects_client_ids(process: tff.templates.IterativeProcess) -> bool:
  """Whether `process.next`'s client data is `with_client_ids`'s structure."""
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
) -> tff.learning.templates.ClientWorkProcess:
  """TFF's model-delta client work, reporting the client id and loss too.

  Args:
    model_fn: No-arg callable returning a `tff.learning.models.VariableModel`.
    optimizer: The client `tff.learning.optimizers.Optimizer`; its
      hyperparameters are the process's (`get_hparams`/`set_hparams`).
    client_weighting: As in `build_model_delta_client_work`.
    metrics_aggregator: As in `build_model_delta_client_work`.
    loop_implementation: As in `build_model_delta_client_work`.

  Returns:
    A `ClientWorkProcess` whose client data is `with_client_ids`'s.
  """
  if metrics_aggregator is None:
    metrics_aggregator = tff.learning.metrics.sum_then_finalize
  with tf.Graph().as_default():
    model = model_fn()
    metrics_aggregation_fn = metrics_aggregator(model.metric_finalizers())
  element_type = tff.types.tensorflow_to_type(model.input_spec)
  client_data_type = tff.types.to_type(collections.OrderedDict([
      (DATA, tff.SequenceType(element_type)),
      (CLIENT_ID, tff.SequenceType(tff.TensorType(np.int32))),
  ]))
  weights_type = tff.learning.models.weights_type_from_model(model)
  initial_hparams = optimizer.get_hparams(
      optimizer.initialize(tf.TensorSpec([], tf.float32))
  )

  @tff.federated_computation
  def init_fn():
    return tff.federated_value(initial_hparams, tff.SERVER)

  state_type = init_fn.type_signature.result.member

  @tff.tensorflow.computation(state_type)
  def get_hparams_fn(state):
    return state

  @tff.tensorflow.computation(state_type, state_type)
  def set_hparams_fn(state, hparams):
    del state
    return hparams

  @tff.tensorflow.computation(state_type, weights_type, client_data_type)
  def client_update(hparams, initial_weights, client_data):
    update = model_delta_client_work.build_model_delta_update_with_tff_optimizer(
        model_fn=model_fn,
        weighting=client_weighting,
        loop_implementation=loop_implementation,
    )
    result, outputs = update(
        optimizer, initial_weights, client_data[DATA], hparams
    )
    total, count = outputs['loss']
    client_id = client_data[CLIENT_ID].reduce(
        tf.constant(-1, tf.int32), lambda unused, x: x
    )
    value = collections.OrderedDict([
        (DELTA, result.update),
        (LOSS, tf.math.divide_no_nan(total, count)),
        (CLIENT_ID, tf.cast(client_id, tf.float32)),
    ])
    return (
        tff.learning.templates.ClientResult(
            update=value, update_weight=result.update_weight
        ),
        outputs,
    )

  @tff.federated_computation(
      init_fn.type_signature.result,
      tff.FederatedType(weights_type, tff.CLIENTS),
      tff.FederatedType(client_data_type, tff.CLIENTS),
  )
  def next_fn(state, weights, client_data):
    client_result, outputs = tff.federated_map(
        client_update, (tff.federated_broadcast(state), weights, client_data)
    )
    measurements = tff.federated_zip(
        collections.OrderedDict(train=metrics_aggregation_fn(outputs))
    )
    return tff.templates.MeasuredProcessOutput(
        state, client_result, measurements
    )

  return tff.learning.templates.ClientWorkProcess(
      init_fn,
      next_fn,
      get_hparams_fn=get_hparams_fn,
      set_hparams_fn=set_hparams_fn,
  )
