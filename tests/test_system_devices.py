"""Device profiles: validation, the FLOP time model, memory refusal, shipped data sanity."""
from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

import device_profiles
from fedsim.errors import ConfigError
from fedsim.sim.rng import Streams
from fedsim.system.devices import (
    PRECISIONS,
    check_memory,
    compute_time,
    list_profiles,
    load_profile,
    profile_table,
)

pytestmark = pytest.mark.fast  # a quick file: part of `pytest -m fast` (tests/README.md)

REQUIRED = {
    "jetson-nano", "jetson-tx2", "jetson-xavier-nx-8gb", "jetson-xavier-nx-16gb", "jetson-agx-xavier",
    "jetson-orin-nano", "jetson-orin-nx", "jetson-agx-orin-32gb", "jetson-agx-orin-64gb", "raspberry-pi-4",
    "phone-midrange", "rtx-3090", "a6000", "a100",
}


def test_all_required_profiles_ship_and_load():
    names = set(list_profiles())
    assert REQUIRED <= names
    for n in names:
        p = load_profile(n)
        assert p.name == n
        assert p.train_flops_per_s() > 0 and p.memory_bytes > 0
        # every number of the file carries a source and a status
        for key, rec in p.sources.items():
            assert rec.source.strip(), (n, key)
            assert rec.status in ("verified", "derived", "unverified"), (n, key)


def test_profile_dir_is_package_data():
    assert Path(device_profiles.PROFILE_DIR).is_dir()
    assert (Path(device_profiles.PROFILE_DIR) / "jetson-nano.yaml").exists()


def test_jetson_fp32_peaks_equal_cores_times_two_times_clock():
    # Independent arithmetic: CUDA cores x 2 FLOP per FMA x GPU clock (Hz).
    expected = {
        "jetson-nano": 128 * 2 * 921.6e6,
        "jetson-tx2": 256 * 2 * 1.3e9,
        "jetson-xavier-nx-8gb": 384 * 2 * 1.1e9,
        "jetson-agx-xavier": 512 * 2 * 1.377e9,
        "jetson-orin-nano": 1024 * 2 * 625e6,
        "jetson-orin-nx": 1024 * 2 * 918e6,
        "jetson-agx-orin-32gb": 1792 * 2 * 930e6,
        "jetson-agx-orin-64gb": 2048 * 2 * 1.3e9,
    }
    for name, flops in expected.items():
        assert load_profile(name).peak["fp32"] == pytest.approx(flops, rel=1e-3), name


def test_server_gpu_datasheet_fp32():
    assert load_profile("a100").peak["fp32"] == pytest.approx(19.5e12)
    assert load_profile("rtx-3090").peak["fp32"] == pytest.approx(35.6e12, rel=2e-3)
    assert load_profile("a6000").peak["fp32"] == pytest.approx(38.7e12, rel=2e-3)


def test_int8_marketing_numbers_are_not_fp32():
    # The APPFL pitfall: Orin's 40 TOPS is INT8 sparse; FP32 training must use the FP32 number.
    p = load_profile("jetson-orin-nano")
    assert p.training_precision == "fp32"
    assert p.peak["int8_sparse"] / p.peak["fp32"] > 20
    assert p.train_flops_per_s() == pytest.approx(1024 * 2 * 625e6 * p.efficiency)


def test_phone_efficiency_reproduces_embracingfl_forward_timing():
    # EmbracingFL Table 8: ResNet20 forward, minibatch 32, 2095.4 ms. ResNet20 = 40.8 M MACs/sample.
    p = load_profile("phone-midrange")
    flops = 32 * 2 * 40.8e6
    assert compute_time(p, flops) == pytest.approx(2.0954, rel=1e-3)
    assert compute_time(p, 0.0, model="resnet20_forward", samples=32) == pytest.approx(2.0954, rel=1e-3)


def test_halving_peak_or_doubling_flops_doubles_time():
    p = load_profile("jetson-xavier-nx-8gb")
    t = compute_time(p, 3e12)
    assert compute_time(p, 6e12) == pytest.approx(2 * t)
    half = dataclasses.replace(p, peak={k: v / 2 for k, v in p.peak.items()})
    assert compute_time(half, 3e12) == pytest.approx(2 * t)
    # and the absolute value is FLOPs / (peak x efficiency), by hand
    assert t == pytest.approx(3e12 / (384 * 2 * 1.1e9 * 0.3), rel=1e-9)


def test_ms_per_sample_overrides_flops_only_for_that_model():
    p = dataclasses.replace(load_profile("jetson-nano"), ms_per_sample={"cnn": 12.5})
    assert compute_time(p, 1e15, model="cnn", samples=40) == pytest.approx(0.5)
    assert compute_time(p, 1e9, model="other", samples=40) == pytest.approx(1e9 / p.train_flops_per_s())


def test_jitter_is_lognormal_mean_one_and_reproducible():
    p = load_profile("jetson-nano")
    base = compute_time(p, 1e9)
    rng = Streams(7).numpy("device", 0, "jitter")
    xs = np.array([compute_time(p, 1e9, jitter=0.3, rng=rng) for _ in range(20000)])
    assert xs.mean() / base == pytest.approx(1.0, abs=0.01)
    assert np.log(xs / base).std() == pytest.approx(0.3, rel=0.03)
    rng2 = Streams(7).numpy("device", 0, "jitter")
    assert compute_time(p, 1e9, jitter=0.3, rng=rng2) == xs[0]
    with pytest.raises(ConfigError, match="rng"):
        compute_time(p, 1e9, jitter=0.1)


def test_memory_refusal_names_device_need_and_budget():
    p = load_profile("jetson-nano")
    check_memory(p, 3.9 * 2**30, "model 'cnn'")  # fits: no error
    with pytest.raises(ConfigError) as e:
        check_memory(p, 5.1 * 2**30, "model 'cnn'")
    msg = str(e.value)
    assert msg.startswith("devices:")
    assert "model 'cnn'" in msg and "jetson-nano" in msg and "5.1 GiB" in msg and "4.0 GiB" in msg
    tiny = dataclasses.replace(p, memory_bytes=3 * 2**20)  # a budget under 1 GiB reads in MiB, never "0.0 GiB"
    with pytest.raises(ConfigError) as e:
        check_memory(tiny, 5 * 2**20, "model 'cnn'")
    assert "needs 5 MiB" in str(e.value) and "has 3 MiB" in str(e.value) and "0.0 GiB" not in str(e.value)


def _write(tmp_path: Path, data: dict, name: str = "dev.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def _base() -> dict:
    return yaml.safe_load((Path(device_profiles.PROFILE_DIR) / "jetson-nano.yaml").read_text())


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda d: d.pop("memory"), "memory"),
        (lambda d: d["peak"]["fp32"].__setitem__("value", -1.0), "peak.fp32.value"),
        (lambda d: d["peak"].__setitem__("int4", d["peak"]["fp32"]), "peak.int4"),
        (lambda d: d.__setitem__("training_precision", "bf16"), "training_precision"),
        (lambda d: d["peak"]["fp32"].pop("source"), "peak.fp32.source"),
        (lambda d: d["peak"]["fp32"].__setitem__("unit", "TOPS"), "peak.fp32.unit"),
        (lambda d: d["memory"].__setitem__("status", "probably"), "memory.status"),
        (lambda d: d["power_modes"].__setitem__("default", "turbo"), "power_modes.default"),
        (lambda d: d["idle_w"].__setitem__("value", -0.5), "idle_w.value"),
        (lambda d: d.__setitem__("kind", "fridge"), "kind"),
        # read like a scenario's sections (fedsim.config.from_mapping): unknown keys and wrong types too
        (lambda d: d.__setitem__("memroy", d["memory"]), "memroy"),
        (lambda d: d["memory"].__setitem__("valeu", 4), "memory.valeu"),
        (lambda d: d["memory"].__setitem__("value", "four"), "memory.value"),
        (lambda d: d["power_modes"]["modes"].__setitem__("MAXN", 0), "power_modes.modes.MAXN"),
        (lambda d: d["efficiency"].__setitem__("value", 1.5), "efficiency.value"),
    ],
)
def test_bad_profiles_name_file_and_field(tmp_path, mutate, field):
    d = _base()
    mutate(d)
    path = _write(tmp_path, d, "broken-board.yaml")
    with pytest.raises(ConfigError) as e:
        load_profile(path)
    assert "broken-board.yaml" in str(e.value) and field in str(e.value)


def test_profile_yaml_aliases_have_a_node_budget(tmp_path):
    """A profile file is read by the same YAML reader as a scenario: a "billion laughs" file is refused in one
    line, quickly, naming the file."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    path = tmp_path / "laughs.yaml"
    path.write_text("\n".join(lines) + "\n")
    t0 = time.perf_counter()
    with pytest.raises(ConfigError) as e:
        load_profile(path)
    assert time.perf_counter() - t0 < 2.0
    assert "laughs.yaml" in str(e.value) and "alias" in str(e.value) and "\n" not in str(e.value)


def test_unknown_profile_name_lists_allowed():
    with pytest.raises(ConfigError, match="jetson-nano"):
        load_profile("jetson-nanoo")


def test_unknown_precision_at_query_time():
    p = load_profile("jetson-nano")
    with pytest.raises(ConfigError, match="allowed"):
        p.train_flops_per_s("fp8")
    with pytest.raises(ConfigError, match="no peak"):
        p.train_flops_per_s("int8_sparse")


def test_profile_table_one_row_per_profile():
    df = profile_table()
    assert len(df) == len(list_profiles())
    row = df.set_index("name").loc["a100"]
    assert row["peak_fp32_tflops"] == pytest.approx(19.5)
    assert row["train_tflops"] == pytest.approx(19.5 * row["efficiency"])
    assert set(PRECISIONS) >= {"fp32"}
    assert not math.isnan(row["memory_gib"])


def test_device_queues_work_and_meters_energy():
    import simpy

    from fedsim.system.devices import Device
    from fedsim.system.energy import EnergyMeter

    env = simpy.Environment()
    meter = EnergyMeter()
    p = load_profile("jetson-nano")
    dev = Device(env, p, "c0", power_mode="5W", meter=meter)
    flops = 2 * p.train_flops_per_s()  # 2 s of work
    recs = []

    def job(what):
        recs.append((yield from dev.run(flops, what=what)))

    env.process(job("a"))
    env.process(job("b"))
    env.run()
    assert [r.end for r in recs] == pytest.approx([2.0, 4.0])
    assert recs[1].wait == pytest.approx(2.0) and recs[1].busy == pytest.approx(2.0)
    assert meter.total("c0") == pytest.approx(2 * 2.0 * 5.0)
    with pytest.raises(ConfigError, match="power mode"):
        Device(env, p, "c1", power_mode="turbo")
