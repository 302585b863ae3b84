"""Bad input is refused at once, in one line, exit 2: YAML whose aliases expand without bound ("billion
laughs"), a model width that leaves layers at their floor, and refusals that used to follow a "running"
line.  Implausible but allowed values run, with one warning line."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from fedsim.cli import main

#: The process measures only its own refusal (fedsim and torch are imported before the clock starts), so
#: the bound holds on a loaded machine; the subprocess is killed if the refusal hangs.
_TIMED = textwrap.dedent("""
    import sys, time
    import fedsim.algorithms, fedsim.runner  # noqa: F401, E401 - imported before the clock starts
    from fedsim.cli import main
    t0 = time.perf_counter()
    code = main(sys.argv[1:])
    print(f"ELAPSED {time.perf_counter() - t0:.3f}")
    sys.exit(code)
""")


def _laughs(indent: str = "") -> str:
    """Ten levels of nine aliases each: about 3.5e9 leaves from 1 kB of text."""
    lines = [f'{indent}a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"{indent}a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    return "\n".join(lines) + "\n"


def _refused_fast(tmp_path: Path, text: str) -> str:
    path = tmp_path / "laughs.yaml"
    path.write_text(text, encoding="utf-8")
    proc = subprocess.run([sys.executable, "-c", _TIMED, "run", str(path), "--out", str(tmp_path / "out"), "--quiet"],
                          capture_output=True, text=True, timeout=60)
    elapsed = float(proc.stdout.split("ELAPSED")[-1])
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("fedsim: error: scenario: "), proc.stderr[-2000:]
    assert "aliases" in lines[0] and "100,000" in lines[0], lines[0]
    assert elapsed < 2.0, f"refused after {elapsed:.2f} s"
    assert not (tmp_path / "out").exists()
    return lines[0]


def test_billion_laughs_at_top_level_is_refused_in_one_line_at_once(tmp_path):
    _refused_fast(tmp_path, _laughs() + "stop: {max_versions: 1}\n")


def test_billion_laughs_inside_data_options_is_refused_in_one_line_at_once(tmp_path):
    _refused_fast(tmp_path, "stop: {max_versions: 1}\ndata:\n  name: digits\n  options:\n" + _laughs("    "))


def test_billion_laughs_in_an_override_value(capsys):
    value = "{" + _laughs().strip().replace("\n", ", ") + "}"
    code = main(["show", "default", f"data.options={value}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("fedsim: error: data.options: "), err


def test_an_alias_inside_its_own_node_is_one_line(tmp_path, capsys):
    (tmp_path / "s.yaml").write_text("stop: {max_versions: 1}\ndata: {options: {a: &a [1, *a]}}\n")
    code = main(["show", str(tmp_path / "s.yaml")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "contains itself" in err[0], err


def test_a_few_aliases_still_load(tmp_path, capsys):
    """Reusing a device group through an alias is ordinary YAML and stays allowed."""
    (tmp_path / "s.yaml").write_text(textwrap.dedent("""
        stop: {max_versions: 1}
        devices:
          mix: [&nano {profile: jetson-nano, weight: 2}, *nano]
        data: {options: {test_fraction: 0.3}}
    """))
    assert main(["show", str(tmp_path / "s.yaml")]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert [g["weight"] for g in shown["devices"]["mix"]] == [2.0, 2.0]


def test_a_width_that_leaves_layers_at_their_floor_is_refused(tmp_path, capsys):
    code = main(["run", "default", "model.name=mlp", "model.width=1e-9", "--out", str(tmp_path / "out"), "--quiet"])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, err
    assert lines[0].startswith("fedsim: error: model.width: got 1e-09") and "1/128 = 0.007812" in lines[0], lines[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name, kwargs, smallest", [
    ("mlp", {"hidden": (128, 32)}, 32), ("cnn", {}, 16), ("resnet20", {}, 16), ("alexnet_cifar", {}, 32),
    ("vit", {}, 8),
])
def test_the_smallest_meaningful_width_is_one_unit_in_the_narrowest_layer(name, kwargs, smallest):
    import torch

    from fedsim.errors import ConfigError
    from fedsim.learn.models import build_model

    shape = (3, 32, 32) if name != "mlp" else (1, 8, 8)
    with torch.device("meta"):
        build_model(name, shape, 10, width=1 / smallest, **kwargs)  # exactly one unit: allowed
        with pytest.raises(ConfigError, match=rf"model\.width: .*allowed: >= 1/{smallest} "):
            build_model(name, shape, 10, width=0.99 / smallest, **kwargs)


# ------------------------------------------------------------------ implausible values: one warning line


def test_an_implausible_rate_runs_with_one_warning_line(capsys):
    assert main(["show", "default", "channel.uplink.mbps=1e9"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("fedsim: warning: channel.uplink.mbps: 1e+09 Mbit/s is outside the physically "
                             "plausible range [0.0001, 400000] Mbit/s"), err[0]


@pytest.mark.parametrize("override, field", [
    ("channel.uplink.frequency_hz=2.4", "channel.uplink.frequency_hz"),  # GHz written as Hz
    ("network.latency_s=20", "network.latency_s"),  # ms written as s
    ("devices.mix=[{profile: jetson-nano, flops_per_s: 2}]", "devices.mix[0].flops_per_s"),  # GFLOP/s as FLOP/s
    ("channel.downlink.mbps=[5, 1e7]", "channel.downlink.mbps"),  # bit/s as Mbit/s, in a [lo, hi] range
])
def test_each_plausible_range_names_its_field(capsys, override, field):
    extra = ["channel.uplink={model: free_space}"] if "frequency" in override else []
    assert main(["show", "default", *extra, override]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"fedsim: warning: {field}: ") and "plausible range" in err[0], err


def test_builtin_scenarios_are_plausible():
    from fedsim import load_scenario
    from fedsim.scenario import builtin_scenarios, plausibility_warnings

    assert {n: plausibility_warnings(load_scenario(n)) for n in builtin_scenarios()} == {n: [] for n in builtin_scenarios()}


def test_a_warning_never_precedes_a_refusal(tmp_path, capsys):
    code = main(["run", "default", "channel.uplink.mbps=1e9", "data.num_clients=-4", "--out", str(tmp_path / "o")])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "error: data.num_clients" in err, err


# ------------------------------------------------------------------ nothing said before a refusal


def test_repeated_seeds_are_refused_before_running_is_said(tmp_path, capsys):
    code = main(["run", "default", "--seeds", "0,0", "--out", str(tmp_path / "o"), "--quiet"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "", out
    assert err.strip().splitlines() == ["fedsim: error: --seeds: give distinct seeds, e.g. 0,1,2 (got [0, 0])"]
    assert not (tmp_path / "o").exists()


def _tiny_file(tmp_path: Path, tiny: dict, name: str, **changes) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({**tiny, **changes}))
    return path


def test_resume_into_another_scenarios_run_is_refused_before_running_is_said(tmp_path, capsys, tiny):
    out = tmp_path / "o"
    assert main(["run", str(_tiny_file(tmp_path, tiny, "a.yaml")), "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    before = sorted(p.name for p in out.iterdir())
    other = _tiny_file(tmp_path, tiny, "b.yaml", train={**tiny["train"], "lr": 0.3})
    for extra in ([], ["--seeds", "0,1"]):
        code = main(["run", str(other), "--out", str(out), "--quiet", "--resume", *extra])
        stdout, err = capsys.readouterr()
        assert code == 2 and stdout == "", stdout
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("fedsim: error: --resume: "), err
    assert sorted(p.name for p in out.iterdir()) == before  # nothing cleared, nothing added


def test_resume_into_a_run_of_other_algorithms_keeps_it(tmp_path, capsys, tiny):
    """A folder of a two-algorithm run has no scenario.yaml at its top: resuming a one-algorithm scenario
    into it used to read as "incomplete" and clear it."""
    out = tmp_path / "o"
    two = _tiny_file(tmp_path, tiny, "two.yaml", algorithm=[{"name": "fedavg", "clients_per_round": 3},
                                                             {"name": "fedbuff"}])
    assert main(["run", str(two), "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    code = main(["run", str(_tiny_file(tmp_path, tiny, "one.yaml")), "--out", str(out), "--quiet", "--resume"])
    stdout, err = capsys.readouterr()
    assert code == 2 and stdout == "" and "holds a run of 2 algorithms (fedavg, fedbuff)" in err, err
    assert (out / "fedbuff" / "summary.json").exists() and not (out / "scenario.yaml").exists()
    # the same scenario resumes: every run is reused
    assert main(["run", str(two), "--out", str(out), "--quiet", "--resume"]) == 0
    assert "1 of 1 runs already finished, running 0" in capsys.readouterr().err  # one unit, both algorithms
