"""What a run's outputs cost next to the run itself, and how much faster the check's probes became.

Three measurements, each in fresh child processes (so the peaks are those of one command), printed as
ratios with the load average beside them:

1. ``fedsim run gas-cell-timing output.trace_format=compact`` with figures off: the simulation's own wall
   time (``wall_time_s`` of its summary) and the whole process's peak memory;
2. the figures and report.html of that run folder, built alone (what ``output.figures`` adds to a run):
   their wall time over the simulation's (target: at most 1);
3. the same run with its default outputs on: the whole process's peak memory (target: under 450 MB);
4. ``fedsim check``'s probing on a cos2p run with checkpoints: the original estimators
   (``ProbeSettings(method="sampled")``: Monte-Carlo σ², power iteration, each product a fresh forward and
   double backward) against the current ones (exact σ² from per-sample gradients, Lanczos with its error
   bound), on the same checkpoints, alternately, one ratio per round (target: at least 5x).  Both share the
   per-run setup (data, model, SVCCA), so a faster setup makes the ratio smaller, never larger.

5. ``--cpu`` (alone): the peers' reference workload (``benchmarks/peers/workload.yaml``) with its default
   outputs, drawn in the run's own process (``FEDSIM_OUTPUT_PROCESS=0``), against the same run with figures
   and report off, alternately, ``--repeats`` pairs: the median CPU time (user + system) of each and their
   ratio (target: at most 1.15).

Peaks are each child's ``ru_maxrss`` (``os.wait4``), no extra package needed.  Usage:
``python benchmarks/outputs.py [--scenario gas-cell-timing] [--skip-probes | --only-probes | --cpu]``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FEDSIM = [sys.executable, "-c", "import sys; from fedsim.cli import main; sys.exit(main())"]

OUTPUTS = """
import sys, time
t0 = time.perf_counter()
from fedsim.output import figures, report
build = figures.OutputBuild(sys.argv[1])  # one reading of the trace for the figures and the page, as a run's
report.run_figures(sys.argv[1], build=build)
report.html_report(sys.argv[1], build=build)
print(time.perf_counter() - t0)
"""

PROBES = """
import sys, time
from analysis.probes import ProbeSettings, probe_run
run, method = sys.argv[1], sys.argv[2]
# the original estimators stopped their power iteration at 1e-4 (the current default tolerance is 1e-2)
settings = ProbeSettings(method="sampled", hessian_tol=1e-4) if method == "sampled" else ProbeSettings()
t0 = time.perf_counter()
probe_run(run, settings=settings)
print(time.perf_counter() - t0)
"""


def child(cmd: list[str]) -> tuple[float, float, str]:
    """Run ``cmd``; its wall time (s), peak resident memory (MB) and stdout."""
    wall, peak, _, text = child_usage(cmd)
    return wall, peak, text


def child_usage(cmd: list[str], env: dict[str, str] | None = None,
                cwd: Path | None = None) -> tuple[float, float, float, str]:
    """Run ``cmd`` (with ``env``, in ``cwd``); its wall time (s), peak resident memory of its largest process (MB),
    CPU time (user + system, s, its worker processes included) and stdout."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL, env=env, cwd=cwd)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode()
    if p.returncode != 0:
        raise SystemExit(f"benchmark step failed (exit {p.returncode}): {' '.join(cmd[3:] or cmd)}")
    peak_mb = usage.ru_maxrss / 1024 if sys.platform != "darwin" else usage.ru_maxrss / 2**20
    return wall, peak_mb, usage.ru_utime + usage.ru_stime, text


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="gas-cell-timing")
    ap.add_argument("--skip-probes", action="store_true", help="only the output-cost ratios")
    ap.add_argument("--only-probes", action="store_true", help="only the probes' speed-up (no gas-cell-timing runs)")
    ap.add_argument("--probe-versions", type=int, default=6,
                    help="versions of the cos2p run (checkpoints every 3: version 0, 3, 6, ...)")
    ap.add_argument("--probe-rounds", type=int, default=2, help="alternating rounds of the two probe methods")
    ap.add_argument("--cpu", action="store_true", help="only measurement 5: default outputs' CPU time over "
                                                       "figures off, on the peers' reference workload")
    ap.add_argument("--repeats", type=int, default=3, help="pairs for --cpu (median of them)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fedsim-bench-outputs-"))
    try:
        print(f"before: {load()}")
        if args.cpu:
            output_cpu(work, args.repeats)
            return
        if not args.only_probes:
            output_costs(args.scenario, work)
        if not args.skip_probes:
            probe_speedup(work, args.probe_versions, args.probe_rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def output_costs(scenario: str, work: Path) -> None:
    """Measurements 1-3: the simulation alone, its figures and report alone, the run with default outputs."""
    bare = work / "bare"
    wall, peak_bare, _ = child([*FEDSIM, "run", scenario, "output.trace_format=compact",
                                "output.figures=false", "--quiet", "--out", str(bare)])
    sim = json.loads((bare / "summary.json").read_text())["wall_time_s"]
    print(f"{scenario}, compact trace, figures off: whole process {wall:.1f} s, simulating {sim:.1f} s, "
          f"peak {peak_bare:.0f} MB  ({load()})")
    out_wall, out_peak, text = child([sys.executable, "-c", OUTPUTS, str(bare)])
    outputs = float(text.strip().splitlines()[-1])
    print(f"figures + report.html alone: {outputs:.1f} s (process {out_wall:.1f} s, peak {out_peak:.0f} MB)  "
          f"({load()})")
    full = work / "full"
    wall_full, peak_full, _ = child([*FEDSIM, "run", scenario, "output.trace_format=compact", "--quiet",
                                     "--out", str(full)])
    print(f"{scenario}, compact trace, default outputs: whole process {wall_full:.1f} s, "
          f"peak {peak_full:.0f} MB  ({load()})")
    print(f"RATIO outputs / simulation wall: {outputs / sim:.2f}  (target <= 1)")
    print(f"RATIO peak with outputs: {peak_full:.0f} MB = {peak_full / peak_bare:.2f}x the run without them "
          f"(target < 450 MB)")


def output_cpu(work: Path, repeats: int) -> None:
    """Measurement 5: CPU time of the peers' reference run with default outputs in its own process over the
    same run with figures and report off, ``repeats`` alternating pairs, medians."""
    import statistics

    peers = Path(__file__).resolve().parent / "peers"
    env = {**os.environ, "FL_WORKLOAD": "reference", "PYTHONHASHSEED": "0", "FEDSIM_OUTPUT_PROCESS": "0"}
    cpu: dict[str, list[float]] = {"default outputs": [], "figures off": []}
    wall: dict[str, list[float]] = {"default outputs": [], "figures off": []}
    for i in range(repeats):
        for name, extra in (("default outputs", []), ("figures off", ["output.figures=false"])):
            w, _, c, _ = child_usage([*FEDSIM, "run", "workload.yaml", *extra, "--out", str(work / f"{name}-{i}"),
                                      "--force", "--quiet"], env=env, cwd=peers)
            cpu[name].append(c)
            wall[name].append(w)
            print(f"peers' reference workload, {name}: CPU {c:.2f} s, wall {w:.2f} s  ({load()})", flush=True)
    med = {k: statistics.median(v) for k, v in cpu.items()}
    ratios = [a / b for a, b in zip(cpu["default outputs"], cpu["figures off"])]
    print(f"median CPU: default outputs {med['default outputs']:.2f} s, figures off {med['figures off']:.2f} s; "
          f"median wall {statistics.median(wall['default outputs']):.2f} s / {statistics.median(wall['figures off']):.2f} s")
    print(f"RATIO default outputs / figures off, CPU: {med['default outputs'] / med['figures off']:.3f} of the medians "
          f"(pairs: {' '.join(f'{r:.3f}' for r in ratios)}; target <= 1.15)")


def probe_speedup(work: Path, versions: int, rounds: int) -> None:
    """Measurement 4: the same checkpoints probed by the original estimators (the baseline) and the current
    ones, alternately, in fresh processes; each time covers ``probe_run`` whole (data, model, every
    checkpoint, SVCCA, the summary), not the probes alone."""
    cos = work / "cos2p"
    child([*FEDSIM, "run", "cos2p", f"stop.max_versions={versions}", "output.checkpoints=3",
           "output.figures=false", "--quiet", "--out", str(cos)])
    n = len(list((cos / "checkpoints").glob("v*.pt")))
    times: dict[str, list[float]] = {"sampled": [], "exact": []}
    for method in ("sampled", "exact") * rounds:  # alternating
        (cos / "probes.csv").unlink(missing_ok=True)
        _, peak, text = child([sys.executable, "-c", PROBES, str(cos), method])
        times[method].append(float(text.strip().splitlines()[-1]))
        print(f"probing {n} cos2p checkpoints, {method}: {times[method][-1]:.1f} s, peak {peak:.0f} MB  "
              f"({load()})")
    ratios = [a / b for a, b in zip(times["sampled"], times["exact"])]
    print(f"RATIO probe speed-up (sampled, the original estimators / exact): "
          f"{' '.join(f'{r:.2f}x' for r in ratios)} by round (target >= 5)")


if __name__ == "__main__":
    main()
