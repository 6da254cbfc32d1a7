"""`--aggregator` names mapped to builders of `tff.learning` processes.

A method registers one builder here; its method-specific flags live next to
its builder. Every experiment binary accepts every registered name.
"""

from collections.abc import Callable
import dataclasses

from absl import flags
import tensorflow_federated as tff

import tff_aggregators
from tff_aggregators.aggregators import fedglad
from tff_aggregators.finalizers import fedlws


@dataclasses.dataclass(frozen=True)
class ProcessInputs:
  """What every builder receives from the experiment flags.

  Attributes:
    model_fn: No-arg callable returning a `tff.learning.models.VariableModel`.
    client_optimizer_fn: A `tff.learning.optimizers.Optimizer` for clients.
    server_optimizer_fn: A `tff.learning.optimizers.Optimizer` for the server.
    server_optimizer: The server optimizer's name (`sgd`, `sgdm`, `adam`,
      `yogi`), for methods whose rule depends on it.
    proximal_strength: FedProx's mu on the clients; 0 is plain local SGD.
  """

  model_fn: Callable[[], tff.learning.models.VariableModel]
  client_optimizer_fn: tff.learning.optimizers.Optimizer
  server_optimizer_fn: tff.learning.optimizers.Optimizer
  server_optimizer: str
  proximal_strength: float = 0.0


Builder = Callable[[ProcessInputs], tff.learning.templates.LearningProcess]
_BUILDERS: dict[str, Builder] = {}


def register(name: str) -> Callable[[Builder], Builder]:
  """Decorator registering `builder` under `--aggregator=name`."""

  def decorator(builder: Builder) -> Builder:
    if name in _BUILDERS:
      raise ValueError(f'Aggregator {name!r} is registered twice.')
    _BUILDERS[name] = builder
    return builder

  return decorator


def names() -> list[str]:
  return sorted(_BUILDERS)


def build_process(
    name: str, inputs: ProcessInputs
) -> tff.learning.templates.LearningProcess:
  if name not in _BUILDERS:
    raise ValueError(
        f'Unknown aggregator {name!r}; registered: {", ".join(names())}.'
    )
  return _BUILDERS[name](inputs)


@register('fedavg')
def _fedavg(inputs: ProcessInputs) -> tff.learning.templates.LearningProcess:
  """FedAvg (FedAvgM, FedAdam, FedYogi by `--server_optimizer`), or FedProx."""
  if inputs.proximal_strength > 0:
    return tff.learning.algorithms.build_weighted_fed_prox(
        model_fn=inputs.model_fn,
        proximal_strength=inputs.proximal_strength,
        client_optimizer_fn=inputs.client_optimizer_fn,
        server_optimizer_fn=inputs.server_optimizer_fn,
    )
  return tff.learning.algorithms.build_weighted_fed_avg(
      model_fn=inputs.model_fn,
      client_optimizer_fn=inputs.client_optimizer_fn,
      server_optimizer_fn=inputs.server_optimizer_fn,
  )


FEDGLAD_GAMMA = flags.DEFINE_float(
    'fedglad_gamma', 0.02, 'FedGLAD bounding factor gamma (Eq. 15).'
)
FEDGLAD_BETA = flags.DEFINE_float(
    'fedglad_beta', 0.9, 'FedGLAD moving-average decay beta (Eq. 12).'
)
FEDGLAD_GROUPING = flags.DEFINE_enum(
    'fedglad_grouping', 'per_variable', fedglad.GROUPINGS,
    'FedGLAD parameter groups: one per trainable variable, or the whole model.',
)


@register('fedglad')
def _fedglad(inputs: ProcessInputs) -> tff.learning.templates.LearningProcess:
  """FedGLAD on FedAvg/FedAvgM/FedProx (scaled update) or Adam/Yogi."""
  return tff_aggregators.build_fedglad_process(
      inputs.model_fn,
      inputs.client_optimizer_fn,
      inputs.server_optimizer_fn,
      proximal_strength=inputs.proximal_strength,
      gamma=FEDGLAD_GAMMA.value,
      beta=FEDGLAD_BETA.value,
      grouping=FEDGLAD_GROUPING.value,
  )


FEDLWS_BETA = flags.DEFINE_float(
    'fedlws_beta', 0.1,
    'FedLWS beta (Eq. 8): paper 0.1 for CNN/MLP, 0.01 for ResNets.',
)
FEDLWS_TAU_CLIP = flags.DEFINE_list(
    'fedlws_tau_clip', [],
    'FedLWS: clip beta*tau to [low,high] as the official code does with '
    '0.01,0.2; empty (paper) does not clip.',
)
FEDLWS_GROUPING = flags.DEFINE_enum(
    'fedlws_grouping', 'layer', fedlws.GROUPINGS,
    'FedLWS layers: kernel+bias (+normalization), Keras layers, or the model.',
)


@register('fedlws')
def _fedlws(inputs: ProcessInputs) -> tff.learning.templates.LearningProcess:
  """FedLWS after FedAvg (or FedProx, or any --server_optimizer step)."""
  tau_clip = None
  if FEDLWS_TAU_CLIP.value:
    if len(FEDLWS_TAU_CLIP.value) != 2:
      raise ValueError(
          f'--fedlws_tau_clip needs low,high; got {FEDLWS_TAU_CLIP.value}.'
      )
    tau_clip = tuple(float(x) for x in FEDLWS_TAU_CLIP.value)
  return tff_aggregators.build_fedlws_process(
      inputs.model_fn,
      inputs.client_optimizer_fn,
      inputs.server_optimizer_fn,
      beta=FEDLWS_BETA.value,
      tau_clip=tau_clip,
      grouping=FEDLWS_GROUPING.value,
      proximal_strength=inputs.proximal_strength,
  )
