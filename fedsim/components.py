"""Naming the parts a scenario runs: built-in names, ``module:attribute`` references, objects, entry points.

Every user-supplied algorithm, model, dataset and channel (path-loss) model is named the same way:

- a built-in name (``fedavg``, ``mlp``, ``digits``);
- a name a package registers under the entry-point group ``fedsim.algorithms``, ``fedsim.models``,
  ``fedsim.datasets`` or ``fedsim.channel_models``;
- ``module:attribute``, where ``module`` is imported from the scenario file's folder first, then the
  working directory, then ``sys.path`` (``attribute`` may be dotted: ``pkg.mod:Outer.Inner``);
- in the Python API, the class or function object itself (remembered under its ``module:qualname``).

This module knows nothing of what the objects are; the layer that owns each kind checks the object
(``fedsim.algorithms.resolve``, ``fedsim.learn.models.user_model``, ``fedsim.learn.data.user_dataset``).  A
bad reference is one :class:`ConfigError` line naming the field and what was not found.
"""
from __future__ import annotations

import hashlib
import importlib
import re
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable

from fedsim.errors import ConfigError, UserCodeError

#: kind → entry-point group a package registers its names under
GROUPS: dict[str, str] = {"algorithm": "fedsim.algorithms", "model": "fedsim.models", "dataset": "fedsim.datasets",
                          "channel": "fedsim.channel_models"}

_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")

#: references registered from Python objects handed to the API (``module:qualname`` → object)
_OBJECTS: dict[str, Any] = {}
#: the modules user objects came from (references, objects, entry points): their frames are the user's code
_USER_MODULES: set[str] = set()


def is_reference(name: Any) -> bool:
    """Whether ``name`` is written as ``module:attribute`` (not a built-in or registered name)."""
    return isinstance(name, str) and ":" in name


def reference_of(obj: Any) -> str:
    """The ``module:qualname`` under which an object given to the Python API is named in the resolved
    scenario; the object is remembered, so the name resolves in this process even when its module
    cannot be imported by name (a notebook's ``__main__``)."""
    module = getattr(obj, "__module__", None) or "__main__"
    qual = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if not qual or "<" in qual:
        raise ConfigError("name", f"{obj!r} has no importable name (define it at the top level of a module)")
    ref = f"{module}:{qual}"
    _OBJECTS[ref] = obj
    _USER_MODULES.add(module)
    return ref


@lru_cache(maxsize=None)
def installed(kind: str) -> dict[str, metadata.EntryPoint]:
    """The names packages register for ``kind`` (entry points of its group), by name."""
    try:
        eps = metadata.entry_points(group=GROUPS[kind])
    except Exception:  # noqa: BLE001 - a broken distribution on the path must not stop a run
        return {}
    return {ep.name: ep for ep in eps}


def _search_path(base_dirs: Iterable[Path | str | None]) -> list[str]:
    dirs = [str(Path(d).resolve()) for d in base_dirs if d is not None]
    dirs.append(str(Path.cwd()))
    return [d for i, d in enumerate(dirs) if d not in dirs[:i]]


def import_reference(ref: str, field: str, base_dirs: Iterable[Path | str | None] = ()) -> Any:
    """The object ``module:attribute`` names, importing ``module`` from ``base_dirs`` (the scenario file's
    folder), the working directory, then ``sys.path``.  One ConfigError line for a malformed reference, a
    module that is missing or fails to import (the import error is quoted), or a missing attribute."""
    if ref in _OBJECTS:
        return _OBJECTS[ref]
    module, _, attr = ref.partition(":")
    if not _DOTTED.match(module) or not _DOTTED.match(attr):
        raise ConfigError(field, f"{ref!r} is not a reference of the form module:attribute (e.g. my_algos:MyAvg)")
    extra = _search_path(base_dirs)
    added = [d for d in extra if d not in sys.path]
    sys.path[:0] = added
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module == exc.name or module.startswith(exc.name + ".")):
            raise ConfigError(field, f"module {module!r} of {ref!r} not found (looked in the scenario's folder, the "
                              "working directory and sys.path)") from None
        raise ConfigError(field, f"module {module!r} of {ref!r} does not import: {type(exc).__name__}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - the user's module: its error becomes the one line
        raise ConfigError(field, f"module {module!r} of {ref!r} does not import: {type(exc).__name__}: {exc}") from None
    finally:
        for d in added:
            if d in sys.path:
                sys.path.remove(d)
    _USER_MODULES.add(module)
    obj: Any = mod
    for i, part in enumerate(attr.split(".")):
        if not hasattr(obj, part):
            where = module if i == 0 else f"{module}:{'.'.join(attr.split('.')[:i])}"
            names = sorted(n for n in dir(obj) if not n.startswith("_"))[:12]
            raise ConfigError(field, f"{where!r} has no attribute {part!r} (it has: {', '.join(names) or 'nothing public'})")
        obj = getattr(obj, part)
    return obj


def find(kind: str, name: Any, field: str, base_dirs: Iterable[Path | str | None] = ()) -> Any | None:
    """The object behind ``name`` for ``kind``: a Python object as given, a ``module:attribute`` reference
    imported, or an entry-point name loaded; None when ``name`` is none of these (a built-in name, or an
    unknown one the caller reports with its list of built-ins)."""
    if not isinstance(name, str):
        return name
    if is_reference(name):
        return import_reference(name, field, base_dirs)
    ep = installed(kind).get(name)
    if ep is None:
        return None
    try:
        obj = ep.load()
    except Exception as exc:  # noqa: BLE001 - a package's broken entry point: one line
        raise ConfigError(field, f"{kind} {name!r} (entry point {ep.value!r}) does not load: "
                          f"{type(exc).__name__}: {exc}") from None
    _USER_MODULES.add(ep.value.partition(":")[0].strip())
    return obj


def call_factory(factory: Any, field: str, ref: str, *args: Any, **kwargs: Any) -> Any:
    """Call a user's factory; any exception it raises becomes one line naming the field and the reference."""
    try:
        return factory(*args, **kwargs)
    except ConfigError:
        raise
    except TypeError as exc:
        raise ConfigError(field, f"{ref!r} cannot be called so: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - the user's code: its error becomes the one line
        raise ConfigError(field, f"{ref!r} raised {type(exc).__name__}: {exc}") from None


_FEDSIM_DIR = Path(__file__).resolve().parent


def _frame_owner(module: str, filename: str) -> str:
    """``user``, ``fedsim`` or ``other`` for one traceback frame: a module the scenario named (or a package
    below it) is the user's; fedsim's own files are fedsim's; everything else (the standard library, torch,
    numpy, simpy, a helper the user's module calls) is neither, so the user's line that called it is named."""
    if any(module == m or module.startswith(m + ".") for m in _USER_MODULES):
        return "user"
    try:
        inside = Path(filename).resolve().is_relative_to(_FEDSIM_DIR)
    except (OSError, ValueError):  # pragma: no cover - an odd frame: not the user's
        return "other"
    return "fedsim" if inside else "other"


def user_code_error(exc: BaseException) -> UserCodeError | None:
    """The :class:`UserCodeError` for ``exc`` when it was raised in the user's code, else None.

    The innermost frame of the traceback that belongs to the user or to fedsim decides (frames below it are
    libraries the code called: torch, numpy): the user's → an error in their code, named by the frame's
    ``module:qualname`` and ``file:line``; fedsim's → not the user's code (an internal error, or fedsim calling
    the user's hook wrongly)."""
    while exc.__cause__ is not None:  # SimPy re-raises a process's exception as a copy caused by the original
        exc = exc.__cause__
    if isinstance(exc, UserCodeError):  # fedsim already named the user's method (a declaration it refused)
        return exc
    tb = exc.__traceback__
    last: tuple[str, str, str, int] | None = None
    while tb is not None:
        frame = tb.tb_frame
        module = str(frame.f_globals.get("__name__", "?"))
        owner = _frame_owner(module, frame.f_code.co_filename)
        if owner != "other":
            qual = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
            last = (owner, f"{module}:{qual}", frame.f_code.co_filename, tb.tb_lineno)
        tb = tb.tb_next
    if last is None or last[0] != "user":
        return None
    _, where, filename, line = last
    return UserCodeError(where, f"{filename}:{line}", exc)


def _file_of(module: str) -> Path | None:
    mod = sys.modules.get(module)
    file = getattr(mod, "__file__", None)
    return Path(file).resolve() if file else None


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def module_records(names: Iterable[Any]) -> dict[str, dict[str, str]]:
    """Where each user module behind the ``module:attribute`` references ``names`` was found, and its
    content's sha256: saved with a run (the scenario's ``modules`` section), so the run folder repeats from
    any working directory and says when the file has changed since.  fedsim's own modules and modules with
    no file (a notebook's ``__main__``) are left out."""
    out: dict[str, dict[str, str]] = {}
    for name in names:
        if not is_reference(name):
            continue
        module = name.partition(":")[0]
        path = _file_of(module)
        if path is None or path.is_relative_to(_FEDSIM_DIR) or not path.is_file():
            continue
        out[module] = {"path": str(path), "sha256": _sha256(path)}
    return out


_WARNED: set[tuple[str, str]] = set()


def recorded_dirs(modules: Any, field: str = "modules") -> list[Path]:
    """The folders to import the recorded user modules from (a saved scenario's ``modules`` section: module
    name → ``{path, sha256}``), searched before the scenario's folder and the working directory.  A file that
    has changed since it was recorded is said once on stderr (``fedsim: warning: ...``) and run as it is now;
    a file no longer there is said too, and the module is then looked up as usual."""
    if not isinstance(modules, dict):
        raise ConfigError(field, f"must map module names to {{path, sha256}}, got {type(modules).__name__}")
    dirs: list[Path] = []
    for module, rec in modules.items():
        where = f"{field}.{module}"
        if not (isinstance(module, str) and _DOTTED.match(module)):
            raise ConfigError(field, f"{module!r} is not a module name")
        if not (isinstance(rec, dict) and isinstance(rec.get("path"), str) and isinstance(rec.get("sha256"), str)):
            raise ConfigError(where, f"must be {{path: <file>, sha256: <hex>}}, got {rec!r}")
        path = Path(rec["path"])
        if not path.is_file():
            _warn_once(path, "missing", f"{where}: {path} recorded with this run is no longer there; "
                       "looking the module up beside the scenario and in the working directory")
            continue
        now = _sha256(path)
        if now != rec["sha256"]:
            _warn_once(path, now, f"{where}: {path} has changed since this run was saved (sha256 "
                       f"{rec['sha256'][:12]}… then, {now[:12]}… now); running the file as it is now")
        root = path.parent if path.name != "__init__.py" else path.parent.parent
        for _ in range(module.count(".")):
            root = root.parent
        if root not in dirs:
            dirs.append(root)
    return dirs


def _warn_once(path: Path, key: str, line: str) -> None:
    if (str(path), key) not in _WARNED:
        _WARNED.add((str(path), key))
        print(f"fedsim: warning: {line}", file=sys.stderr)
