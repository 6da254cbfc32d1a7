"""Finalizers (`tff.learning.templates.FinalizerProcess`): server rules that
need the global model."""

# The public modules (imported as modules; the package re-exports nothing).
__all__ = [
  'fedcda',
  'fedlaw',
  'fedlws',
  'fedsa',
  'glad_adaptive',
  'on_collected',
  'server_step',
]
