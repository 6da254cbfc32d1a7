"""`build_<method>_process` builders, in the style of
`tff.learning.algorithms.build_weighted_fed_avg`."""
