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
    import fedsim.algorithms  # noqa: F401 - imported before the clock starts
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
