"""The documented Python API, `fedsim show`, `fedsim --version`, the field reference and the trace format."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

import fedsim
from fedsim.cli import main
from fedsim.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def test_python_api_runs_and_returns_summary_metrics_and_trace(tmp_path):
    res = fedsim.run("fedasync", out=tmp_path / "r", stop__max_time_s=1.0, output__figures=False,
                     overrides=["data.num_clients=6"])
    assert res.summary["status"] == "ok" and res.summary["label"] == "fedasync"
    assert {"t", "version", "accuracy", "label"} <= set(res.metrics.columns) and len(res.metrics) >= 1
    assert set(res.trace["kind"]) >= {"dispatch", "compute", "upload", "apply"}
    # the trace's apply events are the summary's applied updates
    assert (res.trace["kind"] == "apply").sum() == res.summary["updates_applied"]
    sc = fedsim.load_scenario("default", ["stop.max_time_s=3"])
    assert sc.stop.max_time_s == 3 and fedsim.load_scenario(sc, ["seed=4"]).seed == 4
    with pytest.raises(ConfigError, match=r"^train\.lr: "):
        fedsim.run("default", train__lr=-1, out=tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


def test_show_prints_the_resolved_scenario_and_version(capsys):
    assert main(["show", "fedasync", "stop.max_versions=7"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["stop"] == {"max_versions": 7, "max_time_s": 10.0, "target_accuracy": None, "max_updates": None}
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"fedsim {fedsim.__version__}"


def test_field_reference_in_docs_is_current_and_complete():
    from fedsim.config import walk_fields
    from fedsim.scenario import SECTIONS, field_reference
    from fedsim.algorithms import registry

    text = field_reference(registry())
    assert (ROOT / "docs" / "scenario-reference.md").read_text(encoding="utf-8") == text, \
        "docs/scenario-reference.md is stale: regenerate with `fedsim reference > docs/scenario-reference.md`"
    for key, cls in SECTIONS.items():
        for f in walk_fields(cls, key):
            assert f"| `{f.path}` |" in text
    assert "| `train.lr` | a number | `0.05` | finite, in (0, 10^12] |" in text
    # every row one line of five cells (a long default or a '|' in a meaning would break the table), and every
    # algorithm field says what it means
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert rows and all(line.count("|") == 6 for line in rows), [r for r in rows if r.count("|") != 6][:3]
    undocumented = [r.split("|")[1].strip() for r in rows if r.startswith("| `algorithm") and not r.split("|")[5].strip()]
    assert undocumented == [], undocumented


def test_trace_format_doc_lists_every_event_kind_with_its_fields():
    """The doc's table is the framework's kinds and those the algorithm modules register at import."""
    import fedsim.algorithms.cos2p  # noqa: F401  (registers cos2p_round, cos2p_eval)
    import fedsim.algorithms.gas  # noqa: F401  (activation, dissimilarity; server_step through loops.split)
    from fedsim.sim.trace import EVENT_FIELDS

    doc = (ROOT / "docs" / "trace-format.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(\w+)` \| ([^|]+) \|", doc, flags=re.M))
    assert set(rows) == set(EVENT_FIELDS)
    for kind, fields in EVENT_FIELDS.items():
        assert [s.strip() for s in rows[kind].split(",")] == list(fields), kind
