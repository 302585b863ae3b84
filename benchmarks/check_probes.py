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
process, in one process as the earlier releases probed; the whole process's wall time and peak memory stand
beside it.  With ``--check``, also whole ``fedsim check`` commands (trace, tables, figures included): the
original estimators against the default, with the default's ``--jobs`` (one process per core, at most one
per 2 checkpoints, rounded up).  Ratios are per round (the original's time over the other's, measured back to back),
with the load average.

With ``--against TREE`` (a checkout of an earlier fedsim, e.g. ``git worktree add ../fedsim-before
75e1098``, the code the issue measured), the whole ``fedsim check`` of that tree and of this one are timed
alternately on the same run, each in a fresh process with the run's probes removed (and nothing else
timed unless ``--check`` asks), and their wall-time and CPU-time ratios printed: the wall time is what a user waits for; the CPU time (worker processes
included) shows how much of the gain is the second core.

Usage: ``python benchmarks/check_probes.py [--versions 60] [--rounds 1] [--check | --check-only]
[--against TREE] [--run DIR]``.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from outputs import FEDSIM, child, child_usage, load  # the same child-process timer and load line (this folder)


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
check_folder(sys.argv[1], progress=False, probe_settings={settings}, jobs=None)
"""

#: The whole ``fedsim check`` command of whichever tree is first on PYTHONPATH.
CHECK_COMMAND = ("import sys, fedsim; print(repr(fedsim.__file__)); from fedsim.cli import main; "
                 "sys.exit(main(['check', sys.argv[1]]))")


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
    ap.add_argument("--against", metavar="TREE",
                    help="also time the whole `fedsim check` of this earlier checkout against this tree's")
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
        for r in range(0 if args.check_only or args.against else args.rounds):
            for name in names:
                fresh(run)
                before = load()
                wall, peak, text = child([sys.executable, "-c", PROBE.format(settings=SETTINGS[name]), str(run)])
                times[name].append(float(text.strip().splitlines()[-1]))
                print(f"round {r + 1} probe_run {name:10s}: {times[name][-1]:7.1f} s  (process {wall:.1f} s, peak "
                      f"{peak:.0f} MB; {before} -> {load()})", flush=True)
        for name in names if not (args.check_only or args.against) else []:
            if name != "original" and "original" in times:
                ratios = [a / b for a, b in zip(times["original"], times[name])]
                print(f"RATIO probe_run original / {name}: {' '.join(f'{x:.2f}x' for x in ratios)} by round")
        if "exact-1e-4" in times and "current" in times and not (args.check_only or args.against):
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
        if args.against:
            against(run, Path(args.against), args.rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def against(run: Path, tree: Path, rounds: int) -> None:
    """Whole ``fedsim check`` commands of ``tree`` and of this checkout on ``run``, alternately."""
    here = Path(__file__).resolve().parents[1]
    if not (tree / "fedsim" / "cli.py").exists():
        raise SystemExit(f"--against: {str(tree)!r} holds no fedsim checkout (no fedsim/cli.py)")
    trees = {f"earlier ({_commit(tree)})": tree, f"this ({_commit(here)})": here}
    got: dict[str, list[tuple[float, float]]] = {k: [] for k in trees}
    for r in range(rounds):
        for name, root in trees.items():
            fresh(run)
            before = load()
            env = {**os.environ, "PYTHONPATH": str(root)}
            # in the tree itself: `python -c` puts the working folder first on sys.path
            wall, peak, cpu, text = child_usage([sys.executable, "-c", CHECK_COMMAND, str(run)], env=env, cwd=root)
            if f"'{root}" not in text:
                raise SystemExit(f"--against: the check did not run from {root} ({text.strip()[-200:]!r})")
            got[name].append((wall, cpu))
            print(f"round {r + 1} fedsim check, {name:18s}: {wall:7.1f} s wall, {cpu:7.1f} s CPU (peak {peak:.0f} MB; "
                  f"{before} -> {load()})", flush=True)
    old, new = got.values()
    print(f"RATIO fedsim check earlier / this, wall: {' '.join(f'{a[0] / b[0]:.2f}x' for a, b in zip(old, new))} "
          f"by round (target >= 5); CPU: {' '.join(f'{a[1] / b[1]:.2f}x' for a, b in zip(old, new))}")


def _commit(root: Path | None = None) -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=root or Path(__file__).resolve().parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


if __name__ == "__main__":
    main()
