r"""Federated training on CIFAR-100 partitioned over clients, read by tfds.

  bazel run //experiments:cifar100 -- --aggregator=fedavg \
      --data_dir=$HOME/tensorflow_datasets

The data set must be prepared in `--data_dir` (tensorflow-datasets layout), or
`--download` lets tfds fetch it where the network allows.
"""

from absl import app

from experiments import experiment

if __name__ == '__main__':
  experiment.set_defaults(
    model='simple_cnn',
    normalization='symmetric',
    data_dir='~/tensorflow_datasets',
  )
  app.run(experiment.image_classification_main('cifar100'))
