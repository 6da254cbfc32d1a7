"""`build_fedcda_process`: FedAvg clients, FedCDA's cross-round selection."""

from collections.abc import Callable

import numpy as np
import tensorflow_federated as tff

from tff_aggregators.aggregators import collect
from tff_aggregators.algorithms import client_works
from tff_aggregators.client_works import identified
from tff_aggregators.finalizers import fedcda


def build_fedcda_process(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    *,
    num_clients: int,
    max_clients: int,
    memory_size: int = 3,
    num_batches: int = 3,
    smoothness: float = 1.0,
    warmup_rounds: int = 50,
    seed: int = 0,
    max_state_bytes: int = fedcda.DEFAULT_MAX_STATE_BYTES,
    client_weighting: tff.learning.ClientWeighting = (
        tff.learning.ClientWeighting.NUM_EXAMPLES
    ),
    metrics_aggregator=None,
    loop_implementation: tff.learning.LoopImplementation = (
        tff.learning.LoopImplementation.DATASET_REDUCE
    ),
) -> tff.learning.templates.LearningProcess:
  """A learning process with FedCDA's server (history in the TFF state).

  Composed with `tff.learning.templates.compose_learning_process` from TFF's
  broadcast, the identified client work (TFF's FedAvg client update plus the
  client id and loss; `tff_aggregators.client_works.identified`),
  `CollectAllFactory` and the FedCDA finalizer
  (`tff_aggregators.finalizers.fedcda`, which documents the rule).

  The client data of `next` pairs each dataset with the client's integer id
  in [0, num_clients): `identified.with_client_ids(datasets, ids)`.

  Args:
    model_fn: No-arg callable returning a `tff.learning.models.VariableModel`.
    client_optimizer_fn: A `tff.learning.optimizers.Optimizer` for clients.
    num_clients: N, the population (client ids are in [0, N)).
    max_clients: The largest cohort a round may have.
    memory_size: K (3).
    num_batches: B (3).
    smoothness: L (1).
    warmup_rounds: T_w (50): FedAvg rounds first.
    seed: Seeds the batch split.
    max_state_bytes: The largest history (N K D 4 bytes) accepted.
    client_weighting: FedAvg's weights in warm-up (the paper's: examples).
    metrics_aggregator: As in `build_weighted_fed_avg`.
    loop_implementation: As in `build_weighted_fed_avg`.

  Returns:
    A `tff.learning.templates.LearningProcess`.
  """
  initial_model_weights_fn = client_works.initial_model_weights_fn(model_fn)
  model_weights_type = initial_model_weights_fn.type_signature.result
  client_work = identified.build_identified_client_work(
      model_fn,
      client_optimizer_fn,
      client_weighting=client_weighting,
      metrics_aggregator=metrics_aggregator,
      loop_implementation=loop_implementation,
  )
  update_type = client_work.next.type_signature.result.result.member.update
  finalizer = fedcda.build_fedcda_finalizer(
      model_weights_type,
      update_type,
      num_clients=num_clients,
      max_clients=max_clients,
      memory_size=memory_size,
      num_batches=num_batches,
      smoothness=smoothness,
      warmup_rounds=warmup_rounds,
      seed=seed,
      max_state_bytes=max_state_bytes,
  )
  aggregator = collect.CollectAllFactory(max_clients).create(
      update_type, tff.TensorType(np.float32)
  )
  return tff.learning.templates.compose_learning_process(
      initial_model_weights_fn,
      tff.learning.templates.build_broadcast_process(model_weights_type),
      client_work,
      aggregator,
      finalizer,
  )
