"""Keras models for the FedLAW, FedLWS, FedCDA, FedGLAD and FedSA experiments.

The layouts follow the papers' PyTorch models (the authors' code where a
paper is silent), with channels-last inputs. Every builder returns an
uncompiled `tf.keras.Model` that outputs logits and shares these conventions:

*   PyTorch's default initialisation (the authors' code): kernels and biases
    are U(-1/sqrt(fan_in), 1/sqrt(fan_in)), with fan_in = kh * kw * in_channels
    for convolutions. Normalisation layers start at gamma = 1, beta = 0. With a
    `seed`, every initializer gets its own seed derived from it, so equal seeds
    give equal weights.
*   `weight_decay` is PyTorch's coupled weight decay: an L2 regulariser with
    factor `weight_decay / 2` on every kernel, bias and normalisation
    gamma/beta (`tff.learning.models.from_keras_model` adds `model.losses` to
    the loss). No regulariser at all when `weight_decay == 0`.
*   No BatchNormalization: the ResNets use GroupNormalization instead, as TFF
    aggregates trainable weights only (BN statistics would never be averaged).
    The group count is fixed per model: TFF's `resnet_models` count (the Keras
    default, 32) for ResNet-18/34, whose widths are multiples of 64; 2 for the
    CIFAR ResNets, whose 16-channel layers cannot hold 32 groups. ResNet
    builders take `norm_groups` to change it.
*   Stride-2 convolutions and max-pools pad symmetrically as PyTorch does
    (explicit `ZeroPadding2D`), not as Keras' asymmetric 'same'.
"""

from collections.abc import Callable, Sequence
import math
from typing import Optional

import numpy as np
import tensorflow as tf

_Shape = Sequence[int]


class _LayerFactory:
  """Makes layers with PyTorch-default init, per-layer seeds and optional L2."""

  def __init__(self, weight_decay: float, seed: Optional[int]):
    if weight_decay < 0:
      raise ValueError(f'weight_decay must be >= 0, got {weight_decay}.')
    if seed is not None and seed < 0:
      raise ValueError(f'seed must be None or >= 0, got {seed}.')
    self._l2 = weight_decay / 2.0
    self._seed = seed
    self._count = 0

  def _next_seed(self) -> Optional[int]:
    if self._seed is None:
      return None
    self._count += 1
    state = np.random.SeedSequence([self._seed, self._count]).generate_state(1)
    return int(state[0]) & 0x7FFFFFFF

  def dropout_seed(self) -> Optional[int]:
    return self._next_seed()

  def _regularizer(self) -> Optional[tf.keras.regularizers.Regularizer]:
    return tf.keras.regularizers.L2(self._l2) if self._l2 > 0 else None

  def _initializers(self, fan_in: int):
    bound = 1.0 / math.sqrt(fan_in)
    # U(+-sqrt(3 * scale / fan_in)) = U(+-1/sqrt(fan_in)).
    kernel = tf.keras.initializers.VarianceScaling(
      scale=1.0 / 3.0,
      mode='fan_in',
      distribution='uniform',
      seed=self._next_seed(),
    )
    bias = tf.keras.initializers.RandomUniform(
      -bound, bound, seed=self._next_seed()
    )
    return kernel, bias

  def conv(
    self,
    x: tf.Tensor,
    filters: int,
    kernel_size: int,
    strides: int = 1,
    padding: str = 'same',
    use_bias: bool = True,
    activation: Optional[str] = None,
  ) -> tf.Tensor:
    """Conv2D; 'same' means PyTorch's padding = kernel_size // 2."""
    kernel_init, bias_init = self._initializers(
      kernel_size * kernel_size * x.shape[-1]
    )
    if padding == 'same' and strides > 1 and kernel_size > 1:
      x = tf.keras.layers.ZeroPadding2D(kernel_size // 2)(x)
      padding = 'valid'
    return tf.keras.layers.Conv2D(
      filters,
      kernel_size,
      strides=strides,
      padding=padding,
      use_bias=use_bias,
      activation=activation,
      kernel_initializer=kernel_init,
      bias_initializer=bias_init,
      kernel_regularizer=self._regularizer(),
      bias_regularizer=self._regularizer() if use_bias else None,
    )(x)

  def dense(
    self, x: tf.Tensor, units: int, activation: Optional[str] = None
  ) -> tf.Tensor:
    kernel_init, bias_init = self._initializers(x.shape[-1])
    return tf.keras.layers.Dense(
      units,
      activation=activation,
      kernel_initializer=kernel_init,
      bias_initializer=bias_init,
      kernel_regularizer=self._regularizer(),
      bias_regularizer=self._regularizer(),
    )(x)

  def group_norm(self, x: tf.Tensor, groups: int) -> tf.Tensor:
    # epsilon as PyTorch's GroupNorm/BatchNorm2d.
    return tf.keras.layers.GroupNormalization(
      groups=groups,
      axis=-1,
      epsilon=1e-5,
      gamma_regularizer=self._regularizer(),
      beta_regularizer=self._regularizer(),
    )(x)


def _relu(x: tf.Tensor) -> tf.Tensor:
  return tf.keras.layers.ReLU()(x)


def create_mlp(
  input_shape: _Shape = (28, 28, 1),
  num_classes: int = 10,
  weight_decay: float = 0.0,
  seed: Optional[int] = None,
) -> tf.keras.Model:
  """MLP in-200-200-classes with ReLU (FedLAW App. D.3; FedLWS App. B.6).

  199,210 parameters on Fashion-MNIST (FedLAW); 656,810 on CIFAR-10
  (FedLWS' 3072-200-200-10).
  """
  f = _LayerFactory(weight_decay, seed)
  inputs = tf.keras.Input(shape=tuple(input_shape))
  x = tf.keras.layers.Flatten()(inputs)
  x = f.dense(x, 200, activation='relu')
  x = f.dense(x, 200, activation='relu')
  outputs = f.dense(x, num_classes)
  return tf.keras.Model(inputs, outputs, name='mlp')


def create_lenet(
  input_shape: _Shape = (28, 28, 1),
  num_classes: int = 10,
  weight_decay: float = 0.0,
  seed: Optional[int] = None,
) -> tf.keras.Model:
  """FedLAW's `LeNet5` for Fashion-MNIST (authors' code; not classic LeNet-5).

  Conv 5x5/16 'same' + ReLU + MaxPool 2, Conv 5x5/32 'same' + ReLU + MaxPool 2,
  Dense classes; no hidden dense layer. 28,938 parameters on 28x28x1.
  """
  f = _LayerFactory(weight_decay, seed)
  inputs = tf.keras.Input(shape=tuple(input_shape))
  x = f.conv(inputs, 16, 5, activation='relu')
  x = tf.keras.layers.MaxPooling2D(2)(x)
  x = f.conv(x, 32, 5, activation='relu')
  x = tf.keras.layers.MaxPooling2D(2)(x)
  x = tf.keras.layers.Flatten()(x)
  outputs = f.dense(x, num_classes)
  return tf.keras.Model(inputs, outputs, name='lenet')


def create_simple_cnn(
  input_shape: _Shape = (32, 32, 3),
  num_classes: int = 10,
  weight_decay: float = 0.0,
  seed: Optional[int] = None,
) -> tf.keras.Model:
  """SimpleCNN, the "CNN" of FedLAW App. D.3 and FedLWS App. C.5 (`CNNCifar10`).

  Conv 3x3/32, MaxPool 2, Conv 3x3/64, MaxPool 2, Conv 3x3/64 (all 'valid',
  ReLU), Dense 64 + ReLU, Dense classes. Both papers use it for CIFAR-10/100:
  122,570 parameters for 32x32x3 and 10 classes. On 28x28x1 it is FedLWS'
  Fashion-MNIST "simple CNN" in our reading of App. C.5 (93,322 params).
  """
  f = _LayerFactory(weight_decay, seed)
  inputs = tf.keras.Input(shape=tuple(input_shape))
  x = f.conv(inputs, 32, 3, padding='valid', activation='relu')
  x = tf.keras.layers.MaxPooling2D(2)(x)
  x = f.conv(x, 64, 3, padding='valid', activation='relu')
  x = tf.keras.layers.MaxPooling2D(2)(x)
  x = f.conv(x, 64, 3, padding='valid', activation='relu')
  x = tf.keras.layers.Flatten()(x)
  x = f.dense(x, 64, activation='relu')
  outputs = f.dense(x, num_classes)
  return tf.keras.Model(inputs, outputs, name='simple_cnn')


def create_dropout_cnn(
  input_shape: _Shape = (28, 28, 1),
  num_classes: int = 10,
  weight_decay: float = 0.0,
  seed: Optional[int] = None,
) -> tf.keras.Model:
  """The CNN with dropout of Reddi et al. (2021), FedGLAD's MNIST model.

  Conv 3x3/32, Conv 3x3/64 ('valid', ReLU), MaxPool 2, Dropout 0.25, Dense
  128 + ReLU, Dropout 0.5, Dense classes (logits): 1,199,882 parameters on
  28x28x1 (FedGLAD Section 4.1; TFF's `create_conv_dropout_model` has the same
  layers with Glorot init and a softmax output; here PyTorch's init, as
  FedGLAD's code).
  """
  f = _LayerFactory(weight_decay, seed)
  inputs = tf.keras.Input(shape=tuple(input_shape))
  x = f.conv(inputs, 32, 3, padding='valid', activation='relu')
  x = f.conv(x, 64, 3, padding='valid', activation='relu')
  x = tf.keras.layers.MaxPooling2D(2)(x)
  x = tf.keras.layers.Dropout(0.25, seed=f.dropout_seed())(x)
  x = tf.keras.layers.Flatten()(x)
  x = f.dense(x, 128, activation='relu')
  x = tf.keras.layers.Dropout(0.5, seed=f.dropout_seed())(x)
  outputs = f.dense(x, num_classes)
  return tf.keras.Model(inputs, outputs, name='dropout_cnn')


def create_fedavg_cnn(
  input_shape: _Shape = (28, 28, 1),
  num_classes: int = 10,
  weight_decay: float = 0.0,
  seed: Optional[int] = None,
) -> tf.keras.Model:
  """FedCDA's Fashion-MNIST "simple CNN", the CNN of McMahan et al. (2017).

  Conv 5x5/32, MaxPool 2, Conv 5x5/64, MaxPool 2 (convs 'same' + ReLU),
  Dense 512 + ReLU, Dense classes. 1,663,370 parameters on 28x28x1
  (McMahan et al.'s count; FedCDA's Section 6.1 names no padding, and only
  'same' gives it).
  """
  f = _LayerFactory(weight_decay, seed)
  inputs = tf.keras.Input(shape=tuple(input_shape))
  x = f.conv(inputs, 32, 5, activation='relu')
  x = tf.keras.layers.MaxPooling2D(2)(x)
  x = f.conv(x, 64, 5, activation='relu')
  x = tf.keras.layers.MaxPooling2D(2)(x)
  x = tf.keras.layers.Flatten()(x)
  x = f.dense(x, 512, activation='relu')
  outputs = f.dense(x, num_classes)
  return tf.keras.Model(inputs, outputs, name='fedavg_cnn')


def _conv_norm(
  f: _LayerFactory,
  x: tf.Tensor,
  filters: int,
  kernel_size: int,
  strides: int,
  groups: int,
) -> tf.Tensor:
  x = f.conv(x, filters, kernel_size, strides=strides, use_bias=False)
  return f.group_norm(x, groups)


def _basic_block(
  f: _LayerFactory, x: tf.Tensor, width: int, strides: int, groups: int
) -> tf.Tensor:
  """conv3x3-GN-ReLU-conv3x3-GN + shortcut, ReLU (expansion 1)."""
  y = _relu(_conv_norm(f, x, width, 3, strides, groups))
  y = _conv_norm(f, y, width, 3, 1, groups)
  shortcut = x
  if strides != 1 or x.shape[-1] != width:
    shortcut = _conv_norm(f, x, width, 1, strides, groups)
  return _relu(tf.keras.layers.Add()([y, shortcut]))


def _bottleneck_block(
  f: _LayerFactory, x: tf.Tensor, width: int, strides: int, groups: int
) -> tf.Tensor:
  """conv1x1-GN-ReLU-conv3x3(stride)-GN-ReLU-conv1x1(4x)-GN + shortcut, ReLU."""
  y = _relu(_conv_norm(f, x, width, 1, 1, groups))
  y = _relu(_conv_norm(f, y, width, 3, strides, groups))
  y = _conv_norm(f, y, 4 * width, 1, 1, groups)
  shortcut = x
  if strides != 1 or x.shape[-1] != 4 * width:
    shortcut = _conv_norm(f, x, 4 * width, 1, strides, groups)
  return _relu(tf.keras.layers.Add()([y, shortcut]))


def _resnet(
  name: str,
  block_fn: Callable[..., tf.Tensor],
  blocks_per_stage: Sequence[int],
  widths: Sequence[int],
  imagenet_stem: bool,
  input_shape: _Shape,
  num_classes: int,
  weight_decay: float,
  seed: Optional[int],
  norm_groups: int,
) -> tf.keras.Model:
  """ResNet with GroupNorm; first block of every stage but the first strides 2.

  Shortcuts are identity, or 1x1 conv (stride s, no bias) + GN when the shape
  changes ("option B"). Convs have no bias; the head is GAP + Dense (bias).
  """
  f = _LayerFactory(weight_decay, seed)
  inputs = tf.keras.Input(shape=tuple(input_shape))
  if imagenet_stem:  # torchvision: conv 7x7/2, GN, ReLU, max-pool 3x3/2.
    x = _relu(_conv_norm(f, inputs, widths[0], 7, 2, norm_groups))
    # Zero padding equals PyTorch's -inf padding after a ReLU.
    x = tf.keras.layers.ZeroPadding2D(1)(x)
    x = tf.keras.layers.MaxPooling2D(3, strides=2)(x)
  else:  # CIFAR: conv 3x3/1, GN, ReLU.
    x = _relu(_conv_norm(f, inputs, widths[0], 3, 1, norm_groups))
  for stage, (num_blocks, width) in enumerate(zip(blocks_per_stage, widths)):
    for i in range(num_blocks):
      strides = 2 if stage > 0 and i == 0 else 1
      x = block_fn(f, x, width, strides, norm_groups)
  x = tf.keras.layers.GlobalAveragePooling2D()(x)
  outputs = f.dense(x, num_classes)
  return tf.keras.Model(inputs, outputs, name=name)


def create_resnet20(
  input_shape: _Shape = (32, 32, 3),
  num_classes: int = 10,
  weight_decay: float = 0.0,
  seed: Optional[int] = None,
  norm_groups: int = 2,
) -> tf.keras.Model:
  """CIFAR ResNet-20 of FedLAW App. D.3 and FedLWS App. C.5, GroupNorm for BN.

  3x3/16 stem, 3 stages x 3 basic blocks (16/32/64). 272,474 parameters for
  10 classes (GN has BN's trainable gamma/beta).
  """
  return _resnet(
    'resnet20',
    _basic_block,
    blocks_per_stage=(3, 3, 3),
    widths=(16, 32, 64),
    imagenet_stem=False,
    input_shape=input_shape,
    num_classes=num_classes,
    weight_decay=weight_decay,
    seed=seed,
    norm_groups=norm_groups,
  )


def create_resnet56_bottleneck(
  input_shape: _Shape = (32, 32, 3),
  num_classes: int = 10,
  weight_decay: float = 0.0,
  seed: Optional[int] = None,
  norm_groups: int = 2,
) -> tf.keras.Model:
  """FedGLAD's CIFAR-10 ResNet-56 (FedML `resnet56`), GroupNorm for BN.

  3x3/16 stem, 3 stages x 6 bottleneck blocks of widths 16/32/64 (outputs
  64/128/256). 591,322 parameters for 10 classes. Not FedLAW's ResNet56,
  which has 9 basic blocks per stage.
  """
  return _resnet(
    'resnet56_bottleneck',
    _bottleneck_block,
    blocks_per_stage=(6, 6, 6),
    widths=(16, 32, 64),
    imagenet_stem=False,
    input_shape=input_shape,
    num_classes=num_classes,
    weight_decay=weight_decay,
    seed=seed,
    norm_groups=norm_groups,
  )


def create_resnet18(
  input_shape: _Shape = (32, 32, 3),
  num_classes: int = 10,
  weight_decay: float = 0.0,
  seed: Optional[int] = None,
  norm_groups: int = 32,
) -> tf.keras.Model:
  """FedCDA's CIFAR ResNet-18 (3x3/1 stem, no max-pool), GroupNorm for BN.

  Basic blocks [2, 2, 2, 2], widths 64/128/256/512. 11,173,962 parameters for
  10 classes, 11,220,132 for 100.
  """
  return _resnet(
    'resnet18',
    _basic_block,
    blocks_per_stage=(2, 2, 2, 2),
    widths=(64, 128, 256, 512),
    imagenet_stem=False,
    input_shape=input_shape,
    num_classes=num_classes,
    weight_decay=weight_decay,
    seed=seed,
    norm_groups=norm_groups,
  )


def create_resnet18_torchvision(
  input_shape: _Shape = (32, 32, 3),
  num_classes: int = 10,
  weight_decay: float = 0.0,
  seed: Optional[int] = None,
  norm_groups: int = 32,
) -> tf.keras.Model:
  """FedSA's ResNet-18: torchvision layout (7x7/2 stem + max-pool), GN for BN.

  Used by FedSA on CIFAR-10/100 as is (ImageNet stem on 32x32). 11,181,642
  parameters for 10 classes. Initialised like the other models here, not
  torchvision's He-normal fan_out conv init.
  """
  return _resnet(
    'resnet18_torchvision',
    _basic_block,
    blocks_per_stage=(2, 2, 2, 2),
    widths=(64, 128, 256, 512),
    imagenet_stem=True,
    input_shape=input_shape,
    num_classes=num_classes,
    weight_decay=weight_decay,
    seed=seed,
    norm_groups=norm_groups,
  )


def create_resnet34_torchvision(
  input_shape: _Shape = (32, 32, 3),
  num_classes: int = 100,
  weight_decay: float = 0.0,
  seed: Optional[int] = None,
  norm_groups: int = 32,
) -> tf.keras.Model:
  """FedSA's ResNet-34 for "CIFAR-100*": as `create_resnet18_torchvision`.

  Basic blocks [3, 4, 6, 3]. 21,335,972 parameters for 100 classes.
  """
  return _resnet(
    'resnet34_torchvision',
    _basic_block,
    blocks_per_stage=(3, 4, 6, 3),
    widths=(64, 128, 256, 512),
    imagenet_stem=True,
    input_shape=input_shape,
    num_classes=num_classes,
    weight_decay=weight_decay,
    seed=seed,
    norm_groups=norm_groups,
  )


MODELS = {
  'mlp': create_mlp,
  'lenet': create_lenet,
  'simple_cnn': create_simple_cnn,
  'fedavg_cnn': create_fedavg_cnn,
  'dropout_cnn': create_dropout_cnn,
  'resnet20': create_resnet20,
  'resnet56_bottleneck': create_resnet56_bottleneck,
  'resnet18': create_resnet18,
  'resnet18_torchvision': create_resnet18_torchvision,
  'resnet34_torchvision': create_resnet34_torchvision,
}


def create_model(
  name: str,
  *,
  input_shape: _Shape,
  num_classes: int,
  weight_decay: float = 0.0,
  seed: Optional[int] = None,
) -> tf.keras.Model:
  """Builds the model `name` of `MODELS` (uncompiled, outputs logits)."""
  if name not in MODELS:
    raise ValueError(f'Unknown model {name!r}; use one of {sorted(MODELS)}.')
  return MODELS[name](
    input_shape=input_shape,
    num_classes=num_classes,
    weight_decay=weight_decay,
    seed=seed,
  )
