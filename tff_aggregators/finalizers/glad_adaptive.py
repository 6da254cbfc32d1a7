"""FedGLAD with an adaptive server optimizer: only the first moment is scaled.

With Adam (or Yogi) on the server, FedGLAD scales the update that enters the
first moment and leaves the second moment on the unscaled update (paper
Section 3.4, Algorithm 1 lines 8-10 and Appendix E):

  m <- beta_1 m + (1 - beta_1) s * gbar
  v <- beta_2 v + (1 - beta_2) gbar^2                       (Adam)
  v <- v + (1 - beta_2) sign(gbar^2 - v) gbar^2             (Yogi)
  w <- w - lr sqrt(1 - beta_2^n) / (1 - beta_1^n) m / (sqrt(v) + eps)

Shrinking gbar would shrink v too and so raise Adam's step; scaling only m
avoids that. The Yogi rule is our extrapolation (not in the paper).

`build_glad_adaptive_finalizer` takes the server optimizer as built by
`tff.learning.optimizers.build_adam` or `build_yogi`: its state, initial
values and hyperparameters are that optimizer's, and the arithmetic is TFF's
own (same operations in the same order), so with every multiplier 1 the step
equals TFF's Adam/Yogi step bit for bit. The process expects the result of
`FedGladFactory(emit='update_and_multipliers')` as its update.
"""

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators import tff_compat
from tff_aggregators import value_types
from tff_aggregators.finalizers import server_step

ADAPTIVE_KINDS = ('adam', 'yogi')


optimizer_kind = tff_compat.optimizer_kind


def normalized_learning_rate(state) -> tf.Tensor:
  """lr sqrt(1 - beta_2^n) / (1 - beta_1^n), n the step after this round."""
  n = state['step'] + 1
  return (
    state['learning_rate']
    * tf.math.sqrt(1.0 - tf.math.pow(state['beta_2'], tf.cast(n, tf.float32)))
    / (1.0 - tf.math.pow(state['beta_1'], tf.cast(n, tf.float32)))
  )


def leaf_step(kind: str, state, normalized_lr, w, m, v, g, multiplier):
  """One leaf's step: only the first moment sees the scaled update.

  Args:
    kind: `'adam'` or `'yogi'` (the second moment's rule).
    state: The optimizer's state (its `beta_1`, `beta_2`, `epsilon`).
    normalized_lr: `normalized_learning_rate(state)`.
    w: The weight.
    m: Its first moment.
    v: Its second moment.
    g: The mean update gbar.
    multiplier: FedGLAD's s for this leaf.

  Returns:
    The new (w, m, v).
  """
  beta_1, beta_2 = state['beta_1'], state['beta_2']
  scaled = g * tf.cast(multiplier, g.dtype)
  m = m + (scaled - m) * (1.0 - tf.cast(beta_1, m.dtype))
  if kind == 'adam':
    v = v + (tf.math.square(g) - v) * (1.0 - tf.cast(beta_2, v.dtype))
  else:
    g2 = tf.math.square(g)
    v = v + (1 - tf.cast(beta_2, g.dtype)) * tf.sign(g2 - v) * g2
  w = w - tf.cast(normalized_lr, m.dtype) * m / (
    tf.math.sqrt(v) + tf.cast(state['epsilon'], v.dtype)
  )
  return w, m, v


def glad_adaptive_step(kind: str, state, weights, glad_update):
  """One round: every leaf's `leaf_step`, rejected if non-finite.

  Args:
    kind: `'adam'` or `'yogi'`.
    state: The optimizer's state.
    weights: The trainable weights.
    glad_update: `OrderedDict(update, multipliers)` of `FedGladFactory`.

  Returns:
    (new state, new weights, `OrderedDict(update_non_finite)`); a
    non-finite step keeps the state and weights.
  """
  normalized_lr = normalized_learning_rate(state)
  gradients = tf.nest.flatten(glad_update['update'])
  multipliers = glad_update['multipliers']
  new_weights, new_m, new_v = [], [], []
  for i, (w, m, v, g) in enumerate(
    zip(
      tf.nest.flatten(weights),
      tf.nest.flatten(state['accumulator']),
      tf.nest.flatten(state['preconditioner']),
      gradients,
    )
  ):
    w, m, v = leaf_step(kind, state, normalized_lr, w, m, v, g, multipliers[i])
    new_weights.append(w)
    new_m.append(m)
    new_v.append(v)
  # The moments too: an overflowing v (inf) would freeze the model.
  finite = server_step.all_finite(new_weights, gradients, new_m, new_v)
  new_state = collections.OrderedDict(state)
  new_state['step'] = state['step'] + 1
  new_state['accumulator'] = tf.nest.pack_sequence_as(
    state['accumulator'], new_m
  )
  new_state['preconditioner'] = tf.nest.pack_sequence_as(
    state['preconditioner'], new_v
  )
  new_weights = tf.nest.pack_sequence_as(weights, new_weights)
  measurements = collections.OrderedDict(
    update_non_finite=1 - tf.cast(finite, tf.int32)
  )
  return (
    server_step.keep_unless(finite, new_state, state),
    server_step.keep_unless(finite, new_weights, weights),
    measurements,
  )


def build_glad_adaptive_finalizer(
  optimizer: tff.learning.optimizers.Optimizer,
  model_weights_type: tff.StructType,
) -> tff.learning.templates.FinalizerProcess:
  """A finalizer applying FedGLAD's scaled-first-moment Adam or Yogi step.

  Args:
    optimizer: `tff.learning.optimizers.build_adam(...)` or `build_yogi(...)`;
      its hyperparameters (and state layout) are used. The authors' Adam uses
      epsilon=1e-8 (TFF's default is 1e-7).
    model_weights_type: The `tff.learning.models.ModelWeights` type.

  Returns:
    A `FinalizerProcess` whose `next(state, weights@SERVER,
    OrderedDict(update, multipliers)@SERVER)` updates the trainable weights
    (non-trainable weights are left as they are). A non-finite step is
    rejected (weights and state unchanged) and counted in the measurement
    `update_non_finite`, as TFF's own finalizer does.

  Raises:
    TypeError: If `optimizer` is not TFF's Adam or Yogi, or
      `model_weights_type` is not a `ModelWeights` type.
  """
  kind = optimizer_kind(optimizer)
  if kind not in ADAPTIVE_KINDS:
    raise TypeError(
      'build_glad_adaptive_finalizer needs tff.learning.optimizers.'
      f'build_adam or build_yogi, got {optimizer!r}. SGD and momentum '
      'servers take the scaled update directly (FedGladFactory with '
      "emit='scaled_update')."
    )
  server_step.check_model_weights_type(model_weights_type)
  trainable_type = model_weights_type.trainable
  num_leaves = len(value_types.leaf_types(trainable_type))
  update_type = tff.types.to_type(
    collections.OrderedDict(
      update=trainable_type,
      multipliers=tff.TensorType(np.float32, [num_leaves]),
    )
  )

  def initial_state():
    specs = tff.types.type_to_tf_tensor_specs(trainable_type)
    return optimizer.initialize(specs)

  def step(state, weights, glad_update):
    return glad_adaptive_step(kind, state, weights, glad_update)

  return server_step.build_server_step_finalizer(
    model_weights_type,
    update_type,
    initial_state,
    step,
    get_hparams=optimizer.get_hparams,
    set_hparams=optimizer.set_hparams,
  )
