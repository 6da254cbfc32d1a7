"""Data loaders: real Fashion-MNIST files, CIFAR through the tfds mock."""

import gzip
import os

from absl.testing import absltest
import numpy as np
import tensorflow_datasets as tfds

from experiments import data
from tests import test_utils


class FashionMnistTest(absltest.TestCase):
  def test_real_files(self):
    d = data.load_fashion_mnist()
    self.assertEqual(d.train_images.shape, (60000, 28, 28, 1))
    self.assertEqual(d.test_images.shape, (10000, 28, 28, 1))
    self.assertEqual(d.train_images.dtype, np.uint8)
    self.assertEqual(d.train_labels.dtype, np.int64)
    # The first labels of the original training file.
    np.testing.assert_array_equal(
      d.train_labels[:10], [9, 0, 0, 3, 0, 2, 7, 2, 5, 5]
    )
    np.testing.assert_array_equal(np.bincount(d.train_labels), [6000] * 10)
    np.testing.assert_array_equal(np.bincount(d.test_labels), [1000] * 10)
    self.assertEqual(d.num_classes, 10)
    self.assertEqual(d.image_shape, (28, 28, 1))

  def test_other_directory(self):
    directory = self.create_tempdir().full_path
    subset = test_utils.write_fashion_mnist_subset(directory, 50, 20)
    d = data.load('fmnist', directory)
    np.testing.assert_array_equal(d.train_images, subset.train_images)
    np.testing.assert_array_equal(d.test_labels, subset.test_labels)
    # No state is shared between loads: the default directory is whole.
    self.assertLen(data.load_fashion_mnist().train_labels, 60000)

  def test_corrupt_files_are_named(self):
    directory = self.create_tempdir().full_path
    test_utils.write_fashion_mnist_subset(directory, 50, 20)
    labels = os.path.join(directory, 'train-labels-idx1-ubyte.gz')
    with gzip.open(labels, 'rb') as f:
      content = f.read()
    with gzip.open(labels, 'wb') as f:
      f.write(content[:-5])  # Truncated.
    with self.assertRaisesRegex(ValueError, 'train-labels.*truncated'):
      data.load_fashion_mnist(directory)
    with gzip.open(labels, 'wb') as f:
      f.write(b'not an idx file')
    with self.assertRaisesRegex(ValueError, 'not an IDX file'):
      data.load_fashion_mnist(directory)
    with gzip.open(labels, 'wb') as f:
      f.write(content[:6])  # Cut inside the header.
    with self.assertRaisesRegex(ValueError, 'train-labels.*IDX header'):
      data.load_fashion_mnist(directory)
    with open(labels, 'wb') as f:
      f.write(content)  # Not gzipped.
    with self.assertRaisesRegex(ValueError, 'train-labels.*gzip'):
      data.load_fashion_mnist(directory)
    with gzip.open(labels, 'wb') as f:  # 49 labels for 50 images.
      f.write(content[:7] + bytes([49]) + content[8:-1])
    with self.assertRaisesRegex(ValueError, 'do not match'):
      data.load_fashion_mnist(directory)

  def test_missing_files_say_how_to_install(self):
    directory = self.create_tempdir().full_path
    with self.assertRaisesRegex(
      data.DataNotFoundError,
      r"(?s)'train-images-idx3-ubyte.gz'.*apt-get install "
      r'dataset-fashion-mnist.*--data_dir',
    ):
      data.load_fashion_mnist(directory)


class TfdsTest(absltest.TestCase):
  def test_cifar10_through_the_mock(self):
    with tfds.testing.mock_data(num_examples=12):
      d = data.load('cifar10', self.create_tempdir().full_path)
    self.assertEqual(d.train_images.shape, (12, 32, 32, 3))
    self.assertEqual(d.train_images.dtype, np.uint8)
    self.assertEqual(d.train_labels.dtype, np.int64)
    self.assertEqual(d.test_images.shape, (12, 32, 32, 3))
    self.assertEqual(d.num_classes, 10)
    self.assertTrue(np.all((d.train_labels >= 0) & (d.train_labels < 10)))

  def test_cifar100_has_100_classes(self):
    with tfds.testing.mock_data(num_examples=3):
      d = data.load('cifar100', self.create_tempdir().full_path)
    self.assertEqual(d.num_classes, 100)

  def test_missing_data_says_how_to_provide_it(self):
    directory = os.path.join(self.create_tempdir().full_path, 'empty')
    with self.assertRaisesRegex(
      data.DataNotFoundError,
      r'(?s)cifar10 is not prepared.*download_and_prepare.*--download',
    ):
      data.load('cifar10', directory)

  def test_unknown_name(self):
    with self.assertRaisesRegex(ValueError, 'cifar10'):
      data.load_tfds_images('mnist', '/tmp')


if __name__ == '__main__':
  absltest.main()
