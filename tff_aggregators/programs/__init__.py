"""`tff.program` pieces for the methods here."""

# The public modules (imported as modules; the package re-exports nothing).
__all__ = [
  'client_store',
  'data_sources',
]
