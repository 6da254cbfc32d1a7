"""value_types: the value-type checks and views every factory's `create` uses.

Expectations come from NumPy values of the same structure: the leaves in
`tf.nest.flatten` order of a concrete value, sizes from `np.prod`.
"""

import collections
import math

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators import value_types


def _value():
  """A delta-like value whose OrderedDict keys are not in sorted order."""
  return collections.OrderedDict(
    kernel=np.zeros([3, 2], np.float32),
    bias=np.zeros([2], np.float16),
    block=[np.zeros([4], np.float64), np.zeros([], np.float32)],
  )


def _type_of(value):
  return tff.types.to_type(
    tf.nest.map_structure(lambda x: tff.TensorType(x.dtype, x.shape), value)
  )


class ToTypeTest(absltest.TestCase):
  def test_a_tff_type_is_returned_as_is(self):
    value_type = _type_of(_value())
    self.assertIs(value_types.to_type(value_type), value_type)

  def test_a_python_spec_becomes_its_tff_type(self):
    spec = [(np.float32, [2]), (np.int32, [])]
    self.assertEqual(
      value_types.to_type(spec),
      tff.StructWithPythonType(
        [tff.TensorType(np.float32, [2]), tff.TensorType(np.int32)], list
      ),
    )


class LeafTypesTest(parameterized.TestCase):
  def test_leaves_in_tf_nest_flatten_order(self):
    value = _value()
    got = value_types.leaf_types(_type_of(value))
    want = tf.nest.flatten(value)  # sorted keys: bias, block, kernel
    self.assertEqual(
      [(t.dtype, tuple(t.shape)) for t in got],
      [(x.dtype, x.shape) for x in want],
    )
    self.assertEqual([tuple(t.shape) for t in got], [(2,), (4,), (), (3, 2)])

  def test_a_single_tensor_is_its_own_leaf(self):
    tensor_type = tff.TensorType(np.float32, [5])
    self.assertEqual(value_types.leaf_types(tensor_type), [tensor_type])

  def test_template_has_the_value_structure(self):
    value = _value()
    template = value_types.template(_type_of(value))
    tf.nest.assert_same_structure(template, value)

  def test_a_federated_type_is_refused(self):
    federated = tff.FederatedType(_type_of(_value()), tff.CLIENTS)
    with self.assertRaisesRegex(TypeError, 'federated'):
      value_types.leaf_types(federated)

  @parameterized.named_parameters(
    (
      'unnamed_struct',
      tff.StructType([('a', tff.TensorType(np.float32, [2]))]),
    ),
    ('sequence', tff.SequenceType(tff.TensorType(np.float32, [2]))),
  )
  def test_a_non_python_container_is_refused(self, value_type):
    with self.assertRaisesRegex(TypeError, 'Python containers'):
      value_types.leaf_types(value_type)


class NumElementsAndDtypeTest(parameterized.TestCase):
  @parameterized.parameters(
    ([],),
    ([7],),
    ([3, 0, 2],),
    ([4, 5, 6],),
    ([2**20, 2**12],),  # 2**32: beyond int32.
  )
  def test_num_elements_is_the_numpy_product(self, shape):
    want = math.prod(shape)  # Python integers: no overflow.
    got = value_types.num_elements(tff.TensorType(np.float32, shape))
    self.assertEqual(got, want)
    self.assertIsInstance(got, int)

  @parameterized.parameters(
    (np.float16, True),
    (np.float32, True),
    (np.float64, True),
    (tf.bfloat16.as_numpy_dtype, True),
    (np.int32, False),
    (np.int64, False),
    (np.bool_, False),
    (np.complex64, False),
  )
  def test_is_float(self, dtype, want):
    self.assertEqual(value_types.is_float(np.dtype(dtype)), want)


class CheckFloatLeavesTest(parameterized.TestCase):
  def test_float_leaves_are_returned_in_order(self):
    value_type = _type_of(_value())
    self.assertEqual(
      value_types.check_float_leaves(value_type, 'M'),
      value_types.leaf_types(value_type),
    )

  @parameterized.named_parameters(
    ('no_leaves', [], 'M: the value type .* has no tensors'),
    (
      'integer_leaf',
      [tff.TensorType(np.float32, [2]), tff.TensorType(np.int32, [2])],
      'M aggregates floating-point values only; got a int32 leaf',
    ),
    (
      'unknown_dimension',
      [tff.TensorType(np.float32, [None, 2])],
      'M needs fully defined shapes',
    ),
    (
      'unknown_rank',
      [tff.TensorType(np.float32, None)],
      'M needs fully defined shapes',
    ),
  )
  def test_refused_naming_the_method(self, value_type, message):
    with self.assertRaisesRegex(TypeError, message):
      value_types.check_float_leaves(value_type, 'M')


class CheckScalarWeightTest(parameterized.TestCase):
  @parameterized.parameters(np.float32, np.float64, np.int32, np.int64)
  def test_numeric_scalars_are_accepted(self, dtype):
    got = value_types.check_scalar_weight(tff.TensorType(dtype), 'M')
    self.assertEqual(got, tff.TensorType(dtype))
    self.assertIsInstance(got, tff.TensorType)

  def test_a_python_spec_is_converted(self):
    self.assertEqual(
      value_types.check_scalar_weight(np.float32, 'M'),
      tff.TensorType(np.float32),
    )

  @parameterized.named_parameters(
    ('vector', tff.TensorType(np.float32, [1])),
    ('unknown_rank', tff.TensorType(np.float32, None)),
    ('bool', tff.TensorType(np.bool_)),
    ('string', tff.TensorType(np.str_)),
    ('struct', tff.types.to_type([tff.TensorType(np.float32)])),
  )
  def test_other_weights_are_refused(self, weight_type):
    with self.assertRaisesRegex(TypeError, 'M needs a numeric scalar weight'):
      value_types.check_scalar_weight(weight_type, 'M')


if __name__ == '__main__':
  absltest.main()
