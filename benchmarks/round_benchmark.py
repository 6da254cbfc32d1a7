r"""Per-round time and memory of every aggregator against FedAvg, one run.

  bazel run //benchmarks:round_benchmark -- --output_dir=$PWD/benchmarks/results

For each setting, every registered aggregator (FedAvg first) trains the same
task, cohort sequence and initial model for `--rounds` rounds; the time per
round is the median after `--warmup_rounds`, reported with its ratio to
FedAvg's. Settings:
- `fmnist20`: real Fashion-MNIST, 20 clients (Dirichlet 0.5), all 20 per
  round, one local epoch, the 199k-parameter MLP (the papers' FMNIST setting);
- `cnn1m_50`: the 1.66M-parameter CNN (FedCDA's FMNIST model), cohort 50 of
  50 clients holding 20 examples each, so the round is dominated by moving
  and aggregating 50 models rather than by local training;
- the `fmnist20` setting again with 2 local workers, per aggregator
  (FedLWS there with its one-pass tau, `--fedlws_tau_mode=rms`).
FedCDA runs with a 1-round warm-up, so its selection is what is timed; it
runs twice, with its history in the TFF state and in the driver
(`fedcda:fedcda_history=memory`).
Peak resident memory of this driver and of the workers is recorded per run.
Writes `round_benchmark.json` and `round_benchmark.md` to `--output_dir`.
"""

import experiments  # noqa: F401  # pylint: disable=unused-import,g-bad-import-order
# (Sets TensorFlow's C++ log level before TensorFlow loads.)

import collections
import os
import platform
import resource
import tempfile
import time

from absl import app
from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from benchmarks import common
from experiments import data
from experiments import partition
from experiments import registry
from experiments import run_files
from tff_aggregators import runtime
from experiments import tasks
from experiments import training

_OUTPUT_DIR = flags.DEFINE_string(
  'benchmark_output_dir', None, 'Where to write the results (required).'
)
_ROUNDS = flags.DEFINE_integer('benchmark_rounds', 8, 'Rounds per run.')
_WARMUP = flags.DEFINE_integer(
  'warmup_rounds', 2, 'Rounds excluded from the median (tracing, caches).'
)
_AGGREGATORS = flags.DEFINE_list(
  'benchmark_aggregators',
  None,
  'Aggregators (default: all registered, and FedCDA with its history in '
  'the driver); `name:flag=value:...` runs `name` with method flags set.',
)
_NAME = flags.DEFINE_string(
  'benchmark_name',
  'round_benchmark',
  'Results go to <name>.json and <name>.md (another name for a subset).',
)
_SETTINGS = flags.DEFINE_list(
  'settings', ['fmnist20', 'cnn1m_50', 'fmnist20_2workers'], 'Settings.'
)


def _fashion_mnist_task(
  *, num_clients, examples_per_client, model, alpha, seed=0
):
  image_data = data.load_fashion_mnist()
  if examples_per_client is not None:
    keep = num_clients * examples_per_client
    image_data = data.ImageData(
      train_images=image_data.train_images[:keep],
      train_labels=image_data.train_labels[:keep],
      test_images=image_data.test_images[:1000],
      test_labels=image_data.test_labels[:1000],
      num_classes=10,
    )
  method = 'dirichlet' if alpha is not None else 'iid'
  indices = partition.partition(
    method, image_data.train_labels, num_clients, alpha=alpha, seed=seed
  )
  task = tasks.create_image_task(
    image_data,
    indices,
    model=model,
    batch_size=64 if alpha else 20,
    local_epochs=1,
    normalization='unit',
  )
  # FedLAW's proxy: 10 test examples per class, as the binaries take it.
  proxy, _ = partition.proxy_split(image_data.test_labels, 100, 10, seed=seed)
  proxy_data = task.datasets.eval_preprocess_fn(
    task.datasets.test_data.batch(len(image_data.test_labels))
    .map(lambda b: {k: tf.gather(v, proxy) for k, v in b.items()})
    .unbatch()
  ).unbatch()
  return task, proxy_data


def _method_flags(name: str) -> tuple[str, dict[str, str]]:
  """`fedcda:fedcda_history=memory` -> ('fedcda', {'fedcda_history': ...})."""
  method, *settings = name.split(':')
  return method, dict(setting.split('=', 1) for setting in settings)


def _measure(name, task, proxy_data, *, clients_per_round, num_workers):
  """Trains `name`; returns median round seconds and peak memory."""
  method, method_flags = _method_flags(name)
  for flag, value in method_flags.items():
    flags.FLAGS[flag].parse(value)
  try:
    return _train(
      method,
      task,
      proxy_data,
      clients_per_round=clients_per_round,
      num_workers=num_workers,
    )
  finally:
    for flag in method_flags:
      flags.FLAGS[flag].unparse()


def _train(method, task, proxy_data, *, clients_per_round, num_workers):
  workers = runtime.use_local_workers(num_workers)
  process = registry.build_process(
    method,
    registry.ProcessInputs(
      model_fn=task.model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.05),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
      server_optimizer='sgd',
      clients_per_round=clients_per_round,
      proxy_data=proxy_data,
      num_clients=len(task.datasets.train_data.client_ids),
    ),
  )
  with tempfile.TemporaryDirectory() as output_dir:
    training.train(
      process,
      task,
      training.TrainingConfig(
        rounds=_ROUNDS.value,
        clients_per_round=clients_per_round,
        seed=0,
        output_dir=output_dir,
        eval_every=_ROUNDS.value,
        summary_rounds=1,
      ),
    )
    seconds = [
      float(r['round_seconds']) for r in training.read_metrics(output_dir)
    ]
  result = collections.OrderedDict(
    median_round_seconds=float(np.median(seconds[_WARMUP.value :])),
    round_seconds=seconds,
    worker_peak_rss_mb=[w.memory_mb() for w in workers],
    driver_peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    / 1024,
  )
  # Fresh workers for the next run, so their peak memory is this run's.
  for worker in workers:
    worker.stop()
  return result


def _run_setting(setting, aggregators):
  if setting.startswith('fmnist20'):
    task, proxy_data = _fashion_mnist_task(
      num_clients=20, examples_per_client=None, model='mlp', alpha=0.5
    )
    clients_per_round = 20
  elif setting == 'cnn1m_50':
    task, proxy_data = _fashion_mnist_task(
      num_clients=50, examples_per_client=20, model='fedavg_cnn', alpha=None
    )
    clients_per_round = 50
  else:
    raise ValueError(f'Unknown setting {setting}.')
  num_workers = 2 if setting.endswith('2workers') else 1
  # FedLWS's exact tau cannot be split over workers; its one pass can.
  flags.FLAGS.fedlws_tau_mode = 'rms' if num_workers > 1 else 'exact'
  # FedCDA selects from round 2 on (its default warm-up is 50 FedAvg rounds).
  flags.FLAGS.fedcda_warmup = 1
  results = collections.OrderedDict()
  for name in aggregators:
    logging.info('%s: %s', setting, name)
    try:
      results[name] = _measure(
        name,
        task,
        proxy_data,
        clients_per_round=clients_per_round,
        num_workers=num_workers,
      )
    except ValueError as e:  # A method refusing the setting (FedCDA's state).
      results[name] = collections.OrderedDict(refused=str(e))
  fedavg = results['fedavg']['median_round_seconds']
  for result in results.values():
    if 'refused' not in result:
      result['ratio_to_fedavg'] = result['median_round_seconds'] / fedavg
  return results


def _markdown(all_results) -> str:
  lines = []
  for setting, results in all_results['settings'].items():
    lines += [
      f'### {setting}',
      '',
      '| aggregator | s/round (median) | ratio to FedAvg '
      '| driver peak RSS (MB) | worker peak RSS (MB) |',
      '|---|---|---|---|---|',
    ]
    for name, r in results.items():
      if 'refused' in r:
        lines.append(f'| {name} | refused: {r["refused"][:120]}... | | | |')
        continue
      workers = ', '.join(f'{m:.0f}' for m in r['worker_peak_rss_mb'])
      lines.append(
        f'| {name} | {r["median_round_seconds"]:.3f} | '
        f'{r["ratio_to_fedavg"]:.3f} | {r["driver_peak_rss_mb"]:.0f} | '
        f'{workers} |'
      )
    lines.append('')
  return '\n'.join(lines)


def main(argv):
  output_dir = common.output_dir(argv, _OUTPUT_DIR.value)
  aggregators = _AGGREGATORS.value or ['fedavg'] + [
    n for n in registry.names() if n != 'fedavg'
  ] + ['fedcda:fedcda_history=memory']
  if aggregators[0] != 'fedavg':
    aggregators = ['fedavg'] + [a for a in aggregators if a != 'fedavg']
  started = time.time()
  all_results = collections.OrderedDict(
    machine=collections.OrderedDict(
      cpus=os.cpu_count(),
      memory_gb=round(
        os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30, 1
      ),
      platform=platform.platform(),
    ),
    date=time.strftime('%Y-%m-%d'),
    rounds=_ROUNDS.value,
    warmup_rounds=_WARMUP.value,
    settings=collections.OrderedDict(
      (s, _run_setting(s, aggregators)) for s in _SETTINGS.value
    ),
  )
  all_results['total_seconds'] = time.time() - started
  run_files.write_json(
    os.path.join(output_dir, f'{_NAME.value}.json'), all_results
  )
  run_files.write_text(
    os.path.join(output_dir, f'{_NAME.value}.md'), _markdown(all_results)
  )
  logging.info('\n%s', _markdown(all_results))


if __name__ == '__main__':
  app.run(main)
