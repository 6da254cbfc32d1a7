r"""Collect-all against TFF's mean: seconds per aggregation, one process.

  bazel run //benchmarks:collect_benchmark -- \
      --benchmark_output_dir=$PWD/benchmarks/results

For each cohort size n and model size D, runs `tff.aggregators.MeanFactory`
and `CollectAllFactory(max_clients=n)` on the same n client values (one
float32 [D] tensor each) on the local TFF worker. As in a training round,
the values are made on the clients (`common.random_value` from each
client's seed) and the aggregate is consumed at the server, which returns
only a checksum (the sum of squares of the mean; for collect-all, of its
row mean), so nothing model-sized crosses the driver and the worker.
Reports the median seconds of `--repeats` calls after one warm-up call of
each, the seconds of making and summing the values alone (the part both
columns share), the ratio, and collect-all's seconds per collected element
above that shared part, which stays flat when the aggregation is O(n D).
The two checksums must agree. Each measurement runs on a local worker
started for it, whose peak resident memory is reported. Combinations above
`--max_collected_gb` (n D 4 bytes) are skipped and reported.
Writes `collect_benchmark.json` and `collect_benchmark.md`.
"""

import experiments  # noqa: F401  # pylint: disable=unused-import,g-bad-import-order
# (Sets TensorFlow's C++ log level before TensorFlow loads.)

import collections
import os
import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from benchmarks import common
from experiments import run_files
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
  'max_collected_gb',
  4.0,
  'Skip combinations with a larger n * D * 4 bytes (the worker holds the '
  "clients' values, the collected slots and the stacked result: about 3 "
  'such copies).',
)


def _calls(value_type):
  """(values alone, mean, collect-all) computations of the client seeds."""
  weight_type = tff.TensorType(np.float32)
  seeds_type = tff.FederatedType(np.int32, tff.CLIENTS)

  @tff.tensorflow.computation(np.int32)
  def make(seed):
    return common.random_value(value_type, seed)

  @tff.tensorflow.computation(np.int32)
  def make_and_sum(seed):
    return common.checksum(common.random_value(value_type, seed))

  @tff.tensorflow.computation(np.int32)
  def unit_weight(seed):
    del seed
    return tf.constant(1.0)

  @tff.federated_computation(seeds_type)
  def values_alone(seeds):
    return tff.federated_map(make_and_sum, seeds)

  def aggregation(factory, consume):
    process = factory.create(value_type, weight_type)

    @tff.federated_computation(seeds_type)
    def call(seeds):
      output = process.next(
        process.initialize(),
        tff.federated_map(make, seeds),
        tff.federated_map(unit_weight, seeds),
      )
      return tff.federated_map(consume, output.result)

    return call

  @tff.tensorflow.computation
  def mean_checksum(mean):
    return common.checksum(mean)

  @tff.tensorflow.computation
  def collected_checksum(collected):
    return common.checksum(tf.reduce_mean(collected['values'], axis=0))

  def collect_all(n):
    return aggregation(collect.CollectAllFactory(n), collected_checksum)

  return (
    values_alone,
    aggregation(tff.aggregators.MeanFactory(), mean_checksum),
    collect_all,
  )


def main(argv):
  output_dir = common.output_dir(argv, _OUTPUT_DIR.value)
  rows = []
  for size in (int(s) for s in _SIZES.value):
    value_type = tff.TensorType(np.float32, [size])
    values_alone, mean, collect_all = _calls(value_type)
    for n in (int(c) for c in _COHORTS.value):
      row = collections.OrderedDict(clients=n, parameters=size)
      gigabytes = n * size * 4 / 2**30
      if gigabytes > _MAX_GB.value:
        row['skipped'] = (
          f'collected result {gigabytes:.1f} GB > --max_collected_gb'
        )
        rows.append(row)
        print(dict(row), flush=True)
        continue
      seeds = list(range(n))

      def timed(call, seeds=seeds):
        return common.on_fresh_worker(
          lambda: common.median_seconds(lambda: call(seeds), _REPEATS.value)
        )

      (row['values_seconds'], _), row['values_worker_mb'] = timed(values_alone)
      (row['mean_seconds'], mean_sum), row['mean_worker_mb'] = timed(mean)
      (row['collect_seconds'], collect_sum), row['collect_worker_mb'] = timed(
        collect_all(n)
      )
      np.testing.assert_allclose(collect_sum, mean_sum, rtol=1e-5)
      row['ratio_to_mean'] = row['collect_seconds'] / row['mean_seconds']
      row['collect_ns_per_element'] = (
        (row['collect_seconds'] - row['values_seconds']) / (n * size) * 1e9
      )
      print(dict(row), flush=True)
      rows.append(row)
  results = collections.OrderedDict(
    date=time.strftime('%Y-%m-%d'),
    cpus=os.cpu_count(),
    repeats=_REPEATS.value,
    rows=rows,
  )
  run_files.write_json(
    os.path.join(output_dir, 'collect_benchmark.json'), results
  )
  lines = [
    '| clients n | parameters D | values alone s | MeanFactory s | '
    'CollectAll s | ratio | collect ns per element | worker peak MB '
    '(values alone / mean / collect) |',
    '|---|---|---|---|---|---|---|---|',
  ]
  for r in rows:
    if 'skipped' in r:
      lines.append(
        f'| {r["clients"]} | {r["parameters"]:,} | - | - | - | - | '
        f'- | skipped: {r["skipped"]} |'
      )
    else:
      lines.append(
        f'| {r["clients"]} | {r["parameters"]:,} | '
        f'{r["values_seconds"]:.3f} | {r["mean_seconds"]:.3f} '
        f'| {r["collect_seconds"]:.3f} | {r["ratio_to_mean"]:.2f} | '
        f'{r["collect_ns_per_element"]:.2f} | '
        f'{r["values_worker_mb"]:.0f} / {r["mean_worker_mb"]:.0f} / '
        f'{r["collect_worker_mb"]:.0f} |'
      )
  run_files.write_text(
    os.path.join(output_dir, 'collect_benchmark.md'), '\n'.join(lines) + '\n'
  )
  print('\n'.join(lines))


if __name__ == '__main__':
  app.run(main)
