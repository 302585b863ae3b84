"""Bad scenarios a fuzzer found: each is exit 2 with one line naming the field, the value and what is
allowed; never exit 3 (an internal error), never exit 0 (a run out of its domain), never two lines.

Groups: labels that would escape --out (security); inputs that used to end in an internal error
(recursion, wrong types, unreadable files, models or datasets too large); inputs that used to run although
out of domain; a file with NUL bytes.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from fedsim.cli import main

from test_fuzz_scenarios import BASE  # noqa: E402 - the same small valid scenario


def _run(tmp: Path, capsys: Any, text: str) -> tuple[int, str]:
    (tmp / "s.yaml").write_text(text, encoding="utf-8")
    code = main(["run", str(tmp / "s.yaml"), "--out", str(tmp / "out"), "--quiet"])
    out, err = capsys.readouterr()
    return code, err


def _one_line(code: int, err: str, field: str, *words: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1, err
    assert lines[0].startswith(f"fedsim: error: {field}"), lines[0]
    assert "Traceback" not in err and len(lines[0]) < 600
    for w in words:
        assert w in lines[0], lines[0]


def _with(edit: Callable[[dict[str, Any]], None]) -> str:
    m = copy.deepcopy(BASE)
    edit(m)
    return yaml.safe_dump(m)


@pytest.mark.parametrize("label", ["../x", "/ABS", "a/b", "..", ".", "a\\b", ""])
def test_labels_cannot_escape_out(tmp_path, capsys, label):
    """A shared scenario file must never write outside --out: a label is a plain folder name."""
    work = tmp_path / "work"
    work.mkdir()
    label = label.replace("/ABS", str(tmp_path / "abs"))
    text = _with(lambda m: m.update(algorithm=[{"name": "fedavg", "label": label}, {"name": "fedbuff"}]))
    code, err = _run(work, capsys, text)
    _one_line(code, err, "algorithm[0].label", repr(label), "letters, digits")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]  # nothing beside the run folder
    assert sorted(p.name for p in work.iterdir()) == ["s.yaml"]  # and no run started


def test_plain_labels_still_name_sub_folders(tmp_path, capsys):
    text = _with(lambda m: m.update(algorithm=[{"name": "fedavg", "label": "a.b-1_x"}, {"name": "fedavg", "label": 2}],
                                    stop={"max_versions": 1}))
    code, err = _run(tmp_path, capsys, text)
    assert code == 0, err
    assert (tmp_path / "out" / "a.b-1_x" / "summary.json").exists() and (tmp_path / "out" / "2" / "summary.json").exists()


def _files(tmp: Path) -> None:
    (tmp / "folder").mkdir()
    (tmp / "garbage.bin").write_bytes(bytes(range(128, 256)) * 3)
    (tmp / "latin1.csv").write_bytes("client,start,end\n\xe9t\xe9,0,100\n".encode("latin-1"))
    (tmp / "inf.csv").write_text("x,y\ninf,3\n1,2\n1,2\n1,2\n")


LOG_DISTANCE = {"uplink": {"model": "log_distance"}, "downlink": {"model": "fixed", "mbps": 10}}
INTERNAL: list[tuple[str, Callable[[dict[str, Any], Path], None], str, tuple[str, ...]]] = [
    ("algorithm.name as a list", lambda m, t: m["algorithm"].update(name=["fedavg"]), "algorithm.name", ("string",)),
    ("100 kB profile name", lambda m, t: m["devices"]["mix"][0].update(profile="x" * 100_000),
     "devices.mix[0].profile", ("100,000 characters",)),
    ("huge cost_input_shape", lambda m, t: m.update(algorithm={"name": "gas", "cost_input_shape": [3, 100000, 100000]}),
     "algorithm.cost_input_shape", ("[3, 100000, 100000]", "allowed")),
    ("trace is a folder", lambda m, t: m.update(availability={"model": "trace", "path": str(t / "folder")}),
     "availability.path", ("is a folder",)),
    ("trace is binary", lambda m, t: m.update(availability={"model": "trace", "path": str(t / "garbage.bin")}),
     "availability.path", ("not UTF-8",)),
    ("trace in Latin-1", lambda m, t: m.update(availability={"model": "trace", "path": str(t / "latin1.csv")}),
     "availability.path", ("not UTF-8",)),
    ("positions is a folder", lambda m, t: m.update(channel={**LOG_DISTANCE, "positions": {"kind": "file", "path": str(t / "folder")}}),
     "channel.positions.path", ("is a folder",)),
    ("positions is binary", lambda m, t: m.update(channel={**LOG_DISTANCE, "positions": {"kind": "file", "path": str(t / "garbage.bin")}}),
     "channel.positions.path", ("not UTF-8",)),
    ("positions infinite", lambda m, t: m.update(channel={**LOG_DISTANCE, "positions": {"kind": "file", "path": str(t / "inf.csv")}}),
     "channel.positions.path", ("non-finite", "row 2")),
    ("profile is binary", lambda m, t: m["devices"]["mix"][0].update(profile=str(t / "garbage.bin")),
     "devices.mix[0].profile", ("not UTF-8",)),
    ("profile is a folder", lambda m, t: m["devices"]["mix"][0].update(profile=str(t / "folder")),
     "devices.mix[0].profile", ("is a folder",)),
    ("profile is empty", lambda m, t: m["devices"]["mix"][0].update(profile=""), "devices.mix[0].profile", ("empty",)),
    ("server profile is empty", lambda m, t: m.update(server={"profile": ""}), "server.profile", ("empty",)),
    ("model too big", lambda m, t: m["model"].update(hidden=[100000, 100000]), "model", ("parameters", "model.hidden")),
    ("test_fraction a string", lambda m, t: m["data"].update(options={"test_fraction": "abc"}),
     "data.options.test_fraction", ("'abc'",)),
    ("synthetic 0 classes", lambda m, t: m.update(data={"name": "synthetic", "num_clients": 4, "options": {"num_classes": 0}}),
     "data.options.num_classes", ("got 0", "allowed")),
    ("synthetic negative dimension", lambda m, t: m.update(data={"name": "synthetic", "num_clients": 4, "options": {"dimension": -3}}),
     "data.options.dimension", ("got -3", "allowed")),
    ("synthetic huge samples", lambda m, t: m.update(data={"name": "synthetic", "num_clients": 4, "options": {"samples": 10**12}}),
     "data.options.samples", ("allowed",)),
    ("synthetic huge sizes", lambda m, t: m.update(data={"name": "synthetic", "num_clients": 4, "options": {"min_samples": 10**7}}),
     "data.options.samples", ("values (allowed",)),
    ("alexnet on 8x8 digits", lambda m, t: m.update(model={"name": "alexnet_cifar"}), "model.name", ("(1, 8, 8)",)),
]


@pytest.mark.parametrize("case", INTERNAL, ids=[c[0] for c in INTERNAL])
def test_inputs_that_were_internal_errors(tmp_path, capsys, case):
    _, edit, field, words = case
    _files(tmp_path)
    m = copy.deepcopy(BASE)
    edit(m, tmp_path)
    code, err = _run(tmp_path, capsys, yaml.safe_dump(m))
    _one_line(code, err, field, *words)


@pytest.mark.parametrize("deep", ["{a: " * 3000 + "1" + "}" * 3000, "[" * 5000 + "1" + "]" * 5000, "[" * 40 + "1" + "]" * 40])
def test_deep_nesting(tmp_path, capsys, deep):
    text = yaml.safe_dump({k: v for k, v in BASE.items() if k != "data"}) + f"data: {{name: digits, options: {deep}}}\n"
    code, err = _run(tmp_path, capsys, text)
    _one_line(code, err, "", "nested", "at most 32 levels")


OUT_OF_DOMAIN: list[tuple[str, Callable[[dict[str, Any]], None], str, tuple[str, ...]]] = [
    ("flops range high to low", lambda m: m["devices"]["mix"][0].update(flops_per_s=[1e10, 1e9]),
     "devices.mix[0].flops_per_s", ("lo <= hi",)),
    ("more labels per client than classes", lambda m: m["data"].update(partition={"method": "shards", "labels_per_client": 11}),
     "data.partition.labels_per_client", ("got 11", "10 classes")),
    ("regression model on a classification task", lambda m: m.update(model={"name": "linear"}), "model.name",
     ("'linear'", "classification")),
]


@pytest.mark.parametrize("case", OUT_OF_DOMAIN, ids=[c[0] for c in OUT_OF_DOMAIN])
def test_inputs_that_used_to_run_out_of_domain(tmp_path, capsys, case):
    _, edit, field, words = case
    code, err = _run(tmp_path, capsys, _with(edit))
    _one_line(code, err, field, *words)


def test_duplicate_keys_are_refused(tmp_path, capsys):
    code, err = _run(tmp_path, capsys, yaml.safe_dump(BASE) + "seed: 5\n")
    _one_line(code, err, "scenario", "'seed' given twice", "line")
    code = main(["show", "default", "devices.mix=[{profile: jetson-nano, profile: a100}]"])
    _one_line(code, capsys.readouterr().err, "devices.mix", "'profile' given twice")


def test_nul_bytes_are_one_line(tmp_path, capsys):
    code, err = _run(tmp_path, capsys, "stop: {max_versions: 2}\x00\n")
    _one_line(code, err, "scenario", "NUL")
