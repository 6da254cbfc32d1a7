"""`build_fedlaw_process`: FedAvg clients, FedLAW's learned aggregation."""

from collections.abc import Callable
from typing import Optional, Union

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators import options
from tff_aggregators.aggregators import collect
from tff_aggregators.algorithms import checks
from tff_aggregators.algorithms import client_works
from tff_aggregators.finalizers import fedlaw


def build_fedlaw_process(
  model_fn: Callable[[], tff.learning.models.VariableModel],
  client_optimizer_fn: tff.learning.optimizers.Optimizer,
  *,
  proxy_data: Optional[Union[tf.data.Dataset, tuple[np.ndarray, np.ndarray]]],
  max_clients: int,
  client_weighting: tff.learning.ClientWeighting = (
    tff.learning.ClientWeighting.NUM_EXAMPLES
  ),
  model_distributor: Optional[
    tff.learning.templates.DistributionProcess
  ] = None,
  metrics_aggregator=None,
  loop_implementation: tff.learning.LoopImplementation = (
    tff.learning.LoopImplementation.DATASET_REDUCE
  ),
  client_work: Optional[tff.learning.templates.ClientWorkProcess] = None,
  variant: options.FedLawVariant = options.FedLawVariant.FEDLAW,
  server_epochs: int = 100,
  server_lr: float = 0.005,
  proxy_batch_size: int = 128,
  fixed_gamma: float = 1.0,
  proxy_loss_fn=None,
  seed: int = 0,
) -> tff.learning.templates.LearningProcess:
  """A learning process whose server learns FedLAW's gamma and lambda.

  `tff.learning.templates.compose_learning_process` of TFF's broadcast and
  model-delta client work (unchanged FedAvg clients), `CollectAllFactory`
  (every client's delta and weight at the server) and the FedLAW finalizer
  (`tff_aggregators.finalizers.fedlaw`, where the options are documented).

  Args:
    model_fn: No-arg callable returning a `tff.learning.models.VariableModel`.
    client_optimizer_fn: A `tff.learning.optimizers.Optimizer` for clients.
    proxy_data: The server's labelled proxy set (`tf.data.Dataset` of
      unbatched (x, y) examples, or arrays); None only for 'fixed_gamma'.
      Checked at build time by running the model and the proxy loss on one
      batch (`check_proxy_data`).
    max_clients: The largest cohort a round may have (a larger one is
      refused before the round runs).
    client_weighting: Gives the clients' initial weights p (FedAvg's).
    model_distributor: As in `build_weighted_fed_avg` (default: broadcast).
    metrics_aggregator: As in `build_weighted_fed_avg`.
    loop_implementation: As in `build_weighted_fed_avg`.
    client_work: Replaces the clients' model-delta client work (e.g.
      `build_stateful_client_work`, which carries its own optimizer: the
      client optimizer argument is then unused); None: TFF's (FedProx's
      with `proximal_strength`).
    variant: A `tff_aggregators.FedLawVariant` or its string: 'fedlaw',
      'gamma', 'lambda', 'swa' or 'fixed_gamma'.
    server_epochs: Server epochs over the proxy set per round.
    server_lr: The server Adam learning rate.
    proxy_batch_size: Proxy batch size.
    fixed_gamma: gamma of the 'fixed_gamma' variant.
    proxy_loss_fn: `(y, logits) -> mean loss`; default sparse cross-entropy.
    seed: Seeds the proxy shuffling.

  Returns:
    A `tff.learning.templates.LearningProcess`; with a `client_work` built
    with a `client_store`, a driver process with the same methods
    (`tff_aggregators.with_client_store`'s).
  """
  checks.check_model_fn(model_fn, 'build_fedlaw_process')
  max_clients = checks.check_max_clients(max_clients, 'build_fedlaw_process')
  variant = options.parse(options.FedLawVariant, variant, 'variant')
  if variant != options.FedLawVariant.FIXED_GAMMA:
    check_proxy_data(model_fn, proxy_data, proxy_loss_fn)
  initial_model_weights_fn = client_works.initial_model_weights_fn(model_fn)
  model_weights_type = initial_model_weights_fn.type_signature.result
  finalizer = fedlaw.build_fedlaw_finalizer(
    model_fn,
    model_weights_type,
    proxy_data,
    max_clients=max_clients,
    variant=variant,
    server_epochs=server_epochs,
    server_lr=server_lr,
    proxy_batch_size=proxy_batch_size,
    fixed_gamma=fixed_gamma,
    proxy_loss_fn=proxy_loss_fn,
    seed=seed,
  )
  client_work = client_works.model_delta_client_work(
    model_fn,
    client_optimizer_fn,
    client_weighting=client_weighting,
    metrics_aggregator=metrics_aggregator,
    loop_implementation=loop_implementation,
    client_work=client_work,
    max_clients=max_clients,
  )
  aggregator = collect.CollectAllFactory(max_clients).create(
    model_weights_type.trainable, tff.TensorType(np.float32)
  )
  return client_works.compose(
    initial_model_weights_fn,
    client_work,
    aggregator,
    finalizer,
    model_distributor,
    round_check=checks.cohort_limit(max_clients, 'build_fedlaw_process'),
  )


def _proxy_error(problem: str) -> ValueError:
  return ValueError(f'proxy_data: {problem}')


def check_proxy_data(model_fn, proxy_data, proxy_loss_fn=None) -> None:
  """Runs the model and proxy loss on one proxy batch; one error if not.

  Catches at build time what would otherwise fail in round 1 inside the
  TFF runtime: a batched dataset, inputs of another shape, one-hot labels
  against the default sparse loss, labels outside the model's classes.

  Raises:
    ValueError: Naming `proxy_data` and what to change.
  """
  if isinstance(proxy_data, tf.data.Dataset):
    spec = proxy_data.element_spec
    if (
      isinstance(spec, tuple)
      and len(spec) == 2
      and spec[0].shape.rank
      and spec[0].shape[0] is None
    ):
      raise _proxy_error(
        f'the dataset looks batched (inputs {spec[0].shape}); pass '
        'unbatched (x, y) examples, e.g. dataset.unbatch().'
      )
  try:
    x, y = fedlaw.proxy_arrays(proxy_data)
  except (TypeError, ValueError) as e:
    raise type(e)(f'proxy_data: {e}') from None
  x, y = x[:2], y[:2]
  model = model_fn()
  try:
    logits = model.predict_on_batch(x, training=False)
  except Exception as e:  # pylint: disable=broad-except
    raise _proxy_error(
      f'the model cannot take its inputs of shape {x.shape[1:]} per '
      f'example ({type(e).__name__}: {str(e).splitlines()[0][:200]}); '
      "give unbatched examples of the model's input shape."
    ) from None
  num_classes = int(logits.shape[-1])
  if proxy_loss_fn is None:
    if y.ndim > 1 and y.shape[-1] > 1:
      raise _proxy_error(
        f'its labels look one-hot (shape {y.shape[1:]} per example) but '
        'the default proxy loss is sparse cross-entropy: pass integer '
        'labels (np.argmax(y, -1)) or a proxy_loss_fn.'
      )
    labels = fedlaw.proxy_arrays(proxy_data)[1]
    if not np.issubdtype(labels.dtype, np.integer):
      raise _proxy_error(f'labels are {labels.dtype}, not integer classes.')
    if labels.min() < 0 or labels.max() >= num_classes:
      raise _proxy_error(
        f'labels span [{labels.min()}, {labels.max()}] but the model has '
        f'{num_classes} outputs: labels must be in [0, {num_classes}).'
      )
  loss_fn = proxy_loss_fn or (
    lambda y, logits: tf.reduce_mean(
      tf.keras.losses.sparse_categorical_crossentropy(
        y, logits, from_logits=True
      )
    )
  )
  try:
    loss = loss_fn(tf.constant(y), logits)
  except Exception as e:  # pylint: disable=broad-except
    raise _proxy_error(
      f'the proxy loss fails on its labels of shape {y.shape[1:]} per '
      f'example ({type(e).__name__}: {str(e).splitlines()[0][:200]}).'
    ) from None
  if tf.size(loss) != 1:
    raise _proxy_error(
      f'proxy_loss_fn must return a scalar mean loss, got shape {loss.shape}.'
    )
