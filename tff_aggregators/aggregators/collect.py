"""Collect-all: every client's value and weight, stacked at the server.

`CollectAllFactory(max_clients)` is a
`tff.aggregators.WeightedAggregationFactory`
whose process returns, at SERVER,

  collections.OrderedDict(values=float32[n, D], weights=float32[n])

with one row per participating client (n <= max_clients): the client's value
flattened to one float32 vector (its leaves in `tf.nest.flatten` order,
reshaped to [-1], cast to float32, concatenated) and its weight cast to
float32. Nothing is dropped or altered; the measurements count the clients,
those with a non-finite value or weight, and those with weight zero.

Cost. The clients' values are collected with one `tff.federated_aggregate`
whose accumulator holds `max_clients` separate `float32[?]` slots (empty
until filled). `accumulate` flattens client k's value into slot k and passes
the other slots through without copying, so a round costs O(n * D) time (a
`tf.concat` accumulator would copy
O(n^2 * D)); `report` stacks the filled slots into `values` (one more
O(n * D) copy). Memory: the runtime holds the clients' values until the
aggregation ends and `report` adds the stacked result; the worker peaked at
about 4x the collected bytes against about 3x for `MeanFactory` (up to 100
clients x 10M parameters, benchmarks/README.md). Each `accumulate`
also runs O(max_clients) tiny control-flow ops: keep `max_clients` near the
real cohort size (hundreds, not tens of thousands).

Order. On TFF's local runtime `accumulate` runs over the clients in order, so
row i is the i-th client of the call. With several workers
(`tff.backends.native.set_mergeable_comp_execution_context`) each worker
collects a contiguous slice of the clients in order, and `merge(a, b)` puts
the rows of `a` before those of `b`. TFF 0.87's mergeable context merges the
partial results in the order the workers *finish*, so rows come in blocks
(one per worker, client order inside each block) whose block order is the
workers' completion order; it equals the client order only if partial results
are merged in worker order. Consumers that need identities should carry them
in the value (e.g. a float32 id leaf, exact below 2**24).

Limits. More than `max_clients` clients fail the round with an
`InvalidArgumentError` naming `max_clients` (raised by the worker; nothing is
silently dropped). Leaves must be floating point (float16, bfloat16, float32,
float64; float64 loses precision in the cast) with fully defined shapes;
weights must be numeric scalars. An empty cohort (0 clients) gives
`values` of shape [0, D] and `weights` of shape [0].
"""

import collections
from typing import Any, Union

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators import value_types

# Measurement names.
NUM_CLIENTS = 'num_clients'
NUM_NON_FINITE_CLIENTS = 'num_non_finite_clients'
NUM_ZERO_WEIGHT_CLIENTS = 'num_zero_weight_clients'

_NAME = 'CollectAllFactory'


def flat_size(value_type: Any) -> int:
  """D: the number of elements of a value of `value_type` (its row length)."""
  leaves = value_types.check_float_leaves(value_type, _NAME)
  return sum(value_types.num_elements(t) for t in leaves)


def flatten(value: Any) -> tf.Tensor:
  """A structure of float tensors as one float32 [D] vector (a row).

  Leaves in `tf.nest.flatten` order, each reshaped to [-1], cast to float32.
  Use it in TF code (e.g. on the global model) to match the collected rows.
  """
  leaves = tf.nest.flatten(value)
  parts = [tf.reshape(tf.cast(leaf, tf.float32), [-1]) for leaf in leaves]
  if len(parts) == 1:
    return parts[0]
  return tf.concat(parts, axis=0)


def unflatten(flat: tf.Tensor, value_type: Any, *, cast: bool = True) -> Any:
  """Inverts `flatten`: [D] -> a value of `value_type`; [n, D] -> stacked.

  Usable inside `tff.tensorflow.computation`s. With a [n, D] input every leaf
  gets a leading dimension n.

  Args:
    flat: A float tensor of shape [D] or [n, D], D = `flat_size(value_type)`.
    value_type: The `tff.Type` (or a value convertible to one) of a value.
    cast: Cast each leaf back to its dtype in `value_type` (else float32).

  Returns:
    The Python structure of `value_type` (as TFF gives it to TF code).
  """
  template = value_types.template(value_type)
  leaves = value_types.check_float_leaves(value_type, _NAME)
  flat = tf.convert_to_tensor(flat)
  size = sum(value_types.num_elements(t) for t in leaves)
  if flat.shape.rank not in (1, 2):
    raise ValueError(f'Expected a [D] or [n, D] tensor, got {flat.shape}.')
  if flat.shape[-1] is not None and flat.shape[-1] != size:
    raise ValueError(
      f'Expected rows of {size} elements for {value_type}, got {flat.shape}.'
    )
  sizes = [value_types.num_elements(t) for t in leaves]
  parts = tf.split(flat, sizes, axis=-1)
  outputs = []
  for part, leaf in zip(parts, leaves):
    shape = list(leaf.shape)
    if flat.shape.rank == 2:
      shape = tf.concat([tf.shape(flat)[:1], tf.constant(shape, tf.int32)], 0)
    part = tf.reshape(part, shape)
    if flat.shape.rank == 2:
      part.set_shape([flat.shape[0]] + list(leaf.shape))
    if cast:
      part = tf.cast(part, leaf.dtype)
    outputs.append(part)
  return tf.nest.pack_sequence_as(template, outputs)


def _overflow_message(max_clients: int) -> str:
  return (
    f'CollectAllFactory(max_clients={max_clients}): the cohort has more '
    f'than max_clients={max_clients} clients; create the factory with '
    'max_clients >= the largest cohort.'
  )


class CollectAllFactory(tff.aggregators.WeightedAggregationFactory):
  """Collects every client's (value, weight) at the server, in client order.

  The process has empty state. `next(state, value@CLIENTS, weight@CLIENTS)`
  returns at SERVER `OrderedDict(values=float32[n, D], weights=float32[n])`
  (rows as `flatten`; back to the value structure with `unflatten`) and
  measurements `OrderedDict(num_clients, num_non_finite_clients,
  num_zero_weight_clients)` (int32). See the module docstring for cost, order
  and limits.
  """

  def __init__(self, max_clients: int):
    """Initializes the factory.

    Args:
      max_clients: The largest cohort a round may have; a larger one fails the
        round with an error naming `max_clients`.

    Raises:
      TypeError: If `max_clients` is not an int.
      ValueError: If `max_clients` is not positive.
    """
    if not isinstance(max_clients, (int, np.integer)) or isinstance(
      max_clients, bool
    ):
      raise TypeError(f'max_clients must be an int, got {max_clients!r}.')
    if max_clients < 1:
      raise ValueError(f'max_clients must be positive, got {max_clients}.')
    self._max_clients = int(max_clients)

  @property
  def max_clients(self) -> int:
    return self._max_clients

  def create(
    self,
    value_type: Union[tff.TensorType, tff.StructType],
    weight_type: Union[tff.TensorType, tff.StructType],
  ) -> tff.templates.AggregationProcess:
    value_type = value_types.to_type(value_type)
    value_types.check_float_leaves(value_type, _NAME)
    weight_type = value_types.check_scalar_weight(weight_type, _NAME)
    size = flat_size(value_type)
    max_clients = self._max_clients

    client_type = tff.types.to_type(
      collections.OrderedDict(value=value_type, weight=weight_type)
    )
    acc_type = tff.types.to_type(
      collections.OrderedDict(
        rows=tuple(
          tff.TensorType(np.float32, [None]) for _ in range(max_clients)
        ),
        weights=tff.TensorType(np.float32, [max_clients]),
        num_clients=tff.TensorType(np.int32),
        num_non_finite=tff.TensorType(np.int32),
        num_zero_weight=tff.TensorType(np.int32),
      )
    )

    @tff.tensorflow.computation
    def zero():
      return collections.OrderedDict(
        rows=tuple(tf.zeros([0], tf.float32) for _ in range(max_clients)),
        weights=tf.zeros([max_clients], tf.float32),
        num_clients=tf.constant(0, tf.int32),
        num_non_finite=tf.constant(0, tf.int32),
        num_zero_weight=tf.constant(0, tf.int32),
      )

    @tff.tensorflow.computation(acc_type, client_type)
    def accumulate(acc, client):
      # Flattened here rather than in a client-side map: one computation per
      # client fewer (3.1 -> 2.5 s per call at 50 x 1M, one call each).
      row = flatten(client['value'])
      weight = tf.cast(client['weight'], tf.float32)
      finite = tf.logical_and(
        tf.reduce_all(tf.math.is_finite(row)), tf.math.is_finite(weight)
      )
      k = acc['num_clients']
      check = tf.debugging.assert_less(
        k, max_clients, message=_overflow_message(max_clients)
      )
      with tf.control_dependencies([check]):
        k = tf.identity(k)
      # Slot k takes the row; the others pass through uncopied.
      rows = tuple(
        tf.cond(
          tf.equal(k, i),
          lambda: row,
          lambda slot=slot: slot,
        )
        for i, slot in enumerate(acc['rows'])
      )
      weights = tf.tensor_scatter_nd_update(
        acc['weights'], tf.reshape(k, [1, 1]), [weight]
      )
      zero_weight = tf.cast(tf.equal(weight, 0.0), tf.int32)
      return collections.OrderedDict(
        rows=rows,
        weights=weights,
        num_clients=k + 1,
        num_non_finite=acc['num_non_finite'] + 1 - tf.cast(finite, tf.int32),
        num_zero_weight=acc['num_zero_weight'] + zero_weight,
      )

    @tff.tensorflow.computation(acc_type, acc_type)
    def merge(a, b):
      # The rows of `a`, then those of `b` (see "Order" in the module doc).
      count_a, count_b = a['num_clients'], b['num_clients']
      total = count_a + count_b
      check = tf.debugging.assert_less_equal(
        total, max_clients, message=_overflow_message(max_clients)
      )
      with tf.control_dependencies([check]):
        total = tf.identity(total)
      b_rows = tf.reshape(tf.concat(b['rows'], axis=0), [count_b, size])
      empty = tf.zeros([0], tf.float32)

      def slot(i):
        return tf.cond(
          i < count_a,
          lambda: a['rows'][i],
          lambda: tf.cond(
            i < total,
            lambda: tf.gather(b_rows, i - count_a),
            lambda: empty,
          ),
        )

      rows = tuple(slot(i) for i in range(max_clients))
      # a's weights, then b's at positions count_a..total-1 (static shape).
      weights = tf.tensor_scatter_nd_update(
        a['weights'],
        tf.range(count_a, total)[:, tf.newaxis],
        b['weights'][:count_b],
      )
      return collections.OrderedDict(
        rows=rows,
        weights=weights,
        num_clients=total,
        num_non_finite=a['num_non_finite'] + b['num_non_finite'],
        num_zero_weight=a['num_zero_weight'] + b['num_zero_weight'],
      )

    @tff.tensorflow.computation(acc_type)
    def report(acc):
      n = acc['num_clients']
      values = tf.reshape(tf.concat(acc['rows'], axis=0), [n, size])
      return collections.OrderedDict(
        result=collections.OrderedDict(
          values=values, weights=acc['weights'][:n]
        ),
        measurements=collections.OrderedDict(
          [
            (NUM_CLIENTS, n),
            (NUM_NON_FINITE_CLIENTS, acc['num_non_finite']),
            (NUM_ZERO_WEIGHT_CLIENTS, acc['num_zero_weight']),
          ]
        ),
      )

    @tff.federated_computation()
    def init_fn():
      return tff.federated_value((), tff.SERVER)

    @tff.federated_computation(
      init_fn.type_signature.result,
      tff.FederatedType(value_type, tff.CLIENTS),
      tff.FederatedType(weight_type, tff.CLIENTS),
    )
    def next_fn(state, value, weight):
      output = tff.federated_aggregate(
        tff.federated_zip(collections.OrderedDict(value=value, weight=weight)),
        zero(),
        accumulate,
        merge,
        report,
      )
      return tff.templates.MeasuredProcessOutput(
        state=state,
        result=output.result,
        measurements=output.measurements,
      )

    return tff.templates.AggregationProcess(init_fn, next_fn)
