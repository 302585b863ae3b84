"""Training speed-ups: batched client training (``train.batched``) and the Ray executor, each against the
same run trained one client at a time in-process.

The workload: FedAvg on digits with the CNN, 100 clients, every client in every round (100 per round),
20 local steps of batch 16.  Each variant runs in this process (start-up excluded) and the time of its
rounds is read from ``metrics.csv`` (wall clock from version 0 to the last version); variants alternate,
median of the repeats.  Batched training must give the same model within float tolerance (the final
test loss is printed); Ray the identical trace.

    python benchmarks/training.py [--rounds 2] [--repeats 5] [--clients 100] [--ray-workers 2] [--no-ray]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

import pandas as pd

from fedsim.runner import prepare_data, run_variant
from fedsim import scenario_from_mapping


def scenario(clients: int, rounds: int, **train):
    return scenario_from_mapping({
        "name": "training", "seed": 0,
        "data": {"name": "digits", "num_clients": clients, "partition": {"method": "dirichlet", "alpha": 0.5}},
        "model": {"name": "cnn"},
        "train": {"lr": 0.05, "momentum": 0.9, "batch_size": 16, "local_steps": 20, **train},
        "algorithm": {"name": "fedavg", "clients_per_round": clients},
        "stop": {"max_versions": rounds}, "eval": {"every_versions": 1}, "output": {"figures": False},
    })


def rounds_time(sc, prepared, out: Path) -> tuple[float, float, bytes]:
    """(seconds in the rounds, final test loss, trace bytes) of one run."""
    run_variant(sc, sc.algorithms[0], out, prepared, progress=False)
    m = pd.read_csv(out / "metrics.csv")
    return float(m["wall_s"].iloc[-1] - m["wall_s"].iloc[0]), float(m["loss"].iloc[-1]), (out / "trace.jsonl").read_bytes()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--ray-workers", type=int, default=2)
    ap.add_argument("--no-ray", action="store_true")
    args = ap.parse_args(argv)
    variants = {"sequential": {}, "batched": {"batched": True}}
    if not args.no_ray:
        variants["ray"] = {"executor": "ray", "workers": args.ray_workers}
    scs = {k: scenario(args.clients, args.rounds, **v) for k, v in variants.items()}
    prepared = prepare_data(scs["sequential"])
    times: dict[str, list[float]] = {k: [] for k in variants}
    loss: dict[str, float] = {}
    traces: dict[str, bytes] = {}
    if "ray" in variants:
        import ray

        ray.init(num_cpus=args.ray_workers, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    with tempfile.TemporaryDirectory() as tmp:
        for k in variants:  # warm-up (first-use costs, Ray workers starting)
            rounds_time(scs[k], prepared, Path(tmp) / k)
        for rep in range(args.repeats):
            order = list(variants) if rep % 2 == 0 else list(reversed(variants))
            for k in order:
                t, loss[k], traces[k] = rounds_time(scs[k], prepared, Path(tmp) / k)
                times[k].append(t)
                print(f"repeat {rep + 1}/{args.repeats} {k:>10}: {t:.2f} s", file=sys.stderr)
    seq = statistics.median(times["sequential"]) / args.rounds
    print(f"{args.clients} clients per round, CNN on digits, 20 local steps of batch 16; per round, median of "
          f"{args.repeats}; load average {os.getloadavg()[0]:.1f}")
    print(f"sequential in-process: {seq:.2f} s/round, final loss {loss['sequential']:.6f}")
    b = statistics.median(times["batched"]) / args.rounds
    print(f"batched (vmap):        {b:.2f} s/round, ratio {b / seq:.3f} (target <= 0.5), final loss {loss['batched']:.6f}")
    if "ray" in variants:
        r = statistics.median(times["ray"]) / args.rounds
        print(f"ray, {args.ray_workers} workers:        {r:.2f} s/round, speed-up {seq / r:.2f}x, trace "
              f"{'identical' if traces['ray'] == traces['sequential'] else 'DIFFERENT'} to in-process")
    return 0


if __name__ == "__main__":
    sys.exit(main())
