"""The committed reproduction reports are what the driver writes today.

Every report (the index, each cell's README.md and APPENDIX.md, summary.json
and the curves) is written again from the committed run files and the
cells' notes, and compared with the committed one byte for byte.
"""

import filecmp
import os
import shutil

from absl.testing import absltest
from absl.testing import flagsaver

from experiments import run_files
from results.fmnist import cells
from results.fmnist import reproduce

# `//results/fmnist:reports`: the committed reports and their run files.
_COMMITTED = os.path.dirname(os.path.abspath(reproduce.__file__))
_REGENERATE = 'bazel run //results/fmnist:reproduce -- --report_only'


def _plots(directory):
  return sorted(n for n in os.listdir(directory) if n.endswith('.png'))


class CommittedReportsTest(absltest.TestCase):
  def test_reports_match_the_committed_run_files(self):
    root = self.create_tempdir().full_path
    copy = os.path.join(root, 'results', 'fmnist')
    for directory, _, files in os.walk(_COMMITTED):
      for name in files:
        if name in (run_files.METRICS_CSV, reproduce.FORK_JSON):
          source = os.path.join(directory, name)
          target = os.path.join(copy, os.path.relpath(source, _COMMITTED))
          os.makedirs(os.path.dirname(target), exist_ok=True)
          shutil.copyfile(source, target)
    with flagsaver.flagsaver(root=root):
      written = reproduce.write_all_reports()
    summaries = [os.path.join(copy, c, 'summary.json') for c in cells.CELLS]
    # Each cell's README.md and APPENDIX.md, then the index.
    self.assertLen(written, 2 * len(cells.CELLS) + 1)
    # The reports' plots are the committed ones, byte for byte (Matplotlib
    # is pinned; they regenerate identically on the project's machines).
    for c in cells.CELLS:
      with self.subTest(f'{c}/*.png'):
        names = _plots(os.path.join(copy, c))
        self.assertEqual(
          _plots(os.path.join(_COMMITTED, c)),
          names,
          f'results/fmnist/{c}: the committed plots differ from those its '
          f'report links to; run {_REGENERATE} and commit them.',
        )
        _, stale, _ = filecmp.cmpfiles(
          os.path.join(_COMMITTED, c),
          os.path.join(copy, c),
          names,
          shallow=False,
        )
        self.assertEqual(
          stale,
          [],
          f'results/fmnist/{c}: these plots are not what the '
          f'run files draw; run {_REGENERATE} and commit them.',
        )
    for path in written + summaries:
      committed = os.path.join(_COMMITTED, os.path.relpath(path, copy))
      with self.subTest(os.path.relpath(path, copy)):
        self.assertTrue(
          os.path.exists(committed),
          f'{committed} is not committed; run {_REGENERATE}.',
        )
        with open(path) as f, open(committed) as g:
          self.assertEqual(
            g.read(),
            f.read(),
            f'{committed} is stale: the run files or reproduce.py have '
            f'changed since it was written. Run {_REGENERATE} and commit '
            'the reports.',
          )


if __name__ == '__main__':
  absltest.main()
