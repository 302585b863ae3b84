"""How much faster ``fedsim check`` probes a run's checkpoints: the original estimators, the exact probes of
the previous release and the current defaults, on the same checkpoints, alternately, in fresh processes.

The run is ``fedsim run cos2p output.checkpoints=3`` (60 versions, 21 checkpoints; ``--versions 6`` gives
the 3-checkpoint run of ``benchmarks/outputs.py``).  Three probe settings, each a
:class:`analysis.probes.ProbeSettings`:

* ``original``: the estimators the check first shipped with (``method="sampled"``: σ² as a Monte-Carlo mean
  over 16 drawn minibatches per client, the top Hessian eigenvalue by power iteration to 1e-4, each product
  a fresh forward and double backward);
* ``exact-1e-4``: the previous defaults (σ² exact from per-sample gradients, Lanczos warm-started from the
  previous checkpoint's eigenvector, residual bound at most 1e-4 of L);
* ``current``: today's defaults (σ² exact; Lanczos from the empirical Fisher's top direction of the Hessian
  batch's per-sample gradients, stopped once its residual bound is at most 1e-2 of L, the bound printed).

Each timing covers ``probe_run`` whole (data, model, every checkpoint, SVCCA, the summary) inside its own
process; the whole process's wall time and peak memory stand beside it.  With ``--check``, also whole
``fedsim check`` commands (trace, tables, figures included): the original estimators against the default.
Ratios are per round (the original's time over the other's, measured back to back), with the load average.

Usage: ``python benchmarks/check_probes.py [--versions 60] [--rounds 1] [--check | --check-only] [--run DIR]``.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from outputs import FEDSIM, child, load  # the same child-process timer and load line (this folder)


SETTINGS = {
    "original": "ProbeSettings(method='sampled', hessian_tol=1e-4, hessian_start='random')",
    "exact-1e-4": "ProbeSettings(hessian_tol=1e-4, hessian_start='previous')",
    "current": "ProbeSettings()",
}

PROBE = """
import sys, time
from analysis.probes import ProbeSettings, probe_run
t0 = time.perf_counter()
probe_run(sys.argv[1], settings={settings})
print(time.perf_counter() - t0)
"""

CHECK = """
import sys
from analysis.probes import ProbeSettings
from analysis.present import check_folder
check_folder(sys.argv[1], progress=False, probe_settings={settings})
"""


def fresh(run: Path) -> None:
    """Forget earlier probes, so each timing measures them again."""
    for name in ("probes.csv", "measured.json"):
        (run / name).unlink(missing_ok=True)
    shutil.rmtree(run / "check", ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--versions", type=int, default=60, help="stop.max_versions of the cos2p run (checkpoints every 3)")
    ap.add_argument("--rounds", type=int, default=1, help="alternating rounds of the settings")
    ap.add_argument("--only", default=",".join(SETTINGS), help="settings to time, comma-separated")
    ap.add_argument("--check", action="store_true", help="also time whole `fedsim check` runs (original, current)")
    ap.add_argument("--check-only", action="store_true", help="time only whole `fedsim check` runs")
    ap.add_argument("--run", help="an existing cos2p run folder with checkpoints (default: run one)")
    args = ap.parse_args()
    names = [n for n in args.only.split(",") if n]
    unknown = sorted(set(names) - set(SETTINGS))
    if unknown:
        raise SystemExit(f"--only: unknown setting {unknown[0]!r} (allowed: {', '.join(SETTINGS)})")
    work = Path(tempfile.mkdtemp(prefix="fedsim-bench-probes-"))
    try:
        run = work / "cos2p"
        if args.run:
            shutil.copytree(args.run, run)
        else:
            wall, _, _ = child([*FEDSIM, "run", "cos2p", f"stop.max_versions={args.versions}", "output.checkpoints=3",
                                "output.figures=false", "--quiet", "--out", str(run)])
            print(f"cos2p run, {args.versions} versions: {wall:.1f} s  ({load()})")
        n = len(list((run / "checkpoints").glob("v*.pt")))
        print(f"{n} checkpoints; commit {_commit()}; {os.cpu_count()} CPUs")
        times: dict[str, list[float]] = {k: [] for k in names}
        for r in range(0 if args.check_only else args.rounds):
            for name in names:
                fresh(run)
                before = load()
                wall, peak, text = child([sys.executable, "-c", PROBE.format(settings=SETTINGS[name]), str(run)])
                times[name].append(float(text.strip().splitlines()[-1]))
                print(f"round {r + 1} probe_run {name:10s}: {times[name][-1]:7.1f} s  (process {wall:.1f} s, peak "
                      f"{peak:.0f} MB; {before} -> {load()})", flush=True)
        for name in names if not args.check_only else []:
            if name != "original" and "original" in times:
                ratios = [a / b for a, b in zip(times["original"], times[name])]
                print(f"RATIO probe_run original / {name}: {' '.join(f'{x:.2f}x' for x in ratios)} by round")
        if "exact-1e-4" in times and "current" in times and not args.check_only:
            ratios = [a / b for a, b in zip(times["exact-1e-4"], times["current"])]
            print(f"RATIO probe_run exact-1e-4 / current: {' '.join(f'{x:.2f}x' for x in ratios)} by round")
        if args.check or args.check_only:
            walls: dict[str, list[float]] = {"original": [], "current": []}
            for r in range(args.rounds):
                for name in walls:
                    fresh(run)
                    before = load()
                    wall, peak, _ = child([sys.executable, "-c", CHECK.format(settings=SETTINGS[name]), str(run)])
                    walls[name].append(wall)
                    print(f"round {r + 1} fedsim check {name:10s}: {wall:7.1f} s  (peak {peak:.0f} MB; {before} -> "
                          f"{load()})", flush=True)
            ratios = [a / b for a, b in zip(walls["original"], walls["current"])]
            print(f"RATIO fedsim check original / current: {' '.join(f'{x:.2f}x' for x in ratios)} by round "
                  "(target >= 5)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


if __name__ == "__main__":
    main()
