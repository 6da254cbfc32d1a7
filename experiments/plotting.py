"""Accuracy curves with matplotlib (headless)."""

import os
from collections.abc import Mapping, Sequence
from typing import Optional

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
from matplotlib import ticker  # pylint: disable=g-import-not-at-top


def plot_accuracy(
  curves: Mapping[str, tuple[Sequence[int], Sequence[float]]],
  path: str,
  *,
  title: Optional[str] = None,
  ylabel: str = 'test accuracy',
) -> None:
  """Plots test accuracy (or `ylabel`) against round, one line per label.

  The file is written to a temporary name and renamed, so `path` is never
  left half-written.
  """
  # Many lines (a curve per tensor): the legend goes beside the plot.
  beside = len(curves) > 6
  figure, axes = plt.subplots(figsize=(9.0 if beside else 6.4, 4.2))
  if beside:  # 20 colours before one repeats, not 10.
    axes.set_prop_cycle(color=plt.get_cmap('tab20').colors)
  for label, (rounds, accuracies) in curves.items():
    axes.plot(
      rounds,
      accuracies,
      marker='.' if len(rounds) < 50 else None,
      label=label or None,
    )
  axes.set_xlabel('round')
  axes.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
  axes.set_ylabel(ylabel)
  axes.grid(alpha=0.3)
  if title:
    axes.set_title(title)
  if any(curves):
    if beside:
      axes.legend(
        loc='upper left', bbox_to_anchor=(1.01, 1.0), fontsize='small'
      )
    else:
      axes.legend()
  figure.tight_layout()
  temporary = f'{path}.tmp{os.getpid()}'
  figure.savefig(temporary, format='png', dpi=120)
  plt.close(figure)
  os.replace(temporary, path)
