r"""Runs a Fashion-MNIST reproduction cell and writes its report.

  bazel run //results/fmnist:reproduce -- --cell=fedlaw
  bazel run //results/fmnist:reproduce -- --cell=fedlaw \
      --settings=mlp_alpha0.1 --methods=fedavg,fedlaw --seeds=8
  bazel run //results/fmnist:reproduce -- --cell=fedlaw --report_only
  bazel run //results/fmnist:reproduce -- --report_only  # Every cell's.

Each run is `//experiments:fmnist` in its own process, writing to
`results/fmnist/<cell>/<setting>/<method>_seed<seed>/`; a run that stopped
(killed, or a session that ended) resumes from its checkpoint when the same
command is given again, and finished runs are skipped. A run that computes
the same as another up to some round (`Cell.forks`) starts from that run's
checkpoint of that round. The reports (`report`: the cell's README.md and
APPENDIX.md, its curves as PNG, and the index results/fmnist/README.md) are
rewritten from whatever runs exist (and cells.py and the cells' notes as
they are then), and say how many rounds each run has reached: a number from
an unfinished run is labelled as such.
"""

import contextlib
import csv
import fcntl
import importlib.util
import os
import shutil
import subprocess
import sys
from typing import Iterator

from absl import app
from absl import flags
from absl import logging

from experiments import run_files
from results.fmnist import cells
from results.fmnist import report
from results.fmnist import runs

_CELL = flags.DEFINE_enum(
  'cell',
  None,
  sorted(cells.CELLS),
  'The cell (optional with --report_only: then every cell).',
)
_SETTINGS = flags.DEFINE_list('settings', None, 'Settings (default: all).')
_METHODS = flags.DEFINE_list('methods', None, 'Methods (default: all).')
_SEEDS = flags.DEFINE_list('seeds', None, "Seeds (default: the cell's).")
_ROUNDS = flags.DEFINE_integer(
  'rounds',
  None,
  "Stop at this many rounds (default: each setting's planned rounds, its "
  "reduced protocol's where it has one); the report labels a run below "
  'them as unfinished.',
)
_REPORT_ONLY = flags.DEFINE_bool('report_only', False, 'Only the report.')
_ROOT = flags.DEFINE_string(
  'root',
  None,
  'Where results/ is (default: the workspace under bazel run, else the '
  'current directory).',
)


def _root() -> str:
  return _ROOT.value or os.environ.get('BUILD_WORKSPACE_DIRECTORY', os.getcwd())


def run_dir(cell: cells.Cell, setting: str, method: str, seed: int) -> str:
  """A run's directory (another cell's where `cell.shared` says so)."""
  return runs.run_path(_root(), cell, setting, method, seed)


def _flag_args(values: dict[str, object]) -> list[str]:
  return [f'--{name}={value}' for name, value in values.items()]


_completed_rounds = runs.completed_rounds
FORK_JSON = runs.FORK_JSON


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
        'its source to reach the fork round.'
      ) from None
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
      'so this run starts from round 1.',
      directory,
      source_method,
      seed,
      fork_round,
    )
    return False
  staging = f'{directory}.forking'
  shutil.rmtree(staging, ignore_errors=True)
  shutil.copytree(checkpoint, run_files.checkpoint_path(staging, fork_round))
  rows = [
    r for r in run_files.read_metrics(source) if int(r['key']) <= fork_round
  ]
  with open(os.path.join(staging, run_files.METRICS_CSV), 'w') as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
  events = os.path.join(source, run_files.TENSORBOARD_DIR)
  if os.path.isdir(events):
    shutil.copytree(events, os.path.join(staging, run_files.TENSORBOARD_DIR))
  run_files.write_json(
    os.path.join(staging, FORK_JSON),
    dict(
      source=os.path.relpath(source, os.path.dirname(directory)),
      round=fork_round,
    ),
  )
  replaced = f'{directory}.replaced'
  shutil.rmtree(replaced, ignore_errors=True)
  if os.path.exists(directory):
    logging.info(
      '%s: unfinished and without checkpoints; made again.', directory
    )
    os.replace(directory, replaced)
  os.replace(staging, directory)
  shutil.rmtree(replaced, ignore_errors=True)
  logging.info('%s: forked from %s at round %d.', directory, source, fork_round)
  return True


def _needs_fork(directory: str, rounds: int) -> bool:
  """No run yet, or one short of `rounds` without checkpoints.

  The latter (a fresh checkout, made by a fork or not) would restart from
  round 1, so it is forked again.
  """
  return not os.path.exists(directory) or (
    run_files.latest_checkpoint(directory) is None
    and _completed_rounds(directory) < rounds
  )


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
        logging.info(
          "%s: its first %d rounds are the %s run's; nothing "
          'to run for %d rounds.',
          directory,
          fork_round,
          source_method,
          rounds,
        )
        return
      if (
        _needs_fork(directory, rounds)
        and not _fork(cell, setting, method, seed)
        and os.path.exists(directory)
      ):
        shutil.rmtree(directory)  # It restarts from round 1: none copied.
    fork_rounds = min(rounds, cell.planned_rounds(setting))
    for forked, (source_method, fork_round) in cell.forks.items():
      fork_dir = run_dir(cell, setting, forked, seed)
      if (
        source_method == method
        and rounds > fork_round
        and _needs_fork(fork_dir, fork_rounds)
      ):
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
    if not (to_fork and latest is None and done < cell.planned_rounds(setting)):
      logging.info('%s: done (%d rounds).', directory, rounds)
      return
    logging.info(
      '%s: unfinished and without checkpoints; run again from '
      'round 1 to round %d, the fork round.',
      directory,
      rounds,
    )
  _launch(cell, setting, method, seed, rounds)


def _launch(cell, setting, method, seed, rounds) -> None:
  """Runs `//experiments:fmnist` for one run up to `rounds`."""
  directory = run_dir(cell, setting, method, seed)
  arguments = [sys.executable, '-m', 'experiments.fmnist'] + _flag_args(
    dict(
      cell.run_flags(setting, method),
      seed=seed,
      rounds=rounds,
      output_dir=directory,
    )
  )
  logging.info('Running %s', ' '.join(arguments[1:]))
  environment = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
  held = _held_locks.get(directory)
  completed = subprocess.run(  # The binary holds the run's lock too.
    arguments,
    env=environment,
    check=False,
    pass_fds=(held.fileno(),) if held else (),
  )
  if completed.returncode != 0:
    raise SystemExit(
      f'error: the run in {directory} failed (exit '
      f'{completed.returncode}); rerun the same command to '
      'resume it.'
    )


def write_report(cell: cells.Cell) -> str:
  """Writes the cell's README.md, APPENDIX.md and curves (`report`)."""
  return report.write_report(cell, _root())


def write_index(all_cells=None) -> str:
  """Writes `results/fmnist/README.md` (`report.write_index`)."""
  return report.write_index(_root(), all_cells)


_CELLS_LOADED_AT = os.path.getmtime(cells.__file__)


def current_cell(cell: cells.Cell, path: str = cells.__file__) -> cells.Cell:
  """The cell as `path` (cells.py) defines it now, if edited since loaded.

  A driver runs for hours, and its reports are to match what `--report_only`
  would write from the same runs: protocol edits (titles, paper numbers)
  made while it runs are kept; the notes are read as each report is
  written. An unedited file, or one that does not load (caught mid-edit),
  keeps `cell`.
  """
  if os.path.getmtime(path) <= _CELLS_LOADED_AT:
    return cell
  try:
    spec = importlib.util.spec_from_file_location('_current_cells', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CELLS[cell.name]
  except Exception as e:  # pylint: disable=broad-except
    logging.warning(
      '%s did not load (%s: %s); the report keeps the cell as '
      'this driver started with it.',
      path,
      type(e).__name__,
      e,
    )
    return cell


def write_all_reports() -> list[str]:
  """Rewrites every cell's report and appendix and the index; their paths."""
  paths = []
  for cell in cells.CELLS.values():
    path = write_report(cell)
    paths += [path, report.appendix_path(path)]
  return paths + [write_index()]


def main(argv):
  del argv
  if _CELL.value is None:
    if not _REPORT_ONLY.value:
      raise SystemExit(
        f'error: give --cell (one of {sorted(cells.CELLS)}), '
        'or --report_only to rewrite every report.'
      )
    print('\n'.join(write_all_reports()))
    return
  cell = cells.CELLS[_CELL.value]
  for name, chosen, known in (
    ('settings', _SETTINGS.value, cell.settings),
    ('methods', _METHODS.value, cell.methods),
  ):
    unknown = sorted(set(chosen or ()) - set(known))
    if unknown:
      raise SystemExit(
        f'error: unknown {name} {unknown}; the cell has {sorted(known)}.'
      )
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
