"""Run folders: refusing a folder that holds something else, clearing one with ``--force``, and reading
what an existing folder holds of a run (for ``--resume``)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from fedsim.errors import ConfigError
from fedsim.files import MANIFEST, read_manifest, start_folder, tmp_target
from fedsim.scenario import Scenario, dump_scenario


#: Files and folders ``fedsim check`` (the analysis package) writes into a run folder; they count as
#: fedsim's in a run folder that has a manifest (the check records them there only where it writes through
#: :mod:`fedsim.files`).
CHECK_OUTPUTS = ("check.csv", "probes.csv", "measured.json", "embracingfl_probes.csv", "check/", "probes/")

#: File names of a run folder written before fedsim kept a manifest (:func:`_foreign`: taken as
#: fedsim's only when the folder's summary.json says it is a fedsim run), besides ``*.png`` and
#: ``checkpoints/v*.pt``.
LEGACY_RUN_FILES = ("scenario.yaml", "partition.csv", "trace.jsonl", "trace.compact.gz", "metrics.csv",
                    "summary.json", "final_model.pt", "client_metrics.csv", "energy.csv", "report.html",
                    "outputs_error.txt", "probes_live.csv")


def read_summary(path: str | Path) -> Any:
    """A run's ``summary.json`` (a dict, or a multi-algorithm run's list); None when there is none.  A file
    that is not JSON (cut short, a user's edit) is one line naming it (a :class:`ConfigError`)."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError("summary.json", f"'{path}' is not a readable summary ({type(exc).__name__}: "
                          f"{str(exc)[:80]}); it was cut short or edited: move it away, or clear the run "
                          "folder yourself") from None


def _legacy_summary(folder: Path) -> Any:
    """The summary.json of a folder written before fedsim kept manifests, when it is a fedsim run's (a
    dict with ``status`` and ``stop_reason``, or a list of them); else None."""
    try:
        data = read_summary(folder / "summary.json")
    except ConfigError:
        return None
    rows = data if isinstance(data, list) else [data]
    if rows and all(isinstance(r, dict) and "status" in r and "stop_reason" in r for r in rows):
        return data
    return None


def _foreign(folder: Path) -> list[str]:
    """The paths under ``folder`` (relative, files and folders, in name order) fedsim did not write."""
    listed = read_manifest(folder)
    legacy = None
    if listed is None:
        legacy = _legacy_summary(folder)
        if legacy is None:
            return sorted(p.name + ("/" if p.is_dir() and not p.is_symlink() else "") for p in folder.iterdir())
        labels = {str(r.get("label")) for r in legacy} if isinstance(legacy, list) else set()
        files, subs = set(LEGACY_RUN_FILES), labels
    else:
        files, subs = listed
    check_files = {c for c in CHECK_OUTPUTS if not c.endswith("/")}
    check_dirs = {c.rstrip("/") for c in CHECK_OUTPUTS if c.endswith("/")}
    prefixes = {"/".join(f.split("/")[:i]) for f in files for i in range(1, f.count("/") + 1)}
    foreign: list[str] = []

    def owned_file(rel: str) -> bool:
        name = rel.rsplit("/", 1)[-1]
        target = tmp_target(name)
        if target is not None:  # a file cut short while written under its temporary name
            rel = rel[: len(rel) - len(name)] + target
        if rel == MANIFEST or rel in files or rel in check_files:
            return True
        if legacy is not None:
            return ("/" not in rel and rel.endswith(".png")) or (rel.startswith("checkpoints/v") and rel.endswith(".pt"))
        return False

    def walk(d: Path, rel: str) -> None:
        for p in sorted(d.iterdir(), key=lambda q: q.name):
            r = f"{rel}{p.name}"
            if p.is_dir() and not p.is_symlink():
                if r in subs:
                    foreign.extend(f"{r}/{x}" for x in _foreign(p))
                elif r.split("/")[0] in check_dirs:
                    continue
                elif r in prefixes or (legacy is not None and r == "checkpoints"):
                    walk(p, r + "/")
                else:
                    foreign.append(r + "/")
            elif not owned_file(r):
                foreign.append(r)

    walk(folder, "")
    return foreign


def is_fedsim_folder(folder: str | Path) -> bool:
    """Whether ``folder`` is a run or batch folder fedsim wrote: it has a manifest, or it is a run written
    before manifests (its summary.json says so), or a sweep or ``--seeds`` folder of that time."""
    folder = Path(folder)
    if (folder / MANIFEST).is_file() or _legacy_summary(folder) is not None:
        return True
    if (folder / "sweep.yaml").is_file() or (folder / "seeds.csv").is_file():
        return True
    return any(p.is_dir() and p.name.startswith("seed-") and (p / "scenario.yaml").is_file() for p in folder.iterdir())


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
        foreign = _foreign(out)
        if foreign:
            if not is_fedsim_folder(out):
                what = "holds no fedsim run"
            elif read_manifest(out) is None and _legacy_summary(out) is None:
                what = f"was written before fedsim listed its files ({MANIFEST}) and is not a run it can tell"
            else:
                what = "holds files fedsim did not write"
            raise ConfigError("--out", f"'{out}' {what} (first: '{foreign[0]}'); --force clears only what fedsim "
                              "wrote: move them, or give another folder")


def prepare_run_dir(out: str | Path, *, force: bool = False) -> Path:
    """A fresh run folder with its manifest (:mod:`fedsim.files`): created if missing, refused if it is a file
    or a non-empty folder (unless ``force``, which clears a folder only when everything in it is fedsim's:
    listed in its manifest, or a run written before manifests whose summary.json says so; a folder holding
    anything else is refused, naming the first such file, and nothing is deleted)."""
    out = Path(out)
    check_run_dir(out, force=force)
    if out.is_dir() and any(out.iterdir()):
        _clear(out)
    return start_folder(out)


def _clear(folder: Path) -> None:
    """Delete everything under ``folder`` (which :func:`_foreign` found to be all fedsim's): files first,
    then the folders left empty, deepest first."""
    for d, dirs, names in os.walk(folder, topdown=False):
        for name in names:
            Path(d, name).unlink()
        for name in dirs:
            p = Path(d, name)
            if p.is_symlink():
                p.unlink()
            else:
                p.rmdir()


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
    if not out.is_dir() or not is_fedsim_folder(out):
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
        summary = read_summary(path)
        if not isinstance(summary, dict) or summary.get("status") != "ok":
            status = summary.get("status") if isinstance(summary, dict) else None
            return "incomplete", None, f"'{d}' stopped with status {status!r}" + _STATUS_WHY.get(str(status), "")
        summaries.append(summary)
    if several:
        top = read_summary(out / "summary.json")
        if top is None:
            return "incomplete", None, f"'{out}' was stopped before its last algorithm finished"
        statuses = [s.get("status") for s in top if isinstance(s, dict)] if isinstance(top, list) else [None]
        if any(st != "ok" for st in statuses):
            return "incomplete", None, (f"'{out}' (the comparison) stopped with status "
                                        f"{next(st for st in statuses if st != 'ok')!r}")
    return "finished", summaries, ""


#: What a status that is not ``ok`` means for ``--resume`` (said after it).
_STATUS_WHY = {"building_outputs": " (stopped while its figures and report were drawn)"}
