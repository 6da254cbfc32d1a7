"""FedLAW: global weight shrinking and client weights learned on proxy data.

Li et al., "Revisiting Weighted Aggregation in Federated Learning with Neural
Networks", ICML 2023 (Sections 4-6, Appendix C). Each round the server
turns the collected client deltas into client models W_i = w - delta_i and
finds

  (gamma*, lambda*) = argmin L_proxy(gamma sum_i lambda_i W_i)        (Eq. 8-9)
  gamma = exp(x_gamma), lambda = softmax(x_lambda)                    (Eq. 10)

starting every round from x_gamma = 0, x_lambda = log p (p: the clients'
normalised weights, i.e. exactly the FedAvg model), with Adam (betas 0.5,
0.999, eps 1e-8, PyTorch semantics), learning rate server_lr halved every 20
server epochs (StepLR), `server_epochs` passes over the proxy set in batches
of `proxy_batch_size` reshuffled every epoch (last partial batch kept). The
new global model is gamma* sum_i lambda*_i W_i (last iterate).

Gradients use a closed form: with G the gradient of the proxy
loss at the combined weights w and c_i = <G, W_i>, c_bar = sum lambda_i c_i,

  dL/dx_gamma = gamma c_bar,    dL/dx_lambda_k = gamma lambda_k (c_k - c_bar)

so one step is one forward/backward pass of the model on a proxy batch.

In this module: `combine` (the combined model, Eq. 10), `closed_form_gradients`
and `adam_step`; `run_stage` (server epochs of Adam steps on the proxy batches
of `shuffled_proxy` and `proxy_batch`); `search` (one round's search from the
FedAvg model, with its fallback); `assemble_model` (the new global model).
`search_stages` turns a variant into stages, and `build_fedlaw_finalizer`
wires them into a `FinalizerProcess`.

Variants (`variant`): 'fedlaw' (both), 'gamma' (adaptive GWS, lambda = p),
'lambda' (attentive LAW, gamma = 1), 'swa' (the official code's order:
lambda with stochastic weight averaging for server_epochs // 2 epochs, then
gamma for server_epochs // 2, as the authors' code), 'fixed_gamma' (gamma
fixed, no proxy data; Section 4.1, Tables 1 and 9).

The proxy set reaches the computation as constants: `build_fedlaw_finalizer`
takes arrays or a `tf.data.Dataset` of (x, y) examples, reads it once into
arrays and the server `tff.tensorflow.computation` captures them; inside it
they are shuffled every server epoch (stateless, seeded by the seed, the round
and the epoch) and sliced into batches. Slicing, not a `tf.data.Dataset`: a
dataset made and iterated inside the search's loop cost ~90 ms per server
step (20 clients x 0.2M parameters, against ~5 ms for the step's own work).

Clients with weight 0 or a non-finite delta are left out. With no client left
the model is unchanged. A non-finite search result falls back to FedAvg
(gamma = 1, lambda = p) and counts in the measurement `fallback`. Only
trainable weights are combined; non-trainable ones pass through (models with
BatchNormalization are refused: their statistics would need the server-side
handling of the authors' code, which is not implemented).
"""

import collections
from collections.abc import Callable
import dataclasses
import functools
import math
from typing import Any, NamedTuple, Optional, Union

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators import options
from tff_aggregators import tff_compat
from tff_aggregators.aggregators import collect
from tff_aggregators.finalizers import on_collected
from tff_aggregators.finalizers import server_step

_SWA_START_EPOCH = 6
_SWA_LR = 0.05
_SWA_ANNEAL_EPOCHS = 10
_COSINE_T_MAX = 100


def proxy_arrays(
  proxy_data: Union[tf.data.Dataset, tuple[np.ndarray, np.ndarray]],
) -> tuple[np.ndarray, np.ndarray]:
  """The proxy set as (x, y) arrays, from arrays or a dataset of examples.

  Raises:
    ValueError: If the proxy set is empty or x and y differ in length.
    TypeError: If it is neither.
  """
  if isinstance(proxy_data, tf.data.Dataset):
    examples = list(proxy_data.as_numpy_iterator())
    if not examples:
      raise ValueError('The FedLAW proxy dataset is empty.')
    if not isinstance(examples[0], tuple) or len(examples[0]) != 2:
      raise TypeError(
        'The FedLAW proxy dataset must yield (x, y) examples (unbatched), '
        f'got elements like {type(examples[0])}.'
      )
    x = np.stack([e[0] for e in examples])
    y = np.stack([e[1] for e in examples])
  elif isinstance(proxy_data, (tuple, list)) and len(proxy_data) == 2:
    x, y = (np.asarray(a) for a in proxy_data)
  else:
    raise TypeError(
      'proxy_data must be a tf.data.Dataset of (x, y) examples or a pair '
      f'of arrays (x, y), got {type(proxy_data)}.'
    )
  if len(x) == 0:
    raise ValueError(
      'The FedLAW proxy set is empty: FedLAW learns its weights on it. '
      "Give it examples, or use variant='fixed_gamma' (no proxy data)."
    )
  if len(x) != len(y):
    raise ValueError(f'The proxy set has {len(x)} inputs but {len(y)} labels.')
  return x.astype(np.float32), y


def check_no_batch_normalization(model_fn: Callable[[], Any]) -> None:
  """Raises ValueError if the Keras model behind `model_fn` has BatchNorm."""
  with tf.Graph().as_default():
    model = model_fn()
    keras_model = tff_compat.keras_model_of(model)
    if keras_model is None:
      return
    for layer in keras_model.submodules:
      if isinstance(layer, tf.keras.layers.BatchNormalization):
        raise ValueError(
          f'FedLAW does not support BatchNormalization (layer '
          f'{layer.name!r}): its moving statistics would have to be '
          "re-estimated on the server (as the authors' code does). Use "
          'GroupNorm or LayerNorm instead.'
        )


# The server optimizer of the authors' code: torch.optim.Adam(betas=(0.5,
# 0.999), eps=1e-8).
_ADAM_BETA_1 = 0.5
_ADAM_BETA_2 = 0.999
_ADAM_EPSILON = 1e-8


def adam_step(x, m, v, grad, k, lr):
  """One Adam step with PyTorch's semantics: (x, m, v) after step k >= 1.

  The bias corrections 1 - beta**k are computed in float64, as PyTorch does
  (in float32 they differ by about 1e-6 relative at large k).
  """
  m = _ADAM_BETA_1 * m + (1 - _ADAM_BETA_1) * grad
  v = _ADAM_BETA_2 * v + (1 - _ADAM_BETA_2) * tf.square(grad)
  k64 = tf.cast(k, tf.float64)
  correction_1 = tf.cast(
    1 - tf.pow(tf.constant(_ADAM_BETA_1, tf.float64), k64), x.dtype
  )
  correction_2 = tf.cast(
    1 - tf.pow(tf.constant(_ADAM_BETA_2, tf.float64), k64), x.dtype
  )
  x = x - lr * (m / correction_1) / (tf.sqrt(v / correction_2) + _ADAM_EPSILON)
  return x, m, v


def _step_lr(server_lr, epoch):
  """StepLR(step_size=20, gamma=0.5), per server epoch."""
  return server_lr * tf.pow(0.5, tf.floor(tf.cast(epoch, tf.float32) / 20.0))


def _swa_lr(server_lr, epoch):
  """The SWA stage-1 schedule of the authors' code."""
  epoch = tf.cast(epoch, tf.float32)
  cosine = lambda e: server_lr * (1 + tf.cos(math.pi * e / _COSINE_T_MAX)) / 2
  base = cosine(float(_SWA_START_EPOCH))
  k = epoch - _SWA_START_EPOCH
  a = (
    1 - tf.cos(math.pi * tf.minimum(k, _SWA_ANNEAL_EPOCHS) / _SWA_ANNEAL_EPOCHS)
  ) / 2
  return tf.where(
    epoch <= _SWA_START_EPOCH, cosine(epoch), _SWA_LR * a + base * (1 - a)
  )


# The proxy objective L_proxy: the model on the proxy set, shuffled and batched.


@dataclasses.dataclass(frozen=True)
class ProxyObjective:
  """The proxy loss of one round: model, proxy set, batching and loss.

  Attributes:
    model: A model from `model_fn`; its trainable variables receive the
      weights at which the loss is evaluated.
    trainable_type: The type of the trainable weights (to unflatten).
    loss_fn: `(y, logits) -> mean loss`.
    x: The proxy inputs (array, captured as a constant).
    y: The proxy labels.
    batch_size: B_s; the last batch of an epoch may be smaller.
    seed: Seeds the shuffling, with the round and the epoch.
    round_num: The round number (int64 tensor).
  """

  model: Any
  trainable_type: tff.StructType
  loss_fn: Callable[[tf.Tensor, tf.Tensor], tf.Tensor]
  x: np.ndarray
  y: np.ndarray
  batch_size: int
  seed: int
  round_num: tf.Tensor

  @property
  def num_examples(self) -> int:
    return len(self.x)

  @property
  def num_batches(self) -> int:
    return -(-len(self.x) // self.batch_size)


def shuffled_proxy(proxy: ProxyObjective, epoch):
  """The proxy set (x, y) reshuffled for (seed, round, epoch)."""
  seed_pair = tf.stack(
    [
      tf.constant(proxy.seed, tf.int64),
      proxy.round_num * 100003 + tf.cast(epoch, tf.int64),
    ]
  )
  order = tf.argsort(
    tf.random.stateless_uniform([proxy.num_examples], seed=seed_pair)
  )
  return (
    tf.gather(tf.constant(proxy.x), order),
    tf.gather(tf.constant(proxy.y), order),
  )


def proxy_batch(proxy: ProxyObjective, shuffled, b):
  """Batch b of the `shuffled` proxy set (the last may be smaller)."""
  start = b * proxy.batch_size
  return tuple(t[start : start + proxy.batch_size] for t in shuffled)


def _assign(proxy: ProxyObjective, flat):
  """Assigns the flat trainable weights to the model; the assign ops."""
  leaves = tf.nest.flatten(collect.unflatten(flat, proxy.trainable_type))
  variables = proxy.model.trainable_variables
  return [v.assign(leaf) for v, leaf in zip(variables, leaves)]


def batch_gradient(proxy: ProxyObjective, flat, x, y):
  """G: the flat gradient of the loss on batch (x, y) at weights `flat`."""
  variables = proxy.model.trainable_variables
  with tf.control_dependencies(_assign(proxy, flat)):
    with tf.GradientTape() as tape:
      loss = proxy.loss_fn(y, proxy.model.predict_on_batch(x, True))
    grads = tape.gradient(loss, variables)
  return collect.flatten(
    [tf.zeros_like(w) if g is None else g for g, w in zip(grads, variables)]
  )


def proxy_loss(proxy: ProxyObjective, flat):
  """L_proxy(flat): the mean over the whole proxy set, in training mode."""
  with tf.control_dependencies(_assign(proxy, flat)):
    total = tf.constant(0.0)
    count = tf.constant(0.0)
    shuffled = shuffled_proxy(proxy, 0)
    for b in tf.range(proxy.num_batches):
      x, y = proxy_batch(proxy, shuffled, b)
      n = tf.cast(tf.shape(y)[0], tf.float32)
      total += proxy.loss_fn(y, proxy.model.predict_on_batch(x, True)) * n
      count += n
    return tf.math.divide_no_nan(total, count)


def _default_proxy_loss(y, logits):
  """Sparse categorical cross-entropy on logits, the batch mean."""
  return tf.reduce_mean(
    tf.keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
  )


# The paper's rule: combined model, closed-form gradients, the server epochs.


def combine(rows, x_gamma, x_lambda):
  """gamma sum_i lambda_i W_i, gamma = exp(x_gamma), lambda = softmax (Eq. 10).

  Args:
    rows: The client models W_i as rows, float32 [m, D].
    x_gamma: Scalar, log gamma.
    x_lambda: [m], the logits of lambda.
  """
  lam = tf.nn.softmax(x_lambda)
  return tf.exp(x_gamma) * tf.linalg.matvec(rows, lam, transpose_a=True)


def closed_form_gradients(rows, grad_w, x_gamma, x_lambda):
  """(dL/dx_gamma, dL/dx_lambda) from G = dL/dw at w = combine(...).

  With c_i = <G, W_i> and c_bar = sum_i lambda_i c_i: dL/dx_gamma =
  gamma c_bar and dL/dx_lambda_k = gamma lambda_k (c_k - c_bar).
  """
  c = tf.linalg.matvec(rows, grad_w)
  lam = tf.nn.softmax(x_lambda)
  c_bar = tf.reduce_sum(lam * c)
  gamma = tf.exp(x_gamma)
  return gamma * c_bar, gamma * lam * (c - c_bar)


class SearchStage(NamedTuple):
  """Server epochs of Adam on (x_gamma, x_lambda) with one schedule.

  Attributes:
    epochs: The number of passes over the proxy set.
    learn_gamma: Whether x_gamma takes Adam steps (else it stays).
    learn_lambda: Whether x_lambda takes Adam steps (else it stays).
    lr_fn: server epoch -> Adam's learning rate.
    swa: Whether x_lambda is, at the end, the mean of its values after the
      epochs from `_SWA_START_EPOCH` on (stochastic weight averaging).
  """

  epochs: int
  learn_gamma: bool
  learn_lambda: bool
  lr_fn: Callable[[tf.Tensor], tf.Tensor]
  swa: bool


def run_stage(
  proxy: ProxyObjective, rows, x_gamma, x_lambda, stage: SearchStage
):
  """Adam (PyTorch semantics) over `stage.epochs` proxy epochs (Eq. 8-10).

  Each step: the gradient G of the proxy loss on one batch at the combined
  weights, its closed form in x_gamma and x_lambda, one Adam step each.

  Returns:
    (x_gamma, x_lambda) after the stage.
  """
  m = tf.zeros_like(x_lambda)
  v = tf.zeros_like(x_lambda)
  mg = tf.constant(0.0)
  vg = tf.constant(0.0)
  k = tf.constant(0.0)
  swa_sum = tf.zeros_like(x_lambda)
  swa_count = tf.constant(0.0)
  for epoch in tf.range(stage.epochs):
    lr = stage.lr_fn(epoch)
    shuffled = shuffled_proxy(proxy, epoch)
    for b in tf.range(proxy.num_batches):
      x, y = proxy_batch(proxy, shuffled, b)
      grad_w = batch_gradient(proxy, combine(rows, x_gamma, x_lambda), x, y)
      grad_gamma, grad_lambda = closed_form_gradients(
        rows, grad_w, x_gamma, x_lambda
      )
      k += 1.0
      if stage.learn_gamma:
        x_gamma, mg, vg = adam_step(x_gamma, mg, vg, grad_gamma, k, lr)
      if stage.learn_lambda:
        x_lambda, m, v = adam_step(x_lambda, m, v, grad_lambda, k, lr)
    if stage.swa and epoch >= _SWA_START_EPOCH:
      swa_sum += x_lambda
      swa_count += 1.0
  if stage.swa:
    x_lambda = swa_sum / swa_count
  return x_gamma, x_lambda


def search(
  proxy: ProxyObjective, rows, p, stages: tuple[SearchStage, ...], x_gamma0
):
  """The round's search for gamma and lambda, from the FedAvg model.

  Starts at x_gamma = x_gamma0, x_lambda = log p and runs `stages`. A
  non-finite result falls back to gamma = exp(x_gamma0), lambda = p.

  Args:
    proxy: The round's `ProxyObjective`.
    rows: The client models W_i as rows, float32 [m, D].
    p: The clients' normalised weights [m].
    stages: The `SearchStage`s, in order (see `search_stages`).
    x_gamma0: Python float, the initial log gamma.

  Returns:
    (gamma, lambda, proxy loss before, proxy loss after, fallback 0/1).
  """
  x_gamma0 = tf.constant(x_gamma0)
  x_lambda0 = tf.math.log(p)
  if proxy.num_examples:
    loss_before = proxy_loss(proxy, combine(rows, x_gamma0, x_lambda0))
  else:
    loss_before = tf.constant(np.nan, tf.float32)
  x_gamma, x_lambda = x_gamma0, x_lambda0
  for stage in stages:
    x_gamma, x_lambda = run_stage(proxy, rows, x_gamma, x_lambda, stage)
  gamma = tf.exp(x_gamma)
  lam = tf.nn.softmax(x_lambda)
  if proxy.num_examples:
    loss_after = proxy_loss(proxy, combine(rows, x_gamma, x_lambda))
    ok = tf.reduce_all(
      tf.math.is_finite(tf.concat([lam, [gamma, loss_after]], 0))
    )
  else:
    loss_after = loss_before
    ok = tf.constant(True)
  gamma = tf.where(ok, gamma, tf.exp(x_gamma0))
  lam = tf.where(ok, lam, p)
  return gamma, lam, loss_before, loss_after, 1 - tf.cast(ok, tf.int32)


def assemble_model(w, rows, kept, run_search):
  """The new global model gamma* sum_i lambda*_i W_i (w if no client left).

  Args:
    w: The flat global trainable weights, float32 [D].
    rows: The valid clients' models W_i as rows [m, D].
    kept: Their weights [m] (normalised into p).
    run_search: (rows, p) -> the result of `search`.

  Returns:
    (new flat weights, gamma, lambda [m], proxy loss before, after,
    fallback); NaN losses and gamma = 1 when no client is left.
  """

  def with_clients():
    p = kept / tf.reduce_sum(kept)
    gamma, lam, before, after, fallback = run_search(rows, p)
    new = gamma * tf.linalg.matvec(rows, lam, transpose_a=True)
    return new, gamma, lam, before, after, fallback

  def without_clients():
    nan = tf.constant(np.nan, tf.float32)
    return (
      w,
      tf.constant(1.0),
      tf.zeros([0]),
      nan,
      nan,
      tf.constant(0, tf.int32),
    )

  return tf.cond(tf.shape(kept)[0] > 0, with_clients, without_clients)


# The options: which stages a variant runs; the finalizer that wires it all.


def search_stages(variant, server_epochs, server_lr) -> tuple[SearchStage, ...]:
  """The search of `variant` (see the module docstring) as stages."""
  step_lr = functools.partial(_step_lr, server_lr)
  if variant == 'swa':
    half = server_epochs // 2
    swa_lr = functools.partial(_swa_lr, server_lr)
    return (
      SearchStage(half, False, True, swa_lr, True),
      SearchStage(half, True, False, step_lr, False),
    )
  if server_epochs == 0:
    return ()
  learn_gamma = variant in ('fedlaw', 'gamma', 'swa')
  learn_lambda = variant in ('fedlaw', 'lambda', 'swa')
  return (
    SearchStage(server_epochs, learn_gamma, learn_lambda, step_lr, False),
  )


def finalizer_step(
  proxy: ProxyObjective,
  weights,
  collected,
  stages: tuple[SearchStage, ...],
  x_gamma0: float,
  max_clients: int,
):
  """One round at the server: (new trainable weights, measurements).

  The valid clients' models are searched and combined (`assemble_model`); a
  non-finite result is rejected (weights kept, `update_non_finite` = 1).

  Args:
    proxy: The round's `ProxyObjective`.
    weights: The global trainable weights.
    collected: `CollectAllFactory`'s result.
    stages: The variant's `SearchStage`s (`search_stages`).
    x_gamma0: The initial log gamma.
    max_clients: The length of the `lambda` measurement.
  """

  @tf.function
  def run_search(rows, p):
    return search(proxy, rows, p, stages, x_gamma0)

  w = collect.flatten(weights)
  rows, kept, valid = on_collected.valid_client_models(w, collected)
  num_kept = tf.shape(kept)[0]
  new, gamma, lam, before, after, fallback = assemble_model(
    w, rows, kept, run_search
  )
  finite = tf.reduce_all(tf.math.is_finite(new))  # Else keep the model.
  new_weights = collect.unflatten(
    tf.where(finite, new, w), proxy.trainable_type
  )
  # Each valid client's lambda at its row of the collected cohort.
  positions = tf.boolean_mask(tf.range(tf.shape(valid)[0]), valid)
  lambda_padded = tf.scatter_nd(positions[:, tf.newaxis], lam, [max_clients])
  measurements = collections.OrderedDict(
    gamma=gamma,
    **{'lambda': lambda_padded},
    num_clients=num_kept,
    proxy_loss_before=before,
    proxy_loss_after=after,
    fallback=fallback,
    update_non_finite=1 - tf.cast(finite, tf.int32),
    num_dropped_clients=tf.shape(valid)[0] - num_kept,
  )
  return new_weights, measurements


def build_fedlaw_finalizer(
  model_fn: Callable[[], tff.learning.models.VariableModel],
  model_weights_type: tff.StructType,
  proxy_data: Optional[Union[tf.data.Dataset, tuple[np.ndarray, np.ndarray]]],
  *,
  max_clients: int,
  variant: Union[str, options.FedLawVariant] = options.FedLawVariant.FEDLAW,
  server_epochs: int = 100,
  server_lr: float = 0.005,
  proxy_batch_size: int = 128,
  fixed_gamma: float = 1.0,
  proxy_loss_fn: Optional[Callable[[tf.Tensor, tf.Tensor], tf.Tensor]] = None,
  seed: int = 0,
) -> tff.learning.templates.FinalizerProcess:
  """The FedLAW finalizer; its update is `CollectAllFactory`'s result.

  Args:
    model_fn: The model's no-arg constructor (as for the learning process);
      its `predict_on_batch(x, training=True)` gives the proxy logits.
    model_weights_type: The `tff.learning.models.ModelWeights` type.
    proxy_data: The server's labelled proxy set: a `tf.data.Dataset` of
      unbatched (x, y) examples or a pair of arrays. Unused (may be None)
      for `variant='fixed_gamma'`.
    max_clients: The collect-all capacity (pads the `lambda` measurement).
    variant: A `tff_aggregators.FedLawVariant` or its string value (see the
      module docstring).
    server_epochs: E_s, passes over the proxy set per round (the paper: 100).
    server_lr: Adam's learning rate (official code: 0.01 for CIFAR-10, 0.005
      otherwise).
    proxy_batch_size: B_s (128).
    fixed_gamma: gamma for `variant='fixed_gamma'`.
    proxy_loss_fn: `(y, logits) -> mean loss`; default sparse categorical
      cross-entropy on logits (no regularization terms in the proxy loss).
    seed: Seeds the proxy shuffling (with the round number).

  Returns:
    A `FinalizerProcess`. State: the round number. Measurements: `gamma`,
    `lambda` (float32 [max_clients], zero-padded), `num_clients`,
    `proxy_loss_before`, `proxy_loss_after`, `fallback`,
    `update_non_finite` (1: a non-finite result was rejected, the model kept)
    and `num_dropped_clients` (collected clients that were not valid).
  """
  variant = options.parse(options.FedLawVariant, variant, 'variant')
  if server_epochs < 0 or proxy_batch_size < 1 or server_lr < 0:
    raise ValueError(
      'server_epochs >= 0, proxy_batch_size >= 1 and server_lr >= 0 are '
      f'needed; got {server_epochs}, {proxy_batch_size}, {server_lr}.'
    )
  if variant == 'swa' and server_epochs // 2 <= _SWA_START_EPOCH:
    raise ValueError(
      'FedLAW(SWA) takes its first snapshot after server epoch '
      f'{_SWA_START_EPOCH} of stage 1 (server_epochs // 2 epochs): use '
      f'server_epochs >= {2 * _SWA_START_EPOCH + 2}, got {server_epochs}.'
    )
  if variant == 'fixed_gamma':
    if not fixed_gamma > 0:
      raise ValueError(f'fixed_gamma must be > 0, got {fixed_gamma}.')
    x_proxy = np.zeros([0], np.float32)
    y_proxy = np.zeros([0], np.int64)
    server_epochs = 0
  else:
    x_proxy, y_proxy = proxy_arrays(proxy_data)
    check_no_batch_normalization(model_fn)
  server_step.check_model_weights_type(model_weights_type)
  trainable_type = model_weights_type.trainable
  new_proxy = functools.partial(
    ProxyObjective,
    trainable_type=trainable_type,
    loss_fn=_default_proxy_loss if proxy_loss_fn is None else proxy_loss_fn,
    x=x_proxy,
    y=y_proxy,
    batch_size=proxy_batch_size,
    seed=seed,
  )
  stages = search_stages(variant, server_epochs, server_lr)
  x_gamma0 = float(np.log(fixed_gamma)) if variant == 'fixed_gamma' else 0.0

  def step(round_num, weights, collected):
    proxy = new_proxy(model=model_fn(), round_num=round_num)
    new_weights, measurements = finalizer_step(
      proxy, weights, collected, stages, x_gamma0, max_clients
    )
    return round_num + 1, new_weights, measurements

  return server_step.build_server_step_finalizer(
    model_weights_type,
    on_collected.collected_type(trainable_type),
    lambda: tf.constant(0, tf.int64),
    step,
  )
