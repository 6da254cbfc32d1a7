"""`DroppedClientsFactory`: any weighted aggregation, plus who contributed.

TFF's client works give a client whose update is not finite a zero update of
weight 0, and a client with no examples trains nothing: such a client is
dropped from the weighted mean without a trace in TFF's FedAvg measurements.
This factory wraps a weighted factory (default `MeanFactory()`) and sums,
per round, one indicator per client:

  num_clients          every client of the round
  num_dropped_clients  clients of weight 0 (or a non-finite weight or value)

so a round in which clients diverge is visible under the name every method of
this package uses (docs/faults.md). The inner factory's result, state and
measurements (under `inner`) are unchanged.
"""

import collections
from typing import Optional

import tensorflow as tf
import tensorflow_federated as tff

NUM_CLIENTS = 'num_clients'
NUM_DROPPED_CLIENTS = 'num_dropped_clients'


class DroppedClientsFactory(tff.aggregators.WeightedAggregationFactory):
  """`inner_agg_factory`'s aggregation, counting the clients it drops.

  Args:
    inner_agg_factory: The weighted factory to wrap; default
      `tff.aggregators.MeanFactory()`.
  """

  def __init__(
    self,
    inner_agg_factory: Optional[
      tff.aggregators.WeightedAggregationFactory
    ] = None,
  ):
    if inner_agg_factory is None:
      inner_agg_factory = tff.aggregators.MeanFactory()
    if not isinstance(
      inner_agg_factory, tff.aggregators.WeightedAggregationFactory
    ):
      raise TypeError(
        'DroppedClientsFactory wraps a weighted aggregation factory, got '
        f'{inner_agg_factory!r}.'
      )
    self._inner = inner_agg_factory

  def create(self, value_type, weight_type) -> tff.templates.AggregationProcess:
    inner = self._inner.create(value_type, weight_type)

    @tff.tensorflow.computation(value_type, weight_type)
    def dropped(value, weight):
      finite = tf.reduce_all(
        [
          tf.reduce_all(tf.math.is_finite(tf.cast(x, tf.float32)))
          for x in tf.nest.flatten(value)
        ]
        + [tf.math.is_finite(tf.cast(weight, tf.float32))]
      )
      kept = tf.logical_and(finite, tf.cast(weight, tf.float32) > 0)
      return collections.OrderedDict(
        [
          (NUM_CLIENTS, tf.constant(1, tf.int32)),
          (NUM_DROPPED_CLIENTS, 1 - tf.cast(kept, tf.int32)),
        ]
      )

    @tff.federated_computation(
      inner.next.type_signature.parameter[0],
      tff.FederatedType(value_type, tff.CLIENTS),
      tff.FederatedType(weight_type, tff.CLIENTS),
    )
    def next_fn(state, value, weight):
      output = inner.next(state, value, weight)
      counts = tff.federated_sum(tff.federated_map(dropped, (value, weight)))
      measurements = tff.federated_zip(
        collections.OrderedDict(
          [
            ('inner', output.measurements),
            (NUM_CLIENTS, counts[NUM_CLIENTS]),
            (NUM_DROPPED_CLIENTS, counts[NUM_DROPPED_CLIENTS]),
          ]
        )
      )
      return tff.templates.MeasuredProcessOutput(
        output.state, output.result, measurements
      )

    return tff.templates.AggregationProcess(inner.initialize, next_fn)
