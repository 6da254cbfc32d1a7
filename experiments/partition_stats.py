"""Prints how skewed a run's client partition is and how FedLAW weighted it.

A run's partition is not committed; it is regenerated from the run's
`config.json` with the same `partition.partition` call the experiment makes
(and checked against the run's `partition.json` when that file is there).
FedLAW logs lambda in cohort order; each round's cohort is recomputed with
`training.cohort_indices` to put lambda back on its clients. That holds for
runs in one process: with --workers, rows come in the order the workers
finish (`tff_aggregators/aggregators/collect.py`), which is not logged.

  bazel run //experiments:partition_stats -- --lambda_rounds=41-60 \
    --runs=results/fmnist/fedlaw/lenet_alpha0.1/fedlaw_seed9
"""

from collections.abc import Mapping, Sequence
import json
import os
from typing import Any, Optional

from absl import app
from absl import flags
import numpy as np

from experiments import data as data_lib
from experiments import partition
from experiments import run_files

# Runs no TFF computation; imported to drop TFF's default context, whose
# `__del__` prints a traceback at exit.
from tff_aggregators import runtime  # noqa: F401  # pylint: disable=unused-import
from experiments import training

LAMBDA_METRIC = 'train/finalizer/lambda'
# A class counts as one of a client's main classes above this share.
MAIN_CLASS_SHARE = 0.05
# A client is counted as mostly one class above this share of its data.
ONE_CLASS_SHARE = 0.9

_RUNS = flags.DEFINE_list('runs', None, 'Run directories (with config.json).')
_DATASET = flags.DEFINE_enum(
  'dataset', 'fmnist', data_lib.DATASETS, "The runs' data set."
)
_DATA_DIR = flags.DEFINE_string(
  'data_dir',
  None,
  f'Where the data set is (default for fmnist: {data_lib.FASHION_MNIST_DIR}).',
)
_TOP_K = flags.DEFINE_integer(
  'top_k', 4, 'How many largest clients to show.', lower_bound=1
)
_LAMBDA_ROUNDS = flags.DEFINE_string(
  'lambda_rounds',
  None,
  "FIRST-LAST: for FedLAW runs, also print the largest clients' mean "
  f"share of FedLAW's lambda ({LAMBDA_METRIC}) over these rounds.",
)


def run_label_counts(
  config: Mapping[str, Any], train_labels: np.ndarray, num_classes: int
) -> np.ndarray:
  """Examples per (client, class) of the partition a run's config made."""
  client_indices = partition.partition(
    config['partition'],
    train_labels,
    config['num_clients'],
    seed=config['seed'],
    alpha=config.get('alpha'),
    shards_per_client=config.get('shards_per_client'),
  )
  return partition.label_counts(train_labels, client_indices, num_classes)


def skew_stats(label_counts: np.ndarray, top_k: int) -> dict[str, Any]:
  """Measures of a partition's skew.

  Args:
    label_counts: Examples per (client, class).
    top_k: How many of the largest clients to describe.

  Returns:
    Client sizes; the `top_k` largest clients, their share of all examples and
    their main classes (class, share of the client) above `MAIN_CLASS_SHARE`;
    example-weighted means over clients of the label entropy (normalised by
    log(num_classes): 1 is uniform) and of the effective number of classes
    (exp of the entropy in nats); how many clients have more than
    `ONE_CLASS_SHARE` of their data in one class; per class the share its
    largest holder has (None for a class nobody holds), and its mean and
    largest value over classes.
  """
  counts = np.asarray(label_counts, np.float64)
  sizes = counts.sum(axis=1)
  if sizes.sum() <= 0:
    raise ValueError('The partition holds no examples.')
  top = [int(i) for i in np.argsort(-sizes, kind='stable')[:top_k]]
  held = sizes > 0
  shares = counts[held] / sizes[held, np.newaxis]
  with np.errstate(divide='ignore', invalid='ignore'):
    terms = np.where(shares > 0, shares * np.log(shares), 0.0)
  entropy = -terms.sum(axis=1)  # In nats.
  main_classes = {
    c: [
      (int(k), float(counts[c, k] / sizes[c]))
      for k in np.flatnonzero(counts[c] > MAIN_CLASS_SHARE * sizes[c])
    ]
    for c in top
  }
  class_totals = counts.sum(axis=0)
  by_class = [
    float(m / t) if t else None
    for m, t in zip(counts.max(axis=0), class_totals)
  ]
  holder_shares = [s for s in by_class if s is not None]
  return {
    'client_sizes': [int(s) for s in sizes],
    'top_clients': top,
    'top_share': float(sizes[top].sum() / sizes.sum()),
    'top_main_classes': main_classes,
    'weighted_label_entropy': float(
      np.average(entropy / np.log(counts.shape[1]), weights=sizes[held])
    ),
    'effective_classes': float(
      np.average(np.exp(entropy), weights=sizes[held])
    ),
    'one_class_clients': int(np.sum(shares.max(axis=1) > ONE_CLASS_SHARE)),
    'largest_holder_by_class': by_class,
    'largest_holder_share': float(np.mean(holder_shares)),
    'largest_holder_share_max': max(holder_shares),
  }


def lambda_by_client(
  rows: Sequence[Mapping[str, str]],
  config: Mapping[str, Any],
  first: int,
  last: int,
) -> np.ndarray:
  """FedLAW's lambda over rounds `first`-`last`, normalised, by client.

  Args:
    rows: The run's metrics rows (`run_files.read_metrics`).
    config: The run's config (seed, num_clients, clients_per_round).
    first: The first round.
    last: The last round.

  Returns:
    [rounds, num_clients]: each round's lambda over its sum, at the columns
    of its cohort's clients (zero for clients not sampled).

  Raises:
    ValueError: If a round has no lambda, one of the wrong length, or one
      that sums to zero (no client kept).
  """
  logged = run_files.metric_by_round(rows, LAMBDA_METRIC)
  missing = [n for n in range(first, last + 1) if n not in logged]
  if missing:
    raise ValueError(
      f'Rounds {missing[0]}..{missing[-1]} ({len(missing)} rounds) have no '
      f'{LAMBDA_METRIC}; only FedLAW runs log it, and only for rounds run.'
    )
  population, size = config['num_clients'], config['clients_per_round']
  by_client = np.zeros([last - first + 1, population])
  for i, n in enumerate(range(first, last + 1)):
    lam = np.asarray(logged[n], np.float64)
    if lam.shape[0] < size or np.any(lam[size:] != 0):
      raise ValueError(
        f'Round {n}: {LAMBDA_METRIC} has {lam.shape[0]} entries, not '
        f'{size} (clients_per_round) and zero padding.'
      )
    total = lam[:size].sum()
    if not total > 0:
      raise ValueError(f'Round {n}: lambda sums to {total} (no client kept).')
    cohort = training.cohort_indices(config['seed'], n, population, size)
    by_client[i, cohort] = lam[:size] / total
  return by_client


def parse_rounds(text: str) -> tuple[int, int]:
  """'41-60' -> (41, 60)."""
  try:
    first, last = (int(p) for p in text.split('-'))
  except ValueError:
    raise ValueError(
      f'Rounds {text!r} are not FIRST-LAST, e.g. 41-60.'
    ) from None
  if not 1 <= first <= last:
    raise ValueError(f'Rounds {text!r}: need 1 <= FIRST <= LAST.')
  return first, last


def describe_run(
  run_dir: str,
  image_data: data_lib.ImageData,
  top_k: int,
  rounds: Optional[tuple[int, int]] = None,
) -> dict[str, Any]:
  """`skew_stats` of a run's partition (and a FedLAW run's lambda share)."""
  config_path = os.path.join(run_dir, run_files.CONFIG_JSON)
  if not os.path.isfile(config_path):
    raise ValueError(
      f'{run_dir!r} has no {run_files.CONFIG_JSON}; pass a run directory.'
    )
  config = _read_json(config_path)
  fedlaw = rounds is not None and config.get('aggregator') == 'fedlaw'
  needed = ('partition', 'num_clients', 'seed') + (
    ('clients_per_round',) if fedlaw else ()
  )
  if any(k not in config for k in needed):
    raise ValueError(
      f'{config_path} lacks {[k for k in needed if k not in config]}; is it '
      'the config.json of an experiments binary run?'
    )
  counts = run_label_counts(
    config, image_data.train_labels, image_data.num_classes
  )
  written = os.path.join(run_dir, run_files.PARTITION_JSON)
  if os.path.isfile(written):
    if _read_json(written).get('label_counts') != counts.tolist():
      raise ValueError(
        f'The partition regenerated from {config_path} differs from '
        f'{written}: is --dataset/--data_dir the data the run used, or has '
        'experiments/partition.py changed since the run?'
      )
  stats = skew_stats(counts, top_k)
  if fedlaw:
    metrics = os.path.join(run_dir, run_files.METRICS_CSV)
    if not os.path.isfile(metrics):
      raise ValueError(f'{metrics} is missing; the run has not started.')
    by_client = lambda_by_client(
      run_files.read_metrics(run_dir), config, *rounds
    )
    stats['top_lambda_share'] = float(
      by_client[:, stats['top_clients']].sum(axis=1).mean()
    )
    stats['lambda_size_distance'] = float(
      np.mean(size_weight_distance(by_client, counts.sum(axis=1)))
    )
  return stats


def size_weight_distance(
  by_client: np.ndarray, client_sizes: np.ndarray
) -> np.ndarray:
  """Per round, the total-variation distance of lambda from size weights.

  The size weights (FedAvg's) of a round are its cohort's sizes over their
  sum, the cohort being the clients with nonzero lambda.

  Args:
    by_client: `lambda_by_client`'s [rounds, num_clients].
    client_sizes: Examples per client.

  Returns:
    [rounds]: half the L1 distance, 0 (the same weights) to 1.
  """
  sizes = np.where(by_client > 0, np.asarray(client_sizes, np.float64), 0.0)
  size_weights = sizes / sizes.sum(axis=1, keepdims=True)
  return 0.5 * np.abs(by_client - size_weights).sum(axis=1)


def _read_json(path: str) -> Any:
  with open(path) as f:
    try:
      return json.load(f)
    except json.JSONDecodeError as e:
      raise ValueError(f'{path} is not valid JSON: {e}') from e


def format_stats(stats: Mapping[str, Any]) -> str:
  """`describe_run`'s result as a few lines of text."""
  sizes = stats['client_sizes']
  lines = [
    f'client sizes: min {min(sizes)}, max {max(sizes)} '
    f'({max(sizes) / sum(sizes):.1%} of the examples), '
    f'{sum(s == 0 for s in sizes)} of {len(sizes)} empty',
    f'largest clients {stats["top_clients"]}: '
    f'{stats["top_share"]:.1%} of the examples',
  ]
  for client, classes in stats['top_main_classes'].items():
    shares = ', '.join(f'class {k} {s:.0%}' for k, s in classes)
    lines.append(f'  client {client} ({sizes[client]}): {shares}')
  if 'top_lambda_share' in stats:
    lines.append(
      "their mean share of FedLAW's lambda: "
      f"{stats['top_lambda_share']:.3f}; lambda's mean "
      'total-variation distance from the size weights: '
      f'{stats["lambda_size_distance"]:.3f}'
    )
  lines.append(
    'example-weighted label entropy (1 = uniform): '
    f'{stats["weighted_label_entropy"]:.3f}; effective classes '
    f'per client: {stats["effective_classes"]:.2f}'
  )
  lines.append(
    f'clients with over {ONE_CLASS_SHARE:.0%} of their data in '
    f'one class: {stats["one_class_clients"]}'
  )
  by_class = ' '.join(
    '-' if s is None else f'{s:.2f}' for s in stats['largest_holder_by_class']
  )
  lines.append(
    'share of a class its largest holder has: mean '
    f'{stats["largest_holder_share"]:.3f}, largest '
    f'{stats["largest_holder_share_max"]:.3f}; by class: '
    f'{by_class}'
  )
  return '\n'.join(lines)


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  if not _RUNS.value:
    raise app.UsageError('Pass --runs=<run directory>[,...].')
  data_dir = _DATA_DIR.value
  if data_dir is None:
    if _DATASET.value != 'fmnist':
      raise app.UsageError(f'Pass --data_dir for --dataset={_DATASET.value}.')
    data_dir = data_lib.FASHION_MNIST_DIR
  try:
    rounds = None
    if _LAMBDA_ROUNDS.value:
      rounds = parse_rounds(_LAMBDA_ROUNDS.value)
    image_data = data_lib.load(_DATASET.value, run_files.resolve_path(data_dir))
    for run in _RUNS.value:
      stats = describe_run(
        run_files.resolve_path(run), image_data, _TOP_K.value, rounds
      )
      print(f'{run}\n{format_stats(stats)}')
  except (data_lib.DataNotFoundError, ValueError) as e:
    raise SystemExit(f'error: {e}') from e


if __name__ == '__main__':
  app.run(main)
