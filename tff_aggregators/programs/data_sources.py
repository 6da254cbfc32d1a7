"""`tff.program.FederatedDataSource`s over a population, seeded and resumable.

`ClientDataSource(client_data, preprocess_fn=..., seed=...)` gives any
method's `tff.learning.programs.train_model` its rounds' client datasets.
Unlike `tff.program.DatasetDataSource` it does not copy or serialise the
datasets (its iterator is copied every round and saved with the program
state: a few integers here), and its cohorts are seeded.

FedCDA keeps per-client state on the server, so each round's client data
must also say which client it is (`tff_aggregators.with_client_ids`).
`IdentifiedDataSource` does it:

  source = IdentifiedDataSource(emnist_train)    # a tff ClientData
  process = tff_aggregators.build_fedcda_process(
      model_fn, client_optimizer_fn, num_clients=source.num_clients,
      max_clients=10)
  await tff.learning.programs.train_model(
      train_process=process, train_data_source=source,
      train_per_round_clients=10, ...)

Id mapping. TFF's client ids are strings; client `client_data.client_ids[i]`
is FedCDA's client i (TFF's `ClientData` lists its ids sorted, so the
mapping depends only on the set of ids). The iterator saves a SHA-256
fingerprint of the id list with the program state (`to_bytes`), and a
resumed run whose source lists other ids is refused, so a resumed run maps
every id as before.

Sampling. Round r (counted from 0 by the iterator, and saved with it) draws
its clients uniformly without replacement with a NumPy generator seeded by
(seed, r): the cohorts depend only on the seed and the round, also across a
restart.
"""

import collections
import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Optional, Union
import weakref

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_aggregators.client_works import identified

# Live sources by fingerprint: `from_bytes` gets only the saved bytes.
_SOURCES: 'weakref.WeakValueDictionary[str, ClientDataSource]' = (
  weakref.WeakValueDictionary()
)


def fingerprint(client_ids: Sequence[str]) -> str:
  """SHA-256 of the id list, in order (the mapping id -> index)."""
  digest = hashlib.sha256()
  for client_id in client_ids:
    digest.update(str(client_id).encode() + b'\n')
  return digest.hexdigest()


class ClientDataSource(tff.program.FederatedDataSource):
  """The population's datasets, a seeded cohort a round.

  Args:
    client_data: A `tff.simulation.datasets.ClientData` (string ids, mapped
      to their position in `client_data.client_ids`) or a sequence of
      `tf.data.Dataset`s (client i is the i-th).
    preprocess_fn: Applied to each client's dataset before the id is
      attached (e.g. batching); default none.
    seed: Seeds the cohorts.
  """

  def __init__(
    self,
    client_data: Union[
      tff.simulation.datasets.ClientData, Sequence[tf.data.Dataset]
    ],
    *,
    preprocess_fn: Optional[
      Callable[[tf.data.Dataset], tf.data.Dataset]
    ] = None,
    seed: int = 0,
  ):
    if isinstance(client_data, tff.simulation.datasets.ClientData):
      ids = list(client_data.client_ids)
      self._client_ids = ids
      self._dataset_fn = lambda i: client_data.create_tf_dataset_for_client(
        ids[i]
      )
    elif isinstance(client_data, Sequence) and all(
      isinstance(d, tf.data.Dataset) for d in client_data
    ):
      self._client_ids = [str(i) for i in range(len(client_data))]
      self._dataset_fn = lambda i: client_data[i]
    else:
      raise TypeError(
        f'{type(self).__name__} takes a tff.simulation.datasets.ClientData '
        f'or a list of tf.data.Datasets, got {type(client_data).__name__}.'
      )
    if not self._client_ids:
      raise ValueError(f'{type(self).__name__} needs at least one client.')
    if len(self._client_ids) >= identified.MAX_CLIENT_ID:
      raise ValueError(f'At most 2**24 clients, got {len(self._client_ids)}.')
    self._preprocess_fn = preprocess_fn or (lambda d: d)
    self._seed = int(seed)
    self._fingerprint = fingerprint(self._client_ids)
    element_spec = self.element_spec(
      self._preprocess_fn(self._dataset_fn(0)).element_spec
    )
    self._federated_type = tff.FederatedType(
      tff.SequenceType(tff.types.tensorflow_to_type(element_spec)), tff.CLIENTS
    )
    _SOURCES[self.key] = self

  def element_spec(self, spec):
    """The element spec of the datasets `select` returns."""
    return spec

  @property
  def key(self) -> str:
    """What a saved iterator finds this source by: class, ids, seed."""
    return f'{type(self).__name__}:{self._fingerprint}:{self._seed}'

  @property
  def client_ids(self) -> list[str]:
    """The population's ids; client i is `client_ids[i]`."""
    return list(self._client_ids)

  @property
  def num_clients(self) -> int:
    """The population, FedCDA's `num_clients`."""
    return len(self._client_ids)

  def index_of(self, client_id: str) -> int:
    """The index of `client_id` (FedCDA's integer id)."""
    try:
      return self._client_ids.index(client_id)
    except ValueError:
      raise ValueError(
        f'{client_id!r} is not a client of this data source.'
      ) from None

  @property
  def federated_type(self) -> tff.FederatedType:
    return self._federated_type

  def iterator(self) -> 'ClientDataSourceIterator':
    return ClientDataSourceIterator(self, round_num=0)

  def datasets(self, indices: Sequence[int]) -> list[tf.data.Dataset]:
    """The clients' preprocessed datasets."""
    return [self._preprocess_fn(self._dataset_fn(i)) for i in indices]

  def cohort(self, round_num: int, k: int) -> list[int]:
    """The indices of round `round_num`'s `k` clients (seeded)."""
    if not 0 < k <= self.num_clients:
      raise ValueError(f'Cannot select {k} of {self.num_clients} clients.')
    rng = np.random.default_rng([self._seed, round_num])
    return sorted(rng.choice(self.num_clients, size=k, replace=False).tolist())


class IdentifiedDataSource(ClientDataSource):
  """`ClientDataSource` with each client's index in every element.

  For the processes whose client data carries client ids: FedCDA's and
  those with persistent client state (`build_stateful_client_work`).

  Each element is `OrderedDict(data=<element>, client_id=<index>)`
  (`tff_aggregators.with_client_ids`); the arguments are
  `ClientDataSource`'s.
  """

  def element_spec(self, spec):
    return collections.OrderedDict(
      [
        (identified.DATA, spec),
        (identified.CLIENT_ID, tf.TensorSpec([], tf.int32)),
      ]
    )

  def datasets(self, indices: Sequence[int]) -> list[tf.data.Dataset]:
    """The clients' preprocessed datasets with their ids attached."""
    return identified.with_client_ids(
      super().datasets(indices), list(indices), num_clients=self.num_clients
    )


class ClientDataSourceIterator(tff.program.FederatedDataSourceIterator):
  """Round by round cohorts of a `ClientDataSource`; serializable."""

  def __init__(self, source: ClientDataSource, *, round_num: int):
    self._source = source
    self._round_num = round_num

  @property
  def federated_type(self) -> tff.FederatedType:
    return self._source.federated_type

  @property
  def round_num(self) -> int:
    """How many cohorts this iterator has selected."""
    return self._round_num

  def select(self, k: Optional[int] = None) -> list[tf.data.Dataset]:
    if k is None:
      raise ValueError('select needs the number of clients k.')
    indices = self._source.cohort(self._round_num, k)
    self._round_num += 1
    return self._source.datasets(indices)

  def to_bytes(self) -> bytes:
    return json.dumps(
      dict(
        key=self._source.key,
        num_clients=self._source.num_clients,
        round_num=self._round_num,
      )
    ).encode()

  @classmethod
  def from_bytes(cls, buffer: bytes) -> 'ClientDataSourceIterator':
    saved = json.loads(buffer.decode())
    source = _SOURCES.get(saved['key'])
    if source is None:
      kind, digest, seed = saved['key'].split(':')
      raise ValueError(
        f'The saved data iterator is of a {kind} over '
        f'{saved["num_clients"]} client ids (fingerprint {digest[:12]}) '
        f'with seed {seed}, and no such source exists in this process: '
        'create it over the same ClientData (same client ids, in the same '
        'order) and seed before resuming, so that every id keeps its '
        'index.'
      )
    return cls(source, round_num=int(saved['round_num']))

  def __deepcopy__(self, memo):  # train_model copies it every round.
    return type(self)(self._source, round_num=self._round_num)

  def __eq__(self, other: object) -> bool:
    if not isinstance(other, ClientDataSourceIterator):
      return NotImplemented
    return (
      self._source is other._source  # pylint: disable=protected-access
      and self._round_num == other._round_num
    )  # pylint: disable=protected-access
