"""Device profiles: how fast a device trains, how much memory it has and what power it draws.

A profile is a YAML file in ``device_profiles/`` (or any path).  Every number in it carries a unit, and
every peak-throughput number carries the *precision* it was quoted at, because vendor tables mix FP32
FLOP/s with INT8 sparse TOPS; dividing a model's FP32 training FLOPs by an INT8 sparse figure overstates
an Orin by more than an order of magnitude.  Each number also names its source and a status:
``verified`` (read in the cited document), ``derived`` (arithmetic on verified numbers, e.g.
cores x 2 FLOP/FMA x clock) or ``unverified``.

Compute time follows the roofline-free model used by FL simulators (FedScale, Plato, APPFL):

    t = FLOPs / (peak[precision] x efficiency)

where ``efficiency`` is achieved/peak for training, documented per profile.  Where a per-sample training
time was measured on the real device for a named model (FedScale-style ``ms_per_sample``), that
measurement wins over the FLOP model.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence

import numpy as np

from fedsim.config import shown
from fedsim.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

#: Precisions a peak number may be quoted at.  ``int8_sparse`` is NVIDIA's 2:4 structured-sparsity figure.
PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "int8_dense", "int8_sparse")
KINDS: tuple[str, ...] = ("edge", "phone", "server")
STATUSES: tuple[str, ...] = ("verified", "derived", "unverified")

_THROUGHPUT_UNITS: dict[str, float] = {
    "FLOP/s": 1.0, "GFLOP/s": 1e9, "TFLOP/s": 1e12,
    "OP/s": 1.0, "GOP/s": 1e9, "TOP/s": 1e12,
}
_MEMORY_UNITS: dict[str, float] = {"bytes": 1.0, "MB": 1e6, "GB": 1e9, "MiB": 2.0**20, "GiB": 2.0**30}
_GIB = 2.0**30


@dataclass(frozen=True)
class Sourced:
    """A number with its unit, where it comes from and how sure we are of it."""

    value: float
    unit: str
    source: str
    status: str
    note: str = ""


@dataclass(frozen=True)
class DeviceProfile:
    """One kind of device.  ``peak`` is in FLOP/s (or OP/s for int8) per precision; memory in bytes."""

    name: str
    kind: str
    peak: dict[str, float]
    training_precision: str
    efficiency: float
    memory_bytes: float
    power_modes: dict[str, float]
    default_power_mode: str
    idle_w: float
    tx_power_w: float | None = None
    ms_per_sample: dict[str, float] = field(default_factory=dict)
    description: str = ""
    path: str = ""
    sources: dict[str, Sourced] = field(default_factory=dict, repr=False, compare=False)

    def train_flops_per_s(self, precision: str | None = None) -> float:
        """Achieved training throughput: peak at ``precision`` (default: the training precision) x efficiency."""
        prec = precision or self.training_precision
        if prec not in PRECISIONS:
            raise ConfigError("devices.precision", f"unknown precision {prec!r} (allowed: {', '.join(PRECISIONS)})")
        if prec not in self.peak:
            raise ConfigError(
                "devices.precision",
                f"device {self.name!r} has no peak number at {prec!r} (it has: {', '.join(sorted(self.peak))})",
            )
        return self.peak[prec] * self.efficiency

    def power_w(self, mode: str | None = None) -> float:
        """Board power in watts while computing, in power mode ``mode`` (default mode if None)."""
        m = mode or self.default_power_mode
        if m not in self.power_modes:
            raise ConfigError(
                "devices.power_mode",
                f"device {self.name!r} has no power mode {m!r} (allowed: {', '.join(self.power_modes)})",
            )
        return self.power_modes[m]


#: The uplink's transmit power when neither the device profile nor the scenario states one (W).
DEFAULT_TX_POWER_W = 0.2


def resolve_tx_power(profile: DeviceProfile, channel_tx_power_w: float | None) -> tuple[float, str]:
    """The transmit power (W) of a client of device class ``profile``, and where it came from: the one rule
    for its uplink SNR (path-loss models) and its transmit energy alike.

    Precedence: the profile's ``radio.tx_power`` (a measured property of that radio), else the scenario's
    ``channel.uplink.tx_power_w`` (a preset's, or 0.2 W by default).  Why one function: the SNR and the
    energy must never use two different powers for the same transmission."""
    if profile.tx_power_w:
        return float(profile.tx_power_w), "device profile radio.tx_power"
    if channel_tx_power_w is None:
        return DEFAULT_TX_POWER_W, "default"
    return float(channel_tx_power_w), "channel.uplink.tx_power_w"



# ----------------------------------------------------------------------------------------------- loading

def _profile_dir() -> Path:
    import device_profiles

    return Path(device_profiles.PROFILE_DIR)


def list_profiles() -> list[str]:
    """Names of the profiles shipped in ``device_profiles/``, sorted."""
    return sorted(p.stem for p in _profile_dir().glob("*.yaml"))


def _exists(p: Path) -> bool:
    """Path.exists for any user text: a name too long for the file system, or with a NUL, does not exist."""
    try:
        return p.exists()
    except (OSError, ValueError):
        return False


def _resolve(name_or_path: str | Path, base_dir: Path | None = None) -> Path:
    allowed = f"allowed: {', '.join(list_profiles())}, or a path to a YAML file"
    if not str(name_or_path).strip():
        raise ConfigError("devices.profile", f"got an empty name ({allowed})")
    p = Path(name_or_path)
    if base_dir is not None and not p.is_absolute() and _exists(Path(base_dir) / p) and (Path(base_dir) / p).is_file():
        return Path(base_dir) / p  # a profile file beside the scenario file that names it
    if p.suffix in (".yaml", ".yml") or _exists(p):
        if not _exists(p):
            raise ConfigError("devices.profile", f"profile file {shown(str(p))} does not exist")
        if p.is_dir():
            raise ConfigError("devices.profile", f"{shown(str(p))} is a folder, not a profile file ({allowed})")
        return p
    candidate = _profile_dir() / f"{name_or_path}.yaml"
    if not _exists(candidate):
        raise ConfigError("devices.profile", f"unknown device profile {shown(str(name_or_path))} ({allowed})")
    return candidate


def profile_at(name_or_path: str | Path, field: str, base_dir: Path | None = None) -> "DeviceProfile":
    """:func:`load_profile`, its errors named at the scenario field that gave the profile
    (``devices.mix[1].profile``, ``server.profile``) rather than at a generic ``devices.profile``."""
    try:
        return load_profile(name_or_path, base_dir)
    except ConfigError as exc:
        rest = exc.field[len("devices.profile"):] if exc.field.startswith("devices.profile") else ""
        raise ConfigError(field + rest, exc.message) from None


def load_profile(name_or_path: str | Path, base_dir: Path | None = None) -> DeviceProfile:
    """Load and validate a profile by shipped name (``'jetson-nano'``) or by path to a YAML file (a relative
    path is looked up in ``base_dir``, the scenario file's folder, first).

    Raises ConfigError naming the file and the field for a missing, negative or unknown entry.  A file read
    before and unchanged since (same size and modification time) is not parsed again: a run reads each
    profile of its mix several times (checks, estimate, world).
    """
    path = _resolve(name_or_path, base_dir)
    try:
        st = path.stat()
        key: tuple | None = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    except OSError:  # reported by the read below
        key = None
    if key is not None and key in _PROFILES:
        return _PROFILES[key]
    profile = _read_profile(path)
    if key is not None:
        _PROFILES[key] = profile
    return profile


#: profiles already read, by (resolved path, modification time, size); a DeviceProfile is immutable
_PROFILES: dict[tuple, DeviceProfile] = {}


Status = Literal["verified", "derived", "unverified"]


@dataclass
class SourcedEntry:
    """A profile file's ``{value, unit, source, status, note}`` entry, as written (units not yet applied)."""

    value: float
    unit: str
    source: str
    status: Status
    note: str = ""

    #: zero allowed (an idle draw may be 0 W); every other number must be positive
    allow_zero = False

    def validate(self, prefix: str) -> None:
        if not math.isfinite(self.value):
            raise ConfigError(f"{prefix}.value", f"expected a finite number, got {self.value!r}")
        if self.value < 0 or (self.value == 0 and not self.allow_zero):
            raise ConfigError(f"{prefix}.value", f"must be {'non-negative' if self.allow_zero else 'positive'}, "
                                                 f"got {self.value!r}")
        if not self.source.strip():
            raise ConfigError(f"{prefix}.source", "must name the document or URL the number comes from")

    def scaled(self, prefix: str, units: Mapping[str, float]) -> tuple[float, Sourced]:
        """The value in base units, and its record; an unknown unit is refused naming the allowed ones."""
        if self.unit not in units:
            raise ConfigError(f"{prefix}.unit", f"unknown unit {self.unit!r} (allowed: {', '.join(units)})")
        return self.value * units[self.unit], Sourced(self.value, self.unit, self.source, self.status, self.note)


@dataclass
class IdleEntry(SourcedEntry):
    allow_zero = True


@dataclass
class PowerModesEntry:
    unit: Literal["W"]
    default: str
    modes: dict[str, float]
    source: str
    status: Status
    note: str = ""

    def validate(self, prefix: str) -> None:
        if not self.modes:
            raise ConfigError(f"{prefix}.modes", "expected a non-empty mapping from mode name to watts")
        for mode, watts in self.modes.items():
            if not math.isfinite(watts) or watts <= 0:
                raise ConfigError(f"{prefix}.modes.{mode}", f"must be positive, got {watts!r}")
        if self.default not in self.modes:
            raise ConfigError(f"{prefix}.default", f"unknown mode {self.default!r} (allowed: {', '.join(self.modes)})")


@dataclass
class RadioEntry:
    tx_power: SourcedEntry


@dataclass
class ProfileFile:
    """The fields of a device profile file, read by :func:`fedsim.config.from_mapping` like a scenario's
    sections: unknown keys, wrong types and missing fields are one line naming the file and the field."""

    name: str
    kind: Literal["edge", "phone", "server"]
    peak: dict[Literal["fp32", "fp16", "int8_dense", "int8_sparse"], SourcedEntry]
    efficiency: SourcedEntry
    memory: SourcedEntry
    power_modes: PowerModesEntry
    idle_w: IdleEntry
    description: str = ""
    training_precision: Literal["fp32", "fp16", "int8_dense", "int8_sparse"] = "fp32"
    radio: RadioEntry | None = None
    ms_per_sample: dict[str, SourcedEntry] = field(default_factory=dict)

    def validate(self, prefix: str) -> None:
        where = f"{prefix}." if prefix else ""
        if not self.name:
            raise ConfigError(f"{where}name", "expected a non-empty string")
        if not self.peak:
            raise ConfigError(f"{where}peak", "expected a mapping from precision to {value, unit, source, status}")
        if self.training_precision not in self.peak:
            raise ConfigError(f"{where}training_precision", f"no peak number given at {self.training_precision!r} "
                                                            f"(have: {', '.join(self.peak)})")
        if self.efficiency.value > 1:
            raise ConfigError(f"{where}efficiency.value", f"achieved/peak must be in (0, 1], got {self.efficiency.value!r}")


def _read_profile(path: Path) -> DeviceProfile:
    """Parse and validate the profile file ``path`` (:func:`load_profile`); every error names the file."""
    from fedsim.config import from_mapping, read_text
    from fedsim.inputfiles import LIMIT_PROFILE
    from fedsim.yamlio import parse_yaml

    field_of = f"devices.profile[{path.name}]"
    text = read_text(path, field_of, "profile YAML file", LIMIT_PROFILE)
    try:
        data = parse_yaml(text, field_of, "profile YAML file")  # aliases within a node budget, nesting bounded
        if not isinstance(data, Mapping):
            raise ConfigError("", "the file must hold a mapping of fields")
        f = from_mapping(ProfileFile, data)
        sources: dict[str, Sourced] = {}
        peak: dict[str, float] = {}
        for prec, entry in f.peak.items():
            units = {k: v for k, v in _THROUGHPUT_UNITS.items() if ("FLOP" in k) == prec.startswith("fp")}
            peak[prec], sources[f"peak.{prec}"] = entry.scaled(f"peak.{prec}", units)
        efficiency, sources["efficiency"] = f.efficiency.scaled("efficiency", {"ratio": 1.0})
        memory_bytes, sources["memory"] = f.memory.scaled("memory", _MEMORY_UNITS)
        pm = f.power_modes
        sources["power_modes"] = Sourced(pm.modes[pm.default], "W", pm.source, pm.status, pm.note)
        idle_w, sources["idle_w"] = f.idle_w.scaled("idle_w", {"W": 1.0})
        tx_power_w = None
        if f.radio is not None:
            tx_power_w, sources["radio.tx_power"] = f.radio.tx_power.scaled("radio.tx_power", {"W": 1.0})
        ms_per_sample: dict[str, float] = {}
        for model, entry in f.ms_per_sample.items():
            ms_per_sample[model], sources[f"ms_per_sample.{model}"] = entry.scaled(f"ms_per_sample.{model}", {"ms": 1.0})
    except ConfigError as exc:
        if exc.field.startswith(field_of):  # the YAML reader names the file already
            raise
        where = f"{path.name}: {exc.field}" if exc.field else path.name
        raise ConfigError(f"devices.profile[{where}]", exc.message) from None
    return DeviceProfile(name=f.name, kind=f.kind, peak=peak, training_precision=f.training_precision,
                         efficiency=efficiency, memory_bytes=memory_bytes, power_modes=dict(pm.modes),
                         default_power_mode=pm.default, idle_w=idle_w, tx_power_w=tx_power_w,
                         ms_per_sample=ms_per_sample, description=f.description, path=str(path), sources=sources)


def profile_table(names: list[str] | None = None) -> "pd.DataFrame":
    """One row per profile: the numbers a user compares (for ``fedsim profiles``)."""
    rows = []
    for n in names or list_profiles():
        p = load_profile(n)
        rows.append({
            "name": p.name,
            "kind": p.kind,
            "peak_fp32_tflops": p.peak.get("fp32", float("nan")) / 1e12,
            "peak_fp16_tflops": p.peak.get("fp16", float("nan")) / 1e12,
            "int8_tops": p.peak.get("int8_dense", p.peak.get("int8_sparse", float("nan"))) / 1e12,
            "int8_kind": "dense" if "int8_dense" in p.peak else ("sparse" if "int8_sparse" in p.peak else ""),
            "efficiency": p.efficiency,
            "train_tflops": p.train_flops_per_s() / 1e12,
            "memory_gib": p.memory_bytes / _GIB,
            "power_w": p.power_w(),
            "power_mode": p.default_power_mode,
            "idle_w": p.idle_w,
            "fp32_status": p.sources["peak.fp32"].status if "peak.fp32" in p.sources else "",
        })
    import pandas as pd  # only the table needs it (`fedsim profiles NAME` does not)

    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------------------------- timing

def compute_time(
    profile: DeviceProfile,
    flops: float,
    *,
    jitter: float = 0.0,
    rng: np.random.Generator | None = None,
    model: str | None = None,
    samples: int | None = None,
    precision: str | None = None,
) -> float:
    """Seconds of virtual time to execute ``flops`` of training work on ``profile``.

    If ``model`` has a measured ``ms_per_sample`` on this device and ``samples`` is given, the time is
    ``samples x ms_per_sample / 1000`` (a measurement beats a peak-based estimate).  Otherwise it is
    ``flops / train_flops_per_s(precision)``.  ``jitter`` > 0 multiplies by a lognormal factor
    ``exp(sigma Z - sigma^2 / 2)`` (mean 1, so jitter does not bias the mean time), drawn from ``rng``,
    which must then be a named stream.
    """
    if jitter < 0:
        raise ConfigError("devices.jitter", f"must be >= 0, got {jitter!r}")
    if model is not None and samples is not None and model in profile.ms_per_sample:
        if samples < 0:
            raise ConfigError("devices.samples", f"must be >= 0, got {samples!r}")
        base = samples * profile.ms_per_sample[model] / 1000.0
    else:
        if flops < 0 or not math.isfinite(flops):
            raise ConfigError("devices.flops", f"must be a finite non-negative number, got {flops!r}")
        base = flops / profile.train_flops_per_s(precision)
    if jitter > 0:
        if rng is None:
            raise ConfigError("devices.jitter", "jitter > 0 needs an rng (a named stream)")
        base *= math.exp(jitter * rng.standard_normal() - 0.5 * jitter * jitter)
    return base


def _fmt_gib(x: float) -> str:
    """Bytes for a memory refusal: GiB from 1 GiB up, MiB below (a small budget never reads "0.0 GiB")."""
    return f"{x / _GIB:.1f} GiB" if x >= _GIB else f"{x / 2.0**20:.3g} MiB"


def check_memory(profile: DeviceProfile, need_bytes: float, what: str) -> None:
    """Refuse a workload that does not fit: names the workload, the need and the device's budget."""
    if need_bytes > profile.memory_bytes:
        raise ConfigError(
            "devices",
            f"{what} needs {_fmt_gib(need_bytes)} ({need_bytes:.0f} bytes) but device {profile.name!r} "
            f"has {_fmt_gib(profile.memory_bytes)} ({profile.memory_bytes:.0f} bytes)",
        )


# ----------------------------------------------------------------------------------------------- device

@dataclass(frozen=True)
class ComputeRecord:
    """One piece of work on a device: ``wait`` for the device to be free, ``busy`` computing."""

    device: Any
    what: str
    flops: float
    request: float
    start: float
    end: float
    energy_j: float

    @property
    def wait(self) -> float:
        return self.start - self.request

    @property
    def busy(self) -> float:
        return self.end - self.start


class Device:
    """A profile plus a SimPy resource for its compute: work queues on the device, one job at a time.

    ``run`` is a SimPy process generator; its time comes from ``compute_time`` (with the device's jitter
    drawn from ``rng``, which should be the named stream of this device), and its energy, if a meter is
    given, is the power mode's watts x busy time.
    """

    def __init__(self, env, profile: DeviceProfile, name: Any, *, power_mode: str | None = None,
                 jitter: float = 0.0, rng: np.random.Generator | None = None, meter=None, slots: int = 1) -> None:
        import simpy

        self.env, self.profile, self.name = env, profile, name
        self.power_mode = power_mode or profile.default_power_mode
        profile.power_w(self.power_mode)  # validates the mode
        self.jitter, self.rng, self.meter = jitter, rng, meter
        self.resource = simpy.Resource(env, capacity=slots)

    def time_for(self, flops: float, *, model: str | None = None, samples: int | None = None) -> float:
        return compute_time(self.profile, flops, jitter=self.jitter, rng=self.rng, model=model, samples=samples)

    def run(self, flops: float, *, what: str = "train", model: str | None = None, samples: int | None = None):
        t0 = self.env.now
        with self.resource.request() as req:
            yield req
            start = self.env.now
            dur = self.time_for(flops, model=model, samples=samples)
            yield self.env.timeout(dur)
        watts = self.profile.power_w(self.power_mode)
        energy = dur * watts
        if self.meter is not None:
            self.meter.compute(self.name, dur, watts)
        return ComputeRecord(self.name, what, flops, t0, start, self.env.now, energy)


def capability_levels(n: int, beta: float, levels: Sequence[float], rng: np.random.Generator) -> np.ndarray:
    """Per-client capability: round(β·n) clients at ``levels[0]`` (the slow ones), the rest at
    ``levels[1]``; which clients are slow is a permutation drawn from ``rng``."""
    k = int(round(beta * n))
    caps = np.full(n, float(levels[1]))
    caps[rng.permutation(n)[:k]] = float(levels[0])
    return caps


def uplink_tx_power_w(channel: Any) -> float:
    """The uplink's ``tx_power_w`` as the world reads it: the scenario's ``channel.uplink``, else the preset's,
    else the default."""
    if channel.uplink is not None:
        return float(channel.uplink.tx_power_w)
    if channel.preset:
        from fedsim.system.channel import CHANNEL_PRESETS  # channel.py sits beside this module; read on demand

        return float(CHANNEL_PRESETS[channel.preset].uplink.tx_power_w)
    return DEFAULT_TX_POWER_W


def tx_power_by_class(scenario: Any) -> list[tuple[str, float, str]]:
    """``(device class, transmit power in W, where it came from)`` per group of ``devices.mix``, resolved as the
    world resolves it (:func:`fedsim.system.devices.resolve_tx_power`): what ``fedsim show`` prints."""
    channel_w = uplink_tx_power_w(scenario.channel)
    out = []
    for group in scenario.devices.mix:
        prof = load_profile(group.profile, scenario.source_dir)
        w, src = resolve_tx_power(prof, channel_w)
        out.append((str(group.profile), w, src))
    return out
