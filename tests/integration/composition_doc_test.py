"""docs/composition.md runs, and its hand compositions match the builders.

Every ```python block of the page is executed in order in one namespace (as
a reader pasting them into one session would); then each hand-composed
process is run next to the `build_<method>_process` it mirrors, from the
same initial weights on the same client data, and must give the same model.
So the page cannot silently drift from the builders.
"""

import os
import re

from absl.testing import absltest
import numpy as np
import tensorflow_federated as tff

from tests import test_utils
import tff_aggregators

_DOC = os.path.join(test_utils.REPO_ROOT, 'docs', 'composition.md')
_BLOCK = re.compile(r'^```python\n(.*?)^```$', re.DOTALL | re.MULTILINE)

# What the page must show composed in its code (the brief of the page).
_SHOWN = (
  'FedGladFactory',
  'build_glad_adaptive_finalizer',
  "emit='update_and_multipliers'",
  'clipping_factory',
  'zeroing_factory',
  'build_weighted_fed_avg',
  'FedLwsStatsFactory',
  'build_fedlws_finalizer',
  'tff_aggregators.layer_groups',
  'tff_aggregators.model_layer_groups',
  'CollectAllFactory',
  'build_fedlaw_finalizer',
  'build_fedsa_finalizer',
  'build_identified_client_work',
  'build_fedcda_finalizer',
  'tff_aggregators.with_client_ids',
  'build_proximal_client_work',
  'compose_learning_process',
  'build_broadcast_process',
  'build_model_delta_client_work',
  'runtime.use_local_worker()',
  'tff.learning.models.from_keras_model',
)

_namespace = {}


def _blocks() -> list[str]:
  with open(_DOC) as f:
    return _BLOCK.findall(f.read())


def setUpModule():
  # The page's preamble calls runtime.use_local_worker() itself.
  for i, block in enumerate(_blocks()):
    exec(compile(block, f'{_DOC} (python block {i + 1})', 'exec'), _namespace)  # pylint: disable=exec-used


def _trainable(process, state) -> list[np.ndarray]:
  return [np.asarray(x) for x in process.get_model_weights(state).trainable]


class CompositionDocTest(absltest.TestCase):
  def assert_same_model(self, name, built, *, rounds=1, client_data=None):
    """`built` gives the model the page's process `name` gives."""
    hand = _namespace[name]
    if client_data is None:
      client_data = _namespace['client_datasets']
    hand_state = hand.initialize()
    initial = hand.get_model_weights(hand_state)
    built_state = built.set_model_weights(built.initialize(), initial)
    for _ in range(rounds):
      hand_state = hand.next(hand_state, client_data).state
      built_state = built.next(built_state, client_data).state
    got = _trainable(hand, hand_state)
    want = _trainable(built, built_state)
    moved = any(not np.allclose(g, w0) for g, w0 in zip(got, initial.trainable))
    self.assertTrue(moved, f'{name}: the round left the model unchanged')
    for i, (g, w) in enumerate(zip(got, want)):
      np.testing.assert_allclose(
        g,
        w,
        rtol=1e-6,
        atol=1e-6,
        err_msg=f'{name}, trainable tensor {i}, after {rounds} round(s)',
      )

  def test_every_block_ran_and_every_piece_is_shown(self):
    code = '\n'.join(_blocks())
    self.assertGreaterEqual(len(_blocks()), 9)
    for piece in _SHOWN:
      self.assertIn(piece, code)
    for name in (
      'glad_process',
      'robust_glad_process',
      'glad_adam_process',
      'lws_process',
      'law_process',
      'sa_process',
      'cda_process',
      'prox_process',
    ):
      self.assertIsInstance(
        _namespace[name], tff.learning.templates.LearningProcess, name
      )

  def test_every_building_block_of_the_api_is_composed(self):
    code = '\n'.join(_blocks())
    for name in tff_aggregators.__all__:
      if (
        name.startswith('build_')
        and not name.endswith('_process')
        and (name != 'build_weighted_fed_prox')
      ):
        self.assertIn(f'tff_aggregators.{name}(', code)
      if name.endswith('Factory'):
        self.assertIn(f'tff_aggregators.{name}(', code)

  def test_fedglad_sgd_matches_builder(self):
    # Two rounds: the first is FedAvg (bounds [1, 1]); the second scales.
    ns = _namespace
    self.assert_same_model(
      'glad_process',
      tff_aggregators.build_fedglad_process(
        ns['model_fn'],
        ns['client_optimizer'],
        tff.learning.optimizers.build_sgdm(learning_rate=1.0),
        gamma=0.5,
        beta=0.9,
      ),
      rounds=2,
    )

  def test_fedglad_adam_matches_builder(self):
    ns = _namespace
    self.assert_same_model(
      'glad_adam_process',
      tff_aggregators.build_fedglad_process(
        ns['model_fn'],
        ns['client_optimizer'],
        tff.learning.optimizers.build_adam(learning_rate=0.05, epsilon=1e-8),
        gamma=0.5,
        beta=0.9,
      ),
      rounds=2,
    )

  def test_fedlws_matches_builder(self):
    ns = _namespace
    self.assertEqual(ns['groups'], [[0, 1], [2, 3]])
    self.assert_same_model(
      'lws_process',
      tff_aggregators.build_fedlws_process(
        ns['model_fn'], ns['client_optimizer'], beta=0.1
      ),
    )

  def test_fedprox_clients_match_builder(self):
    ns = _namespace
    self.assert_same_model(
      'prox_process',
      tff_aggregators.build_fedlws_process(
        ns['model_fn'], ns['client_optimizer'], beta=0.1, proximal_strength=0.1
      ),
    )

  def test_fedlaw_matches_builder(self):
    ns = _namespace
    self.assert_same_model(
      'law_process',
      tff_aggregators.build_fedlaw_process(
        ns['model_fn'],
        ns['client_optimizer'],
        proxy_data=ns['proxy_data'],
        max_clients=3,
        server_epochs=5,
        server_lr=0.005,
        proxy_batch_size=8,
      ),
    )

  def test_fedsa_matches_builder(self):
    ns = _namespace
    self.assert_same_model(
      'sa_process',
      tff_aggregators.build_fedsa_process(
        ns['model_fn'],
        ns['client_optimizer'],
        max_clients=3,
        num_categories=4,
        max_clusters=4,
        cv_threshold=0.2,
        sim_threshold=0.2,
      ),
    )

  def test_fedcda_matches_builder(self):
    # Two rounds: a warm-up (FedAvg) round, then a selection round.
    ns = _namespace
    self.assert_same_model(
      'cda_process',
      tff_aggregators.build_fedcda_process(
        ns['model_fn'],
        ns['client_optimizer'],
        num_clients=3,
        max_clients=3,
        memory_size=2,
        num_batches=2,
        smoothness=1.0,
        warmup_rounds=1,
        seed=0,
      ),
      rounds=2,
      client_data=ns['cda_client_data'],
    )


if __name__ == '__main__':
  absltest.main()
