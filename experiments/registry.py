"""`--aggregator` names mapped to builders of `tff.learning` processes.

A method registers one builder here; its method-specific flags live next to
its builder. Every experiment binary accepts every registered name.
"""

from collections.abc import Callable
import dataclasses
import os
from typing import Optional

from absl import flags
import tensorflow as tf
import tensorflow_federated as tff

import tff_aggregators
from tff_aggregators.aggregators import dropped_clients
from tff_aggregators.algorithms import client_works
from tff_aggregators.algorithms import fedcda_store
from tff_aggregators.client_works import stateful
from tff_aggregators.finalizers import fedcda


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
    clients_per_round: The cohort size (collect-all capacity), if known.
    proxy_data: The server's proxy set of unbatched (x, y) model inputs, for
      methods that learn on one (FedLAW); None when the binary has none.
    seed: The run's seed.
    num_clients: The population (the task's training clients), if known.
    output_dir: The run directory, for methods that keep files there
      (FedCDA's memory-mapped history).
    local_epochs: The passes over its data each client makes per round (its
      data is repeated that often), for methods that need a client's last
      epoch (FedCDA's loss).
    client_optimizer_state: 'reset' (TFF's clients start every round from a
      fresh optimizer state) or 'persistent' (each client's optimizer state
      is kept between its rounds: `build_stateful_client_work` replaces the
      method's client work; needs `num_clients` and `clients_per_round`).
    max_client_state_bytes: The largest table of persistent client states
      in the TFF state.
    client_state_store: Where persistent client states live: 'state' (the
      TFF state, broadcast every round), 'memory' (`InMemoryClientStore`,
      checkpointed) or 'disk' (`MemmapClientStore` in
      `<output_dir>/client_states`); only the cohort's rows enter a round
      with the last two.
  """

  model_fn: Callable[[], tff.learning.models.VariableModel]
  client_optimizer_fn: tff.learning.optimizers.Optimizer
  server_optimizer_fn: tff.learning.optimizers.Optimizer
  server_optimizer: str
  proximal_strength: float = 0.0
  clients_per_round: Optional[int] = None
  proxy_data: Optional[tf.data.Dataset] = None
  seed: int = 0
  num_clients: Optional[int] = None
  output_dir: Optional[str] = None
  local_epochs: Optional[int] = None
  client_optimizer_state: str = 'reset'
  max_client_state_bytes: int = stateful.DEFAULT_MAX_STATE_BYTES
  client_state_store: str = 'state'


CLIENT_OPTIMIZER_STATES = ('reset', 'persistent')
CLIENT_STATE_STORES = ('state', 'memory', 'disk')
CLIENT_STATE_DIR = 'client_states'  # Under the run's output directory.


def _clients(inputs: ProcessInputs, name: str) -> dict[str, object]:
  """A builder's `client_work` and `proximal_strength` for the flags.

  With persistent state, FedProx's term is inside the stateful client work,
  so the builder gets no `proximal_strength` of its own.
  """
  client_work = _client_work(inputs)
  return dict(
    client_work=client_work,
    proximal_strength=(
      0.0 if client_work is not None else inputs.proximal_strength
    ),
  )


def _client_work(
  inputs: ProcessInputs,
  client_weighting: tff.learning.ClientWeighting = (
    tff.learning.ClientWeighting.NUM_EXAMPLES
  ),
  with_loss_and_id: bool = False,
) -> Optional[tff.learning.templates.ClientWorkProcess]:
  """None (the method's own client work), or the persistent-state one.

  `with_loss_and_id`: the update FedCDA needs (each client's last-epoch
  loss and id too).
  """
  if inputs.client_optimizer_state not in CLIENT_OPTIMIZER_STATES:
    raise ValueError(
      f'client_optimizer_state must be one of {CLIENT_OPTIMIZER_STATES}, '
      f'got {inputs.client_optimizer_state!r}.'
    )
  if inputs.client_optimizer_state == 'reset':
    return None
  if not inputs.num_clients or not inputs.clients_per_round:
    raise ValueError(
      'persistent client optimizer state needs the population and the '
      'cohort size.'
    )
  return tff_aggregators.build_stateful_client_work(
    inputs.model_fn,
    inputs.client_optimizer_fn,
    num_clients=inputs.num_clients,
    max_clients=inputs.clients_per_round,
    client_weighting=client_weighting,
    max_state_bytes=inputs.max_client_state_bytes,
    proximal_strength=inputs.proximal_strength,
    client_store=_client_store(inputs),
    with_loss_and_id=with_loss_and_id,
    local_epochs=inputs.local_epochs if with_loss_and_id else None,
  )


def _client_store(
  inputs: ProcessInputs,
) -> Optional[tff_aggregators.ClientStore]:
  """The store of persistent client states (None: the TFF state)."""
  if inputs.client_state_store == 'state':
    return None
  if inputs.client_state_store == 'memory':
    return tff_aggregators.InMemoryClientStore()
  if inputs.client_state_store != 'disk':
    raise ValueError(
      f'client_state_store must be one of {CLIENT_STATE_STORES}, got '
      f'{inputs.client_state_store!r}.'
    )
  if not inputs.output_dir:
    raise ValueError('--client_state_store=disk needs an output directory.')
  return tff_aggregators.MemmapClientStore(
    os.path.join(inputs.output_dir, CLIENT_STATE_DIR)
  )


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


FEDAVG_CLIENT_WEIGHTING = flags.DEFINE_enum(
  'fedavg_client_weighting',
  'num_examples',
  ['num_examples', 'uniform'],
  'FedAvg/FedProx client weights: by examples (FedAvg) or uniform (the '
  "unweighted mean FedSA's estimator builds on).",
)


@register('fedavg')
def _fedavg(inputs: ProcessInputs) -> tff.learning.templates.LearningProcess:
  """FedAvg (FedAvgM, FedAdam, FedYogi by `--server_optimizer`), or FedProx."""
  client_weighting = tff.learning.ClientWeighting[
    FEDAVG_CLIENT_WEIGHTING.value.upper()
  ]
  # TFF's mean, counting the clients it drops (num_dropped_clients).
  aggregator = dropped_clients.DroppedClientsFactory()
  client_work = _client_work(inputs, client_weighting)
  if client_work is not None:
    return client_works.compose_with_server_optimizer(
      inputs.model_fn, client_work, aggregator, inputs.server_optimizer_fn
    )
  if inputs.proximal_strength:  # A negative one is refused there.
    return client_works.build_weighted_fed_prox(
      model_fn=inputs.model_fn,
      proximal_strength=inputs.proximal_strength,
      client_optimizer_fn=inputs.client_optimizer_fn,
      server_optimizer_fn=inputs.server_optimizer_fn,
      client_weighting=client_weighting,
      model_aggregator=aggregator,
    )
  return tff.learning.algorithms.build_weighted_fed_avg(
    model_fn=inputs.model_fn,
    client_optimizer_fn=inputs.client_optimizer_fn,
    server_optimizer_fn=inputs.server_optimizer_fn,
    client_weighting=client_weighting,
    model_aggregator=aggregator,
  )


FEDGLAD_GAMMA = flags.DEFINE_float(
  'fedglad_gamma', 0.02, 'FedGLAD bounding factor gamma (Eq. 15).'
)
FEDGLAD_BETA = flags.DEFINE_float(
  'fedglad_beta', 0.9, 'FedGLAD moving-average decay beta (Eq. 12).'
)
FEDGLAD_GROUPING = flags.DEFINE_enum(
  'fedglad_grouping',
  'per_variable',
  [m.value for m in tff_aggregators.FedGladGrouping],
  'FedGLAD parameter groups: one per trainable variable, or the whole model.',
)


@register('fedglad')
def _fedglad(inputs: ProcessInputs) -> tff.learning.templates.LearningProcess:
  """FedGLAD on FedAvg/FedAvgM/FedProx (scaled update) or Adam/Yogi."""
  return tff_aggregators.build_fedglad_process(
    inputs.model_fn,
    inputs.client_optimizer_fn,
    inputs.server_optimizer_fn,
    model_aggregator=dropped_clients.DroppedClientsFactory(
      tff.aggregators.MeanFactory(no_nan_division=True)
    ),
    gamma=FEDGLAD_GAMMA.value,
    beta=FEDGLAD_BETA.value,
    grouping=FEDGLAD_GROUPING.value,
    **_clients(inputs, 'fedglad'),
  )


FEDLWS_BETA = flags.DEFINE_float(
  'fedlws_beta',
  0.1,
  'FedLWS beta (Eq. 8): paper 0.1 for CNN/MLP, 0.01 for ResNets.',
)
FEDLWS_TAU_CLIP = flags.DEFINE_list(
  'fedlws_tau_clip',
  [],
  'FedLWS: clip beta*tau to [low,high] as the official code does with '
  '0.01,0.2; empty (paper) does not clip.',
)
FEDLWS_TAU_MODE = flags.DEFINE_enum(
  'fedlws_tau_mode',
  'exact',
  [m.value for m in tff_aggregators.FedLwsTauMode],
  'FedLWS tau: exact (paper Eq. 4, two aggregation phases; one worker '
  'only) or rms (one pass, an upper bound; works on several workers).',
)
FEDLWS_VARIANT = flags.DEFINE_enum(
  'fedlws_variant',
  'layer',
  [m.value for m in tff_aggregators.FedLwsGrouping],
  'FedLWS: layer-wise (kernel+bias, +normalization), per Keras layer, or '
  'model-wise (one factor for the whole model).',
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
    grouping=FEDLWS_VARIANT.value,
    tau_mode=FEDLWS_TAU_MODE.value,
    **_clients(inputs, 'fedlws'),
  )


FEDLAW_VARIANT = flags.DEFINE_enum(
  'fedlaw_variant',
  'fedlaw',
  [m.value for m in tff_aggregators.FedLawVariant],
  'FedLAW: learn gamma and lambda, gamma only (adaptive GWS), lambda only '
  '(attentive LAW), the SWA two-stage variant, or a fixed gamma (no proxy).',
)
FEDLAW_SERVER_EPOCHS = flags.DEFINE_integer(
  'fedlaw_server_epochs', 100, 'FedLAW server epochs over the proxy set.'
)
FEDLAW_SERVER_LR = flags.DEFINE_float(
  'fedlaw_server_lr',
  0.005,
  'FedLAW server Adam learning rate (official code: 0.01 for CIFAR-10, '
  '0.005 otherwise).',
)
FEDLAW_PROXY_BATCH_SIZE = flags.DEFINE_integer(
  'fedlaw_proxy_batch_size', 128, 'FedLAW proxy batch size.'
)
FEDLAW_FIXED_GAMMA = flags.DEFINE_float(
  'fedlaw_fixed_gamma', 0.95, 'gamma of --fedlaw_variant=fixed_gamma.'
)


@register('fedlaw')
def _fedlaw(inputs: ProcessInputs) -> tff.learning.templates.LearningProcess:
  """FedLAW: FedAvg clients, gamma and lambda learned on the proxy set."""
  variant = FEDLAW_VARIANT.value
  if inputs.proxy_data is None and variant != 'fixed_gamma':
    raise ValueError(
      'FedLAW learns on a server proxy set and this run has none: use '
      '--proxy_size > 0 (image binaries), or --fedlaw_variant=fixed_gamma.'
    )
  if not inputs.clients_per_round:
    raise ValueError('FedLAW needs the cohort size (clients_per_round).')
  if inputs.proximal_strength:
    raise ValueError(
      'FedLAW runs FedAvg clients; --proximal_strength is not '
      'supported with it.'
    )
  if inputs.server_optimizer != 'sgd':
    raise ValueError(
      'FedLAW replaces the server optimizer by its learned aggregation: use '
      '--server_optimizer=sgd (its learning rate is not used).'
    )
  return tff_aggregators.build_fedlaw_process(
    inputs.model_fn,
    inputs.client_optimizer_fn,
    proxy_data=inputs.proxy_data,
    max_clients=inputs.clients_per_round,
    variant=variant,
    server_epochs=FEDLAW_SERVER_EPOCHS.value,
    server_lr=FEDLAW_SERVER_LR.value,
    proxy_batch_size=FEDLAW_PROXY_BATCH_SIZE.value,
    fixed_gamma=FEDLAW_FIXED_GAMMA.value,
    seed=inputs.seed,
    client_work=_client_work(inputs),
  )


FEDSA_CV_T = flags.DEFINE_float(
  'fedsa_cv_t', 0.2, 'FedSA cv_t (normalised CV threshold).'
)
FEDSA_SIM_T = flags.DEFINE_float(
  'fedsa_sim_t', 0.2, 'FedSA sim_t (late-join similarity threshold).'
)
FEDSA_CLASSES = flags.DEFINE_integer(
  'fedsa_classes',
  4,
  'FedSA Micro-Class categories C (paper: 4 CIFAR-10, 5 CIFAR-100).',
)
FEDSA_CLUSTERS = flags.DEFINE_integer(
  'fedsa_clusters', 4, 'FedSA Macro-Classes at most, S (paper: as C).'
)
FEDSA_ALPHA_NORMALIZATION = flags.DEFINE_enum(
  'fedsa_alpha_normalization',
  'sum_to_one',
  [m.value for m in tff_aggregators.FedSaAlphaNormalization],
  'FedSA cluster weights: normalised to sum 1 (our default) or literal Eq. 14.',
)
FEDSA_MIC_NORMALIZATION = flags.DEFINE_enum(
  'fedsa_mic_normalization',
  'per_coordinate_minmax',
  [m.value for m in tff_aggregators.FedSaMicNormalization],
  'FedSA Micro-Class binning (Eq. 8; the paper leaves its scale N undefined).',
)
FEDSA_MIC_SCALE = flags.DEFINE_float(
  'fedsa_mic_scale', 4.0, 'N of Eq. 8 for --fedsa_mic_normalization=raw.'
)
FEDSA_ZERO_MEAN_POLICY = flags.DEFINE_enum(
  'fedsa_zero_mean_policy',
  'inf_is_high',
  [m.value for m in tff_aggregators.FedSaZeroMeanPolicy],
  'FedSA cv (Eq. 4) at a zero mean, which the paper leaves undefined.',
)
FEDSA_WEIGHTED_MEAN = flags.DEFINE_bool(
  'fedsa_weighted_mean',
  False,
  'FedSA means weighted by examples (paper: unweighted).',
)
FEDSA_LATE_JOIN_MODE = flags.DEFINE_enum(
  'fedsa_late_join_mode',
  'greedy_update',
  [m.value for m in tff_aggregators.FedSaLateJoinMode],
  'FedSA joins after S clusters exist (Step 3 of the paper).',
)
FEDSA_CLUSTER_SCOPE = flags.DEFINE_enum(
  'fedsa_cluster_scope',
  'per_tensor',
  [m.value for m in tff_aggregators.FedSaClusterScope],
  'FedSA clusters per tensor (Algorithm 1) or once over all tensors.',
)


@register('fedsa')
def _fedsa(inputs: ProcessInputs) -> tff.learning.templates.LearningProcess:
  """FedSA: FedAvg (or FedProx) clients, skew-aware aggregation of models."""
  if not inputs.clients_per_round:
    raise ValueError('FedSA needs the cohort size (clients_per_round).')
  if inputs.server_optimizer != 'sgd':
    raise ValueError(
      'FedSA replaces the server optimizer by its aggregation of the client '
      'models: use --server_optimizer=sgd (its learning rate is not used).'
    )
  return tff_aggregators.build_fedsa_process(
    inputs.model_fn,
    inputs.client_optimizer_fn,
    max_clients=inputs.clients_per_round,
    cv_threshold=FEDSA_CV_T.value,
    sim_threshold=FEDSA_SIM_T.value,
    num_categories=FEDSA_CLASSES.value,
    max_clusters=FEDSA_CLUSTERS.value,
    alpha_normalization=FEDSA_ALPHA_NORMALIZATION.value,
    mic_normalization=FEDSA_MIC_NORMALIZATION.value,
    mic_scale=FEDSA_MIC_SCALE.value,
    zero_mean_policy=FEDSA_ZERO_MEAN_POLICY.value,
    weighted_mean=FEDSA_WEIGHTED_MEAN.value,
    late_join_mode=FEDSA_LATE_JOIN_MODE.value,
    cluster_scope=FEDSA_CLUSTER_SCOPE.value,
    **_clients(inputs, 'fedsa'),
  )


FEDCDA_K = flags.DEFINE_integer(
  'fedcda_k', 3, 'FedCDA memory: cached models per client (K).'
)
FEDCDA_BATCHES = flags.DEFINE_integer(
  'fedcda_batches', 3, 'FedCDA selection batches per round (B).'
)
FEDCDA_L = flags.DEFINE_float('fedcda_l', 1.0, 'FedCDA smoothness L.')
FEDCDA_WARMUP = flags.DEFINE_integer(
  'fedcda_warmup', 50, 'FedCDA warm-up rounds of FedAvg (T_w).'
)
FEDCDA_MAX_STATE_MB = flags.DEFINE_integer(
  'fedcda_max_state_mb',
  512,
  'Refuse a FedCDA history (clients x K x parameters x 4 bytes) above this.',
)
FEDCDA_HISTORY = flags.DEFINE_enum(
  'fedcda_history',
  'state',
  ['state', 'memory', 'disk'],
  'Where FedCDA keeps the client history: the TFF state (small '
  'populations and models), a NumPy array in the driver (checkpointed; '
  'fits in RAM) or a memory-mapped file (--fedcda_history_dir).',
)
FEDCDA_HISTORY_DIR = flags.DEFINE_string(
  'fedcda_history_dir',
  None,
  'Directory of the memory-mapped FedCDA history (--fedcda_history=disk); '
  'default <output_dir>/fedcda_history.',
)
FEDCDA_SELECTION = flags.DEFINE_enum(
  'fedcda_selection',
  'approx',
  [m.value for m in tff_aggregators.FedCdaSelection],
  'FedCDA selection: approx (eq. 8); newest or random are diagnostics.',
)
FEDCDA_DIVERGENCE = flags.DEFINE_enum(
  'fedcda_divergence',
  'squared_l2',
  [m.value for m in tff_aggregators.FedCdaDivergence],
  "FedCDA objective: squared_l2 (eq. 8) or the unofficial script's "
  'tensorwise_norm (diagnostic).',
)
FEDCDA_LATER_BATCHES = flags.DEFINE_enum(
  'fedcda_later_batches',
  'excluded',
  [m.value for m in tff_aggregators.FedCdaLaterBatches],
  "Later batches in a batch's objective: excluded (eq. 8) or the "
  "script's included_at_previous_selection (diagnostic).",
)
FEDCDA_WARMUP_AGGREGATION = flags.DEFINE_enum(
  'fedcda_warmup_aggregation',
  'fedavg',
  [m.value for m in tff_aggregators.FedCdaWarmupAggregation],
  "Warm-up rounds: fedavg (the paper) or the script's all_seen_newest "
  '(diagnostic).',
)
FEDCDA_BATCH_PARAM = flags.DEFINE_enum(
  'fedcda_batch_param',
  'num_batches',
  [m.value for m in tff_aggregators.FedCdaBatchParam],
  '--fedcda_batches is the number of batches (the paper) or, as in the '
  'script, clients per batch (diagnostic).',
)


def _fedcda_history_store(inputs: ProcessInputs):
  if FEDCDA_HISTORY.value == 'state':
    return None
  if FEDCDA_HISTORY.value == 'memory':
    return fedcda_store.InMemoryHistoryStore()
  directory = FEDCDA_HISTORY_DIR.value or (
    inputs.output_dir and os.path.join(inputs.output_dir, 'fedcda_history')
  )
  if not directory:
    raise ValueError('--fedcda_history=disk needs --fedcda_history_dir.')
  return fedcda_store.MemmapHistoryStore(directory)


@register('fedcda')
def _fedcda(inputs: ProcessInputs) -> tff.learning.templates.LearningProcess:
  """FedCDA: per-client model history on the server, cross-round selection."""
  if not inputs.clients_per_round or not inputs.num_clients:
    raise ValueError('FedCDA needs the cohort size and the population.')
  if inputs.server_optimizer != 'sgd' or inputs.proximal_strength:
    raise ValueError(
      'FedCDA replaces the server optimizer by its selection over FedAvg '
      'client models: use --server_optimizer=sgd (its learning rate is not '
      'used) and no --proximal_strength.'
    )
  try:
    return tff_aggregators.build_fedcda_process(
      inputs.model_fn,
      inputs.client_optimizer_fn,
      num_clients=inputs.num_clients,
      max_clients=inputs.clients_per_round,
      memory_size=FEDCDA_K.value,
      num_batches=FEDCDA_BATCHES.value,
      smoothness=FEDCDA_L.value,
      warmup_rounds=FEDCDA_WARMUP.value,
      seed=inputs.seed,
      selection=FEDCDA_SELECTION.value,
      divergence=FEDCDA_DIVERGENCE.value,
      later_batches=FEDCDA_LATER_BATCHES.value,
      warmup_aggregation=FEDCDA_WARMUP_AGGREGATION.value,
      batch_param=FEDCDA_BATCH_PARAM.value,
      history_store=_fedcda_history_store(inputs),
      local_epochs=inputs.local_epochs,
      max_state_bytes=FEDCDA_MAX_STATE_MB.value * 2**20,
      client_work=_client_work(inputs, with_loss_and_id=True),
    )
  except fedcda.HistoryTooLargeError as e:
    raise ValueError(
      f'{e} In the experiment binaries: --fedcda_history='
      'memory or --fedcda_history=disk.'
    ) from e
