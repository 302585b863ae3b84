"""The one way fedsim writes a file into a run or batch folder: recorded in the folder's manifest, written to
a temporary name beside it and renamed into place.

Why: ``--force`` must clear only what fedsim wrote (:mod:`fedsim.rundirs` reads the manifest), and a file
a reader finds under its final name must be whole: a run stopped, killed or out of disk space while
writing leaves the previous file or none, never half of one (a cut-off ``summary.json`` would be taken
for a run's record).

The manifest (:data:`MANIFEST`, one relative POSIX path per line) lives in every run and batch folder
(:func:`start_folder`).  A file is recorded in the nearest manifest at most :data:`DEPTH` folders above it
(a run's ``checkpoints/`` and ``check/`` files in the run's), before it is written, so a file a kill cut
short is still known as fedsim's; a folder with a manifest of its own is recorded in its batch's as
``name/``.  Lines are appended with one ``write`` each (``O_APPEND``), so processes drawing a run's
figures side by side never mix their lines.  This module imports nothing but the standard library.
"""
from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator

#: The manifest of what fedsim wrote in a folder.
MANIFEST = ".fedsim-manifest"
#: First line of a manifest.
HEADER = "# files fedsim wrote in this folder (paths relative to it; 'name/': a folder with its own manifest)\n"
#: End of the temporary name a file is written under before it is renamed into place
#: (``.<name>.<pid>.fedsim-tmp``, beside the file).
TMP_SUFFIX = ".fedsim-tmp"
#: How many folders above a file its manifest may be (the file's own folder is 1).
DEPTH = 3

#: ``status`` in summary.json while a run's figures and report are drawn (its simulation ended ``ok``): a
#: run stopped or killed then keeps a status that is not ``ok``, and ``--resume`` runs it again.
BUILDING = "building_outputs"

#: Whether this process has written anything into a folder (the CLI says what an interrupt left).
_WROTE: list[bool] = [False]


def wrote_anything() -> bool:
    """Whether this process has recorded a folder or a file (so "outputs written so far are kept" is true)."""
    return _WROTE[0]


def _append(manifest: Path, line: str) -> None:
    fd = os.open(manifest, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode("utf-8"))
    finally:
        os.close(fd)


def _owner(path: Path) -> Path | None:
    """The folder whose manifest records ``path``: the nearest of its :data:`DEPTH` parents with one."""
    folder = path.parent
    for _ in range(DEPTH):
        if (folder / MANIFEST).exists():
            return folder
        if folder.parent == folder:
            break
        folder = folder.parent
    return None


def record(path: str | Path, *, folder: bool = False) -> None:
    """Record ``path`` (a file, or with ``folder`` a sub-folder with its own manifest) in the nearest
    manifest above it; a path with no manifest above it (a file written outside any run folder) is not
    recorded."""
    path = Path(path)
    _WROTE[0] = True
    owner = _owner(path)
    if owner is None:
        return
    rel = path.relative_to(owner).as_posix() if path.is_absolute() == owner.is_absolute() else None
    if rel is None:
        rel = path.resolve().relative_to(owner.resolve()).as_posix()
    _append(owner / MANIFEST, rel + ("/" if folder else "") + "\n")


def start_folder(folder: str | Path) -> Path:
    """Make ``folder`` a fedsim folder: created if missing, given a manifest if it has none, and recorded
    in a batch folder's manifest above it (a sweep's point, a seed, an algorithm of a multi-algorithm run)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    _WROTE[0] = True
    manifest = folder / MANIFEST
    if not manifest.exists():
        _append(manifest, HEADER)
        if _owner(folder) is not None:
            record(folder, folder=True)
    return folder


def read_manifest(folder: str | Path) -> tuple[set[str], set[str]] | None:
    """The files and the sub-folders (without their ``/``) ``folder``'s manifest lists; None without one."""
    manifest = Path(folder) / MANIFEST
    if not manifest.is_file():
        return None
    files: set[str] = set()
    subs: set[str] = set()
    for line in manifest.read_text(encoding="utf-8", errors="replace").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        (subs if line.endswith("/") else files).add(line.rstrip("/"))
    return files, subs


def tmp_name(path: Path) -> Path:
    """The temporary name ``path`` is written under before it is renamed into place (one per process, so
    two processes writing the same file never share one)."""
    return path.with_name(f".{path.name}.{os.getpid()}{TMP_SUFFIX}")


def tmp_target(name: str) -> str | None:
    """The final name a temporary file ``name`` (:func:`tmp_name`) was for, or None if it is not one."""
    if not (name.startswith(".") and name.endswith(TMP_SUFFIX)):
        return None
    stem = name[1:-len(TMP_SUFFIX)]
    base, _, pid = stem.rpartition(".")
    return base if base and pid.isdigit() else None


@contextmanager
def writing(path: str | Path, mode: str = "w", *, fsync: bool = False) -> Iterator[IO[Any]]:
    """Write ``path`` through the handle this yields (``mode`` ``"w"``: text, UTF-8; ``"wb"``: bytes): it
    is recorded in its folder's manifest, written under a temporary name and renamed into place only
    once whole (``fsync``: forced to disk first, for small files whose truth matters, like a summary).
    A failure or an interrupt leaves the previous file, or none, and no temporary file."""
    path = Path(path)
    record(path)
    tmp = tmp_name(path)
    try:
        with open(tmp, mode, **({} if "b" in mode else {"encoding": "utf-8", "newline": ""})) as fh:
            yield fh
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise


def write_text(path: str | Path, text: str, *, fsync: bool = False) -> None:
    """``path.write_text(text)``, recorded and atomic (:func:`writing`)."""
    with writing(path, "w", fsync=fsync) as fh:
        fh.write(text)


def write_bytes(path: str | Path, data: bytes) -> None:
    """``path.write_bytes(data)``, recorded and atomic (:func:`writing`)."""
    with writing(path, "wb") as fh:
        fh.write(data)


def write_json(path: str | Path, value: Any, *, indent: int | None = 2, **dumps: Any) -> None:
    """``value`` as JSON, recorded, atomic and forced to disk (summaries say what a run is)."""
    write_text(path, json.dumps(value, indent=indent, **dumps), fsync=True)


def write_csv(frame: Any, path: str | Path, **to_csv: Any) -> None:
    """A pandas frame as CSV (``index=False`` unless given), recorded and atomic."""
    to_csv.setdefault("index", False)
    with writing(path, "w") as fh:
        frame.to_csv(fh, **to_csv)
