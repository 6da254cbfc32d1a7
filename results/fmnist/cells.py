"""The Fashion-MNIST reproduction cells: protocols, methods, paper numbers.

Each cell follows its method's spec (`../shared/specs/<method>.md`, the
section named in `source`) through the flags of `//experiments:fmnist`.
Where the binary cannot follow the protocol, `deviations` says so; the
report prints them beside the numbers.
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Cell:
  """One comparison: settings x methods x seeds, at a number of rounds.

  Attributes:
    name: The cell's name (`--cell`).
    title: Heading in the report.
    source: Where the protocol and the paper's numbers come from.
    rounds: The protocol's rounds.
    seeds: The seeds (the papers' where they give them).
    common: Flags of every run.
    settings: Setting name -> its flags (data partition, model).
    methods: Method name -> its flags.
    baseline: The method the gains are measured against.
    paper: (setting, method) -> the paper's accuracy in %.
    deviations: What the runs do differently from the paper, and why.
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
  deviations: tuple[str, ...] = ()


FEDLAW = Cell(
    name='fedlaw',
    title='FedLAW, Table 3 (E = 3, 20 clients, proxy 10 per class)',
    source='fedlaw.md sections 6 and 7.1',
    rounds=200,
    seeds=(8, 9, 10),
    common=dict(
        num_clients=20, clients_per_round=20, local_epochs=3,
        batch_size=128, client_optimizer='sgd', client_lr=0.08,
        client_momentum=0.9, weight_decay=5e-4, client_lr_decay=0.99,
        normalization='unit', partition='dirichlet', proxy_size=100,
        proxy_distribution='balanced', server_optimizer='sgd', server_lr=1.0,
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
    deviations=(
        'Clients train on their whole partition; the official code keeps '
        '70% of it for training and 30% for a local validation set (spec '
        '6.2), so our clients see 43% more data.',
        'Batches: TFF repeats the data E times and then batches '
        '(`repeat(E).batch(128)`), so a batch can straddle two epochs; '
        'PyTorch reshuffles and keeps a last partial batch per epoch.',
        'The client optimizer state (momentum) is reset every round, as in '
        'the official code.',
    ),
)

FEDCDA = Cell(
    name='fedcda',
    title='FedCDA, Table 1 (N = 20, P = 4, E = 20, simple CNN)',
    source='fedcda.md sections 6 and 7.1',
    rounds=200,
    seeds=(0, 1),
    common=dict(
        model='fedavg_cnn', num_clients=20, clients_per_round=4,
        local_epochs=20, batch_size=64, client_optimizer='sgd',
        client_lr=1e-3, client_momentum=1e-4, weight_decay=1e-5,
        normalization='unit', proxy_size=0, server_optimizer='sgd',
        server_lr=1.0,
    ),
    settings={
        'dirichlet0.1': dict(partition='dirichlet', alpha=0.1),
        'dirichlet0.3': dict(partition='dirichlet', alpha=0.3),
        'shards2': dict(partition='shards', shards_per_client=2),
    },
    methods={
        'fedavg': dict(aggregator='fedavg'),
        'fedcda': dict(aggregator='fedcda', fedcda_k=3, fedcda_batches=3,
                       fedcda_l=1.0, fedcda_warmup=50, fedcda_history='memory'),
        'fedcda_k1': dict(aggregator='fedcda', fedcda_k=1, fedcda_batches=3,
                          fedcda_l=1.0, fedcda_warmup=50,
                          fedcda_history='memory'),
    },
    baseline='fedavg',
    paper={
        ('dirichlet0.1', 'fedavg'): 71.81,
        ('dirichlet0.3', 'fedavg'): 75.97,
        ('shards2', 'fedavg'): 64.69,
        ('dirichlet0.1', 'fedcda'): 78.63,
        ('dirichlet0.3', 'fedcda'): 84.67,
        ('shards2', 'fedcda'): 66.30,
    },
    deviations=(
        'FedCDA\'s history (20 clients x 4 slots x 1.66M parameters = '
        '530 MB) is kept in the driver (--fedcda_history=memory), which '
        'computes the same models as the in-state version.',
        'Cost: 200 rounds x 4 clients x 20 epochs x ~3,000 examples = 48M '
        'example steps of a 1.66M-parameter CNN per run, about a day on '
        'this 2-core machine; runs below 200 rounds are reported as '
        'reduced.',
    ),
)

CELLS = {cell.name: cell for cell in (FEDLAW, FEDCDA)}
