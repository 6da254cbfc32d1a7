r"""FEMNIST (EMNIST-62 by writer, 3,400 clients) with TFF's task builder.

  bazel run //experiments:femnist -- --aggregator=fedavg --server_optimizer=adam
  bazel run //experiments:femnist -- --use_synthetic_data --rounds=2  # smoke

Defaults follow Reddi et al. (ICLR 2021); learning rates are their tuned
values for the chosen --server_optimizer unless given. The data is read from
--cache_dir (default ~/.tff); see README, "Realistic benchmarks".
"""

from absl import app

from experiments import experiment  # pylint: disable=g-bad-import-order
from experiments import baseline_tasks

if __name__ == '__main__':
  experiment.set_defaults(**baseline_tasks.flag_defaults('femnist'))
  app.run(experiment.baseline_task_main('femnist'))
