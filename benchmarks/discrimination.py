"""The discrimination suite of ``fedsim check``: cases whose truth is known, the verdict each must get,
and the verdict it got, printed as the table of docs/discrimination.md.

    python benchmarks/discrimination.py [--out DIR] [--doc docs/discrimination.md]

Truth comes from outside the check: a correct FedAvg inside the proven step sizes of a theorem whose
constants are certified (the ``quadratic`` dataset's ``make`` builder: equal client Hessians, so ζ² is
exact; full-batch steps, so σ² = 0; least squares, so L and F* are exact) can only hold; a broken server
rule (benchmarks/broken_fedavg.py) that claims FedAvg's theorem can never hold, and where its left side
exceeds a certified bound it is refuted.  The rules checked on every case: no broken algorithm gets
"holds" or "consistent", no correct one "refuted"; each case also lists the verdicts it may get.
tests/test_check_discrimination.py runs the same cases.
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

HERE = Path(__file__).resolve().parent

#: the certified scenario: every constant of Theorems A and B follows from the data (analysis.constants)
CERTIFIED = ["data.num_clients=4", "data.options={builder: make, dim: 4, L: 1.0, mu: 1.0, G2: 50.0, samples: 8}",
             "train.batch_size=8", "train.local_steps=1", "train.lr=0.04", "stop.max_versions=60",
             "output.checkpoints=1", "output.figures=false", "eval.every_versions=60", "algorithm.clients_per_round=4"]
#: the certified scenario in 16 dimensions for the seeds folders: each seed draws its own problem, and in 4
#: dimensions their spread makes the interval of a correct run's mean straddle the smallest seed's bound (with
#: 30 versions instead of 60 the bound's gap term doubles and the correct run reads "uninformative")
CERTIFIED_16 = [o for o in CERTIFIED if not o.startswith(("data.options", "train.batch_size"))] + [
    "data.options={builder: make, dim: 16, L: 1.0, mu: 1.0, G2: 50.0, samples: 16}", "train.batch_size=16"]
GOOD = ("holds", "consistent with estimated constants", "uninformative", "not applicable", "vacuous",
        "insufficient evidence", "above the estimated bound (not a refutation)")
NEVER_FOR_BROKEN = ("holds", "consistent with estimated constants")


@dataclass
class Case:
    """One run with known truth: ``broken`` algorithms must never hold; ``allowed`` are the verdicts the
    case may get on its verified bound (Theorem B; Theorem 1 when ``row`` says so)."""

    name: str
    truth: str
    overrides: list[str]
    allowed: tuple[str, ...]
    broken: bool = False
    algorithm: str | None = None
    row: str = "Theorem B"
    scenario: str = "quadratic"
    extra: list[str] = field(default_factory=list)
    #: a seeds folder (``fedsim run --seeds``): the verdict is the mean-over-seeds row's, with its interval
    seeds: tuple[int, ...] = ()
    #: what the table shows after the verdict (a seeds folder's mean and interval), set when the case runs
    detail: str = ""


def cases() -> list[Case]:
    """The suite: correct FedAvg at, inside and outside its step-size limits, broken server rules, a run
    that barely moves, clipping that binds, too few checkpoints, and seeds folders (correct and broken)
    judged on the mean over seeds."""
    c = CERTIFIED
    return [
        Case("correct, certified, inside the limits", "correct", c, ("holds",), row="Theorem A"),
        Case("correct, just inside Theorem A's limit (lr 0.0416 <= 1/24)", "correct", c + ["train.lr=0.0416"],
             ("holds",), row="Theorem A"),
        Case("correct, just outside Theorem A's limit (lr 0.0418 > 1/24)", "correct", c + ["train.lr=0.0418"],
             ("not applicable",), row="Theorem A"),
        Case("correct, just outside Theorem B's limit (lr 0.0598)", "correct", c + ["train.lr=0.0598"],
             ("not applicable",)),
        Case("correct, barely moves (lr = 1e-6)", "correct", c + ["train.lr=1e-6"], ("uninformative",),
             row="Theorem A"),
        Case("correct, clipping that binds", "correct", c + ["train.clip_norm=0.01"], ("not applicable",),
             row="Theorem A"),
        Case("correct, 2 probed versions only", "correct",
             c + ["output.checkpoints=30"], ("insufficient evidence",), row="Theorem A"),
        Case("correct, README quadratic, Theorem 1", "correct",
             ["stop.max_versions=20", "output.checkpoints=1", "output.figures=false", "eval.every_versions=20"],
             ("uninformative", "consistent with estimated constants"), row="Theorem 1"),
        Case("broken: ignores every update", "broken", c, ("refuted",), True, "broken_fedavg:IgnoresUpdates",
             row="Theorem A"),
        Case("broken: wrong sign", "broken", c, ("refuted",), True, "broken_fedavg:WrongSign", row="Theorem A"),
        Case("broken: installs the first client's model", "broken", c, ("refuted",), True,
             "broken_fedavg:FirstClientOnly", row="Theorem A"),
        Case("correct, seeds folder 0,1,2 (mean over seeds)", "correct", CERTIFIED_16, ("holds",), row="Theorem A",
             seeds=(0, 1, 2)),
        Case("broken: wrong sign, seeds folder 0,1,2 (mean over seeds)", "broken", CERTIFIED_16, ("refuted",), True,
             "broken_fedavg:WrongSign", row="Theorem A", seeds=(0, 1, 2)),
        Case("broken: applies each update twice (inherits)", "broken", c, ("no theorem",), True,
             "broken_fedavg:AppliesTwice", extra=["no-claim"]),
        Case("broken: trains on a stale base (inherits)", "broken", c, ("no theorem",), True,
             "broken_fedavg:StaleBase", extra=["no-claim"]),
        Case("broken: installs the first client's model (inherits)", "broken", c, ("no theorem",), True,
             "broken_fedavg:FirstClientOnly", extra=["no-claim"]),
        Case("broken: ignores every update (inherits)", "broken", c, ("no theorem",), True,
             "broken_fedavg:IgnoresUpdates", extra=["no-claim"]),
    ]


def verdict_of(table, row: str) -> str:
    """The verdict of the first theorem row whose quantity contains ``row`` (or "no theorem")."""
    hits = table[table["quantity"].astype(str).str.contains(row, regex=False)
                 & (table["role"].astype(str) == "bound")]
    if not len(hits):
        return "no theorem" if table["quantity"].astype(str).str.startswith("no theorem").any() else "missing"
    return str(hits.iloc[0]["verdict"])


def run_case(case: Case, out: Path) -> str:
    """Run ``case`` into ``out`` and return the verdict of its row."""
    from analysis.report import check_run
    from fedsim import load_scenario
    from fedsim.runner import run_scenario

    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    overrides = list(case.overrides)
    if case.algorithm:
        overrides.append(f"algorithm.name={case.algorithm}")
    if "no-claim" in case.extra:  # the same rule, inheriting FedAvg's declaration instead of claiming it
        import broken_fedavg
        from fedsim.algorithms import FedAvg

        broken = getattr(broken_fedavg, case.algorithm.split(":")[1])
        name = f"{broken.__name__}Inherits"
        if not hasattr(broken_fedavg, name):
            setattr(broken_fedavg, name, type(name, (FedAvg,), {
                "name": broken.name + "-inherits", "server_rule": broken.server_rule, "__module__": "broken_fedavg"}))
        overrides[-1] = f"algorithm.name=broken_fedavg:{name}"
    import shutil

    shutil.rmtree(out, ignore_errors=True)
    if case.seeds:
        return seeds_verdict(case, overrides, out)
    run_scenario(load_scenario(case.scenario, overrides), out, progress=False)
    return verdict_of(check_run(out, figures=False, progress=False), case.row)


def seeds_verdict(case: Case, overrides: list[str], out: Path) -> str:
    """Run ``case`` once per seed (``fedsim run --seeds``), check the folder, and return the verdict of its
    mean-over-seeds row (the theorems bound expectations: the mean with its Student t interval)."""
    import pandas as pd

    from analysis.present import check_folder
    from fedsim import load_scenario
    from fedsim.sweep import run_seeds

    run_seeds(load_scenario(case.scenario, overrides), list(case.seeds), out, progress=False)
    check_folder(out, figures=False, progress=False)
    shown = pd.read_csv(out / "check.csv")
    hits = shown[shown["run"].astype(str).str.startswith("mean over seeds")
                 & shown["quantity"].astype(str).str.contains(case.row, regex=False)]
    if not len(hits):
        return "missing"
    row = hits.iloc[0]
    limits = re.search(r"limits \[([^,\]]+), ([^\]]+)\]", str(row["note"]))
    if limits:  # three significant digits: the table is compared with the docs page
        case.detail = (f"mean {float(row['measured']):.3g}, 95% limits [{float(limits.group(1)):.3g}, "
                       f"{float(limits.group(2)):.3g}], smallest bound {float(row['bound']):.3g}")
    return str(row["verdict"])


def judge_case(case: Case, verdict: str) -> list[str]:
    """The rules a verdict breaks ("" list when none)."""
    bad = []
    if case.broken and verdict in NEVER_FOR_BROKEN:
        bad.append("a broken algorithm holds")
    if not case.broken and verdict == "refuted":
        bad.append("a correct algorithm refuted")
    if verdict not in case.allowed:
        bad.append(f"expected one of {', '.join(case.allowed)}")
    return bad


def table(results: Sequence[tuple[Case, str]]) -> str:
    """The suite as a markdown table."""
    lines = ["| case | truth | row | verdict | expected | ok |", "|---|---|---|---|---|---|"]
    for case, verdict in results:
        shown = f"{verdict} ({case.detail})" if case.detail else verdict
        lines.append(f"| {case.name} | {case.truth} | {case.row} | {shown} | {' / '.join(case.allowed)} | "
                     f"{'yes' if not judge_case(case, verdict) else 'NO'} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/discrimination", help="folder for the runs")
    parser.add_argument("--doc", default=None, help="write the table into this markdown file")
    args = parser.parse_args(argv)
    from tqdm import tqdm

    results = []
    for i, case in enumerate(tqdm(cases(), desc="discrimination cases", unit="case")):
        results.append((case, run_case(case, Path(args.out) / f"case{i:02d}")))
    text = table(results)
    print(text, end="")
    if args.doc:
        Path(args.doc).write_text(DOC_HEAD + text, encoding="utf-8")
    return 0 if all(not judge_case(c, v) for c, v in results) else 1


DOC_HEAD = """# The discrimination suite of `fedsim check`

Cases with known truth, the verdicts each may get, and the verdict it got (`python benchmarks/discrimination.py
--doc docs/discrimination.md` writes this page; `tests/test_check_discrimination.py` runs the same cases).
Rules: a broken algorithm never gets *holds* or *consistent with estimated constants*; a correct one is never
*refuted*.  "Theorem B" / "Theorem A" are the verified bounds (`analysis/theory/partial.py`); "Theorem 1" is
Yang, Fang & Liu's, whose constants are unverified (never holds or refuted).  The certified scenario is the
`quadratic` dataset's `make` builder with equal client Hessians, full-batch steps and every client every
round: every constant follows from the data and the run has no randomness, so its value is its expectation.
A seeds folder (`fedsim run --seeds 0,1,2`) is judged on the mean over seeds with its one-sided 95% Student t
limits (each seed draws its own problem, 16-dimensional): *holds* needs the upper limit under the smallest
seed's bound, *refuted* the lower limit above the largest.

"""

if __name__ == "__main__":
    sys.exit(main())
