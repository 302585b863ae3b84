"""Claims tables that a recipe writes from its own numbers, so the README cannot drift from the code.

Each paper recipe builds a list of :class:`Claim` from the tables it has just computed (every cell and
every verdict is a function of those numbers) and writes them with :func:`write_claims` as
``claims.md`` next to its CSVs, headed by the command, the commit (``git rev-parse --short HEAD``, or
"unknown" outside a checkout) and the seeds.  The README and ``figures/*_RESULTS.md`` paste that file.
"""
from __future__ import annotations

import math
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence


@dataclass
class Claim:
    """One row: the paper's claim and number, the recipe's measurement and the verdict computed from it.

    ``verdict``: "yes", "no", "partly" or "n/a" (the measurement is missing, e.g. a target never reached).
    """

    claim: str
    paper: str
    fedsim: str
    verdict: str


def verdict(holds: bool | None, partly: bool = False) -> str:
    """'yes' / 'no' from a computed condition, 'partly' when only part of it holds, 'n/a' for None."""
    if holds is None:
        return "n/a"
    if holds:
        return "yes"
    return "partly" if partly else "no"


def fmt(x: float, digits: int = 1) -> str:
    """A number for a table cell; NaN (a missing measurement) as 'n/a'."""
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def commit_hash(cwd: Path | None = None) -> str:
    """The short hash of HEAD of the checkout holding this file, or 'unknown' outside a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=cwd or Path(__file__).resolve().parent,
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def render_claims(claims: Sequence[Claim], *, command: str, seeds: Sequence[int], commit: str,
                  rules: str | None = None) -> str:
    """The Markdown claims table with its provenance line (and, when given, the verdict rules under it)."""
    lines = [f"Written by `{command}` at commit `{commit}`, seeds {', '.join(str(s) for s in seeds)}; every cell "
             f"and verdict is computed from that run's numbers.", "",
             "| claim (paper) | paper | fedsim | reproduces? |", "|---|---|---|---|"]
    for c in claims:
        cells = (c.claim, c.paper, c.fedsim, f"**{c.verdict}**" if c.verdict in ("no", "partly") else c.verdict)
        lines.append("| " + " | ".join(str(x).replace("|", "/").replace("\n", " ") for x in cells) + " |")
    if rules:
        lines += ["", rules.strip()]
    return "\n".join(lines) + "\n"


def write_claims(out: Path, claims: Sequence[Claim], *, command: str, seeds: Sequence[int],
                 commit: str | None = None, rules: str | None = None) -> Path:
    """Write ``out/claims.md`` (see :func:`render_claims`) and return its path."""
    path = Path(out) / "claims.md"
    path.write_text(render_claims(claims, command=command, seeds=seeds, commit=commit or commit_hash(), rules=rules),
                    encoding="utf-8")
    return path


def ratio_verdict(measured: float, paper: float) -> str:
    """A speed-up or ratio claim (paper's factor > 1): 'yes' when the measured factor reaches at least half
    of the paper's gain (1 + (paper − 1)/2), 'partly' when only the direction holds (> 1), else 'no'."""
    if measured is None or not math.isfinite(measured):
        return "n/a"
    if measured >= 1.0 + (paper - 1.0) / 2.0:
        return "yes"
    return "partly" if measured > 1.0 else "no"


def monotone(values: Sequence[float], direction: int) -> bool:
    """Rising (direction +1) or falling (−1) along the sequence: no step against the direction and a net
    change in it (a plateau where a quantity saturates, e.g. τ̄ = 0 once every update waits, still counts)."""
    v = list(values)
    return len(v) > 1 and all((b - a) * direction >= 0 for a, b in zip(v, v[1:])) and (v[-1] - v[0]) * direction > 0



def seeds_verdict(gaps: Sequence[float]) -> str:
    """A direction claim measured on several seeds, each gap signed so that > 0 is the paper's direction:
    'yes' when the seed mean and every seed point that way (the seed spread does not straddle zero),
    'partly' when the mean or most seeds do, 'no' otherwise, 'n/a' without a gap (NaN: neither side
    measured).  An infinite gap (one side never reached a target) counts in its direction."""
    g = [float(x) for x in gaps if x is not None and not math.isnan(float(x))]
    if not g:
        return "n/a"
    mean = sum(g) / len(g)
    most = sum(x > 0 for x in g) > len(g) / 2
    if math.isnan(mean):  # +inf and -inf
        mean = 1.0 if most else -1.0
    if mean > 0 and all(x > 0 for x in g):
        return "yes"
    return "partly" if mean > 0 or most else "no"


def close_verdict(measured: float, paper: float, rel: float = 0.05) -> str:
    """A number the paper states: 'yes' within ``rel`` (relative) of it, 'partly' within twice that, else
    'no'; 'n/a' when not measured."""
    if measured is None or not math.isfinite(measured):
        return "n/a"
    err = abs(measured - paper)
    return "yes" if err <= rel * abs(paper) else "partly" if err <= 2 * rel * abs(paper) else "no"


def combine(verdicts: Sequence[str]) -> str:
    """One verdict for a claim made of several parts: 'yes' when every part is, 'no' when none is even
    partly, else 'partly'; parts that could not be measured ('n/a') are left out (all 'n/a': 'n/a')."""
    v = [x for x in verdicts if x != "n/a"]
    if not v:
        return "n/a"
    if all(x == "yes" for x in v):
        return "yes"
    return "no" if all(x == "no" for x in v) else "partly"


def results_head(paper: str, recipe: str, out: Path, seeds: Sequence[int], commit: str, command: str) -> list[str]:
    """The opening of a recipe's RESULTS.md: title, provenance (command, commit, seeds) and its claims table
    (``out/claims.md``); the recipe appends its own tables."""
    return [f"# {paper} at small scale: the tables\n\nWritten by `{command}` at commit `{commit}`, seeds "
            f"{', '.join(str(s) for s in seeds)}; every number is in the CSVs written next to it.  Setting: "
            f"the module docstring of `figures/{recipe}.py`.\n",
            "## Claims\n", (out / "claims.md").read_text(encoding="utf-8")]
