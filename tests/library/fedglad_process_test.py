"""build_fedglad_process end to end: SGD, momentum and Adam servers vs NumPy."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators import runtime
from tests import numpy_references
from tests import test_utils
from tff_aggregators import algorithms
from tff_aggregators.aggregators import fedglad

_CLIENT_OPTIMIZER = tff.learning.optimizers.build_sgdm(learning_rate=0.5)


def setUpModule():
  runtime.use_local_worker()


def _data(num_clients, seed=0):
  """Client k: 3 + k examples in batches of 2 (several local steps)."""
  rng = np.random.default_rng(seed)
  datasets, batches = [], []
  for k in range(num_clients):
    x = rng.normal(size=(3 + k, 3)).astype(np.float32) + 0.5 * k
    y = rng.integers(0, 2, size=3 + k).astype(np.int64)
    datasets.append(tf.data.Dataset.from_tensor_slices((x, y)).batch(2))
    batches.append([(x[i : i + 2], y[i : i + 2]) for i in range(0, 3 + k, 2)])
  return datasets, batches


class BuildFedGladProcessTest(parameterized.TestCase):
  @parameterized.named_parameters(
    (
      'fedavg',
      tff.learning.optimizers.build_sgdm(1.0),
      dict(kind='sgdm', lr=1.0),
      dict(beta=0.5),
    ),
    (
      'fedavgm_universal_uniform',
      tff.learning.optimizers.build_sgdm(0.5, 0.9),
      dict(kind='sgdm', lr=0.5, momentum=0.9),
      dict(
        beta=0.7,
        grouping='universal',
        client_weighting=tff.learning.ClientWeighting.UNIFORM,
      ),
    ),
    (
      'fedadam',
      tff.learning.optimizers.build_adam(0.05, epsilon=1e-8),
      dict(kind='adam', lr=0.05, epsilon=1e-8),
      dict(beta=0.5),
    ),
    # Yogi end to end (App. E's rule with Yogi's second moment).
    (
      'fedyogi_first_moment',
      tff.learning.optimizers.build_yogi(0.05, beta_1=0.8, epsilon=1e-3),
      dict(kind='yogi', lr=0.05, beta_1=0.8, epsilon=1e-3),
      dict(beta=0.6, server_update_scaling='first_moment'),
    ),
    # FedProx clients (several local steps: the proximal term acts),
    # checked against NumPy FedProx, on both server paths.
    (
      'fedprox',
      tff.learning.optimizers.build_sgdm(1.0),
      dict(kind='sgdm', lr=1.0),
      dict(beta=0.5, proximal_strength=0.8),
    ),
    (
      'fedprox_adam',
      tff.learning.optimizers.build_adam(0.05, epsilon=1e-8),
      dict(kind='adam', lr=0.05, epsilon=1e-8),
      dict(beta=0.5, proximal_strength=0.8),
    ),
  )
  def test_rounds_match_numpy(self, server_optimizer, server, options):
    datasets, batches = _data(4)
    mu = options.get('proximal_strength', 0.0)
    grouping = options.get('grouping', 'per_variable')
    process = algorithms.build_fedglad_process(
      test_utils.tiny_model_fn,
      _CLIENT_OPTIMIZER,
      server_optimizer,
      gamma=0.5,
      **options,
    )
    reference = numpy_references.ServerOptimizer(**server)
    state = process.initialize()
    rounds, multipliers = [], []
    for _ in range(3):
      weights = process.get_model_weights(state)
      deltas = [
        numpy_references.linear_softmax_client_delta(
          weights.trainable, b, lr=0.5, mu=mu
        )
        for b in batches
      ]
      sizes = np.array([sum(len(y) for _, y in b) for b in batches], float)
      if 'client_weighting' in options:  # UNIFORM.
        sizes = np.ones_like(sizes)
      if mu:  # The proximal term changes the clients.
        plain = numpy_references.linear_softmax_client_delta(
          weights.trainable, batches[3], lr=0.5
        )
        self.assertGreater(np.abs(plain[0] - deltas[3][0]).max(), 1e-3)
      rounds.append((deltas, sizes))
      glad = numpy_references.fedglad(
        rounds, gamma=0.5, beta=options['beta'], grouping=grouping
      )[-1]
      universal = numpy_references.fedglad(
        rounds, gamma=0.5, beta=options['beta'], grouping='universal'
      )[-1]
      s = glad['multiplier']
      multipliers.append(s)
      want = reference.step(
        weights.trainable,
        numpy_references.weighted_mean(deltas, sizes),
        s if grouping == 'per_variable' else np.repeat(s, 2),
      )
      output = process.next(state, datasets)
      state = output.state
      got = output.metrics['aggregator']['fedglad']
      np.testing.assert_allclose(got['multiplier'], s, rtol=1e-4)
      np.testing.assert_allclose(got['gsi'], glad['gsi'], rtol=1e-4)
      np.testing.assert_allclose(got['baseline'], glad['baseline'], rtol=1e-4)
      np.testing.assert_allclose(
        got['gsi_model'], universal['gsi'][0], rtol=1e-4
      )
      for g, w in zip(process.get_model_weights(state).trainable, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    self.assertGreater(np.ptp(np.concatenate(multipliers)), 0.01)
    # The default beta would give another GSI baseline in the last round
    # (its multipliers can coincide where both are clipped at a bound).
    default_beta = numpy_references.fedglad(
      rounds, gamma=0.5, beta=0.9, grouping=grouping
    )[-1]['baseline']
    self.assertGreater(np.abs(default_beta - got['baseline']).max(), 1e-3)

  def test_gamma_zero_is_fedavg(self):
    datasets = test_utils.tiny_client_datasets(3)
    server = tff.learning.optimizers.build_sgdm(1.0, momentum=0.9)
    glad = algorithms.build_fedglad_process(
      test_utils.tiny_model_fn, _CLIENT_OPTIMIZER, server, gamma=0.0
    )
    fedavg = tff.learning.algorithms.build_weighted_fed_avg(
      test_utils.tiny_model_fn, _CLIENT_OPTIMIZER, server
    )
    glad_state = glad.initialize()
    fedavg_state = fedavg.set_model_weights(
      fedavg.initialize(), glad.get_model_weights(glad_state)
    )
    for _ in range(3):
      glad_state = glad.next(glad_state, datasets).state
      fedavg_state = fedavg.next(fedavg_state, datasets).state
    for a, b in zip(
      glad.get_model_weights(glad_state).trainable,
      fedavg.get_model_weights(fedavg_state).trainable,
    ):
      np.testing.assert_array_equal(a, b)

  def test_unknown_optimizer_needs_an_explicit_scaling(self):
    adagrad = tff.learning.optimizers.build_adagrad(0.1)
    with self.assertRaisesRegex(ValueError, "server_update_scaling='update'"):
      algorithms.build_fedglad_process(
        test_utils.tiny_model_fn, _CLIENT_OPTIMIZER, adagrad
      )
    process = algorithms.build_fedglad_process(
      test_utils.tiny_model_fn,
      _CLIENT_OPTIMIZER,
      adagrad,
      server_update_scaling='update',
    )
    self.assertIsInstance(process, tff.learning.templates.LearningProcess)

  def test_first_moment_scaling_needs_adam_or_yogi(self):
    with self.assertRaisesRegex(ValueError, 'build_adam or build_yogi'):
      algorithms.build_fedglad_process(
        test_utils.tiny_model_fn,
        _CLIENT_OPTIMIZER,
        tff.learning.optimizers.build_sgdm(1.0),
        server_update_scaling='first_moment',
      )


class FedGladFactoryOptionsTest(absltest.TestCase):
  def test_beta_and_eps_match_numpy(self):
    # The factory's own beta and eps (not the builder's defaults), 5 rounds.
    rng = np.random.default_rng(3)
    shapes = ([3, 2], [2], [4])
    rounds = []
    for _ in range(5):
      shared = [rng.normal(size=s) for s in shapes]
      rounds.append(
        (
          [
            [
              (
                g + rng.normal(scale=rng.uniform(0.3, 2.0), size=g.shape)
              ).astype(np.float32)
              for g in shared
            ]
            for _ in range(4)
          ],
          list(rng.uniform(1, 10, size=4).astype(np.float32)),
        )
      )
    options = dict(gamma=0.3, beta=0.4, grouping='per_variable')
    process = fedglad.FedGladFactory(eps=0.5, **options).create(
      [tff.TensorType(np.float32, s) for s in shapes],
      tff.TensorType(np.float32),
    )
    state, outputs = process.initialize(), []
    for updates, weights in rounds:
      outputs.append(process.next(state, updates, weights))
      state = outputs[-1].state
    want = numpy_references.fedglad(rounds, eps=0.5, **options)
    default_eps = numpy_references.fedglad(rounds, **options)
    for output, expected in zip(outputs, want):
      got = output.measurements['fedglad']
      for key in ('gsi', 'baseline', 'multiplier'):
        np.testing.assert_allclose(
          got[key], expected[key], rtol=2e-5, err_msg=key
        )
    # eps = 0.5 and beta = 0.4 do change the multipliers.
    self.assertGreater(
      np.abs(want[-1]['multiplier'] - default_eps[-1]['multiplier']).max(), 1e-3
    )
    beta_default = numpy_references.fedglad(
      rounds, eps=0.5, **dict(options, beta=0.9)
    )
    self.assertGreater(
      np.abs(want[-1]['multiplier'] - beta_default[-1]['multiplier']).max(),
      1e-3,
    )


if __name__ == '__main__':
  absltest.main()
