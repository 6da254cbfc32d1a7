"""FedProx client work, with the optimizer's hyperparameters as its state.

FedProx (Li et al., 2020, eq. 2) trains client k on
h_k(w) = F_k(w) + (mu / 2) ||w - w_global||^2, whose gradient is
grad F_k(w) + mu (w - w_global).

TFF 0.87's FedProx client work (`tff.learning.algorithms.
build_weighted_fed_prox`, `proximal_client_work.py`) adds
mu (w_global - w) instead: the opposite sign, which pushes clients away from
the global model (checked against NumPy in
`tests/library/proximal_test.py`). Its state is also empty, so a client
learning-rate schedule cannot reach it.

This client work runs TFF's FedAvg local update
(`model_delta_client_work.build_model_delta_update_with_tff_optimizer`: the
loop, non-finite handling, weights and metrics, with the hyperparameters of
the state) with the client optimizer wrapped to add mu (w - w_global) to
every gradient.
"""

from collections.abc import Callable

import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators import tff_compat
from tff_aggregators.client_works import with_hparams


class ProximalOptimizer(tff.learning.optimizers.Optimizer):
  """`optimizer` stepping on gradient + mu (w - w_global) (FedProx eq. 2)."""

  def __init__(self, optimizer, proximal_strength, global_weights):
    self._optimizer = optimizer
    self._proximal_strength = proximal_strength
    self._global_weights = tuple(tf.nest.flatten(global_weights))

  def initialize(self, specs):
    return self._optimizer.initialize(specs)

  def next(self, state, weights, gradients):
    gradients = tuple(
      g + self._proximal_strength * (w - w0)
      for g, w, w0 in zip(gradients, weights, self._global_weights)
    )
    return self._optimizer.next(state, weights, gradients)

  def get_hparams(self, state):
    return self._optimizer.get_hparams(state)

  def set_hparams(self, state, hparams):
    return self._optimizer.set_hparams(state, hparams)


def build_proximal_client_work(
  model_fn: Callable[[], tff.learning.models.VariableModel],
  optimizer: tff.learning.optimizers.Optimizer,
  *,
  proximal_strength: float,
  client_weighting: tff.learning.ClientWeighting = (
    tff.learning.ClientWeighting.NUM_EXAMPLES
  ),
  metrics_aggregator=None,
  loop_implementation: tff.learning.LoopImplementation = (
    tff.learning.LoopImplementation.DATASET_REDUCE
  ),
) -> tff.learning.templates.ClientWorkProcess:
  """FedProx's client work with `get_hparams`/`set_hparams`.

  Args:
    model_fn: No-arg callable returning a `tff.learning.models.VariableModel`.
    optimizer: The client `tff.learning.optimizers.Optimizer`; its
      hyperparameters are the state.
    proximal_strength: mu, >= 0 (0 trains as FedAvg's clients do).
    client_weighting: As in `build_model_delta_client_work`.
    metrics_aggregator: As in `build_model_delta_client_work`.
    loop_implementation: As in `build_model_delta_client_work`.

  Returns:
    A `ClientWorkProcess` taking TFF's usual client datasets.
  """
  proximal_strength = float(proximal_strength)
  if not proximal_strength >= 0:
    raise ValueError(
      f'proximal_strength must be >= 0, got {proximal_strength}.'
    )

  def client_update(hparams, initial_weights, dataset):
    update = tff_compat.build_model_delta_update_with_tff_optimizer(
      model_fn,
      weighting=client_weighting,
      loop_implementation=loop_implementation,
    )
    proximal_optimizer = ProximalOptimizer(
      optimizer, proximal_strength, initial_weights.trainable
    )
    return update(proximal_optimizer, initial_weights, dataset, hparams)

  return with_hparams.build_client_work(
    model_fn, optimizer, client_update, metrics_aggregator=metrics_aggregator
  )
