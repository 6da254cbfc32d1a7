"""build_fedlws_process end to end against NumPy, and its FedAvg invariant."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow_federated as tff

from tff_aggregators import runtime
from tests import numpy_references
from tests import test_utils
from tff_aggregators import algorithms

_CLIENT_OPTIMIZER = tff.learning.optimizers.build_sgdm(learning_rate=0.5)


def setUpModule():
  runtime.use_local_worker()


class BuildFedLwsProcessTest(parameterized.TestCase):

  @parameterized.parameters((None,), ((0.01, 0.2),))
  def test_rounds_match_numpy(self, tau_clip):
    datasets = test_utils.tiny_client_datasets(4)
    process = algorithms.build_fedlws_process(
        test_utils.tiny_model_fn, _CLIENT_OPTIMIZER, beta=1.0,
        tau_clip=tau_clip,
    )
    state = process.initialize()
    for _ in range(3):
      weights = process.get_model_weights(state)
      deltas, sizes = test_utils.client_deltas(
          test_utils.tiny_model_fn, _CLIENT_OPTIMIZER, weights, datasets
      )
      want = numpy_references.fedlws_round(
          weights.trainable, deltas, sizes, [[0, 1]], beta=1.0,
          tau_clip=tau_clip,
      )
      output = process.next(state, datasets)
      state = output.state
      np.testing.assert_allclose(
          output.metrics['finalizer']['gamma'], want['gamma'], rtol=1e-4
      )
      self.assertLess(want['gamma'][0], 0.999)
      for got, expected in zip(
          process.get_model_weights(state).trainable, want['weights']
      ):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)

  def test_beta_zero_is_fedavg(self):
    datasets = test_utils.tiny_client_datasets(3)
    lws = algorithms.build_fedlws_process(
        test_utils.tiny_model_fn, _CLIENT_OPTIMIZER, beta=0.0
    )
    fedavg = tff.learning.algorithms.build_weighted_fed_avg(
        test_utils.tiny_model_fn, _CLIENT_OPTIMIZER,
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
    np.testing.assert_allclose(output.metrics['finalizer']['tau'], [0.0],
                               atol=1e-7)
    np.testing.assert_array_equal(output.metrics['finalizer']['gamma'], [1.0])

  def test_shrink_after_fedglad_and_adam(self):
    from tff_aggregators.aggregators import fedglad  # pylint: disable=g-import-not-at-top
    process = algorithms.build_fedlws_process(
        test_utils.tiny_model_fn, _CLIENT_OPTIMIZER,
        tff.learning.optimizers.build_adam(0.01),
        beta=1.0, model_aggregator=fedglad.FedGladFactory(gamma=0.5),
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

  def test_fedprox_and_model_wise(self):
    process = algorithms.build_fedlws_process(
        test_utils.tiny_model_fn, _CLIENT_OPTIMIZER,
        tff.learning.optimizers.build_sgdm(1.0, momentum=0.9),
        proximal_strength=0.1, grouping='model', tau_mode='rms',
    )
    state = process.initialize()
    for _ in range(2):
      output = process.next(state, test_utils.tiny_client_datasets(3))
      state = output.state
    self.assertLen(output.metrics['finalizer']['gamma'], 1)
    for leaf in process.get_model_weights(state).trainable:
      self.assertTrue(np.all(np.isfinite(leaf)))


if __name__ == '__main__':
  absltest.main()
