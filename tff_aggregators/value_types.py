"""Checks and views of the value types the aggregators receive.

`tff.learning` hands aggregators the trainable model delta: a Python container
(list, tuple or OrderedDict) of float tensors. The helpers here check such a
type once, in `create`, so a wrong structure fails with a message naming the
method and the fix instead of deep inside TFF's type checker.
"""

from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

_FLOAT_DTYPES = (np.float16, np.float32, np.float64, tf.bfloat16.as_numpy_dtype)


class _Leaf:
  """A placeholder leaf (`tf.nest` treats it as an atom)."""

  def __init__(self, tensor_type: tff.TensorType):
    self.tensor_type = tensor_type


def to_type(value_type: Any) -> tff.Type:
  """`value_type` as a `tff.Type`."""
  if isinstance(value_type, tff.Type):
    return value_type
  return tff.types.to_type(value_type)


def template(value_type: Any):
  """The Python structure TFF gives TF code for `value_type` (atoms as leaves).

  Raises:
    TypeError: If `value_type` is federated, or not tensors in Python
      containers.
  """
  value_type = to_type(value_type)
  if isinstance(value_type, tff.FederatedType):
    raise TypeError(
      f'Expected an unplaced value type, got the federated {value_type}.'
    )
  if not tff.types.contains_only(
    value_type,
    lambda t: isinstance(t, (tff.TensorType, tff.StructWithPythonType)),
  ):
    raise TypeError(
      'The value type must be a tensor or a structure of tensors in Python '
      f'containers (as `tff.learning` produces), got {value_type}.'
    )
  return tff.types.structure_from_tensor_type_tree(_Leaf, value_type)


def leaf_types(value_type: Any) -> list[tff.TensorType]:
  """The leaf `tff.TensorType`s of `value_type`, in `tf.nest.flatten` order."""
  return [leaf.tensor_type for leaf in tf.nest.flatten(template(value_type))]


def num_elements(tensor_type: tff.TensorType) -> int:
  return int(np.prod(tensor_type.shape, dtype=np.int64))


def is_float(dtype: Any) -> bool:
  return np.issubdtype(dtype, np.floating) or dtype in _FLOAT_DTYPES


def check_float_leaves(value_type: Any, method: str) -> list[tff.TensorType]:
  """The leaf types of `value_type`; raises unless all are fully shaped floats.

  Args:
    value_type: The value type given to a factory's `create`.
    method: The factory's name, for the error messages.

  Returns:
    The leaf `tff.TensorType`s in `tf.nest.flatten` order.

  Raises:
    TypeError: On no leaves, a non-float leaf or a not fully defined shape.
  """
  leaves = leaf_types(value_type)
  if not leaves:
    raise TypeError(f'{method}: the value type {value_type} has no tensors.')
  for leaf in leaves:
    if not is_float(leaf.dtype):
      raise TypeError(
        f'{method} aggregates floating-point values only; got a '
        f'{leaf.dtype} leaf in {value_type}. Cast integer leaves to a float '
        'dtype on the clients first.'
      )
    if leaf.shape is None or not tff.types.is_shape_fully_defined(leaf.shape):
      raise TypeError(
        f'{method} needs fully defined shapes; got {leaf} in {value_type}.'
      )
  return leaves


def check_scalar_weight(weight_type: Any, method: str) -> tff.TensorType:
  """`weight_type` as a `tff.TensorType`; raises unless a numeric scalar."""
  weight_type = to_type(weight_type)
  if (
    not isinstance(weight_type, tff.TensorType)
    or weight_type.shape is None
    or tuple(weight_type.shape)
    or not (
      np.issubdtype(weight_type.dtype, np.floating)
      or np.issubdtype(weight_type.dtype, np.integer)
    )
  ):
    raise TypeError(
      f'{method} needs a numeric scalar weight, got {weight_type}.'
    )
  return weight_type
