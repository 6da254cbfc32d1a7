"""What every benchmark binary does around its measurements."""

from collections.abc import Callable, Sequence
import os
import time

import numpy as np
import tensorflow as tf

from experiments import experiment
from tff_aggregators import value_types


def output_dir(argv: Sequence[str], flag_value: str) -> str:
  """Checks the command line; returns the created `--benchmark_output_dir`."""
  if len(argv) > 1:
    raise SystemExit(f'error: unexpected arguments {argv[1:]}')
  if not flag_value:
    raise SystemExit('error: --benchmark_output_dir is required.')
  experiment.quiet_other_info_logs()
  path = experiment.resolve_path(flag_value)
  os.makedirs(path, exist_ok=True)
  return path


def median_seconds(call: Callable[[], object], repeats: int):
  """(median seconds of `repeats` calls after a warm-up call, last result)."""
  result = call()  # Warm-up: tracing, worker caches.
  times = []
  for _ in range(repeats):
    started = time.monotonic()
    result = call()
    times.append(time.monotonic() - started)
  return float(np.median(times)), result


def random_value(value_type, seed: tf.Tensor, scale: float = 1e-3):
  """In TF code: a value of `value_type`, uniform in [-scale/2, scale/2).

  Used inside `tff.tensorflow.computation`s placed at CLIENTS so that client
  values are made where a round's client training would make them, instead of
  travelling from the Python driver (which bounds the cells by driver-worker
  transfer and the 2 GB limit of one serialised value). `seed` is the
  client's int32 seed; leaf i uses the stateless seed (seed, i).
  """
  leaves = [
      scale * (tf.random.stateless_uniform(
          leaf.shape, seed=tf.stack([seed, i]), dtype=tf.float32) - 0.5)
      for i, leaf in enumerate(value_types.leaf_types(value_type))
  ]
  return tf.nest.pack_sequence_as(value_types.template(value_type), leaves)


def checksum(value) -> tf.Tensor:
  """In TF code: the float64 sum of every element of a structure."""
  return tf.add_n([tf.reduce_sum(tf.cast(x, tf.float64))
                   for x in tf.nest.flatten(value)])
