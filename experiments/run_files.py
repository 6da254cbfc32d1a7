"""A run directory's files, readable without TensorFlow.

`config.json` (the run's flags) and `partition.json` (its clients' sizes and
label counts), written by `experiments.experiment`;
`metrics.csv` (one row per round, written by the training loop's
`tff.program.CSVFileReleaseManager`), `summary.json`, and where the loop's
`tff.program.FileProgramStateManager` keeps the state of a round and
where `tff.program.TensorBoardReleaseManager` writes.
"""

import csv
import json
import os
import shutil
from typing import Any, Optional

import numpy as np

CONFIG_JSON = 'config.json'
PARTITION_JSON = 'partition.json'
METRICS_CSV = 'metrics.csv'
SUMMARY_JSON = 'summary.json'
CHECKPOINT_DIR = 'checkpoints'
CHECKPOINT_PREFIX = 'program_state_'
TENSORBOARD_DIR = 'tensorboard'


def resolve_path(path: str) -> str:
  """Makes `path` absolute; under `bazel run`, relative to the user's cwd."""
  base = os.environ.get('BUILD_WORKING_DIRECTORY', os.getcwd())
  return os.path.join(base, os.path.expanduser(path))


def checkpoint_path(output_dir: str, round_num: int) -> str:
  """The directory of a run's saved state of `round_num` (may not exist)."""
  return os.path.join(
    output_dir, CHECKPOINT_DIR, f'{CHECKPOINT_PREFIX}{round_num}'
  )


def latest_checkpoint(output_dir: str) -> Optional[int]:
  """The newest round whose state a run saved, or None if it has none."""
  path = os.path.join(output_dir, CHECKPOINT_DIR)
  names = os.listdir(path) if os.path.isdir(path) else ()
  versions = [
    int(n[len(CHECKPOINT_PREFIX) :])
    for n in names
    if n.startswith(CHECKPOINT_PREFIX) and n[len(CHECKPOINT_PREFIX) :].isdigit()
  ]
  return max(versions, default=None)


def completed_rounds(output_dir: str) -> int:
  """How many rounds the run in `output_dir` completed (0 if none)."""
  return latest_checkpoint(output_dir) or 0


# Everything a run writes into its directory (`remove_run` deletes these).
RUN_ENTRIES = (
  CONFIG_JSON,
  PARTITION_JSON,
  METRICS_CSV,
  SUMMARY_JSON,
  'accuracy.png',
  CHECKPOINT_DIR,
  TENSORBOARD_DIR,
  'fedcda_history',
  'client_states',  # registry.CLIENT_STATE_DIR
)


def remove_run(output_dir: str) -> None:
  """Deletes a run's files from `output_dir`, leaving any other file there."""
  for name in RUN_ENTRIES:
    path = os.path.join(output_dir, name)
    if os.path.isdir(path):
      shutil.rmtree(path)
    elif os.path.exists(path):
      os.remove(path)


def write_text(path: str, text: str) -> None:
  """Writes `text` through a temporary file renamed into place."""
  temporary = f'{path}.tmp{os.getpid()}'
  with open(temporary, 'w') as f:
    f.write(text)
  os.replace(temporary, path)


def write_json(path: str, value: Any) -> None:
  """Writes `value` as JSON, never half-written (see `write_text`)."""
  write_text(path, json.dumps(value, indent=2, default=_to_builtin) + '\n')


def _to_builtin(value):
  if isinstance(value, np.ndarray):
    return value.tolist()
  if isinstance(value, np.generic):
    return value.item()
  raise TypeError(f'Not JSON serialisable: {type(value)}')


def read_metrics(output_dir: str) -> list[dict[str, str]]:
  """The rows of a run's metrics CSV (one per round, key = round)."""
  with open(os.path.join(output_dir, METRICS_CSV)) as f:
    return list(csv.DictReader(f))


def metric_by_round(rows: list[dict[str, str]], column: str) -> dict[int, Any]:
  """Round -> JSON-decoded value (number or list) where `column` is set."""
  return {int(r['key']): json.loads(r[column]) for r in rows if r.get(column)}


def accuracy_curve(
  rows: list[dict[str, str]], accuracy_metric: str
) -> tuple[list[int], list[float]]:
  """(rounds, accuracies) of the evaluated rounds of a metrics CSV."""
  column = f'test/{accuracy_metric}'
  points = [(int(r['key']), float(r[column])) for r in rows if r.get(column)]
  return [p[0] for p in points], [p[1] for p in points]
