"""What every benchmark binary does around its measurements."""

from collections.abc import Callable, Sequence
import os
import time

import numpy as np
import tensorflow as tf

from experiments import experiment
from experiments import run_files
from tff_aggregators import runtime
from tff_aggregators import value_types


def output_dir(argv: Sequence[str], flag_value: str) -> str:
  """Checks the command line; returns the created `--benchmark_output_dir`."""
  if len(argv) > 1:
    raise SystemExit(f'error: unexpected arguments {argv[1:]}')
  if not flag_value:
    raise SystemExit('error: --benchmark_output_dir is required.')
  experiment.quiet_other_info_logs()
  path = run_files.resolve_path(flag_value)
  os.makedirs(path, exist_ok=True)
  return path


def median_seconds(
  call: Callable[[], object], repeats: int, budget_seconds: float | None = None
):
  """(median seconds of the timed calls, last result), after a warm-up call.

  Times `repeats` calls, or fewer (at least one) once `budget_seconds` of
  timed calls have passed.
  """
  result = call()  # Warm-up: tracing, worker caches.
  times = []
  while len(times) < repeats and (
    not times or budget_seconds is None or sum(times) < budget_seconds
  ):
    started = time.monotonic()
    result = call()
    times.append(time.monotonic() - started)
  return float(np.median(times)), result


class WorkerDiedError(RuntimeError):
  """The worker of a measurement died (killed by the kernel: out of memory)."""


def on_fresh_worker(measure: Callable[[], object]):
  """(measure(), the peak MB of a local worker started for it alone).

  The worker is stopped afterwards, so each measurement's peak is its own
  (a worker's allocator keeps what earlier computations freed).

  Raises:
    WorkerDiedError: If the worker died during the measurement.
  """
  worker = runtime.use_local_worker()
  try:
    try:
      result = measure()
    except Exception as e:  # pylint: disable=broad-except
      if worker.poll() is None:
        raise
      raise WorkerDiedError(
        f'the worker died (exit status {worker.poll()}; out of memory?)'
      ) from e
    return result, worker.memory_mb()
  finally:
    worker.stop()


def random_value(value_type, seed: tf.Tensor, scale: float = 1e-3):
  """In TF code: a value of `value_type`, uniform in [-scale/2, scale/2).

  Used inside `tff.tensorflow.computation`s placed at CLIENTS so that client
  values are made where a round's client training would make them, instead of
  travelling from the Python driver (which bounds the cells by driver-worker
  transfer and the 2 GB limit of one serialised value). `seed` is the
  client's int32 seed; leaf i uses the stateless seed (seed, i).
  """
  leaves = [
    scale
    * (
      tf.random.stateless_uniform(
        leaf.shape, seed=tf.stack([seed, i]), dtype=tf.float32
      )
      - 0.5
    )
    for i, leaf in enumerate(value_types.leaf_types(value_type))
  ]
  return tf.nest.pack_sequence_as(value_types.template(value_type), leaves)


def checksum(value) -> tf.Tensor:
  """In TF code: the float64 sum of squares of every element of a structure.

  Casts each leaf to float64 (twice its size): use it on model-sized values,
  not on collected [n, D] ones (reduce those over the clients first).
  """
  return tf.add_n(
    [
      tf.reduce_sum(tf.square(tf.cast(x, tf.float64)))
      for x in tf.nest.flatten(value)
    ]
  )
