"""The methods' options with a fixed set of values, and their one check.

Each option is an `enum.StrEnum`, as TFF's `tff.learning.ClientWeighting` is
an enum: its members compare equal to (and hash like) their strings, so a
builder takes either, `variant='swa'` or
`variant=tff_aggregators.FedLawVariant.SWA`, and code comparing the option
with a string keeps working. `parse` is the one validation: it returns the
member or raises a one-line `ValueError` naming the option, the value given
and the values allowed. The pages in docs/methods/ document what each value
does.
"""

import enum
from typing import Any, TypeVar

_E = TypeVar('_E', bound=enum.StrEnum)


def parse(enum_cls: type[_E], value: Any, name: str) -> _E:
  """The member of `enum_cls` that `value` (a member or its string) names.

  Args:
    enum_cls: One of this module's enums.
    value: A member of `enum_cls` or a string equal to one.
    name: The option's name (an argument's name) for the error.

  Returns:
    The member of `enum_cls`.

  Raises:
    ValueError: If `value` names no member: one line with `name`, the value
      given and the values allowed.
  """
  try:
    return enum_cls(value)
  except (TypeError, ValueError):
    allowed = ', '.join(repr(m.value) for m in enum_cls)
    raise ValueError(
      f'{name} must be one of {allowed} (tff_aggregators.'
      f'{enum_cls.__name__}), got {value!r}.'
    ) from None


class FedLawVariant(enum.StrEnum):
  """FedLAW's `variant`: what the server learns on its proxy set.

  Attributes:
    FEDLAW: Both the shrink factor gamma and the client weights lambda.
    GAMMA: gamma only (adaptive global weight shrinking, lambda = p).
    LAMBDA: lambda only (attentive learnable aggregation, gamma = 1).
    SWA: The authors' code's order: lambda with stochastic weight
      averaging for half the server epochs, then gamma.
    FIXED_GAMMA: A fixed gamma, no proxy data.
  """

  FEDLAW = 'fedlaw'
  GAMMA = 'gamma'
  LAMBDA = 'lambda'
  SWA = 'swa'
  FIXED_GAMMA = 'fixed_gamma'


class FedLwsGrouping(enum.StrEnum):
  """FedLWS's `grouping`: which trainable variables share a shrink factor.

  Attributes:
    LAYER: The authors' rule: a layer's kernel and bias (and a bias-free
      convolution with the normalization after it).
    KERAS_LAYER: One group per Keras layer (the variable name's prefix).
    MODEL: One group for the whole model (model-wise FedLWS).
  """

  LAYER = 'layer'
  KERAS_LAYER = 'keras_layer'
  MODEL = 'model'


class FedLwsTauMode(enum.StrEnum):
  """FedLWS's `tau_mode`: how the client dispersion tau is computed.

  Attributes:
    EXACT: The paper's Eq. 4, in two aggregation phases.
    RMS: One pass of sums (an upper bound of the exact tau).
  """

  EXACT = 'exact'
  RMS = 'rms'


class FedGladGrouping(enum.StrEnum):
  """FedGLAD's `grouping`: the parameter groups of the GSI.

  Attributes:
    PER_VARIABLE: One group per trainable variable (the paper's default).
    UNIVERSAL: One group for the whole model.
  """

  PER_VARIABLE = 'per_variable'
  UNIVERSAL = 'universal'


class FedGladEmit(enum.StrEnum):
  """`FedGladFactory`'s `emit`: what its aggregation process returns.

  Attributes:
    SCALED_UPDATE: The scaled mean update (for SGD and momentum servers).
    UPDATE_AND_MULTIPLIERS: The mean update and the multipliers, for the
      Adam/Yogi finalizer (`build_glad_adaptive_finalizer`).
  """

  SCALED_UPDATE = 'scaled_update'
  UPDATE_AND_MULTIPLIERS = 'update_and_multipliers'


class FedGladServerUpdateScaling(enum.StrEnum):
  """`build_fedglad_process`'s `server_update_scaling`.

  Attributes:
    AUTO: `UPDATE` for `build_sgdm`, `FIRST_MOMENT` for `build_adam` and
      `build_yogi`; other optimizers must choose.
    UPDATE: Scale the mean update before the server optimizer.
    FIRST_MOMENT: Scale only the first moment of Adam or Yogi.
  """

  AUTO = 'auto'
  UPDATE = 'update'
  FIRST_MOMENT = 'first_moment'


class FedSaAlphaNormalization(enum.StrEnum):
  """FedSA's `alpha_normalization`: the clusters' weights (Eq. 14).

  Attributes:
    SUM_TO_ONE: Normalised to sum 1 over the clusters.
    LITERAL: Eq. 14 as printed.
  """

  SUM_TO_ONE = 'sum_to_one'
  LITERAL = 'literal'


class FedSaMicNormalization(enum.StrEnum):
  """FedSA's `mic_normalization`: the Micro-Class binning (Eq. 8).

  Attributes:
    PER_COORDINATE_MINMAX: Squared deviations min-max normalised per
      coordinate.
    PER_TENSOR_MINMAX: Min-max normalised over the tensor.
    QUANTILE: Equal-mass bins (each client's rank at a coordinate).
    RAW: Unnormalised, scaled by `mic_scale` (the N of Eq. 8).
  """

  PER_COORDINATE_MINMAX = 'per_coordinate_minmax'
  PER_TENSOR_MINMAX = 'per_tensor_minmax'
  QUANTILE = 'quantile'
  RAW = 'raw'


class FedSaZeroMeanPolicy(enum.StrEnum):
  """FedSA's `zero_mean_policy`: cv (Eq. 4) of a zero-mean coordinate.

  Attributes:
    INF_IS_HIGH: cv = inf (high dispersion) when sigma > 0.
    EPSILON: The mean's magnitude floored at 1e-12.
  """

  INF_IS_HIGH = 'inf_is_high'
  EPSILON = 'epsilon'


class FedSaLateJoinMode(enum.StrEnum):
  """FedSA's `late_join_mode`: joins once the most clusters exist.

  Attributes:
    GREEDY_UPDATE: Cluster averages updated after every join (Algorithm 1).
    FROZEN: Clients compared with the clusters as they were then.
  """

  GREEDY_UPDATE = 'greedy_update'
  FROZEN = 'frozen'


class FedSaClusterScope(enum.StrEnum):
  """FedSA's `cluster_scope`: what is clustered.

  Attributes:
    PER_TENSOR: Each tensor's clients separately (Algorithm 1).
    GLOBAL: One clustering on all high-dispersion coordinates.
  """

  PER_TENSOR = 'per_tensor'
  GLOBAL = 'global'


class FedCdaSelection(enum.StrEnum):
  """FedCDA's `selection`: which cached model each participant gives.

  Attributes:
    APPROX: The batch-wise minimiser of the paper's Eq. 8.
    NEWEST: Every participant's newest model (a diagnostic).
    RANDOM: A uniformly random cached model (a diagnostic).
  """

  APPROX = 'approx'
  NEWEST = 'newest'
  RANDOM = 'random'


class FedCdaDivergence(enum.StrEnum):
  """FedCDA's `divergence`: the objective of the selection.

  Attributes:
    SQUARED_L2: Eq. 8: the loss term plus L/2 times squared distances.
    TENSORWISE_NORM: The unofficial script's non-squared distances per
      parameter tensor, without the loss term (a diagnostic).
  """

  SQUARED_L2 = 'squared_l2'
  TENSORWISE_NORM = 'tensorwise_norm'


class FedCdaLaterBatches(enum.StrEnum):
  """FedCDA's `later_batches`: later batches in a batch's objective.

  Attributes:
    EXCLUDED: Left out (Eq. 8).
    INCLUDED_AT_PREVIOUS_SELECTION: Counted at their previous selection,
      as the unofficial script does.
  """

  EXCLUDED = 'excluded'
  INCLUDED_AT_PREVIOUS_SELECTION = 'included_at_previous_selection'


class FedCdaWarmupAggregation(enum.StrEnum):
  """FedCDA's `warmup_aggregation`: the model of the warm-up rounds.

  Attributes:
    FEDAVG: FedAvg of the participants (the paper).
    ALL_SEEN_NEWEST: The mean of every seen client's newest model (the
      unofficial script).
  """

  FEDAVG = 'fedavg'
  ALL_SEEN_NEWEST = 'all_seen_newest'


class FedCdaBatchParam(enum.StrEnum):
  """FedCDA's `batch_param`: what `num_batches` counts.

  Attributes:
    NUM_BATCHES: The number of batches per round (the paper's B).
    CLIENTS_PER_BATCH: The clients per batch (the unofficial script's).
  """

  NUM_BATCHES = 'num_batches'
  CLIENTS_PER_BATCH = 'clients_per_batch'
