"""A setting's accuracy curves over all seeds, for print (headless).

One plot per setting, a panel per method under test and its baseline
(`panels`): each method's mean test accuracy per round over the seeds every
method of the panel has (paired, as the gains are; over its own seeds if they
share none), with the seeds' range (lowest to highest) as a band; a method
under test is dashed, a baseline solid. A panel's y axis spans its bands
over the last half of the rounds, where the methods separate, so early
rounds may run below it.
"""

import os

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
from matplotlib import ticker  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top

# Method -> (rounds, mean, lowest, highest, seeds) in accuracy %.
Bands = dict[str, tuple[list[int], np.ndarray, np.ndarray, np.ndarray, int]]


def y_range(bands: Bands) -> tuple[float, float]:
  """The bands' span over the last half of their rounds, padded by 8%."""
  last = max(b[0][-1] for b in bands.values())
  low, high = [], []
  for rounds, _, lowest, highest, _ in bands.values():
    late = np.array(rounds) > last / 2
    if late.any():
      low.append(lowest[late].min())
      high.append(highest[late].max())
  if not low:  # Every run stopped in the first half.
    low = [b[2].min() for b in bands.values()]
    high = [b[3].max() for b in bands.values()]
  pad = max(0.08 * (max(high) - min(low)), 0.2)
  return min(low) - pad, max(high) + pad


def panels(methods, baseline_of, under_test) -> list[list[str]]:
  """The methods grouped into panels: each method under test with its
  baseline (those sharing one baseline together); another method joins its
  baseline's panel unless it has one of its own (a baseline shown there)."""
  groups = {}
  for method in under_test:
    if method in methods:
      groups.setdefault(baseline_of(method), []).append(method)
  shown = set(groups) | {m for g in groups.values() for m in g}
  for method in methods:
    if method not in shown and baseline_of(method) in groups:
      groups[baseline_of(method)].append(method)
  return [[b] + g for b, g in groups.items()]


def _plot_panel(axes, bands: Bands, under_test, colours) -> None:
  for method, (rounds, mean, lowest, highest, seeds) in bands.items():
    colour = colours[method]
    axes.fill_between(
      rounds, lowest, highest, color=colour, alpha=0.15, linewidth=0
    )
    axes.plot(
      rounds,
      mean,
      color=colour,
      linewidth=1.5,
      linestyle='--' if method in under_test else '-',
      label=f'{method} ({seeds} seed{"s" if seeds > 1 else ""})',
    )
  axes.set_ylim(*y_range(bands))
  axes.set_xlim(1, max(b[0][-1] for b in bands.values()))
  axes.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
  axes.set_xlabel('round', fontsize=11)
  axes.tick_params(labelsize=10)
  axes.grid(alpha=0.35)
  axes.legend(fontsize=9, loc='lower right')


def plot_bands(
  panel_bands: list[Bands], path: str, *, title: str, methods, under_test=()
) -> None:
  """Writes a panel per entry of `panel_bands` to `path` (a temporary file
  first); each method keeps its colour (its place in `methods`) across
  panels.

  Each panel has its own y range (`y_range`), so that its gap shows.
  """
  palette = plt.get_cmap('tab10').colors
  colours = {m: palette[i % len(palette)] for i, m in enumerate(methods)}
  figure, all_axes = plt.subplots(
    1,
    len(panel_bands),
    figsize=(1.0 + 5.0 * len(panel_bands), 4.4),
    squeeze=False,
  )
  for axes, bands in zip(all_axes[0], panel_bands):
    _plot_panel(axes, bands, under_test, colours)
  all_axes[0][0].set_ylabel(
    "test accuracy (%): seeds' mean and range", fontsize=11
  )
  figure.suptitle(title, fontsize=12)
  figure.tight_layout()
  temporary = f'{path}.tmp{os.getpid()}'
  figure.savefig(temporary, format='png', dpi=100)
  plt.close(figure)
  os.replace(temporary, path)
