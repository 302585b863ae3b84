"""Regenerate the gallery (docs/gallery.md) (``figures/gallery/*.svg`` and ``*.png``) from built-in scenarios.

    python -m figures.gallery [--out figures/gallery] [--quick | --runs-only]

Each picture comes from a real run; nothing is drawn by hand.  Takes about 100 s of CPU time.
After the scenario runs, the papers' figure recipes run with their own ``--quick`` (one seed) and two
or three pictures of each are kept.  ``--quick`` (the test that keeps this recipe working): every run
cut to a few versions or seconds and the paper recipes left out; the pictures are then only smoke output, never the gallery.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from analysis.report import check_run
from fedsim.runner import run_scenario
from fedsim import load_scenario
from figures import cos2p, embracingfl, fedraa, gas, semisfl

#: (scenario, overrides, files to keep as {file in the run directory: name in the gallery})
RUNS: list[tuple[str, list[str], dict[str, str]]] = [
    ("default", [], {"accuracy_vs_time.svg": "accuracy_vs_time.svg", "fedavg/timeline.svg": "timeline.svg",
                     "fedavg/energy.svg": "energy.svg"}),
    # full-participation FedAvg with a step size inside the local-SGD theorem's condition, checkpointed
    # so that `fedsim check` can probe L, sigma^2, zeta^2 and evaluate the bound
    ("fedasync", ["algorithm=fedavg", "algorithm.clients_per_round=20", "model.name=logreg", "train.lr=0.005",
                  "train.momentum=0", "train.local_steps=2", "output.checkpoints=2", "stop.max_versions=20",
                  "stop.max_time_s=null"], {}),
    ("fedasync", ["server.overhead_s=0.05", "stop.max_versions=60", "stop.max_time_s=null"],
     {"server_queue.svg": "server_queue.svg"}),
    ("fedasync", ["channel.preset=gas-cell", "channel.uplink.fading=rayleigh", "stop.max_time_s=20"],
     {"link_rates.svg": "link_rates.svg"}),
    # width reduction: FedAvg on the devices that hold the model vs HeteroFL, FjORD, FedRolex
    ("heterofl", [], {"accuracy_vs_time.svg": "heterofl_accuracy_vs_time.svg",
                      "heterofl/submodel_heatmap.svg": "submodel_heatmap.svg"}),
    ("fedasync", ["network.topology.kind=hierarchical", "network.topology.edge_servers=3",
                  "network.topology.backhaul_mbps=20", "stop.max_time_s=5"], {"topology.png": "topology.png"}),
]

#: the papers' figure recipes, each run with ``--quick`` (one seed): (prefix, recipe's main, pictures kept)
RECIPES: list[tuple[str, Any, tuple[str, ...]]] = [
    ("gas", gas.main, ("fig2_dissimilarity_accuracy.png", "fig3_sfl_time.png", "fig4_local_iterations_time.png")),
    ("cos2p", cos2p.main, ("accuracy_vs_time.png", "sweep_mu.png")),
    ("fedraa", fedraa.main, ("accuracy_vs_time.png", "assignments.png")),
    ("embracingfl", embracingfl.main, ("fig1_svcca.png", "table2.png")),
    ("semisfl", semisfl.main, ("time_traffic.png", "crossover.png")),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "gallery"))
    ap.add_argument("--quick", action="store_true", help="short runs, no paper recipes (a smoke test of the recipe)")
    ap.add_argument("--runs-only", action="store_true", help="the scenario runs' pictures only (no paper recipes)")
    args = ap.parse_args(argv)
    # quick: 4 versions of 2 local steps each (the same figures, drawn from less training)
    quick = ["stop={max_versions: 4}", "output.flush_every=64", "train.local_steps=2"] if args.quick else []
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, overrides, keep) in enumerate(RUNS):
            run_dir = Path(tmp) / f"{i}-{name}"
            run_scenario(load_scenario(name, overrides + quick), run_dir, progress=not args.quick)
            for src, dst in keep.items():
                shutil.copyfile(run_dir / src, out / dst)
                print(f"wrote {out / dst}")
            if i == 1:  # `fedsim check`: probes and the local-SGD bound
                check_run(run_dir)
                for name in ("grad_norm_vs_bound.png", "svcca_by_layer.png", "dissimilarity_over_versions.png"):
                    shutil.copyfile(run_dir / "check" / name, out / f"check_{name}")
                    print(f"wrote {out / f'check_{name}'}")
        if args.quick or args.runs_only:
            return 0
        for prefix, recipe, names in RECIPES:
            recipe_dir = Path(tmp) / prefix
            recipe(["--quick", "--out", str(recipe_dir)])
            for name in names:
                shutil.copyfile(recipe_dir / name, out / f"{prefix}_{name}")
                print(f"wrote {out / f'{prefix}_{name}'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
