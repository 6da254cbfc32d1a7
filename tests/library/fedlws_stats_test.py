"""FedLwsStatsFactory: tau (paper Eq. 4) against NumPy, validity, errors."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow_federated as tff

from tff_aggregators import runtime
from tests import numpy_references
from tff_aggregators.aggregators import fedlws_stats

_SHAPES = ([3, 2], [2], [4], [1])
_GROUPS = [[0, 1], [2, 3]]
_VALUE_TYPE = tff.types.to_type(
  [tff.TensorType(np.float32, s) for s in _SHAPES]
)
_WEIGHT = tff.TensorType(np.float32)


def setUpModule():
  runtime.use_local_worker()


def _updates(num_clients, seed=0):
  rng = np.random.default_rng(seed)
  return [
    [
      rng.normal(scale=rng.uniform(0.2, 3.0), size=s).astype(np.float32)
      for s in _SHAPES
    ]
    for _ in range(num_clients)
  ]


def _weighted_mean(updates, weights):
  a = np.asarray(weights, np.float64) / np.sum(weights)
  return [
    sum(a[k] * u[i] for k, u in enumerate(updates)) for i in range(len(_SHAPES))
  ]


class FedLwsStatsFactoryTest(parameterized.TestCase):
  @parameterized.parameters('exact', 'rms')
  def test_matches_numpy(self, mode):
    updates = _updates(5)
    weights = [1.0, 10.0, 2.0, 30.0, 5.0]  # Weighted and unweighted differ.
    process = fedlws_stats.FedLwsStatsFactory(_GROUPS, tau_mode=mode).create(
      _VALUE_TYPE, _WEIGHT
    )
    output = process.next(process.initialize(), updates, weights)
    np.testing.assert_allclose(
      output.result['tau'],
      numpy_references.fedlws_tau(updates, groups=_GROUPS, mode=mode),
      rtol=1e-5,
    )
    self.assertEqual(output.result['num_clients'], 5.0)
    for got, want in zip(
      output.result['mean_update'], _weighted_mean(updates, weights)
    ):
      np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(
      output.measurements['tau'], output.result['tau']
    )

  def test_tau_is_a_mean_of_norms_not_an_rms(self):
    updates = _updates(4, seed=1)
    exact = numpy_references.fedlws_tau(updates, groups=_GROUPS)
    rms = numpy_references.fedlws_tau(updates, groups=_GROUPS, mode='rms')
    self.assertTrue(np.all(rms > exact * 1.001))  # So the test can tell.
    process = fedlws_stats.FedLwsStatsFactory(_GROUPS).create(
      _VALUE_TYPE, _WEIGHT
    )
    output = process.next(process.initialize(), updates, [1.0] * 4)
    np.testing.assert_allclose(output.result['tau'], exact, rtol=1e-5)

  def test_zero_weight_and_non_finite_clients_are_left_out(self):
    updates = _updates(5, seed=2)
    updates[1][0][0, 0] = np.nan
    process = fedlws_stats.FedLwsStatsFactory(_GROUPS).create(
      _VALUE_TYPE, _WEIGHT
    )
    output = process.next(
      process.initialize(), updates, [1.0, 0.0, 2.0, 0.0, 3.0]
    )
    valid = [True, False, True, False, True]
    np.testing.assert_allclose(
      output.result['tau'],
      numpy_references.fedlws_tau(updates, valid=valid, groups=_GROUPS),
      rtol=1e-5,
    )
    self.assertEqual(output.result['num_clients'], 3.0)

  def test_single_client_has_zero_tau(self):
    process = fedlws_stats.FedLwsStatsFactory(_GROUPS).create(
      _VALUE_TYPE, _WEIGHT
    )
    output = process.next(process.initialize(), _updates(1), [2.0])
    np.testing.assert_array_equal(output.result['tau'], [0.0, 0.0])

  def test_empty_cohort(self):
    process = fedlws_stats.FedLwsStatsFactory(_GROUPS).create(
      _VALUE_TYPE, _WEIGHT
    )
    output = process.next(process.initialize(), [], [])
    np.testing.assert_array_equal(output.result['tau'], [0.0, 0.0])
    self.assertEqual(output.result['num_clients'], 0.0)

  def test_clipping_as_the_mean_factory(self):
    updates = _updates(3, seed=3)
    process = fedlws_stats.FedLwsStatsFactory(
      _GROUPS,
      inner_agg_factory=tff.aggregators.clipping_factory(
        0.5, tff.aggregators.MeanFactory()
      ),
    ).create(_VALUE_TYPE, _WEIGHT)
    output = process.next(process.initialize(), updates, [1.0, 1.0, 1.0])
    norm = np.sqrt(
      sum(np.sum(np.square(x)) for x in output.result['mean_update'])
    )
    self.assertLessEqual(norm, 0.5 + 1e-5)
    self.assertIn('clipping', output.measurements['mean'])

  @parameterized.named_parameters(
    ('missing_leaf', [[0, 1], [2]]),
    ('repeated_leaf', [[0, 1], [1, 2, 3]]),
    ('out_of_range', [[0, 1], [2, 3, 4]]),
  )
  def test_groups_must_partition_the_leaves(self, groups):
    with self.assertRaisesRegex(ValueError, 'exactly once'):
      fedlws_stats.FedLwsStatsFactory(groups).create(_VALUE_TYPE, _WEIGHT)

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, 'tau_mode'):
      fedlws_stats.FedLwsStatsFactory(_GROUPS, tau_mode='variance')
    with self.assertRaisesRegex(ValueError, 'non-empty'):
      fedlws_stats.FedLwsStatsFactory([[0, 1], []])
    with self.assertRaisesRegex(TypeError, 'weighted'):
      fedlws_stats.FedLwsStatsFactory(
        _GROUPS, inner_agg_factory=tff.aggregators.SumFactory()
      )
    with self.assertRaisesRegex(TypeError, 'FedLwsStatsFactory.*floating'):
      fedlws_stats.FedLwsStatsFactory([[0]]).create(
        [tff.TensorType(np.int32, [2])], _WEIGHT
      )


if __name__ == '__main__':
  absltest.main()
