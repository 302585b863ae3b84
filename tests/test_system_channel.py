"""Channel models against hand calculation from the formula constants, and the ergodic-rate identity."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats
from scipy.special import exp1

from fedsim.errors import ConfigError
from fedsim.sim.rng import Streams
from fedsim.system import positions as pos
from fedsim.system.channel import (
    CHANNEL_PRESETS,
    ChannelConfig,
    LinkModel,
    ergodic_rayleigh_rate,
    fading_gain,
    free_space_db,
    log_distance_db,
    los_probability_uma,
    los_probability_umi,
    preset,
    shadowing_db,
    shannon_rate,
    snr,
    tr36814_macro_db,
    tr38901_uma_db,
    tr38901_umi_db,
)

pytestmark = pytest.mark.fast  # a quick file: part of `pytest -m fast` (tests/README.md)

L = math.log10


# ---------------------------------------------------------------------------------------- path loss

@pytest.mark.parametrize("d_m, f_hz", [(1.0, 2.4e9), (100.0, 2.4e9), (1000.0, 900e6), (250.0, 28e9)])
def test_free_space(d_m, f_hz):
    c = 299792458.0
    expected = 20 * L(4 * math.pi * d_m * f_hz / c)
    assert free_space_db(d_m, f_hz) == pytest.approx(expected, abs=1e-9)
    # the textbook constant form: 20log d + 20log f - 147.55
    assert free_space_db(d_m, f_hz) == pytest.approx(20 * L(d_m) + 20 * L(f_hz) - 147.55, abs=0.01)


def test_log_distance():
    assert log_distance_db(100.0, 40.0, 1.0, 3.0) == pytest.approx(100.0)
    assert log_distance_db(10.0, 40.0, 1.0, 2.0) == pytest.approx(60.0)
    assert log_distance_db(1.0, 40.0, 1.0, 3.5) == pytest.approx(40.0)


@pytest.mark.parametrize("d_m, expected", [(1000.0, 128.1), (100.0, 128.1 - 37.6), (500.0, 128.1 + 37.6 * L(0.5)), (2000.0, 128.1 + 37.6 * L(2))])
def test_tr36814(d_m, expected):
    assert tr36814_macro_db(d_m) == pytest.approx(expected, abs=1e-9)


def test_uma_published_test_vector():
    # 3.5 GHz, h_BS 25 m, h_UT 1.5 m, d_2D 100 m -> d_3D 102.7241 m, LOS 83.1381 dB, NLOS 103.0375 dB.
    assert tr38901_uma_db(100.0, 3.5e9, 25.0, 1.5, los=True) == pytest.approx(83.1381, abs=1e-3)
    assert tr38901_uma_db(100.0, 3.5e9, 25.0, 1.5, los=False) == pytest.approx(103.0375, abs=1e-3)
    # re-derived from the constants
    d3 = math.sqrt(100**2 + 23.5**2)
    assert d3 == pytest.approx(102.7241, abs=1e-4)
    assert 28.0 + 22 * L(d3) + 20 * L(3.5) == pytest.approx(83.1381, abs=1e-3)
    assert 13.54 + 39.08 * L(d3) + 20 * L(3.5) == pytest.approx(103.0375, abs=1e-3)


def test_uma_beyond_breakpoint():
    # 3.5 GHz, h_BS 25, h_UT 1.5: d'_BP = 4 * 24 * 0.5 * 3.5e9 / 3e8 = 560 m.
    d, dbp = 1200.0, 560.0
    d3 = math.sqrt(d**2 + 23.5**2)
    expected = 28.0 + 40 * L(d3) + 20 * L(3.5) - 9 * L(dbp**2 + 23.5**2)
    assert tr38901_uma_db(d, 3.5e9, los=True) == pytest.approx(expected, abs=1e-9)
    nlos = 13.54 + 39.08 * L(d3) + 20 * L(3.5)
    assert tr38901_uma_db(d, 3.5e9, los=False) == pytest.approx(max(expected, nlos), abs=1e-9)


def test_umi_breakpoint_and_branches():
    # 3.5 GHz, h_BS 10, h_UT 1.5: d'_BP = 4 * 9 * 0.5 * 3.5e9 / 3e8 = 210 m.
    f, dbp, dh = 3.5e9, 210.0, 8.5
    for d in (50.0, 150.0):
        d3 = math.sqrt(d**2 + dh**2)
        assert tr38901_umi_db(d, f, los=True) == pytest.approx(32.4 + 21 * L(d3) + 20 * L(3.5), abs=1e-9)
    for d in (300.0, 900.0):
        d3 = math.sqrt(d**2 + dh**2)
        pl2 = 32.4 + 40 * L(d3) + 20 * L(3.5) - 9.5 * L(dbp**2 + dh**2)
        assert tr38901_umi_db(d, f, los=True) == pytest.approx(pl2, abs=1e-9)
    # continuity at the breakpoint: PL1 and PL2 agree there
    below = tr38901_umi_db(dbp * (1 - 1e-9), f)
    above = tr38901_umi_db(dbp * (1 + 1e-9), f)
    assert below == pytest.approx(above, abs=1e-6)


def test_umi_nlos_at_28ghz():
    d, f = 200.0, 28e9
    d3 = math.sqrt(d**2 + 8.5**2)
    nlos = 35.3 * L(d3) + 22.4 + 21.3 * L(28)
    los = 32.4 + 21 * L(d3) + 20 * L(28)  # d'_BP = 4*9*0.5*28e9/3e8 = 1680 m > 200 m
    assert tr38901_umi_db(d, f, los=False) == pytest.approx(max(los, nlos), abs=1e-9)
    assert nlos > los


def test_los_probabilities():
    for d in (10.0, 18.0):
        assert los_probability_umi(d) == 1.0 and los_probability_uma(d) == 1.0
    assert los_probability_umi(100.0) == pytest.approx(0.18 + math.exp(-100 / 36) * 0.82)
    assert los_probability_uma(100.0) == pytest.approx(0.18 + math.exp(-100 / 63) * 0.82)
    # UMa with a tall UT: C' = ((23 - 13)/10)^1.5 = 1
    base = 0.18 + math.exp(-100 / 63) * 0.82
    assert los_probability_uma(100.0, h_ut=23.0) == pytest.approx(base * (1 + 1.25 * 1.0 * math.exp(-100 / 150)))


# ---------------------------------------------------------------------------------------- SNR, rate, fading

def test_gas_rates_match_the_paper_code():
    # GAS: W = 10 MHz, P = 0.2 W, N0 = 3.981e-21 W/Hz; 121 Mbps at 0.1 km, 35 Mbps at 0.5 km, 8.3 Mbps at 1 km.
    link = LinkModel(CHANNEL_PRESETS["gas-cell"].uplink, Streams(0))
    for client, (d, mbps) in enumerate([(100.0, 121.0), (500.0, 35.3), (1000.0, 8.30)]):
        h = 10 ** (-(128.1 + 37.6 * L(d / 1000)) / 10)
        by_hand = 1e7 * math.log2(1 + 0.2 * h / (1e7 * 3.981e-21))
        assert link.rate(client, d) == pytest.approx(by_hand, rel=1e-12)
        assert by_hand / 1e6 == pytest.approx(mbps, rel=0.01)
    assert math.isinf(LinkModel(CHANNEL_PRESETS["gas-cell"].downlink, Streams(0), "down").rate(0))


def test_snr_noise_figure():
    assert snr(1.0, 1e-10, 1e6) == pytest.approx(1e-10 / (3.981e-21 * 1e6))
    assert snr(1.0, 1e-10, 1e6, noise_figure_db=10.0) == pytest.approx(1e-10 / (3.981e-21 * 1e6 * 10))


@pytest.mark.parametrize("rho_db", [0.0, 10.0, 20.0])
def test_ergodic_rayleigh_rate(rho_db):
    rho = 10 ** (rho_db / 10)
    closed = math.log2(math.e) * math.exp(1 / rho) * float(exp1(1 / rho))  # the identity, by hand
    assert ergodic_rayleigh_rate(1.0, rho) == pytest.approx(closed, rel=1e-12)
    assert ergodic_rayleigh_rate(5e6, rho) == pytest.approx(5e6 * closed, rel=1e-12)
    # numerical integral of log2(1 + rho x) e^{-x}
    quad, _ = integrate.quad(lambda x: math.log2(1 + rho * x) * math.exp(-x), 0, math.inf)
    assert closed == pytest.approx(quad, rel=1e-6)
    # Monte Carlo with the block-fading sampler, within 2%
    g = fading_gain(Streams(11).numpy("test", "rayleigh"), "rayleigh", size=200_000)
    mc = float(np.mean(shannon_rate(1.0, rho * g)))
    assert mc == pytest.approx(closed, rel=0.02)
    # Jensen: fading loses capacity
    assert closed < math.log2(1 + rho)


def test_ergodic_rate_tiny_snr_uses_asymptotics():
    rho = 1e-4
    assert ergodic_rayleigh_rate(1.0, rho) == pytest.approx(rho * math.log2(math.e), rel=1e-3)


@pytest.mark.parametrize("k_db", [0.0, 9.0])
def test_rician_moments(k_db):
    k = 10 ** (k_db / 10)
    g = fading_gain(Streams(3).numpy("test", "rician"), "rician", k_db, size=200_000)
    assert g.mean() == pytest.approx(1.0, abs=0.01)
    assert g.var() == pytest.approx((2 * k + 1) / (k + 1) ** 2, rel=0.03)


def test_shadowing_sigma():
    x = shadowing_db(Streams(5).numpy("test", "shadow"), 8.0, size=100_000)
    assert x.mean() == pytest.approx(0.0, abs=0.1)
    assert x.std() == pytest.approx(8.0, rel=0.02)


def test_fdma_share_concentrates_power():
    cfg = ChannelConfig(model="tr36814", bandwidth_hz=10e6, tx_power_w=0.2)
    link = LinkModel(cfg, Streams(0))
    full = link.rate(0, 500.0)
    rho = cfg.mean_snr(500.0)
    assert link.rate(0, 500.0, bandwidth_share=0.25) == pytest.approx(2.5e6 * math.log2(1 + 4 * rho))
    assert link.rate(0, 500.0, bandwidth_share=0.25) > full / 4


def test_link_model_shadowing_is_per_client_and_shared_by_directions():
    cfg = ChannelConfig(model="tr36814", shadowing_db=8.0)
    s = Streams(9)
    up, down = LinkModel(cfg, s, "up"), LinkModel(cfg, s, "down")
    assert up.mean_snr(3, 400.0) == down.mean_snr(3, 400.0)
    assert up.rate(3, 400.0) == up.rate(3, 400.0)  # no fading: deterministic per client
    snrs = np.array([LinkModel(cfg, s).mean_snr(c, 400.0) for c in range(400)])
    db = 10 * np.log10(snrs) - 10 * np.log10(cfg.mean_snr(400.0))
    assert db.std() == pytest.approx(8.0, rel=0.1)


def test_link_model_los_fraction_follows_probability():
    cfg = ChannelConfig(model="tr38901_umi", frequency_hz=3.5e9, los="auto")
    s = Streams(2)
    link = LinkModel(cfg, s)
    frac = np.mean([link.is_los(c, 60.0) for c in range(3000)])
    assert frac == pytest.approx(los_probability_umi(60.0), abs=0.03)


def test_fading_is_drawn_per_transmission_from_named_stream():
    cfg = ChannelConfig(model="tr36814", fading="rayleigh")
    a = LinkModel(cfg, Streams(4))
    r1 = [a.rate(0, 300.0) for _ in range(5)]
    assert len(set(r1)) == 5
    b = LinkModel(cfg, Streams(4))
    b.rate(1, 300.0)  # another client's draws do not shift client 0
    assert [b.rate(0, 300.0) for _ in range(5)] == r1


def test_semisfl_preset_ranges():
    up = LinkModel(CHANNEL_PRESETS["semisfl-edge"].uplink, Streams(1), "up")
    down = LinkModel(CHANNEL_PRESETS["semisfl-edge"].downlink, Streams(1), "down")
    ups = np.array([up.rate(c % 10) for c in range(5000)])
    downs = np.array([down.rate(c % 10) for c in range(5000)])
    assert ups.min() >= 0.8e6 and ups.max() <= 8e6 and ups.mean() == pytest.approx(4.4e6, rel=0.03)
    assert downs.min() >= 10e6 and downs.max() <= 20e6
    fixed = preset("semisfl-edge", uplink__redraw="per_client")
    lm = LinkModel(fixed.uplink, Streams(1))
    assert lm.rate(2) == lm.rate(2)


def test_bad_config_messages():
    with pytest.raises(ConfigError, match="allowed: free_space"):
        ChannelConfig(model="foo")
    with pytest.raises(ConfigError, match="fading"):
        ChannelConfig(fading="nakagami")
    with pytest.raises(ConfigError, match="rate_range_bps"):
        ChannelConfig(model="uniform_rate")
    with pytest.raises(ConfigError, match="distance"):
        LinkModel(ChannelConfig(), Streams(0)).rate(0)
    with pytest.raises(ConfigError, match="preset"):
        preset("nope")


# ---------------------------------------------------------------------------------------- positions

def test_annulus_is_area_uniform_and_gas_is_distance_uniform():
    rng = Streams(1).numpy("positions")
    a, b = 100.0, 1000.0
    r = pos.distances(pos.annulus_uniform(4000, a, b, rng))
    assert stats.kstest(r, lambda x: (x**2 - a**2) / (b**2 - a**2)).pvalue > 0.01
    r2 = pos.distances(pos.uniform_distance(4000, a, b, rng))
    assert stats.kstest(r2, stats.uniform(loc=a, scale=b - a).cdf).pvalue > 0.01
    assert r.mean() > r2.mean()  # area-uniform puts more clients far away


def test_fixed_and_csv_positions(tmp_path):
    assert pos.distances(pos.fixed([3.0, 400.0])).tolist() == [3.0, 400.0]
    assert pos.distances(pos.fixed([(3.0, 4.0)])).tolist() == [5.0]
    f = tmp_path / "pos.csv"
    f.write_text("client,x,y\n1,0,10\n0,6,8\n")
    assert pos.distances(pos.from_csv(f)).tolist() == [10.0, 10.0]
    f.write_text("a,b\n1,2\n")
    with pytest.raises(ConfigError, match="columns x and y"):
        pos.from_csv(f)


def test_random_waypoint():
    rw = pos.RandomWaypoint(radius=500.0, streams=Streams(8), speed_range=(1.0, 2.0), pause_s=5.0)
    ts = np.linspace(0, 3000, 3001)
    xy = np.array([rw.position(0, t) for t in ts])
    assert np.all(np.hypot(xy[:, 0], xy[:, 1]) <= 500.0 + 1e-9)
    steps = np.hypot(*np.diff(xy, axis=0).T)
    assert steps.max() <= 2.0 + 1e-9 and steps.max() > 0.5  # speed bound, and it moves
    other = pos.RandomWaypoint(radius=500.0, streams=Streams(8), speed_range=(1.0, 2.0), pause_s=5.0)
    other.distance(5, 1000.0)
    assert other.distance(0, 1234.5) == pytest.approx(rw.distance(0, 1234.5))
