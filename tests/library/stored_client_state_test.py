"""Persistent client states in a client store, against NumPy and the TFF table.

With `build_stateful_client_work(client_store=...)` the states live in an
in-memory or memory-mapped store and only the cohort's rows enter a round.
Each client's momentum must still resume where it stopped (NumPy SGDM),
unsampled clients keep their rows, the models equal those of the table in
the TFF state, a round interrupted after its store write resumes exactly,
an older checkpoint over a newer store file is refused, and the builders
return the driver process for it.
"""

import asyncio
import itertools
import os

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow_federated as tff

from tests import numpy_references
from tests import test_utils
import tff_aggregators
from tff_aggregators import runtime
from tff_aggregators.algorithms import stored_client_state
from tff_aggregators.client_works import identified
from tff_aggregators.client_works import stateful

_POPULATION = 5  # Client 4 is never sampled.
_COHORTS = ([0, 1, 2], [1, 3], [0, 3], [2, 1], [0, 2, 3])
_LR, _MOMENTUM = 0.1, 0.9


def setUpModule():
  runtime.use_local_worker()


def _work(store=None, num_clients=_POPULATION, **kwargs):
  return tff_aggregators.build_stateful_client_work(
    test_utils.tiny_model_fn,
    tff.learning.optimizers.build_sgdm(_LR, momentum=_MOMENTUM),
    num_clients=num_clients,
    max_clients=3,
    client_store=store,
    **kwargs,
  )


def _fedavg(work):
  """TFF's FedAvg composition around `work`, wrapped for its store."""
  initial = tff.tensorflow.computation(
    lambda: tff.learning.models.ModelWeights.from_model(
      test_utils.tiny_model_fn()
    )
  )
  weights_type = initial.type_signature.result
  process = tff.learning.templates.compose_learning_process(
    initial,
    tff.learning.templates.build_broadcast_process(weights_type),
    work,
    tff.aggregators.MeanFactory().create(
      weights_type.trainable, tff.TensorType(np.float32)
    ),
    tff.learning.templates.build_apply_optimizer_finalizer(
      tff.learning.optimizers.build_sgdm(1.0), weights_type
    ),
  )
  return tff_aggregators.with_client_store(process, work)


def _identified(datasets, ids):
  return tff_aggregators.with_client_ids([datasets[i] for i in ids], ids)


def _trainable(process, state):
  return [
    np.asarray(v, np.float64)
    for v in process.get_model_weights(state).trainable
  ]


def _store_rows(store_dir, state):
  """Each client's current row (its newest slot), from the state or file."""
  stamps = np.asarray(state['stamps'])
  if store_dir is None:
    rows = np.asarray(state['rows'])
  else:
    rows = np.memmap(
      os.path.join(store_dir, 'models.f32'), np.float32, 'r'
    ).reshape(stamps.shape + (-1,))
  return rows[np.arange(len(stamps)), stamps.argmax(axis=1)], stamps


class StoredClientStateTest(parameterized.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.datasets = test_utils.multi_step_client_datasets(_POPULATION)
    cls.data = test_utils.dataset_arrays(cls.datasets)

  def _store(self, kind):
    if kind == 'memory':
      return tff_aggregators.InMemoryClientStore(), None
    directory = self.create_tempdir().full_path
    return tff_aggregators.MemmapClientStore(directory), directory

  def _run(self, process, cohorts, state=None):
    state = process.initialize() if state is None else state
    outputs = []
    for ids in cohorts:
      output = process.next(state, _identified(self.datasets, ids))
      state = output.state
      outputs.append(output)
    return state, outputs

  @parameterized.parameters('memory', 'disk')
  def test_momentum_resumes_per_client_as_numpy_sgdm(self, kind):
    store, directory = self._store(kind)
    process = _fedavg(_work(store))
    self.assertIsInstance(
      process,
      stored_client_state.ClientStateStoreProcess,
    )
    state = process.initialize()
    weights = _trainable(process, state)
    buffers = {i: [np.zeros_like(w) for w in weights] for i in range(5)}
    seen = set()
    for ids in _COHORTS:
      before, _ = _store_rows(directory, state)
      output = process.next(state, _identified(self.datasets, ids))
      state = output.state
      deltas, sizes = [], []
      for i in ids:
        delta, buffers[i] = numpy_references.linear_softmax_client_delta(
          weights, self.data[i], lr=_LR, momentum=_MOMENTUM, buffers=buffers[i]
        )
        deltas.append(delta)
        sizes.append(sum(len(y) for _, y in self.data[i]))
      mean = numpy_references.weighted_mean(deltas, sizes)
      weights = [w - m for w, m in zip(weights, mean)]
      for got, want in zip(_trainable(process, state), weights):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
      rows, stamps = _store_rows(directory, state)
      seen.update(ids)
      for i in range(_POPULATION):
        if i in ids:
          want = np.concatenate([np.ravel(b) for b in buffers[i]])
          np.testing.assert_allclose(rows[i], want, rtol=1e-5, atol=1e-6)
        elif i in seen:
          np.testing.assert_array_equal(rows[i], before[i])
        else:
          self.assertTrue(np.all(stamps[i] < 0))
      counts = output.metrics['client_work']['client_states']
      self.assertEqual(counts['rows_written'], len(ids))
      self.assertEqual(counts['clients_with_state'], len(seen))
    # The TFF state holds the cohort's rows only.
    table = state['process'].client_work[stateful.CLIENT_STATES]
    self.assertEqual(np.shape(table[0])[0], 3)

  def test_equals_the_table_in_the_tff_state(self):
    in_state = _fedavg(_work())
    stored = _fedavg(_work(tff_aggregators.InMemoryClientStore()))
    state_a = in_state.initialize()
    state_b = stored.set_model_weights(
      stored.initialize(), in_state.get_model_weights(state_a)
    )
    state_a, _ = self._run(in_state, _COHORTS, state_a)
    state_b, _ = self._run(stored, _COHORTS, state_b)
    for got, want in zip(
      _trainable(stored, state_b), _trainable(in_state, state_a)
    ):
      np.testing.assert_array_equal(got, want)
    rows, _ = _store_rows(None, state_b)
    table = state_a.client_work[stateful.CLIENT_STATES]
    flat = np.concatenate(
      [np.reshape(t, [_POPULATION, -1]) for t in table], axis=1
    )
    has = np.asarray(state_a.client_work[stateful.HAS_STATE])
    np.testing.assert_array_equal(rows[has], flat[has])

  def test_memmap_resumes_after_an_interrupted_round(self):
    store, _ = self._store('disk')
    process = _fedavg(_work(store))
    initial = process.initialize()
    _, want = self._run(process, _COHORTS, initial)
    directory = self.create_tempdir().full_path
    process = _fedavg(_work(tff_aggregators.MemmapClientStore(directory)))
    initial = process.set_model_weights(
      process.initialize(), process.get_model_weights(initial)
    )
    state, _ = self._run(process, _COHORTS[:3], initial)
    manager = tff.program.FileProgramStateManager(
      self.create_tempdir().full_path
    )
    asyncio.run(manager.save(state, version=3))
    # Round 4 writes the store (over slots of earlier rounds), then "dies";
    # the resumed round 4 samples other clients (unseeded sampling), whose
    # rows the lost round had overwritten in their unread slots.
    self._run(process, [[0, 3, 4]], state)
    resumed = _fedavg(_work(tff_aggregators.MemmapClientStore(directory)))
    loaded, version = asyncio.run(manager.load_latest(resumed.initialize()))
    self.assertEqual(version, 3)
    _, got = self._run(resumed, _COHORTS[3:], loaded)
    for got_output, want_output in zip(got, want[3:]):
      for a, b in zip(
        _trainable(resumed, got_output.state),
        _trainable(process, want_output.state),
      ):
        np.testing.assert_array_equal(a, b)

  def test_memmap_refuses_an_older_checkpoint(self):
    directory = self.create_tempdir().full_path
    process = _fedavg(_work(tff_aggregators.MemmapClientStore(directory)))
    first, _ = self._run(process, _COHORTS[:1])
    self._run(process, _COHORTS[1:4], first)  # The file moves on.
    with self.assertRaisesRegex(ValueError, 'has moved past the process'):
      self._run(process, _COHORTS[1:2], first)
    # Also when the round samples only clients the file has not moved for
    # (client 4 was never sampled): every round checks every client.
    with self.assertRaisesRegex(ValueError, 'has moved past the process'):
      self._run(process, [[4]], first)
    # Another (here empty) directory under a state that has rows: refused
    # at the first round, whichever clients it samples.
    process = _fedavg(
      _work(tff_aggregators.MemmapClientStore(self.create_tempdir().full_path))
    )
    state, _ = self._run(process, _COHORTS[:2])
    empty = _fedavg(
      _work(tff_aggregators.MemmapClientStore(self.create_tempdir().full_path))
    )
    with self.assertRaisesRegex(ValueError, "does not hold this run's rows"):
      self._run(empty, [[4]], state)

  def test_a_second_round_from_the_same_state_leaves_the_first(self):
    # In memory the rows are written in place; a second round from the same
    # state must not change what the first round's state reads.
    process = _fedavg(_work(tff_aggregators.InMemoryClientStore()))
    s0, _ = self._run(process, _COHORTS[:2])
    s1, _ = self._run(process, [[1, 3]], s0)
    rows_s1 = np.array(_store_rows(None, s1)[0])
    # A second round from s0, at another learning rate (so other rows).
    hparams = process.get_hparams(s0)
    hparams['client_work']['learning_rate'] = 0.05
    self._run(process, [[1, 3, 0]], process.set_hparams(s0, hparams))
    np.testing.assert_array_equal(_store_rows(None, s1)[0], rows_s1)

  def test_in_memory_state_round_trips_through_a_checkpoint(self):
    process = _fedavg(_work(tff_aggregators.InMemoryClientStore()))
    straight, _ = self._run(process, _COHORTS)
    state, _ = self._run(process, _COHORTS[:2])
    manager = tff.program.FileProgramStateManager(
      self.create_tempdir().full_path
    )
    asyncio.run(manager.save(state, version=2))
    loaded, _ = asyncio.run(manager.load_latest(process.initialize()))
    resumed, _ = self._run(process, _COHORTS[2:], loaded)
    for got, want in zip(
      _trainable(process, resumed), _trainable(process, straight)
    ):
      np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(resumed['rows'], straight['rows'])
    np.testing.assert_array_equal(resumed['stamps'], straight['stamps'])

  def test_thousands_of_clients_carry_only_the_cohort(self):
    directory = self.create_tempdir().full_path
    population = 100_000
    work = _work(
      tff_aggregators.MemmapClientStore(directory),
      num_clients=population,
      max_state_bytes=1024,  # The cohort table (3 rows of 8 values) fits.
    )
    process = _fedavg(work)
    ids = [7, 54_321, 99_999]
    data = tff_aggregators.with_client_ids(self.datasets[:3], ids)
    output = process.next(process.initialize(), data)
    rows, stamps = _store_rows(directory, output.state)
    self.assertEqual(int(np.sum(stamps.max(axis=1) >= 0)), 3)
    self.assertTrue(np.all(np.any(rows[ids] != 0, axis=1)))
    self.assertEqual(
      output.metrics['client_work']['client_states']['clients_with_state'], 3
    )
    # Sparse on disk: far less than the 100,000 x 2 x 8 x 4 bytes mapped.
    blocks = os.stat(os.path.join(directory, 'models.f32')).st_blocks * 512
    self.assertLess(blocks, 100_000 * 2 * 8 * 4 / 4)

  @parameterized.parameters('fedglad', 'fedlaw', 'fedlws', 'fedsa')
  def test_builders_return_the_driver_process(self, name):
    if name in ('fedglad', 'fedlws'):  # The same driver process.
      test_utils.skip_unless_full_suite(self, 'fedlaw and fedsa cover it')
    rng = np.random.default_rng(0)
    proxy = (
      rng.normal(size=(12, 3)).astype(np.float32),
      rng.integers(0, 2, size=12).astype(np.int64),
    )
    optimizer = tff.learning.optimizers.build_sgdm(_LR)
    work = _work(tff_aggregators.InMemoryClientStore())
    extra = dict(
      fedlaw=dict(proxy_data=proxy, max_clients=3, server_epochs=2),
      fedsa=dict(max_clients=3),
    ).get(name, {})
    builder = getattr(tff_aggregators, f'build_{name}_process')
    process = builder(
      test_utils.tiny_model_fn, optimizer, client_work=work, **extra
    )
    self.assertTrue(identified.expects_client_ids(process))
    state, outputs = self._run(process, _COHORTS[:2])
    flat = np.concatenate([np.ravel(w) for w in _trainable(process, state)])
    self.assertTrue(np.all(np.isfinite(flat)))
    counts = outputs[-1].metrics['client_work']['client_states']
    self.assertEqual(counts['clients_with_state'], 4)
    # The store's check refuses a cohort above the work's max_clients.
    with self.assertRaisesRegex(ValueError, 'more than max_clients=3'):
      process.next(state, _identified(self.datasets, [0, 1, 2, 3]))

  @parameterized.named_parameters(
    ('everything_in_tff_state', None, None, (0.0, 0.9)),
    ('history_and_states_in_memory', 'memory', 'memory', (0.0,)),
    ('history_in_state_states_on_disk', None, 'disk', (0.0,)),
  )
  def test_fedcda_with_persistent_states(self, history, states, momenta):
    if states == 'disk':
      test_utils.skip_unless_full_suite(self, 'the disk store is covered')
    # Persistent against reset: with momentum 0 the same models (so the same
    # losses and selections); with momentum 0.9 the same first round, then
    # apart once a client trains again with its kept momentum.
    cohorts = [[0, 1, 2], [1, 3, 4], [0, 2, 3], [1, 2, 4]]
    models = {}
    for momentum, persistent in itertools.product(momenta, (False, True)):
      optimizer = tff.learning.optimizers.build_sgdm(_LR, momentum=momentum)
      work = None
      if persistent:
        store = states and self._store(states)[0]
        work = tff_aggregators.build_stateful_client_work(
          test_utils.tiny_model_fn,
          optimizer,
          num_clients=_POPULATION,
          max_clients=3,
          client_store=store,
          with_loss_and_id=True,
        )
      history_store = history and self._store(history)[0]
      process = tff_aggregators.build_fedcda_process(
        test_utils.tiny_model_fn,
        optimizer,
        num_clients=_POPULATION,
        max_clients=3,
        warmup_rounds=1,
        memory_size=2,
        history_store=history_store,
        client_work=work,
      )
      state = process.initialize()
      if models:
        state = process.set_model_weights(state, self.initial)
      else:
        self.initial = process.get_model_weights(state)
      rounds = []
      for ids in cohorts:
        output = process.next(state, _identified(self.datasets, ids))
        state = output.state
        rounds.append(
          np.concatenate([np.ravel(w) for w in _trainable(process, state)])
        )
      models[(momentum, persistent)] = np.stack(rounds)
    np.testing.assert_array_equal(models[(0.0, True)], models[(0.0, False)])
    if 0.9 in momenta:
      np.testing.assert_array_equal(
        models[(0.9, True)][0], models[(0.9, False)][0]
      )
      self.assertFalse(
        np.allclose(models[(0.9, True)][1], models[(0.9, False)][1])
      )

  def test_fedcda_refuses_a_client_work_without_loss_and_id(self):
    with self.assertRaisesRegex(ValueError, 'with_loss_and_id=True'):
      tff_aggregators.build_fedcda_process(
        test_utils.tiny_model_fn,
        tff.learning.optimizers.build_sgdm(_LR),
        num_clients=_POPULATION,
        max_clients=3,
        client_work=_work(),
      )

  def test_builders_refuse_other_counts_than_the_client_work(self):
    # The works are built for 5 clients and 3 a round.
    sgd = tff.learning.optimizers.build_sgdm(_LR)
    cda = dict(with_loss_and_id=True)
    for work, counts, message in (
      (
        _work(**cda),
        dict(num_clients=6, max_clients=3),
        r'^build_fedcda_process: num_clients=6 differs from the client '
        r"work's \(5, given to build_stateful_client_work\)",
      ),
      (
        _work(tff_aggregators.InMemoryClientStore(), **cda),
        dict(num_clients=_POPULATION, max_clients=2),
        r"max_clients=2 differs from the client work's \(3,",
      ),
    ):
      with self.assertRaisesRegex(ValueError, message):
        tff_aggregators.build_fedcda_process(
          test_utils.tiny_model_fn, sgd, client_work=work, **counts
        )
    work = _work()
    proxy = (np.zeros((4, 3), np.float32), np.zeros(4, np.int64))
    for builder, extra in (
      (tff_aggregators.build_fedlaw_process, dict(proxy_data=proxy)),
      (tff_aggregators.build_fedsa_process, {}),
    ):
      with self.assertRaisesRegex(ValueError, 'max_clients=4 differs'):
        builder(
          test_utils.tiny_model_fn,
          sgd,
          max_clients=4,
          client_work=work,
          **extra,
        )

  def test_refusals(self):
    process = _fedavg(_work(tff_aggregators.InMemoryClientStore()))
    with self.assertRaisesRegex(
      ValueError,
      r'outside the population \[0, num_clients=5\) given to .*: give '
      'tff_aggregators.with_client_ids ids in that range, or build with a '
      'larger num_clients',
    ):
      process.next(
        process.initialize(),
        tff_aggregators.with_client_ids(self.datasets[:1], [5]),
      )
    with self.assertRaisesRegex(ValueError, 'with_client_ids'):
      process.next(process.initialize(), self.datasets[:1])
    # -1 is what an empty dataset reports; data must not carry it.
    with self.assertRaisesRegex(ValueError, '^A client id is negative'):
      process.next(
        process.initialize(),
        [identified.attach_client_id(self.datasets[0], -1)],
      )
    # An id in the data only (no tag): the round's assertion, as one line.
    in_state = _fedavg(_work())
    with self.assertRaisesRegex(
      ValueError,
      r'^A client id is outside the population \[0, num_clients=5\) given to '
      'build_stateful_client_work: give',
    ):
      in_state.next(
        in_state.initialize(),
        [identified.attach_client_id(self.datasets[0], 5).map(lambda e: e)],
      )
    tagged_one_by_one = [
      identified.attach_client_id(self.datasets[0], 1),
      identified.attach_client_id(self.datasets[1], 1),
    ]
    with self.assertRaisesRegex(ValueError, 'more than once in the cohort'):
      process.next(process.initialize(), tagged_one_by_one)
    store = tff_aggregators.InMemoryClientStore()
    with self.assertRaisesRegex(ValueError, 'pass two store objects'):
      tff_aggregators.build_fedcda_process(
        test_utils.tiny_model_fn,
        tff.learning.optimizers.build_sgdm(_LR),
        num_clients=_POPULATION,
        max_clients=3,
        history_store=store,
        client_work=_work(store, with_loss_and_id=True),
      )
    with self.assertRaisesRegex(TypeError, 'client_store must be a'):
      _work('memory')
    other = _fedavg(_work())  # Composed with a work without a store.
    with self.assertRaisesRegex(ValueError, 'not composed with this'):
      tff_aggregators.with_client_store(
        other, _work(tff_aggregators.InMemoryClientStore())
      )
    with self.assertRaisesRegex(ValueError, 'InMemoryClientStore'):
      _work(max_state_bytes=10)
    with self.assertRaisesRegex(TypeError, 'wraps a tff.learning.templates'):
      tff_aggregators.with_client_store(process, _work(process._store))
    # Composed without the wrapper: the clients find no row and fail.
    work = _work(tff_aggregators.InMemoryClientStore())
    unwrapped = _fedavg(work)._process
    with self.assertRaisesRegex(
      Exception, 'wrap the process with tff_aggregators.with_client_store'
    ):
      unwrapped.next(unwrapped.initialize(), _identified(self.datasets, [0]))


if __name__ == '__main__':
  absltest.main()
