"""`build_fedsa_process`: FedAvg clients, FedSA's skew-aware aggregation."""

from collections.abc import Callable
from typing import Optional

import numpy as np
import tensorflow_federated as tff

from tff_aggregators import options
from tff_aggregators.aggregators import collect
from tff_aggregators.algorithms import checks
from tff_aggregators.algorithms import client_works
from tff_aggregators.finalizers import fedsa


def build_fedsa_process(
  model_fn: Callable[[], tff.learning.models.VariableModel],
  client_optimizer_fn: tff.learning.optimizers.Optimizer,
  *,
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
  proximal_strength: float = 0.0,
  cv_threshold: float = 0.2,
  sim_threshold: float = 0.2,
  num_categories: int = 4,
  max_clusters: int = 4,
  alpha_normalization: options.FedSaAlphaNormalization = (
    options.FedSaAlphaNormalization.SUM_TO_ONE
  ),
  mic_normalization: options.FedSaMicNormalization = (
    options.FedSaMicNormalization.PER_COORDINATE_MINMAX
  ),
  mic_scale: float = 4.0,
  zero_mean_policy: options.FedSaZeroMeanPolicy = (
    options.FedSaZeroMeanPolicy.INF_IS_HIGH
  ),
  weighted_mean: bool = False,
  late_join_mode: options.FedSaLateJoinMode = (
    options.FedSaLateJoinMode.GREEDY_UPDATE
  ),
  cluster_scope: options.FedSaClusterScope = (
    options.FedSaClusterScope.PER_TENSOR
  ),
) -> tff.learning.templates.LearningProcess:
  """A learning process whose server aggregates with FedSA.

  `tff.learning.templates.compose_learning_process` of TFF's broadcast and
  model-delta client work (FedAvg clients), `CollectAllFactory` and the FedSA
  finalizer (`tff_aggregators.finalizers.fedsa`, which documents the rule).
  FedSA has no server optimizer: the aggregate is the new model. Client
  weights decide who is valid (weight > 0) and, with `weighted_mean=True`,
  weight the means; the paper's means are unweighted (Eq. 2).

  Args:
    model_fn: No-arg callable returning a `tff.learning.models.VariableModel`.
    client_optimizer_fn: A `tff.learning.optimizers.Optimizer` for clients.
    max_clients: The largest cohort a round may have (a larger one is
      refused before the round runs).
    client_weighting: As in `build_weighted_fed_avg`.
    model_distributor: As in `build_weighted_fed_avg` (default: broadcast).
    metrics_aggregator: As in `build_weighted_fed_avg`.
    loop_implementation: As in `build_weighted_fed_avg`.
    client_work: Replaces the clients' model-delta client work (e.g.
      `build_stateful_client_work`, which carries its own optimizer: the
      client optimizer argument is then unused); None: TFF's (FedProx's
      with `proximal_strength`).
    proximal_strength: FedProx's mu on the clients (0: FedAvg clients).
    cv_threshold: cv_t, the dispersion threshold of high-dispersion
      parameters (Eq. 5; 0.2).
    sim_threshold: sim_t, the clustering similarity threshold (0.2).
    num_categories: C, the discretisation of the MIC estimate (paper: 4 for
      CIFAR-10, 5 for CIFAR-100, 8 for Tiny-ImageNet).
    max_clusters: S, the most clusters per tensor (as C).
    alpha_normalization: A `tff_aggregators.FedSaAlphaNormalization` or
      its string: 'sum_to_one' (cluster weights normalised) or 'literal'
      (Eq. 14 as printed).
    mic_normalization: A `tff_aggregators.FedSaMicNormalization` or its
      string: 'per_coordinate_minmax', 'per_tensor_minmax', 'quantile' or
      'raw'.
    mic_scale: The N of Eq. 8 (4).
    zero_mean_policy: A `tff_aggregators.FedSaZeroMeanPolicy` or its
      string: 'inf_is_high' or 'epsilon', for a zero-mean coordinate's
      coefficient of variation.
    weighted_mean: False (Eq. 2's unweighted means) or True (by weights).
    late_join_mode: A `tff_aggregators.FedSaLateJoinMode` or its string:
      'greedy_update' (Algorithm 1) or 'frozen'.
    cluster_scope: A `tff_aggregators.FedSaClusterScope` or its string:
      'per_tensor' (Algorithm 1) or 'global'.

  Returns:
    A `tff.learning.templates.LearningProcess`; with a `client_work` built
    with a `client_store`, a driver process with the same methods
    (`tff_aggregators.with_client_store`'s).
  """
  checks.check_model_fn(model_fn, 'build_fedsa_process')
  max_clients = checks.check_max_clients(max_clients, 'build_fedsa_process')
  sa_options = fedsa.check_options(
    dict(
      cv_threshold=cv_threshold,
      sim_threshold=sim_threshold,
      num_categories=num_categories,
      max_clusters=max_clusters,
      alpha_normalization=alpha_normalization,
      mic_normalization=mic_normalization,
      mic_scale=mic_scale,
      zero_mean_policy=zero_mean_policy,
      weighted_mean=weighted_mean,
      late_join_mode=late_join_mode,
      cluster_scope=cluster_scope,
    )
  )
  initial_model_weights_fn = client_works.initial_model_weights_fn(model_fn)
  model_weights_type = initial_model_weights_fn.type_signature.result
  finalizer = fedsa.build_fedsa_finalizer(model_weights_type, **sa_options)
  client_work = client_works.model_delta_client_work(
    model_fn,
    client_optimizer_fn,
    client_weighting=client_weighting,
    proximal_strength=proximal_strength,
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
    round_check=checks.cohort_limit(max_clients, 'build_fedsa_process'),
  )
