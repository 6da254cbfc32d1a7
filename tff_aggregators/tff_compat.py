"""Every use of TensorFlow Federated's private API, in one place.

Written for TFF 0.87.0 (`SUPPORTED_TFF_VERSION`). The library needs a few
things TFF does not export: the training loop and non-finite handling of its
model-delta client work (so the client works here train exactly as TFF's
FedAvg clients do), the classes behind `tff.learning.optimizers.build_sgdm`,
`build_adam` and `build_yogi` (FedGLAD scales Adam's and Yogi's first moment
only), and the Keras model inside `tff.learning.models.from_keras_model`'s
wrapper (FedLWS's layer groups, FedLAW's BatchNormalization check).

Importing this module warns once if another TFF version is installed;
`tests/library/tff_compat_test.py` runs each entry point, so an upgrade
that moves one fails there, by name, rather than somewhere inside a method.
"""

from typing import Any, Optional
import warnings

import tensorflow as tf
import tensorflow_federated as tff

# pylint: disable=g-direct-tensorflow-import,protected-access
from tensorflow_federated.python.learning import loop_builder as _loop_builder
from tensorflow_federated.python.learning import tensor_utils as _tensor_utils
from tensorflow_federated.python.learning.optimizers import adam as _adam
from tensorflow_federated.python.learning.optimizers import sgdm as _sgdm
from tensorflow_federated.python.learning.optimizers import yogi as _yogi
from tensorflow_federated.python.learning.templates import (
  model_delta_client_work as _model_delta_client_work,
)
# pylint: enable=g-direct-tensorflow-import

SUPPORTED_TFF_VERSION = '0.87.0'

if tff.__version__ != SUPPORTED_TFF_VERSION:
  warnings.warn(
    f'tff_aggregators was written for TensorFlow Federated '
    f'{SUPPORTED_TFF_VERSION}, found {tff.__version__}: it uses private TFF '
    'APIs (tff_aggregators/tff_compat.py); run '
    'tests/library/tff_compat_test.py.',
    RuntimeWarning,
    stacklevel=2,
  )


def build_training_loop(loop_implementation: tff.learning.LoopImplementation):
  """TFF's client training loop: `fn(reduce_fn, dataset, initial_state_fn)`.

  `loop_builder.build_training_loop`, as `build_model_delta_client_work`
  uses it.
  """
  return _loop_builder.build_training_loop(
    loop_implementation=loop_implementation
  )


def zero_all_if_any_non_finite(structure: Any) -> tuple[Any, tf.Tensor]:
  """(structure, 0), or (zeros, 1) if any value is NaN or infinite (TFF's)."""
  return _tensor_utils.zero_all_if_any_non_finite(structure)


def build_model_delta_update_with_tff_optimizer(
  model_fn, *, weighting, loop_implementation
):
  """The client update function of TFF's model-delta client work."""
  return _model_delta_client_work.build_model_delta_update_with_tff_optimizer(
    model_fn, weighting=weighting, loop_implementation=loop_implementation
  )


_OPTIMIZER_KINDS = (
  (_sgdm._SGD, 'sgdm'),
  (_adam._Adam, 'adam'),
  (_yogi._Yogi, 'yogi'),
)


def optimizer_kind(optimizer: Any) -> Optional[str]:
  """'sgdm', 'adam' or 'yogi' for TFF's `build_sgdm`/`build_adam`/`build_yogi`.

  None for any other optimizer (TFF exports only the builders).
  """
  for cls, kind in _OPTIMIZER_KINDS:
    if type(optimizer) is cls:  # pylint: disable=unidiomatic-typecheck
      return kind
  return None


def keras_model_of(model: Any) -> Optional[tf.keras.Model]:
  """The Keras model inside `tff.learning.models.from_keras_model`'s model.

  None for any other `VariableModel`.
  """
  keras_model = getattr(model, '_keras_model', None)
  return keras_model if isinstance(keras_model, tf.keras.Model) else None
