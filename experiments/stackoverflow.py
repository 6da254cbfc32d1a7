r"""Stack Overflow next-word prediction (342,477 clients), TFF's task builder.

  bazel run //experiments:stackoverflow -- --aggregator=fedavg \
      --server_optimizer=adam
  bazel run //experiments:stackoverflow -- --use_synthetic_data \
      --rounds=2  # smoke run

Defaults follow Reddi et al. (ICLR 2021); learning rates are their tuned
values for the chosen --server_optimizer unless given. The data is read from
--cache_dir (default ~/.tff); see README, "Realistic benchmarks".
"""

from absl import app

from experiments import experiment  # pylint: disable=g-bad-import-order
from experiments import baseline_tasks

if __name__ == '__main__':
  experiment.set_defaults(**baseline_tasks.flag_defaults('stackoverflow'))
  app.run(experiment.baseline_task_main('stackoverflow'))
