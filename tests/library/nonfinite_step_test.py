"""Every finalizer rejects a non-finite or overflowing step from finite inputs.

A rejected step leaves the model and the finalizer's state as they were and
is counted in the measurement `update_non_finite`; no finalizer turns finite
inputs into a zero or NaN model.
"""

import collections

from absl.testing import absltest
import numpy as np
import tensorflow_federated as tff

from tests import test_utils
from tff_aggregators import runtime
from tff_aggregators.finalizers import fedlaw
from tff_aggregators.finalizers import fedlws
from tff_aggregators.finalizers import fedsa
from tff_aggregators.finalizers import glad_adaptive

_SHAPES = ([3, 2], [2])
_WEIGHTS_TYPE = tff.types.to_type(
  tff.learning.models.ModelWeights(
    trainable=[tff.TensorType(np.float32, s) for s in _SHAPES],
    non_trainable=[],
  )
)
_SIZE = sum(int(np.prod(s)) for s in _SHAPES)


def setUpModule():
  runtime.use_local_worker()


def _weights(scale: float = 1.0) -> tff.learning.models.ModelWeights:
  rng = np.random.default_rng(0)
  return tff.learning.models.ModelWeights(
    trainable=[
      (scale * rng.normal(size=s)).astype(np.float32) for s in _SHAPES
    ],
    non_trainable=[],
  )


def _collected(deltas: np.ndarray) -> collections.OrderedDict:
  return collections.OrderedDict(
    values=deltas.astype(np.float32),
    weights=np.ones(len(deltas), np.float32),
  )


class NonFiniteStepTest(absltest.TestCase):
  def assert_unchanged(self, output, weights):
    self.assertEqual(output.measurements['update_non_finite'], 1)
    for new, old in zip(output.result.trainable, weights.trainable):
      np.testing.assert_array_equal(new, old)

  def test_fedlws_rejects_an_overflowing_step(self):
    # A 1e30 server step is finite, but its norm overflows float32: gamma
    # would be 0 and the model zero.
    weights = _weights()
    process = fedlws.build_fedlws_finalizer(
      tff.learning.optimizers.build_sgdm(1e30),
      _WEIGHTS_TYPE,
      groups=[[0, 1]],
      beta=0.1,
    )
    stats = collections.OrderedDict(
      mean_update=[np.ones(s, np.float32) for s in _SHAPES],
      tau=np.ones([1], np.float32),
      num_clients=np.float32(3),
    )
    state = process.initialize()
    output = process.next(state, weights, stats)
    self.assert_unchanged(output, weights)
    np.testing.assert_array_equal(output.state['beta'], state['beta'])

  def test_glad_adam_rejects_an_overflowing_second_moment(self):
    # g**2 overflows: v would become inf and freeze the model for ever.
    weights = _weights()
    process = glad_adaptive.build_glad_adaptive_finalizer(
      tff.learning.optimizers.build_adam(0.01), _WEIGHTS_TYPE
    )
    state = process.initialize()
    update = collections.OrderedDict(
      update=[np.full(s, 1e20, np.float32) for s in _SHAPES],
      multipliers=np.ones(len(_SHAPES), np.float32),
    )
    output = process.next(state, weights, update)
    self.assert_unchanged(output, weights)
    self.assertEqual(output.state['step'], state['step'])
    for new, old in zip(
      output.state['preconditioner'], state['preconditioner']
    ):
      np.testing.assert_array_equal(new, old)

  def test_fedlaw_rejects_an_overflowing_result(self):
    weights = _weights(scale=1e10)
    process = fedlaw.build_fedlaw_finalizer(
      test_utils.tiny_model_fn,
      _WEIGHTS_TYPE,
      None,
      max_clients=3,
      variant='fixed_gamma',
      fixed_gamma=1e30,
    )
    deltas = np.random.default_rng(1).normal(size=(3, _SIZE))
    output = process.next(process.initialize(), weights, _collected(deltas))
    self.assert_unchanged(output, weights)
    self.assertEqual(output.measurements['num_dropped_clients'], 0)

  def test_fedsa_rejects_an_overflowing_result(self):
    # Client models near the float32 maximum: their sum overflows.
    weights = _weights()
    process = fedsa.build_fedsa_finalizer(_WEIGHTS_TYPE)
    deltas = np.full((3, _SIZE), -3e38)
    output = process.next(process.initialize(), weights, _collected(deltas))
    self.assert_unchanged(output, weights)

  def test_dropped_clients_are_counted(self):
    weights = _weights()
    deltas = np.random.default_rng(2).normal(size=(3, _SIZE))
    deltas[0, 0] = np.nan
    collected = _collected(deltas)
    collected['weights'][1] = 0.0
    for process in (
      fedsa.build_fedsa_finalizer(_WEIGHTS_TYPE),
      fedlaw.build_fedlaw_finalizer(
        test_utils.tiny_model_fn,
        _WEIGHTS_TYPE,
        None,
        max_clients=3,
        variant='fixed_gamma',
        fixed_gamma=1.0,
      ),
    ):
      output = process.next(process.initialize(), weights, collected)
      self.assertEqual(output.measurements['num_dropped_clients'], 2)
      self.assertEqual(output.measurements['update_non_finite'], 0)


if __name__ == '__main__':
  absltest.main()
