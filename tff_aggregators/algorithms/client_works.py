"""Pieces every `build_<method>_process` composes: initial weights, clients.

The methods change only the server side; their clients run TFF's own
model-delta client work (FedAvg), or FedProx's with the optimizer's
hyperparameters in its state (`client_works.proximal`), so a client
learning-rate schedule reaches both. A builder's `client_work` argument
replaces that client work by any other whose result is TFF's (a model delta
and a weight), e.g. `build_stateful_client_work`'s per-client optimizer
state.
"""

from collections.abc import Callable
from typing import Any, Optional

import numpy as np
import tensorflow_federated as tff

from tff_aggregators.algorithms import checks
from tff_aggregators.algorithms import stored_client_state
from tff_aggregators.client_works import proximal
from tff_aggregators.client_works import stateful


def initial_model_weights_fn(
  model_fn: Callable[[], tff.learning.models.VariableModel],
) -> tff.Computation:
  """A `tff.tensorflow.computation` returning the model's initial weights."""

  @tff.tensorflow.computation
  def initial_weights():
    return tff.learning.models.ModelWeights.from_model(model_fn())

  return initial_weights


def model_delta_client_work(
  model_fn: Callable[[], tff.learning.models.VariableModel],
  optimizer: tff.learning.optimizers.Optimizer,
  *,
  client_weighting: tff.learning.ClientWeighting,
  proximal_strength: float = 0.0,
  metrics_aggregator=None,
  loop_implementation: tff.learning.LoopImplementation = (
    tff.learning.LoopImplementation.DATASET_REDUCE
  ),
  client_work: Optional[tff.learning.templates.ClientWorkProcess] = None,
  max_clients: Optional[int] = None,
) -> tff.learning.templates.ClientWorkProcess:
  """TFF's model-delta client work; FedProx's when `proximal_strength > 0`.

  Both have the client optimizer's hyperparameters as their state. A given
  `client_work` is returned instead (`check_client_work`: a
  `ClientWorkProcess`, no `proximal_strength`, whose term is inside
  FedProx's client work, and the builder's `max_clients` if it has one).
  """
  if client_work is not None:
    return check_client_work(
      client_work, proximal_strength, max_clients=max_clients
    )
  if proximal_strength:  # A negative one is refused there.
    return proximal.build_proximal_client_work(
      model_fn,
      optimizer,
      proximal_strength=proximal_strength,
      client_weighting=client_weighting,
      metrics_aggregator=metrics_aggregator,
      loop_implementation=loop_implementation,
    )
  return tff.learning.templates.build_model_delta_client_work(
    model_fn=model_fn,
    optimizer=optimizer,
    client_weighting=client_weighting,
    metrics_aggregator=metrics_aggregator,
    loop_implementation=loop_implementation,
  )


def check_client_work(
  client_work: tff.learning.templates.ClientWorkProcess,
  proximal_strength: float = 0.0,
  *,
  num_clients: Optional[int] = None,
  max_clients: Optional[int] = None,
) -> tff.learning.templates.ClientWorkProcess:
  """`client_work`, if it can replace a builder's own client work.

  Args:
    client_work: The client work given to a builder.
    proximal_strength: The builder's; positive is refused (FedProx's term
      lives in its own client work).
    num_clients: The builder's population, if it has one: a stateful client
      work must have been built for the same.
    max_clients: The builder's largest cohort, if it has one: a stateful
      client work's must be the same (its table and the builder's
      collection hold that many clients).
  """
  if not isinstance(client_work, tff.learning.templates.ClientWorkProcess):
    raise TypeError(
      'client_work must be a tff.learning.templates.ClientWorkProcess, got '
      f'{client_work!r}.'
    )
  if proximal_strength:
    raise ValueError(
      f"proximal_strength={proximal_strength} needs FedProx's client work; "
      'it does not combine with a given client_work.'
    )
  if isinstance(client_work, stateful.StatefulClientWork):
    for name, value in (
      ('num_clients', num_clients),
      ('max_clients', max_clients),
    ):
      built_for = getattr(client_work, name)
      if value is not None and value != built_for:
        raise ValueError(
          f"{name}={value} differs from the client work's ({built_for}, "
          'given to build_stateful_client_work): pass the same value to '
          'both.'
        )
  return client_work


def compose_with_server_optimizer(
  model_fn: Callable[[], tff.learning.models.VariableModel],
  client_work: tff.learning.templates.ClientWorkProcess,
  model_aggregator: tff.aggregators.WeightedAggregationFactory,
  server_optimizer_fn: tff.learning.optimizers.Optimizer,
  model_distributor: Optional[
    tff.learning.templates.DistributionProcess
  ] = None,
) -> tff.learning.templates.LearningProcess:
  """`build_weighted_fed_avg`'s process around another client work.

  Broadcast, `client_work`, `model_aggregator`'s weighted aggregation of the
  model delta and `server_optimizer_fn` applied to it
  (`build_apply_optimizer_finalizer`), as TFF's `build_weighted_fed_avg`
  composes them.
  """
  initial_weights_fn = initial_model_weights_fn(model_fn)
  model_weights_type = initial_weights_fn.type_signature.result
  return compose(
    initial_weights_fn,
    check_client_work(client_work),
    model_aggregator.create(
      model_weights_type.trainable, tff.TensorType(np.float32)
    ),
    tff.learning.templates.build_apply_optimizer_finalizer(
      server_optimizer_fn, model_weights_type
    ),
    model_distributor,
  )


def compose(
  initial_model_weights: tff.Computation,
  client_work: tff.learning.templates.ClientWorkProcess,
  aggregator: tff.templates.AggregationProcess,
  finalizer: tff.learning.templates.FinalizerProcess,
  model_distributor: Optional[
    tff.learning.templates.DistributionProcess
  ] = None,
  round_check: Optional[Callable[[Any], None]] = None,
) -> tff.learning.templates.LearningProcess:
  """`compose_learning_process`, with TFF's broadcast unless one is given.

  With `build_stateful_client_work`'s client work, the process is wrapped by
  `stored_client_state.with_client_store`: each cohort is checked in Python
  (ids, size, range), and with a `client_store` the client states live in
  the store, outside the TFF state. Otherwise `round_check`, if given, checks
  each round's client data in Python first (a builder's cohort limit; the
  stateful check covers it, as the builders refuse a client work built for
  another `max_clients`).
  """
  if model_distributor is None:
    model_distributor = tff.learning.templates.build_broadcast_process(
      initial_model_weights.type_signature.result
    )
  elif not isinstance(
    model_distributor, tff.learning.templates.DistributionProcess
  ):
    raise TypeError(
      'model_distributor must be a tff.learning.templates.'
      f'DistributionProcess, got {model_distributor!r}.'
    )
  process = tff.learning.templates.compose_learning_process(
    initial_model_weights,
    model_distributor,
    client_work,
    aggregator,
    finalizer,
  )
  if isinstance(client_work, stateful.StatefulClientWork):
    return stored_client_state.with_client_store(process, client_work)
  if round_check is None:
    return process
  return checks.with_round_check(process, round_check)


def build_weighted_fed_prox(
  model_fn: Callable[[], tff.learning.models.VariableModel],
  proximal_strength: float,
  client_optimizer_fn: tff.learning.optimizers.Optimizer,
  server_optimizer_fn: Optional[tff.learning.optimizers.Optimizer] = None,
  client_weighting: tff.learning.ClientWeighting = (
    tff.learning.ClientWeighting.NUM_EXAMPLES
  ),
  model_distributor: Optional[
    tff.learning.templates.DistributionProcess
  ] = None,
  model_aggregator: Optional[tff.aggregators.WeightedAggregationFactory] = (
    None
  ),
  metrics_aggregator=None,
  loop_implementation: tff.learning.LoopImplementation = (
    tff.learning.LoopImplementation.DATASET_REDUCE
  ),
) -> tff.learning.templates.LearningProcess:
  """`tff.learning.algorithms.build_weighted_fed_prox` with client hparams.

  The same process (broadcast, FedProx clients, a weighted mean of the
  updates, the server optimizer applied to it) and the same arguments in the
  same order, but the client optimizer's hyperparameters are in the state, so
  `get_hparams`/`set_hparams` (and a client learning-rate schedule) reach the
  clients (TFF 0.87's has none), and the proximal term has the sign of the
  FedProx paper's (TFF 0.87's is reversed; docs/experiments.md). The
  optimizers must be `tff.learning.optimizers`.
  """
  checks.check_model_fn(model_fn, 'build_weighted_fed_prox')
  if server_optimizer_fn is None:
    server_optimizer_fn = tff.learning.optimizers.build_sgdm(learning_rate=1.0)
  if model_aggregator is None:
    model_aggregator = tff.aggregators.MeanFactory()
  if not isinstance(
    model_aggregator, tff.aggregators.WeightedAggregationFactory
  ):
    raise TypeError(
      'model_aggregator must be a tff.aggregators.'
      'WeightedAggregationFactory; wrap an unweighted one (e.g. '
      'DifferentiallyPrivateFactory) in '
      'tff.aggregators.as_weighted_aggregator (weights ignored), got '
      f'{model_aggregator!r}.'
    )
  initial_weights_fn = initial_model_weights_fn(model_fn)
  model_weights_type = initial_weights_fn.type_signature.result
  return compose(
    initial_weights_fn,
    model_delta_client_work(
      model_fn,
      client_optimizer_fn,
      client_weighting=client_weighting,
      proximal_strength=proximal_strength,
      metrics_aggregator=metrics_aggregator,
      loop_implementation=loop_implementation,
    ),
    model_aggregator.create(
      model_weights_type.trainable, tff.TensorType(np.float32)
    ),
    tff.learning.templates.build_apply_optimizer_finalizer(
      server_optimizer_fn, model_weights_type
    ),
    model_distributor,
  )
