"""FedSA: skew-aware aggregation of high-dispersion parameters.

Wang et al., "The Key of Parameter Skew in Federated Learning" (arXiv
2408.11278v1; Section 3, Algorithm 1). For every trainable tensor, over
the K valid clients' models X [K, M] (unweighted, Eq. 2):

  cv[m]  = sigma[m] / |mu[m]|, min-max normalised in the tensor    (Eqs. 4-5)
  H      = {m : normalised cv > cv_t}; the rest take mu            (Eqs. 6-7)
  cat    = ceil(C * s) in 1..C, s the clients' squared deviations at each
           m in H min-max normalised over the clients             (Eqs. 8-9)
  SIM    = share of H where two clients have the same category    (Eq. 10)
  clusters by greedy average linkage, GREEDY_MAC (Steps 1-3: at most S
           clusters, late joins above sim_t)
  MAC_s  = mode of the members' categories; wbar_s their mean     (Eqs. 11-12)
  alpha  = n_s[MAC_s[m]] / (S C), normalised to sum 1 over the clusters
  out[H] = sum_s alpha_s wbar_s                                   (Eqs. 13-15)

Spec decisions (section 9), each an option: MIC bins on per-coordinate
min-max normalised squared deviations (`N = C`); `alpha_normalization=
'sum_to_one'` (default) or `'literal'`; zero means: sigma = 0 gives cv = 0,
mu = 0 < sigma gives cv = inf (high dispersion), min and max over finite cv.
Ties: smallest pair (row-major), join wins over a new pair on equality,
smallest cluster then client, smallest category. Ties depend on the client
order; we want a stable one, and TFF gives no client ids, so the
clients are put in a canonical order (by a fixed random projection of their
models): the result does not depend on the order clients arrive in.

Clients with weight 0 or a non-finite delta are left out. K = 0 keeps the
model; K = 1 takes that client's model. FedSA replaces the global model
(there is no server optimizer). Non-trainable weights pass through.
"""

import collections
import inspect
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators import options
from tff_aggregators import value_types
from tff_aggregators.aggregators import collect
from tff_aggregators.finalizers import on_collected
from tff_aggregators.finalizers import server_step

# The options with a fixed set of values: name -> its enum.
_CHOICES = dict(
  alpha_normalization=options.FedSaAlphaNormalization,
  mic_normalization=options.FedSaMicNormalization,
  zero_mean_policy=options.FedSaZeroMeanPolicy,
  late_join_mode=options.FedSaLateJoinMode,
  cluster_scope=options.FedSaClusterScope,
)
_UNASSIGNED, _UNCLUSTERED = -2, -1
_EPSILON = 1e-12


def _parse(name: str, value):
  """The member of option `name`'s enum that `value` names."""
  return options.parse(_CHOICES[name], value, name)


def _best_pair(sim: tf.Tensor, upper: tf.Tensor, free: tf.Tensor):
  """Step 1's candidate: the most similar pair of free clients.

  Returns:
    (a, b, sim[a, b]) with a < b, the smallest such pair on ties; the
    similarity is -inf when fewer than two clients are free.
  """
  k = tf.shape(sim)[0]
  pairs = tf.where(
    tf.logical_and(upper, free[:, None] & free[None, :]), sim, -np.inf
  )
  best_pair = tf.argmax(tf.reshape(pairs, [-1]), output_type=tf.int32)
  return best_pair // k, best_pair % k, tf.reduce_max(pairs)


def _best_join(sim: tf.Tensor, members: tf.Tensor, free: tf.Tensor):
  """Steps 2-3's candidate: a free client and the cluster it is closest to.

  Args:
    sim: float32 [K, K] client similarities.
    members: float32 [S, K], the clusters' one-hot memberships.
    free: bool [K], the unassigned clients.

  Returns:
    (s, u, the mean similarity of client u to cluster s's members),
    the smallest cluster then client on ties; -inf when there is none.
  """
  k = tf.shape(sim)[0]
  size = tf.reduce_sum(members, axis=1)
  csim = tf.math.divide_no_nan(tf.linalg.matmul(members, sim), size[:, None])
  joins = tf.where(
    tf.logical_and(size[:, None] > 0, free[None, :]), csim, -np.inf
  )
  best_join = tf.argmax(tf.reshape(joins, [-1]), output_type=tf.int32)
  return best_join // k, best_join % k, tf.reduce_max(joins)


def _join_or_open(bp, bj, under_cap, sim_threshold: float):
  """(join, open_pair, stop): the step GREEDY_MAC takes.

  Below the cap a join wins over a new pair on equality; at the cap only a
  join above `sim_threshold` is taken. With no candidate at all it stops.
  """
  nothing = tf.logical_and(tf.equal(bp, -np.inf), tf.equal(bj, -np.inf))
  join = tf.where(under_cap, bj >= bp, bj > sim_threshold)
  join = tf.logical_and(join, tf.logical_not(nothing))
  open_pair = tf.logical_and(
    under_cap, tf.logical_and(tf.logical_not(join), tf.logical_not(nothing))
  )
  stop = tf.logical_not(tf.logical_or(join, open_pair))
  return join, open_pair, stop


def _greedy_step(
  sim: tf.Tensor,
  upper: tf.Tensor,
  max_clusters: int,
  sim_threshold: float,
  frozen: bool,
  assign: tf.Tensor,
  num_clusters: tf.Tensor,
  snapshot: tf.Tensor,
  taken: tf.Tensor,
):
  """One GREEDY_MAC step: a join, a new pair, or the end (the rest -1).

  Args:
    sim: float32 [K, K] client similarities.
    upper: bool [K, K], the pairs (a, b) with a < b.
    max_clusters: S.
    sim_threshold: sim_t.
    frozen: Whether late joins compare with the clusters as they were
      when the cap was reached (`snapshot`, saved once `taken`).
    assign: int32 [K], a cluster id, `_UNASSIGNED` or `_UNCLUSTERED`.
    num_clusters: The clusters opened so far.
    snapshot: float32 [S, K], the frozen memberships.
    taken: Whether `snapshot` has been taken.

  Returns:
    The loop variables `(assign, num_clusters, stop, snapshot, taken)`.
  """
  free = tf.equal(assign, _UNASSIGNED)
  a, b, bp = _best_pair(sim, upper, free)
  under_cap = num_clusters < max_clusters
  members = tf.transpose(tf.one_hot(assign, max_clusters))  # [S, K]
  if frozen:  # The clusters as they were when the cap was reached.
    snapshot = tf.where(tf.logical_or(under_cap, taken), snapshot, members)
    taken = tf.logical_or(taken, tf.logical_not(under_cap))
    members = tf.where(under_cap, members, snapshot)
  s, u, bj = _best_join(sim, members, free)
  join, open_pair, stop = _join_or_open(bp, bj, under_cap, sim_threshold)
  index = tf.range(tf.shape(sim)[0])
  assign = tf.where(tf.logical_and(join, tf.equal(index, u)), s, assign)
  assign = tf.where(
    tf.logical_and(
      open_pair, tf.logical_or(tf.equal(index, a), tf.equal(index, b))
    ),
    num_clusters,
    assign,
  )
  assign = tf.where(tf.logical_and(stop, free), _UNCLUSTERED, assign)
  num_clusters += tf.cast(open_pair, tf.int32)
  return assign, num_clusters, stop, snapshot, taken


def greedy_macro_classes(
  sim: tf.Tensor,
  max_clusters: int,
  sim_threshold: float,
  late_join_mode: options.FedSaLateJoinMode = (
    options.FedSaLateJoinMode.GREEDY_UPDATE
  ),
) -> tf.Tensor:
  """GREEDY_MAC (Steps 1-3): int32 [K], a cluster id or -1 (unclustered).

  Args:
    sim: float32 [K, K] client similarities.
    max_clusters: S.
    sim_threshold: sim_t, for joins once S clusters exist (strict >).
    late_join_mode: A `tff_aggregators.FedSaLateJoinMode` or its string:
      'greedy_update' (cluster averages updated after every join) or
      'frozen' (once S clusters exist, clients are compared with the
      clusters as they were then).
  """
  late_join_mode = _parse('late_join_mode', late_join_mode)
  k = tf.shape(sim)[0]
  upper = tf.linalg.band_part(tf.ones([k, k], tf.bool), 0, -1)
  upper = tf.logical_and(upper, tf.logical_not(tf.eye(k, dtype=tf.bool)))
  frozen = late_join_mode == options.FedSaLateJoinMode.FROZEN

  def body(assign, num_clusters, unused_done, snapshot, taken):
    return _greedy_step(
      sim,
      upper,
      max_clusters,
      sim_threshold,
      frozen,
      assign,
      num_clusters,
      snapshot,
      taken,
    )

  def cond(assign, unused_num_clusters, done, unused_snapshot, unused_taken):
    return tf.logical_and(
      tf.logical_not(done), tf.reduce_any(tf.equal(assign, _UNASSIGNED))
    )

  assign, _, _, _, _ = tf.while_loop(
    cond,
    body,
    (
      tf.fill([k], _UNASSIGNED),
      tf.constant(0),
      tf.constant(False),
      tf.zeros([max_clusters, k]),
      tf.constant(False),
    ),
  )
  return assign


def _weighted_mean(values: tf.Tensor, weights: tf.Tensor) -> tf.Tensor:
  """Mean over axis 0 of values [K, ...] with weights [K] (summing to 1)."""
  return tf.tensordot(weights, values, axes=1)


def tensor_statistics(
  x: tf.Tensor,
  client_weights: tf.Tensor,
  *,
  cv_threshold: float,
  num_categories: int,
  mic_normalization: options.FedSaMicNormalization,
  mic_scale: float,
  zero_mean_policy: options.FedSaZeroMeanPolicy,
) -> dict[str, tf.Tensor]:
  """Eqs. 2-9 for one tensor x [K, M]; client_weights [K] sum to 1.

  Returns the mean `mu` [M], the high-dispersion indices `high_index`
  [Mh], `x_high` [K, Mh] and the Micro-Class one-hots `mic` [K, Mh, C].
  """
  mu = _weighted_mean(x, client_weights)
  d = tf.square(x - mu)
  sigma = tf.sqrt(_weighted_mean(d, client_weights))
  inf = tf.constant(np.inf, tf.float32)
  if zero_mean_policy == options.FedSaZeroMeanPolicy.EPSILON:
    cv = sigma / tf.maximum(tf.abs(mu), _EPSILON)
  else:
    cv = tf.where(
      tf.equal(sigma, 0.0),
      0.0,
      tf.where(tf.equal(mu, 0.0), inf, sigma / tf.abs(mu)),
    )
  finite = tf.math.is_finite(cv)
  finite_cv = tf.boolean_mask(cv, finite)
  has_finite = tf.size(finite_cv) > 0
  low = tf.where(
    has_finite, tf.reduce_min(tf.concat([finite_cv, [inf]], 0)), 0.0
  )
  high = tf.where(
    has_finite, tf.reduce_max(tf.concat([finite_cv, [-inf]], 0)), 0.0
  )
  cv_normalized = tf.where(
    finite, tf.math.divide_no_nan(cv - low, high - low), 1.0
  )
  high_index = tf.where(cv_normalized > cv_threshold)[:, 0]
  x_high = tf.gather(x, high_index, axis=1)
  d_high = tf.gather(d, high_index, axis=1)
  if mic_normalization == options.FedSaMicNormalization.QUANTILE:
    # Equal-mass bins: the rank of each client's deviation at a coordinate.
    ranks = tf.cast(
      tf.argsort(tf.argsort(d_high, axis=0, stable=True), axis=0),
      tf.float32,
    )
    k = tf.cast(tf.shape(x)[0], tf.float32)
    category = tf.cast(tf.floor(ranks * num_categories / k), tf.int32) + 1
  else:
    if mic_normalization == options.FedSaMicNormalization.RAW:
      scaled = d_high * mic_scale / num_categories
    else:
      per_coordinate = options.FedSaMicNormalization.PER_COORDINATE_MINMAX
      axis = 0 if mic_normalization == per_coordinate else None
      d_low = tf.reduce_min(d_high, axis=axis)
      d_span = tf.reduce_max(d_high, axis=axis) - d_low
      scaled = tf.math.divide_no_nan(d_high - d_low, d_span)
    category = tf.cast(tf.math.ceil(num_categories * scaled), tf.int32)
  category = tf.clip_by_value(category, 1, num_categories) - 1  # 0-based
  return dict(
    mu=mu,
    high_index=high_index,
    x_high=x_high,
    mic=tf.one_hot(category, num_categories),
  )


def agreement(mic: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
  """(same-category counts [K, K], number of high coordinates) of Eq. 10."""
  return (
    tf.einsum('kmc,lmc->kl', mic, mic),
    tf.cast(tf.shape(mic)[1], tf.float32),
  )


def aggregate_high(
  stats: dict[str, tf.Tensor],
  assign: tf.Tensor,
  client_weights: tf.Tensor,
  *,
  num_categories: int,
  max_clusters: int,
  alpha_normalization: options.FedSaAlphaNormalization,
  weighted_mean: bool,
) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
  """Eqs. 11-15: the tensor with its high coordinates from the clusters."""
  mu, high_index = stats['mu'], stats['high_index']
  members = tf.transpose(tf.one_hot(assign, max_clusters))  # [S, K]
  size = tf.reduce_sum(members, axis=1)
  counts = tf.einsum('sk,kmc->smc', members, stats['mic'])
  macro = tf.argmax(counts, axis=-1, output_type=tf.int32)  # [S, Mh]
  occurrences = tf.reduce_sum(tf.one_hot(macro, num_categories), axis=1)
  alpha = tf.gather(occurrences, macro, batch_dims=1) / float(
    max_clusters * num_categories
  )
  alpha = tf.where(size[:, None] > 0, alpha, 0.0)
  if alpha_normalization == options.FedSaAlphaNormalization.SUM_TO_ONE:
    alpha = tf.math.divide_no_nan(alpha, tf.reduce_sum(alpha, axis=0))
  mass = members * client_weights[None, :] if weighted_mean else members
  cluster_means = tf.math.divide_no_nan(
    tf.linalg.matmul(mass, stats['x_high']),
    tf.reduce_sum(mass, axis=1)[:, None],
  )
  out_high = tf.where(
    tf.reduce_any(size > 0),
    tf.reduce_sum(alpha * cluster_means, axis=0),
    tf.gather(mu, high_index),
  )
  out = tf.tensor_scatter_nd_update(mu, high_index[:, None], out_high)
  diagnostics = dict(
    high_fraction=tf.cast(tf.size(high_index), tf.float32)
    / tf.cast(tf.size(mu), tf.float32),
    clusters=tf.reduce_sum(tf.cast(size > 0, tf.int32)),
    unclustered=tf.reduce_sum(
      tf.cast(tf.equal(assign, _UNCLUSTERED), tf.int32)
    ),
  )
  return out, diagnostics


def fedsa(
  tensors: list[tf.Tensor],
  client_weights: tf.Tensor,
  *,
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
) -> tuple[list[tf.Tensor], dict[str, tf.Tensor]]:
  """FedSA over client models: tensors[j] is float32 [K, M_j], K >= 1.

  `client_weights` [K] (e.g. example counts) are used only with
  `weighted_mean=True`. The options with a fixed set of values take the
  `tff_aggregators.FedSa*` enums or their strings. Returns the aggregated
  tensors [M_j] and per-tensor diagnostics (`high_fraction`, `clusters`,
  `unclustered`, stacked [J]).
  """
  alpha_normalization = _parse('alpha_normalization', alpha_normalization)
  mic_normalization = _parse('mic_normalization', mic_normalization)
  zero_mean_policy = _parse('zero_mean_policy', zero_mean_policy)
  late_join_mode = _parse('late_join_mode', late_join_mode)
  cluster_scope = _parse('cluster_scope', cluster_scope)
  k = tf.shape(tensors[0])[0]
  weights = (
    client_weights / tf.reduce_sum(client_weights)
    if weighted_mean
    else tf.ones([k]) / tf.cast(k, tf.float32)
  )
  stats = [
    tensor_statistics(
      x,
      weights,
      cv_threshold=cv_threshold,
      num_categories=num_categories,
      mic_normalization=mic_normalization,
      mic_scale=mic_scale,
      zero_mean_policy=zero_mean_policy,
    )
    for x in tensors
  ]
  cluster = lambda sim: greedy_macro_classes(
    sim, max_clusters, sim_threshold, late_join_mode
  )
  # GLOBAL: one clustering on all high coordinates.
  if cluster_scope == options.FedSaClusterScope.GLOBAL:
    same, num_high = zip(*[agreement(st['mic']) for st in stats])
    assign = cluster(tf.math.divide_no_nan(tf.add_n(same), tf.add_n(num_high)))
    assigns = [assign] * len(stats)
  else:
    assigns = [
      cluster(tf.math.divide_no_nan(*agreement(st['mic']))) for st in stats
    ]
  outputs, diagnostics = [], collections.defaultdict(list)
  for st, assign in zip(stats, assigns):
    out, diag = aggregate_high(
      st,
      assign,
      weights,
      num_categories=num_categories,
      max_clusters=max_clusters,
      alpha_normalization=alpha_normalization,
      weighted_mean=weighted_mean,
    )
    outputs.append(out)
    for key, value in diag.items():
      diagnostics[key].append(value)
  return outputs, {key: tf.stack(v) for key, v in diagnostics.items()}


def fedsa_tensor(x: tf.Tensor, **fedsa_options) -> tuple[tf.Tensor, dict]:
  """`fedsa` of one tensor x [K, M] with unit client weights."""
  (out,), diagnostics = fedsa([x], tf.ones([tf.shape(x)[0]]), **fedsa_options)
  return out, {key: value[0] for key, value in diagnostics.items()}


def check_options(fedsa_options: dict[str, Any]) -> dict[str, Any]:
  """`fedsa`'s options with the enum-valued ones parsed to their members.

  Raises:
    ValueError: On an unknown option or a value out of range.
  """
  defaults = {  # fedsa's keyword options, where their defaults live.
    name: parameter.default
    for name, parameter in inspect.signature(fedsa).parameters.items()
    if parameter.kind is inspect.Parameter.KEYWORD_ONLY
  }
  unknown = set(fedsa_options) - set(defaults)
  if unknown:
    raise ValueError(
      f'Unknown FedSA options {sorted(unknown)}; known: {sorted(defaults)}.'
    )
  fedsa_options = dict(fedsa_options)
  for name in _CHOICES:
    if name in fedsa_options:
      fedsa_options[name] = _parse(name, fedsa_options[name])
  given = {**defaults, **fedsa_options}
  num_categories, max_clusters = given['num_categories'], given['max_clusters']
  if num_categories < 1 or max_clusters < 1:
    raise ValueError(
      'num_categories and max_clusters must be >= 1, got '
      f'{num_categories}, {max_clusters}.'
    )
  for name in ('cv_threshold', 'sim_threshold'):
    if not 0 <= given[name] <= 1:
      raise ValueError(f'{name} must be in [0, 1], got {given[name]}.')
  return fedsa_options


def build_fedsa_finalizer(
  model_weights_type: tff.StructType,
  **fedsa_options,
) -> tff.learning.templates.FinalizerProcess:
  """The FedSA finalizer; its update is `CollectAllFactory`'s result.

  Args:
    model_weights_type: The `tff.learning.models.ModelWeights` type.
    **fedsa_options: The options of `fedsa`, with their defaults:
      cv_threshold (cv_t, 0.2), sim_threshold (sim_t, 0.2), num_categories
      (C: paper 4 CIFAR-10, 5 CIFAR-100, 8 Tiny-ImageNet), max_clusters (S,
      as C), alpha_normalization ('sum_to_one' | 'literal', Eq. 14 as
      printed), mic_normalization ('per_coordinate_minmax' | 'per_tensor_
      minmax' | 'quantile' | 'raw', with mic_scale the N of Eq. 8),
      zero_mean_policy ('inf_is_high' | 'epsilon'), weighted_mean (False:
      Eq. 2's unweighted means; True: by the clients' weights),
      late_join_mode ('greedy_update' | 'frozen'), cluster_scope
      ('per_tensor' as Algorithm 1 | 'global'). The five with a fixed set
      of values take the `tff_aggregators.FedSa*` enums or their strings.

  Returns:
    A `FinalizerProcess` with empty state. Measurements: `num_clients`,
    `high_fraction_overall` (the share of all trainable coordinates with
    high dispersion), and per trainable tensor `high_fraction` (M_h / M),
    `clusters` and `unclustered` (vectors over the tensors),
    `update_non_finite` (1: a non-finite result was rejected, the model
    kept) and `num_dropped_clients` (collected clients that were not valid).

  Raises:
    ValueError: On an unknown option or value.
  """
  fedsa_options = check_options(fedsa_options)
  server_step.check_model_weights_type(model_weights_type)
  trainable_type = model_weights_type.trainable
  sizes = [
    value_types.num_elements(t) for t in value_types.leaf_types(trainable_type)
  ]

  def initial_state():
    return ()

  def step(state, weights, collected):
    w = collect.flatten(weights)
    models, client_weights, valid = on_collected.valid_client_models(
      w, collected
    )
    # A canonical client order, so that ties resolve the same whatever
    # order the clients arrive in (several TFF workers).
    projection = tf.random.stateless_uniform(tf.shape(w), seed=[0, 0])
    order = tf.argsort(tf.linalg.matvec(models, projection))
    models = tf.gather(models, order)
    client_weights = tf.gather(client_weights, order)
    num_clients = tf.shape(models)[0]

    def aggregate():
      outputs, diagnostics = fedsa(
        tf.split(models, sizes, axis=1), client_weights, **fedsa_options
      )
      return tf.concat(outputs, 0), diagnostics

    def keep():
      n = len(sizes)
      return w, dict(
        high_fraction=tf.zeros([n]),
        clusters=tf.zeros([n], tf.int32),
        unclustered=tf.zeros([n], tf.int32),
      )

    new, diagnostics = tf.cond(num_clients > 0, aggregate, keep)
    finite = tf.reduce_all(tf.math.is_finite(new))  # Else keep the model.
    new = tf.where(finite, new, w)
    high_coordinates = tf.reduce_sum(
      diagnostics['high_fraction'] * tf.constant(sizes, tf.float32)
    )
    measurements = collections.OrderedDict(
      num_clients=num_clients,
      high_fraction_overall=high_coordinates / float(sum(sizes)),
      high_fraction=diagnostics['high_fraction'],
      clusters=diagnostics['clusters'],
      unclustered=diagnostics['unclustered'],
      update_non_finite=1 - tf.cast(finite, tf.int32),
      num_dropped_clients=tf.shape(valid)[0] - num_clients,
    )
    return state, collect.unflatten(new, trainable_type), measurements

  return server_step.build_server_step_finalizer(
    model_weights_type,
    on_collected.collected_type(trainable_type),
    initial_state,
    step,
  )
