r"""The README's demo: FedAvg and every registered method on real Fashion-MNIST.

  bazel run //experiments:demo            # or: make demo

Trains each aggregator on the same partition, initial model and cohorts, each
into `<output_dir>/<aggregator>/` (metrics CSV, summary JSON, accuracy PNG),
then plots all accuracy curves on one figure (`<output_dir>/accuracy.png`) and
writes `<output_dir>/summary.json`. Every experiment flag applies; the
defaults below keep the whole demo within a few minutes on two cores. A
re-run resumes (finished runs are only summarised again).
"""

import collections
import os

from absl import app
from absl import flags
from absl import logging

from experiments import experiment  # pylint: disable=g-bad-import-order
from experiments import data
from experiments import plotting
from experiments import registry
from experiments import run_files
from experiments import training

_AGGREGATORS = flags.DEFINE_list(
  'demo_aggregators',
  None,
  'Aggregators to compare (default: every registered one, FedAvg first).',
)
flags.register_validator(
  'demo_aggregators',
  lambda names: not names or set(names) <= set(registry.names()),
  message='--demo_aggregators must name some of '
  f'{", ".join(registry.names())}.',
)


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise SystemExit(f'error: unexpected arguments {argv[1:]}')
  experiment.quiet_other_info_logs()
  aggregators = _AGGREGATORS.value or ['fedavg'] + [
    n for n in registry.names() if n != 'fedavg'
  ]
  output_root = run_files.resolve_path(
    experiment.OUTPUT_DIR.value or 'runs/demo'
  )
  task, partition_info, proxy_data = experiment.load_partitioned_task('fmnist')
  summaries = collections.OrderedDict()
  curves = collections.OrderedDict()
  for aggregator in aggregators:
    output_dir = os.path.join(output_root, aggregator)
    summaries[aggregator] = experiment.run(
      task,
      aggregator=aggregator,
      output_dir=output_dir,
      partition_info=partition_info,
      proxy_data=proxy_data,
    )
    curves[aggregator] = training.accuracy_curve(
      training.read_metrics(output_dir), 'sparse_categorical_accuracy'
    )
  training.write_json(os.path.join(output_root, 'summary.json'), summaries)
  plotting.plot_accuracy(
    curves,
    os.path.join(output_root, 'accuracy.png'),
    title='Fashion-MNIST, '
    f'{experiment.NUM_CLIENTS.value} clients, Dirichlet '
    f'alpha={experiment.ALPHA.value}',
  )
  lines = [f'{"aggregator":<12} {"final acc":>9} {"last-10":>8} {"s/round":>8}']
  for name, s in summaries.items():
    lines.append(
      f'{name:<12} {s["final_accuracy"]:>9.4f} '
      f'{s["last_rounds_mean_accuracy"]:>8.4f} '
      f'{s["median_round_seconds"]:>8.2f}'
    )
  logging.info('demo results in %s:\n%s', output_root, '\n'.join(lines))


if __name__ == '__main__':
  experiment.set_defaults(
    model='mlp',
    normalization='unit',
    data_dir=data.FASHION_MNIST_DIR,
    num_clients=20,
    clients_per_round=10,
    rounds=20,
    local_epochs=1,
    batch_size=64,
    alpha=0.5,
    # FedCDA selects after its warm-up; 50 FedAvg rounds would be all of
    # the demo's 20.
    fedcda_warmup=5,
  )
  app.run(experiment.without_traceback(main))
