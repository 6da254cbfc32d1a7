"""Pieces every `build_<method>_process` composes: initial weights, clients.

The methods change only the server side; their clients run TFF's own
model-delta client work (FedAvg), or its proximal version (FedProx).
"""

from collections.abc import Callable

import tensorflow_federated as tff

from tensorflow_federated.python.learning.templates import proximal_client_work


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
) -> tff.learning.templates.ClientWorkProcess:
  """TFF's model-delta client work; FedProx's when `proximal_strength > 0`.

  TFF 0.87 exposes the proximal client work only through
  `build_weighted_fed_prox`; this uses its module directly.
  """
  if proximal_strength < 0:
    raise ValueError(
        f'proximal_strength must be >= 0, got {proximal_strength}.'
    )
  if proximal_strength > 0:
    return proximal_client_work.build_model_delta_client_work(
        model_fn=model_fn,
        optimizer=optimizer,
        client_weighting=client_weighting,
        delta_l2_regularizer=proximal_strength,
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


def compose(
    initial_model_weights: tff.Computation,
    client_work: tff.learning.templates.ClientWorkProcess,
    aggregator: tff.templates.AggregationProcess,
    finalizer: tff.learning.templates.FinalizerProcess,
) -> tff.learning.templates.LearningProcess:
  """`compose_learning_process` with TFF's broadcast of the model weights."""
  return tff.learning.templates.compose_learning_process(
      initial_model_weights,
      tff.learning.templates.build_broadcast_process(
          initial_model_weights.type_signature.result
      ),
      client_work,
      aggregator,
      finalizer,
  )
