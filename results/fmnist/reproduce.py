r"""Runs a Fashion-MNIST reproduction cell and writes its report.

  bazel run //results/fmnist:reproduce -- --cell=fedlaw
  bazel run //results/fmnist:reproduce -- --cell=fedlaw --settings=mlp_alpha0.1 \
      --methods=fedavg,fedlaw --seeds=8
  bazel run //results/fmnist:reproduce -- --cell=fedlaw --report_only
  bazel run //results/fmnist:reproduce -- --report_only  # Every cell's.

Each run is `//experiments:fmnist` in its own process, writing to
`results/fmnist/<cell>/<setting>/<method>_seed<seed>/`; a run that stopped
(killed, or a session that ended) resumes from its checkpoint when the same
command is given again, and finished runs are skipped. A run that computes
the same as another up to some round (`Cell.forks`) starts from that run's
checkpoint of that round. The report
(`results/fmnist/<cell>/README.md`, curves as PNG) is rewritten from whatever
runs exist (and cells.py as it is then), and says how many rounds each one
has reached: a number from an unfinished run is labelled as such.
"""

import collections
import contextlib
import csv
import fcntl
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from typing import Iterator

from absl import app
from absl import flags
from absl import logging
import numpy as np

from experiments import plotting
from experiments import run_files
from results.fmnist import cells

_CELL = flags.DEFINE_enum(
    'cell', None, sorted(cells.CELLS),
    'The cell (optional with --report_only: then every cell).')
_SETTINGS = flags.DEFINE_list('settings', None, 'Settings (default: all).')
_METHODS = flags.DEFINE_list('methods', None, 'Methods (default: all).')
_SEEDS = flags.DEFINE_list('seeds', None, 'Seeds (default: the cell\'s).')
_ROUNDS = flags.DEFINE_integer(
    'rounds', None,
    'Stop at this many rounds (default: each setting\'s planned rounds, its '
    'reduced protocol\'s where it has one); the report labels a run below '
    'them as unfinished.')
_REPORT_ONLY = flags.DEFINE_bool('report_only', False, 'Only the report.')
_ROOT = flags.DEFINE_string(
    'root', None,
    'Where results/ is (default: the workspace under bazel run, else the '
    'current directory).')

_LAST_ROUNDS = 10  # The papers' metric: mean test accuracy of the last 10.


def _root() -> str:
  return _ROOT.value or os.environ.get('BUILD_WORKSPACE_DIRECTORY', os.getcwd())


def run_dir(cell: cells.Cell, setting: str, method: str, seed: int) -> str:
  """A run's directory (another cell's where `cell.shared` says so)."""
  cell_name, setting = cell.shared.get(method, (cell.name, setting))
  return os.path.join(_root(), 'results', 'fmnist', cell_name, setting,
                      f'{method}_seed{seed}')


def _flag_args(values: dict[str, object]) -> list[str]:
  return [f'--{name}={value}' for name, value in values.items()]


def _completed_rounds(directory: str) -> int:
  if not os.path.exists(os.path.join(directory, run_files.METRICS_CSV)):
    return 0
  return len(run_files.read_metrics(directory))


FORK_JSON = 'fork.json'


_held_locks = {}  # Run directory -> its open lock file, while held.


@contextlib.contextmanager
def _lock(directory: str) -> Iterator[None]:
  """Holds `<directory>.lock`, so that two drivers never write one run.

  Exits with an error if another process holds it. The binary a driver
  launches for the run inherits the lock (`_launch`), so the lock lasts as
  long as the driver or the binary runs, and goes with both: a kill leaves
  none behind. Nested holds of one directory in one driver are allowed.
  """
  if directory in _held_locks:
    yield
    return
  os.makedirs(os.path.dirname(directory), exist_ok=True)
  with open(f'{directory}.lock', 'a+') as lock:
    try:
      fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      lock.seek(0)
      raise SystemExit(
          f'error: another process is running {directory}: it holds '
          f'{directory}.lock (taken by {lock.read().strip() or "?"}, a '
          'reproduce driver, or the binary it launched). Wait for it to '
          'finish; a run forked from another (Cell.forks) also waits for '
          'its source to reach the fork round.') from None
    lock.truncate(0)
    lock.write(f'pid {os.getpid()}\n')
    lock.flush()
    _held_locks[directory] = lock
    try:
      yield
    finally:
      del _held_locks[directory]


def _fork(cell, setting, method, seed) -> bool:
  """Starts `method`'s run from its source's checkpoint (`Cell.forks`).

  The source is run to the fork round first (`to_fork`, see `_run`). The
  new run directory gets the source's checkpoint of the fork round, its
  metrics rows up to it, its TensorBoard events and `fork.json` naming both;
  it is assembled beside the run directory and renamed into place, so a kill
  leaves either no fork or a whole one. It replaces an unfinished run there
  without checkpoints (`_needs_fork`), which would restart from round 1.
  Where the source has no checkpoint of that round, nothing is made or
  removed, and the run will start from round 1. Whether it was made.
  """
  source_method, fork_round = cell.forks[method]
  run_one(cell, setting, source_method, seed, fork_round, to_fork=True)
  source = run_dir(cell, setting, source_method, seed)
  directory = run_dir(cell, setting, method, seed)
  checkpoint = run_files.checkpoint_path(source, fork_round)
  if not os.path.isdir(checkpoint):
    logging.warning(
        '%s: the %s run of seed %d has no checkpoint of round %d any more, '
        'so this run starts from round 1.', directory, source_method, seed,
        fork_round)
    return False
  staging = f'{directory}.forking'
  shutil.rmtree(staging, ignore_errors=True)
  shutil.copytree(checkpoint, run_files.checkpoint_path(staging, fork_round))
  rows = [r for r in run_files.read_metrics(source)
          if int(r['key']) <= fork_round]
  with open(os.path.join(staging, run_files.METRICS_CSV), 'w') as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
  events = os.path.join(source, run_files.TENSORBOARD_DIR)
  if os.path.isdir(events):
    shutil.copytree(events, os.path.join(staging, run_files.TENSORBOARD_DIR))
  run_files.write_json(os.path.join(staging, FORK_JSON), dict(
      source=os.path.relpath(source, os.path.dirname(directory)),
      round=fork_round))
  replaced = f'{directory}.replaced'
  shutil.rmtree(replaced, ignore_errors=True)
  if os.path.exists(directory):
    logging.info('%s: unfinished and without checkpoints; made again.',
                 directory)
    os.replace(directory, replaced)
  os.replace(staging, directory)
  shutil.rmtree(replaced, ignore_errors=True)
  logging.info('%s: forked from %s at round %d.', directory, source,
               fork_round)
  return True


def _needs_fork(directory: str, rounds: int) -> bool:
  """No run yet, or one short of `rounds` without checkpoints.

  The latter (a fresh checkout, made by a fork or not) would restart from
  round 1, so it is forked again.
  """
  return (not os.path.exists(directory)
          or (run_files.latest_checkpoint(directory) is None
              and _completed_rounds(directory) < rounds))


def run_one(cell, setting, method, seed, rounds, *, to_fork=False) -> None:
  """Runs (or resumes) one run of the cell up to `rounds`.

  A method forked from another (`Cell.forks`) first has the source run to
  the fork round and starts from its checkpoint; a source stops at the fork
  round until its forks are made, since its later checkpoints replace that
  one. An unfinished fork without checkpoints (a fresh checkout) is made
  again, whichever of the two is driven (`_needs_fork`). It holds the run's
  lock (`_lock`), and a fork's while making it. `to_fork`: this is a source
  brought to the fork round (see `_run`).
  """
  directory = run_dir(cell, setting, method, seed)
  with _lock(directory):
    if method in cell.forks:
      source_method, fork_round = cell.forks[method]
      if rounds < fork_round:
        logging.info('%s: its first %d rounds are the %s run\'s; nothing '
                     'to run for %d rounds.', directory, fork_round,
                     source_method, rounds)
        return
      if (_needs_fork(directory, rounds)
          and not _fork(cell, setting, method, seed)
          and os.path.exists(directory)):
        shutil.rmtree(directory)  # It restarts from round 1: none copied.
    fork_rounds = min(rounds, cell.planned_rounds(setting))
    for forked, (source_method, fork_round) in cell.forks.items():
      fork_dir = run_dir(cell, setting, forked, seed)
      if (source_method == method and rounds > fork_round
          and _needs_fork(fork_dir, fork_rounds)):
        with _lock(fork_dir):
          if _needs_fork(fork_dir, fork_rounds):  # Made since the check?
            _fork(cell, setting, forked, seed)
    _run(cell, setting, method, seed, rounds, to_fork=to_fork)


def _run(cell, setting, method, seed, rounds, *, to_fork=False) -> None:
  """Runs the binary for one run up to `rounds`, unless it is there.

  A run is there when it has the rows of `rounds` and, where it keeps
  checkpoints, the state of that round too: a kill between a round's row
  and its checkpoint leaves the row alone, and the binary redoes the round.
  A fork's source (`to_fork`) without checkpoints short of its planned
  rounds is not there, whatever its rows: it restarts from round 1 in any
  case (a fresh checkout), so it is run to the fork round again for the
  checkpoint its forks start from, and redoes its later rows after them. A
  finished source is left as it is, and its forks start from round 1.
  """
  directory = run_dir(cell, setting, method, seed)
  latest = run_files.latest_checkpoint(directory)
  done = _completed_rounds(directory)
  if done >= rounds and (latest is None or latest >= rounds):
    if not (to_fork and latest is None
            and done < cell.planned_rounds(setting)):
      logging.info('%s: done (%d rounds).', directory, rounds)
      return
    logging.info('%s: unfinished and without checkpoints; run again from '
                 'round 1 to round %d, the fork round.', directory, rounds)
  _launch(cell, setting, method, seed, rounds)


def _launch(cell, setting, method, seed, rounds) -> None:
  """Runs `//experiments:fmnist` for one run up to `rounds`."""
  directory = run_dir(cell, setting, method, seed)
  arguments = [sys.executable, '-m', 'experiments.fmnist'] + _flag_args(
      dict(cell.run_flags(setting, method), seed=seed, rounds=rounds,
           output_dir=directory))
  logging.info('Running %s', ' '.join(arguments[1:]))
  environment = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
  held = _held_locks.get(directory)
  completed = subprocess.run(  # The binary holds the run's lock too.
      arguments, env=environment, check=False,
      pass_fds=(held.fileno(),) if held else ())
  if completed.returncode != 0:
    raise SystemExit(f'error: the run in {directory} failed (exit '
                     f'{completed.returncode}); rerun the same command to '
                     'resume it.')


def _summary(directory: str, cell: cells.Cell, setting: str):
  """(last-10 mean accuracy %, rounds run, curve, ...) of a run, or None.

  A run past its setting's reduced protocol but short of the protocol's
  rounds is measured at the reduced protocol's (`ran` keeps its rounds).
  """
  if not _completed_rounds(directory):
    return None
  rows = run_files.read_metrics(directory)
  ran = len(rows)
  planned_rounds = cell.planned_rounds(setting)
  if planned_rounds < ran < cell.rounds:
    rows = rows[:planned_rounds]
  rounds, accuracies = run_files.accuracy_curve(
      rows, 'sparse_categorical_accuracy')
  if not rounds:
    return None
  done = len(rows)
  window = [r for r in rounds if r > done - _LAST_ROUNDS]
  fork = os.path.join(directory, FORK_JSON)
  forked = None
  if os.path.exists(fork):
    with open(fork) as f:
      forked = json.load(f)
  own_from = forked['round'] if forked else 0  # The source timed the rest.
  seconds = [float(r['round_seconds']) for r in rows
             if r.get('round_seconds') and int(r['key']) > own_from]
  return collections.OrderedDict(
      accuracy=_window_accuracy((rounds, accuracies), window), rounds=done,
      best=100 * max(accuracies), complete=done >= cell.rounds,
      planned=done >= planned_rounds, ran=ran,
      round_seconds=float(np.median(seconds)) if seconds else None,
      window=window, curve=(rounds, accuracies), forked=forked, rows=rows)


def _best_accuracy(curve, last_round):
  """Best accuracy (%) of `curve` up to `last_round`, or None."""
  values = [a for r, a in zip(*curve) if r <= last_round]
  return 100 * max(values) if values else None


def _rounds_label(run) -> str:
  if run['complete']:
    label = str(run['rounds'])
  elif run['planned']:
    label = f'{run["rounds"]} (reduced protocol)'
    if run['ran'] > run['rounds']:
      label = (f'{run["rounds"]} (reduced protocol; run to {run["ran"]}, '
               f'measured at {run["rounds"]})')
  else:
    label = f'{run["rounds"]} (unfinished)'
  if run['forked']:
    label += (f', rounds 1-{run["forked"]["round"]} from '
              f'{os.path.basename(run["forked"]["source"])}')
  return label


def _window_accuracy(curve, window):
  """Mean accuracy (%) of `curve` over the rounds `window`, or None."""
  by_round = dict(zip(*curve))
  if not window or any(r not in by_round for r in window):
    return None
  return 100 * float(np.mean([by_round[r] for r in window]))


def _metric_curves(rows, column: str):
  """Label -> (rounds, per-round value) of a metrics column of `rows`.

  A scalar column is one curve (label ''); a list column (one value per
  trainable tensor) is one curve per element (label 'tensor i').
  """
  by_round = run_files.metric_by_round(rows, column)
  if not by_round:
    return {}
  rounds, values = list(by_round), list(by_round.values())
  if not isinstance(values[0], list):
    return {'': (rounds, [float(v) for v in values])}
  return {f'tensor {i}': (rounds, [float(v[i]) for v in values])
          for i in range(len(values[0]))}


def _mean_std(values):
  if not values:
    return None
  return float(np.mean(values)), float(np.std(values)), len(values)


def _counted(runs):
  """The runs a mean over seeds counts: the finished ones, else all."""
  return {s: r for s, r in runs.items() if r['planned']} or runs


def _seeds(n):
  return f'{n} seed{"s" if n > 1 else ""}'


def _format(stat, not_counted=()):
  if stat is None:
    return 'not run'
  mean, std, n = stat
  excluded = ''.join(f'; seed {s} unfinished, not counted'
                     for s in not_counted)
  return f'{mean:.2f} ± {std:.2f} ({_seeds(n)}{excluded})'


def _format_gain(stat, baseline):
  """A gain over seeds, naming its baseline and how many seeds it pairs."""
  if stat is None:
    return ''
  mean, std, n = stat
  return f'{_signed(mean)} ± {std:.2f} vs {baseline} ({_seeds(n)})'


def _seed_gains(run, base_run):
  """(last-10 gain, best-round gain) of a run over its baseline's, or None.

  Last 10: against the baseline over the run's own last 10 rounds (None if
  the baseline has not reached them). Best round: both runs' best over the
  rounds both reached.
  """
  base_window = _window_accuracy(base_run['curve'], run['window'])
  last_ten = None if base_window is None else run['accuracy'] - base_window
  last = min(run['rounds'], base_run['rounds'])
  ours_best = _best_accuracy(run['curve'], last)
  base_best = _best_accuracy(base_run['curve'], last)
  best = (None if ours_best is None or base_best is None
          else ours_best - base_best)
  return last_ten, best


def _shared_rounds(cell, method, baseline, run, base_run) -> int:
  """Rounds up to which two runs are one computation, else 0.

  That is where one run is forked (`Cell.forks`) from the other, or both
  from the same source: their first rows are copies.
  """
  sources = {name: cell.forks[name] for name, r in
             ((method, run), (baseline, base_run))
             if r['forked'] and name in cell.forks}
  shared = 0
  for name, (source, fork_round) in sources.items():
    other = baseline if name == method else method
    if source == other or sources.get(other, (None,))[0] == source:
      shared = max(shared, fork_round)
  return shared


def _signed(value) -> str:
  text = f'{value:+.2f}'
  return '+0.00' if text == '-0.00' else text


def _floor(value) -> str:
  """`value` to 4 decimals, rounded down (a lower bound stays one)."""
  return f'{np.floor(value * 1e4) / 1e4:.4f}'


def _paired_row(cell, setting, method, seed, run, base_run) -> str:
  """One seed of a method against its baseline (`_paired_lines`)."""
  baseline = cell.baseline_of(method)
  shared = _shared_rounds(cell, method, baseline, run, base_run)
  base_by_round = dict(zip(*base_run['curve']))
  ours = dict(zip(*run['curve']))
  rounds = [r for r in run['curve'][0] if r in base_by_round and r > shared]
  if len(rounds) < 4:  # Too few for quarters.
    return ''
  differences = np.array([100 * (ours[r] - base_by_round[r]) for r in rounds])
  last_ten, best = (
      '' if g is None else _signed(g) for g in _seed_gains(run, base_run))
  spans = np.array_split(differences, 4)
  quarters = ' / '.join(_signed(np.mean(q)) for q in spans)
  quarter_size = len(spans[-1])
  baseline_tail = [base_by_round[r] for r in rounds[-quarter_size:]]
  spread = f'{100 * np.std(baseline_tail):.2f}' if quarter_size > 1 else '-'
  second_half = differences[len(differences) // 2:]
  largest = second_half[np.argmax(np.abs(second_half))]
  label = f'{len(rounds)}'
  if shared:
    label += f' (rounds {rounds[0]}-{rounds[-1]}; 1-{shared} shared)'
  if not (run['planned'] and base_run['planned']):
    label += ' (unfinished)'
  return (f'| {setting} | {method} vs {baseline} | {seed} | {label} | '
          f'{last_ten} | {best} | {quarters} | '
          f'{int(np.sum(differences > 0))} of {len(rounds)} | '
          f'{int(np.sum(spans[-1] > 0))} of {quarter_size} | '
          f'{_signed(largest)} | {spread} |')


def _paired_lines(cell: cells.Cell, summary) -> list[str]:
  """Every seed of every method against its baseline, round by round.

  Over the rounds both runs have evaluated, after any they share
  (`_shared_rounds`), and at least 4: the quarters (the mean difference over
  four consecutive spans, equal to within a round), the rounds ahead, the
  signed largest gap in the second half, and the baseline's spread (std)
  over the last quarter.
  """
  rows = []
  for setting in cell.settings:
    for method in cell.methods:
      if method == cell.baseline_of(method):
        continue
      runs = summary[(setting, method)]
      base_runs = summary[(setting, cell.baseline_of(method))]
      for seed in sorted(set(runs) & set(base_runs)):
        rows.append(_paired_row(cell, setting, method, seed, runs[seed],
                                base_runs[seed]))
  rows = [r for r in rows if r]
  if not rows:
    return []
  return [
      'Per seed, each method against its baseline, in accuracy points '
      '(method minus baseline), over the rounds both runs have, after any '
      'they share (a fork\'s copied rounds). Every seed is listed, '
      'unfinished ones too. Last 10 and best round: the seed\'s gains as '
      'the table above defines them, over all rounds, shared ones '
      'included (last 10 is blank where the baseline has not reached the '
      'method\'s last 10 rounds). The other columns cover the compared '
      'rounds only. Quarters: the mean difference over four consecutive spans '
      'of those rounds, equal to within a round. Ahead: rounds the method '
      'is strictly above. Largest gap: the difference of largest size in '
      'the second half of those rounds, with its sign. Baseline spread: '
      'the std of the baseline\'s accuracy over their last quarter '
      '(round-to-round noise, plus any trend); - where that quarter is a '
      'single round.', '',
      '| setting | method | seed | rounds compared | last 10 | best round | '
      'quarters | ahead | ahead, last quarter | largest gap, second half | '
      'baseline spread, last quarter |',
      '|---|---|---|---|---|---|---|---|---|---|---|'] + rows + ['']


def _metric_row(setting, method, seed, column, run) -> str:
  """A per-round metric of a run: early, lowest and late lowest values."""
  curves = _metric_curves(run['rows'], column)
  if not curves:
    return ''
  values = np.array([v for _, v in curves.values()])  # elements x rounds
  early = values[:, :max(1, int(np.ceil(values.shape[1] / 10)))].mean(axis=1)
  early_text = (f'{early.min():.4f}' if early.size == 1
                else f'{early.min():.4f}-{early.max():.4f}')
  late = values[:, values.shape[1] // 2:]
  rounds = f'{values.shape[1]}' + ('' if run['planned'] else ' (unfinished)')
  return (f'| {setting} | {method} | {seed} | {column.rsplit("/", 1)[-1]} | '
          f'{rounds} | {early_text} | {_floor(values.min())} | '
          f'{_floor(late.min())} |')


def _metric_lines(cell: cells.Cell, summary) -> list[str]:
  """The plotted metrics of every run that reports them, summarised.

  Over the rounds that report the metric: the mean over their first tenth
  (rounded up; of a list metric, one value per tensor or layer, the range of
  the per-element means), the lowest value, and the lowest over their second
  half (both rounded down).
  """
  rows = [_metric_row(setting, method, seed, column, run)
          for setting in cell.settings for method in cell.methods
          for seed, run in sorted(summary[(setting, method)].items())
          for column in cell.plotted_metrics]
  rows = [r for r in rows if r]
  if not rows:
    return []
  return [
      'Plotted metrics per run, over the rounds that report them. Early: '
      'the mean over the first tenth of those rounds (for a list metric, '
      'one value per tensor or layer: the range of the per-element means). '
      'Lowest: over every round and element. Late lowest: over the second '
      'half of those rounds. Lowest values are rounded down.', '',
      '| setting | method | seed | metric | rounds | early | lowest | late '
      'lowest |', '|---|---|---|---|---|---|---|---|'] + rows + ['']


def write_report(cell: cells.Cell) -> str:
  """Writes `results/fmnist/<cell>/README.md` and the curves; returns path."""
  base = os.path.join(_root(), 'results', 'fmnist', cell.name)
  os.makedirs(base, exist_ok=True)
  lines = [f'# {cell.title}', '',
           f'Protocol and paper numbers: `{cell.source}`. Metric: mean test '
           f'accuracy (%) of the last {_LAST_ROUNDS} rounds, mean ± std over '
           'seeds (every std in this report is the population std, dividing '
           'by n); test split minus the proxy set for every method. '
           f'Protocol: {cell.rounds} rounds, seeds '
           f'{", ".join(map(str, cell.seeds))}. A run that has not reached '
           'its planned rounds is marked unfinished: its number is the '
           'mean of its last 10 rounds, and its gain is against the '
           'baseline over the same rounds. A mean over seeds counts only a '
           'method\'s finished runs where it has any, else its unfinished '
           'ones. A gain pairs each counted seed with the baseline\'s run of '
           'that seed, leaves out a seed whose baseline has not reached the '
           'rounds compared or whose two runs have only rounds they share '
           '(a fork\'s copies), and names how many seeds it pairs.', '']
  if cell.reduced_rounds:
    lines += [f'**Reduced protocol: {_reduced_text(cell)} of the paper\'s '
              f'{cell.rounds} rounds.** {cell.reduced}', '']
  best_columns = (' ours, best round | our gain, best round |'
                  if cell.best_round else '')
  lines += [
           'Regenerate: `bazel run //results/fmnist:reproduce -- '
           f'--cell={cell.name}` (resumes unfinished runs).', '',
           '| setting | method | paper | ours | paper gain | our gain |'
           f'{best_columns} rounds run (per seed) | median s / round |',
           '|---|---|---|---|---|---|' + '---|' * (2 * cell.best_round)
           + '---|---|']
  summary = {}
  plotted = []
  for setting in cell.settings:
    curves = {}
    for method in cell.methods:
      runs = {}
      for seed in cell.seeds:
        result = _summary(run_dir(cell, setting, method, seed), cell,
                          setting)
        if result is not None:
          runs[seed] = result
      summary[(setting, method)] = runs
      if runs:
        first = runs[min(runs)]
        curves[f'{method} (seed {min(runs)})'] = first['curve']
    if curves:
      plotted.append(f'{setting}.png')
      plotting.plot_accuracy(
          curves, os.path.join(base, plotted[-1]),
          title=f'{cell.name}: {setting}')
    for column in cell.plotted_metrics:
      series = {}
      for method in cell.methods:
        runs = summary[(setting, method)]
        if runs:
          curves_of_run = _metric_curves(runs[min(runs)]['rows'], column)
          for label, curve in curves_of_run.items():
            series[f'{method}, {label}' if label else method] = curve
      if series:
        name = column.rsplit('/', 1)[-1]
        plotted.append(f'{setting}_{name}.png')
        plotting.plot_accuracy(
            series, os.path.join(base, plotted[-1]),
            title=f'{cell.name}: {setting}, {name}', ylabel=name)
    for method in cell.methods:
      runs = summary[(setting, method)]
      counted = _counted(runs)
      ours = _mean_std([r['accuracy'] for r in counted.values()])
      baseline = cell.baseline_of(method)
      base_runs = summary[(setting, baseline)]
      # The baseline has no gain over itself, nor a run over rounds that
      # are all one computation with its baseline's (a fork's copies).
      common = [s for s in sorted(set(counted) & set(base_runs))
                if method != baseline
                and min(runs[s]['rounds'], base_runs[s]['rounds'])
                > _shared_rounds(cell, method, baseline, runs[s],
                                 base_runs[s])]
      # Against the baseline over the same rounds (an unfinished run is
      # compared with the baseline at the rounds it reached).
      seed_gains = [_seed_gains(runs[s], base_runs[s]) for s in common]
      gain = _mean_std([g for g, _ in seed_gains if g is not None])
      paper = cell.paper.get((setting, method))
      paper_base = cell.paper.get((setting, baseline))
      paper_gain = (f'{_signed(paper - paper_base)} vs {baseline}'
                    if paper is not None and paper_base is not None
                    and method != baseline else '')
      our_gain = _format_gain(gain, baseline)
      rounds = ', '.join(
          _rounds_label(r) for _, r in sorted(runs.items())) or '-'
      best = ''
      if cell.best_round:
        best_gain = _mean_std([b for _, b in seed_gains if b is not None])
        best_mean = _mean_std([r['best'] for r in counted.values()])
        best = f' {_format(best_mean)} | '
        best += _format_gain(best_gain, baseline) + ' |'
      seconds = ', '.join(f'{r["round_seconds"]:.1f}'
                          for _, r in sorted(runs.items())
                          if r['round_seconds'] is not None) or '-'
      lines.append(
          f'| {setting} | {method} | '
          f'{"" if paper is None else f"{paper:.2f}"} | '
          f'{_format(ours, sorted(set(runs) - set(counted)))} | '
          f'{paper_gain} | {our_gain} |{best} {rounds} | {seconds} |')
  for name in os.listdir(base):  # Plots of runs that are gone.
    if name.endswith('.png') and name not in plotted:
      os.remove(os.path.join(base, name))
  lines += ['', 'Curves (first seed of each method): ' + ', '.join(
      f'[{name}]({name})' for name in sorted(plotted)), '']
  lines += _paired_lines(cell, summary) + _metric_lines(cell, summary)
  if cell.deviations:
    lines += ['Differences from the paper\'s protocol:', '']
    lines += [f'- {d}' for d in cell.deviations] + ['']
  if cell.discussion:
    lines += ['Discussion of the runs so far:', '']
    lines += [f'- {d}' for d in cell.discussion] + ['']
  path = os.path.join(base, 'README.md')
  run_files.write_text(path, '\n'.join(lines))
  run_files.write_json(os.path.join(base, 'summary.json'), {
      f'{setting}/{method}': {
          str(seed): {k: v for k, v in r.items()
                      if k not in ('curve', 'window', 'rows')}
          for seed, r in runs.items()}
      for (setting, method), runs in summary.items()})
  return path


def _round_seconds(cell, measured, setting, method):
  """A run's round time: measured, else from the closest measured run.

  In order: this setting and method, then its baselines (FedProx + LWS ->
  FedProx -> FedAvg); then the same in the settings with the same model
  (round time follows model and method, hardly the partition). None if none
  is measured.
  """
  chain = [method]
  while cell.baseline_of(chain[-1]) not in chain:
    chain.append(cell.baseline_of(chain[-1]))
  model = cell.run_flags(setting, method).get('model')
  same_model = [s for s in cell.settings
                if cell.run_flags(s, method).get('model') == model]
  candidates = [(setting, m) for m in chain]
  candidates += [(s, m) for m in chain for s in same_model]
  for key in candidates:
    if measured.get(key):
      return float(np.median(measured[key]))
  return None


def _reduced_text(cell: cells.Cell) -> str:
  """'80' where every setting is reduced to 80, else '80 (a, b), 60 (c)'."""
  settings_of = collections.defaultdict(list)
  for setting, rounds in cell.reduced_rounds.items():
    settings_of[rounds].append(setting)
  if len(settings_of) == 1 and set(cell.reduced_rounds) == set(cell.settings):
    return str(next(iter(settings_of)))
  return ', '.join(f'{rounds} ({", ".join(settings)})'
                   for rounds, settings in settings_of.items())


def _forked_rounds(cell, method) -> int:
  """The rounds a run of `method` has from its fork's source (or 0)."""
  return cell.forks.get(method, (None, 0))[1]


def write_index(all_cells=tuple(cells.CELLS.values())) -> str:
  """Writes `results/fmnist/README.md`: every cell, its runs and status."""
  base = os.path.join(_root(), 'results', 'fmnist')
  rows = []
  spreads = []  # (fastest, slowest, where): the runs of one setting, method.
  for cell in all_cells:
    planned = len(cell.settings) * len(cell.methods) * len(cell.seeds)
    finished = set()  # (setting, method, seed): runs at their planned rounds.
    seconds = collections.defaultdict(list)
    own_rounds = {(s, m): max(0, cell.planned_rounds(s)
                              - _forked_rounds(cell, m))
                  for s in cell.settings for m in cell.methods}
    for setting in cell.settings:
      for method in cell.methods:
        for seed in cell.seeds:
          result = _summary(run_dir(cell, setting, method, seed), cell,
                          setting)
          if result is None:
            continue
          if result['planned']:
            finished.add((setting, method, seed))
          if result['round_seconds'] is not None:
            seconds[(setting, method)].append(result['round_seconds'])
    hours = ', '.join(
        f'{setting}/{method} '
        f'{np.median(s) * own_rounds[(setting, method)] / 3600:.1f}'
        for (setting, method), s in seconds.items()) or 'not measured'
    spreads += [(min(s), max(s), f'{cell.name} {setting}/{method}')
                for (setting, method), s in seconds.items() if len(s) > 1]
    to_go, unknown = 0.0, 0
    for setting in cell.settings:
      for method in cell.methods:
        for seed in cell.seeds:
          # An unfinished run restarts (no checkpoints are committed); a
          # fork's first rounds come from its source's checkpoint, unless
          # the source is finished: it is not rerun, and the fork starts
          # from round 1 (`_run`).
          rounds_left = own_rounds[(setting, method)]
          if (method in cell.forks
              and (setting, cell.forks[method][0], seed) in finished):
            rounds_left = cell.planned_rounds(setting)
          if ((setting, method, seed) in finished or not rounds_left
              or method in cell.shared):  # A shared run is counted there.
            continue
          estimate = _round_seconds(cell, seconds, setting, method)
          if estimate is None:
            unknown += 1
          else:
            to_go += rounds_left * estimate / 3600
    to_go_text = f'{to_go:.1f}' + (
        f' + {unknown} run{"s" if unknown > 1 else ""} unknown'
        if unknown else '')
    report = os.path.join(cell.name, 'README.md')
    link = (f'[{report}]({report})'
            if os.path.exists(os.path.join(base, report)) else 'not run yet')
    title = cell.title + (
        f' **reduced: {_reduced_text(cell)} of {cell.rounds} rounds**'
        if cell.reduced_rounds else '')
    rows.append(f'| {cell.name} | {title} | {len(finished)} / {planned} | '
                f'{hours} | {to_go_text} | {link} |')
  spread = ''
  if spreads:
    fastest, slowest, where = max(spreads, key=lambda r: r[1] / r[0])
    spread = (f'; the runs of one setting and method have taken from '
              f'{fastest:.1f} to {slowest:.1f} s per round ({where}), on '
              'machines of the same size, alone or beside another run')
  lines = ['# Fashion-MNIST reproduction of the five papers', '',
           'Each cell runs `//experiments:fmnist` with its paper\'s protocol '
           '(`cells.py`) and reports the paper\'s numbers beside ours, from '
           'real runs only. Regenerate a cell with `bazel run '
           '//results/fmnist:reproduce -- --cell=<name>` (it skips finished '
           'runs, resumes an unfinished one from its checkpoint in the same '
           'checkout, and rewrites the report); `--report_only` rewrites the '
           'report from the run files (without `--cell`, every report; '
           '`tests/fmnist_reports_test` checks that the committed reports '
           'are what it writes from the committed run files). Checkpoints '
           'are not committed: in a fresh checkout an unfinished run starts '
           'again from round 1.', '',
           'Differences every cell shares with TFF: the client optimizer '
           'state is reset every round; a client\'s data is repeated E times '
           'and then batched, so a batch can straddle two epochs.', '',
           'Hours per run: the planned rounds (the protocol\'s, or a '
           'reduced protocol\'s where the cell says so; a forked run\'s '
           'own rounds, after its fork) times the median round '
           'time measured so far on the project\'s 2-core machines (per '
           'setting and method, over the runs that exist; a round\'s '
           'training only, '
           f'evaluation and checkpoints add to it{spread}). Hours to go, '
           'from a fresh checkout: the rounds not run yet of every planned '
           'run, where an unfinished run counts from round 1 as it restarts '
           'there (a forked run\'s first rounds are its source\'s, '
           'unless the source is finished: it is not rerun, and the fork '
           'runs from round 1), each '
           'at its measured round '
           'time, else at an estimate from another run (`_round_seconds`: '
           'its baseline, or the same method on the same model); runs with '
           'neither are counted as unknown.', '',
           '| cell | protocol | runs finished / planned | hours per run '
           '(measured) | hours to go (estimated) | report |',
           '|---|---|---|---|---|---|']
  lines += rows
  path = os.path.join(base, 'README.md')
  run_files.write_text(path, '\n'.join(lines) + '\n')
  return path


_CELLS_LOADED_AT = os.path.getmtime(cells.__file__)


def current_cell(cell: cells.Cell, path: str = cells.__file__) -> cells.Cell:
  """The cell as `path` (cells.py) defines it now, if edited since loaded.

  A driver runs for hours, and its reports are to match what `--report_only`
  would write from the same runs: discussion items added while it runs are
  kept. An unedited file, or one that does not load (caught mid-edit), keeps
  `cell`.
  """
  if os.path.getmtime(path) <= _CELLS_LOADED_AT:
    return cell
  try:
    spec = importlib.util.spec_from_file_location('_current_cells', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CELLS[cell.name]
  except Exception as e:  # pylint: disable=broad-except
    logging.warning('%s did not load (%s: %s); the report keeps the cell as '
                    'this driver started with it.', path, type(e).__name__, e)
    return cell


def write_all_reports() -> list[str]:
  """Rewrites every cell's report and the index; returns their paths."""
  return [write_report(c) for c in cells.CELLS.values()] + [write_index()]


def main(argv):
  del argv
  if _CELL.value is None:
    if not _REPORT_ONLY.value:
      raise SystemExit(f'error: give --cell (one of {sorted(cells.CELLS)}), '
                       'or --report_only to rewrite every report.')
    print('\n'.join(write_all_reports()))
    return
  cell = cells.CELLS[_CELL.value]
  for name, chosen, known in (('settings', _SETTINGS.value, cell.settings),
                              ('methods', _METHODS.value, cell.methods)):
    unknown = sorted(set(chosen or ()) - set(known))
    if unknown:
      raise SystemExit(f'error: unknown {name} {unknown}; the cell has '
                       f'{sorted(known)}.')
  if not _REPORT_ONLY.value:
    seeds = [int(s) for s in _SEEDS.value] if _SEEDS.value else cell.seeds
    for seed in seeds:
      for setting in _SETTINGS.value or cell.settings:
        rounds = _ROUNDS.value or cell.planned_rounds(setting)
        for method in _METHODS.value or cell.methods:
          run_one(cell, setting, method, seed, rounds)
          write_report(current_cell(cell))
  print(write_report(current_cell(cell)))
  print(write_index(tuple(current_cell(c) for c in cells.CELLS.values())))


if __name__ == '__main__':
  app.run(main)
