"""The Fashion-MNIST reproduction cells: protocols, methods, paper numbers.

A cell is one paper's comparison (settings x methods x seeds) run through
the flags of `//experiments:fmnist`; `source` names the paper's table its
numbers come from. The prose a cell's report prints is Markdown beside the
runs, included as written (`notes`): `results/fmnist/<cell>/notes/`
`summary.md` (the main finding), `deviations.md` (what the runs do
differently from the paper, and why), `reduced.md` (why a reduced protocol
runs fewer rounds) and `runs.md` (run-by-run notes, in the appendix).
"""

import dataclasses
import os

# Where the cells' Markdown notes are: results/fmnist/<cell>/notes/<part>.md.
NOTES_DIR = os.path.dirname(os.path.abspath(__file__))


def notes(cell_name: str, part: str) -> str:
  """The text of a cell's `notes/<part>.md`, stripped ('' if none)."""
  path = os.path.join(NOTES_DIR, cell_name, 'notes', f'{part}.md')
  if not os.path.exists(path):
    return ''
  with open(path) as f:
    return f.read().strip()


@dataclasses.dataclass(frozen=True)
class Cell:
  """One comparison: settings x methods x seeds, at a number of rounds.

  Attributes:
    name: The cell's name (`--cell`).
    title: Heading in the report.
    source: Where the protocol and the paper's numbers come from (the
      paper's table).
    rounds: The protocol's rounds.
    seeds: The seeds (the papers' where they give them).
    common: Flags of every run.
    settings: Setting name -> its flags (data partition, model).
    methods: Method name -> its flags.
    baseline: The method the gains are measured against.
    paper: (setting, method) -> the paper's accuracy in %.
    paper_dataset: The data set of the paper's numbers (reports label them
      where it is not Fashion-MNIST).
    headline: The methods under test, whose gains the index's verdict table
      shows (default: every method but the baseline).
    paired: Method -> its own baseline where it is not `baseline` (FedAvgM +
      GLAD against FedAvgM).
    plotted_metrics: Per-round metrics (columns of `metrics.csv`; a list
      value, one per trainable tensor, is a curve per tensor) plotted for
      the methods that report them.
    shared: Method -> (cell, setting) whose runs of that method this cell
      reuses, because their flags are the same (run once, reported twice).
    forks: Method -> (source method, round): the method computes the same
      as the source up to that round (FedAvg is FedCDA in its warm-up), so
      its run starts from the source run's checkpoint of that round (same
      setting and seed), with the source's rows up to it; where that
      checkpoint is gone, it runs from round 1.
    reduced_rounds: Setting -> the rounds its runs stop at, where the
      protocol's cannot be afforded (a reduced protocol, labelled as such in
      the report; `notes/reduced.md` says why); a setting not listed runs
      the protocol's. A run that went past them (but not to the protocol's)
      is measured at them.
    best_round: Also report the best round's accuracy (where the paper's
      metric may be that one).
  """

  name: str
  title: str
  source: str
  rounds: int
  seeds: tuple[int, ...]
  common: dict[str, object]
  settings: dict[str, dict[str, object]]
  methods: dict[str, dict[str, object]]
  baseline: str
  paper: dict[tuple[str, str], float]
  paper_dataset: str = 'Fashion-MNIST'
  headline: tuple[str, ...] = ()
  paired: dict[str, str] = dataclasses.field(default_factory=dict)
  plotted_metrics: tuple[str, ...] = ()
  shared: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
  forks: dict[str, tuple[str, int]] = dataclasses.field(default_factory=dict)
  reduced_rounds: dict[str, int] = dataclasses.field(default_factory=dict)
  best_round: bool = False

  def planned_rounds(self, setting: str) -> int:
    """The rounds a setting's runs are planned for (reduced or not)."""
    return self.reduced_rounds.get(setting, self.rounds)

  def run_flags(self, setting: str, method: str) -> dict[str, object]:
    """The flags of `//experiments:fmnist` for a run (without seed)."""
    return dict(self.common, **self.settings[setting], **self.methods[method])

  def baseline_of(self, method: str) -> str:
    return self.paired.get(method, self.baseline)

  def headline_methods(self) -> tuple[str, ...]:
    """The methods under test (`headline`, else all but the baseline)."""
    return self.headline or tuple(m for m in self.methods if m != self.baseline)


FEDLAW = Cell(
  name='fedlaw',
  title='FedLAW, Table 3 (E = 3, 20 clients, proxy 10 per class)',
  source='Li et al., ICML 2023, Table 3',
  rounds=200,
  seeds=(8, 9, 10),
  common=dict(
    num_clients=20,
    clients_per_round=20,
    local_epochs=3,
    batch_size=128,
    client_optimizer='sgd',
    client_lr=0.08,
    client_momentum=0.9,
    weight_decay=5e-4,
    client_lr_decay=0.99,
    normalization='unit',
    partition='dirichlet',
    proxy_size=100,
    proxy_distribution='balanced',
    server_optimizer='sgd',
    server_lr=1.0,
  ),
  settings={
    'mlp_alpha100': dict(model='mlp', alpha=100.0),
    'mlp_alpha0.1': dict(model='mlp', alpha=0.1),
    'lenet_alpha100': dict(model='lenet', alpha=100.0),
    'lenet_alpha0.1': dict(model='lenet', alpha=0.1),
  },
  methods={
    'fedavg': dict(aggregator='fedavg'),
    'fedlaw': dict(aggregator='fedlaw', fedlaw_variant='fedlaw'),
    'fedlaw_swa': dict(aggregator='fedlaw', fedlaw_variant='swa'),
  },
  baseline='fedavg',
  paper={
    ('mlp_alpha100', 'fedavg'): 89.29,
    ('lenet_alpha100', 'fedavg'): 90.54,
    ('mlp_alpha0.1', 'fedavg'): 85.11,
    ('lenet_alpha0.1', 'fedavg'): 88.08,
    ('mlp_alpha100', 'fedlaw'): 88.51,
    ('lenet_alpha100', 'fedlaw'): 90.66,
    ('mlp_alpha0.1', 'fedlaw'): 86.30,
    ('lenet_alpha0.1', 'fedlaw'): 88.26,
    ('mlp_alpha100', 'fedlaw_swa'): 88.27,
    ('lenet_alpha100', 'fedlaw_swa'): 90.51,
    ('mlp_alpha0.1', 'fedlaw_swa'): 86.89,
    ('lenet_alpha0.1', 'fedlaw_swa'): 88.18,
  },
  reduced_rounds={'lenet_alpha100': 100, 'lenet_alpha0.1': 100},
)

_FEDCDA_WARMUP = 50
_FEDCDA = dict(
  aggregator='fedcda', fedcda_batches=3, fedcda_l=1.0, fedcda_history='memory'
)
# A warm-up no run reaches: FedCDA's warm-up aggregation is FedAvg's.
_FEDCDA_NEVER_SELECTS = 1_000_000

FEDCDA = Cell(
  name='fedcda',
  title='FedCDA, Table 1 (N = 20, P = 4, E = 20, simple CNN)',
  source='Wang et al., ICLR 2024, Table 1',
  rounds=200,
  seeds=(0, 1),
  common=dict(
    model='fedavg_cnn',
    num_clients=20,
    clients_per_round=4,
    local_epochs=20,
    batch_size=64,
    client_optimizer='sgd',
    client_lr=1e-3,
    client_momentum=1e-4,
    weight_decay=1e-5,
    normalization='unit',
    proxy_size=0,
    server_optimizer='sgd',
    server_lr=1.0,
  ),
  settings={
    'dirichlet0.1': dict(partition='dirichlet', alpha=0.1),
    'dirichlet0.3': dict(partition='dirichlet', alpha=0.3),
    'shards2': dict(partition='shards', shards_per_client=2),
  },
  methods={
    'fedavg': dict(_FEDCDA, fedcda_k=3, fedcda_warmup=_FEDCDA_NEVER_SELECTS),
    'fedcda': dict(_FEDCDA, fedcda_k=3, fedcda_warmup=_FEDCDA_WARMUP),
    'fedcda_k1': dict(_FEDCDA, fedcda_k=1, fedcda_warmup=_FEDCDA_WARMUP),
  },
  baseline='fedavg',
  forks={
    'fedavg': ('fedcda', _FEDCDA_WARMUP),
    'fedcda_k1': ('fedcda', _FEDCDA_WARMUP),
  },
  reduced_rounds=dict.fromkeys(('dirichlet0.1', 'dirichlet0.3', 'shards2'), 80),
  paper={
    ('dirichlet0.1', 'fedavg'): 71.81,
    ('dirichlet0.3', 'fedavg'): 75.97,
    ('shards2', 'fedavg'): 64.69,
    ('dirichlet0.1', 'fedcda'): 78.63,
    ('dirichlet0.3', 'fedcda'): 84.67,
    ('shards2', 'fedcda'): 66.30,
  },
)

_FEDLWS_PROTOCOL = dict(
  model='simple_cnn',
  num_clients=20,
  clients_per_round=20,
  local_epochs=1,
  batch_size=128,
  client_optimizer='sgd',
  client_lr=0.08,
  client_momentum=0.9,
  weight_decay=5e-4,
  client_lr_decay=0.99,
  normalization='unit',
  partition='dirichlet',
  proxy_size=0,
  server_optimizer='sgd',
  server_lr=1.0,
)
# FedProx clients of the FedLAW/FedLWS code base (docs/methods/fedlws.md).
_FEDPROX = dict(proximal_strength=0.001, client_momentum=0.0, weight_decay=0.0)

FEDLWS = Cell(
  name='fedlws',
  title='FedLWS, Table 1 (simple CNN, 20 clients, E = 1)',
  source='Shi et al., ICLR 2025, Table 1',
  rounds=200,
  seeds=(10, 11, 12),
  common=_FEDLWS_PROTOCOL,
  settings={
    'alpha100': dict(alpha=100.0),
    'alpha0.5': dict(alpha=0.5),
    'alpha0.1': dict(alpha=0.1),
  },
  methods={
    'fedavg': dict(aggregator='fedavg'),
    'fedavg_lws': dict(
      aggregator='fedlws', fedlws_beta=0.1, fedlws_tau_clip='0.01,0.2'
    ),
    'fedprox': dict(aggregator='fedavg', **_FEDPROX),
    'fedprox_lws': dict(
      aggregator='fedlws',
      fedlws_beta=0.1,
      fedlws_tau_clip='0.01,0.2',
      **_FEDPROX,
    ),
    # The paper's reading (App. C.4's client optimiser for every method).
    'fedprox_sgdm': dict(aggregator='fedavg', proximal_strength=0.001),
    'fedprox_sgdm_lws': dict(
      aggregator='fedlws',
      fedlws_beta=0.1,
      fedlws_tau_clip='0.01,0.2',
      proximal_strength=0.001,
    ),
  },
  baseline='fedavg',
  paper={
    ('alpha100', 'fedavg'): 90.44,
    ('alpha0.5', 'fedavg'): 90.04,
    ('alpha0.1', 'fedavg'): 88.62,
    ('alpha100', 'fedavg_lws'): 90.99,
    ('alpha0.5', 'fedavg_lws'): 90.33,
    ('alpha0.1', 'fedavg_lws'): 88.99,
    ('alpha100', 'fedprox'): 91.24,
    ('alpha0.5', 'fedprox'): 90.69,
    ('alpha0.1', 'fedprox'): 88.78,
    ('alpha100', 'fedprox_lws'): 91.35,
    ('alpha0.5', 'fedprox_lws'): 91.24,
    ('alpha0.1', 'fedprox_lws'): 89.25,
    # The same paper rows, against the other reading of its optimiser.
    ('alpha100', 'fedprox_sgdm'): 91.24,
    ('alpha0.5', 'fedprox_sgdm'): 90.69,
    ('alpha0.1', 'fedprox_sgdm'): 88.78,
    ('alpha100', 'fedprox_sgdm_lws'): 91.35,
    ('alpha0.5', 'fedprox_sgdm_lws'): 91.24,
    ('alpha0.1', 'fedprox_sgdm_lws'): 89.25,
  },
  paired={'fedprox_lws': 'fedprox', 'fedprox_sgdm_lws': 'fedprox_sgdm'},
  headline=('fedavg_lws', 'fedprox_lws', 'fedprox_sgdm_lws'),
  plotted_metrics=('train/finalizer/gamma',),
  best_round=True,
)

FEDSA = Cell(
  name='fedsa',
  title='FedSA on the FedLWS protocol at alpha 0.1 (no paper number on '
  'Fashion-MNIST)',
  source=(
    "the FedLWS cell's protocol; FedSA's defaults from Wang et al., "
    'arXiv 2408.11278v1'
  ),
  rounds=200,
  seeds=(10, 11, 12),
  common=_FEDLWS_PROTOCOL,
  settings={'alpha0.1': dict(alpha=0.1)},
  methods={
    'fedavg': dict(aggregator='fedavg'),
    'fedavg_unweighted': dict(
      aggregator='fedavg', fedavg_client_weighting='uniform'
    ),
    'fedsa': dict(aggregator='fedsa'),
  },
  baseline='fedavg_unweighted',
  paper={},
  headline=('fedsa',),
  plotted_metrics=(
    'train/finalizer/high_fraction_overall',
    'train/finalizer/high_fraction',
  ),
  shared={'fedavg': ('fedlws', 'alpha0.1')},
)

FEDGLAD = Cell(
  name='fedglad',
  title='FedGLAD, its MNIST protocol on Fashion-MNIST (100 clients, 10 '
  'per round, alpha 0.1, E = 5, 50 rounds)',
  source='Yang et al., TMLR 2023, Table 1, MNIST column',
  rounds=50,
  seeds=(1, 2, 3),
  common=dict(
    model='dropout_cnn',
    num_clients=100,
    clients_per_round=10,
    local_epochs=5,
    batch_size=64,
    client_optimizer='sgd',
    client_lr=0.01,
    client_momentum=0.9,
    normalization='unit',
    partition='label_skew',
    alpha=0.1,
    proxy_size=0,
  ),
  settings={'alpha0.1': {}},
  methods={
    'fedavg': dict(aggregator='fedavg', server_optimizer='sgd', server_lr=1.0),
    'fedavg_glad': dict(
      aggregator='fedglad', server_optimizer='sgd', server_lr=1.0
    ),
    'fedavgm': dict(
      aggregator='fedavg',
      server_optimizer='sgdm',
      server_lr=0.5,
      server_momentum=0.9,
    ),
    'fedavgm_glad': dict(
      aggregator='fedglad',
      server_optimizer='sgdm',
      server_lr=0.5,
      server_momentum=0.9,
    ),
    'fedadam': dict(
      aggregator='fedavg',
      server_optimizer='adam',
      server_lr=0.01,
      server_epsilon=1e-8,
    ),
    'fedadam_glad': dict(
      aggregator='fedglad',
      server_optimizer='adam',
      server_lr=0.01,
      server_epsilon=1e-8,
    ),
  },
  baseline='fedavg',
  paper={
    ('alpha0.1', 'fedavg'): 78.17,
    ('alpha0.1', 'fedavg_glad'): 79.71,
    ('alpha0.1', 'fedavgm'): 81.71,
    ('alpha0.1', 'fedavgm_glad'): 82.11,
    ('alpha0.1', 'fedadam'): 96.94,
    ('alpha0.1', 'fedadam_glad'): 97.11,
  },
  paper_dataset='MNIST',
  paired={'fedavgm_glad': 'fedavgm', 'fedadam_glad': 'fedadam'},
  headline=('fedavg_glad', 'fedavgm_glad', 'fedadam_glad'),
)

# The FedLWS authors' code's choices that our protocol does not make
# (docs/experiments.md, docs/stateful_clients.md): each client's optimiser
# state (SGD momentum) kept across the rounds it takes part in; 70% of each
# client's examples for training (the code holds out 30% for validation).
_PERSISTENT = dict(client_optimizer_state='persistent')
_TRAIN_70 = dict(client_train_fraction=0.7)
_LWS = FEDLWS.methods['fedavg_lws']
# The code's beta, with the same clip of beta*tau to [0.01, 0.2].
_LWS_CODE_BETA = dict(_LWS, fedlws_beta=0.03)

FEDLWS_PROTOCOL = Cell(
  name='fedlws_protocol',
  title="FedLWS at alpha 0.1 with its authors' code's choices, one at a "
  'time and all together (persistent client momentum, beta 0.03, 70% '
  'training data)',
  source=(
    "Shi et al., ICLR 2025, Table 1 (alpha 0.1), on the FedLWS cell's "
    "protocol with the authors' code's choices"
  ),
  rounds=200,
  # Seed 10 only: seeds 11 and 12 were for a configuration whose gain moved
  # from the FedLWS cell's at seed 10 by more than that cell's seed spread
  # (0.41), and none did (notes/summary.md).
  seeds=(10,),
  common=_FEDLWS_PROTOCOL,
  settings={'alpha0.1': dict(alpha=0.1)},
  methods={
    'fedavg': FEDLWS.methods['fedavg'],
    'fedavg_lws': _LWS,
    'fedavg_persistent': dict(aggregator='fedavg', **_PERSISTENT),
    'fedavg_lws_persistent': dict(_LWS, **_PERSISTENT),
    'fedavg_lws_beta0.03': _LWS_CODE_BETA,  # FedAvg has no beta.
    'fedavg_train0.7': dict(aggregator='fedavg', **_TRAIN_70),
    'fedavg_lws_train0.7': dict(_LWS, **_TRAIN_70),
    'fedavg_all': dict(aggregator='fedavg', **_PERSISTENT, **_TRAIN_70),
    'fedavg_lws_all': dict(_LWS_CODE_BETA, **_PERSISTENT, **_TRAIN_70),
  },
  baseline='fedavg',
  # Each choice's FedAvg is the baseline of its LWS run (not compared with
  # the FedAvg without it: the paper has no number for that).
  paired={
    'fedavg_persistent': 'fedavg_persistent',
    'fedavg_lws_persistent': 'fedavg_persistent',
    'fedavg_train0.7': 'fedavg_train0.7',
    'fedavg_lws_train0.7': 'fedavg_train0.7',
    'fedavg_all': 'fedavg_all',
    'fedavg_lws_all': 'fedavg_all',
  },
  # The paper's alpha 0.1 rows, against every configuration.
  paper={
    ('alpha0.1', method): FEDLWS.paper[('alpha0.1', base)]
    for method, base in (
      ('fedavg', 'fedavg'),
      ('fedavg_lws', 'fedavg_lws'),
      ('fedavg_persistent', 'fedavg'),
      ('fedavg_lws_persistent', 'fedavg_lws'),
      ('fedavg_lws_beta0.03', 'fedavg_lws'),
      ('fedavg_train0.7', 'fedavg'),
      ('fedavg_lws_train0.7', 'fedavg_lws'),
      ('fedavg_all', 'fedavg'),
      ('fedavg_lws_all', 'fedavg_lws'),
    )
  },
  headline=(
    'fedavg_lws_persistent',
    'fedavg_lws_beta0.03',
    'fedavg_lws_train0.7',
    'fedavg_lws_all',
  ),
  plotted_metrics=('train/finalizer/gamma',),
  shared={
    'fedavg': ('fedlws', 'alpha0.1'),
    'fedavg_lws': ('fedlws', 'alpha0.1'),
  },
  best_round=True,
)

FEDLAW_PROTOCOL = Cell(
  name='fedlaw_protocol',
  title='FedLAW, MLP at alpha 0.1 with persistent client momentum (the '
  "FedLWS code's clients)",
  source=(
    "Li et al., ICML 2023, Table 3 (MLP, alpha 0.1), on the FedLAW cell's "
    'protocol with persistent client momentum'
  ),
  rounds=200,
  seeds=(10,),
  common=FEDLAW.common,
  settings={'mlp_alpha0.1': FEDLAW.settings['mlp_alpha0.1']},
  methods={
    'fedavg': FEDLAW.methods['fedavg'],
    'fedlaw': FEDLAW.methods['fedlaw'],
    'fedavg_persistent': dict(FEDLAW.methods['fedavg'], **_PERSISTENT),
    'fedlaw_persistent': dict(FEDLAW.methods['fedlaw'], **_PERSISTENT),
  },
  baseline='fedavg',
  paired={
    'fedavg_persistent': 'fedavg_persistent',
    'fedlaw_persistent': 'fedavg_persistent',
  },
  paper={
    ('mlp_alpha0.1', method): FEDLAW.paper[('mlp_alpha0.1', base)]
    for method, base in (
      ('fedavg', 'fedavg'),
      ('fedlaw', 'fedlaw'),
      ('fedavg_persistent', 'fedavg'),
      ('fedlaw_persistent', 'fedlaw'),
    )
  },
  headline=('fedlaw_persistent',),
  shared={
    'fedavg': ('fedlaw', 'mlp_alpha0.1'),
    'fedlaw': ('fedlaw', 'mlp_alpha0.1'),
  },
)

CELLS = {
  cell.name: cell
  for cell in (
    FEDLAW,
    FEDLWS,
    FEDCDA,
    FEDGLAD,
    FEDSA,
    FEDLWS_PROTOCOL,
    FEDLAW_PROTOCOL,
  )
}
