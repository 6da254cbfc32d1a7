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
same rule (this module's `build_selection`) with the history in a keyed
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
from typing import Any, NamedTuple, Union

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators import options
from tff_aggregators import value_types
from tff_aggregators.aggregators import collect
from tff_aggregators.client_works import identified
from tff_aggregators.finalizers import on_collected
from tff_aggregators.finalizers import server_step

DEFAULT_MAX_STATE_BYTES = 512 * 2**20
_MAX_COMBINATIONS = 1 << 16
# Who is given num_clients, for the in-graph id check's message.
_BUILDERS = 'build_fedcda_process (or build_fedcda_finalizer)'

# FedCdaOptions' fields with a fixed set of values, and their enums.
_ENUM_FIELDS = (
  ('selection', options.FedCdaSelection),
  ('divergence', options.FedCdaDivergence),
  ('later_batches', options.FedCdaLaterBatches),
  ('warmup_aggregation', options.FedCdaWarmupAggregation),
  ('batch_param', options.FedCdaBatchParam),
)


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
  selection: Union[str, options.FedCdaSelection] = 'approx'
  divergence: Union[str, options.FedCdaDivergence] = 'squared_l2'
  later_batches: Union[str, options.FedCdaLaterBatches] = 'excluded'
  warmup_aggregation: Union[str, options.FedCdaWarmupAggregation] = 'fedavg'
  batch_param: Union[str, options.FedCdaBatchParam] = 'num_batches'

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
    for name, enum_cls in _ENUM_FIELDS:  # Frozen: set through object.
      member = options.parse(enum_cls, getattr(self, name), name)
      object.__setattr__(self, name, member)

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

  `on_collected.valid_client_models` (positive finite weight, finite row),
  plus an id in [0, N) and the client-id order.

  Args:
    w: The flat global model [D].
    collected: `CollectAllFactory`'s result (rows of id, delta, loss).
    update_type: The client update type (`check_update_type`).
    num_clients: N. Id -1 (an empty dataset) is left out; an id outside
      [-1, N) or twice in the round fails the round (`check_ids`).

  Returns:
    (ids [P] int32, models [P, D] = w - delta, losses [P], weights [P]).
  """
  rows = collected['values']
  update = collect.unflatten(rows, update_type, cast=False)
  deltas = tf.concat(
    [
      tf.reshape(leaf, [tf.shape(rows)[0], -1])
      for leaf in tf.nest.flatten(update['delta'])
    ],
    axis=1,
  )
  ids = check_ids(tf.cast(tf.round(update['client_id']), tf.int32), num_clients)
  models, weights, valid = on_collected.valid_client_models(
    w,
    collected,
    deltas=deltas,
    also_valid=tf.logical_and(ids >= 0, ids < num_clients),
  )
  # Id order, so that the seeded batch split does not depend on the order
  # clients arrive in (several TFF workers).
  ids = tf.boolean_mask(ids, valid)
  by_id = tf.argsort(ids)
  return (
    tf.gather(ids, by_id),
    tf.gather(models, by_id),
    tf.gather(tf.boolean_mask(update['loss'], valid), by_id),
    tf.gather(weights, by_id),
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
    message=identified.outside_message(None, num_clients, _BUILDERS),
  )
  non_negative = tf.debugging.assert_greater_equal(
    ids, -1, message=identified.negative_message()
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


@dataclasses.dataclass(frozen=True)
class SelectionPlan:
  """What every round's selection uses besides its inputs (`selection_plan`).

  Attributes:
    options: The settings.
    num_slots: Batch slots per round (`FedCdaOptions.batching`).
    capacity: m, the largest batch.
    combinations: [C, m] int32, every combination of ranks for a full batch,
      newest first (`selection='approx'`; else one row of zeros).
    offsets: Where each model tensor starts in the flat model, and the end.
  """

  options: FedCdaOptions
  num_slots: int
  capacity: int
  combinations: np.ndarray
  offsets: np.ndarray


def selection_plan(
  options: FedCdaOptions, max_clients: int, leaf_sizes: list[int]
) -> SelectionPlan:
  """The batch layout and combinations for cohorts up to `max_clients`."""
  k = options.memory_size
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
  return SelectionPlan(
    options=options,
    num_slots=num_slots,
    capacity=capacity,
    combinations=combinations,
    offsets=np.cumsum([0] + list(leaf_sizes)),
  )


class RoundInputs(NamedTuple):
  """A round's selection inputs, in the order `build_selection`'s takes them.

  Attributes:
    t: The round (int32).
    w: The global model [D] float32.
    ids: [P] the participants (`participants`), in id order.
    models: [P, D] their new models.
    weights: [P] their weights (for the FedAvg warm-up).
    sums: The running sums (`SUMS`: `selected_sum` float64 [D],
      `selected_square_sum`, `selected_loss_sum`, `num_seen`), the
      participants' old selections included.
    seen_before: [P] bool, whether each participant has a selection.
    old_models: [P, D] each participant's previous selection (read before
      this round's cache write; any model where `seen_before` is false).
    old_losses: [P] their losses.
    candidates: [P, K, D] each participant's cached models after this
      round's write, newest first (`rank_slots`).
    candidate_losses: [P, K] their losses.
    candidate_valid: [P, K] bool, which candidates exist.
    fixed_models: [A, D] the non-participants' selected models, read only by
      `divergence='tensorwise_norm'` (else a [0, D] tensor).
  """

  t: Any
  w: Any
  ids: Any
  models: Any
  weights: Any
  sums: Any
  seen_before: Any
  old_models: Any
  old_losses: Any
  candidates: Any
  candidate_losses: Any
  candidate_valid: Any
  fixed_models: Any


class FixedSums(NamedTuple):
  """The running sums without this round's participants (float64).

  Attributes:
    total: [D] sum of the other seen clients' selected models.
    square: Sum of their squared norms.
    loss: Sum of their losses.
    count: How many they are (int32).
  """

  total: Any
  square: Any
  loss: Any
  count: Any


def without_participants(inputs: RoundInputs) -> FixedSums:
  """The sums with the participants' old selections taken out (Eq. 7).

  Eq. 7 re-selects only this round's participants; every other seen client
  stays at its selection.
  """
  mask = tf.cast(inputs.seen_before, tf.float64)
  old_models = tf.cast(inputs.old_models, tf.float64)
  old_losses = tf.cast(inputs.old_losses, tf.float64)
  sums = inputs.sums
  return FixedSums(
    total=sums['selected_sum']
    - tf.linalg.matvec(old_models, mask, transpose_a=True),
    square=sums['selected_square_sum']
    - tf.reduce_sum(mask * tf.reduce_sum(tf.square(old_models), axis=1)),
    loss=sums['selected_loss_sum'] - tf.reduce_sum(mask * old_losses),
    count=sums['num_seen']
    - tf.reduce_sum(tf.cast(inputs.seen_before, tf.int32)),
  )


def objective(total_sum, square_sum, loss_sum, count, smoothness):
  """J of Eqs. 5 and 8 over `count` included clients, from their sums.

  J = (1/M) sum_n f_n + (L/2M) sum_n ||w_n - mean||^2, where the second sum
  is sum_n ||w_n||^2 - M ||mean||^2 (uncentred; for the measurements only).

  Args:
    total_sum: [D] float64, sum of the included models.
    square_sum: Sum of their squared norms.
    loss_sum: Sum of their losses.
    count: M (0 gives 0).
    smoothness: L.

  Returns:
    J, float64.
  """
  l_half = smoothness / 2.0
  m = tf.cast(count, tf.float64)
  mean = tf.math.divide_no_nan(total_sum, m)
  return tf.math.divide_no_nan(loss_sum, m) + l_half * (
    tf.math.divide_no_nan(square_sum, m) - tf.reduce_sum(tf.square(mean))
  )


def tensorwise_distance(models, mean, offsets):
  """The script's divergence: sum over rows and tensors of ||mean_l - row_l||.

  Args:
    models: [M, D] the included models (any common centre).
    mean: [D] their mean (the same centre).
    offsets: Where each tensor starts in the flat model, and the end.

  Returns:
    The sum of the non-squared per-tensor distances (no loss term).
  """
  diff = models - mean[tf.newaxis, :]
  return tf.add_n(
    [
      tf.reduce_sum(
        tf.sqrt(
          tf.reduce_sum(tf.square(diff[:, offsets[i] : offsets[i + 1]]), axis=1)
        )
      )
      for i in range(len(offsets) - 1)
    ]
  )


def newest_selection(p):
  """Every participant at its newest model (rank 0): warm-up, 'newest'."""
  return tf.zeros([p], tf.int32)


def random_selection(seed: int, t, p, candidate_valid):
  """A uniformly random cached model per participant (`selection='random'`).

  The paper's Fig. 2a baseline, seeded by (seed, t + 2^20).
  """
  count = tf.reduce_sum(tf.cast(candidate_valid, tf.int32), axis=1)
  u = tf.random.stateless_uniform(
    [p], seed=tf.stack([tf.constant(seed), t + (1 << 20)])
  )
  return tf.minimum(
    tf.cast(u * tf.cast(count, tf.float32), tf.int32), count - 1
  )


def batch_sizes(plan: SelectionPlan, p):
  """[num_slots] int32: each batch's size for P participants (0: unused).

  `batch_param='num_batches'` (Eq. 8): min(B, P) batches whose sizes differ
  by at most one, larger first (NumPy's array_split); 'clients_per_batch'
  (the script): batches of B clients, the last smaller.
  """
  num_slots, capacity = plan.num_slots, plan.capacity
  if plan.options.batch_param == 'num_batches':
    num_b = tf.minimum(num_slots, p)
    base, extra = p // tf.maximum(num_b, 1), p % tf.maximum(num_b, 1)
    sizes = base + tf.cast(tf.range(num_slots) < extra, tf.int32)
    return tf.where(tf.range(num_slots) < num_b, sizes, 0)
  return tf.clip_by_value(p - tf.range(num_slots) * capacity, 0, capacity)


class SearchBatch(NamedTuple):
  """One batch of Eq. 8's search, centred at the global model w.

  Attributes:
    members: [m] the batch's participant indices (positions past its size
      repeat a participant and are inactive).
    active: [m] bool, the batch's real members.
    act: [1, m] float64, `active`.
    rows: [m K, D] float64, their cached models minus w, member-major.
    combos: [C, m] int32, every combination of ranks, newest first.
    chosen: [C, m] each combination's indices into `rows`.
    base_sum: [D] float64, the sum of the other included models minus w.
    big_m: M, how many clients the objective includes (float64).
  """

  members: Any
  active: Any
  act: Any
  rows: Any
  combos: Any
  chosen: Any
  base_sum: Any
  big_m: Any


def squared_l2_scores(plan: SelectionPlan, batch: SearchBatch, losses):
  """Eq. 8's J for every combination, less the terms they all share.

  With u_j = w_j - w the batch's chosen models centred, S the others' sum
  (`base_sum`) and M the included clients, M J equals sum_j (f_j +
  (L/2)||u_j||^2) - (L/2M) ||S + sum_j u_j||^2 plus the fixed clients'
  terms; expanding the norm uses only s_j = ||u_j||^2, a_j = <u_j, S> and the
  Gram matrix of the candidates (float64, centred: no cancellation).

  Args:
    plan: The selection plan.
    batch: The batch.
    losses: [P, K] the participants' candidate losses.

  Returns:
    [C] float64 scores (J minus a constant).
  """
  l_half, k = plan.options.smoothness / 2.0, plan.options.memory_size
  rows, chosen, act = batch.rows, batch.chosen, batch.act
  f = tf.gather(tf.cast(losses, tf.float64), batch.members)  # [m, K]
  s = tf.reshape(tf.reduce_sum(tf.square(rows), axis=1), [plan.capacity, k])
  a = tf.reshape(tf.linalg.matvec(rows, batch.base_sum), [plan.capacity, k])
  gram = tf.linalg.matmul(rows, rows, transpose_b=True)

  def pick(table):  # [C, m]: each combination's entries, 0 if inactive.
    return tf.gather(tf.reshape(table, [-1]), chosen) * act

  linear = tf.reduce_sum(pick(f) + l_half * pick(s), axis=1) / batch.big_m
  pair = tf.gather(
    tf.gather(gram, chosen), chosen, axis=2, batch_dims=1
  )  # [C, m, m]
  upper = tf.linalg.band_part(tf.ones_like(pair), 0, -1) - tf.linalg.band_part(
    tf.ones_like(pair), 0, 0
  )
  act2 = act[:, :, None] * act[:, None, :]
  cross = tf.reduce_sum(pair * upper * act2, axis=[1, 2])
  quadratic = (
    2 * tf.reduce_sum(pick(a), axis=1)
    + tf.reduce_sum(pick(s), axis=1)
    + 2 * cross
  )
  return linear - l_half / tf.square(batch.big_m) * quadratic


def tensorwise_scores(plan: SelectionPlan, batch: SearchBatch, included):
  """The script's objective (`divergence='tensorwise_norm'`) per combination.

  Args:
    plan: The selection plan.
    batch: The batch.
    included: [A, D] float64, the other included models minus w.

  Returns:
    [C] float64: `tensorwise_distance` over the included models and the
    combination's, about their mean.
  """

  def score(combo_row):
    rows_c = tf.gather(batch.rows, combo_row) * tf.transpose(batch.act)
    mean = (batch.base_sum + tf.reduce_sum(rows_c, axis=0)) / batch.big_m
    own = tf.boolean_mask(rows_c, batch.active)
    return tensorwise_distance(
      tf.concat([included, own], axis=0), mean, plan.offsets
    )

  return tf.map_fn(score, batch.chosen, fn_output_signature=tf.float64)


def best_feasible(batch: SearchBatch, candidate_valid, score):
  """[m] the ranks of the best combination whose candidates all exist.

  An inactive position must be at rank 0; ties go to the first (newer)
  combination (`first_within_tolerance`).
  """
  ok = tf.logical_and(
    tf.gather(candidate_valid, batch.members), batch.active[:, None]
  )  # [m, K]
  feasible = tf.reduce_all(
    tf.logical_or(
      tf.gather(tf.reshape(ok, [-1]), batch.chosen),
      tf.logical_and(
        tf.logical_not(batch.active)[None, :], tf.equal(batch.combos, 0)
      ),
    ),
    axis=1,
  )
  score = tf.where(feasible, score, np.inf)
  return batch.combos[first_within_tolerance(score)]


class SearchState(NamedTuple):
  """What Eq. 8's search carries from batch to batch (centred at w).

  Attributes:
    ranks: [P] int32, the ranks chosen so far (0 for later batches).
    sum_u: [D] float64, the sum of the fixed included models minus w.
    count: How many they are (int32).
    picked_rows: [A, D] float64, those models minus w, read by
      `divergence='tensorwise_norm'` only (else empty).
  """

  ranks: Any
  sum_u: Any
  count: Any
  picked_rows: Any


def centred_choice(candidates, members, ranks, center):
  """[m, D] float64: each member's candidate at its rank, minus w."""
  chosen = tf.gather(tf.gather(candidates, members), ranks, batch_dims=1)
  return tf.cast(chosen, tf.float64) - center


def search_batch(plan, inputs, center, state, order, start, size, later_rows):
  """Solves one batch of Eq. 8 exhaustively; the state after it.

  Args:
    plan: The selection plan.
    inputs: The round's inputs.
    center: w, float64.
    state: The search so far.
    order: [P] the participants' seeded permutation.
    start: Where the batch starts in `order`.
    size: Its size (0: an unused slot).
    later_rows: [P, D] float64, what later batches count as
      (`later_batches='included_at_previous_selection'`), or None (Eq. 8:
      they are left out).

  Returns:
    The `SearchState` with the batch's ranks chosen and its models fixed.
  """
  p = tf.shape(inputs.ids)[0]
  k = plan.options.memory_size
  positions = tf.range(plan.capacity)
  active = positions < size
  members = tf.gather(
    order, tf.minimum(start + positions, tf.maximum(p - 1, 0))
  )
  later = tf.gather(order, tf.range(start + size, p))
  if later_rows is not None:
    later_models = tf.gather(later_rows, later)
  else:
    later, later_models = later[:0], state.picked_rows[:0]
  candidates = tf.cast(tf.gather(inputs.candidates, members), tf.float64)
  combos = tf.constant(plan.combinations)
  batch = SearchBatch(
    members=members,
    active=active,
    act=tf.cast(active, tf.float64)[None, :],
    rows=tf.reshape(candidates - center, [plan.capacity * k, -1]),
    combos=combos,
    chosen=combos + positions[None, :] * k,
    base_sum=state.sum_u + tf.reduce_sum(later_models, axis=0),
    big_m=tf.cast(state.count + size + tf.shape(later)[0], tf.float64),
  )
  if plan.options.divergence == 'squared_l2':
    score = squared_l2_scores(plan, batch, inputs.candidate_losses)
  else:
    included = tf.concat([state.picked_rows, later_models], axis=0)
    score = tensorwise_scores(plan, batch, included)
  best_ranks = best_feasible(batch, inputs.candidate_valid, score)
  real = tf.boolean_mask(members, active)
  real_ranks = tf.boolean_mask(best_ranks, active)
  picked = centred_choice(inputs.candidates, real, real_ranks, center)
  picked_rows = state.picked_rows
  if plan.options.divergence == 'tensorwise_norm':
    picked_rows = tf.concat([picked_rows, picked], axis=0)
  return SearchState(
    ranks=tf.tensor_scatter_nd_update(state.ranks, real[:, None], real_ranks),
    sum_u=state.sum_u + tf.reduce_sum(picked, axis=0),
    count=state.count + size,
    picked_rows=picked_rows,
  )


def approx_selection(plan: SelectionPlan, t, inputs, fixed: FixedSums):
  """Eq. 8's batched stochastic greedy selection: each participant's rank.

  The participants, in a permutation seeded by (seed, t), are split into
  batches (`batch_sizes`); batch by batch, with the non-participants and
  the earlier batches fixed and the later batches excluded (the script:
  included, `script_later_rows`), the combination of cached models
  minimising J is found exhaustively (`search_batch`).

  Args:
    plan: The selection plan.
    t: The round.
    inputs: The round's inputs.
    fixed: The sums without the participants (`without_participants`).

  Returns:
    [P] int32 ranks into each participant's candidates (0: the newest).
  """
  options = plan.options
  p = tf.shape(inputs.ids)[0]
  center = tf.cast(inputs.w, tf.float64)
  order = tf.argsort(
    tf.random.stateless_uniform(
      [p], seed=tf.stack([tf.constant(options.seed), t])
    )
  )
  sizes = batch_sizes(plan, p)
  starts = tf.cumsum(sizes, exclusive=True)
  later_rows = None
  if options.later_batches != 'excluded':
    later_rows = script_later_rows(inputs, center)
  state = SearchState(
    ranks=tf.zeros([p], tf.int32),
    sum_u=fixed.total - tf.cast(fixed.count, tf.float64) * center,
    count=fixed.count,
    picked_rows=tf.cast(inputs.fixed_models, tf.float64) - center,
  )
  for b in range(plan.num_slots):
    state = search_batch(
      plan, inputs, center, state, order, starts[b], sizes[b], later_rows
    )
  return state.ranks


def script_later_rows(inputs: RoundInputs, center):
  """[P, D] what later batches count as in the script, minus w (float64).

  `later_batches='included_at_previous_selection'`: each participant's
  previous selection, or its newest model when it has none.
  """
  return tf.where(
    inputs.seen_before[:, None],
    tf.cast(inputs.old_models, tf.float64) - center,
    tf.cast(inputs.candidates[:, 0], tf.float64) - center,
  )


def selection_ranks(plan: SelectionPlan, inputs: RoundInputs, fixed):
  """[P] each participant's chosen rank: newest in warm-up, else by option.

  Eq. 8 (`selection='approx'`) after the warm-up of Algorithm 1; the
  diagnostic 'newest' and 'random' selections instead.
  """
  options, t = plan.options, inputs.t
  p = tf.shape(inputs.ids)[0]
  selectors = {
    'approx': lambda: approx_selection(plan, t, inputs, fixed),
    'newest': lambda: newest_selection(p),
    'random': lambda: random_selection(
      options.seed, t, p, inputs.candidate_valid
    ),
  }
  return tf.cond(
    tf.logical_or(t < options.warmup_rounds, tf.equal(p, 0)),
    lambda: newest_selection(p),
    selectors[options.selection],
  )


def fedavg(models, weights):
  """FedAvg of the participants' models (the warm-up of Algorithm 1)."""
  mass = weights / tf.reduce_sum(weights)
  return tf.linalg.matvec(models, mass, transpose_a=True)


def memory_average(sums):
  """The uniform mean of every seen client's selected model (Eq. 4).

  The denominator is the clients seen, not N (docs/methods/fedcda.md).
  """
  return tf.cast(
    sums['selected_sum'] / tf.cast(sums['num_seen'], tf.float64), tf.float32
  )


def new_global_model(options: FedCdaOptions, inputs: RoundInputs, sums):
  """The round's new global model [D] float32.

  w when nobody participates; FedAvg in the warm-up (Algorithm 1; the
  script's `warmup_aggregation='all_seen_newest'` instead averages every seen
  client's newest model); else `memory_average` of the selections.
  """
  use_fedavg = tf.logical_and(
    inputs.t < options.warmup_rounds,
    tf.constant(options.warmup_aggregation == 'fedavg'),
  )
  return tf.cond(
    tf.equal(tf.shape(inputs.ids)[0], 0),
    lambda: inputs.w,  # Nobody to aggregate: the model stays.
    lambda: tf.cond(
      use_fedavg,
      lambda: fedavg(inputs.models, inputs.weights),
      lambda: memory_average(sums),
    ),
  )


def with_selection(fixed: FixedSums, chosen_models, chosen_losses, p):
  """The running sums (`SUMS`) with the participants at their selections."""
  return collections.OrderedDict(
    selected_sum=fixed.total + tf.reduce_sum(chosen_models, axis=0),
    selected_square_sum=fixed.square + tf.reduce_sum(tf.square(chosen_models)),
    selected_loss_sum=fixed.loss + tf.reduce_sum(chosen_losses),
    num_seen=fixed.count + p,
  )


def selection_measurements(options, inputs, fixed, ranks, sums):
  """The round's measurements (listed in `build_fedcda_finalizer`).

  `objective_newest` is J with every participant at its newest model,
  `objective_selected` J as selected, both over all seen clients.
  """
  newest_models = tf.cast(inputs.candidates[:, 0], tf.float64)
  newest_losses = tf.cast(inputs.candidate_losses, tf.float64)[:, 0]
  return collections.OrderedDict(
    num_participants=tf.shape(inputs.ids)[0],
    num_seen=sums['num_seen'],
    older_selected=tf.reduce_sum(tf.cast(ranks > 0, tf.int32)),
    objective_newest=objective(
      fixed.total + tf.reduce_sum(newest_models, axis=0),
      fixed.square + tf.reduce_sum(tf.square(newest_models)),
      fixed.loss + tf.reduce_sum(newest_losses),
      sums['num_seen'],
      options.smoothness,
    ),
    objective_selected=objective(
      sums['selected_sum'],
      sums['selected_square_sum'],
      sums['selected_loss_sum'],
      sums['num_seen'],
      options.smoothness,
    ),
    warmup=tf.cast(inputs.t < options.warmup_rounds, tf.int32),
  )


def select_round(plan: SelectionPlan, inputs: RoundInputs):
  """The round's selection and new model from the participants' rows.

  Args:
    plan: The selection plan (`selection_plan`).
    inputs: The round's inputs.

  Returns:
    (chosen rank per participant [P], new model [D] float32, new sums,
    measurements).
  """
  p = tf.shape(inputs.ids)[0]
  fixed = without_participants(inputs)
  ranks = selection_ranks(plan, inputs, fixed)
  chosen_models = tf.cast(
    tf.gather(inputs.candidates, ranks, batch_dims=1), tf.float64
  )  # [P, D]
  chosen_losses = tf.gather(
    tf.cast(inputs.candidate_losses, tf.float64), ranks, batch_dims=1
  )
  sums = with_selection(fixed, chosen_models, chosen_losses, p)
  new = new_global_model(plan.options, inputs, sums)
  measurements = selection_measurements(
    plan.options, inputs, fixed, ranks, sums
  )
  return ranks, new, sums, measurements


def build_selection(
  options: FedCdaOptions, max_clients: int, leaf_sizes: list[int]
):
  """The round's selection and new model from the participants' rows.

  Shared by both history backends, so they compute the same thing. The
  returned TF function takes the `RoundInputs` fields, positionally, and
  returns (chosen rank per participant [P], new model [D] float32, new
  sums, measurements) (`select_round`). Float64 copies are made per batch
  only, so the working set is the float32 candidates plus O(P x D) float64.

  Args:
    options: The settings.
    max_clients: The largest cohort.
    leaf_sizes: Element counts of the model's tensors, in flat order.

  Returns:
    The TF function.
  """
  plan = selection_plan(options, max_clients, leaf_sizes)

  def select(*inputs):
    return select_round(plan, RoundInputs(*inputs))

  return select


def rank_slots(stamps, k: int):
  """[P, S] round stamps (-1: empty) -> the K newest slots' indices [P, K]."""
  return tf.argsort(stamps, axis=1, direction='DESCENDING', stable=True)[:, :k]


def leaf_sizes(trainable_type: Any) -> list[int]:
  """Element counts of the trainable tensors, in flat order."""
  return [
    value_types.num_elements(t) for t in value_types.leaf_types(trainable_type)
  ]


def check_history_size(n: int, k: int, size: int, max_state_bytes: int):
  """Raises `HistoryTooLargeError` if N K D float32 exceed the bound."""
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


def empty_state(n: int, k: int, size: int) -> collections.OrderedDict:
  """The in-state history (empty: stamps -1), selections and sums."""
  return collections.OrderedDict(
    round=tf.constant(0, tf.int32),
    history=tf.zeros([n, k, size], tf.float32),
    losses=tf.zeros([n, k], tf.float32),
    stamps=tf.fill([n, k], -1),
    selected=tf.fill([n], -1),
    **initial_sums(size),
  )


def other_selections(history, selected, ids):
  """[A, D] the selected models of the seen clients not in `ids`."""
  n, p = selected.shape[0], tf.shape(ids)[0]
  is_participant = tf.scatter_nd(ids[:, None], tf.ones([p], tf.bool), [n])
  others = tf.where(
    tf.logical_and(selected >= 0, tf.logical_not(is_participant))
  )[:, 0]
  others = tf.cast(others, tf.int32)
  return tf.gather_nd(
    history, tf.stack([others, tf.gather(selected, others)], 1)
  )


def write_cache(state, ids, models, losses):
  """(history, losses, stamps) with this round's models cached.

  A ring buffer: each new model replaces an empty slot, else the oldest.
  """
  t, stamps = state['round'], state['stamps']
  slot = tf.argmin(tf.gather(stamps, ids), axis=1, output_type=tf.int32)
  new_index = tf.stack([ids, slot], 1)
  return (
    tf.tensor_scatter_nd_update(state['history'], new_index, models),
    tf.tensor_scatter_nd_update(state['losses'], new_index, losses),
    tf.tensor_scatter_nd_update(
      stamps, new_index, tf.fill([tf.shape(ids)[0]], t)
    ),
  )


def in_state_round(plan, update_type, num_clients, state, w, collected):
  """One round of the in-state finalizer, on the flat global model `w`.

  Caches the participants' models (`write_cache`), reads their candidates
  newest first and selects (`select_round`).

  Returns:
    (new state, new flat model, measurements).
  """
  ids, models, losses, weights = participants(
    w, collected, update_type, num_clients
  )
  history, selected = state['history'], state['selected']
  # The participants' old selections, before the cache write.
  old_slots = tf.gather(selected, ids)
  old_index = tf.stack([ids, tf.maximum(old_slots, 0)], 1)
  fixed_models = tf.zeros([0, history.shape[-1]], tf.float32)
  if plan.options.divergence == 'tensorwise_norm':
    fixed_models = other_selections(history, selected, ids)
  new_history, new_losses, stamps = write_cache(state, ids, models, losses)
  participant_stamps = tf.gather(stamps, ids)
  ranked_slots = rank_slots(participant_stamps, plan.options.memory_size)
  ranked_index = tf.stack(
    [tf.broadcast_to(ids[:, None], tf.shape(ranked_slots)), ranked_slots],
    axis=2,
  )
  candidate_valid = (
    tf.gather(participant_stamps, ranked_slots, batch_dims=1) >= 0
  )
  ranks, new, sums, measurements = select_round(
    plan,
    RoundInputs(
      t=state['round'],
      w=w,
      ids=ids,
      models=models,
      weights=weights,
      sums=collections.OrderedDict((name, state[name]) for name in SUMS),
      seen_before=old_slots >= 0,
      old_models=tf.gather_nd(history, old_index),
      old_losses=tf.gather_nd(state['losses'], old_index),
      candidates=tf.gather_nd(new_history, ranked_index),
      candidate_losses=tf.gather_nd(new_losses, ranked_index),
      candidate_valid=candidate_valid,
      fixed_models=fixed_models,
    ),
  )
  chosen_slots = tf.gather(ranked_slots, ranks, batch_dims=1)
  new_state = collections.OrderedDict(
    round=state['round'] + 1,
    history=new_history,
    losses=new_losses,
    stamps=stamps,
    selected=tf.tensor_scatter_nd_update(selected, ids[:, None], chosen_slots),
    **sums,
  )
  p = tf.shape(ids)[0]
  return new_state, new, with_dropped(measurements, collected['weights'], p)


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
  check_history_size(n, k, size, max_state_bytes)
  plan = selection_plan(options, max_clients, leaf_sizes(trainable_type))
  update_type = check_update_type(update_type, trainable_type)

  def state_fn():
    return empty_state(n, k, size)

  def step(state, weights, collected):
    new_state, new, measurements = in_state_round(
      plan, update_type, n, state, collect.flatten(weights), collected
    )
    return new_state, collect.unflatten(new, trainable_type), measurements

  return server_step.build_server_step_finalizer(
    model_weights_type,
    on_collected.collected_type(update_type),
    state_fn,
    step,
  )
