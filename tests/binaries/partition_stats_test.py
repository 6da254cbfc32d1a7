"""partition_stats: skew measures, FedLAW's lambda share, a run's partition."""

import json
import math
import os
import types

from absl.testing import absltest
import numpy as np

from experiments import data
from experiments import partition
from experiments import partition_stats
from experiments import run_files
from experiments import training
from tests import test_utils


def _reference_skew(counts, top_k):
  """The measures of `skew_stats`, written with plain Python loops."""
  sizes = [sum(row) for row in counts]
  total = sum(sizes)
  order = sorted(range(len(sizes)), key=lambda c: (-sizes[c], c))[:top_k]
  entropy_sum = effective_sum = 0.0
  one_class = 0
  for row, size in zip(counts, sizes):
    if size:
      h = -sum(v / size * math.log(v / size) for v in row if v)
      entropy_sum += size * h / math.log(len(row))
      effective_sum += size * math.exp(h)
      one_class += max(row) > 0.9 * size
  by_class = []
  for k in range(len(counts[0])):
    column = [row[k] for row in counts]
    by_class.append(max(column) / sum(column) if sum(column) else None)
  holder_shares = [s for s in by_class if s is not None]
  main = {
    c: [
      (k, v / sizes[c]) for k, v in enumerate(counts[c]) if v > 0.05 * sizes[c]
    ]
    for c in order
  }
  return (
    order,
    sum(sizes[c] for c in order) / total,
    main,
    entropy_sum / total,
    effective_sum / total,
    one_class,
    by_class,
    sum(holder_shares) / len(holder_shares),
    max(holder_shares),
  )


class SkewStatsTest(absltest.TestCase):
  def test_matches_a_loop_reference_on_random_counts(self):
    rng = np.random.default_rng(3)
    for trial in range(5):
      counts = rng.integers(0, 50, size=(7, 5)) * (rng.random((7, 5)) < 0.6)
      counts[1 + trial % 6] = 0  # A client without data.
      counts[:, 4] = 0  # A class nobody holds.
      counts[0, 0] = 1
      stats = partition_stats.skew_stats(counts, top_k=3)
      (
        top,
        share,
        main,
        entropy,
        effective,
        one_class,
        by_class,
        holder,
        holder_max,
      ) = _reference_skew(counts.tolist(), 3)
      self.assertEqual(stats['top_clients'], top)
      self.assertAlmostEqual(stats['top_share'], share)
      self.assertEqual(stats['top_main_classes'].keys(), main.keys())
      for c in top:
        np.testing.assert_allclose(stats['top_main_classes'][c], main[c])
      self.assertAlmostEqual(stats['weighted_label_entropy'], entropy)
      self.assertAlmostEqual(stats['effective_classes'], effective)
      self.assertEqual(stats['one_class_clients'], one_class)
      self.assertIsNone(stats['largest_holder_by_class'][4])
      np.testing.assert_allclose(
        stats['largest_holder_by_class'][:4], by_class[:4]
      )
      self.assertAlmostEqual(stats['largest_holder_share'], holder)
      self.assertAlmostEqual(stats['largest_holder_share_max'], holder_max)
      self.assertEqual(stats['client_sizes'], counts.sum(axis=1).tolist())

  def test_extremes_of_entropy_and_holder_share(self):
    one_class_each = np.eye(4, dtype=np.int64) * 10
    stats = partition_stats.skew_stats(one_class_each, top_k=2)
    self.assertAlmostEqual(stats['weighted_label_entropy'], 0.0)
    self.assertAlmostEqual(stats['effective_classes'], 1.0)
    self.assertEqual(stats['one_class_clients'], 4)
    self.assertAlmostEqual(stats['largest_holder_share'], 1.0)
    uniform = partition_stats.skew_stats(np.full((4, 4), 5), top_k=2)
    self.assertAlmostEqual(uniform['weighted_label_entropy'], 1.0)
    self.assertAlmostEqual(uniform['effective_classes'], 4.0)
    self.assertEqual(uniform['one_class_clients'], 0)
    self.assertAlmostEqual(uniform['largest_holder_share'], 0.25)

  def test_empty_partition_is_refused(self):
    with self.assertRaisesRegex(ValueError, 'no examples'):
      partition_stats.skew_stats(np.zeros((3, 2)), top_k=1)


def _cohort(config, round_num):
  """The client ids the experiment's sampler runs in `round_num`, in order."""
  datasets = types.SimpleNamespace(
    train_data=types.SimpleNamespace(
      client_ids=[str(i) for i in range(config['num_clients'])],
      serializable_dataset_fn=None,
    ),
    train_preprocess_fn=None,
  )
  sampler = training.ClientSampler(
    datasets, config['clients_per_round'], config['seed']
  )
  return [int(c) for c in sampler.client_ids(round_num)]


def _rows(lambdas):
  return [
    {'key': str(n + 1), partition_stats.LAMBDA_METRIC: json.dumps(lam)}
    for n, lam in enumerate(lambdas)
  ]


class LambdaByClientTest(absltest.TestCase):
  config = {'seed': 7, 'num_clients': 6, 'clients_per_round': 4}

  def test_puts_each_rounds_lambda_on_the_sampled_clients(self):
    lambdas, expected = [], np.zeros([3, 6])
    for n in range(1, 4):
      cohort = _cohort(self.config, n)
      self.assertNotEqual(cohort, sorted(cohort))  # Order matters.
      # Lambda in cohort order, zero-padded to 6 (the collect capacity).
      lambdas.append([2.0 * (c + 1) for c in cohort] + [0.0, 0.0])
      for c in cohort:
        expected[n - 1, c] = (c + 1) / sum(k + 1 for k in cohort)
    by_client = partition_stats.lambda_by_client(
      _rows(lambdas), self.config, 1, 3
    )
    np.testing.assert_allclose(by_client, expected)

  def test_distance_from_the_size_weights_of_the_cohort(self):
    by_client = np.array([[0.5, 0.5, 0.0], [0.1, 0.3, 0.6], [0.0, 0.0, 1.0]])
    # Size weights: [1, 3, 0] / 4, [1, 3, 5] / 9, [0, 0, 1]; differences
    # [1, -1, 0] / 4, [-1, -3, 4] / 90, 0.
    np.testing.assert_allclose(
      partition_stats.size_weight_distance(by_client, [1, 3, 5]),
      [0.25, 4 / 90, 0.0],
    )

  def test_rounds_without_lambda_are_named(self):
    rows = _rows([[1, 1, 1, 1]]) + [{'key': '2', 'test/accuracy': '0.5'}]
    with self.assertRaisesRegex(ValueError, r'Rounds 2\.\.3 \(2 rounds\)'):
      partition_stats.lambda_by_client(rows, self.config, 1, 3)

  def test_lambda_of_the_wrong_length_or_padding_is_refused(self):
    for lam in ([1, 1, 1], [1, 1, 1, 1, 0.5]):
      with self.assertRaisesRegex(ValueError, 'Round 1: .* not 4'):
        partition_stats.lambda_by_client(_rows([lam]), self.config, 1, 1)

  def test_a_round_without_kept_clients_is_named(self):
    with self.assertRaisesRegex(ValueError, 'Round 1: lambda sums to 0'):
      partition_stats.lambda_by_client(_rows([[0, 0, 0, 0]]), self.config, 1, 1)

  def test_parse_rounds(self):
    self.assertEqual(partition_stats.parse_rounds('41-60'), (41, 60))
    for bad in ('41', '60-41', '0-3', 'a-b'):
      with self.assertRaisesRegex(ValueError, 'FIRST'):
        partition_stats.parse_rounds(bad)


class DescribeRunTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.data_dir = self.create_tempdir().full_path
    test_utils.write_fashion_mnist_subset(self.data_dir, 500, 10)
    self.image_data = data.load_fashion_mnist(self.data_dir)
    self.run_dir = self.create_tempdir().full_path
    self.config = {
      'aggregator': 'fedlaw',
      'partition': 'dirichlet',
      'num_clients': 6,
      'alpha': 0.3,
      'shards_per_client': 2,
      'seed': 4,
      'clients_per_round': 6,
    }
    run_files.write_json(
      os.path.join(self.run_dir, run_files.CONFIG_JSON), self.config
    )
    indices = partition.dirichlet(self.image_data.train_labels, 6, 0.3, 4)
    self.counts = partition.label_counts(
      self.image_data.train_labels, indices, 10
    )

  def test_regenerates_the_runs_partition(self):
    run_files.write_json(
      os.path.join(self.run_dir, run_files.PARTITION_JSON),
      {'label_counts': self.counts.tolist()},
    )
    stats = partition_stats.describe_run(self.run_dir, self.image_data, 2)
    self.assertEqual(stats['client_sizes'], self.counts.sum(axis=1).tolist())
    self.assertNotIn('top_lambda_share', stats)

  def test_a_partition_json_that_differs_is_refused(self):
    changed = self.counts.copy()
    changed[0, 0] += 1
    run_files.write_json(
      os.path.join(self.run_dir, run_files.PARTITION_JSON),
      {'label_counts': changed.tolist()},
    )
    with self.assertRaisesRegex(ValueError, 'differs from.*--data_dir'):
      partition_stats.describe_run(self.run_dir, self.image_data, 2)

  def test_lambda_share_of_the_largest_clients(self):
    lambdas = np.random.default_rng(0).random((3, 6))
    with open(os.path.join(self.run_dir, run_files.METRICS_CSV), 'w') as f:
      f.write(f'key,{partition_stats.LAMBDA_METRIC}\n')
      for n, lam in enumerate(lambdas):
        f.write(f'{n + 1},"{json.dumps(lam.tolist())}"\n')
    stats = partition_stats.describe_run(
      self.run_dir, self.image_data, 2, rounds=(2, 3)
    )
    top = np.argsort(-self.counts.sum(axis=1), kind='stable')[:2]
    expected = np.mean(
      [
        sum(
          v for c, v in zip(_cohort(self.config, n), lambdas[n - 1]) if c in top
        )
        / lambdas[n - 1].sum()
        for n in (2, 3)
      ]
    )
    self.assertAlmostEqual(stats['top_lambda_share'], expected)
    sizes = self.counts.sum(axis=1)
    distances = []
    for n in (2, 3):
      lam = lambdas[n - 1] / lambdas[n - 1].sum()
      cohort = _cohort(self.config, n)
      distances.append(
        0.5
        * sum(
          abs(lam[j] - sizes[c] / sizes.sum()) for j, c in enumerate(cohort)
        )
      )
    self.assertAlmostEqual(stats['lambda_size_distance'], np.mean(distances))
    text = partition_stats.format_stats(stats)
    self.assertIn(f'largest clients {top.tolist()}: ', text)
    self.assertIn(f'lambda: {expected:.3f}', text)

  def test_other_aggregators_have_no_lambda_share(self):
    self.config['aggregator'] = 'fedavg'
    run_files.write_json(
      os.path.join(self.run_dir, run_files.CONFIG_JSON), self.config
    )
    stats = partition_stats.describe_run(
      self.run_dir, self.image_data, 2, rounds=(1, 1)
    )
    self.assertNotIn('top_lambda_share', stats)

  def test_missing_config_names_the_fix(self):
    with self.assertRaisesRegex(ValueError, 'no config.json; pass a run'):
      partition_stats.describe_run(
        self.create_tempdir().full_path, self.image_data, 2
      )


class FmnistRunTest(absltest.TestCase):
  def test_a_fedlaw_run_of_the_experiment_binary(self):
    data_dir = self.create_tempdir().full_path
    test_utils.write_fashion_mnist_subset(data_dir, 300, 200)
    output_dir = self.create_tempdir().full_path
    flags = dict(
      aggregator='fedlaw',
      rounds=2,
      num_clients=6,
      clients_per_round=3,
      model='mlp',
      batch_size=20,
      local_epochs=1,
      fedlaw_server_epochs=5,
      data_dir=data_dir,
      output_dir=output_dir,
      seed=1,
    )
    marker = test_utils.new_marker()
    test_utils.run_module(
      'experiments.fmnist',
      [f'--{k}={v}' for k, v in flags.items()],
      marker=marker,
    )
    self.assertEmpty(test_utils.pids_with_marker(marker), 'worker left behind')
    # Raises if the regenerated partition differs from the run's own.
    stats = partition_stats.describe_run(
      output_dir, data.load_fashion_mnist(data_dir), 2, rounds=(1, 2)
    )
    with open(os.path.join(output_dir, run_files.PARTITION_JSON)) as f:
      self.assertEqual(stats['client_sizes'], json.load(f)['client_sizes'])
    by_client = partition_stats.lambda_by_client(
      run_files.read_metrics(output_dir), flags, 1, 2
    )
    for n in (1, 2):
      self.assertContainsSubset(
        np.flatnonzero(by_client[n - 1]).tolist(), _cohort(flags, n)
      )
      self.assertAlmostEqual(by_client[n - 1].sum(), 1.0)
    self.assertBetween(stats['top_lambda_share'], 0.0, 1.0)
    printed = test_utils.run_module(
      'experiments.partition_stats',
      [
        f'--runs={output_dir}',
        f'--data_dir={data_dir}',
        '--top_k=2',
        '--lambda_rounds=1-2',
      ],
      marker=marker,
    )
    self.assertIn(
      f"their mean share of FedLAW's lambda: {stats['top_lambda_share']:.3f}",
      printed.stdout,
    )
    # TFF's default context fails noisily at exit unless replaced.
    self.assertNotIn('Traceback', printed.stderr)
    self.assertNotIn('Exception ignored', printed.stderr)


if __name__ == '__main__':
  absltest.main()
