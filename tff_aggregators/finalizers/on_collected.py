"""Finalizers whose update is `CollectAllFactory`'s result.

Methods that need every client's model (FedLAW, FedSA) collect the clients'
deltas with `tff_aggregators.CollectAllFactory` and compute the new global
model in a finalizer, which also sees the current global model: client k's
model is `w - delta_k` (TFF's delta is initial minus trained).
"""

import collections
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators.aggregators import collect


def collected_type(trainable_type: Any) -> tff.Type:
  """The type of `CollectAllFactory`'s result for `trainable_type` values."""
  return tff.types.to_type(
      collections.OrderedDict(
          values=tff.TensorType(np.float32, [None, collect.flat_size(
              trainable_type)]),
          weights=tff.TensorType(np.float32, [None]),
      )
  )


def valid_client_models(
    weights: tf.Tensor, collected: Any
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
  """The client models (rows) of clients with a positive, finite weight.

  Args:
    weights: The flat global trainable weights, float32 [D].
    collected: `OrderedDict(values=[n, D] deltas, weights=[n])`.

  Returns:
    (models [m, D] = weights - delta for the m valid clients in collected
    order, their weights [m], the valid mask [n]). A client is valid if its
    weight is positive and finite and its delta finite (TFF's client work
    gives a non-finite delta weight 0).
  """
  deltas, client_weights = collected['values'], collected['weights']
  valid = tf.logical_and(
      tf.logical_and(client_weights > 0, tf.math.is_finite(client_weights)),
      tf.reduce_all(tf.math.is_finite(deltas), axis=1),
  )
  models = weights[tf.newaxis, :] - tf.boolean_mask(deltas, valid)
  return models, tf.boolean_mask(client_weights, valid), valid


def build_collected_finalizer(
    model_weights_type: tff.StructType,
    initial_state: tff.Computation,
    step: Callable[..., tff.Computation],
    *,
    update_type: Any = None,
) -> tff.learning.templates.FinalizerProcess:
  """A `FinalizerProcess` around one server TF computation.

  Args:
    model_weights_type: The `tff.learning.models.ModelWeights` type.
    initial_state: A no-arg `tff.tensorflow.computation` giving the state.
    step: `step(state_type, trainable_type, collected_type)` returns a
      `tff.tensorflow.computation` mapping (state, trainable weights,
      collected) to (new state, new trainable weights, measurements).
      Non-trainable weights pass through unchanged.
    update_type: The type of the collected client values; default the
      trainable weights (model deltas).

  Returns:
    The finalizer; its update is `CollectAllFactory`'s result.
  """
  if (
      not isinstance(model_weights_type, tff.StructWithPythonType)
      or model_weights_type.python_container
      is not tff.learning.models.ModelWeights
  ):
    raise TypeError(
        'model_weights_type must be a tff.learning.models.ModelWeights type, '
        f'got {model_weights_type}.'
    )
  trainable_type = model_weights_type.trainable
  update_type = collected_type(
      trainable_type if update_type is None else update_type
  )
  server_step = step(
      initial_state.type_signature.result, trainable_type, update_type
  )

  @tff.federated_computation()
  def init_fn():
    return tff.federated_eval(initial_state, tff.SERVER)

  @tff.federated_computation(
      init_fn.type_signature.result,
      tff.FederatedType(model_weights_type, tff.SERVER),
      tff.FederatedType(update_type, tff.SERVER),
  )
  def next_fn(state, weights, collected):
    new_state, new_trainable, measurements = tff.federated_map(
        server_step, (state, weights.trainable, collected)
    )
    new_weights = tff.federated_zip(
        tff.learning.models.ModelWeights(new_trainable, weights.non_trainable)
    )
    return tff.templates.MeasuredProcessOutput(
        new_state, new_weights, measurements
    )

  return tff.learning.templates.FinalizerProcess(init_fn, next_fn)
