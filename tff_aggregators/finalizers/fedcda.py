"""FedCDA: cross-round divergence-aware selection of cached client models.

Wang et al., "FedCDA: Federated Learning with Cross-Round Divergence-Aware
Aggregation", ICLR 2024 (Eqs. 5-8, Algorithm 1). The server keeps
each client's K most recent models and losses (a ring buffer keyed by the
client id, filled during warm-up too). In warm-up rounds (t < T_w) the new
global model is FedAvg of the participants (weighted by their weights) and
each participant's selection is its newest model. Afterwards the
participants, in a random order (seeded by the round), are split into
min(B, P) batches of near-equal size (larger first); batch by batch, with
the non-participants and the earlier batches fixed and the later batches
excluded, the combination of cached models minimising (eq. 8)

  J = (1/M) sum_n f_n + (L / 2M) sum_n ||w_n - mean||^2

over the M included clients is found exhaustively (candidates newest first;
ties, scores within a relative 1e-9 of the smallest, go to the first, i.e.
newer, combination, so floating-point noise cannot flip a selection), with
the centred
sufficient statistics in float64. The new global model is the
uniform mean of the selected models of every client seen so far. The
participants are taken in client-id order before the seeded permutation, so
the result does not depend on the order in which clients arrive.

The per-round cost does not grow with the clients seen: the server keeps the
running float64 sums of the selected models, their squared norms and losses,
and touches only the participants' history rows.

Where the history lives: this module's finalizer keeps it in
its TFF state, N x K x D float32 (N: the population, K: the memory, D: the
parameters), which TFF serialises every round (about 33 MB/s):
`build_fedcda_finalizer` refuses states above `max_state_bytes`. For larger
populations or models, `tff_aggregators.algorithms.fedcda_store` runs the
same rule (this module's `select_and_average`) with the history in a keyed
store outside TFF, in memory or memory-mapped on disk.

Inputs: `CollectAllFactory`'s result over the identified client work's update
(`tff_aggregators.client_works.identified`): rows hold (client id, delta,
loss). Clients with weight 0, a non-finite row or an id outside [0, N) are
left out (a non-participant this round).

Diagnostic switches mirroring the unofficial script (off by default,
`FedCdaOptions`, docs/methods/fedcda.md): `selection='newest'|'random'`,
`divergence='tensorwise_norm'`,
`later_batches='included_at_previous_selection'`,
`warmup_aggregation='all_seen_newest'`, `batch_param='clients_per_batch'`.
"""

import collections
import dataclasses
import itertools
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators import value_types
from tff_aggregators.aggregators import collect
from tff_aggregators.finalizers import on_collected
from tff_aggregators.finalizers import server_step

DEFAULT_MAX_STATE_BYTES = 512 * 2**20
_MAX_COMBINATIONS = 1 << 16

SELECTIONS = ('approx', 'newest', 'random')
DIVERGENCES = ('squared_l2', 'tensorwise_norm')
LATER_BATCHES = ('excluded', 'included_at_previous_selection')
WARMUP_AGGREGATIONS = ('fedavg', 'all_seen_newest')
BATCH_PARAMS = ('num_batches', 'clients_per_batch')


class HistoryTooLargeError(ValueError):
  """The in-state history would exceed `max_state_bytes`."""


@dataclasses.dataclass(frozen=True)
class FedCdaOptions:
  """FedCDA's settings (the paper's defaults; the script's switches).

  Attributes:
    memory_size: K, cached models per client (3).
    num_batches: B, selection batches per round (3); clients per batch with
      `batch_param='clients_per_batch'`.
    smoothness: L of the objective (1).
    warmup_rounds: T_w, FedAvg rounds before selection starts (50).
    seed: Seeds the batch split (and `selection='random'`) of each round.
    selection: 'approx' (eq. 8, the paper), 'newest' (every participant
      keeps its newest model: what the script's recursion bug computes) or
      'random' (a uniformly random cached model; the paper's Fig. 2a).
    divergence: 'squared_l2' (eq. 8: loss term plus L/2 times squared
      distances) or 'tensorwise_norm' (the script's: sum over included
      clients and parameter tensors of the non-squared distance to the mean,
      no loss term). 'tensorwise_norm' reads every seen client's selected
      model each round (O(seen x D), diagnostics only).
    later_batches: 'excluded' (eq. 8) or 'included_at_previous_selection'
      (the script: later batches' participants count at their previous
      selection, or their newest model when they have none).
    warmup_aggregation: 'fedavg' (the paper) or 'all_seen_newest' (the
      script: the uniform mean of every seen client's newest model).
    batch_param: 'num_batches' (the paper's B) or 'clients_per_batch' (the
      script's `batch_client_num`: batches of B clients, the last smaller).
  """

  memory_size: int = 3
  num_batches: int = 3
  smoothness: float = 1.0
  warmup_rounds: int = 50
  seed: int = 0
  selection: str = 'approx'
  divergence: str = 'squared_l2'
  later_batches: str = 'excluded'
  warmup_aggregation: str = 'fedavg'
  batch_param: str = 'num_batches'

  def __post_init__(self):
    for name in ('memory_size', 'num_batches'):
      if int(getattr(self, name)) < 1:
        raise ValueError(
          f'FedCDA {name} must be >= 1, got {getattr(self, name)}.'
        )
    if self.warmup_rounds < 0 or self.smoothness < 0:
      raise ValueError(
        'FedCDA warmup_rounds and smoothness must be >= 0, got '
        f'{self.warmup_rounds}, {self.smoothness}.'
      )
    for name, allowed in (
      ('selection', SELECTIONS),
      ('divergence', DIVERGENCES),
      ('later_batches', LATER_BATCHES),
      ('warmup_aggregation', WARMUP_AGGREGATIONS),
      ('batch_param', BATCH_PARAMS),
    ):
      if getattr(self, name) not in allowed:
        raise ValueError(
          f'FedCDA {name} must be one of {allowed}, got '
          f'{getattr(self, name)!r}.'
        )

  def batching(self, max_clients: int) -> tuple[int, int]:
    """(number of batch slots, largest batch) for cohorts up to max_clients."""
    if self.batch_param == 'num_batches':
      return self.num_batches, -(-max_clients // self.num_batches)
    return -(-max_clients // self.num_batches), self.num_batches


def check_update_type(update_type: Any, trainable_type: Any) -> tff.Type:
  """The identified client work's update type, or a ValueError."""
  update_type = tff.types.to_type(update_type)
  if (
    not isinstance(update_type, tff.StructType)
    or sorted(dir(update_type)) != ['client_id', 'delta', 'loss']
    or update_type.delta != trainable_type
  ):
    raise ValueError(
      'FedCDA expects client updates OrderedDict(delta=<trainable weights>, '
      'loss, client_id), as tff_aggregators.client_works.identified '
      f'reports them; got {update_type}.'
    )
  return update_type


def participants(w, collected, update_type, num_clients):
  """The valid participants of a round, in client-id order (TF code).

  Args:
    w: The flat global model [D].
    collected: `CollectAllFactory`'s result (rows of id, delta, loss).
    update_type: The client update type (`check_update_type`).
    num_clients: N. Id -1 (an empty dataset) is left out; an id outside
      [-1, N) or twice in the round fails the round (`check_ids`).

  Returns:
    (ids [P] int32, models [P, D] = w - delta, losses [P], weights [P]).
  """
  rows, client_weights = collected['values'], collected['weights']
  update = collect.unflatten(rows, update_type, cast=False)
  deltas = tf.concat(
    [
      tf.reshape(leaf, [tf.shape(rows)[0], -1])
      for leaf in tf.nest.flatten(update['delta'])
    ],
    axis=1,
  )
  ids = check_ids(tf.cast(tf.round(update['client_id']), tf.int32), num_clients)
  valid = tf.logical_and(
    tf.logical_and(client_weights > 0, tf.math.is_finite(client_weights)),
    tf.reduce_all(tf.math.is_finite(rows), axis=1),
  )
  valid = tf.logical_and(valid, tf.logical_and(ids >= 0, ids < num_clients))
  # Id order, so that the seeded batch split does not depend on the order
  # clients arrive in (several TFF workers).
  ids = tf.boolean_mask(ids, valid)
  by_id = tf.argsort(ids)
  models = w[tf.newaxis, :] - tf.gather(tf.boolean_mask(deltas, valid), by_id)
  return (
    tf.gather(ids, by_id),
    models,
    tf.gather(tf.boolean_mask(update['loss'], valid), by_id),
    tf.gather(tf.boolean_mask(client_weights, valid), by_id),
  )


def with_dropped(measurements, client_weights, num_participants):
  """`measurements` plus `num_dropped_clients`: the round's rows left out.

  A row is left out for a zero or non-finite weight, a non-finite update or
  an empty dataset (id -1); the name is every method's (docs/faults.md).
  """
  measurements = collections.OrderedDict(measurements)
  measurements['num_dropped_clients'] = (
    tf.shape(client_weights)[0] - num_participants
  )
  return measurements


def check_ids(ids, num_clients):
  """`ids` after asserting each is in [-1, N) and none (but -1) repeats.

  The driver-side checks (`identified.with_client_ids`,
  `IdentifiedDataSource`) refuse such cohorts before a round; this stops a
  hand-made one from corrupting the history (a repeated id would be cached
  twice and counted twice in `num_seen`).
  """
  in_range = tf.debugging.assert_less(
    ids,
    num_clients,
    message=f'FedCDA: a client id is not below num_clients={num_clients}; '
    'ids index the population [0, num_clients)',
  )
  non_negative = tf.debugging.assert_greater_equal(
    ids, -1, message='FedCDA: a client id is negative'
  )
  known = tf.sort(tf.boolean_mask(ids, ids >= 0))
  distinct = tf.debugging.assert_equal(
    tf.reduce_any(tf.equal(known[1:], known[:-1])),
    False,
    message='FedCDA: a client id appears twice in one round; sample each '
    "round's clients without replacement",
  )
  with tf.control_dependencies([in_range, non_negative, distinct]):
    return tf.identity(ids)


# Scores this close (relative to the smallest) are a tie: floating-point
# noise (another summation order, e.g. one core against two) moves a score
# by about 1e-14 of its size, far below this.
TIE_RTOL = 1e-9


def first_within_tolerance(score):
  """The first index whose score is within `TIE_RTOL` of the minimum.

  Combinations come newest first, so a tie goes to the newer models, and a
  near-tie resolves the same way whatever the floating-point noise.
  """
  best = tf.reduce_min(score)
  within = score <= best + TIE_RTOL * tf.abs(best)
  return tf.argmax(tf.cast(within, tf.int32), output_type=tf.int32)


SUMS = ('selected_sum', 'selected_square_sum', 'selected_loss_sum', 'num_seen')


def initial_sums(size: int) -> collections.OrderedDict:
  """The running sums over the selected models of the seen clients."""
  return collections.OrderedDict(
    selected_sum=np.zeros([size], np.float64),
    selected_square_sum=np.float64(0.0),
    selected_loss_sum=np.float64(0.0),
    num_seen=np.int32(0),
  )


def build_selection(
  options: FedCdaOptions, max_clients: int, leaf_sizes: list[int]
):
  """The round's selection and new model from the participants' rows.

  Shared by both history backends, so they compute the same thing. The
  returned TF function takes

    t: the round (int32); w: the global model [D] float32;
    ids [P], models [P, D], weights [P]: the participants (`participants`);
    sums: the running sums (`selected_sum` float64 [D], `selected_square_sum`,
      `selected_loss_sum`, `num_seen`), participants' old selections included;
    seen_before [P] bool, old_models [P, D], old_losses [P]: each
      participant's previous selection (read before this round's cache write);
    candidates [P, K, D], candidate_losses [P, K], candidate_valid [P, K]:
      each participant's cached models after this round's write, newest
      first (`rank_slots`), and which exist;
    fixed_models [A, D]: the non-participants' selected models, read only by
      `divergence='tensorwise_norm'` (else a [0, D] tensor);

  and returns (chosen rank per participant [P], new model [D] float32, new
  sums, measurements). Float64 copies are made per batch only, so the
  working set is the float32 candidates plus O(P x D) float64.

  Args:
    options: The settings.
    max_clients: The largest cohort.
    leaf_sizes: Element counts of the model's tensors, in flat order.

  Returns:
    The TF function.
  """
  k, l_half = options.memory_size, options.smoothness / 2.0
  num_slots, capacity = options.batching(max_clients)
  if k**capacity > _MAX_COMBINATIONS and options.selection == 'approx':
    raise ValueError(
      f'FedCDA would enumerate {k}**{capacity} combinations per batch '
      f'(cohort {max_clients}, batch_param={options.batch_param}, '
      f'num_batches={options.num_batches}); use more batches or a smaller '
      'memory_size.'
    )
  if options.selection == 'approx':
    combinations = np.array(
      list(itertools.product(range(k), repeat=capacity)), np.int32
    ).reshape([-1, capacity])
  else:
    combinations = np.zeros([1, capacity], np.int32)  # Not searched.
  offsets = np.cumsum([0] + list(leaf_sizes))

  def objective(total_sum, square_sum, loss_sum, count):
    """J over the included clients from running sums (uncentred)."""
    m = tf.cast(count, tf.float64)
    mean = tf.math.divide_no_nan(total_sum, m)
    return tf.math.divide_no_nan(loss_sum, m) + l_half * (
      tf.math.divide_no_nan(square_sum, m) - tf.reduce_sum(tf.square(mean))
    )

  def tensorwise_distance(models, mean):
    """Sum over rows and tensors of ||mean_l - row_l|| (the script's)."""
    diff = models - mean[tf.newaxis, :]
    return tf.add_n(
      [
        tf.reduce_sum(
          tf.sqrt(
            tf.reduce_sum(
              tf.square(diff[:, offsets[i] : offsets[i + 1]]), axis=1
            )
          )
        )
        for i in range(len(leaf_sizes))
      ]
    )

  def batch_sizes_of(p):
    if options.batch_param == 'num_batches':
      num_b = tf.minimum(num_slots, p)
      # array_split: the first (p mod b) batches have one more client.
      base, extra = p // tf.maximum(num_b, 1), p % tf.maximum(num_b, 1)
      sizes = base + tf.cast(tf.range(num_slots) < extra, tf.int32)
      return tf.where(tf.range(num_slots) < num_b, sizes, 0)
    return tf.clip_by_value(p - tf.range(num_slots) * capacity, 0, capacity)

  def select(
    t,
    w,
    ids,
    models,
    weights,
    sums,
    seen_before,
    old_models,
    old_losses,
    candidates,
    candidate_losses,
    ranked_valid,
    fixed_models,
  ):
    p = tf.shape(ids)[0]
    candidate_losses = tf.cast(candidate_losses, tf.float64)
    as64 = lambda x: tf.cast(x, tf.float64)

    # Take the participants' old selections out of the running sums.
    mask = tf.cast(seen_before, tf.float64)
    old_models = tf.cast(old_models, tf.float64)
    old_losses = tf.cast(old_losses, tf.float64)
    fixed_sum = sums['selected_sum'] - tf.linalg.matvec(
      old_models, mask, transpose_a=True
    )
    fixed_square = sums['selected_square_sum'] - tf.reduce_sum(
      mask * tf.reduce_sum(tf.square(old_models), axis=1)
    )
    fixed_loss = sums['selected_loss_sum'] - tf.reduce_sum(mask * old_losses)
    num_fixed = sums['num_seen'] - tf.reduce_sum(tf.cast(seen_before, tf.int32))
    center = tf.cast(w, tf.float64)

    def newest_selection():
      return tf.zeros([p], tf.int32)

    def random_selection():
      count = tf.reduce_sum(tf.cast(ranked_valid, tf.int32), axis=1)
      u = tf.random.stateless_uniform(
        [p], seed=tf.stack([tf.constant(options.seed), t + (1 << 20)])
      )
      return tf.minimum(
        tf.cast(u * tf.cast(count, tf.float32), tf.int32), count - 1
      )

    def approx_selection():
      order = tf.argsort(
        tf.random.stateless_uniform(
          [p], seed=tf.stack([tf.constant(options.seed), t])
        )
      )
      sizes = batch_sizes_of(p)
      starts = tf.cumsum(sizes, exclusive=True)
      # The script's later batches count at their previous selection.
      include_later = options.later_batches != 'excluded'
      if include_later:
        current = tf.where(
          seen_before[:, None],
          old_models - center,
          as64(candidates[:, 0]) - center,
        )
      picked_rows = tf.cast(fixed_models, tf.float64) - center
      sum_u = fixed_sum - tf.cast(num_fixed, tf.float64) * center
      count = num_fixed
      ranks = tf.zeros([p], tf.int32)
      combos = tf.constant(combinations)  # [C, m]
      act_positions = tf.range(capacity)
      for b in range(num_slots):
        m_b = sizes[b]
        active = act_positions < m_b
        members = tf.gather(
          order, tf.minimum(starts[b] + act_positions, tf.maximum(p - 1, 0))
        )
        later = tf.gather(order, tf.range(starts[b] + m_b, p))
        if include_later:
          later_models = tf.gather(current, later)
        else:
          later, later_models = later[:0], picked_rows[:0]
        base_sum = sum_u + tf.reduce_sum(later_models, axis=0)
        big_m = tf.cast(count + m_b + tf.shape(later)[0], tf.float64)
        u = as64(tf.gather(candidates, members)) - center  # [m, K, D]
        ok = tf.logical_and(
          tf.gather(ranked_valid, members), active[:, None]
        )  # [m, K]
        chosen = combos + act_positions[None, :] * k  # [C, m] flat indices
        act = tf.cast(active, tf.float64)[None, :]
        flat = tf.reshape(u, [capacity * k, -1])
        if options.divergence == 'squared_l2':
          f = tf.gather(candidate_losses, members)  # [m, K]
          s = tf.reshape(tf.reduce_sum(tf.square(flat), axis=1), [capacity, k])
          a = tf.reshape(tf.linalg.matvec(flat, base_sum), [capacity, k])
          gram = tf.linalg.matmul(flat, flat, transpose_b=True)

          def pick(table, chosen=chosen, act=act):
            return tf.gather(tf.reshape(table, [-1]), chosen) * act

          linear = tf.reduce_sum(pick(f) + l_half * pick(s), axis=1) / big_m
          pair = tf.gather(
            tf.gather(gram, chosen), chosen, axis=2, batch_dims=1
          )  # [C, m, m]
          upper = tf.linalg.band_part(
            tf.ones_like(pair), 0, -1
          ) - tf.linalg.band_part(tf.ones_like(pair), 0, 0)
          act2 = act[:, :, None] * act[:, None, :]
          cross = tf.reduce_sum(pair * upper * act2, axis=[1, 2])
          quadratic = (
            2 * tf.reduce_sum(pick(a), axis=1)
            + tf.reduce_sum(pick(s), axis=1)
            + 2 * cross
          )
          score = linear - l_half / tf.square(big_m) * quadratic
        else:
          included = tf.concat([picked_rows, later_models], axis=0)

          def tensorwise_score(
            combo_row,
            flat=flat,
            act=act,
            base_sum=base_sum,
            big_m=big_m,
            active=active,
            included=included,
          ):
            rows_c = tf.gather(flat, combo_row) * tf.transpose(act)  # [m, D]
            mean = (base_sum + tf.reduce_sum(rows_c, axis=0)) / big_m
            own = tf.boolean_mask(rows_c, active)
            return tensorwise_distance(tf.concat([included, own], axis=0), mean)

          score = tf.map_fn(
            tensorwise_score, chosen, fn_output_signature=tf.float64
          )
        feasible = tf.reduce_all(
          tf.logical_or(
            tf.gather(tf.reshape(ok, [-1]), chosen),
            tf.logical_and(
              tf.logical_not(active)[None, :], tf.equal(combos, 0)
            ),
          ),
          axis=1,
        )
        score = tf.where(feasible, score, np.inf)
        best_ranks = combos[first_within_tolerance(score)]  # [m]
        real = tf.boolean_mask(members, active)
        real_ranks = tf.boolean_mask(best_ranks, active)
        ranks = tf.tensor_scatter_nd_update(ranks, real[:, None], real_ranks)
        picked = (
          as64(tf.gather(tf.gather(candidates, real), real_ranks, batch_dims=1))
          - center
        )
        sum_u += tf.reduce_sum(picked, axis=0)
        if options.divergence == 'tensorwise_norm':
          picked_rows = tf.concat([picked_rows, picked], axis=0)
        count += m_b
      return ranks

    selectors = {
      'approx': approx_selection,
      'newest': newest_selection,
      'random': random_selection,
    }
    is_warmup = t < options.warmup_rounds
    ranks = tf.cond(
      tf.logical_or(is_warmup, tf.equal(p, 0)),
      newest_selection,
      selectors[options.selection],
    )
    chosen_models = as64(tf.gather(candidates, ranks, batch_dims=1))  # [P, D]
    chosen_losses = tf.gather(candidate_losses, ranks, batch_dims=1)
    newest_models = as64(candidates[:, 0])
    newest_losses = candidate_losses[:, 0]
    num_seen = num_fixed + p
    new_sums = collections.OrderedDict(
      selected_sum=fixed_sum + tf.reduce_sum(chosen_models, axis=0),
      selected_square_sum=fixed_square
      + tf.reduce_sum(tf.square(chosen_models)),
      selected_loss_sum=fixed_loss + tf.reduce_sum(chosen_losses),
      num_seen=num_seen,
    )

    def fedavg():
      mass = weights / tf.reduce_sum(weights)
      return tf.linalg.matvec(models, mass, transpose_a=True)

    def memory_average():
      return tf.cast(
        new_sums['selected_sum'] / tf.cast(num_seen, tf.float64), tf.float32
      )

    use_fedavg = tf.logical_and(
      is_warmup, tf.constant(options.warmup_aggregation == 'fedavg')
    )
    new = tf.cond(
      tf.equal(p, 0),
      lambda: w,  # Nobody to aggregate: the model stays.
      lambda: tf.cond(use_fedavg, fedavg, memory_average),
    )
    measurements = collections.OrderedDict(
      num_participants=p,
      num_seen=num_seen,
      older_selected=tf.reduce_sum(tf.cast(ranks > 0, tf.int32)),
      objective_newest=objective(
        fixed_sum + tf.reduce_sum(newest_models, axis=0),
        fixed_square + tf.reduce_sum(tf.square(newest_models)),
        fixed_loss + tf.reduce_sum(newest_losses),
        num_seen,
      ),
      objective_selected=objective(
        new_sums['selected_sum'],
        new_sums['selected_square_sum'],
        new_sums['selected_loss_sum'],
        num_seen,
      ),
      warmup=tf.cast(is_warmup, tf.int32),
    )
    return ranks, new, new_sums, measurements

  return select


def rank_slots(stamps, k: int):
  """[P, S] round stamps (-1: empty) -> the K newest slots' indices [P, K]."""
  return tf.argsort(stamps, axis=1, direction='DESCENDING', stable=True)[:, :k]


def leaf_sizes(trainable_type: Any) -> list[int]:
  """Element counts of the trainable tensors, in flat order."""
  return [
    value_types.num_elements(t) for t in value_types.leaf_types(trainable_type)
  ]


def build_fedcda_finalizer(
  model_weights_type: tff.StructType,
  update_type: tff.Type,
  *,
  num_clients: int,
  max_clients: int,
  options: FedCdaOptions = FedCdaOptions(),
  max_state_bytes: int = DEFAULT_MAX_STATE_BYTES,
) -> tff.learning.templates.FinalizerProcess:
  """The FedCDA finalizer (history in the state).

  Args:
    model_weights_type: The `tff.learning.models.ModelWeights` type.
    update_type: The client update's type (`OrderedDict(delta, loss,
      client_id)`), collected by `CollectAllFactory`.
    num_clients: N, the population: ids are in [0, N).
    max_clients: The largest cohort (the collect-all capacity).
    options: K, B, L, T_w, the seed and the diagnostic switches.
    max_state_bytes: Refuse a larger history (N K D 4 bytes).

  Returns:
    A `FinalizerProcess`. Measurements: `num_participants`, `num_seen`,
    `older_selected` (participants whose selection is not their newest
    model), `objective_newest` and `objective_selected` (J over all seen
    clients with every participant at its newest model, and as selected),
    `warmup` (1 in warm-up rounds).

  Raises:
    ValueError: On bad arguments.
    HistoryTooLargeError: A history above `max_state_bytes` (a ValueError).
  """
  if int(num_clients) < 1 or int(max_clients) < 1:
    raise ValueError(
      'FedCDA num_clients and max_clients must be >= 1, got '
      f'{num_clients}, {max_clients}.'
    )
  server_step.check_model_weights_type(model_weights_type)
  trainable_type = model_weights_type.trainable
  size = collect.flat_size(trainable_type)
  n, k = num_clients, options.memory_size
  state_bytes = n * k * size * 4
  if state_bytes > max_state_bytes:
    raise HistoryTooLargeError(
      f'FedCDA keeps {n} clients x {k} models x {size:,} '
      f'parameters = {state_bytes / 2**20:,.0f} MiB of history in its TFF '
      f'state, above max_state_bytes={max_state_bytes / 2**20:,.0f} MiB '
      '(TFF serialises the state every round, at about 33 MB/s, and a '
      'value cannot exceed 2 GB). Use the external history store '
      '(build_fedcda_process(history_store=...), in memory or '
      'memory-mapped on disk), fewer clients, a smaller memory_size or '
      'model, or raise max_state_bytes if the machine allows it.'
    )
  select = build_selection(options, max_clients, leaf_sizes(trainable_type))
  update_type = check_update_type(update_type, trainable_type)

  def initial_state():
    return collections.OrderedDict(
      round=tf.constant(0, tf.int32),
      history=tf.zeros([n, k, size], tf.float32),
      losses=tf.zeros([n, k], tf.float32),
      stamps=tf.fill([n, k], -1),
      selected=tf.fill([n], -1),
      **initial_sums(size),
    )

  def step(state, weights, collected):
    w = collect.flatten(weights)
    ids, models, losses, part_weights = participants(
      w, collected, update_type, n
    )
    p = tf.shape(ids)[0]
    t = state['round']
    history, stored_losses = state['history'], state['losses']
    stamps, selected = state['stamps'], state['selected']
    # The participants' old selections, before the cache write.
    old_slots = tf.gather(selected, ids)
    old_index = tf.stack([ids, tf.maximum(old_slots, 0)], 1)
    old_models = tf.gather_nd(history, old_index)
    old_losses = tf.gather_nd(stored_losses, old_index)
    fixed_models = tf.zeros([0, size], tf.float32)
    if options.divergence == 'tensorwise_norm':
      is_participant = tf.scatter_nd(ids[:, None], tf.ones([p], tf.bool), [n])
      others = tf.where(
        tf.logical_and(selected >= 0, tf.logical_not(is_participant))
      )[:, 0]
      others = tf.cast(others, tf.int32)
      fixed_models = tf.gather_nd(
        history, tf.stack([others, tf.gather(selected, others)], 1)
      )
    # Ring buffer: the new model replaces an empty slot, else the oldest.
    slot = tf.argmin(tf.gather(stamps, ids), axis=1, output_type=tf.int32)
    new_index = tf.stack([ids, slot], 1)
    history = tf.tensor_scatter_nd_update(history, new_index, models)
    stored_losses = tf.tensor_scatter_nd_update(
      stored_losses, new_index, losses
    )
    stamps = tf.tensor_scatter_nd_update(stamps, new_index, tf.fill([p], t))
    sums = collections.OrderedDict((name, state[name]) for name in SUMS)
    participant_stamps = tf.gather(stamps, ids)
    ranked_slots = rank_slots(participant_stamps, k)  # [P, K]
    ranked_index = tf.stack(
      [tf.broadcast_to(ids[:, None], tf.shape(ranked_slots)), ranked_slots],
      axis=2,
    )
    ranks, new, sums, measurements = select(
      t,
      w,
      ids,
      models,
      part_weights,
      sums,
      old_slots >= 0,
      old_models,
      old_losses,
      tf.gather_nd(history, ranked_index),
      tf.gather_nd(stored_losses, ranked_index),
      tf.gather(participant_stamps, ranked_slots, batch_dims=1) >= 0,
      fixed_models,
    )
    chosen_slots = tf.gather(ranked_slots, ranks, batch_dims=1)
    new_state = collections.OrderedDict(
      round=t + 1,
      history=history,
      losses=stored_losses,
      stamps=stamps,
      selected=tf.tensor_scatter_nd_update(
        selected, ids[:, None], chosen_slots
      ),
      **sums,
    )
    measurements = with_dropped(measurements, collected['weights'], p)
    return new_state, collect.unflatten(new, trainable_type), measurements

  return server_step.build_server_step_finalizer(
    model_weights_type,
    on_collected.collected_type(update_type),
    initial_state,
    step,
  )
