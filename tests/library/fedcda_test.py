"""FedCDA (identified client work + collect-all + finalizer) against NumPy."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators import runtime
from tests import numpy_references
from tests import test_utils
from tff_aggregators import algorithms
from tff_aggregators.client_works import identified
from tff_aggregators.finalizers import fedcda

_OPTIMIZER = tff.learning.optimizers.build_sgdm(learning_rate=0.5)
_POPULATION = 6


def setUpModule():
  runtime.use_local_worker()


def _permutation(seed):
  def permutation(t, p):
    return tf.argsort(tf.random.stateless_uniform([p], seed=[seed, t])).numpy()

  return permutation


def _random_ranks(seed):
  def random_ranks(t, counts):
    u = tf.random.stateless_uniform([len(counts)], seed=[seed, t + (1 << 20)])
    return np.minimum(
      (u.numpy() * np.array(counts, np.float32)).astype(int),
      np.array(counts) - 1,
    )

  return random_ranks


def _leaf_sizes():
  return [
    int(np.prod(v.shape))
    for v in test_utils.tiny_model_fn().trainable_variables
  ]


def _numpy_clients(weights, datasets, ids):
  """NumPy FedAvg clients (SGD 0.5): (models [P, D], losses, examples)."""
  w = test_utils.flat_trainable(weights).astype(np.float64)
  models, losses, sizes = [], [], []
  for i in ids:
    batches = list(datasets[i].as_numpy_iterator())
    delta, loss = numpy_references.linear_softmax_client_delta(
      weights.trainable, batches, lr=0.5, with_loss=True
    )
    models.append(w - np.concatenate([np.ravel(x) for x in delta]))
    losses.append(loss)
    sizes.append(sum(len(y) for _, y in batches))
  return models, np.array(losses), np.array(sizes, np.float64)


def _fixed_start(process, seed=0):
  """The process's initial state at fixed weights (tiny_model_fn's vary)."""
  rng = np.random.default_rng(seed)
  return process.set_model_weights(
    process.initialize(),
    tff.learning.models.ModelWeights(
      trainable=[
        rng.uniform(-1, 1, size=(3, 2)).astype(np.float32),
        np.zeros(2, np.float32),
      ],
      non_trainable=[],
    ),
  )


def _cohorts(rounds, size, seed=0):
  rng = np.random.default_rng(seed)
  # In id order: the order FedCDA takes participants in.
  return [
    sorted(rng.choice(_POPULATION, size, replace=False)) for _ in range(rounds)
  ]


class FedCdaTest(parameterized.TestCase):
  @parameterized.named_parameters(
    ('k3_b2', 3, 2, 1, {}),
    # L != 1: the divergence term's weight in eq. 8.
    ('b1_exhaustive_large_smoothness', 3, 1, 0, dict(smoothness=25.0)),
    ('k2_b4_small_smoothness', 2, 4, 2, dict(smoothness=0.02)),
    # The script's switches (docs/methods/fedcda.md).
    (
      'later_included',
      3,
      2,
      1,
      dict(later_batches='included_at_previous_selection'),
    ),
    ('tensorwise_norm', 3, 2, 1, dict(divergence='tensorwise_norm')),
    ('clients_per_batch', 3, 3, 1, dict(batch_param='clients_per_batch')),
    ('script_warmup', 3, 2, 3, dict(warmup_aggregation='all_seen_newest')),
    ('newest', 3, 2, 1, dict(selection='newest')),
    ('random', 3, 2, 1, dict(selection='random')),
  )
  def test_rounds_match_numpy(self, memory, batches, warmup, switches):
    # The 'newest' and 'random' selections are ablation baselines, run here
    # (cheaply) so that `make test` checks every selection mode.
    switches = dict(switches)
    smoothness = switches.pop('smoothness', 1.0)
    datasets = test_utils.tiny_client_datasets(_POPULATION)
    process = algorithms.build_fedcda_process(
      test_utils.tiny_model_fn,
      _OPTIMIZER,
      num_clients=_POPULATION,
      max_clients=4,
      memory_size=memory,
      num_batches=batches,
      warmup_rounds=warmup,
      seed=3,
      smoothness=smoothness,
      **switches,
    )
    reference = numpy_references.FedCdaServer(
      memory,
      batches,
      smoothness,
      warmup,
      _permutation(3),
      random_ranks=_random_ranks(3),
      leaf_sizes=_leaf_sizes(),
      **switches,
    )
    # The same rule at L = 1, fed the same client models.
    unit = numpy_references.FedCdaServer(
      memory,
      batches,
      1.0,
      warmup,
      _permutation(3),
      random_ranks=_random_ranks(3),
      leaf_sizes=_leaf_sizes(),
      **switches,
    )
    unit_differs = False
    state = _fixed_start(process)
    older = 0
    for t, ids in enumerate(_cohorts(6, 4)):
      models, losses, sizes = _numpy_clients(
        process.get_model_weights(state), datasets, ids
      )
      want = reference.step(t, ids, models, losses, sizes)
      unit_differs |= not np.allclose(
        unit.step(t, ids, models, losses, sizes), want, rtol=1e-6
      )
      output = process.next(
        state, identified.with_client_ids([datasets[i] for i in ids], ids)
      )
      state = output.state
      np.testing.assert_allclose(
        test_utils.flat_trainable(process.get_model_weights(state)),
        want,
        rtol=1e-5,
        atol=1e-6,
      )
      got = output.metrics['finalizer']
      self.assertEqual(got['older_selected'], reference.older_selected)
      np.testing.assert_allclose(
        got['objective_selected'],
        reference.objective(
          [
            reference._entry(c, s)  # pylint: disable=protected-access
            for c, s in reference.selected.items()
          ]
        ),
        rtol=1e-5,
      )
      older += reference.older_selected
    if switches.get('selection') != 'newest':
      self.assertGreater(older, 0)  # Selection did pick older models.
    if smoothness != 1.0:  # L changes what is selected.
      self.assertTrue(unit_differs)

  def test_small_cohorts_with_empty_and_non_finite_clients(self):
    # After warm-up: cohorts below max_clients, an empty dataset (id -1)
    # and a client whose update is NaN (weight 0) are left out; the rest
    # match the reference given only the valid participants.
    datasets = test_utils.tiny_client_datasets(_POPULATION)
    nan_data = tf.data.Dataset.from_tensor_slices(
      (np.full((2, 3), np.nan, np.float32), np.zeros(2, np.int64))
    ).batch(2)
    empty = datasets[0].take(0)
    process = algorithms.build_fedcda_process(
      test_utils.tiny_model_fn,
      _OPTIMIZER,
      num_clients=_POPULATION,
      max_clients=4,
      memory_size=3,
      num_batches=2,
      warmup_rounds=1,
      seed=3,
      smoothness=0.5,
    )
    reference = numpy_references.FedCdaServer(
      3, 2, 0.5, 1, _permutation(3), leaf_sizes=_leaf_sizes()
    )
    # (valid ids, cohort as (id, dataset)) per round.
    rounds = [
      [(0, None), (1, None), (2, None), (3, None)],  # Warm-up.
      [(1, None), (2, None), (5, empty), (4, None)],
      [(0, None), (1, nan_data), (3, None)],
      [(2, None)],
      [(1, None), (4, None)],
      [(0, None), (1, None), (2, None), (3, None)],
    ]
    state = _fixed_start(process)
    older = 0
    for t, cohort in enumerate(rounds):
      ids = [i for i, data in cohort if data is None]
      models, losses, sizes = _numpy_clients(
        process.get_model_weights(state), datasets, ids
      )
      want = reference.step(t, ids, models, losses, sizes)
      output = process.next(
        state,
        identified.with_client_ids(
          [datasets[i] if data is None else data for i, data in cohort],
          [i for i, _ in cohort],
        ),
      )
      state = output.state
      got = output.metrics['finalizer']
      self.assertEqual(got['num_participants'], len(ids))
      self.assertEqual(got['num_seen'], len(reference.selected))
      self.assertEqual(got['older_selected'], reference.older_selected)
      np.testing.assert_allclose(
        test_utils.flat_trainable(process.get_model_weights(state)),
        want,
        rtol=1e-5,
        atol=1e-6,
      )
      older += reference.older_selected
    self.assertGreater(older, 0)

  def test_client_order_does_not_matter(self):
    datasets = test_utils.tiny_client_datasets(_POPULATION)
    process = algorithms.build_fedcda_process(
      test_utils.tiny_model_fn,
      _OPTIMIZER,
      num_clients=_POPULATION,
      max_clients=4,
      warmup_rounds=0,
    )
    finals = []
    for reverse in (False, True):
      state = process.initialize()
      for ids in _cohorts(3, 4, seed=4):
        ids = ids[::-1] if reverse else ids
        state = process.next(
          state, identified.with_client_ids([datasets[i] for i in ids], ids)
        ).state
      finals.append(test_utils.flat_trainable(process.get_model_weights(state)))
    np.testing.assert_allclose(finals[0], finals[1], rtol=1e-6, atol=1e-7)

  def test_memory_one_always_selects_the_newest(self):
    datasets = test_utils.tiny_client_datasets(_POPULATION)
    process = algorithms.build_fedcda_process(
      test_utils.tiny_model_fn,
      _OPTIMIZER,
      num_clients=_POPULATION,
      max_clients=3,
      memory_size=1,
      warmup_rounds=0,
    )
    state = process.initialize()
    for ids in _cohorts(4, 3, seed=1):
      output = process.next(
        state, identified.with_client_ids([datasets[i] for i in ids], ids)
      )
      state = output.state
      self.assertEqual(output.metrics['finalizer']['older_selected'], 0)

  def test_long_warmup_is_fedavg(self):
    datasets = test_utils.tiny_client_datasets(_POPULATION)
    cda = algorithms.build_fedcda_process(
      test_utils.tiny_model_fn,
      _OPTIMIZER,
      num_clients=_POPULATION,
      max_clients=4,
      warmup_rounds=10,
    )
    fedavg = tff.learning.algorithms.build_weighted_fed_avg(
      test_utils.tiny_model_fn,
      _OPTIMIZER,
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
    )
    cda_state = cda.initialize()
    fedavg_state = fedavg.set_model_weights(
      fedavg.initialize(), cda.get_model_weights(cda_state)
    )
    for ids in _cohorts(3, 4, seed=2):
      cohort = [datasets[i] for i in ids]
      cda_state = cda.next(
        cda_state, identified.with_client_ids(cohort, ids)
      ).state
      fedavg_state = fedavg.next(fedavg_state, cohort).state
    np.testing.assert_allclose(
      test_utils.flat_trainable(cda.get_model_weights(cda_state)),
      test_utils.flat_trainable(fedavg.get_model_weights(fedavg_state)),
      rtol=1e-5,
      atol=1e-6,
    )

  def test_unseen_clients_are_not_averaged_and_empty_clients_skipped(self):
    datasets = test_utils.tiny_client_datasets(_POPULATION)
    empty = datasets[0].take(0)
    process = algorithms.build_fedcda_process(
      test_utils.tiny_model_fn,
      _OPTIMIZER,
      num_clients=_POPULATION,
      max_clients=3,
      warmup_rounds=0,
    )
    output = process.next(
      process.initialize(),
      identified.with_client_ids([datasets[1], empty, datasets[2]], [1, 0, 2]),
    )
    got = output.metrics['finalizer']
    self.assertEqual(got['num_participants'], 2)
    self.assertEqual(got['num_seen'], 2)
    self.assertEqual(list(output.state.finalizer['selected'][:3]), [-1, 0, 0])

  def test_ring_buffer_keeps_the_newest(self):
    datasets = test_utils.tiny_client_datasets(_POPULATION)
    process = algorithms.build_fedcda_process(
      test_utils.tiny_model_fn,
      _OPTIMIZER,
      num_clients=_POPULATION,
      max_clients=1,
      memory_size=2,
      warmup_rounds=100,
    )
    state = process.initialize()
    for _ in range(3):
      state = process.next(
        state, identified.with_client_ids([datasets[4]], [4])
      ).state
    np.testing.assert_array_equal(sorted(state.finalizer['stamps'][4]), [1, 2])
    self.assertTrue(np.all(state.finalizer['stamps'][:4] == -1))

  def test_checkpointed_state_resumes_identically(self):
    datasets = test_utils.tiny_client_datasets(_POPULATION)
    process = algorithms.build_fedcda_process(
      test_utils.tiny_model_fn,
      _OPTIMIZER,
      num_clients=_POPULATION,
      max_clients=4,
      warmup_rounds=1,
    )
    cohorts = _cohorts(4, 4, seed=5)
    run = lambda state, ids: (
      process.next(
        state, identified.with_client_ids([datasets[i] for i in ids], ids)
      ).state
    )
    state = process.initialize()
    for ids in cohorts:
      state = run(state, ids)
    manager = tff.program.FileProgramStateManager(
      self.create_tempdir().full_path
    )
    resumed = process.initialize()
    for ids in cohorts[:2]:
      resumed = run(resumed, ids)
    asyncio_run = __import__('asyncio').run
    asyncio_run(manager.save(resumed, version=2))
    loaded, version = asyncio_run(manager.load_latest(process.initialize()))
    self.assertEqual(version, 2)
    for ids in cohorts[2:]:
      loaded = run(loaded, ids)
    np.testing.assert_array_equal(
      test_utils.flat_trainable(process.get_model_weights(loaded)),
      test_utils.flat_trainable(process.get_model_weights(state)),
    )

  def test_refuses_a_history_above_the_bound(self):
    with self.assertRaisesRegex(ValueError, r'MiB of history.*max_state_bytes'):
      algorithms.build_fedcda_process(
        test_utils.tiny_model_fn, _OPTIMIZER, num_clients=10**7, max_clients=4
      )

  def test_history_bound_is_inclusive(self):
    # N K D float32 bytes: 6 clients x 3 models x 8 parameters x 4 bytes.
    fedcda.check_history_size(6, 3, 8, max_state_bytes=576)
    with self.assertRaisesRegex(ValueError, 'max_state_bytes'):
      fedcda.check_history_size(6, 3, 8, max_state_bytes=575)

  def test_options_default_to_the_papers_settings(self):
    # K = 3, B = 3, L = 1, 50 warm-up rounds, the paper's selection rule,
    # as build_fedcda_process's defaults (a hand-composed finalizer gets
    # the same).
    self.assertEqual(
      fedcda.FedCdaOptions(),
      fedcda.FedCdaOptions(
        memory_size=3,
        num_batches=3,
        smoothness=1.0,
        warmup_rounds=50,
        seed=0,
        selection='approx',
        divergence='squared_l2',
        later_batches='excluded',
        warmup_aggregation='fedavg',
        batch_param='num_batches',
      ),
    )

  @parameterized.named_parameters(('last_epoch', 3), ('all_steps', None))
  def test_client_reports_the_last_epoch_loss(self, local_epochs):
    rng = np.random.default_rng(7)
    x = rng.normal(size=(6, 3)).astype(np.float32)
    y = rng.integers(0, 2, size=6).astype(np.int64)
    # 3 epochs of 6 examples in batches of 5: the last epoch is examples
    # 12-17, i.e. 3 of the third batch and all 3 of the fourth.
    data = tf.data.Dataset.from_tensor_slices((x, y)).repeat(3).batch(5)
    shares = [0, 0, 3, 3] if local_epochs else [5, 5, 5, 3]
    initial = tf.nest.map_structure(
      lambda v: v.numpy(),
      tff.learning.models.ModelWeights.from_model(test_utils.tiny_model_fn()),
    )
    # Plain SGD by hand: the loss of each batch before its step.
    kernel, bias = [tf.Variable(v) for v in initial.trainable]
    losses = []
    for bx, by in data:
      with tf.GradientTape() as tape:
        loss = tf.reduce_mean(
          tf.keras.losses.sparse_categorical_crossentropy(
            by, tf.matmul(bx, kernel) + bias, from_logits=True
          )
        )
      losses.append(float(loss))
      for v, g in zip((kernel, bias), tape.gradient(loss, (kernel, bias))):
        v.assign_sub(0.5 * g)
    want = np.dot(shares, losses) / np.sum(shares)
    work = identified.build_identified_client_work(
      test_utils.tiny_model_fn,
      tff.learning.optimizers.build_sgdm(0.5),
      local_epochs=local_epochs,
    )
    output = work.next(
      work.initialize(), [initial], identified.with_client_ids([data], [2])
    )
    update = output.result[0].update
    self.assertAlmostEqual(update['loss'], want, places=5)
    self.assertEqual(update['client_id'], 2.0)
    np.testing.assert_allclose(
      update['delta'][0], initial.trainable[0] - kernel.numpy(), atol=1e-6
    )

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, 'memory_size'):
      algorithms.build_fedcda_process(
        test_utils.tiny_model_fn,
        _OPTIMIZER,
        num_clients=4,
        max_clients=4,
        memory_size=0,
      )
    with self.assertRaisesRegex(ValueError, 'combinations'):
      algorithms.build_fedcda_process(
        test_utils.tiny_model_fn,
        _OPTIMIZER,
        num_clients=40,
        max_clients=40,
        num_batches=1,
        memory_size=3,
      )
    with self.assertRaisesRegex(ValueError, 'Client id -1 is negative'):
      identified.with_client_ids([tf.data.Dataset.range(1)], [-1])
    with self.assertRaisesRegex(
      ValueError, r'outside \[0, 16777216\): ids travel as float32'
    ):
      identified.with_client_ids([tf.data.Dataset.range(1)], [2**24])


if __name__ == '__main__':
  absltest.main()
