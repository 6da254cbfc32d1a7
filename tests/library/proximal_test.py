"""FedProx client work: against NumPy, TFF's FedAvg at mu = 0, schedules."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators import runtime
from tests import test_utils
from tff_aggregators.algorithms import client_works
from tff_aggregators.client_works import proximal


def setUpModule():
  runtime.use_local_worker()


def _datasets(num_clients, seed=0):
  """Client k: 3 + k examples in batches of 2 (several local steps)."""
  rng = np.random.default_rng(seed)
  result = []
  for k in range(num_clients):
    x = rng.normal(size=(3 + k, 3)).astype(np.float32)
    y = rng.integers(0, 2, size=3 + k).astype(np.int64)
    result.append(tf.data.Dataset.from_tensor_slices((x, y)).batch(2))
  return result


def _numpy_fedprox_delta(kernel, bias, dataset, lr, momentum, mu):
  """Li et al. (2020) eq. 2 by SGD(M): grad of mean CE + mu (w - w_global)."""
  w0 = [np.asarray(kernel, np.float64), np.asarray(bias, np.float64)]
  w = [v.copy() for v in w0]
  buffers = [np.zeros_like(v) for v in w]
  for x, y in dataset.as_numpy_iterator():
    logits = x @ w[0] + w[1]
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(len(y)), y] -= 1.0
    grads = [x.T @ p / len(y), p.mean(axis=0)]
    for i in range(2):
      grad = grads[i] + mu * (w[i] - w0[i])
      buffers[i] = momentum * buffers[i] + grad  # TFF's SGDM.
      w[i] = w[i] - lr * buffers[i]
  return [a - b for a, b in zip(w0, w)]


class ProximalClientWorkTest(parameterized.TestCase):
  @parameterized.parameters((0.0,), (0.9,))
  def test_rounds_match_numpy_with_scheduled_learning_rate(self, momentum):
    datasets = _datasets(3)
    mu = 0.4
    process = client_works.build_weighted_fed_prox(
      model_fn=test_utils.tiny_model_fn,
      proximal_strength=mu,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(
        0.5, momentum=momentum
      ),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
    )
    state = process.initialize()
    for lr in (0.5, 0.2):  # The second round's rate comes from set_hparams.
      hparams = process.get_hparams(state)
      hparams['client_work']['learning_rate'] = np.float32(lr)
      state = process.set_hparams(state, hparams)
      kernel, bias = process.get_model_weights(state).trainable
      deltas = [
        _numpy_fedprox_delta(kernel, bias, d, lr, momentum, mu)
        for d in datasets
      ]
      sizes = np.array([3.0, 4.0, 5.0])
      want = [
        np.asarray(v, np.float64)
        - sum(s * d[i] for s, d in zip(sizes, deltas)) / sizes.sum()
        for i, v in enumerate((kernel, bias))
      ]
      state = process.next(state, datasets).state
      got = process.get_model_weights(state).trainable
      for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)

  @parameterized.named_parameters(
    (
      'sgdm',
      tff.learning.optimizers.build_sgdm(0.3, momentum=0.9),
      dict(learning_rate=0.05, momentum=0.5),
    ),
    (
      'adam',
      tff.learning.optimizers.build_adam(0.1),
      dict(learning_rate=0.02, beta_1=0.8, beta_2=0.99, epsilon=1e-6),
    ),
  )
  def test_zero_strength_is_tff_fed_avg_with_the_state_hparams(
    self, optimizer, hparams
  ):
    # The wrapper itself at mu = 0 (the builders send mu = 0 to TFF's own).
    datasets = _datasets(3, seed=1)
    ours = proximal.build_proximal_client_work(
      test_utils.tiny_model_fn, optimizer, proximal_strength=0.0
    )
    weights = client_works.initial_model_weights_fn(test_utils.tiny_model_fn)()
    state = ours.set_hparams(ours.initialize(), hparams)
    output = ours.next(state, [weights] * 3, datasets)
    optimizer_with_hparams = type(optimizer)(**hparams)
    tff_work = tff.learning.templates.build_model_delta_client_work(
      test_utils.tiny_model_fn,
      optimizer_with_hparams,
      client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES,
    )
    expected = tff_work.next(tff_work.initialize(), [weights] * 3, datasets)
    self.assertEqual(
      dict(ours.get_hparams(state)),
      dict(tff_work.get_hparams(tff_work.initialize())),
    )
    for got, want in zip(output.result, expected.result):
      self.assertEqual(got.update_weight, want.update_weight)
      for g, w in zip(got.update, want.update):
        np.testing.assert_array_equal(g, w)
    self.assertEqual(output.measurements, expected.measurements)

  def test_pulls_towards_the_global_model(self):
    # 40 local steps: without the term the client drifts off; mu lr = 0.5
    # keeps it near the start.
    datasets = [_datasets(1, seed=2)[0].repeat(20)]
    norms = []
    for mu in (0.0, 5.0):
      process = client_works.build_weighted_fed_prox(
        model_fn=test_utils.tiny_model_fn,
        proximal_strength=mu,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
        server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
      )
      state = process.initialize()
      before = test_utils.flat_trainable(process.get_model_weights(state))
      after = test_utils.flat_trainable(
        process.get_model_weights(process.next(state, datasets).state)
      )
      norms.append(np.linalg.norm(after - before))
    self.assertGreater(norms[0], 2 * norms[1])

  def test_tff_fed_prox_steps_away_from_the_global_model(self):
    # Why this client work exists: TFF 0.87's FedProx adds mu (w_global - w)
    # to the gradient. If a TFF upgrade fixes it, this fails: revisit the
    # module docstring and README.
    datasets = _datasets(2, seed=3)
    mu, lr = 0.4, 0.5
    tff_fedprox = tff.learning.algorithms.build_weighted_fed_prox(
      test_utils.tiny_model_fn,
      mu,
      tff.learning.optimizers.build_sgdm(lr),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
    )
    state = tff_fedprox.initialize()
    kernel, bias = tff_fedprox.get_model_weights(state).trainable
    got = tff_fedprox.get_model_weights(
      tff_fedprox.next(state, datasets).state
    ).trainable
    sizes = np.array([3.0, 4.0])
    for sign, matches in ((-1.0, True), (1.0, False)):
      deltas = [
        _numpy_fedprox_delta(kernel, bias, d, lr, 0.0, sign * mu)
        for d in datasets
      ]
      want = [
        np.asarray(v, np.float64)
        - sum(s * d[i] for s, d in zip(sizes, deltas)) / sizes.sum()
        for i, v in enumerate((kernel, bias))
      ]
      self.assertEqual(
        all(np.allclose(g, w, rtol=1e-5, atol=1e-6) for g, w in zip(got, want)),
        matches,
      )

  def test_non_finite_client_gets_weight_zero(self):
    x = np.full((2, 3), np.nan, np.float32)
    nan_data = tf.data.Dataset.from_tensor_slices(
      (x, np.zeros(2, np.int64))
    ).batch(2)
    work = proximal.build_proximal_client_work(
      test_utils.tiny_model_fn,
      tff.learning.optimizers.build_sgdm(0.1),
      proximal_strength=0.1,
    )
    weights = client_works.initial_model_weights_fn(test_utils.tiny_model_fn)()
    output = work.next(
      work.initialize(), [weights, weights], [nan_data, _datasets(1)[0]]
    )
    self.assertEqual([r.update_weight for r in output.result], [0.0, 3.0])
    for value in output.result[0].update:
      np.testing.assert_array_equal(value, np.zeros_like(value))

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, 'proximal_strength must be >= 0'):
      client_works.build_weighted_fed_prox(
        model_fn=test_utils.tiny_model_fn,
        proximal_strength=-1.0,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
      )
    with self.assertRaisesRegex(TypeError, 'tff.learning.optimizers'):
      proximal.build_proximal_client_work(
        test_utils.tiny_model_fn,
        lambda: tf.keras.optimizers.SGD(0.1),
        proximal_strength=0.1,
      )
    with self.assertRaisesRegex(TypeError, 'WeightedAggregationFactory'):
      client_works.build_weighted_fed_prox(
        model_fn=test_utils.tiny_model_fn,
        proximal_strength=0.1,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
        model_aggregator=tff.aggregators.SumFactory(),
      )


if __name__ == '__main__':
  absltest.main()
