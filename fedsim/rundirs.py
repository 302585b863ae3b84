"""Run folders: refusing a folder that holds something else, clearing one with ``--force``, and reading
what an existing folder holds of a run (for ``--resume``)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from fedsim.errors import ConfigError
from fedsim.scenario import Scenario, dump_scenario


def _looks_like_run(folder: Path) -> bool:
    """A folder fedsim wrote: a run (scenario.yaml/summary.json), a comparison of runs or a sweep."""
    if any((folder / name).exists() for name in ("summary.json", "scenario.yaml", "sweep.yaml", "comparison.csv")):
        return True
    return any((sub / "scenario.yaml").exists() or (sub / "summary.json").exists() for sub in folder.iterdir() if sub.is_dir())


def check_run_dir(out: str | Path, *, force: bool = False) -> None:
    """Refuse a run folder :func:`prepare_run_dir` would refuse, without touching anything (so a command
    can validate everything before it says what it is about to run)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError("--out", f"'{out}' is a file, not a folder (give a new or empty folder)")
    for parent in out.parents:
        if parent.exists() and not parent.is_dir():
            raise ConfigError("--out", f"'{parent}' is a file, so '{out}' cannot be a folder")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise ConfigError("--out", f"'{out}' is not empty (an earlier run?); pass --force to clear it first, "
                              "or give a new folder")
        if not _looks_like_run(out):
            raise ConfigError("--out", f"'{out}' is not empty and holds no fedsim run; --force clears only run folders")


def prepare_run_dir(out: str | Path, *, force: bool = False) -> Path:
    """A fresh run folder: created if missing, refused if it is a file or a non-empty folder (unless
    ``force``, which clears a folder that holds fedsim output; other folders are never cleared)."""
    out = Path(out)
    check_run_dir(out, force=force)
    if out.is_dir() and any(out.iterdir()):
        for entry in out.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    out.mkdir(parents=True, exist_ok=True)
    return out


def _labels_held(out: Path) -> tuple[list[str], bool] | None:
    """The algorithm labels of the run ``out`` holds, read from its layout, and whether that is all of them
    (None when the layout cannot say).  A run of one algorithm keeps scenario.yaml at its top; one of
    several, a folder per label with its own scenario.yaml and, once finished, a list summary.json at its
    top (killed before, its folders so far are some of its labels).  A sweep or --seeds folder holds no
    run at its top: ``([], True)``."""
    import yaml

    if not (out / "scenario.yaml").exists() and ((out / "sweep.yaml").exists() or (out / "seeds.csv").exists()
                                                 or any(p.is_dir() and p.name.startswith("seed-") for p in out.iterdir())):
        return [], True
    try:
        if (out / "scenario.yaml").exists():
            algorithm = yaml.safe_load((out / "scenario.yaml").read_text(encoding="utf-8")).get("algorithm", {})
            return [str(algorithm.get("label", algorithm.get("name")))], True
        if (out / "summary.json").exists():
            listed = json.loads((out / "summary.json").read_text(encoding="utf-8"))
            return ([str(s["label"]) for s in listed], True) if isinstance(listed, list) else None
    except (OSError, ValueError, AttributeError, KeyError, TypeError, yaml.YAMLError):
        return None
    subs = sorted(p.name for p in out.iterdir() if (p / "scenario.yaml").exists())
    return (subs, False) if subs else None


def _algorithms_text(labels: list[str]) -> str:
    if not labels:
        return "no single run (a sweep or --seeds folder)"
    return f"{len(labels)} algorithms ({', '.join(labels)})" if len(labels) > 1 else f"one algorithm ({labels[0]})"


def run_state(out: str | Path, scenario: Scenario) -> tuple[str, list[dict[str, Any]] | None, str]:
    """What ``out`` holds of a run of ``scenario``, for resuming: ``("new", None, "")`` (missing or empty),
    ``("finished", summaries, "")`` (every algorithm's summary says ``ok`` and its saved scenario.yaml is
    ``scenario``'s, resolved), ``("incomplete", None, why)`` (killed, interrupted, failed or diverged: the
    summary is missing or its status is not ``ok``) or ``("different", None, why)`` (a run of another
    scenario, or no fedsim run).  A run killed outright writes no summary, so it is never taken as done."""
    import difflib

    out = Path(out)
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return "new", None, ""
    if not out.is_dir() or not _looks_like_run(out):
        return "different", None, f"'{out}' holds no fedsim run"
    several = len(scenario.algorithms) > 1
    labels = [spec.label for spec in scenario.algorithms]
    held = _labels_held(out)
    if held is not None:  # a folder laid out for other algorithms is another scenario's run: never cleared
        have, whole = held
        if (have != labels) if whole else (not several or not set(have) <= set(labels)):
            return "different", None, (f"'{out}' holds {'a run of ' if have else ''}{_algorithms_text(have)}, not a "
                                       f"run of {_algorithms_text(labels)}")
    folders = [(spec, out / spec.label if several else out) for spec in scenario.algorithms]
    for spec, d in folders:
        saved = d / "scenario.yaml"
        if saved.exists():
            want = dump_scenario(scenario.variant(spec))
            have = saved.read_text(encoding="utf-8")
            if have != want:
                diff = [ln for ln in difflib.unified_diff(have.splitlines(), want.splitlines(), n=0, lineterm="")
                        if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
                first = " vs ".join(repr(ln[1:].strip()) for ln in diff[:2])
                return "different", None, f"'{saved}' is another scenario ({first})"
    summaries = []
    for spec, d in folders:
        path = d / "summary.json"
        if not path.exists() or not (d / "metrics.csv").exists():
            return "incomplete", None, f"'{d}' has no summary (the run was killed midway)"
        summary = json.loads(path.read_text(encoding="utf-8"))
        if summary.get("status") != "ok":
            return "incomplete", None, f"'{d}' stopped with status {summary.get('status')!r}"
        summaries.append(summary)
    if several and not (out / "summary.json").exists():
        return "incomplete", None, f"'{out}' was stopped before its last algorithm finished"
    return "finished", summaries, ""
