"""The physical world wired into runs: presets, medium access, topology, availability, energy."""
from __future__ import annotations

import math

import numpy as np
import pytest
import simpy

from fedsim.runner import run_scenario
from fedsim import scenario_from_mapping
from fedsim.sim.rng import Streams
from fedsim.sim.trace import Trace, load_trace
from fedsim.system.world import World

N0 = 3.981e-21  # W/Hz, -174 dBm/Hz


def _world(mapping: dict, n: int) -> tuple[simpy.Environment, World, Trace]:
    sc = scenario_from_mapping({"stop": {"max_versions": 1}, **mapping})
    env = simpy.Environment()
    trace = Trace(None)
    return env, World.from_scenario(env, Streams(sc.seed), trace, n, sc), trace


def _gas_rate(d_km: float) -> float:
    """GAS code's rate, written out from its constants: W log2(1 + P h / (W N0)), h = 10^(-PL/10)."""
    pl = 128.1 + 37.6 * math.log10(d_km)
    return 10e6 * math.log2(1 + 0.2 * 10 ** (-pl / 10) / (10e6 * N0))


def test_gas_cell_preset_upload_times_and_communication_dominates():
    """GAS §3.2: a 32-sample activation upload takes ~35 ms at 100 m and ~505 ms at 1 km; compute
    per iteration (5,603,328 FLOP at 1e9–1e10 FLOP/s) is 0.6–5.6 ms, so communication dominates."""
    mapping = {"channel": {"preset": "gas-cell", "positions": {"kind": "fixed", "points": [[100, 0], [0, 1000]]}},
               "devices": {"mix": [{"profile": "jetson-nano", "flops_per_s": [1e9, 1e10]}], "jitter": 0.0},
               "network": {"latency_s": 0.0}}
    env, world, trace = _world(mapping, 2)
    bits = 131_072 * 32
    for c in (0, 1):
        env.process(world.upload(c, bits // 8))
        env.process(world.compute(c, 5_603_328))
    env.run()
    df = trace.frame()
    up = df[df["kind"] == "upload"].set_index("client")
    comp = df[df["kind"] == "compute"].set_index("client")
    t_up = (up["end"] - up["start"]).to_dict()
    assert t_up[0] == pytest.approx(bits / _gas_rate(0.1), rel=1e-9)
    assert t_up[1] == pytest.approx(bits / _gas_rate(1.0), rel=1e-9)
    assert 0.030 < t_up[0] < 0.040 and 0.45 < t_up[1] < 0.55  # the spec's "35 ms" and "505 ms"
    t_comp = (comp["end"] - comp["start"]).to_dict()
    for c in (0, 1):
        assert 5_603_328 / 1e10 <= t_comp[c] <= 5_603_328 / 1e9
        assert t_up[c] > 5 * t_comp[c]
    # the downlink is not modelled by GAS: instantaneous
    env2, world2, trace2 = _world(mapping, 2)
    env2.process(world2.download(0, 10_000_000))
    env2.run()
    assert trace2.frame()["end"].iloc[0] == 0.0


def test_fdma_and_tdma_through_the_world_match_closed_forms():
    """K equal uploads started together on a fixed-rate band: FDMA all end at K·S/R; TDMA the k-th at k·S/R."""
    k, nbytes, mbps = 4, 250_000, 8.0
    s_over_r = 8 * nbytes / (mbps * 1e6)
    for access, expected in (("fdma", [k * s_over_r] * k), ("tdma", [s_over_r * (i + 1) for i in range(k)])):
        mapping = {"channel": {"uplink": {"model": "fixed", "mbps": mbps}}, "network": {"access": access, "latency_s": 0.0}}
        env, world, trace = _world(mapping, k)
        world.schedule(k)
        for c in range(k):
            env.process(world.upload(c, nbytes))
        env.run()
        ends = sorted(trace.frame().query("kind == 'upload'")["end"])
        np.testing.assert_allclose(ends, expected, rtol=1e-12)
        if access == "tdma":  # waiting is recorded apart from airtime
            up = trace.frame().query("kind == 'upload'").sort_values("end")
            np.testing.assert_allclose(up["airtime"], [s_over_r] * k, rtol=1e-12)
            np.testing.assert_allclose(up["wait"], [s_over_r * i for i in range(k)], rtol=1e-12, atol=1e-15)


def test_hierarchical_topology_crosses_hops_store_and_forward():
    """Access link, then a backhaul hop with its own rate and latency: T = S/R_access + L_a + S/R_bh + L_bh."""
    nbytes = 1_000_000
    mapping = {"channel": {"uplink": {"model": "fixed", "mbps": 10.0}},
               "network": {"latency_s": 0.002, "topology": {"kind": "hierarchical", "edge_servers": 1,
                                                            "backhaul_mbps": 100.0, "backhaul_latency_s": 0.005}}}
    env, world, trace = _world(mapping, 1)
    env.process(world.upload(0, nbytes))
    env.run()
    t = trace.frame()["end"].iloc[0]
    bits = 8 * nbytes
    assert t == pytest.approx(bits / 10e6 + 0.002 + bits / 100e6 + 0.005, rel=1e-12)


def test_energy_is_power_times_time():
    mapping = {"devices": {"mix": [{"profile": "jetson-nano"}], "jitter": 0.0},
               "channel": {"uplink": {"model": "fixed", "mbps": 4.0, "tx_power_w": 0.2}}, "network": {"latency_s": 0.0}}
    env, world, trace = _world(mapping, 1)
    prof = world.device(0)
    env.process(world.compute(0, 1e9))
    env.run()
    env.process(world.upload(0, 500_000))
    env.run()
    world.finish(10.0)
    row = world.energy_table().iloc[0]
    t_comp = 1e9 / prof.train_flops_per_s()
    assert row["compute_j"] == pytest.approx(t_comp * prof.power_w(), rel=1e-12)
    t_air = 8 * 500_000 / 4e6
    tx_w = prof.tx_power_w or 0.2
    assert row["tx_j"] == pytest.approx(t_air * tx_w, rel=1e-12)
    assert row["idle_j"] == pytest.approx((10.0 - t_comp - t_air) * prof.idle_w, rel=1e-12)


def test_client_going_offline_mid_task_is_dropped(tiny, tmp_path):
    """A trace says client 0 leaves at t = 0.05 s, mid-task: that task is lost and recorded as a drop."""
    path = tmp_path / "avail.csv"
    rows = ["client,start,end", "0,0,0.05"] + [f"{c},0,1000000" for c in range(1, 6)]
    path.write_text("\n".join(rows) + "\n")
    tiny["availability"] = {"model": "trace", "path": str(path)}
    tiny["algorithm"] = {"name": "fedavg", "clients_per_round": 6}
    tiny["stop"] = {"max_versions": 3}
    run_scenario(scenario_from_mapping(tiny), tmp_path / "run", progress=False)
    df = load_trace(tmp_path / "run")
    drops = df[df["kind"] == "drop"]
    assert list(drops["client"]) == [0] and drops["reason"].iloc[0] == "offline"
    assert drops["t"].iloc[0] == pytest.approx(0.05)
    applied = df[df["kind"] == "apply"]
    assert (applied[applied["client"] == 0]["t"] < 0.05).all()  # nothing of client 0 after it left
    after = df[(df["kind"] == "dispatch") & (df["t"] > 0.05)]
    assert len(after) > 0 and 0 not in set(after["client"])  # offline clients are not sampled
    assert (df[df["kind"] == "offline"]["client"] == 0).all()


def test_mobility_changes_distance_and_rate_over_a_run():
    mapping = {"channel": {"uplink": {"model": "tr36814"}, "downlink": {"model": "ideal"},
                           "positions": {"kind": "annulus", "r_min_m": 50, "r_max_m": 1000},
                           "mobility": {"kind": "random_waypoint", "speed_mps": [20, 30]}}}
    env, world, _ = _world(mapping, 3)
    d0 = [world.distance(c, 0.0) for c in range(3)]
    d1 = [world.distance(c, 60.0) for c in range(3)]
    assert all(abs(a - b) > 1.0 for a, b in zip(d0, d1))
    assert all(0 <= d <= 1000 + 1e-9 for d in d0 + d1)


def test_systems_only_mode_costs_without_training(tiny, tmp_path):
    tiny["train"]["systems_only"] = True
    tiny["algorithm"] = {"name": "fedbuff", "concurrency": 3, "buffer_size": 2}
    [s] = run_scenario(scenario_from_mapping(tiny), tmp_path, progress=False)
    assert s["status"] == "ok" and s["final_accuracy"] is None
    comp = load_trace(tmp_path).query("kind == 'compute'")
    assert (comp["flops"] > 0).all()
    assert s["versions"] == 4


def test_unknown_preset_and_channel_model_are_one_line_errors():
    from fedsim.errors import ConfigError

    with pytest.raises(ConfigError, match=r"channel.preset: .*gas-cell"):
        scenario_from_mapping({"channel": {"preset": "mars-cell"}})
    with pytest.raises(ConfigError, match=r"channel.uplink.model: .*tr36814"):
        scenario_from_mapping({"channel": {"uplink": {"model": "warp"}}})


def test_preset_field_override_keeps_the_rest_of_the_preset():
    """channel.uplink.bandwidth_hz next to the gas-cell preset changes only the bandwidth."""
    from fedsim import load_scenario

    sc = load_scenario("fedasync", ["channel.preset=gas-cell", "channel.uplink.bandwidth_hz=5e6"])
    up = sc.channel.uplink
    assert up.model == "tr36814" and up.bandwidth_hz == 5e6 and up.tx_power_w == 0.2
    env, world, trace = _world({"channel": {"preset": "gas-cell", "uplink": {"bandwidth_hz": 5e6},
                                            "positions": {"kind": "fixed", "points": [[0, 1000]]}},
                                "network": {"latency_s": 0.0}}, 1)
    env.process(world.upload(0, 1_000_000))
    env.run()
    pl = 128.1 + 37.6 * math.log10(1.0)
    rate = 5e6 * math.log2(1 + 0.2 * 10 ** (-pl / 10) / (5e6 * N0))
    assert trace.frame()["end"].iloc[0] == pytest.approx(8e6 / rate, rel=1e-9)


def test_half_width_submodel_with_half_the_flops_takes_half_the_time(tiny, tmp_path):
    """Costs come from the real model: an MLP with half the hidden units has half the FLOPs (counted by
    FlopCounterMode), and on the same device its local training takes exactly half the time."""
    from fedsim.learn.costs import flops_per_sample
    from fedsim.learn.models import build_model

    full, half = (flops_per_sample(build_model("mlp", (1, 8, 8), 10, hidden=h), (1, 8, 8)).total for h in (64, 32))
    assert half == pytest.approx(full / 2, rel=1e-12)
    durations = {}
    for h in (64, 32):
        tiny["model"] = {"name": "mlp", "hidden": h}
        tiny["devices"] = {"mix": [{"profile": "jetson-tx2"}], "jitter": 0.0}
        run_scenario(scenario_from_mapping(tiny), tmp_path / str(h), progress=False)
        comp = load_trace(tmp_path / str(h), kinds=("compute",)).sort_values(["t", "client"])
        durations[h] = (comp["end"] - comp["start"]).to_numpy()
    np.testing.assert_allclose(durations[32], durations[64] / 2, rtol=1e-9)  # end − start rounding


def test_same_seed_identical_trace_with_the_whole_physical_layer(tiny, tmp_path):
    """Fading, shadowing, mobility, FDMA, a hierarchical network and on/off availability: still byte-identical."""
    tiny["channel"] = {"uplink": {"model": "tr38901_umi", "frequency_hz": 3.5e9, "fading": "rayleigh", "shadowing_db": None},
                       "downlink": {"model": "fixed", "mbps": [10, 50]},
                       "positions": {"kind": "annulus", "r_min_m": 20, "r_max_m": 300},
                       "mobility": {"kind": "random_waypoint", "speed_mps": [1, 3]}}
    tiny["network"] = {"access": "fdma", "topology": {"kind": "hierarchical", "edge_servers": 2, "backhaul_mbps": 50}}
    tiny["availability"] = {"model": "exponential", "mean_on_s": 2.0, "mean_off_s": 0.5}
    tiny["algorithm"] = {"name": "fedbuff", "concurrency": 4, "buffer_size": 2}
    tiny["stop"] = {"max_versions": 8}
    for name in ("a", "b"):
        run_scenario(scenario_from_mapping(tiny), tmp_path / name, progress=False)
    a, b = ((tmp_path / n / "trace.jsonl").read_bytes() for n in "ab")
    assert a == b and len(a) > 0


def test_per_client_draws_are_each_clients_own_stream_and_shared_read_only_between_worlds():
    """A world's per-client draws (device group and speed, fixed link rates, positions) are each client's
    own named stream, written out here from ``Streams`` alone; a second world of the same inputs (the
    preflight builds two before the run builds its own) reuses them, read-only, and another seed does not."""
    from fedsim.system.world import device_draws, drawn_positions, fixed_link_rates

    mapping = {"seed": 3, "data": {"num_clients": 40},
               "devices": {"mix": [{"profile": "jetson-nano", "weight": 1, "flops_per_s": [1e9, 4e9]},
                                   {"profile": "jetson-agx-orin-32gb", "weight": 3}]},
               "channel": {"uplink": {"model": "fixed", "mbps": [2, 20]}, "downlink": {"model": "free_space"}}}
    _, w, _ = _world(mapping, 40)
    s = Streams(3)
    for c in (0, 17, 39):
        rng = s.numpy("device", c)
        g = int(rng.choice(2, p=[0.25, 0.75]))
        assert w._client_group[c] == g
        assert w._flops_per_s[c] == (rng.uniform(1e9, 4e9) if g == 0 else 0.0)
        up = math.exp(s.numpy("link", "up", c).uniform(math.log(2e6), math.log(20e6)))
        assert w.links["up"].per_client[c] == up
        r = math.sqrt(s.numpy("position", c).uniform(10.0**2, 500.0**2))  # annulus: uniform in area
        assert math.isclose(math.hypot(*w.positions[c]), r, rel_tol=1e-12)
    _, w2, _ = _world(mapping, 40)
    assert w2.links["up"].per_client is w.links["up"].per_client and w2.positions.base is w.positions.base
    assert np.array_equal(w2._client_group, w._client_group) and np.array_equal(w2._flops_per_s, w._flops_per_s)
    with pytest.raises(ValueError, match="read-only"):
        w.links["up"].per_client[0] = 1.0
    _, w3, _ = _world({**mapping, "seed": 4}, 40)
    assert not np.array_equal(w3.links["up"].per_client, w.links["up"].per_client)
    for fn in (device_draws, drawn_positions, fixed_link_rates):
        assert fn.cache_info().maxsize is not None  # bounded: a sweep of many seeds holds a few worlds' draws
