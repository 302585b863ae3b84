"""Typed, validated configuration built from plain mappings (YAML).

A scenario section is a dataclass; ``from_mapping`` walks it field by field so that every bad input
produces one line naming the dotted field, the bad value and what is allowed.  Only a handful of types
are used in configs (bool, int, float, str, Optional, Literal, list, tuple, dict, nested dataclasses), and
this module checks exactly those.

Numeric domains are declared once, next to the field, with :func:`num` (``field(metadata={"domain":
Domain(...)})``) or ``Annotated[float, Domain(...)]``; :func:`from_mapping` checks every field's domain
before the dataclass's own ``validate(prefix)`` (cross-field rules) runs.  Without a declared domain a
float must still be finite and an integer at most :data:`MAX_INT` in size: NaN, ±inf and 1e300 never
reach the simulation.
"""
from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Mapping, TypeVar, Union, get_args, get_origin

from fedsim.errors import ConfigError

T = TypeVar("T")

#: Largest integer any field accepts without a declared domain (exactly representable as a float).
MAX_INT = 2**53


@dataclass(frozen=True)
class Domain:
    """The allowed values of one numeric field (each element, for a list-valued field).

    ``gt``/``ge``/``lt``/``le``: open or closed bounds; ``finite``: NaN and ±inf refused (the default; a
    bound on its own does not exclude inf); ``unit``: for messages and the field reference.
    """

    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None
    finite: bool = True
    unit: str = ""
    doc: str = ""

    def describe(self, integer: bool = False) -> str:
        """The allowed range as text, e.g. ``finite, in (0, 1]`` or ``an integer >= 1``."""
        lo = f"({_num(self.gt)}" if self.gt is not None else f"[{_num(self.ge)}" if self.ge is not None else None
        hi = f"{_num(self.lt)})" if self.lt is not None else f"{_num(self.le)}]" if self.le is not None else None
        if lo and hi:
            text = f"in {lo}, {hi}"
        elif lo:
            text = ("> " if lo[0] == "(" else ">= ") + lo[1:]
        elif hi:
            text = ("< " if hi[-1] == ")" else "<= ") + hi[:-1]
        else:
            text = "finite" if self.finite else "any number"
        if integer:
            text = "an integer" + ("" if text == "finite" else " " + text)
        elif self.finite and (lo or hi):
            text = "finite, " + text
        return text + (f" {self.unit}" if self.unit and self.unit not in ("1", "") else "")

    def check(self, value: float, field: str) -> None:
        """Raise ConfigError naming ``field`` and the bad value unless ``value`` is in the domain."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return
        v = float(value) if not isinstance(value, int) else value
        ok = True
        if isinstance(v, float) and math.isnan(v):
            ok = False
        elif self.finite and isinstance(v, float) and math.isinf(v):
            ok = False
        else:
            ok = ((self.gt is None or v > self.gt) and (self.ge is None or v >= self.ge)
                  and (self.lt is None or v < self.lt) and (self.le is None or v <= self.le))
        if not ok:
            raise ConfigError(field, f"got {_show(value)} (allowed: {self.describe(isinstance(value, int))})")


def _num(x: float) -> str:
    """A bound as text: 1000000 → 10^6, 0.5 → 0.5."""
    if x != 0 and abs(x) >= 1e5 and math.log10(abs(x)).is_integer():
        return ("-" if x < 0 else "") + f"10^{int(math.log10(abs(x)))}"
    return f"{x:g}"


def shown(value: Any, limit: int = 80) -> str:
    """``repr(value)`` for an error line, cut after ``limit`` characters with the full length stated, so a
    100 kB value stays one short line."""
    text = repr(value)
    size = len(value) if isinstance(value, str) else len(text)  # a string's own length, not its quoted form's
    return text if len(text) <= limit else f"{text[:limit]}... ({size:,} characters)"


def _show(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
    return repr(value)


_MISSING: Any = dataclasses.MISSING


def num(default: Any = _MISSING, *, default_factory: Callable[[], Any] | None = None, gt: float | None = None,
        ge: float | None = None, lt: float | None = None, le: float | None = None, finite: bool = True,
        unit: str = "", doc: str = "") -> Any:
    """A dataclass field with its numeric domain declared next to it (``x: float = num(1.0, gt=0, unit="s")``)."""
    meta = {"domain": Domain(gt=gt, ge=ge, lt=lt, le=le, finite=finite, unit=unit, doc=doc)}
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def field_domain(f: dataclasses.Field, hint: Any = None) -> Domain | None:
    """The declared domain of a dataclass field: ``field(metadata={"domain": ...})`` or ``Annotated``."""
    d = f.metadata.get("domain") if f.metadata else None
    if d is not None:
        return d
    if hint is not None and get_origin(hint) is Annotated:
        return next((a for a in get_args(hint)[1:] if isinstance(a, Domain)), None)
    return None


_GENERIC = Domain()


def check_domain(value: Any, domain: Domain | None, field: str) -> None:
    """Check ``value`` (a number, or a list/tuple/dict of them, recursively) against ``domain``.

    Without a declared domain, floats must be finite and integers at most MAX_INT in size."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            check_domain(v, domain, f"{field}[{i}]")
        return
    if isinstance(value, int):
        if abs(value) > MAX_INT:
            allowed = domain.describe(True) if domain is not None else "an integer of at most 2^53"
            raise ConfigError(field, f"got {value!r}, far too large (allowed: {allowed})")
        (domain or _GENERIC).check(value, field)
    elif isinstance(value, float):
        (domain or _GENERIC).check(value, field)


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in get_args(tp) if a is not type(None)) + (
            " or null" if type(None) in get_args(tp) else ""
        )
    if origin in (list, tuple):
        args = get_args(tp)
        return f"a list of {_type_name(args[0])}" if args else "a list"
    if origin is dict:
        return "a mapping"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return {bool: "true/false", int: "an integer", float: "a number", str: "a string"}.get(tp, str(tp))


def coerce(value: Any, tp: Any, field: str) -> Any:
    """Check ``value`` against type ``tp`` (converting int→float and list→tuple); raise ConfigError."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin is Annotated:
        return coerce(value, get_args(tp)[0], field)
    if origin is Literal:
        if value not in get_args(tp):
            raise ConfigError(field, f"got {value!r} (allowed: {', '.join(str(a) for a in get_args(tp))})")
        return value
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None:
            if type(None) in args:
                return None
            raise ConfigError(field, f"must be {_type_name(tp)}, got null")
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return coerce(value, arg, field)
            except ConfigError as exc:
                errors.append(exc)
        deeper = [e for e in errors if e.field != field]
        if deeper:  # the value had the right shape but a field inside it is wrong: say which
            raise deeper[0]
        raise ConfigError(field, f"must be {_type_name(tp)}, got {value!r}")
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(field, f"must be a mapping, got {value!r}")
        return from_mapping(tp, value, field)
    if origin in (list, tuple):
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise ConfigError(field, f"must be {_type_name(tp)}, got {value!r}")
        args = get_args(tp)
        inner = args[0] if args else Any
        items = [coerce(v, inner, f"{field}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(field, f"must be a mapping, got {value!r}")
        args = get_args(tp)
        vt = args[1] if len(args) == 2 else Any
        return {str(k): coerce(v, vt, f"{field}.{k}") for k, v in value.items()}
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(field, f"must be true/false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer() and abs(value) <= MAX_INT:
                return int(value)
            if isinstance(value, float) and math.isfinite(value) and value.is_integer():
                raise ConfigError(field, f"got {value!r}, far too large (allowed: an integer of at most 2^53)")
            raise ConfigError(field, f"must be an integer, got {_show(value)}")
        return value
    if tp is float:
        if isinstance(value, str):  # YAML 1.1 reads 5e6 (no dot) as a string; it means a number
            try:
                return float(value)
            except ValueError:
                pass
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 1e308:
            raise ConfigError(field, f"got {value!r}, far too large (allowed: a finite number)")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(field, f"must be a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(field, f"must be a string, got {value!r}")
        return value
    return value


def from_mapping(cls: type[T], data: Mapping[str, Any], prefix: str = "") -> T:
    """Build dataclass ``cls`` from ``data``; unknown keys and wrong types raise ConfigError."""
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if key not in fields:
            raise ConfigError(name, f"unknown key (allowed: {', '.join(sorted(fields))})")
        kwargs[key] = coerce(value, hints[key], name)
        if not dataclasses.is_dataclass(kwargs[key]):
            check_domain(kwargs[key], field_domain(fields[key], hints[key]), name)
    for key, f in fields.items():  # a field without a default must be given
        if key not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{prefix}.{key}" if prefix else key, "missing field")
    obj = cls(**kwargs)
    validate = getattr(obj, "validate", None)
    if callable(validate):
        validate(prefix)
    return obj


def to_mapping(obj: Any) -> Any:
    """The inverse of ``from_mapping``: plain dicts/lists for YAML output."""
    if dataclasses.is_dataclass(obj):
        names = [f.name for f in dataclasses.fields(obj)]
        keep = getattr(obj, "mapping_fields", None)
        if callable(keep):  # a section that shows only the fields in effect (e.g. a link under its model)
            names = [n for n in names if n in set(keep())]
        return {n: to_mapping(getattr(obj, n)) for n in names}
    if isinstance(obj, (list, tuple)):
        return [to_mapping(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_mapping(v) for k, v in obj.items()}
    return obj


def read_text(path: str | Path, field: str, what: str = "file", limit: int | None = None) -> str:
    """The text of a file a scenario names (a trace, a positions CSV, a device profile), read through
    :func:`fedsim.inputfiles.read_input` (a regular file of at most ``limit`` bytes, by default the CSV
    limit): a missing file, a folder, a device or pipe, a file too large, an unreadable or non-UTF-8 file,
    or one holding NUL bytes is one ConfigError naming ``field``."""
    from fedsim.inputfiles import LIMIT_TABLE, read_input, shown_path

    text_path = str(path)
    shown = shown_path(text_path)
    if not text_path.strip():
        raise ConfigError(field, f"{what} {shown} does not exist")
    raw = read_input(path, field, what, LIMIT_TABLE if limit is None else limit)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(field, f"{what} {shown} is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    if "\x00" in text:
        raise ConfigError(field, f"{what} {shown} holds NUL bytes (byte {text.index(chr(0))}); it must be text")
    return text


def require(cond: bool, field: str, message: str) -> None:
    """Raise ConfigError(field, message) unless ``cond``."""
    if not cond:
        raise ConfigError(field, message)


def positive(value: float | int | None, field: str, *, allow_zero: bool = False) -> None:
    """Counts and durations: positive (or non-negative) and finite when given."""
    if value is None:
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(field, f"got {_show(value)} (allowed: a finite number {'>=' if allow_zero else '>'} 0)")
    if allow_zero:
        require(value >= 0, field, f"must be >= 0, got {value!r}")
    else:
        require(value > 0, field, f"must be > 0, got {value!r}")


@dataclass(frozen=True)
class FieldInfo:
    """One scenario field as the reference and the fuzz test see it."""

    path: str
    type: Any
    default: Any
    domain: Domain | None
    doc: str
    #: the names a string field accepts, for the reference (``field(metadata={"choices": callable})``)
    choices: tuple[str, ...] = ()


def _strip_optional(tp: Any) -> Any:
    if get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _field_doc(cls: type, f: dataclasses.Field, dom: Domain | None) -> str:
    """What a field means: its own ``doc`` (domain or metadata), else that of the base class's declaration it
    overrides (a subclass that only changes a default keeps the meaning)."""
    doc = (dom.doc if dom else "") or (f.metadata.get("doc", "") if f.metadata else "")
    for base in cls.__mro__[1:]:
        if doc:
            break
        bf = getattr(base, "__dataclass_fields__", {}).get(f.name)
        if bf is not None:
            bdom = field_domain(bf)
            doc = (bdom.doc if bdom else "") or (bf.metadata.get("doc", "") if bf.metadata else "")
    return doc


def walk_fields(cls: type, prefix: str) -> list[FieldInfo]:
    """Every leaf field of dataclass ``cls`` (nested sections, optional sections and the first element of a
    list of sections included), with its dotted path, type, default and declared domain."""
    out: list[FieldInfo] = []
    hints = typing.get_type_hints(cls, include_extras=True)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        path = f"{prefix}.{f.name}" if prefix else f.name
        tp = _strip_optional(hints[f.name])
        if dataclasses.is_dataclass(tp):
            out.extend(walk_fields(tp, path))
            continue
        if get_origin(tp) in (list, tuple) and get_args(tp) and dataclasses.is_dataclass(get_args(tp)[0]):
            out.extend(walk_fields(get_args(tp)[0], f"{path}[0]"))
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            default = f.default_factory()  # type: ignore[misc]
        else:
            default = None
        dom = field_domain(f, hints[f.name])
        doc = _field_doc(cls, f, dom)
        choices = f.metadata.get("choices") if f.metadata else None  # a callable: names known at run time
        out.append(FieldInfo(path, hints[f.name], default, dom, doc, tuple(choices()) if choices else ()))
    return out


def type_text(tp: Any) -> str:
    """A field's type as the reference prints it."""
    if get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    return _type_name(tp)
