"""The installed wheel, as a user's script uses it, with its output piped.

Builds the wheel from pyproject.toml, installs it (no dependencies: the test
environment has TFF) into a fresh directory, and runs a user's script from
outside the source tree with only that directory on its path: FedCDA and
FedGLAD through `tff.learning.programs.train_model` on TFF's synthetic EMNIST,
with `tff_aggregators.runtime`. Piped through `tail`, the script must end by
itself (a TFF worker left behind would hold the pipe open) and leave no
process behind.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

from absl.testing import absltest

from tests import test_utils
from tff_aggregators import runtime  # noqa: F401  # pylint: disable=unused-import
# (Importing it drops TFF's default context, whose __del__ fails at exit.)

_SCRIPT = textwrap.dedent("""
    import asyncio, os, sys, tempfile
    import numpy as np
    import tensorflow as tf
    import tensorflow_federated as tff
    import tff_aggregators
    from tff_aggregators import runtime

    assert tff_aggregators.__file__.startswith(sys.argv[1]), (
        tff_aggregators.__file__)
    runtime.native_federated_context()
    client_data = tff.simulation.datasets.emnist.get_synthetic()

    def model_fn():
      return tff.learning.models.from_keras_model(
          tf.keras.Sequential([tf.keras.layers.Flatten(input_shape=(28, 28)),
                               tf.keras.layers.Dense(10)]),
          loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
          input_spec=(tf.TensorSpec([None, 28, 28]),
                      tf.TensorSpec([None], tf.int32)))

    def preprocess(d):
      return d.map(lambda e: (e['pixels'], e['label'])).batch(5)

    sgd = tff.learning.optimizers.build_sgdm(0.05)
    runs = {
        'fedcda': (tff_aggregators.build_fedcda_process(
            model_fn, sgd, num_clients=2, max_clients=2, warmup_rounds=1),
                   tff_aggregators.IdentifiedDataSource(
                       client_data, preprocess_fn=preprocess)),
        'fedglad': (tff_aggregators.build_fedglad_process(model_fn, sgd),
                    tff_aggregators.ClientDataSource(
                        client_data, preprocess_fn=preprocess)),
    }
    for name, (process, source) in runs.items():
      asyncio.run(tff.learning.programs.train_model(
          train_process=process, train_data_source=source,
          train_per_round_clients=2, train_total_rounds=2,
          program_state_manager=tff.program.FileProgramStateManager(
              tempfile.mkdtemp()),
          model_output_manager=tff.program.MemoryReleaseManager(),
          evaluation_manager=None, evaluation_periodicity=1))
      print(name, 'trained', flush=True)
    print('done', flush=True)
""")


class WheelTest(absltest.TestCase):
  def _install_wheel(self) -> str:
    source = tempfile.mkdtemp()
    for name in ('pyproject.toml', 'README.md'):
      shutil.copy(os.path.join(test_utils.REPO_ROOT, name), source)
    shutil.copytree(
      os.path.join(test_utils.REPO_ROOT, 'tff_aggregators'),
      os.path.join(source, 'tff_aggregators'),
      ignore=shutil.ignore_patterns('BUILD', '__pycache__'),
    )
    wheels = tempfile.mkdtemp()
    subprocess.run(
      [
        sys.executable,
        '-m',
        'pip',
        'wheel',
        '--quiet',
        '--no-deps',
        '--no-build-isolation',
        '--wheel-dir',
        wheels,
        source,
      ],
      check=True,
      capture_output=True,
      timeout=300,
    )
    (wheel,) = os.listdir(wheels)
    target = tempfile.mkdtemp()
    subprocess.run(
      [
        sys.executable,
        '-m',
        'pip',
        'install',
        '--quiet',
        '--no-deps',
        '--target',
        target,
        os.path.join(wheels, wheel),
      ],
      check=True,
      capture_output=True,
      timeout=300,
    )
    return target

  def test_users_script_from_the_wheel_ends_with_its_pipe(self):
    target = self._install_wheel()
    script = os.path.join(tempfile.mkdtemp(), 'train.py')
    with open(script, 'w') as f:
      f.write(_SCRIPT)
    marker = test_utils.new_marker()
    env = test_utils.marked_environment(marker)
    env['PYTHONPATH'] = target  # The wheel only, not the source tree.
    result = subprocess.run(
      ['bash', '-c', f'"{sys.executable}" "{script}" "{target}" | tail -n 3'],
      env=env,
      cwd=os.path.dirname(script),
      capture_output=True,
      text=True,
      timeout=600,
    )
    self.assertEqual(result.returncode, 0, result.stderr[-2000:])
    self.assertEqual(
      result.stdout.split(), ['fedcda', 'trained', 'fedglad', 'trained', 'done']
    )
    self.assertTrue(
      test_utils.wait_until(
        lambda: not test_utils.pids_with_marker(marker), 10
      ),
      f'left behind: {test_utils.pids_with_marker(marker)}',
    )


if __name__ == '__main__':
  absltest.main()
