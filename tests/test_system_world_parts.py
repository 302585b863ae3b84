"""Availability, energy and topology building blocks."""
from __future__ import annotations

import math

import numpy as np
import pytest
import simpy

from fedsim.errors import ConfigError
from fedsim.sim.rng import Streams
from fedsim.system.availability import (
    AlwaysOn,
    BernoulliPerRound,
    ExponentialOnOff,
    TraceAvailability,
    make_availability,
)
from fedsim.system.devices import load_profile
from fedsim.system.energy import EnergyMeter, cpu_dynamic_energy
from fedsim.system.medium import TDMA
from fedsim.system.topology import Topology, draw_topology

pytestmark = pytest.mark.fast  # a quick file: part of `pytest -m fast` (tests/README.md)


# ---------------------------------------------------------------------------------------- availability

def test_always_on():
    a = AlwaysOn()
    assert a.is_online(3, 1e9) and a.next_change(3, 0.0) == math.inf


def test_bernoulli_fraction_and_independence_of_clients():
    a = BernoulliPerRound(0.3, Streams(1))
    frac = np.mean([a.available_in_round(c, r) for c in range(50) for r in range(200)])
    assert frac == pytest.approx(0.3, abs=0.02)
    b = BernoulliPerRound(0.3, Streams(1))
    b.available_in_round(49, 500)  # touching another client first changes nothing
    assert [b.available_in_round(7, r) for r in range(200)] == [a.available_in_round(7, r) for r in range(200)]
    with pytest.raises(ConfigError, match="slot_s"):
        a.is_online(0, 1.0)
    s = BernoulliPerRound(0.5, Streams(2), slot_s=10.0)
    t = s.next_change(0, 0.0)
    assert t % 10.0 == 0 and s.is_online(0, t) != s.is_online(0, 0.0)


def test_exponential_on_off_long_run_fraction_and_session_mean():
    a = ExponentialOnOff(mean_on_s=30.0, mean_off_s=70.0, streams=Streams(5))
    on_total, sessions = 0.0, []
    horizon = 20_000.0
    for c in range(20):
        ivs = a.online_intervals(c, 0.0, horizon)
        on_total += sum(e - s for s, e in ivs)
        sessions += [e - s for s, e in ivs if s > 0 and e < horizon]
    assert on_total / (20 * horizon) == pytest.approx(0.3, abs=0.02)
    assert np.mean(sessions) == pytest.approx(30.0, rel=0.06)
    t = a.next_change(0, 123.0)
    assert t > 123.0 and a.is_online(0, t) != a.is_online(0, 123.0)


def test_trace_availability(tmp_path):
    f = tmp_path / "trace.csv"
    f.write_text("client,start,end\n0,10,20\n0,15,30\n0,50,60\n1,0,5\n")
    a = TraceAvailability.from_csv(f)
    assert not a.is_online(0, 9.99) and a.is_online(0, 10.0) and a.is_online(0, 29.9) and not a.is_online(0, 30.0)
    assert a.next_change(0, 12.0) == 30.0  # overlapping intervals merged
    assert a.next_change(0, 30.0) == 50.0 and a.next_change(0, 60.0) == math.inf
    assert a.online_intervals(0, 0.0, 100.0) == [(10.0, 30.0), (50.0, 60.0)]
    assert not a.is_online(2, 1.0)  # absent clients are offline
    f.write_text("who,when\n")
    with pytest.raises(ConfigError, match="client,start,end"):
        TraceAvailability.from_csv(f)
    with pytest.raises(ConfigError, match="allowed"):
        make_availability("sometimes")


# ---------------------------------------------------------------------------------------- energy

def test_energy_meter_by_hand():
    nano = load_profile("jetson-nano")
    m = EnergyMeter()
    m.compute_on("c0", 12.0, nano)  # 10 W MAXN x 12 s = 120 J
    m.compute_on("c0", 4.0, nano, mode="5W")  # 20 J
    m.transmit("c0", 3.0, 0.2)  # 0.6 J
    idle = m.close("c0", 100.0, nano.idle_w)  # (100 - 16 - 3) s x 1.25 W
    assert idle == pytest.approx(81 * 1.25)
    assert m.total("c0") == pytest.approx(120 + 20 + 0.6 + 81 * 1.25)
    t = m.table()
    assert list(t["device"]) == ["c0"] and t.loc[0, "busy_s"] == 16.0 and t.loc[0, "tx_s"] == 3.0
    assert cpu_dynamic_energy(1e-28, 2e9, 1e9) == pytest.approx(0.2)
    with pytest.raises(ConfigError):
        m.compute("c1", -1.0, 5.0)


def test_radio_energy_counts_airtime_not_waiting():
    env = simpy.Environment()
    tdma = TDMA(env)
    m = EnergyMeter()

    def up(c):
        rec = yield from tdma.transfer(c, 2e6, 1e6)
        m.transmit(c, rec.airtime, 0.2)

    for c in range(3):
        env.process(up(c))
    env.run()
    # the third client waited 4 s but was on air only 2 s
    assert m.accounts[2].tx_j == pytest.approx(0.4)
    assert tdma.records[2].wait == pytest.approx(4.0)


# ---------------------------------------------------------------------------------------- topology

def test_star_path_and_time():
    topo = Topology.star(range(3), access_rate_bps=None, access_latency_s=0.01)
    hops = topo.path(1)
    assert [(h.src, h.dst) for h in hops] == [(1, "server")]
    assert topo.transfer_time(1, 8e6, access_rate_bps=4e6) == pytest.approx(2.0 + 0.01)
    with pytest.raises(ConfigError, match="access rate"):
        topo.transfer_time(1, 8e6)


def test_hierarchical_store_and_forward():
    topo = Topology.hierarchical({0: "ap0", 1: "ap0", 2: "ap1"}, access_rate_bps=10e6, access_latency_s=0.002,
                                 backhaul_rate_bps=100e6, backhaul_latency_s=0.02)
    up = topo.path(2)
    assert [(h.src, h.dst, h.kind) for h in up] == [(2, "ap1", "access"), ("ap1", "cloud", "backhaul")]
    down = topo.path(2, "down")
    assert [(h.src, h.dst) for h in down] == [("cloud", "ap1"), ("ap1", 2)]
    bits = 50e6
    by_hand = (bits / 10e6 + 0.002) + (bits / 100e6 + 0.02)
    assert topo.transfer_time(2, bits) == pytest.approx(by_hand)

    env = simpy.Environment()
    out = {}

    def go():
        out["hops"] = yield from topo.traverse(env, 2, bits)

    env.process(go())
    env.run()
    assert out["hops"][-1].end == pytest.approx(by_hand)
    assert out["hops"][1].start == pytest.approx(bits / 10e6 + 0.002)


def test_shared_backhaul_queues():
    topo = Topology.hierarchical({0: "ap0", 1: "ap0"}, access_rate_bps=10e6, backhaul_rate_bps=10e6,
                                 backhaul_latency_s=0.0)
    env = simpy.Environment()
    backhaul = TDMA(env)
    ends = {}

    def go(c):
        hops = yield from topo.traverse(env, c, 10e6, media={("ap0", "cloud"): backhaul})
        ends[c] = hops[-1]

    env.process(go(0))
    env.process(go(1))
    env.run()
    # both reach ap0 at 1 s; the backhaul serves them one after the other: 2 s and 3 s
    assert sorted(h.end for h in ends.values()) == pytest.approx([2.0, 3.0])
    assert max(h.wait for h in ends.values()) == pytest.approx(1.0)


def test_draw_topology(tmp_path):
    topo = Topology.hierarchical({0: "ap0", 1: "ap0", 2: "ap1"}, access_rate_bps=None)
    fig = draw_topology(topo, topo.path(2))
    fig.savefig(tmp_path / "topo.png")
    assert (tmp_path / "topo.png").stat().st_size > 1000
