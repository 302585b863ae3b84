"""An algorithm's own record kinds: registered by the module that writes them, read without it.

``fedsim.sim.trace`` holds the framework's record schemas only; Co-S²P, GAS and the split loops add theirs with
``register_record_kind`` when imported.  The registry refuses a clash, every registered kind matches what its
writers write (read from the source), and a Co-S²P or GAS trace is read by the digest, ``analysis`` and
``fedsim check`` in a process that never imports those algorithms.
"""
from __future__ import annotations

import ast
import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fedsim.sim.trace as trace
from fedsim import load_scenario, scenario_from_mapping
from fedsim.runner import run_scenario

ROOT = Path(__file__).resolve().parents[1]
ALGORITHMS = ROOT / "fedsim" / "algorithms"

#: the kinds the paper and split modules register, and the module that registers each
REGISTERED = {"cos2p_round": "fedsim.algorithms.cos2p", "cos2p_eval": "fedsim.algorithms.cos2p",
              "activation": "fedsim.algorithms.gas", "dissimilarity": "fedsim.algorithms.gas",
              "server_step": "fedsim.algorithms.loops.split"}


@pytest.fixture
def fresh(monkeypatch):
    """EVENT_FIELDS as a copy for one test, so a test's registrations leave the real table alone."""
    monkeypatch.setattr(trace, "EVENT_FIELDS", dict(trace.EVENT_FIELDS))
    return trace.EVENT_FIELDS


@pytest.mark.fast
def test_register_adds_a_kind_and_accepts_the_same_schema_again(fresh):
    trace.register_record_kind("my_round", ["round", "clients"])
    assert fresh["my_round"] == ("round", "clients")
    trace.register_record_kind("my_round", ("round", "clients"))  # a module imported twice
    assert fresh["my_round"] == ("round", "clients")


@pytest.mark.fast
@pytest.mark.parametrize("kind, fields, says", [
    ("my_round", ("round",), "already registered"),            # a clash with the schema registered first
    ("dispatch", ("client",), "already registered"),            # a framework kind cannot be redefined
    ("my round", ("round",), "a record kind is a name"),
    ("", ("round",), "a record kind is a name"),
    ("my_x", ("a", "a"), "distinct"),
    ("my_x", ("t", "a"), "not 't' or 'kind'"),
    ("my_x", ("kind",), "not 't' or 'kind'"),
    ("my_x", ("a b",), "field names must be names"),
])
def test_register_refuses_a_clash_and_bad_names(fresh, kind, fields, says):
    trace.register_record_kind("my_round", ("round", "clients"))
    with pytest.raises(ValueError, match=says):
        trace.register_record_kind(kind, fields)
    assert fresh["my_round"] == ("round", "clients") and fresh["dispatch"] == ("client", "version", "round", "task")


def test_the_trace_layer_holds_only_the_framework_kinds():
    """Imported alone (a fresh process), the trace names no algorithm's kind; each registering module adds its
    own (Co-S²P loads the loops package, and with it the split loops' ``server_step``), and importing one
    paper's module does not register another's."""
    code = ("import sys, json\nimport fedsim.sim.trace as t\nalone = sorted(t.EVENT_FIELDS)\n"
            "import fedsim.algorithms.cos2p\nwith_cos2p = sorted(t.EVENT_FIELDS)\n"
            "import fedsim.algorithms.gas\nprint(json.dumps([alone, with_cos2p, sorted(t.EVENT_FIELDS)]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    alone, with_cos2p, with_gas = json.loads(out.stdout.splitlines()[-1])
    framework = {"dispatch", "download", "compute", "upload", "server", "apply", "aggregate", "round", "drop",
                 "eval", "offline", "slots"}
    assert set(alone) == framework
    assert set(with_cos2p) == framework | {"cos2p_round", "cos2p_eval", "server_step"}
    assert set(with_gas) == framework | set(REGISTERED)


def _written_fields() -> dict[str, list[tuple[str, tuple[str, ...]]]]:
    """Per kind, (module, field names) of each ``ctx.measure(kind, **fields)`` and
    ``ctx.measurement(kind, (fields...))`` under fedsim/algorithms, read from the source."""
    found: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
    for path in sorted(ALGORITHMS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("measure", "measurement") and node.args
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                continue
            if node.func.attr == "measure":
                names = tuple(k.arg for k in node.keywords if k.arg)
            else:
                names = tuple(ast.literal_eval(node.args[1]))
            found.setdefault(node.args[0].value, []).append((path.name, names))
    return found


def _in_order(sub: tuple[str, ...], full: tuple[str, ...]) -> bool:
    """``sub`` is ``full`` with some fields left out (a writer may omit a field it never measures)."""
    it = iter(full)
    return all(name in it for name in sub)


def test_each_registered_kind_matches_what_its_writers_write():
    import fedsim.algorithms.cos2p  # noqa: F401
    import fedsim.algorithms.gas  # noqa: F401
    import fedsim.algorithms.loops.split  # noqa: F401

    written = _written_fields()
    assert set(REGISTERED) <= set(written)
    for kind in REGISTERED:
        for module, names in written[kind]:
            assert _in_order(names, trace.EVENT_FIELDS[kind]), (kind, module, names)
    # the check can fail: a writer with a field the schema lacks, or the fields out of order
    assert not _in_order(("step", "version", "extra"), trace.EVENT_FIELDS["server_step"])
    assert not _in_order(("version", "step"), trace.EVENT_FIELDS["server_step"])
    assert _in_order(("step", "version", "tv_union"), trace.EVENT_FIELDS["server_step"])


_READER = r"""
import json, sys
from analysis.report import check_run
from analysis.trace_metrics import cos2p_summary
from fedsim.cli import main
from fedsim.output.digest import digest_trace
from fedsim.sim.trace import EVENT_FIELDS, load_trace

cos2p, gas = sys.argv[1:3]
codes = []
for run in (cos2p, gas):
    try:
        codes.append(main(["check", run]))
    except SystemExit as e:
        codes.append(e.code)
digests = [type(digest_trace(run)).__name__ for run in (cos2p, gas)]
table = check_run(gas, figures=False, progress=False).set_index("quantity")
paper = ("fedsim.algorithms.cos2p", "fedsim.algorithms.cos2p_parts", "fedsim.algorithms.gas",
         "fedsim.algorithms.gas_parts", "fedsim.algorithms.loops.split")
print(json.dumps({
    "codes": codes, "digests": digests,
    "summary": cos2p_summary(load_trace(cos2p)),
    "d_without": float(table.loc["server-gradient dissimilarity without generation (mean)", "measured"]),
    "registered": sorted(k for k in ("cos2p_round", "cos2p_eval", "activation", "dissimilarity", "server_step")
                         if k in EVENT_FIELDS),
    "loaded": sorted(m for m in paper if m in sys.modules),
}))
"""


def test_paper_traces_are_read_without_their_algorithm(tiny, tmp_path):
    """The digest, analysis and ``fedsim check`` read a Co-S²P and a GAS run in a process that imports neither
    algorithm (so their kinds are not in EVENT_FIELDS there), and get the values the trace holds."""
    sc = copy.deepcopy(tiny)
    sc["data"] = {"name": "digits", "num_clients": 4, "partition": {"method": "iid"}}
    sc["model"] = {"name": "vit", "depth": 2, "options": {"embed_dim": 16, "heads": 2, "patch": 4}}
    sc["devices"] = {"mix": [{"profile": "jetson-xavier-nx-8gb", "count": 2},
                             {"profile": "jetson-agx-orin-64gb", "count": 2}]}
    sc["algorithm"] = {"name": "cos2p", "mu": 0.5, "t_clk": 0.0, "rate_rule": "table7",
                       "rates": {"jetson-xavier-nx-8gb": 0.25}}
    sc["stop"] = {"max_versions": 3}
    cos2p, gas = tmp_path / "cos2p", tmp_path / "gas"
    run_scenario(scenario_from_mapping(sc), cos2p, progress=False)
    run_scenario(load_scenario("gas", ["stop.max_versions=6", "eval.every_versions=6", "output.figures=false"]),
                 gas, progress=False)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", _READER, str(cos2p), str(gas)], capture_output=True, text=True,
                         cwd=ROOT, env=env, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["loaded"] == [] and got["registered"] == []  # neither algorithm (nor its schemas) was loaded
    assert got["codes"] == [0, 0] and got["digests"] == ["TraceDigest", "TraceDigest"]

    def records(run: Path, kind: str) -> list[dict]:
        lines = (run / "trace.jsonl").read_text(encoding="utf-8").splitlines()
        return [r for r in map(json.loads, lines) if r["kind"] == kind]

    rounds = records(cos2p, "cos2p_round")
    assert rounds and got["summary"]["Q"] == len(rounds)
    assert got["summary"]["n_star_trained"] == min(r["n_star_trained"] for r in rounds)
    assert got["summary"]["tau_bar"] == pytest.approx(np.mean([max(r["tau"]) ** 2 for r in rounds]))
    assert got["summary"]["server_top1"] == pytest.approx(records(cos2p, "cos2p_eval")[0]["server_top1"])
    dis = records(gas, "dissimilarity")
    assert dis and got["d_without"] == pytest.approx(np.mean([r["without_generation"] for r in dis]))
