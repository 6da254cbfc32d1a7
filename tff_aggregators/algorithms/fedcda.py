"""`build_fedcda_process`: FedAvg clients, FedCDA's cross-round selection."""

import functools
from collections.abc import Callable
from typing import Optional, Union

import numpy as np
import tensorflow_federated as tff

from tff_aggregators import options
from tff_aggregators.aggregators import collect
from tff_aggregators.algorithms import checks
from tff_aggregators.algorithms import client_works
from tff_aggregators.algorithms import fedcda_store
from tff_aggregators.algorithms import stored_client_state
from tff_aggregators.client_works import identified
from tff_aggregators.client_works import stateful
from tff_aggregators.finalizers import fedcda


def build_fedcda_process(
  model_fn: Callable[[], tff.learning.models.VariableModel],
  client_optimizer_fn: tff.learning.optimizers.Optimizer,
  *,
  num_clients: int,
  max_clients: int,
  client_weighting: tff.learning.ClientWeighting = (
    tff.learning.ClientWeighting.NUM_EXAMPLES
  ),
  model_distributor: Optional[
    tff.learning.templates.DistributionProcess
  ] = None,
  metrics_aggregator=None,
  loop_implementation: tff.learning.LoopImplementation = (
    tff.learning.LoopImplementation.DATASET_REDUCE
  ),
  memory_size: int = 3,
  num_batches: int = 3,
  smoothness: float = 1.0,
  warmup_rounds: int = 50,
  seed: int = 0,
  selection: options.FedCdaSelection = options.FedCdaSelection.APPROX,
  divergence: options.FedCdaDivergence = options.FedCdaDivergence.SQUARED_L2,
  later_batches: options.FedCdaLaterBatches = (
    options.FedCdaLaterBatches.EXCLUDED
  ),
  warmup_aggregation: options.FedCdaWarmupAggregation = (
    options.FedCdaWarmupAggregation.FEDAVG
  ),
  batch_param: options.FedCdaBatchParam = (
    options.FedCdaBatchParam.NUM_BATCHES
  ),
  history_store: Optional[fedcda_store.HistoryStore] = None,
  local_epochs: Optional[int] = None,
  max_state_bytes: int = fedcda.DEFAULT_MAX_STATE_BYTES,
  client_work: Optional[tff.learning.templates.ClientWorkProcess] = None,
) -> Union[
  tff.learning.templates.LearningProcess, fedcda_store.FedCdaStoreProcess
]:
  """A learning process with FedCDA's server.

  Where the history lives (memory cost: clients x K x D x 4 bytes):
    * `history_store=None` (default): in the TFF state of the finalizer, a
      `tff.learning.templates.LearningProcess` deployable as one TFF
      computation. TFF serialises the state twice per round (about 33 MB/s
      here), so use it while N x K x D x 4 bytes stays small (tens of MB;
      refused above `max_state_bytes`).
    * `history_store=fedcda_store.InMemoryHistoryStore()`: in a NumPy array
      of the driver, saved with each checkpoint; no per-round serialisation.
      For histories that fit in RAM.
    * `history_store=fedcda_store.MemmapHistoryStore(directory)`: in a
      memory-mapped file, sparse on disk (clients seen x (K+1) x D x 4
      bytes); checkpoints stay small. For large populations or models.
    The last two return a `fedcda_store.FedCdaStoreProcess` (same methods as
    a `LearningProcess`; its server step runs in the driver), and give the
    same models as the in-state process.

  Composed with `tff.learning.templates.compose_learning_process` from TFF's
  broadcast, the identified client work (TFF's FedAvg client update plus the
  client id and loss; `tff_aggregators.client_works.identified`),
  `CollectAllFactory` and the FedCDA finalizer
  (`tff_aggregators.finalizers.fedcda`, which documents the rule).

  The client data of `next` is a list of datasets whose elements carry the
  client's integer id in [0, num_clients):
  `tff_aggregators.with_client_ids(datasets, ids)`, or, for TFF's string
  ids and `tff.learning.programs.train_model`,
  `tff_aggregators.IdentifiedDataSource(client_data)`. Before each round
  `next` refuses (in Python, one line naming the fix) datasets without ids
  and a cohort above `max_clients`; an id repeated within a round or outside
  the population fails the round before the history changes.

  Args:
    model_fn: No-arg callable returning a `tff.learning.models.VariableModel`.
    client_optimizer_fn: A `tff.learning.optimizers.Optimizer` for clients.
    num_clients: N, the population (client ids are in [0, N)).
    max_clients: The largest cohort a round may have (<= num_clients).
    client_weighting: FedAvg's weights in warm-up (the paper's: examples).
    model_distributor: As in `build_weighted_fed_avg` (default: broadcast);
      in-state history only.
    metrics_aggregator: As in `build_weighted_fed_avg`.
    loop_implementation: As in `build_weighted_fed_avg`.
    memory_size: K (3).
    num_batches: B (3).
    smoothness: L (1).
    warmup_rounds: T_w (50): FedAvg rounds first.
    seed: Seeds the batch split.
    selection: 'approx' (eq. 8); 'newest' or 'random' are diagnostics
      (`tff_aggregators.finalizers.fedcda.FedCdaOptions` documents them and
      the next four). This and the next four take the
      `tff_aggregators.FedCda*` enums or their strings.
    divergence: 'squared_l2' (eq. 8) or the script's 'tensorwise_norm'.
    later_batches: 'excluded' (eq. 8) or the script's
      'included_at_previous_selection'.
    warmup_aggregation: 'fedavg' (the paper) or the script's
      'all_seen_newest'.
    batch_param: 'num_batches' (the paper's B) or the script's
      'clients_per_batch'.
    history_store: None (the TFF state) or a `fedcda_store.HistoryStore`.
    local_epochs: E when each client's data holds its examples repeated E
      times: clients then report the loss of their last epoch (eq. 8's f_n);
      None: the loss over all local steps (the same with one epoch).
    max_state_bytes: The largest in-state history (N K D 4 bytes) accepted.
    client_work: None: the identified client work built from the arguments
      above. Or another whose update is the identified client work's
      `OrderedDict(delta, loss, client_id)`, e.g. persistent client
      optimizer state: `build_stateful_client_work(..., with_loss_and_id=
      True, local_epochs=E)` (with a `client_store`, the process returned
      is wrapped by `stored_client_state` as well). The client arguments
      above (`client_optimizer_fn`, `client_weighting`, `local_epochs`, ...)
      are then the given client work's own.

  Returns:
    A `tff.learning.templates.LearningProcess`, or a
    `fedcda_store.FedCdaStoreProcess` with a `history_store`.
  """
  builder = 'build_fedcda_process'
  checks.check_model_fn(model_fn, builder)
  max_clients = checks.check_max_clients(max_clients, builder)
  if not max_clients <= num_clients < identified.MAX_CLIENT_ID:
    raise ValueError(
      f'{builder}: num_clients (the population, {num_clients}) must be at '
      f'least max_clients ({max_clients}, the largest cohort) and below '
      '2**24.'
    )
  fedcda_store.check_store(history_store)
  if history_store is not None and model_distributor is not None:
    raise ValueError(
      f'{builder}: model_distributor works with the in-state history only '
      '(history_store=None); the driver-side history broadcasts the model.'
    )
  cda_options = fedcda.FedCdaOptions(
    memory_size=memory_size,
    num_batches=num_batches,
    smoothness=smoothness,
    warmup_rounds=warmup_rounds,
    seed=seed,
    selection=selection,  # Options with fixed values: options.parse.
    divergence=divergence,
    later_batches=later_batches,
    warmup_aggregation=warmup_aggregation,
    batch_param=batch_param,
  )
  initial_model_weights_fn = client_works.initial_model_weights_fn(model_fn)
  model_weights_type = initial_model_weights_fn.type_signature.result
  if client_work is None:
    client_work = identified.build_identified_client_work(
      model_fn,
      client_optimizer_fn,
      client_weighting=client_weighting,
      metrics_aggregator=metrics_aggregator,
      loop_implementation=loop_implementation,
      local_epochs=local_epochs,
    )
  update_type = _check_client_work(
    client_work, builder, num_clients=num_clients, max_clients=max_clients
  )
  _check_two_stores(history_store, client_work, builder)
  aggregator = collect.CollectAllFactory(max_clients).create(
    update_type, tff.TensorType(np.float32)
  )
  if history_store is not None:
    process = fedcda_store.FedCdaStoreProcess(
      initial_model_weights_fn=initial_model_weights_fn,
      client_work=client_work,
      aggregator=aggregator,
      update_type=update_type,
      num_clients=num_clients,
      max_clients=max_clients,
      options=cda_options,
      history_store=history_store,
    )
    if isinstance(client_work, stateful.StoredStateClientWork):
      return stored_client_state.ClientStateStoreProcess(process, client_work)
    return process
  finalizer = fedcda.build_fedcda_finalizer(
    model_weights_type,
    update_type,
    num_clients=num_clients,
    max_clients=max_clients,
    options=cda_options,
    max_state_bytes=max_state_bytes,
  )
  return client_works.compose(
    initial_model_weights_fn,
    client_work,
    aggregator,
    finalizer,
    model_distributor,
    round_check=functools.partial(
      fedcda_store.check_round, num_clients=num_clients, max_clients=max_clients
    ),
  )


def _check_client_work(
  client_work, builder: str, *, num_clients: int, max_clients: int
) -> tff.Type:
  """The update type of a client work FedCDA can take; raises otherwise."""
  try:
    client_works.check_client_work(
      client_work, num_clients=num_clients, max_clients=max_clients
    )
  except ValueError as e:
    raise ValueError(f'{builder}: {e}') from e
  update_type = client_work.next.type_signature.result.result.member.update
  names = (
    tff.structure.name_list(update_type)
    if isinstance(update_type, tff.StructType)
    else []
  )
  if names != [identified.DELTA, identified.LOSS, identified.CLIENT_ID]:
    raise ValueError(
      f"{builder}: the client work must report each client's delta, loss "
      'and id (FedCDA keeps them): build_stateful_client_work(..., '
      'with_loss_and_id=True) or the identified client work; its update '
      f'is {update_type}.'
    )
  return update_type


def _check_two_stores(history_store, client_work, builder: str) -> None:
  """Raises if the history and the client states would share a store."""
  states = getattr(client_work, 'client_store', None)
  if history_store is None or states is None:
    return
  stores = (history_store, states)
  directories = {getattr(store, 'directory', None) for store in stores}
  same_file = None not in directories and len(directories) == 1
  if history_store is states or same_file:
    raise ValueError(
      f"{builder}: history_store and the client work's client_store hold "
      'different rows: pass two store objects (two directories on disk).'
    )
