"""What finalizers need to work on `CollectAllFactory`'s result.

Methods that need every client's model (FedLAW, FedSA, FedCDA) collect the
clients' updates with `tff_aggregators.CollectAllFactory` and compute the new
global model in a finalizer, which also sees the current global model:
client k's model is `w - delta_k` (TFF's delta is initial minus trained).
"""

import collections
from typing import Any, Optional

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
  weights: tf.Tensor,
  collected: Any,
  *,
  deltas: Optional[tf.Tensor] = None,
  also_valid: Optional[tf.Tensor] = None,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
  """The client models (rows) of clients with a positive, finite weight.

  FedLAW and FedSA collect the delta alone and call this with two arguments;
  FedCDA (`fedcda.participants`) collects rows of (client id, delta, loss)
  and passes the delta columns and its id check.

  Args:
    weights: The flat global trainable weights, float32 [D].
    collected: `OrderedDict(values=[n, V] rows, weights=[n])`; the rows are
      the deltas unless `deltas` is given.
    deltas: The delta columns of the rows, [n, D], when the rows hold more
      than the delta (default: the rows).
    also_valid: [n] bool, a further condition a valid client must meet
      (default: none).

  Returns:
    (models [m, D] = weights - delta for the m valid clients in collected
    order, their weights [m], the valid mask [n]). A client is valid if its
    weight is positive and finite, its whole row finite (TFF's client work
    gives a non-finite delta weight 0) and `also_valid` holds.
  """
  rows, client_weights = collected['values'], collected['weights']
  valid = tf.logical_and(
    tf.logical_and(client_weights > 0, tf.math.is_finite(client_weights)),
    tf.reduce_all(tf.math.is_finite(rows), axis=1),
  )
  if also_valid is not None:
    valid = tf.logical_and(valid, also_valid)
  deltas = rows if deltas is None else deltas
  models = weights[tf.newaxis, :] - tf.boolean_mask(deltas, valid)
  return models, tf.boolean_mask(client_weights, valid), valid
