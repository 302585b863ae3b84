"""Scenarios: what to simulate, as validated dataclasses loaded from YAML.

A scenario has one section per layer (data, model, train, devices, channel, network, availability,
server, algorithm, stop, eval, output).  Every field has a default, so ``{}`` is a valid scenario; the built-in scenarios live in
``fedsim/scenarios/*.yaml``.  ``key=value`` overrides address fields with dotted paths
(``algorithm.buffer_size=5``, ``data.partition.alpha=0.1``).  ``algorithm`` may also be a list of
algorithm mappings: the scenario then runs each variant on the same world and data.
"""
from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Mapping

import yaml

from fedsim.config import coerce, from_mapping, positive, require, to_mapping
from fedsim.errors import ConfigError


@dataclass
class PartitionConfig:
    method: Literal["iid", "dirichlet", "shards", "quantity", "natural"] = "dirichlet"
    alpha: float = 0.5
    labels_per_client: int = 2
    sigma: float = 1.0
    min_size: int = 1
    #: ``dirichlet`` only: relative expected data size per client (one number per client); class c's shares
    #: are p_c ∝ size_weights ⊙ Dir(α), so label skew and unequal sizes combine (Co-S²P Table 7)
    size_weights: list[float] | None = None

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
    name: str = "digits"
    root: str | None = None
    num_clients: int = 20
    partition: PartitionConfig = field(default_factory=PartitionConfig)
    options: dict[str, Any] = field(default_factory=dict)

    def validate(self, prefix: str) -> None:
        positive(self.num_clients, f"{prefix}.num_clients")


@dataclass
class ModelConfig:
    """The global model (see ``fedsim.learn.models.build_model``).  ``depth``: resnet20's 6n+2 or the ViT's
    number of encoder blocks; ``bn``: BatchNorm mode of resnet20 (``static``: HeteroFL's sBN, no running
    statistics; ``global``: running statistics averaged with their channels); ``options``: the ViT's
    ``embed_dim``, ``heads``, ``mlp_ratio``, ``patch``, or fragment_mlp's ``partitions``."""

    name: str = "mlp"
    hidden: int | list[int] | None = None
    width: float = 1.0
    depth: int | None = None
    bn: Literal["static", "global"] = "static"
    options: dict[str, Any] = field(default_factory=dict)

    def validate(self, prefix: str) -> None:
        positive(self.width, f"{prefix}.width")
        positive(self.depth, f"{prefix}.depth")


@dataclass
class TrainConfig:
    """Local training.  ``systems_only``: no training at all; every task is costed from the real model's
    FLOPs and bytes (for timing studies and 10^5+ devices) and the model never changes.

    ``batched``: the clients of one synchronous round train together, vectorised over clients
    (``fedsim.learn.batched``); same results as one after another within float tolerance.
    ``executor``: where training runs: ``inprocess``, or ``ray`` (``pip install fedsim[ray]``) with
    ``workers`` Ray workers (None: the machine's cores) on the cluster at ``ray_address`` (None: a local
    Ray started for the run; ``auto`` or ``ray://host:10001``: an existing cluster)."""

    lr: float = 0.05
    momentum: float = 0.0
    weight_decay: float = 0.0
    batch_size: int = 32
    local_steps: int | None = None
    local_epochs: float | None = 1.0
    clip_norm: float | None = None
    systems_only: bool = False
    batched: bool = False
    executor: Literal["inprocess", "ray"] = "inprocess"
    workers: int | None = None
    ray_address: str | None = None

    def validate(self, prefix: str) -> None:
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

    profile: str = "jetson-nano"
    weight: float = 1.0
    #: exact number of clients of this profile (all groups set it, summing to data.num_clients): the first
    #: ``count`` clients get the first group, the next ones the second, ... (no random draw)
    count: int | None = None
    efficiency: float | None = None
    power_mode: str | None = None
    flops_per_s: float | list[float] | None = None
    memory_mb: float | None = None

    def validate(self, prefix: str) -> None:
        positive(self.weight, f"{prefix}.weight")
        positive(self.memory_mb, f"{prefix}.memory_mb")
        if self.count is not None:
            require(isinstance(self.count, int) and self.count >= 0, f"{prefix}.count",
                    f"must be an integer >= 0, got {self.count!r}")
        if self.flops_per_s is not None:
            vals = self.flops_per_s if isinstance(self.flops_per_s, list) else [self.flops_per_s]
            require(len(vals) in (1, 2) and all(v > 0 for v in vals), f"{prefix}.flops_per_s",
                    f"must be a positive number or [lo, hi], got {self.flops_per_s!r}")
        if self.efficiency is not None:
            require(0 < self.efficiency <= 1, f"{prefix}.efficiency", f"must be in (0, 1], got {self.efficiency!r}")


@dataclass
class CapabilityConfig:
    """Relative compute capabilities at two levels, as Fed-RAA's β study sets them: round(β·N) clients
    (a permutation drawn from the stream ``("capability",)``) run at ``levels[0]`` × ``unit_flops_per_s``,
    the others at ``levels[1]`` × ``unit_flops_per_s``.  Replaces the device groups' speed (their
    profiles still give power and memory); jitter applies as for any device.  Because the fraction is
    exact, the draw depends on the number of clients."""

    levels: list[float] = field(default_factory=lambda: [1.0, 3.0])
    beta: float = 0.3
    unit_flops_per_s: float = 1e8

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
    jitter: float = 0.1
    check_memory: bool = True
    capability: CapabilityConfig | None = None

    def validate(self, prefix: str) -> None:
        require(len(self.mix) > 0, f"{prefix}.mix", "needs at least one device group")
        counted = [g.count is not None for g in self.mix]
        require(all(counted) or not any(counted), f"{prefix}.mix",
                "set count on every device group or on none")
        positive(self.jitter, f"{prefix}.jitter", allow_zero=True)


@dataclass
class LinkConfig:
    """One direction of every client's link (the fields of ``fedsim.system.channel.ChannelConfig``).

    Rate-only models: ``fixed`` (``mbps``; a [lo, hi] range gives each client its own rate, drawn
    log-uniformly once), ``uniform_rate`` (uniform in ``mbps`` = [lo, hi], redrawn per transmission or
    per client) and ``ideal`` (no transfer time).  Path-loss models (``free_space``, ``log_distance``,
    ``tr36814``, ``tr38901_umi``, ``tr38901_uma``) give a Shannon rate from the client's distance.
    """

    model: str = "fixed"
    mbps: float | list[float] | None = None
    redraw: Literal["per_transmission", "per_client"] = "per_transmission"
    frequency_hz: float = 2.0e9
    bandwidth_hz: float = 10e6
    tx_power_w: float = 0.2
    noise_psd_w_hz: float = 3.981e-21
    noise_figure_db: float = 0.0
    shadowing_db: float | None = 0.0
    fading: str = "none"
    rician_k_db: float = 9.0
    los: Literal["auto", "los", "nlos"] = "auto"
    exponent: float = 3.0
    pl0_db: float = 40.0
    d0_m: float = 1.0
    h_bs: float | None = None
    h_ut: float = 1.5

    def validate(self, prefix: str) -> None:
        from fedsim.system.channel import FADING_MODELS, PATHLOSS_MODELS

        require(self.model in PATHLOSS_MODELS, f"{prefix}.model", f"got {self.model!r} (allowed: {', '.join(PATHLOSS_MODELS)})")
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


@dataclass
class PositionsConfig:
    """Where clients are (base station at the origin).  ``auto``: the preset's placement, else an annulus."""

    kind: Literal["auto", "annulus", "uniform_distance", "fixed", "file"] = "auto"
    r_min_m: float = 10.0
    r_max_m: float = 500.0
    points: list[list[float]] | None = None
    path: str | None = None

    def validate(self, prefix: str) -> None:
        positive(self.r_min_m, f"{prefix}.r_min_m", allow_zero=True)
        positive(self.r_max_m, f"{prefix}.r_max_m")
        require(self.r_min_m <= self.r_max_m, f"{prefix}.r_min_m", "must be <= r_max_m")
        require(self.kind != "fixed" or self.points is not None, f"{prefix}.points", "kind 'fixed' needs points: [[x, y], ...]")
        require(self.kind != "file" or self.path is not None, f"{prefix}.path", "kind 'file' needs a CSV path with columns x,y")


@dataclass
class MobilityConfig:
    """``random_waypoint`` moves clients in the disc of radius positions.r_max_m, so distance changes."""

    kind: Literal["none", "random_waypoint"] = "none"
    speed_mps: list[float] = field(default_factory=lambda: [0.5, 1.5])
    pause_s: float = 0.0

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

    preset: str | None = None
    uplink: LinkConfig | None = None
    downlink: LinkConfig | None = None
    positions: PositionsConfig = field(default_factory=PositionsConfig)
    mobility: MobilityConfig = field(default_factory=MobilityConfig)

    def validate(self, prefix: str) -> None:
        if self.preset is not None:
            from fedsim.system.channel import CHANNEL_PRESETS

            require(self.preset in CHANNEL_PRESETS, f"{prefix}.preset",
                    f"unknown preset {self.preset!r} (allowed: {', '.join(CHANNEL_PRESETS)})")


@dataclass
class TopologyConfig:
    """``star``: every client talks to the server.  ``hierarchical``: clients → edge server/AP (assigned
    uniformly at random per client) → cloud over a FIFO backhaul link with its own rate and latency."""

    kind: Literal["star", "hierarchical"] = "star"
    edge_servers: int = 2
    backhaul_mbps: float = 1000.0
    backhaul_latency_s: float = 0.005

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

    access: Literal["dedicated", "fdma", "tdma", "processor_sharing"] = "dedicated"
    downlink_access: Literal["dedicated", "fdma", "tdma", "processor_sharing"] = "dedicated"
    latency_s: float = 0.01
    topology: TopologyConfig = field(default_factory=TopologyConfig)

    def validate(self, prefix: str) -> None:
        positive(self.latency_s, f"{prefix}.latency_s", allow_zero=True)


@dataclass
class AvailabilityConfig:
    """When clients are reachable: ``always``, ``bernoulli`` (online with probability p per round, or
    per ``slot_s`` seconds), ``exponential`` on/off sessions, or ``trace`` (CSV client,start,end of online
    intervals).  A client that goes offline mid-task loses that task (recorded as a drop)."""

    model: Literal["always", "bernoulli", "exponential", "trace"] = "always"
    p: float = 0.8
    slot_s: float | None = None
    mean_on_s: float = 600.0
    mean_off_s: float = 60.0
    path: str | None = None

    def validate(self, prefix: str) -> None:
        require(0 < self.p <= 1, f"{prefix}.p", f"must be in (0, 1], got {self.p!r}")
        positive(self.slot_s, f"{prefix}.slot_s")
        positive(self.mean_on_s, f"{prefix}.mean_on_s")
        positive(self.mean_off_s, f"{prefix}.mean_off_s")
        require(self.model != "trace" or self.path is not None, f"{prefix}.path", "model 'trace' needs a CSV path")


@dataclass
class ServerConfig:
    """The server: ``workers`` parallel SimPy slots; aggregation costs FLOPs on ``profile``."""

    profile: str = "rtx-3090"
    workers: int = 1
    overhead_s: float = 0.002
    efficiency: float | None = None

    def validate(self, prefix: str) -> None:
        positive(self.workers, f"{prefix}.workers")
        positive(self.overhead_s, f"{prefix}.overhead_s", allow_zero=True)


@dataclass
class StopConfig:
    """The run stops at the first condition reached (at least one must be set)."""

    max_versions: int | None = 30
    max_time_s: float | None = None
    target_accuracy: float | None = None
    max_updates: int | None = None

    def validate(self, prefix: str) -> None:
        positive(self.max_versions, f"{prefix}.max_versions")
        positive(self.max_time_s, f"{prefix}.max_time_s")
        positive(self.max_updates, f"{prefix}.max_updates")
        if self.target_accuracy is not None:
            require(0 < self.target_accuracy <= 1, f"{prefix}.target_accuracy", "must be in (0, 1]")
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

    every_versions: int | None = 1
    every_s: float | None = None
    max_samples: int | None = None
    per_client: bool = False
    batch_size: int = 1024
    probe_every: int | None = None
    #: Models with static BatchNorm (``model.bn: static``) normalise at evaluation with the statistics of
    #: each evaluation batch (``batch``), or with statistics the server gathers from the clients' training
    #: samples for the model it evaluates (``train``: HeteroFL's sBN query; ``bn_samples`` of them, drawn
    #: once, or all when unset; costs no virtual time, like evaluation itself).
    bn_stats: Literal["batch", "train"] = "batch"
    bn_samples: int | None = 1024

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

    dir: str = "runs"
    figures: bool = True
    flush_every: int = 256
    trace_format: Literal["jsonl", "compact"] = "jsonl"
    checkpoints: int | None = None

    def validate(self, prefix: str) -> None:
        positive(self.flush_every, f"{prefix}.flush_every")
        positive(self.checkpoints, f"{prefix}.checkpoints")


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
TOP_LEVEL = ("name", "seed", "algorithm", *SECTIONS)


@dataclass
class AlgorithmSpec:
    """An algorithm by registry name with its own validated parameter dataclass."""

    name: str
    params: Any
    label: str

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

    def as_mapping(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "seed": self.seed}
        algs = [a.as_mapping() for a in self.algorithms]
        out["algorithm"] = algs[0] if len(algs) == 1 else algs
        for key in SECTIONS:
            out[key] = to_mapping(getattr(self, key))
        return out

    def variant(self, spec: AlgorithmSpec) -> "Scenario":
        """This scenario restricted to one algorithm."""
        return dataclasses.replace(self, algorithms=[spec])


def _algorithm_spec(data: Any, field_name: str) -> AlgorithmSpec:
    from fedsim.algorithms import registry

    if isinstance(data, str):
        data = {"name": data}
    if not isinstance(data, Mapping):
        raise ConfigError(field_name, f"must be an algorithm name or mapping, got {data!r}")
    data = dict(data)
    name = data.pop("name", "fedavg")
    label = data.pop("label", name)
    algos = registry()
    if name not in algos:
        raise ConfigError(f"{field_name}.name", f"unknown algorithm {name!r} (allowed: {', '.join(sorted(algos))})")
    params = from_mapping(algos[name].Config, data, field_name)
    return AlgorithmSpec(name=name, params=params, label=str(label))


def _with_preset(channel: Any) -> Any:
    """A direction given next to a preset starts from the preset's settings: its keys override them."""
    if not isinstance(channel, Mapping) or not isinstance(channel.get("preset"), str):
        return channel
    from fedsim.system.channel import CHANNEL_PRESETS

    preset = CHANNEL_PRESETS.get(channel["preset"])
    if preset is None:
        return channel  # validation names the unknown preset
    out = dict(channel)
    names = {f.name for f in dataclasses.fields(LinkConfig)}
    for direction in ("uplink", "downlink"):
        given = out.get(direction)
        if not isinstance(given, Mapping):
            continue
        cfg = getattr(preset, direction)
        base = {k: v for k, v in dataclasses.asdict(cfg).items() if k in names}
        if cfg.rate_bps is not None:
            base["mbps"] = cfg.rate_bps / 1e6
        if cfg.rate_range_bps is not None:
            base["mbps"] = [cfg.rate_range_bps[0] / 1e6, cfg.rate_range_bps[1] / 1e6]
        out[direction] = {**base, **given}
    return out


def scenario_from_mapping(data: Mapping[str, Any]) -> Scenario:
    """Validate a plain mapping into a Scenario (one clear ConfigError for the first problem)."""
    if not isinstance(data, Mapping):
        raise ConfigError("scenario", f"must be a mapping of sections, got {type(data).__name__}")
    if "channel" in data:
        data = {**data, "channel": _with_preset(data["channel"])}
    for key in data:
        if key not in TOP_LEVEL:
            raise ConfigError(str(key), f"unknown scenario key (allowed: {', '.join(TOP_LEVEL)})")
    kwargs: dict[str, Any] = {}
    if "name" in data:
        kwargs["name"] = coerce(data["name"], str, "name")
    if "seed" in data:
        kwargs["seed"] = coerce(data["seed"], int, "seed")
        positive(kwargs["seed"], "seed", allow_zero=True)
    for key, cls in SECTIONS.items():
        if key in data and data[key] is not None:
            kwargs[key] = coerce(data[key], cls, key)
    raw_alg = data.get("algorithm", "fedavg")
    if isinstance(raw_alg, list):
        if not raw_alg:
            raise ConfigError("algorithm", "an empty list runs nothing; give at least one algorithm")
        specs = [_algorithm_spec(a, f"algorithm[{i}]") for i, a in enumerate(raw_alg)]
    else:
        specs = [_algorithm_spec(raw_alg, "algorithm")]
    labels = [s.label for s in specs]
    if len(set(labels)) != len(labels):
        raise ConfigError("algorithm", f"variants need distinct labels, got {labels} (add label: ...)")
    kwargs["algorithms"] = specs
    scenario = Scenario(**kwargs)
    for i, spec in enumerate(specs):  # settings that depend on other sections (e.g. per device class)
        check = getattr(spec.params, "validate_scenario", None)
        if callable(check):
            check(scenario, f"algorithm[{i}]" if isinstance(raw_alg, list) else "algorithm")
    return scenario


def builtin_scenarios() -> dict[str, str]:
    """Built-in scenario names mapped to their one-line descriptions."""
    out = {}
    for entry in sorted(resources.files("fedsim.scenarios").iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".yaml"):
            text = entry.read_text(encoding="utf-8")
            first = next((ln[1:].strip() for ln in text.splitlines() if ln.startswith("#")), "")
            out[entry.name[: -len(".yaml")]] = first
    return out


def load_raw(source: str | Path | None) -> dict[str, Any]:
    """The mapping of a built-in scenario name or a YAML file (``None`` → the default scenario)."""
    if source is None:
        source = "default"
    path = Path(source)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.exists():
            raise ConfigError("scenario", f"file '{source}' not found")
        text = path.read_text(encoding="utf-8")
    else:
        names = builtin_scenarios()
        if str(source) not in names:
            raise ConfigError("scenario", f"unknown scenario '{source}' (built-in: {', '.join(names)}; or a path to a .yaml file)")
        text = resources.files("fedsim.scenarios").joinpath(f"{source}.yaml").read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError("scenario", f"'{source}' is not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict):
        raise ConfigError("scenario", f"'{source}' must hold a mapping of sections")
    return data


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b.c=value`` overrides (values parsed as YAML) to a raw scenario mapping."""
    data = copy.deepcopy(data)
    for item in overrides:
        if "=" not in item:
            raise ConfigError("override", f"'{item}' is not key=value (e.g. algorithm.buffer_size=5)")
        key, raw = item.split("=", 1)
        key = key.strip()
        if not key:
            raise ConfigError("override", f"'{item}' has an empty key")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        parts = key.split(".")
        node: Any = data
        for i, part in enumerate(parts[:-1]):
            if part == "algorithm" and i == 0 and isinstance(node.get("algorithm"), list):
                raise ConfigError(key, "this scenario has several algorithms; edit its YAML instead")
            if part == "algorithm" and i == 0 and isinstance(node.get("algorithm"), str):
                node["algorithm"] = {"name": node["algorithm"]}
            nxt = node.get(part)
            if nxt is None:
                nxt = node[part] = {}
            if not isinstance(nxt, dict):
                raise ConfigError(key, f"'{'.'.join(parts[: i + 1])}' is not a section")
            node = nxt
        if parts == ["algorithm"] and isinstance(value, str) and isinstance(data.get("algorithm"), dict):
            data["algorithm"] = {"name": value}
            continue
        node[parts[-1]] = value
    return data


def load_scenario(source: str | Path | None = None, overrides: list[str] | None = None) -> Scenario:
    """Load, override and validate a scenario (built-in name, YAML path, or None for the default)."""
    return scenario_from_mapping(apply_overrides(load_raw(source), overrides or []))


def dump_scenario(scenario: Scenario) -> str:
    """The resolved scenario as YAML (saved with every run)."""
    return yaml.safe_dump(scenario.as_mapping(), sort_keys=False)
