"""on_collected: the collected type, and the valid clients' models from it.

Expectations are NumPy's: the flat size is the sum of the leaves' sizes, a
client is valid iff its weight is positive and finite and its delta finite,
and its model is the global weights minus its delta, in collected order.
"""

import collections

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators import runtime
from tff_aggregators.aggregators import collect
from tff_aggregators.finalizers import on_collected

_SHAPES = collections.OrderedDict(kernel=[3, 2], bias=[2], scale=[])
_VALUE_TYPE = tff.types.to_type(
  collections.OrderedDict(
    (k, tff.TensorType(np.float32, s)) for k, s in _SHAPES.items()
  )
)
_D = sum(int(np.prod(s)) for s in _SHAPES.values())  # 9


def setUpModule():
  runtime.use_local_worker()


def _numpy_valid_models(weights, deltas, client_weights):
  """The reference: (models, weights, mask) of the valid clients."""
  deltas = np.asarray(deltas, np.float32).reshape([-1, weights.size])
  client_weights = np.asarray(client_weights, np.float32)
  mask = (
    (client_weights > 0)
    & np.isfinite(client_weights)
    & np.all(np.isfinite(deltas), axis=1)
  )
  return weights[None, :] - deltas[mask], client_weights[mask], mask


class CollectedTypeTest(absltest.TestCase):
  def test_rows_of_the_flat_size_and_one_weight_per_client(self):
    self.assertEqual(_D, 9)
    self.assertEqual(
      on_collected.collected_type(_VALUE_TYPE),
      tff.types.to_type(
        collections.OrderedDict(
          values=tff.TensorType(np.float32, [None, _D]),
          weights=tff.TensorType(np.float32, [None]),
        )
      ),
    )

  def test_a_single_tensor_and_other_float_dtypes(self):
    for value_type, size in (
      (tff.TensorType(np.float32, [4, 5]), 20),
      ([tff.TensorType(np.float16, [3]), tff.TensorType(np.float64, [])], 4),
    ):
      got = on_collected.collected_type(value_type)
      self.assertEqual(got.values, tff.TensorType(np.float32, [None, size]))
      self.assertEqual(got.weights, tff.TensorType(np.float32, [None]))

  def test_is_the_type_collect_all_factory_returns(self):
    process = collect.CollectAllFactory(3).create(
      _VALUE_TYPE, tff.TensorType(np.float32)
    )
    self.assertEqual(
      process.next.type_signature.result.result.member,
      on_collected.collected_type(_VALUE_TYPE),
    )


class ValidClientModelsTest(parameterized.TestCase):
  def _check(self, weights, deltas, client_weights):
    collected = collections.OrderedDict(
      values=tf.constant(deltas, tf.float32, shape=[len(client_weights), _D]),
      weights=tf.constant(client_weights, tf.float32),
    )
    models, got_weights, valid = on_collected.valid_client_models(
      tf.constant(weights), collected
    )
    want_models, want_weights, want_valid = _numpy_valid_models(
      weights, deltas, client_weights
    )
    self.assertEqual(models.shape, want_models.shape)
    np.testing.assert_array_equal(models, want_models)
    np.testing.assert_array_equal(got_weights, want_weights)
    np.testing.assert_array_equal(valid, want_valid)
    self.assertEqual(valid.dtype, tf.bool)
    return want_valid

  def test_invalid_clients_are_left_out_in_order(self):
    rng = np.random.default_rng(0)
    weights = rng.normal(size=_D).astype(np.float32)
    deltas = rng.normal(size=[8, _D]).astype(np.float32)
    deltas[2, 4] = np.nan
    deltas[5, 0] = -np.inf
    client_weights = [1.0, 2.0, 3.0, 0.0, -1.0, 4.0, np.inf, 5.0]
    valid = self._check(weights, deltas, client_weights)
    # Clients 0, 1 and 7 only: NaN and inf deltas, a zero, a negative and an
    # infinite weight each exclude one.
    np.testing.assert_array_equal(np.flatnonzero(valid), [0, 1, 7])

  def test_a_nan_weight_is_invalid(self):
    rng = np.random.default_rng(1)
    weights = rng.normal(size=_D).astype(np.float32)
    deltas = rng.normal(size=[3, _D]).astype(np.float32)
    valid = self._check(weights, deltas, [np.nan, 1.0, 0.5])
    np.testing.assert_array_equal(valid, [False, True, True])

  def test_every_client_valid(self):
    rng = np.random.default_rng(2)
    weights = rng.normal(size=_D).astype(np.float32)
    deltas = rng.normal(size=[4, _D]).astype(np.float32)
    valid = self._check(weights, deltas, [0.5, 1.0, 1e-30, 7.0])
    self.assertTrue(np.all(valid))

  def test_deltas_and_a_further_condition(self):
    # FedCDA's rows: (id, delta, loss); the delta columns and an id check.
    rng = np.random.default_rng(3)
    weights = rng.normal(size=_D).astype(np.float32)
    deltas = rng.normal(size=[4, _D]).astype(np.float32)
    rows = np.concatenate(
      [np.arange(4, dtype=np.float32)[:, None], deltas, np.ones([4, 1])], 1
    ).astype(np.float32)
    rows[1, -1] = np.nan  # Outside the deltas: still makes the row invalid.
    models, got_weights, valid = on_collected.valid_client_models(
      tf.constant(weights),
      collections.OrderedDict(
        values=tf.constant(rows),
        weights=tf.constant([1.0, 2.0, 0.0, 4.0]),
      ),
      deltas=tf.constant(deltas),
      also_valid=tf.constant([True, True, True, False]),
    )
    # 1: a non-finite row; 2: weight 0 (also_valid does not rescue it); 3:
    # fails also_valid.
    np.testing.assert_array_equal(valid, [True, False, False, False])
    np.testing.assert_array_equal(models, weights[None, :] - deltas[:1])
    np.testing.assert_array_equal(got_weights, [1.0])

  @parameterized.parameters(0, 3)
  def test_no_valid_client_gives_no_rows(self, n):
    weights = np.arange(_D, dtype=np.float32)
    deltas = np.ones([n, _D], np.float32)
    valid = self._check(weights, deltas, [0.0] * n)
    self.assertFalse(np.any(valid))

  def test_on_collect_all_factory_result_in_a_tff_computation(self):
    rng = np.random.default_rng(3)
    values = [
      collections.OrderedDict(
        (k, rng.normal(size=s).astype(np.float32)) for k, s in _SHAPES.items()
      )
      for _ in range(4)
    ]
    values[1]['bias'][0] = np.nan
    client_weights = [2.0, 1.0, 0.0, 3.0]
    process = collect.CollectAllFactory(4).create(
      _VALUE_TYPE, tff.TensorType(np.float32)
    )
    collected = process.next(process.initialize(), values, client_weights)
    weights = rng.normal(size=_D).astype(np.float32)

    @tff.tensorflow.computation(
      tff.TensorType(np.float32, [_D]),
      on_collected.collected_type(_VALUE_TYPE),
    )
    def valid_models(weights, collected):
      return on_collected.valid_client_models(weights, collected)

    models, got_weights, valid = valid_models(weights, collected.result)
    # Rows in tf.nest.flatten order: bias, kernel, scale (sorted keys).
    rows = [
      np.concatenate([np.ravel(v[k]) for k in sorted(_SHAPES)]) for v in values
    ]
    want_models, want_weights, want_valid = _numpy_valid_models(
      weights, rows, client_weights
    )
    np.testing.assert_array_equal(valid, [True, False, False, True])
    np.testing.assert_array_equal(valid, want_valid)
    np.testing.assert_allclose(models, want_models, rtol=1e-6)
    np.testing.assert_array_equal(got_weights, want_weights)


if __name__ == '__main__':
  absltest.main()
