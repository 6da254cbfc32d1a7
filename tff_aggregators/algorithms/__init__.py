"""`build_<method>_process` builders returning `tff.learning` processes."""

from tff_aggregators.algorithms.fedcda import build_fedcda_process
from tff_aggregators.algorithms.fedglad import build_fedglad_process
from tff_aggregators.algorithms.fedlaw import build_fedlaw_process
from tff_aggregators.algorithms.fedlws import build_fedlws_process
from tff_aggregators.algorithms.fedsa import build_fedsa_process
