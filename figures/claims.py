"""Claims tables that a recipe writes from its own numbers, by one rule set fixed before the run.

Each paper recipe builds a list of :class:`Claim` from the tables it has just computed and writes them
with :func:`write_claims` as ``claims.md`` next to its CSVs, headed by the command, the commit
(``git rev-parse --short HEAD``, or "unknown" outside a checkout) and the seeds, followed by
:data:`RULES` and the recipe's "choices that matter" table (:class:`Choice`).

Why one rule set: a verdict a researcher can stake a paper on must not depend on which recipe wrote it.
Every verdict comes from :func:`judge` (an effect measured on several seeds, or computed exactly once)
or :func:`judge_value` (a number the paper states), and every cell shows its evidence: the per-seed
values, mean ± std and the paper's number.  A claim with several parts is several rows; nothing here
combines parts.
"""
from __future__ import annotations

import math
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

#: two-sided 95% Student t quantiles by degrees of freedom (seeds − 1); above 30, the normal 1.96
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}

RULES = """Verdict rules (`figures/claims.py`, the same for every paper, fixed before the run).  Each seed's
effect is signed so that > 0 is the paper's direction (a factor r counts as r − 1); a seed points the paper's
way when its effect is beyond the measurement's own resolution (one test sample, 1/n; one tick of the
evaluation clock).  The mean's resolution is the larger of that and the seeds' standard error of the mean.
- **yes**: every seed points the paper's way, the mean is beyond its resolution, and the mean is at least half the
  paper's effect where the paper gives a number; where it gives only a direction, the seeds' 95% t-interval
  of the mean excludes zero (so one seed can never give "yes" to a direction).
- **partly**: the mean is > 0 and beyond its resolution and more than half of the seeds point the paper's way; the cell
  says the mean as a share of the paper's effect.
- **no**: otherwise, in particular when the mean is inside the resolution or carried by a minority of seeds.
- A quantity computed exactly (a cost model, no seeds): yes when it points the paper's way beyond its
  resolution, else no.  A number the paper states (not an effect): yes within 5% of it, partly within 10%,
  else no.
- **n/a**: not measured (the condition the row names does not hold, e.g. the evaluation clock is coarser
  than 5% of the smallest time it compares).  A time never reached counts as the run's time budget (a lower
  bound, marked ">")."""


@dataclass
class Claim:
    """One row: the paper's claim and number, the recipe's evidence and the verdict computed from it.

    ``verdict``: "yes", "no", "partly" or "n/a"."""

    claim: str
    paper: str
    fedsim: str
    verdict: str


@dataclass
class Choice:
    """One row of a recipe's "choices that matter" table: a reading the paper leaves open (or fedsim had to
    make), the reading the recipe's claims use and why, and the verdicts of the claims it moves under each
    reading (``verdicts``: reading -> text such as "RU vs FedAvg no; Top-1 vs FedRolex partly")."""

    choice: str
    used: str
    why: str
    verdicts: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Judgement:
    """A verdict and the evidence cell it was computed from."""

    verdict: str
    cell: str


def t95(dof: int) -> float:
    """The two-sided 95% Student t quantile for ``dof`` degrees of freedom (conservative between table rows)."""
    if dof >= 31:
        return 1.96
    return _T95[min(k for k in _T95 if k >= dof)]


def _num(x: float, digits: int) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def judge(effects: Sequence[float], paper: float | None = None, *, resolution: float = 0.0, ratio: bool = False,
          exact: bool = False, scale: float = 1.0, unit: str = "", digits: int = 1, paper_text: str | None = None,
          censored: Sequence[bool] | None = None) -> Judgement:
    """Judge an effect measured on several seeds (``effects``, > 0 the paper's direction) by :data:`RULES`.

    ``paper``: the paper's effect in the same units (None: the paper gives only a direction); with
    ``ratio`` the effects and ``paper`` are factors (r), judged as r − 1.  ``resolution``: the
    measurement's own resolution in effect units (for a factor, of r).  ``exact``: one value computed
    exactly (no seed spread).  ``scale``/``unit``/``digits`` format the cell (values shown × ``scale``);
    ``censored``: per seed, whether the value is a bound (a target never reached; shown with ">").
    NaN entries (not measured) are left out and said; none measured gives "n/a"."""
    raw = [float(x) for x in effects]
    cen = list(censored) if censored is not None else [False] * len(raw)
    vals = [x for x in raw if math.isfinite(x)]
    missing = len(raw) - len(vals)
    shown = " / ".join(("n/a" if not math.isfinite(x) else (">" if c else "") + _num(x * scale, digits))
                       for x, c in zip(raw, cen))
    ptext = paper_text if paper_text is not None else (
        "direction only" if paper is None else _num(paper * scale, digits) + ("×" if ratio else unit))
    if not vals:
        return Judgement("n/a", f"not measured; paper {ptext}")
    e = [x - 1.0 if ratio else x for x in vals]
    p = None if paper is None else (paper - 1.0 if ratio else paper)
    n = len(e)
    mean = sum(e) / n
    std = math.sqrt(sum((x - mean) ** 2 for x in e) / (n - 1)) if n > 1 else 0.0
    se = 0.0 if exact or n < 2 else std / math.sqrt(n)
    res = max(abs(resolution), se)
    mtext = _num((mean + (1.0 if ratio else 0.0)) * scale, digits) + ("×" if ratio else unit)
    if exact:
        cell = f"{mtext} (computed; resolution {_num(res * scale, digits)}); paper {ptext}"
    else:
        cell = (f"per seed {shown}{'×' if ratio else unit}; mean {mtext} ± {_num(std * scale, digits)} "
                f"(resolution {_num(res * scale, digits)}); paper {ptext}")
    if missing:
        cell += f"; {missing} seed(s) not measured"
    beyond = mean > res + 1e-12
    own = abs(resolution) + 1e-12          # a seed points the paper's way only beyond one unit of measurement
    pos = [x > own for x in e]
    share = f"{100 * mean / p:.0f}% of the paper's effect" if p else ""
    if exact:
        ok = beyond and (p is None or mean >= p / 2 - 1e-12)
        v = "yes" if ok and not missing else "no"
    elif beyond and all(pos) and not missing and (
            (p is not None and mean >= p / 2 - 1e-12)
            or (p is None and n >= 2 and mean - t95(n - 1) * std / math.sqrt(n) > 0)):
        v = "yes"
    elif beyond and sum(pos) > len(raw) / 2:
        v = "partly"
    else:
        v = "no"
    if v == "partly":
        cell += f"; {share}" if share else "; the 95% interval includes zero" if n >= 2 else "; one seed"
    elif v == "no" and mean > 0 and not beyond:
        cell += "; inside the resolution"
    return Judgement(v, cell)


def judge_value(measured: float, paper: float, *, rel: float = 0.05, digits: int = 1, unit: str = "") -> Judgement:
    """A number the paper states (not an effect): 'yes' within ``rel`` of it, 'partly' within 2·rel, else
    'no'; 'n/a' when not measured."""
    if measured is None or not math.isfinite(measured):
        return Judgement("n/a", f"not measured; paper {_num(paper, digits)}{unit}")
    off = (measured - paper) / abs(paper) if paper else math.inf
    v = "yes" if abs(off) <= rel + 1e-12 else "partly" if abs(off) <= 2 * rel + 1e-12 else "no"
    return Judgement(v, f"{_num(measured, digits)}{unit} ({100 * off:+.0f}% off); paper {_num(paper, digits)}{unit}")


def claim(text: str, paper: str, j: Judgement) -> Claim:
    """A :class:`Claim` row from a judgement."""
    return Claim(text, paper, j.cell, j.verdict)


def clock_ok(every_s: float, times: Sequence[float]) -> bool:
    """Whether an evaluation clock of ``every_s`` virtual seconds is no coarser than 5% of the smallest
    (finite, positive) time it compares; with no time measured it is not."""
    t = [float(x) for x in times if x is not None and math.isfinite(float(x)) and float(x) > 0]
    return bool(t) and every_s <= 0.05 * min(t) + 1e-12


def censor(times: Sequence[float], budget: float) -> tuple[list[float], list[bool]]:
    """Times to a target with a never-reached one (NaN or inf) replaced by the run's budget, a lower bound;
    with the flags of which were replaced."""
    out, flags = [], []
    for x in times:
        never = x is None or not math.isfinite(float(x))
        out.append(float(budget) if never else float(x))
        flags.append(never)
    return out, flags


def verdict(holds: bool | None) -> str:
    """'yes' / 'no' from a computed condition, 'n/a' for None (fedsim's own checks, not paper claims)."""
    return "n/a" if holds is None else "yes" if holds else "no"


def fmt(x: float, digits: int = 1) -> str:
    """A number for a table cell; NaN (a missing measurement) as 'n/a'."""
    return _num(x, digits)


def commit_hash(cwd: Path | None = None) -> str:
    """The short hash of HEAD of the checkout holding this file, or 'unknown' outside a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=cwd or Path(__file__).resolve().parent,
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(str(x).replace("|", "/").replace("\n", " ") for x in cells) + " |"


def _bold(v: str) -> str:
    return f"**{v}**" if v in ("no", "partly") else v


def render_choices(choices: Sequence[Choice]) -> str:
    """The "choices that matter" table: choice, reading used and why, verdicts under each reading."""
    lines = ["### Choices that matter", "", "| choice | reading used, and why | verdicts under each reading |",
             "|---|---|---|"]
    for c in choices:
        under = "; ".join(f"*{k}*: {v}" for k, v in c.verdicts.items())
        lines.append(_row((c.choice, f"{c.used}: {c.why}", under)))
    return "\n".join(lines) + "\n"


def render_claims(claims: Sequence[Claim], *, command: str, seeds: Sequence[int], commit: str,
                  choices: Sequence[Choice] = ()) -> str:
    """The Markdown claims table with its provenance line, :data:`RULES` under it, then the choices table."""
    lines = [f"Written by `{command}` at commit `{commit}`, seeds {', '.join(str(s) for s in seeds)}; every cell "
             f"and verdict is computed from that run's numbers.", "",
             "| claim (paper) | paper | fedsim | reproduces? |", "|---|---|---|---|"]
    lines += [_row((c.claim, c.paper, c.fedsim, _bold(c.verdict))) for c in claims]
    lines += ["", RULES, ""]
    if choices:
        lines.append(render_choices(choices))
    return "\n".join(lines).rstrip("\n") + "\n"


def write_claims(out: Path, claims: Sequence[Claim], *, command: str, seeds: Sequence[int],
                 commit: str | None = None, choices: Sequence[Choice] = ()) -> Path:
    """Write ``out/claims.md`` (see :func:`render_claims`) and return its path."""
    path = Path(out) / "claims.md"
    path.write_text(render_claims(claims, command=command, seeds=seeds, commit=commit or commit_hash(),
                                  choices=choices), encoding="utf-8")
    return path


def verdicts_of(claims: Sequence[Claim], names: Sequence[str]) -> str:
    """'claim: verdict' for the rows whose claim text contains one of ``names`` (a choices-table cell)."""
    return "; ".join(f"{c.claim}: {_bold(c.verdict)}" for c in claims if any(n in c.claim for n in names))


def monotone(values: Sequence[float], direction: int) -> bool:
    """Rising (direction +1) or falling (−1) along the sequence: no step against the direction and a net
    change in it (used for descriptions, never for a verdict on its own)."""
    v = list(values)
    return len(v) > 1 and all((b - a) * direction >= 0 for a, b in zip(v, v[1:])) and (v[-1] - v[0]) * direction > 0


def results_head(paper: str, recipe: str, out: Path, seeds: Sequence[int], commit: str, command: str) -> list[str]:
    """The opening of a recipe's RESULTS.md: title, provenance (command, commit, seeds) and its claims table
    (``out/claims.md``); the recipe appends its own tables."""
    return [f"# {paper} at small scale: the tables\n\nWritten by `{command}` at commit `{commit}`, seeds "
            f"{', '.join(str(s) for s in seeds)}; every number is in the CSVs written next to it.  Setting: "
            f"the module docstring of `figures/{recipe}.py`.\n",
            "## Claims\n", (out / "claims.md").read_text(encoding="utf-8")]
