"""The option enums and `options.parse`, their one check, at every builder."""

import enum
import inspect

from absl.testing import absltest
from absl.testing import parameterized
import tensorflow_federated as tff

import tff_aggregators
from tff_aggregators import options

# Every enum with the values its builders and building blocks accepted as
# strings before it existed (so the strings keep working).
_VALUES = {
  options.FedLawVariant: ['fedlaw', 'gamma', 'lambda', 'swa', 'fixed_gamma'],
  options.FedLwsGrouping: ['layer', 'keras_layer', 'model'],
  options.FedLwsTauMode: ['exact', 'rms'],
  options.FedGladGrouping: ['per_variable', 'universal'],
  options.FedGladEmit: ['scaled_update', 'update_and_multipliers'],
  options.FedGladServerUpdateScaling: ['auto', 'update', 'first_moment'],
  options.FedSaAlphaNormalization: ['sum_to_one', 'literal'],
  options.FedSaMicNormalization: [
    'per_coordinate_minmax',
    'per_tensor_minmax',
    'quantile',
    'raw',
  ],
  options.FedSaZeroMeanPolicy: ['inf_is_high', 'epsilon'],
  options.FedSaLateJoinMode: ['greedy_update', 'frozen'],
  options.FedSaClusterScope: ['per_tensor', 'global'],
  options.FedCdaSelection: ['approx', 'newest', 'random'],
  options.FedCdaDivergence: ['squared_l2', 'tensorwise_norm'],
  options.FedCdaLaterBatches: ['excluded', 'included_at_previous_selection'],
  options.FedCdaWarmupAggregation: ['fedavg', 'all_seen_newest'],
  options.FedCdaBatchParam: ['num_batches', 'clients_per_batch'],
}

# (builder, option) -> its enum: each builder's default must be a member.
_BUILDER_OPTIONS = [
  (tff_aggregators.build_fedlaw_process, 'variant', options.FedLawVariant),
  (tff_aggregators.build_fedlws_process, 'tau_mode', options.FedLwsTauMode),
  (tff_aggregators.build_fedlws_process, 'grouping', options.FedLwsGrouping),
  (
    tff_aggregators.build_fedglad_process,
    'grouping',
    options.FedGladGrouping,
  ),
  (
    tff_aggregators.build_fedglad_process,
    'server_update_scaling',
    options.FedGladServerUpdateScaling,
  ),
  (
    tff_aggregators.build_fedsa_process,
    'alpha_normalization',
    options.FedSaAlphaNormalization,
  ),
  (
    tff_aggregators.build_fedsa_process,
    'mic_normalization',
    options.FedSaMicNormalization,
  ),
  (
    tff_aggregators.build_fedsa_process,
    'zero_mean_policy',
    options.FedSaZeroMeanPolicy,
  ),
  (
    tff_aggregators.build_fedsa_process,
    'late_join_mode',
    options.FedSaLateJoinMode,
  ),
  (
    tff_aggregators.build_fedsa_process,
    'cluster_scope',
    options.FedSaClusterScope,
  ),
  (
    tff_aggregators.build_fedcda_process,
    'selection',
    options.FedCdaSelection,
  ),
  (
    tff_aggregators.build_fedcda_process,
    'divergence',
    options.FedCdaDivergence,
  ),
  (
    tff_aggregators.build_fedcda_process,
    'later_batches',
    options.FedCdaLaterBatches,
  ),
  (
    tff_aggregators.build_fedcda_process,
    'warmup_aggregation',
    options.FedCdaWarmupAggregation,
  ),
  (
    tff_aggregators.build_fedcda_process,
    'batch_param',
    options.FedCdaBatchParam,
  ),
]


def _model_fn():
  raise AssertionError('an unknown option must fail before the model is built')


class ParseTest(parameterized.TestCase):
  def test_every_enum_has_its_values_and_is_exported(self):
    defined = {
      obj
      for obj in vars(options).values()
      if isinstance(obj, type)
      and issubclass(obj, enum.StrEnum)
      and obj is not enum.StrEnum
    }
    self.assertEqual(defined, set(_VALUES))
    for enum_cls, values in _VALUES.items():
      self.assertEqual([m.value for m in enum_cls], values, enum_cls)
      self.assertIn(enum_cls.__name__, tff_aggregators.__all__)
      self.assertIs(getattr(tff_aggregators, enum_cls.__name__), enum_cls)

  def test_members_are_their_strings(self):
    for enum_cls, values in _VALUES.items():
      for member, value in zip(enum_cls, values):
        self.assertEqual(member, value)
        self.assertEqual(hash(member), hash(value))
        self.assertEqual(f'{member}', value)
        self.assertEqual({value: 1}[member], 1)

  def test_parse_takes_the_string_or_the_member(self):
    for enum_cls, values in _VALUES.items():
      for member, value in zip(enum_cls, values):
        self.assertIs(options.parse(enum_cls, value, 'x'), member)
        self.assertIs(options.parse(enum_cls, member, 'x'), member)

  @parameterized.parameters(
    ('swa ',),
    ('SWA',),
    ('',),
    (None,),
    (3,),
    (['swa'],),
    (options.FedSaClusterScope.GLOBAL,),
  )
  def test_parse_refuses_in_one_line_naming_option_value_and_values(
    self, value
  ):
    with self.assertRaises(ValueError) as raised:
      options.parse(options.FedLawVariant, value, 'my_variant')
    message = str(raised.exception)
    self.assertNotIn('\n', message)
    self.assertStartsWith(message, 'my_variant must be one of ')
    self.assertIn(repr(value), message)
    self.assertIn('FedLawVariant', message)
    for allowed in _VALUES[options.FedLawVariant]:
      self.assertIn(repr(allowed), message)
    self.assertIsNone(raised.exception.__cause__)

  def test_builder_defaults_are_members(self):
    for builder, name, enum_cls in _BUILDER_OPTIONS:
      default = inspect.signature(builder).parameters[name].default
      self.assertIsInstance(default, enum_cls, (builder.__name__, name))

  def test_every_builder_refuses_an_unknown_option_before_building(self):
    required = dict(
      build_fedlaw_process=dict(proxy_data=None, max_clients=2),
      build_fedsa_process=dict(max_clients=2),
      build_fedcda_process=dict(num_clients=4, max_clients=2),
    )
    for builder, name, enum_cls in _BUILDER_OPTIONS:
      kwargs = dict(required.get(builder.__name__, {}))
      kwargs[name] = 'no_such_value'
      with self.subTest(builder=builder.__name__, option=name):
        with self.assertRaisesRegex(
          ValueError, f'^{name} must be one of .*{enum_cls.__name__}'
        ):
          builder(_model_fn, None, **kwargs)

  def test_fedglad_with_adam_refuses_a_grouping_before_building(self):
    # Its factory is made after the client work there: the builder checks.
    with self.assertRaisesRegex(ValueError, '^grouping must be one of'):
      tff_aggregators.build_fedglad_process(
        _model_fn,
        None,
        tff.learning.optimizers.build_adam(0.1),
        grouping='per_layer',
      )


if __name__ == '__main__':
  absltest.main()
