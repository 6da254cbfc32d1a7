"""Partitioned client data and the image tasks built on it."""

import collections

from absl.testing import absltest
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from experiments import data
from experiments import tasks


def _image_data(num_train=30, num_test=10, seed=0) -> data.ImageData:
  rng = np.random.default_rng(seed)
  return data.ImageData(
    train_images=rng.integers(0, 256, (num_train, 28, 28, 1), np.uint8),
    train_labels=rng.integers(0, 10, num_train).astype(np.int64),
    test_images=rng.integers(0, 256, (num_test, 28, 28, 1), np.uint8),
    test_labels=rng.integers(0, 10, num_test).astype(np.int64),
    num_classes=10,
  )


class PartitionedClientDataTest(absltest.TestCase):
  def setUp(self):
    super().setUp()
    self.examples = collections.OrderedDict(
      x=np.arange(20, dtype=np.float32).reshape(10, 2),
      y=np.arange(10, dtype=np.int64),
    )
    self.indices = [
      np.array([3, 1]),
      np.array([], np.int64),
      np.array([0, 9, 5]),
    ]
    self.client_data = tasks.PartitionedClientData(self.examples, self.indices)

  def test_client_ids_and_sizes(self):
    self.assertEqual(self.client_data.client_ids, ['0', '1', '2'])
    self.assertEqual(
      [self.client_data.client_size(c) for c in ['0', '1', '2']], [2, 0, 3]
    )

  def test_each_client_holds_its_examples_in_order(self):
    for client_id, indices in zip(self.client_data.client_ids, self.indices):
      elements = list(
        self.client_data.create_tf_dataset_for_client(
          client_id
        ).as_numpy_iterator()
      )
      np.testing.assert_array_equal([e['y'] for e in elements], indices)
      if len(indices):
        np.testing.assert_array_equal(
          np.stack([e['x'] for e in elements]), self.examples['x'][indices]
        )

  def test_serializable_dataset_fn_matches_eagerly_and_in_graphs(self):
    dataset_fn = self.client_data.serializable_dataset_fn

    @tf.function
    def labels_in_graph(client_id):
      return dataset_fn(client_id).reduce(
        tf.zeros([0], tf.int64), lambda a, e: tf.concat([a, [e['y']]], 0)
      )

    for client_id, indices in zip(self.client_data.client_ids, self.indices):
      for key in (client_id, tf.constant(client_id)):
        ys = [e['y'] for e in dataset_fn(key).as_numpy_iterator()]
        np.testing.assert_array_equal(ys, indices)
      np.testing.assert_array_equal(
        labels_in_graph(tf.constant(client_id)), indices
      )

  def test_element_spec(self):
    self.assertEqual(
      self.client_data.element_type_structure,
      collections.OrderedDict(
        x=tf.TensorSpec([2], tf.float32), y=tf.TensorSpec([], tf.int64)
      ),
    )


class ImageTaskTest(absltest.TestCase):
  def test_preprocessing_repeats_batches_and_scales(self):
    image_data = _image_data()
    task = tasks.create_image_task(
      image_data,
      [np.arange(0, 7), np.arange(7, 30)],
      model='mlp',
      batch_size=3,
      local_epochs=2,
      normalization='unit',
    )
    raw = task.datasets.train_data.create_tf_dataset_for_client('0')
    batches = list(task.datasets.train_preprocess_fn(raw).as_numpy_iterator())
    # 2 epochs x 7 examples in batches of 3, last partial batch kept.
    self.assertEqual([len(y) for _, y in batches], [3, 3, 3, 3, 2])
    x = np.concatenate([b[0] for b in batches])
    np.testing.assert_allclose(
      x[:7], image_data.train_images[:7].astype(np.float32) / 255, rtol=1e-6
    )
    np.testing.assert_array_equal(
      np.concatenate([b[1] for b in batches]),
      np.tile(image_data.train_labels[:7], 2),
    )

  def test_symmetric_normalization_and_test_data(self):
    image_data = _image_data()
    task = tasks.create_image_task(
      image_data,
      [np.arange(30)],
      model='mlp',
      batch_size=8,
      local_epochs=1,
      normalization='symmetric',
    )
    x, y = next(iter(task.datasets.get_centralized_test_data()))
    self.assertEqual(x.shape, (10, 28, 28, 1))
    np.testing.assert_allclose(
      x, image_data.test_images / 127.5 - 1.0, rtol=1e-5, atol=1e-6
    )
    np.testing.assert_array_equal(y, image_data.test_labels)

  def test_model_fn_matches_the_data(self):
    task = tasks.create_image_task(
      _image_data(),
      [np.arange(30)],
      model='lenet',
      batch_size=8,
      local_epochs=1,
      normalization='unit',
      weight_decay=5e-4,
    )
    model = task.model_fn()
    self.assertIsInstance(model, tff.learning.models.VariableModel)
    self.assertEqual(model.input_spec, task.datasets.element_type_structure)

  def test_unknown_normalization(self):
    with self.assertRaisesRegex(ValueError, 'symmetric'):
      tasks.create_image_task(
        _image_data(),
        [np.arange(30)],
        model='mlp',
        batch_size=8,
        local_epochs=1,
        normalization='imagenet',
      )


if __name__ == '__main__':
  absltest.main()
