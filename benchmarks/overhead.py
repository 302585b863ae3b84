"""Simulator overhead: fedsim's wall time for a FedAvg scenario against a plain PyTorch loop.

The plain loop does exactly the same SGD steps (same clients, same batches from the same streams, same
weighted averaging) with no simulation around it, so the ratio is what the discrete-event machinery,
the trace and the bookkeeping cost.  Target: ratio <= 1.15.

    python benchmarks/overhead.py [--rounds 30] [--repeats 3]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from fedsim.algorithms.base import Update
from fedsim.learn.state import masked_weighted_average
from fedsim.learn.train import local_sgd
from fedsim.runner import build_global_model, prepare_data, run_variant
from fedsim.runtime import Context
from fedsim.scenario import scenario_from_mapping
from fedsim.sim.rng import Streams


def scenario(rounds: int):
    return scenario_from_mapping({
        "name": "overhead",
        "seed": 1,
        "data": {"name": "digits", "num_clients": 50, "partition": {"method": "dirichlet", "alpha": 0.5, "min_size": 10}},
        "model": {"name": "cnn"},
        "train": {"lr": 0.05, "momentum": 0.9, "batch_size": 32, "local_steps": 20},
        "algorithm": {"name": "fedavg", "clients_per_round": 10},
        "stop": {"max_versions": rounds},
        "eval": {"every_versions": None},
        "output": {"figures": False},
    })


def plain_loop(sc, prepared, selections: list[list[int]]) -> float:
    """The same SGD steps and averaging as the FedAvg run, as a bare PyTorch loop; returns seconds."""
    data, parts = prepared.data, prepared.parts
    model = build_global_model(sc, data)
    global_state = {k: v.clone() for k, v in model.state_dict().items()}
    streams = Streams(sc.seed)
    cfg = Context.sgd_config(sc)
    tasks: dict[int, int] = {}
    t0 = time.perf_counter()
    for clients in selections:
        updates = []
        for c in clients:
            k = tasks.get(c, 0)
            tasks[c] = k + 1
            model.load_state_dict(global_state)
            stats = local_sgd(model, data.train.x, data.train.y, parts[c], cfg, streams.torch("client", c, "task", k))
            updates.append(Update(client=c, tensors={n: v.clone() for n, v in model.state_dict().items()}, weight=float(stats.samples)))
        global_state = masked_weighted_average(updates, global_state)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    sc = scenario(args.rounds)
    prepared = prepare_data(sc)
    sim_times, plain_times = [], []
    for rep in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            run_variant(sc, sc.algorithms[0], Path(tmp), prepared, progress=False)
            sim_times.append(time.perf_counter() - t0)
            from fedsim.sim.trace import load_trace

            df = load_trace(Path(tmp))
            rounds = df[df["kind"] == "round"].sort_values("round")
            selections = [list(map(int, c)) for c in rounds["clients"]]
        plain_times.append(plain_loop(sc, prepared, selections))
        print(f"repeat {rep + 1}/{args.repeats}: fedsim {sim_times[-1]:.2f} s, plain loop {plain_times[-1]:.2f} s", file=sys.stderr)
    sim, plain = statistics.median(sim_times), statistics.median(plain_times)
    ratio = sim / plain
    print(f"fedsim {sim:.3f} s  plain {plain:.3f} s  ratio {ratio:.3f}  (target <= 1.15: {'ok' if ratio <= 1.15 else 'MISSED'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
