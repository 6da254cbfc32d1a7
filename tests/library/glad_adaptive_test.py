"""The FedGLAD Adam/Yogi finalizer against NumPy and TFF's own optimizers."""

import collections

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow_federated as tff

from tff_aggregators import runtime
from tests import numpy_references
from tff_aggregators.finalizers import glad_adaptive

_WEIGHTS_TYPE = tff.types.to_type(
  tff.learning.models.ModelWeights(
    trainable=[
      tff.TensorType(np.float32, [3, 2]),
      tff.TensorType(np.float32, [2]),
    ],
    non_trainable=[tff.TensorType(np.float32, [2])],
  )
)


def setUpModule():
  runtime.use_local_worker()


def _weights(rng):
  return tff.learning.models.ModelWeights(
    trainable=[
      rng.normal(size=(3, 2)).astype(np.float32),
      rng.normal(size=2).astype(np.float32),
    ],
    non_trainable=[rng.normal(size=2).astype(np.float32)],
  )


def _updates(rng, rounds):
  return [
    [
      rng.normal(size=(3, 2)).astype(np.float32),
      rng.normal(size=2).astype(np.float32),
    ]
    for _ in range(rounds)
  ]


def _run(process, weights, updates, multipliers):
  state = process.initialize()
  for g, s in zip(updates, multipliers):
    output = process.next(
      state,
      weights,
      collections.OrderedDict(update=g, multipliers=np.float32(s)),
    )
    state, weights = output.state, output.result
  return state, weights, output.measurements


_BUILDERS = dict(
  adam=tff.learning.optimizers.build_adam,
  yogi=tff.learning.optimizers.build_yogi,
)


class GladAdaptiveFinalizerTest(parameterized.TestCase):
  @parameterized.parameters('adam', 'yogi')
  def test_matches_numpy_reference(self, kind):
    rng = np.random.default_rng(0)
    weights = _weights(rng)
    updates = _updates(rng, 4)
    multipliers = [[1.0, 1.0], [1.3, 0.7], [0.9, 1.1], [2.0, 0.5]]
    optimizer = _BUILDERS[kind](
      learning_rate=0.05, beta_1=0.9, beta_2=0.99, epsilon=1e-8
    )
    process = glad_adaptive.build_glad_adaptive_finalizer(
      optimizer, _WEIGHTS_TYPE
    )
    state, new_weights, measurements = _run(
      process, weights, updates, multipliers
    )
    want_w, want_m, want_v = numpy_references.glad_adaptive(
      weights.trainable,
      updates,
      multipliers,
      kind=kind,
      lr=0.05,
      beta_1=0.9,
      beta_2=0.99,
      epsilon=1e-8,
      initial_v=1e-6 if kind == 'yogi' else 0.0,
    )
    for got, want in zip(new_weights.trainable, want_w):
      np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for got, want in zip(state['accumulator'], want_m):
      np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    for got, want in zip(state['preconditioner'], want_v):
      np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-9)
    np.testing.assert_array_equal(
      new_weights.non_trainable[0], weights.non_trainable[0]
    )
    self.assertEqual(measurements['update_non_finite'], 0)
    self.assertEqual(state['step'], 4)

  @parameterized.parameters('adam', 'yogi')
  def test_multipliers_one_is_tff_optimizer_bit_for_bit(self, kind):
    rng = np.random.default_rng(1)
    weights = _weights(rng)
    updates = _updates(rng, 3)
    optimizer = _BUILDERS[kind](learning_rate=0.1, epsilon=1e-8)
    glad = glad_adaptive.build_glad_adaptive_finalizer(optimizer, _WEIGHTS_TYPE)
    stock = tff.learning.templates.build_apply_optimizer_finalizer(
      optimizer, _WEIGHTS_TYPE
    )
    glad_state, glad_weights, _ = _run(glad, weights, updates, [[1.0, 1.0]] * 3)
    stock_state, stock_weights = stock.initialize(), weights
    for g in updates:
      output = stock.next(stock_state, stock_weights, g)
      stock_state, stock_weights = output.state, output.result
    for a, b in zip(glad_weights.trainable, stock_weights.trainable):
      np.testing.assert_array_equal(a, b)
    for key in ('accumulator', 'preconditioner'):
      for a, b in zip(glad_state[key], stock_state[key]):
        np.testing.assert_array_equal(a, b)

  def test_second_moment_ignores_the_multipliers(self):
    rng = np.random.default_rng(2)
    weights = _weights(rng)
    updates = _updates(rng, 2)
    process = glad_adaptive.build_glad_adaptive_finalizer(
      tff.learning.optimizers.build_adam(0.1), _WEIGHTS_TYPE
    )
    one, _, _ = _run(process, weights, updates, [[1.0, 1.0]] * 2)
    scaled, _, _ = _run(process, weights, updates, [[3.0, 0.2]] * 2)
    for a, b in zip(one['preconditioner'], scaled['preconditioner']):
      np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(
      scaled['accumulator'][0], 3.0 * one['accumulator'][0], rtol=1e-6
    )

  def test_non_finite_update_is_rejected(self):
    rng = np.random.default_rng(3)
    weights = _weights(rng)
    (update,) = _updates(rng, 1)
    update[1][0] = np.inf
    process = glad_adaptive.build_glad_adaptive_finalizer(
      tff.learning.optimizers.build_adam(0.1), _WEIGHTS_TYPE
    )
    state, new_weights, measurements = _run(
      process, weights, [update], [[1.0, 1.0]]
    )
    self.assertEqual(measurements['update_non_finite'], 1)
    self.assertEqual(state['step'], 0)
    for a, b in zip(new_weights.trainable, weights.trainable):
      np.testing.assert_array_equal(a, b)

  def test_hparams_round_trip(self):
    process = glad_adaptive.build_glad_adaptive_finalizer(
      tff.learning.optimizers.build_adam(0.1), _WEIGHTS_TYPE
    )
    state = process.initialize()
    hparams = process.get_hparams(state)
    self.assertCountEqual(
      hparams, ['learning_rate', 'beta_1', 'beta_2', 'epsilon']
    )
    hparams['learning_rate'] = np.float32(0.5)
    state = process.set_hparams(state, hparams)
    self.assertAlmostEqual(process.get_hparams(state)['learning_rate'], 0.5)

  def test_rejects_a_non_adaptive_optimizer(self):
    with self.assertRaisesRegex(TypeError, 'build_adam or build_yogi'):
      glad_adaptive.build_glad_adaptive_finalizer(
        tff.learning.optimizers.build_sgdm(1.0), _WEIGHTS_TYPE
      )

  def test_rejects_a_non_model_weights_type(self):
    with self.assertRaisesRegex(TypeError, 'ModelWeights'):
      glad_adaptive.build_glad_adaptive_finalizer(
        tff.learning.optimizers.build_adam(0.1),
        _WEIGHTS_TYPE.trainable,
      )

  def test_optimizer_kind(self):
    self.assertEqual(
      glad_adaptive.optimizer_kind(tff.learning.optimizers.build_sgdm(1.0)),
      'sgdm',
    )
    self.assertEqual(
      glad_adaptive.optimizer_kind(tff.learning.optimizers.build_yogi(1.0)),
      'yogi',
    )
    self.assertIsNone(
      glad_adaptive.optimizer_kind(tff.learning.optimizers.build_adagrad(1.0))
    )


if __name__ == '__main__':
  absltest.main()
