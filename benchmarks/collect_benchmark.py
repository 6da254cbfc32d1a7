r"""Collect-all against TFF's mean: seconds per aggregation, one process.

  bazel run //benchmarks:collect_benchmark -- \
      --benchmark_output_dir=$PWD/benchmarks/results

For each cohort size n and model size D, runs `tff.aggregators.MeanFactory`
and `CollectAllFactory(max_clients=n)` on the same n client values (one
float32 [D] tensor each) on the local TFF worker, and reports the median
seconds of `--repeats` calls after one warm-up call, their ratio, and the
per-element cost of collect-all (seconds / (n D)), which stays flat when the
aggregation is O(n D). Client values are built from one random vector per
client (the driver holds n D floats). Combinations whose collected result
would exceed `--max_collected_gb` are skipped and reported as such (the
collected [n, D] tensor leaves the TFF worker as one protocol buffer, at most
2 GB, and the worker holds several copies of the inputs on the way).
Writes `collect_benchmark.json` and `collect_benchmark.md`.
"""

import experiments  # pylint: disable=unused-import,g-bad-import-order
# (Sets TensorFlow's C++ log level before TensorFlow loads.)

import collections
import json
import os
import time

from absl import app
from absl import flags
import numpy as np
import tensorflow_federated as tff

from experiments import experiment
from experiments import runtime
from tff_aggregators.aggregators import collect

_OUTPUT_DIR = flags.DEFINE_string(
    'benchmark_output_dir', None, 'Where to write the results (required).'
)
_COHORTS = flags.DEFINE_list('cohorts', ['10', '50', '100'], 'Cohort sizes.')
_SIZES = flags.DEFINE_list(
    'sizes', ['100000', '1000000', '10000000'], 'Parameters per client.'
)
_REPEATS = flags.DEFINE_integer('repeats', 3, 'Timed calls per combination.')
_MAX_GB = flags.DEFINE_float(
    'max_collected_gb', 0.5,
    'Skip combinations with a larger n * D * 4 bytes. Hard limit 2 GB (a TFF '
    'value travels as one protobuf); in practice the local TFF worker holds '
    'several copies of the clients\' values (at 10M parameters x 50 clients it '
    'exceeded 15 GB and was killed on a 24 GB machine).',
)


def _seconds(process, values, weights, repeats):
  state = process.initialize()
  process.next(state, values, weights)  # Warm-up: tracing, worker caches.
  times = []
  for _ in range(repeats):
    started = time.monotonic()
    output = process.next(state, values, weights)
    times.append(time.monotonic() - started)
  return float(np.median(times)), output


def main(argv):
  if len(argv) > 1:
    raise SystemExit(f'error: unexpected arguments {argv[1:]}')
  if not _OUTPUT_DIR.value:
    raise SystemExit('error: --benchmark_output_dir is required.')
  experiment.quiet_other_info_logs()
  output_dir = experiment.resolve_path(_OUTPUT_DIR.value)
  os.makedirs(output_dir, exist_ok=True)
  runtime.use_local_worker()
  rng = np.random.default_rng(0)
  rows = []
  for size in (int(s) for s in _SIZES.value):
    value_type = tff.types.to_type([tff.TensorType(np.float32, [size])])
    weight_type = tff.TensorType(np.float32)
    mean = tff.aggregators.MeanFactory().create(value_type, weight_type)
    for n in (int(c) for c in _COHORTS.value):
      row = collections.OrderedDict(clients=n, parameters=size)
      gigabytes = n * size * 4 / 2**30
      if gigabytes > _MAX_GB.value:
        row['skipped'] = f'collected result {gigabytes:.1f} GB > --max_collected_gb'
        rows.append(row)
        print(dict(row), flush=True)
        continue
      values = [[rng.standard_normal(size, dtype=np.float32)] for _ in range(n)]
      weights = [1.0] * n
      row['mean_seconds'], _ = _seconds(mean, values, weights, _REPEATS.value)
      collect_all = collect.CollectAllFactory(n).create(value_type, weight_type)
      row['collect_seconds'], output = _seconds(
          collect_all, values, weights, _REPEATS.value
      )
      np.testing.assert_array_equal(output.result['values'][-1], values[-1][0])
      row['ratio_to_mean'] = row['collect_seconds'] / row['mean_seconds']
      row['collect_ns_per_element'] = row['collect_seconds'] / (n * size) * 1e9
      print(dict(row), flush=True)
      rows.append(row)
      del values, output
  results = collections.OrderedDict(
      date=time.strftime('%Y-%m-%d'), cpus=os.cpu_count(),
      repeats=_REPEATS.value, rows=rows,
  )
  with open(os.path.join(output_dir, 'collect_benchmark.json'), 'w') as f:
    json.dump(results, f, indent=2)
  lines = [
      '| clients n | parameters D | MeanFactory s | CollectAll s | ratio | '
      'collect ns per element |',
      '|---|---|---|---|---|---|',
  ]
  for r in rows:
    if 'skipped' in r:
      lines.append(f'| {r["clients"]} | {r["parameters"]:,} | - | - | - | '
                   f'skipped: {r["skipped"]} |')
    else:
      lines.append(
          f'| {r["clients"]} | {r["parameters"]:,} | {r["mean_seconds"]:.3f} '
          f'| {r["collect_seconds"]:.3f} | {r["ratio_to_mean"]:.2f} | '
          f'{r["collect_ns_per_element"]:.2f} |'
      )
  with open(os.path.join(output_dir, 'collect_benchmark.md'), 'w') as f:
    f.write('\n'.join(lines) + '\n')
  print('\n'.join(lines))


if __name__ == '__main__':
  app.run(main)
