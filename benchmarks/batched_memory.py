"""Batched-round memory: the preflight's estimate against the measured peak, at 20 and 60 clients.

A batched round (``train.batched: true``) trains a round's clients at once; the preflight refuses a round
whose estimate (:func:`fedsim.preflight.batched_round_bytes`) does not fit the device.  The estimate must
be an upper bound, and a close one: this measures the peak of one round of ``batched_local_sgd`` (the
call the run makes) over N clients, each size in a fresh process, on the CPU.  The peak is the process's
resident high-water mark (``VmHWM``) reset just before the round (``/proc/self/clear_refs``), less the
resident size then (model, data and libraries already loaded): the round's own memory.  Printed per size:
the estimate, the measured peak and their ratio (>= 1: an upper bound; the target is at most 1.25).

    python benchmarks/batched_memory.py [--clients 20 60] [--scenario default] [key=value ...]

Linux only (``/proc``).  The default is the ``default`` scenario's CNN on digits at batch 32, 20 local steps.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _status_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {key} in /proc/self/status")


def one(clients: int, scenario_name: str, overrides: list[str]) -> dict:
    """One batched round of ``clients`` clients in this process: the estimate and the measured peak (bytes)."""
    import gc

    import torch

    from fedsim import load_scenario
    from fedsim.build import build_global_model, prepare_data
    from fedsim.learn.batched import batched_local_sgd
    from fedsim.preflight import batched_round_bytes
    from fedsim.training import sgd_config

    torch.set_num_threads(1)
    scenario = load_scenario(scenario_name, [f"data.num_clients={clients}", "algorithm=fedavg",
                                             f"algorithm.clients_per_round={clients}", "train.batched=true",
                                             "stop.max_versions=1", *overrides])
    prepared = prepare_data(scenario)
    model = build_global_model(scenario, prepared.data)
    need = batched_round_bytes(scenario, model, prepared, clients)
    x, y = prepared.data.train.x, prepared.data.train.y
    parts = [torch.as_tensor(p, dtype=torch.int64) for p in prepared.parts[:clients]]
    sgd = sgd_config(scenario)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    gens = [torch.Generator().manual_seed(c) for c in range(clients)]
    batched_local_sgd(model, state, x, y, parts[:2], sgd, gens[:2])  # warm-up: libraries' one-off buffers
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current resident size
    before = _status_kib("VmRSS")
    out = batched_local_sgd(model, state, x, y, parts, sgd, [torch.Generator().manual_seed(c) for c in range(clients)])
    peak = _status_kib("VmHWM")
    del out
    return {"clients": clients, "estimate_bytes": need["round"], "per_client_bytes": need["per_client"],
            "measured_bytes": (peak - before) * 1024}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, nargs="+", default=[20, 60])
    ap.add_argument("--scenario", default="default")
    ap.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.one, args.scenario, args.overrides)))
        return
    gib = 2.0**30
    print(f"{'clients':>8} {'estimate GiB':>13} {'measured GiB':>13} {'ratio':>6}")
    for n in args.clients:
        cmd = [sys.executable, __file__, "--one", str(n), "--scenario", args.scenario, *args.overrides]
        r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT).stdout.splitlines()[-1])
        ratio = r["estimate_bytes"] / max(1, r["measured_bytes"])
        print(f"{n:>8} {r['estimate_bytes'] / gib:>13.4f} {r['measured_bytes'] / gib:>13.4f} {ratio:>6.2f}", flush=True)


if __name__ == "__main__":
    main()
