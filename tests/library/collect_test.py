"""CollectAllFactory: every client's value and weight, in order, exactly."""

import collections

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators import runtime
from tff_aggregators.aggregators import collect

_VALUE_TYPE = tff.types.to_type(
  collections.OrderedDict(
    kernel=tff.TensorType(np.float32, [3, 2]),
    bias=tff.TensorType(np.float32, [2]),
    half=tff.TensorType(np.float16, [1]),
  )
)
_WEIGHT = tff.TensorType(np.float32)


def setUpModule():
  runtime.use_local_worker()


def _values(n, seed=0):
  rng = np.random.default_rng(seed)
  return [
    collections.OrderedDict(
      kernel=rng.normal(size=(3, 2)).astype(np.float32),
      bias=rng.normal(size=2).astype(np.float32),
      half=rng.normal(size=1).astype(np.float16),
    )
    for _ in range(n)
  ]


def _row(value):
  return np.concatenate(
    [np.ravel(value[k]).astype(np.float32) for k in ('bias', 'half', 'kernel')]
  )  # tf.nest.flatten sorts OrderedDict keys.


class CollectAllFactoryTest(parameterized.TestCase):
  @parameterized.parameters(0, 1, 4, 7)
  def test_rows_are_the_clients_in_order_exactly(self, n):
    process = collect.CollectAllFactory(7).create(_VALUE_TYPE, _WEIGHT)
    values = _values(n)
    weights = [float(k + 1) for k in range(n)]
    output = process.next(process.initialize(), values, weights)
    self.assertEqual(output.result['values'].shape, (n, 9))
    for k in range(n):
      np.testing.assert_array_equal(output.result['values'][k], _row(values[k]))
    np.testing.assert_array_equal(output.result['weights'], weights)
    self.assertEqual(output.measurements[collect.NUM_CLIENTS], n)

  def test_variable_cohorts_with_one_process(self):
    process = collect.CollectAllFactory(5).create(_VALUE_TYPE, _WEIGHT)
    state = process.initialize()
    for n in (5, 2, 3):
      output = process.next(state, _values(n, seed=n), [1.0] * n)
      self.assertLen(output.result['values'], n)

  def test_a_mean_after_collecting_equals_the_mean(self):
    values = _values(6, seed=1)
    weights = [1.0, 2.0, 0.5, 3.0, 1.0, 4.0]
    collected = collect.CollectAllFactory(8).create(_VALUE_TYPE, _WEIGHT)
    rows = collected.next(collected.initialize(), values, weights).result
    mean = tff.aggregators.MeanFactory().create(_VALUE_TYPE, _WEIGHT)
    expected = mean.next(mean.initialize(), values, weights).result
    weighted = np.average(rows['values'], axis=0, weights=rows['weights'])
    got = collect.unflatten(tf.constant(weighted, tf.float32), _VALUE_TYPE)
    for key in ('kernel', 'bias'):
      np.testing.assert_allclose(got[key], expected[key], rtol=1e-6)

  def test_unflatten_inverts_flatten(self):
    value = _values(1)[0]
    row = collect.flatten(value)
    back = collect.unflatten(row, _VALUE_TYPE)
    for key in value:
      np.testing.assert_array_equal(back[key], value[key])
      self.assertEqual(back[key].dtype, value[key].dtype)
    stacked = collect.unflatten(tf.stack([row, row]), _VALUE_TYPE)
    self.assertEqual(stacked['kernel'].shape, (2, 3, 2))

  def test_counts_non_finite_and_zero_weight_clients(self):
    values = _values(3)
    values[1]['bias'][0] = np.inf
    process = collect.CollectAllFactory(3).create(_VALUE_TYPE, _WEIGHT)
    output = process.next(process.initialize(), values, [1.0, 1.0, 0.0])
    self.assertEqual(output.measurements[collect.NUM_NON_FINITE_CLIENTS], 1)
    self.assertEqual(output.measurements[collect.NUM_ZERO_WEIGHT_CLIENTS], 1)
    self.assertTrue(np.isinf(output.result['values'][1]).any())  # Kept as is.

  def test_more_clients_than_capacity_fail_naming_max_clients(self):
    process = collect.CollectAllFactory(2).create(_VALUE_TYPE, _WEIGHT)
    with self.assertRaisesRegex(Exception, 'max_clients=2'):
      process.next(process.initialize(), _values(3), [1.0] * 3)

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, 'positive'):
      collect.CollectAllFactory(0)
    with self.assertRaisesRegex(TypeError, 'int'):
      collect.CollectAllFactory(2.5)
    with self.assertRaisesRegex(TypeError, 'floating-point'):
      collect.CollectAllFactory(2).create(
        [tff.TensorType(np.int32, [2])], _WEIGHT
      )
    with self.assertRaisesRegex(TypeError, 'numeric scalar weight'):
      collect.CollectAllFactory(2).create(
        _VALUE_TYPE, tff.TensorType(np.float32, [2])
      )


class TwoWorkersTest(absltest.TestCase):
  """`merge` runs only when clients are split over several workers."""

  def tearDown(self):
    runtime.use_local_worker()  # Stops the two workers.
    super().tearDown()

  def test_merged_rows_keep_their_weights_and_counts(self):
    runtime.use_local_workers(2)
    values = _values(5, seed=1)
    values[1]['bias'][0] = np.nan  # Non-finite on the first worker,
    values[4]['kernel'][0, 0] = np.inf  # and on the second.
    weights = [1.0, 2.0, 0.0, 4.0, 0.0]  # Zero weight on both workers.
    process = collect.CollectAllFactory(6).create(_VALUE_TYPE, _WEIGHT)
    output = process.next(process.initialize(), values, weights)
    rows, got_weights = output.result['values'], output.result['weights']
    self.assertEqual(rows.shape, (5, 9))
    # Rows arrive in blocks, one per worker, in the order the workers finish:
    # each row must still be paired with its own client's weight.
    expected = {k: _row(values[k]) for k in range(5)}
    seen = []
    for row, weight in zip(rows, got_weights, strict=True):
      matches = [
        k
        for k, r in expected.items()
        if np.array_equal(row, r, equal_nan=True) and weights[k] == weight
      ]
      self.assertLen(matches, 1, (row, weight))
      seen.extend(matches)
    self.assertCountEqual(seen, range(5))
    self.assertEqual(output.measurements[collect.NUM_CLIENTS], 5)
    self.assertEqual(output.measurements[collect.NUM_NON_FINITE_CLIENTS], 2)
    self.assertEqual(output.measurements[collect.NUM_ZERO_WEIGHT_CLIENTS], 2)

  def test_a_cohort_above_capacity_fails_in_merge(self):
    runtime.use_local_workers(2)  # Each worker's 2 clients fit; 4 do not.
    process = collect.CollectAllFactory(3).create(_VALUE_TYPE, _WEIGHT)
    with self.assertRaisesRegex(Exception, 'max_clients=3'):
      process.next(process.initialize(), _values(4), [1.0] * 4)


if __name__ == '__main__':
  absltest.main()
