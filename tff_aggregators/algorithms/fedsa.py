"""`build_fedsa_process`: FedAvg clients, FedSA's skew-aware server aggregation."""

from collections.abc import Callable

import numpy as np
import tensorflow_federated as tff

from tff_aggregators.aggregators import collect
from tff_aggregators.algorithms import client_works
from tff_aggregators.finalizers import fedsa


def build_fedsa_process(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    *,
    max_clients: int,
    proximal_strength: float = 0.0,
    metrics_aggregator=None,
    loop_implementation: tff.learning.LoopImplementation = (
        tff.learning.LoopImplementation.DATASET_REDUCE
    ),
    **fedsa_options,
) -> tff.learning.templates.LearningProcess:
  """A learning process whose server aggregates with FedSA.

  `tff.learning.templates.compose_learning_process` of TFF's broadcast and
  model-delta client work (FedAvg clients), `CollectAllFactory` and the FedSA
  finalizer (`tff_aggregators.finalizers.fedsa`, which documents the rule
  and options). Client weights only decide who is valid (weight > 0): FedSA's
  means are unweighted (paper Eq. 2).

  Args:
    model_fn: No-arg callable returning a `tff.learning.models.VariableModel`.
    client_optimizer_fn: A `tff.learning.optimizers.Optimizer` for clients.
    max_clients: The largest cohort a round may have.
    proximal_strength: FedProx's mu on the clients (0: FedAvg clients).
    metrics_aggregator: As in `build_weighted_fed_avg`.
    loop_implementation: As in `build_weighted_fed_avg`.
    **fedsa_options: FedSA's options (cv_threshold, sim_threshold,
      num_categories, max_clusters and the spec's ablation flags), see
      `tff_aggregators.finalizers.fedsa.build_fedsa_finalizer`.

  Returns:
    A `tff.learning.templates.LearningProcess`.
  """

  initial_model_weights_fn = client_works.initial_model_weights_fn(model_fn)
  model_weights_type = initial_model_weights_fn.type_signature.result
  finalizer = fedsa.build_fedsa_finalizer(model_weights_type, **fedsa_options)
  client_work = client_works.model_delta_client_work(
      model_fn,
      client_optimizer_fn,
      client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES,
      proximal_strength=proximal_strength,
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
