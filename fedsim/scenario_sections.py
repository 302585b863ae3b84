"""A scenario's sections as validated dataclasses: one per layer (data, model, train, devices, channel,
network, availability, server, stop, eval, output), the algorithm entry (:class:`AlgorithmSpec`), the
:class:`Scenario` that holds them, the link fields each channel model uses, and the plausibility ranges a
loaded scenario is checked against.  No YAML, no file: :mod:`fedsim.scenario_loading` fills these."""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Sequence

from fedsim.config import shown, num, positive, require, to_mapping
from fedsim.errors import ConfigError
from fedsim.system.channel import (CHANNEL_MODELS, DEFAULT_DOWNLINK_MBPS, DEFAULT_UPLINK_MBPS, PATHLOSS_MODELS,
                                   PHYSICAL_FIELDS, RATE_ONLY_MODELS, USER_MODEL, LinkPhysics, is_channel_model)



def _names(module: str, attribute: str) -> tuple[str, ...]:
    """The names a registry holds (a tuple or a mapping's keys), for the reference's allowed column."""
    import importlib

    return tuple(getattr(importlib.import_module(module), attribute))


def _profile_names() -> tuple[str, ...]:
    from fedsim.system.devices import list_profiles

    return (*list_profiles(), "or a path to a profile YAML file")


@dataclass
class PartitionConfig:
    method: Literal["iid", "dirichlet", "dirichlet_client", "shards", "quantity", "natural"] = field(default="dirichlet",
        metadata={"doc": "how samples are split among clients (label skew, shards, sizes)"})
    alpha: float = num(0.5, gt=0, le=1e6, doc="Dirichlet concentration (smaller: more skew)")
    labels_per_client: int = num(2, ge=1, le=10**6, doc="shards: classes per client")
    sigma: float = num(1.0, ge=0, le=100, doc="quantity: log-normal spread of client sizes")
    min_size: int = num(1, ge=0, le=10**9, unit="samples", doc="smallest client dataset")
    #: ``dirichlet`` only: relative expected data size per client (one number per client); class c's shares
    #: are p_c ∝ size_weights ⊙ Dir(α), so label skew and unequal sizes combine (Co-S²P Table 7)
    size_weights: list[float] | None = field(default=None,
        metadata={"doc": "dirichlet: relative data size per client (one number per client)"})

    def validate(self, prefix: str) -> None:
        positive(self.alpha, f"{prefix}.alpha")
        positive(self.labels_per_client, f"{prefix}.labels_per_client")
        positive(self.sigma, f"{prefix}.sigma", allow_zero=True)
        positive(self.min_size, f"{prefix}.min_size", allow_zero=True)
        if self.size_weights is not None:
            require(self.method == "dirichlet", f"{prefix}.size_weights", f"only for method dirichlet, not {self.method!r}")
            require(len(self.size_weights) > 0 and all(w > 0 for w in self.size_weights), f"{prefix}.size_weights",
                    f"must be positive numbers, got {self.size_weights!r}")


@dataclass
class DataConfig:
    name: str = field(default="digits", metadata={"doc": "the dataset (built in, generated or read from data.root)",
                                                     "choices": lambda: _names("fedsim.learn.choices", "DATASETS")})
    root: str | None = field(default=None,
        metadata={"doc": "folder of a dataset read from local files (mnist, fashion_mnist, cifar10, ...)"})
    num_clients: int = num(20, ge=1, le=10**7, unit="clients", doc="clients the training set is split among")
    partition: PartitionConfig = field(default_factory=PartitionConfig)
    options: dict[str, Any] = field(default_factory=dict,
        metadata={"doc": "dataset options, e.g. synthetic's num_classes, dimension, samples; digits' test_fraction"})

    def validate(self, prefix: str) -> None:
        positive(self.num_clients, f"{prefix}.num_clients")


@dataclass
class ModelConfig:
    """The global model (see ``fedsim.learn.models.build_model``).  ``depth``: resnet20's 6n+2 or the ViT's
    number of encoder blocks; ``bn``: BatchNorm mode of resnet20 (``static``: HeteroFL's sBN, no running
    statistics; ``global``: running statistics averaged with their channels); ``options``: the ViT's
    ``embed_dim``, ``heads``, ``mlp_ratio``, ``patch``, or fragment_mlp's ``partitions``."""

    name: str = field(default="mlp", metadata={"doc": "the global model",
        "choices": lambda: _names("fedsim.learn.choices", "MODELS") + _names("fedsim.learn.choices", "REGRESSION_MODELS")})
    hidden: int | list[int] | None = num(None, ge=1, le=10**6, unit="units",
                                         doc="hidden widths (model default when null)")
    width: float = num(1.0, gt=0, le=64, doc="width multiplier")
    depth: int | None = num(None, ge=1, le=10**4, doc="resnet20's 6n+2 or the ViT's encoder blocks")
    bn: Literal["static", "global"] = field(default="static",
        metadata={"doc": "resnet20 BatchNorm: static (no running statistics) or global (averaged)"})
    options: dict[str, Any] = field(default_factory=dict,
        metadata={"doc": "the ViT's embed_dim, heads, mlp_ratio, patch; fragment_mlp's partitions"})

    def validate(self, prefix: str) -> None:
        positive(self.width, f"{prefix}.width")
        positive(self.depth, f"{prefix}.depth")


#: What ``train.device`` accepts (resolved against the machine by ``fedsim.learn.accelerator``).
DEVICE_CHOICES = "auto, cpu, cuda, cuda:N, mps"
DEVICE_PATTERN = re.compile(r"^(auto|cpu|mps|cuda(:[0-9]+)?)$")


@dataclass
class TrainConfig:
    """Local training.  ``systems_only``: no training at all; every task is costed from the real model's
    FLOPs and bytes (for timing studies and 10^5+ devices) and the model never changes.

    ``batched``: the clients of one synchronous round train together, vectorised over clients
    (``fedsim.learn.batched``); same results as one after another within float tolerance.
    ``executor``: where training runs: ``inprocess``, or ``ray`` (``pip install fedsim[ray]``) with
    ``workers`` Ray workers (None: the machine's cores) on the cluster at ``ray_address`` (None: a local
    Ray started for the run; ``auto`` or ``ray://host:10001``: an existing cluster).
    ``device``: where the in-process training computes (``auto``: CUDA, else MPS, else the CPU); the
    virtual time of every client stays a function of its device profile, never of this machine.
    ``deterministic``: torch's deterministic algorithms for the run (on a GPU: the same trace on the same
    machine and software; a GPU run is not bit-identical to a CPU run or to another GPU model)."""

    lr: float = num(0.05, gt=0, le=1e12, doc="local SGD step size")
    momentum: float = num(0.0, ge=0, lt=1, doc="SGD momentum (0: plain SGD)")
    weight_decay: float = num(0.0, ge=0, le=1e3, doc="L2 penalty of local SGD")
    batch_size: int = num(32, ge=1, le=10**7, unit="samples", doc="local minibatch size")
    local_steps: int | None = num(None, ge=1, unit="steps", doc="SGD steps per task (wins over local_epochs)")
    local_epochs: float | None = num(1.0, gt=0, le=1e6, unit="epochs",
                                     doc="passes over the client's data per task (when local_steps is null)")
    clip_norm: float | None = num(None, gt=0, doc="gradient-norm clipping of local SGD (null: none)")
    systems_only: bool = field(default=False,
                               metadata={"doc": "no training: tasks costed from the model's FLOPs and bytes"})
    batched: bool = field(default=False, metadata={"doc": "train a synchronous round's clients together, vectorised"})
    executor: Literal["inprocess", "ray"] = field(default="inprocess",
        metadata={"doc": "where training runs: in this process or on Ray workers"})
    workers: int | None = num(None, ge=1, le=4096, doc="Ray workers (null: the machine's cores)")
    ray_address: str | None = field(default=None,
                                    metadata={"doc": "Ray cluster (null: a local Ray; auto or ray://host:10001)"})
    device: str = field(default="auto", metadata={"doc": "where training computes: auto, cpu, cuda, cuda:N or mps "
                                                         "(auto: CUDA, else MPS, else the CPU)"})
    deterministic: bool = field(default=False, metadata={"doc": "torch.use_deterministic_algorithms for the run"})

    def validate(self, prefix: str) -> None:
        require(isinstance(self.device, str) and DEVICE_PATTERN.match(self.device) is not None, f"{prefix}.device",
                f"got {self.device!r} (allowed: {DEVICE_CHOICES})")
        positive(self.workers, f"{prefix}.workers")
        positive(self.lr, f"{prefix}.lr")
        positive(self.momentum, f"{prefix}.momentum", allow_zero=True)
        positive(self.weight_decay, f"{prefix}.weight_decay", allow_zero=True)
        positive(self.batch_size, f"{prefix}.batch_size")
        positive(self.local_steps, f"{prefix}.local_steps")
        positive(self.local_epochs, f"{prefix}.local_epochs")
        positive(self.clip_norm, f"{prefix}.clip_norm")
        require(
            self.local_steps is not None or self.local_epochs is not None,
            f"{prefix}.local_steps",
            "set local_steps or local_epochs",
        )


@dataclass
class DeviceGroup:
    """Clients of one device profile.  ``flops_per_s`` (a number or a [lo, hi] range drawn uniformly per
    client) replaces the profile's peak × efficiency, for papers that give compute speeds directly;
    ``memory_mb`` (MiB) replaces the profile's memory by the budget a training app may use on it, for
    studies where memory, not the device's total RAM, decides what a client can train."""

    profile: str = field(default="jetson-nano",
                         metadata={"doc": "device profile name, or a path to a profile YAML file",
        "choices": _profile_names})
    weight: float = num(1.0, gt=0, le=1e12, doc="relative share of clients")
    #: exact number of clients of this profile (all groups set it, summing to data.num_clients): the first
    #: ``count`` clients get the first group, the next ones the second, ... (no random draw)
    count: int | None = field(default=None,
                              metadata={"doc": "exact clients of this group (set on every group or none)"})
    efficiency: float | None = num(None, gt=0, le=1, doc="achieved fraction of peak FLOP/s (profile's when null)")
    power_mode: str | None = field(default=None, metadata={"doc": "the profile's power mode (null: its default)"})
    flops_per_s: float | list[float] | None = num(None, gt=0, le=1e20, unit="FLOP/s",
        doc="compute speed replacing the profile's, or [lo, hi] drawn per client")
    memory_mb: float | None = num(None, gt=0, le=1e9, unit="MiB", doc="memory budget replacing the profile's")

    def validate(self, prefix: str) -> None:
        # the profile itself is checked by scenario_from_mapping, which knows the scenario file's folder
        positive(self.weight, f"{prefix}.weight")
        positive(self.memory_mb, f"{prefix}.memory_mb")
        if self.count is not None:
            require(isinstance(self.count, int) and self.count >= 0, f"{prefix}.count",
                    f"must be an integer >= 0, got {self.count!r}")
        if self.flops_per_s is not None:
            vals = self.flops_per_s if isinstance(self.flops_per_s, list) else [self.flops_per_s]
            require(len(vals) in (1, 2) and all(v > 0 for v in vals), f"{prefix}.flops_per_s",
                    f"must be a positive number or [lo, hi], got {self.flops_per_s!r}")
            require(vals[0] <= vals[-1], f"{prefix}.flops_per_s",
                    f"got {self.flops_per_s!r} (allowed: [lo, hi] with lo <= hi)")
        if self.efficiency is not None:
            require(0 < self.efficiency <= 1, f"{prefix}.efficiency", f"must be in (0, 1], got {self.efficiency!r}")


@dataclass
class CapabilityConfig:
    """Relative compute capabilities at two levels, as Fed-RAA's β study sets them: round(β·N) clients
    (a permutation drawn from the stream ``("capability",)``) run at ``levels[0]`` × ``unit_flops_per_s``,
    the others at ``levels[1]`` × ``unit_flops_per_s``.  Replaces the device groups' speed (their
    profiles still give power and memory); jitter applies as for any device.  Because the fraction is
    exact, the draw depends on the number of clients."""

    levels: list[float] = num(default_factory=lambda: [1.0, 3.0], gt=0, le=1e6,
                              doc="[slow, fast] multiples of the unit")
    beta: float = num(0.3, ge=0, le=1, doc="fraction of clients at the first level")
    unit_flops_per_s: float = num(1e8, gt=0, le=1e20, unit="FLOP/s", doc="compute speed of capability level 1")

    def validate(self, prefix: str) -> None:
        require(len(self.levels) == 2 and all(v > 0 for v in self.levels), f"{prefix}.levels",
                f"must be two positive numbers [slow, fast], got {self.levels!r}")
        require(0.0 <= self.beta <= 1.0, f"{prefix}.beta", f"must be in [0, 1], got {self.beta!r}")
        positive(self.unit_flops_per_s, f"{prefix}.unit_flops_per_s")


@dataclass
class DevicesConfig:
    """Which device profile each client gets: a weighted mix, drawn per client from its own stream."""

    mix: list[DeviceGroup] = field(
        default_factory=lambda: [DeviceGroup("jetson-nano"), DeviceGroup("jetson-xavier-nx-8gb"), DeviceGroup("jetson-agx-orin-32gb")]
    )
    jitter: float = num(0.1, ge=0, le=5, doc="log-normal spread of each task's compute time")
    check_memory: bool = field(default=True, metadata={"doc": "refuse a model that does not fit a device's memory"})
    capability: CapabilityConfig | None = None

    def validate(self, prefix: str) -> None:
        require(len(self.mix) > 0, f"{prefix}.mix", "needs at least one device group")
        counted = [g.count is not None for g in self.mix]
        require(all(counted) or not any(counted), f"{prefix}.mix",
                "set count on every device group or on none")
        positive(self.jitter, f"{prefix}.jitter", allow_zero=True)


@dataclass
class LinkConfig(LinkPhysics):
    """One direction of every client's link: the physical fields of ``fedsim.system.channel.LinkPhysics``
    (declared there once) with rates stated in Mbit/s.

    Rate-only models: ``fixed`` (``mbps``; a [lo, hi] range gives each client its own rate, drawn
    log-uniformly once), ``uniform_rate`` (uniform in ``mbps`` = [lo, hi], redrawn per transmission or
    per client) and ``ideal`` (no transfer time).  Path-loss models (``free_space``, ``log_distance``,
    ``tr36814``, ``tr38901_umi``, ``tr38901_uma``) give a Shannon rate from the client's distance.
    """

    model: str = field(default="fixed",
                       metadata={"doc": "rate-only (fixed, uniform_rate, ideal) or path-loss link model",
        "choices": lambda: _names("fedsim.system.channel", "PATHLOSS_MODELS")})
    mbps: float | list[float] | None = num(None, gt=0, le=1e9, unit="Mbit/s",
                                           doc="fixed/uniform_rate: a rate, or [lo, hi] drawn per client")
    redraw: Literal["per_transmission", "per_client"] = field(default="per_transmission",
        metadata={"doc": "uniform_rate: draw a new rate per transmission or once per client"})

    def validate(self, prefix: str) -> None:
        from fedsim.system.channel import FADING_MODELS

        require(is_channel_model(self.model), f"{prefix}.model",
                f"got {self.model!r} (allowed: {', '.join(PATHLOSS_MODELS)}; or module:attribute for your own)")
        require(self.fading in FADING_MODELS, f"{prefix}.fading", f"got {self.fading!r} (allowed: {', '.join(FADING_MODELS)})")
        if self.model in ("fixed", "uniform_rate"):
            values = self.mbps if isinstance(self.mbps, list) else [self.mbps]
            require(self.mbps is not None, f"{prefix}.mbps", f"model {self.model!r} needs mbps (a number or [lo, hi])")
            require(len(values) in (1, 2), f"{prefix}.mbps", f"must be a number or [lo, hi], got {self.mbps!r}")
            for v in values:
                positive(v, f"{prefix}.mbps")
            if len(values) == 2:
                require(values[0] <= values[1], f"{prefix}.mbps", f"lo must be <= hi, got {self.mbps!r}")
        for name in ("frequency_hz", "bandwidth_hz", "tx_power_w", "noise_psd_w_hz", "d0_m", "exponent"):
            positive(getattr(self, name), f"{prefix}.{name}")
        positive(self.shadowing_db, f"{prefix}.shadowing_db", allow_zero=True)

    def mapping_fields(self) -> list[str]:
        """Only the fields this link model reads go into the resolved scenario."""
        return link_fields_in_effect(self.model, self.fading)


PATHLOSS_MODELS_ALL = PATHLOSS_MODELS
#: Link fields each kind of link model uses; a field given under a model that ignores it is an error.  A user's
#: path-loss model (``module:attribute``, :data:`USER_MODEL` here) reads the generic physical fields.
FIELD_MODELS: dict[str, tuple[str, ...]] = {
    "mbps": ("fixed", "uniform_rate"),
    "redraw": ("uniform_rate",),
    **{f: (*CHANNEL_MODELS, USER_MODEL) for f in PHYSICAL_FIELDS},
    "tx_power_w": (*PATHLOSS_MODELS_ALL, USER_MODEL),  # SNR under path loss; transmit energy under every model
    "exponent": ("log_distance",), "pl0_db": ("log_distance",), "d0_m": ("log_distance",),
    "h_bs": ("tr38901_umi", "tr38901_uma"), "h_ut": ("tr38901_umi", "tr38901_uma"), "los": ("tr38901_umi", "tr38901_uma"),
}


def link_fields_in_effect(model: str, fading: str = "none") -> list[str]:
    """The LinkConfig fields that ``model`` reads (``model`` and ``fading`` always shown for path-loss models)."""
    out = ["model"]
    model = model if model in PATHLOSS_MODELS else USER_MODEL
    for f in (fl.name for fl in dataclasses.fields(LinkConfig)):
        if f == "model":
            continue
        if f == "rician_k_db" and fading != "rician":
            continue
        if model in FIELD_MODELS.get(f, ()):
            out.append(f)
    return out


def _models_using(users: Sequence[str]) -> str:
    """The models that read a field, for an error line: the built-in names, then a user model by its form."""
    named = [u for u in users if u != USER_MODEL]
    return ", ".join(named) + (" or a user model (module:attribute)" if USER_MODEL in users else "")


def check_link_effect(raw_link: Any, model: str, field: str) -> None:
    """A link field the chosen model never reads is an error naming the models that would use it."""
    if not isinstance(raw_link, Mapping):
        return
    fading = raw_link.get("fading", "none")
    model = model if not isinstance(model, str) or model in PATHLOSS_MODELS else USER_MODEL
    for key in raw_link:
        if key == "model" or key not in FIELD_MODELS:
            continue
        users = FIELD_MODELS[key]
        if model not in users:
            raise ConfigError(f"{field}.{key}", f"has no effect under link model '{model}' (only {_models_using(users)} "
                              f"use it); set {field}.model to one of them or drop {key}")
        if key == "rician_k_db" and fading != "rician":
            raise ConfigError(f"{field}.rician_k_db", f"has no effect with fading '{fading}' (only fading 'rician' uses it)")


@dataclass
class PositionsConfig:
    """Where clients are (base station at the origin).  ``auto``: the preset's placement, else an annulus."""

    kind: Literal["auto", "annulus", "uniform_distance", "fixed", "file"] = field(default="auto",
        metadata={"doc": "where clients are placed around the base station"})
    r_min_m: float = num(10.0, ge=0, le=1e7, unit="m", doc="annulus/uniform_distance: nearest client distance")
    r_max_m: float = num(500.0, gt=0, le=1e7, unit="m", doc="annulus/uniform_distance: farthest client distance")
    points: list[list[float]] | None = field(default=None,
                                             metadata={"doc": "fixed: [[x, y], ...] per client, in metres"})
    path: str | None = field(default=None, metadata={"doc": "file: CSV with columns x,y (metres), one row per client"})

    def validate(self, prefix: str) -> None:
        positive(self.r_min_m, f"{prefix}.r_min_m", allow_zero=True)
        positive(self.r_max_m, f"{prefix}.r_max_m")
        require(self.r_min_m <= self.r_max_m, f"{prefix}.r_min_m", "must be <= r_max_m")
        require(self.kind != "fixed" or self.points is not None, f"{prefix}.points", "kind 'fixed' needs points: [[x, y], ...]")
        require(self.kind != "file" or self.path is not None, f"{prefix}.path", "kind 'file' needs a CSV path with columns x,y")


@dataclass
class MobilityConfig:
    """``random_waypoint`` moves clients in the disc of radius positions.r_max_m, so distance changes."""

    kind: Literal["none", "random_waypoint"] = field(default="none",
                                                     metadata={"doc": "client movement (changes path-loss distance)"})
    speed_mps: list[float] = num(default_factory=lambda: [0.5, 1.5], gt=0, le=1000, unit="m/s",
                                 doc="random_waypoint: [lo, hi] walking speed")
    pause_s: float = num(0.0, ge=0, le=1e9, unit="s", doc="random_waypoint: pause at each waypoint")

    def validate(self, prefix: str) -> None:
        require(len(self.speed_mps) == 2 and 0 < self.speed_mps[0] <= self.speed_mps[1], f"{prefix}.speed_mps",
                f"must be [lo, hi] with 0 < lo <= hi, got {self.speed_mps!r}")
        positive(self.pause_s, f"{prefix}.pause_s", allow_zero=True)


@dataclass
class ChannelSection:
    """The radio: a named preset (``gas-cell``, ``semisfl-edge``, ``fixed``) or explicit up/down links.

    A direction given explicitly replaces the preset's for that direction.  Without preset or explicit
    links, uplink is fixed 2–20 Mbit/s and downlink fixed 10–50 Mbit/s per client (log-uniform draws).
    """

    preset: str | None = field(default=None, metadata={"doc": "a named radio setting for both directions",
        "choices": lambda: _names("fedsim.system.channel", "CHANNEL_PRESETS")})
    uplink: LinkConfig | None = None
    downlink: LinkConfig | None = None
    positions: PositionsConfig = field(default_factory=PositionsConfig)
    mobility: MobilityConfig = field(default_factory=MobilityConfig)

    def __post_init__(self) -> None:
        """Without a preset, a direction not given is the default fixed-rate link, written out, so the
        resolved scenario (``fedsim show``, a run's scenario.yaml) says what the run used."""
        if self.preset is None:
            if self.uplink is None:
                self.uplink = LinkConfig(model="fixed", mbps=list(DEFAULT_UPLINK_MBPS))
            if self.downlink is None:
                self.downlink = LinkConfig(model="fixed", mbps=list(DEFAULT_DOWNLINK_MBPS))

    def mapping_fields(self) -> list[str]:
        """A direction the preset gives is not shown as null: the preset's name says what it is."""
        return [f.name for f in dataclasses.fields(self) if getattr(self, f.name) is not None or f.name == "preset"]

    def validate(self, prefix: str) -> None:
        from fedsim.system.channel import CHANNEL_PRESETS

        if self.preset is not None:
            require(self.preset in CHANNEL_PRESETS, f"{prefix}.preset",
                    f"unknown preset {shown(self.preset)} (allowed: {', '.join(CHANNEL_PRESETS)})")
        models = []
        for direction in ("uplink", "downlink"):
            link = getattr(self, direction)
            if link is not None:
                models.append(link.model)
            elif self.preset is not None:
                models.append(getattr(CHANNEL_PRESETS[self.preset], direction).model)
            else:
                models.append("fixed")
        if all(m in RATE_ONLY_MODELS for m in models):
            # distance matters only to path-loss links: positions and mobility would silently do nothing
            if self.mobility.kind != "none":
                raise ConfigError(f"{prefix}.mobility.kind", f"got {self.mobility.kind!r}, but both links are rate-only "
                                  f"({models[0]}/{models[1]}); movement changes only the distance, which the path-loss "
                                  "link models use (set channel.uplink.model, e.g. log_distance, or a preset such as gas-cell)")
            if self.positions.kind != "auto":
                raise ConfigError(f"{prefix}.positions.kind", f"got {self.positions.kind!r}, but both links are rate-only "
                                  f"({models[0]}/{models[1]}); positions matter only to path-loss link models")


@dataclass
class TopologyConfig:
    """``star``: every client talks to the server.  ``hierarchical``: clients → edge server/AP (assigned
    uniformly at random per client) → cloud over a FIFO backhaul link with its own rate and latency."""

    kind: Literal["star", "hierarchical"] = field(default="star",
        metadata={"doc": "star (clients to server) or hierarchical (via edge servers)"})
    edge_servers: int = num(2, ge=1, le=10**6, doc="hierarchical: edge servers / access points")
    backhaul_mbps: float = num(1000.0, gt=0, le=1e9, unit="Mbit/s", doc="hierarchical: edge-to-cloud link rate")
    backhaul_latency_s: float = num(0.005, ge=0, le=1e6, unit="s", doc="hierarchical: edge-to-cloud one-way latency")

    def validate(self, prefix: str) -> None:
        positive(self.edge_servers, f"{prefix}.edge_servers")
        positive(self.backhaul_mbps, f"{prefix}.backhaul_mbps")
        positive(self.backhaul_latency_s, f"{prefix}.backhaul_latency_s", allow_zero=True)


@dataclass
class NetworkConfig:
    """How transfers share the medium and cross the network.

    ``access`` (uplink) and ``downlink_access``: ``dedicated`` links, ``fdma`` (the band split equally
    among the clients scheduled at once), ``tdma`` (transfers serialised, FIFO) or ``processor_sharing``
    (concurrent transfers share the band, rates change as transfers start and end).
    """

    access: Literal["dedicated", "fdma", "tdma", "processor_sharing"] = field(default="dedicated",
        metadata={"doc": "how uplink transfers share the medium"})
    downlink_access: Literal["dedicated", "fdma", "tdma", "processor_sharing"] = field(default="dedicated",
        metadata={"doc": "how downlink transfers share the medium"})
    latency_s: float = num(0.01, ge=0, le=1e6, unit="s", doc="one-way latency of every transfer")
    topology: TopologyConfig = field(default_factory=TopologyConfig)

    def validate(self, prefix: str) -> None:
        positive(self.latency_s, f"{prefix}.latency_s", allow_zero=True)


@dataclass
class AvailabilityConfig:
    """When clients are reachable: ``always``, ``bernoulli`` (online with probability p per round, or
    per ``slot_s`` seconds), ``exponential`` on/off sessions, or ``trace`` (CSV client,start,end of online
    intervals).  A client that goes offline mid-task loses that task (recorded as a drop)."""

    model: Literal["always", "bernoulli", "exponential", "trace"] = field(default="always",
        metadata={"doc": "when clients are reachable"})
    p: float = num(0.8, gt=0, le=1, doc="bernoulli: probability of being online")
    slot_s: float | None = num(None, gt=0, le=1e12, unit="s",
                               doc="bernoulli: redraw every slot_s seconds (null: per round)")
    mean_on_s: float = num(600.0, gt=0, le=1e12, unit="s", doc="exponential: mean online session")
    mean_off_s: float = num(60.0, gt=0, le=1e12, unit="s", doc="exponential: mean offline gap")
    path: str | None = field(default=None, metadata={"doc": "trace: CSV client,start,end of online intervals"})

    def validate(self, prefix: str) -> None:
        require(0 < self.p <= 1, f"{prefix}.p", f"must be in (0, 1], got {self.p!r}")
        positive(self.slot_s, f"{prefix}.slot_s")
        positive(self.mean_on_s, f"{prefix}.mean_on_s")
        positive(self.mean_off_s, f"{prefix}.mean_off_s")
        require(self.model != "trace" or self.path is not None, f"{prefix}.path", "model 'trace' needs a CSV path")


@dataclass
class ServerConfig:
    """The server: ``workers`` parallel SimPy slots; aggregation costs FLOPs on ``profile``."""

    profile: str = field(default="rtx-3090", metadata={"doc": "device profile of the server (aggregation FLOPs)",
        "choices": _profile_names})
    workers: int = num(1, ge=1, le=4096, doc="parallel server slots")
    overhead_s: float = num(0.002, ge=0, le=1e6, unit="s", doc="fixed time per server job")
    efficiency: float | None = num(None, gt=0, le=1, doc="achieved fraction of the profile's peak")

    def validate(self, prefix: str) -> None:
        positive(self.workers, f"{prefix}.workers")
        positive(self.overhead_s, f"{prefix}.overhead_s", allow_zero=True)


@dataclass
class StopConfig:
    """The run stops at the first condition reached.  There is no hidden default: a scenario names its stop
    rules, and at least one of max_versions, max_time_s, max_updates must be set (target_accuracy alone
    may never be reached)."""

    max_versions: int | None = num(None, ge=1, unit="versions", doc="stop at this many global model versions")
    max_time_s: float | None = num(None, gt=0, unit="s", doc="virtual time")
    target_accuracy: float | None = num(None, gt=0, le=1, doc="stop when test accuracy reaches this")
    max_updates: int | None = num(None, ge=1, unit="updates", doc="stop after this many applied client updates")

    def validate(self, prefix: str) -> None:
        positive(self.max_versions, f"{prefix}.max_versions")
        positive(self.max_time_s, f"{prefix}.max_time_s")
        positive(self.max_updates, f"{prefix}.max_updates")
        if self.target_accuracy is not None:
            require(0 < self.target_accuracy <= 1, f"{prefix}.target_accuracy",
                    f"got {self.target_accuracy!r} (allowed: in (0, 1])")
        require(
            any(v is not None for v in (self.max_versions, self.max_time_s, self.max_updates)),
            prefix or "stop",
            "set max_versions, max_time_s or max_updates so the run ends",
        )


@dataclass
class EvalConfig:
    """Global test accuracy every ``every_versions`` model versions and/or every ``every_s`` seconds.

    ``probe_every``: also measure the theory probes (gradient norms, dissimilarity, σ², L; see
    ``analysis.probes``) on the live global model at version 0, every ``probe_every`` versions and at the
    final version, into ``probes_live.csv``.  Probes cost no virtual time and change nothing in the run.
    """

    every_versions: int | None = num(1, ge=1, unit="versions", doc="evaluate every N model versions")
    every_s: float | None = num(None, gt=0, unit="s", doc="virtual time")
    max_samples: int | None = num(None, ge=1, unit="samples", doc="test samples per evaluation (null: all)")
    per_client: bool = field(default=False, metadata={"doc": "also evaluate on each client's data"})
    batch_size: int = num(1024, ge=1, le=10**7, unit="samples", doc="evaluation batch size (memory, not results)")
    probe_every: int | None = num(None, ge=1, unit="versions",
                                  doc="measure theory probes every N versions (probes_live.csv)")
    #: Models with static BatchNorm (``model.bn: static``) normalise at evaluation with the statistics of
    #: each evaluation batch (``batch``), or with statistics the server gathers from the clients' training
    #: samples for the model it evaluates (``train``: HeteroFL's sBN query; ``bn_samples`` of them, drawn
    #: once, or all when unset; costs no virtual time, like evaluation itself).
    bn_stats: Literal["batch", "train"] = field(default="batch",
        metadata={"doc": "static BatchNorm at evaluation: batch or train statistics"})
    bn_samples: int | None = num(1024, ge=1, unit="samples",
                                 doc="bn_stats train: samples the statistics are gathered from")

    def validate(self, prefix: str) -> None:
        positive(self.bn_samples, f"{prefix}.bn_samples")
        positive(self.every_versions, f"{prefix}.every_versions")
        positive(self.probe_every, f"{prefix}.probe_every")
        positive(self.every_s, f"{prefix}.every_s")
        positive(self.max_samples, f"{prefix}.max_samples")
        positive(self.batch_size, f"{prefix}.batch_size")


@dataclass
class OutputConfig:
    """``trace_format``: ``jsonl`` (trace.jsonl) or ``compact`` (trace.compact.gz, values only, gzip; for
    millions of events, see ``fedsim.sim.trace``).  ``checkpoints``: save the global state every N model versions (plus version 0 and the final one)
    to ``checkpoints/v{version:06d}.pt``, so probes can be measured after the run (``fedsim check``)."""

    dir: str = field(default="runs", metadata={"doc": "parent folder of runs without --out"})
    figures: bool = field(default=True, metadata={"doc": "draw figures and report.html after the run"})
    flush_every: int = num(256, ge=1, le=10**9, unit="events", doc="trace records buffered before a write")
    trace_format: Literal["jsonl", "compact"] = field(default="jsonl",
        metadata={"doc": "jsonl (readable) or compact (gzip, for millions of events)"})
    checkpoints: int | None = num(None, ge=1, unit="versions",
                                  doc="save the global model every N versions (fedsim check probes them)")
    timeline_window: list[float] | None = num(None, ge=0, unit="s",
                                              doc="[start, end] of virtual time the timeline figure shows "
                                                  "(default: the whole run)")
    timeline_clients: int = num(30, ge=1, le=1000, unit="clients", doc="clients (rows) the timeline shows")

    def validate(self, prefix: str) -> None:
        positive(self.flush_every, f"{prefix}.flush_every")
        positive(self.checkpoints, f"{prefix}.checkpoints")
        if self.timeline_window is not None:
            w = self.timeline_window
            require(len(w) == 2 and w[0] < w[1], f"{prefix}.timeline_window",
                    f"got {w!r} (allowed: [start, end] in seconds of virtual time with start < end)")


SECTIONS: dict[str, type] = {
    "data": DataConfig,
    "model": ModelConfig,
    "train": TrainConfig,
    "devices": DevicesConfig,
    "channel": ChannelSection,
    "network": NetworkConfig,
    "availability": AvailabilityConfig,
    "server": ServerConfig,
    "stop": StopConfig,
    "eval": EvalConfig,
    "output": OutputConfig,
}
TOP_LEVEL = ("name", "seed", "algorithm", *SECTIONS, "modules")


#: ``resolve(name, field, base_dirs) -> Algorithm class``: how a scenario finds the class an algorithm name
#: stands for.  The layer that owns the algorithms passes it in (``fedsim.algorithms.resolve``, which
#: ``fedsim.load_scenario`` uses): this module never imports the algorithms.
AlgorithmResolver = Callable[[Any, str, tuple], type]


@dataclass
class AlgorithmSpec:
    """An algorithm by name (built-in, installed, or ``module:Class``) with its own validated parameter
    dataclass; ``cls`` is the class the name resolved to."""

    name: str
    params: Any
    label: str
    #: the class, or a handle that imports it on first use (``load()``: a built-in, known by its Config alone
    #: until a run needs it, so loading and showing a scenario imports no algorithm code)
    source: Any = field(default=None, compare=False, repr=False)

    @property
    def cls(self) -> Any:
        """The algorithm class (imported now if the scenario named a built-in)."""
        load = getattr(self.source, "load", None)
        return load() if load is not None else self.source

    def as_mapping(self) -> dict[str, Any]:
        out = {"name": self.name}
        if self.label != self.name:
            out["label"] = self.label
        out.update(to_mapping(self.params))
        return out


@dataclass
class Scenario:
    name: str = "scenario"
    seed: int = 0
    algorithms: list[AlgorithmSpec] = field(default_factory=list)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    devices: DevicesConfig = field(default_factory=DevicesConfig)
    channel: ChannelSection = field(default_factory=ChannelSection)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    availability: AvailabilityConfig = field(default_factory=AvailabilityConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    stop: StopConfig = field(default_factory=StopConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    #: the folder of the scenario file (None: a built-in or a mapping): ``module:attribute`` references and
    #: relative profile paths are looked up there first
    source_dir: Path | None = field(default=None, compare=False, repr=False)
    #: each user module a ``module:attribute`` reference imported: ``{path, sha256}`` where it was found (written
    #: to a run's scenario.yaml, so the run repeats from any folder and says when the file has changed since)
    modules: dict[str, dict[str, str]] = field(default_factory=dict, compare=False, repr=False)

    def as_mapping(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "seed": self.seed}
        algs = [a.as_mapping() for a in self.algorithms]
        out["algorithm"] = algs[0] if len(algs) == 1 else algs
        for key in SECTIONS:
            out[key] = to_mapping(getattr(self, key))
        if self.modules:
            out["modules"] = {k: dict(v) for k, v in self.modules.items()}
        return out

    def variant(self, spec: AlgorithmSpec) -> "Scenario":
        """This scenario restricted to one algorithm."""
        return dataclasses.replace(self, algorithms=[spec])


#: An algorithm label names the run's sub-folder: a plain name, so a shared scenario never writes outside --out.
LABEL = re.compile(r"[A-Za-z0-9._-]{1,100}")


def check_label(label: Any, field: str) -> None:
    """Refuse a label that is not a plain folder name (``../x``, ``/abs``, ``a/b``, ``.``, ``..``)."""
    if not isinstance(label, str) or not LABEL.fullmatch(label) or label in (".", ".."):
        raise ConfigError(field, f"got {shown(label)} (allowed: a name of 1-100 letters, digits, '.', '_' or '-', "
                          "not '.' or '..'; it names the algorithm's sub-folder of the run)")


@dataclass(frozen=True)
class Plausible:
    """The physically plausible range of a field, narrower than what it allows: a value outside it is
    most likely a unit slip (bit/s written as Mbit/s, GHz as Hz, ms as s), so it runs with one warning."""

    lo: float
    hi: float
    unit: str
    why: str


_RATE = Plausible(1e-4, 4e5, "Mbit/s", "100 bit/s, below LoRa's slowest rate, to 400 Gbit/s Ethernet, IEEE 802.3bs")
_LATENCY = Plausible(0.0, 1.0, "s", "a geostationary satellite hop is about 0.25 s one way")
_FLOPS = Plausible(1e6, 1e16, "FLOP/s", "a microcontroller to a datacentre GPU: a Jetson Nano peaks at 4.7e11 FP16, "
                   "a Raspberry Pi 4 measures 8e9 (device_profiles/)")
#: Physically plausible ranges of the fields where a unit slip is likely (``*``: any link direction or
#: device group).  Small on purpose: each range is a fact with its source, not a guess about a study.
#: Radio: 30 MHz to 300 GHz is VHF to EHF (ITU-R V.431); TR 38.901 itself is valid in 0.5-100 GHz.
#: Bandwidth: 10 kHz (below NB-IoT's 180 kHz) to 10 GHz (above 802.11ad's 2.16 GHz channels).
PLAUSIBLE: dict[str, Plausible] = {
    "channel.*.mbps": _RATE,
    "network.topology.backhaul_mbps": _RATE,
    "channel.*.frequency_hz": Plausible(3e7, 3e11, "Hz", "VHF to EHF, 30 MHz to 300 GHz"),
    "channel.*.bandwidth_hz": Plausible(1e4, 1e10, "Hz", "10 kHz to 10 GHz: NB-IoT's 180 kHz to 802.11ad's 2.16 GHz"),
    "network.latency_s": _LATENCY,
    "network.topology.backhaul_latency_s": _LATENCY,
    "devices.mix[*].flops_per_s": _FLOPS,
    "devices.capability.unit_flops_per_s": _FLOPS,
}


def plausibility_warnings(scenario: "Scenario") -> list[str]:
    """One line per field of ``scenario`` (as resolved) whose value lies outside its :data:`PLAUSIBLE`
    range: the field, the value and the plausible range with its reason.  Such a value is allowed (its
    domain holds it), so these are warnings, said once every check has passed."""
    import fnmatch

    lines: list[str] = []
    stack: list[tuple[str, Any]] = [(key, to_mapping(getattr(scenario, key))) for key in reversed(SECTIONS)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            stack.extend((f"{path}.{k}", v) for k, v in reversed(list(value.items())))
            continue
        pattern = re.sub(r"\[\d+\]", "[*]", path)
        rule = next((r for pat, r in PLAUSIBLE.items() if fnmatch.fnmatchcase(pattern, pat.replace("[*]", "[[]*[]]"))),
                    None)
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            stack.extend((f"{path}[{i}]", v) for i, v in reversed(list(enumerate(value))))
            continue
        if rule is None or value is None:
            continue
        values = value if isinstance(value, list) else [value]
        bad = [v for v in values if isinstance(v, (int, float)) and not rule.lo <= v <= rule.hi]
        if bad:
            lines.append(f"{path}: {', '.join(f'{v:g}' for v in bad)} {rule.unit} is outside the physically plausible "
                         f"range [{rule.lo:g}, {rule.hi:g}] {rule.unit} ({rule.why}); allowed, but check its unit")
    return lines


def warn_implausible(scenarios: "list[Scenario]") -> None:
    """Say :func:`plausibility_warnings` on stderr, ``fedsim: warning: ...``, each line once however many
    scenarios (a sweep's points) have it.  Call it only once every check has passed, so a refusal is
    never preceded by a warning."""
    import sys

    for line in dict.fromkeys(line for sc in scenarios for line in plausibility_warnings(sc)):
        print(f"fedsim: warning: {line}", file=sys.stderr, flush=True)


