"""``fedsim check`` for people: the rows of :func:`analysis.report.check_run` grouped by the theorem they
serve, only the rows that apply to the run's algorithm, with units, numbers formatted for reading, a
reason and a remedy for every row that could not be evaluated, "met"/"not met" for a theorem's
conditions, "not applicable" (with the numbers) for a bound whose conditions fail, "vacuous" for an
infinite bound, and "holds, loose" only for a finite bound over 10^3 x the measured value.

``checks.csv`` stays the machine-readable form (every row, full precision); this module only decides
how the terminal shows it.  A folder of runs (an algorithm per sub-folder, ``seed-*/``, a sweep's
points) is checked run by run and shown as one table with a ``run`` column holding each run's whole name,
the runs of one sweep point together.  The table follows the terminal's width (``COLUMNS``).  Each run's
status (summary.json) heads the table; the shown rows are also written to ``check.csv`` in the run folder
(and the folder checked), which the run's ``report.html`` shows.
"""
from __future__ import annotations

import importlib
import math
import os
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from fedsim.sim.trace import TRACE_FILES

#: Terminal width the table is laid out for when ``COLUMNS`` does not say (and its bounds when it does).
WIDTH = 100
MIN_WIDTH, MAX_WIDTH = 60, 240


def term_width() -> int:
    """The width to lay the table out for: ``COLUMNS`` (as shells export it), else :data:`WIDTH`."""
    try:
        cols = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        return WIDTH
    return max(MIN_WIDTH, min(MAX_WIDTH, cols))
#: A bound more than this many times the measured value holds without telling much ("holds, loose").
LOOSE = 1e3

#: Rows that only Co-S²P's Theorem 1 reads.
_COS2P_ONLY = ("tau_bar = mean_q tau_q^2 (Co-S2P)", "RU (Co-S2P Eq. 17)")
#: Segment-coverage rows: they matter to algorithms that train sub-models (N* of Co-S²P, EmbracingFL).
_COVERAGE = ("N* strict", "N* over trained segments", "mean coverage N_q^i", "per-parameter coverage")
#: General rows about the run itself (learning and system), whatever the algorithm.
_RUN = ("updates applied", "staleness ", "update fairness", "final accuracy", "time to accuracy",
        "metrics: loss finite")
#: Trailing "(unit)" of a quantity, moved to the unit column.
_UNIT = re.compile(r"\s*\((s|versions|bytes|MB, mean|s, mean)\)$")
#: What each symbol a theorem may miss is, so a skipped row says what to measure.
_PROBED = {"L", "sigma2", "zeta2", "avg_grad_norm_sq", "F0_minus_Fstar", "G", "G2", "B", "delta2", "F1", "Gs2",
           "Gu2", "F0", "min_grad_norm_sq", "L_max", "eta_l", "K", "m", "T", "drift"}


@dataclass
class Row:
    """One line of the table: the run it belongs to, its group, and the cells as text."""

    run: str
    group: str
    quantity: str
    unit: str
    measured: str
    bound: str
    verdict: str
    note: str


def fmt_number(value: Any, unit: str = "") -> str:
    """A number for people: integers as integers (10,964,800), else 4 significant digits, bytes in kB/MB/GB."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        x = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(x):
        return ""
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if unit == "bytes":
        for u in ("B", "kB", "MB", "GB", "TB"):
            if abs(x) < 1000 or u == "TB":
                return f"{x:.0f} {u}" if u == "B" else f"{x:.3g} {u}"
            x /= 1000
    if x.is_integer() and abs(x) < 1e9:
        return f"{int(x):,}" if abs(x) >= 1e4 else str(int(x))
    if x != 0 and (abs(x) >= 1e5 or abs(x) < 1e-3):
        return f"{x:.3g}"
    return f"{x:.4g}"


def theory_title(theorem: str) -> str:
    """The theorem an id's rows serve, as its theory module names it."""
    from analysis.theory import MODULES

    if theorem not in MODULES:
        return f"unknown theorem {theorem!r}"
    module = importlib.import_module(MODULES[theorem])
    return str(getattr(module, "REFERENCE", theorem))


def _group_of(quantity: str, theorems: Sequence[str], submodels: bool) -> str | None:
    """The group a row belongs to, or None when the row does not apply to this algorithm."""
    m = re.match(r"^\[([^\]]+)\]", quantity)
    if m:
        return f"theorem:{m.group(1)}"
    if quantity in ("no theorem declared", "no theorem: a covered decision is overridden"):
        return "theorem:none"
    if quantity.startswith("run status:"):
        return None  # the table's head names every run's status
    if quantity.startswith("trace:"):
        return "trace"
    if quantity in _COS2P_ONLY:
        return "inputs" if "cos2p" in theorems else None
    if quantity.startswith(_COVERAGE):
        return "inputs" if {"cos2p", "embracingfl"} & set(theorems) or submodels else None
    if quantity.startswith(_RUN):
        return "run"
    return "inputs"


def _hint(note: str, probed: bool) -> str:
    """Why a row was not evaluated and how to record what it lacks."""
    m = re.search(r"missing ([^;]+)", note)
    keys = [k.strip() for k in m.group(1).split(",")] if m else []
    if keys and set(keys) <= {"K", "Q", "E"}:
        how = "the run trained local epochs: set train.local_steps to give every client the same K and run again"
    elif not probed and (not keys or any(k in _PROBED for k in keys)):
        how = ("save checkpoints (output.checkpoints=5, or live probes with eval.probe_every=5), run again, "
               "then fedsim check: the probes measure them")
    else:
        how = "give them in measured.json in the run folder"
    return f"not evaluated: missing {', '.join(keys)}; {how}" if keys else f"{note}; {how}"


def _verdict(quantity: str, measured: Any, bound: Any, holds: Any, role: str = "") -> str:
    """The printed verdict.  A condition is "met" or "not met" (the theorem's bound is then "not applicable",
    see :func:`analysis.theory.base.judge`); a bound holds only when finite, and "holds, loose" only when it
    is finite and more than :data:`LOOSE` times the measured value."""
    if holds is None or (isinstance(holds, float) and math.isnan(holds)):
        return ""
    if role == "condition":
        return "met" if bool(holds) else "not met"
    is_bound = role == "bound" or re.search(r"Theorem|Lemma|Corollary|bound", quantity) is not None
    try:
        m, b = float(measured), float(bound)
    except (TypeError, ValueError):
        return "FAILS" if not bool(holds) else "holds"
    if is_bound and not math.isfinite(b):
        return "vacuous"  # an infinite bound never "holds"
    if not bool(holds):
        return "FAILS"
    if is_bound and m >= 0 and b > LOOSE * m and b > 0:
        return "holds, loose"
    return "holds"


def rows_of(table: pd.DataFrame, *, run: str, theorems: Sequence[str], probed: bool) -> list[Row]:
    """The rows of one run's check table that apply to its algorithm (and the theorems it declared), as text."""
    submodels = table["quantity"].astype(str).str.startswith("per-parameter coverage").any()
    references = {theory_title(t) for t in theorems}
    out = []
    for rec in table.to_dict("records"):
        q = str(rec["quantity"])
        role = str(rec.get("role") or "")
        role = "" if role == "nan" else role
        group = _group_of(q, theorems, bool(submodels))
        if group is None:
            continue
        if group.startswith("theorem:"):
            q = re.sub(r"^\[[^\]]+\]\s*", "", q)
        unit = ""
        m = _UNIT.search(q)
        if m:
            unit, q = m.group(1).split(",")[0], q[: m.start()]
        if q.startswith("trace:"):
            q, unit = q[len("trace:"):].strip(), "count"
        measured, bound, holds, note = rec["measured"], rec["bound_or_expectation"], rec["holds"], str(rec["note"] or "")
        if note == "nan":
            note = ""
        note = "; ".join(p for p in note.split("; ") if p and p not in references)  # the group title names it
        bound_text = fmt_number(bound, unit) if not isinstance(bound, str) else bound
        if len(bound_text) > 10:  # a statement, not a number: it goes with the note
            note, bound_text = "; ".join(s for s in (f"expected: {bound_text}", note) if s), ""
        evaluated = not (measured is None or (isinstance(measured, float) and math.isnan(measured)))
        verdict = _verdict(q, measured, bound, holds, role)
        decided = str(rec.get("verdict") or "")
        decided = "" if decided == "nan" else decided
        if decided and decided != "not judged":
            verdict = decided  # the theorem module or judge() decided it (analysis.theory.base.VERDICTS)
        elif note.startswith("not applicable"):
            verdict = "not applicable"
        elif note.startswith(("vacuous", "not judged")):
            verdict = note.split(":")[0]
        elif role == "note":
            verdict = ""
        elif not evaluated and (note.startswith("not evaluated") or note.startswith("not measured")):
            note, verdict = _hint(note, probed), "not evaluated"
        elif not evaluated:
            verdict = verdict or "not evaluated"
        if verdict == "holds, loose":
            note = "; ".join(s for s in (f"the bound is over {LOOSE:.0e} x the measured value: true, but it says "
                                         "little at this scale", note) if s)
        out.append(Row(run, group, q, unit, fmt_number(measured, unit), bound_text, verdict, note))
    return out


def find_runs(folder: str | Path) -> list[Path]:
    """The run folders under ``folder`` (itself when it holds a trace), depth-first in name order: one
    per algorithm of a multi-algorithm run, per ``seed-*`` and per sweep point."""
    root = Path(folder)
    if any((root / name).exists() for name in TRACE_FILES.values()):
        return [root]
    found: list[Path] = []
    for sub in sorted(p for p in root.iterdir() if p.is_dir() and p.name != "check"):
        found.extend(find_runs(sub))
    return found


def render(rows: Sequence[Row], *, several: bool, titles: dict[str, str], width: int | None = None) -> str:
    """The grouped table as text no wider than ``width`` (default :func:`term_width`).  With several runs each
    row starts with its run's whole name; a name too long for the run column gets a line of its own, the
    numbers on the next line."""
    width = width or term_width()
    longest = max([3] + [len(r.run) for r in rows]) if several else 0
    unit_w, num_w = 8, 10
    fixed = unit_w + 2 * num_w + len("not applicable") + 4 + 2  # the columns right of the quantity
    run_w = min(longest, max(12, width // 3)) if several else 0
    if several and width - run_w - 1 - fixed < 20:  # a narrow terminal: names go on lines of their own
        run_w = max(0, width - fixed - 21)
    q_w = max(20, width - (run_w + 1 if several else 0) - fixed)
    header = (("run".ljust(run_w) + " ") if several else "") + "  " + "quantity".ljust(q_w) + " " + \
        "unit".ljust(unit_w) + " " + "measured".rjust(num_w) + " " + "bound".rjust(num_w) + " " + "verdict"
    lines = [header.rstrip()]
    order: list[str] = []
    by_group: dict[str, list[Row]] = {}
    for r in rows:
        if r.group not in by_group:
            order.append(r.group)
        by_group.setdefault(r.group, []).append(r)
    rank = {"trace": 0, "run": 1}
    pad = " " * ((run_w + 1 if several else 0) + 2)
    for g in sorted(order, key=lambda g: (rank.get(g, 3 if g.startswith("theorem:") else 2), order.index(g))):
        title = titles.get(g, g)
        lines.append("")
        head = "-- " + title + " "
        if len(head) <= width:
            lines.append(head.ljust(width, "-"))
        else:  # a long title wraps, never cut: it names the theorem and what its rows judge
            wrapped = textwrap.wrap(title, max(20, width - 3))
            lines.append("-- " + wrapped[0])
            lines.extend("   " + w for w in wrapped[1:])
        keys: list[tuple[str, str]] = []
        for r in by_group[g]:
            if (r.quantity, r.unit) not in keys:
                keys.append((r.quantity, r.unit))
        for key in keys:  # the same quantity of every run together, for comparison
            same = [x for x in by_group[g] if (x.quantity, x.unit) == key]
            shared = len({x.note for x in same}) == 1  # one note for all the runs: said once, after them
            for i, r in enumerate(same):
                wrapped = textwrap.wrap(r.quantity, q_w) or [""]
                run = r.run
                if several and len(run) > run_w:  # the whole name, on a line of its own
                    lines.append(run)
                    run = ""
                first = ((run.ljust(run_w) + " ") if several else "") + "  " + wrapped[0].ljust(q_w)
                lines.append((first + " " + r.unit[:unit_w].ljust(unit_w) + " " + r.measured.rjust(num_w)
                              + " " + r.bound.rjust(num_w) + " " + r.verdict).rstrip())
                lines.extend((pad + w).rstrip() for w in wrapped[1:])
                if r.note and (not shared or i == len(same) - 1):
                    lines.extend(textwrap.wrap(r.note, width, initial_indent=pad + "  > ", subsequent_indent=pad + "    "))
    return "\n".join(lines) + "\n"


def sweep_point(name: str) -> str:
    """The sweep point a run belongs to: its path without ``seed-*`` parts and without its last part (the
    algorithm's folder or the seed's) — "" for the runs of one folder."""
    parts = [p for p in name.split("/") if not re.fullmatch(r"seed-\d+", p)]
    return "/".join(parts[:-1]) if len(parts) > 1 else ""


def status_lines(statuses: Sequence[tuple[str, str]], width: int) -> list[str]:
    """Every run's whole name and status, grouped by sweep point."""
    out: list[str] = []
    point = None
    for name, line in statuses:
        p = sweep_point(name)
        if p and p != point:
            out.append(f"  sweep point {p}")
        point = p
        indent = "    " if p else "  "
        out.extend(textwrap.wrap(f"{name}: {line}", width, initial_indent=indent, subsequent_indent=indent + "  ",
                                 break_on_hyphens=False))
    return out


#: the confidence of the interval a mean over seeds is judged with (one-sided Student t limits)
SEED_CONFIDENCE = 0.95
#: verdicts a mean over seeds passes on unchanged when any seed has them (the bound is not judged)
_UNJUDGED = ("not applicable", "vacuous", "insufficient evidence", "not judged")


def mean_verdict(values: Sequence[float], bounds: Sequence[float], verdicts: Sequence[str], *,
                 certified: bool, starts: Sequence[float] = ()) -> tuple[str, float, float, float, str]:
    """The verdict on E[left side] from one run per seed: (verdict, mean, lower, upper, note).

    The interval is Student t's one-sided ``SEED_CONFIDENCE`` limit on each side (mean ± t·s/√n, n − 1
    degrees of freedom): "holds" when the upper limit is at or under the smallest seed's bound, "refuted"
    when the lower limit is above the largest, each only where ``certified`` (every seed's constants
    certified, its theorem verified and its left side measured at every version); a seed whose bound was
    not judged, or was uninformative, passes its verdict on."""
    from scipy import stats

    x = np.asarray(values, dtype=float)
    n = len(x)
    mean = float(x.mean())
    half = float(stats.t.ppf(SEED_CONFIDENCE, n - 1) * x.std(ddof=1) / math.sqrt(n)) if n > 1 else math.inf
    lo, hi = mean - half, mean + half
    note = (f"mean over {n} seeds; one-sided {SEED_CONFIDENCE:.0%} Student t limits [{lo:.4g}, {hi:.4g}] (upper for "
            f"holds, lower for refuted)")
    for v in (*_UNJUDGED, "uninformative"):
        if v in verdicts:
            return v, mean, lo, hi, note + f"; a seed's row reads {v}"
    b_min, b_max = float(min(bounds)), float(max(bounds))
    if starts and b_min >= float(np.mean(starts)):
        return "uninformative", mean, lo, hi, note + "; the bound is at or above the mean start value"
    if hi <= b_min:
        return ("holds" if certified else "consistent with estimated constants"), mean, lo, hi, note
    if lo > b_max:
        return ("refuted" if certified else "above the estimated bound (not a refutation)"), mean, lo, hi, note
    return "insufficient evidence", mean, lo, hi, note + "; the interval straddles the bound: more seeds narrow it"


def seed_means(runs: Sequence[Path], frames: Sequence[pd.DataFrame], name_of: Any) -> list[Row]:
    """One row per theorem bound and sweep point whose runs are seeds (``seed-*`` folders): the verdict on
    the mean over seeds (:func:`mean_verdict`).  The theorems bound expectations; one seed is one sample."""
    groups: dict[str, list[pd.DataFrame]] = {}
    for run, frame in zip(runs, frames):
        if re.fullmatch(r"seed-\d+", run.name):
            groups.setdefault(sweep_point(name_of(run, None)) or ".", []).append(frame)
    out: list[Row] = []
    for point, tables in groups.items():
        if len(tables) < 2:
            continue
        bounds = [t[t["role"].astype(str) == "bound"] for t in tables]
        for q in dict.fromkeys(q for b in bounds for q in b["quantity"]):
            recs = [b[b["quantity"] == q].iloc[0] for b in bounds if (b["quantity"] == q).any()]
            if len(recs) < len(tables):
                continue
            try:
                vals = [float(r["measured"]) for r in recs]
                bnds = [float(r["bound_or_expectation"]) for r in recs]
            except (TypeError, ValueError):
                continue
            if not all(math.isfinite(v) for v in vals):
                continue
            verdicts = [str(r.get("verdict") or "") for r in recs]
            certified = (not q.startswith("[local_sgd]")  # Yang et al.'s Theorem 1: constants unverified
                         and all(str(r.get("provenance")) == "certified" for r in recs)
                         and not any(w in str(r.get("note")) for r in recs for w in
                                     ("mean over the probed versions", "minimum over probed versions only")))
            verdict, mean, lo, hi, note = mean_verdict(vals, bnds, verdicts, certified=certified)
            theorem = re.match(r"^\[([^\]]+)\]", q)
            group = f"theorem:{theorem.group(1)}" if theorem else "run"
            label = re.sub(r"^\[[^\]]+\]\s*", "", q)
            out.append(Row(f"mean over seeds{'' if point == '.' else ' of ' + point}", group,
                           f"{label} (mean over {len(recs)} seeds)", "", fmt_number(mean), fmt_number(min(bnds)),
                           verdict, note))
    return out


def check_rows_frame(rows: Sequence[Row]) -> pd.DataFrame:
    """The shown rows as a table (``check.csv``, what report.html shows): run, group, quantity, unit,
    measured, bound, verdict, note."""
    cols = ["run", "group", "quantity", "unit", "measured", "bound", "verdict", "note"]
    return pd.DataFrame([[getattr(r, c) for c in cols] for r in rows], columns=cols)


def _refresh_report(folder: Path) -> None:
    """Rewrite the folder's report.html when it has one, so it shows check.csv (the run's own figures stay)."""
    if (folder / "report.html").exists():
        from fedsim.output.report import html_report

        html_report(folder)


def check_folder(folder: str | Path, *, figures: bool = True, progress: bool = True,
                 probe_settings: Any = None, jobs: int | None = 1) -> tuple[str, pd.DataFrame]:
    """Check every run under ``folder``; returns the text table and the combined machine-readable table
    (``checks.csv`` columns with ``run`` and ``algorithm`` in front; written to ``folder/check/checks.csv``
    when the folder holds several runs, each run's own ``check/checks.csv`` as before).  The shown rows go
    to ``check.csv`` in each run folder (and in ``folder``), and a ``report.html`` there is rewritten to
    show them.  ``jobs``: processes that probe a run's checkpoints (:func:`analysis.probes.probe_jobs`)."""
    import yaml

    from analysis.probes import checkpoints
    from analysis.report import _algorithm, check_run, run_status
    from fedsim.errors import ConfigError

    root = Path(folder)
    if not root.is_dir():
        raise ConfigError("run_dir", f"{str(root)!r} is not a directory")
    found = find_runs(root)
    if not found:
        raise ConfigError("run_dir", f"no run in {str(root)!r}: no trace (trace.jsonl or trace.compact.gz) in it "
                          "or in its sub-folders (give a folder that `fedsim run` wrote)")
    from fedsim.inputfiles import check_writable

    for run in {root, *found}:  # check writes check.csv, check/ and report.html in each: refused before any work
        check_writable(run, "run_dir")
    width = term_width()

    def name_of(run: Path, alg: str | None) -> str:
        return run.relative_to(root).as_posix() if run != root else (alg or run.name)

    runs = sorted(found, key=lambda r: (sweep_point(name_of(r, None)), found.index(r)))  # a sweep point's runs together
    rows: list[Row] = []
    frames = []
    titles = {"trace": "Trace consistency (the recorded events themselves)",
              "run": "Learning and system quantities of the run",
              "inputs": "Measured quantities (and the inputs of the declared theorems)",
              "theorem:none": "Theory"}
    algs, statuses = [], []
    for run in runs:
        table = check_run(run, figures=figures, progress=progress, probe_settings=probe_settings, jobs=jobs)
        scen = yaml.safe_load((run / "scenario.yaml").read_text()) if (run / "scenario.yaml").exists() else {}
        alg, _ = _algorithm(scen or {})
        status = run_status(run)
        from analysis.theory import COMPANIONS

        theorems = list(dict.fromkeys(t for d in (status["theorems"] or []) for t in (d, *COMPANIONS.get(d, ()))))
        algs.append(alg or "?")
        name = name_of(run, alg)
        statuses.append((name, status["line"]))
        probed = bool(checkpoints(run)) or (run / "probes.csv").exists() or (run / "probes_live.csv").exists()
        own = rows_of(table, run=name, theorems=theorems, probed=probed)
        rows.extend(own)
        check_rows_frame(own).to_csv(run / "check.csv", index=False)
        for t in theorems:
            titles[f"theorem:{t}"] = f"{theory_title(t)}: conditions and bound"
        frames.append(table.assign(run=name, algorithm=alg).set_index(["run", "algorithm"]).reset_index())
    rows.extend(seed_means(runs, frames, name_of))
    several = len(runs) > 1
    head = (f"fedsim check: {len(runs)} run{'s' if several else ''} in {root} ({', '.join(dict.fromkeys(algs))}); "
            f"every row in {'check/checks.csv and ' if several else ''}<run>/check/checks.csv")
    text = "\n".join(textwrap.wrap(head, width)) + "\n"
    if several:
        text += "status of each run:\n" + "\n".join(status_lines(statuses, width)) + "\n"
    else:
        text += "\n".join(textwrap.wrap(f"status: {statuses[0][1]}", width, subsequent_indent="  ")) + "\n"
    text += render(rows, several=several, titles=titles, width=width)
    if any(r.group.startswith("theorem:") for r in rows):
        from analysis.theory.base import verdict_legend

        text += "\nverdicts (one meaning each; docs/guide.md#analysis):\n" + verdict_legend(width) + "\n"
    combined = pd.concat(frames, ignore_index=True)
    if several:
        (root / "check").mkdir(exist_ok=True)
        combined.to_csv(root / "check" / "checks.csv", index=False)
        check_rows_frame(rows).to_csv(root / "check.csv", index=False)
    for folder_ in dict.fromkeys([*runs, *([root] if several else [])]):
        _refresh_report(folder_)
    return text, combined
