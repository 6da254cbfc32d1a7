"""FedLWS finalizer (paper Eqs. 8-9) and layer grouping against NumPy."""

import collections

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from experiments import models
from tff_aggregators import runtime
from tests import numpy_references
from tff_aggregators.finalizers import fedlws
from tff_aggregators.finalizers import server_step

_SHAPES = ([3, 2], [2], [2, 2], [2])
_GROUPS = [[0, 1], [2, 3]]
_WEIGHTS_TYPE = tff.types.to_type(
  tff.learning.models.ModelWeights(
    trainable=[tff.TensorType(np.float32, s) for s in _SHAPES],
    non_trainable=[tff.TensorType(np.float32, [2])],
  )
)
_SGD = tff.learning.optimizers.build_sgdm(1.0)


def setUpModule():
  runtime.use_local_worker()


def _model(rng):
  return tff.learning.models.ModelWeights(
    trainable=[rng.normal(size=s).astype(np.float32) for s in _SHAPES],
    non_trainable=[rng.normal(size=2).astype(np.float32)],
  )


def _deltas(rng, num_clients):
  return [
    [rng.normal(scale=0.5, size=s).astype(np.float32) for s in _SHAPES]
    for _ in range(num_clients)
  ]


def _stats(deltas, weights, groups=_GROUPS):
  lam = np.asarray(weights) / np.sum(weights)
  mean = [
    sum(lam[k] * d[i] for k, d in enumerate(deltas)).astype(np.float32)
    for i in range(len(_SHAPES))
  ]
  return collections.OrderedDict(
    mean_update=mean,
    tau=numpy_references.fedlws_tau(deltas, groups=groups).astype(np.float32),
    num_clients=np.float32(len(deltas)),
  )


def _finalize(weights, deltas, client_weights, groups=_GROUPS, **kwargs):
  process = fedlws.build_fedlws_finalizer(
    _SGD, _WEIGHTS_TYPE, groups=groups, **kwargs
  )
  return process.next(
    process.initialize(), weights, _stats(deltas, client_weights, groups)
  )


class FedLwsFinalizerTest(parameterized.TestCase):
  @parameterized.parameters((None,), ((0.01, 0.2),))
  def test_matches_numpy(self, tau_clip):
    rng = np.random.default_rng(0)
    weights, deltas = _model(rng), _deltas(rng, 4)
    client_weights = [1.0, 3.0, 2.0, 6.0]
    output = _finalize(
      weights, deltas, client_weights, beta=0.3, tau_clip=tau_clip
    )
    want = numpy_references.fedlws_round(
      weights.trainable,
      deltas,
      client_weights,
      _GROUPS,
      beta=0.3,
      tau_clip=tau_clip,
    )
    np.testing.assert_allclose(
      output.measurements['gamma'], want['gamma'], rtol=1e-5
    )
    self.assertTrue(np.all(want['gamma'] < 0.999))  # The rule did act.
    for got, expected in zip(output.result.trainable, want['weights']):
      np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(
      output.result.non_trainable[0], weights.non_trainable[0]
    )

  def test_beta_zero_is_fedavg_exactly(self):
    rng = np.random.default_rng(1)
    weights, deltas = _model(rng), _deltas(rng, 3)
    output = _finalize(weights, deltas, [1.0, 2.0, 3.0], beta=0.0)
    stock = tff.learning.templates.build_apply_optimizer_finalizer(
      _SGD, _WEIGHTS_TYPE
    )
    fedavg = stock.next(
      stock.initialize(),
      weights,
      _stats(deltas, [1.0, 2.0, 3.0])['mean_update'],
    )
    for a, b in zip(output.result.trainable, fedavg.result.trainable):
      np.testing.assert_array_equal(a, b)

  def test_single_client(self):
    rng = np.random.default_rng(2)
    weights, deltas = _model(rng), _deltas(rng, 1)
    paper = _finalize(weights, deltas, [1.0], beta=0.5)
    np.testing.assert_array_equal(paper.measurements['gamma'], [1.0, 1.0])
    clamped = _finalize(weights, deltas, [1.0], beta=0.5, tau_clip=(0.01, 0.2))
    want = numpy_references.fedlws_round(
      weights.trainable,
      deltas,
      [1.0],
      _GROUPS,
      beta=0.5,
      tau_clip=(0.01, 0.2),
    )
    np.testing.assert_allclose(
      clamped.measurements['gamma'], want['gamma'], rtol=1e-6
    )
    self.assertTrue(np.all(want['gamma'] < 1.0))

  def test_zero_norm_group_keeps_factor_one(self):
    rng = np.random.default_rng(3)
    weights, deltas = _model(rng), _deltas(rng, 3)
    weights.trainable[2][:] = 0.0
    weights.trainable[3][:] = 0.0
    output = _finalize(weights, deltas, [1.0, 1.0, 1.0], beta=0.5)
    self.assertEqual(output.measurements['gamma'][1], 1.0)
    self.assertLess(output.measurements['gamma'][0], 1.0)
    for leaf in output.result.trainable:
      self.assertTrue(np.all(np.isfinite(leaf)))

  def test_no_valid_client_keeps_factor_one(self):
    rng = np.random.default_rng(4)
    weights = _model(rng)
    stats = collections.OrderedDict(
      mean_update=[np.zeros(s, np.float32) for s in _SHAPES],
      tau=np.zeros(2, np.float32),
      num_clients=np.float32(0),
    )
    process = fedlws.build_fedlws_finalizer(
      _SGD, _WEIGHTS_TYPE, groups=_GROUPS, beta=0.5, tau_clip=(0.01, 0.2)
    )
    output = process.next(process.initialize(), weights, stats)
    np.testing.assert_array_equal(output.measurements['gamma'], [1.0, 1.0])
    for a, b in zip(output.result.trainable, weights.trainable):
      np.testing.assert_array_equal(a, b)

  def test_non_finite_update_is_rejected(self):
    rng = np.random.default_rng(5)
    weights, deltas = _model(rng), _deltas(rng, 2)
    stats = _stats(deltas, [1.0, 1.0])
    stats['mean_update'][0][0, 0] = np.nan
    process = fedlws.build_fedlws_finalizer(
      _SGD, _WEIGHTS_TYPE, groups=_GROUPS, beta=0.5
    )
    output = process.next(process.initialize(), weights, stats)
    self.assertEqual(output.measurements['update_non_finite'], 1)
    for a, b in zip(output.result.trainable, weights.trainable):
      np.testing.assert_array_equal(a, b)

  def test_model_wise_is_eq7_on_the_flat_model(self):
    rng = np.random.default_rng(6)
    weights, deltas = _model(rng), _deltas(rng, 3)
    groups = [[0, 1, 2, 3]]
    output = _finalize(
      weights, deltas, [1.0, 2.0, 1.0], groups=groups, beta=0.4
    )
    flat_w = np.concatenate([np.ravel(x) for x in weights.trainable])
    flat_d = [np.concatenate([np.ravel(x) for x in d]) for d in deltas]
    lam = np.array([1.0, 2.0, 1.0]) / 4
    step = sum(l * d for l, d in zip(lam, flat_d))
    mean = np.mean(flat_d, axis=0)
    tau = np.mean([np.linalg.norm(d - mean) for d in flat_d])
    s = np.linalg.norm(flat_w)
    gamma = s / (0.4 * tau * np.linalg.norm(step) + s)
    np.testing.assert_allclose(output.measurements['gamma'], [gamma], rtol=1e-5)

  def test_all_finite_of_no_floating_tensor_is_true(self):
    # server_step.all_finite, which every finalizer's rejection uses.
    self.assertTrue(server_step.all_finite())
    self.assertTrue(server_step.all_finite([tf.constant([1, 2])]))
    self.assertFalse(
      server_step.all_finite([tf.constant([1, 2]), tf.constant([np.inf])])
    )

  def test_hparams_expose_beta(self):
    process = fedlws.build_fedlws_finalizer(
      _SGD, _WEIGHTS_TYPE, groups=_GROUPS, beta=0.1
    )
    state = process.initialize()
    hparams = process.get_hparams(state)
    self.assertAlmostEqual(hparams['beta'], 0.1)
    hparams['beta'] = np.float32(0.0)
    state = process.set_hparams(state, hparams)
    self.assertEqual(process.get_hparams(state)['beta'], 0.0)

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, 'beta'):
      fedlws.build_fedlws_finalizer(
        _SGD, _WEIGHTS_TYPE, groups=_GROUPS, beta=-1.0
      )
    with self.assertRaisesRegex(ValueError, 'tau_clip'):
      fedlws.build_fedlws_finalizer(
        _SGD, _WEIGHTS_TYPE, groups=_GROUPS, beta=0.1, tau_clip=(0.2, 0.01)
      )
    # The bounds may be 0 and equal.
    fedlws.build_fedlws_finalizer(
      _SGD, _WEIGHTS_TYPE, groups=_GROUPS, beta=0.1, tau_clip=(0.0, 0.0)
    )
    with self.assertRaisesRegex(ValueError, 'exactly once'):
      fedlws.build_fedlws_finalizer(
        _SGD, _WEIGHTS_TYPE, groups=[[0, 1]], beta=0.1
      )
    with self.assertRaisesRegex(TypeError, 'ModelWeights'):
      fedlws.build_fedlws_finalizer(
        _SGD, _WEIGHTS_TYPE.trainable, groups=_GROUPS, beta=0.1
      )


class FedLwsServerOptimizerTest(parameterized.TestCase):
  """Any server optimizer: the step norm is ||w_hat - w||, not the update's.

  With server SGD at learning rate 1 the two are equal; every other case
  tells them apart (FedLWS on FedAvgM or FedAdam; docs/methods/fedlws.md).
  """

  @parameterized.named_parameters(
    (
      'sgd_lr_half',
      tff.learning.optimizers.build_sgdm(0.5),
      dict(kind='sgdm', lr=0.5),
    ),
    (
      'sgdm',
      tff.learning.optimizers.build_sgdm(0.7, momentum=0.9),
      dict(kind='sgdm', lr=0.7, momentum=0.9),
    ),
    (
      'adam',
      tff.learning.optimizers.build_adam(
        0.5, beta_1=0.8, beta_2=0.99, epsilon=1e-6
      ),
      dict(kind='adam', lr=0.5, beta_1=0.8, beta_2=0.99, epsilon=1e-6),
    ),
  )
  def test_rounds_match_numpy(self, optimizer, reference):
    rng = np.random.default_rng(8)
    weights = _model(rng)
    process = fedlws.build_fedlws_finalizer(
      optimizer, _WEIGHTS_TYPE, groups=_GROUPS, beta=0.3
    )
    server = numpy_references.ServerOptimizer(**reference)
    state = process.initialize()
    for _ in range(3):
      deltas = _deltas(rng, 4)
      client_weights = rng.uniform(1.0, 4.0, size=4)
      stats = _stats(deltas, client_weights)
      output = process.next(state, weights, stats)
      w_hat = server.step(weights.trainable, stats['mean_update'])
      gamma, b, want = numpy_references.fedlws_shrink(
        weights.trainable, w_hat, stats['tau'], _GROUPS, beta=0.3
      )
      step_norms = [
        np.sqrt(sum(np.sum((w_hat[i] - weights.trainable[i]) ** 2) for i in g))
        for g in _GROUPS
      ]
      update_norms = [
        np.sqrt(sum(np.sum(np.square(stats['mean_update'][i])) for i in g))
        for g in _GROUPS
      ]
      # The optimizer's step is not the mean update here.
      self.assertGreater(
        np.max(np.abs(np.log(np.divide(step_norms, update_norms)))), 0.1
      )
      got = output.measurements
      np.testing.assert_allclose(got['step_norm'], step_norms, rtol=1e-5)
      np.testing.assert_allclose(got['b'], b, rtol=1e-5)
      np.testing.assert_allclose(got['gamma'], gamma, rtol=1e-5)
      self.assertTrue(np.all(gamma < 0.99))  # The shrink did act.
      self.assertEqual(got['update_non_finite'], 0)
      for g, w in zip(output.result.trainable, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
      state, weights = output.state, output.result

  @parameterized.named_parameters(('low_bound_acts', 0), ('high_bound_acts', 1))
  def test_clip_acts_on_one_group_only(self, which):
    # Each group's beta * tau differs; the bounds clip one and not the other
    # (a clip to one value for all groups would pass a test where every
    # group is clipped).
    rng = np.random.default_rng(0)
    weights, deltas = _model(rng), _deltas(rng, 4)
    client_weights = [1.0, 3.0, 2.0, 6.0]
    b = 0.3 * numpy_references.fedlws_tau(deltas, groups=_GROUPS)
    low, high = sorted(b)
    self.assertGreater(high / low, 1.05)
    middle = (low + high) / 2
    tau_clip = (middle, 10 * high) if which == 0 else (low / 10, middle)
    output = _finalize(
      weights, deltas, client_weights, beta=0.3, tau_clip=tau_clip
    )
    want = numpy_references.fedlws_round(
      weights.trainable,
      deltas,
      client_weights,
      _GROUPS,
      beta=0.3,
      tau_clip=tau_clip,
    )
    clipped = np.clip(b, *tau_clip)
    self.assertEqual(int(np.sum(clipped != b)), 1)
    np.testing.assert_allclose(output.measurements['b'], clipped, rtol=1e-5)
    np.testing.assert_allclose(
      output.measurements['gamma'], want['gamma'], rtol=1e-5
    )
    for got, expected in zip(output.result.trainable, want['weights']):
      np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


class LayerGroupsTest(parameterized.TestCase):
  def test_closing_rule(self):
    names = [
      'conv/kernel:0',
      'conv/bias:0',
      'conv2/kernel:0',
      'bn/gamma:0',
      'bn/beta:0',
      'dense/kernel:0',
      'emb/embeddings:0',
    ]
    self.assertEqual(fedlws.layer_groups(names), [[0, 1], [2, 3, 4, 5, 6]])
    self.assertEqual(
      fedlws.layer_groups(names, 'keras_layer'),
      [[0, 1], [2], [3, 4], [5], [6]],
    )
    self.assertEqual(fedlws.layer_groups(names, 'model'), [list(range(7))])

  @parameterized.parameters(('simple_cnn', 5), ('mlp', 3), ('resnet20', 22))
  def test_model_zoo_groups(self, name, expected):
    # FedLWS's code: SimpleCNN 5 groups (kernel + bias), ResNet20 22 groups
    # (conv kernel + the following normalization's gamma and beta).
    model = models.create_model(
      name,
      input_shape=(32, 32, 3),
      num_classes=10,
      weight_decay=0.0,
      seed=0,
    )
    names = [v.name for v in model.trainable_variables]
    groups = fedlws.keras_layer_groups(model)
    self.assertLen(groups, expected)
    for group in groups:
      last = names[group[-1]].split(':')[0].rsplit('/', 1)[-1]
      self.assertIn(last, ('bias', 'beta'))
      self.assertIn(
        names[group[0]].split(':')[0].rsplit('/', 1)[-1], ('kernel',)
      )
      self.assertLessEqual(len(group), 3)  # Never two kernels in a group.

  def test_model_fn_groups_use_the_keras_connectivity(self):
    def model_fn():
      keras_model = models.create_model(
        'resnet20',
        input_shape=(32, 32, 3),
        num_classes=10,
        weight_decay=0.0,
        seed=0,
      )
      return tff.learning.models.from_keras_model(
        keras_model,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(),
        input_spec=(
          tf.TensorSpec([None, 32, 32, 3]),
          tf.TensorSpec([None], tf.int64),
        ),
      )

    groups = fedlws.model_layer_groups(model_fn)
    self.assertLen(groups, 22)
    self.assertTrue(all(len(g) <= 3 for g in groups))

  def test_trailing_variables_join_the_last_of_several_groups(self):
    names = [
      'a/kernel:0',
      'a/bias:0',
      'b/kernel:0',
      'b/bias:0',
      'c/kernel:0',
      'c/bias:0',
      'head/kernel:0',
    ]
    self.assertEqual(fedlws.layer_groups(names), [[0, 1], [2, 3], [4, 5, 6]])

  def test_unknown_grouping(self):
    with self.assertRaisesRegex(ValueError, 'grouping'):
      fedlws.layer_groups(['a/kernel:0'], 'per_variable')


if __name__ == '__main__':
  absltest.main()
