"""The physical world as the algorithms see it: compute, download, upload and server service.

Each call is a SimPy process that takes virtual time and writes one trace record, with waiting (for a
busy device, the shared medium, a backhaul link or the server) recorded apart from service.  Work that is
cut before it ends (a round's deadline or the client going offline interrupts its process; the run ends
while it is under way) still writes its record, of the same kind, with the time, bytes and energy actually
spent, ``ended`` (why it stopped: the interrupt's cause, or ``run_end``) and the amount planned
(``planned_bytes``, ``planned_flops``): the trace accounts for every second, byte and joule the world charged.  The
pieces come from the other ``fedsim.system`` modules: device profiles and compute time (``devices``),
path loss, fading and Shannon rates (``channel``), placements and mobility (``positions``), medium
access (``medium``), the network tree (``topology``), the server queue (``server``), availability
(``availability``) and energy (``energy``).

Per-client parameters (device group, own FLOP/s, fixed link rate, position, edge server) are drawn
from each client's own named stream, and task n's compute-time jitter is draw n of the client's member of
the counter-based family ``("jitter",)``, so adding clients never changes the ones already there.
"""
from __future__ import annotations

import functools
import itertools
import math
from pathlib import Path
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Generator

import numpy as np
import simpy

from fedsim.errors import ConfigError
from fedsim.sim.rng import Streams
from fedsim.sim.trace import Trace
from fedsim.system import positions as pos
from fedsim.system.availability import AlwaysOn, make_availability
from fedsim.system.chains import ChainRound
from fedsim.system.channel import (CHANNEL_PRESETS, DEFAULT_DOWNLINK_MBPS, DEFAULT_UPLINK_MBPS, GAS_DISTANCE_RANGE_M,
                                   PHYSICAL_FIELDS, ChannelConfig, LinkModel)
from fedsim.system.devices import (DEFAULT_TX_POWER_W, DeviceProfile, capability_levels, compute_time, load_profile,
                                   resolve_tx_power)
from fedsim.system.energy import EnergyMeter
from fedsim.system.medium import Medium, Progress, cut_transfer_values, make_medium
from fedsim.system.server import Server, ServiceRecord
from fedsim.system.topology import Topology

if TYPE_CHECKING:  # pragma: no cover
    from fedsim.scenario import (AvailabilityConfig, ChannelSection, DevicesConfig, LinkConfig, NetworkConfig, Scenario,
                                 ServerConfig)

__all__ = ["World", "ServiceRecord"]

#: Link used when a scenario gives neither a preset nor explicit links (Mbit/s, per-client log-uniform).
#: Presets that come with a placement of their own (distance range in metres, uniform in distance).
PRESET_PLACEMENT = {"gas-cell": GAS_DISTANCE_RANGE_M}


def _channel_config(link: "LinkConfig") -> ChannelConfig:
    """A scenario LinkConfig as the channel module's ChannelConfig (rates in bit/s)."""
    mbps = link.mbps
    lo_hi = (mbps if isinstance(mbps, list) else [mbps, mbps]) if mbps is not None else None
    return ChannelConfig(
        model=link.model, **{name: getattr(link, name) for name in PHYSICAL_FIELDS},
        rate_bps=lo_hi[0] * 1e6 if link.model == "fixed" and lo_hi else None,
        rate_range_bps=(lo_hi[0] * 1e6, lo_hi[-1] * 1e6) if link.model == "uniform_rate" and lo_hi else None,
        redraw=link.redraw,
    )


#: per-client draws made by the last worlds, by their inputs: a run builds its world up to three times
#: (the preflight's checks, the algorithm's set-up check, the run), all with the same inputs, and at 1,000
#: clients the named streams behind these draws are most of a world's cost.  The values are those of the
#: streams, bit for bit.  Two entries: a run needs one, and a process running many runs holds no more than
#: two sets (about 36 bytes per client each).
DRAW_CACHE_SIZE = 2


def _frozen(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)  # shared by every world of the same inputs: nobody may change it
    return a


@functools.lru_cache(maxsize=DRAW_CACHE_SIZE)
def fixed_link_rates(seed: int, direction: str, lo_bps: float, hi_bps: float, num_clients: int) -> np.ndarray:
    """Each client's fixed rate (bit/s) on ``direction``, log-uniform in ``[lo_bps, hi_bps]``, from the
    client's stream ``("link", direction, c)`` of root seed ``seed`` (read-only; cached by its inputs)."""
    streams = Streams(seed)
    lo, hi = math.log(lo_bps), math.log(hi_bps)
    return _frozen(np.array([math.exp(streams.numpy("link", direction, c).uniform(lo, hi))
                             for c in range(num_clients)]))


@functools.lru_cache(maxsize=DRAW_CACHE_SIZE)
def device_draws(seed: int, weights: tuple[float, ...], fixed: tuple[int, ...] | None,
                 speeds: tuple[tuple[float, float] | None, ...], num_clients: int) -> tuple[np.ndarray, np.ndarray]:
    """Each client's device group and own FLOP/s (0 where its group has no ``flops_per_s``), from the
    client's stream ``("device", c)``: the group drawn with probabilities ``weights`` (normalised), then
    replaced by ``fixed[c]`` where the groups have counts, then the speed uniform in the group's
    ``speeds`` range.  Read-only arrays, cached by their inputs."""
    streams = Streams(seed)
    w = np.array(weights, dtype=float)
    p = w / w.sum()
    groups = np.empty(num_clients, dtype=np.int32)
    flops = np.zeros(num_clients)
    for c in range(num_clients):
        rng = streams.numpy("device", c)
        g = int(rng.choice(len(p), p=p))
        if fixed is not None:
            g = fixed[c]
        groups[c] = g
        speed = speeds[g]
        if speed is not None:
            lo, hi = speed
            flops[c] = rng.uniform(lo, hi) if hi > lo else lo
    return _frozen(groups), _frozen(flops)


@functools.lru_cache(maxsize=DRAW_CACHE_SIZE)
def drawn_positions(seed: int, kind: str, r_min_m: float, r_max_m: float, num_clients: int) -> np.ndarray:
    """Each client's position (x, y in metres), drawn by ``kind`` (``annulus``: uniform over the ring's
    area; ``uniform_distance``: uniform in distance) from the client's stream ``("position", c)``
    (read-only; cached by its inputs)."""
    streams = Streams(seed)
    draw = pos.annulus_uniform if kind == "annulus" else pos.uniform_distance
    return _frozen(np.concatenate([draw(1, r_min_m, r_max_m, streams.numpy("position", c)) for c in range(num_clients)]))


class _Direction:
    """The rate of one direction for every client: a LinkModel, plus per-client fixed-rate draws."""

    def __init__(self, name: str, cfg: ChannelConfig, fixed_range_bps: tuple[float, float] | None,
                 streams: Streams, num_clients: int, tx_power_of: Callable[[int], float] | None = None) -> None:
        self.name, self.cfg = name, cfg
        self.model = LinkModel(cfg, streams, direction=name, tx_power_of=tx_power_of)
        self.per_client: np.ndarray | None = None
        if fixed_range_bps is not None and fixed_range_bps[1] > fixed_range_bps[0]:
            self.per_client = fixed_link_rates(streams.seed, name, float(fixed_range_bps[0]),
                                               float(fixed_range_bps[1]), num_clients)
        #: the same rates as Python floats, read once per transfer
        self._per_client_list: list[float] | None = None if self.per_client is None else self.per_client.tolist()

    @property
    def needs_distance(self) -> bool:
        return not self.cfg.is_rate_only

    def rate(self, client: int, distance_m: float | None) -> Callable[[float], float] | float:
        """This transmission's rate: bit/s, or ``share -> bit/s`` for models where FDMA must be exact."""
        if self._per_client_list is not None:
            return self._per_client_list[client]
        return self.model.rate_fn(client, distance_m)


class World:
    """Devices, links, network and the server of one run."""

    def __init__(self, env: simpy.Environment, streams: Streams, trace: Trace, num_clients: int, *,
                 devices: "DevicesConfig", channel: "ChannelSection", network: "NetworkConfig",
                 availability: "AvailabilityConfig", server: "ServerConfig", source_dir: Path | None = None) -> None:
        """The world from its own config sections (not the whole scenario: it knows nothing of data,
        models or algorithms).  :meth:`from_scenario` picks the sections out of a scenario; ``source_dir``
        (the scenario file's folder) is where relative profile paths are looked up first."""
        self.env, self.streams, self.trace, self.num_clients = env, streams, trace, num_clients
        self.source_dir = source_dir
        self.devices_cfg = devices
        self.network_cfg = network
        self.model_name: str | None = None
        self.energy = EnergyMeter()
        #: inputs that are legitimate but probably not what was meant (a trace naming other clients, more
        #: positions than clients): one warning line each, said before the run starts
        self.input_warnings: list[str] = []
        self._init_devices(devices)
        self._init_channel(channel)
        self._init_network(network)
        srv = server
        try:
            self.server_profile = load_profile(srv.profile, self.source_dir)
        except ConfigError as exc:
            raise ConfigError("server.profile", str(exc).split(": ", 1)[-1]) from None
        self.server_efficiency = srv.efficiency or self.server_profile.efficiency
        self.server_overhead_s = srv.overhead_s
        self.server = Server(env, workers=srv.workers)
        av = availability
        kwargs: dict[str, Any] = {
            "always": {}, "bernoulli": {"p": av.p, "slot_s": av.slot_s},
            "exponential": {"mean_on_s": av.mean_on_s, "mean_off_s": av.mean_off_s}, "trace": {"path": av.path},
        }[av.model]
        self.availability = make_availability(av.model, streams, **kwargs)
        check_clients = getattr(self.availability, "check_clients", None)
        if callable(check_clients):
            self.input_warnings += check_clients(num_clients)
        self.bytes_up = 0
        self.bytes_down = 0
        self.busy_s = np.zeros(num_clients)
        #: each client's current task: the id the version keeper gave its latest ``dispatch``.  The world stamps
        #: it, as ``task``, on the client's ``download``, ``compute`` and ``upload`` records (taken when the work
        #: starts), so a reader follows one task from dispatch to apply or drop without matching times
        self.task_of: list[int | None] = [None] * num_clients
        # the world's records, written by position (Trace.put): one handle per schema
        tr = trace
        self._h_compute = tr.kind("compute", ("client", "start", "end", "wait", "flops", "steps", "what", "energy",
                                              "task"))
        transfer = ("client", "start", "end", "bytes", "wait", "airtime", "rate_bps", "energy")
        self._h_download = tr.kind("download", (*transfer, "version", "task"))
        self._h_upload = tr.kind("upload", (*transfer, "task"))
        self._h_upload_what = tr.kind("upload", (*transfer, "what", "task"))
        self._h_server = tr.kind("server", ("client", "start", "end", "wait", "service", "what", "queue", "task"))
        # the schemas of a pass at a pinned speed and of an instantaneous download (no device queue, no radio)
        self._h_compute_pinned = tr.kind("compute", ("client", "start", "end", "wait", "flops", "steps", "what",
                                                     "task"))
        self._h_download_instant = tr.kind("download", ("client", "start", "end", "bytes", "wait", "version", "task"))
        # a download that names its payload (split learning's gradients), instantaneous or over the link
        self._h_download_what = tr.kind("download", (*transfer, "version", "what", "task"))
        self._h_download_instant_what = tr.kind("download", ("client", "start", "end", "bytes", "wait", "version",
                                                             "what", "task"))
        # cut work: the same schemas, with why it ended and what was planned
        cut = ("ended", "planned_bytes")
        self._h_cut = {h: tr.kind(kind, (*fields, *cut)) for h, kind, fields in (
            (self._h_download, "download", (*transfer, "version", "task")), (self._h_upload, "upload", (*transfer, "task")),
            (self._h_upload_what, "upload", (*transfer, "what", "task")),
            (self._h_download_what, "download", (*transfer, "version", "what", "task")))}
        self._h_compute_cut = tr.kind("compute", ("client", "start", "end", "wait", "flops", "steps", "what", "energy",
                                                  "task", "ended", "planned_flops"))
        self._h_server_cut = tr.kind("server", ("client", "start", "end", "wait", "service", "what", "queue", "task",
                                                "ended"))
        #: work under way, by key: (the function that writes its cut record, its arguments before the reason)
        self._open: dict[int, tuple[Callable[..., None], tuple[Any, ...]]] = {}
        self._open_ids = itertools.count()

    @classmethod
    def from_scenario(cls, env: simpy.Environment, streams: Streams, trace: Trace, num_clients: int,
                      scenario: "Scenario") -> "World":
        world = cls(env, streams, trace, num_clients, devices=scenario.devices, channel=scenario.channel,
                    network=scenario.network, availability=scenario.availability, server=scenario.server,
                    source_dir=scenario.source_dir)
        world.model_name = scenario.model.name  # a profile's measured ms-per-sample is looked up by it
        return world

    # ------------------------------------------------------------------------------ construction
    def _init_devices(self, devices: Any) -> None:
        self.profiles: dict[str, DeviceProfile] = {}
        self._power_w: list[float] = []
        for i, group in enumerate(devices.mix):
            prof = load_profile(group.profile, self.source_dir)
            if group.efficiency is not None:
                prof = replace(prof, efficiency=group.efficiency)
            if group.memory_mb is not None:
                prof = replace(prof, memory_bytes=float(group.memory_mb) * 2**20)
            self.profiles[f"{i}:{group.profile}"] = prof
            self._power_w.append(prof.power_w(group.power_mode))
        self._group_keys = list(self.profiles)
        n = self.num_clients
        self._client_group = np.empty(n, dtype=np.int32)
        self._flops_per_s = np.zeros(n)
        counts = [grp.count for grp in devices.mix]
        fixed: list[int] | None = None
        if all(k is not None for k in counts):
            if sum(counts) != n:
                raise ConfigError("devices.mix", f"the groups' counts {counts} sum to {sum(counts)}, but there are "
                                                 f"{n} clients (data.num_clients)")
            fixed = [g for g, k in enumerate(counts) for _ in range(int(k))]
        only = devices.mix[0].flops_per_s if len(devices.mix) == 1 else None
        if len(devices.mix) == 1 and (only is None or not isinstance(only, list) or only[0] >= only[-1]):
            # one group and no per-client speed range: every client's draw is known without its stream
            # (group 0; the fixed speed), so 10^6 clients need no 10^6 streams
            self._client_group[:] = 0
            if only is not None:
                self._flops_per_s[:] = only if not isinstance(only, list) else only[0]
        else:
            speeds = tuple(None if grp.flops_per_s is None else
                           ((float(grp.flops_per_s),) * 2 if not isinstance(grp.flops_per_s, list)
                            else (float(grp.flops_per_s[0]), float(grp.flops_per_s[-1]))) for grp in devices.mix)
            groups, flops = device_draws(self.streams.seed, tuple(float(g.weight) for g in devices.mix),
                                         None if fixed is None else tuple(fixed), speeds, n)
            self._client_group[:] = groups
            self._flops_per_s[:] = flops
        cap = devices.capability
        self.capability: np.ndarray | None = None
        if cap is not None:
            self.capability = capability_levels(n, cap.beta, cap.levels, self.streams.numpy("capability"))
            self._flops_per_s = self.capability * cap.unit_flops_per_s
        self._device_res: dict[int, simpy.Resource] = {}
        self._tasks = np.zeros(n, dtype=np.int64)
        self._jitter = self.streams.counter("jitter")  # client c's task n draws member c's draw n

    def _init_channel(self, ch: "ChannelSection") -> None:
        preset = CHANNEL_PRESETS[ch.preset] if ch.preset else None
        dirs = {}
        for name, explicit, default_mbps in (("up", ch.uplink, DEFAULT_UPLINK_MBPS), ("down", ch.downlink, DEFAULT_DOWNLINK_MBPS)):
            fixed_range = None
            if explicit is not None:
                cfg = _channel_config(explicit)
                if explicit.model == "fixed" and isinstance(explicit.mbps, list) and len(explicit.mbps) == 2:
                    fixed_range = (explicit.mbps[0] * 1e6, explicit.mbps[1] * 1e6)
            elif preset is not None:
                cfg = preset.uplink if name == "up" else preset.downlink
            else:
                cfg = ChannelConfig(model="fixed", rate_bps=default_mbps[0] * 1e6)
                fixed_range = (default_mbps[0] * 1e6, default_mbps[1] * 1e6)
            if name == "up":  # the clients transmit: one resolved power per device class, for SNR and energy
                self._resolve_tx_power(cfg)
            dirs[name] = _Direction(name, cfg, fixed_range, self.streams, self.num_clients,
                                    self._client_tx_power if name == "up" else None)
        self.links = dirs
        self.positions: np.ndarray | None = None
        self.mobility: pos.RandomWaypoint | None = None
        if any(d.needs_distance for d in dirs.values()) or ch.mobility.kind != "none":
            pc = ch.positions
            kind = pc.kind
            r_min, r_max = pc.r_min_m, pc.r_max_m
            if kind == "auto":
                if ch.preset in PRESET_PLACEMENT:
                    kind, (r_min, r_max) = "uniform_distance", PRESET_PLACEMENT[ch.preset]
                else:
                    kind = "annulus"
            if kind == "fixed":
                pts = pos.fixed(pc.points)
            elif kind == "file":
                pts = pos.from_csv(pc.path)
            else:
                pts = drawn_positions(self.streams.seed, kind, float(r_min), float(r_max), self.num_clients)
            if len(pts) < self.num_clients:
                raise ConfigError("channel.positions", f"{len(pts)} positions given for {self.num_clients} clients")
            if len(pts) > self.num_clients and kind in ("file", "fixed"):
                self.input_warnings.append(f"channel.positions: {len(pts):,} positions given for {self.num_clients:,} "
                                           f"clients; the first {self.num_clients:,} are used")
            self.positions = pts[: self.num_clients]
            #: each client's distance from the base station while nobody moves (read once per transfer)
            self._distances: list[float] = [float(math.hypot(*p)) for p in self.positions]
            if ch.mobility.kind == "random_waypoint":
                self.mobility = pos.RandomWaypoint(radius=r_max, streams=self.streams, speed_range=tuple(ch.mobility.speed_mps),
                                                   pause_s=ch.mobility.pause_s, start=self.positions)

    def _init_network(self, net: "NetworkConfig") -> None:
        self._media: dict[str, Medium | None] = {"up": None, "down": None}
        self._access = {"up": net.access, "down": net.downlink_access}
        self._scheduled = 1
        self.topology: Topology | None = None
        self._backhaul: dict[Any, Medium] = {}
        if net.topology.kind == "hierarchical":
            t = net.topology
            assignment = {c: f"edge{int(self.streams.numpy('edge', c).integers(t.edge_servers))}" for c in range(self.num_clients)}
            self.topology = Topology.hierarchical(assignment, access_rate_bps=None, access_latency_s=net.latency_s,
                                                  backhaul_rate_bps=t.backhaul_mbps * 1e6, backhaul_latency_s=t.backhaul_latency_s)
            for ap in sorted(set(assignment.values())):
                self._backhaul[(ap, self.topology.root)] = make_medium("tdma", self.env)

    # ------------------------------------------------------------------------------ per client facts
    def device(self, client: int) -> DeviceProfile:
        return self.profiles[self._group_keys[self._client_group[client]]]

    def device_name(self, client: int) -> str:
        return self.device(client).name

    def device_class(self, client: int) -> str:
        """The client's device class: the ``profile`` of its group in ``devices.mix`` (as the scenario
        names it; per-class settings such as sub-model width tables are keyed by it)."""
        return str(self.devices_cfg.mix[int(self._client_group[client])].profile)

    def distance(self, client: int, t: float | None = None) -> float | None:
        """Client's distance from the base station (metres) at time ``t`` (default: now)."""
        if self.mobility is not None:
            return self.mobility.distance(client, self.env.now if t is None else t)
        if self.positions is None:
            return None
        return self._distances[client]

    def uplink_bps(self, client: int) -> float:
        """Nominal full-band uplink rate (no fading draw consumed): for reports and schedulers."""
        return self._nominal("up", client)

    def downlink_bps(self, client: int) -> float:
        return self._nominal("down", client)

    def _nominal(self, direction: str, client: int) -> float:
        d = self.links[direction]
        if d.per_client is not None:
            return float(d.per_client[client])
        cfg = d.cfg
        if cfg.model == "ideal":
            return math.inf
        if cfg.model == "fixed":
            return float(cfg.rate_bps)
        if cfg.model == "uniform_rate":
            return float(sum(cfg.rate_range_bps) / 2)
        from fedsim.system.channel import shannon_rate

        return float(shannon_rate(cfg.bandwidth_hz, d.model.mean_snr(client, self.distance(client))))

    def is_available(self, client: int) -> bool:
        return self.availability.is_online(client, self.env.now)

    # ------------------------------------------------------------------------------ compute
    def compute_seconds(self, client: int, flops: float, *, samples: int | None = None) -> float:
        """Time for ``flops`` of training on the client's device, with its per-task jitter.

        A device group with ``flops_per_s`` gives each client its own achieved throughput (drawn once
        per client, as GAS draws U(1e9, 1e10) FLOP/s); otherwise the profile's peak × efficiency (or its
        measured ms-per-sample for the model) is used.
        """
        n = int(self._tasks[client])
        self._tasks[client] += 1
        own = self._flops_per_s[client]
        if own > 0:
            base = flops / own
        else:
            base = compute_time(self.device(client), flops, model=self.model_name, samples=samples)
        j = self.devices_cfg.jitter
        if j > 0:  # task n's lognormal factor (mean 1), from the counter stream of this client
            base *= math.exp(j * self._jitter.normal(client, n) - 0.5 * j * j)
        return base

    def compute_seconds_many(self, clients: np.ndarray, flops: np.ndarray, samples: np.ndarray) -> np.ndarray:
        """:meth:`compute_seconds` for many distinct clients at once: the same numbers (each client's task
        counter advances as one call each would, and its jitter is the same counter-stream draw), computed
        per device group in numpy."""
        clients = np.asarray(clients, dtype=np.int64)
        flops = np.asarray(flops, dtype=np.float64)
        samples = np.asarray(samples, dtype=np.int64)
        tasks = self._tasks[clients]
        self._tasks[clients] += 1
        out = np.empty(len(clients), dtype=np.float64)
        own = self._flops_per_s[clients]
        mine = own > 0
        out[mine] = flops[mine] / own[mine]
        groups = self._client_group[clients]
        for g in np.unique(groups[~mine]).tolist():
            sel = ~mine & (groups == g)
            prof = self.profiles[self._group_keys[g]]
            if self.model_name is not None and self.model_name in prof.ms_per_sample:
                out[sel] = samples[sel] * prof.ms_per_sample[self.model_name] / 1000.0
            else:
                out[sel] = flops[sel] / prof.train_flops_per_s(None)
        j = self.devices_cfg.jitter
        if j > 0:  # the same draws as compute_seconds, and its float operations (math.exp, one at a time)
            c = 0.5 * j * j
            z = self._jitter.normals(clients, tasks)
            out = np.array([base * math.exp(j * zi - c) for base, zi in zip(out.tolist(), z.tolist())], dtype=np.float64)
        return out

    def transfer_rates(self, direction: str, clients: np.ndarray, share: float, times: np.ndarray) -> np.ndarray:
        """The rate (bit/s) of one transmission per client in ``direction``, on ``share`` of the band,
        starting at ``times``: what :meth:`_transfer` and the medium would use, with the same draws from
        each client's streams (per client when the channel draws fading; in numpy for fixed rates)."""
        from fedsim.system.medium import _rate_at

        clients = np.asarray(clients, dtype=np.int64)
        d = self.links[direction]
        if d.per_client is not None:
            return d.per_client[clients] * share
        if d.cfg.model == "ideal":
            return np.full(len(clients), math.inf)
        if d.cfg.model == "fixed":
            return np.full(len(clients), d.cfg.rate_bps * share)
        out = np.empty(len(clients), dtype=np.float64)
        for i, (c, t) in enumerate(zip(clients.tolist(), np.asarray(times, dtype=np.float64).tolist())):
            out[i] = _rate_at(d.rate(c, self.distance(c, t) if d.needs_distance else None), share)
        return out

    def transfer_share(self, direction: str) -> tuple[str, float]:
        """The access model of ``direction`` and the band share one transfer gets (FDMA: 1/n scheduled)."""
        access = self._access[direction]
        return access, (1.0 / self._scheduled if access == "fdma" else 1.0)

    def _resolve_tx_power(self, uplink: ChannelConfig) -> None:
        """Each device group's transmit power by :func:`fedsim.system.devices.resolve_tx_power` (the one rule
        for SNR and energy); a channel power that was set (not the default) but that a device profile
        overrides is said once, before the run."""
        resolved = [resolve_tx_power(self.profiles[k], uplink.tx_power_w) for k in self._group_keys]
        self._tx_power_w = np.array([w for w, _ in resolved], dtype=np.float64)
        overridden = sorted({f"{self.profiles[k].name} ({w:g} W)" for k, (w, src) in zip(self._group_keys, resolved)
                             if src.startswith("device") and w != uplink.tx_power_w})
        if overridden and uplink.tx_power_w != DEFAULT_TX_POWER_W:
            self.input_warnings.append(
                f"channel.uplink.tx_power_w: {uplink.tx_power_w:g} W is overridden by the device profile's "
                f"radio.tx_power for {', '.join(overridden)} (SNR and energy both use the profile's)")

    def _client_tx_power(self, client: int) -> float:
        """The client's transmit power (W): its device group's resolved power."""
        return float(self._tx_power_w[self._client_group[client]])

    def tx_power_many(self, clients: np.ndarray) -> np.ndarray:
        """Each client's transmit power (W)."""
        return self._tx_power_w[self._client_group[np.asarray(clients, dtype=np.int64)]]

    def compute_power_many(self, clients: np.ndarray) -> np.ndarray:
        """Each client's board power (W) in its group's power mode."""
        return np.asarray(self._power_w, dtype=np.float64)[self._client_group[np.asarray(clients, dtype=np.int64)]]

    def expected_compute_seconds(self, client: int, flops: float, *, samples: int | None = None) -> float:
        """Mean time for ``flops`` of training on the client's device (no jitter drawn): what a scheduler
        that knows each client's speed estimates before it assigns work."""
        own = self._flops_per_s[client]
        if own > 0:
            return flops / own
        return compute_time(self.device(client), flops, model=self.model_name, samples=samples)

    def expected_transfer_seconds(self, client: int, bytes_down: int, bytes_up: int) -> float:
        """Nominal download + upload time (full-band rates, fixed latency, no waiting for the medium)."""
        lat = self.network_cfg.latency_s
        return 8.0 * bytes_down / self.downlink_bps(client) + 8.0 * bytes_up / self.uplink_bps(client) + 2 * lat

    def server_compute_time(self, flops: float) -> float:
        prof = self.server_profile
        return self.server_overhead_s + flops / (prof.peak[prof.training_precision] * self.server_efficiency)

    def _device(self, client: int) -> simpy.Resource:
        res = self._device_res.get(client)
        if res is None:
            res = self._device_res[client] = simpy.Resource(self.env, capacity=1)
        return res

    def compute(self, client: int, flops: float, *, what: str = "train", steps: int | None = None,
                samples: int | None = None) -> Generator[Any, Any, float]:
        """Occupy the client's device for the time ``flops`` take; returns the service time."""
        env = self.env
        arrival = env.now
        state: list[Any] = [arrival, None, 0.0]  # arrival, service start, planned seconds
        key = next(self._open_ids)
        task = self.task_of[client]
        self._open[key] = (self._cut_compute, (client, state, float(flops), what, True, task))
        try:
            with self._device(client).request() as req:
                yield req
                start = env.now
                dt = self.compute_seconds(client, flops, samples=samples)
                state[1], state[2] = start, dt
                yield env.timeout(dt)
        except simpy.Interrupt as intr:
            self._cut(key, intr.cause)
            raise
        del self._open[key]
        self.busy_s[client] += dt
        joules = self.energy.compute(client, dt, self._power_w[self._client_group[client]])
        now = env.now
        self.trace.put(self._h_compute, (now, client, start, now, start - arrival, float(flops), steps, what, joules,
                                         task))
        return dt

    def compute_pinned(self, client: int, flops: float, flops_per_s: float, *, what: str) -> Generator[Any, Any, float]:
        """Work of ``flops`` on the client at a pinned speed (``flops_per_s``) instead of its device's model: for
        replaying a population drawn elsewhere (split learning's ``timing.client_flops_per_s``).  It does not
        queue for the device and charges no energy; it counts as busy time and writes a ``compute`` record
        (``steps`` 1, ``wait`` 0, no ``energy`` field).  Returns the service time."""
        env = self.env
        start = env.now
        dt = flops / flops_per_s
        key = next(self._open_ids)
        task = self.task_of[client]
        self._open[key] = (self._cut_compute, (client, [start, start, dt], float(flops), what, False, task))
        try:
            yield env.timeout(dt)
        except simpy.Interrupt as intr:
            self._cut(key, intr.cause)
            raise
        del self._open[key]
        self.busy_s[client] += dt
        now = env.now
        self.trace.put(self._h_compute_pinned, (now, client, start, now, 0.0, float(flops), 1, what, task))
        return dt

    def download_instant(self, client: int, nbytes: int, *, version: int | None = None,
                         what: str | None = None) -> None:
        """A server → client transfer that takes no time (a convention that ignores the downlink, such as the
        GAS code's): the bytes are counted and a ``download`` record of zero duration is written now (``wait`` 0,
        no radio fields).  Not a generator: nothing waits.  ``what`` names the payload when it is not a model."""
        self.bytes_down += int(nbytes)
        now = self.env.now
        task = self.task_of[client]
        if what:
            self.trace.put(self._h_download_instant_what, (now, client, now, now, int(nbytes), 0.0, version, what, task))
            return
        self.trace.put(self._h_download_instant, (now, client, now, now, int(nbytes), 0.0, version, task))

    def client_chains(self, clients: np.ndarray, nbytes: int, flops: np.ndarray, samples: np.ndarray,
                      steps: np.ndarray, *, version: int) -> ChainRound:
        """A round in which each of ``clients`` (sorted) downloads ``nbytes`` of model ``version`` now, computes
        its ``flops`` and uploads ``nbytes``, each on its own device and link, computed as arrays (the vector
        engine; only for dedicated or FDMA access, where clients never wait for each other).  The returned
        :class:`fedsim.system.chains.ChainRound` writes the round's records and charges them, in SimPy's order,
        as far as the caller lets the clock run."""
        chains = ChainRound(self, clients, self.env.now, int(nbytes), flops, samples, steps, version,
                            float(self.network_cfg.latency_s))
        key = next(self._open_ids)
        self._open[key] = (chains.cut, ())
        chains.open_key = key
        return chains

    # ------------------------------------------------------------------------------ transfers
    def schedule(self, n: int) -> None:
        """Tell the medium how many clients are scheduled at once (FDMA splits the band among them)."""
        n = max(1, int(n))
        if n != self._scheduled:
            self._scheduled = n
            for d in ("up", "down"):
                if self._access[d] == "fdma":
                    self._media[d] = None  # a new split from the next transfer on

    def _medium(self, direction: str) -> Medium:
        m = self._media[direction]
        if m is None:
            m = self._media[direction] = make_medium(self._access[direction], self.env, n_scheduled=self._scheduled)
        return m

    def _transfer(self, up: bool, client: int, nbytes: int, handle: int, extra: tuple[Any, ...]
                  ) -> Generator[Any, Any, float]:
        """One transfer up or down (counted in ``bytes_up``/``bytes_down`` when it ends, or what was sent when
        it is cut); writes its record through ``handle`` with the ``extra`` fields last."""
        env = self.env
        direction = "up" if up else "down"
        t0 = env.now
        bits = 8.0 * nbytes
        link = self.links[direction]
        rate = link.rate(client, self.distance(client) if link.needs_distance else None)
        medium = self._media[direction] or self._medium(direction)
        prog = Progress()
        key = next(self._open_ids)
        self._open[key] = (self._cut_transfer, (up, client, int(nbytes), t0, prog, handle, extra))
        try:
            if self.topology is None:
                rec = yield from medium.transfer(client, bits, rate, prog)
                prog.done = True
                wait, airtime = rec.wait, rec.airtime
                if self.network_cfg.latency_s > 0:
                    yield env.timeout(self.network_cfg.latency_s)
            else:
                hops = yield from self.topology.traverse(env, client, bits, access_rate=rate,
                                                         media={**self._backhaul, **{(client, h.dst): medium for h in self.topology.path(client)[:1]}},
                                                         direction=direction, progress=prog)
                wait = sum(h.wait for h in hops)
                access = hops[0] if up else hops[-1]
                airtime = access.transmit_s
        except simpy.Interrupt as intr:
            self._cut(key, intr.cause)
            raise
        del self._open[key]
        if up:
            self.bytes_up += int(nbytes)
        else:
            self.bytes_down += int(nbytes)
        joules = 0.0
        if up and airtime > 0:
            joules = self.energy.transmit(client, airtime, self._client_tx_power_w[client])
        now = env.now
        self.trace.put(handle, (now, client, t0, now, int(nbytes), wait, airtime, (bits / airtime) if airtime > 0 else None,
                                joules, *extra))
        return now - t0

    @functools.cached_property
    def _client_tx_power_w(self) -> list[float]:
        """Each client's transmit power (W), as Python floats (read once per upload)."""
        return self._tx_power_w[self._client_group].tolist()

    def download(self, client: int, nbytes: int, *, version: int | None = None,
                 what: str | None = None) -> Generator[Any, Any, float]:
        """Server → client transfer of ``nbytes`` (a SimPy process generator); returns its duration.
        ``what`` names the payload when it is not a model (split learning's ``gradients``)."""
        task = self.task_of[client]  # the task this transfer belongs to, as it starts
        if what:
            return self._transfer(False, client, nbytes, self._h_download_what, (version, what, task))
        return self._transfer(False, client, nbytes, self._h_download, (version, task))

    def upload(self, client: int, nbytes: int, *, what: str | None = None) -> Generator[Any, Any, float]:
        """Client → server transfer of ``nbytes`` (a SimPy process generator); returns its duration."""
        task = self.task_of[client]  # the task this transfer belongs to, as it starts
        if what:
            return self._transfer(True, client, nbytes, self._h_upload_what, (what, task))
        return self._transfer(True, client, nbytes, self._h_upload, (task,))

    # ------------------------------------------------------------------------------ server
    def serve(self, client: int | None, service_s: float, *, what: str,
              task: int | None = None) -> Generator[Any, Any, ServiceRecord]:
        """Queue at the server, then hold a worker for ``service_s``; waiting is recorded apart.  The record
        names ``task``, the task whose update or request this is (default: ``client``'s current task when the
        request arrives; none for the server's own work, ``client`` None), so a reader finds a request's task
        by id, as for transfers: an asynchronous client may be on its next task when its update is served."""
        if task is None and client is not None:
            task = self.task_of[client]
        prog: list[Any] = []
        key = next(self._open_ids)
        self._open[key] = (self._cut_serve, (client, what, task, prog))
        try:
            rec = yield from self.server.serve(service_s, what=what, client=client, progress=prog)
        except simpy.Interrupt as intr:
            self._cut(key, intr.cause)
            raise
        del self._open[key]
        start, end = rec.start, rec.end
        self.trace.put(self._h_server, (self.env.now, client, start, end, start - rec.arrival, end - start, what,
                                        rec.queue_on_arrival, task))
        return rec

    # ------------------------------------------------------------------------------ cut work
    def _cut(self, key: int, reason: Any) -> None:
        """Write the record of open work ``key``, cut now for ``reason``, and charge what it did."""
        write, args = self._open.pop(key)
        write(*args, "run_end" if reason is None else str(reason))

    def cut_open_work(self, reason: str = "run_end") -> int:
        """Record every piece of work still under way as cut now (call once when the run stops, before the
        trace is closed: its time, bytes and energy are then in the trace as they are in the totals);
        returns how many were cut."""
        keys = list(self._open)
        for key in keys:
            self._cut(key, reason)
        return len(keys)

    def _cut_compute(self, client: int, state: list[Any], flops: float, what: str, charged: bool,
                     task: int | None, reason: str) -> None:
        now = self.env.now
        arrival, start, dt = state
        if start is None:  # still waiting for the device
            start, spent = now, 0.0
        else:
            spent = min(now - start, dt)
        done = flops * (spent / dt) if dt > 0 else (flops if now >= start else 0.0)
        self.busy_s[client] += spent
        joules = self.energy.compute(client, spent, self._power_w[self._client_group[client]]) if charged else None
        self.trace.put(self._h_compute_cut, (now, client, start, now, start - arrival, done, None, what, joules,
                                             task, reason, flops))

    def _cut_transfer(self, up: bool, client: int, nbytes: int, t0: float, prog: Progress, handle: int,
                      extra: tuple[Any, ...], reason: str) -> None:
        now = self.env.now
        sent, wait, airtime = cut_transfer_values(now, nbytes, t0, prog)
        joules = 0.0
        if up:
            self.bytes_up += sent
            if airtime > 0:
                joules = self.energy.transmit(client, airtime, self._client_tx_power_w[client])
        else:
            self.bytes_down += sent
        self.trace.put(self._h_cut[handle], (now, client, t0, now, sent, wait, airtime,
                                             (8.0 * sent / airtime) if airtime > 0 else None, joules, *extra,
                                             reason, nbytes))

    def _cut_serve(self, client: int | None, what: str, task: int | None, prog: list[Any], reason: str) -> None:
        now = self.env.now
        arrival, queue = (prog[0], prog[1]) if prog else (now, 0)
        start = prog[2] if len(prog) > 2 else now
        self.trace.put(self._h_server_cut, (now, client, start, now, start - arrival, now - start, what, queue,
                                            task, reason))

    # ------------------------------------------------------------------------------ availability
    def watch(self, client: int, process: simpy.Process) -> None:
        """Interrupt ``process`` if ``client`` goes offline before it ends (the task is then lost)."""
        if isinstance(self.availability, AlwaysOn):
            return
        self.env.process(self._watch(client, process))

    def _watch(self, client: int, process: simpy.Process) -> Generator[Any, Any, None]:
        env = self.env
        t_off = self.availability.next_change(client, env.now)
        if not math.isfinite(t_off):
            return
        yield env.any_of([process, env.timeout(t_off - env.now)])
        if process.is_alive:
            back = self.availability.next_change(client, env.now)
            self.trace.emit(env.now, "offline", client=client, start=env.now, end=back if math.isfinite(back) else None)
            process.interrupt("offline")

    # ------------------------------------------------------------------------------ energy
    def finish(self, horizon: float) -> None:
        """Charge idle power up to ``horizon`` for every client (call once, at the end of the run)."""
        for c in range(self.num_clients):
            self.energy.close(c, horizon, self.device(c).idle_w)

    def energy_table(self) -> "Any":
        """Joules per client with its device class."""
        df = self.energy.table()
        if len(df):
            names = np.array([self.profiles[k].name for k in self._group_keys], dtype=object)
            df["device_class"] = names[self._client_group[df["device"].to_numpy(dtype=np.int64)]]
        return df
