"""Mutation testing of the rule files, on a copy of the repository.

    .venv/bin/python tools/mutate.py                  # 8 mutants per file
    .venv/bin/python tools/mutate.py \
        --files=tff_aggregators/finalizers/fedlws.py --max_mutants=20 \
        --seed=0 --report=/tmp/mutants.json

Copies the repository's tracked files (as they are in the working tree) to a
temporary directory and, for each rule file (tff_aggregators/aggregators,
finalizers, client_works), makes one small change at a time (a mutant):

  * an arithmetic or comparison operator swapped (+ -, * /, < <=, > >=,
    == !=), a unary minus dropped;
  * a number changed (0 -> 1, 1 -> 0 or 2, x -> 2x for others);
  * True <-> False, and/or;
  * a TF function swapped for its twin (minimum/maximum, reduce_sum/
    reduce_mean, logical_and/logical_or, floor/ceil, ...).

Each mutant that still compiles runs the file's fast test modules (the
`TESTS` table; `module` or `module:Class.test_name`) in the copy; a failing
or timed-out run kills it. The working tree is never written to. Mutants are
visited in a seeded random order, at most `--max_mutants` per file.

Output: per file, mutants run, killed, survived (with the changed line), and
the score killed / run, printed and optionally written as JSON (`--report`).
A survivor is either a missing test or an equivalent mutant (a change that
cannot alter behaviour, e.g. in an error message's condition that no input
reaches); docs/testing.md records how each surviving one was judged.

Outside the CI suite: the default (8 mutants per file, seed 0) takes about
an hour on 2 cores (each mutant re-imports TensorFlow and rebuilds the TFF
computations); `--max_mutants=0` runs all of them (about 1,000).
"""

import argparse
import dataclasses
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tokenize

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RULE_DIRS = (
  'tff_aggregators/aggregators',
  'tff_aggregators/finalizers',
  'tff_aggregators/client_works',
)

# Rule file -> fast test modules (or `module:Class.test_name` selections).
TESTS = {
  'tff_aggregators/aggregators/collect.py': ['library.collect_test'],
  'tff_aggregators/aggregators/dropped_clients.py': [
    'library.dropped_clients_test'
  ],
  'tff_aggregators/aggregators/fedglad.py': [
    'library.fedglad_test',
    'library.fedglad_process_test',
  ],
  'tff_aggregators/aggregators/fedlws_stats.py': [
    'library.fedlws_stats_test',
    'library.fedlws_process_test',
  ],
  'tff_aggregators/finalizers/fedcda.py': [
    'library.fedcda_test:FedCdaTest.test_rounds_match_numpy_k3_b2',
    'library.fedcda_test:FedCdaTest.test_rounds_match_numpy_b1_exhaustive_large_smoothness',
    'library.fedcda_test:FedCdaTest.test_small_cohorts_with_empty_and_non_finite_clients',
    'library.fedcda_test:FedCdaTest.test_rounds_match_numpy_tensorwise_norm',
    'library.fedcda_test:FedCdaTest.test_rounds_match_numpy_random',
    'library.fedcda_test:FedCdaTest.test_history_bound_is_inclusive',
    'library.fedcda_test:FedCdaTest.test_options_default_to_the_papers_settings',
  ],
  'tff_aggregators/finalizers/fedlaw.py': [
    'library.fedlaw_test',
    'library.fedlaw_rounds_test',
  ],
  'tff_aggregators/finalizers/fedlws.py': ['library.fedlws_test'],
  'tff_aggregators/finalizers/fedsa.py': ['library.fedsa_test'],
  'tff_aggregators/finalizers/glad_adaptive.py': ['library.glad_adaptive_test'],
  'tff_aggregators/finalizers/on_collected.py': [
    'library.on_collected_test',
    'library.fedsa_test',
  ],
  'tff_aggregators/finalizers/server_step.py': [
    'library.server_step_test',
    'library.fedlws_test',
    'library.nonfinite_step_test',
  ],
  'tff_aggregators/client_works/identified.py': [
    'library.fedcda_client_ids_test',
    'library.fedcda_test:FedCdaTest.test_client_reports_the_last_epoch_loss_last_epoch',
    'library.fedcda_test:FedCdaTest.test_small_cohorts_with_empty_and_non_finite_clients',
  ],
  'tff_aggregators/client_works/proximal.py': ['library.proximal_test'],
  'tff_aggregators/client_works/stateful.py': [
    'library.stateful_client_work_test'
  ],
  'tff_aggregators/client_works/with_hparams.py': ['library.proximal_test'],
}

_OPERATORS = {
  '+': ['-'],
  '-': ['+'],
  '*': ['/'],
  '/': ['*'],
  '//': ['/'],
  '<': ['<='],
  '<=': ['<'],
  '>': ['>='],
  '>=': ['>'],
  '==': ['!='],
  '!=': ['=='],
  '**': ['*'],
}
_NAMES = {
  'True': ['False'],
  'False': ['True'],
  'and': ['or'],
  'or': ['and'],
  'minimum': ['maximum'],
  'maximum': ['minimum'],
  'reduce_sum': ['reduce_mean'],
  'reduce_mean': ['reduce_sum'],
  'reduce_all': ['reduce_any'],
  'reduce_any': ['reduce_all'],
  'logical_and': ['logical_or'],
  'logical_or': ['logical_and'],
  'floor': ['ceil'],
  'ceil': ['floor'],
  'argmin': ['argmax'],
  'argmax': ['argmin'],
  'sqrt': ['square'],
  'square': ['sqrt'],
}


@dataclasses.dataclass
class Mutant:
  path: str
  line: int
  start: int  # Offset in the file's text.
  end: int
  old: str
  new: str

  def describe(self, text: str) -> str:
    line = text.splitlines()[self.line - 1].strip()
    return f'{self.path}:{self.line}: {self.old!r} -> {self.new!r} in `{line}`'


def _number_mutations(token: str) -> list[str]:
  try:
    value = float(token.replace('_', ''))
  except ValueError:
    return []
  if value == 0:
    return ['1']
  if value == 1:
    return ['0', '2']
  return [
    repr(2 * value)
    if '.' in token or 'e' in token.lower()
    else str(2 * int(value))
  ]


def _docstring_lines(text: str) -> set[int]:
  """Lines of strings that stand alone as statements (docstrings)."""
  import ast  # pylint: disable=g-import-not-at-top

  lines = set()
  for node in ast.walk(ast.parse(text)):
    if (
      isinstance(node, ast.Expr)
      and isinstance(node.value, ast.Constant)
      and isinstance(node.value.value, str)
    ):
      lines.update(range(node.lineno, node.end_lineno + 1))
  return lines


def mutants_of(path: str, text: str) -> list[Mutant]:
  """Every single-token mutant of `text` that still compiles."""
  offsets = [0]
  for line in text.splitlines(keepends=True):
    offsets.append(offsets[-1] + len(line))
  skip = _docstring_lines(text)
  result = []
  tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
  for i, token in enumerate(tokens):
    (row, col), (end_row, end_col) = token.start, token.end
    if row in skip or row != end_row:
      continue
    previous = tokens[i - 1].string if i else ''
    following = tokens[i + 1].string if i + 1 < len(tokens) else ''
    if token.type == tokenize.OP and token.string in _OPERATORS:
      if token.string in ('*', '**', '/') and (
        previous in ('(', ',', '') or following in (',', ')')
      ):
        continue  # *args, **kwargs, and the bare * and / of a signature.
      replacements = list(_OPERATORS[token.string])
      if token.string == '-' and previous in ('(', ',', '=', '[', 'return'):
        replacements = ['']  # Unary minus dropped.
    elif token.type == tokenize.NUMBER:
      replacements = _number_mutations(token.string)
    elif token.type == tokenize.NAME and token.string in _NAMES:
      replacements = _NAMES[token.string]
    else:
      continue
    start, end = offsets[row - 1] + col, offsets[row - 1] + end_col
    for new in replacements:
      mutated = text[:start] + new + text[end:]
      try:
        compile(mutated, path, 'exec')
      except SyntaxError:
        continue
      result.append(Mutant(path, row, start, end, token.string, new))
  return result


def copy_repository(destination: str, head: bool = False) -> None:
  """The tracked files into `destination`: the working tree's, or HEAD's."""
  if head:
    archive = subprocess.run(
      ['git', 'archive', 'HEAD'], cwd=ROOT, check=True, capture_output=True
    ).stdout
    subprocess.run(['tar', '-x', '-C', destination], input=archive, check=True)
    return
  files = (
    subprocess.run(
      ['git', 'ls-files', '-z'], cwd=ROOT, check=True, capture_output=True
    )
    .stdout.decode()
    .split('\0')
  )
  for name in filter(None, files):
    source = os.path.join(ROOT, name)
    if not os.path.isfile(source):
      continue  # Deleted in the working tree.
    target = os.path.join(destination, name)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    shutil.copy2(source, target)
  for folder, _, names in os.walk(os.path.join(ROOT, 'tests')):
    for name in names:  # New test files too.
      relative = os.path.relpath(os.path.join(folder, name), ROOT)
      target = os.path.join(destination, relative)
      if name.endswith('.py') and not os.path.exists(target):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(os.path.join(ROOT, relative), target)


def run_tests(copy: str, selections: list[str], timeout: float) -> bool:
  """Whether every selection passes in `copy` (a timeout is a failure)."""
  env = dict(os.environ, PYTHONPATH=copy, TF_CPP_MIN_LOG_LEVEL='2')
  for selection in selections:
    module, _, names = selection.partition(':')
    command = [sys.executable, '-m', f'tests.{module}'] + (
      names.split(',') if names else []
    )
    process = subprocess.Popen(
      command,
      cwd=copy,
      env=env,
      stdout=subprocess.DEVNULL,
      stderr=subprocess.DEVNULL,
      start_new_session=True,
    )
    try:
      if process.wait(timeout=timeout) != 0:
        return False
    except subprocess.TimeoutExpired:
      os.killpg(process.pid, signal.SIGKILL)  # The test and its TFF worker.
      process.wait()
      return False
  return True


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument(
    '--files',
    default='',
    help='Comma-separated rule files (default: all in TESTS).',
  )
  parser.add_argument(
    '--max_mutants',
    type=int,
    default=8,
    help='At most this many mutants per file (0: all, '
    'about 1,000 mutants: days on 2 cores).',
  )
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument(
    '--timeout',
    type=float,
    default=900,
    help='Seconds per test module and mutant.',
  )
  parser.add_argument(
    '--tests',
    default='',
    help='Override the test selections (comma-separated).',
  )
  parser.add_argument('--report', default='', help='Write a JSON report.')
  parser.add_argument(
    '--head',
    action='store_true',
    help='Mutate the last commit, not the working tree '
    '(whose other files may be mid-edit).',
  )
  parser.add_argument(
    '--list', action='store_true', help='Only count the mutants of each file.'
  )
  args = parser.parse_args(argv)
  files = [f for f in args.files.split(',') if f] or sorted(TESTS)
  for name in files:
    if not name.startswith(RULE_DIRS):
      parser.error(f'{name} is not a rule file ({", ".join(RULE_DIRS)}).')
  report = {}
  with tempfile.TemporaryDirectory(prefix='mutate_') as copy:
    copy_repository(copy, head=args.head)
    for name in files:
      path = os.path.join(copy, name)
      with open(path) as f:
        original = f.read()
      mutants = mutants_of(name, original)
      random.Random(f'{args.seed}:{name}').shuffle(mutants)
      if args.max_mutants:
        mutants = mutants[: args.max_mutants]
      selections = (
        [t for t in args.tests.split(',') if t]
        if args.tests
        else TESTS.get(name, [])
      )
      entry = dict(
        tests=selections,
        candidates=len(mutants_of(name, original)),
        run=0,
        killed=0,
        survived=[],
      )
      report[name] = entry
      if args.list:
        print(f'{name}: {entry["candidates"]} mutants')
        continue
      if not selections:
        print(f'{name}: no tests mapped; skipped', flush=True)
        continue
      started = time.time()
      if not run_tests(copy, selections, args.timeout):
        entry['error'] = 'the unmutated tests fail'
        print(f'{name}: the unmutated tests fail; skipped', flush=True)
        continue
      for mutant in mutants:
        with open(path, 'w') as f:
          f.write(
            original[: mutant.start] + mutant.new + original[mutant.end :]
          )
        try:
          killed = not run_tests(copy, selections, args.timeout)
        finally:
          with open(path, 'w') as f:
            f.write(original)
        entry['run'] += 1
        entry['killed'] += killed
        if not killed:
          entry['survived'].append(mutant.describe(original))
        print(
          f'{"killed  " if killed else "SURVIVED"} {mutant.describe(original)}',
          flush=True,
        )
      entry['seconds'] = round(time.time() - started)
      score = entry['killed'] / entry['run'] if entry['run'] else float('nan')
      print(
        f'{name}: {entry["killed"]}/{entry["run"]} killed '
        f'({score:.0%}) of {entry["candidates"]} candidates, '
        f'{entry["seconds"]} s',
        flush=True,
      )
  if args.report:
    with open(args.report, 'w') as f:
      json.dump(report, f, indent=2)
  return 0


if __name__ == '__main__':
  sys.exit(main())
