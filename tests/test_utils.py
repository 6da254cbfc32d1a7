"""Helpers shared by the tests: small real-format data, binaries, processes."""

from collections.abc import Callable
import gzip
import json
import os
import re
import sqlite3
import struct
import subprocess
import sys
import time
from typing import Optional
import uuid

import numpy as np
import tensorflow_federated as tff

from experiments import data
from experiments import partition
from experiments import tasks
from experiments import training

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(data.__file__)))
_MARKER_VARIABLE = 'TFF_AGGREGATORS_TEST_MARKER'
# Set by `make full_test`. `make test` (and CI) leave out the slow cases that
# repeat a code path another case covers, to stay within the time budget.
_FULL_SUITE_VARIABLE = 'TFF_AGGREGATORS_FULL_SUITE'


def is_full_suite() -> bool:
  """Whether this is `make full_test` (slow repeats of covered paths too)."""
  return os.environ.get(_FULL_SUITE_VARIABLE) == '1'


def skip_unless_full_suite(test_case, reason: str) -> None:
  """Skips `test_case` under `make test`; `make full_test` runs it."""
  if not is_full_suite():
    test_case.skipTest(f'{reason} (in `make full_test` only)')


def _write_idx(path: str, array: np.ndarray) -> None:
  """Writes `array` (uint8) in the IDX format of the MNIST files, gzipped."""
  magic = 0x0800 | array.ndim  # 0x08: unsigned byte.
  header = struct.pack('>I', magic) + b''.join(
    struct.pack('>I', d) for d in array.shape
  )
  with gzip.open(path, 'wb') as f:
    f.write(header + np.ascontiguousarray(array, np.uint8).tobytes())


def write_fashion_mnist_subset(
  directory: str, num_train: int, num_test: int
) -> data.ImageData:
  """Writes the first examples of the real Fashion-MNIST as its four files.

  Returns:
    The subset, as the loader should read it back.
  """
  full = data.load_fashion_mnist()
  os.makedirs(directory, exist_ok=True)
  subset = data.ImageData(
    train_images=full.train_images[:num_train],
    train_labels=full.train_labels[:num_train],
    test_images=full.test_images[:num_test],
    test_labels=full.test_labels[:num_test],
    num_classes=10,
  )
  arrays = (
    subset.train_images[..., 0],
    subset.train_labels,
    subset.test_images[..., 0],
    subset.test_labels,
  )
  for name, array in zip(data.FASHION_MNIST_FILES, arrays):
    _write_idx(os.path.join(directory, name), array.astype(np.uint8))
  return subset


def small_fmnist_task(
  directory: str,
  *,
  num_train: int = 600,
  num_test: int = 200,
  num_clients: int = 4,
  alpha: float = 1.0,
  model: str = 'mlp',
  batch_size: int = 20,
  local_epochs: int = 2,
) -> tff.simulation.baselines.BaselineTask:
  """A small task on real Fashion-MNIST, read back through the real loader."""
  write_fashion_mnist_subset(directory, num_train, num_test)
  image_data = data.load_fashion_mnist(directory)
  indices = partition.partition(
    'dirichlet', image_data.train_labels, num_clients, alpha=alpha, seed=0
  )
  return tasks.create_image_task(
    image_data,
    indices,
    model=model,
    batch_size=batch_size,
    local_epochs=local_epochs,
    normalization='unit',
  )


def write_tff_sqlite(
  path: str,
  examples: dict[str, dict[str, list[bytes]]],
  *,
  index: bool = True,
) -> None:
  """Writes a SQLite file in the format `tff.simulation.datasets` reads.

  Args:
    path: The file to write.
    examples: split name -> client id -> serialized `tf.train.Example`s.
    index: Whether to index `examples.client_id` (TFF's files should be).
  """
  with sqlite3.connect(path) as connection:
    connection.execute(
      'CREATE TABLE examples (split_name TEXT, client_id TEXT, '
      'serialized_example_proto BLOB)'
    )
    connection.execute(
      'CREATE TABLE client_metadata (client_id TEXT, split_name TEXT, '
      'num_examples INTEGER)'
    )
    for split, clients in examples.items():
      for client_id, protos in clients.items():
        connection.executemany(
          'INSERT INTO examples VALUES (?, ?, ?)',
          [(split, client_id, p) for p in protos],
        )
        connection.execute(
          'INSERT INTO client_metadata VALUES (?, ?, ?)',
          (client_id, split, len(protos)),
        )
    if index:
      connection.execute(
        'CREATE INDEX examples_client_id ON examples (client_id, split_name)'
      )


def new_marker() -> str:
  return uuid.uuid4().hex


def marked_environment(marker: str) -> dict[str, str]:
  """This process's environment plus a marker inherited by all descendants."""
  env = dict(os.environ)
  env[_MARKER_VARIABLE] = marker
  env['PYTHONPATH'] = os.pathsep.join(
    [REPO_ROOT] + [p for p in [env.get('PYTHONPATH')] if p]
  )
  env.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  return env


def pids_with_marker(marker: str) -> list[int]:
  """Live processes (not zombies) whose environment holds `marker`."""
  needle = f'{_MARKER_VARIABLE}={marker}'.encode()
  pids = []
  for entry in os.listdir('/proc'):
    if not entry.isdigit():
      continue
    try:
      with open(f'/proc/{entry}/environ', 'rb') as f:
        if needle in f.read().split(b'\0'):
          pids.append(int(entry))
    except OSError:
      continue
  return pids


def run_module(
  module: str,
  args: list[str],
  *,
  marker: str,
  timeout: float = 600,
  check: bool = True,
) -> subprocess.CompletedProcess:
  """Runs `python -m module args` with the marker in its environment."""
  result = subprocess.run(
    [sys.executable, '-m', module] + args,
    env=marked_environment(marker),
    cwd=REPO_ROOT,
    capture_output=True,
    text=True,
    timeout=timeout,
  )
  if check and result.returncode != 0:
    raise AssertionError(
      f'{module} {args} exited with {result.returncode}:\n'
      f'{result.stderr[-4000:]}'
    )
  return result


def start_module(
  module: str, args: list[str], *, marker: str, log_path: Optional[str]
) -> subprocess.Popen:
  """Starts `python -m module args` in the background."""
  log = open(log_path, 'w') if log_path else subprocess.DEVNULL
  try:
    return subprocess.Popen(
      [sys.executable, '-m', module] + args,
      env=marked_environment(marker),
      cwd=REPO_ROOT,
      stdout=log,
      stderr=subprocess.STDOUT,
    )
  finally:
    if log_path:
      log.close()  # The child holds its own descriptor.


def wait_until(predicate: Callable[[], bool], timeout: float) -> bool:
  """Polls `predicate` until it holds or `timeout` seconds pass."""
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    if predicate():
      return True
    time.sleep(0.05)
  return predicate()


def metrics_without_timing(output_dir: str) -> list[dict[str, str]]:
  """A run's metrics CSV rows without the (machine-dependent) round times."""
  rows = training.read_metrics(output_dir)
  for row in rows:
    del row['round_seconds']
  return rows


def metric_values(text: str):
  """A metrics CSV cell (a number or a list of numbers) as a float array."""
  return np.asarray(json.loads(text.replace('nan', 'NaN')), np.float64)


def tiny_model_fn(*extra_layers) -> tff.learning.models.VariableModel:
  """A 3-feature, 2-class linear Keras model (kernel and bias).

  Args:
    *extra_layers: Keras layers after the dense one (e.g. batch
      normalization), for tests of how a client work runs the model.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  keras_model = tf.keras.Sequential(
    [
      tf.keras.layers.Dense(
        2, input_shape=(3,), kernel_initializer='glorot_uniform'
      ),
      *extra_layers,
    ]
  )
  return tff.learning.models.from_keras_model(
    keras_model,
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    input_spec=(tf.TensorSpec([None, 3]), tf.TensorSpec([None], tf.int64)),
  )


def problem_lines(stderr: str) -> list[str]:
  """stderr without INFO logs, TF's C++ start-up logs and absl's usage hint."""
  return [
    l
    for l in stderr.splitlines()
    if l.strip()
    and not re.match(r'I\d{4} |\d{4}-\d\d-\d\d ', l)
    and 'rebuild TensorFlow' not in l
    and '--helpshort' not in l
  ]


def tiny_client_datasets(num_clients: int, seed: int = 0) -> list:
  """Datasets for `tiny_model_fn`: client k has 2 + k examples, one batch."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  rng = np.random.default_rng(seed)
  datasets = []
  for k in range(num_clients):
    n = 2 + k
    x = rng.normal(size=(n, 3)).astype(np.float32) + k
    y = rng.integers(0, 2, size=n).astype(np.int64)
    datasets.append(tf.data.Dataset.from_tensor_slices((x, y)).batch(n))
  return datasets


def multi_step_client_datasets(num_clients: int, seed: int = 3) -> list:
  """For `tiny_model_fn`: client k has 4 + k examples in batches of 3.

  So each client takes two or three local steps (momentum acts within a
  round as well as across rounds).
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  rng = np.random.default_rng(seed)
  datasets = []
  for k in range(num_clients):
    x = rng.normal(size=(4 + k, 3)).astype(np.float32) + 0.5 * k
    y = rng.integers(0, 2, size=4 + k).astype(np.int64)
    datasets.append(tf.data.Dataset.from_tensor_slices((x, y)).batch(3))
  return datasets


def dataset_arrays(datasets) -> list[list[tuple[np.ndarray, np.ndarray]]]:
  """Each dataset's batches as (float64 x, y) arrays, for NumPy references."""
  return [
    [(x.numpy().astype(np.float64), y.numpy()) for x, y in d] for d in datasets
  ]


def flat_trainable(weights) -> np.ndarray:
  """A `ModelWeights`' trainable tensors as one flat vector."""
  return np.concatenate([np.ravel(x) for x in weights.trainable])


_SINGLE_CLIENT_FEDAVG = {}


def client_results(
  model_fn, client_optimizer_fn, weights, datasets
) -> tuple[list[list[np.ndarray]], np.ndarray, np.ndarray]:
  """Each client's model delta from `weights`, examples and training loss.

  Runs one round of plain FedAvg (server SGD, learning rate 1) on each client
  alone: the new model is `weights - delta_k`. For checking server rules end
  to end against NumPy. The FedAvg process is built once per (model_fn,
  optimizer).
  """
  key = (model_fn, id(client_optimizer_fn))
  if key not in _SINGLE_CLIENT_FEDAVG:
    _SINGLE_CLIENT_FEDAVG[key] = tff.learning.algorithms.build_weighted_fed_avg(
      model_fn,
      client_optimizer_fn,
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
    )
  fedavg = _SINGLE_CLIENT_FEDAVG[key]
  state = fedavg.set_model_weights(fedavg.initialize(), weights)
  deltas, sizes, losses = [], [], []
  for dataset in datasets:
    output = fedavg.next(state, [dataset])
    new = fedavg.get_model_weights(output.state).trainable
    deltas.append(
      [
        np.asarray(w, np.float64) - np.asarray(n, np.float64)
        for w, n in zip(weights.trainable, new)
      ]
    )
    train = output.metrics['client_work']['train']
    sizes.append(train['num_examples'])
    losses.append(train['loss'])
  return deltas, np.asarray(sizes, np.float64), np.asarray(losses)


def client_deltas(model_fn, client_optimizer_fn, weights, datasets):
  """`client_results` without the losses."""
  deltas, sizes, _ = client_results(
    model_fn, client_optimizer_fn, weights, datasets
  )
  return deltas, sizes
