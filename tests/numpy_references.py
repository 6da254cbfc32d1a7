"""Independent NumPy implementations of the specs' server rules (float64).

Each function follows the equations of `../shared/specs/<method>.md` directly,
without TFF, so the tests can check the TFF building blocks against them.
"""

import numpy as np


def fedglad(rounds, *, gamma, beta, grouping, eps=1e-12):
  """Spec 2.3 in float64: rounds of (client updates, weights) -> outputs."""
  baseline, outputs = None, []
  for t, (updates, weights) in enumerate(rounds):
    a = np.asarray(weights, np.float64) / np.sum(weights)
    num_leaves = len(updates[0])
    mean = [
        sum(a[k] * np.asarray(u[l], np.float64) for k, u in enumerate(updates))
        for l in range(num_leaves)
    ]
    q = np.array([
        sum(a[k] * np.sum(np.square(u[l])) for k, u in enumerate(updates))
        for l in range(num_leaves)
    ])
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
    outputs.append(dict(
        gsi=gsi, ratio=ratio, multiplier=s, baseline=used_baseline,
        result=[leaf_s[l] * mean[l] for l in range(num_leaves)],
    ))
  return outputs


def glad_adaptive(weights, updates, multipliers, *, kind, lr,
                            beta_1, beta_2, epsilon, initial_v=0.0):
  """Spec 2.5 in float64: m from s * g, v from the unscaled g."""
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
  """Spec fedlws.md Eq. 4: mean over valid clients of ||g_kl - gbar_l||."""
  k_all = range(len(updates))
  keep = [k for k in k_all if valid is None or valid[k]]
  if not keep:
    return np.zeros(len(groups))
  flat = [
      [np.concatenate([np.ravel(updates[k][i]).astype(np.float64) for i in g])
       for g in groups]
      for k in keep
  ]
  tau = []
  for l in range(len(groups)):
    rows = np.stack([f[l] for f in flat])
    mean = rows.mean(axis=0)
    if mode == 'exact':
      tau.append(np.mean(np.linalg.norm(rows - mean, axis=1)))
    else:
      tau.append(np.sqrt(max(
          np.mean(np.sum(rows**2, axis=1)) - np.sum(mean**2), 0.0)))
  return np.array(tau)


def fedlws_round(weights, deltas, client_weights, groups, *, beta,
                 tau_clip=None, server_lr=1.0):
  """One FedLWS round (spec 2.4) on TFF deltas (w - w_k); returns dict."""
  w = [np.asarray(x, np.float64) for x in weights]
  lam = np.asarray(client_weights, np.float64)
  lam = lam / lam.sum()
  mean = [sum(lam[k] * np.asarray(d[i], np.float64)
              for k, d in enumerate(deltas)) for i in range(len(w))]
  w_hat = [wi - server_lr * mi for wi, mi in zip(w, mean)]
  tau = fedlws_tau(deltas, groups=groups)
  gamma, new = [], list(w_hat)
  for l, g in enumerate(groups):
    s = np.sqrt(sum(np.sum(w[i]**2) for i in g))
    m = np.sqrt(sum(np.sum((w_hat[i] - w[i])**2) for i in g))
    b = beta * tau[l]
    if tau_clip is not None:
      b = min(max(b, tau_clip[0]), tau_clip[1])
    gamma_l = s / (s + b * m) if s > 0 else 1.0
    gamma.append(gamma_l)
    for i in g:
      new[i] = gamma_l * w_hat[i]
  return dict(tau=tau, gamma=np.array(gamma), weights=new, w_hat=w_hat)
