"""Independent NumPy implementations of the methods' server rules (float64).

Each function follows its paper's equations (docs/methods/) directly,
without TFF, so the tests can check the TFF building blocks against them.
"""

import itertools

import numpy as np


def fedglad(rounds, *, gamma, beta, grouping, eps=1e-12):
  """FedGLAD Eqs. 9-15 in float64: rounds of (updates, weights) -> outputs."""
  baseline, outputs = None, []
  for t, (updates, weights) in enumerate(rounds):
    a = np.asarray(weights, np.float64) / np.sum(weights)
    num_leaves = len(updates[0])
    mean = [
      sum(a[k] * np.asarray(u[l], np.float64) for k, u in enumerate(updates))
      for l in range(num_leaves)
    ]
    q = np.array(
      [
        sum(a[k] * np.sum(np.square(u[l])) for k, u in enumerate(updates))
        for l in range(num_leaves)
      ]
    )
    m = np.array([np.sum(np.square(g)) for g in mean])
    if grouping == 'universal':
      q, m = q.sum(keepdims=True), m.sum(keepdims=True)
    gsi = np.sqrt(np.maximum((q + eps) / (m + eps), 1.0))
    if t == 0:
      baseline = gsi.copy()
    ratio = gsi / baseline
    width = gamma * t if t > 0 else 0.0  # gamma may be inf.
    s = np.minimum(np.maximum(ratio, 1 - width), 1 + width)
    used_baseline = baseline.copy()
    baseline = beta * baseline + (1 - beta) * gsi
    leaf_s = s if grouping == 'per_variable' else np.repeat(s, num_leaves)
    outputs.append(
      dict(
        gsi=gsi,
        ratio=ratio,
        multiplier=s,
        baseline=used_baseline,
        result=[leaf_s[l] * mean[l] for l in range(num_leaves)],
      )
    )
  return outputs


def glad_adaptive(
  weights,
  updates,
  multipliers,
  *,
  kind,
  lr,
  beta_1,
  beta_2,
  epsilon,
  initial_v=0.0,
):
  """FedGLAD App. E in float64: m from s * g, v from the unscaled g."""
  w = [np.asarray(x, np.float64) for x in weights]
  m = [np.zeros_like(x) for x in w]
  v = [np.full_like(x, initial_v) for x in w]
  for n, (g, s) in enumerate(zip(updates, multipliers), start=1):
    step = lr * np.sqrt(1 - beta_2**n) / (1 - beta_1**n)
    for i, gi in enumerate(g):
      gi = np.asarray(gi, np.float64)
      m[i] = beta_1 * m[i] + (1 - beta_1) * s[i] * gi
      if kind == 'adam':
        v[i] = beta_2 * v[i] + (1 - beta_2) * gi**2
      else:
        v[i] = v[i] + (1 - beta_2) * np.sign(gi**2 - v[i]) * gi**2
      w[i] = w[i] - step * m[i] / (np.sqrt(v[i]) + epsilon)
  return w, m, v


def fedlws_tau(updates, valid=None, groups=None, mode='exact'):
  """FedLWS Eqs. 4/8: mean over valid clients of ||g_kl - gbar_l||."""
  k_all = range(len(updates))
  keep = [k for k in k_all if valid is None or valid[k]]
  if not keep:
    return np.zeros(len(groups))
  flat = [
    [
      np.concatenate([np.ravel(updates[k][i]).astype(np.float64) for i in g])
      for g in groups
    ]
    for k in keep
  ]
  tau = []
  for l in range(len(groups)):
    rows = np.stack([f[l] for f in flat])
    mean = rows.mean(axis=0)
    if mode == 'exact':
      tau.append(np.mean(np.linalg.norm(rows - mean, axis=1)))
    else:
      tau.append(
        np.sqrt(max(np.mean(np.sum(rows**2, axis=1)) - np.sum(mean**2), 0.0))
      )
  return np.array(tau)


def fedlws_round(
  weights, deltas, client_weights, groups, *, beta, tau_clip=None, server_lr=1.0
):
  """One FedLWS round (Eqs. 8-9) on TFF deltas (w - w_k); returns dict."""
  w = [np.asarray(x, np.float64) for x in weights]
  lam = np.asarray(client_weights, np.float64)
  lam = lam / lam.sum()
  mean = [
    sum(lam[k] * np.asarray(d[i], np.float64) for k, d in enumerate(deltas))
    for i in range(len(w))
  ]
  w_hat = [wi - server_lr * mi for wi, mi in zip(w, mean)]
  tau = fedlws_tau(deltas, groups=groups)
  gamma, new = [], list(w_hat)
  for l, g in enumerate(groups):
    s = np.sqrt(sum(np.sum(w[i] ** 2) for i in g))
    m = np.sqrt(sum(np.sum((w_hat[i] - w[i]) ** 2) for i in g))
    b = beta * tau[l]
    if tau_clip is not None:
      b = min(max(b, tau_clip[0]), tau_clip[1])
    gamma_l = s / (s + b * m) if s > 0 else 1.0
    gamma.append(gamma_l)
    for i in g:
      new[i] = gamma_l * w_hat[i]
  return dict(tau=tau, gamma=np.array(gamma), weights=new, w_hat=w_hat)


def _linear_proxy_loss_and_grad(w, x, y, class_weights=None):
  """Mean softmax cross-entropy of logits x @ K + b, w = [K (3x2), b (2)].

  With `class_weights`, example i's term is multiplied by class_weights[y_i]
  (still divided by the batch size).
  """
  kernel, bias = w[:6].reshape(3, 2), w[6:]
  logits = x @ kernel + bias
  logits = logits - logits.max(axis=1, keepdims=True)
  probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
  n = len(y)
  scale = (
    np.ones(n)
    if class_weights is None
    else np.asarray(class_weights, np.float64)[y]
  )
  loss = -np.mean(scale * np.log(probs[np.arange(n), y]))
  dlogits = probs.copy()
  dlogits[np.arange(n), y] -= 1
  dlogits *= scale[:, None] / n
  return loss, np.concatenate([(x.T @ dlogits).ravel(), dlogits.sum(axis=0)])


def fedlaw_linear(
  rows,
  p,
  x,
  y,
  *,
  epochs,
  lr,
  batch_order,
  learn_gamma=True,
  learn_lambda=True,
  swa=False,
  class_weights=None,
):
  """FedLAW's search (Eq. 9; SWA, Sec. 6.1) for the 3->2 linear softmax model.

  Chain rule through lambda = softmax(x_l) (Jacobian diag(l) - l l^T) and
  gamma = exp(x_g); PyTorch Adam (0.5, 0.999, 1e-8); StepLR(20, 0.5), or the
  SWA stage-1 schedule. `batch_order(epoch)` gives the epoch's batches as
  index arrays. `class_weights`: the proxy loss weights each example by its
  class (`_linear_proxy_loss_and_grad`). Returns (gamma, lambda, new weights).
  """
  rows = np.asarray(rows, np.float64)

  def run(x_g, x_l, n_epochs, learn_g, learn_l, lr_of, use_swa):
    m, v, mg, vg, k = np.zeros_like(x_l), np.zeros_like(x_l), 0.0, 0.0, 0
    snapshots = []
    for epoch in range(n_epochs):
      step_lr = lr_of(epoch)
      for idx in batch_order(epoch):
        lam = np.exp(x_l - x_l.max())
        lam /= lam.sum()
        gamma = np.exp(x_g)
        w = gamma * lam @ rows
        _, grad_w = _linear_proxy_loss_and_grad(
          w, x[idx], y[idx], class_weights
        )
        dl_dlam = gamma * rows @ grad_w
        jac = np.diag(lam) - np.outer(lam, lam)
        g_l = jac @ dl_dlam
        g_g = grad_w @ w
        k += 1
        if learn_g:
          mg = 0.5 * mg + 0.5 * g_g
          vg = 0.999 * vg + 0.001 * g_g**2
          x_g -= (
            step_lr
            * (mg / (1 - 0.5**k))
            / (np.sqrt(vg / (1 - 0.999**k)) + 1e-8)
          )
        if learn_l:
          m = 0.5 * m + 0.5 * g_l
          v = 0.999 * v + 0.001 * g_l**2
          x_l = x_l - step_lr * (m / (1 - 0.5**k)) / (
            np.sqrt(v / (1 - 0.999**k)) + 1e-8
          )
      if use_swa and epoch >= 6:
        snapshots.append(x_l.copy())
    if use_swa:
      x_l = np.mean(snapshots, axis=0)
    return x_g, x_l

  step = lambda e: lr * 0.5 ** (e // 20)
  cosine = lambda e: lr * (1 + np.cos(np.pi * e / 100)) / 2

  def swa_lr(e):
    if e <= 6:
      return cosine(e)
    a = (1 - np.cos(np.pi * min(e - 6, 10) / 10)) / 2
    return 0.05 * a + cosine(6) * (1 - a)

  x_g, x_l = 0.0, np.log(np.asarray(p, np.float64))
  if swa:
    x_g, x_l = run(x_g, x_l, epochs // 2, False, True, swa_lr, True)
    x_g, x_l = run(x_g, x_l, epochs // 2, True, False, step, False)
  else:
    x_g, x_l = run(x_g, x_l, epochs, learn_gamma, learn_lambda, step, False)
  lam = np.exp(x_l - x_l.max())
  lam /= lam.sum()
  gamma = np.exp(x_g)
  return gamma, lam, gamma * lam @ rows


def greedy_mac(sim, max_clusters, sim_threshold, frozen=False):
  """GREEDY_MAC (FedSA Steps 1-3): clusters as member lists (join order)."""
  k = len(sim)
  free = list(range(k))
  clusters = []
  snapshot = None
  while free:
    bp, pair = -np.inf, None
    for a in free:
      for b in free:
        if a < b and sim[a][b] > bp:
          bp, pair = sim[a][b], (a, b)
    if frozen and len(clusters) >= max_clusters and snapshot is None:
      snapshot = [list(c) for c in clusters]
    reference = snapshot if snapshot is not None else clusters
    bj, join = -np.inf, None
    for s, members in enumerate(reference):
      for u in free:
        c = np.mean([sim[v][u] for v in members])
        if c > bj:
          bj, join = c, (s, u)
    if len(clusters) < max_clusters:
      if pair is None and join is None:
        break
      if join is not None and bj >= bp:
        clusters[join[0]].append(join[1])
        free.remove(join[1])
      else:
        clusters.append(list(pair))
        free.remove(pair[0])
        free.remove(pair[1])
    elif join is not None and bj > sim_threshold:
      clusters[join[0]].append(join[1])
      free.remove(join[1])
    else:
      break
  return clusters


def _fedsa_statistics(x, w, cv_t, c, mic, mic_scale, epsilon_policy, dtype):
  mu = w @ x
  d = (x - mu) ** 2
  sigma = np.sqrt(w @ d)
  with np.errstate(divide='ignore', invalid='ignore'):
    if epsilon_policy:
      cv = sigma / np.maximum(np.abs(mu), dtype(1e-12))
    else:
      cv = np.where(
        sigma == 0, 0.0, np.where(mu == 0, np.inf, sigma / np.abs(mu))
      )
  finite = np.isfinite(cv)
  if finite.any():
    lo, hi = cv[finite].min(), cv[finite].max()
    cvn = np.where(finite, (cv - lo) / (hi - lo) if hi > lo else 0.0, 1.0)
  else:
    cvn = np.ones_like(cv)
  high = np.nonzero(cvn > cv_t)[0]
  dh = d[:, high]
  if mic == 'quantile':
    ranks = np.argsort(
      np.argsort(dh, axis=0, kind='stable'), axis=0, kind='stable'
    )
    cat = np.floor(ranks * c / len(x)).astype(int) + 1
  else:
    if mic == 'raw':
      scaled = dh * mic_scale / c
    else:
      axis = 0 if mic == 'per_coordinate_minmax' else None
      lo_d = dh.min(axis=axis) if dh.size else 0.0
      span = (dh.max(axis=axis) if dh.size else 0.0) - lo_d
      scaled = np.divide(
        dh - lo_d,
        span,
        out=np.zeros_like(dh),
        where=np.broadcast_to(np.asarray(span) > 0, dh.shape),
      )
    cat = np.ceil(c * scaled).astype(int)
  cat = np.clip(cat, 1, c)
  return mu, high, cat


def fedsa(
  tensors,
  weights=None,
  *,
  cv_t=0.2,
  sim_t=0.2,
  c=4,
  s=4,
  literal=False,
  mic='per_coordinate_minmax',
  mic_scale=4.0,
  epsilon_policy=False,
  weighted=False,
  frozen=False,
  global_scope=False,
  dtype=np.float64,
):
  """FedSA's Algorithm 1 (Eqs. 2-15) on client models, with its options.

  tensors[j] is [K, M_j]; returns the aggregated tensors. `dtype=np.float32`
  mirrors float32 rounding where a category boundary is hit exactly.
  """
  tensors = [np.asarray(x, dtype) for x in tensors]
  k = len(tensors[0])
  w = (
    np.asarray(weights, dtype) / np.sum(weights)
    if weighted
    else np.full(k, 1 / k, dtype)
  )
  stats = [
    _fedsa_statistics(x, w, cv_t, c, mic, mic_scale, epsilon_policy, dtype)
    for x in tensors
  ]

  def similarity(cats):
    total = sum(cat.shape[1] for cat in cats)
    return np.array(
      [
        [
          sum(np.sum(cat[a] == cat[b]) for cat in cats) / total if total else 0
          for b in range(k)
        ]
        for a in range(k)
      ]
    )

  if global_scope:
    shared = greedy_mac(similarity([st[2] for st in stats]), s, sim_t, frozen)
  outputs = []
  for x, (mu, high, cat) in zip(tensors, stats):
    out = mu.copy()
    clusters = (
      shared
      if global_scope
      else greedy_mac(similarity([cat]), s, sim_t, frozen)
    )
    if len(high) and clusters:
      alphas, means = [], []
      for members in clusters:
        macro = np.array(
          [
            np.bincount(cat[members, m], minlength=c + 1)[1:].argmax() + 1
            for m in range(len(high))
          ]
        )
        counts = np.bincount(macro, minlength=c + 1)
        alphas.append(counts[macro] / (s * c))
        mass = w[members] if weighted else np.ones(len(members))
        means.append(mass @ x[members][:, high] / mass.sum())
      alphas = np.array(alphas)
      if not literal:
        alphas = alphas / alphas.sum(axis=0)
      out[high] = (alphas * np.array(means)).sum(axis=0)
    outputs.append(out)
  return outputs


def fedsa_tensor(x, **options):
  """`fedsa` of one tensor [K, M]."""
  return fedsa([x], **options)[0]


class FedCdaServer:
  """FedCDA's Algorithm 1 with the objective of eq. 5 evaluated directly.

  `step` takes the participants (in id order) and returns the new global
  model; caches are per-client lists of (model, loss, round), newest last, at
  most K long. Switches mirroring the script: `selection` ('approx', 'newest',
  'random' with `random_ranks(t, counts)` giving each participant's rank),
  `divergence` ('squared_l2', 'tensorwise_norm' over tensors of
  `leaf_sizes`), `later_batches`, `warmup_aggregation`, `batch_param`.
  """

  def __init__(
    self,
    memory_size,
    num_batches,
    smoothness,
    warmup_rounds,
    permutation,
    *,
    selection='approx',
    divergence='squared_l2',
    later_batches='excluded',
    warmup_aggregation='fedavg',
    batch_param='num_batches',
    random_ranks=None,
    leaf_sizes=None,
  ):
    self.k, self.b, self.l = memory_size, num_batches, smoothness
    self.warmup = warmup_rounds
    self.permutation = permutation  # (round, p) -> order of participants
    self.selection, self.divergence = selection, divergence
    self.later_batches, self.batch_param = later_batches, batch_param
    self.warmup_aggregation = warmup_aggregation
    self.random_ranks, self.leaf_sizes = random_ranks, leaf_sizes
    self.cache, self.selected = {}, {}  # id -> entries; id -> round stamp
    self.older_selected = 0

  def _entry(self, client, stamp):
    return next(e for e in self.cache[client] if e[2] == stamp)

  def objective(self, entries):
    models = np.array([e[0] for e in entries])
    losses = np.array([e[1] for e in entries])
    mean = models.mean(axis=0)
    return losses.mean() + self.l / (2 * len(entries)) * np.sum(
      (models - mean) ** 2
    )

  def script_objective(self, entries):
    models = np.array([e[0] for e in entries])
    mean = models.mean(axis=0)
    total, start = 0.0, 0
    for size in self.leaf_sizes:
      part = models[:, start : start + size] - mean[start : start + size]
      total += np.sum(np.sqrt(np.sum(part**2, axis=1)))
      start += size
    return total

  def _everyone(self):
    return np.mean(
      [self._entry(c, s)[0] for c, s in self.selected.items()], axis=0
    )

  def step(self, t, ids, models, losses, weights):
    previous = {
      c: self._entry(c, self.selected[c]) for c in ids if c in self.selected
    }
    for client, model, loss in zip(ids, models, losses):
      entries = self.cache.setdefault(client, [])
      entries.append((np.asarray(model, np.float64), float(loss), t))
      del entries[: -self.k]
    newest = lambda c: self.cache[c][-1]
    self.older_selected = 0
    if t < self.warmup:
      for client in ids:
        self.selected[client] = t
      if self.warmup_aggregation == 'all_seen_newest':
        return self._everyone()
      mass = np.asarray(weights, np.float64) / np.sum(weights)
      return mass @ np.asarray(models, np.float64)
    options = {c: sorted(self.cache[c], key=lambda e: -e[2]) for c in ids}
    if self.selection != 'approx':
      if self.selection == 'newest':
        ranks = [0] * len(ids)
      else:
        ranks = self.random_ranks(t, [len(options[c]) for c in ids])
      for client, r in zip(ids, ranks):
        self.selected[client] = options[client][r][2]
        self.older_selected += int(r > 0)
      return self._everyone()
    fixed = [
      self._entry(c, s) for c, s in self.selected.items() if c not in ids
    ]
    order = self.permutation(t, len(ids))
    if self.batch_param == 'num_batches':
      batches = np.array_split(order, min(self.b, len(ids)))
    else:
      batches = [order[i : i + self.b] for i in range(0, len(ids), self.b)]
    score = (
      self.objective
      if self.divergence == 'squared_l2'
      else self.script_objective
    )
    for j, batch in enumerate(batches):
      clients = [ids[i] for i in batch]
      later = []
      if self.later_batches == 'included_at_previous_selection':
        later = [
          previous.get(ids[i], newest(ids[i]))
          for b in batches[j + 1 :]
          for i in b
        ]
      best, best_j = None, np.inf
      for combo in itertools.product(
        *[range(len(options[c])) for c in clients]
      ):
        chosen = [options[c][r] for c, r in zip(clients, combo)]
        value = score(fixed + chosen + later)
        if value < best_j:
          best, best_j = combo, value
      for client, r in zip(clients, best):
        self.selected[client] = options[client][r][2]
        fixed.append(options[client][r])
        self.older_selected += int(r > 0)
    return self._everyone()


def linear_softmax_client_delta(
  weights, batches, *, lr, momentum=0.0, mu=0.0, with_loss=False, buffers=None
):
  """A client of the linear softmax model by SGD(M), FedProx's term included.

  Li et al. (2020) eq. 2: each step follows the gradient of the batch's mean
  cross-entropy plus mu (w - w_global) (mu = 0: FedAvg's client). `weights`
  is [kernel [F, C], bias [C]], `batches` (x, y) arrays; momentum as TFF's
  SGDM (buffer = momentum * buffer + g). Returns the delta w_global - w, and
  with `with_loss` also the training loss TFF reports (each batch's mean
  cross-entropy before its step, weighted by its examples). Given
  `buffers` (a client's momentum kept from its last round), starts from them
  and returns (delta, the final buffers).
  """
  w0 = [np.asarray(v, np.float64) for v in weights]
  w = [v.copy() for v in w0]
  kept = buffers
  if buffers is None:
    buffers = [np.zeros_like(v) for v in w]
  buffers = [np.array(b, np.float64) for b in buffers]
  total_loss, count = 0.0, 0
  for x, y in batches:
    x = np.asarray(x, np.float64)
    logits = x @ w[0] + w[1]
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    total_loss -= np.sum(np.log(p[np.arange(len(y)), y]))
    count += len(y)
    p[np.arange(len(y)), y] -= 1.0
    grads = [x.T @ p / len(y), p.mean(axis=0)]
    for i in range(2):
      buffers[i] = momentum * buffers[i] + grads[i] + mu * (w[i] - w0[i])
      w[i] = w[i] - lr * buffers[i]
  delta = [a - b for a, b in zip(w0, w)]
  if kept is not None:
    return delta, buffers
  return (delta, total_loss / count) if with_loss else delta


class ServerOptimizer:
  """TFF's server SGD(M), Adam and Yogi (`tff.learning.optimizers`) in float64.

  `step(w, g, s=None)` returns the new weights; `s` (one multiplier per
  leaf) scales only the first moment (FedGLAD App. E) or, for SGD(M), the
  update.
  """

  def __init__(
    self, kind, lr, *, momentum=0.0, beta_1=0.9, beta_2=0.999, epsilon=1e-7
  ):
    self.kind, self.lr, self.momentum = kind, lr, momentum
    self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
    self.n, self.m, self.v = 0, None, None

  def step(self, w, g, s=None):
    w = [np.asarray(x, np.float64) for x in w]
    g = [np.asarray(x, np.float64) for x in g]
    s = np.ones(len(w)) if s is None else np.asarray(s, np.float64)
    if self.m is None:
      self.m = [np.zeros_like(x) for x in w]
      initial_v = 1e-6 if self.kind == 'yogi' else 0.0
      self.v = [np.full_like(x, initial_v) for x in w]
    self.n += 1
    if self.kind == 'sgdm':
      for i in range(len(w)):
        self.m[i] = self.momentum * self.m[i] + s[i] * g[i]
      return [x - self.lr * m for x, m in zip(w, self.m)]
    b1, b2, n = self.beta_1, self.beta_2, self.n
    rate = self.lr * np.sqrt(1 - b2**n) / (1 - b1**n)
    out = []
    for i in range(len(w)):
      self.m[i] = b1 * self.m[i] + (1 - b1) * s[i] * g[i]
      if self.kind == 'adam':
        self.v[i] = b2 * self.v[i] + (1 - b2) * g[i] ** 2
      else:
        self.v[i] = (
          self.v[i] + (1 - b2) * np.sign(g[i] ** 2 - self.v[i]) * g[i] ** 2
        )
      out.append(w[i] - rate * self.m[i] / (np.sqrt(self.v[i]) + self.epsilon))
    return out


def fedlws_shrink(w, w_hat, tau, groups, *, beta, tau_clip=None):
  """FedLWS Eqs. 8-9 on any server step: w_hat shrunk per group.

  The step norm is ||w_hat_l - w_l|| (the server optimizer's step), which
  equals the mean update's norm only for server SGD at learning rate 1.
  Returns (gamma [L], b [L], new weights).
  """
  w = [np.asarray(x, np.float64) for x in w]
  new = [np.asarray(x, np.float64) for x in w_hat]
  gamma, bs = [], []
  for l, g in enumerate(groups):
    s = np.sqrt(sum(np.sum(w[i] ** 2) for i in g))
    m = np.sqrt(sum(np.sum((new[i] - w[i]) ** 2) for i in g))
    b = beta * tau[l]
    if tau_clip is not None:
      b = min(max(b, tau_clip[0]), tau_clip[1])
    gamma_l = s / (s + b * m) if s > 0 and s + b * m > 1e-12 else 1.0
    gamma.append(gamma_l)
    bs.append(b)
    for i in g:
      new[i] = gamma_l * new[i]
  return np.array(gamma), np.array(bs), new


def weighted_mean(deltas, client_weights):
  """sum_k lambda_k delta_k per leaf, lambda the normalised weights."""
  lam = np.asarray(client_weights, np.float64)
  lam = lam / lam.sum()
  return [
    sum(lam[k] * np.asarray(d[i], np.float64) for k, d in enumerate(deltas))
    for i in range(len(deltas[0]))
  ]
