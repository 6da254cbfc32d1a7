"""build_fedglad_process end to end: SGD, momentum and Adam servers vs NumPy."""

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


def _server_step(kind, history, multipliers, weights0, lr, momentum):
  """The server model after `history` (mean updates), paper Section 3.4."""
  if kind == 'adam':
    w, _, _ = numpy_references.glad_adaptive(
        weights0, history, multipliers, kind='adam', lr=lr, beta_1=0.9,
        beta_2=0.999, epsilon=1e-8,
    )
    return w
  w = [np.asarray(x, np.float64) for x in weights0]
  buf = [np.zeros_like(x) for x in w]
  for g, s in zip(history, multipliers):
    for i in range(len(w)):
      buf[i] = momentum * buf[i] + s[i] * g[i]
      w[i] = w[i] - lr * buf[i]
  return w


class BuildFedGladProcessTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('fedavg', 'sgd', tff.learning.optimizers.build_sgdm(1.0), 1.0, 0.0),
      ('fedavgm', 'sgdm', tff.learning.optimizers.build_sgdm(0.5, 0.9),
       0.5, 0.9),
      ('fedadam', 'adam', tff.learning.optimizers.build_adam(
          0.05, epsilon=1e-8), 0.05, 0.0),
  )
  def test_rounds_match_numpy(self, kind, server_optimizer, lr, momentum):
    datasets = test_utils.tiny_client_datasets(4)
    process = algorithms.build_fedglad_process(
        test_utils.tiny_model_fn, _CLIENT_OPTIMIZER, server_optimizer,
        gamma=0.5,
    )
    state = process.initialize()
    weights0 = process.get_model_weights(state).trainable
    rounds, history, multipliers = [], [], []
    for _ in range(4):
      weights = process.get_model_weights(state)
      deltas, sizes = test_utils.client_deltas(
          test_utils.tiny_model_fn, _CLIENT_OPTIMIZER, weights, datasets
      )
      rounds.append((deltas, sizes))
      glad = numpy_references.fedglad(
          rounds, gamma=0.5, beta=0.9, grouping='per_variable'
      )[-1]
      a = sizes / sizes.sum()
      history.append([
          sum(a[k] * d[i] for k, d in enumerate(deltas))
          for i in range(len(deltas[0]))
      ])
      multipliers.append(glad['multiplier'])
      output = process.next(state, datasets)
      state = output.state
      np.testing.assert_allclose(
          output.metrics['aggregator']['fedglad']['multiplier'],
          glad['multiplier'], rtol=1e-4,
      )
      want = _server_step(kind, history, multipliers, weights0, lr, momentum)
      for got, expected in zip(
          process.get_model_weights(state).trainable, want
      ):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    self.assertGreater(np.ptp(np.concatenate(multipliers)), 0.01)

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

  @parameterized.parameters(
      tff.learning.optimizers.build_sgdm(1.0),
      tff.learning.optimizers.build_adam(0.01),
  )
  def test_fedprox_clients(self, server_optimizer):
    process = algorithms.build_fedglad_process(
        test_utils.tiny_model_fn, _CLIENT_OPTIMIZER, server_optimizer,
        proximal_strength=0.1,
    )
    state = process.initialize()
    for _ in range(2):
      output = process.next(state, test_utils.tiny_client_datasets(3))
      state = output.state
    self.assertEqual(output.metrics['aggregator']['fedglad']['round'], 1)
    for leaf in process.get_model_weights(state).trainable:
      self.assertTrue(np.all(np.isfinite(leaf)))

  def test_unknown_optimizer_needs_an_explicit_scaling(self):
    adagrad = tff.learning.optimizers.build_adagrad(0.1)
    with self.assertRaisesRegex(ValueError, "server_update_scaling='update'"):
      algorithms.build_fedglad_process(
          test_utils.tiny_model_fn, _CLIENT_OPTIMIZER, adagrad
      )
    process = algorithms.build_fedglad_process(
        test_utils.tiny_model_fn, _CLIENT_OPTIMIZER, adagrad,
        server_update_scaling='update',
    )
    self.assertIsInstance(process, tff.learning.templates.LearningProcess)

  def test_first_moment_scaling_needs_adam_or_yogi(self):
    with self.assertRaisesRegex(ValueError, 'build_adam or build_yogi'):
      algorithms.build_fedglad_process(
          test_utils.tiny_model_fn, _CLIENT_OPTIMIZER,
          tff.learning.optimizers.build_sgdm(1.0),
          server_update_scaling='first_moment',
      )


if __name__ == '__main__':
  absltest.main()
