"""Client work (`tff.learning.templates.ClientWorkProcess`) for methods that
need more from each client than its model delta."""

# The public modules (imported as modules; the package re-exports nothing).
__all__ = [
  'identified',
  'proximal',
  'stateful',
  'with_hparams',
]
