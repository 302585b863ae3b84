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
from typing import Any, Sequence

#: "partly" needs the mean to reach this share of the paper's effect where the paper gives a number
FLOOR = 0.25
#: an accuracy row is judged only where every compared method's mean accuracy is at least this share of the
#: way from chance to 100% (32.5% on 10 classes) ...
CHANCE_SHARE = 0.25
#: ... and more than this many binomial standard errors (of one accuracy on the test set) above chance
CHANCE_SE = 5.0
_ORDER = {"yes": 3, "partly": 2, "no": 1, "n/a": 0}

RULES = """Verdict rules (`figures/claims.py`, the same for every paper, fixed before the run).  Each seed's
effect is signed so that > 0 is the paper's direction (a factor r counts as r − 1); where the paper gives a
number, its sign is the paper's direction (a negative paper effect flips the row, so it is never passed for free).
Every effect has a resolution, named in its cell: for an accuracy difference, test-set sampling (the binomial
standard error of the difference on the n test samples, √(p₁(1−p₁)/n + p₂(1−p₂)/n)); for a time, one tick of the
evaluation clock, for a time ratio both clocks (r·(tick/t₁ + tick/t₂)); for a quantity without a measurement
unit (RU, ρ, SVCCA, an error floor, a factor), the seed-to-seed spread (one standard deviation of the effect over
the seeds).  A seed points the paper's way when its effect is beyond its resolution.  The interval is the mean's
95% Student-t interval with the row's own degrees of freedom (measured seeds − 1).
- **yes**: every seed points the paper's way, the interval excludes zero, the mean is beyond the resolution,
  and the mean is at least half the paper's effect where the paper gives a number.
- **partly**: the interval excludes zero and the mean is beyond the resolution, but the mean is under half the
  paper's effect or not every seed points its way; and the mean is at least 25% of the paper's effect where the
  paper gives a number (the cell says the share).
- **no**: otherwise.
- **n/a**: not measurable at this scale, with the reason: fewer than two measured seeds (no interval); an
  accuracy row where a compared method is not clearly above chance (mean accuracy under a quarter of the way
  from chance to 100%, or within 5 binomial standard errors of chance); an evaluation clock coarser than 5% of
  the smallest time it compares.
- A censored time (">": a method that never reached the target, counted at the run's budget) is never used as
  a value: it is left out of the mean and the interval, and the seed points the paper's way only when the
  censoring is in the claim's favour (its bound is beyond the resolution and the true effect can only be
  larger); otherwise it does not, so the row cannot be yes.
- A quantity computed exactly (a cost model, no seeds): yes when it points the paper's way beyond its
  resolution and reaches half the paper's number, else no.  A number the paper states (not an effect): yes
  within 5% of it, partly within 10%, else no.
- Stability: the rows are judged again on a disjoint seed set; a row whose verdict differs is marked
  unstable and gets the weaker of its two verdicts (never yes)."""


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
    """The two-sided 95% Student t quantile for exactly ``dof`` degrees of freedom (the row's own)."""
    from scipy.stats import t as student_t

    if dof < 1:
        raise ValueError("a t interval needs at least one degree of freedom")
    return float(student_t.ppf(0.975, dof))


def _num(x: float, digits: int) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def acc_resolution(a: Sequence[float], b: Sequence[float], n_test: int) -> list[float]:
    """Per seed, the test-set sampling resolution (points) of accuracy a − b (both in %): the binomial standard
    error of a difference of two accuracies on ``n_test`` samples, taken as independent (conservative)."""
    out = []
    for x, y in zip(a, b):
        pa, pb = min(max(float(x) / 100, 0.0), 1.0), min(max(float(y) / 100, 0.0), 1.0)
        out.append(100.0 * math.sqrt((pa * (1 - pa) + pb * (1 - pb)) / float(n_test)))
    return out


def ratio_resolution(fast: Sequence[float], slow: Sequence[float], tick: float) -> list[float]:
    """Per seed, the resolution of the time ratio slow/fast on an evaluation clock of ``tick``: each time is
    late by up to one tick, so both clocks count, r·(tick/fast + tick/slow)."""
    return [(b / a) * (tick / a + tick / b) if a > 0 and b > 0 else math.inf for a, b in zip(fast, slow)]


def chance_gate(levels: Sequence[float], chance: float, n_test: int) -> str | None:
    """None when every compared method's mean accuracy (``levels``, %) is clearly above ``chance`` (%), else
    the reason the row is n/a: the margin is :data:`CHANCE_SHARE` of the way from chance to 100% and
    :data:`CHANCE_SE` binomial standard errors of one accuracy on ``n_test`` samples."""
    finite = [float(x) for x in levels if x is not None and math.isfinite(float(x))]
    if not finite:
        return "not measured"
    p = chance / 100
    need = max(chance + CHANCE_SHARE * (100 - chance), chance + CHANCE_SE * 100 * math.sqrt(p * (1 - p) / n_test))
    low = min(finite)
    if low >= need:
        return None
    return (f"near chance: a compared method's mean accuracy {low:.1f}% is under the {need:.1f}% margin "
            f"(chance {chance:.0f}%); a larger model, more data or longer runs are needed")


def judge(effects: Sequence[float], paper: float | None = None, *, resolution: float | Sequence[float] | None = None,
          res_name: str = "", ratio: bool = False, exact: bool = False, scale: float = 1.0, unit: str = "",
          digits: int = 1, paper_text: str | None = None, censored: Sequence[bool | str] | None = None,
          na: str | None = None) -> Judgement:
    """Judge an effect measured on several seeds (``effects``, > 0 the paper's direction) by :data:`RULES`.

    ``paper``: the paper's effect in the same units (None: the paper gives only a direction; a negative one
    flips the row to the paper's direction); with ``ratio`` the effects and ``paper`` are factors (r), judged
    as r − 1.  ``resolution``: one number or one per seed, in effect units (for a factor, of r), named by
    ``res_name``; None: the seeds' spread (one standard deviation).  ``exact``: one value computed exactly.
    ``censored``: per seed False, or the side of a bound on the effect: "low" (true effect ≥ the value, in the
    claim's favour), "high" (true effect ≤ it) or "both"/True (unknown); shown with ">".  ``na``: the reason
    the row is not measurable (an accuracy near chance), giving n/a.  NaN entries are left out and said."""
    raw = [float(x) for x in effects]
    cen = [("both" if c is True else c or False) for c in (censored if censored is not None else [False] * len(raw))]
    ptext = paper_text if paper_text is not None else (
        "direction only" if paper is None else _num(paper * scale, digits) + ("×" if ratio else unit))
    shown = " / ".join(("n/a" if not math.isfinite(x) else (">" if c else "") + _num(x * scale, digits))
                       for x, c in zip(raw, cen))
    if na:
        return Judgement("n/a", f"per seed {shown}{'×' if ratio else unit}; {na}; paper {ptext}"
                         if any(math.isfinite(x) for x in raw) else f"{na}; paper {ptext}")
    sign = 1.0
    e_all = [x - 1.0 if ratio else x for x in raw]
    p = None if paper is None else (paper - 1.0 if ratio else paper)
    if p is not None and p < 0:   # the paper's direction is its number's sign: flip the row to it
        sign, p = -1.0, -p
        e_all = [-x for x in e_all]
        cen = [{"low": "high", "high": "low"}.get(c, c) if c else c for c in cen]
    if p == 0:
        p = None
    if isinstance(resolution, (int, float)) or resolution is None:
        res_seed = [None if resolution is None else abs(float(resolution))] * len(raw)
    else:
        res_seed = [abs(float(r)) for r in resolution]
    keep = [i for i, x in enumerate(e_all) if math.isfinite(x) and not cen[i]]
    measured = [i for i, x in enumerate(e_all) if math.isfinite(x)]
    missing = len(raw) - len(measured)
    e = [e_all[i] for i in keep]
    n = len(e)
    if not measured:
        return Judgement("n/a", f"not measured; paper {ptext}")
    mean = sum(e) / n if n else math.nan
    std = math.sqrt(sum((x - mean) ** 2 for x in e) / (n - 1)) if n > 1 else 0.0
    if resolution is None:
        res_seed = [0.0 if exact else std] * len(raw)
        rname = "computed exactly" if exact else "seed spread (1 sd)"
    else:
        rname = res_name or "measurement unit"
    rmean = sum(res_seed[i] for i in keep) / n if n else math.nan
    back = (lambda m: sign * m + (1.0 if ratio else 0.0))
    mtext = _num(back(mean) * scale, digits) + ("×" if ratio else unit) if n else "n/a"
    if exact:
        cell = f"{mtext} (computed; resolution {_num(rmean * scale, digits)}, {rname}); paper {ptext}"
        ok = n == 1 and mean > rmean + 1e-12 and (p is None or mean >= p / 2 - 1e-12)
        return Judgement("yes" if ok and not missing else "no", cell)
    cell = (f"per seed {shown}{'×' if ratio else unit}; mean {mtext} ± {_num(std * scale, digits)} "
            f"(resolution {_num(rmean * scale, digits) if n else 'n/a'}, {rname}); paper {ptext}")
    if missing:
        cell += f"; {missing} seed(s) not measured"
    if any(cen):
        cell += f"; {sum(1 for c in cen if c)} censored seed(s) left out of the mean"
    if n < 2:
        return Judgement("n/a", cell + "; fewer than two measured seeds: no interval")
    lo = mean - t95(n - 1) * std / math.sqrt(n)
    sig = lo > 1e-12 and mean > rmean + 1e-12

    def points(i: int) -> bool:
        x, c = e_all[i], cen[i]
        if not math.isfinite(x) or c in ("high", "both"):
            return False
        return x > res_seed[i] + 1e-12

    every = all(points(i) for i in range(len(raw)))
    share = f"{100 * mean / p:.0f}% of the paper's effect" if p else ""
    if sig and every and (p is None or mean >= p / 2 - 1e-12):
        v = "yes"
    elif sig and (p is None or mean >= FLOOR * p - 1e-12):
        v = "partly"
    else:
        v = "no"
    if v == "partly":
        cell += f"; {share}" if share and mean < p / 2 else "; not every seed points the paper's way"
    elif v == "no":
        if not lo > 1e-12:
            cell += "; the 95% interval includes zero"
        elif not mean > rmean + 1e-12:
            cell += "; inside the resolution"
        elif share:
            cell += f"; {share}, under the {100 * FLOOR:.0f}% floor"
    return Judgement(v, cell)


def judge_acc(a: Sequence[float], b: Sequence[float], paper: float | None = None, *, n_test: int, chance: float,
              offset: float = 0.0, unit: str = " pts", digits: int = 1, paper_text: str | None = None) -> Judgement:
    """Judge accuracy a − b + ``offset`` (per seed, in %) with its test-set resolution, or n/a when a compared
    method is not clearly above ``chance`` (%; :func:`chance_gate`)."""
    a, b = [float(x) for x in a], [float(x) for x in b]
    levels = [sum(v) / len(v) for v in (a, b) if v]
    return judge([x - y + offset for x, y in zip(a, b)], paper, resolution=acc_resolution(a, b, n_test),
                 res_name=f"test-set sampling, n = {n_test}", unit=unit, digits=digits, paper_text=paper_text,
                 na=chance_gate(levels, chance, n_test))


def weaker(a: str, b: str) -> str:
    """The weaker of two verdicts (yes > partly > no > n/a)."""
    return a if _ORDER.get(a, 0) <= _ORDER.get(b, 0) else b


def stabilize(main: Sequence[Claim], other: Sequence[Claim], seeds: Sequence[int],
              other_seeds: Sequence[int]) -> tuple[list[Claim], str]:
    """Rows judged on ``seeds`` checked against the same rows judged on the disjoint ``other_seeds``: a row
    whose verdict differs is marked unstable and gets the weaker verdict; with the stability line."""
    if set(seeds) & set(other_seeds):
        raise ValueError("the stability seeds must be disjoint from the table's seeds")
    by = {c.claim: c for c in other}
    out, agree, flips = [], 0, []
    for c in main:
        o = by.get(c.claim)
        if o is not None and o.verdict == c.verdict:
            agree += 1
            out.append(Claim(c.claim, c.paper, c.fedsim, c.verdict))
        else:
            ov = o.verdict if o is not None else "absent"
            flips.append(c.claim)
            out.append(Claim(c.claim, c.paper, f"{c.fedsim}; unstable: {c.verdict} on seeds {_span(seeds)}, {ov} on "
                             f"seeds {_span(other_seeds)}", weaker(c.verdict, o.verdict if o else "n/a")))
    line = (f"Stability: every row judged again on the disjoint seeds {_span(other_seeds)}; {agree} of {len(main)} "
            f"rows agree" + (f"; unstable (the weaker verdict shown): {len(flips)}" if flips else "") + ".")
    return out, line


def _span(seeds: Sequence[int]) -> str:
    s = sorted(int(x) for x in seeds)
    if len(s) > 2 and s == list(range(s[0], s[-1] + 1)):
        return f"{s[0]}–{s[-1]}"
    return ", ".join(map(str, s))


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
                  choices: Sequence[Choice] = (), stability: Sequence[Claim] | None = None,
                  stability_seeds: Sequence[int] = ()) -> str:
    """The Markdown claims table with its provenance line and seeds, its stability line (the rows judged
    again on ``stability_seeds``, see :func:`stabilize`), :data:`RULES` under it, then the choices table."""
    if stability is not None:
        claims, line = stabilize(claims, stability, seeds, stability_seeds)
    else:
        line = ("Stability: not measured (no second seed set); every verdict is provisional until the rows are "
                "judged again on disjoint seeds (`--stability-seeds`).")
    lines = [f"Written by `{command}` at commit `{commit}`, seeds {', '.join(str(s) for s in seeds)}; every cell "
             f"and verdict is computed from that run's numbers.", "", line, "",
             "| claim (paper) | paper | fedsim | reproduces? |", "|---|---|---|---|"]
    lines += [_row((c.claim, c.paper, c.fedsim, _bold(c.verdict))) for c in claims]
    lines += ["", RULES, ""]
    if choices:
        lines.append(render_choices(choices))
    return "\n".join(lines).rstrip("\n") + "\n"


def write_claims(out: Path, claims: Sequence[Claim], *, command: str, seeds: Sequence[int],
                 commit: str | None = None, choices: Sequence[Choice] = (), stability: Sequence[Claim] | None = None,
                 stability_seeds: Sequence[int] = ()) -> Path:
    """Write ``out/claims.md`` (see :func:`render_claims`) and return its path."""
    path = Path(out) / "claims.md"
    path.write_text(render_claims(claims, command=command, seeds=seeds, commit=commit or commit_hash(),
                                  choices=choices, stability=stability, stability_seeds=stability_seeds),
                    encoding="utf-8")
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


def claims_of(frame: Any) -> list[Claim]:
    """The :class:`Claim` rows of a recipe's ``tables["claims"]`` frame (what its stability run returns)."""
    return [Claim(str(r["claim"]), str(r["paper"]), str(r["fedsim"]), str(r["verdict"]))
            for r in frame.to_dict("records")]


def seeds_args(seeds: Sequence[int], stability_seeds: Sequence[int] | None) -> str:
    """The command-line seeds of a recipe run, for its provenance line."""
    text = f" --seeds {' '.join(map(str, seeds))}"
    return text + (f" --stability-seeds {' '.join(map(str, stability_seeds))}" if stability_seeds else "")


#: every recipe's default seeds and its disjoint stability seeds (full runs); ``--quick`` runs two seeds and
#: no stability set.  Five is the floor the rules need for a usable t interval (t(4) = 2.78); whether
#: verdicts have stopped moving at five is checked by the stability line itself (rows agreeing on 0–4 and
#: 5–9) and should be confirmed by a run at ten seeds per set once the machine time allows.
DEFAULT_SEEDS: tuple[int, ...] = (0, 1, 2, 3, 4)
DEFAULT_STABILITY_SEEDS: tuple[int, ...] = (5, 6, 7, 8, 9)
QUICK_SEEDS: tuple[int, ...] = (0, 1)


def default_seeds(quick: bool, seeds: Sequence[int] | None,
                  stability_seeds: Sequence[int] | None) -> tuple[list[int], list[int]]:
    """A recipe's seeds and stability seeds: the given ones, else :data:`DEFAULT_SEEDS` with
    :data:`DEFAULT_STABILITY_SEEDS` (``quick``: :data:`QUICK_SEEDS`, no stability set).  Given seeds without
    stability seeds run no stability set; the two sets must be disjoint."""
    if seeds is None:
        seeds = QUICK_SEEDS if quick else DEFAULT_SEEDS
        if stability_seeds is None and not quick:
            stability_seeds = DEFAULT_STABILITY_SEEDS
    a, b = [int(s) for s in seeds], [int(s) for s in (stability_seeds or ())]
    if set(a) & set(b):
        raise ValueError(f"--stability-seeds {b} must be disjoint from --seeds {a}")
    return a, b


def add_seed_arguments(parser: Any) -> None:
    """The ``--seeds`` and ``--stability-seeds`` options every recipe shares."""
    parser.add_argument("--seeds", type=int, nargs="+", default=None,
                        help=f"seeds (default {' '.join(map(str, DEFAULT_SEEDS))}; --quick: "
                             f"{' '.join(map(str, QUICK_SEEDS))})")
    parser.add_argument("--stability-seeds", type=int, nargs="+", default=None,
                        help="a disjoint seed set on which every row is judged again (written under OUT/stability); "
                             f"default {' '.join(map(str, DEFAULT_STABILITY_SEEDS))} when --seeds is not given, "
                             "none with --quick")
