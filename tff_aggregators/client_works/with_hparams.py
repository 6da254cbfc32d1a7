"""Client work whose state is the client optimizer's hyperparameters.

The shape of `tff.learning.templates.build_model_delta_client_work`: the
state (e.g. `learning_rate`, `momentum`) is broadcast every round and each
client trains with it, so `get_hparams`/`set_hparams` on the learning process
reach the clients (a client learning-rate schedule sets them every round).
Client works of this package that change what clients compute (the loss they
report, a proximal term) share it.
"""

import collections
from collections.abc import Callable
from typing import Any

import tensorflow as tf
import tensorflow_federated as tff


def check_model_fn(model_fn: Any, builder: str) -> None:
  """Raises `TypeError` unless `model_fn` is a no-arg VariableModel factory."""
  if isinstance(model_fn, tff.learning.models.FunctionalModel):
    raise TypeError(
      f'{builder} takes a no-arg callable returning a '
      'tff.learning.models.VariableModel (e.g. lambda: '
      'tff.learning.models.from_keras_model(...)), not a FunctionalModel: '
      'its server rule and client work are built on VariableModel.'
    )
  if not callable(model_fn):
    raise TypeError(
      f'{builder} needs model_fn, a no-arg callable returning a '
      f'tff.learning.models.VariableModel; got {model_fn!r}.'
    )


def build_client_work(
  model_fn: Callable[[], tff.learning.models.VariableModel],
  optimizer: tff.learning.optimizers.Optimizer,
  client_update_fn: Callable[[Any, Any, Any], Any],
  *,
  client_data_type_fn: Callable[[tff.Type], tff.Type] = tff.SequenceType,
  metrics_aggregator=None,
) -> tff.learning.templates.ClientWorkProcess:
  """A `ClientWorkProcess` with `optimizer`'s hyperparameters as its state.

  Args:
    model_fn: No-arg callable returning a `tff.learning.models.VariableModel`.
    optimizer: The client `tff.learning.optimizers.Optimizer`.
    client_update_fn: `(hparams, initial_weights, client_data) ->
      (tff.learning.templates.ClientResult, unfinalized metrics)`, traced as
      a `tff.tensorflow.computation` (it builds its model inside).
    client_data_type_fn: The client data type from the model's input type;
      default a sequence of batches.
    metrics_aggregator: As in `build_model_delta_client_work`; default
      `tff.learning.metrics.sum_then_finalize`.

  Returns:
    The process, with `get_hparams`/`set_hparams`.
  """
  check_model_fn(model_fn, 'This client work')
  if not isinstance(optimizer, tff.learning.optimizers.Optimizer):
    raise TypeError(
      'The client optimizer must be a tff.learning.optimizers.Optimizer '
      f'(e.g. tff.learning.optimizers.build_sgdm), got {optimizer!r}.'
    )
  if metrics_aggregator is None:
    metrics_aggregator = tff.learning.metrics.sum_then_finalize
  with tf.Graph().as_default():
    model = model_fn()
    metrics_aggregation_fn = metrics_aggregator(model.metric_finalizers())
  client_data_type = client_data_type_fn(
    tff.types.tensorflow_to_type(model.input_spec)
  )
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

  client_update = tff.tensorflow.computation(
    client_update_fn, state_type, weights_type, client_data_type
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
