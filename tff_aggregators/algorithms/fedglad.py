"""`build_fedglad_process`: FedAvg, FedAvgM, FedProx or FedAdam with FedGLAD."""

from collections.abc import Callable
from typing import Optional

import numpy as np
import tensorflow_federated as tff

from tff_aggregators import options
from tff_aggregators.aggregators import fedglad
from tff_aggregators.algorithms import checks
from tff_aggregators.algorithms import client_works
from tff_aggregators.finalizers import glad_adaptive


def build_fedglad_process(
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
  metrics_aggregator=None,
  loop_implementation: tff.learning.LoopImplementation = (
    tff.learning.LoopImplementation.DATASET_REDUCE
  ),
  client_work: Optional[tff.learning.templates.ClientWorkProcess] = None,
  proximal_strength: float = 0.0,
  gamma: float = 0.02,
  beta: float = 0.9,
  grouping: options.FedGladGrouping = options.FedGladGrouping.PER_VARIABLE,
  server_update_scaling: options.FedGladServerUpdateScaling = (
    options.FedGladServerUpdateScaling.AUTO
  ),
) -> tff.learning.templates.LearningProcess:
  """A FedAvg-style process whose server step is adapted by FedGLAD.

  Like `tff.learning.algorithms.build_weighted_fed_avg` (or FedProx,
  `client_works.build_weighted_fed_prox`, when `proximal_strength > 0`),
  with the update
  aggregated by `tff_aggregators.FedGladFactory`. How the multipliers reach
  the server optimizer (docs/methods/fedglad.md):

  * SGD or momentum (`tff.learning.optimizers.build_sgdm`): the mean update
    is scaled before the optimizer (FedAvg, FedAvgM, FedProx).
  * Adam or Yogi (`build_adam`, `build_yogi`): only the first-moment input is
    scaled, by `tff_aggregators.finalizers.glad_adaptive` composed with
    `tff.learning.templates.compose_learning_process`.

  Args:
    model_fn: No-arg callable returning a `tff.learning.models.VariableModel`.
    client_optimizer_fn: A `tff.learning.optimizers.Optimizer` for clients.
    server_optimizer_fn: A `tff.learning.optimizers.Optimizer`; default SGD
      with learning rate 1.0 (FedAvg).
    client_weighting: As in `build_weighted_fed_avg`: how client updates
      are weighted (the paper's Eq. 3 is `UNIFORM`; with equal-size clients
      both agree).
    proximal_strength: FedProx's mu; 0 trains clients with plain FedAvg.
    gamma: FedGLAD's bounding factor (Eq. 15).
    beta: Decay of the GSI moving average (Eq. 12).
    grouping: A `tff_aggregators.FedGladGrouping` or its string:
      `'per_variable'` (paper default) or `'universal'`.
    server_update_scaling: A `tff_aggregators.FedGladServerUpdateScaling` or
      its string: `'update'` (scale the update, for SGD-type servers),
      `'first_moment'` (Adam/Yogi only) or `'auto'` (the first for
      `build_sgdm`, the second for `build_adam`/`build_yogi`; other
      optimizers must choose).
    model_distributor: As in `build_weighted_fed_avg` (default: broadcast).
    model_aggregator: The weighted mean factory FedGLAD wraps (its
      `inner_agg_factory`); default
      `tff.aggregators.MeanFactory(no_nan_division=True)`.
    metrics_aggregator: As in `build_weighted_fed_avg`.
    loop_implementation: As in `build_weighted_fed_avg`.
    client_work: Replaces the clients' model-delta client work (e.g.
      `build_stateful_client_work`, which carries its own optimizer: the
      client optimizer argument is then unused); None: TFF's (FedProx's
      with `proximal_strength`).

  Returns:
    A `tff.learning.templates.LearningProcess`; with a `client_work` built
    with a `client_store`, a driver process with the same methods
    (`tff_aggregators.with_client_store`'s).

  Raises:
    ValueError: On an unknown `grouping` or `server_update_scaling`, or a
      scaling that does not fit the server optimizer.
  """
  checks.check_model_fn(model_fn, 'build_fedglad_process')
  if server_optimizer_fn is None:
    server_optimizer_fn = tff.learning.optimizers.build_sgdm(learning_rate=1.0)
  if not isinstance(server_optimizer_fn, tff.learning.optimizers.Optimizer):
    raise TypeError(
      'build_fedglad_process needs a tff.learning.optimizers.Optimizer as '
      f'server_optimizer_fn, got {server_optimizer_fn!r}.'
    )
  grouping = options.parse(options.FedGladGrouping, grouping, 'grouping')
  scaling = options.parse(
    options.FedGladServerUpdateScaling,
    server_update_scaling,
    'server_update_scaling',
  )
  kind = glad_adaptive.optimizer_kind(server_optimizer_fn)
  adaptive = kind in glad_adaptive.ADAPTIVE_KINDS
  if scaling == options.FedGladServerUpdateScaling.AUTO:
    if kind is None:
      raise ValueError(
        'build_fedglad_process cannot tell how FedGLAD should scale the '
        f'update for {server_optimizer_fn!r}: pass '
        "server_update_scaling='update' to scale it before the optimizer."
      )
    scaling = (
      options.FedGladServerUpdateScaling.FIRST_MOMENT
      if adaptive
      else options.FedGladServerUpdateScaling.UPDATE
    )
  if (
    scaling == options.FedGladServerUpdateScaling.FIRST_MOMENT and not adaptive
  ):
    raise ValueError(
      "server_update_scaling='first_moment' needs a server optimizer built "
      'by tff.learning.optimizers.build_adam or build_yogi, got '
      f'{server_optimizer_fn!r}.'
    )
  glad_options = dict(
    gamma=gamma,
    beta=beta,
    grouping=grouping,
    inner_agg_factory=model_aggregator,
  )
  if scaling == options.FedGladServerUpdateScaling.UPDATE:
    aggregator = fedglad.FedGladFactory(**glad_options)
    if client_work is not None:
      return client_works.compose_with_server_optimizer(
        model_fn,
        client_works.check_client_work(client_work, proximal_strength),
        aggregator,
        server_optimizer_fn,
        model_distributor,
      )
    if proximal_strength > 0:
      return client_works.build_weighted_fed_prox(
        model_fn=model_fn,
        proximal_strength=proximal_strength,
        client_optimizer_fn=client_optimizer_fn,
        server_optimizer_fn=server_optimizer_fn,
        client_weighting=client_weighting,
        model_distributor=model_distributor,
        model_aggregator=aggregator,
        metrics_aggregator=metrics_aggregator,
        loop_implementation=loop_implementation,
      )
    return tff.learning.algorithms.build_weighted_fed_avg(
      model_fn=model_fn,
      client_optimizer_fn=client_optimizer_fn,
      server_optimizer_fn=server_optimizer_fn,
      client_weighting=client_weighting,
      model_distributor=model_distributor,
      model_aggregator=aggregator,
      metrics_aggregator=metrics_aggregator,
      loop_implementation=loop_implementation,
    )

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
  aggregator = fedglad.FedGladFactory(
    emit=options.FedGladEmit.UPDATE_AND_MULTIPLIERS, **glad_options
  ).create(model_weights_type.trainable, tff.TensorType(np.float32))
  return client_works.compose(
    initial_model_weights_fn,
    client_work,
    aggregator,
    glad_adaptive.build_glad_adaptive_finalizer(
      server_optimizer_fn, model_weights_type
    ),
    model_distributor,
  )
