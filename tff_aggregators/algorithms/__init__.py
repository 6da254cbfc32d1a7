"""`build_<method>_process` builders returning `tff.learning` processes."""

from tff_aggregators.algorithms.fedcda import build_fedcda_process
from tff_aggregators.algorithms.fedglad import build_fedglad_process
from tff_aggregators.algorithms.fedlaw import build_fedlaw_process
from tff_aggregators.algorithms.fedlws import build_fedlws_process
from tff_aggregators.algorithms.fedsa import build_fedsa_process

__all__ = [
  'build_fedcda_process',
  'build_fedglad_process',
  'build_fedlaw_process',
  'build_fedlws_process',
  'build_fedsa_process',
]
