"""A cell's runs, read from their files, and the statistics the reports print.

A run is summarised by `summarise` (its last-10-round accuracy, rounds, best
round, round time, curve); `collect` reads every run of a cell; `compare`
gives one (setting, method) row: our mean over seeds, the gain over its
baseline paired by seed, and the paper's numbers. Every std is the
population std over seeds (dividing by n).
"""

import collections
import dataclasses
import json
import os
from typing import Optional

import numpy as np

from experiments import run_files
from results.fmnist import cells

LAST_ROUNDS = 10  # The papers' metric: mean test accuracy of the last 10.
FORK_JSON = 'fork.json'

# (mean, std, number of seeds) of a statistic over seeds.
Stat = tuple[float, float, int]


def run_path(
  root: str, cell: cells.Cell, setting: str, method: str, seed: int
) -> str:
  """A run's directory (another cell's where `cell.shared` says so)."""
  cell_name, setting = cell.shared.get(method, (cell.name, setting))
  return os.path.join(
    root, 'results', 'fmnist', cell_name, setting, f'{method}_seed{seed}'
  )


def completed_rounds(directory: str) -> int:
  if not os.path.exists(os.path.join(directory, run_files.METRICS_CSV)):
    return 0
  return len(run_files.read_metrics(directory))


def window_accuracy(curve, window) -> Optional[float]:
  """Mean accuracy (%) of `curve` over the rounds `window`, or None."""
  by_round = dict(zip(*curve))
  if not window or any(r not in by_round for r in window):
    return None
  return 100 * float(np.mean([by_round[r] for r in window]))


def best_accuracy(curve, last_round) -> Optional[float]:
  """Best accuracy (%) of `curve` up to `last_round`, or None."""
  values = [a for r, a in zip(*curve) if r <= last_round]
  return 100 * max(values) if values else None


def _fork_of(directory: str):
  path = os.path.join(directory, FORK_JSON)
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


def summarise(directory: str, cell: cells.Cell, setting: str):
  """(last-10 mean accuracy %, rounds run, curve, ...) of a run, or None.

  A run past its setting's reduced protocol but short of the protocol's
  rounds is measured at the reduced protocol's (`ran` keeps its rounds).
  """
  if not completed_rounds(directory):
    return None
  rows = run_files.read_metrics(directory)
  ran = len(rows)
  planned_rounds = cell.planned_rounds(setting)
  if planned_rounds < ran < cell.rounds:
    rows = rows[:planned_rounds]
  rounds, accuracies = run_files.accuracy_curve(
    rows, 'sparse_categorical_accuracy'
  )
  if not rounds:
    return None
  done = len(rows)
  window = [r for r in rounds if r > done - LAST_ROUNDS]
  forked = _fork_of(directory)
  own_from = forked['round'] if forked else 0  # The source timed the rest.
  seconds = [
    float(r['round_seconds'])
    for r in rows
    if r.get('round_seconds') and int(r['key']) > own_from
  ]
  return collections.OrderedDict(
    accuracy=window_accuracy((rounds, accuracies), window),
    rounds=done,
    best=100 * max(accuracies),
    complete=done >= cell.rounds,
    planned=done >= planned_rounds,
    ran=ran,
    round_seconds=float(np.median(seconds)) if seconds else None,
    window=window,
    curve=(rounds, accuracies),
    forked=forked,
    rows=rows,
  )


def collect(root: str, cell: cells.Cell):
  """(setting, method) -> {seed: run summary} of every run there is."""
  summary = {}
  for setting in cell.settings:
    for method in cell.methods:
      runs = {}
      for seed in cell.seeds:
        result = summarise(
          run_path(root, cell, setting, method, seed), cell, setting
        )
        if result is not None:
          runs[seed] = result
      summary[(setting, method)] = runs
  return summary


def mean_std(values) -> Optional[Stat]:
  if not values:
    return None
  return float(np.mean(values)), float(np.std(values)), len(values)


def counted(runs):
  """The runs a mean over seeds counts: the finished ones, else all."""
  return {s: r for s, r in runs.items() if r['planned']} or runs


def seed_gains(run, base_run):
  """(last-10 gain, best-round gain) of a run over its baseline's, or None.

  Last 10: against the baseline over the run's own last 10 rounds (None if
  the baseline has not reached them). Best round: both runs' best over the
  rounds both reached.
  """
  base_window = window_accuracy(base_run['curve'], run['window'])
  last_ten = None if base_window is None else run['accuracy'] - base_window
  last = min(run['rounds'], base_run['rounds'])
  ours_best = best_accuracy(run['curve'], last)
  base_best = best_accuracy(base_run['curve'], last)
  best = (
    None if ours_best is None or base_best is None else ours_best - base_best
  )
  return last_ten, best


def shared_rounds(cell, method, baseline, run, base_run) -> int:
  """Rounds up to which two runs are one computation, else 0.

  That is where one run is forked (`Cell.forks`) from the other, or both
  from the same source: their first rows are copies.
  """
  sources = {
    name: cell.forks[name]
    for name, r in ((method, run), (baseline, base_run))
    if r['forked'] and name in cell.forks
  }
  shared = 0
  for name, (source, fork_round) in sources.items():
    other = baseline if name == method else method
    if source == other or sources.get(other, (None,))[0] == source:
      shared = max(shared, fork_round)
  return shared


@dataclasses.dataclass
class Row:
  """One (setting, method) of a cell: ours, our gain, the paper's."""

  setting: str
  method: str
  baseline: str
  runs: dict  # Seed -> run summary, every run there is.
  ours: Optional[Stat]  # Last-10 accuracy over the counted seeds.
  not_counted: list  # Seeds left out of `ours` (unfinished).
  gain: Optional[Stat]  # Against the baseline, paired by seed.
  best: Optional[Stat]  # Best-round accuracy over the counted seeds.
  best_gain: Optional[Stat]
  paper: Optional[float]
  paper_gain: Optional[float]  # None for the baseline itself.


def _paired_seeds(cell, method, baseline, runs, base_runs, counted_runs):
  """The counted seeds whose gain over the baseline can be measured.

  Not the baseline itself, nor a seed whose two runs have only rounds they
  share (a fork's copies).
  """
  return [
    s
    for s in sorted(set(counted_runs) & set(base_runs))
    if method != baseline
    and min(runs[s]['rounds'], base_runs[s]['rounds'])
    > shared_rounds(cell, method, baseline, runs[s], base_runs[s])
  ]


def compare(cell: cells.Cell, summary, setting: str, method: str) -> Row:
  """Our numbers of a (setting, method) against its baseline and the paper.

  An unfinished run's gain is against the baseline over the same rounds.
  """
  runs = summary[(setting, method)]
  use = counted(runs)
  baseline = cell.baseline_of(method)
  base_runs = summary[(setting, baseline)]
  gains = [
    seed_gains(runs[s], base_runs[s])
    for s in _paired_seeds(cell, method, baseline, runs, base_runs, use)
  ]
  paper = cell.paper.get((setting, method))
  paper_base = cell.paper.get((setting, baseline))
  paper_gain = (
    paper - paper_base
    if paper is not None and paper_base is not None and method != baseline
    else None
  )
  return Row(
    setting=setting,
    method=method,
    baseline=baseline,
    runs=runs,
    ours=mean_std([r['accuracy'] for r in use.values()]),
    not_counted=sorted(set(runs) - set(use)),
    gain=mean_std([g for g, _ in gains if g is not None]),
    best=mean_std([r['best'] for r in use.values()]),
    best_gain=mean_std([b for _, b in gains if b is not None]),
    paper=paper,
    paper_gain=paper_gain,
  )


def rows(cell: cells.Cell, summary) -> list[Row]:
  """Every (setting, method) of the cell, in its order."""
  return [
    compare(cell, summary, setting, method)
    for setting in cell.settings
    for method in cell.methods
  ]


def metric_curves(rows_of_run, column: str):
  """Label -> (rounds, per-round value) of a metrics column of a run's rows.

  A scalar column is one curve (label ''); a list column (one value per
  trainable tensor) is one curve per element (label 'tensor i').
  """
  by_round = run_files.metric_by_round(rows_of_run, column)
  if not by_round:
    return {}
  rounds, values = list(by_round), list(by_round.values())
  if not isinstance(values[0], list):
    return {'': (rounds, [float(v) for v in values])}
  return {
    f'tensor {i}': (rounds, [float(v[i]) for v in values])
    for i in range(len(values[0]))
  }


def seed_band(runs):
  """(rounds, mean, lowest, highest) accuracy (%) over the runs, per round.

  Over the rounds every run has evaluated (an unfinished seed shortens it).
  """
  curves = [dict(zip(*r['curve'])) for r in runs.values()]
  rounds = sorted(set.intersection(*(set(c) for c in curves)))
  values = 100 * np.array([[c[r] for r in rounds] for c in curves])
  return rounds, values.mean(axis=0), values.min(axis=0), values.max(axis=0)
