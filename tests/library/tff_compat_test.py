"""Each private TFF entry point the library uses still works (TFF 0.87.0).

A TFF upgrade that moves or changes one fails here, by name.
"""

from absl.testing import absltest
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tests import test_utils
from tff_aggregators import runtime  # noqa: F401  # pylint: disable=unused-import
from tff_aggregators import tff_compat


class TffCompatTest(absltest.TestCase):
  def test_installed_tff_is_the_supported_version(self):
    self.assertEqual(tff.__version__, tff_compat.SUPPORTED_TFF_VERSION)

  def test_training_loop_reduces_over_the_dataset(self):
    for implementation in tff.learning.LoopImplementation:
      loop = tff_compat.build_training_loop(implementation)
      total = tf.function(
        lambda loop=loop: loop(
          lambda state, x: state + x,
          tf.data.Dataset.range(5),
          lambda: tf.constant(0, tf.int64),
        )
      )()
      self.assertEqual(int(total), 10, implementation)

  def test_zero_all_if_any_non_finite(self):
    finite = [np.ones(2, np.float32), np.float32(3)]
    values, flag = tff_compat.zero_all_if_any_non_finite(finite)
    self.assertEqual(int(flag), 0)
    np.testing.assert_array_equal(values[0], finite[0])
    values, flag = tff_compat.zero_all_if_any_non_finite(
      [np.array([1.0, np.nan], np.float32), np.float32(3)]
    )
    self.assertEqual(int(flag), 1)
    np.testing.assert_array_equal(values[0], [0.0, 0.0])
    self.assertEqual(float(values[1]), 0.0)

  def test_model_delta_update_trains_like_tff_client_work(self):
    update_fn = tff_compat.build_model_delta_update_with_tff_optimizer(
      test_utils.tiny_model_fn,
      weighting=tff.learning.ClientWeighting.NUM_EXAMPLES,
      loop_implementation=tff.learning.LoopImplementation.DATASET_REDUCE,
    )
    optimizer = tff.learning.optimizers.build_sgdm(learning_rate=0.1)
    weights = tf.nest.map_structure(
      lambda v: v.numpy(),
      tff.learning.models.ModelWeights.from_model(test_utils.tiny_model_fn()),
    )
    (dataset,) = test_utils.tiny_client_datasets(1)
    result, _ = update_fn(
      optimizer,
      weights,
      dataset,
      optimizer.get_hparams(
        optimizer.initialize(tf.TensorSpec([], tf.float32))
      ),
    )
    self.assertEqual(float(result.update_weight), 2.0)  # Client 0: 2 examples.
    self.assertGreater(np.abs(result.update[0]).max(), 0.0)

  def test_optimizer_kinds(self):
    kind = tff_compat.optimizer_kind
    self.assertEqual(kind(tff.learning.optimizers.build_sgdm(1.0)), 'sgdm')
    self.assertEqual(kind(tff.learning.optimizers.build_adam(0.1)), 'adam')
    self.assertEqual(kind(tff.learning.optimizers.build_yogi(0.1)), 'yogi')
    self.assertIsNone(kind(tff.learning.optimizers.build_adagrad(0.1)))

  def test_keras_model_of_a_keras_wrapper(self):
    model = test_utils.tiny_model_fn()
    self.assertIsInstance(tff_compat.keras_model_of(model), tf.keras.Model)
    self.assertIsNone(tff_compat.keras_model_of(object()))


if __name__ == '__main__':
  absltest.main()
