"""FedLAW (finalizer + build_fedlaw_process) against a NumPy implementation."""

import collections

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators import runtime
from tests import numpy_references
from tests import test_utils
from tff_aggregators import algorithms
from tff_aggregators.finalizers import fedlaw

_CLIENT_OPTIMIZER = tff.learning.optimizers.build_sgdm(learning_rate=0.5)
_NUM_PROXY = 20


def setUpModule():
  runtime.use_local_worker()


def _proxy(seed=0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(_NUM_PROXY, 3)).astype(np.float32)
  return x, rng.integers(0, 2, size=_NUM_PROXY).astype(np.int64)


class _TrainingShift(tf.keras.layers.Layer):
  """Adds 1 to the first logit in training mode only."""

  def call(self, inputs, training=None):
    if training:
      return inputs + tf.constant([1.0, 0.0])
    return inputs


def _training_shift_model_fn() -> tff.learning.models.VariableModel:
  return test_utils.tiny_model_fn(_TrainingShift())


def _one_round(
  variant, *, server_epochs=10, batch_size=32, seed=0, num_clients=3
):
  """(process output, reference) for one round on the tiny model."""
  x, y = _proxy()
  process = algorithms.build_fedlaw_process(
    test_utils.tiny_model_fn,
    _CLIENT_OPTIMIZER,
    proxy_data=(x, y),
    max_clients=5,
    variant=variant,
    server_epochs=server_epochs,
    server_lr=0.05,
    proxy_batch_size=batch_size,
    seed=seed,
  )
  state = process.initialize()
  weights = process.get_model_weights(state)
  datasets = test_utils.tiny_client_datasets(num_clients)
  deltas, sizes = test_utils.client_deltas(
    test_utils.tiny_model_fn, _CLIENT_OPTIMIZER, weights, datasets
  )
  w = np.concatenate([np.ravel(t) for t in weights.trainable]).astype(
    np.float64
  )
  rows = np.stack(
    [w - np.concatenate([np.ravel(t) for t in d]) for d in deltas]
  )

  def batch_order(epoch):
    order = tf.argsort(
      tf.random.stateless_uniform([_NUM_PROXY], seed=[seed, epoch])
    ).numpy()
    return np.array_split(order, range(batch_size, _NUM_PROXY, batch_size))

  want = numpy_references.fedlaw_linear(
    rows,
    sizes / sizes.sum(),
    x.astype(np.float64),
    y,
    epochs=server_epochs,
    lr=0.05,
    batch_order=batch_order,
    learn_gamma=variant in ('fedlaw', 'gamma', 'swa'),
    learn_lambda=variant in ('fedlaw', 'lambda', 'swa'),
    swa=variant == 'swa',
  )
  output = process.next(state, datasets)
  new = np.concatenate(
    [np.ravel(t) for t in process.get_model_weights(output.state).trainable]
  )
  return output.metrics['finalizer'], new, want, rows, sizes


class FedLawTest(parameterized.TestCase):
  @parameterized.parameters('fedlaw', 'gamma', 'lambda')
  def test_one_round_matches_numpy(self, variant):
    got, new, (gamma, lam, want), _, _ = _one_round(variant)
    self.assertAlmostEqual(got['gamma'], gamma, delta=1e-4)
    np.testing.assert_allclose(got['lambda'][:3], lam, atol=1e-5)
    np.testing.assert_allclose(new, want, rtol=1e-4, atol=1e-5)
    if variant != 'lambda':
      self.assertGreater(abs(gamma - 1.0), 1e-3)  # The search did move.
    if variant == 'gamma':
      np.testing.assert_allclose(np.sum(got['lambda']), 1.0, rtol=1e-6)

  def test_several_proxy_batches_per_epoch(self):
    got, new, (gamma, lam, want), _, _ = _one_round('fedlaw', batch_size=8)
    self.assertAlmostEqual(got['gamma'], gamma, delta=1e-4)
    np.testing.assert_allclose(got['lambda'][:3], lam, atol=1e-5)
    np.testing.assert_allclose(new, want, rtol=1e-4, atol=1e-5)

  def test_swa_matches_numpy(self):
    got, new, (gamma, lam, want), _, _ = _one_round('swa', server_epochs=16)
    self.assertAlmostEqual(got['gamma'], gamma, delta=1e-4)
    np.testing.assert_allclose(got['lambda'][:3], lam, atol=1e-5)
    np.testing.assert_allclose(new, want, rtol=1e-4, atol=1e-5)

  def test_zero_server_epochs_is_fedavg(self):
    got, new, _, rows, sizes = _one_round('fedlaw', server_epochs=0)
    self.assertEqual(got['gamma'], 1.0)
    np.testing.assert_allclose(
      got['lambda'][:3], sizes / sizes.sum(), rtol=1e-6
    )
    np.testing.assert_allclose(
      new, sizes / sizes.sum() @ rows, rtol=1e-5, atol=1e-6
    )  # float32 near zero.

  def test_proxy_loss_does_not_increase(self):
    got, _, _, _, _ = _one_round('fedlaw', server_epochs=20)
    self.assertLess(got['proxy_loss_after'], got['proxy_loss_before'])

  def test_proxy_loss_is_measured_in_training_mode(self):
    # As the authors' search (model.train()): the proxy forward passes run
    # with training=True. A layer that shifts the first logit in training
    # only tells the two modes apart without randomness.
    x, y = _proxy()
    process = algorithms.build_fedlaw_process(
      _training_shift_model_fn,
      _CLIENT_OPTIMIZER,
      proxy_data=(x, y),
      max_clients=5,
      server_epochs=0,  # The model is FedAvg's; both losses are its loss.
    )
    state = process.initialize()
    output = process.next(state, test_utils.tiny_client_datasets(3))
    kernel, bias = process.get_model_weights(output.state).trainable
    logits = x.astype(np.float64) @ kernel + bias + [1.0, 0.0]
    logits -= logits.max(axis=1, keepdims=True)
    log_p = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    want = -log_p[np.arange(_NUM_PROXY), y].mean()
    got = output.metrics['finalizer']
    self.assertAlmostEqual(got['proxy_loss_before'], want, delta=1e-5)
    self.assertAlmostEqual(got['proxy_loss_after'], want, delta=1e-5)

  def test_one_client_has_lambda_one(self):
    got, _, (gamma, _, want), _, _ = _one_round('fedlaw', num_clients=1)
    np.testing.assert_allclose(got['lambda'], [1, 0, 0, 0, 0], rtol=1e-6)
    self.assertAlmostEqual(got['gamma'], gamma, delta=1e-4)


class FedLawFinalizerEdgeCasesTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    weights_type = tff.types.to_type(
      tff.learning.models.ModelWeights(
        trainable=[
          tff.TensorType(np.float32, [3, 2]),
          tff.TensorType(np.float32, [2]),
        ],
        non_trainable=[],
      )
    )
    self.process = fedlaw.build_fedlaw_finalizer(
      test_utils.tiny_model_fn,
      weights_type,
      _proxy(),
      max_clients=4,
      server_epochs=3,
      server_lr=0.05,
    )
    rng = np.random.default_rng(1)
    self.weights = tff.learning.models.ModelWeights(
      trainable=[
        rng.normal(size=(3, 2)).astype(np.float32),
        rng.normal(size=2).astype(np.float32),
      ],
      non_trainable=[],
    )
    self.deltas = rng.normal(scale=0.1, size=(3, 8)).astype(np.float32)

  def _next(self, deltas, weights):
    return self.process.next(
      self.process.initialize(),
      self.weights,
      collections.OrderedDict(
        values=deltas, weights=np.asarray(weights, np.float32)
      ),
    )

  def test_zero_weight_and_non_finite_clients_are_left_out(self):
    deltas = self.deltas.copy()
    deltas[2, 0] = np.nan
    output = self._next(deltas, [1.0, 0.0, 2.0])
    self.assertEqual(output.measurements['num_clients'], 1)
    np.testing.assert_allclose(output.measurements['lambda'], [1, 0, 0, 0])
    for leaf in output.result.trainable:
      self.assertTrue(np.all(np.isfinite(leaf)))

  def test_no_valid_client_leaves_the_model_unchanged(self):
    output = self._next(self.deltas, [0.0, 0.0, 0.0])
    self.assertEqual(output.measurements['num_clients'], 0)
    for a, b in zip(output.result.trainable, self.weights.trainable):
      np.testing.assert_array_equal(a, b)
    empty = self._next(np.zeros([0, 8], np.float32), [])
    for a, b in zip(empty.result.trainable, self.weights.trainable):
      np.testing.assert_array_equal(a, b)


class FedLawValidationTest(absltest.TestCase):
  def _build(self, proxy=None, **kwargs):
    proxy = _proxy() if proxy is None else proxy
    return algorithms.build_fedlaw_process(
      test_utils.tiny_model_fn,
      _CLIENT_OPTIMIZER,
      proxy_data=proxy,
      max_clients=3,
      **kwargs,
    )

  def test_empty_proxy(self):
    with self.assertRaisesRegex(ValueError, 'proxy set is empty'):
      self._build((np.zeros([0, 3], np.float32), np.zeros([0], np.int64)))
    with self.assertRaisesRegex(ValueError, 'proxy dataset is empty'):
      self._build(
        tf.data.Dataset.from_tensor_slices(
          (np.zeros([0, 3], np.float32), np.zeros([0], np.int64))
        )
      )

  def test_proxy_dataset_of_examples(self):
    x, y = _proxy()
    process = self._build(
      tf.data.Dataset.from_tensor_slices((x, y)), server_epochs=1
    )
    self.assertIsInstance(process, tff.learning.templates.LearningProcess)
    with self.assertRaisesRegex(TypeError, r'\(x, y\) examples'):
      self._build(tf.data.Dataset.from_tensor_slices(x))

  def test_fixed_gamma_needs_no_proxy(self):
    process = self._build(None, variant='fixed_gamma', fixed_gamma=0.9)
    state = process.initialize()
    before = process.get_model_weights(state).trainable
    output = process.next(state, [test_utils.tiny_client_datasets(1)[0]])
    self.assertAlmostEqual(output.metrics['finalizer']['gamma'], 0.9, places=6)
    self.assertFalse(
      np.allclose(
        before[0], process.get_model_weights(output.state).trainable[0]
      )
    )

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, 'variant'):
      self._build(variant='fedlaw_plus')
    with self.assertRaisesRegex(ValueError, 'server_epochs >= 14'):
      self._build(variant='swa', server_epochs=10)
    with self.assertRaisesRegex(ValueError, 'fixed_gamma must be > 0'):
      self._build(None, variant='fixed_gamma', fixed_gamma=0.0)

  def test_batch_normalization_is_refused(self):
    def bn_model_fn():
      keras_model = tf.keras.Sequential(
        [
          tf.keras.layers.Dense(2, input_shape=(3,)),
          tf.keras.layers.BatchNormalization(),
        ]
      )
      return tff.learning.models.from_keras_model(
        keras_model,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=(tf.TensorSpec([None, 3]), tf.TensorSpec([None], tf.int64)),
      )

    with self.assertRaisesRegex(ValueError, 'BatchNormalization'):
      algorithms.build_fedlaw_process(
        bn_model_fn, _CLIENT_OPTIMIZER, proxy_data=_proxy(), max_clients=3
      )


if __name__ == '__main__':
  absltest.main()
