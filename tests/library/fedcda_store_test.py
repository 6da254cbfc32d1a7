"""FedCDA with the history outside TFF: same models as in the TFF state."""

import asyncio

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators import runtime
from tests import test_utils
from tff_aggregators import algorithms
import tff_aggregators
from tff_aggregators.client_works import identified

_OPTIMIZER = tff.learning.optimizers.build_sgdm(learning_rate=0.5)
_POPULATION = 6


def setUpModule():
  runtime.use_local_worker()


def _cohorts(rounds, size, seed=0):
  rng = np.random.default_rng(seed)
  return [
    list(rng.choice(_POPULATION, size, replace=False)) for _ in range(rounds)
  ]


class FedCdaStoreTest(parameterized.TestCase):
  def setUp(self):
    super().setUp()
    self.datasets = test_utils.tiny_client_datasets(_POPULATION)
    tf.keras.utils.set_random_seed(0)  # The same model whatever the order.
    self.initial = tf.nest.map_structure(
      lambda v: v.numpy(),
      tff.learning.models.ModelWeights.from_model(test_utils.tiny_model_fn()),
    )

  def _process(self, store, **kwargs):
    kwargs = dict(dict(max_clients=4, warmup_rounds=1, seed=3), **kwargs)
    return algorithms.build_fedcda_process(
      test_utils.tiny_model_fn,
      _OPTIMIZER,
      num_clients=_POPULATION,
      history_store=store,
      **kwargs,
    )

  def _run(self, process, cohorts, state=None):
    """(final state, [(flat model, finalizer metrics)] per round)."""
    if state is None:
      state = process.set_model_weights(process.initialize(), self.initial)
    rounds = []
    for ids in cohorts:
      output = process.next(
        state, identified.with_client_ids([self.datasets[i] for i in ids], ids)
      )
      state = output.state
      weights = process.get_model_weights(state)
      rounds.append(
        (test_utils.flat_trainable(weights), dict(output.metrics['finalizer']))
      )
    return state, rounds

  # The other switches share these code paths (checked against NumPy in
  # fedcda_test); two cases keep the suite's time down, one under `make test`.
  @parameterized.named_parameters(
    ('eq8', {}),
    (
      'tensorwise_norm_later_included',
      dict(
        divergence='tensorwise_norm',
        later_batches='included_at_previous_selection',
      ),
    ),
  )
  def test_stores_give_the_in_state_models(self, switches):
    if switches:
      test_utils.skip_unless_full_suite(self, 'eq8 covers the stores')
    cohorts = _cohorts(6, 4)
    _, want = self._run(self._process(None, **switches), cohorts)
    older = sum(m['older_selected'] for _, m in want)
    self.assertGreater(older, 1)  # The case exercises selection.
    for store in (
      tff_aggregators.InMemoryHistoryStore(),
      tff_aggregators.MemmapHistoryStore(self.create_tempdir().full_path),
    ):
      _, got = self._run(self._process(store, **switches), cohorts)
      for (got_w, got_m), (want_w, want_m) in zip(got, want):
        self.assertEqual(got_m['older_selected'], want_m['older_selected'])
        self.assertEqual(got_m['num_seen'], want_m['num_seen'])
        np.testing.assert_allclose(
          got_m['objective_selected'], want_m['objective_selected'], rtol=1e-5
        )
        np.testing.assert_allclose(got_w, want_w, rtol=0, atol=1e-6)

  # memory_size=1: the interrupted round overwrites slots that earlier
  # rounds filled (the check must accept this round's stamp there).
  @parameterized.parameters({}, {'memory_size': 1})
  def test_memmap_resumes_after_an_interrupted_round(self, **kwargs):
    cohorts = _cohorts(6, 4, seed=1)
    _, want = self._run(
      self._process(
        tff_aggregators.MemmapHistoryStore(self.create_tempdir().full_path),
        **kwargs,
      ),
      cohorts,
    )
    directory = self.create_tempdir().full_path
    process = self._process(
      tff_aggregators.MemmapHistoryStore(directory), **kwargs
    )
    state, _ = self._run(process, cohorts[:3])
    manager = tff.program.FileProgramStateManager(
      self.create_tempdir().full_path
    )
    asyncio.run(manager.save(state, version=3))
    self._run(process, cohorts[3:4], state)  # Writes the store, then "dies".
    # A new driver process: a new store object over the same files.
    resumed = self._process(
      tff_aggregators.MemmapHistoryStore(directory), **kwargs
    )
    loaded, version = asyncio.run(manager.load_latest(resumed.initialize()))
    self.assertEqual(version, 3)
    self.assertEqual(int(loaded['round']), 3)
    _, got = self._run(resumed, cohorts[3:], loaded)
    for (got_w, _), (want_w, _) in zip(got, want[3:]):
      np.testing.assert_array_equal(got_w, want_w)

  def test_in_memory_state_round_trips_through_a_checkpoint(self):
    cohorts = _cohorts(5, 4, seed=2)
    process = self._process(tff_aggregators.InMemoryHistoryStore())
    _, want = self._run(process, cohorts)
    state, _ = self._run(process, cohorts[:2])
    manager = tff.program.FileProgramStateManager(
      self.create_tempdir().full_path
    )
    asyncio.run(manager.save(state, version=2))
    loaded, _ = asyncio.run(manager.load_latest(process.initialize()))
    _, got = self._run(process, cohorts[2:], loaded)
    for (got_w, _), (want_w, _) in zip(got, want[2:]):
      np.testing.assert_array_equal(got_w, want_w)

  @parameterized.named_parameters(
    ('k1', dict(memory_size=1)),
    ('k2_tensorwise_norm', dict(memory_size=2, divergence='tensorwise_norm')),
  )
  def test_warmup_checkpoint_of_a_larger_memory_is_adopted(self, switches):
    if switches['memory_size'] != 1:
      test_utils.skip_unless_full_suite(self, 'k1 covers the adoption')
    cohorts = _cohorts(9, 4, seed=4)
    warmup = 5

    def make(**kwargs):
      return self._process(
        tff_aggregators.InMemoryHistoryStore(),
        warmup_rounds=warmup,
        **dict(switches, **kwargs),
      )

    process = make()
    _, want = self._run(process, cohorts)
    # Stale selections of non-participants are read after the warm-up, and
    # with K = 2 an older model is selected.
    self.assertTrue(
      any(m['num_seen'] > m['num_participants'] for _, m in want[warmup:])
    )
    older = sum(m['older_selected'] for _, m in want[warmup:])
    self.assertEqual(older > 0, switches['memory_size'] > 1)
    larger, _ = self._run(make(memory_size=3), cohorts[:warmup])
    # Some client has more models than this process keeps: some are dropped.
    self.assertGreater(
      np.max(np.sum(larger['stamps'] >= 0, axis=1)), switches['memory_size'] + 1
    )
    manager = tff.program.FileProgramStateManager(
      self.create_tempdir().full_path
    )
    asyncio.run(manager.save(larger, version=warmup))
    loaded, _ = asyncio.run(manager.load_latest(process.initialize()))
    with self.assertRaisesRegex(ValueError, 'passes through `adopt_state`'):
      process.next(loaded, [])
    adopted = process.adopt_state(loaded)
    self.assertIs(process.adopt_state(adopted), adopted)
    _, got = self._run(process, cohorts[warmup:], adopted)
    for (got_w, got_m), (want_w, want_m) in zip(got, want[warmup:]):
      self.assertEqual(got_m['older_selected'], want_m['older_selected'])
      np.testing.assert_array_equal(got_w, want_w)

  def test_states_that_cannot_be_adopted(self):
    process = self._process(
      tff_aggregators.InMemoryHistoryStore(), warmup_rounds=2, memory_size=2
    )
    cohorts = _cohorts(3, 3, seed=7)
    smaller, _ = self._run(
      self._process(
        tff_aggregators.InMemoryHistoryStore(), warmup_rounds=2, memory_size=1
      ),
      cohorts[:2],
    )
    with self.assertRaisesRegex(ValueError, 'at least as many slots'):
      process.adopt_state(smaller)
    larger = self._process(
      tff_aggregators.InMemoryHistoryStore(), warmup_rounds=0, memory_size=3
    )
    past, rounds = self._run(larger, cohorts[:2])
    self.assertGreater(sum(m['older_selected'] for _, m in rounds), 0)
    with self.assertRaisesRegex(ValueError, 'selected an older model'):
      process.adopt_state(past)  # Round 2, after 2 rounds of selection.
    past, _ = self._run(larger, cohorts)
    with self.assertRaisesRegex(ValueError, 'past the warm-up'):
      process.adopt_state(past)
    on_disk = self._process(
      tff_aggregators.MemmapHistoryStore(self.create_tempdir().full_path),
      warmup_rounds=2,
      memory_size=1,
    )
    with self.assertRaisesRegex(ValueError, 'in MemmapHistoryStore'):
      on_disk.adopt_state(past)

  def test_a_store_two_rounds_ahead_is_refused(self):
    directory = self.create_tempdir().full_path
    process = self._process(
      tff_aggregators.MemmapHistoryStore(directory),
      memory_size=1,
      max_clients=1,
    )
    first, _ = self._run(process, [[0]])
    later, _ = self._run(process, [[0], [0]], first)
    del later  # Slot of round 0 now holds round 2.
    with self.assertRaisesRegex(ValueError, 'moved past the process state'):
      self._run(process, [[0]], first)

  def test_training_loop_sees_client_ids(self):
    process = self._process(tff_aggregators.InMemoryHistoryStore())
    self.assertTrue(identified.expects_client_ids(process))
    self.assertEqual(
      process.get_hparams(process.initialize())['client_work']['learning_rate'],
      np.float32(0.5),
    )

  def test_bad_stores(self):
    with self.assertRaisesRegex(TypeError, 'HistoryStore'):
      self._process('/tmp/somewhere')
    with self.assertRaisesRegex(ValueError, 'GiB.*MemmapHistoryStore'):
      self._process(tff_aggregators.InMemoryHistoryStore(max_bytes=10))
    huge = tff_aggregators.MemmapHistoryStore(self.create_tempdir().full_path)
    huge.open(2**40, 4, 2**30)  # The files open at first use.
    with self.assertRaisesRegex(ValueError, 'Cannot map.*TiB'):
      huge.initial_models()
    directory = self.create_tempdir().full_path
    self._process(tff_aggregators.MemmapHistoryStore(directory)).initialize()
    with self.assertRaisesRegex(ValueError, 'new directory'):
      self._process(
        tff_aggregators.MemmapHistoryStore(directory), memory_size=2
      ).initialize()


if __name__ == '__main__':
  absltest.main()
