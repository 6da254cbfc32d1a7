"""FedLWS statistics: the mean update and the per-layer client dispersion.

Li et al., "FedLWS: Federated Learning with Adaptive Layer-wise Weight
Shrinking", ICLR 2025. The shrink factor of layer l (Eq. 8,
paper Eq. 8) needs, besides the weighted mean update, the dispersion

  tau_l = (1/K) sum_k || g_kl - gbar_l ||,   gbar = (1/K) sum_k g_k   (Eq. 4)

over the K valid clients of the round: the *unweighted* mean of the clients'
deviation *norms* from their *unweighted* mean. It is not a function of sums
of the updates, so `tau_mode='exact'` (default) computes it in two phases
without the server seeing any single update:

  A. sum_k v_k g_k and K = sum_k v_k   (v_k = 1 for a valid client, else 0)
  B. broadcast gbar = A / K; each client sends its L deviation norms; sum.

A client is valid if its weight is positive and its update finite (TFF's
client work gives a non-finite update weight 0). `tau_mode='rms'` is the
our one-pass variant (secure-sum friendly; not the paper's quantity):
tau_l = sqrt(max(0, mean_k ||g_kl||^2 - ||gbar_l||^2)) >= the exact tau_l.

The result is `OrderedDict(mean_update=<weighted mean, value type>,
tau=float32[L], num_clients=float32)`: `tff_aggregators.finalizers.fedlws`
turns it into the shrunk global model. The weighted mean is delegated to an
inner `WeightedAggregationFactory` (default `MeanFactory(no_nan_division=
True)`) and the unweighted sums to an `UnweightedAggregationFactory` (default
`SumFactory`), so secure or compressed sums can be plugged in.
"""

import collections
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators import options
from tff_aggregators import value_types

_NAME = 'FedLwsStatsFactory'


def check_groups(groups: Sequence[Sequence[int]], num_leaves: int) -> None:
  """Raises ValueError unless `groups` partitions range(num_leaves)."""
  flat = [i for group in groups for i in group]
  if not groups or any(not group for group in groups):
    raise ValueError(f'FedLWS groups must be non-empty, got {groups}.')
  if sorted(flat) != list(range(num_leaves)):
    raise ValueError(
      f'FedLWS groups {groups} must use every leaf index 0..{num_leaves - 1} '
      'exactly once (one index per trainable variable, in '
      '`model.trainable_variables` order).'
    )


def group_norms(leaves: Sequence[tf.Tensor], groups) -> tf.Tensor:
  """float32 [L]: the L2 norm of each group's concatenated leaves."""
  squares = [tf.reduce_sum(tf.square(tf.cast(x, tf.float32))) for x in leaves]
  return tf.sqrt(
    tf.stack([tf.add_n([squares[i] for i in group]) for group in groups])
  )


class FedLwsStatsFactory(tff.aggregators.WeightedAggregationFactory):
  """The weighted mean update plus FedLWS's per-group dispersion tau.

  The process's state is `OrderedDict(mean=..., update_sum=...,
  deviation_sum=...)` (the inner processes' states); its measurements are
  `OrderedDict(tau=float32[L], num_clients=float32, mean=<inner>)`.
  """

  def __init__(
    self,
    groups: Sequence[Sequence[int]],
    *,
    tau_mode: options.FedLwsTauMode = options.FedLwsTauMode.EXACT,
    inner_agg_factory: Optional[
      tff.aggregators.WeightedAggregationFactory
    ] = None,
    stats_sum_factory: Optional[
      tff.aggregators.UnweightedAggregationFactory
    ] = None,
  ):
    """Initializes the factory.

    Args:
      groups: The layers: lists of leaf indices (in `tf.nest.flatten` order of
        the value) partitioning all leaves; see
        `tff_aggregators.finalizers.fedlws.layer_groups`.
      tau_mode: A `tff_aggregators.FedLwsTauMode` or its string: `'exact'`
        (paper Eq. 4, two phases) or `'rms'` (one pass).
      inner_agg_factory: Weighted factory for the mean update.
      stats_sum_factory: Unweighted factory for the sums of phase A and B.

    Raises:
      ValueError: On an unknown `tau_mode` or empty groups.
      TypeError: On factories of the wrong kind.
    """
    tau_mode = options.parse(options.FedLwsTauMode, tau_mode, 'tau_mode')
    if not groups or any(not g for g in groups):
      raise ValueError(f'FedLWS groups must be non-empty, got {groups}.')
    inner_agg_factory = inner_agg_factory or tff.aggregators.MeanFactory(
      no_nan_division=True
    )
    stats_sum_factory = stats_sum_factory or tff.aggregators.SumFactory()
    if not isinstance(
      inner_agg_factory, tff.aggregators.WeightedAggregationFactory
    ):
      raise TypeError(
        'FedLwsStatsFactory needs a weighted inner_agg_factory (a '
        "builder's model_aggregator); wrap an unweighted one (e.g. "
        'tff.aggregators.DifferentiallyPrivateFactory) in '
        'tff.aggregators.as_weighted_aggregator (weights ignored), got '
        f'{inner_agg_factory!r}.'
      )
    if not isinstance(
      stats_sum_factory, tff.aggregators.UnweightedAggregationFactory
    ):
      raise TypeError(
        f'stats_sum_factory must be unweighted, got {stats_sum_factory!r}.'
      )
    self._groups = [list(g) for g in groups]
    self._tau_mode = tau_mode
    self._mean_factory = inner_agg_factory
    self._stats_sum_factory = stats_sum_factory

  def create(
    self, value_type: Any, weight_type: Any
  ) -> tff.templates.AggregationProcess:
    value_type = value_types.to_type(value_type)
    leaves = value_types.check_float_leaves(value_type, _NAME)
    weight_type = value_types.check_scalar_weight(weight_type, _NAME)
    groups = self._groups
    check_groups(groups, len(leaves))
    num_groups = len(groups)
    rms = self._tau_mode == options.FedLwsTauMode.RMS

    mean_process = self._mean_factory.create(value_type, weight_type)
    float_leaves_type = tff.types.to_type(
      [tff.TensorType(np.float32, t.shape) for t in leaves]
    )
    norms_type = tff.TensorType(np.float32, [num_groups])
    phase_a_type = tff.types.to_type(
      collections.OrderedDict(
        update=float_leaves_type,
        count=tff.TensorType(np.float32),
        squared_norms=norms_type,
      )
    )
    update_sum_process = self._stats_sum_factory.create(phase_a_type)
    deviation_sum_process = self._stats_sum_factory.create(norms_type)

    @tff.tensorflow.computation(value_type, weight_type)
    def phase_a(value, weight):
      flat = [tf.cast(x, tf.float32) for x in tf.nest.flatten(value)]
      finite = tf.reduce_all(
        [tf.reduce_all(tf.math.is_finite(x)) for x in flat]
      )
      valid = tf.logical_and(finite, tf.cast(weight, tf.float32) > 0)
      v = tf.cast(valid, tf.float32)
      # tf.where, not v * x: a NaN times 0 is NaN.
      masked = [tf.where(valid, x, tf.zeros_like(x)) for x in flat]
      return collections.OrderedDict(
        update=masked,
        count=v,
        squared_norms=tf.square(group_norms(masked, groups)),
      )

    @tff.tensorflow.computation(phase_a_type)
    def unweighted_mean(sums):
      count = sums['count']
      return [tf.math.divide_no_nan(x, count) for x in sums['update']]

    @tff.tensorflow.computation(value_type, weight_type, float_leaves_type)
    def phase_b(value, weight, mean):
      flat = [tf.cast(x, tf.float32) for x in tf.nest.flatten(value)]
      deviation = [x - m for x, m in zip(flat, mean)]
      norms = group_norms(deviation, groups)
      finite = tf.reduce_all(tf.math.is_finite(norms))
      valid = tf.logical_and(finite, tf.cast(weight, tf.float32) > 0)
      return tf.where(valid, norms, tf.zeros_like(norms))

    @tff.tensorflow.computation(phase_a_type, norms_type, float_leaves_type)
    def dispersion(sums, deviation_sum, mean):
      count = sums['count']
      if rms:
        mean_square = tf.math.divide_no_nan(sums['squared_norms'], count)
        tau = tf.sqrt(
          tf.maximum(mean_square - tf.square(group_norms(mean, groups)), 0.0)
        )
      else:
        tau = tf.math.divide_no_nan(deviation_sum, count)
      return tau, count

    @tff.federated_computation()
    def init_fn():
      return tff.federated_zip(
        collections.OrderedDict(
          mean=mean_process.initialize(),
          update_sum=update_sum_process.initialize(),
          deviation_sum=deviation_sum_process.initialize(),
        )
      )

    @tff.federated_computation(
      init_fn.type_signature.result,
      tff.FederatedType(value_type, tff.CLIENTS),
      tff.FederatedType(weight_type, tff.CLIENTS),
    )
    def next_fn(state, value, weight):
      mean_output = mean_process.next(state['mean'], value, weight)
      sums_output = update_sum_process.next(
        state['update_sum'], tff.federated_map(phase_a, (value, weight))
      )
      mean = tff.federated_map(unweighted_mean, sums_output.result)
      if rms:
        deviation_state = state['deviation_sum']
        deviation_sum = tff.federated_value(
          np.zeros([num_groups], np.float32), tff.SERVER
        )
      else:
        deviations = tff.federated_map(
          phase_b, (value, weight, tff.federated_broadcast(mean))
        )
        deviation_output = deviation_sum_process.next(
          state['deviation_sum'], deviations
        )
        deviation_state = deviation_output.state
        deviation_sum = deviation_output.result
      tau, count = tff.federated_map(
        dispersion, (sums_output.result, deviation_sum, mean)
      )
      result = tff.federated_zip(
        collections.OrderedDict(
          mean_update=mean_output.result, tau=tau, num_clients=count
        )
      )
      measurements = tff.federated_zip(
        collections.OrderedDict(
          tau=tau, num_clients=count, mean=mean_output.measurements
        )
      )
      new_state = tff.federated_zip(
        collections.OrderedDict(
          mean=mean_output.state,
          update_sum=sums_output.state,
          deviation_sum=deviation_state,
        )
      )
      return tff.templates.MeasuredProcessOutput(
        state=new_state, result=result, measurements=measurements
      )

    return tff.templates.AggregationProcess(init_fn, next_fn)
