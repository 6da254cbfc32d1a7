"""The reproduction report: numbers from the run files, labels, commands."""

import csv
import dataclasses
import fcntl
import itertools
import os
import shutil
from unittest import mock

from absl.testing import absltest
from absl.testing import flagsaver
import numpy as np

from experiments import run_files
from results.fmnist import cells
from results.fmnist import curves
from results.fmnist import report as report_lib
from results.fmnist import reproduce
from results.fmnist import runs

_CELL = cells.Cell(
  name='toy',
  title='Toy cell',
  source='nowhere',
  rounds=12,
  seeds=(1, 2),
  common=dict(model='mlp'),
  settings={'a': {}, 'b': {}, 'c': dict(model='lenet')},
  methods={
    'base': dict(aggregator='fedavg'),
    'method': dict(aggregator='fedsa'),
  },
  baseline='base',
  paper={('a', 'base'): 80.0, ('a', 'method'): 81.5},
  plotted_metrics=(
    'train/finalizer/high_fraction_overall',
    'train/finalizer/high_fraction',
  ),
)


# A one-seed cell of setting 'a' and methods 'base' and 'method'; tests
# `dataclasses.replace` the fields they vary.
_MINIMAL_CELL = cells.Cell(
  name='minimal',
  title='',
  source='',
  rounds=12,
  seeds=(1,),
  common={},
  settings={'a': {}},
  methods={'base': {}, 'method': {}},
  baseline='base',
  paper={},
)


def _write_rows(
  directory,
  rows,
  names=('key', 'test/sparse_categorical_accuracy', 'round_seconds'),
):
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, 'metrics.csv'), 'w') as f:
    writer = csv.DictWriter(f, names)
    writer.writeheader()
    writer.writerows(rows)


def _write_run(directory, accuracies, high_fraction=None, seconds=1.0):
  _write_rows(
    directory,
    [
      {
        'key': i,
        'round_seconds': seconds,
        'test/sparse_categorical_accuracy': accuracy,
        'train/finalizer/high_fraction': high_fraction
        and f'[{high_fraction}, {high_fraction / 2}]',
        'train/finalizer/high_fraction_overall': high_fraction
        and high_fraction / 4,
      }
      for i, accuracy in enumerate(accuracies, start=1)
    ],
    names=(
      'key',
      'round_seconds',
      'test/sparse_categorical_accuracy',
      'train/finalizer/high_fraction',
      'train/finalizer/high_fraction_overall',
    ),
  )


def _read_report(path):
  """A cell's README.md and, after it, its APPENDIX.md."""
  with open(path) as f, open(report_lib.appendix_path(path)) as g:
    return f.read() + g.read()


def _write_notes(directory, cell_name, **parts):
  """Writes `<directory>/<cell_name>/notes/<part>.md` for each part."""
  notes = os.path.join(directory, cell_name, 'notes')
  os.makedirs(notes, exist_ok=True)
  for part, text in parts.items():
    with open(os.path.join(notes, f'{part}.md'), 'w') as f:
      f.write(text)


def _accuracies(directory):
  return [
    round(float(r['test/sparse_categorical_accuracy']), 6)
    for r in run_files.read_metrics(directory)
  ]


class _FakeRuns:
  """Stands in for the binary: a run's round r has accuracy r / 100 (+ 0.001
  for every method but `method`) and takes 100 s (`method`) or 1000 s. Like
  the training loop, it resumes from its latest checkpoint (rows after it
  are redone) and keeps its first and latest checkpoints."""

  def __enter__(self):
    self.calls, self.resumed_from = [], []
    self._patch = mock.patch.object(reproduce, '_launch', self._record)
    self._patch.start()
    return self

  def __exit__(self, *args):
    self._patch.stop()

  def _record(self, cell, setting, method, seed, rounds):
    self.calls.append((method, rounds))
    directory = reproduce.run_dir(cell, setting, method, seed)
    latest = run_files.latest_checkpoint(directory)
    if latest is not None:
      with open(
        os.path.join(run_files.checkpoint_path(directory, latest), 'state')
      ) as f:
        self.resumed_from.append(f.read())
    self.run(cell, setting, method, seed, rounds)

  @staticmethod
  def run(cell, setting, method, seed, rounds):
    directory = reproduce.run_dir(cell, setting, method, seed)
    latest = run_files.latest_checkpoint(directory) or 0
    rows = (
      [r for r in run_files.read_metrics(directory) if int(r['key']) <= latest]
      if latest
      else []
    )
    column = 'test/sparse_categorical_accuracy'
    offset = 0 if method == 'method' else 0.001
    rows += [
      {
        'key': r,
        column: r / 100 + offset,
        'round_seconds': 100 if method == 'method' else 1000,
      }
      for r in range(latest + 1, rounds + 1)
    ]
    _write_rows(directory, rows)
    checkpoints = os.path.join(directory, 'checkpoints')
    kept = set()
    if os.path.isdir(checkpoints):
      first = min(
        os.listdir(checkpoints), key=lambda name: int(name.split('_')[-1])
      )
      kept.add(first)
      for name in set(os.listdir(checkpoints)) - kept:
        shutil.rmtree(os.path.join(checkpoints, name))
    for version in (0, rounds) if not kept else (rounds,):
      path = run_files.checkpoint_path(directory, version)
      os.makedirs(path, exist_ok=True)
      with open(os.path.join(path, 'state'), 'w') as f:
        f.write(f'{method} {version}')


_FORKED_CELL = dataclasses.replace(_CELL, forks={'base': ('method', 3)})


class ReportTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    notes = self.create_tempdir().full_path
    self.enter_context(mock.patch.object(cells, 'NOTES_DIR', notes))
    _write_notes(
      notes,
      'toy',
      summary='Toy finding.\n',
      deviations='- Toy deviation.\n',
      runs='- Toy discussion.\n',
    )
    _write_notes(notes, 'toy3', reduced='Fewer rounds.\n')

  def test_table_reports_last_ten_rounds_gains_and_unfinished_runs(self):
    root = self.create_tempdir().full_path
    with flagsaver.flagsaver(root=root):
      # Base: rounds 3-12 at 0.80 (seed 1) and 0.82 (seed 2).
      for seed, level in ((1, 0.80), (2, 0.82)):
        _write_run(
          reproduce.run_dir(_CELL, 'a', 'base', seed),
          [0.1, 0.2] + [level] * 10,
          seconds=300.0 * seed,
        )
      # Method: seed 1 complete at 0.83; seed 2 stopped after 5 rounds.
      _write_run(
        reproduce.run_dir(_CELL, 'a', 'method', 1),
        [0.1, 0.2] + [0.83] * 10,
        high_fraction=0.3,
        seconds=1800.0,
      )
      _write_run(
        reproduce.run_dir(_CELL, 'a', 'method', 2),
        [0.5] * 5,
        high_fraction=0.2,
        seconds=1800.0,
      )
      stale = os.path.join(root, 'results', 'fmnist', 'toy', 'b.png')
      with open(stale, 'w') as f:  # A plot of setting b's runs, now gone.
        f.write('png')
      path = reproduce.write_report(_CELL)
      with open(reproduce.write_index()) as f:
        self.assertIn('| fedlaw |', f.read())
      toy_index = reproduce.write_index((_CELL,))
    # Hours per run: 12 rounds x the median round time (base: 300 and 600 s;
    # method: 1800 s); finished runs: both of base, seed 1 of method. To go:
    # all 12 rounds of method seed 2, which restarts in a fresh checkout
    # (6 h); setting b (same model) at a's times: 2 seeds x 12 rounds x
    # (450 + 1800) s = 15 h; setting c (another model) unknown.
    with open(toy_index) as f:
      index = f.read()
    self.assertIn(
      '| toy | Toy cell | 3 / 12 | a/base 1.5, a/method 6.0 | '
      '21.0 + 4 runs unknown |',
      index,
    )
    # The widest spread of one setting and method's runs: base's two seeds.
    self.assertIn(
      'have taken from 300.0 to 600.0 s per round (toy a/base)', index
    )
    report = _read_report(path)
    self.assertIn(
      '| a | base | 80.00 | 81.00 ± 1.00 (2 seeds) |  |  '
      '| 12, 12 | 300.0, 600.0 |',
      report,
    )
    self.assertIn('| c | method |  | not run |  |  | - | - |', report)
    # Seed 2 of the method stopped after 5 rounds: the mean and the gain
    # (+3.0) count seed 1 only; the rounds column lists both.
    self.assertIn(
      '| a | method | 81.50 | 83.00 (1 seed; seed 2 '
      'unfinished, not counted) | +1.50 vs base | +3.00 '
      'vs base (1 seed) | 12, 5 (unfinished) |',
      report,
    )
    self.assertIn('Toy deviation.', report)
    self.assertIn('Toy discussion.', report)
    self.assertIn('--cell=toy', report)
    base = os.path.dirname(path)
    self.assertTrue(os.path.exists(os.path.join(base, 'a.png')))
    self.assertTrue(os.path.exists(os.path.join(base, 'a_high_fraction.png')))
    self.assertTrue(
      os.path.exists(os.path.join(base, 'a_high_fraction_overall.png'))
    )
    self.assertFalse(os.path.exists(stale))
    self.assertIn('![a.png](a.png)\n', report)
    self.assertIn(
      'Per-round metrics (first seed of each method): '
      '[a_high_fraction_overall.png](a_high_fraction_overall.png), '
      '[a_high_fraction.png](a_high_fraction.png)\n',
      report,
    )

  def _toy_runs(self, root):
    """Setting a of `_CELL`: base at 80 and 82, method seed 1 at 83."""
    with flagsaver.flagsaver(root=root):
      for seed, level in ((1, 0.80), (2, 0.82)):
        _write_run(
          reproduce.run_dir(_CELL, 'a', 'base', seed), [0.1, 0.2] + [level] * 10
        )
      _write_run(
        reproduce.run_dir(_CELL, 'a', 'method', 1), [0.1, 0.2] + [0.83] * 10
      )

  def test_report_leads_with_its_finding_and_a_seven_column_table(self):
    root = self.create_tempdir().full_path
    self._toy_runs(root)
    with flagsaver.flagsaver(root=root):
      path = reproduce.write_report(
        dataclasses.replace(_CELL, paper_dataset='MNIST')
      )
    with open(path) as f:
      readme = f.read()
    with open(report_lib.appendix_path(path)) as f:
      appendix = f.read()
    self.assertTrue(
      readme.startswith('# Toy cell\n\nToy finding.\n\nVerdicts ('),
      readme[:200],
    )
    # The paper's numbers of another data set are labelled as such.
    header = (
      '| setting | method | paper (MNIST) | ours | paper gain (MNIST) '
      '| our gain | verdict |'
    )
    self.assertIn(header + '\n', readme)
    self.assertEqual(header.count('|') - 1, 7)
    # One seed: no '± 0.00'; the gain against its baseline, with a verdict.
    self.assertIn(
      '| a | method (vs base) | 81.50 | 83.00 (1 seed) | +1.50 | '
      '+3.00 (1 seed) | same sign, larger |',
      readme,
    )
    self.assertIn('| b | base |  | not run |  |  |  |', readme)
    self.assertIn('![a.png](a.png)', readme)
    self.assertIn('- Toy deviation.', readme)
    self.assertNotIn('Toy discussion.', readme)
    self.assertIn('[APPENDIX.md](APPENDIX.md)', readme)
    # The appendix keeps the per-run numbers and the run notes.
    self.assertIn('| a | base | 80.00 | 81.00 ± 1.00 (2 seeds) |', appendix)
    self.assertIn('| a | method vs base | 1 | 12 | +3.00 |', appendix)
    self.assertIn('- Toy discussion.', appendix)

  def test_index_opens_with_the_verdicts_and_the_findings(self):
    root = self.create_tempdir().full_path
    self._toy_runs(root)
    with flagsaver.flagsaver(root=root):
      with open(reproduce.write_index((_CELL,))) as f:
        index = f.read()
    self.assertTrue(
      index.startswith('# Fashion-MNIST reproduction of the five papers')
    )
    table = index.index('| paper | method vs baseline | setting |')
    self.assertLess(table, index.index('## Main findings'))
    self.assertIn(
      '| [Toy](toy/README.md) | method vs base | a | +1.50 | '
      '+3.00 (1 seed) | 12 | same sign, larger |',
      index,
    )
    self.assertIn(
      '| [Toy](toy/README.md) | method vs base | b |  |  | - | not run |', index
    )
    self.assertIn('**[Toy](toy/README.md).** Toy finding.', index)
    self.assertIn('## Verdict rule\n\ng is our gain', index)

  def test_verdict_rule(self):
    cases = [
      # (our mean, our std, paper gain) -> verdict; margin max(std, 0.1).
      ((1.17, 0.57, 1.19), 'reproduced'),
      ((1.36, 0.18, 1.78), 'same sign, smaller'),
      ((10.09, 0.0, 6.82), 'same sign, larger'),
      ((-0.13, 0.07, 0.47), 'not reproduced: opposite sign'),
      ((0.0, 0.06, 0.55), 'not reproduced: no gain'),
      ((-0.75, 0.41, 0.37), "not reproduced: loss, paper's within spread"),
      ((1.46, 0.97, 0.17), "not reproduced: gain, paper's within spread"),
      ((-2.11, 3.80, 0.40), 'inconclusive'),  # Spread covers 0 and p.
      ((-0.31, 0.38, 0.12), 'inconclusive'),  # p within spread of 0.
      ((-0.01, 0.10, None), 'no paper number (no gain)'),
      ((10.98, 0.0, None), 'no paper number (gain)'),
    ]
    for (mean, std, paper), expected in cases:
      with self.subTest(mean=mean, paper=paper):
        self.assertEqual(report_lib.verdict((mean, std, 3), paper), expected)
    self.assertEqual(report_lib.verdict(None, 1.0), '')

  def test_seed_band_is_over_the_rounds_every_seed_has(self):
    runs_of = {
      1: {'curve': ([1, 2, 3], [0.5, 0.6, 0.7])},
      2: {'curve': ([1, 2], [0.7, 0.4])},
    }
    rounds, mean, lowest, highest = runs.seed_band(runs_of)
    self.assertEqual(rounds, [1, 2])
    self.assertSequenceAlmostEqual(mean, [60.0, 50.0])
    self.assertSequenceAlmostEqual(lowest, [50.0, 40.0])
    self.assertSequenceAlmostEqual(highest, [70.0, 60.0])

  def test_a_panel_draws_the_seeds_its_methods_share(self):
    curve = lambda a: {'curve': ([1, 2], [a, a])}
    base = {10: curve(0.8), 11: curve(0.6), 12: curve(0.4)}
    bands = report_lib._paired_bands({'base': base, 'one': {10: curve(0.9)}})
    self.assertEqual(bands['base'][-1], 1)  # Seed 10 only, as the gain.
    self.assertSequenceAlmostEqual(bands['base'][1], [80.0, 80.0])
    apart = report_lib._paired_bands({'base': base, 'one': {7: curve(0.9)}})
    self.assertEqual(apart['base'][-1], 3)  # No shared seed: its own.
    self.assertSequenceAlmostEqual(apart['base'][1], [60.0, 60.0])

  def test_curve_panels_pair_each_method_with_its_baseline(self):
    fedlws = cells.CELLS['fedlws']
    self.assertEqual(
      curves.panels(
        list(fedlws.methods), fedlws.baseline_of, fedlws.headline_methods()
      ),
      [
        ['fedavg', 'fedavg_lws'],
        ['fedprox', 'fedprox_lws'],
        ['fedprox_sgdm', 'fedprox_sgdm_lws'],
      ],
    )
    fedsa = cells.CELLS['fedsa']  # Weighted FedAvg joins its baseline's.
    self.assertEqual(
      curves.panels(
        list(fedsa.methods), fedsa.baseline_of, fedsa.headline_methods()
      ),
      [['fedavg_unweighted', 'fedsa', 'fedavg']],
    )

  def test_y_range_spans_the_last_half_of_the_rounds(self):
    rounds = list(range(1, 11))
    low = np.array([10.0] * 5 + [80.0] * 5)
    high = low + 2
    bottom, top = curves.y_range({'m': (rounds, low + 1, low, high, 2)})
    self.assertGreater(bottom, 70.0)  # The first half's 10% is left out.
    self.assertLess(bottom, 80.0)
    self.assertGreater(top, 82.0)

  def test_notes_of_a_cell_without_them_are_empty(self):
    self.assertEqual(cells.notes('no_such_cell', 'summary'), '')

  def test_gain_names_the_seeds_it_pairs(self):
    cell = dataclasses.replace(_MINIMAL_CELL, name='toy4', seeds=(1, 2))
    root = self.create_tempdir().full_path
    with flagsaver.flagsaver(root=root):
      _write_run(reproduce.run_dir(cell, 'a', 'base', 1), [0.80] * 12)
      _write_run(reproduce.run_dir(cell, 'a', 'base', 2), [0.70] * 5)
      for seed, level in ((1, 0.83), (2, 0.87)):
        _write_run(reproduce.run_dir(cell, 'a', 'method', seed), [level] * 12)
      report = _read_report(reproduce.write_report(cell))
    # The mean counts both of the method's seeds; the gain pairs seed 1 only,
    # as base's seed 2 has not reached rounds 3-12.
    self.assertIn(
      '| a | method |  | 85.00 ± 2.00 (2 seeds) |  | +3.00 '
      'vs base (1 seed) | 12, 12 |',
      report,
    )

  def test_no_gain_over_rounds_both_forks_copied(self):
    cell = dataclasses.replace(
      _MINIMAL_CELL,
      name='toy7',
      rounds=20,
      seeds=(1, 2),
      methods={'source': {}, 'base': {}, 'method': {}},
      forks={'base': ('source', 12), 'method': ('source', 12)},
    )
    root = self.create_tempdir().full_path
    with flagsaver.flagsaver(root=root):
      for seed in (1, 2):
        _write_run(reproduce.run_dir(cell, 'a', 'source', seed), [0.8] * 14)
        # Seed 1: both forks have only the source's rounds 1-12; seed 2 has
        # rounds 13-14 of their own.
        own = ([], []) if seed == 1 else ([0.80] * 2, [0.84] * 2)
        for method, rows in zip(('base', 'method'), own):
          directory = reproduce.run_dir(cell, 'a', method, seed)
          _write_run(directory, [0.8] * 12 + rows)
          run_files.write_json(
            os.path.join(directory, 'fork.json'),
            {'source': f'source_seed{seed}', 'round': 12},
          )
      report = _read_report(reproduce.write_report(cell))
    # The mean counts both seeds; the gain seed 2 only: rounds 5-14,
    # (8 * 80 + 2 * 84) / 10 against 80.
    self.assertIn(
      '| a | method |  | 80.40 ± 0.40 (2 seeds) |  | +0.80 vs base (1 seed) |',
      report,
    )

  def test_a_gain_that_rounds_to_zero_has_a_plus_sign(self):
    cell = dataclasses.replace(
      _MINIMAL_CELL,
      name='toy6',
      paper={('a', 'base'): 80.0, ('a', 'method'): 79.996},
    )
    root = self.create_tempdir().full_path
    with flagsaver.flagsaver(root=root):
      _write_run(reproduce.run_dir(cell, 'a', 'base', 1), [0.80] * 12)
      _write_run(reproduce.run_dir(cell, 'a', 'method', 1), [0.79999] * 12)
      report = _read_report(reproduce.write_report(cell))
    # Our gain is -0.001 point and the paper's -0.004: both show as +0.00.
    self.assertNotIn('-0.00', report)
    self.assertIn(
      '| a | method | 80.00 | 80.00 (1 seed) | +0.00 vs '
      'base | +0.00 vs base (1 seed) |',
      report,
    )

  def test_per_seed_comparison_and_metric_summary(self):
    column = 'train/finalizer/high_fraction'
    cell = dataclasses.replace(
      _MINIMAL_CELL,
      name='toy5',
      rounds=8,
      settings={'a': {}, 'b': {}, 'c': {}, 'd': {}},
      forks={'base': ('method', 2)},
      plotted_metrics=(column,),
    )
    names = ('key', 'test/sparse_categorical_accuracy', 'round_seconds', column)

    def write(setting, method, accuracies, metric=()):
      _write_rows(
        reproduce.run_dir(cell, setting, method, 1),
        [
          {
            'key': r,
            'test/sparse_categorical_accuracy': a,
            'round_seconds': 1.0,
            column: m,
          }
          for r, (a, m) in enumerate(
            itertools.zip_longest(accuracies, metric, fillvalue=''), start=1
          )
        ],
        names=names,
      )

    root = self.create_tempdir().full_path
    with flagsaver.flagsaver(root=root):
      write('a', 'base', [0.50, 0.60, 0.70, 0.80, 0.80, 0.82, 0.78, 0.80])
      write('a', 'method', [0.47, 0.61, 0.69, 0.80, 0.81, 0.83, 0.80, 0.775])
      # Setting b: the method alone, 15 rounds of a two-element metric.
      first = [0.9, 0.7, 1, 1, 1, 1, 0.9, 1, 1, 1, 1, 1, 1, 1, 1]
      second = [0.5, 0.8, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0.99996, 1, 1, 1]
      write(
        'b',
        'method',
        [0.5] * 15,
        [f'[{x}, {y}]' for x, y in zip(first, second)],
      )
      # Setting c: base forked from the method at round 2 (rows copied),
      # then four rounds of its own, one more than the method's.
      write('c', 'method', [0.1, 0.2, 0.6, 0.6, 0.6, 0.6])
      write('c', 'base', [0.1, 0.2, 0.5, 0.5, 0.5, 0.5, 0.5])
      run_files.write_json(
        os.path.join(reproduce.run_dir(cell, 'c', 'base', 1), 'fork.json'),
        {'source': 'method_seed1', 'round': 2},
      )
      # Setting d: three rounds, too few for quarters.
      write('d', 'base', [0.5] * 3)
      write('d', 'method', [0.6] * 3)
      report = _read_report(reproduce.write_report(cell))
    # Differences (points): -3, +1, -1, 0, +1, +1, +2, -2.5. Last 10 (all 8
    # rounds): -1.5 / 8; best: 83 against 82; quarters of two rounds; ahead
    # in rounds 2, 5, 6, 7 (of the last quarter, round 7); largest gap in
    # rounds 5-8: -2.5; base's last quarter 78 and 80: std 1.
    self.assertIn(
      '| a | method vs base | 1 | 8 | -0.19 | +1.00 | -1.00 / '
      '-0.50 / +1.00 / -0.25 | 4 of 8 | 1 of 2 | -2.50 | 1.00 |',
      report,
    )
    self.assertNotIn('| base vs base |', report)
    # Rounds 3-6 only (1-2 are copies), each +10; the method has not reached
    # the planned 8 rounds. Last 10 and best as in the table above: rounds
    # 1-6, 45 against base's 38.33; best 60 against 50. A one-round last
    # quarter has no spread (-).
    self.assertIn(
      '| c | method vs base | 1 | 4 (rounds 3-6; 1-2 shared) '
      '(unfinished) | +6.67 | +10.00 | +10.00 / +10.00 / +10.00 '
      '/ +10.00 | 4 of 4 | 1 of 1 | +10.00 | - |',
      report,
    )
    self.assertNotIn('| d | method vs base |', report)
    # Early: rounds 1-2 (the first tenth of 15, rounded up): means 0.8 and
    # 0.65. Lowest 0.5 (round 1); late lowest over rounds 8-15 (round 7's
    # 0.9 is out): 0.99996, rounded down. Base reports no such metric.
    self.assertIn(
      '| b | method | 1 | high_fraction | 15 | 0.6500-0.8000 | '
      '0.5000 | 0.9999 |',
      report,
    )
    self.assertNotIn('| a | base | 1 | high_fraction |', report)

  def test_metric_curves_one_per_tensor_of_a_list_column(self):
    directory = os.path.join(self.create_tempdir().full_path, 'run')
    _write_run(directory, [0.5, 0.6, 0.7], high_fraction=0.4)
    rows = run_files.read_metrics(directory)
    per_tensor = runs.metric_curves(rows, 'train/finalizer/high_fraction')
    self.assertEqual(list(per_tensor), ['tensor 0', 'tensor 1'])
    self.assertEqual(per_tensor['tensor 0'], ([1, 2, 3], [0.4] * 3))
    self.assertEqual(per_tensor['tensor 1'], ([1, 2, 3], [0.2] * 3))
    self.assertEqual(
      runs.metric_curves(rows[:2], 'train/finalizer/high_fraction_overall'),
      {'': ([1, 2], [0.1] * 2)},
    )
    self.assertEqual(runs.metric_curves(rows, 'missing'), {})

  def test_reduced_protocol_and_best_round(self):
    cell = dataclasses.replace(
      _MINIMAL_CELL,
      name='toy3',
      title='Toy reduced',
      rounds=40,
      settings={'a': {}, 'b': {}},
      methods={'base': {}, 'method': {}, 'late': {}, 'long': {}},
      paired={'long': 'late'},
      reduced_rounds={'a': 20},
      best_round=True,
      plotted_metrics=('train/finalizer/high_fraction',),
    )
    root = self.create_tempdir().full_path
    with flagsaver.flagsaver(root=root):
      # Base peaks at 0.9 in round 15, and at 0.95 in round 25.
      _write_run(
        reproduce.run_dir(cell, 'a', 'base', 1),
        [0.5] * 14 + [0.9] + [0.6] * 9 + [0.95] + [0.6] * 15,
      )
      # Past the reduced 20 rounds (not to 40): measured at round 20.
      _write_run(
        reproduce.run_dir(cell, 'a', 'method', 1),
        [0.5] * 19 + [0.92] + [0.1] * 10,
        high_fraction=0.4,
      )
      _write_run(reproduce.run_dir(cell, 'a', 'late', 1), [0.5] * 9 + [0.8])
      # Against a shorter baseline (late, 10 rounds): both best over 10.
      _write_run(
        reproduce.run_dir(cell, 'a', 'long', 1),
        [0.5] * 8 + [0.85] + [0.5] * 10 + [0.99],
      )
      # Setting b has the protocol's 40 rounds: 20 are unfinished.
      _write_run(reproduce.run_dir(cell, 'b', 'base', 1), [0.5] * 20)
      report = _read_report(reproduce.write_report(cell))
      with open(reproduce.write_index((cell,))) as f:
        index = f.read()
    self.assertIn(
      "**Reduced protocol: 20 (a) of the paper's 40 rounds.** Fewer rounds.",
      report,
    )
    self.assertIn('| ours, best round | our gain, best round |', report)
    # Last 10: base 0.6 over rounds 31-40; method (rounds 11-20) 0.542
    # against base's 0.59 there. Best: 92 against base's 90 up to round 20;
    # late (10 rounds): 80 against base's 50 up to round 10.
    self.assertIn(
      '| a | base |  | 60.00 (1 seed) |  |  | 95.00 (1 seed) |  | 40 |', report
    )
    self.assertIn(
      '| a | method |  | 54.20 (1 seed) |  | -4.80 '
      'vs base (1 seed) | 92.00 (1 seed) | +2.00 vs '
      'base (1 seed) | '
      '20 (reduced protocol; run to 30, measured at 20) |',
      report,
    )
    # Its plotted metric is summarised over those 20 rounds too.
    self.assertIn(
      '| a | method | 1 | high_fraction | 20 | 0.2000-0.4000 |', report
    )
    self.assertIn(
      '| b | base |  | 50.00 (1 seed) |  |  | 50.00 '
      '(1 seed) |  | 20 (unfinished) |',
      report,
    )
    # Late has only an unfinished run: counted, its gain against base's
    # same rounds 1-10 (53 against 50).
    self.assertIn(
      '| a | late |  | 53.00 (1 seed) |  | +3.00 '
      'vs base (1 seed) | 80.00 (1 seed) | +30.00 vs '
      'base (1 seed) | '
      '10 (unfinished) |',
      report,
    )
    # Long's last 10 rounds (11-20) are past late's 10: no last-10 gain.
    self.assertIn(
      '| a | long |  | 54.90 (1 seed) |  |  | 99.00 '
      '(1 seed) | +5.00 vs late (1 seed) | 20 (reduced '
      'protocol) |',
      report,
    )
    # Finished: a's base, method and long (at least the planned 20
    # rounds); a's late and b's base are not.
    self.assertIn(
      '| toy3 | Toy reduced **reduced: 20 (a) of 40 rounds** | 3 / 8 |', index
    )

  def test_round_time_estimate_follows_baselines_and_models(self):
    cell = dataclasses.replace(
      _MINIMAL_CELL,
      name='toy2',
      rounds=10,
      common=dict(model='mlp'),
      settings={'a': {}, 'b': {}, 'c': dict(model='lenet')},
      methods={'base': {}, 'mid': {}, 'top': {}},
      paired={'top': 'mid'},
    )
    measured = {('a', 'base'): [10.0, 30.0], ('b', 'mid'): [50.0]}
    estimate = lambda s, m: report_lib.round_seconds(cell, measured, s, m)
    self.assertEqual(estimate('a', 'base'), 20.0)
    self.assertEqual(estimate('a', 'top'), 20.0)  # top -> mid -> base in a.
    self.assertEqual(estimate('b', 'top'), 50.0)  # b's mid first.
    self.assertEqual(estimate('b', 'base'), 20.0)  # Same model, setting a.
    self.assertIsNone(estimate('c', 'base'))  # No lenet run measured.

  def test_shared_runs_have_the_same_flags(self):
    fedsa = cells.CELLS['fedsa']
    self.assertNotEmpty(fedsa.shared)
    for cell in cells.CELLS.values():
      for method, (source_name, setting) in cell.shared.items():
        source = cells.CELLS[source_name]
        for own_setting in cell.settings:
          self.assertEqual(
            cell.run_flags(own_setting, method),
            source.run_flags(setting, method),
            f'{cell.name}/{method}',
          )
    self.assertEqual(
      reproduce.run_dir(fedsa, 'alpha0.1', 'fedavg', 10),
      reproduce.run_dir(cells.CELLS['fedlws'], 'alpha0.1', 'fedavg', 10),
    )
    self.assertNotEqual(
      reproduce.run_dir(fedsa, 'alpha0.1', 'fedsa', 10),
      reproduce.run_dir(cells.CELLS['fedlws'], 'alpha0.1', 'fedavg', 10),
    )

  def test_forks_differ_from_their_source_only_after_the_fork(self):
    fedcda = cells.CELLS['fedcda']
    self.assertEqual(set(fedcda.forks), {'fedavg', 'fedcda_k1'})
    for setting in fedcda.settings:  # Its FedAvg never leaves the warm-up.
      self.assertGreaterEqual(
        fedcda.run_flags(setting, 'fedavg')['fedcda_warmup'], fedcda.rounds
      )
    for cell in cells.CELLS.values():
      for method, (source, fork_round) in cell.forks.items():
        for setting in cell.settings:
          flags, source_flags = (
            cell.run_flags(setting, m) for m in (method, source)
          )
          changed = {
            k
            for k in flags.keys() | source_flags.keys()
            if flags.get(k) != source_flags.get(k)
          }
          # The warm-up or K (FedCDA's `adopt_state` shrinks a warm-up
          # state's in-memory history) differ; neither run leaves its
          # warm-up before the fork.
          self.assertContainsSubset(changed, {'fedcda_warmup', 'fedcda_k'})
          for run_flags in (flags, source_flags):
            self.assertGreaterEqual(run_flags['fedcda_warmup'], fork_round)
          if 'fedcda_k' in changed:
            self.assertLess(flags['fedcda_k'], source_flags['fedcda_k'])
            self.assertEqual(flags['fedcda_history'], 'memory')

  def test_cells_use_known_methods_and_settings(self):
    for cell in cells.CELLS.values():
      self.assertIn(cell.baseline, cell.methods, cell.name)
      for method, baseline in cell.paired.items():
        self.assertIn(method, cell.methods, cell.name)
        self.assertIn(baseline, cell.methods, cell.name)
      for setting, method in cell.paper:
        self.assertIn(setting, cell.settings, cell.name)
        self.assertIn(method, cell.methods, cell.name)


class DriverTest(absltest.TestCase):
  def test_each_setting_runs_to_its_planned_rounds(self):
    cell = dataclasses.replace(
      _CELL,
      name='fedlaw',
      seeds=(1,),
      settings={'a': {}, 'b': {}},
      rounds=5,
      reduced_rounds={'a': 3},
    )
    root = self.create_tempdir().full_path
    with (
      flagsaver.flagsaver(root=root, cell='fedlaw'),
      mock.patch.dict(cells.CELLS, {'fedlaw': cell}),
      _FakeRuns() as runs,
    ):
      # Past a's reduced 3 rounds, without checkpoints: not run again.
      _write_run(reproduce.run_dir(cell, 'a', 'base', 1), [0.5] * 4)
      reproduce.main([])
    self.assertEqual(runs.calls, [('method', 3), ('base', 5), ('method', 5)])

  def _edited_cells(self, text):
    path = os.path.join(self.create_tempdir().full_path, 'cells.py')
    shutil.copy(cells.__file__, path)
    with open(path, 'a') as f:
      f.write(text)
    later = reproduce._CELLS_LOADED_AT + 1
    os.utime(path, (later, later))
    return path

  def test_current_cell_has_the_edits_made_since_loaded(self):
    path = self._edited_cells(
      "\nCELLS['fedsa'] = dataclasses.replace(\n"
      "    CELLS['fedsa'], title='Edited during a run')\n"
    )
    fedsa = cells.CELLS['fedsa']
    self.assertEqual(
      reproduce.current_cell(fedsa, path).title, 'Edited during a run'
    )
    os.utime(path, (reproduce._CELLS_LOADED_AT,) * 2)
    self.assertIs(reproduce.current_cell(fedsa, path), fedsa)

  def test_current_cell_of_a_cells_file_caught_mid_edit_is_the_cell(self):
    path = self._edited_cells("\nCELLS['fedsa'] = dataclasses.replace(\n")
    fedsa = cells.CELLS['fedsa']
    with self.assertLogs(level='WARNING') as logs:
      self.assertIs(reproduce.current_cell(fedsa, path), fedsa)
    self.assertIn('SyntaxError', logs.output[0])

  def test_reports_written_during_runs_use_the_current_cell(self):
    cell = dataclasses.replace(_CELL, name='fedlaw', seeds=(1,), rounds=2)
    edited = dataclasses.replace(cell, title='Edited during a run')
    root = self.create_tempdir().full_path
    written = []
    with (
      flagsaver.flagsaver(root=root, cell='fedlaw', methods=['base']),
      mock.patch.dict(cells.CELLS, {'fedlaw': cell}),
      _FakeRuns(),
      mock.patch.object(
        reproduce, 'current_cell', lambda c: edited if c is cell else c
      ),
      mock.patch.object(reproduce, 'write_report', written.append),
    ):
      reproduce.main([])
    self.assertEqual(written, [edited] * 4)  # After each of 3 runs, at end.


class ForkTest(absltest.TestCase):
  """`Cell.forks`: base computes as method up to round 3."""

  def setUp(self):
    super().setUp()
    self.enter_context(
      flagsaver.flagsaver(root=self.create_tempdir().full_path)
    )
    self.runs = self.enter_context(_FakeRuns())

  def test_forked_run_starts_from_the_source_checkpoint(self):
    reproduce.run_one(_FORKED_CELL, 'a', 'base', 1, 5)
    self.assertEqual(self.runs.calls, [('method', 3), ('base', 5)])
    base = reproduce.run_dir(_FORKED_CELL, 'a', 'base', 1)
    # Rounds 1-3 are the source's, 4-5 the fork's own.
    self.assertEqual(_accuracies(base), [0.01, 0.02, 0.03, 0.041, 0.051])
    self.assertEqual(self.runs.resumed_from, ['method 3'])
    self.assertFalse(os.path.exists(base + '.forking'))
    self.runs.calls.clear()
    # The fork is made: the source runs on without stopping.
    reproduce.run_one(_FORKED_CELL, 'a', 'method', 1, 8)
    self.assertEqual(self.runs.calls, [('method', 8)])
    # Its own rounds' time (1000 s), not the median of all 5 rows (100 s).
    self.assertIn(
      '| a | base | 80.00 | 3.04 (1 seed) |  |  | 5 '
      '(unfinished), rounds 1-3 from method_seed1 | 1000.0 |',
      _read_report(reproduce.write_report(_FORKED_CELL)),
    )

  def test_fork_source_stops_at_the_fork_round_first(self):
    reproduce.run_one(_FORKED_CELL, 'a', 'method', 1, 8)
    self.assertEqual(self.runs.calls, [('method', 3), ('method', 8)])
    base = reproduce.run_dir(_FORKED_CELL, 'a', 'base', 1)
    self.assertEqual(_accuracies(base), [0.01, 0.02, 0.03])
    self.assertTrue(
      os.path.isdir(os.path.join(base, 'checkpoints', 'program_state_3'))
    )

  def _source_killed_before_saving(self, round_num):
    """The source has saved round_num - 1, then released round_num's row."""
    _FakeRuns.run(_FORKED_CELL, 'a', 'method', 1, round_num - 1)
    source = reproduce.run_dir(_FORKED_CELL, 'a', 'method', 1)
    _write_rows(
      source,
      run_files.read_metrics(source)
      + [{'key': round_num, 'test/sparse_categorical_accuracy': 0.5}],
    )

  def test_fork_takes_only_rows_up_to_the_fork_round(self):
    self._source_killed_before_saving(4)
    reproduce.run_one(_FORKED_CELL, 'a', 'base', 1, 3)
    self.assertEqual(self.runs.calls, [])  # Checkpoint 3 is there.
    base = reproduce.run_dir(_FORKED_CELL, 'a', 'base', 1)
    self.assertEqual(_accuracies(base), [0.01, 0.02, 0.03])

  def test_row_without_its_checkpoint_is_redone_before_the_fork(self):
    self._source_killed_before_saving(3)
    reproduce.run_one(_FORKED_CELL, 'a', 'base', 1, 5)
    self.assertEqual(self.runs.calls, [('method', 3), ('base', 5)])
    base = reproduce.run_dir(_FORKED_CELL, 'a', 'base', 1)
    self.assertEqual(_accuracies(base)[:3], [0.01, 0.02, 0.03])
    self.assertTrue(os.path.exists(os.path.join(base, 'fork.json')))

  def test_fork_without_the_checkpoint_runs_from_round_one(self):
    reproduce.run_one(_FORKED_CELL, 'a', 'method', 1, 2)  # Before the fork.
    base = reproduce.run_dir(_FORKED_CELL, 'a', 'base', 1)
    self.assertFalse(os.path.exists(base))
    _FakeRuns.run(_FORKED_CELL, 'a', 'method', 1, 5)  # Past it, unforked.
    self.runs.calls.clear()
    with self.assertLogs(level='WARNING') as logs:
      reproduce.run_one(_FORKED_CELL, 'a', 'base', 1, 8)
    self.assertIn('starts from round 1', logs.output[0])
    self.assertEqual(self.runs.calls, [('base', 8)])
    self.assertEqual(_accuracies(base)[:3], [0.011, 0.021, 0.031])
    self.assertFalse(os.path.exists(os.path.join(base, 'fork.json')))

  def _fresh_checkout(self, *methods):
    for method in methods:
      shutil.rmtree(
        os.path.join(
          reproduce.run_dir(_FORKED_CELL, 'a', method, 1), 'checkpoints'
        )
      )
    self.runs.calls.clear()
    self.runs.resumed_from.clear()

  def test_unfinished_fork_without_checkpoints_is_forked_again(self):
    reproduce.run_one(_FORKED_CELL, 'a', 'base', 1, 5)
    self._fresh_checkout('base', 'method')
    # The source (3 of its 12 rounds) restarts in any case: it is run again
    # to the fork round, and the fork starts from its checkpoint.
    reproduce.run_one(_FORKED_CELL, 'a', 'base', 1, 8)
    self.assertEqual(self.runs.calls, [('method', 3), ('base', 8)])
    base = reproduce.run_dir(_FORKED_CELL, 'a', 'base', 1)
    self.assertEqual(_accuracies(base)[:4], [0.01, 0.02, 0.03, 0.041])
    self.assertTrue(os.path.exists(os.path.join(base, 'fork.json')))

  def test_unfinished_fork_without_checkpoints_is_forked_again_by_source(self):
    reproduce.run_one(_FORKED_CELL, 'a', 'base', 1, 5)
    self._fresh_checkout('base', 'method')
    reproduce.run_one(_FORKED_CELL, 'a', 'method', 1, 8)
    self.assertEqual(self.runs.calls, [('method', 3), ('method', 8)])
    base = reproduce.run_dir(_FORKED_CELL, 'a', 'base', 1)
    self.assertEqual(_accuracies(base), [0.01, 0.02, 0.03])
    self.assertTrue(os.path.exists(os.path.join(base, 'fork.json')))
    self.runs.calls.clear()
    reproduce.run_one(_FORKED_CELL, 'a', 'base', 1, 8)  # From the fork.
    self.assertEqual(self.runs.calls, [('base', 8)])
    self.assertEqual(self.runs.resumed_from[-1], 'method 3')

  def test_unfinished_source_past_the_fork_round_is_run_to_it_again(self):
    for driven in ('base', 'method'):  # Either driver makes the fork.
      with self.subTest(driven):
        for method in ('base', 'method'):
          shutil.rmtree(
            reproduce.run_dir(_FORKED_CELL, 'a', method, 1), ignore_errors=True
          )
        _FakeRuns.run(_FORKED_CELL, 'a', 'method', 1, 5)  # Unforked.
        self._fresh_checkout('method')
        reproduce.run_one(_FORKED_CELL, 'a', driven, 1, 8)
        self.assertEqual(self.runs.calls, [('method', 3), (driven, 8)])
        self.assertEqual(self.runs.resumed_from, ['method 3'])
        base = reproduce.run_dir(_FORKED_CELL, 'a', 'base', 1)
        self.assertTrue(os.path.exists(os.path.join(base, 'fork.json')))

  def test_finished_source_without_checkpoints_is_kept(self):
    _FakeRuns.run(_FORKED_CELL, 'a', 'method', 1, 12)
    self._fresh_checkout('method')
    source = reproduce.run_dir(_FORKED_CELL, 'a', 'method', 1)
    rows = run_files.read_metrics(source)
    with self.assertLogs(level='WARNING'):  # Driven as the source: no fork.
      reproduce.run_one(_FORKED_CELL, 'a', 'method', 1, 12)
    self.assertEqual(self.runs.calls, [])
    with self.assertLogs(level='WARNING') as logs:
      reproduce.run_one(_FORKED_CELL, 'a', 'base', 1, 8)
    self.assertIn('starts from round 1', logs.output[0])
    self.assertEqual(self.runs.calls, [('base', 8)])
    self.assertEqual(run_files.read_metrics(source), rows)
    base = reproduce.run_dir(_FORKED_CELL, 'a', 'base', 1)
    self.assertEqual(_accuracies(base)[:3], [0.011, 0.021, 0.031])
    self.assertFalse(os.path.exists(os.path.join(base, 'fork.json')))

  def test_unfinished_run_without_fork_json_is_forked_again(self):
    for driven in ('base', 'method'):  # A fork made before fork.json was.
      with self.subTest(driven):
        for method in ('base', 'method'):
          shutil.rmtree(
            reproduce.run_dir(_FORKED_CELL, 'a', method, 1), ignore_errors=True
          )
        reproduce.run_one(_FORKED_CELL, 'a', 'base', 1, 5)
        base = reproduce.run_dir(_FORKED_CELL, 'a', 'base', 1)
        os.remove(os.path.join(base, 'fork.json'))
        self._fresh_checkout('base', 'method')
        reproduce.run_one(_FORKED_CELL, 'a', driven, 1, 8)
        self.assertEqual(self.runs.calls, [('method', 3), (driven, 8)])
        self.assertTrue(os.path.exists(os.path.join(base, 'fork.json')))
        self.assertEqual(_accuracies(base)[:3], [0.01, 0.02, 0.03])

  def test_unfinished_fork_of_a_finished_source_keeps_its_rows(self):
    reproduce.run_one(_FORKED_CELL, 'a', 'base', 1, 5)
    _FakeRuns.run(_FORKED_CELL, 'a', 'method', 1, 12)
    self._fresh_checkout('base', 'method')
    base = reproduce.run_dir(_FORKED_CELL, 'a', 'base', 1)
    rows = run_files.read_metrics(base)
    # No checkpoint to fork from: driving the source leaves the fork as it
    # is, and the fork, driven, restarts from round 1 in its directory.
    with self.assertLogs(level='WARNING'):
      reproduce.run_one(_FORKED_CELL, 'a', 'method', 1, 12)
    self.assertEqual(self.runs.calls, [])
    self.assertEqual(run_files.read_metrics(base), rows)
    with self.assertLogs(level='WARNING'):
      reproduce.run_one(_FORKED_CELL, 'a', 'base', 1, 8)
    self.assertEqual(self.runs.calls, [('base', 8)])
    self.assertEqual(self.runs.resumed_from, [])
    self.assertEqual(_accuracies(base)[:3], [0.011, 0.021, 0.031])
    self.assertFalse(os.path.exists(os.path.join(base, 'fork.json')))

  def test_source_driven_to_fewer_rounds_keeps_a_fork_at_them(self):
    reproduce.run_one(_FORKED_CELL, 'a', 'method', 1, 2)  # Before the fork.
    _FakeRuns.run(_FORKED_CELL, 'a', 'method', 1, 8)  # Unforked, then
    with self.assertLogs(level='WARNING'):  # the fork from round 1.
      reproduce.run_one(_FORKED_CELL, 'a', 'base', 1, 8)
    self._fresh_checkout('base', 'method')
    base = reproduce.run_dir(_FORKED_CELL, 'a', 'base', 1)
    rows = run_files.read_metrics(base)
    reproduce.run_one(_FORKED_CELL, 'a', 'method', 1, 8)  # --rounds=8.
    self.assertEqual(self.runs.calls, [])
    self.assertEqual(run_files.read_metrics(base), rows)

  def test_forked_method_below_and_at_the_fork_round(self):
    reproduce.run_one(_FORKED_CELL, 'a', 'base', 1, 2)
    self.assertEqual(self.runs.calls, [])
    reproduce.run_one(_FORKED_CELL, 'a', 'base', 1, 3)
    self.assertEqual(self.runs.calls, [('method', 3)])
    base = reproduce.run_dir(_FORKED_CELL, 'a', 'base', 1)
    self.assertEqual(_accuracies(base), [0.01, 0.02, 0.03])

  def test_index_counts_a_fork_from_its_round(self):
    cell = dataclasses.replace(_FORKED_CELL, settings={'a': {}})
    reproduce.run_one(cell, 'a', 'base', 1, 5)
    # Per run: base 1000 s x its own 12 - 3 rounds, method 100 s x 12.
    # To go, from a fresh checkout (unfinished runs restart): base (1000 s
    # per round) 12 - 3 rounds for each seed; method (100 s) 12 rounds for
    # each seed: 20,400 s.
    with open(reproduce.write_index((cell,))) as f:
      self.assertIn(
        ' | a/base 2.5, a/method 0.3 | 5.7 | not run yet |', f.read()
      )

  def test_index_counts_a_fork_of_a_finished_source_from_round_one(self):
    cell = dataclasses.replace(_FORKED_CELL, settings={'a': {}})
    reproduce.run_one(cell, 'a', 'base', 1, 5)
    _FakeRuns.run(cell, 'a', 'method', 2, 12)  # Finished, so not rerun.
    # To go: seed 1 as above (9,000 s + 1,200 s); seed 2: base all its 12
    # rounds (12,000 s), method none: 22,200 s.
    with open(reproduce.write_index((cell,))) as f:
      self.assertIn(
        ' | a/base 2.5, a/method 0.3 | 6.2 | not run yet |', f.read()
      )

  def test_a_run_another_driver_holds_is_not_touched(self):
    base = reproduce.run_dir(_FORKED_CELL, 'a', 'base', 1)
    source = reproduce.run_dir(_FORKED_CELL, 'a', 'method', 1)
    for held, method in (
      (source, 'base'),
      (source, 'method'),
      (base, 'method'),
    ):
      os.makedirs(os.path.dirname(held), exist_ok=True)
      with open(f'{held}.lock', 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with self.assertRaisesRegex(SystemExit, 'another process is running'):
          reproduce.run_one(_FORKED_CELL, 'a', method, 1, 5)
    self.assertEqual(self.runs.calls, [])
    # Released, the same call runs.
    reproduce.run_one(_FORKED_CELL, 'a', 'method', 1, 5)
    self.assertEqual(self.runs.calls, [('method', 3), ('method', 5)])

  def test_the_binary_inherits_the_lock(self):
    directory = reproduce.run_dir(_FORKED_CELL, 'a', 'method', 1)
    self.runs.__exit__()  # The real `_launch`, with a fake subprocess.
    with mock.patch.object(reproduce.subprocess, 'run') as run:
      run.return_value.returncode = 0
      with reproduce._lock(directory):  # pylint: disable=protected-access
        with reproduce._lock(directory):  # Nested: the same hold.
          reproduce._launch(_FORKED_CELL, 'a', 'method', 1, 5)  # pylint: disable=protected-access
          lock = reproduce._held_locks[directory]  # pylint: disable=protected-access
          self.assertEqual(run.call_args.kwargs['pass_fds'], (lock.fileno(),))
          with open(f'{directory}.lock') as f:
            self.assertEqual(f.read(), f'pid {os.getpid()}\n')
    self.assertTrue(lock.closed)
    self.assertIn(f'--output_dir={directory}', run.call_args.args[0])


if __name__ == '__main__':
  absltest.main()
