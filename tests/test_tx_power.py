"""One rule for transmit power: a device profile's ``radio.tx_power`` beats ``channel.uplink.tx_power_w``, and the
uplink SNR and the transmit energy both use the resolved power (``devices.resolve_tx_power``).

Known truths: on a log-distance uplink with no shadowing or fading, at 100 m (PL = 40 + 30 log10(100) = 100 dB),
a client's SNR is P 10^-10 / (N0 B) with P its resolved power, its upload's rate B log2(1 + SNR), and its
transmit energy P x airtime.  raspberry-pi-4's profile states 0.1 W; jetson-nano's states none.
"""
from __future__ import annotations

import math

import pytest
import simpy

from fedsim import scenario_from_mapping
from fedsim.cli import main
from fedsim.sim.rng import Streams
from fedsim.sim.trace import Trace
from fedsim.system.channel import N0_W_PER_HZ
from fedsim.system.devices import load_profile, resolve_tx_power
from fedsim.system.world import World

B = 1e6
UPLINK = {"model": "log_distance", "pl0_db": 40.0, "d0_m": 1.0, "exponent": 3.0, "shadowing_db": 0.0,
          "fading": "none", "bandwidth_hz": B}


def _world(channel_w: float | None):
    uplink = dict(UPLINK, **({} if channel_w is None else {"tx_power_w": channel_w}))
    sc = scenario_from_mapping({
        "stop": {"max_versions": 1}, "data": {"num_clients": 2},
        "devices": {"mix": [{"profile": "raspberry-pi-4", "count": 1}, {"profile": "jetson-nano", "count": 1}],
                    "jitter": 0.0},
        "channel": {"uplink": uplink, "downlink": {"model": "fixed", "mbps": 10.0},
                    "positions": {"kind": "fixed", "points": [[100.0, 0.0], [100.0, 0.0]]}},
        "network": {"latency_s": 0.0}})
    env = simpy.Environment()
    return env, World.from_scenario(env, Streams(sc.seed), Trace(None), 2, sc), None


def test_the_profile_power_beats_the_channel_power():
    pi, nano = load_profile("raspberry-pi-4"), load_profile("jetson-nano")
    assert resolve_tx_power(pi, 1.0) == (0.1, "device profile radio.tx_power")
    assert resolve_tx_power(nano, 1.0) == (1.0, "channel.uplink.tx_power_w")
    assert resolve_tx_power(nano, None)[0] == 0.2


def test_snr_and_energy_use_the_same_power():
    env, world, _ = _world(1.0)
    assert world.device_name(0) == "raspberry-pi-4" and world.device_name(1) == "jetson-nano"
    noise = N0_W_PER_HZ * B
    for client, power in ((0, 0.1), (1, 1.0)):
        snr = world.links["up"].model.mean_snr(client, 100.0)
        assert snr == pytest.approx(power * 1e-10 / noise, rel=1e-12)
        rate = B * math.log2(1 + power * 1e-10 / noise)
        assert world.uplink_bps(client) == pytest.approx(rate, rel=1e-12)
        env.process(world.upload(client, 125_000))
        env.run()
    world.finish(env.now)
    table = world.energy_table().set_index("device")
    for client, power in ((0, 0.1), (1, 1.0)):
        airtime = 8 * 125_000 / (B * math.log2(1 + power * 1e-10 / noise))
        assert table.at[client, "tx_s"] == pytest.approx(airtime, rel=1e-12)
        assert table.at[client, "tx_j"] == pytest.approx(power * airtime, rel=1e-12)
    # deliberately broken: the pre-fix SNR (the channel's 1 W for every client) would make both SNRs equal
    assert world.links["up"].model.mean_snr(0, 100.0) != pytest.approx(world.links["up"].model.mean_snr(1, 100.0))


def test_an_overridden_channel_power_is_said_once():
    _, world, _ = _world(1.0)
    said = [w for w in world.input_warnings if "tx_power_w" in w]
    assert len(said) == 1 and "raspberry-pi-4 (0.1 W)" in said[0] and "jetson-nano" not in said[0]
    _, world, _ = _world(None)  # the default was not set by anyone: nothing to say
    assert not [w for w in world.input_warnings if "tx_power_w" in w]


def test_show_prints_the_resolved_power_per_device_class(capsys):
    code = main(["show", "default", "channel.uplink.tx_power_w=1.0",
                 "devices.mix=[{profile: raspberry-pi-4}, {profile: jetson-nano}]"])
    out = capsys.readouterr().out
    assert code == 0
    assert "#   raspberry-pi-4: 0.1 W (device profile radio.tx_power)" in out
    assert "#   jetson-nano: 1 W (channel.uplink.tx_power_w)" in out
