"""In the binaries, FedCDA's warm-up round is FedAvg's round, number for number.

Both aggregators get the same partition, initial model, cohort and client
shuffling for a seed; in warm-up FedCDA aggregates as FedAvg does, so round
1's training loss and test accuracy must agree (the identified client work
reads each client's data once, in FedAvg's order).
"""

import csv
import os

from absl.testing import absltest

from tests import test_utils
from tff_aggregators import runtime  # noqa: F401  # pylint: disable=unused-import


class FedCdaWarmupBinaryTest(absltest.TestCase):
  def _round_one(self, data_dir, aggregator, marker):
    output_dir = self.create_tempdir().full_path
    test_utils.run_module(
      'experiments.fmnist',
      [
        f'--aggregator={aggregator}',
        '--model=mlp',
        '--num_clients=6',
        '--clients_per_round=3',
        '--rounds=1',
        '--batch_size=20',
        '--local_epochs=2',
        '--fedcda_warmup=5',
        '--client_lr=0.05',
        f'--data_dir={data_dir}',
        f'--output_dir={output_dir}',
        '--seed=1',
      ],
      marker=marker,
    )
    with open(os.path.join(output_dir, 'metrics.csv')) as f:
      (row,) = list(csv.DictReader(f))
    return row

  def test_round_one_of_fedcda_is_fedavg(self):
    data_dir = self.create_tempdir().full_path
    test_utils.write_fashion_mnist_subset(data_dir, 600, 200)
    marker = test_utils.new_marker()
    fedavg = self._round_one(data_dir, 'fedavg', marker)
    fedcda = self._round_one(data_dir, 'fedcda', marker)
    loss = [k for k in fedavg if k.endswith('train/loss')]
    accuracy = [
      k for k in fedavg if k.startswith('test/') and k.endswith('accuracy')
    ]
    self.assertNotEmpty(loss)
    self.assertNotEmpty(accuracy)
    for key in loss + accuracy:
      self.assertAlmostEqual(
        float(fedcda[key]), float(fedavg[key]), places=5, msg=key
      )
    self.assertEmpty(test_utils.pids_with_marker(marker), 'worker left behind')


if __name__ == '__main__':
  absltest.main()
