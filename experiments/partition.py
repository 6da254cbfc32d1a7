"""Splitting a centralised data set over clients, by label.

Every partitioner returns one int64 index array per client into `labels`; each
example lands on exactly one client. All randomness comes from a NumPy
`RandomState(seed)`, so a seed fixes the partition for every method.
"""

from collections.abc import Sequence
from typing import Optional

import numpy as np

METHODS = ('dirichlet', 'iid', 'label_skew', 'shards')


def dirichlet(
  labels: np.ndarray,
  num_clients: int,
  alpha: float,
  seed: int,
  num_classes: Optional[int] = None,
) -> list[np.ndarray]:
  """Per-class Dirichlet(alpha) proportions over clients (FedLAW, FedLWS).

  The exact procedure of the authors' code (FedLAW App. D.2, FedLWS App. C.3;
  `build_non_iid_by_dirichlet_new`), with `RandomState(seed)`:
  1. group the indices by class (dataset order), shuffle each class's list;
  2. draw Q ~ Dirichlet(alpha * 1_n) per class, shape (C, n);
  3. count[i][j] = round(Q[j][i] * N_j) (half to even);
  4. cumulative cut points per class, the last client taking the remainder (a
     middle client whose range overshoots N_j gets fewer, possibly none);
  5. client i takes its slice of each class; each client's list is shuffled.
  Client sizes vary, and with a small alpha a client can get no example; the
  caller decides whether that is acceptable.

  Args:
    labels: Integer labels [N].
    num_clients: n.
    alpha: Concentration; 100 is the papers' "IID", 0.1 strongly skewed.
    seed: Seed of the `RandomState`.
    num_classes: C; default `max(labels) + 1`.

  Returns:
    One index array per client.
  """
  labels, rng, by_class = _shuffled_classes(
    labels, num_clients, alpha, seed, num_classes, 'a Dirichlet'
  )
  num_classes = len(by_class)
  shares = rng.dirichlet(np.full(num_clients, alpha), size=num_classes).T
  clients = [[] for _ in range(num_clients)]
  for j, indices in enumerate(by_class):
    size = len(indices)
    start = 0
    end = 0
    for i in range(num_clients):
      if i == num_clients - 1:
        end = size
      else:
        end += int(round(shares[i][j] * size))
      clients[i].append(indices[min(start, size) : min(end, size)])
      start = end
  result = []
  for parts in clients:
    indices = np.concatenate(parts).astype(np.int64)
    rng.shuffle(indices)
    result.append(indices)
  return result


def label_skew(
  labels: np.ndarray,
  num_clients: int,
  alpha: float,
  seed: int,
  num_classes: Optional[int] = None,
) -> list[np.ndarray]:
  """Equal-size clients with Dirichlet(alpha * p) label mixes (FedGLAD).

  The procedure of FedGLAD's App. G (after FedNLP's label-skew partition
  `niid_label.py`), with `RandomState(seed)`:
  1. group the indices by class (dataset order), shuffle each class's list;
     p is the data set's class distribution;
  2. every client gets floor(N / n) examples; the last takes what is left;
  3. client by client, in order: draw q ~ Dirichlet(alpha * p); class j asks
     for round(q_j * size) examples (half to even), in class order, capped by
     the room left, and the last class takes the room left;
  4. a class that has run out gives what it has, and the shortfall is filled
     from the classes that still have examples, in proportion to what they
     have left (largest remainders): App. G's "dynamic reassigning".
  A client's indices are in class order (its data is shuffled when batched).
  FedNLP's code reassigns differently in detail: it fills a class's
  shortfall as soon as that class runs out (before later classes take their
  share), with ceil-rounded counts over the other classes in increasing
  order of what they have left; clients stay equal-size and as skewed.
  With alpha = 0.1 and 10 balanced classes every concentration is 0.01, so
  most clients hold one or two classes.

  Args:
    labels: Integer labels [N].
    num_clients: n.
    alpha: Concentration, scaled by the class distribution.
    seed: Seed of the `RandomState`.
    num_classes: C; default `max(labels) + 1`.

  Returns:
    One index array per client.
  """
  labels, rng, pools = _shuffled_classes(
    labels, num_clients, alpha, seed, num_classes, 'a label-skew'
  )
  num_classes = len(pools)
  left = np.array([len(pool) for pool in pools], dtype=np.int64)
  concentration = alpha * left / len(labels)
  base_size = len(labels) // num_clients
  result = []
  for client in range(num_clients):
    size = int(left.sum()) if client == num_clients - 1 else base_size
    # Classes of p = 0 (num_classes beyond the labels) get no share.
    q = np.zeros(num_classes)
    present = concentration > 0
    q[present] = rng.dirichlet(concentration[present])
    asked = np.zeros(num_classes, dtype=np.int64)
    room = size
    for j in range(num_classes):
      count = (
        room if j == num_classes - 1 else min(int(round(q[j] * size)), room)
      )
      asked[j] = count
      room -= count
    taken = np.minimum(asked, left)
    shortfall = int((asked - taken).sum())
    if shortfall:
      taken += _proportional_fill(left - taken, shortfall)
    parts = []
    for j in range(num_classes):
      start = len(pools[j]) - int(left[j])
      parts.append(pools[j][start : start + int(taken[j])])
    left -= taken
    result.append(np.concatenate(parts).astype(np.int64))
  return result


def _proportional_fill(available: np.ndarray, amount: int) -> np.ndarray:
  """`amount` examples split over classes in proportion to `available`.

  Largest-remainder rounding, never more than a class has (the total is
  capped by what is available).
  """
  amount = min(amount, int(available.sum()))
  if amount == 0:
    return np.zeros_like(available)
  exact = available * (amount / available.sum())
  counts = np.floor(exact).astype(np.int64)
  order = np.argsort(-(exact - counts), kind='stable')
  counts[order[: amount - int(counts.sum())]] += 1
  return np.minimum(counts, available)


def iid(labels: np.ndarray, num_clients: int, seed: int) -> list[np.ndarray]:
  """A random permutation split into near-equal parts (sizes differ by <= 1)."""
  labels = _check_labels(labels, num_clients)
  permutation = np.random.RandomState(seed).permutation(len(labels))
  return [p.astype(np.int64) for p in np.array_split(permutation, num_clients)]


def shards(
  labels: np.ndarray, num_clients: int, shards_per_client: int, seed: int
) -> list[np.ndarray]:
  """Label shards (McMahan et al. 2017; FedCDA Section 6.1).

  Sorts the examples by label (stable), cuts them into
  `num_clients * shards_per_client` equal shards and gives each client
  `shards_per_client` random shards, so a client sees about
  `shards_per_client` labels. With N not divisible by the number of shards,
  the first `N mod shards` shards hold one example more.
  """
  labels = _check_labels(labels, num_clients)
  if shards_per_client < 1:
    raise ValueError(
      f'shards_per_client must be >= 1, got {shards_per_client}.'
    )
  num_shards = num_clients * shards_per_client
  if num_shards > len(labels):
    raise ValueError(
      f'{num_clients} clients x {shards_per_client} shards = {num_shards} '
      f'shards, more than the {len(labels)} examples.'
    )
  by_label = np.argsort(labels, kind='stable')
  pieces = np.array_split(by_label, num_shards)
  order = np.random.RandomState(seed).permutation(num_shards)
  return [
    np.concatenate(
      [
        pieces[s]
        for s in order[c * shards_per_client : (c + 1) * shards_per_client]
      ]
    ).astype(np.int64)
    for c in range(num_clients)
  ]


def partition(
  method: str,
  labels: np.ndarray,
  num_clients: int,
  *,
  seed: int,
  alpha: Optional[float] = None,
  shards_per_client: Optional[int] = None,
) -> list[np.ndarray]:
  """Partitions by `method` in `METHODS`; see the function of that name."""
  if method == 'dirichlet':
    if alpha is None:
      raise ValueError('The dirichlet partition needs alpha (--alpha).')
    return dirichlet(labels, num_clients, alpha, seed)
  if method == 'iid':
    return iid(labels, num_clients, seed)
  if method == 'label_skew':
    if alpha is None:
      raise ValueError('The label_skew partition needs alpha (--alpha).')
    return label_skew(labels, num_clients, alpha, seed)
  if method == 'shards':
    if shards_per_client is None:
      raise ValueError(
        'The shards partition needs shards_per_client (--shards_per_client).'
      )
    return shards(labels, num_clients, shards_per_client, seed)
  raise ValueError(f'Unknown partition {method!r}; use one of {METHODS}.')


def label_counts(
  labels: np.ndarray,
  client_indices: Sequence[np.ndarray],
  num_classes: int,
) -> np.ndarray:
  """Examples per (client, class), shape [num_clients, num_classes]."""
  labels = np.asarray(labels)
  return np.stack(
    [np.bincount(labels[i], minlength=num_classes) for i in client_indices]
  ).astype(np.int64)


def _check_labels(labels: np.ndarray, num_clients: int) -> np.ndarray:
  labels = np.asarray(labels)
  if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
    raise ValueError(
      f'labels must be a 1-D integer array, got {labels.dtype} {labels.shape}.'
    )
  if num_clients < 1:
    raise ValueError(f'num_clients must be >= 1, got {num_clients}.')
  if num_clients > len(labels):
    raise ValueError(
      f'{num_clients} clients for {len(labels)} examples: every client '
      'needs at least one example; use fewer clients.'
    )
  if len(labels) and labels.min() < 0:
    raise ValueError('labels must be >= 0.')
  return labels


def _shuffled_classes(labels, num_clients, alpha, seed, num_classes, name):
  """Checked labels, the `RandomState(seed)`, each class's shuffled indices.

  The first steps of both Dirichlet partitions: the indices grouped by class
  (dataset order), each class's list shuffled in class order.
  """
  labels = _check_labels(labels, num_clients)
  if not alpha > 0:
    raise ValueError(f'alpha must be > 0 for {name} partition, got {alpha}.')
  rng = np.random.RandomState(seed)
  by_class = []
  for j in range(_num_classes(labels, num_classes)):
    indices = np.flatnonzero(labels == j)
    rng.shuffle(indices)
    by_class.append(indices)
  return labels, rng, by_class


def _num_classes(labels: np.ndarray, num_classes: Optional[int]) -> int:
  inferred = int(labels.max()) + 1 if len(labels) else 0
  if num_classes is None:
    return inferred
  if num_classes < inferred:
    raise ValueError(
      f'num_classes={num_classes} but the labels go up to {inferred - 1}.'
    )
  return num_classes


PROXY_DISTRIBUTIONS = ('balanced', 'long_tailed')


def proxy_split(
  labels: np.ndarray,
  size: int,
  num_classes: int,
  *,
  distribution: str = 'balanced',
  seed: int,
) -> tuple[np.ndarray, np.ndarray]:
  """A server proxy set drawn from a test split, and the rest (FedLAW 6.3).

  The split is permuted with `RandomState(seed)`; the proxy takes the first
  `size // num_classes` examples of each class met (`'balanced'`), or
  `size / C * 0.1**(j / (C - 1))` of class j (`'long_tailed'`, imbalance
  ratio 10). Every method is then evaluated on the rest.

  Returns:
    (proxy indices, remaining indices) into `labels`, each sorted.

  Raises:
    ValueError: If a class has too few examples.
  """
  if distribution not in PROXY_DISTRIBUTIONS:
    raise ValueError(
      f'Unknown proxy distribution {distribution!r}; use one '
      f'of {PROXY_DISTRIBUTIONS}.'
    )
  per_class = size / num_classes
  if distribution == 'balanced':
    counts = [int(per_class)] * num_classes
  else:
    counts = [
      max(1, int(per_class * 0.1 ** (j / max(num_classes - 1, 1))))
      for j in range(num_classes)
    ]
  order = np.random.RandomState(seed).permutation(len(labels))
  proxy = []
  for label, count in enumerate(counts):
    members = order[labels[order] == label][:count]
    if len(members) < count:
      raise ValueError(
        f'The proxy set needs {count} examples of class {label}; the split '
        f'has {len(members)}. Lower --proxy_size.'
      )
    proxy.append(members)
  proxy = np.sort(np.concatenate(proxy)).astype(np.int64)
  rest = np.setdiff1d(np.arange(len(labels)), proxy).astype(np.int64)
  return proxy, rest
