"""Federated aggregation methods as TensorFlow Federated building blocks.

Each method is a `tff.aggregators` factory, finalizer or client-work process
that composes into `tff.learning`, plus a `build_<method>_process` builder in
the style of `tff.learning.algorithms.build_weighted_fed_avg`.
"""

__version__ = '0.1.0'
