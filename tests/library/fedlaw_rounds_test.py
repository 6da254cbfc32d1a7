"""FedLAW over several rounds at its default 100 server epochs, vs NumPy.

One round with a few server epochs (tests/library/fedlaw_test.py) cannot tell
whether the StepLR schedule halves the learning rate every 20 epochs, or
whether the proxy set is reshuffled differently each round. Here: the tiny
linear model, 100 server epochs of 3 proxy batches, 3 rounds, a seed other
than 0, the proxy set as a `tf.data.Dataset` of examples, a class-weighted
`proxy_loss_fn` and uniform client weights (p); and the 'fixed_gamma'
variant against gamma times FedAvg's model.
"""

from absl.testing import absltest
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators import runtime
from tests import numpy_references
from tests import test_utils
from tff_aggregators import algorithms

_NUM_PROXY = 20
_BATCH = 8
_SEED = 5
_CLASS_WEIGHTS = (1.0, 3.0)


def setUpModule():
  runtime.use_local_worker()


def _proxy():
  rng = np.random.default_rng(11)
  x = rng.normal(size=(_NUM_PROXY, 3)).astype(np.float32)
  return x, rng.integers(0, 2, size=_NUM_PROXY).astype(np.int64)


def _weighted_loss(y, logits):
  per_example = tf.keras.losses.sparse_categorical_crossentropy(
    y, logits, from_logits=True
  )
  return tf.reduce_mean(tf.gather(tf.constant(_CLASS_WEIGHTS), y) * per_example)


def _client_rows(weights, datasets):
  """NumPy FedAvg clients (SGD 0.5): their models as rows, and examples."""
  w = test_utils.flat_trainable(weights).astype(np.float64)
  rows, sizes = [], []
  for dataset in datasets:
    batches = list(dataset.as_numpy_iterator())
    delta = numpy_references.linear_softmax_client_delta(
      weights.trainable, batches, lr=0.5
    )
    rows.append(w - np.concatenate([np.ravel(d) for d in delta]))
    sizes.append(sum(len(y) for _, y in batches))
  return np.stack(rows), np.asarray(sizes, np.float64)


class FedLawRoundsTest(absltest.TestCase):
  def test_rounds_at_default_server_epochs_match_numpy(self):
    x, y = _proxy()
    process = algorithms.build_fedlaw_process(
      test_utils.tiny_model_fn,
      tff.learning.optimizers.build_sgdm(0.5),
      proxy_data=tf.data.Dataset.from_tensor_slices((x, y)),
      max_clients=4,
      proxy_batch_size=_BATCH,
      seed=_SEED,
      proxy_loss_fn=_weighted_loss,
      client_weighting=tff.learning.ClientWeighting.UNIFORM,
    )
    datasets = test_utils.tiny_client_datasets(4)
    rng = np.random.default_rng(0)
    state = process.set_model_weights(  # Fixed (tiny_model_fn's are random).
      process.initialize(),
      tff.learning.models.ModelWeights(
        trainable=[
          rng.uniform(-1, 1, size=(3, 2)).astype(np.float32),
          np.zeros(2, np.float32),
        ],
        non_trainable=[],
      ),
    )
    for round_num in range(3):
      rows, _ = _client_rows(process.get_model_weights(state), datasets)

      def batch_order(epoch, round_num=round_num):
        order = tf.argsort(
          tf.random.stateless_uniform(
            [_NUM_PROXY], seed=[_SEED, round_num * 100003 + epoch]
          )
        ).numpy()
        return np.array_split(order, range(_BATCH, _NUM_PROXY, _BATCH))

      gamma, lam, want = numpy_references.fedlaw_linear(
        rows,
        np.full(4, 0.25),
        x.astype(np.float64),
        y,
        epochs=100,
        lr=0.005,
        batch_order=batch_order,
        class_weights=_CLASS_WEIGHTS,
      )
      output = process.next(state, datasets)
      state = output.state
      got = output.metrics['finalizer']
      self.assertAlmostEqual(got['gamma'], gamma, delta=1e-4)
      np.testing.assert_allclose(got['lambda'], lam, atol=1e-5)
      np.testing.assert_allclose(
        test_utils.flat_trainable(process.get_model_weights(state)),
        want,
        rtol=1e-4,
        atol=1e-5,
      )
      self.assertGreater(abs(gamma - 1.0), 1e-2)  # The search did move.

  def test_fixed_gamma_is_gamma_times_fedavg(self):
    process = algorithms.build_fedlaw_process(
      test_utils.tiny_model_fn,
      tff.learning.optimizers.build_sgdm(0.5),
      proxy_data=None,
      max_clients=3,
      variant='fixed_gamma',
      fixed_gamma=0.8,
    )
    datasets = test_utils.tiny_client_datasets(3)
    state = process.initialize()
    for _ in range(2):
      rows, sizes = _client_rows(process.get_model_weights(state), datasets)
      want = 0.8 * (sizes / sizes.sum()) @ rows
      output = process.next(state, datasets)
      state = output.state
      self.assertAlmostEqual(
        output.metrics['finalizer']['gamma'], 0.8, places=6
      )
      np.testing.assert_allclose(
        test_utils.flat_trainable(process.get_model_weights(state)),
        want,
        rtol=1e-5,
        atol=1e-6,
      )


if __name__ == '__main__':
  absltest.main()
