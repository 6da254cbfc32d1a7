"""--client_train_fraction: each client's first fraction of its examples.

The kept examples are the first floor(fraction x size) (at least 1) of the
client's examples in an order shuffled once per (seed, client): the same
every round, reshuffled for training as before; 1 leaves the data as it was.
"""

import collections
import json
import os

from absl import flags
from absl.testing import absltest
from absl.testing import flagsaver
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from experiments import experiment
from experiments import run_files
from experiments import tasks
from experiments import training
from tests import test_utils


def _datasets(num_clients=4, size=10, local_epochs=1):
  examples = collections.OrderedDict(
    image=np.zeros((num_clients * size, 28, 28, 1), np.uint8),
    label=np.arange(num_clients * size, dtype=np.int64),
  )
  indices = np.split(np.arange(num_clients * size), num_clients)
  return tff.simulation.baselines.BaselineTaskDatasets(
    train_data=tasks.PartitionedClientData(examples, indices),
    test_data=tf.data.Dataset.range(1),
    train_preprocess_fn=lambda d: d.repeat(local_epochs).batch(100),
  )


def _labels(dataset) -> list[int]:
  return [int(y) for b in dataset.as_numpy_iterator() for y in b['label']]


class ClientSamplerTest(absltest.TestCase):
  def test_a_fixed_subset_reshuffled_every_round(self):
    sampler = training.ClientSampler(
      _datasets(local_epochs=2), 2, seed=0, train_fraction=0.7
    )
    first = _labels(sampler.client_dataset(1, '2'))
    self.assertLen(first, 2 * 7)
    kept = sorted(first[:7])
    self.assertEqual(sorted(first[7:]), kept)  # The same 7 in each epoch.
    self.assertLen(set(kept), 7)
    self.assertContainsSubset(kept, range(20, 30))
    second = _labels(sampler.client_dataset(2, '2'))
    self.assertEqual(sorted(second[:7]), kept)  # The same 7 every round,
    self.assertNotEqual(second, first)  # in another order.
    # Another sampler of the same seed holds out the same examples.
    again = training.ClientSampler(
      _datasets(local_epochs=2), 2, seed=0, train_fraction=0.7
    )
    self.assertEqual(_labels(again.client_dataset(1, '2')), first)
    other_seed = training.ClientSampler(
      _datasets(local_epochs=2), 2, seed=1, train_fraction=0.7
    )
    self.assertNotEqual(
      sorted(_labels(other_seed.client_dataset(1, '2'))[:7]), kept
    )

  def test_a_fraction_of_one_leaves_the_data_untouched(self):
    default = training.ClientSampler(_datasets(), 2, seed=0)
    full = training.ClientSampler(_datasets(), 2, seed=0, train_fraction=1.0)
    for round_num in (1, 2):
      self.assertEqual(
        _labels(full.client_dataset(round_num, '1')),
        _labels(default.client_dataset(round_num, '1')),
      )

  def test_unknown_cardinality_is_counted(self):
    datasets = _datasets()
    dataset_fn = datasets.train_data.serializable_dataset_fn
    datasets = tff.simulation.baselines.BaselineTaskDatasets(
      train_data=tff.simulation.datasets.ClientData.from_clients_and_tf_fn(
        datasets.train_data.client_ids,
        lambda c: dataset_fn(c).filter(lambda _: True),
      ),
      test_data=datasets.test_data,
      train_preprocess_fn=datasets.train_preprocess_fn,
    )
    unknown = datasets.train_data.serializable_dataset_fn('3').cardinality()
    self.assertEqual(unknown, tf.data.UNKNOWN_CARDINALITY)
    sampler = training.ClientSampler(datasets, 2, seed=0, train_fraction=0.5)
    self.assertLen(_labels(sampler.client_dataset(1, '3')), 5)

  def test_examples_kept(self):
    for size, fraction, kept in (
      (10, 0.7, 7),
      (3, 0.7, 2),
      (1, 0.1, 1),  # A client with data keeps one example.
      (0, 0.5, 0),
      (100, 0.29, 29),  # Not 28 (0.29 x 100 is 28.999... in floats).
      (5, 1.0, 5),
    ):
      self.assertEqual(training.num_train_examples(size, fraction), kept)

  def test_invalid_fractions(self):
    for fraction in (0.0, 1.5, float('nan')):
      with self.assertRaisesRegex(ValueError, r'in \(0, 1\]'):
        training.ClientSampler(_datasets(), 2, 0, train_fraction=fraction)
      with self.assertRaisesRegex(ValueError, 'client_train_fraction'):
        training.TrainingConfig(
          rounds=1,
          clients_per_round=1,
          seed=0,
          output_dir='/t',
          client_train_fraction=fraction,
        )
      with (
        self.subTest(fraction),
        flagsaver.flagsaver(),
        self.assertRaisesRegex(
          flags.IllegalFlagValueError,
          r'--client_train_fraction must be in \(0, 1\]',
        ),
      ):
        flags.FLAGS.client_train_fraction = fraction


class BinaryTest(absltest.TestCase):
  def test_the_examples_trained_on(self):
    data_dir = self.create_tempdir().full_path
    test_utils.write_fashion_mnist_subset(data_dir, 600, 200)
    output_dir = self.create_tempdir().full_path
    with flagsaver.flagsaver(
      rounds=1,
      num_clients=6,
      clients_per_round=3,
      local_epochs=2,
      model='mlp',
      batch_size=20,
      data_dir=data_dir,
      output_dir=output_dir,
      seed=1,
      client_train_fraction=0.7,
    ):
      experiment.image_classification_main('fmnist')(['fmnist'])
    with open(os.path.join(output_dir, run_files.PARTITION_JSON)) as f:
      sizes = json.load(f)['client_sizes']
    with open(os.path.join(output_dir, run_files.CONFIG_JSON)) as f:
      self.assertEqual(json.load(f)['client_train_fraction'], 0.7)
    cohort = training.cohort_indices(1, 1, 6, 3)
    kept = sum(training.num_train_examples(sizes[i], 0.7) for i in cohort)
    self.assertLess(kept, 0.75 * sum(sizes[i] for i in cohort))
    (row,) = run_files.read_metrics(output_dir)
    self.assertEqual(int(row['train/client_work/train/num_examples']), 2 * kept)


if __name__ == '__main__':
  absltest.main()
