"""Degenerate runs still draw: every link at one rate (up to rounding), a single client, zero-length phases
and a run of zero virtual time each write every run figure and report.html; and each figure fails on its
own (one that raises is named in the summary, the page and a warning line, the run stays ``ok``, exit 0)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib.axes
import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import TINY

from fedsim.output import report, svg_figures
from fedsim.cli import main

RATE = 2e6  # bit/s: 2 Mbit/s on every link
ULP = float(np.spacing(RATE))


def _phases(client: int, t: float, *, down: float, compute: float, up: float, service: float,
            rate: float | None = RATE, version: int = 1) -> list[dict[str, Any]]:
    """One task of ``client`` from ``t``: download, compute, upload, the server's apply of it."""
    a, b, c = t + down, t + down + compute, t + down + compute + up
    d = c + service
    return [{"t": t, "kind": "dispatch", "client": client, "version": version - 1, "round": None},
            {"t": a, "kind": "download", "client": client, "start": t, "end": a, "bytes": 2600, "wait": 0.0,
             "airtime": down, "rate_bps": rate, "energy": 0.0},
            {"t": b, "kind": "compute", "client": client, "start": a, "end": b, "wait": 0.0, "flops": 1e5,
             "steps": 1, "what": "train", "energy": 0.0},
            {"t": c, "kind": "upload", "client": client, "start": b, "end": c, "bytes": 2600, "wait": 0.0,
             "airtime": up, "rate_bps": rate, "energy": 0.0},
            {"t": d, "kind": "server", "client": client, "start": c, "end": d, "wait": 0.0, "service": service,
             "what": "apply", "queue": 0},
            {"t": d, "kind": "apply", "client": client, "base_version": version - 1, "version": version,
             "staleness": 0, "staleness_s": d - t, "weight": 1.0, "round": version},
            {"t": d, "kind": "aggregate", "version": version, "round": version, "n_updates": 1, "clients": [client]}]


def _run_dir(root: Path, name: str, records: list[dict[str, Any]], clients: list[int]) -> Path:
    """A run folder with this trace, a metrics.csv of one evaluation and an energy.csv of one device class."""
    out = root / name
    out.mkdir()
    t_end = max(r["t"] for r in records)
    records = sorted(records, key=lambda r: r["t"])
    records.append({"t": t_end, "kind": "eval", "version": 1, "round": 1, "accuracy": 0.5, "loss": 1.0})
    (out / "trace.jsonl").write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records), encoding="utf-8")
    pd.DataFrame({"t": [t_end], "version": [1], "round": [1.0], "updates": [1], "accuracy": [0.5], "loss": [1.0],
                  "bytes_up": [2600], "bytes_down": [2600], "wall_s": [0.1]}).to_csv(out / "metrics.csv", index=False)
    pd.DataFrame({"device": clients, "compute_j": 0.0, "tx_j": 0.0, "rx_j": 0.0, "idle_j": 0.0, "busy_s": 0.0,
                  "tx_s": 0.0, "rx_s": 0.0, "idle_s": 0.0, "total_j": 0.0,
                  "device_class": "jetson-nano"}).to_csv(out / "energy.csv", index=False)
    return out


def _one_rate(root: Path) -> Path:
    """Three clients, every link at 2 Mbit/s; the recomputed rates differ in the last bit, as they do."""
    recs = []
    for k in range(6):
        rate = RATE + (k % 3 - 1) * ULP
        recs += _phases(k % 3, 2.0 * k, down=0.0104, compute=0.1, up=0.0104, service=0.002, rate=rate, version=k + 1)
    return _run_dir(root, "one_rate", recs, [0, 1, 2])


def _one_client(root: Path) -> Path:
    return _run_dir(root, "one_client", _phases(0, 0.0, down=0.5, compute=1.0, up=0.5, service=0.1), [0])


def _zero_phases(root: Path) -> Path:
    """Ideal downlinks (0 s, no rate), instant compute and service: only the uploads take time."""
    recs = []
    for k in range(4):
        recs += _phases(k % 2, 1.0 * k, down=0.0, compute=0.0, up=0.25, service=0.0, version=k + 1)
    for r in recs:
        if r["kind"] == "download":
            r["rate_bps"] = None
    return _run_dir(root, "zero_phases", recs, [0, 1])


def _zero_run(root: Path) -> Path:
    """Every phase takes no time: the whole run is at t = 0."""
    return _run_dir(root, "zero_run", _phases(0, 0.0, down=0.0, compute=0.0, up=0.0, service=0.0, rate=None), [0])


@pytest.mark.fast
@pytest.mark.parametrize("make", [_one_rate, _one_client, _zero_phases, _zero_run])
def test_degenerate_runs_draw_every_figure_and_the_report(tmp_path, make):
    run = make(tmp_path)
    written = {p.name for p in report.run_figures(run)}  # without ``missing``: any figure's failure raises
    expected = {"accuracy_vs_time.svg", "timeline.svg", "server_queue.svg", "energy.svg"}
    if make is not _zero_run:  # (a run with no rate recorded has no link-rate figure)
        expected.add("link_rates.svg")
    assert expected <= written, written
    page = report.html_report(run).read_text(encoding="utf-8")
    assert "Figures not drawn" not in page and page.count("data:image/svg+xml;base64,") == len(written)


@pytest.mark.fast
def test_one_rate_up_to_rounding_is_one_bar(tmp_path, monkeypatch):
    run = _one_rate(tmp_path)
    digest = report.run_digest(run)
    rates = np.concatenate(list(digest.link_rates().values()))
    assert 0 < rates.max() - rates.min() <= 2 * ULP  # the data really is one value up to rounding
    hists = []
    real = matplotlib.axes.Axes.hist
    monkeypatch.setattr(matplotlib.axes.Axes, "hist", lambda self, x, *a, **k: hists.append(real(self, x, *a, **k))
                        or hists[-1])
    assert report.link_rate_figure(digest, tmp_path / "l.png")
    # one bar per direction holding its six transfers, centred on 2 Mbit/s
    assert [list(n) for n, _, _ in hists] == [[6.0], [6.0]]
    assert all(np.mean(edges) == pytest.approx(2.0) for _, edges, _ in hists)
    # the broken case: the 40 default bins over a range of one bit's rounding (what the figure used to ask)
    monkeypatch.setattr(report, "_linear_bins", lambda values, n: n)
    with pytest.raises(ValueError, match="bins"):
        report.link_rate_figure(digest, tmp_path / "broken.png")


@pytest.mark.fast
def test_a_failing_figure_is_recorded_and_the_rest_are_drawn(tmp_path):
    run = _one_client(tmp_path)
    (run / "link_rates.svg").write_bytes(b"stale")  # an earlier build's file is not shown as this one's
    missing: dict[str, dict[str, str]] = {}
    real = svg_figures.link_rate_svg
    try:
        svg_figures.link_rate_svg = lambda *a, **k: 1 / 0  # deliberately broken figure
        written = {p.name for p in report.run_figures(run, missing=missing)}
        with pytest.raises(ZeroDivisionError):  # without ``missing`` it is raised, as before
            report.run_figures(run, only=["link_rates"])
    finally:
        svg_figures.link_rate_svg = real
    assert list(missing) == ["link_rates"] and missing["link_rates"]["error"] == "ZeroDivisionError: division by zero"
    assert "Traceback" in missing["link_rates"]["traceback"]
    assert "link_rates.svg" not in written and not (run / "link_rates.svg").exists()
    assert {"accuracy_vs_time.svg", "timeline.svg", "server_queue.svg", "energy.svg"} <= written


def test_a_figure_that_raises_in_a_run_fails_alone(tmp_path, capsys, monkeypatch):
    """The run's own process: one figure raises, the run is ``ok`` and exits 0 with a warning line, the
    other figures and report.html are written, and the page lists the figure under "Figures not drawn"."""
    def broken(*args: Any, **kwargs: Any) -> bool:
        raise ValueError("Too many bins for data range. Cannot create 40 finite-sized bins.")

    monkeypatch.setattr(svg_figures, "link_rate_svg", broken)
    out = tmp_path / "run"
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump({**TINY, "output": {"figures": True}}), encoding="utf-8")
    code = main(["run", str(tmp_path / "tiny.yaml"), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 0, err
    line = "ValueError: Too many bins for data range. Cannot create 40 finite-sized bins."
    assert f"fedsim: warning: fedavg: figures not drawn: link_rates ({line})" in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["figures_missing"] == {"link_rates": line}
    assert "outputs_error" not in summary and not (out / "outputs_error.txt").exists()
    assert ", in broken" in (out / "figures_error.txt").read_text()
    assert {"accuracy_vs_time.svg", "timeline.svg", "server_queue.svg", "energy.svg"} <= {p.name for p in out.glob("*.svg")}
    assert not (out / "link_rates.svg").exists()
    page = (out / "report.html").read_text()
    assert f"<h2 id='figures-missing'>Figures not drawn</h2>" in page and f"<b>link_rates</b>: {line}" in page
    # drawn again with the figure mended: nothing is missing, and the stale traceback is gone
    monkeypatch.undo()
    from fedsim.output.process import build_run_outputs

    assert build_run_outputs(str(out), None, 30, None) == {}
    assert not (out / "figures_error.txt").exists() and (out / "link_rates.svg").exists()
    assert "Figures not drawn" not in (out / "report.html").read_text()


def test_the_homogeneous_rate_run_writes_its_report(tmp_path, capsys):
    """The issue's run: every link at one fixed rate, logistic regression (shortened): exit 0, status ok, no
    figure missing, and the link-rate figure drawn."""
    out = tmp_path / "run"
    code = main(["run", "fedasync", "channel.uplink.mbps=2", "channel.downlink.mbps=2", "model.name=logreg",
                 "data.num_clients=8", "stop={max_versions: 20}", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 0 and "warning" not in err, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "ok" and "figures_missing" not in summary
    assert (out / "link_rates.svg").is_file() and (out / "report.html").is_file()
