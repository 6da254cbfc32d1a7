"""Federated aggregation methods as TensorFlow Federated building blocks.

Each method is a `tff.aggregators` factory, finalizer or client-work process
that composes into `tff.learning`, plus a `build_<method>_process` builder in
the style of `tff.learning.algorithms.build_weighted_fed_avg`. The TFF
runtime helper that ends its worker process with the Python process is
`tff_aggregators.runtime` (imported on its own: importing it replaces TFF's
default execution context).
"""

from tff_aggregators.aggregators.collect import CollectAllFactory
from tff_aggregators.aggregators.dropped_clients import DroppedClientsFactory
from tff_aggregators.aggregators.fedglad import FedGladFactory
from tff_aggregators.aggregators.fedlws_stats import FedLwsStatsFactory
from tff_aggregators.algorithms.client_works import build_weighted_fed_prox
from tff_aggregators.algorithms.fedcda import build_fedcda_process
from tff_aggregators.algorithms.fedcda_store import HistoryStore
from tff_aggregators.algorithms.fedcda_store import InMemoryHistoryStore
from tff_aggregators.algorithms.fedcda_store import MemmapHistoryStore
from tff_aggregators.algorithms.fedglad import build_fedglad_process
from tff_aggregators.algorithms.fedlaw import build_fedlaw_process
from tff_aggregators.algorithms.fedlaw import check_proxy_data
from tff_aggregators.algorithms.fedlws import build_fedlws_process
from tff_aggregators.algorithms.fedsa import build_fedsa_process
from tff_aggregators.algorithms.stored_client_state import with_client_store
from tff_aggregators.client_works.identified import build_identified_client_work
from tff_aggregators.client_works.identified import with_client_ids
from tff_aggregators.client_works.proximal import build_proximal_client_work
from tff_aggregators.client_works.stateful import build_stateful_client_work
from tff_aggregators.finalizers.fedcda import build_fedcda_finalizer
from tff_aggregators.finalizers.fedlaw import build_fedlaw_finalizer
from tff_aggregators.finalizers.fedlws import build_fedlws_finalizer
from tff_aggregators.finalizers.fedlws import layer_groups
from tff_aggregators.finalizers.fedlws import model_layer_groups
from tff_aggregators.finalizers.fedsa import build_fedsa_finalizer
from tff_aggregators.finalizers.glad_adaptive import (
  build_glad_adaptive_finalizer,
)
from tff_aggregators.options import FedCdaBatchParam
from tff_aggregators.options import FedCdaDivergence
from tff_aggregators.options import FedCdaLaterBatches
from tff_aggregators.options import FedCdaSelection
from tff_aggregators.options import FedCdaWarmupAggregation
from tff_aggregators.options import FedGladEmit
from tff_aggregators.options import FedGladGrouping
from tff_aggregators.options import FedGladServerUpdateScaling
from tff_aggregators.options import FedLawVariant
from tff_aggregators.options import FedLwsGrouping
from tff_aggregators.options import FedLwsTauMode
from tff_aggregators.options import FedSaAlphaNormalization
from tff_aggregators.options import FedSaClusterScope
from tff_aggregators.options import FedSaLateJoinMode
from tff_aggregators.options import FedSaMicNormalization
from tff_aggregators.options import FedSaZeroMeanPolicy
from tff_aggregators.programs.client_store import ClientStore
from tff_aggregators.programs.client_store import InMemoryClientStore
from tff_aggregators.programs.client_store import MemmapClientStore
from tff_aggregators.programs.data_sources import ClientDataSource
from tff_aggregators.programs.data_sources import IdentifiedDataSource

__version__ = '0.1.0'

__all__ = [
  'ClientDataSource',
  'ClientStore',
  'CollectAllFactory',
  'DroppedClientsFactory',
  'FedCdaBatchParam',
  'FedCdaDivergence',
  'FedCdaLaterBatches',
  'FedCdaSelection',
  'FedCdaWarmupAggregation',
  'FedGladEmit',
  'FedGladFactory',
  'FedGladGrouping',
  'FedGladServerUpdateScaling',
  'FedLawVariant',
  'FedLwsGrouping',
  'FedLwsStatsFactory',
  'FedLwsTauMode',
  'FedSaAlphaNormalization',
  'FedSaClusterScope',
  'FedSaLateJoinMode',
  'FedSaMicNormalization',
  'FedSaZeroMeanPolicy',
  'HistoryStore',
  'IdentifiedDataSource',
  'InMemoryClientStore',
  'InMemoryHistoryStore',
  'MemmapClientStore',
  'MemmapHistoryStore',
  'build_fedcda_finalizer',
  'build_fedcda_process',
  'build_fedglad_process',
  'build_fedlaw_finalizer',
  'build_fedlaw_process',
  'build_fedlws_finalizer',
  'build_fedlws_process',
  'build_fedsa_finalizer',
  'build_fedsa_process',
  'build_glad_adaptive_finalizer',
  'build_identified_client_work',
  'build_proximal_client_work',
  'build_stateful_client_work',
  'build_weighted_fed_prox',
  'check_proxy_data',
  'layer_groups',
  'model_layer_groups',
  'with_client_ids',
  'with_client_store',
]
