"""Aggregation factories (`tff.aggregators` style): what the server sees of
the clients' updates."""

# The public modules (imported as modules; the package re-exports nothing).
__all__ = [
  'collect',
  'dropped_clients',
  'fedglad',
  'fedlws_stats',
]
