"""Writes the Fashion-MNIST reproduction's reports from the run files.

`results/fmnist/README.md` (`write_index`): the verdict table (every method
under test and setting: the paper's gain, ours, the rounds, a verdict by
`verdict`'s rule), each cell's main finding (`notes/summary.md`), then the
runs' status and hours. `results/fmnist/<cell>/README.md` (`write_report`):
summary, main table, curves, protocol deviations. `<cell>/APPENDIX.md`:
every number behind it (per-seed rounds and round times, best rounds, the
per-seed comparison, plotted metrics) and the run-by-run notes. The prose is
the cells' Markdown notes (`cells.notes`), included as written. Each
function below builds one table or section.
"""

import collections
import os

import numpy as np

from experiments import plotting
from experiments import run_files
from results.fmnist import cells
from results.fmnist import curves
from results.fmnist import runs as runs_lib

REGENERATE = 'bazel run //results/fmnist:reproduce -- --report_only'
MARGIN_FLOOR = 0.1  # Points: the verdict's least margin (one seed's).
VERDICT_RULE = (
  "g is our gain (the method's last-10-round accuracy "
  "minus its baseline's, paired by seed, mean over seeds), p the "
  "paper's, and the margin m our seed spread: the std of the per-seed "
  'gains, at least 0.1 point (one seed has no spread, so its margin is '
  '0.1 and its verdict provisional). In this order: **reproduced**: g is '
  'within m of p and further than m from 0. **inconclusive**: g is within '
  'm of 0, and p is within m of 0 or of g (our seeds cannot tell the '
  "paper's gain from none). **not reproduced: no gain**: g is within m "
  "of 0, p is not. **not reproduced: loss (or gain), paper's within "
  'spread**: p is within m of 0, g is not. **same sign, smaller** (or '
  '**larger**): g and p are further than m from 0 and from each other, '
  'with one sign. **not '
  'reproduced: opposite sign**: the same, with opposite signs. **no paper '
  'number**: the paper has none (ours is called a gain, a loss or no gain '
  "by the same margin). A paper number on another data set (FedGLAD's "
  'MNIST) is compared by the same rule and labelled as such.'
)


# Formatting.


def signed(value) -> str:
  text = f'{value:+.2f}'
  return '+0.00' if text == '-0.00' else text


def floor4(value) -> str:
  """`value` to 4 decimals, rounded down (a lower bound stays one)."""
  return f'{np.floor(value * 1e4) / 1e4:.4f}'


def seeds_text(n) -> str:
  return f'{n} seed{"s" if n > 1 else ""}'


def stat_text(stat, sign=False) -> str:
  """'87.08 ± 1.36' over seeds; one seed has no spread: '75.56'."""
  mean, std, n = stat
  value = signed(mean) if sign else f'{mean:.2f}'
  return value if n == 1 else f'{value} ± {std:.2f}'


def format_stat(stat, not_counted=()) -> str:
  """A mean over seeds, how many, and the unfinished seeds left out."""
  if stat is None:
    return 'not run'
  excluded = ''.join(f'; seed {s} unfinished, not counted' for s in not_counted)
  return f'{stat_text(stat)} ({seeds_text(stat[2])}{excluded})'


def format_gain(stat, baseline) -> str:
  """A gain over seeds, naming its baseline and how many seeds it pairs."""
  if stat is None:
    return ''
  return f'{stat_text(stat, sign=True)} vs {baseline} ({seeds_text(stat[2])})'


def short_name(cell: cells.Cell) -> str:
  """The paper's method: the title's first word ('FedLAW'), else the name."""
  return cell.title.split()[0].rstrip(',') if cell.title else cell.name


# Verdicts.


def verdict(gain, paper_gain) -> str:
  """Our gain (mean, std, n) against the paper's, by `VERDICT_RULE`."""
  if gain is None:
    return ''
  mean, std, _ = gain
  margin = max(std, MARGIN_FLOOR)
  ours_none = abs(mean) <= margin
  kind = 'no gain' if ours_none else ('gain' if mean > 0 else 'loss')
  if paper_gain is None:
    return f'no paper number ({kind})'
  near_paper = abs(mean - paper_gain) <= margin
  paper_none = abs(paper_gain) <= margin
  if near_paper and not ours_none:
    return 'reproduced'
  if ours_none:
    return (
      'inconclusive' if paper_none or near_paper else 'not reproduced: no gain'
    )
  if paper_none:
    return f"not reproduced: {kind}, paper's within spread"
  if (mean > 0) != (paper_gain > 0):
    return 'not reproduced: opposite sign'
  return (
    'same sign, smaller' if abs(mean) < abs(paper_gain) else 'same sign, larger'
  )


def row_verdict(row: runs_lib.Row) -> str:
  """`verdict`, or why there is none (not run, no gain measured yet)."""
  if row.method == row.baseline:
    return ''
  if not row.runs:
    return 'not run'
  if row.gain is None:
    return 'not measured yet (unfinished)'
  return verdict(row.gain, row.paper_gain)


def rounds_text(cell: cells.Cell, row: runs_lib.Row) -> str:
  """The rounds of a row's counted runs: '200', '80 of 200, reduced'."""
  counted = runs_lib.counted(row.runs)
  if not counted:
    return '-'
  values = sorted({r['rounds'] for r in counted.values()})
  text = str(values[0]) if len(values) == 1 else f'{values[0]}-{values[-1]}'
  if not all(r['planned'] for r in counted.values()):
    return f'{text} of {cell.planned_rounds(row.setting)}, unfinished'
  if values[0] < cell.rounds:
    return f'{text} of {cell.rounds}, reduced'
  return text


def paper_label(cell: cells.Cell) -> str:
  """' (MNIST)' where the paper's numbers are another data set's."""
  if cell.paper_dataset == 'Fashion-MNIST':
    return ''
  return f' ({cell.paper_dataset})'


# The index: results/fmnist/README.md.


def _verdict_row(cell: cells.Cell, row: runs_lib.Row) -> str:
  paper_gain = (
    '' if row.paper_gain is None else signed(row.paper_gain) + paper_label(cell)
  )
  ours = (
    ''
    if row.gain is None
    else f'{stat_text(row.gain, sign=True)} ({seeds_text(row.gain[2])})'
  )
  return (
    f'| [{short_name(cell)}]({cell.name}/README.md) | {row.method} vs '
    f'{row.baseline} | {row.setting} | {paper_gain} | {ours} | '
    f'{rounds_text(cell, row)} | {row_verdict(row)} |'
  )


def verdict_table_lines(all_rows) -> list[str]:
  """One row per method under test and setting, cell by cell."""
  lines = [
    '| paper | method vs baseline | setting | paper gain | our gain '
    '(mean ± std over seeds) | rounds | verdict |',
    '|---|---|---|---|---|---|---|',
  ]
  for cell, rows in all_rows:
    lines += [
      _verdict_row(cell, r) for r in rows if r.method in cell.headline_methods()
    ]
  return lines


def finding_lines(all_cells) -> list[str]:
  """Each cell's main finding (`notes/summary.md`), one paragraph each."""
  lines = ['## Main findings', '']
  for cell in all_cells:
    text = cells.notes(cell.name, 'summary')
    if text:
      lines += [f'**[{short_name(cell)}]({cell.name}/README.md).** {text}', '']
  return lines


def _forked_rounds(cell, method) -> int:
  """The rounds a run of `method` has from its fork's source (or 0)."""
  return cell.forks.get(method, (None, 0))[1]


def round_seconds(cell, measured, setting, method):
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
  same_model = [
    s for s in cell.settings if cell.run_flags(s, method).get('model') == model
  ]
  candidates = [(setting, m) for m in chain]
  candidates += [(s, m) for m in chain for s in same_model]
  for key in candidates:
    if measured.get(key):
      return float(np.median(measured[key]))
  return None


def reduced_text(cell: cells.Cell) -> str:
  """'80' where every setting is reduced to 80, else '80 (a, b), 60 (c)'."""
  settings_of = collections.defaultdict(list)
  for setting, rounds in cell.reduced_rounds.items():
    settings_of[rounds].append(setting)
  if len(settings_of) == 1 and set(cell.reduced_rounds) == set(cell.settings):
    return str(next(iter(settings_of)))
  return ', '.join(
    f'{rounds} ({", ".join(settings)})'
    for rounds, settings in settings_of.items()
  )


def _measured(cell, summary):
  """(finished runs, (setting, method) -> the runs' median round times)."""
  finished = set()
  seconds = collections.defaultdict(list)
  for (setting, method), runs in summary.items():
    for seed, run in runs.items():
      if run['planned']:
        finished.add((setting, method, seed))
      if run['round_seconds'] is not None:
        seconds[(setting, method)].append(run['round_seconds'])
  return finished, seconds


def _hours_to_go(cell, finished, seconds, own_rounds) -> str:
  """The rounds not run yet of every planned run, at their round times.

  An unfinished run restarts (no checkpoints are committed); a fork's first
  rounds come from its source's checkpoint, unless the source is finished:
  it is not rerun, and the fork starts from round 1 (`reproduce._run`).
  """
  to_go, unknown = 0.0, 0
  for setting in cell.settings:
    for method in cell.methods:
      for seed in cell.seeds:
        rounds_left = own_rounds[(setting, method)]
        if (
          method in cell.forks
          and (setting, cell.forks[method][0], seed) in finished
        ):
          rounds_left = cell.planned_rounds(setting)
        if (
          (setting, method, seed) in finished
          or not rounds_left
          or method in cell.shared
        ):  # A shared run is counted there.
          continue
        estimate = round_seconds(cell, seconds, setting, method)
        if estimate is None:
          unknown += 1
        else:
          to_go += rounds_left * estimate / 3600
  return f'{to_go:.1f}' + (
    f' + {unknown} run{"s" if unknown > 1 else ""} unknown' if unknown else ''
  )


def _status_row(cell, summary, base):
  """A cell's row of the runs table, and its round-time spreads."""
  planned = len(cell.settings) * len(cell.methods) * len(cell.seeds)
  finished, seconds = _measured(cell, summary)
  own_rounds = {
    (s, m): max(0, cell.planned_rounds(s) - _forked_rounds(cell, m))
    for s in cell.settings
    for m in cell.methods
  }
  hours = (
    ', '.join(
      f'{setting}/{method} '
      f'{np.median(s) * own_rounds[(setting, method)] / 3600:.1f}'
      for (setting, method), s in seconds.items()
    )
    or 'not measured'
  )
  spreads = [
    (min(s), max(s), f'{cell.name} {setting}/{method}')
    for (setting, method), s in seconds.items()
    if len(s) > 1
  ]
  report = os.path.join(cell.name, 'README.md')
  link = (
    f'[{report}]({report})'
    if os.path.exists(os.path.join(base, report))
    else 'not run yet'
  )
  title = cell.title + (
    f' **reduced: {reduced_text(cell)} of {cell.rounds} rounds**'
    if cell.reduced_rounds
    else ''
  )
  row = (
    f'| {cell.name} | {title} | {len(finished)} / {planned} | '
    f'{hours} | {_hours_to_go(cell, finished, seconds, own_rounds)} | '
    f'{link} |'
  )
  return row, spreads


def runs_section_lines(all_cells, summaries, base) -> list[str]:
  """The runs' status: finished / planned, hours per run and to go."""
  rows, spreads = [], []
  for cell in all_cells:
    row, spread_of_cell = _status_row(cell, summaries[cell.name], base)
    rows.append(row)
    spreads += spread_of_cell
  spread = ''
  if spreads:
    fastest, slowest, where = max(spreads, key=lambda r: r[1] / r[0])
    spread = (
      f'; the runs of one setting and method have taken from '
      f'{fastest:.1f} to {slowest:.1f} s per round ({where}), on '
      'machines of the same size, alone or beside another run'
    )
  return (
    [
      '## Runs and hours',
      '',
      "Hours per run: the planned rounds (the protocol's, or a reduced "
      "protocol's where the cell says so; a forked run's own rounds, after "
      'its fork) times the median round time measured so far on the '
      "project's 2-core machines (per setting and method, over the runs "
      "that exist; a round's training only, evaluation and checkpoints add "
      f'to it{spread}). Hours to go, from a fresh checkout: the rounds not '
      'run yet of every planned run, where an unfinished run counts from '
      "round 1 as it restarts there (a forked run's first rounds are its "
      "source's, unless the source is finished: it is not rerun, and the "
      'fork runs from round 1), each at its measured round time, else at an '
      'estimate from another run (`round_seconds`: its baseline, or the same '
      'method on the same model); runs with neither are counted as '
      'unknown.',
      '',
      '| cell | protocol | runs finished / planned | hours per run '
      '(measured) | hours to go (estimated) | report |',
      '|---|---|---|---|---|---|',
    ]
    + rows
    + ['']
  )


def index_intro_lines() -> list[str]:
  return [
    '# Fashion-MNIST reproduction of the five papers',
    '',
    "Did our implementation of each method reproduce its paper's gain "
    "over the paper's baseline? One row per method under test and "
    "setting. Gain: the method's mean test accuracy over the last 10 "
    "rounds minus its baseline's, in points, paired by seed; ours is "
    'the mean ± std over seeds (population std). Rounds: those of our '
    "runs (fewer than the paper's where a cell runs a reduced protocol). "
    "Verdict: by the rule below the table. Each paper's report has its "
    'other rows, curves and protocol deviations; its appendix every '
    'number per seed.',
    '',
  ]


def index_method_lines() -> list[str]:
  return [
    '## How the numbers are made',
    '',
    "Each cell runs `//experiments:fmnist` with its paper's protocol "
    "(`cells.py`) and reports the paper's numbers beside ours, from real "
    'runs only. Regenerate a cell with `bazel run '
    '//results/fmnist:reproduce -- --cell=<name>` (it skips finished runs, '
    'resumes an unfinished one from its checkpoint in the same checkout, '
    'and rewrites the report); `--report_only` rewrites the reports from '
    'the run files (without `--cell`, every report; '
    '`tests/reports/fmnist_reports_test` checks that the committed reports are '
    'what it writes from the committed run files). Checkpoints are not '
    'committed: in a fresh checkout an unfinished run starts again from '
    'round 1.',
    '',
    'Differences every cell shares with TFF: the client optimizer state is '
    'reset every round (except in the `_persistent` and `_all` methods of '
    'the protocol-factor cells, fedlws_protocol and fedlaw_protocol, whose '
    'clients keep their momentum across the rounds they take part in); a '
    "client's data is repeated E times and then "
    'batched, so a batch can straddle two epochs.',
    '',
  ]


def write_index(root: str, all_cells=None) -> str:
  """Writes `results/fmnist/README.md`: verdicts, findings, runs."""
  if all_cells is None:
    all_cells = tuple(cells.CELLS.values())
  base = os.path.join(root, 'results', 'fmnist')
  summaries = {c.name: runs_lib.collect(root, c) for c in all_cells}
  all_rows = [(c, runs_lib.rows(c, summaries[c.name])) for c in all_cells]
  lines = (
    index_intro_lines()
    + verdict_table_lines(all_rows)
    + ['']
    + ['## Verdict rule', '', VERDICT_RULE, '']
    + finding_lines(all_cells)
    + index_method_lines()
    + runs_section_lines(all_cells, summaries, base)
  )
  path = os.path.join(base, 'README.md')
  run_files.write_text(path, '\n'.join(lines))
  return path


# A cell's report: results/fmnist/<cell>/README.md.


def summary_lines(cell: cells.Cell, rows) -> list[str]:
  """The main finding, then the verdicts counted (at most ten lines)."""
  counts = collections.Counter(row_verdict(r) for r in rows if row_verdict(r))
  lines = []
  text = cells.notes(cell.name, 'summary')
  if text:
    lines += [text, '']
  if counts:
    lines += [
      'Verdicts ([rule](../README.md#verdict-rule)): '
      + '; '.join(f'{name}: {n}' for name, n in counts.most_common())
      + '.',
      '',
    ]
  return lines


def _ours_text(cell: cells.Cell, row: runs_lib.Row) -> str:
  """Our accuracy over seeds; the rounds where not the protocol's."""
  text = format_stat(row.ours, row.not_counted)
  rounds = rounds_text(cell, row)
  if row.ours is not None and rounds != str(cell.rounds):
    text = text[:-1] + f'; rounds: {rounds})'
  return text


def main_table_lines(cell: cells.Cell, rows) -> list[str]:
  """setting, method, paper, ours, the two gains, verdict: 7 columns."""
  label = paper_label(cell)
  lines = [
    f'| setting | method | paper{label} | ours | paper gain{label} | '
    'our gain | verdict |',
    '|---|---|---|---|---|---|---|',
  ]
  for row in rows:
    method = (
      row.method
      if row.method == row.baseline
      else f'{row.method} (vs {row.baseline})'
    )
    gain = (
      ''
      if row.gain is None
      else f'{stat_text(row.gain, sign=True)} ({seeds_text(row.gain[2])})'
    )
    lines.append(
      f'| {row.setting} | {method} | '
      f'{"" if row.paper is None else f"{row.paper:.2f}"} | '
      f'{_ours_text(cell, row)} | '
      f'{"" if row.paper_gain is None else signed(row.paper_gain)} | '
      f'{gain} | {row_verdict(row)} |'
    )
  return lines + ['']


def metric_note_lines(cell: cells.Cell) -> list[str]:
  seeds = ', '.join(map(str, cell.seeds))
  return [
    f'Paper: {cell.source}. '
    f'Metric: mean test accuracy (%) of the last {runs_lib.LAST_ROUNDS} '
    'rounds, mean ± std over seeds (population std); gain: against the '
    f'baseline named, paired by seed. Protocol: {cell.rounds} rounds, '
    f'seeds {seeds}. Every number per seed, the rounds and round times of '
    'each run, and the run-by-run notes: [APPENDIX.md](APPENDIX.md). '
    'Regenerate: `bazel run //results/fmnist:reproduce -- '
    f'--cell={cell.name}` (resumes unfinished runs).',
    '',
  ]


def curve_lines(accuracy_plots, metric_plots) -> list[str]:
  """The accuracy plots inline; the metric plots (first seed) linked."""
  lines = ['## Curves', '']
  if accuracy_plots:
    lines += [
      'Mean test accuracy per round over the seeds, the band their '
      'range (lowest to highest); a panel per method under test and '
      'its baseline, the method dashed, each over the seeds every '
      'method of the panel has (a one-seed method beside the '
      "baseline's run of that seed). Each y axis spans the last half "
      'of the rounds, so early rounds may run below it.',
      '',
    ]
    lines += [f'![{name}]({name})' for name in accuracy_plots] + ['']
  if metric_plots:
    lines += [
      'Per-round metrics (first seed of each method): '
      + ', '.join(f'[{name}]({name})' for name in metric_plots),
      '',
    ]
  return lines


def deviation_lines(cell: cells.Cell) -> list[str]:
  """The reduced protocol and the differences from the paper's."""
  lines = ["## Differences from the paper's protocol", '']
  if cell.reduced_rounds:
    lines += [
      f"**Reduced protocol: {reduced_text(cell)} of the paper's "
      f'{cell.rounds} rounds.** {cells.notes(cell.name, "reduced")}',
      '',
    ]
  deviations = cells.notes(cell.name, 'deviations')
  return lines + ([deviations, ''] if deviations else [])


# Plots.


def plot_setting(cell, summary, setting, base):
  """The setting's accuracy plot, a panel per method group; its file name."""
  runs = {}
  for method in cell.methods:
    use = runs_lib.counted(summary[(setting, method)])
    if use:
      runs[method] = use
  if not runs:
    return None
  name = f'{setting}.png'
  under_test = cell.headline_methods()
  groups = curves.panels(list(cell.methods), cell.baseline_of, under_test)
  groups = [[m for m in g if m in runs] for g in groups]
  groups = [g for g in groups if g] or [list(runs)]
  curves.plot_bands(
    [_paired_bands({m: runs[m] for m in group}) for group in groups],
    os.path.join(base, name),
    title=f'{short_name(cell)}: {setting}',
    methods=list(runs),
    under_test=under_test,
  )
  return name


def _paired_bands(runs):
  """Each method's band over the seeds all of `runs`' methods have.

  A one-seed method beside a three-seed baseline is drawn against the
  baseline's run of that seed, as the gains pair them; methods sharing no
  seed are drawn over their own seeds.
  """
  common = set.intersection(*(set(r) for r in runs.values()))
  bands = {}
  for method, by_seed in runs.items():
    use = {s: r for s, r in by_seed.items() if s in common} or by_seed
    bands[method] = runs_lib.seed_band(use) + (len(use),)
  return bands


def plot_metrics(cell, summary, setting, base) -> list[str]:
  """The setting's per-round metric plots (first seed of each method)."""
  names = []
  for column in cell.plotted_metrics:
    series = {}
    for method in cell.methods:
      runs = summary[(setting, method)]
      if runs:
        for label, curve in runs_lib.metric_curves(
          runs[min(runs)]['rows'], column
        ).items():
          series[f'{method}, {label}' if label else method] = curve
    if series:
      metric = column.rsplit('/', 1)[-1]
      names.append(f'{setting}_{metric}.png')
      plotting.plot_accuracy(
        series,
        os.path.join(base, names[-1]),
        title=f'{cell.name}: {setting}, {metric}',
        ylabel=metric,
      )
  return names


def write_plots(cell, summary, base):
  """Every plot of the cell; removes those of runs that are gone."""
  accuracy, metrics = [], []
  for setting in cell.settings:
    name = plot_setting(cell, summary, setting, base)
    accuracy += [name] if name else []
    metrics += plot_metrics(cell, summary, setting, base)
  for name in os.listdir(base):
    if name.endswith('.png') and name not in accuracy + metrics:
      os.remove(os.path.join(base, name))
  return accuracy, metrics


# A cell's appendix: results/fmnist/<cell>/APPENDIX.md.


def rounds_label(run) -> str:
  """A run's rounds: '80 (reduced protocol), rounds 1-50 from ...'."""
  if run['complete']:
    label = str(run['rounds'])
  elif run['planned']:
    label = f'{run["rounds"]} (reduced protocol)'
    if run['ran'] > run['rounds']:
      label = (
        f'{run["rounds"]} (reduced protocol; run to {run["ran"]}, '
        f'measured at {run["rounds"]})'
      )
  else:
    label = f'{run["rounds"]} (unfinished)'
  if run['forked']:
    label += (
      f', rounds 1-{run["forked"]["round"]} from '
      f'{os.path.basename(run["forked"]["source"])}'
    )
  return label


def appendix_intro_lines(cell: cells.Cell) -> list[str]:
  return [
    f'# {cell.title}: appendix',
    '',
    'The numbers behind [README.md](README.md), per run and per seed, and '
    'the notes written as the runs finished.',
    '',
    f'Paper: {cell.source}. Metric: mean test '
    f'accuracy (%) of the last {runs_lib.LAST_ROUNDS} rounds, mean ± std '
    'over seeds (every std in this report is the population std, dividing '
    'by n); test split minus the proxy set for every method. '
    f'Protocol: {cell.rounds} rounds, seeds '
    f'{", ".join(map(str, cell.seeds))}. A run that has not reached '
    'its planned rounds is marked unfinished: its number is the '
    'mean of its last 10 rounds, and its gain is against the '
    'baseline over the same rounds. A mean over seeds counts only a '
    "method's finished runs where it has any, else its unfinished "
    "ones. A gain pairs each counted seed with the baseline's run of "
    'that seed, leaves out a seed whose baseline has not reached the '
    'rounds compared or whose two runs have only rounds they share '
    "(a fork's copies), and names how many seeds it pairs.",
    '',
  ]


def _full_row(cell, row: runs_lib.Row) -> str:
  paper_gain = (
    ''
    if row.paper_gain is None
    else f'{signed(row.paper_gain)} vs {row.baseline}'
  )
  best = ''
  if cell.best_round:
    best = (
      f' {format_stat(row.best)} | {format_gain(row.best_gain, row.baseline)} |'
    )
  rounds = (
    ', '.join(rounds_label(r) for _, r in sorted(row.runs.items())) or '-'
  )
  seconds = (
    ', '.join(
      f'{r["round_seconds"]:.1f}'
      for _, r in sorted(row.runs.items())
      if r['round_seconds'] is not None
    )
    or '-'
  )
  return (
    f'| {row.setting} | {row.method} | '
    f'{"" if row.paper is None else f"{row.paper:.2f}"} | '
    f'{format_stat(row.ours, row.not_counted)} | {paper_gain} | '
    f'{format_gain(row.gain, row.baseline)} |{best} {rounds} | '
    f'{seconds} |'
  )


def full_table_lines(cell: cells.Cell, rows) -> list[str]:
  """Every (setting, method): means, gains, best rounds, rounds, times."""
  best_columns = (
    ' ours, best round | our gain, best round |' if cell.best_round else ''
  )
  return (
    [
      '## Every setting and method',
      '',
      f'| setting | method | paper{paper_label(cell)} | ours | paper gain | '
      f'our gain |{best_columns} rounds run (per seed) | median s / round |',
      '|---|---|---|---|---|---|' + '---|' * (2 * cell.best_round) + '---|---|',
    ]
    + [_full_row(cell, r) for r in rows]
    + ['']
  )


def paired_row(cell, setting, method, seed, run, base_run) -> str:
  """One seed of a method against its baseline (`paired_lines`)."""
  baseline = cell.baseline_of(method)
  shared = runs_lib.shared_rounds(cell, method, baseline, run, base_run)
  base_by_round = dict(zip(*base_run['curve']))
  ours = dict(zip(*run['curve']))
  rounds = [r for r in run['curve'][0] if r in base_by_round and r > shared]
  if len(rounds) < 4:  # Too few for quarters.
    return ''
  differences = np.array([100 * (ours[r] - base_by_round[r]) for r in rounds])
  last_ten, best = (
    '' if g is None else signed(g) for g in runs_lib.seed_gains(run, base_run)
  )
  spans = np.array_split(differences, 4)
  quarters = ' / '.join(signed(np.mean(q)) for q in spans)
  quarter_size = len(spans[-1])
  baseline_tail = [base_by_round[r] for r in rounds[-quarter_size:]]
  spread = f'{100 * np.std(baseline_tail):.2f}' if quarter_size > 1 else '-'
  second_half = differences[len(differences) // 2 :]
  largest = second_half[np.argmax(np.abs(second_half))]
  label = f'{len(rounds)}'
  if shared:
    label += f' (rounds {rounds[0]}-{rounds[-1]}; 1-{shared} shared)'
  if not (run['planned'] and base_run['planned']):
    label += ' (unfinished)'
  return (
    f'| {setting} | {method} vs {baseline} | {seed} | {label} | '
    f'{last_ten} | {best} | {quarters} | '
    f'{int(np.sum(differences > 0))} of {len(rounds)} | '
    f'{int(np.sum(spans[-1] > 0))} of {quarter_size} | '
    f'{signed(largest)} | {spread} |'
  )


def paired_lines(cell: cells.Cell, summary) -> list[str]:
  """Every seed of every method against its baseline, round by round.

  Over the rounds both runs have evaluated, after any they share
  (`runs.shared_rounds`), and at least 4: the quarters (the mean difference
  over four consecutive spans, equal to within a round), the rounds ahead,
  the signed largest gap in the second half, and the baseline's spread
  (std) over the last quarter.
  """
  rows = []
  for setting in cell.settings:
    for method in cell.methods:
      if method == cell.baseline_of(method):
        continue
      runs = summary[(setting, method)]
      base_runs = summary[(setting, cell.baseline_of(method))]
      for seed in sorted(set(runs) & set(base_runs)):
        rows.append(
          paired_row(cell, setting, method, seed, runs[seed], base_runs[seed])
        )
  rows = [r for r in rows if r]
  if not rows:
    return []
  return (
    [
      '## Per seed',
      '',
      'Each method against its baseline, in accuracy points '
      '(method minus baseline), over the rounds both runs have, after any '
      "they share (a fork's copied rounds). Every seed is listed, "
      "unfinished ones too. Last 10 and best round: the seed's gains as "
      'the table above defines them, over all rounds, shared ones '
      'included (last 10 is blank where the baseline has not reached the '
      "method's last 10 rounds). The other columns cover the compared "
      'rounds only. Quarters: the mean difference over four consecutive spans '
      'of those rounds, equal to within a round. Ahead: rounds the method '
      'is strictly above. Largest gap: the difference of largest size in '
      'the second half of those rounds, with its sign. Baseline spread: '
      "the std of the baseline's accuracy over their last quarter "
      '(round-to-round noise, plus any trend); - where that quarter is a '
      'single round.',
      '',
      '| setting | method | seed | rounds compared | last 10 | best round | '
      'quarters | ahead | ahead, last quarter | largest gap, second half | '
      'baseline spread, last quarter |',
      '|---|---|---|---|---|---|---|---|---|---|---|',
    ]
    + rows
    + ['']
  )


def metric_row(setting, method, seed, column, run) -> str:
  """A per-round metric of a run: early, lowest and late lowest values."""
  metric_curves = runs_lib.metric_curves(run['rows'], column)
  if not metric_curves:
    return ''
  # Elements x rounds.
  values = np.array([v for _, v in metric_curves.values()])
  early = values[:, : max(1, int(np.ceil(values.shape[1] / 10)))].mean(axis=1)
  early_text = (
    f'{early.min():.4f}'
    if early.size == 1
    else f'{early.min():.4f}-{early.max():.4f}'
  )
  late = values[:, values.shape[1] // 2 :]
  rounds = f'{values.shape[1]}' + ('' if run['planned'] else ' (unfinished)')
  return (
    f'| {setting} | {method} | {seed} | {column.rsplit("/", 1)[-1]} | '
    f'{rounds} | {early_text} | {floor4(values.min())} | '
    f'{floor4(late.min())} |'
  )


def metric_lines(cell: cells.Cell, summary) -> list[str]:
  """The plotted metrics of every run that reports them, summarised.

  Over the rounds that report the metric: the mean over their first tenth
  (rounded up; of a list metric, one value per tensor or layer, the range of
  the per-element means), the lowest value, and the lowest over their second
  half (both rounded down).
  """
  rows = [
    metric_row(setting, method, seed, column, run)
    for setting in cell.settings
    for method in cell.methods
    for seed, run in sorted(summary[(setting, method)].items())
    for column in cell.plotted_metrics
  ]
  rows = [r for r in rows if r]
  if not rows:
    return []
  return (
    [
      '## Plotted metrics',
      '',
      'Per run, over the rounds that report them. Early: '
      'the mean over the first tenth of those rounds (for a list metric, '
      'one value per tensor or layer: the range of the per-element means). '
      'Lowest: over every round and element. Late lowest: over the second '
      'half of those rounds. Lowest values are rounded down.',
      '',
      '| setting | method | seed | metric | rounds | early | lowest | late '
      'lowest |',
      '|---|---|---|---|---|---|---|---|',
    ]
    + rows
    + ['']
  )


def run_note_lines(cell: cells.Cell) -> list[str]:
  """The run-by-run notes (`notes/runs.md`), as written."""
  text = cells.notes(cell.name, 'runs')
  return ['## Notes on the runs', '', text, ''] if text else []


def write_summary_json(base, summary) -> None:
  """Every run's summary, without its curve and rows."""
  run_files.write_json(
    os.path.join(base, 'summary.json'),
    {
      f'{setting}/{method}': {
        str(seed): {
          k: v for k, v in r.items() if k not in ('curve', 'window', 'rows')
        }
        for seed, r in runs.items()
      }
      for (setting, method), runs in summary.items()
    },
  )


def appendix_path(report_path: str) -> str:
  return os.path.join(os.path.dirname(report_path), 'APPENDIX.md')


def write_report(cell: cells.Cell, root: str) -> str:
  """Writes a cell's README.md, APPENDIX.md, curves and summary.json.

  Returns the README's path (the appendix is beside it).
  """
  base = os.path.join(root, 'results', 'fmnist', cell.name)
  os.makedirs(base, exist_ok=True)
  summary = runs_lib.collect(root, cell)
  rows = runs_lib.rows(cell, summary)
  accuracy_plots, metric_plots = write_plots(cell, summary, base)
  readme = (
    [f'# {cell.title}', '']
    + summary_lines(cell, rows)
    + main_table_lines(cell, rows)
    + metric_note_lines(cell)
    + curve_lines(accuracy_plots, metric_plots)
    + deviation_lines(cell)
  )
  appendix = (
    appendix_intro_lines(cell)
    + full_table_lines(cell, rows)
    + paired_lines(cell, summary)
    + metric_lines(cell, summary)
    + run_note_lines(cell)
  )
  path = os.path.join(base, 'README.md')
  run_files.write_text(path, '\n'.join(readme))
  run_files.write_text(appendix_path(path), '\n'.join(appendix))
  write_summary_json(base, summary)
  return path
