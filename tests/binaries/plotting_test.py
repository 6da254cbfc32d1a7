"""Accuracy plots: one line per label, the legend beside many lines."""

import os

from absl.testing import absltest
from matplotlib import image

from experiments import plotting


class PlotAccuracyTest(absltest.TestCase):
  def _width(self, count):
    directory = self.create_tempdir().full_path
    path = os.path.join(directory, 'plot.png')
    plotting.plot_accuracy(
      {f'curve {i}': ([1, 2, 3], [0.1 * i, 0.2, 0.3]) for i in range(count)},
      path,
      title='toy',
    )
    self.assertEqual(os.listdir(directory), ['plot.png'])  # No temporary.
    return image.imread(path).shape[1]

  def test_legend_goes_beside_more_than_six_lines(self):
    # 6.4 and 9.0 inches at 120 dpi.
    self.assertEqual(self._width(6), 768)
    self.assertEqual(self._width(7), 1080)


if __name__ == '__main__':
  absltest.main()
