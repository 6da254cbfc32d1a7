"""FedCDA: cross-round divergence-aware selection of cached client models.

Wang et al., "FedCDA: Federated Learning with Cross-Round Divergence-Aware
Aggregation", ICLR 2024 (spec `fedcda.md` sections 2.3-2.7). The server keeps
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
ties go to the first, i.e. newer, combination), with the centred
sufficient statistics of spec 2.7 in float64. The new global model is the
uniform mean of the selected models of every client seen so far. The
participants are taken in client-id order before the seeded permutation, so
the result does not depend on the order in which clients arrive.

The per-round cost does not grow with the clients seen: the finalizer keeps
the running float64 sums of the selected models, their squared norms and
losses, and touches only the participants' history rows. The history is the
finalizer's state, N x K x D float32 (N: the population, K: the memory, D:
the parameters), which TFF serialises every round: `build_fedcda_finalizer`
refuses states above `max_state_bytes` with the size and the alternatives.

Inputs: `CollectAllFactory`'s result over the identified client work's update
(`tff_aggregators.client_works.identified`): rows hold (client id, delta,
loss). Clients with weight 0, a non-finite row or an id outside [0, N) are
left out (a non-participant this round).
"""

import collections
import itertools

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators.aggregators import collect
from tff_aggregators.finalizers import on_collected

DEFAULT_MAX_STATE_BYTES = 512 * 2**20
_MAX_COMBINATIONS = 1 << 16


def _combinations(batch_size: int, memory_size: int) -> np.ndarray:
  """int32 [K**m, m]: candidate ranks per batch position, lexicographic."""
  return np.array(
      list(itertools.product(range(memory_size), repeat=batch_size)),
      np.int32,
  ).reshape([-1, batch_size])


def build_fedcda_finalizer(
    model_weights_type: tff.StructType,
    update_type: tff.Type,
    *,
    num_clients: int,
    max_clients: int,
    memory_size: int = 3,
    num_batches: int = 3,
    smoothness: float = 1.0,
    warmup_rounds: int = 50,
    seed: int = 0,
    max_state_bytes: int = DEFAULT_MAX_STATE_BYTES,
) -> tff.learning.templates.FinalizerProcess:
  """The FedCDA finalizer (history in the state).

  Args:
    model_weights_type: The `tff.learning.models.ModelWeights` type.
    update_type: The client update's type (`OrderedDict(delta, loss,
      client_id)`), collected by `CollectAllFactory`.
    num_clients: N, the population: ids are in [0, N).
    max_clients: The largest cohort (the collect-all capacity).
    memory_size: K, cached models per client (3).
    num_batches: B, selection batches per round (3).
    smoothness: L of the objective (1).
    warmup_rounds: T_w, FedAvg rounds before selection starts (50).
    seed: Seeds the batch split of each round.
    max_state_bytes: Refuse a larger history (N K D 4 bytes).

  Returns:
    A `FinalizerProcess`. Measurements: `num_participants`, `num_seen`,
    `older_selected` (participants whose selection is not their newest
    model), `objective_newest` and `objective_selected` (J over all seen
    clients with every participant at its newest model, and as selected),
    `warmup` (1 in warm-up rounds).

  Raises:
    ValueError: On bad arguments or a history above `max_state_bytes`.
  """
  for name, value in (('num_clients', num_clients),
                      ('max_clients', max_clients),
                      ('memory_size', memory_size),
                      ('num_batches', num_batches)):
    if int(value) < 1:
      raise ValueError(f'FedCDA {name} must be >= 1, got {value}.')
  if warmup_rounds < 0 or smoothness < 0:
    raise ValueError('warmup_rounds and smoothness must be >= 0, got '
                     f'{warmup_rounds}, {smoothness}.')
  trainable_type = model_weights_type.trainable
  size = collect.flat_size(trainable_type)
  state_bytes = num_clients * memory_size * size * 4
  if state_bytes > max_state_bytes:
    raise ValueError(
        f'FedCDA keeps {num_clients} clients x {memory_size} models x {size:,} '
        f'parameters = {state_bytes / 2**20:,.0f} MiB of history in its TFF '
        f'state, above max_state_bytes={max_state_bytes / 2**20:,.0f} MiB '
        '(TFF serialises the state every round, at about 33 MB/s, and a '
        'value cannot exceed 2 GB). Use fewer clients, a smaller memory_size '
        'or model, or raise max_state_bytes if the machine allows it.'
    )
  batch_capacity = -(-max_clients // num_batches)  # ceil
  if memory_size**batch_capacity > _MAX_COMBINATIONS:
    raise ValueError(
        f'FedCDA would enumerate {memory_size}**{batch_capacity} combinations '
        f'per batch (cohort {max_clients}, {num_batches} batches); use more '
        'batches or a smaller memory_size.'
    )
  combinations = _combinations(batch_capacity, memory_size)
  n, k, l_half = num_clients, memory_size, smoothness / 2.0
  update_type = tff.types.to_type(update_type)
  if (not isinstance(update_type, tff.StructType)
      or sorted(dir(update_type)) != ['client_id', 'delta', 'loss']
      or update_type.delta != trainable_type):
    raise ValueError(
        'FedCDA expects client updates OrderedDict(delta=<trainable weights>, '
        'loss, client_id), as tff_aggregators.client_works.identified '
        f'reports them; got {update_type}.'
    )

  @tff.tensorflow.computation
  def initial_state():
    return collections.OrderedDict(
        round=tf.constant(0, tf.int32),
        history=tf.zeros([n, k, size], tf.float32),
        losses=tf.zeros([n, k], tf.float32),
        stamps=tf.fill([n, k], -1),
        selected=tf.fill([n], -1),
        selected_sum=tf.zeros([size], tf.float64),
        selected_square_sum=tf.constant(0.0, tf.float64),
        selected_loss_sum=tf.constant(0.0, tf.float64),
        num_seen=tf.constant(0, tf.int32),
    )

  def split_rows(rows):
    """Collected rows [n, D + 2] -> (ids [n], deltas [n, D], losses [n])."""
    update = collect.unflatten(rows, update_type, cast=False)
    deltas = tf.concat([
        tf.reshape(leaf, [tf.shape(rows)[0], -1])
        for leaf in tf.nest.flatten(update['delta'])
    ], axis=1)
    return update['client_id'], deltas, update['loss']

  def objective(total_sum, square_sum, loss_sum, count):
    """J over the included clients from running sums (uncentred)."""
    m = tf.cast(count, tf.float64)
    mean = tf.math.divide_no_nan(total_sum, m)
    return tf.math.divide_no_nan(loss_sum, m) + l_half * (
        tf.math.divide_no_nan(square_sum, m) - tf.reduce_sum(tf.square(mean))
    )

  def server_step(state, weights, collected):
    w = collect.flatten(weights)
    rows, client_weights = collected['values'], collected['weights']
    raw_ids, deltas, raw_losses = split_rows(rows)
    ids = tf.cast(tf.round(raw_ids), tf.int32)
    valid = tf.logical_and(
        tf.logical_and(client_weights > 0, tf.math.is_finite(client_weights)),
        tf.reduce_all(tf.math.is_finite(rows), axis=1),
    )
    valid = tf.logical_and(valid, tf.logical_and(ids >= 0, ids < n))
    # Participants in id order, so that the seeded batch split does not
    # depend on the order clients arrive in (several TFF workers).
    ids = tf.boolean_mask(ids, valid)
    by_id = tf.argsort(ids)
    ids = tf.gather(ids, by_id)
    models = w[tf.newaxis, :] - tf.gather(tf.boolean_mask(deltas, valid),
                                          by_id)
    losses = tf.gather(tf.boolean_mask(raw_losses, valid), by_id)
    part_weights = tf.gather(tf.boolean_mask(client_weights, valid), by_id)
    p = tf.shape(ids)[0]
    t = state['round']
    history, stored_losses = state['history'], state['losses']
    stamps, selected = state['stamps'], state['selected']

    # Take the participants' old selections out of the running sums, before
    # the cache write can overwrite them.
    seen_before = tf.gather(selected, ids) >= 0
    old_index = tf.stack([ids, tf.maximum(tf.gather(selected, ids), 0)], 1)
    old_models = tf.cast(tf.gather_nd(history, old_index), tf.float64)
    old_losses = tf.cast(tf.gather_nd(stored_losses, old_index), tf.float64)
    mask = tf.cast(seen_before, tf.float64)
    fixed_sum = state['selected_sum'] - tf.linalg.matvec(
        old_models, mask, transpose_a=True)
    fixed_square = state['selected_square_sum'] - tf.reduce_sum(
        mask * tf.reduce_sum(tf.square(old_models), axis=1))
    fixed_loss = state['selected_loss_sum'] - tf.reduce_sum(mask * old_losses)
    num_fixed = state['num_seen'] - tf.reduce_sum(
        tf.cast(seen_before, tf.int32))

    # Ring buffer: the new model replaces an empty slot, else the oldest.
    participant_stamps = tf.gather(stamps, ids)  # [P, K]
    slot = tf.argmin(participant_stamps, axis=1, output_type=tf.int32)
    new_index = tf.stack([ids, slot], 1)
    history = tf.tensor_scatter_nd_update(history, new_index, models)
    stored_losses = tf.tensor_scatter_nd_update(stored_losses, new_index,
                                                losses)
    stamps = tf.tensor_scatter_nd_update(stamps, new_index, tf.fill([p], t))

    # Candidates of each participant, newest first: [P, K] slots, validity.
    participant_stamps = tf.gather(stamps, ids)
    ranked_slots = tf.argsort(participant_stamps, axis=1,
                              direction='DESCENDING', stable=True)
    ranked_valid = tf.gather(participant_stamps, ranked_slots,
                             batch_dims=1) >= 0
    candidates = tf.cast(tf.gather(
        tf.gather(history, ids), ranked_slots, batch_dims=1), tf.float64)
    candidate_losses = tf.cast(tf.gather(
        tf.gather(stored_losses, ids), ranked_slots, batch_dims=1), tf.float64)

    def warmup_selection():
      return tf.zeros([p], tf.int32)  # Rank 0: the newest model.

    def cda_selection():
      center = tf.cast(w, tf.float64)
      centred = candidates - center  # [P, K, D]
      order = tf.argsort(tf.random.stateless_uniform(
          [p], seed=tf.stack([tf.constant(seed), t])))
      num_b = tf.minimum(num_batches, p)
      # array_split: the first (p mod b) batches have one more client.
      base, extra = p // num_b, p % num_b
      batch_sizes = base + tf.cast(tf.range(num_batches) < extra, tf.int32)
      batch_sizes = tf.where(tf.range(num_batches) < num_b, batch_sizes, 0)
      batch_starts = tf.cumsum(batch_sizes, exclusive=True)
      sum_u = fixed_sum - tf.cast(num_fixed, tf.float64) * center
      count = num_fixed
      ranks = tf.zeros([p], tf.int32)
      combos = tf.constant(combinations)  # [C, m]
      for b in range(num_batches):
        m_b = batch_sizes[b]
        positions = tf.range(batch_capacity)
        active = positions < m_b
        members = tf.gather(order, tf.minimum(batch_starts[b] + positions,
                                              tf.maximum(p - 1, 0)))
        u = tf.gather(centred, members)  # [m, K, D]
        f = tf.gather(candidate_losses, members)  # [m, K]
        ok = tf.logical_and(tf.gather(ranked_valid, members),
                            active[:, None])  # [m, K]
        flat = tf.reshape(u, [batch_capacity * k, -1])
        s = tf.reshape(tf.reduce_sum(tf.square(flat), axis=1),
                       [batch_capacity, k])
        a = tf.reshape(tf.linalg.matvec(flat, sum_u), [batch_capacity, k])
        gram = tf.linalg.matmul(flat, flat, transpose_b=True)
        # Per combination: chosen flat index per position.
        chosen = combos + tf.range(batch_capacity)[None, :] * k  # [C, m]
        act = tf.cast(active, tf.float64)[None, :]
        pick = lambda table: tf.gather(tf.reshape(table, [-1]), chosen) * act
        big_m = tf.cast(count + m_b, tf.float64)
        linear = tf.reduce_sum(pick(f) + l_half * pick(s), axis=1) / big_m
        pair = tf.gather(tf.gather(gram, chosen), chosen, axis=2,
                         batch_dims=1)  # [C, m, m]
        upper = tf.linalg.band_part(tf.ones_like(pair), 0, -1) - tf.linalg.band_part(
            tf.ones_like(pair), 0, 0)
        act2 = act[:, :, None] * act[:, None, :]
        cross = tf.reduce_sum(pair * upper * act2, axis=[1, 2])
        quadratic = (2 * tf.reduce_sum(pick(a), axis=1)
                     + tf.reduce_sum(pick(s), axis=1) + 2 * cross)
        score = linear - l_half / tf.square(big_m) * quadratic
        feasible = tf.reduce_all(
            tf.logical_or(
                tf.gather(tf.reshape(ok, [-1]), chosen),
                tf.logical_and(tf.logical_not(active)[None, :],
                               tf.equal(combos, 0)),
            ),
            axis=1,
        )
        score = tf.where(feasible, score, np.inf)
        best = tf.argmin(score, output_type=tf.int32)
        best_ranks = combos[best]  # [m]
        # Write the batch's picks and add them to the fixed set.
        real = tf.boolean_mask(members, active)
        real_ranks = tf.boolean_mask(best_ranks, active)
        ranks = tf.tensor_scatter_nd_update(ranks, real[:, None], real_ranks)
        picked = tf.gather(tf.gather(centred, real), real_ranks, batch_dims=1)
        sum_u += tf.reduce_sum(picked, axis=0)
        count += m_b
      return ranks

    is_warmup = t < warmup_rounds
    ranks = tf.cond(tf.logical_or(is_warmup, tf.equal(p, 0)), warmup_selection,
                    cda_selection)
    chosen_slots = tf.gather(ranked_slots, ranks, batch_dims=1)
    chosen_models = tf.gather(candidates, ranks, batch_dims=1)  # [P, D]
    chosen_losses = tf.gather(candidate_losses, ranks, batch_dims=1)
    newest_models = candidates[:, 0]
    newest_losses = candidate_losses[:, 0]
    selected = tf.tensor_scatter_nd_update(selected, ids[:, None],
                                           chosen_slots)
    num_seen = num_fixed + p
    selected_sum = fixed_sum + tf.reduce_sum(chosen_models, axis=0)
    selected_square = fixed_square + tf.reduce_sum(tf.square(chosen_models))
    selected_loss = fixed_loss + tf.reduce_sum(chosen_losses)

    def fedavg():
      mass = part_weights / tf.reduce_sum(part_weights)
      return tf.linalg.matvec(models, mass, transpose_a=True)

    def memory_average():
      return tf.cast(selected_sum / tf.cast(num_seen, tf.float64), tf.float32)

    new = tf.cond(
        tf.equal(p, 0),
        lambda: w,  # Nobody to aggregate: the model stays.
        lambda: tf.cond(is_warmup, fedavg, memory_average),
    )
    new_state = collections.OrderedDict(
        round=t + 1,
        history=history,
        losses=stored_losses,
        stamps=stamps,
        selected=selected,
        selected_sum=selected_sum,
        selected_square_sum=selected_square,
        selected_loss_sum=selected_loss,
        num_seen=num_seen,
    )
    measurements = collections.OrderedDict(
        num_participants=p,
        num_seen=num_seen,
        older_selected=tf.reduce_sum(tf.cast(ranks > 0, tf.int32)),
        objective_newest=objective(
            fixed_sum + tf.reduce_sum(newest_models, axis=0),
            fixed_square + tf.reduce_sum(tf.square(newest_models)),
            fixed_loss + tf.reduce_sum(newest_losses), num_seen),
        objective_selected=objective(selected_sum, selected_square,
                                     selected_loss, num_seen),
        warmup=tf.cast(is_warmup, tf.int32),
    )
    return new_state, collect.unflatten(new, trainable_type), measurements

  def step(state_type, unused_trainable_type, collected_type):
    return tff.tensorflow.computation(
        server_step, state_type, trainable_type, collected_type)

  return on_collected.build_collected_finalizer(
      model_weights_type, initial_state, step, update_type=update_type
  )
