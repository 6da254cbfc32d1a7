"""Federated image-classification tasks as TFF `BaselineTask`s.

The experiment loop consumes `BaselineTask`s, the type TFF's own baseline
builders return (`tff.simulation.baselines.emnist...`), so partitioned
centralised data sets and TFF's naturally federated ones run through the same
code. Client datasets hold raw examples; the loop shuffles each sampled
client's dataset with a seed of (run seed, round, client) and then applies the
task's `train_preprocess_fn` (repeat for the local epochs, batch, scale).
"""

from collections.abc import Sequence
import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from experiments import data as data_lib
from experiments import models

# Pixel scaling per normalisation: x -> x / 255 * scale + offset.
NORMALIZATIONS = {
  'unit': (1.0, 0.0),  # [0, 1]: ToTensor (Fashion-MNIST in every spec).
  'symmetric': (2.0, -1.0),  # [-1, 1]: mean 0.5, std 0.5 (CIFAR, FedLAW).
}
EVAL_BATCH_SIZE = 1000


class PartitionedClientData(tff.simulation.datasets.ClientData):
  """Clients that each own a subset (index array) of one set of examples.

  Client ids are the strings '0', '1', ...; client `i` holds
  `{k: v[client_indices[i]] for k, v in examples.items()}`.
  """

  def __init__(
    self,
    examples: collections.OrderedDict[str, np.ndarray],
    client_indices: Sequence[np.ndarray],
  ):
    self._examples = examples
    self._client_indices = [np.asarray(i, np.int64) for i in client_indices]
    self._client_ids = [str(i) for i in range(len(client_indices))]
    self._element_spec = collections.OrderedDict(
      (k, tf.TensorSpec(v.shape[1:], tf.dtypes.as_dtype(v.dtype)))
      for k, v in examples.items()
    )

  @property
  def client_ids(self) -> list[str]:
    return self._client_ids

  def client_size(self, client_id: str) -> int:
    return len(self._client_indices[int(client_id)])

  def create_tf_dataset_for_client(self, client_id: str) -> tf.data.Dataset:
    indices = self._client_indices[int(client_id)]
    return tf.data.Dataset.from_tensor_slices(
      collections.OrderedDict(
        (k, v[indices]) for k, v in self._examples.items()
      )
    )

  @property
  def serializable_dataset_fn(self):
    """Eagerly: `create_tf_dataset_for_client`. In a TF graph: a lookup in
    graph constants holding all examples, as TFF's `TestClientData` does."""
    examples = self._examples
    order = np.concatenate(self._client_indices + [np.zeros(0, np.int64)])
    bounds = np.cumsum([0] + [len(i) for i in self._client_indices])

    def graph_dataset_fn(client_id):
      k = tf.strings.to_number(client_id, tf.int64)
      starts = tf.constant(bounds)
      indices = tf.constant(order)[starts[k] : starts[k + 1]]
      return tf.data.Dataset.from_tensor_slices(
        collections.OrderedDict(
          (name, tf.gather(v, indices)) for name, v in examples.items()
        )
      )

    def dataset_fn(client_id):
      if tf.executing_eagerly():
        if tf.is_tensor(client_id):
          client_id = client_id.numpy().decode()
        return self.create_tf_dataset_for_client(client_id)
      return graph_dataset_fn(client_id)

    return dataset_fn

  @property
  def element_type_structure(self):
    return self._element_spec


def create_image_task(
  image_data: data_lib.ImageData,
  client_indices: Sequence[np.ndarray],
  *,
  model: str,
  batch_size: int,
  local_epochs: int,
  normalization: str,
  weight_decay: float = 0.0,
) -> tff.simulation.baselines.BaselineTask:
  """Returns a `BaselineTask` over a partition of `image_data`'s train split.

  Args:
    image_data: The centralised data set.
    client_indices: One index array into the train split per client.
    model: A name in `models.MODELS`.
    batch_size: Client batch size (the last partial batch is kept).
    local_epochs: Passes over the client dataset per round.
    normalization: A key of `NORMALIZATIONS`.
    weight_decay: PyTorch-style coupled weight decay, added to the model as
      L2 regularisation (see `models`).
  """
  if normalization not in NORMALIZATIONS:
    raise ValueError(
      f'Unknown normalization {normalization!r}; use one of '
      f'{sorted(NORMALIZATIONS)}.'
    )
  scale, offset = NORMALIZATIONS[normalization]

  def to_model_input(batch):
    x = tf.cast(batch['image'], tf.float32) * (scale / 255.0) + offset
    return x, batch['label']

  def train_preprocess_fn(dataset):
    return dataset.repeat(local_epochs).batch(batch_size).map(to_model_input)

  def eval_preprocess_fn(dataset):
    return dataset.batch(EVAL_BATCH_SIZE).map(to_model_input)

  train_data = PartitionedClientData(
    collections.OrderedDict(
      image=image_data.train_images, label=image_data.train_labels
    ),
    client_indices,
  )
  test_data = tf.data.Dataset.from_tensor_slices(
    collections.OrderedDict(
      image=image_data.test_images, label=image_data.test_labels
    )
  )
  datasets = tff.simulation.baselines.BaselineTaskDatasets(
    train_data=train_data,
    test_data=test_data,
    train_preprocess_fn=train_preprocess_fn,
    eval_preprocess_fn=eval_preprocess_fn,
  )
  input_spec = datasets.element_type_structure

  def model_fn() -> tff.learning.models.VariableModel:
    keras_model = models.create_model(
      model,
      input_shape=image_data.image_shape,
      num_classes=image_data.num_classes,
      weight_decay=weight_decay,
    )
    return tff.learning.models.from_keras_model(
      keras_model,
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=input_spec,
      metrics=[tf.keras.metrics.SparseCategoricalAccuracy()],
    )

  return tff.simulation.baselines.BaselineTask(datasets, model_fn)
