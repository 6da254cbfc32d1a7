"""FedCDA's client ids: refused mistakes, the same in-state and in a store."""

import collections
import types

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

import tff_aggregators
from tff_aggregators import runtime
from tff_aggregators.client_works import identified
from tests import test_utils

_OPTIMIZER = tff.learning.optimizers.build_sgdm(learning_rate=0.5)
_POPULATION = 6
_STORES = (
  ('in_state', lambda: None),
  ('in_memory', tff_aggregators.InMemoryHistoryStore),
)


def _batch_normalization_model_fn() -> tff.learning.models.VariableModel:
  return test_utils.tiny_model_fn(tf.keras.layers.BatchNormalization())


def setUpModule():
  runtime.use_local_worker()


def _process(store_fn, **kwargs):
  return tff_aggregators.build_fedcda_process(
    test_utils.tiny_model_fn,
    _OPTIMIZER,
    num_clients=_POPULATION,
    max_clients=3,
    warmup_rounds=1,
    history_store=store_fn(),
    **kwargs,
  )


def _untagged(dataset):
  """`dataset` as a new object: its id is in its elements only."""
  return dataset.map(lambda element: element)


def _seen(state):
  return int(
    np.asarray(
      state['num_seen'] if 'num_seen' in state else state.finalizer['num_seen']
    )
  )


def _work_and_weights():
  """The tiny model's identified client work and its initial weights."""
  work = identified.build_identified_client_work(
    test_utils.tiny_model_fn, _OPTIMIZER
  )
  weights = tf.nest.map_structure(
    lambda v: v.numpy(),
    tff.learning.models.ModelWeights.from_model(test_utils.tiny_model_fn()),
  )
  return work, weights


class FedCdaClientIdsTest(parameterized.TestCase):
  def setUp(self):
    super().setUp()
    self.datasets = test_utils.tiny_client_datasets(_POPULATION)

  def test_cohort_mistakes_are_refused_by_with_client_ids(self):
    two = self.datasets[:2]
    for ids, message in (
      ([0, 0], 'appears more than once'),
      (
        [0, 6],
        r'outside the population \[0, num_clients=6\) given to '
        'with_client_ids: pass ids in that range, or give with_client_ids a '
        'larger num_clients',
      ),
      ([0, -1], 'Client id -1 is negative: clients are indexed by non-neg'),
      (
        [0, 2.0],
        r'Client id 2.0 is not an integer: pass int client ids in the '
        r'population \[0, num_clients=6\) given to with_client_ids',
      ),
      ([0, True], 'Client id True is not an integer'),
      (['a', 'b'], 'is a string.*IdentifiedDataSource'),
    ):
      with self.subTest(ids=ids):
        with self.assertRaisesRegex(ValueError, message):
          tff_aggregators.with_client_ids(two, ids, num_clients=_POPULATION)

  @parameterized.named_parameters(*_STORES)
  def test_round_refuses_datasets_without_ids(self, store_fn):
    process = _process(store_fn)
    with self.assertRaisesRegex(
      ValueError, 'needs each client.s id.*with_client_ids'
    ):
      process.next(process.initialize(), self.datasets[:2])

  def test_only_attached_ids_count_as_ids(self):
    spec = tf.TensorSpec([None, 3])
    self.assertFalse(identified.carries_client_ids((spec, spec)))
    # Mapping elements, as TFF's EMNIST and Stack Overflow data have.
    self.assertFalse(
      identified.carries_client_ids(collections.OrderedDict(x=spec, y=spec))
    )
    tagged = tff_aggregators.with_client_ids(self.datasets[:1], [2])[0]
    self.assertTrue(identified.carries_client_ids(tagged.element_spec))

  def test_which_processes_expect_client_ids(self):
    @tff.federated_computation(
      tff.FederatedType(np.int32, tff.SERVER),
      tff.FederatedType(tff.SequenceType(np.float32), tff.CLIENTS),
    )
    def next_fn(state, data):
      del data
      return state

    tensors = types.SimpleNamespace(next=next_fn)  # Plain tensor elements.
    self.assertFalse(identified.expects_client_ids(tensors))
    fedavg = tff.learning.algorithms.build_weighted_fed_avg(
      test_utils.tiny_model_fn, _OPTIMIZER
    )
    self.assertFalse(identified.expects_client_ids(fedavg))
    self.assertTrue(identified.expects_client_ids(_process(lambda: None)))

  @parameterized.named_parameters(*_STORES)
  def test_round_refuses_a_cohort_above_max_clients(self, store_fn):
    process = _process(store_fn)
    data = tff_aggregators.with_client_ids(self.datasets[:4], [0, 1, 2, 3])
    with self.assertRaisesRegex(ValueError, 'more than max_clients=3'):
      process.next(process.initialize(), data)

  @parameterized.named_parameters(*_STORES)
  def test_hand_made_duplicate_fails_the_round(self, store_fn):
    # Datasets tagged one by one do not pass through with_client_ids: the
    # round's Python check reads their tags; a dataset mapped after tagging
    # has none, and the round itself must refuse it.
    process = _process(store_fn)
    state = process.initialize()
    for tag, message in (
      (lambda d: d, 'Client id 1 appears more than once in the cohort'),
      (
        _untagged,
        "^FedCDA: a client id appears twice in one round; sample each round's",
      ),
    ):
      data = [identified.attach_client_id(self.datasets[i], i) for i in (0, 1)]
      data.append(tag(identified.attach_client_id(self.datasets[2], 1)))
      with self.subTest(message), self.assertRaisesRegex(ValueError, message):
        process.next(state, data)

  @parameterized.named_parameters(*_STORES)
  def test_hand_made_id_outside_the_population_fails_the_round(self, store_fn):
    # Tagged: the Python check. Untagged: the round's assertion, whose line
    # the process raises as a ValueError (not a gRPC error holding it).
    process = _process(store_fn)
    for tag, client_id, message in (
      (
        lambda d: d,
        _POPULATION,
        r'Client id 6 is outside the population \[0, num_clients=6\) given '
        'to build_fedcda_process: give tff_aggregators.with_client_ids ids',
      ),
      (lambda d: d, -1, 'Client id -1 is negative: clients are indexed by'),
      (
        _untagged,
        _POPULATION,
        r'^A client id is outside the population \[0, num_clients=6\) given '
        r'to build_fedcda_process \(or build_fedcda_finalizer\): give',
      ),
      (
        _untagged,
        -2,
        '^A client id is negative: clients are indexed by non-',
      ),
      (_untagged, -1, '^A client id is negative'),  # Not an empty dataset.
    ):
      data = [
        identified.attach_client_id(self.datasets[0], 0),
        tag(identified.attach_client_id(self.datasets[1], client_id)),
      ]
      with (
        self.subTest(message),
        self.assertRaisesRegex(ValueError, message),
      ):
        process.next(process.initialize(), data)
    with self.assertRaisesRegex(ValueError, 'Client id 2.7 is not an integer'):
      identified.attach_client_id(self.datasets[0], 2.7)
    two_ids = identified.attach_client_id(self.datasets[0], 0).concatenate(
      identified.attach_client_id(self.datasets[1], 1)
    )
    with self.assertRaisesRegex(ValueError, '^A client id changes within'):
      process.next(process.initialize(), [two_ids])

  @parameterized.named_parameters(*_STORES)
  def test_valid_rounds_count_each_client_once(self, store_fn):
    process = _process(store_fn)
    state = process.initialize()
    for ids in ([0, 1, 2], [1, 2, 3]):
      state = process.next(
        state,
        tff_aggregators.with_client_ids([self.datasets[i] for i in ids], ids),
      ).state
    self.assertEqual(_seen(state), 4)

  @parameterized.named_parameters(*_STORES)
  def test_dropped_clients_are_counted(self, store_fn):
    process = _process(store_fn)
    x = np.full([3, 3], np.nan, np.float32)
    y = np.zeros([3], np.int64)
    diverging = tf.data.Dataset.from_tensor_slices((x, y)).batch(3)
    empty = self.datasets[2].take(0)
    output = process.next(
      process.initialize(),
      tff_aggregators.with_client_ids(
        [self.datasets[0], diverging, empty], [0, 1, 2]
      ),
    )
    self.assertEqual(int(output.metrics['finalizer']['num_dropped_clients']), 2)
    self.assertEqual(int(output.metrics['finalizer']['num_participants']), 1)

  def test_population_below_the_cohort_is_refused(self):
    with self.assertRaisesRegex(
      ValueError, 'num_clients .* at least max_clients'
    ):
      tff_aggregators.build_fedcda_process(
        test_utils.tiny_model_fn, _OPTIMIZER, num_clients=2, max_clients=3
      )

  @parameterized.named_parameters(
    ('two_epochs', 2, test_utils.tiny_model_fn),
    ('no_epochs', None, test_utils.tiny_model_fn),
    # Batch normalization trains on batch statistics (training=True), and
    # would use its moving averages otherwise.
    ('batch_normalization', 2, _batch_normalization_model_fn),
  )
  def test_clients_train_as_tff_fedavg_on_reshuffled_data(
    self, epochs, model_fn
  ):
    # FedCDA's warm-up is FedAvg: the same delta and weight as TFF's own
    # client work, also when the data reshuffles at every pass (a second
    # pass over it, e.g. to count its examples, would train on another
    # order).
    rng = np.random.default_rng(5)
    x = rng.normal(size=(24, 3)).astype(np.float32)
    y = rng.integers(0, 2, size=24).astype(np.int64)
    data = (
      tf.data.Dataset.from_tensor_slices((x, y))
      .shuffle(24, seed=9, reshuffle_each_iteration=True)
      .repeat(2)
      .batch(5)
    )
    weights = tf.nest.map_structure(
      lambda v: v.numpy(),
      tff.learning.models.ModelWeights.from_model(model_fn()),
    )
    ours = identified.build_identified_client_work(
      model_fn, _OPTIMIZER, local_epochs=epochs
    )
    tffs = tff.learning.templates.build_model_delta_client_work(
      model_fn,
      _OPTIMIZER,
      client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES,
    )
    got = ours.next(
      ours.initialize(), [weights], tff_aggregators.with_client_ids([data], [3])
    ).result[0]
    want = tffs.next(tffs.initialize(), [weights], [data]).result[0]
    for a, b in zip(got.update['delta'], want.update):
      np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    self.assertEqual(got.update_weight, want.update_weight)
    self.assertEqual(got.update['client_id'], 3.0)

  def test_refuses_a_dataset_with_two_ids(self):
    work, weights = _work_and_weights()
    two_ids = identified.attach_client_id(self.datasets[0], 2).concatenate(
      identified.attach_client_id(self.datasets[1], 3)
    )
    with self.assertRaisesRegex(Exception, 'more than one client id'):
      work.next(work.initialize(), [weights], [two_ids])

  def test_empty_client_reports_no_id_and_no_weight(self):
    work, weights = _work_and_weights()
    empty = self.datasets[0].take(0)
    output = work.next(
      work.initialize(),
      [weights],
      tff_aggregators.with_client_ids([empty], [4]),
    )
    self.assertEqual(output.result[0].update['client_id'], identified.NO_ID)
    self.assertEqual(output.result[0].update_weight, 0.0)


if __name__ == '__main__':
  absltest.main()
