"""`build_fedlaw_process`: FedAvg clients, FedLAW's learned server aggregation."""

from collections.abc import Callable
from typing import Optional, Union

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators.aggregators import collect
from tff_aggregators.algorithms import client_works
from tff_aggregators.finalizers import fedlaw


def build_fedlaw_process(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    proxy_data: Optional[
        Union[tf.data.Dataset, tuple[np.ndarray, np.ndarray]]
    ],
    *,
    max_clients: int,
    variant: str = 'fedlaw',
    server_epochs: int = 100,
    server_lr: float = 0.005,
    proxy_batch_size: int = 128,
    fixed_gamma: float = 1.0,
    proxy_loss_fn=None,
    seed: int = 0,
    client_weighting: tff.learning.ClientWeighting = (
        tff.learning.ClientWeighting.NUM_EXAMPLES
    ),
    metrics_aggregator=None,
    loop_implementation: tff.learning.LoopImplementation = (
        tff.learning.LoopImplementation.DATASET_REDUCE
    ),
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
    max_clients: The largest cohort a round may have.
    variant: 'fedlaw', 'gamma', 'lambda', 'swa' or 'fixed_gamma'.
    server_epochs: Server epochs over the proxy set per round.
    server_lr: The server Adam learning rate.
    proxy_batch_size: Proxy batch size.
    fixed_gamma: gamma of the 'fixed_gamma' variant.
    proxy_loss_fn: `(y, logits) -> mean loss`; default sparse cross-entropy.
    seed: Seeds the proxy shuffling.
    client_weighting: Gives the clients' initial weights p (FedAvg's).
    metrics_aggregator: As in `build_weighted_fed_avg`.
    loop_implementation: As in `build_weighted_fed_avg`.

  Returns:
    A `tff.learning.templates.LearningProcess`.
  """

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
  )
  aggregator = collect.CollectAllFactory(max_clients).create(
      model_weights_type.trainable, tff.TensorType(np.float32)
  )
  return client_works.compose(
      initial_model_weights_fn,
      client_work,
      aggregator,
      finalizer,
  )
