r"""Federated training on Fashion-MNIST (real data, from the Debian package).

  bazel run //experiments:fmnist -- --aggregator=fedavg --rounds=20

The four original IDX files come from `apt-get install dataset-fashion-mnist`
(`/usr/share/datasets/fashion-mnist`) or `--data_dir`; see `--helpfull`.
"""

from absl import app

from experiments import experiment  # pylint: disable=g-bad-import-order
from experiments import data

if __name__ == '__main__':
  experiment.set_defaults(
    model='lenet', normalization='unit', data_dir=data.FASHION_MNIST_DIR
  )
  app.run(experiment.image_classification_main('fmnist'))
