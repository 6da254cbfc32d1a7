"""build_fedlws_process end to end against NumPy, and its FedAvg invariant."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators import runtime
from tests import numpy_references
from tests import test_utils
from tff_aggregators import algorithms

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


def _numpy_clients(weights, batches, mu):
  """NumPy clients (SGD 0.5, FedProx's mu): (deltas, example counts)."""
  deltas = [
    numpy_references.linear_softmax_client_delta(
      weights.trainable, b, lr=0.5, mu=mu
    )
    for b in batches
  ]
  return deltas, np.array(
    [sum(len(y) for _, y in b) for b in batches], np.float64
  )


class BuildFedLwsProcessTest(parameterized.TestCase):
  @parameterized.named_parameters(
    # Server SGD at learning rate 1 makes ||w_hat - w|| the mean update's
    # norm; these servers do not.
    (
      'sgdm_rms_per_leaf',
      dict(beta=0.3, grouping=[[0], [1]], tau_mode='rms'),
      tff.learning.optimizers.build_sgdm(0.7, momentum=0.5),
      dict(kind='sgdm', lr=0.7, momentum=0.5),
      0.0,
    ),
    (
      'adam_clip_model_wise_uniform',
      dict(
        beta=0.5,
        tau_clip=(0.01, 0.2),
        grouping='model',
        client_weighting=tff.learning.ClientWeighting.UNIFORM,
      ),
      tff.learning.optimizers.build_adam(0.3, epsilon=1e-6),
      dict(kind='adam', lr=0.3, epsilon=1e-6),
      0.0,
    ),
    # FedProx + FedLWS (the paper's FedProx base), checked against NumPy
    # FedProx clients: several local steps, so the proximal term acts.
    (
      'fedprox_sgd_lr',
      dict(beta=0.4, grouping=[[0], [1]], proximal_strength=0.8),
      tff.learning.optimizers.build_sgdm(0.8),
      dict(kind='sgdm', lr=0.8),
      0.8,
    ),
  )
  def test_rounds_match_numpy(self, options, server_optimizer, server, mu):
    datasets, batches = _data(4)
    process = algorithms.build_fedlws_process(
      test_utils.tiny_model_fn,
      _CLIENT_OPTIMIZER,
      server_optimizer,
      **options,
    )
    groups = options['grouping']
    if groups == 'model':
      groups = [[0, 1]]
    reference = numpy_references.ServerOptimizer(**server)
    state = process.initialize()
    for _ in range(3):
      weights = process.get_model_weights(state)
      deltas, sizes = _numpy_clients(weights, batches, mu)
      if mu:
        fedavg_deltas, _ = _numpy_clients(weights, batches, 0.0)
        self.assertGreater(  # The proximal term changes the clients.
          np.abs(deltas[0][0] - fedavg_deltas[0][0]).max(), 1e-3
        )
      tau = numpy_references.fedlws_tau(
        deltas, groups=groups, mode=options.get('tau_mode', 'exact')
      )
      if 'client_weighting' in options:  # UNIFORM.
        sizes = np.ones_like(sizes)
      w_hat = reference.step(
        weights.trainable, numpy_references.weighted_mean(deltas, sizes)
      )
      gamma, _, want = numpy_references.fedlws_shrink(
        weights.trainable,
        w_hat,
        tau,
        groups,
        beta=options['beta'],
        tau_clip=options.get('tau_clip'),
      )
      output = process.next(state, datasets)
      state = output.state
      got = output.metrics['finalizer']
      np.testing.assert_allclose(got['tau'], tau, rtol=1e-4)
      np.testing.assert_allclose(got['gamma'], gamma, rtol=1e-4)
      self.assertLess(np.min(gamma), 0.999)  # The shrink did act.
      for g, w in zip(process.get_model_weights(state).trainable, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)

  def test_beta_zero_is_fedavg(self):
    datasets = test_utils.tiny_client_datasets(3)
    lws = algorithms.build_fedlws_process(
      test_utils.tiny_model_fn, _CLIENT_OPTIMIZER, beta=0.0
    )
    fedavg = tff.learning.algorithms.build_weighted_fed_avg(
      test_utils.tiny_model_fn,
      _CLIENT_OPTIMIZER,
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
    )
    lws_state = lws.initialize()
    fedavg_state = fedavg.set_model_weights(
      fedavg.initialize(), lws.get_model_weights(lws_state)
    )
    for _ in range(2):
      lws_state = lws.next(lws_state, datasets).state
      fedavg_state = fedavg.next(fedavg_state, datasets).state
    for a, b in zip(
      lws.get_model_weights(lws_state).trainable,
      fedavg.get_model_weights(fedavg_state).trainable,
    ):
      np.testing.assert_array_equal(a, b)

  def test_identical_client_updates_give_tau_zero_and_gamma_one(self):
    datasets = [test_utils.tiny_client_datasets(1)[0]] * 3
    process = algorithms.build_fedlws_process(
      test_utils.tiny_model_fn, _CLIENT_OPTIMIZER, beta=1.0
    )
    output = process.next(process.initialize(), datasets)
    np.testing.assert_allclose(
      output.metrics['finalizer']['tau'], [0.0], atol=1e-7
    )
    np.testing.assert_array_equal(output.metrics['finalizer']['gamma'], [1.0])

  def test_shrink_after_fedglad_and_adam(self):
    from tff_aggregators.aggregators import fedglad  # pylint: disable=g-import-not-at-top

    process = algorithms.build_fedlws_process(
      test_utils.tiny_model_fn,
      _CLIENT_OPTIMIZER,
      tff.learning.optimizers.build_adam(0.01),
      beta=1.0,
      model_aggregator=fedglad.FedGladFactory(gamma=0.5),
    )
    state = process.initialize()
    for _ in range(3):
      output = process.next(state, test_utils.tiny_client_datasets(4))
      state = output.state
    glad = output.metrics['aggregator']['mean']['fedglad']
    self.assertEqual(glad['round'], 2)
    self.assertNotEqual(glad['multiplier'][0], 1.0)
    self.assertLess(output.metrics['finalizer']['gamma'][0], 1.0)
    for leaf in process.get_model_weights(state).trainable:
      self.assertTrue(np.all(np.isfinite(leaf)))


if __name__ == '__main__':
  absltest.main()
