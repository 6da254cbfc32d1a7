"""DroppedClientsFactory: the inner mean as is, dropped clients counted."""

from absl.testing import absltest
import numpy as np
import tensorflow_federated as tff

from tff_aggregators import runtime
from tff_aggregators.aggregators import dropped_clients


def setUpModule():
  runtime.use_local_worker()


class DroppedClientsFactoryTest(absltest.TestCase):
  def _run(self, factory, values, weights):
    process = factory.create(
      tff.TensorType(np.float32, [2]), tff.TensorType(np.float32)
    )
    return process.next(process.initialize(), values, weights)

  def test_counts_zero_weight_and_non_finite_clients(self):
    values = [
      np.array([1.0, 2.0], np.float32),
      np.zeros(2, np.float32),
      np.array([3.0, 5.0], np.float32),
      np.array([np.inf, 0.0], np.float32),
    ]
    weights = [1.0, 0.0, 3.0, 0.0]
    output = self._run(dropped_clients.DroppedClientsFactory(), values, weights)
    self.assertEqual(output.measurements['num_clients'], 4)
    self.assertEqual(output.measurements['num_dropped_clients'], 2)

  def test_one_non_finite_coordinate_drops_a_weighted_client(self):
    values = [
      np.array([np.nan, 1.0], np.float32),  # Weight 2: dropped all the same.
      np.array([1.0, 2.0], np.float32),
      np.array([3.0, 4.0], np.float32),
    ]
    output = self._run(
      dropped_clients.DroppedClientsFactory(), values, [2.0, 1.0, np.inf]
    )
    self.assertEqual(output.measurements['num_clients'], 3)
    self.assertEqual(output.measurements['num_dropped_clients'], 2)

  def test_inner_aggregation_is_unchanged(self):
    rng = np.random.default_rng(0)
    values = [rng.normal(size=2).astype(np.float32) for _ in range(3)]
    weights = [2.0, 1.0, 4.0]
    inner = tff.aggregators.MeanFactory()
    plain = self._run(inner, values, weights)
    wrapped = self._run(
      dropped_clients.DroppedClientsFactory(inner), values, weights
    )
    np.testing.assert_array_equal(wrapped.result, plain.result)
    self.assertEqual(wrapped.measurements['inner'], plain.measurements)
    self.assertEqual(wrapped.measurements['num_dropped_clients'], 0)

  def test_refuses_an_unweighted_factory(self):
    with self.assertRaisesRegex(TypeError, 'weighted aggregation factory'):
      dropped_clients.DroppedClientsFactory(tff.aggregators.SumFactory())


if __name__ == '__main__':
  absltest.main()
