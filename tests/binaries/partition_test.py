"""Partitioners: coverage, determinism, skew, the exact Dirichlet procedure."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from experiments import partition


def _labels(num_examples=1000, num_classes=10, seed=0):
  return np.random.default_rng(seed).integers(0, num_classes, num_examples)


def _reference_dirichlet(labels, n, alpha, seed, num_classes):
  """FedLAW's Dirichlet partition written out with plain Python lists."""
  rng = np.random.RandomState(seed)
  by_class = []
  for j in range(num_classes):
    members = [k for k, y in enumerate(labels) if y == j]
    members = np.array(members, dtype=np.int64)
    rng.shuffle(members)
    by_class.append(list(members))
  q = rng.dirichlet([alpha] * n, size=num_classes)  # (C, n)
  clients = [[] for _ in range(n)]
  for j in range(num_classes):
    total = len(by_class[j])
    ends = []
    for i in range(n):
      if i == n - 1:
        ends.append(total)
      elif i == 0:
        ends.append(int(round(q[j][0] * total)))
      else:
        ends.append(ends[-1] + int(round(q[j][i] * total)))
    for i in range(n):
      begin = 0 if i == 0 else ends[i - 1]
      clients[i].extend(by_class[j][begin : ends[i]])
  result = []
  for members in clients:
    members = np.array(members, dtype=np.int64)
    rng.shuffle(members)
    result.append(members)
  return result


def _reference_label_skew(labels, n, alpha, seed, num_classes):
  """FedGLAD's App. G partition written out with plain Python lists."""
  rng = np.random.RandomState(seed)
  pools = []
  for j in range(num_classes):
    members = np.array(
      [k for k, y in enumerate(labels) if y == j], dtype=np.int64
    )
    rng.shuffle(members)
    pools.append(list(members))
  total = len(labels)
  p = [len(pool) / total for pool in pools]
  clients = []
  for i in range(n):
    remaining = sum(len(pool) for pool in pools)
    size = remaining if i == n - 1 else total // n
    present = [j for j in range(num_classes) if p[j] > 0]
    draw = rng.dirichlet([alpha * p[j] for j in present])
    q = [0.0] * num_classes
    for j, share in zip(present, draw):
      q[j] = share
    room, members, short = size, [], 0
    for j in range(num_classes):
      want = room if j == num_classes - 1 else min(round(q[j] * size), room)
      room -= want
      got = min(want, len(pools[j]))
      members += pools[j][:got]
      pools[j] = pools[j][got:]
      short += want - got
    if short:  # Largest remainders over what the classes have left.
      have = [len(pool) for pool in pools]
      short = min(short, sum(have))
      exact = [h * short / sum(have) for h in have]
      extra = [int(e // 1) for e in exact]
      by_remainder = sorted(
        range(num_classes), key=lambda j: (-(exact[j] - extra[j]), j)
      )
      for j in by_remainder[: short - sum(extra)]:
        extra[j] += 1
      for j in range(num_classes):
        members += pools[j][: extra[j]]
        pools[j] = pools[j][extra[j] :]
    members = np.array(members, dtype=np.int64)
    clients.append(members)
  return clients


def _top_class_share(labels, clients, num_classes=10):
  counts = partition.label_counts(labels, clients, num_classes)
  sizes = counts.sum(axis=1)
  keep = sizes > 0
  return float(np.mean(counts[keep].max(axis=1) / sizes[keep]))


class PartitionTest(parameterized.TestCase):
  @parameterized.named_parameters(
    ('dirichlet', 'dirichlet', dict(alpha=0.3)),
    ('iid', 'iid', {}),
    ('label_skew', 'label_skew', dict(alpha=0.1)),
    ('shards', 'shards', dict(shards_per_client=2)),
  )
  def test_every_example_on_exactly_one_client(self, method, kwargs):
    labels = _labels(997)
    clients = partition.partition(method, labels, 13, seed=3, **kwargs)
    self.assertLen(clients, 13)
    for c in clients:
      self.assertEqual(c.dtype, np.int64)
    np.testing.assert_array_equal(
      np.sort(np.concatenate(clients)), np.arange(997)
    )

  @parameterized.named_parameters(
    ('dirichlet', 'dirichlet', dict(alpha=0.3)),
    ('iid', 'iid', {}),
    ('label_skew', 'label_skew', dict(alpha=0.1)),
    ('shards', 'shards', dict(shards_per_client=2)),
  )
  def test_deterministic_per_seed(self, method, kwargs):
    labels = _labels()
    a = partition.partition(method, labels, 10, seed=5, **kwargs)
    b = partition.partition(method, labels, 10, seed=5, **kwargs)
    c = partition.partition(method, labels, 10, seed=6, **kwargs)
    for x, y in zip(a, b):
      np.testing.assert_array_equal(x, y)
    self.assertFalse(all(np.array_equal(x, y) for x, y in zip(a, c)))

  @parameterized.parameters(0, 1, 8, 9, 10)
  def test_dirichlet_is_the_spec_procedure(self, seed):
    labels = _labels(500, num_classes=7, seed=seed)
    expected = _reference_dirichlet(labels, 9, 0.4, seed, 7)
    actual = partition.dirichlet(labels, 9, 0.4, seed)
    for e, a in zip(expected, actual):
      np.testing.assert_array_equal(a, e)

  def test_dirichlet_with_extra_empty_classes(self):
    # FedLAW's code passes C=100 for Fashion-MNIST: same client sets.
    labels = _labels(300)
    ten = partition.dirichlet(labels, 5, 0.5, 1, num_classes=10)
    hundred = partition.dirichlet(labels, 5, 0.5, 1, num_classes=100)
    for a, b in zip(ten, hundred):
      np.testing.assert_array_equal(np.sort(a), np.sort(b))

  def test_skew_grows_as_alpha_shrinks(self):
    labels = _labels(5000)
    shares = [
      np.mean(
        [
          _top_class_share(labels, partition.dirichlet(labels, 20, alpha, seed))
          for seed in range(3)
        ]
      )
      for alpha in (100.0, 1.0, 0.1)
    ]
    self.assertLess(shares[0], 0.2)  # Near the IID 0.1.
    self.assertLess(shares[0], shares[1])
    self.assertLess(shares[1], shares[2])
    self.assertGreater(shares[2], 0.6)

  @parameterized.parameters(0, 1, 2)
  def test_label_skew_is_the_spec_procedure(self, seed):
    # Skewed labels and alpha 0.3: classes run out, so the shortfall is
    # reassigned; 9 does not divide 500, so the last client is larger.
    labels = np.random.default_rng(seed).choice(
      7, 500, p=[0.4, 0.2, 0.1, 0.1, 0.1, 0.05, 0.05]
    )
    expected = _reference_label_skew(labels, 9, 0.3, seed, 7)
    actual = partition.label_skew(labels, 9, 0.3, seed)
    for e, a in zip(expected, actual):
      np.testing.assert_array_equal(np.sort(a), np.sort(e))
    self.assertEqual([len(a) for a in actual], [55] * 8 + [60])

  def test_label_skew_fashion_mnist_shape(self):
    # FedGLAD's MNIST setting: 100 clients of 600, concentration 0.01 each.
    labels = np.repeat(np.arange(10), 6000)
    clients = partition.label_skew(labels, 100, 0.1, seed=1)
    self.assertEqual({len(c) for c in clients}, {600})
    self.assertGreater(_top_class_share(labels, clients), 0.85)
    iid_like = partition.label_skew(labels, 100, 1000.0, seed=1)
    self.assertLess(_top_class_share(labels, iid_like), 0.25)

  def test_iid_sizes_differ_by_at_most_one(self):
    clients = partition.iid(_labels(103), 10, seed=0)
    sizes = [len(c) for c in clients]
    self.assertLessEqual(max(sizes) - min(sizes), 1)

  def test_shards_give_few_labels_and_equal_sizes(self):
    labels = np.repeat(np.arange(10), 100)  # Balanced, like Fashion-MNIST.
    clients = partition.shards(labels, 20, 2, seed=0)
    self.assertEqual({len(c) for c in clients}, {50})
    counts = partition.label_counts(labels, clients, 10)
    self.assertLessEqual(int((counts > 0).sum(axis=1).max()), 2)

  def test_label_counts(self):
    labels = np.array([0, 1, 1, 2, 2, 2])
    counts = partition.label_counts(
      labels,
      [np.array([0, 3]), np.array([1, 2, 4, 5]), np.array([], np.int64)],
      3,
    )
    np.testing.assert_array_equal(counts, [[1, 0, 1], [0, 2, 2], [0, 0, 0]])

  @parameterized.named_parameters(
    ('alpha', dict(method='dirichlet', alpha=0.0), 'alpha must be > 0'),
    ('no_alpha', dict(method='dirichlet'), 'needs alpha'),
    ('skew_alpha', dict(method='label_skew', alpha=-1.0), 'alpha must be > 0'),
    ('skew_no_alpha', dict(method='label_skew'), 'needs alpha'),
    ('no_shards', dict(method='shards'), 'needs shards_per_client'),
    ('zero_shards', dict(method='shards', shards_per_client=0), '>= 1'),
    (
      'too_many_shards',
      dict(method='shards', shards_per_client=60),
      'more than the 1000 examples',
    ),
    ('unknown', dict(method='pathological'), 'dirichlet'),
  )
  def test_bad_arguments(self, kwargs, message):
    method = kwargs.pop('method')
    with self.assertRaisesRegex(ValueError, message):
      partition.partition(method, _labels(), 20, seed=0, **kwargs)

  def test_bad_client_counts_and_labels(self):
    with self.assertRaisesRegex(ValueError, 'num_clients must be >= 1'):
      partition.iid(_labels(), 0, seed=0)
    with self.assertRaisesRegex(ValueError, 'use fewer clients'):
      partition.iid(_labels(5), 6, seed=0)
    with self.assertRaisesRegex(ValueError, 'integer'):
      partition.iid(np.zeros(5, np.float32), 2, seed=0)


class ProxySplitTest(absltest.TestCase):
  def test_balanced_proxy_and_the_rest(self):
    labels = np.repeat(np.arange(10), 30)
    proxy, rest = partition.proxy_split(labels, 100, 10, seed=3)
    np.testing.assert_array_equal(np.bincount(labels[proxy]), [10] * 10)
    self.assertEmpty(np.intersect1d(proxy, rest))
    self.assertLen(np.union1d(proxy, rest), len(labels))
    again, _ = partition.proxy_split(labels, 100, 10, seed=3)
    np.testing.assert_array_equal(proxy, again)
    other, _ = partition.proxy_split(labels, 100, 10, seed=4)
    self.assertFalse(np.array_equal(proxy, other))

  def test_long_tailed_proxy(self):
    labels = np.repeat(np.arange(10), 30)
    proxy, _ = partition.proxy_split(
      labels, 100, 10, distribution='long_tailed', seed=0
    )
    counts = np.bincount(labels[proxy], minlength=10)
    self.assertEqual(counts[0], 10)
    self.assertEqual(counts[-1], 1)  # Imbalance ratio 10.
    self.assertTrue(np.all(np.diff(counts) <= 0))

  def test_too_few_examples(self):
    with self.assertRaisesRegex(ValueError, 'Lower --proxy_size'):
      partition.proxy_split(np.repeat(np.arange(2), 3), 10, 2, seed=0)


if __name__ == '__main__':
  absltest.main()
