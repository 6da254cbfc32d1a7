"""TFF's naturally federated tasks (FEMNIST, Stack Overflow, CIFAR-100).

Built by TFF's own task builders (`tff.simulation.baselines`), with their data
read by `tff.simulation.datasets` from `<cache_dir>/<name>.sqlite`. Nothing is
downloaded: without the files, `check_data` says which file to get and how.
Defaults follow Reddi et al., "Adaptive Federated Optimization" (ICLR 2021),
as recorded in google-research/federated `optimization/docs/hyperparameters.md`
(docs/tasks.md).
"""

import collections
from collections.abc import Mapping
import dataclasses
import os
import sqlite3
from typing import Optional

from absl import logging
import tensorflow as tf
import tensorflow_federated as tff

from experiments import data as data_lib

_ORIGIN = 'https://storage.googleapis.com/tff-datasets-public/'
TASKS = ('femnist', 'stackoverflow', 'cifar100_federated')


@dataclasses.dataclass(frozen=True)
class TaskSettings:
  """A task's defaults (Reddi et al.) and its files.

  Attributes:
    models: Model ids the TFF task builder accepts; the first is the default.
    clients_per_round, batch_size, rounds: Reddi et al.'s settings.
    max_client_examples: Examples per client per round (after repeating).
    eval_examples: Size of the fixed, seeded evaluation sample (None: all).
    accuracy_metric: The headline evaluation metric.
    learning_rates: `server_optimizer -> (client_lr, server_lr)`, the best
      values of Reddi et al.'s grid (log10 in the paper).
    server_epsilon: Adam/Yogi epsilon of that grid.
    files: Files `tff.simulation.datasets` reads from `cache_dir`.
  """

  models: tuple[str, ...]
  clients_per_round: int
  batch_size: int
  rounds: int
  max_client_examples: Optional[int]
  eval_examples: Optional[int]
  accuracy_metric: str
  learning_rates: Mapping[str, tuple[float, float]]
  server_epsilon: float
  files: tuple[str, ...]


def _lr(client_log10: float, server_log10: float) -> tuple[float, float]:
  return 10.0**client_log10, 10.0**server_log10


SETTINGS = {
  'femnist': TaskSettings(
    models=('cnn_dropout', 'cnn', '2nn', 'resnet18'),
    clients_per_round=10,
    batch_size=20,
    rounds=1500,
    max_client_examples=None,
    eval_examples=None,
    accuracy_metric='sparse_categorical_accuracy',
    learning_rates={
      'sgd': _lr(-1, 0),
      'sgdm': _lr(-1.5, -0.5),
      'adam': _lr(-1.5, -2.5),
      'yogi': _lr(-1.5, -2.5),
    },
    server_epsilon=1e-4,
    files=('emnist_all.sqlite',),
  ),
  'stackoverflow': TaskSettings(
    models=('lstm',),
    clients_per_round=50,
    batch_size=16,
    rounds=1500,
    max_client_examples=1000,
    eval_examples=10_000,
    accuracy_metric='accuracy_without_out_of_vocab_or_end_of_sentence',
    learning_rates={
      'sgd': _lr(-0.5, 0),
      'sgdm': _lr(-0.5, 0),
      'adam': _lr(-0.5, -2),
      'yogi': _lr(-0.5, -2),
    },
    server_epsilon=1e-5,
    files=('stackoverflow.sqlite', 'stackoverflow.word_count.tar.bz2'),
  ),
  'cifar100_federated': TaskSettings(
    models=('resnet18', 'resnet34', 'resnet50', 'resnet101', 'resnet152'),
    clients_per_round=10,
    batch_size=20,
    rounds=4000,
    max_client_examples=None,
    eval_examples=None,
    accuracy_metric='sparse_categorical_accuracy',
    learning_rates={
      'sgd': _lr(-1, 0.5),
      'sgdm': _lr(-1.5, 0),
      'adam': _lr(-1.5, 0),
      'yogi': _lr(-1.5, 0),
    },
    server_epsilon=1e-1,
    files=('cifar100.sqlite',),
  ),
}


def _link_into_keras_cache(path: str, cache_subdir: str) -> None:
  """Makes Keras' `get_file` find `path` instead of downloading it.

  TFF reads Stack Overflow's vocabulary through Keras' cache (with a pinned
  hash, so any linked copy has the same content).

  Keras 2.14 looks in `~/.keras/<cache_subdir>` (or `/tmp/.keras/...` when
  `~/.keras` is not writable) before downloading; a link there to `path`
  replaces any link to another copy.
  """
  base = os.path.join(os.path.expanduser('~'), '.keras')
  try:
    os.makedirs(base, exist_ok=True)
  except OSError:
    pass
  if not os.access(base, os.W_OK):
    base = os.path.join('/tmp', '.keras')  # Keras' own fallback.
  directory = os.path.join(base, cache_subdir)
  os.makedirs(directory, exist_ok=True)
  source = os.path.realpath(path)
  link = os.path.join(directory, os.path.basename(path))
  if os.path.islink(link) and os.path.realpath(link) != source:
    os.remove(link)
  if not os.path.lexists(link):
    os.symlink(source, link)


def check_data(name: str, cache_dir: str) -> None:
  """Raises `DataNotFoundError` naming each missing file and how to get it."""
  missing = [
    f
    for f in SETTINGS[name].files
    if not os.path.isfile(os.path.join(cache_dir, f))
  ]
  if not missing:
    for f in SETTINGS[name].files:
      if f.endswith('.sqlite'):
        warn_if_not_indexed(os.path.join(cache_dir, f))
    return
  how = []
  for f in missing:
    base = os.path.basename(f)
    if f.endswith('.sqlite'):
      how.append(
        f'{os.path.join(cache_dir, f)}: download {_ORIGIN}{base}.lzma on a '
        f'machine with internet, decompress it (`unlzma {base}.lzma`) and '
        f'copy {base} there'
      )
    else:
      how.append(
        f'{os.path.join(cache_dir, f)}: download {_ORIGIN}{base} and copy '
        'it there unchanged (its SHA-256 is checked)'
      )
  raise data_lib.DataNotFoundError(
    f'{name} data is missing from --cache_dir={cache_dir}. '
    + '; '.join(how)
    + '. Or run with --use_synthetic_data for a smoke run.'
  )


def warn_if_not_indexed(database: str) -> None:
  """Warns when client look-ups in a TFF SQLite file scan the whole table."""
  with sqlite3.connect(database) as connection:
    indexed = any(
      row[2] == 'client_id'
      for (_, index, *_) in connection.execute(
        "PRAGMA index_list('examples')"
      ).fetchall()
      for row in connection.execute(f"PRAGMA index_info('{index}')")
    )
  if not indexed:
    logging.warning(
      '%s has no index on examples.client_id: every client dataset scans '
      'the whole table. Create one once with: sqlite3 %s "CREATE INDEX '
      'examples_client_id ON examples (client_id, split_name)"',
      database,
      database,
    )


def create_task(
  name: str,
  *,
  cache_dir: str,
  use_synthetic_data: bool,
  model: str,
  batch_size: int,
  local_epochs: int,
  max_client_examples: Optional[int],
  sequence_length: int = 20,
  vocab_size: int = 10_000,
  crop_size: int = 24,
  distort_train_images: bool = True,
) -> tff.simulation.baselines.BaselineTask:
  """Builds task `name` with TFF's task builder.

  The training `ClientSpec` disables TFF's own (unseeded) shuffling: the
  experiment loop shuffles every client dataset with a seed of (seed, round,
  client) before the task's preprocessing.

  Args:
    name: One of `TASKS`.
    cache_dir: Directory holding the files of `SETTINGS[name].files`.
    use_synthetic_data: Use TFF's small synthetic data instead.
    model: One of `SETTINGS[name].models`.
    batch_size: Client batch size.
    local_epochs: Passes over the client data per round.
    max_client_examples: Cap on examples per client per round.
    sequence_length: Stack Overflow sequence length.
    vocab_size: Stack Overflow vocabulary size.
    crop_size: CIFAR-100 crop height and width.
    distort_train_images: CIFAR-100 random crops and flips in training, as
      Reddi et al.; TFF does not seed them, so runs are not bit-reproducible.
  """
  settings = SETTINGS[name]
  if model not in settings.models:
    raise ValueError(
      f'--model={model} is not a {name} model; use one of {settings.models}.'
    )
  if not use_synthetic_data:
    check_data(name, cache_dir)
  train_spec = tff.simulation.baselines.ClientSpec(
    num_epochs=local_epochs,
    batch_size=batch_size,
    max_elements=max_client_examples,
    shuffle_buffer_size=1,
  )
  if name == 'femnist':
    return tff.simulation.baselines.emnist.create_character_recognition_task(
      train_spec,
      model_id=model,
      only_digits=False,
      cache_dir=cache_dir,
      use_synthetic_data=use_synthetic_data,
    )
  if name == 'cifar100_federated':
    return tff.simulation.baselines.cifar100.create_image_classification_task(
      train_spec,
      model_id=model,
      crop_height=crop_size,
      crop_width=crop_size,
      distort_train_images=distort_train_images,
      cache_dir=cache_dir,
      use_synthetic_data=use_synthetic_data,
    )
  if not use_synthetic_data:
    # TFF reads the vocabulary through Keras' cache (with a pinned hash),
    # not from `cache_dir`.
    _link_into_keras_cache(
      os.path.join(cache_dir, 'stackoverflow.word_count.tar.bz2'), 'datasets'
    )
  return tff.simulation.baselines.stackoverflow.create_word_prediction_task(
    train_spec,
    sequence_length=sequence_length,
    vocab_size=vocab_size,
    cache_dir=cache_dir,
    use_synthetic_data=use_synthetic_data,
  )


def evaluation_data(
  task: tff.simulation.baselines.BaselineTask,
  *,
  num_examples: Optional[int],
  seed: int,
  proxy_size: int = 0,
) -> tuple[tf.data.Dataset, Optional[tf.data.Dataset]]:
  """A fixed, seeded evaluation sample and a server proxy set, held out.

  The validation split where the task has one (Stack Overflow), else the test
  split; clients in an order shuffled by `seed`, as TFF's baselines sample
  held-out data. Its first `proxy_size` examples are the server's proxy set
  (for FedLAW; held-out clients, never trained on), and the next
  `num_examples` (all when None) are the evaluation sample, so no method is
  evaluated on the proxy examples.

  Returns:
    (evaluation data preprocessed for evaluation, the proxy set as unbatched
    model-input (x, y) examples or None when `proxy_size` is 0).
  """
  datasets = task.datasets
  held_out = datasets.validation_data
  if held_out is None:
    held_out = datasets.test_data
  if isinstance(held_out, tff.simulation.datasets.ClientData):
    held_out = held_out.create_tf_dataset_from_all_clients(seed=seed)
  proxy = None
  if proxy_size:
    proxy = datasets.eval_preprocess_fn(held_out.take(proxy_size)).unbatch()
    held_out = held_out.skip(proxy_size)
  if num_examples is not None:
    held_out = held_out.take(num_examples)
  return datasets.eval_preprocess_fn(held_out), proxy


def flag_defaults(name: str) -> collections.OrderedDict[str, object]:
  """The experiment-flag defaults of task `name`."""
  settings = SETTINGS[name]
  return collections.OrderedDict(
    model=settings.models[0],
    clients_per_round=settings.clients_per_round,
    batch_size=settings.batch_size,
    rounds=settings.rounds,
    max_client_examples=settings.max_client_examples,
    eval_examples=settings.eval_examples,
    accuracy_metric=settings.accuracy_metric,
    server_epsilon=settings.server_epsilon,
    server_beta2=0.99,  # Reddi et al.'s Adam/Yogi.
    eval_every=10,
    summary_rounds=100,  # Reddi et al. report the last 100 rounds' mean.
    cache_dir='~/.tff',
  )
