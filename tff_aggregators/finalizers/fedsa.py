"""FedSA: skew-aware aggregation of high-dispersion parameters.

Wang et al., "The Key of Parameter Skew in Federated Learning" (arXiv
2408.11278v1; spec `fedsa.md` section 2). For every trainable tensor, over
the K valid clients' models X [K, M] (unweighted, Eq. 2):

  cv[m]  = sigma[m] / |mu[m]|, min-max normalised in the tensor    (Eqs. 4-5)
  H      = {m : normalised cv > cv_t}; the rest take mu            (Eqs. 6-7)
  cat    = ceil(C * s) in 1..C, s the clients' squared deviations at each
           m in H min-max normalised over the clients             (Eqs. 8-9)
  SIM    = share of H where two clients have the same category    (Eq. 10)
  clusters by the spec's greedy average-linkage GREEDY_MAC (at most S
           clusters, late joins above sim_t; spec 2.6)
  MAC_s  = mode of the members' categories; wbar_s their mean     (Eqs. 11-12)
  alpha  = n_s[MAC_s[m]] / (S C), normalised to sum 1 over the clusters
  out[H] = sum_s alpha_s wbar_s                                   (Eqs. 13-15)

Spec decisions (section 9), each an option: MIC bins on per-coordinate
min-max normalised squared deviations (`N = C`); `alpha_normalization=
'sum_to_one'` (default) or `'literal'`; zero means: sigma = 0 gives cv = 0,
mu = 0 < sigma gives cv = inf (high dispersion), min and max over finite cv.
Ties: smallest pair (row-major), join wins over a new pair on equality,
smallest cluster then client, smallest category. Ties depend on the client
order; the spec asks for a stable one, and TFF gives no client ids, so the
clients are put in a canonical order (by a fixed random projection of their
models): the result does not depend on the order clients arrive in.

Clients with weight 0 or a non-finite delta are left out. K = 0 keeps the
model; K = 1 takes that client's model. FedSA replaces the global model
(there is no server optimizer). Non-trainable weights pass through.
"""

import collections
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators.aggregators import collect
from tff_aggregators.finalizers import on_collected

ALPHA_NORMALIZATIONS = ('sum_to_one', 'literal')
_UNASSIGNED, _UNCLUSTERED = -2, -1


def greedy_macro_classes(
    sim: tf.Tensor, max_clusters: int, sim_threshold: float
) -> tf.Tensor:
  """GREEDY_MAC of spec 2.6: int32 [K], a cluster id or -1 (unclustered).

  Args:
    sim: float32 [K, K] client similarities.
    max_clusters: S.
    sim_threshold: sim_t, for joins once S clusters exist (strict >).
  """
  k = tf.shape(sim)[0]
  neg_inf = tf.constant(-np.inf, tf.float32)
  upper = tf.linalg.band_part(tf.ones([k, k], tf.bool), 0, -1)
  upper = tf.logical_and(upper, tf.logical_not(tf.eye(k, dtype=tf.bool)))

  def body(assign, num_clusters, done):
    free = tf.equal(assign, _UNASSIGNED)
    pairs = tf.where(
        tf.logical_and(upper, free[:, None] & free[None, :]), sim, neg_inf
    )
    best_pair = tf.argmax(tf.reshape(pairs, [-1]), output_type=tf.int32)
    bp = tf.reduce_max(pairs)
    a, b = best_pair // k, best_pair % k
    members = tf.transpose(tf.one_hot(assign, max_clusters))  # [S, K]
    size = tf.reduce_sum(members, axis=1)
    csim = tf.math.divide_no_nan(
        tf.linalg.matmul(members, sim), size[:, None]
    )
    joins = tf.where(
        tf.logical_and(size[:, None] > 0, free[None, :]), csim, neg_inf
    )
    best_join = tf.argmax(tf.reshape(joins, [-1]), output_type=tf.int32)
    bj = tf.reduce_max(joins)
    s, u = best_join // k, best_join % k
    under_cap = num_clusters < max_clusters
    nothing = tf.logical_and(tf.equal(bp, neg_inf), tf.equal(bj, neg_inf))
    join = tf.where(under_cap, bj >= bp, bj > sim_threshold)
    join = tf.logical_and(join, tf.logical_not(nothing))
    open_pair = tf.logical_and(
        under_cap, tf.logical_and(tf.logical_not(join), tf.logical_not(nothing))
    )
    stop = tf.logical_not(tf.logical_or(join, open_pair))
    index = tf.range(k)
    assign = tf.where(tf.logical_and(join, tf.equal(index, u)), s, assign)
    assign = tf.where(
        tf.logical_and(
            open_pair, tf.logical_or(tf.equal(index, a), tf.equal(index, b))
        ),
        num_clusters,
        assign,
    )
    assign = tf.where(tf.logical_and(stop, free), _UNCLUSTERED, assign)
    return assign, num_clusters + tf.cast(open_pair, tf.int32), stop

  def cond(assign, unused_num_clusters, done):
    return tf.logical_and(
        tf.logical_not(done), tf.reduce_any(tf.equal(assign, _UNASSIGNED))
    )

  assign, _, _ = tf.while_loop(
      cond,
      body,
      (tf.fill([k], _UNASSIGNED), tf.constant(0), tf.constant(False)),
  )
  return assign


def fedsa_tensor(
    x: tf.Tensor,
    *,
    cv_threshold: float,
    sim_threshold: float,
    num_categories: int,
    max_clusters: int,
    alpha_normalization: str,
) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
  """FedSA for one tensor: x float32 [K, M] (K >= 1) -> ([M], diagnostics)."""
  mu = tf.reduce_mean(x, axis=0)
  d = tf.square(x - mu)
  sigma = tf.sqrt(tf.reduce_mean(d, axis=0))
  inf = tf.constant(np.inf, tf.float32)
  cv = tf.where(
      tf.equal(sigma, 0.0),
      0.0,
      tf.where(tf.equal(mu, 0.0), inf, sigma / tf.abs(mu)),
  )
  finite = tf.math.is_finite(cv)
  finite_cv = tf.boolean_mask(cv, finite)
  has_finite = tf.size(finite_cv) > 0
  low = tf.where(has_finite, tf.reduce_min(tf.concat([finite_cv, [inf]], 0)),
                 0.0)
  high = tf.where(has_finite, tf.reduce_max(tf.concat([finite_cv, [-inf]], 0)),
                  0.0)
  cv_normalized = tf.where(
      finite, tf.math.divide_no_nan(cv - low, high - low), 1.0
  )
  high_index = tf.where(cv_normalized > cv_threshold)[:, 0]
  num_high = tf.size(high_index)
  x_high = tf.gather(x, high_index, axis=1)
  d_high = tf.gather(d, high_index, axis=1)
  d_low = tf.reduce_min(d_high, axis=0)
  d_span = tf.reduce_max(d_high, axis=0) - d_low
  scaled = tf.math.divide_no_nan(d_high - d_low, d_span)
  category = tf.clip_by_value(
      tf.cast(tf.math.ceil(num_categories * scaled), tf.int32),
      1, num_categories,
  ) - 1  # 0-based
  one_hot = tf.one_hot(category, num_categories)  # [K, Mh, C]
  sim = tf.math.divide_no_nan(
      tf.einsum('kmc,lmc->kl', one_hot, one_hot),
      tf.cast(num_high, tf.float32),
  )
  assign = greedy_macro_classes(sim, max_clusters, sim_threshold)
  members = tf.transpose(tf.one_hot(assign, max_clusters))  # [S, K]
  size = tf.reduce_sum(members, axis=1)
  counts = tf.einsum('sk,kmc->smc', members, one_hot)
  macro = tf.argmax(counts, axis=-1, output_type=tf.int32)  # [S, Mh]
  occurrences = tf.reduce_sum(tf.one_hot(macro, num_categories), axis=1)
  alpha = tf.gather(occurrences, macro, batch_dims=1) / float(
      max_clusters * num_categories
  )
  alpha = tf.where(size[:, None] > 0, alpha, 0.0)
  if alpha_normalization == 'sum_to_one':
    alpha = tf.math.divide_no_nan(alpha, tf.reduce_sum(alpha, axis=0))
  cluster_means = tf.math.divide_no_nan(
      tf.linalg.matmul(members, x_high), size[:, None]
  )
  clustered = tf.reduce_any(size > 0)
  out_high = tf.where(
      clustered,
      tf.reduce_sum(alpha * cluster_means, axis=0),
      tf.gather(mu, high_index),
  )
  out = tf.tensor_scatter_nd_update(mu, high_index[:, None], out_high)
  diagnostics = dict(
      high_fraction=tf.cast(num_high, tf.float32)
      / tf.cast(tf.size(mu), tf.float32),
      clusters=tf.reduce_sum(tf.cast(size > 0, tf.int32)),
      unclustered=tf.reduce_sum(tf.cast(tf.equal(assign, _UNCLUSTERED),
                                        tf.int32)),
  )
  return out, diagnostics


def build_fedsa_finalizer(
    model_weights_type: tff.StructType,
    *,
    max_clients: int,
    cv_threshold: float = 0.2,
    sim_threshold: float = 0.2,
    num_categories: int = 4,
    max_clusters: int = 4,
    alpha_normalization: str = 'sum_to_one',
) -> tff.learning.templates.FinalizerProcess:
  """The FedSA finalizer; its update is `CollectAllFactory`'s result.

  Args:
    model_weights_type: The `tff.learning.models.ModelWeights` type.
    max_clients: The collect-all capacity.
    cv_threshold: cv_t (0.2).
    sim_threshold: sim_t (0.2).
    num_categories: C, Micro-Class categories (paper: 4 CIFAR-10, 5
      CIFAR-100, 8 Tiny-ImageNet).
    max_clusters: S, Macro-Classes at most (same values as C).
    alpha_normalization: 'sum_to_one' (default) or 'literal' (Eq. 14 as
      printed, whose weights do not sum to 1).

  Returns:
    A `FinalizerProcess` with empty state. Measurements: `num_clients`, and
    per trainable tensor `high_fraction` (M_h / M), `clusters` and
    `unclustered` (vectors over the tensors).
  """
  del max_clients  # The collected cohort carries its own size.
  if alpha_normalization not in ALPHA_NORMALIZATIONS:
    raise ValueError(f'alpha_normalization must be one of '
                     f'{ALPHA_NORMALIZATIONS}, got {alpha_normalization!r}.')
  if num_categories < 1 or max_clusters < 1:
    raise ValueError('num_categories and max_clusters must be >= 1, got '
                     f'{num_categories}, {max_clusters}.')
  if not (0 <= cv_threshold <= 1 and 0 <= sim_threshold <= 1):
    raise ValueError('cv_threshold and sim_threshold must be in [0, 1], got '
                     f'{cv_threshold}, {sim_threshold}.')
  options = dict(
      cv_threshold=cv_threshold, sim_threshold=sim_threshold,
      num_categories=num_categories, max_clusters=max_clusters,
      alpha_normalization=alpha_normalization,
  )

  @tff.tensorflow.computation
  def initial_state():
    return ()

  def step(state_type, trainable_type, collected_type):
    specs = tf.nest.flatten(tff.types.type_to_tf_tensor_specs(trainable_type))
    sizes = [int(np.prod(spec.shape, dtype=np.int64)) for spec in specs]

    @tff.tensorflow.computation(state_type, trainable_type, collected_type)
    def server_step(state, weights, collected):
      w = collect.flatten(weights)
      models, _, _ = on_collected.valid_client_models(w, collected)
      # A canonical client order, so that ties resolve the same whatever
      # order the clients arrive in (several TFF workers).
      projection = tf.random.stateless_uniform(tf.shape(w), seed=[0, 0])
      models = tf.gather(
          models, tf.argsort(tf.linalg.matvec(models, projection))
      )
      num_clients = tf.shape(models)[0]

      def aggregate():
        outputs, diagnostics = [], collections.defaultdict(list)
        for x in tf.split(models, sizes, axis=1):
          out, diag = fedsa_tensor(x, **options)
          outputs.append(out)
          for key, value in diag.items():
            diagnostics[key].append(value)
        return tf.concat(outputs, 0), {
            k: tf.stack(v) for k, v in diagnostics.items()
        }

      def keep():
        n = len(sizes)
        return w, dict(high_fraction=tf.zeros([n]),
                       clusters=tf.zeros([n], tf.int32),
                       unclustered=tf.zeros([n], tf.int32))

      new, diagnostics = tf.cond(num_clients > 0, aggregate, keep)
      measurements = collections.OrderedDict(
          num_clients=num_clients,
          high_fraction=diagnostics['high_fraction'],
          clusters=diagnostics['clusters'],
          unclustered=diagnostics['unclustered'],
      )
      return state, collect.unflatten(new, trainable_type), measurements

    return server_step

  return on_collected.build_collected_finalizer(
      model_weights_type, initial_state, step
  )
