"""`build_fedlws_process`: FedAvg (or FedProx) with FedLWS's layer shrink."""

from collections.abc import Callable, Sequence
from typing import Optional, Union

import numpy as np
import tensorflow_federated as tff

from tff_aggregators import options
from tff_aggregators.aggregators import fedlws_stats
from tff_aggregators.algorithms import checks
from tff_aggregators.algorithms import client_works
from tff_aggregators.finalizers import fedlws


def build_fedlws_process(
  model_fn: Callable[[], tff.learning.models.VariableModel],
  client_optimizer_fn: tff.learning.optimizers.Optimizer,
  server_optimizer_fn: Optional[tff.learning.optimizers.Optimizer] = None,
  *,
  client_weighting: tff.learning.ClientWeighting = (
    tff.learning.ClientWeighting.NUM_EXAMPLES
  ),
  model_distributor: Optional[
    tff.learning.templates.DistributionProcess
  ] = None,
  model_aggregator: Optional[tff.aggregators.WeightedAggregationFactory] = None,
  stats_aggregator: Optional[
    tff.aggregators.UnweightedAggregationFactory
  ] = None,
  metrics_aggregator=None,
  loop_implementation: tff.learning.LoopImplementation = (
    tff.learning.LoopImplementation.DATASET_REDUCE
  ),
  client_work: Optional[tff.learning.templates.ClientWorkProcess] = None,
  proximal_strength: float = 0.0,
  beta: float = 0.1,
  tau_clip: Optional[tuple[float, float]] = None,
  grouping: Union[options.FedLwsGrouping, Sequence[Sequence[int]]] = (
    options.FedLwsGrouping.LAYER
  ),
  tau_mode: options.FedLwsTauMode = options.FedLwsTauMode.EXACT,
) -> tff.learning.templates.LearningProcess:
  """A FedAvg-style process whose new global model is shrunk by FedLWS.

  Composed with `tff.learning.templates.compose_learning_process` from TFF's
  broadcast, TFF's model-delta client work (proximal with
  `proximal_strength > 0`: FedProx + FedLWS), `FedLwsStatsFactory` and the
  FedLWS finalizer.

  Args:
    model_fn: No-arg callable returning a `tff.learning.models.VariableModel`.
    client_optimizer_fn: A `tff.learning.optimizers.Optimizer` for clients.
    server_optimizer_fn: Default SGD with learning rate 1 (the paper's).
    client_weighting: As in `build_weighted_fed_avg`.
    model_distributor: As in `build_weighted_fed_avg` (default: broadcast).
    model_aggregator: The weighted mean factory for the update (the
      `inner_agg_factory` of `FedLwsStatsFactory`; default
      `MeanFactory(no_nan_division=True)`), e.g. with clipping in front.
    stats_aggregator: The unweighted sum factory for FedLWS's statistics
      (the `stats_sum_factory` of `FedLwsStatsFactory`: each client's
      update, count and squared norms; default `SumFactory()`). With a
      secure or DP `model_aggregator`, give a matching one here, or the
      statistics are summed in plain (docs/privacy.md).
    metrics_aggregator: As in `build_weighted_fed_avg`.
    loop_implementation: As in `build_weighted_fed_avg`.
    client_work: Replaces the clients' model-delta client work (e.g.
      `build_stateful_client_work`, which carries its own optimizer: the
      client optimizer argument is then unused); None: TFF's (FedProx's
      with `proximal_strength`).
    proximal_strength: FedProx's mu on the clients; 0 is FedAvg.
    beta: Scale of tau (Eq. 8): 0.1 for CNNs/MLPs, 0.01 for ResNets in the
      paper (safe range 0.001-0.1); 0 is the base method.
    tau_clip: None (paper) or `(0.01, 0.2)` to clip beta * tau as the
      official code does.
    grouping: A `tff_aggregators.FedLwsGrouping` or its string, `'layer'`
      (default: kernel + bias, see `tff_aggregators.layer_groups`),
      `'keras_layer'`, `'model'` (model-wise FedLWS), or explicit lists of
      trainable-variable indices.
    tau_mode: A `tff_aggregators.FedLwsTauMode` or its string: `'exact'`
      (paper Eq. 4, two-phase) or `'rms'` (one pass).

  Returns:
    A `tff.learning.templates.LearningProcess`; with a `client_work` built
    with a `client_store`, a driver process with the same methods
    (`tff_aggregators.with_client_store`'s).
  """
  checks.check_model_fn(model_fn, 'build_fedlws_process')
  tau_mode = options.parse(options.FedLwsTauMode, tau_mode, 'tau_mode')
  if server_optimizer_fn is None:
    server_optimizer_fn = tff.learning.optimizers.build_sgdm(learning_rate=1.0)
  if isinstance(grouping, str):
    groups = fedlws.model_layer_groups(model_fn, grouping)
  else:
    groups = [list(g) for g in grouping]

  initial_model_weights_fn = client_works.initial_model_weights_fn(model_fn)
  model_weights_type = initial_model_weights_fn.type_signature.result
  client_work = client_works.model_delta_client_work(
    model_fn,
    client_optimizer_fn,
    client_weighting=client_weighting,
    proximal_strength=proximal_strength,
    metrics_aggregator=metrics_aggregator,
    loop_implementation=loop_implementation,
    client_work=client_work,
  )
  aggregator = fedlws_stats.FedLwsStatsFactory(
    groups,
    tau_mode=tau_mode,
    inner_agg_factory=model_aggregator,
    stats_sum_factory=stats_aggregator,
  ).create(model_weights_type.trainable, tff.TensorType(np.float32))
  finalizer = fedlws.build_fedlws_finalizer(
    server_optimizer_fn,
    model_weights_type,
    groups=groups,
    beta=beta,
    tau_clip=tau_clip,
  )
  return client_works.compose(
    initial_model_weights_fn,
    client_work,
    aggregator,
    finalizer,
    model_distributor,
  )
