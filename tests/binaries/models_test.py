"""Tests for `experiments.models`."""

import functools
import math

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from experiments import models

# Test configuration -> (model name, input shape, number of classes).
_CONFIGS = {
  'mlp_fmnist': ('mlp', (28, 28, 1), 10),
  'mlp_cifar10': ('mlp', (32, 32, 3), 10),
  'lenet_fmnist': ('lenet', (28, 28, 1), 10),
  'simple_cnn_cifar10': ('simple_cnn', (32, 32, 3), 10),
  'simple_cnn_cifar100': ('simple_cnn', (32, 32, 3), 100),
  'simple_cnn_fmnist': ('simple_cnn', (28, 28, 1), 10),
  'fedavg_cnn_fmnist': ('fedavg_cnn', (28, 28, 1), 10),
  'dropout_cnn_fmnist': ('dropout_cnn', (28, 28, 1), 10),
  'resnet20_cifar10': ('resnet20', (32, 32, 3), 10),
  'resnet56_bottleneck_cifar10': ('resnet56_bottleneck', (32, 32, 3), 10),
  'resnet18_cifar10': ('resnet18', (32, 32, 3), 10),
  'resnet18_cifar100': ('resnet18', (32, 32, 3), 100),
  'resnet18_torchvision_cifar10': ('resnet18_torchvision', (32, 32, 3), 10),
  'resnet34_torchvision_cifar100': ('resnet34_torchvision', (32, 32, 3), 100),
}
# Cheap models for the tests that build extra copies.
_SMALL = (
  'mlp_fmnist',
  'lenet_fmnist',
  'simple_cnn_cifar10',
  'resnet20_cifar10',
)
_WEIGHT_DECAY = 5e-4


def _create(key, weight_decay=0.0, seed=1):
  name, input_shape, num_classes = _CONFIGS[key]
  return models.create_model(
    name,
    input_shape=input_shape,
    num_classes=num_classes,
    weight_decay=weight_decay,
    seed=seed,
  )


# Each model is built once with seed 1 and no weight decay.
_build = functools.cache(_create)


def _num_trainable(model):
  return sum(int(np.prod(v.shape)) for v in model.trainable_variables)


# Trainable parameter counts from the layer formulas.
def _conv(k, c_in, c_out, bias=True):
  return k * k * c_in * c_out + (c_out if bias else 0)


def _dense(n_in, n_out):
  return n_in * n_out + n_out


def _norm(c):
  return 2 * c  # gamma, beta


def _resnet(bottleneck, blocks, widths, stem_kernel, num_classes):
  n = _conv(stem_kernel, 3, widths[0], bias=False) + _norm(widths[0])
  c = widths[0]
  for stage, (num_blocks, w) in enumerate(zip(blocks, widths)):
    for i in range(num_blocks):
      strides = 2 if stage > 0 and i == 0 else 1
      if bottleneck:
        out = 4 * w
        n += _conv(1, c, w, False) + _conv(3, w, w, False)
        n += _conv(1, w, out, False) + 2 * _norm(w) + _norm(out)
      else:
        out = w
        n += _conv(3, c, w, False) + _conv(3, w, w, False) + 2 * _norm(w)
      if strides != 1 or c != out:
        n += _conv(1, c, out, False) + _norm(out)
      c = out
  return n + _dense(c, num_classes)


# Parameter counts with their source; formulas where no source states one.
_EXPECTED_PARAMS = {
  'mlp_fmnist': 199_210,  # FedLAW App. D.3
  'mlp_cifar10': _dense(3072, 200) + _dense(200, 200) + _dense(200, 10),
  'lenet_fmnist': (_conv(5, 1, 16) + _conv(5, 16, 32) + _dense(32 * 7 * 7, 10)),
  'simple_cnn_cifar10': 122_570,  # FedLWS App. C.5
  'simple_cnn_cifar100': (
    _conv(3, 3, 32)
    + _conv(3, 32, 64)
    + _conv(3, 64, 64)
    + _dense(1024, 64)
    + _dense(64, 100)
  ),
  'simple_cnn_fmnist': 93_322,  # FedLWS App. C.5's CNN on 28x28x1
  'fedavg_cnn_fmnist': 1_663_370,  # McMahan et al. 2017 (FedCDA Sec. 6.1)
  'dropout_cnn_fmnist': 1_199_882,  # TFF's create_conv_dropout_model
  'resnet20_cifar10': 272_474,  # FedLWS App. C.5, the authors' code
  'resnet56_bottleneck_cifar10': _resnet(True, (6, 6, 6), (16, 32, 64), 3, 10),
  'resnet18_cifar10': 11_173_962,  # CIFAR ResNet-18 (FedCDA Sec. 6.1)
  'resnet18_cifar100': 11_220_132,  # CIFAR ResNet-18 (FedCDA Sec. 6.1)
  'resnet18_torchvision_cifar10': _resnet(
    False, (2, 2, 2, 2), (64, 128, 256, 512), 7, 10
  ),
  'resnet34_torchvision_cifar100': _resnet(
    False, (3, 4, 6, 3), (64, 128, 256, 512), 7, 100
  ),
}


def _random_variables(model):
  """Kernels and biases (the randomly initialised variables)."""
  return [
    v
    for layer in model.layers
    if isinstance(layer, (tf.keras.layers.Conv2D, tf.keras.layers.Dense))
    for v in layer.trainable_variables
  ]


class ModelsTest(tf.test.TestCase, parameterized.TestCase):
  def test_registry_and_configs_cover_each_other(self):
    self.assertSameElements(
      models.MODELS, {name for name, _, _ in _CONFIGS.values()}
    )
    self.assertSameElements(_CONFIGS, _EXPECTED_PARAMS)

  def test_unknown_name_raises_with_choices(self):
    with self.assertRaisesRegex(ValueError, "nope.*'lenet'.*'resnet20'"):
      models.create_model('nope', input_shape=(28, 28, 1), num_classes=10)

  def test_negative_weight_decay_raises(self):
    with self.assertRaises(ValueError):
      models.create_lenet(weight_decay=-1.0)

  def test_param_formulas_match_spec_figures(self):
    self.assertEqual(_EXPECTED_PARAMS['lenet_fmnist'], 28_938)  # "≈ 28.9k"
    self.assertEqual(_resnet(False, (3, 3, 3), (16, 32, 64), 3, 10), 272_474)
    self.assertEqual(
      _resnet(False, (2, 2, 2, 2), (64, 128, 256, 512), 3, 10), 11_173_962
    )
    # FedLWS' MLP on CIFAR: 3072-200-200-10.
    self.assertEqual(_EXPECTED_PARAMS['mlp_cifar10'], 656_810)

  @parameterized.named_parameters((k, k) for k in _CONFIGS)
  def test_output_shape_and_param_count(self, key):
    _, input_shape, num_classes = _CONFIGS[key]
    model = _build(key)
    self.assertIsInstance(model, tf.keras.Model)
    self.assertIsNone(model.optimizer)  # uncompiled
    logits = model(tf.zeros((3,) + input_shape))
    self.assertEqual(logits.shape, (3, num_classes))
    self.assertEqual(_num_trainable(model), _EXPECTED_PARAMS[key])
    self.assertEmpty(model.non_trainable_variables)

  @parameterized.named_parameters((k, k) for k in _CONFIGS)
  def test_no_batch_norm_and_no_regularizer(self, key):
    model = _build(key)
    for module in model.submodules:
      self.assertNotIsInstance(module, tf.keras.layers.BatchNormalization)
    self.assertEmpty(model.losses)

  @parameterized.named_parameters((k, k) for k in _CONFIGS)
  def test_pytorch_default_init(self, key):
    model = _build(key)
    for layer in model.layers:
      if isinstance(layer, (tf.keras.layers.Conv2D, tf.keras.layers.Dense)):
        kernel = layer.kernel.numpy()
        bound = 1.0 / math.sqrt(np.prod(kernel.shape[:-1]))
        self.assertLessEqual(np.abs(kernel).max(), bound * (1 + 1e-6))
        if kernel.size >= 1000:  # the whole range is used
          self.assertGreater(np.abs(kernel).max(), 0.95 * bound)
        if layer.use_bias:
          bias = layer.bias.numpy()
          self.assertLessEqual(np.abs(bias).max(), bound * (1 + 1e-6))
          self.assertGreater(np.abs(bias).max(), 0.0)
      elif isinstance(layer, tf.keras.layers.GroupNormalization):
        self.assertAllEqual(layer.gamma, tf.ones_like(layer.gamma))
        self.assertAllEqual(layer.beta, tf.zeros_like(layer.beta))

  def test_resnets_use_group_norm(self):
    for key in _CONFIGS:
      if key.startswith('resnet'):
        self.assertTrue(
          any(
            isinstance(layer, tf.keras.layers.GroupNormalization)
            for layer in _build(key).layers
          ),
          msg=key,
        )

  @parameterized.named_parameters((k, k) for k in _SMALL)
  def test_seeded_init_is_deterministic(self, key):
    model = _build(key)
    again = _create(key, seed=1)
    other = _create(key, seed=2)
    # Same seed: identical weights.
    self.assertLen(again.get_weights(), len(model.get_weights()))
    for a, b in zip(model.get_weights(), again.get_weights()):
      self.assertAllEqual(a, b)
    # Different seed: every kernel and bias differs.
    random_vars = _random_variables(model)
    for v, w in zip(random_vars, _random_variables(other)):
      self.assertNotAllClose(v, w)
    # Distinct per-layer seeds: same-shaped variables differ.
    for i, v in enumerate(random_vars):
      for w in random_vars[i + 1 :]:
        if v.shape == w.shape:
          self.assertNotAllClose(v, w)

  def test_unseeded_init_follows_global_seed(self):
    tf.keras.utils.set_random_seed(3)
    a = models.create_lenet().get_weights()
    tf.keras.utils.set_random_seed(3)
    b = models.create_lenet().get_weights()
    for x, y in zip(a, b):
      self.assertAllEqual(x, y)

  @parameterized.named_parameters((k, k) for k in _SMALL)
  def test_weight_decay_is_half_l2_on_all_trainables(self, key):
    model = _create(key, weight_decay=_WEIGHT_DECAY)
    # One regulariser per kernel, bias and GroupNorm gamma/beta.
    self.assertLen(model.losses, len(model.trainable_variables))
    expected = (_WEIGHT_DECAY / 2) * sum(
      float(np.sum(np.square(v.numpy()))) for v in model.trainable_variables
    )
    self.assertAllClose(float(tf.add_n(model.losses)), expected, rtol=1e-5)


if __name__ == '__main__':
  tf.test.main()
