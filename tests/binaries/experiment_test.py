"""The shared binary main: CIFAR-10 through the tfds mock, registry, paths."""

import json
import os

from absl.testing import absltest
from absl.testing import flagsaver
import numpy as np
import tensorflow_datasets as tfds
import tensorflow_federated as tff

from experiments import experiment
from experiments import registry
from experiments import run_files
from tff_aggregators import runtime
from experiments import training
from tests import test_utils


def setUpModule():
  runtime.use_local_worker()


class Cifar10MainTest(absltest.TestCase):
  def test_one_round_of_fedavg_on_mocked_cifar10(self):
    output_dir = self.create_tempdir().full_path
    with (
      tfds.testing.mock_data(num_examples=40),
      flagsaver.flagsaver(
        aggregator='fedavg',
        rounds=1,
        num_clients=4,
        clients_per_round=2,
        model='simple_cnn',
        normalization='symmetric',
        batch_size=10,
        partition='iid',
        proxy_size=0,
        data_dir=self.create_tempdir().full_path,
        output_dir=output_dir,
      ),
    ):
      experiment.image_classification_main('cifar10')(['cifar10'])
    with open(os.path.join(output_dir, training.SUMMARY_JSON)) as f:
      summary = json.load(f)
    self.assertEqual(summary['rounds'], 1)
    self.assertBetween(summary['final_accuracy'], 0.0, 1.0)
    with open(os.path.join(output_dir, run_files.PARTITION_JSON)) as f:
      self.assertEqual(sum(json.load(f)['client_sizes']), 40)
    with open(os.path.join(output_dir, run_files.CONFIG_JSON)) as f:
      config = json.load(f)
    self.assertEqual(config['model'], 'simple_cnn')
    self.assertNotIn('output_dir', config)  # Not a run-defining flag.


class RegistryTest(absltest.TestCase):
  def test_unknown_aggregator_lists_the_registered_ones(self):
    with self.assertRaisesRegex(ValueError, 'registered: .*fedavg'):
      registry.build_process('fedmagic', None)

  def test_fedavg_and_fedprox(self):
    inputs = dict(
      model_fn=test_utils.tiny_model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
      server_optimizer='sgd',
    )
    fedavg = registry.build_process('fedavg', registry.ProcessInputs(**inputs))
    fedprox = registry.build_process(
      'fedavg', registry.ProcessInputs(**inputs, proximal_strength=0.1)
    )
    for process in (fedavg, fedprox):  # A client lr schedule reaches both.
      self.assertIn(
        'learning_rate',
        process.get_hparams(process.initialize())['client_work'],
      )
    initial = fedavg.get_model_weights(fedavg.initialize())
    # Several local steps: at the first the proximal term is zero.
    datasets = [d.repeat(3) for d in test_utils.tiny_client_datasets(2)]
    models = []
    for process in (fedavg, fedprox):
      state = process.set_model_weights(process.initialize(), initial)
      state = process.next(state, datasets).state
      models.append(test_utils.flat_trainable(process.get_model_weights(state)))
    self.assertFalse(np.allclose(models[0], models[1]))

  def test_fedcda_history_too_large_for_the_state_names_the_flags(self):
    inputs = registry.ProcessInputs(
      model_fn=test_utils.tiny_model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
      server_optimizer='sgd',
      clients_per_round=2,
      num_clients=10**7,
    )
    with self.assertRaisesRegex(
      ValueError,
      r'max_state_bytes.*--fedcda_history=memory or '
      r'--fedcda_history=disk',
    ):
      registry.build_process('fedcda', inputs)


class ResumeTest(absltest.TestCase):
  def test_only_run_flags_compared_and_new_flags_at_their_default(self):
    output_dir = self.create_tempdir().full_path
    training.write_json(
      os.path.join(output_dir, run_files.CONFIG_JSON),
      dict(alpha=0.5, fedcda_k=3, aggregator='fedavg'),
    )
    run_flags = experiment._run_flags('fedavg')  # pylint: disable=protected-access
    self.assertNotIn('fedcda_k', run_flags)  # Another method's option.
    self.assertNotIn('overwrite', run_flags)
    self.assertIn('fedavg_client_weighting', run_flags)
    changed = experiment._changed_settings  # pylint: disable=protected-access
    # `seed` is not in the saved config: it ran at its default, 0.
    self.assertEqual(changed(output_dir, dict(alpha=0.5, seed=0)), {})
    self.assertEqual(
      changed(output_dir, dict(alpha=0.1, seed=3)),
      dict(alpha=(0.5, 0.1), seed=(0, 3)),
    )


class PathTest(absltest.TestCase):
  def test_relative_paths_follow_the_bazel_working_directory(self):
    with absltest.mock.patch.dict(
      os.environ, {'BUILD_WORKING_DIRECTORY': '/home/user/repo'}
    ):
      self.assertEqual(
        run_files.resolve_path('runs/x'), '/home/user/repo/runs/x'
      )
      self.assertEqual(run_files.resolve_path('/abs'), '/abs')


if __name__ == '__main__':
  absltest.main()
