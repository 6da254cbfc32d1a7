"""Every registered aggregator trains a few rounds on real Fashion-MNIST.

Through the experiments' registry and training loop, as `--aggregator=<name>`
does, with the SGD, momentum and Adam servers.
"""

import itertools
import os

from absl.testing import absltest
from absl.testing import flagsaver
from absl.testing import parameterized
import numpy as np
import tensorflow_federated as tff

from experiments import registry
from tff_aggregators import runtime
from experiments import training
from tests import test_utils

_SERVERS = {
  'sgd': lambda: tff.learning.optimizers.build_sgdm(1.0),
  'sgdm': lambda: tff.learning.optimizers.build_sgdm(0.5, momentum=0.9),
  'adam': lambda: tff.learning.optimizers.build_adam(0.003, epsilon=1e-8),
}
# FedCDA's, FedLAW's and FedSA's aggregations replace the server optimizer.
_UNSUPPORTED = {
  (method, server)
  for method in ('fedcda', 'fedlaw', 'fedsa')
  for server in ('sgdm', 'adam')
}
# Under `make test`: every method but FedAvg (trained by the binaries' tests)
# with SGD, and FedGLAD (which sets the server learning rate) and FedLWS (which
# shrinks the update) with one other server each.
_FULL_SUITE_ONLY = {
  ('fedavg', 'sgd'),
  ('fedavg', 'sgdm'),
  ('fedavg', 'adam'),
  ('fedglad', 'sgdm'),
  ('fedlws', 'adam'),
}


def setUpModule():
  runtime.use_local_worker()


class AggregatorsOnFashionMnistTest(parameterized.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls._task = test_utils.small_fmnist_task(
      absltest.get_default_test_tmpdir() + '/fmnist',
      num_clients=6,
      local_epochs=1,
    )
    datasets = cls._task.datasets
    cls._proxy = datasets.eval_preprocess_fn(
      datasets.test_data.take(50)
    ).unbatch()

  @parameterized.parameters(
    itertools.product(registry.names(), sorted(_SERVERS))
  )
  def test_three_rounds(self, aggregator, server):
    inputs = registry.ProcessInputs(
      model_fn=self._task.model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
      server_optimizer_fn=_SERVERS[server](),
      server_optimizer=server,
      clients_per_round=4,
      proxy_data=self._proxy,
      num_clients=6,
    )
    if (aggregator, server) in _FULL_SUITE_ONLY:
      test_utils.skip_unless_full_suite(self, 'another server covers it')
    if (aggregator, server) in _UNSUPPORTED:
      with self.assertRaisesRegex(ValueError, 'server_optimizer'):
        registry.build_process(aggregator, inputs)
      return
    # FedCDA's selection starts after its warm-up: one round here.
    with flagsaver.flagsaver(fedcda_warmup=1):
      process = registry.build_process(aggregator, inputs)
    output_dir = self.create_tempdir().full_path
    summary = training.train(
      process,
      self._task,
      training.TrainingConfig(
        rounds=3,
        clients_per_round=4,
        seed=0,
        output_dir=output_dir,
      ),
      label=aggregator,
    )
    rows = training.read_metrics(output_dir)
    losses = [float(r['train/client_work/train/loss']) for r in rows]
    self.assertTrue(np.all(np.isfinite(losses)))
    self.assertLess(losses[-1], losses[0])
    self.assertGreater(summary['final_accuracy'], 0.25)  # Chance is 0.1.
    method_measurements = [
      key
      for key in rows[-1]
      if key.startswith('train/')
      and not key.startswith('train/client_work/')
      and key != 'train/finalizer/update_non_finite'
    ]
    if aggregator != 'fedavg':  # The method's measurements are released.
      self.assertNotEmpty(method_measurements, sorted(rows[-1]))

  def test_fedcda_history_outside_tff_trains_and_resumes(self):
    test_utils.skip_unless_full_suite(
      self,
      'fedcda_store_test resumes the store; baseline_tasks_test trains with it',
    )
    inputs = lambda output_dir: registry.ProcessInputs(
      model_fn=self._task.model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
      server_optimizer_fn=_SERVERS['sgd'](),
      server_optimizer='sgd',
      clients_per_round=4,
      num_clients=6,
      output_dir=output_dir,
    )

    def train(history, output_dir, rounds):
      with flagsaver.flagsaver(fedcda_warmup=1, fedcda_history=history):
        process = registry.build_process('fedcda', inputs(output_dir))
      training.train(
        process,
        self._task,
        training.TrainingConfig(
          rounds=rounds, clients_per_round=4, seed=0, output_dir=output_dir
        ),
      )
      return training.read_metrics(output_dir)

    want = train('state', self.create_tempdir().full_path, 4)
    output_dir = self.create_tempdir().full_path
    train('disk', output_dir, 2)
    got = train('disk', output_dir, 4)  # Resumes from round 2.
    self.assertTrue(
      os.path.exists(os.path.join(output_dir, 'fedcda_history', 'models.f32'))
    )
    for column in (
      'train/client_work/train/loss',
      'test/sparse_categorical_accuracy',
      'train/finalizer/older_selected',
    ):
      np.testing.assert_allclose(
        [float(r[column]) for r in got],
        [float(r[column]) for r in want],
        rtol=1e-5,
        err_msg=column,
      )


if __name__ == '__main__':
  absltest.main()
