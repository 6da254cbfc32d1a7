"""Every method in `tff.learning.programs.train_model`, as a user runs it.

Written the way a TFF user's script is: TFF's own client data
(`tff.simulation.datasets.emnist.get_synthetic()`, string client ids), a Keras
model through `tff.learning.models.from_keras_model`, each builder's
documented call, `tff.program.FileProgramStateManager` checkpoints, a restart
that resumes (it must end where an uninterrupted run ends), and
`tff.learning.algorithms.build_fed_eval` on the trained model.
"""

import asyncio
import gc
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tests import test_utils
import tff_aggregators
from tff_aggregators import runtime

_CLIENTS_PER_ROUND = 2


def setUpModule():
  runtime.use_local_worker()


def _model_fn():
  keras_model = tf.keras.Sequential(
    [
      tf.keras.layers.InputLayer(input_shape=(28, 28)),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(10),
    ]
  )
  return tff.learning.models.from_keras_model(
    keras_model,
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    input_spec=(
      tf.TensorSpec([None, 28, 28], tf.float32),
      tf.TensorSpec([None], tf.int32),
    ),
    metrics=[tf.keras.metrics.SparseCategoricalAccuracy()],
  )


def _preprocess(dataset):
  return dataset.map(lambda e: (e['pixels'], e['label'])).batch(5)


def _client_data():
  return tff.simulation.datasets.emnist.get_synthetic()


def _proxy():
  examples = list(
    _client_data()
    .create_tf_dataset_for_client('synthetic1')
    .as_numpy_iterator()
  )
  return (
    np.stack([e['pixels'] for e in examples]),
    np.array([e['label'] for e in examples], np.int64),
  )


_SGD = tff.learning.optimizers.build_sgdm(learning_rate=0.05)


def _build(method):
  """The documented builder call of each method; FedCDA's data source."""
  num_clients = len(_client_data().client_ids)
  builders = {
    'fedglad': lambda: tff_aggregators.build_fedglad_process(_model_fn, _SGD),
    'fedglad_adam': lambda: tff_aggregators.build_fedglad_process(
      _model_fn, _SGD, tff.learning.optimizers.build_adam(0.01)
    ),
    'fedlws': lambda: tff_aggregators.build_fedlws_process(_model_fn, _SGD),
    'fedlaw': lambda: tff_aggregators.build_fedlaw_process(
      _model_fn,
      _SGD,
      proxy_data=_proxy(),
      max_clients=_CLIENTS_PER_ROUND,
      server_epochs=2,
    ),
    'fedsa': lambda: tff_aggregators.build_fedsa_process(
      _model_fn, _SGD, max_clients=_CLIENTS_PER_ROUND
    ),
    'fedprox': lambda: tff_aggregators.build_weighted_fed_prox(
      _model_fn, 0.01, _SGD
    ),
    'fedcda': lambda: tff_aggregators.build_fedcda_process(
      _model_fn,
      _SGD,
      num_clients=num_clients,
      max_clients=_CLIENTS_PER_ROUND,
      warmup_rounds=1,
    ),
    'fedcda_in_memory': lambda: tff_aggregators.build_fedcda_process(
      _model_fn,
      _SGD,
      num_clients=num_clients,
      max_clients=_CLIENTS_PER_ROUND,
      warmup_rounds=1,
      history_store=tff_aggregators.InMemoryHistoryStore(),
    ),
    # Each client's momentum kept between its rounds, in a driver store.
    'fedlws_persistent_clients': lambda: tff_aggregators.build_fedlws_process(
      _model_fn,
      _SGD,
      client_work=tff_aggregators.build_stateful_client_work(
        _model_fn,
        tff.learning.optimizers.build_sgdm(0.05, momentum=0.9),
        num_clients=num_clients,
        max_clients=_CLIENTS_PER_ROUND,
        client_store=tff_aggregators.InMemoryClientStore(),
      ),
    ),
  }
  tf.keras.utils.set_random_seed(0)  # The same initial model every build.
  process = builders[method]()
  if method.startswith('fedcda') or method.endswith('persistent_clients'):
    source = tff_aggregators.IdentifiedDataSource(
      _client_data(), preprocess_fn=_preprocess, seed=1
    )
  else:
    source = tff_aggregators.ClientDataSource(
      _client_data(), preprocess_fn=_preprocess, seed=1
    )
  return process, source


def _train(method, root_dir, rounds):
  """Runs `train_model` to `rounds` as a fresh program would; final state."""
  process, source = _build(method)
  models = tff.program.MemoryReleaseManager()
  metrics = tff.program.MemoryReleaseManager()
  runtime.native_federated_context()
  try:
    asyncio.run(
      tff.learning.programs.train_model(
        train_process=process,
        train_data_source=source,
        train_per_round_clients=_CLIENTS_PER_ROUND,
        train_total_rounds=rounds,
        program_state_manager=tff.program.FileProgramStateManager(root_dir),
        model_output_manager=models,
        train_metrics_manager=metrics,
        evaluation_manager=None,
        evaluation_periodicity=1,
      )
    )
  finally:
    runtime.use_local_worker()  # The synchronous context again.
  state = models.values()[f'training_checkpoint_round_{rounds}']
  return process, state, metrics.values()


def _flat(weights):
  return np.concatenate([np.ravel(x) for x in weights.trainable])


class TrainModelTest(parameterized.TestCase):
  @parameterized.parameters(
    'fedglad',
    'fedglad_adam',
    'fedlws',
    'fedlaw',
    'fedsa',
    'fedprox',
    'fedcda',
    'fedcda_in_memory',
    'fedlws_persistent_clients',
  )
  def test_runs_resumes_and_evaluates(self, method):
    if method in ('fedglad', 'fedlws', 'fedsa', 'fedprox'):
      # The same composed-process path as fedglad_adam and fedlaw.
      test_utils.skip_unless_full_suite(
        self, 'fedglad_adam and fedlaw cover the composed path'
      )
    if method == 'fedcda':  # Its in-state resume: fedcda_test's.
      test_utils.skip_unless_full_suite(
        self, 'fedcda_in_memory covers the identified data source'
      )
    straight = tempfile.mkdtemp()
    process, state, metrics = _train(method, straight, rounds=2)
    self.assertEqual(sorted(metrics), [1, 2])
    want = _flat(process.get_model_weights(state))
    self.assertTrue(np.all(np.isfinite(want)))

    restarted = tempfile.mkdtemp()
    _train(method, restarted, rounds=1)
    process, state, metrics = _train(method, restarted, rounds=2)
    self.assertEqual(sorted(metrics), [2])  # Round 1 came from the state.
    np.testing.assert_allclose(
      _flat(process.get_model_weights(state)), want, rtol=1e-5, atol=1e-6
    )

    evaluation = tff.learning.algorithms.build_fed_eval(_model_fn)
    eval_state = evaluation.set_model_weights(
      evaluation.initialize(), process.get_model_weights(state)
    )
    output = evaluation.next(
      eval_state,
      [
        _preprocess(_client_data().create_tf_dataset_for_client(c))
        for c in _client_data().client_ids
      ],
    )
    accuracy = output.metrics['client_work']['eval']['current_round_metrics'][
      'sparse_categorical_accuracy'
    ]
    self.assertBetween(accuracy, 0.0, 1.0)

  def test_fedcda_resume_refuses_other_client_ids(self):
    root = tempfile.mkdtemp()
    _train('fedcda', root, rounds=1)
    process = _build('fedcda')[0]  # Its source, of the old ids, is dropped.
    gc.collect()  # As after a restart: no source of the old ids is left.
    renamed = tff.simulation.datasets.ClientData.from_clients_and_tf_fn(
      ['a', 'b'],
      lambda c: _client_data().create_tf_dataset_for_client('synthetic1'),
    )
    runtime.native_federated_context()
    try:
      with self.assertRaisesRegex(
        ValueError, 'IdentifiedDataSource over 2 client ids.*same ClientData'
      ):
        asyncio.run(
          tff.learning.programs.train_model(
            train_process=process,
            train_data_source=tff_aggregators.IdentifiedDataSource(
              renamed, preprocess_fn=_preprocess, seed=1
            ),
            train_per_round_clients=_CLIENTS_PER_ROUND,
            train_total_rounds=2,
            program_state_manager=tff.program.FileProgramStateManager(root),
            model_output_manager=tff.program.MemoryReleaseManager(),
            evaluation_manager=None,
            evaluation_periodicity=1,
          )
        )
    finally:
      runtime.use_local_worker()


class RobustFactoriesTest(absltest.TestCase):
  """FedGLAD inside TFF's clipping and zeroing factories, and around them."""

  def _rounds(self, process, rounds=2):
    datasets = [
      _preprocess(_client_data().create_tf_dataset_for_client(c))
      for c in _client_data().client_ids
    ]
    state = process.initialize()
    for _ in range(rounds):
      state = process.next(state, datasets).state
    return _flat(process.get_model_weights(state))

  def _fedavg(self, aggregator):
    tf.keras.utils.set_random_seed(0)
    return self._rounds(
      tff.learning.algorithms.build_weighted_fed_avg(
        _model_fn, _SGD, model_aggregator=aggregator
      )
    )

  def test_norm_bounds_that_never_bind_leave_fedglad_unchanged(self):
    plain = self._fedavg(tff_aggregators.FedGladFactory())
    inside = self._fedavg(
      tff.aggregators.zeroing_factory(
        1e9,
        tff.aggregators.clipping_factory(1e6, tff_aggregators.FedGladFactory()),
      )
    )
    np.testing.assert_allclose(inside, plain, rtol=1e-5, atol=1e-7)
    # Inside FedGLAD only a factory that treats the whole client value alike
    # (the update and its squared norms): zeroing, not clipping.
    tf.keras.utils.set_random_seed(0)
    wrapped = self._rounds(
      tff_aggregators.build_fedglad_process(
        _model_fn,
        _SGD,
        model_aggregator=tff.aggregators.zeroing_factory(
          1e9, tff.aggregators.MeanFactory(no_nan_division=True)
        ),
      )
    )
    np.testing.assert_allclose(wrapped, plain, rtol=1e-5, atol=1e-7)

  def test_a_binding_clip_changes_the_model(self):
    plain = self._fedavg(tff_aggregators.FedGladFactory())
    clipped = self._fedavg(
      tff.aggregators.clipping_factory(1e-3, tff_aggregators.FedGladFactory())
    )
    self.assertGreater(np.max(np.abs(clipped - plain)), 1e-4)


class IdentifiedDataSourceTest(absltest.TestCase):
  def test_maps_string_ids_to_their_position(self):
    source = tff_aggregators.IdentifiedDataSource(_client_data())
    self.assertEqual(source.client_ids, ['synthetic1', 'synthetic2'])
    self.assertEqual(source.index_of('synthetic2'), 1)
    (dataset,) = source.datasets([1])
    self.assertEqual(next(iter(dataset))['client_id'].numpy(), 1)

  def test_cohorts_depend_only_on_seed_and_round(self):
    data = [tf.data.Dataset.range(1)] * 10
    first = tff_aggregators.IdentifiedDataSource(data, seed=3).iterator()
    second = tff_aggregators.IdentifiedDataSource(data, seed=3).iterator()
    cohorts = [
      [next(iter(d))['client_id'].numpy() for d in first.select(4)]
      for _ in range(3)
    ]
    restored = type(first).from_bytes(second.to_bytes())
    self.assertEqual(restored.round_num, 0)
    again = [
      [next(iter(d))['client_id'].numpy() for d in restored.select(4)]
      for _ in range(3)
    ]
    self.assertEqual(cohorts, again)
    self.assertNotEqual(cohorts[0], cohorts[1])


class MistakesTest(absltest.TestCase):
  """Each mistake a user met gets one error that names the fix."""

  def test_functional_model_is_refused_at_build_time(self):
    functional = tff.learning.models.functional_model_from_keras(
      tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(3,))]),
      tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=(tf.TensorSpec([None, 3]), tf.TensorSpec([None], tf.int64)),
    )
    for build in (
      lambda m: tff_aggregators.build_fedglad_process(m, _SGD),
      lambda m: tff_aggregators.build_fedlws_process(m, _SGD),
      lambda m: tff_aggregators.build_fedsa_process(m, _SGD, max_clients=2),
      lambda m: tff_aggregators.build_fedlaw_process(
        m, _SGD, proxy_data=None, max_clients=2, variant='fixed_gamma'
      ),
      lambda m: tff_aggregators.build_fedcda_process(
        m, _SGD, num_clients=4, max_clients=2
      ),
      lambda m: tff_aggregators.build_weighted_fed_prox(m, 0.1, _SGD),
    ):
      with self.assertRaisesRegex(TypeError, 'not a FunctionalModel'):
        build(functional)

  def test_string_client_ids_point_to_the_data_source(self):
    with self.assertRaisesRegex(ValueError, 'IdentifiedDataSource'):
      tff_aggregators.with_client_ids(
        [tf.data.Dataset.range(1)], ['synthetic1']
      )

  def test_proxy_data_mistakes_name_proxy_data(self):
    x, y = _proxy()
    one_hot = np.eye(10, dtype=np.float32)[y]
    batched = tf.data.Dataset.from_tensor_slices((x, y)).batch(5)
    for proxy, message in (
      ((x[:, :14], y), 'cannot take its inputs of shape'),
      (batched, 'looks batched'),
      ((x, one_hot), 'look one-hot'),
      ((x, y + 5), r'labels span \[5, 14\] but the model has 10'),
      ((x, y[:-1]), '10 inputs but 9 labels'),
    ):
      with self.subTest(message=message):
        with self.assertRaisesRegex(ValueError, '^proxy_data: .*' + message):
          tff_aggregators.build_fedlaw_process(
            _model_fn, _SGD, proxy_data=proxy, max_clients=2
          )

  def test_cohort_above_max_clients_is_refused_before_the_round(self):
    datasets = [
      _preprocess(_client_data().create_tf_dataset_for_client(c))
      for c in _client_data().client_ids
    ]
    for process in (
      tff_aggregators.build_fedsa_process(_model_fn, _SGD, max_clients=1),
      tff_aggregators.build_fedlaw_process(
        _model_fn, _SGD, proxy_data=_proxy(), max_clients=1, server_epochs=2
      ),
    ):
      with self.assertRaisesRegex(ValueError, 'more than max_clients=1'):
        process.next(process.initialize(), datasets)


if __name__ == '__main__':
  absltest.main()
