"""fedsim against a plain PyTorch loop and against the peer simulators installed beside it, on one workload.

The workload (``benchmarks/peers/README.md``): FedAvg on scikit-learn's digits, Dirichlet(0.5) clients, an
MLP 64-64-10, one local epoch of batch-16 SGD at lr 0.1, with every random decision fixed (split,
partition, initial weights, client selection, sample order), so every implementation does the same SGD
steps and ends at the same final accuracy float.  Two sizes: ``reference`` (100 clients, 30 rounds of 10)
and ``scaled`` (1,000 clients, 100 rounds of 50).

Implementations, each a whole process run from ``benchmarks/peers/``:

* ``loop``: ``pure_loop.py``, the plain loop (the floor), with this interpreter;
* ``fedsim``: ``fedsim run workload.yaml`` with its default outputs (trace, figures, report), this interpreter;
* ``fedsim-trace``: the same with ``output.figures=false`` (the trace, metrics and summary, no figures or
  report): not a replacement for the row above, but what the figures and report cost, in the same sitting;
* ``pfl``, ``flgo``, ``flwr``: ``pfl_sim.py``, ``flgo_sim.py``, ``flower_sim.py``, each with the interpreter
  named by ``PFL_PYTHON``, ``FLGO_PYTHON``, ``FLWR_PYTHON`` (default: this one).  A peer whose package does
  not import there is skipped, and said so.  The peers are optional installs for this benchmark only,
  never fedsim dependencies.

Method (as measured from outside, like ``/usr/bin/time``): one uncounted warm-up run of each, then
``--pairs`` cycles; each cycle runs every implementation once, the order rotating from cycle to cycle, so
that runs compared with each other are seconds apart and none is always first.  A ratio A/B is taken
within each cycle and its median (with min–max) over the cycles is printed: each implementation against
the loop, and fedsim against each.  Wall time is the whole process (interpreter start, imports, data,
the run, every output, teardown); its CPU time (user + system, from ``os.wait4``, as its peak RSS) is
printed beside it, a steadier measure than wall time on a shared machine.  Both count the processes an
implementation starts (fedsim's second process for its figures, Flower's workers) once they have ended:
the CPU time is their sum, the peak RSS that of the largest one.  The steady round is the
median of rounds 2.. as each script times them; fedsim's comes from ``peers/fedsim_rounds.py``, a
separate run right after the loop's in each cycle that stamps the wall clock where each round ends (the
timed fedsim runs are left untouched), and its ratio to the loop's is paired cycle by cycle.  ``uptime``'s
load average is printed before and after each size: the machine may be shared, which is why only paired
ratios are quoted.

Before timing, a check: fedsim's final weights must equal the loop's bit for bit, and every
implementation's final accuracy must be the loop's float; a mismatch is printed and the exit code is 1.

    python benchmarks/peers.py [--pairs 5] [--size reference|scaled|both] [--only pfl,flgo]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent / "peers"
PEERS = {"pfl": ("pfl", "pfl_sim.py", "PFL_PYTHON"), "flgo": ("flgo", "flgo_sim.py", "FLGO_PYTHON"),
         "flwr": ("flwr", "flower_sim.py", "FLWR_PYTHON")}
SCENARIO = {"reference": "workload.yaml", "scaled": "workload-scaled.yaml"}


def load_average() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def fedsim_command() -> list[str]:
    exe = Path(sys.executable).with_name("fedsim")
    return [str(exe)] if exe.exists() else [sys.executable, "-c", "import sys; from fedsim.cli import main; "
                                                                   "sys.argv[0] = 'fedsim'; sys.exit(main())"]


def installed(python: str, package: str) -> str | None:
    """The package's version under ``python``, or None when it does not import there."""
    code = f"import importlib.metadata as m, {package}; print(m.version({package!r}))"
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def run_once(cmd: list[str], env: dict[str, str], log: Path) -> dict:
    """Run ``cmd`` in ``benchmarks/peers/``; wall seconds, peak RSS (MiB), exit code and its RESULT line."""
    with open(log, "w") as f:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=HERE, env=env, stdout=f, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    rec = {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "rss_mb": usage.ru_maxrss / 1024,
           "rc": proc.returncode}
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("RESULT "):
            rec.update(json.loads(line[7:]))
    return rec


def check(size: str, work: Path, env: dict[str, str]) -> tuple[bool, float | None]:
    """fedsim's final weights against the loop's, bit for bit, and the final accuracy float."""
    import torch

    loop_state = work / f"loop-{size}.pt"
    subprocess.run([sys.executable, "pure_loop.py", "--save", str(loop_state)], cwd=HERE, env=env, check=True,
                   capture_output=True)
    run_dir = work / f"fedsim-check-{size}"
    subprocess.run([*fedsim_command(), "run", SCENARIO[size], "--out", str(run_dir), "--force", "--quiet"],
                   cwd=HERE, env=env, check=True, capture_output=True)
    ours = torch.load(run_dir / "final_model.pt")
    theirs = torch.load(loop_state)
    same = len(ours) == len(theirs) and all(
        torch.equal(a, b) for a, b in zip((v for _, v in sorted(ours.items())), (v for _, v in sorted(theirs.items()))))
    sys.path.insert(0, str(HERE))
    os.environ["FL_WORKLOAD"] = size
    import fedsim_workload

    fedsim_workload.c.use(size)
    acc = fedsim_workload.final_accuracy(ours)
    print(f"  check: fedsim's final weights {'equal' if same else 'DIFFER FROM'} the plain loop's bit for bit; "
          f"final accuracy (the workload's float32 mean) {acc!r}", flush=True)
    return same, acc


def same_accuracy(acc: float | None, ref: float | None) -> bool:
    """The same final accuracy: the same float, or (FLGo, which divides in float64) the same number of the
    297 test samples correct; anything else is a different run."""
    if acc is None or ref is None:
        return False
    return acc == ref or round(acc * 297) == round(ref * 297) and abs(acc - ref) < 1e-7


def bench(size: str, pairs: int, only: set[str] | None, work: Path) -> bool:
    env = {**os.environ, "FL_WORKLOAD": size, "PYTHONHASHSEED": "0"}
    print(f"\n## {size}: {load_average()} at start ({time.strftime('%Y-%m-%d %H:%M:%S %Z')})", flush=True)
    ok, acc_ref = check(size, work, env)
    methods: dict[str, list[str]] = {"loop": [sys.executable, "pure_loop.py"]}
    run_dir = work / f"fedsim-{size}"
    methods["fedsim"] = [*fedsim_command(), "run", SCENARIO[size], "--out", str(run_dir), "--force", "--quiet"]
    methods["fedsim-trace"] = [*fedsim_command(), "run", SCENARIO[size], "output.figures=false",
                               "--out", str(work / f"fedsim-trace-{size}"), "--force", "--quiet"]
    versions = {}
    for name, (package, script, var) in PEERS.items():
        if only is not None and name not in only:
            continue
        if size == "scaled" and name != "pfl":
            print(f"  {name}: not run at the scaled size (the scaled comparison is fedsim, pfl and the loop)")
            continue
        python = os.environ.get(var, sys.executable)
        v = installed(python, package)
        if v is None:
            print(f"  {name}: not installed under {python} (set {var} to an interpreter that has it); skipped")
            continue
        versions[name] = v
        methods[name] = [python, script]
    names = list(methods)
    recs: dict[str, list[dict]] = {n: [] for n in names}
    for n in names:  # warm-up, uncounted (FLGo also writes its task folder here, once)
        r = run_once(methods[n], env, work / f"{n}-{size}-warm.log")
        if r["rc"] != 0:
            print(f"  {n}: warm-up run failed (exit {r['rc']}, log {work / f'{n}-{size}-warm.log'}); dropped")
            names.remove(n)
    steady_fedsim: list[float | None] = []  # cycle by cycle, beside the loop's
    rounds_cmd = [sys.executable, "fedsim_rounds.py", SCENARIO[size], str(work / f"fedsim-rounds-{size}")]
    for i in range(pairs):
        order = names[i % len(names):] + names[:i % len(names)]
        for n in order:
            r = run_once(methods[n], env, work / f"{n}-{size}-{i}.log")
            recs[n].append(r)
            print(f"  cycle {i + 1} {n:<7} wall {r['wall_s']:7.3f} s  cpu {r['cpu_s']:7.3f} s  exit {r['rc']}  "
                  f"({load_average()})", flush=True)
            if n == "loop":  # fedsim's round times, right after the loop's (a separate, untimed run)
                rr = run_once(rounds_cmd, env, work / f"fedsim-rounds-{size}-{i}.log")
                steady_fedsim.append(rr.get("median_round_2on_s") if rr["rc"] == 0 else None)

    print(f"  {load_average()} at end; {pairs} cycles; torch threads 1 everywhere")

    loop_steady = [r.get("median_round_2on_s") if r["rc"] == 0 else None for r in recs["loop"]]
    steady_pairs = [a / b for a, b in zip(steady_fedsim, loop_steady) if a is not None and b]
    if steady_pairs:
        print(f"  fedsim's steady round ÷ the loop's, paired cycle by cycle: {statistics.median(steady_pairs):.3f} "
              f"[{min(steady_pairs):.3f}–{max(steady_pairs):.3f}]")

    def ratio(a: str, b: str, key: str = "wall_s") -> str:
        rs = [x[key] / y[key] for x, y in zip(recs[a], recs[b]) if x["rc"] == 0 and y["rc"] == 0]
        return f"{statistics.median(rs):.3f} [{min(rs):.3f}–{max(rs):.3f}]" if rs else "-"

    versions["loop"] = "torch " + (installed(sys.executable, "torch") or "?")
    versions["fedsim"] = installed(sys.executable, "fedsim") or "?"
    versions["fedsim-trace"] = versions["fedsim"] + ", figures and report off"
    print("\n| implementation | version | wall s (median) | wall ÷ plain loop (paired median [min–max]) "
          "| fedsim's wall ÷ its | CPU s (median) | CPU ÷ plain loop | steady round ms | peak RSS MiB "
          "| final accuracy |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in names:
        good = [r for r in recs[n] if r["rc"] == 0]
        if len(good) < len(recs[n]):
            ok = False
        if not good:
            print(f"| {n} | {versions[n]} | failed | | | | | | | |")
            continue
        steady = [x for x in (steady_fedsim if n == "fedsim" else [r.get("median_round_2on_s") for r in good])
                  if x is not None]
        acc = acc_ref if n in ("fedsim", "fedsim-trace") else good[-1].get("final_acc")
        ok = ok and same_accuracy(acc, acc_ref)
        cells = [n, versions[n], f"{statistics.median(r['wall_s'] for r in good):.3f}",
                 "1" if n == "loop" else ratio(n, "loop"), "1" if n == "fedsim" else ratio("fedsim", n),
                 f"{statistics.median(r['cpu_s'] for r in good):.3f}", "1" if n == "loop" else ratio(n, "loop", "cpu_s"),
                 f"{1000 * statistics.median(steady):.2f}" if steady else "-",
                 f"{statistics.median(r['rss_mb'] for r in good):.0f}", repr(acc)]
        print("| " + " | ".join(cells) + " |")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=5, help="counted cycles (each runs every implementation once)")
    ap.add_argument("--size", choices=("reference", "scaled", "both"), default="both")
    ap.add_argument("--only", default=None, help="peers to try, comma-separated (default: pfl,flgo,flwr)")
    ap.add_argument("--keep", default=None, help="folder for the logs and run folders (default: a temporary one)")
    args = ap.parse_args()
    if args.pairs < 1:
        print("peers.py: --pairs must be >= 1", file=sys.stderr)
        return 2
    only = None if args.only is None else {s.strip() for s in args.only.split(",") if s.strip()}
    if only is not None and not only <= set(PEERS):
        print(f"peers.py: unknown peer in --only {args.only!r} (allowed: {', '.join(PEERS)})", file=sys.stderr)
        return 2
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="fedsim-peers-"))
    work.mkdir(parents=True, exist_ok=True)
    sizes = ("reference", "scaled") if args.size == "both" else (args.size,)
    ok = all([bench(s, args.pairs, only, work) for s in sizes])
    print(f"\nlogs and run folders: {work}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
