"""Simulator overhead, measured as a user meets it: whole processes, fedsim against a plain PyTorch loop.

The workload: FedAvg on digits, 100 Dirichlet(0.5) clients, 10 per round, 30 rounds, an MLP with 64
hidden units, batch 16, one local epoch (about 400 SGD steps), test accuracy after every round.  The
baseline, ``benchmarks/plain_fedavg.py``, does exactly the same SGD steps (same split, clients, batches,
initial weights, float64 weighted averaging; its final accuracy must equal fedsim's, which this script
checks) with nothing around them.

Each repeat runs ``fedsim run SCENARIO --quiet`` and the plain script as fresh processes, alternately (so
machine load hits both alike), and reads each one's wall time and peak RSS (``os.wait4``).  The per-round
overhead compares the time both spend in their rounds after start-up (fedsim's ``metrics.csv`` wall clock
from version 0 to the last version; the plain loop times the same span), divided by the rounds.
Medians over the repeats.  Targets: whole-process ratio <= 1.10, per-round overhead <= 2 ms, peak memory
<= 1.2x.

    python benchmarks/overhead.py [--repeats 5] [--figures]

``--figures`` leaves fedsim's figures on (``output.figures``); by default the comparison is without them,
because the plain loop draws none.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = {
    "name": "overhead",
    "seed": 0,
    "data": {"name": "digits", "num_clients": 100, "partition": {"method": "dirichlet", "alpha": 0.5}},
    "model": {"name": "mlp", "hidden": [64]},
    "train": {"lr": 0.05, "batch_size": 16, "local_epochs": 1},
    "algorithm": {"name": "fedavg", "clients_per_round": 10},
    "stop": {"max_versions": 30},
    "eval": {"every_versions": 1},
}


def make_plan(scenario_path: Path, run_dir: Path, plan_path: Path) -> None:
    """The plain loop's inputs, taken from the scenario and a finished fedsim run of it."""
    from fedsim.build import build_global_model, prepare_data
    from fedsim import load_scenario
    from fedsim.sim.rng import Streams
    from fedsim.sim.trace import load_trace

    sc = load_scenario(str(scenario_path), [])
    prepared = prepare_data(sc)
    streams = Streams(sc.seed)
    n = 1797  # scikit-learn's digits; fedsim's loader splits a permutation of them 80/20
    perm = streams.numpy("data", "load").permutation(n)
    n_test = int(round(0.2 * n))
    rounds = load_trace(run_dir, kinds=("round",)).sort_values("round")
    selections = [[int(c) for c in cl] for cl in rounds["clients"]]
    tasks: dict[int, int] = {}
    seeds = []
    for clients in selections:
        row = []
        for c in clients:
            k = tasks.get(c, 0)
            tasks[c] = k + 1
            row.append(streams.int_seed("client", c, "task", k))
        seeds.append(row)
    model = build_global_model(sc, prepared.data)
    torch.save({"train": np.sort(perm[n_test:]), "test": np.sort(perm[:n_test]),
                "parts": [np.asarray(p, dtype=np.int64) for p in prepared.parts], "rounds": selections,
                "seeds": seeds, "init": [v.clone() for v in model.state_dict().values()],
                "hidden": sc.model.hidden[0], "lr": sc.train.lr, "batch_size": sc.train.batch_size,
                "epochs": sc.train.local_epochs}, plan_path)


def run_measured(cmd: list[str]) -> tuple[float, float, str]:
    """(wall seconds, peak RSS in MB, stdout) of one fresh process, via ``os.wait4``."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with tempfile.TemporaryFile("w+") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}:\n{text}")
    return wall, usage.ru_maxrss / 1024.0, text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--figures", action="store_true", help="leave fedsim's figures on")
    args = ap.parse_args(argv)
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        work = dict(WORKLOAD, output={"figures": bool(args.figures)})
        scenario = tmp / "overhead.yaml"
        scenario.write_text(yaml.safe_dump(work), encoding="utf-8")
        fedsim_cmd = [py, "-m", "fedsim.cli", "run", str(scenario), "--out", str(tmp / "run"), "--quiet", "--force"]  # each repeat replaces the last run
        run_measured(fedsim_cmd)  # warm the file cache; also the run the plan is read from
        plan = tmp / "plan.pt"
        make_plan(scenario, tmp / "run", plan)
        plain_cmd = [py, str(ROOT / "benchmarks" / "plain_fedavg.py"), str(plan)]
        run_measured(plain_cmd)
        rows = []
        for rep in range(args.repeats):
            for who, cmd in (("fedsim", fedsim_cmd), ("plain", plain_cmd)) if rep % 2 == 0 else \
                    (("plain", plain_cmd), ("fedsim", fedsim_cmd)):
                wall, rss, text = run_measured(cmd)
                if who == "fedsim":
                    m = pd.read_csv(tmp / "run" / "metrics.csv")
                    rounds_s = float(m["wall_s"].iloc[-1] - m["wall_s"].iloc[0])
                    acc = float(m["accuracy"].iloc[-1])
                else:
                    parts = text.split()
                    acc, rounds_s = float(parts[2]), float(parts[4])
                rows.append({"who": who, "rep": rep, "wall_s": wall, "peak_mb": rss, "rounds_s": rounds_s,
                             "accuracy": acc})
                print(f"repeat {rep + 1}/{args.repeats} {who:>6}: {wall:6.2f} s, peak {rss:6.0f} MB, "
                      f"rounds {rounds_s:.3f} s, accuracy {acc:.4f}", file=sys.stderr)
    df = pd.DataFrame(rows)
    med = df.groupby("who").median(numeric_only=True)
    f, p = med.loc["fedsim"], med.loc["plain"]
    ratio, mem = f["wall_s"] / p["wall_s"], f["peak_mb"] / p["peak_mb"]
    per_round_ms = (f["rounds_s"] - p["rounds_s"]) / WORKLOAD["stop"]["max_versions"] * 1000.0
    same = df.groupby("who")["accuracy"].first()
    load = os.getloadavg()[0]
    print(f"whole process: fedsim {f['wall_s']:.2f} s, plain loop {p['wall_s']:.2f} s, ratio {ratio:.3f} "
          f"(target <= 1.10)")
    print(f"per round: fedsim {f['rounds_s'] / 30 * 1000:.1f} ms, plain {p['rounds_s'] / 30 * 1000:.1f} ms, "
          f"ratio {f['rounds_s'] / p['rounds_s']:.2f}, overhead {per_round_ms:.2f} ms (target <= 2 ms)")
    print(f"peak memory: fedsim {f['peak_mb']:.0f} MB, plain {p['peak_mb']:.0f} MB, ratio {mem:.3f} (target <= 1.2)")
    print(f"final accuracy: fedsim {same['fedsim']:.4f}, plain {same['plain']:.4f} "
          f"({'equal' if abs(same['fedsim'] - same['plain']) < 1e-9 else 'DIFFERENT'}); "
          f"median of {args.repeats}, figures {'on' if args.figures else 'off'}, load average {load:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
