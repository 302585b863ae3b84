"""Access models against closed forms and a hand-worked processor-sharing case."""
from __future__ import annotations

import math

import pytest
import simpy

from fedsim.errors import ConfigError
from fedsim.sim.rng import Streams
from fedsim.system.channel import ChannelConfig, LinkModel
from fedsim.system.medium import FDMA, TDMA, Dedicated, ProcessorSharing, make_medium

pytestmark = pytest.mark.fast  # a quick file: part of `pytest -m fast` (tests/README.md)


def _run(medium_factory, jobs):
    """jobs: list of (client, start_time, bits, rate). Returns {client: record}."""
    env = simpy.Environment()
    medium = medium_factory(env)
    out = {}

    def job(client, t, bits, rate):
        yield env.timeout(t)
        out[client] = yield from medium.transfer(client, bits, rate)

    for j in jobs:
        env.process(job(*j))
    env.run()
    return out, medium


K, S, R = 5, 4e6, 2e6  # K equal uploads of S bits at R bit/s


def test_dedicated_all_parallel():
    out, _ = _run(Dedicated, [(k, 0.0, S, R) for k in range(K)])
    for rec in out.values():
        assert rec.end == pytest.approx(S / R) and rec.wait == 0.0 and rec.airtime == pytest.approx(S / R)


def test_fdma_equal_uploads_finish_together_at_KS_over_R():
    out, _ = _run(lambda env: FDMA(env, K), [(k, 0.0, S, R) for k in range(K)])
    for rec in out.values():
        assert rec.end == pytest.approx(K * S / R)
        assert rec.wait == 0.0 and rec.airtime == pytest.approx(K * S / R)


def test_fdma_with_shannon_subbands_closed_form():
    cfg = ChannelConfig(model="tr36814", bandwidth_hz=10e6, tx_power_w=0.2)
    link = LinkModel(cfg, Streams(0))
    d = 600.0
    rho = 0.2 * 10 ** (-(128.1 + 37.6 * math.log10(0.6)) / 10) / (3.981e-21 * 10e6)
    expected = S / ((10e6 / K) * math.log2(1 + K * rho))
    out, _ = _run(lambda env: FDMA(env, K), [(k, 0.0, S, link.rate_fn(k, d)) for k in range(K)])
    for rec in out.values():
        assert rec.end == pytest.approx(expected, rel=1e-12)
    assert expected < K * S / link.rate(0, d)  # power concentration beats rate / K


def test_fdma_more_transfers_than_subbands_wait():
    out, _ = _run(lambda env: FDMA(env, 2), [(k, 0.0, S, R) for k in range(3)])
    assert out[0].end == pytest.approx(2 * S / R) and out[1].end == pytest.approx(2 * S / R)
    assert out[2].wait == pytest.approx(2 * S / R) and out[2].end == pytest.approx(4 * S / R)


def test_tdma_kth_upload_ends_at_k_S_over_R():
    out, _ = _run(TDMA, [(k, 0.0, S, R) for k in range(K)])
    ends = sorted(r.end for r in out.values())
    assert ends == pytest.approx([(k + 1) * S / R for k in range(K)])
    for k in range(K):
        assert out[k].airtime == pytest.approx(S / R)
        assert out[k].wait == pytest.approx(k * S / R)  # FIFO in request order
    assert sum(ends) / K == pytest.approx((K + 1) * S / (2 * R))


def test_processor_sharing_simultaneous_equal_uploads():
    out, _ = _run(ProcessorSharing, [(k, 0.0, S, R) for k in range(K)])
    for rec in out.values():
        assert rec.end == pytest.approx(K * S / R)
        assert rec.airtime == pytest.approx(S / R)
        assert rec.wait == pytest.approx((K - 1) * S / R)


def test_processor_sharing_hand_worked_staggered_starts():
    # R = 1 Mbit/s. A: 3 Mbit at t=0; B: 1 Mbit at t=1; C: 2 Mbit at t=2.
    # 0-1: A alone -> A has 2 left.  1-2: A, B at 1/2 -> A 1.5, B 0.5 left.
    # 2-3.5: A, B, C at 1/3 -> B done at 3.5; A 1.0, C 1.5 left.  3.5-5.5: A, C at 1/2 -> A done at 5.5, C 0.5.
    # 5.5-6: C alone -> done at 6.0.
    out, _ = _run(ProcessorSharing, [("A", 0.0, 3e6, 1e6), ("B", 1.0, 1e6, 1e6), ("C", 2.0, 2e6, 1e6)])
    assert out["A"].end == pytest.approx(5.5)
    assert out["B"].end == pytest.approx(3.5)
    assert out["C"].end == pytest.approx(6.0)
    assert out["A"].wait == pytest.approx(2.5) and out["B"].wait == pytest.approx(1.5) and out["C"].wait == pytest.approx(2.0)
    assert out["C"].airtime == pytest.approx(2.0)


def test_processor_sharing_heterogeneous_rates_time_share():
    # A: 4 Mbit at 2 Mbit/s, B: 1 Mbit at 1 Mbit/s, both at t=0; each gets half the time.
    # B advances at 0.5 Mbit/s -> done at 2; A has sent 2 Mbit by then, then 2 Mbit at 2 Mbit/s -> done at 3.
    out, _ = _run(ProcessorSharing, [("A", 0.0, 4e6, 2e6), ("B", 0.0, 1e6, 1e6)])
    assert out["B"].end == pytest.approx(2.0)
    assert out["A"].end == pytest.approx(3.0)


def test_processor_sharing_is_work_conserving_under_random_load():
    rng = Streams(3).numpy("test", "ps")
    jobs = []
    t = 0.0
    for k in range(60):
        t += rng.exponential(1.0)
        jobs.append((k, t, rng.uniform(0.1e6, 2e6), 1e6))
    out, _ = _run(ProcessorSharing, jobs)
    # with equal rates, the busy period ends when all the work has been done, like FIFO (TDMA)
    out_fifo, _ = _run(TDMA, jobs)
    assert max(r.end for r in out.values()) == pytest.approx(max(r.end for r in out_fifo.values()), rel=1e-9)
    for rec in out.values():
        assert rec.wait >= -1e-9 and rec.airtime == pytest.approx(rec.bits / 1e6)


def test_ideal_rate_and_errors():
    out, _ = _run(Dedicated, [(0, 1.0, S, math.inf)])
    assert out[0].end == 1.0
    env = simpy.Environment()
    with pytest.raises(ConfigError, match="allowed"):
        make_medium("csma", env)
    with pytest.raises(ConfigError, match="n_scheduled"):
        make_medium("fdma", env)
    with pytest.raises(ConfigError, match="positive"):
        list(Dedicated(env).transfer(0, 10, 0.0))
