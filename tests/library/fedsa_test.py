"""FedSA (Eqs. 2-15, Steps 1-3) against hand-checked vectors and NumPy."""

import collections

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators import runtime
from tests import numpy_references
from tff_aggregators import algorithms
from tff_aggregators.finalizers import fedsa

_SIM = np.array(
  [
    [1, 0.9, 0.5, 0.1, 0.3],
    [0.9, 1, 0.4, 0.2, 0.1],
    [0.5, 0.4, 1, 0, 0],
    [0.1, 0.2, 0, 1, 0.8],
    [0.3, 0.1, 0, 0.8, 1],
  ],
  np.float32,
)
# A hand-checkable vector.
_X = np.array(
  [
    [1.00, 0.50, 0.01, 0.10, -0.20, 0.02],
    [1.02, 0.52, -0.02, 0.30, -0.21, 0.00],
    [0.98, 0.49, 0.03, 0.12, -0.19, -0.01],
    [1.00, 0.51, 0.00, 0.08, -0.20, 0.03],
  ],
  np.float32,
)
_OPTIONS = dict(
  cv_threshold=0.2,
  sim_threshold=0.2,
  num_categories=2,
  max_clusters=2,
  alpha_normalization='sum_to_one',
)


def setUpModule():
  runtime.use_local_worker()


def _clusters(assign):
  groups = collections.defaultdict(list)
  for client, cluster in enumerate(np.asarray(assign)):
    if cluster >= 0:
      groups[cluster].append(client)
  return [groups[c] for c in sorted(groups)]


class GreedyMacroClassesTest(parameterized.TestCase):
  @parameterized.parameters(
    (1, 0.2, [[0, 1, 2]], 2),
    (2, 0.2, [[0, 1, 2], [3, 4]], 0),
    (3, 0.2, [[0, 1, 2], [3, 4]], 0),
    (1, 0.1, [[0, 1, 2, 3, 4]], 0),
  )
  def test_spec_vectors(self, max_clusters, sim_t, expected, unclustered):
    assign = fedsa.greedy_macro_classes(tf.constant(_SIM), max_clusters, sim_t)
    self.assertEqual(_clusters(assign), expected)
    self.assertEqual(int(np.sum(np.asarray(assign) == -1)), unclustered)
    self.assertEqual(
      [
        sorted(c)
        for c in numpy_references.greedy_mac(_SIM, max_clusters, sim_t)
      ],
      expected,
    )

  def test_random_similarities_match_numpy(self):
    rng = np.random.default_rng(0)
    for trial in range(20):
      k = rng.integers(2, 9)
      sim = np.round(rng.uniform(size=(k, k)), 1)  # Ties happen.
      sim = ((sim + sim.T) / 2).astype(np.float32)
      s = int(rng.integers(1, 4))
      assign = fedsa.greedy_macro_classes(tf.constant(sim), s, 0.4)
      want = numpy_references.greedy_mac(sim.astype(np.float64), s, 0.4)
      self.assertEqual(
        _clusters(assign), [sorted(c) for c in want], f'trial {trial}'
      )


class FedSaTensorTest(parameterized.TestCase):
  def test_spec_hand_vector(self):
    out, diag = fedsa.fedsa_tensor(tf.constant(_X), **_OPTIONS)
    np.testing.assert_allclose(
      out, [1.0, 0.505, 0.0016667, 0.15, -0.2, 0.01], atol=1e-6
    )
    self.assertAlmostEqual(float(diag['high_fraction']), 2 / 6, places=6)
    self.assertEqual(int(diag['clusters']), 2)
    literal, _ = fedsa.fedsa_tensor(
      tf.constant(_X), **dict(_OPTIONS, alpha_normalization='literal')
    )
    np.testing.assert_allclose(
      literal, [1.0, 0.505, 0.00125, 0.15, -0.2, 0.0075], atol=1e-6
    )

  def test_unit_weights_give_the_same_weighted_mean(self):
    # fedsa_tensor's clients weigh 1 each: weighted_mean changes nothing.
    plain, _ = fedsa.fedsa_tensor(tf.constant(_X), **_OPTIONS)
    weighted, _ = fedsa.fedsa_tensor(
      tf.constant(_X), weighted_mean=True, **_OPTIONS
    )
    np.testing.assert_allclose(weighted, plain, rtol=1e-6, atol=1e-7)

  @parameterized.product(k=[3, 6, 10], categories=[2, 4], literal=[False, True])
  def test_random_tensors_match_numpy(self, k, categories, literal):
    rng = np.random.default_rng(k * 10 + categories)
    x = (
      rng.normal(scale=0.05, size=(1, 40))
      + rng.normal(scale=0.03, size=(k, 40))
    ).astype(np.float32)
    out, diag = fedsa.fedsa_tensor(
      tf.constant(x),
      cv_threshold=0.2,
      sim_threshold=0.2,
      num_categories=categories,
      max_clusters=2,
      alpha_normalization='literal' if literal else 'sum_to_one',
    )
    want = numpy_references.fedsa_tensor(x, c=categories, s=2, literal=literal)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-6)
    self.assertGreater(float(diag['high_fraction']), 0.0)
    if k == 10:  # Several clusters: the rule departs from the mean.
      self.assertEqual(int(diag['clusters']), 2)
      self.assertFalse(np.allclose(out, x.mean(axis=0), atol=1e-7))

  @parameterized.named_parameters(
    (
      'per_tensor_minmax',
      dict(mic_normalization='per_tensor_minmax'),
      dict(mic='per_tensor_minmax'),
    ),
    ('quantile', dict(mic_normalization='quantile'), dict(mic='quantile')),
    (
      'raw',
      dict(mic_normalization='raw', mic_scale=2000.0),
      dict(mic='raw', mic_scale=2000.0),
    ),
    ('epsilon', dict(zero_mean_policy='epsilon'), dict(epsilon_policy=True)),
    ('weighted', dict(weighted_mean=True), dict(weighted=True)),
    (
      'frozen',
      dict(late_join_mode='frozen', sim_threshold=0.3),
      dict(frozen=True, sim_t=0.3),
    ),
    ('global', dict(cluster_scope='global'), dict(global_scope=True)),
  )
  def test_ablation_options_match_numpy(self, options, reference):
    rng = np.random.default_rng(7)
    tensors = [
      (
        rng.normal(scale=0.05, size=(1, m))
        + rng.normal(scale=0.03, size=(9, m))
      ).astype(np.float32)
      for m in (30, 12)
    ]
    tensors[1][:, 0] = [1, -1, 1, -1, 1, -1, 1, -1, 0]  # A zero mean.
    weights = rng.uniform(1, 5, size=9).astype(np.float32)
    got, diag = fedsa.fedsa(
      [tf.constant(x) for x in tensors],
      tf.constant(weights),
      num_categories=3,
      max_clusters=2,
      **options,
    )
    want = numpy_references.fedsa(tensors, weights, c=3, s=2, **reference)
    for g, w in zip(got, want):
      np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)
    self.assertTrue(np.all(np.asarray(diag['high_fraction']) > 0))

  def test_cv_threshold_one_gives_the_mean(self):
    x = (np.random.default_rng(3).normal(size=(6, 20))).astype(np.float32)
    out, diag = fedsa.fedsa_tensor(tf.constant(x), cv_threshold=1.0)
    np.testing.assert_allclose(out, x.mean(axis=0), rtol=1e-5, atol=1e-7)
    self.assertEqual(float(diag['high_fraction']), 0.0)

  def test_identical_clients_give_their_model(self):
    x = np.tile(np.linspace(-1, 1, 10, dtype=np.float32), (5, 1))
    out, _ = fedsa.fedsa_tensor(tf.constant(x))
    np.testing.assert_array_equal(out, x[0])

  def test_one_and_two_clients(self):
    x = _X[:1]
    out, _ = fedsa.fedsa_tensor(tf.constant(x), **_OPTIONS)
    np.testing.assert_allclose(out, x[0], rtol=1e-6)
    out, _ = fedsa.fedsa_tensor(tf.constant(_X[:2]), **_OPTIONS)
    np.testing.assert_allclose(out, _X[:2].mean(axis=0), rtol=1e-6)

  def test_zero_mean_and_constant_coordinates(self):
    x = np.array([[0.1, 1.0, 0.2], [-0.1, 1.0, 0.3]], np.float32)
    out, _ = fedsa.fedsa_tensor(tf.constant(x), **_OPTIONS)
    self.assertTrue(np.all(np.isfinite(out)))
    np.testing.assert_allclose(out, x.mean(axis=0), atol=1e-7)


_FEATURES = 6
# numpy_references.fedsa's defaults, the builder's.
_REFERENCE_DEFAULTS = dict(
  cv_t=0.2,
  sim_t=0.2,
  c=4,
  s=4,
  literal=False,
  mic='per_coordinate_minmax',
  mic_scale=4.0,
  epsilon_policy=False,
  weighted=False,
  frozen=False,
  global_scope=False,
)


def _three_class_model_fn():
  """A linear 3-class model: its bias deltas are not +-x pairs."""
  keras_model = tf.keras.Sequential(
    [tf.keras.layers.Dense(3, input_shape=(_FEATURES,))]
  )
  return tff.learning.models.from_keras_model(
    keras_model,
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    input_spec=(
      tf.TensorSpec([None, _FEATURES]),
      tf.TensorSpec([None], tf.int64),
    ),
  )


def _data(num_clients, seed=0):
  """Client k: 3 + k examples of 3 classes in batches of 2."""
  rng = np.random.default_rng(seed)
  datasets, batches = [], []
  for k in range(num_clients):
    x = rng.normal(size=(3 + k, _FEATURES)).astype(np.float32) + 0.5 * k
    y = rng.integers(0, 3, size=3 + k).astype(np.int64)
    datasets.append(tf.data.Dataset.from_tensor_slices((x, y)).batch(2))
    batches.append([(x[i : i + 2], y[i : i + 2]) for i in range(0, 3 + k, 2)])
  return datasets, batches


class BuildFedSaProcessTest(parameterized.TestCase):
  @parameterized.named_parameters(
    (
      'thresholds',
      dict(
        cv_threshold=0.1, sim_threshold=0.3, num_categories=5, max_clusters=2
      ),
      dict(cv_t=0.1, sim_t=0.3, c=5, s=2),
      0.0,
    ),
    # zero_mean_policy acts only on a zero-mean coordinate (none here;
    # test_ablation_options_match_numpy has one).
    (
      'ablation_options',
      dict(
        num_categories=3,
        max_clusters=2,
        alpha_normalization='literal',
        mic_normalization='per_tensor_minmax',
        zero_mean_policy='epsilon',
        weighted_mean=True,
        late_join_mode='frozen',
        cluster_scope='global',
      ),
      dict(
        c=3,
        s=2,
        literal=True,
        mic='per_tensor_minmax',
        epsilon_policy=True,
        weighted=True,
        frozen=True,
        global_scope=True,
      ),
      0.0,
    ),
    # FedProx clients (several local steps), against NumPy FedProx.
    (
      'fedprox_raw_mic',
      dict(
        proximal_strength=0.8,
        cv_threshold=0.3,
        num_categories=3,
        max_clusters=2,
        mic_normalization='raw',
        mic_scale=100.0,
      ),
      dict(cv_t=0.3, c=3, s=2, mic='raw', mic_scale=100.0),
      0.8,
    ),
  )
  def test_rounds_match_numpy(self, options, reference, mu):
    datasets, batches = _data(8)
    process = algorithms.build_fedsa_process(
      _three_class_model_fn,
      tff.learning.optimizers.build_sgdm(0.5),
      max_clients=8,
      **options,
    )
    rng = np.random.default_rng(0)
    state = process.set_model_weights(
      process.initialize(),
      tff.learning.models.ModelWeights(
        trainable=[
          (0.5 * rng.normal(size=(_FEATURES, 3))).astype(np.float32),
          np.zeros(3, np.float32),
        ],
        non_trainable=[],
      ),
    )
    sensitivity = {key: 0.0 for key in reference if key != 'epsilon_policy'}
    for _ in range(2):
      weights = process.get_model_weights(state)
      deltas = [
        numpy_references.linear_softmax_client_delta(
          weights.trainable, b, lr=0.5, mu=mu
        )
        for b in batches
      ]
      sizes = np.array([sum(len(y) for _, y in b) for b in batches], float)
      if mu:  # The proximal term changes the clients.
        plain = numpy_references.linear_softmax_client_delta(
          weights.trainable, batches[4], lr=0.5
        )
        self.assertGreater(np.abs(plain[0] - deltas[4][0]).max(), 1e-3)
      models = [
        [
          np.float32(w) - np.float32(d[i])
          for i, w in enumerate(weights.trainable)
        ]
        for d in deltas
      ]
      # The finalizer's canonical client order (a fixed random projection).
      flat = np.stack(
        [np.concatenate([np.ravel(t) for t in m]) for m in models]
      )
      projection = tf.random.stateless_uniform(
        [flat.shape[1]], seed=[0, 0]
      ).numpy()
      order = np.argsort(flat @ projection, kind='stable')
      tensors = [
        np.stack([np.ravel(models[k][i]) for k in order])
        for i in range(len(weights.trainable))
      ]
      fedsa_of = lambda options, tensors=tensors, order=order, sizes=sizes: (
        np.concatenate(
          numpy_references.fedsa(
            tensors, sizes[order], dtype=np.float32, **options
          )
        )
      )
      want = fedsa_of(reference)
      for key in sensitivity:  # Each option changes the result.
        sensitivity[key] = max(
          sensitivity[key],
          np.abs(
            fedsa_of(dict(reference, **{key: _REFERENCE_DEFAULTS[key]})) - want
          ).max(),
        )
      output = process.next(state, datasets)
      state = output.state
      got = np.concatenate(
        [np.ravel(t) for t in process.get_model_weights(state).trainable]
      )
      np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
      self.assertEqual(output.metrics['finalizer']['num_clients'], 8)
    for key, difference in sensitivity.items():
      self.assertGreater(difference, 1e-3, key)

  def test_invalid_clients_are_left_out(self):
    weights_type = tff.types.to_type(
      tff.learning.models.ModelWeights(
        trainable=[tff.TensorType(np.float32, [4])], non_trainable=[]
      )
    )
    process = fedsa.build_fedsa_finalizer(weights_type)
    weights = tff.learning.models.ModelWeights(
      trainable=[np.ones(4, np.float32)], non_trainable=[]
    )
    deltas = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
    deltas[1, 0] = np.nan
    output = process.next(
      process.initialize(),
      weights,
      collections.OrderedDict(
        values=deltas, weights=np.array([1.0, 1.0, 0.0], np.float32)
      ),
    )
    self.assertEqual(output.measurements['num_clients'], 1)
    np.testing.assert_allclose(
      output.result.trainable[0], 1.0 - deltas[0], rtol=1e-6
    )
    empty = process.next(
      process.initialize(),
      weights,
      collections.OrderedDict(
        values=np.zeros([0, 4], np.float32), weights=np.zeros([0], np.float32)
      ),
    )
    np.testing.assert_array_equal(empty.result.trainable[0], np.ones(4))

  def test_high_fraction_overall_weights_tensors_by_size(self):
    # Tensor 0 is the hand vector _X (2 of 6 coordinates high); tensor 1
    # is the same on every client (none high): 2 of all 8 coordinates, not
    # the mean of the tensors' fractions (1/6).
    weights_type = tff.types.to_type(
      tff.learning.models.ModelWeights(
        trainable=[
          tff.TensorType(np.float32, [6]),
          tff.TensorType(np.float32, [2]),
        ],
        non_trainable=[],
      )
    )
    process = fedsa.build_fedsa_finalizer(weights_type, **_OPTIONS)
    weights = tff.learning.models.ModelWeights(
      trainable=[np.zeros(6, np.float32), np.zeros(2, np.float32)],
      non_trainable=[],
    )
    constant = np.tile(np.array([[0.5, -0.5]], np.float32), (4, 1))
    output = process.next(
      process.initialize(),
      weights,
      collections.OrderedDict(
        values=-np.concatenate([_X, constant], axis=1),
        weights=np.ones(4, np.float32),
      ),
    )
    np.testing.assert_allclose(
      output.measurements['high_fraction'], [2 / 6, 0.0], atol=1e-6
    )
    self.assertAlmostEqual(
      float(output.measurements['high_fraction_overall']), 2 / 8, places=6
    )

  def test_result_does_not_depend_on_client_order(self):
    weights_type = tff.types.to_type(
      tff.learning.models.ModelWeights(
        trainable=[tff.TensorType(np.float32, [40])], non_trainable=[]
      )
    )
    process = fedsa.build_fedsa_finalizer(
      weights_type, num_categories=2, max_clusters=2
    )
    rng = np.random.default_rng(5)
    weights = tff.learning.models.ModelWeights(
      trainable=[rng.normal(scale=0.05, size=40).astype(np.float32)],
      non_trainable=[],
    )
    deltas = rng.normal(scale=0.03, size=(10, 40)).astype(np.float32)
    outputs = []
    for order in (np.arange(10), rng.permutation(10)):
      outputs.append(
        process.next(
          process.initialize(),
          weights,
          collections.OrderedDict(
            values=deltas[order], weights=np.ones(10, np.float32)
          ),
        )
      )
    np.testing.assert_array_equal(
      outputs[0].result.trainable[0], outputs[1].result.trainable[0]
    )
    self.assertEqual(outputs[0].measurements['clusters'][0], 2)

  def test_bad_arguments(self):
    weights_type = tff.types.to_type(
      tff.learning.models.ModelWeights(
        trainable=[tff.TensorType(np.float32, [4])], non_trainable=[]
      )
    )
    with self.assertRaisesRegex(ValueError, 'alpha_normalization'):
      fedsa.build_fedsa_finalizer(weights_type, alpha_normalization='sum')
    with self.assertRaisesRegex(ValueError, 'num_categories'):
      fedsa.build_fedsa_finalizer(weights_type, num_categories=0)
    with self.assertRaisesRegex(ValueError, 'cv_threshold'):
      fedsa.build_fedsa_finalizer(weights_type, cv_threshold=1.5)
    with self.assertRaisesRegex(ValueError, 'Unknown FedSA options'):
      fedsa.build_fedsa_finalizer(weights_type, cv_t=0.2)


if __name__ == '__main__':
  absltest.main()
