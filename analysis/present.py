"""``fedsim check`` for people: the rows of :func:`analysis.report.check_run` grouped by the theorem they
serve, only the rows that apply to the run's algorithm, with units, numbers formatted for reading, a
reason and a remedy for every row that could not be evaluated, and a word when a bound holds only
because it is vacuous at this scale.  It fits a 100-column terminal.

``checks.csv`` stays the machine-readable form (every row, full precision); this module only decides
how the terminal shows it.  A folder of runs (an algorithm per sub-folder, ``seed-*/``, a sweep's
points) is checked run by run and shown as one table with a ``run`` column.
"""
from __future__ import annotations

import importlib
import math
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from fedsim.sim.trace import TRACE_FILES

#: Terminal width the table is laid out for.
WIDTH = 100
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


def theory_title(family: str) -> str:
    """The theorem a family's rows serve, as its theory module names it."""
    from analysis.theory import MODULES

    module = importlib.import_module(MODULES[family])
    return str(getattr(module, "REFERENCE", family))


def _group_of(quantity: str, family: str, submodels: bool) -> str | None:
    """The group a row belongs to, or None when the row does not apply to this algorithm."""
    if quantity.startswith("["):
        return "theorem"
    if quantity.startswith("trace:"):
        return "trace"
    if quantity in _COS2P_ONLY:
        return "inputs" if family == "cos2p" else None
    if quantity.startswith(_COVERAGE):
        return "inputs" if family in ("cos2p", "embracingfl") or submodels else None
    if quantity.startswith(_RUN):
        return "run"
    return "inputs"


def _hint(note: str, probed: bool) -> str:
    """Why a row was not evaluated and how to get it."""
    m = re.search(r"missing ([^;]+)", note)
    keys = [k.strip() for k in m.group(1).split(",")] if m else []
    if not probed and (not keys or any(k in _PROBED for k in keys)):
        how = ("save checkpoints (output.checkpoints=5, or live probes with eval.probe_every=5), run again, "
               "then fedsim check: the probes measure them")
    else:
        how = "give them in measured.json in the run folder"
    return f"not evaluated: missing {', '.join(keys)}; {how}" if keys else f"{note}; {how}"


def _verdict(quantity: str, measured: Any, bound: Any, holds: Any) -> str:
    if holds is None or (isinstance(holds, float) and math.isnan(holds)):
        return ""
    if not bool(holds):
        return "FAILS"
    is_bound = re.search(r"Theorem|Lemma|Corollary|bound", quantity) is not None
    try:
        m, b = float(measured), float(bound)
    except (TypeError, ValueError):
        return "holds"
    if is_bound and m >= 0 and b > 0 and (math.isinf(b) or b > LOOSE * m):
        return "holds, loose"
    return "holds"


def rows_of(table: pd.DataFrame, *, run: str, family: str, probed: bool) -> list[Row]:
    """The rows of one run's check table that apply to its algorithm, as text cells."""
    submodels = table["quantity"].astype(str).str.startswith("per-parameter coverage").any()
    reference = theory_title(family)
    out = []
    for rec in table.to_dict("records"):
        q = str(rec["quantity"])
        group = _group_of(q, family, bool(submodels))
        if group is None:
            continue
        if group == "theorem":
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
        note = "; ".join(p for p in note.split("; ") if p and p != reference)  # the group title names it
        bound_text = fmt_number(bound, unit) if not isinstance(bound, str) else bound
        if len(bound_text) > 10:  # a statement, not a number: it goes with the note
            note, bound_text = "; ".join(s for s in (f"expected: {bound_text}", note) if s), ""
        evaluated = not (measured is None or (isinstance(measured, float) and math.isnan(measured)))
        verdict = _verdict(q, measured, bound, holds)
        if not evaluated and (note.startswith("not evaluated") or note.startswith("not measured")):
            note, verdict = _hint(note, probed), "not evaluated"
        elif not evaluated:
            verdict = verdict or "not evaluated"
        if verdict == "holds, loose":
            why = ("the bound is infinite here (see the conditions above)" if bound_text == "inf"
                   else f"the bound is over {LOOSE:.0e} x the measured value")
            note = "; ".join(s for s in (f"{why}: true, but it says nothing at this scale", note) if s)
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


def render(rows: Sequence[Row], *, several: bool, titles: dict[str, str]) -> str:
    """The grouped table as text no wider than :data:`WIDTH`."""
    run_w = min(18, max([3] + [len(r.run) for r in rows])) if several else 0
    unit_w, num_w, verdict_w = 8, 10, 13
    q_w = WIDTH - (run_w + 1 if several else 0) - unit_w - 2 * num_w - verdict_w - 4 - 2
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
    for g in sorted(order, key=lambda g: (rank.get(g, 2), order.index(g))):
        title = titles.get(g, g)
        lines.append("")
        lines.append(("-- " + title + " ").ljust(WIDTH, "-")[:WIDTH])
        keys: list[tuple[str, str]] = []
        for r in by_group[g]:
            if (r.quantity, r.unit) not in keys:
                keys.append((r.quantity, r.unit))
        pad = " " * ((run_w + 1 if several else 0) + 2)
        for key in keys:  # the same quantity of every run together, for comparison
            same = [x for x in by_group[g] if (x.quantity, x.unit) == key]
            shared = len({x.note for x in same}) == 1  # one note for all the runs: said once, after them
            for i, r in enumerate(same):
                wrapped = textwrap.wrap(r.quantity, q_w) or [""]
                run = r.run if len(r.run) <= run_w else "..." + r.run[-(run_w - 3):]  # the end tells runs apart
                first = ((run.ljust(run_w) + " ") if several else "") + "  " + wrapped[0].ljust(q_w)
                lines.append((first + " " + r.unit[:unit_w].ljust(unit_w) + " " + r.measured.rjust(num_w)
                              + " " + r.bound.rjust(num_w) + " " + r.verdict).rstrip())
                lines.extend((pad + w).rstrip() for w in wrapped[1:])
                if r.note and (not shared or i == len(same) - 1):
                    lines.extend(textwrap.wrap(r.note, WIDTH, initial_indent=pad + "  > ", subsequent_indent=pad + "    "))
    return "\n".join(lines) + "\n"


def check_folder(folder: str | Path, *, figures: bool = True, progress: bool = True) -> tuple[str, pd.DataFrame]:
    """Check every run under ``folder``; returns the text table and the combined machine-readable table
    (``checks.csv`` columns with ``run`` and ``group`` in front; written to ``folder/check/checks.csv``
    when the folder holds several runs, each run's own ``check/checks.csv`` as before)."""
    import yaml

    from analysis.probes import checkpoints
    from analysis.report import _algorithm, check_run, theory_family
    from fedsim.errors import ConfigError

    root = Path(folder)
    if not root.is_dir():
        raise ConfigError("run_dir", f"{str(root)!r} is not a directory")
    runs = find_runs(root)
    if not runs:
        raise ConfigError("run_dir", f"no run in {str(root)!r}: no trace (trace.jsonl or trace.compact.gz) in it "
                          "or in its sub-folders (give a folder that `fedsim run` wrote)")
    rows: list[Row] = []
    frames = []
    titles = {"trace": "Trace consistency (the recorded events themselves)",
              "run": "Learning and system quantities of the run"}
    algs = []
    for run in runs:
        table = check_run(run, figures=figures, progress=progress)
        scen = yaml.safe_load((run / "scenario.yaml").read_text()) if (run / "scenario.yaml").exists() else {}
        alg, _ = _algorithm(scen or {})
        family = theory_family(alg)
        algs.append(alg or "?")
        name = run.relative_to(root).as_posix() if run != root else (alg or run.name)
        probed = bool(checkpoints(run)) or (run / "probes.csv").exists() or (run / "probes_live.csv").exists()
        title = theory_title(family)
        for r in rows_of(table, run=name, family=family, probed=probed):
            if r.group in ("theorem", "inputs"):
                r.group = f"{r.group}:{family}"
            rows.append(r)
        titles[f"inputs:{family}"] = f"Measured inputs of {title}"
        titles[f"theorem:{family}"] = f"{title}: conditions and bound"
        frames.append(table.assign(run=name, algorithm=alg).set_index(["run", "algorithm"]).reset_index())
    several = len(runs) > 1
    head = (f"fedsim check: {len(runs)} run{'s' if several else ''} in {root} ({', '.join(dict.fromkeys(algs))}); "
            f"every row in {'check/checks.csv and ' if several else ''}<run>/check/checks.csv")
    text = "\n".join(textwrap.wrap(head, WIDTH)) + "\n" + render(rows, several=several, titles=titles)
    combined = pd.concat(frames, ignore_index=True)
    if several:
        (root / "check").mkdir(exist_ok=True)
        combined.to_csv(root / "check" / "checks.csv", index=False)
    return text, combined
