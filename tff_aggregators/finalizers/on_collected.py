"""What finalizers need to work on `CollectAllFactory`'s result.

Methods that need every client's model (FedLAW, FedSA, FedCDA) collect the
clients' updates with `tff_aggregators.CollectAllFactory` and compute the new
global model in a finalizer, which also sees the current global model:
client k's model is `w - delta_k` (TFF's delta is initial minus trained).
"""

import collections
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators.aggregators import collect


def collected_type(value_type: Any) -> tff.Type:
  """The type of `CollectAllFactory`'s result for `value_type` values."""
  return tff.types.to_type(
    collections.OrderedDict(
      values=tff.TensorType(np.float32, [None, collect.flat_size(value_type)]),
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
