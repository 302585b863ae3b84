"""Network topology: which links a transfer crosses between a client and the server.

A topology is a tree (networkx graph) rooted at the server.  Edges carry ``rate_bps`` and
``latency_s``; an access edge may leave ``rate_bps`` as None, meaning "the wireless rate of this
transfer", supplied by the channel.  A transfer crosses hops one by one, store-and-forward
(each node receives the whole message before sending it on), so its time is
``sum_i (bits / rate_i + latency_i)`` (Kurose & Ross, *Computer Networking*, sec. 1.4).

* ``Topology.star``: clients connect straight to the server (the FL default).
* ``Topology.hierarchical``: clients -> access point / edge server -> cloud over a backhaul link
  (the client-edge-cloud setting of hierarchical FL, e.g. Liu et al., ICC 2020).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generator, Mapping

import simpy

from fedsim.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    import networkx as nx


def _nx():  # type: ignore[no-untyped-def]
    """networkx, imported on first use (only hierarchical networks need it; ~0.4 s of start-up otherwise)."""
    import networkx

    return networkx


@dataclass(frozen=True)
class Hop:
    """One link of a path, in the direction of travel."""

    src: Any
    dst: Any
    rate_bps: float | None
    latency_s: float
    kind: str

    def time(self, bits: float, access_rate_bps: float | None = None) -> float:
        rate = self.rate_bps if self.rate_bps is not None else access_rate_bps
        if rate is None:
            raise ConfigError("network.rate", f"link {self.src}->{self.dst} has no rate; pass the access rate")
        return (bits / rate if math.isfinite(rate) else 0.0) + self.latency_s


@dataclass(frozen=True)
class HopRecord:
    hop: Hop
    request: float
    start: float
    end: float
    wait: float
    transmit_s: float
    latency_s: float


class Topology:
    """A tree of nodes (clients, access points, the server) with per-link rate and latency."""

    def __init__(self, graph: nx.Graph, root: Any = "server") -> None:
        if root not in graph:
            raise ConfigError("network.root", f"root {root!r} is not a node of the topology")
        if not _nx().is_tree(graph):
            raise ConfigError("network", "the topology must be a tree (one path from each client to the server)")
        self.graph, self.root = graph, root

    @classmethod
    def star(cls, clients, access_rate_bps: float | None = None, access_latency_s: float = 0.0, root: Any = "server") -> "Topology":
        g = _nx().Graph()
        g.add_node(root, role="server")
        for c in clients:
            g.add_node(c, role="client")
            g.add_edge(c, root, rate_bps=access_rate_bps, latency_s=access_latency_s, kind="access")
        return cls(g, root)

    @classmethod
    def hierarchical(
        cls,
        assignment: Mapping[Any, Any],
        access_rate_bps: float | None = None,
        access_latency_s: float = 0.0,
        backhaul_rate_bps: float = 1e9,
        backhaul_latency_s: float = 0.005,
        root: Any = "cloud",
    ) -> "Topology":
        """``assignment`` maps each client to its access point / edge server name."""
        if backhaul_rate_bps is None or backhaul_rate_bps <= 0 or backhaul_latency_s < 0:
            raise ConfigError("network.backhaul", f"rate must be > 0 and latency >= 0, got {backhaul_rate_bps}, {backhaul_latency_s}")
        g = _nx().Graph()
        g.add_node(root, role="server")
        for ap in sorted(set(assignment.values()), key=str):
            g.add_node(ap, role="edge")
            g.add_edge(ap, root, rate_bps=backhaul_rate_bps, latency_s=backhaul_latency_s, kind="backhaul")
        for c, ap in assignment.items():
            g.add_node(c, role="client")
            g.add_edge(c, ap, rate_bps=access_rate_bps, latency_s=access_latency_s, kind="access")
        return cls(g, root)

    def path(self, client: Any, direction: str = "up") -> list[Hop]:
        """The hops from ``client`` to the server (``up``) or back (``down``)."""
        if client not in self.graph:
            raise ConfigError("network.client", f"client {client!r} is not in the topology")
        nodes = _nx().shortest_path(self.graph, client, self.root)
        if direction == "down":
            nodes = nodes[::-1]
        elif direction != "up":
            raise ConfigError("network.direction", f"unknown direction {direction!r} (allowed: up, down)")
        hops = []
        for u, v in zip(nodes, nodes[1:]):
            e = self.graph.edges[u, v]
            hops.append(Hop(u, v, e.get("rate_bps"), float(e.get("latency_s", 0.0)), e.get("kind", "link")))
        return hops

    def transfer_time(self, client: Any, bits: float, access_rate_bps: float | None = None, direction: str = "up") -> float:
        """Store-and-forward time without contention: sum over hops of bits / rate + latency."""
        return sum(h.time(bits, access_rate_bps) for h in self.path(client, direction))

    def traverse(
        self,
        env: simpy.Environment,
        client: Any,
        bits: float,
        access_rate=None,
        media: Mapping[tuple[Any, Any], Any] | None = None,
        direction: str = "up",
        progress: Any = None,
    ) -> Generator[simpy.Event, Any, list[HopRecord]]:
        """SimPy process: cross the hops one by one.  A hop whose (src, dst) or (dst, src) is in ``media``
        goes through that Medium (so a shared backhaul or air interface queues); others are dedicated.
        ``access_rate`` (number or ``share -> rate`` callable) is used for links without a fixed rate.
        ``progress`` (a :class:`fedsim.system.medium.Progress`) follows the client's own hop, the first going
        up and the last coming down: what the client's radio sent or received if the transfer is cut.
        """
        out = []
        path = self.path(client, direction)
        own = 0 if direction == "up" else len(path) - 1
        for i, hop in enumerate(path):
            prog = progress if i == own else None
            rate = hop.rate_bps if hop.rate_bps is not None else access_rate
            if rate is None:
                raise ConfigError("network.rate", f"link {hop.src}->{hop.dst} has no rate; pass access_rate")
            medium = None
            if media:
                medium = media.get((hop.src, hop.dst)) or media.get((hop.dst, hop.src))
            t0 = env.now
            if medium is not None:
                rec = yield from medium.transfer(client, bits, rate, prog)
                start, wait, tx = rec.start, rec.wait, rec.airtime
            else:
                r = rate(1.0) if callable(rate) else rate
                tx = bits / r if math.isfinite(r) else 0.0
                start, wait = t0, 0.0
                if prog is not None:
                    prog.start, prog.rate = t0, r
                yield env.timeout(tx)
            if prog is not None:
                prog.done = True
            yield env.timeout(hop.latency_s)
            out.append(HopRecord(hop, t0, start, env.now, wait, tx, hop.latency_s))
        return out


def rate_graph(world: Any) -> tuple[nx.Graph, Any] | None:
    """``(graph, root)`` of a world's hierarchical network with each link's rate (an access link without
    one at its client's nominal uplink rate), or None for a star network: what ``topology.png`` draws,
    taken from the live world so the figure can be drawn after the world is gone (or in another process)."""
    topo = getattr(world, "topology", None)
    if topo is None:
        return None
    g = topo.graph.copy()
    for u, v, attrs in g.edges(data=True):
        if attrs.get("rate_bps") is None:
            client = u if g.nodes[u].get("role") == "client" else v
            attrs["rate_bps"] = world.uplink_bps(int(client))
    return g, topo.root


def draw_topology(topology: Topology | nx.Graph, path: list[Hop] | None = None, ax=None, root: Any = None):
    """Figure of the topology with link rates (Mbit/s) and, if given, a path highlighted (a new
    :class:`matplotlib.figure.Figure`, made without pyplot, unless ``ax`` is given)."""
    from matplotlib.figure import Figure

    nx = _nx()

    if isinstance(topology, Topology):
        g, root = topology.graph, topology.root
    else:
        g = topology
    if ax is None:
        fig = Figure(figsize=(6, 4.5))
        ax = fig.subplots()
    else:
        fig = ax.figure
    # layered layout: server on top, then edge nodes, then clients
    depth = nx.shortest_path_length(g, root) if root is not None else {n: 0 for n in g}
    layers: dict[int, list] = {}
    for n, d in depth.items():
        layers.setdefault(d, []).append(n)
    posn: dict[Any, tuple[float, float]] = {}

    def natural(n: Any) -> tuple:
        return (0, n, "") if isinstance(n, (int, float)) else (1, 0, str(n))

    for d in sorted(layers):
        # children sit under their parent (no crossing edges), in natural order within a parent
        def key(n: Any) -> tuple:
            parent = next((m for m in g.neighbors(n) if depth.get(m) == d - 1), None)
            return (posn.get(parent, (0.0, 0.0))[0], natural(n))

        nodes = sorted(layers[d], key=key)
        for i, n in enumerate(nodes):
            posn[n] = ((i + 1) / (len(nodes) + 1), -d)
    colors = {"server": "tab:red", "edge": "tab:orange", "client": "tab:blue"}
    nx.draw_networkx_nodes(g, posn, ax=ax, node_size=260,
                           node_color=[colors.get(g.nodes[n].get("role"), "tab:gray") for n in g])
    nx.draw_networkx_labels(g, posn, ax=ax, font_size=7)
    on_path = {frozenset((h.src, h.dst)) for h in (path or [])}
    nx.draw_networkx_edges(g, posn, ax=ax, edge_color=["tab:red" if frozenset(e) in on_path else "0.6" for e in g.edges],
                           width=[2.5 if frozenset(e) in on_path else 1.0 for e in g.edges])

    def label(e):
        r = g.edges[e].get("rate_bps")
        lat = g.edges[e].get("latency_s", 0.0)
        rate = "channel" if r is None else f"{r / 1e6:.3g} Mb/s"
        return f"{rate}\n{lat * 1e3:g} ms" if lat else rate

    many = sum(1 for n in g if g.nodes[n].get("role") == "client") > 12
    labels = {e: label(e) for e in g.edges if not (many and "client" in (g.nodes[e[0]].get("role"), g.nodes[e[1]].get("role")))}
    nx.draw_networkx_edge_labels(g, posn, ax=ax, edge_labels=labels, font_size=6)
    if many:  # too many access links to label each: give their range
        acc = [g.edges[e].get("rate_bps") for e in g.edges if e not in labels and g.edges[e].get("rate_bps")]
        if acc:
            ax.set_title(f"access links {min(acc) / 1e6:.3g}–{max(acc) / 1e6:.3g} Mb/s", fontsize=8)
    ax.set_axis_off()
    return fig
