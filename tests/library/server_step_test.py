"""server_step: the finalizer plumbing and the non-finite guards it offers.

`build_server_step_finalizer` runs a server step of (state, trainable
weights, update); here a scaled SGD step with a counter, checked against
NumPy over rounds: the trainable weights move, the non-trainable ones pass
through unchanged, the state and measurements are the step's, and the
hyperparameter accessors are the given ones (or TFF's defaults).
"""

import collections

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators import runtime
from tff_aggregators.finalizers import server_step

_SHAPES = ([3, 2], [2])
_TRAINABLE_TYPE = tff.types.to_type(
  [tff.TensorType(np.float32, s) for s in _SHAPES]
)
_WEIGHTS_TYPE = tff.types.to_type(
  tff.learning.models.ModelWeights(
    trainable=[tff.TensorType(np.float32, s) for s in _SHAPES],
    non_trainable=[tff.TensorType(np.float32, [4])],
  )
)


def setUpModule():
  runtime.use_local_worker()


def _initial_state():
  return collections.OrderedDict(
    learning_rate=tf.constant(0.5), rounds=tf.constant(0)
  )


def _sgd_step(state, weights, update):
  """w - lr * update; counts the rounds; measures the update's norm."""
  new = [w - state['learning_rate'] * u for w, u in zip(weights, update)]
  norm = tf.sqrt(tf.add_n([tf.reduce_sum(tf.square(u)) for u in update]))
  new_state = collections.OrderedDict(
    learning_rate=state['learning_rate'], rounds=state['rounds'] + 1
  )
  return new_state, new, collections.OrderedDict(update_norm=norm)


def _get_hparams(state):
  return collections.OrderedDict(learning_rate=state['learning_rate'])


def _set_hparams(state, hparams):
  return collections.OrderedDict(
    learning_rate=hparams['learning_rate'], rounds=state['rounds']
  )


def _weights(rng):
  return tff.learning.models.ModelWeights(
    trainable=[rng.normal(size=s).astype(np.float32) for s in _SHAPES],
    non_trainable=[rng.normal(size=4).astype(np.float32)],
  )


def _update(rng):
  return [rng.normal(size=s).astype(np.float32) for s in _SHAPES]


def _finalizer(**hparams_fns):
  return server_step.build_server_step_finalizer(
    _WEIGHTS_TYPE, _TRAINABLE_TYPE, _initial_state, _sgd_step, **hparams_fns
  )


class BuildServerStepFinalizerTest(absltest.TestCase):
  def test_rounds_match_numpy_and_non_trainable_pass_through(self):
    rng = np.random.default_rng(0)
    process = _finalizer()
    self.assertIsInstance(process, tff.learning.templates.FinalizerProcess)
    state = process.initialize()
    self.assertEqual(state['rounds'], 0)
    self.assertAlmostEqual(state['learning_rate'], 0.5)
    weights = _weights(rng)
    want = [np.copy(w) for w in weights.trainable]
    non_trainable = [np.copy(w) for w in weights.non_trainable]
    for round_num in range(1, 4):
      update = _update(rng)
      output = process.next(state, weights, update)
      want = [w - np.float32(0.5) * u for w, u in zip(want, update)]
      for got, expected in zip(output.result.trainable, want):
        np.testing.assert_allclose(got, expected, rtol=1e-6)
      for got, expected in zip(output.result.non_trainable, non_trainable):
        np.testing.assert_array_equal(got, expected)
      self.assertEqual(output.state['rounds'], round_num)
      np.testing.assert_allclose(
        output.measurements['update_norm'],
        np.sqrt(sum(np.sum(np.square(u)) for u in update)),
        rtol=1e-6,
      )
      state, weights = output.state, output.result

  def test_type_signature_is_a_finalizer_of_model_weights(self):
    process = _finalizer()
    result_type = process.next.type_signature.result
    self.assertEqual(result_type.result.member, _WEIGHTS_TYPE)
    self.assertEqual(
      process.next.type_signature.parameter[2].member, _TRAINABLE_TYPE
    )

  def test_given_hparams_accessors_are_used(self):
    process = _finalizer(get_hparams=_get_hparams, set_hparams=_set_hparams)
    state = process.initialize()
    self.assertEqual(
      dict(process.get_hparams(state)), dict(learning_rate=np.float32(0.5))
    )
    state = process.set_hparams(
      state, collections.OrderedDict(learning_rate=np.float32(0.25))
    )
    self.assertAlmostEqual(state['learning_rate'], 0.25)
    rng = np.random.default_rng(1)
    weights, update = _weights(rng), _update(rng)
    output = process.next(state, weights, update)
    np.testing.assert_allclose(
      output.result.trainable[1],
      weights.trainable[1] - np.float32(0.25) * update[1],
      rtol=1e-6,
    )

  def test_without_accessors_hparams_are_tffs_empty_default(self):
    process = _finalizer()
    state = process.initialize()
    self.assertEmpty(process.get_hparams(state))

  def test_refuses_a_type_that_is_not_model_weights(self):
    for value_type in (
      _TRAINABLE_TYPE,
      tff.types.to_type(
        collections.OrderedDict(
          trainable=_TRAINABLE_TYPE, non_trainable=_TRAINABLE_TYPE
        )
      ),
      None,
    ):
      with self.assertRaisesRegex(TypeError, 'ModelWeights'):
        server_step.build_server_step_finalizer(
          value_type, _TRAINABLE_TYPE, _initial_state, _sgd_step
        )


class CheckModelWeightsTypeTest(absltest.TestCase):
  def test_accepts_model_weights(self):
    server_step.check_model_weights_type(_WEIGHTS_TYPE)

  def test_refuses_other_types(self):
    for value_type in (_TRAINABLE_TYPE, tff.TensorType(np.float32), 'w'):
      with self.assertRaisesRegex(TypeError, 'ModelWeights type'):
        server_step.check_model_weights_type(value_type)


class AllFiniteTest(parameterized.TestCase):
  @parameterized.named_parameters(
    ('finite', [1.0, -2.0], True),
    ('nan', [1.0, np.nan], False),
    ('inf', [np.inf, 1.0], False),
    ('minus_inf', [1.0, -np.inf], False),
  )
  def test_a_float_tensor(self, values, want):
    x = tf.constant(values, tf.float32)
    self.assertEqual(bool(server_step.all_finite(x)), want)
    self.assertEqual(want, bool(np.all(np.isfinite(values))))

  def test_every_leaf_of_every_structure_counts(self):
    finite = [tf.ones([2]), collections.OrderedDict(a=tf.zeros([3]))]
    bad = collections.OrderedDict(b=[tf.constant([0.0, np.nan], tf.float64)])
    self.assertTrue(bool(server_step.all_finite(finite, finite)))
    self.assertFalse(bool(server_step.all_finite(finite, bad)))
    self.assertFalse(bool(server_step.all_finite(bad, finite)))

  def test_half_precision_is_checked(self):
    self.assertFalse(
      bool(server_step.all_finite(tf.constant([np.inf], tf.float16)))
    )

  def test_non_float_and_non_tensor_leaves_are_ignored(self):
    self.assertTrue(
      bool(server_step.all_finite(tf.constant([1, 2]), tf.constant(True), 'x'))
    )
    self.assertTrue(bool(server_step.all_finite()))
    self.assertTrue(bool(server_step.all_finite([])))

  def test_inside_a_tf_function(self):
    fn = tf.function(server_step.all_finite)
    self.assertTrue(bool(fn([tf.ones([2]), tf.ones([1])])))
    self.assertFalse(bool(fn([tf.ones([2]), tf.constant([np.nan])])))


class KeepUnlessTest(absltest.TestCase):
  def test_new_if_finite_else_old_leafwise(self):
    rng = np.random.default_rng(2)
    new = collections.OrderedDict(
      a=rng.normal(size=[2, 3]).astype(np.float32),
      b=[np.int32(4)],
    )
    old = collections.OrderedDict(
      a=rng.normal(size=[2, 3]).astype(np.float32),
      b=[np.int32(-1)],
    )
    for finite, want in ((True, new), (False, old)):
      got = server_step.keep_unless(tf.constant(finite), new, old)
      tf.nest.assert_same_structure(got, want)
      np.testing.assert_array_equal(got['a'], want['a'])
      self.assertEqual(int(got['b'][0]), int(want['b'][0]))


if __name__ == '__main__':
  absltest.main()
