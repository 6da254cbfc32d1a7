"""The stateful client work against NumPy SGD with momentum and TFF's FedAvg.

Each client's momentum must resume where it stopped the last round the
client took part in, unsampled clients keep their rows, momentum 0 is TFF's
FedAvg exactly, a checkpointed state continues as an uninterrupted run, and
a table above `max_state_bytes` is refused at build time.
"""

import asyncio

from absl.testing import absltest
import numpy as np
import tensorflow_federated as tff

import tff_aggregators
from tff_aggregators import runtime
from tff_aggregators.client_works import identified
from tff_aggregators.client_works import stateful
from tests import numpy_references
from tests import test_utils

_POPULATION = 5  # Client 4 is never sampled.
_COHORTS = ([0, 1, 2], [1, 3], [0, 3], [2, 1])
_LR, _MOMENTUM = 0.1, 0.9


def setUpModule():
  runtime.use_local_worker()


@tff.tensorflow.computation
def _initial_weights():
  return tff.learning.models.ModelWeights.from_model(test_utils.tiny_model_fn())


def _compose(client_work, aggregator=None, finalizer=None):
  """Broadcast, `client_work`, a weighted mean and server SGD at rate 1."""
  weights_type = _initial_weights.type_signature.result
  if aggregator is None:
    aggregator = tff.aggregators.MeanFactory().create(
      weights_type.trainable, tff.TensorType(np.float32)
    )
  if finalizer is None:
    finalizer = tff.learning.templates.build_apply_optimizer_finalizer(
      tff.learning.optimizers.build_sgdm(1.0), weights_type
    )
  return tff.learning.templates.compose_learning_process(
    _initial_weights,
    tff.learning.templates.build_broadcast_process(weights_type),
    client_work,
    aggregator,
    finalizer,
  )


def _stateful_process(momentum=_MOMENTUM, **kwargs):
  work = stateful.build_stateful_client_work(
    test_utils.tiny_model_fn,
    tff.learning.optimizers.build_sgdm(_LR, momentum=momentum),
    num_clients=_POPULATION,
    max_clients=3,
  )
  return _compose(work, **kwargs)


def _identified(datasets, ids):
  return tff_aggregators.with_client_ids([datasets[i] for i in ids], ids)


def _reference_client(weights, accumulator, batches, lr, momentum):
  """TFF's SGDM from `accumulator`: (delta, the final accumulator)."""
  return numpy_references.linear_softmax_client_delta(
    weights, batches, lr=lr, momentum=momentum, buffers=accumulator
  )


def _reference_round(weights, table, data, ids, lr, momentum):
  """One round: weighted mean of the deltas, server SGD at rate 1."""
  deltas, sizes = [], []
  for i in ids:
    delta, table[i] = _reference_client(
      weights, table[i], data[i], lr, momentum
    )
    deltas.append(delta)
    sizes.append(sum(len(y) for _, y in data[i]))
  mean = [
    sum(s * d[j] for s, d in zip(sizes, deltas)) / sum(sizes) for j in range(2)
  ]
  return [w - m for w, m in zip(weights, mean)]


def _trainable(process, state):
  return [
    np.asarray(v, np.float64)
    for v in process.get_model_weights(state).trainable
  ]


def _table(state):
  work = state.client_work
  return (
    [np.array(t) for t in work[stateful.CLIENT_STATES]],
    np.array(work[stateful.HAS_STATE]),
  )


class StatefulClientWorkTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.datasets = test_utils.multi_step_client_datasets(_POPULATION)
    cls.data = test_utils.dataset_arrays(cls.datasets)
    cls.process = _stateful_process()

  def test_momentum_resumes_per_client_as_numpy_sgdm(self):
    process, state = self.process, self.process.initialize()
    weights = _trainable(process, state)
    zeros = [np.zeros_like(w) for w in weights]
    table = {i: zeros for i in range(_POPULATION)}
    lr = _LR
    for r, ids in enumerate(_COHORTS):
      if r == 2:  # A client schedule: seen clients resume at the new rate.
        lr = 0.05
        hparams = process.get_hparams(state)
        hparams['client_work']['learning_rate'] = lr
        state = process.set_hparams(state, hparams)
      before, _ = _table(state)
      output = process.next(state, _identified(self.datasets, ids))
      state = output.state
      weights = _reference_round(weights, table, self.data, ids, lr, _MOMENTUM)
      leaves, has_state = _table(state)
      for got, want in zip(_trainable(process, state), weights):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
      for i in range(_POPULATION):
        for leaf, old, want in zip(leaves, before, table[i]):
          if i in ids:
            np.testing.assert_allclose(leaf[i], want, rtol=1e-5, atol=1e-6)
          else:
            np.testing.assert_array_equal(leaf[i], old[i])
      self.assertEqual(
        output.metrics['client_work']['client_states']['rows_written'], len(ids)
      )
    np.testing.assert_array_equal(has_state, [True] * 4 + [False])

  def test_momentum_zero_is_tff_fedavg_and_momentum_persists(self):
    for momentum in (0.0, _MOMENTUM):
      fedavg = tff.learning.algorithms.build_weighted_fed_avg(
        test_utils.tiny_model_fn,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(
          _LR, momentum=momentum
        ),
        server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
      )
      process = (
        _stateful_process(momentum=0.0) if momentum == 0.0 else self.process
      )
      state = process.initialize()
      reset = fedavg.set_model_weights(
        fedavg.initialize(), process.get_model_weights(state)
      )
      differences = []
      for ids in _COHORTS[:3]:
        state = process.next(state, _identified(self.datasets, ids)).state
        reset = fedavg.next(reset, [self.datasets[i] for i in ids]).state
        got, want = _trainable(process, state), _trainable(fedavg, reset)
        differences.append(
          max(np.max(np.abs(g - w)) for g, w in zip(got, want))
        )
      with self.subTest(momentum=momentum):
        self.assertLess(differences[0], 1e-6)  # Round 1: every client new.
        if momentum == 0.0:
          self.assertLess(max(differences), 1e-6)
        else:  # Clients 1 (round 2) and 0 (round 3) resume their momentum.
          self.assertGreater(min(differences[1:]), 1e-3)

  def test_fedprox_clients_with_persistent_state(self):
    # mu (w - w_global) added to every local gradient, as FedProx's client
    # work; at momentum 0 nothing persists, so it is TFF-style FedProx.
    mu = 0.5
    results = {}
    for momentum in (0.0, _MOMENTUM):
      optimizer = tff.learning.optimizers.build_sgdm(_LR, momentum=momentum)
      process = _compose(
        stateful.build_stateful_client_work(
          test_utils.tiny_model_fn,
          optimizer,
          num_clients=_POPULATION,
          max_clients=3,
          proximal_strength=mu,
        )
      )
      fedprox = tff_aggregators.build_weighted_fed_prox(
        test_utils.tiny_model_fn,
        mu,
        optimizer,
        tff.learning.optimizers.build_sgdm(1.0),
      )
      state = process.initialize()
      reset = fedprox.set_model_weights(
        fedprox.initialize(), process.get_model_weights(state)
      )
      differences = []
      for ids in _COHORTS[:3]:
        state = process.next(state, _identified(self.datasets, ids)).state
        reset = fedprox.next(reset, [self.datasets[i] for i in ids]).state
        got, want = _trainable(process, state), _trainable(fedprox, reset)
        differences.append(
          max(np.max(np.abs(g - w)) for g, w in zip(got, want))
        )
      results[momentum] = differences, got
    self.assertLess(max(results[0.0][0]), 1e-6)
    self.assertLess(results[_MOMENTUM][0][0], 1e-6)  # Round 1: all new.
    self.assertGreater(min(results[_MOMENTUM][0][1:]), 1e-3)
    # The proximal term acts: plain persistent SGD ends elsewhere.
    plain = _stateful_process(momentum=0.0)
    state = plain.initialize()
    for ids in _COHORTS[:3]:
      state = plain.next(state, _identified(self.datasets, ids)).state
    self.assertGreater(
      max(
        np.max(np.abs(a - b))
        for a, b in zip(_trainable(plain, state), results[0.0][1])
      ),
      1e-4,
    )

  def test_refuses_a_negative_proximal_strength(self):
    with self.assertRaisesRegex(ValueError, 'proximal_strength must be'):
      stateful.build_stateful_client_work(
        test_utils.tiny_model_fn,
        tff.learning.optimizers.build_sgdm(_LR),
        num_clients=_POPULATION,
        max_clients=3,
        proximal_strength=-0.1,
      )

  def test_checkpoint_round_trip_continues_identically(self):
    process = self.process
    run = lambda state, ids: (
      process.next(state, _identified(self.datasets, ids)).state
    )
    initial = process.initialize()
    state = initial
    for ids in _COHORTS:
      state = run(state, ids)
    resumed = initial
    for ids in _COHORTS[:2]:
      resumed = run(resumed, ids)
    manager = tff.program.FileProgramStateManager(
      self.create_tempdir().full_path
    )
    asyncio.run(manager.save(resumed, version=2))
    loaded, version = asyncio.run(manager.load_latest(process.initialize()))
    self.assertEqual(version, 2)
    for ids in _COHORTS[2:]:
      loaded = run(loaded, ids)
    for got, want in zip(
      _trainable(process, loaded), _trainable(process, state)
    ):
      np.testing.assert_array_equal(got, want)
    for got, want in zip(_table(loaded)[0], _table(state)[0]):
      np.testing.assert_array_equal(got, want)

  def test_refuses_a_table_above_max_state_bytes(self):
    optimizer = tff.learning.optimizers.build_sgdm(_LR, momentum=_MOMENTUM)
    with self.assertRaisesRegex(
      ValueError,
      r'10,000,000 clients x 1 optimizer slots x 8 parameters x 4 bytes, '
      r'plus 1 byte a client = 330,000,000 bytes, above '
      r'max_state_bytes=67,108,864.*'
      'client_store=tff_aggregators.InMemoryClientStore.. or '
      r'MemmapClientStore\(directory\)',
    ):
      stateful.build_stateful_client_work(
        test_utils.tiny_model_fn, optimizer, num_clients=10**7, max_clients=3
      )
    with self.assertRaisesRegex(ValueError, r'5 clients x 1 optimizer slots'):
      stateful.build_stateful_client_work(
        test_utils.tiny_model_fn,
        optimizer,
        num_clients=5,
        max_clients=3,
        max_state_bytes=100,
      )

  def test_refuses_counts_that_are_not_positive_ints(self):
    optimizer = tff.learning.optimizers.build_sgdm(_LR, momentum=_MOMENTUM)
    for num_clients, max_clients in ((True, 1), (5, 2.0), (5, 0)):
      with self.assertRaisesRegex(ValueError, 'must be a positive int'):
        stateful.build_stateful_client_work(
          test_utils.tiny_model_fn,
          optimizer,
          num_clients=num_clients,
          max_clients=max_clients,
        )

  def test_a_round_refuses_an_id_outside_the_population(self):
    for client_id, message in (
      (_POPULATION, r'outside the population \[0, num_clients=5\) given to'),
      (-2, 'A client id is negative: clients are indexed by non-negative'),
    ):
      data = [identified.attach_client_id(self.datasets[0], client_id)]
      with self.subTest(client_id), self.assertRaisesRegex(Exception, message):
        self.process.next(self.process.initialize(), data)

  def test_a_round_refuses_a_dataset_with_two_ids(self):
    # Unchecked, client 0's state would be read and client 1's row written.
    two_ids = identified.attach_client_id(self.datasets[0], 0).concatenate(
      identified.attach_client_id(self.datasets[1], 1)
    )
    with self.assertRaisesRegex(Exception, 'more than one client id'):
      self.process.next(self.process.initialize(), [two_ids])

  def test_wrapped_processes_refuse_bad_cohorts_in_python(self):
    # Unwrapped, TFF fails later: a serialization TypeError without ids, a
    # worker assertion for the other two.
    # FedSA and FedCDA: builders whose own cohort check the stateful one
    # replaces (they refuse a client work built for another max_clients).
    def work(**kwargs):
      return stateful.build_stateful_client_work(
        test_utils.tiny_model_fn,
        tff.learning.optimizers.build_sgdm(_LR, momentum=_MOMENTUM),
        num_clients=_POPULATION,
        max_clients=3,
        **kwargs,
      )

    sgd = tff.learning.optimizers.build_sgdm(_LR)
    model_fn = test_utils.tiny_model_fn
    fedavg_work = work()
    fedlws = tff_aggregators.build_fedlws_process(
      model_fn, sgd, client_work=fedavg_work
    )
    processes = (
      tff_aggregators.with_client_store(_compose(fedavg_work), fedavg_work),
      fedlws,
      tff_aggregators.with_client_store(fedlws, fedavg_work),  # Twice.
      tff_aggregators.build_fedsa_process(
        model_fn, sgd, max_clients=3, client_work=work()
      ),
      tff_aggregators.build_fedcda_process(
        model_fn,
        sgd,
        num_clients=_POPULATION,
        max_clients=3,
        client_work=work(with_loss_and_id=True, local_epochs=1),
      ),
    )
    cases = (
      (self.datasets[:2], "needs each client's id in its data"),
      (
        _identified(self.datasets, [0, 1, 2, 3]),
        'more than max_clients=3 given to build_stateful_client_work',
      ),
      (
        tff_aggregators.with_client_ids(self.datasets[:1], [_POPULATION]),
        r'outside the population \[0, num_clients=5\) given to build_stateful',
      ),
    )
    for process in processes:
      self.assertIsInstance(process, tff.learning.templates.LearningProcess)
      state = process.initialize()
      for data, message in cases:
        with self.assertRaisesRegex(ValueError, message):
          process.next(state, data)
      with self.assertRaisesRegex(TypeError, 'is a list of tf.data.Datasets'):
        process.next(state, self.datasets[0])

  def test_refuses_more_clients_a_round_than_the_population(self):
    with self.assertRaisesRegex(ValueError, 'max_clients=6 is more than'):
      stateful.build_stateful_client_work(
        test_utils.tiny_model_fn,
        tff.learning.optimizers.build_sgdm(_LR, momentum=_MOMENTUM),
        num_clients=_POPULATION,
        max_clients=_POPULATION + 1,
      )

  def test_adam_keeps_its_moments_and_step_count_iterator_loop(self):
    work = stateful.build_stateful_client_work(
      test_utils.tiny_model_fn,
      tff.learning.optimizers.build_adam(0.01),
      num_clients=_POPULATION,
      max_clients=3,
      loop_implementation=tff.learning.LoopImplementation.DATASET_ITERATOR,
    )
    process = _compose(work)
    state = process.initialize()
    for ids in ([0, 2], [2]):
      state = process.next(state, _identified(self.datasets, ids)).state
    leaves, has_state = _table(state)
    self.assertEqual(
      [leaf.dtype for leaf in leaves], [np.float32] * 4 + [np.int32]
    )  # Moments, then step.
    np.testing.assert_array_equal(leaves[-1], [2, 0, 4, 0, 0])  # Local steps.
    np.testing.assert_array_equal(has_state, [True, False, True, False, False])

  def test_composes_with_fedlws_and_skips_non_finite_clients(self):
    groups = tff_aggregators.model_layer_groups(test_utils.tiny_model_fn)
    weights_type = _initial_weights.type_signature.result
    process = _stateful_process(
      aggregator=tff_aggregators.FedLwsStatsFactory(groups).create(
        weights_type.trainable, tff.TensorType(np.float32)
      ),
      finalizer=tff_aggregators.build_fedlws_finalizer(
        tff.learning.optimizers.build_sgdm(1.0),
        weights_type,
        groups=groups,
        beta=0.1,
      ),
    )
    datasets = list(self.datasets)
    state = process.initialize()
    state = process.next(state, _identified(datasets, [0, 1])).state
    datasets[1] = datasets[1].map(lambda x, y: (x * np.nan, y))
    before, _ = _table(state)
    output = process.next(state, _identified(datasets, [0, 1, 2]))
    leaves, has_state = _table(output.state)
    metrics = output.metrics['client_work']['client_states']
    self.assertEqual(metrics['rows_written'], 2)  # Client 1's is non-finite.
    self.assertEqual(metrics['clients_with_state'], 3)
    np.testing.assert_array_equal(has_state, [True] * 3 + [False] * 2)
    for leaf, old in zip(leaves, before):
      np.testing.assert_array_equal(leaf[1], old[1])
      self.assertFalse(np.array_equal(leaf[0], old[0]))
    self.assertTrue(
      np.all(
        np.isfinite(
          np.concatenate(
            [np.ravel(w) for w in _trainable(process, output.state)]
          )
        )
      )
    )
    self.assertIn('gamma', output.metrics['finalizer'])


if __name__ == '__main__':
  absltest.main()
