r"""CIFAR-100 in TFF's federated split (500 clients) with TFF's task builder.

  bazel run //experiments:cifar100_federated -- --aggregator=fedavg \
      --server_optimizer=adam
  bazel run //experiments:cifar100_federated -- --use_synthetic_data \
      --rounds=2  # smoke run

Defaults follow Reddi et al. (ICLR 2021); learning rates are their tuned
values for the chosen --server_optimizer unless given. The data is read from
--cache_dir (default ~/.tff); see README, "Realistic benchmarks".
"""

from absl import app

from experiments import experiment  # pylint: disable=g-bad-import-order
from experiments import baseline_tasks

if __name__ == '__main__':
  experiment.set_defaults(**baseline_tasks.flag_defaults('cifar100_federated'))
  app.run(experiment.baseline_task_main('cifar100_federated'))
