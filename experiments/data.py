"""Centralised image data sets: Fashion-MNIST's IDX files, tfds for CIFAR.

Nothing is downloaded at run time unless asked for: Fashion-MNIST comes from the
Debian package `dataset-fashion-mnist`, CIFAR from a prepared
tensorflow-datasets directory. A missing data set raises `DataNotFoundError`
whose message says how to provide it.
"""

import dataclasses
import gzip
import os
import struct

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds
from tensorflow_datasets.core.utils import gcs_utils

FASHION_MNIST_DIR = '/usr/share/datasets/fashion-mnist'
FASHION_MNIST_FILES = (
  'train-images-idx3-ubyte.gz',
  'train-labels-idx1-ubyte.gz',
  't10k-images-idx3-ubyte.gz',
  't10k-labels-idx1-ubyte.gz',
)
TFDS_IMAGE_DATASETS = ('cifar10', 'cifar100')
DATASETS = ('fmnist',) + TFDS_IMAGE_DATASETS


class DataNotFoundError(FileNotFoundError):
  """A data set is not on this machine; the message says how to provide it."""


@dataclasses.dataclass(frozen=True)
class ImageData:
  """Train and test splits: uint8 images [N, H, W, C], int64 labels [N]."""

  train_images: np.ndarray
  train_labels: np.ndarray
  test_images: np.ndarray
  test_labels: np.ndarray
  num_classes: int

  @property
  def image_shape(self) -> tuple[int, ...]:
    return tuple(self.train_images.shape[1:])


def read_idx(path: str) -> np.ndarray:
  """A gzipped IDX file of unsigned bytes (the MNIST format) as an array.

  The header is a magic number 0x0000 08 <ndim> and ndim big-endian sizes;
  the bytes follow. Read directly rather than through Keras' loader, whose
  cache in `~/.keras` is shared by every process of the user (a process
  loading another copy would re-point it under a running one).

  Raises:
    ValueError: If the file is not such an IDX file or is truncated.
  """
  try:
    with gzip.open(path, 'rb') as f:
      content = f.read()
  except (OSError, EOFError) as e:  # Not gzip, or a cut-off stream.
    raise ValueError(
      f'{path} is not a complete gzip file ({e}); reinstall '
      'it (Debian: `sudo apt-get install --reinstall '
      'dataset-fashion-mnist`).'
    ) from e
  if len(content) < 4 or content[:3] != b'\x00\x00\x08':
    raise ValueError(f'{path} is not an IDX file of unsigned bytes.')
  ndim = content[3]
  offset = 4 + 4 * ndim
  if len(content) < offset:
    raise ValueError(f'{path} is truncated inside its IDX header.')
  shape = struct.unpack(f'>{ndim}I', content[4:offset])
  values = np.frombuffer(content, np.uint8, offset=offset)
  if values.size != int(np.prod(shape)):
    raise ValueError(
      f'{path} holds {values.size} bytes of data but its header says '
      f'{shape}: the file is truncated or corrupt; reinstall it (Debian: '
      '`sudo apt-get install --reinstall dataset-fashion-mnist`).'
    )
  return values.reshape(shape)


def load_fashion_mnist(data_dir: str = FASHION_MNIST_DIR) -> ImageData:
  """Loads Fashion-MNIST from its four original IDX files in `data_dir`.

  Args:
    data_dir: Directory holding the four `*-ubyte.gz` files.

  Returns:
    An `ImageData` with 28x28x1 images.

  Raises:
    DataNotFoundError: If a file is missing from `data_dir`.
    ValueError: If a file is corrupt or images and labels disagree.
  """
  missing = [
    f
    for f in FASHION_MNIST_FILES
    if not os.path.isfile(os.path.join(data_dir, f))
  ]
  if missing:
    raise DataNotFoundError(
      f'Fashion-MNIST files {missing} are not in {data_dir!r}. Install them '
      'with `sudo apt-get install dataset-fashion-mnist` (they go to '
      f'{FASHION_MNIST_DIR}), or pass --data_dir=<directory with the four '
      'original *-ubyte.gz files>.'
    )
  x_train, y_train, x_test, y_test = (
    read_idx(os.path.join(data_dir, f)) for f in FASHION_MNIST_FILES
  )
  for images, labels, split in (
    (x_train, y_train, 'train'),
    (x_test, y_test, 't10k'),
  ):
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
      raise ValueError(
        f'Fashion-MNIST {split} files in {data_dir!r}: images '
        f'{images.shape} and labels {labels.shape} do not match.'
      )
  return ImageData(
    train_images=x_train[..., np.newaxis],
    train_labels=y_train.astype(np.int64),
    test_images=x_test[..., np.newaxis],
    test_labels=y_test.astype(np.int64),
    num_classes=10,
  )


def _tfds_split_as_arrays(dataset: tf.data.Dataset) -> tuple[np.ndarray, ...]:
  images, labels = [], []
  for x, y in tfds.as_numpy(dataset.batch(10_000)):
    images.append(x)
    labels.append(y)
  return np.concatenate(images), np.concatenate(labels).astype(np.int64)


def load_tfds_images(
  name: str, data_dir: str, download: bool = False
) -> ImageData:
  """Loads a tensorflow-datasets image data set (`cifar10`, `cifar100`).

  Args:
    name: The tfds name.
    data_dir: The tfds data directory (holding `<name>/<version>/`).
    download: Let tfds download and prepare the data set if it is missing.

  Returns:
    An `ImageData`.

  Raises:
    DataNotFoundError: If the data set is not prepared in `data_dir` and
      `download` is False or the download fails.
  """
  if name not in TFDS_IMAGE_DATASETS:
    raise ValueError(
      f'Unknown data set {name!r}; use one of {TFDS_IMAGE_DATASETS}.'
    )
  # Without --download nothing is fetched: tfds would otherwise look up the
  # data set's metadata on GCS when it is not prepared locally (the module
  # flag is what tfds' own test utilities set; there is no public switch).
  gcs_utils._is_gcs_disabled = not download  # pylint: disable=protected-access
  try:
    train, test = tfds.load(
      name,
      split=['train', 'test'],
      data_dir=data_dir,
      download=download,
      as_supervised=True,
    )
  except (AssertionError, OSError) as e:  # tfds raises AssertionError.
    version = tfds.builder(name, data_dir=data_dir).info.version
    raise DataNotFoundError(
      f'{name} is not prepared in --data_dir={data_dir!r}. On a machine '
      'with internet access run `python -c "import tensorflow_datasets as '
      f"tfds; tfds.builder('{name}', data_dir='DIR').download_and_prepare()"
      f'"` and copy DIR/{name}/{version} to {data_dir}/{name}/{version}, '
      'or pass --download to let this binary fetch it. '
      f'({type(e).__name__}: {e})'
    ) from e
  train_images, train_labels = _tfds_split_as_arrays(train)
  test_images, test_labels = _tfds_split_as_arrays(test)
  return ImageData(
    train_images=train_images,
    train_labels=train_labels,
    test_images=test_images,
    test_labels=test_labels,
    num_classes=tfds.builder(name, data_dir=data_dir)
    .info.features['label']
    .num_classes,
  )


def check_labels(data: ImageData, source: str) -> None:
  """Raises ValueError if a label is not a class index (0..classes-1)."""
  for split, labels in (
    ('train', data.train_labels),
    ('test', data.test_labels),
  ):
    bad = (labels < 0) | (labels >= data.num_classes)
    if np.any(bad):
      raise ValueError(
        f'{source}: {int(bad.sum())} {split} labels are outside the '
        f'{data.num_classes} classes 0..{data.num_classes - 1} (first: '
        f'{int(labels[bad][0])}); the label file is damaged or not this '
        "data set's."
      )


def load(name: str, data_dir: str, download: bool = False) -> ImageData:
  """Loads `name` in `DATASETS` (`download` only applies to tfds data sets).

  Raises:
    DataNotFoundError: If the data set is not in `data_dir`.
    ValueError: If its files are damaged or hold labels outside its classes.
  """
  if name == 'fmnist':
    data = load_fashion_mnist(data_dir)
  else:
    data = load_tfds_images(name, data_dir, download=download)
  check_labels(data, f'{name} in {data_dir!r}')
  return data
