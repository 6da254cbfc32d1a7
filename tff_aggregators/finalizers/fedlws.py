"""FedLWS: the aggregated global model shrunk layer by layer.

Li et al., ICLR 2025 (Eqs. 4, 8-9, Algorithm 1). After the server optimizer
has produced w_hat from the previous global model w and the mean update, per
layer (group) l:

  b_l     = beta * tau_l        (clipped to `tau_clip` in the official code)
  gamma_l = ||w_l|| / (||w_l|| + b_l ||w_hat_l - w_l||)         (Eq. 8)
  w_l    <- gamma_l * w_hat_l                                   (Eq. 9)

tau_l comes from `tff_aggregators.aggregators.fedlws_stats`. With server SGD
at learning rate 1 (the paper's setting) w_hat is FedAvg's model; with any
other server optimizer d = w_hat - w is the optimizer's step (the
eta_g g_g of Eq. 8, the "server/global lr").

Guards (our additions): gamma_l = 1 when ||w_l|| = 0 (a zero-initialised
group would otherwise stay zero for ever), when the denominator is <= 1e-12,
when no client was valid, or when anything is non-finite. A non-finite step,
or one whose norms overflow float32 (which would make gamma 0 and zero the
model), is rejected (weights and optimizer state unchanged, counted in
`update_non_finite`) as TFF's own finalizer does. Only trainable weights
are shrunk; non-trainable ones are left as they are (TFF's client work does
not aggregate them).
"""

import collections
from collections.abc import Callable, Sequence
from typing import Optional, Union

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators import options
from tff_aggregators import tff_compat
from tff_aggregators import value_types
from tff_aggregators.aggregators import fedlws_stats
from tff_aggregators.finalizers import server_step

_CLOSERS = ('bias', 'beta')
_TINY = 1e-12


def _variable_name(name: str) -> str:
  return name.split(':')[0]


def layer_groups(
  variable_names: Sequence[str],
  grouping: options.FedLwsGrouping = options.FedLwsGrouping.LAYER,
) -> list[list[int]]:
  """FedLWS's layers as lists of indices into the trainable variables.

  Args:
    variable_names: `[v.name for v in model.trainable_variables]`.
    grouping: A `tff_aggregators.FedLwsGrouping` or its string. `'layer'`
      (the authors' rule): walk the variables in order and close a group
      after every bias or normalization beta, so a layer's kernel and bias
      share a factor and a bias-free convolution joins the normalization
      after it; trailing variables join the last group.
      `'keras_layer'`: one group per Keras layer (the name's prefix).
      `'model'`: one group (the paper's model-wise FedLWS, section 5.3).

  Returns:
    The groups, each a non-empty list of variable indices.
  """
  grouping = options.parse(options.FedLwsGrouping, grouping, 'grouping')
  if not variable_names:
    raise ValueError('FedLWS needs at least one trainable variable.')
  names = [_variable_name(n) for n in variable_names]
  if grouping == options.FedLwsGrouping.MODEL:
    return [list(range(len(names)))]
  groups, current = [], []
  if grouping == options.FedLwsGrouping.KERAS_LAYER:
    prefixes = [n.rsplit('/', 1)[0] for n in names]
    for i, prefix in enumerate(prefixes):
      if current and prefixes[current[-1]] != prefix:
        groups.append(current)
        current = []
      current.append(i)
    groups.append(current)
    return groups
  for i, name in enumerate(names):
    current.append(i)
    if name.rsplit('/', 1)[-1] in _CLOSERS:
      groups.append(current)
      current = []
  if current:
    if groups:
      groups[-1].extend(current)
    else:
      groups.append(current)
  return groups


_NORMALIZATIONS = (
  tf.keras.layers.BatchNormalization,
  tf.keras.layers.LayerNormalization,
  tf.keras.layers.GroupNormalization,
)


def _feeding_layer(layer):
  """The single layer whose output `layer` normalizes, or None."""
  nodes = layer.inbound_nodes
  if len(nodes) != 1:
    return None
  inbound = nodes[0].inbound_layers
  if isinstance(inbound, (list, tuple)):
    return inbound[0] if len(inbound) == 1 else None
  return inbound


def keras_layer_groups(keras_model: tf.keras.Model) -> list[list[int]]:
  """The `'layer'` grouping from a Keras model's connectivity.

  Each layer with trainable weights is a group, except that a normalization
  layer joins the bias-free convolution or dense layer that feeds it. Unlike
  the variable-order rule this is right for functional models, whose
  variable order can put a residual block's shortcut convolution between a
  convolution and its normalization.

  Returns:
    Groups of indices into `keras_model.trainable_variables`.
  """
  index = {id(v): i for i, v in enumerate(keras_model.trainable_variables)}
  groups: dict[str, list[int]] = {}
  owner: dict[str, str] = {}
  for layer in keras_model.layers:
    variables = [v for v in layer.trainable_weights if id(v) in index]
    if not variables:
      continue
    key = layer.name
    if isinstance(layer, _NORMALIZATIONS):
      feeder = _feeding_layer(layer)
      if (
        feeder is not None
        and feeder.name in owner
        and not getattr(feeder, 'use_bias', True)
      ):
        key = owner[feeder.name]
    owner[layer.name] = key
    groups.setdefault(key, []).extend(index[id(v)] for v in variables)
  result = list(groups.values())
  covered = sorted(i for g in result for i in g)
  if covered != list(range(len(index))):
    raise ValueError(
      'Could not assign every trainable variable of the Keras model to a '
      'layer (nested models?); pass explicit FedLWS groups instead.'
    )
  return result


def model_layer_groups(
  model_fn: Callable[[], tff.learning.models.VariableModel],
  grouping: options.FedLwsGrouping = options.FedLwsGrouping.LAYER,
) -> list[list[int]]:
  """FedLWS groups of the model `model_fn` builds (in a scratch graph).

  For `'layer'` and a model from `tff.learning.models.from_keras_model`, the
  Keras connectivity decides (`keras_layer_groups`); otherwise the variable
  names do (`layer_groups`).
  """
  grouping = options.parse(options.FedLwsGrouping, grouping, 'grouping')
  with tf.Graph().as_default():
    model = model_fn()
    names = [v.name for v in model.trainable_variables]
    keras_model = tff_compat.keras_model_of(model)
    if grouping == options.FedLwsGrouping.LAYER and keras_model is not None:
      try:
        return keras_layer_groups(keras_model)
      except ValueError:
        pass
  return layer_groups(names, grouping)


def shrink_factors(
  weight_norms: tf.Tensor,
  step_norms: tf.Tensor,
  tau: tf.Tensor,
  *,
  beta: Union[float, tf.Tensor],
  tau_clip: Optional[tuple[float, float]],
  num_clients: tf.Tensor,
) -> tuple[tf.Tensor, tf.Tensor]:
  """(gamma [L], b [L]) of Eq. 8 with the guards of the module docstring."""
  b = beta * tau
  if tau_clip is not None:
    b = tf.clip_by_value(b, tau_clip[0], tau_clip[1])
  denominator = weight_norms + b * step_norms
  gamma = tf.math.divide_no_nan(weight_norms, denominator)
  valid = tf.logical_and(
    tf.logical_and(weight_norms > 0, denominator > _TINY),
    tf.logical_and(tf.math.is_finite(gamma), num_clients > 0),
  )
  return tf.where(valid, gamma, tf.ones_like(gamma)), b


def scale_groups(
  leaves: Sequence[tf.Tensor],
  gamma: tf.Tensor,
  groups: Sequence[Sequence[int]],
) -> list[tf.Tensor]:
  """Eq. 9: each group's leaves times its gamma_l.

  Args:
    leaves: The trainable leaves of w_hat.
    gamma: float32 [L], one factor per group.
    groups: Lists of leaf indices, one per group.

  Returns:
    The scaled leaves; a leaf in no group is returned as it is.
  """
  scaled = list(leaves)
  for l, group in enumerate(groups):
    for i in group:
      scaled[i] = leaves[i] * tf.cast(gamma[l], leaves[i].dtype)
  return scaled


def shrink_step(
  old: Sequence[tf.Tensor],
  new: Sequence[tf.Tensor],
  tau: tf.Tensor,
  num_clients: tf.Tensor,
  groups: Sequence[Sequence[int]],
  *,
  beta: Union[float, tf.Tensor],
  tau_clip: Optional[tuple[float, float]],
) -> tuple[list[tf.Tensor], collections.OrderedDict]:
  """Eqs. 8-9 on flat leaves: w_hat shrunk group by group.

  Args:
    old: The trainable leaves of the previous global model w.
    new: Those of w_hat, the server optimizer's result.
    tau: float32 [L], the round's tau_l (`fedlws_stats`).
    num_clients: The number of valid clients (gamma = 1 when 0).
    groups: Lists of leaf indices, one per group.
    beta: The scale of tau.
    tau_clip: `(low, high)` to clip beta * tau to, or None.

  Returns:
    (the shrunk leaves, `OrderedDict(gamma, tau, b, step_norm,
    weight_norm)`, float32 [L] each).
  """
  weight_norms = fedlws_stats.group_norms(old, groups)
  step_norms = fedlws_stats.group_norms(
    [n - o for n, o in zip(new, old)], groups
  )
  gamma, b = shrink_factors(
    weight_norms,
    step_norms,
    tau,
    beta=beta,
    tau_clip=tau_clip,
    num_clients=num_clients,
  )
  measurements = collections.OrderedDict(
    gamma=gamma,
    tau=tau,
    b=b,
    step_norm=step_norms,
    weight_norm=weight_norms,
  )
  return scale_groups(new, gamma, groups), measurements


def fedlws_step(
  server_optimizer: tff.learning.optimizers.Optimizer,
  state,
  weights,
  stats,
  *,
  groups: Sequence[Sequence[int]],
  tau_clip: Optional[tuple[float, float]],
):
  """One server round: the optimizer's step, then the shrink of Eq. 9.

  A non-finite step, or one whose norms overflow (gamma 0), is rejected:
  weights and state are kept and `update_non_finite` is 1.

  Args:
    server_optimizer: The server optimizer (gives w_hat).
    state: `OrderedDict(optimizer, beta)`.
    weights: The trainable weights w.
    stats: `OrderedDict(mean_update, tau, num_clients)` of `fedlws_stats`.
    groups: Lists of leaf indices, one per group.
    tau_clip: `(low, high)` to clip beta * tau to, or None.

  Returns:
    (new state, new trainable weights, measurements).
  """
  optimizer_state, stepped = server_optimizer.next(
    state['optimizer'], weights, stats['mean_update']
  )
  new = tf.nest.flatten(stepped)
  shrunk, measurements = shrink_step(
    tf.nest.flatten(weights),
    new,
    stats['tau'],
    stats['num_clients'],
    groups,
    beta=state['beta'],
    tau_clip=tau_clip,
  )
  # An overflowing step (inf norms: gamma 0) is rejected like a NaN one.
  finite = server_step.all_finite(
    shrunk,
    new,
    measurements['weight_norm'],
    measurements['step_norm'],
    stats['mean_update'],
    optimizer_state,
  )
  shrunk = tf.nest.pack_sequence_as(weights, shrunk)
  new_state = collections.OrderedDict(
    optimizer=optimizer_state, beta=state['beta']
  )
  measurements['update_non_finite'] = 1 - tf.cast(finite, tf.int32)
  return (
    server_step.keep_unless(finite, new_state, state),
    server_step.keep_unless(finite, shrunk, weights),
    measurements,
  )


def _checked_tau_clip(
  beta: float, tau_clip: Optional[tuple[float, float]]
) -> Optional[tuple[float, float]]:
  """`tau_clip` as floats, after checking it and `beta`."""
  if not beta >= 0:
    raise ValueError(f'FedLWS beta must be >= 0, got {beta}.')
  if tau_clip is None:
    return None
  low, high = tau_clip
  if not 0 <= low <= high:
    raise ValueError(
      f'tau_clip must be (low, high), 0 <= low <= high; got {tau_clip}.'
    )
  return (float(low), float(high))


def _get_hparams(server_optimizer, state):
  """The server optimizer's hyperparameters plus `beta`."""
  hparams = collections.OrderedDict(
    server_optimizer.get_hparams(state['optimizer'])
  )
  hparams['beta'] = state['beta']
  return hparams


def _set_hparams(server_optimizer, state, hparams):
  """The state with `_get_hparams`'s hyperparameters set."""
  hparams = collections.OrderedDict(hparams)
  beta_value = hparams.pop('beta')
  return collections.OrderedDict(
    optimizer=server_optimizer.set_hparams(state['optimizer'], hparams),
    beta=beta_value,
  )


def build_fedlws_finalizer(
  server_optimizer: tff.learning.optimizers.Optimizer,
  model_weights_type: tff.StructType,
  *,
  groups: Sequence[Sequence[int]],
  beta: float,
  tau_clip: Optional[tuple[float, float]] = None,
) -> tff.learning.templates.FinalizerProcess:
  """A finalizer: server optimizer step, then FedLWS's layer-wise shrink.

  Args:
    server_optimizer: A `tff.learning.optimizers.Optimizer`; the paper uses
      SGD with learning rate 1 (`build_sgdm(1.0)`).
    model_weights_type: The `tff.learning.models.ModelWeights` type.
    groups: Layers as lists of trainable-variable indices (`layer_groups`).
    beta: The scale of tau (paper: 0.1 for CNNs, 0.01 for ResNets; safe range
      0.001-0.1); 0 gives the base method exactly.
    tau_clip: `(low, high)` to clip beta * tau to, as the official code does
      with (0.01, 0.2); None (paper) does not clip.

  Returns:
    A `FinalizerProcess` whose update is the `fedlws_stats` result and whose
    measurements are `OrderedDict(gamma, tau, b, step_norm, weight_norm)`
    (float32 [L] each) and `update_non_finite`. Its hparams are the server
    optimizer's plus `beta`.
  """
  tau_clip = _checked_tau_clip(beta, tau_clip)
  server_step.check_model_weights_type(model_weights_type)
  trainable_type = model_weights_type.trainable
  num_leaves = len(value_types.leaf_types(trainable_type))
  groups = [list(g) for g in groups]
  fedlws_stats.check_groups(groups, num_leaves)
  update_type = tff.types.to_type(
    collections.OrderedDict(
      mean_update=trainable_type,
      tau=tff.TensorType(np.float32, [len(groups)]),
      num_clients=tff.TensorType(np.float32),
    )
  )

  def initial_state():
    specs = tff.types.type_to_tf_tensor_specs(trainable_type)
    return collections.OrderedDict(
      optimizer=server_optimizer.initialize(specs),
      beta=tf.constant(beta, tf.float32),
    )

  def step(state, weights, stats):
    return fedlws_step(
      server_optimizer, state, weights, stats, groups=groups, tau_clip=tau_clip
    )

  def get_hparams(state):
    return _get_hparams(server_optimizer, state)

  def set_hparams(state, hparams):
    return _set_hparams(server_optimizer, state, hparams)

  return server_step.build_server_step_finalizer(
    model_weights_type,
    update_type,
    initial_state,
    step,
    get_hparams=get_hparams,
    set_hparams=set_hparams,
  )
