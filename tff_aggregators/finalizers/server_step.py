"""A `FinalizerProcess` around one server TF function: the shared plumbing.

Every finalizer of the library computes the new global trainable weights in
one TF function of (state, trainable weights, the aggregator's result); this
module builds the federated `initialize`/`next` around it, passes
non-trainable weights through, and wraps optional hyperparameter accessors.
"""

from collections.abc import Callable
from typing import Any, Optional

import tensorflow as tf
import tensorflow_federated as tff


def check_model_weights_type(model_weights_type: Any) -> None:
  """Raises TypeError unless a `tff.learning.models.ModelWeights` type."""
  if (
    not isinstance(model_weights_type, tff.StructWithPythonType)
    or model_weights_type.python_container
    is not tff.learning.models.ModelWeights
  ):
    raise TypeError(
      'model_weights_type must be a tff.learning.models.ModelWeights type, '
      f'got {model_weights_type}.'
    )


def all_finite(*structures: Any) -> tf.Tensor:
  """Whether every floating-point tensor in `structures` is finite."""
  checks = [
    tf.reduce_all(tf.math.is_finite(x))
    for x in tf.nest.flatten(structures)
    if tf.is_tensor(x) and x.dtype.is_floating
  ]
  return tf.reduce_all(checks) if checks else tf.constant(True)


def keep_unless(finite: tf.Tensor, new: Any, old: Any) -> Any:
  """`new` where `finite` holds, else `old` (leafwise; rejects a bad step)."""
  return tf.nest.map_structure(lambda a, b: tf.where(finite, a, b), new, old)


def build_server_step_finalizer(
  model_weights_type: tff.StructType,
  update_type: Any,
  initial_state: Callable[[], Any],
  server_step: Callable[[Any, Any, Any], tuple[Any, Any, Any]],
  *,
  get_hparams: Optional[Callable[[Any], Any]] = None,
  set_hparams: Optional[Callable[[Any, Any], Any]] = None,
) -> tff.learning.templates.FinalizerProcess:
  """A `FinalizerProcess` whose `next` runs `server_step` at the server.

  Args:
    model_weights_type: The `tff.learning.models.ModelWeights` type.
    update_type: The type of the aggregator's result (the finalizer's update).
    initial_state: No-arg TF function giving the state.
    server_step: TF function (state, trainable weights, update) -> (new
      state, new trainable weights, measurements).
    get_hparams: Optional TF function state -> hparams.
    set_hparams: Optional TF function (state, hparams) -> state.

  Returns:
    The finalizer (non-trainable weights pass through unchanged).
  """
  check_model_weights_type(model_weights_type)
  trainable_type = model_weights_type.trainable
  initial_state_fn = tff.tensorflow.computation(initial_state)
  state_type = initial_state_fn.type_signature.result
  step = tff.tensorflow.computation(
    server_step, state_type, trainable_type, update_type
  )

  @tff.federated_computation()
  def init_fn():
    return tff.federated_eval(initial_state_fn, tff.SERVER)

  @tff.federated_computation(
    init_fn.type_signature.result,
    tff.FederatedType(model_weights_type, tff.SERVER),
    tff.FederatedType(update_type, tff.SERVER),
  )
  def next_fn(state, weights, update):
    new_state, new_trainable, measurements = tff.federated_map(
      step, (state, weights.trainable, update)
    )
    new_weights = tff.federated_zip(
      tff.learning.models.ModelWeights(new_trainable, weights.non_trainable)
    )
    return tff.templates.MeasuredProcessOutput(
      new_state, new_weights, measurements
    )

  get_hparams_fn = set_hparams_fn = None
  if get_hparams is not None:
    get_hparams_fn = tff.tensorflow.computation(get_hparams, state_type)
    set_hparams_fn = tff.tensorflow.computation(
      set_hparams, state_type, get_hparams_fn.type_signature.result
    )
  return tff.learning.templates.FinalizerProcess(
    init_fn,
    next_fn,
    get_hparams_fn=get_hparams_fn,
    set_hparams_fn=set_hparams_fn,
  )
