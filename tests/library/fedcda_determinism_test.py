"""FedCDA's selection does not depend on floating-point noise.

A tie within `TIE_RTOL` resolves to the newest combination (a unit check of
the rule), and the same run pinned to one core and to two cores (another
summation order in the kernels) selects the same models.
"""

import json
import subprocess
import sys
import textwrap

from absl.testing import absltest
import numpy as np
import tensorflow as tf

from tests import test_utils
from tff_aggregators import runtime  # noqa: F401  # pylint: disable=unused-import
from tff_aggregators.finalizers import fedcda

_RUN = textwrap.dedent("""
    import json
    import numpy as np
    import tensorflow as tf
    import tensorflow_federated as tff
    import tff_aggregators
    from tff_aggregators import runtime
    from tests import test_utils

    runtime.use_local_worker()
    tf.keras.utils.set_random_seed(0)
    datasets = test_utils.tiny_client_datasets(6)
    process = tff_aggregators.build_fedcda_process(
        test_utils.tiny_model_fn, tff.learning.optimizers.build_sgdm(0.5),
        num_clients=6, max_clients=3, warmup_rounds=1, seed=3)
    state = process.initialize()
    rng = np.random.default_rng(0)
    older = []
    for _ in range(5):
      ids = sorted(rng.choice(6, 3, replace=False).tolist())
      output = process.next(state, tff_aggregators.with_client_ids(
          [datasets[i] for i in ids], ids))
      state = output.state
      older.append(int(output.metrics['finalizer']['older_selected']))
    weights = process.get_model_weights(state)
    print(json.dumps(dict(
        older=older,
        selected=np.asarray(state.finalizer['selected']).tolist(),
        model=test_utils.flat_trainable(weights).tolist())))
""")


class FedCdaDeterminismTest(absltest.TestCase):
  def test_near_ties_go_to_the_newest_combination(self):
    rule = lambda scores: int(
      fedcda.first_within_tolerance(tf.constant(scores, tf.float64))
    )
    self.assertEqual(rule([1.0, 1.0 - 1e-14, 2.0]), 0)  # Noise: a tie.
    self.assertEqual(rule([-3.0, -3.0 - 1e-13]), 0)
    self.assertEqual(rule([1.0, 0.999, 0.999 + 1e-15]), 1)  # A real gap.
    self.assertEqual(rule([np.inf, 5.0, np.inf]), 1)
    self.assertEqual(rule([np.inf, np.inf]), 0)

  def _run_on(self, cores: str) -> dict:
    result = subprocess.run(
      ['taskset', '-c', cores, sys.executable, '-c', _RUN],
      env=test_utils.marked_environment(test_utils.new_marker()),
      cwd=test_utils.REPO_ROOT,
      capture_output=True,
      text=True,
      timeout=300,
      check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])

  def test_one_core_and_two_select_the_same(self):
    one, two = self._run_on('0'), self._run_on('0,1')
    self.assertEqual(one['older'], two['older'])
    self.assertGreater(sum(one['older']), 0)  # Selection did happen.
    self.assertEqual(one['selected'], two['selected'])
    np.testing.assert_allclose(one['model'], two['model'], rtol=1e-6)


if __name__ == '__main__':
  absltest.main()
