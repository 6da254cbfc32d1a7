"""Secure aggregation and differential privacy per method (docs/privacy.md).

Every supported route is run against the plain route it must equal: a secure
sum in simulation (`runtime.use_local_worker(simulate_secure_aggregation=
True)`) gives the plain result up to its quantization; a DP factory without
noise gives the plain uniformly weighted (clipped) result. The routes that
cannot work fail with a clear error, and the intrinsics of each computation
show what a deployment would protect (secure sums) and what it would not
(plain `federated_sum` / `federated_aggregate`).
"""

import math

from absl.testing import absltest
import numpy as np
import tensorflow_federated as tff
import tensorflow_privacy as tfp

import tff_aggregators
from tff_aggregators import runtime
from tests import test_utils

_SHAPES = ([3, 2], [2])
_VALUE_TYPE = tff.types.to_type(
  [tff.TensorType(np.float32, s) for s in _SHAPES]
)
_WEIGHT = tff.TensorType(np.float32)
_GROUPS = [[0], [1]]
_CLIENT_OPTIMIZER = tff.learning.optimizers.build_sgdm(learning_rate=0.5)

# Client-to-server aggregations: plain ones reveal each client's value to
# whoever runs them in a deployment; secure ones only the sum.
_PLAIN = frozenset(
  {
    'federated_sum',
    'federated_aggregate',
    'federated_mean',
    'federated_weighted_mean',
  }
)
_SECURE = frozenset(
  {
    'federated_secure_sum',
    'federated_secure_sum_bitwidth',
    'federated_secure_modular_sum',
  }
)


def setUpModule():
  runtime.use_local_worker(simulate_secure_aggregation=True)


def aggregations(comp) -> list[tuple[str, str]]:
  """(intrinsic uri, type of the clients' value) of each aggregation."""
  found = []

  def visit(block):
    if isinstance(block, tff.framework.Intrinsic) and block.uri in (
      _PLAIN | _SECURE
    ):
      parameter = block.type_signature.parameter
      if block.uri != 'federated_sum':  # (value, zero/bound, ...)
        parameter = parameter[0]
      found.append((block.uri, str(parameter.member)))
    return block, False

  tff.framework.transform_postorder(comp.to_building_block(), visit)
  return found


def plain_aggregations(comp) -> list[tuple[str, str]]:
  return [a for a in aggregations(comp) if a[0] in _PLAIN]


def secure_mean(bound: float = 100.0) -> tff.aggregators.MeanFactory:
  """A weighted mean whose value and weight sums are both secure sums."""
  return tff.aggregators.MeanFactory(
    value_sum_factory=tff.aggregators.SecureSumFactory(bound, -bound),
    weight_sum_factory=tff.aggregators.SecureSumFactory(bound, 0.0),
    no_nan_division=True,
  )


def dp_mean(clients_per_round: int, clip: float, noise: float = 0.0):
  """TFF's Gaussian DP mean (unweighted) as a weighted factory."""
  return tff.aggregators.as_weighted_aggregator(
    tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
      noise_multiplier=noise, clients_per_round=clients_per_round, clip=clip
    )
  )


def random_rounds(num_rounds, num_clients, scale=1.0, seed=0):
  rng = np.random.default_rng(seed)
  rounds = []
  for _ in range(num_rounds):
    shared = [rng.normal(size=s) for s in _SHAPES]
    updates = [
      [
        (
          scale * (g + rng.normal(scale=rng.uniform(0.3, 2.0), size=g.shape))
        ).astype(np.float32)
        for g in shared
      ]
      for _ in range(num_clients)
    ]
    weights = list(rng.uniform(1, 5, size=num_clients).astype(np.float32))
    rounds.append((updates, weights))
  return rounds


def run(factory, rounds, *, uniform=False):
  """The outputs of `factory`'s process over `rounds` (weights 1 if uniform)."""
  process = factory.create(_VALUE_TYPE, _WEIGHT)
  state, outputs = process.initialize(), []
  for updates, weights in rounds:
    if uniform:
      weights = [np.float32(1.0)] * len(weights)
    output = process.next(state, updates, weights)
    state = output.state
    outputs.append(output)
  return outputs


def assert_leaves_close(test, got, want, atol):
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, atol=atol, rtol=1e-5)
  test.assertLen(got, len(want))


class SecureSumTest(absltest.TestCase):
  def test_native_context_cannot_run_a_secure_sum(self):
    factory = tff_aggregators.FedGladFactory(inner_agg_factory=secure_mean())
    try:
      runtime.use_local_worker()  # TFF's native compiler: no secure sum.
      with self.assertRaisesRegex(
        ValueError,
        'federated_secure_sum_bitwidth.*'
        r'use_local_worker\(simulate_secure_aggregation=True\)',
      ):
        run(factory, random_rounds(1, 2))
    finally:
      runtime.use_local_worker(simulate_secure_aggregation=True)

  def test_fedglad_secure_sum_equals_plain(self):
    rounds = random_rounds(3, 4)
    plain = run(tff_aggregators.FedGladFactory(gamma=0.5), rounds)
    routes = {  # name: (inner factory, rtol)
      'SecureSumFactory': (secure_mean(), 1e-5),
      # Adaptive (quantile-estimated) secure bounds, TFF's recipe: a wider
      # range, so a coarser 32-bit quantization.
      'secure_aggregator': (
        tff.learning.secure_aggregator(
          zeroing=False, clipping=False, weighted=True
        ),
        1e-4,
      ),
    }
    for name, (inner, rtol) in routes.items():
      secure = run(
        tff_aggregators.FedGladFactory(gamma=0.5, inner_agg_factory=inner),
        rounds,
      )
      for s, p in zip(secure, plain):
        assert_leaves_close(self, s.result, p.result, atol=1e-5)
        for key in ('gsi', 'multiplier'):
          np.testing.assert_allclose(
            s.measurements['fedglad'][key],
            p.measurements['fedglad'][key],
            rtol=rtol,
            err_msg=f'{name} {key}',
          )
    self.assertGreater(  # FedGLAD did scale the update.
      np.ptp(plain[-1].measurements['fedglad']['multiplier']), 1e-3
    )

  def test_fedglad_secure_range_must_cover_the_squared_norms(self):
    # Every weighted coordinate lies in [-10, 10], but weight * ||g||^2 does
    # not: the secure sum clips the squared norms and the GSI is wrong.
    rounds = random_rounds(1, 4)
    for updates, weights in rounds:
      self.assertLess(
        max(w * np.abs(x).max() for u, w in zip(updates, weights) for x in u),
        10,
      )
      self.assertGreater(
        max(w * np.sum(np.square(u[0])) for u, w in zip(updates, weights)), 10
      )
    (plain,) = run(tff_aggregators.FedGladFactory(), rounds)
    (narrow,) = run(
      tff_aggregators.FedGladFactory(inner_agg_factory=secure_mean(10.0)),
      rounds,
    )
    self.assertGreater(
      narrow.measurements['inner']['mean_value']['secure_upper_clipped_count'],
      0,
    )
    self.assertFalse(
      np.allclose(
        narrow.measurements['fedglad']['gsi'],
        plain.measurements['fedglad']['gsi'],
        rtol=1e-3,
      )
    )

  def test_fedlws_secure_sums_equal_plain(self):
    rounds = random_rounds(2, 4)
    for tau_mode in ('exact', 'rms'):
      plain = run(
        tff_aggregators.FedLwsStatsFactory(_GROUPS, tau_mode=tau_mode), rounds
      )
      secure = run(
        tff_aggregators.FedLwsStatsFactory(
          _GROUPS,
          tau_mode=tau_mode,
          inner_agg_factory=secure_mean(),
          stats_sum_factory=tff.aggregators.SecureSumFactory(100.0),
        ),
        rounds,
      )
      for s, p in zip(secure, plain):
        assert_leaves_close(
          self, s.result['mean_update'], p.result['mean_update'], atol=1e-5
        )
        np.testing.assert_allclose(
          s.result['tau'], p.result['tau'], rtol=1e-5, err_msg=tau_mode
        )
        self.assertAlmostEqual(s.result['num_clients'], 4.0, places=4)
        self.assertGreater(min(p.result['tau']), 0.1)

  def test_what_the_secure_routes_protect(self):
    fedglad = tff_aggregators.FedGladFactory(
      inner_agg_factory=secure_mean()
    ).create(_VALUE_TYPE, _WEIGHT)
    self.assertEqual(plain_aggregations(fedglad.next), [])
    # The update and the squared norms go through one secure sum, the
    # weights through another (quantized to int64; plus the secure sums of
    # their clip counts).
    secure_values = [t for _, t in aggregations(fedglad.next)]
    self.assertTrue(
      any('squared_norms=int64[2]' in t for t in secure_values), secure_values
    )
    fedlws = tff_aggregators.FedLwsStatsFactory(
      _GROUPS,
      inner_agg_factory=secure_mean(),
      stats_sum_factory=tff.aggregators.SecureSumFactory(100.0),
    ).create(_VALUE_TYPE, _WEIGHT)
    self.assertEqual(plain_aggregations(fedlws.next), [])
    # A secure mean alone leaves FedLWS's statistics (phase A: every valid
    # client's update, its count and squared norms; phase B: the deviation
    # norms) in plain sums.
    mean_only = tff_aggregators.FedLwsStatsFactory(
      _GROUPS, inner_agg_factory=secure_mean()
    ).create(_VALUE_TYPE, _WEIGHT)
    leaked = [t for _, t in plain_aggregations(mean_only.next)]
    self.assertLen(leaked, 2)
    self.assertTrue(any('float32[3,2]' in t for t in leaked), leaked)

  def test_build_fedlws_process_sums_its_statistics_in_plain(self):
    # A secure model_aggregator alone does not make the round secure: the
    # statistics need a secure stats_aggregator too (next test).
    process = tff_aggregators.build_fedlws_process(
      test_utils.tiny_model_fn,
      _CLIENT_OPTIMIZER,
      model_aggregator=secure_mean(),
      metrics_aggregator=tff.learning.metrics.secure_sum_then_finalize,
    )
    leaked = [t for _, t in plain_aggregations(process.next)]
    self.assertTrue(any('float32[3,2]' in t for t in leaked), leaked)

  def test_build_fedlws_process_with_a_secure_stats_aggregator(self):
    process = tff_aggregators.build_fedlws_process(
      test_utils.tiny_model_fn,
      _CLIENT_OPTIMIZER,
      model_aggregator=secure_mean(),
      stats_aggregator=tff.aggregators.SecureSumFactory(100.0),
      metrics_aggregator=tff.learning.metrics.secure_sum_then_finalize,
    )
    leaked = [t for _, t in plain_aggregations(process.next)]
    self.assertFalse(any('float32[3,2]' in t for t in leaked), leaked)

  def test_hand_composed_fedlws_process_is_secure(self):
    # The process of docs/privacy.md: build_fedlws_process's pieces with
    # secure sums for the statistics too.
    model_fn = test_utils.tiny_model_fn
    groups = tff_aggregators.model_layer_groups(model_fn, 'layer')
    weights_fn = tff.tensorflow.computation(
      lambda: tff.learning.models.ModelWeights.from_model(model_fn())
    )
    weights_type = weights_fn.type_signature.result
    secure = tff.learning.templates.compose_learning_process(
      weights_fn,
      tff.learning.templates.build_broadcast_process(weights_type),
      tff.learning.templates.build_model_delta_client_work(
        model_fn,
        _CLIENT_OPTIMIZER,
        client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES,
        metrics_aggregator=tff.learning.metrics.secure_sum_then_finalize,
      ),
      tff_aggregators.FedLwsStatsFactory(
        groups,
        inner_agg_factory=secure_mean(),
        stats_sum_factory=tff.aggregators.SecureSumFactory(100.0),
      ).create(weights_type.trainable, tff.TensorType(np.float32)),
      tff_aggregators.build_fedlws_finalizer(
        tff.learning.optimizers.build_sgdm(1.0),
        weights_type,
        groups=groups,
        beta=0.1,
      ),
    )
    self.assertEqual(plain_aggregations(secure.next), [])
    plain = tff_aggregators.build_fedlws_process(model_fn, _CLIENT_OPTIMIZER)
    datasets = test_utils.tiny_client_datasets(3)
    initial = plain.get_model_weights(plain.initialize())
    results = []
    for process in (plain, secure):
      state = process.set_model_weights(process.initialize(), initial)
      output = process.next(state, datasets)
      results.append(process.get_model_weights(output.state).trainable)
      self.assertGreater(  # FedLWS did shrink.
        max(output.metrics['finalizer']['tau']), 1e-3
      )
    assert_leaves_close(self, results[1], results[0], atol=1e-5)

  def test_proximal_processes_with_secure_sums(self):
    datasets = test_utils.tiny_client_datasets(3)
    builders = {
      'fedprox': lambda **kw: tff_aggregators.build_weighted_fed_prox(
        test_utils.tiny_model_fn, 0.1, _CLIENT_OPTIMIZER, **kw
      ),
    }
    if test_utils.is_full_suite():  # FedGLAD's secure sums: their own test.
      builders['fedglad'] = lambda **kw: tff_aggregators.build_fedglad_process(
        test_utils.tiny_model_fn, _CLIENT_OPTIMIZER, proximal_strength=0.1, **kw
      )
    for name, build in builders.items():
      plain = build()
      secure = build(
        model_aggregator=secure_mean(),
        metrics_aggregator=tff.learning.metrics.secure_sum_then_finalize,
      )
      # Nothing a client sends is summed in plain: model update, weights,
      # squared norms (FedGLAD) and metrics all go through secure sums.
      self.assertEqual(plain_aggregations(secure.next), [], name)
      initial = plain.get_model_weights(plain.initialize())
      results = []
      for process in (plain, secure):
        state = process.set_model_weights(process.initialize(), initial)
        state = process.next(state, datasets).state
        results.append(process.get_model_weights(state).trainable)
      self.assertGreater(  # The round did train.
        max(np.abs(r - i).max() for r, i in zip(results[0], initial.trainable)),
        1e-3,
      )
      assert_leaves_close(self, results[1], results[0], atol=1e-5)


class DifferentialPrivacyTest(absltest.TestCase):
  def test_unweighted_factories_are_refused_with_the_fix(self):
    dp = tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
      noise_multiplier=1.0, clients_per_round=10, clip=1.0
    )
    for make in (
      lambda: tff_aggregators.FedGladFactory(inner_agg_factory=dp),
      lambda: tff_aggregators.FedLwsStatsFactory(_GROUPS, inner_agg_factory=dp),
      lambda: tff_aggregators.build_fedglad_process(
        test_utils.tiny_model_fn, _CLIENT_OPTIMIZER, model_aggregator=dp
      ),
    ):
      with self.assertRaisesRegex(TypeError, 'as_weighted_aggregator'):
        make()
    with self.assertRaisesRegex(TypeError, 'WeightedAggregationFactory'):
      tff_aggregators.build_weighted_fed_prox(
        test_utils.tiny_model_fn, 0.1, _CLIENT_OPTIMIZER, model_aggregator=dp
      )

  def test_collect_all_methods_take_no_aggregator(self):
    # FedLAW, FedSA and FedCDA need every client's model at the server
    # (CollectAllFactory): no secure or DP aggregator can be passed.
    mean = secure_mean()
    for build, kwargs in (
      (
        tff_aggregators.build_fedlaw_process,
        dict(proxy_data=None, max_clients=4),
      ),
      (tff_aggregators.build_fedsa_process, dict(max_clients=4)),
      (
        tff_aggregators.build_fedcda_process,
        dict(num_clients=4, max_clients=4),
      ),
    ):
      with self.assertRaisesRegex(TypeError, 'model_aggregator'):
        build(
          test_utils.tiny_model_fn,
          _CLIENT_OPTIMIZER,
          model_aggregator=mean,
          **kwargs,
        )

  def test_fedglad_dp_without_noise_is_the_uniform_mean(self):
    rounds = random_rounds(2, 4)
    plain = run(tff_aggregators.FedGladFactory(gamma=0.5), rounds, uniform=True)
    # Weights are ignored (as_weighted_aggregator): the non-uniform weights
    # of `rounds` give the uniformly weighted result.
    private = run(
      tff_aggregators.FedGladFactory(
        gamma=0.5, inner_agg_factory=dp_mean(4, clip=1e6)
      ),
      rounds,
    )
    for d, p in zip(private, plain):
      assert_leaves_close(self, d.result, p.result, atol=1e-5)
      np.testing.assert_allclose(
        d.measurements['fedglad']['gsi'],
        p.measurements['fedglad']['gsi'],
        rtol=1e-5,
      )
    noisy = run(
      tff_aggregators.FedGladFactory(
        gamma=0.5, inner_agg_factory=dp_mean(4, clip=1.0, noise=1.0)
      ),
      rounds[:1],
    )
    self.assertGreater(
      np.abs(noisy[0].result[0] - plain[0].result[0]).max(), 1e-2
    )

  def test_fedglad_dp_clip_the_update_outside(self):
    # DP clips the whole record FedGLAD sends (update and per-leaf squared
    # norms). Clipping the update to c outside FedGLAD and giving DP the clip
    # c * sqrt(1 + c^2) (>= the record's norm) keeps the norms consistent.
    c = 0.5
    rounds = random_rounds(2, 4)
    for updates, _ in rounds:
      self.assertGreater(
        min(math.sqrt(sum(np.sum(np.square(x)) for x in u)) for u in updates), c
      )  # Every update is clipped.

    def clipped(inner):
      return tff.aggregators.clipping_factory(
        c, tff_aggregators.FedGladFactory(gamma=0.5, inner_agg_factory=inner)
      )

    plain = run(clipped(None), rounds, uniform=True)
    private = run(clipped(dp_mean(4, clip=c * math.sqrt(1 + c * c))), rounds)
    for d, p in zip(private, plain):
      self.assertEqual(d.measurements['clipped_count'], 4)
      assert_leaves_close(self, d.result, p.result, atol=1e-6)
      np.testing.assert_allclose(
        d.measurements['clipping']['fedglad']['gsi'],
        p.measurements['clipping']['fedglad']['gsi'],
        rtol=1e-5,
      )
    # With DP's clip = c alone, DP clips the record again: other GSIs.
    (tight,) = run(clipped(dp_mean(4, clip=c)), rounds[:1])
    self.assertFalse(
      np.allclose(
        tight.measurements['clipping']['fedglad']['gsi'],
        plain[0].measurements['clipping']['fedglad']['gsi'],
        rtol=1e-3,
      )
    )

  def test_fedlws_dp_without_noise_is_the_uniform_mean(self):
    rounds = random_rounds(2, 4)
    plain = run(
      tff_aggregators.FedLwsStatsFactory(_GROUPS), rounds, uniform=True
    )
    dp_sum = tff.aggregators.DifferentiallyPrivateFactory(
      tfp.GaussianSumQuery(l2_norm_clip=1e6, stddev=0.0)
    )
    private = run(
      tff_aggregators.FedLwsStatsFactory(
        _GROUPS,
        inner_agg_factory=dp_mean(4, clip=1e6),
        stats_sum_factory=dp_sum,
      ),
      rounds,
    )
    for d, p in zip(private, plain):
      assert_leaves_close(
        self, d.result['mean_update'], p.result['mean_update'], atol=1e-5
      )
      np.testing.assert_allclose(d.result['tau'], p.result['tau'], rtol=1e-5)
      self.assertAlmostEqual(d.result['num_clients'], 4.0, places=4)

  def test_fedprox_dp_without_noise_is_uniform_fedprox(self):
    datasets = test_utils.tiny_client_datasets(3)
    uniform = tff.learning.ClientWeighting.UNIFORM
    plain = tff_aggregators.build_weighted_fed_prox(
      test_utils.tiny_model_fn, 0.1, _CLIENT_OPTIMIZER, client_weighting=uniform
    )
    private = tff_aggregators.build_weighted_fed_prox(
      test_utils.tiny_model_fn,
      0.1,
      _CLIENT_OPTIMIZER,
      client_weighting=uniform,
      model_aggregator=dp_mean(3, clip=1e6),
    )
    initial = plain.get_model_weights(plain.initialize())
    results = []
    for process in (plain, private):
      state = process.set_model_weights(process.initialize(), initial)
      results.append(
        process.get_model_weights(process.next(state, datasets).state).trainable
      )
    assert_leaves_close(self, results[1], results[0], atol=1e-6)


if __name__ == '__main__':
  absltest.main()
