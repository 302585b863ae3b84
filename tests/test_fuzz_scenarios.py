"""Property-based fuzzing of scenarios: every field of every config dataclass, bad and odd values.

Each generated scenario goes through the CLI entry point (in-process): it must end either in exit 2 with
exactly one line ``fedsim: error: <field>: ...`` that names the field (or, for a cross-field rule, a field
of the same section), or in a finished run (exit 0).  Never a traceback, never exit 3, never a hang (each
case runs under an alarm).  The base scenario is systems-only and tiny so a valid case costs a fraction of
a second.
"""
from __future__ import annotations

import copy
import math
import os
import time
import re
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from fedsim.algorithms import registry
from fedsim.cli import main
from fedsim.config import walk_fields
from fedsim.scenario import SECTIONS

BASE: dict[str, Any] = {
    "name": "fuzz",
    "seed": 0,
    "data": {"name": "digits", "num_clients": 4, "partition": {"method": "iid"}},
    "model": {"name": "mlp", "hidden": 16},
    "train": {"systems_only": True, "local_steps": 2, "batch_size": 8},
    "devices": {"mix": [{"profile": "jetson-nano"}]},
    "channel": {"uplink": {"model": "fixed", "mbps": 5}, "downlink": {"model": "fixed", "mbps": 10}},
    "algorithm": {"name": "fedavg", "clients_per_round": 2},
    "stop": {"max_versions": 3},
    "output": {"figures": False},
}

#: (algorithm name or None, dotted path) for every leaf field of the scenario and of every algorithm.
FIELDS: list[tuple[str | None, str]] = [(None, f.path) for key, cls in SECTIONS.items() for f in walk_fields(cls, key)]
FIELDS += [(name, f.path) for name, alg in registry().items() for f in walk_fields(alg.Config, "algorithm")]
FIELDS += [(None, "seed"), (None, "name")]

BAD_NUMBERS = [math.nan, math.inf, -math.inf, 1e300, -1e300, 1e308, 10**30, -1, 0, -0.5, 0.5, 1e-300, 2**63, 7, 1e9, 3.5]
ODD_VALUES = [[1, 2], [], [1, 2, 3], [[1]], "abc", "", {"a": 1}, True, False, None]
VALUES = st.sampled_from(BAD_NUMBERS + ODD_VALUES) | st.floats(allow_nan=True, allow_infinity=True) | st.integers(-10, 10**6)

LINE = re.compile(r"^fedsim: error: (\S+?): .+")


def _set(mapping: dict[str, Any], path: str, value: Any) -> None:
    node: Any = mapping
    parts = path.replace("[0]", ".0").split(".")
    for part in parts[:-1]:
        if part == "0":
            node = node[0]
            continue
        nxt = node.get(part)
        if not isinstance(nxt, dict) and not (isinstance(nxt, list) and nxt):
            nxt = node[part] = {}
        node = nxt
    node[parts[-1]] = value


class _Hang(BaseException):  # not an Exception: the CLI's last line of defence must not swallow it
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Hang()


def _run(tmp: Path, mapping: dict[str, Any], capsys: Any) -> tuple[int, str]:
    path = tmp / "s.yaml"
    path.write_text(yaml.safe_dump(mapping), encoding="utf-8")
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(30)
    try:
        code = main(["run", str(path), "--out", str(tmp / "out"), "--quiet", "--force"])
    except _Hang:
        pytest.fail(f"hang (> 30 s) on {mapping}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return code, capsys.readouterr().err.strip()


def _related(named: str, path: str) -> bool:
    """The error names the field, a field next to it, or (for an algorithm field) the algorithm section."""
    strip = lambda p: re.sub(r"\[\d+\]", "", p)  # noqa: E731
    named, path = strip(named), strip(path)
    return named == path or named.startswith(path) or path.startswith(named) or named.split(".")[0] == path.split(".")[0]


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
          phases=[Phase.explicit, Phase.generate])  # no shrinking: a failure is reported as found, fast
@given(field=st.sampled_from(FIELDS), value=VALUES)
def test_fuzz_every_field_exit_2_naming_it_or_a_valid_run(tmp_path_factory, capsys, field, value):
    """The work limits are lowered so a valid case stays a few seconds (real SGD steps of the training
    algorithms cost ~2 ms each); a run over them must be
    refused as too large (exit 2 naming a field and --allow-large), never started."""
    import fedsim.preflight as preflight

    limits = preflight.LARGE_EVENTS, preflight.LARGE_SGD_STEPS, preflight.LARGE_SLOTS
    preflight.LARGE_EVENTS, preflight.LARGE_SGD_STEPS, preflight.LARGE_SLOTS = 20_000, 2_000, 1_000
    try:
        _case(tmp_path_factory, capsys, field, value)
    finally:
        preflight.LARGE_EVENTS, preflight.LARGE_SGD_STEPS, preflight.LARGE_SLOTS = limits


#: algorithms whose unmutated base refuses systems-only runs (they train from the model itself, e.g.
#: pseudo-labels): their cases train for real, still tiny
_TRAINS: dict[str, bool] = {}


def _base_for(tmp_path_factory: Any, capsys: Any, algorithm: str | None) -> dict[str, Any]:
    mapping = copy.deepcopy(BASE)
    if algorithm is None:
        return mapping
    mapping["algorithm"] = {"name": algorithm}
    if algorithm not in _TRAINS:
        code, err = _run(tmp_path_factory.mktemp("base"), mapping, capsys)
        _TRAINS[algorithm] = code == 2 and err.startswith("fedsim: error: train.systems_only:")
    if _TRAINS[algorithm]:
        mapping["train"]["systems_only"] = False
    return mapping


def _case(tmp_path_factory: Any, capsys: Any, field: tuple[str | None, str], value: Any) -> None:
    algorithm, path = field
    mapping = _base_for(tmp_path_factory, capsys, algorithm)
    _set(mapping, path, value)
    tmp = tmp_path_factory.mktemp("fuzz")
    t0 = time.perf_counter()
    code, err = _run(tmp, mapping, capsys)
    if os.environ.get("FUZZ_LOG"):
        with open(os.environ["FUZZ_LOG"], "a") as fh:
            fh.write(f"{time.perf_counter() - t0:.2f}s {code} {path}={value!r} {err[:150]}\n")
    assert code in (0, 2), f"exit {code} for {path}={value!r}: {err}"
    assert "Traceback" not in err
    if code == 2:
        lines = err.splitlines()
        assert len(lines) == 1, err
        m = LINE.match(lines[0])
        assert m, lines[0]
        if "--allow-large" not in lines[0]:  # a work estimate names the stop rule or knob that makes it large
            assert _related(m.group(1), path), f"{path}={value!r} gave an error naming {m.group(1)}: {lines[0]}"
    if isinstance(value, float) and not math.isfinite(value):
        assert code == 2, f"{path}={value!r} ran: a non-finite number is never a valid setting"
