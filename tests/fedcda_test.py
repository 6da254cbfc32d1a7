"""FedCDA (identified client work + collect-all + finalizer) against NumPy."""

import os

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from experiments import runtime
from tests import numpy_references
from tests import test_utils
from tff_aggregators import algorithms
from tff_aggregators.client_works import identified

_OPTIMIZER = tff.learning.optimizers.build_sgdm(learning_rate=0.5)
_POPULATION = 6


def setUpModule():
  runtime.use_local_worker()


def _permutation(seed):
  def permutation(t, p):
    return tf.argsort(tf.random.stateless_uniform([p], seed=[seed, t])).numpy()
  return permutation


def _cohorts(rounds, size, seed=0):
  rng = np.random.default_rng(seed)
  # In id order: the order FedCDA takes participants in.
  return [sorted(rng.choice(_POPULATION, size, replace=False))
          for _ in range(rounds)]


def _flat(weights):
  return np.concatenate([np.ravel(x) for x in weights.trainable])


class FedCdaTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('k3_b2', 3, 2, 1),
      ('b1_exhaustive', 3, 1, 0),
      ('k2_b4', 2, 4, 2),
  )
  def test_rounds_match_numpy(self, memory, batches, warmup):
    datasets = test_utils.tiny_client_datasets(_POPULATION)
    process = algorithms.build_fedcda_process(
        test_utils.tiny_model_fn, _OPTIMIZER, num_clients=_POPULATION,
        max_clients=4, memory_size=memory, num_batches=batches,
        warmup_rounds=warmup, seed=3)
    reference = numpy_references.FedCdaServer(
        memory, batches, 1.0, warmup, _permutation(3))
    state = process.initialize()
    older = 0
    for t, ids in enumerate(_cohorts(6, 4)):
      weights = process.get_model_weights(state)
      deltas, sizes, losses = test_utils.client_results(
          test_utils.tiny_model_fn, _OPTIMIZER, weights,
          [datasets[i] for i in ids])
      w = _flat(weights).astype(np.float64)
      models = [w - np.concatenate([np.ravel(x) for x in d]) for d in deltas]
      want = reference.step(t, ids, models, losses, sizes)
      output = process.next(
          state, identified.with_client_ids([datasets[i] for i in ids], ids))
      state = output.state
      np.testing.assert_allclose(_flat(process.get_model_weights(state)),
                                 want, rtol=1e-5, atol=1e-6)
      got = output.metrics['finalizer']
      self.assertEqual(got['older_selected'], reference.older_selected)
      np.testing.assert_allclose(
          got['objective_selected'],
          reference.objective([reference._entry(c, s)  # pylint: disable=protected-access
                               for c, s in reference.selected.items()]),
          rtol=1e-5)
      older += reference.older_selected
    self.assertGreater(older, 0)  # Selection did pick older models.

  def test_client_order_does_not_matter(self):
    datasets = test_utils.tiny_client_datasets(_POPULATION)
    process = algorithms.build_fedcda_process(
        test_utils.tiny_model_fn, _OPTIMIZER, num_clients=_POPULATION,
        max_clients=4, warmup_rounds=0)
    finals = []
    for reverse in (False, True):
      state = process.initialize()
      for ids in _cohorts(3, 4, seed=4):
        ids = ids[::-1] if reverse else ids
        state = process.next(state, identified.with_client_ids(
            [datasets[i] for i in ids], ids)).state
      finals.append(_flat(process.get_model_weights(state)))
    np.testing.assert_allclose(finals[0], finals[1], rtol=1e-6, atol=1e-7)

  def test_memory_one_always_selects_the_newest(self):
    datasets = test_utils.tiny_client_datasets(_POPULATION)
    process = algorithms.build_fedcda_process(
        test_utils.tiny_model_fn, _OPTIMIZER, num_clients=_POPULATION,
        max_clients=3, memory_size=1, warmup_rounds=0)
    state = process.initialize()
    for ids in _cohorts(4, 3, seed=1):
      output = process.next(
          state, identified.with_client_ids([datasets[i] for i in ids], ids))
      state = output.state
      self.assertEqual(output.metrics['finalizer']['older_selected'], 0)

  def test_long_warmup_is_fedavg(self):
    datasets = test_utils.tiny_client_datasets(_POPULATION)
    cda = algorithms.build_fedcda_process(
        test_utils.tiny_model_fn, _OPTIMIZER, num_clients=_POPULATION,
        max_clients=4, warmup_rounds=10)
    fedavg = tff.learning.algorithms.build_weighted_fed_avg(
        test_utils.tiny_model_fn, _OPTIMIZER,
        server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0))
    cda_state = cda.initialize()
    fedavg_state = fedavg.set_model_weights(
        fedavg.initialize(), cda.get_model_weights(cda_state))
    for ids in _cohorts(3, 4, seed=2):
      cohort = [datasets[i] for i in ids]
      cda_state = cda.next(
          cda_state, identified.with_client_ids(cohort, ids)).state
      fedavg_state = fedavg.next(fedavg_state, cohort).state
    np.testing.assert_allclose(
        _flat(cda.get_model_weights(cda_state)),
        _flat(fedavg.get_model_weights(fedavg_state)), rtol=1e-5, atol=1e-6)

  def test_unseen_clients_are_not_averaged_and_empty_clients_skipped(self):
    datasets = test_utils.tiny_client_datasets(_POPULATION)
    empty = datasets[0].take(0)
    process = algorithms.build_fedcda_process(
        test_utils.tiny_model_fn, _OPTIMIZER, num_clients=_POPULATION,
        max_clients=3, warmup_rounds=0)
    output = process.next(process.initialize(), identified.with_client_ids(
        [datasets[1], empty, datasets[2]], [1, 0, 2]))
    got = output.metrics['finalizer']
    self.assertEqual(got['num_participants'], 2)
    self.assertEqual(got['num_seen'], 2)
    self.assertEqual(list(output.state.finalizer['selected'][:3]),
                     [-1, 0, 0])

  def test_ring_buffer_keeps_the_newest(self):
    datasets = test_utils.tiny_client_datasets(_POPULATION)
    process = algorithms.build_fedcda_process(
        test_utils.tiny_model_fn, _OPTIMIZER, num_clients=_POPULATION,
        max_clients=1, memory_size=2, warmup_rounds=100)
    state = process.initialize()
    for _ in range(3):
      state = process.next(state, identified.with_client_ids(
          [datasets[4]], [4])).state
    np.testing.assert_array_equal(
        sorted(state.finalizer['stamps'][4]), [1, 2])
    self.assertTrue(np.all(state.finalizer['stamps'][:4] == -1))

  def test_checkpointed_state_resumes_identically(self):
    datasets = test_utils.tiny_client_datasets(_POPULATION)
    process = algorithms.build_fedcda_process(
        test_utils.tiny_model_fn, _OPTIMIZER, num_clients=_POPULATION,
        max_clients=4, warmup_rounds=1)
    cohorts = _cohorts(4, 4, seed=5)
    run = lambda state, ids: process.next(state, identified.with_client_ids(
        [datasets[i] for i in ids], ids)).state
    state = process.initialize()
    for ids in cohorts:
      state = run(state, ids)
    manager = tff.program.FileProgramStateManager(
        self.create_tempdir().full_path)
    resumed = process.initialize()
    for ids in cohorts[:2]:
      resumed = run(resumed, ids)
    asyncio_run = __import__('asyncio').run
    asyncio_run(manager.save(resumed, version=2))
    loaded, version = asyncio_run(manager.load_latest(process.initialize()))
    self.assertEqual(version, 2)
    for ids in cohorts[2:]:
      loaded = run(loaded, ids)
    np.testing.assert_array_equal(_flat(process.get_model_weights(loaded)),
                                  _flat(process.get_model_weights(state)))

  def test_refuses_a_history_above_the_bound(self):
    with self.assertRaisesRegex(ValueError, r'MiB of history.*max_state_bytes'):
      algorithms.build_fedcda_process(
          test_utils.tiny_model_fn, _OPTIMIZER, num_clients=10**8,
          max_clients=4)

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, 'memory_size'):
      algorithms.build_fedcda_process(
          test_utils.tiny_model_fn, _OPTIMIZER, num_clients=4, max_clients=4,
          memory_size=0)
    with self.assertRaisesRegex(ValueError, 'combinations'):
      algorithms.build_fedcda_process(
          test_utils.tiny_model_fn, _OPTIMIZER, num_clients=40,
          max_clients=40, num_batches=1, memory_size=3)
    with self.assertRaisesRegex(ValueError, 'integers in'):
      identified.with_client_ids([tf.data.Dataset.range(1)], [-1])


if __name__ == '__main__':
  absltest.main()
