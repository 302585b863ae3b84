"""Training speed-ups: batched client training (``train.batched``), an accelerator (``train.device``) and
the Ray executor, each against the same run trained one client at a time in-process on the CPU.

The workload: FedAvg with every client in every round (100 per round by default), 20 local steps of
batch 16; the CNN on ``digits`` by default, or ``--gpu-round``: ResNet-20 on ``digits32`` (32×32 RGB).
Each variant runs in this process (start-up excluded) and the time of its rounds is read from
``metrics.csv`` (wall clock from version 0 to the last version; each evaluation reads the loss back,
which waits for the device); variants alternate, median of the repeats.  Batched training must give the
same model within float tolerance (the final test loss is printed); Ray the identical trace; a run on
another device the identical trace apart from its ``eval`` records (virtual time never depends on the
host).  CPU variants train with one thread, as every fedsim run does.

    python benchmarks/training.py [--rounds 2] [--repeats 5] [--clients 100] [--ray-workers 2] [--no-ray]
    python benchmarks/training.py --gpu-round --device cuda --rounds 1 --repeats 3   # GPU vs CPU, no Ray
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

import pandas as pd

from fedsim.build import prepare_data
from fedsim.runner import run_variant
from fedsim import scenario_from_mapping


def scenario(clients: int, rounds: int, data: str = "digits", model: str = "cnn", **train):
    return scenario_from_mapping({
        "name": "training", "seed": 0,
        "data": {"name": data, "num_clients": clients, "partition": {"method": "dirichlet", "alpha": 0.5}},
        "model": {"name": model},
        "train": {"lr": 0.05, "momentum": 0.9, "batch_size": 16, "local_steps": 20, **train},
        "algorithm": {"name": "fedavg", "clients_per_round": clients},
        "stop": {"max_versions": rounds}, "eval": {"every_versions": 1}, "output": {"figures": False},
    })


def rounds_time(sc, prepared, out: Path) -> tuple[float, float, bytes]:
    """(seconds in the rounds, final test loss, trace bytes without its eval records) of one run."""
    run_variant(sc, sc.algorithms[0], out, prepared, progress=False)
    m = pd.read_csv(out / "metrics.csv")
    lines = (out / "trace.jsonl").read_bytes().splitlines(keepends=True)
    timing = b"".join(ln for ln in lines if b'"kind": "eval"' not in ln and b'"kind":"eval"' not in ln)
    return float(m["wall_s"].iloc[-1] - m["wall_s"].iloc[0]), float(m["loss"].iloc[-1]), timing


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--ray-workers", type=int, default=2)
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--device", default="cpu", help="train.device of the accelerated variants (cpu: CPU only)")
    ap.add_argument("--gpu-round", action="store_true", help="ResNet-20 on digits32 instead of the CNN on digits")
    args = ap.parse_args(argv)
    data, model = ("digits32", "resnet20") if args.gpu_round else ("digits", "cnn")
    variants: dict[str, dict] = {"sequential": {"device": "cpu"}, "batched": {"batched": True, "device": "cpu"}}
    if args.device != "cpu":
        variants.update({f"sequential@{args.device}": {"device": args.device},
                         f"batched@{args.device}": {"batched": True, "device": args.device}})
    if not args.no_ray:
        variants["ray"] = {"executor": "ray", "workers": args.ray_workers, "device": "cpu"}
    scs = {k: scenario(args.clients, args.rounds, data, model, **v) for k, v in variants.items()}
    from fedsim.learn.accelerator import run_device

    for k, sc in scs.items():
        run_device(sc.train)  # an accelerator this machine lacks: one line, before any timing
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
    print(f"{args.clients} clients per round, {model} on {data}, 20 local steps of batch 16; per round, median of "
          f"{args.repeats}; load average {os.getloadavg()[0]:.1f}")
    if args.device != "cpu":
        import torch

        name = torch.cuda.get_device_name(torch.device(args.device)) if args.device.startswith("cuda") else args.device
        print(f"accelerator: {name}")
    print(f"sequential in-process: {seq:.2f} s/round, final loss {loss['sequential']:.6f}")
    b = statistics.median(times["batched"]) / args.rounds
    print(f"batched (vmap):        {b:.2f} s/round, ratio {b / seq:.3f} (target <= 0.5), final loss {loss['batched']:.6f}")
    for k in variants:
        if "@" in k:
            t = statistics.median(times[k]) / args.rounds
            same = "identical" if traces[k] == traces["sequential"] else "DIFFERENT"
            print(f"{k + ':':<22} {t:.2f} s/round, speed-up {seq / t:.2f}x over sequential CPU, final loss "
                  f"{loss[k]:.6f}, trace without eval records {same} to the CPU run")
    if "ray" in variants:
        r = statistics.median(times["ray"]) / args.rounds
        print(f"ray, {args.ray_workers} workers:        {r:.2f} s/round, speed-up {seq / r:.2f}x, trace "
              f"{'identical' if traces['ray'] == traces['sequential'] else 'DIFFERENT'} to in-process")
    return 0


if __name__ == "__main__":
    from fedsim.errors import ConfigError

    try:
        sys.exit(main())
    except ConfigError as exc:  # e.g. --device cuda on a machine without one: one line, exit 2
        print(f"training.py: error: {exc}", file=sys.stderr)
        sys.exit(2)
