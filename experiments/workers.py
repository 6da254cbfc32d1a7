r"""Starts local TFF workers for `--workers`, and stops them cleanly.

  bazel run //experiments:workers -- --num_workers=2
  # prints: --workers=127.0.0.1:PORT1,127.0.0.1:PORT2 ; pass that to a binary:
  bazel run //experiments:fmnist -- --workers=127.0.0.1:PORT1,127.0.0.1:PORT2

One worker per GPU: `--gpus=0,1` gives worker i `CUDA_VISIBLE_DEVICES=gpus[i]`.
Runs until interrupted (Ctrl-C or SIGTERM), then stops the workers; they also
die if this launcher is killed. On several hosts, run it (or TFF's
`worker_binary --port=P`) on each host and list all addresses in `--workers`.
"""

import signal
import sys
import time

from absl import app
from absl import flags

from tff_aggregators import runtime

_NUM_WORKERS = flags.DEFINE_integer('num_workers', 2, 'Workers to start.')
_PORTS = flags.DEFINE_list(
  'ports', None, 'Their ports, one per worker (default: free ports).'
)
_GPUS = flags.DEFINE_list(
  'gpus', None, 'GPU ids; worker i gets CUDA_VISIBLE_DEVICES=gpus[i % n].'
)
_MAX_CONCURRENT_COMPUTATION_CALLS = flags.DEFINE_integer(
  'max_concurrent_computation_calls',
  -1,
  'Parallel client computations per worker (-1: no limit).',
)
_HOST = flags.DEFINE_string(
  'host', '127.0.0.1', 'Host name printed in the --workers line.'
)


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise SystemExit(f'error: unexpected arguments {argv[1:]}')
  ports = [int(p) for p in _PORTS.value or []]
  if ports and len(ports) != _NUM_WORKERS.value:
    raise SystemExit('error: --ports needs one port per worker.')
  workers = runtime.start_local_workers(
    _NUM_WORKERS.value,
    max_concurrent_computation_calls=_MAX_CONCURRENT_COMPUTATION_CALLS.value,
    gpus=_GPUS.value or (),
    ports=ports,
  )
  for worker in workers:
    runtime.connect(worker.address, worker=worker)
  stop = []
  signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
  addresses = ','.join(f'{_HOST.value}:{w.port}' for w in workers)
  print(f'--workers={addresses}', flush=True)
  try:
    while not stop:
      exited = [w for w in workers if w.poll() is not None]
      if exited:
        raise SystemExit(
          f'error: worker on port {exited[0].port} exited with code '
          f'{exited[0].poll()}.'
        )
      time.sleep(0.2)
  except KeyboardInterrupt:
    pass
  finally:
    for worker in workers:
      worker.stop()
  print('workers stopped', file=sys.stderr)


if __name__ == '__main__':
  app.run(main)
