"""Systems-only scale: trace events per second and peak memory of FedAvg at 10^4, 10^5 and 10^6 clients.

No training (``train.systems_only``): every task is costed from the real model's FLOPs and bytes.  Each
size runs in a fresh process (so its peak RSS is its own), with the compact trace.  The clients' data is
an in-memory stand-in (a tiny 4-feature classification set, about 3 samples per client, split by
position): the simulator's cost is what is measured here, not a dataset generator's.  The channel is a
fixed 5/20 Mbit/s link and one device class (a mix of classes, or per-client random link rates or speeds,
draws once per client from its own named stream at start-up: about 35 us per client, which this leaves
out).  Printed: start-up time, simulation time, events, events per second of simulation, events per CPU
second of simulation (steadier than wall time on a shared machine), peak RSS.

    python benchmarks/scale.py [--sizes 10000 100000 1000000] [--per-round 1000] [--rounds 3] [--all]
                               [--engines event vector] [--jitter 0.1 0]

``--all`` also runs one round in which every client participates, at each size.  ``--engines`` measures
FedAvg's event engine (SimPy) and its vector engine (``algorithm.engine: vector``, the same trace, computed
in numpy); ``--jitter`` sets ``devices.jitter``: with the default 0.1 every task draws its compute-time
factor from a counter-based stream (``Streams.counter``: about 1 us a draw one at a time in the event
engine, well under 1 us as arrays in the vector engine; the first draw imports ``scipy.special``), with 0
none is drawn.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one(clients: int, per_round: int, rounds: int, out: str, engine: str = "event", jitter: float = 0.1) -> dict:
    """Run in this process; returns the measurements."""
    import numpy as np
    import torch

    from fedsim.learn.data import ArrayDataset, FederatedData
    from fedsim.build import Prepared
    from fedsim.runner import run_variant
    from fedsim import scenario_from_mapping

    t0 = time.perf_counter()
    n = 3 * clients
    g = torch.Generator().manual_seed(0)
    train = ArrayDataset(torch.randn(n, 4, generator=g), torch.randint(0, 2, (n,), generator=g), 2, "stand-in")
    test = ArrayDataset(torch.randn(100, 4, generator=g), torch.randint(0, 2, (100,), generator=g), 2, "stand-in")
    parts = np.array_split(np.arange(n, dtype=np.int64), clients)
    sc = scenario_from_mapping({
        "name": "scale", "seed": 0, "data": {"num_clients": clients},
        "model": {"name": "logreg"},
        "train": {"systems_only": True, "batch_size": 10, "local_steps": 20},
        "devices": {"mix": [{"profile": "jetson-nano"}], "jitter": jitter},
        "channel": {"uplink": {"model": "fixed", "mbps": 5.0}, "downlink": {"model": "fixed", "mbps": 20.0}},
        "algorithm": {"name": "fedavg", "clients_per_round": per_round, "engine": engine},
        "stop": {"max_versions": rounds}, "eval": {"every_versions": None},
        "output": {"figures": False, "trace_format": "compact", "flush_every": 8192},
    })
    prepared = Prepared(FederatedData(train, test), list(parts))
    setup = time.perf_counter() - t0
    cpu0 = time.process_time()
    summary = run_variant(sc, sc.algorithms[0], Path(out), prepared, progress=False)
    cpu = time.process_time() - cpu0
    total = time.perf_counter() - t0
    events = summary["trace_events"]
    sim = summary["wall_time_s"]
    return {"engine": engine, "jitter": jitter, "clients": clients, "per_round": per_round, "rounds": summary["versions"], "setup_s": setup,
            "sim_s": sim, "total_s": total, "events": events, "events_per_s": events / sim, "cpu_s": cpu,
            "events_per_cpu_s": events / cpu,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
            "trace_mb": (Path(out) / "trace.compact.gz").stat().st_size / 1e6}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--per-round", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--all", action="store_true", help="also one round with every client")
    ap.add_argument("--engines", nargs="+", choices=["event", "vector"], default=["event", "vector"],
                    help="FedAvg engines to measure (algorithm.engine)")
    ap.add_argument("--jitter", type=float, nargs="+", default=[0.1],
                    help="devices.jitter values (0.1 is the default; 0 draws no per-task stream)")
    ap.add_argument("--one", nargs=6, metavar=("CLIENTS", "PER_ROUND", "ROUNDS", "OUT", "ENGINE", "JITTER"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        c, k, r, out, engine, jitter = args.one
        print(json.dumps(one(int(c), int(k), int(r), out, engine, float(jitter))))
        return 0
    import tempfile

    runs = [(n, min(args.per_round, n), args.rounds) for n in args.sizes]
    if args.all:
        runs += [(n, n, 1) for n in args.sizes]
    print(f"{'engine':>6} {'jitter':>6} {'clients':>9} {'per round':>9} {'rounds':>6} {'start-up s':>10} {'sim s':>8} "
          f"{'events':>9} {'events/s':>9} {'ev/cpu-s':>9} {'peak MB':>8} {'trace MB':>8}")
    for clients, k, rounds in runs:
        for jitter in args.jitter:
            for engine in args.engines:
                with tempfile.TemporaryDirectory() as tmp:
                    env = dict(os.environ, PYTHONPATH=str(ROOT))
                    proc = subprocess.run([sys.executable, __file__, "--one", str(clients), str(k), str(rounds), tmp,
                                           engine, str(jitter)], env=env, capture_output=True, text=True)
                    if proc.returncode != 0:
                        print(f"{engine} {clients} clients failed:\n{proc.stderr[-2000:]}")
                        continue
                    r = json.loads(proc.stdout.strip().splitlines()[-1])
                print(f"{engine:>6} {jitter:>6g} {r['clients']:>9} {r['per_round']:>9} {r['rounds']:>6} {r['setup_s']:>10.1f} "
                      f"{r['sim_s']:>8.1f} {r['events']:>9} {r['events_per_s']:>9.0f} {r['events_per_cpu_s']:>9.0f} {r['peak_mb']:>8.0f} "
                      f"{r['trace_mb']:>8.1f}", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f}; targets: >= 200k events/s, a 10^6-client round < 60 s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
