"""FedGLAD: the server learning rate adapted to the sampled clients' drift.

Yang et al., "When to Trust Aggregated Gradients: Addressing Negative Client
Sampling in Federated Learning", TMLR 2023. Per parameter group P and round t
(Eqs. 9-15, Algorithm 1; docs/methods/fedglad.md):

  q_P   = sum_k a_k ||g_kP||^2          weighted mean squared client norm
  gbar_P = sum_k a_k g_kP               the ordinary aggregated update
  GSI_P = sqrt(q_P / ||gbar_P||^2)      (Eq. 9; >= 1, = 1 iff all g_kP agree)
  B_P   = GSI_P in the first round      (Eq. 12, initial condition)
  s_P   = clip(GSI_P / B_P, 1 - gamma t, 1 + gamma t)     (Eqs. 13-15)
  B_P  <- beta B_P + (1 - beta) GSI_P   (Eq. 12; after s_P is computed)
  result: s_P * gbar_P                  (Algorithm 1, line 17)

The server needs only two weighted means, of the updates and of one squared
norm per leaf, so the factory wraps an inner weighted mean factory (default
`tff.aggregators.MeanFactory(no_nan_division=True)`) and never sees a single
client's update: any sum the inner factory can do (secure sums included)
works. Wrap it in TFF's clipping or zeroing factories, not the reverse, so the
norms are those of the values actually averaged.

Decisions where the paper and the authors' code are silent or differ:
* Groups: `grouping='per_variable'` (default) has one group per leaf (one per
  trainable variable); `'universal'` has one group for the whole model.
* Numerics: GSI^2 = max((q + eps) / (||gbar||^2 + eps), 1), eps = 1e-12 on the
  means (the official code adds 1e-12 to the unnormalised sum; the difference
  is far below float32 resolution for any real update).
* Degenerate groups: if q or ||gbar||^2 is <= `tiny`, or anything is
  non-finite (a NaN update, zero total weight, an empty cohort), the group
  gets s = 1 and its B is neither initialised nor updated (the official code
  has no guard). The round counter still advances.
* The bounds use the round counter t of this process (rounds it aggregated),
  starting at 0, so the first round is exactly FedAvg.
"""

import collections
import math
from typing import Any, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators import options
from tff_aggregators import value_types

_NAME = 'FedGladFactory'


def gradient_similarity(
  mean_squared_norm: tf.Tensor,
  squared_norm_of_mean: tf.Tensor,
  *,
  eps: float,
  tiny: float,
  finite: Optional[tf.Tensor] = None,
) -> tuple[tf.Tensor, tf.Tensor]:
  """GSI (Eq. 9) per group, and which groups are valid (not degenerate).

  Args:
    mean_squared_norm: q, float32 [G].
    squared_norm_of_mean: ||gbar||^2, float32 [G].
    eps: Added to both before the ratio.
    tiny: Groups with q or ||gbar||^2 <= tiny are degenerate.
    finite: Optional bool [G]: whether each group's mean update is finite.

  Returns:
    (gsi float32 [G], with 1 for degenerate groups; valid bool [G]).
  """
  valid = tf.logical_and(
    tf.logical_and(
      tf.math.is_finite(mean_squared_norm),
      tf.math.is_finite(squared_norm_of_mean),
    ),
    tf.logical_and(mean_squared_norm > tiny, squared_norm_of_mean > tiny),
  )
  if finite is not None:
    valid = tf.logical_and(valid, finite)
  ratio = tf.math.divide_no_nan(
    mean_squared_norm + eps, squared_norm_of_mean + eps
  )
  gsi = tf.sqrt(tf.maximum(ratio, 1.0))
  return tf.where(valid, gsi, tf.ones_like(gsi)), valid


def squared_norms(leaves) -> tf.Tensor:
  """float32 [L]: the squared norm of each leaf."""
  return tf.stack(
    [tf.reduce_sum(tf.square(tf.cast(leaf, tf.float32))) for leaf in leaves]
  )


def pack(value):
  """A client's update with its squared leaf norms, for the inner mean."""
  return collections.OrderedDict(
    update=value, squared_norms=squared_norms(tf.nest.flatten(value))
  )


def initial_glad_state(num_groups: int) -> collections.OrderedDict:
  """Round 0, and no group's baseline B initialised yet."""
  return collections.OrderedDict(
    round=tf.constant(0, tf.int32),
    baseline=tf.zeros([num_groups], tf.float32),
    initialized=tf.zeros([num_groups], tf.bool),
  )


def group_similarities(
  update_leaves,
  mean_squared_norms: tf.Tensor,
  *,
  per_variable: bool,
  eps: float,
  tiny: float,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
  """GSI (Eq. 9) per group, which groups are valid, and the universal GSI.

  Args:
    update_leaves: The leaves of the mean update gbar.
    mean_squared_norms: float32 [L], each leaf's weighted mean squared
      client norm q.
    per_variable: One group per leaf (else one for the whole model).
    eps: Added to both means in the ratio.
    tiny: The degeneracy threshold (`gradient_similarity`).

  Returns:
    (gsi float32 [G], valid bool [G], the universal GSI float32).
  """
  q = mean_squared_norms
  mean_norms = squared_norms(update_leaves)
  finite = tf.stack(
    [tf.reduce_all(tf.math.is_finite(leaf)) for leaf in update_leaves]
  )
  gsi_model, _ = gradient_similarity(
    tf.reduce_sum(q), tf.reduce_sum(mean_norms), eps=eps, tiny=tiny
  )
  if not per_variable:
    q = tf.reduce_sum(q, keepdims=True)
    mean_norms = tf.reduce_sum(mean_norms, keepdims=True)
    finite = tf.reduce_all(finite, keepdims=True)
  gsi, valid = gradient_similarity(
    q, mean_norms, eps=eps, tiny=tiny, finite=finite
  )
  return gsi, valid, gsi_model


def multiplier_bounds(
  round_num: tf.Tensor, gamma: float
) -> tuple[tf.Tensor, tf.Tensor]:
  """Eq. 15's bounds (1 - gamma t, 1 + gamma t); gamma may be `math.inf`."""
  t = tf.cast(round_num, tf.float32)
  if math.isinf(gamma):
    width = tf.where(t > 0, np.inf, 0.0)
  else:
    width = gamma * t
  return 1.0 - width, 1.0 + width


def multipliers(
  gsi: tf.Tensor, valid: tf.Tensor, glad, *, gamma: float
) -> collections.OrderedDict:
  """Eqs. 12-15: s_P = clip(GSI_P / B_P, bounds), 1 for invalid groups.

  Args:
    gsi: float32 [G], this round's GSI.
    valid: bool [G], the non-degenerate groups.
    glad: The state: `OrderedDict(round, baseline, initialized)`.
    gamma: The bounding factor.

  Returns:
    `OrderedDict(baseline, ratio, multiplier, lower_bound, upper_bound)`:
    the B the ratio used (GSI where not yet initialised, Eq. 12's initial
    condition), GSI / B, s and the bounds.
  """
  baseline = tf.where(glad['initialized'], glad['baseline'], gsi)
  ratio = tf.where(valid, tf.math.divide_no_nan(gsi, baseline), 1.0)
  lower, upper = multiplier_bounds(glad['round'], gamma)
  multiplier = tf.where(valid, tf.minimum(tf.maximum(ratio, lower), upper), 1.0)
  return collections.OrderedDict(
    baseline=baseline,
    ratio=ratio,
    multiplier=multiplier,
    lower_bound=lower,
    upper_bound=upper,
  )


def next_glad_state(
  glad, gsi: tf.Tensor, valid: tf.Tensor, baseline: tf.Tensor, *, beta: float
) -> collections.OrderedDict:
  """Eq. 12 after s is computed: B <- beta B + (1 - beta) GSI.

  A group's first valid round sets B = GSI; invalid groups keep B. The
  round counter always advances.

  Args:
    glad: The state: `OrderedDict(round, baseline, initialized)`.
    gsi: float32 [G], this round's GSI.
    valid: bool [G], the non-degenerate groups.
    baseline: float32 [G], the B the ratio used (`multipliers`).
    beta: The decay of the moving average.
  """
  initialized = glad['initialized']
  updated_baseline = tf.where(
    initialized, beta * baseline + (1.0 - beta) * gsi, gsi
  )
  return collections.OrderedDict(
    round=glad['round'] + 1,
    baseline=tf.where(valid, updated_baseline, glad['baseline']),
    initialized=tf.logical_or(initialized, valid),
  )


def glad_result(
  update,
  multiplier: tf.Tensor,
  *,
  per_variable: bool,
  num_leaves: int,
  emit: options.FedGladEmit,
):
  """The process's result: s * gbar (Algorithm 1, line 17), or gbar and s.

  Args:
    update: The mean update gbar.
    multiplier: float32 [G], s per group.
    per_variable: Whether the groups are the leaves (else one group).
    num_leaves: The number of leaves of `update`.
    emit: `SCALED_UPDATE`, or `UPDATE_AND_MULTIPLIERS` for
      `OrderedDict(update, multipliers)` with one multiplier per leaf.
  """
  leaf_multipliers = (
    multiplier if per_variable else tf.tile(multiplier, [num_leaves])
  )
  if emit == options.FedGladEmit.SCALED_UPDATE:
    scaled = [
      leaf * tf.cast(leaf_multipliers[i], leaf.dtype)
      for i, leaf in enumerate(tf.nest.flatten(update))
    ]
    return tf.nest.pack_sequence_as(update, scaled)
  return collections.OrderedDict(update=update, multipliers=leaf_multipliers)


def glad_server_step(
  glad,
  mean,
  *,
  gamma: float,
  beta: float,
  eps: float,
  tiny: float,
  per_variable: bool,
  emit: options.FedGladEmit,
):
  """One round at the server, from the inner factory's means.

  Args:
    glad: The state: `OrderedDict(round, baseline, initialized)`.
    mean: `OrderedDict(update, squared_norms)`, the weighted means of the
      clients' updates and of their squared leaf norms.
    gamma: The bounding factor (Eq. 15).
    beta: The decay of the GSI moving average (Eq. 12).
    eps: Added to both means in the GSI ratio.
    tiny: The degeneracy threshold.
    per_variable: One group per leaf (else one for the whole model).
    emit: What the result is (`glad_result`).

  Returns:
    (new state, result, measurements) as in `FedGladFactory`'s docstring.
  """
  update_leaves = tf.nest.flatten(mean['update'])
  gsi, valid, gsi_model = group_similarities(
    update_leaves,
    mean['squared_norms'],
    per_variable=per_variable,
    eps=eps,
    tiny=tiny,
  )
  rule = multipliers(gsi, valid, glad, gamma=gamma)
  new_glad = next_glad_state(glad, gsi, valid, rule['baseline'], beta=beta)
  result = glad_result(
    mean['update'],
    rule['multiplier'],
    per_variable=per_variable,
    num_leaves=len(update_leaves),
    emit=emit,
  )
  measurements = collections.OrderedDict(
    gsi=gsi,
    gsi_model=gsi_model,
    baseline=tf.where(valid, rule['baseline'], glad['baseline']),
    ratio=rule['ratio'],
    multiplier=rule['multiplier'],
    lower_bound=rule['lower_bound'],
    upper_bound=rule['upper_bound'],
    round=glad['round'],
    degenerate_groups=tf.reduce_sum(tf.cast(tf.logical_not(valid), tf.int32)),
  )
  return new_glad, result, measurements


def _aggregation_process(
  value_type, weight_type, inner_process, pack_fn, initial_fn, step_fn
) -> tff.templates.AggregationProcess:
  """The process: pack at the clients, the inner mean, then `step_fn`."""

  @tff.federated_computation()
  def init_fn():
    return tff.federated_zip(
      collections.OrderedDict(
        glad=tff.federated_eval(initial_fn, tff.SERVER),
        inner=inner_process.initialize(),
      )
    )

  @tff.federated_computation(
    init_fn.type_signature.result,
    tff.FederatedType(value_type, tff.CLIENTS),
    tff.FederatedType(weight_type, tff.CLIENTS),
  )
  def next_fn(state, value, weight):
    packed = tff.federated_map(pack_fn, value)
    inner_output = inner_process.next(state['inner'], packed, weight)
    new_glad, result, measurements = tff.federated_map(
      step_fn, (state['glad'], inner_output.result)
    )
    measurements = tff.federated_zip(
      collections.OrderedDict(
        fedglad=measurements, inner=inner_output.measurements
      )
    )
    new_state = tff.federated_zip(
      collections.OrderedDict(glad=new_glad, inner=inner_output.state)
    )
    return tff.templates.MeasuredProcessOutput(
      state=new_state, result=result, measurements=measurements
    )

  return tff.templates.AggregationProcess(init_fn, next_fn)


class FedGladFactory(tff.aggregators.WeightedAggregationFactory):
  """FedGLAD's adaptive server learning rate as a weighted aggregator.

  Drop-in for FedAvg, FedAvgM and FedProx:

    tff.learning.algorithms.build_weighted_fed_avg(
        model_fn, client_optimizer_fn,
        server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
        model_aggregator=FedGladFactory())

  The process's state@SERVER is `OrderedDict(round=int32,
  baseline=float32[G], initialized=bool[G], inner=<inner state>)`. Its result
  is the scaled mean update (`emit='scaled_update'`, same type as the value)
  or `OrderedDict(update=<mean update>, multipliers=float32[L])` with one
  multiplier per leaf (`emit='update_and_multipliers'`, for the Adam/Yogi
  finalizer, see `tff_aggregators.finalizers.glad_adaptive`). Measurements:
  `gsi`, `baseline` (the B the ratio used), `ratio`, `multiplier` (float32
  [G] each), `gsi_model` (the universal GSI, always), `lower_bound`,
  `upper_bound`, `round`, `degenerate_groups` and `inner`.
  """

  def __init__(
    self,
    *,
    gamma: float = 0.02,
    beta: float = 0.9,
    grouping: options.FedGladGrouping = options.FedGladGrouping.PER_VARIABLE,
    emit: options.FedGladEmit = options.FedGladEmit.SCALED_UPDATE,
    inner_agg_factory: Optional[
      tff.aggregators.WeightedAggregationFactory
    ] = None,
    eps: float = 1e-12,
    tiny: float = 1e-30,
  ):
    """Initializes the factory.

    Args:
      gamma: Bounding factor: s is clipped to [1 - gamma t, 1 + gamma t]
        (Eq. 15). 0 gives FedAvg exactly; `math.inf` removes the bounds.
      beta: Decay of the moving average of past GSIs (Eq. 12), in [0, 1).
      grouping: A `tff_aggregators.FedGladGrouping` or its string:
        `'per_variable'` (one group per leaf) or `'universal'`.
      emit: A `tff_aggregators.FedGladEmit` or its string: `'scaled_update'`
        or `'update_and_multipliers'` (see class doc).
      inner_agg_factory: The weighted mean factory for the update and the
        squared norms;
        default `tff.aggregators.MeanFactory(no_nan_division=True)`.
      eps: Added to both means in the GSI ratio.
      tiny: A group whose mean squared norm or squared mean norm is at most
        `tiny` is degenerate (s = 1, B kept).

    Raises:
      ValueError: On an out-of-range or unknown argument.
      TypeError: If `inner_agg_factory` is not a `WeightedAggregationFactory`.
    """
    if not gamma >= 0:
      raise ValueError(f'gamma must be >= 0 (or math.inf), got {gamma}.')
    if not 0 <= beta < 1:
      raise ValueError(f'beta must be in [0, 1), got {beta}.')
    grouping = options.parse(options.FedGladGrouping, grouping, 'grouping')
    emit = options.parse(options.FedGladEmit, emit, 'emit')
    if not (eps >= 0 and tiny >= 0):
      raise ValueError(f'eps and tiny must be >= 0, got {eps}, {tiny}.')
    if inner_agg_factory is None:
      inner_agg_factory = tff.aggregators.MeanFactory(no_nan_division=True)
    if not isinstance(
      inner_agg_factory, tff.aggregators.WeightedAggregationFactory
    ):
      raise TypeError(
        'FedGladFactory needs a weighted inner mean factory (e.g. '
        'tff.aggregators.MeanFactory()); wrap an unweighted one (e.g. '
        'tff.aggregators.DifferentiallyPrivateFactory) in '
        'tff.aggregators.as_weighted_aggregator (weights ignored), got '
        f'{inner_agg_factory!r}.'
      )
    self._gamma = float(gamma)
    self._beta = float(beta)
    self._grouping = grouping
    self._emit = emit
    self._inner = inner_agg_factory
    self._eps = float(eps)
    self._tiny = float(tiny)

  def create(
    self, value_type: Any, weight_type: Any
  ) -> tff.templates.AggregationProcess:
    value_type = value_types.to_type(value_type)
    leaves = value_types.check_float_leaves(value_type, _NAME)
    weight_type = value_types.check_scalar_weight(weight_type, _NAME)
    num_leaves = len(leaves)
    per_variable = self._grouping == options.FedGladGrouping.PER_VARIABLE
    num_groups = num_leaves if per_variable else 1
    rule = dict(
      gamma=self._gamma,
      beta=self._beta,
      eps=self._eps,
      tiny=self._tiny,
      per_variable=per_variable,
      emit=self._emit,
    )
    packed_type = tff.types.to_type(
      collections.OrderedDict(
        update=value_type,
        squared_norms=tff.TensorType(np.float32, [num_leaves]),
      )
    )
    inner_process = self._inner.create(packed_type, weight_type)

    @tff.tensorflow.computation(value_type)
    def pack_fn(value):
      return pack(value)

    @tff.tensorflow.computation
    def initial_fn():
      return initial_glad_state(num_groups)

    @tff.tensorflow.computation(initial_fn.type_signature.result, packed_type)
    def step_fn(glad, mean):
      return glad_server_step(glad, mean, **rule)

    return _aggregation_process(
      value_type, weight_type, inner_process, pack_fn, initial_fn, step_fn
    )
