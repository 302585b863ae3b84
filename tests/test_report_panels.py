"""report.html's "What happened" panels (fedsim.output.panels): the per-client time breakdown sums to the
run's virtual time and matches the trace; the server's utilisation and waits match the trace and
summary.json; staleness, rounds, stragglers, drops and split-learning traffic come out as the trace says;
sweep and --seeds folders get a report with working links; and in headless Chromium every panel is
present, has data, answers a hover and follows the timeline's zoom."""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedsim import load_scenario
from fedsim.output.report import html_report
from fedsim.output.panels import (BREAKDOWN_KEYS, client_breakdown, gather, panels_data,
                                  panels_html, round_stats, server_stats, transfer_purpose)
from fedsim.runner import run_scenario
from fedsim.sim.trace import load_trace


def _write_trace(run: Path, records: list[dict], t_end: float) -> None:
    run.mkdir(parents=True, exist_ok=True)
    (run / "trace.jsonl").write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records), encoding="utf-8")
    (run / "summary.json").write_text(json.dumps({"label": "x", "virtual_time_s": t_end,
                                                  "server": {"workers": 1}}), encoding="utf-8")


#: A hand-made trace whose breakdown is worked out by hand (comments): overlaps, the server's work for a
#: client and for a round, a round with a drop, an offline spell, split learning's transfers.
SYNTHETIC = [
    {"t": 1, "kind": "download", "client": 0, "start": 0, "end": 1, "bytes": 10, "version": 0},
    {"t": 2, "kind": "download", "client": 1, "start": 0, "end": 2, "bytes": 10, "version": 0},
    {"t": 3, "kind": "compute", "client": 0, "start": 1, "end": 3, "what": "train"},
    {"t": 3, "kind": "upload", "client": 1, "start": 2, "end": 3, "bytes": 100, "what": "activations"},
    {"t": 3.5, "kind": "download", "client": 1, "start": 3, "end": 3.5, "bytes": 50, "version": None},
    {"t": 4, "kind": "upload", "client": 0, "start": 2.5, "end": 4, "bytes": 10},  # 2.5-3 under compute
    {"t": 5, "kind": "server", "client": 0, "start": 4.5, "end": 5, "wait": 0.5, "what": "apply"},
    {"t": 6, "kind": "drop", "client": 1, "reason": "deadline", "round": 1},
    {"t": 6, "kind": "server", "client": None, "start": 5.5, "end": 6, "wait": 0.0, "what": "aggregate"},
    {"t": 6, "kind": "apply", "client": 0, "staleness": 0, "round": 1},
    {"t": 6, "kind": "round", "round": 1, "start": 0, "end": 6, "clients": [0, 1], "dropped": [1]},
    {"t": 7, "kind": "apply", "client": 0, "staleness": 2, "round": 2},
    {"t": 9, "kind": "offline", "client": 0, "start": 8, "end": 9},
]


def test_breakdown_server_rounds_and_traffic_of_a_hand_made_trace(tmp_path):
    _write_trace(tmp_path, SYNTHETIC, 10.0)
    g = gather(tmp_path)
    table = client_breakdown(g, 10.0)
    # client 0: download 0-1, compute 1-3, upload 3-4 (its 2.5-3 is compute's), queue 4-4.5, served 4.5-5 and
    # the round's aggregation 5.5-6, waiting for the round 5-5.5, offline 8-9, idle the rest (6-8, 9-10)
    want0 = {"download": 1, "compute": 2, "upload": 1, "queue": 0.5, "served": 1.0, "round_wait": 0.5,
             "unavailable": 1, "concurrency": 0, "not_selected": 0, "idle": 3}
    # client 1: downloads 0-2 and 3-3.5, upload 2-3, aggregation 5.5-6, waits for the round 3.5-5.5, idle 6-10
    want1 = {"download": 2.5, "compute": 0, "upload": 1, "queue": 0, "served": 0.5, "round_wait": 2.0,
             "unavailable": 0, "concurrency": 0, "not_selected": 0, "idle": 4}
    for c, want in ((0, want0), (1, want1)):
        assert table.loc[c, list(BREAKDOWN_KEYS)].to_dict() == pytest.approx(want)
        assert table.loc[c, list(BREAKDOWN_KEYS)].sum() == pytest.approx(10.0)
    assert table.loc[1, "drops"] == 1 and table.loc[0, "drops"] == 0
    assert table.loc[0, "mean_staleness"] == pytest.approx(1.0) and table.loc[0, "updates"] == 2

    server = server_stats(g, 10.0, workers=1)
    assert server["utilisation"] == pytest.approx(0.1)  # 0.5 + 0.5 busy seconds of 10
    assert server["mean_wait"] == pytest.approx(0.25) and server["peak_wait"] == pytest.approx(0.5)
    assert server["what"] == {"apply": 1, "aggregate": 1}
    assert np.mean(server["util"]) == pytest.approx(0.1, rel=1e-6)  # the bins hold the same busy time

    rounds = round_stats(g)["rounds"]
    assert rounds == [{"round": 1, "start": 0.0, "end": 6.0, "clients": 2, "straggler": 0, "straggler_done": 4.0,
                       "dropped": [1]}]

    data = panels_data(tmp_path)
    traffic = {(r["direction"], r["purpose"]): (r["count"], r["bytes"]) for r in data["traffic"]}
    assert traffic[("upload", "activations")] == (1, 100)
    assert traffic[("download", "gradients")] == (1, 50)  # no version, in a run that uploads activations
    assert traffic[("download", "model")] == (2, 20)
    assert data["staleness"]["hist"]["lo"] == [0, 2] and data["staleness"]["hist"]["n"] == [1, 1]

    link = "href='check/staleness_hist.png'"
    assert link not in panels_html(tmp_path)
    (tmp_path / "check").mkdir()
    (tmp_path / "check" / "staleness_hist.png").write_bytes(b"")  # what `fedsim check` writes
    assert link in panels_html(tmp_path)


def test_transfer_purpose():
    assert transfer_purpose("download", None, 3) == "model"
    assert transfer_purpose("download", None, None, split=True) == "gradients"
    assert transfer_purpose("download", None, None, split=False) == "model"
    assert transfer_purpose("upload", "activations") == "activations"
    assert transfer_purpose("upload", None) == "model"
    assert transfer_purpose("upload", "teacher") == "teacher"


def _brute_force(trace: pd.DataFrame, client: int, t_end: float, n: int = 200_000) -> dict[str, float]:
    """The breakdown by sampling: each of n instants gets the first label whose records cover it."""
    t = (np.arange(n) + 0.5) * (t_end / n)
    label = np.full(n, len(BREAKDOWN_KEYS) - 1)

    def cover(rows: pd.DataFrame, s: str, e: str) -> np.ndarray:
        m = np.zeros(n, bool)
        for a, b in zip(rows[s].astype(float), rows[e].astype(float)):
            m |= (t >= a) & (t < b)
        return m

    mine = trace[trace["client"] == client]
    srv = trace[trace["kind"] == "server"]
    own = srv[srv["client"] == client].assign(arrive=lambda d: d["start"] - d["wait"])
    rounds = trace[trace["kind"] == "round"]
    rounds = rounds[[client in (c or []) for c in rounds["clients"]]] if len(rounds) else rounds
    in_round = cover(rounds, "start", "end") if len(rounds) else np.zeros(n, bool)
    agg = cover(srv[srv["client"].isna()], "start", "end") & in_round
    masks = {"compute": cover(mine[mine["kind"] == "compute"], "start", "end"),
             "upload": cover(mine[mine["kind"] == "upload"], "start", "end"),
             "download": cover(mine[mine["kind"] == "download"], "start", "end"),
             "queue": cover(own, "arrive", "start"),
             "served": cover(own, "start", "end") | agg,
             "unavailable": cover(mine[mine["kind"] == "offline"], "start", "end"),
             "round_wait": in_round}
    # every slot taken (a slots record with busy = limit holds until the next one), and any round running
    slots = trace[trace["kind"] == "slots"] if "busy" in trace else None
    full = np.zeros(n, bool)
    ts, bs, ls = ([], [], []) if slots is None else (slots["t"].astype(float).tolist(), slots["busy"].tolist(),
                                                     slots["limit"].tolist())
    for i, (a, b, lim) in enumerate(zip(ts, bs, ls)):
        if b >= lim:
            full |= (t >= a) & (t < (ts[i + 1] if i + 1 < len(ts) else np.inf))
    masks["concurrency"] = full
    all_rounds = trace[trace["kind"] == "round"]
    masks["not_selected"] = cover(all_rounds, "start", "end") if len(all_rounds) else np.zeros(n, bool)
    for i, k in reversed(list(enumerate(BREAKDOWN_KEYS[:-1]))):
        label[masks[k]] = i
    return {k: float(np.sum(label == i)) * t_end / n for i, k in enumerate(BREAKDOWN_KEYS)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two small runs, reports written: FedAsync with a queueing server, FedAvg with a deadline that drops."""
    root = tmp_path_factory.mktemp("panels")
    common = ["data.num_clients=6", "model.name=logreg", "train.systems_only=true", "output.figures=false"]
    sc = load_scenario("fedasync", common + ["algorithm.concurrency=4", "server.overhead_s=0.02",
                                             "stop={max_time_s: 1.5}"])
    run_scenario(sc, root / "async", progress=False)
    sc = load_scenario("default", common + ["algorithm=[{name: fedavg, clients_per_round: 5, deadline_s: 0.06}]",
                                            "stop={max_time_s: 1.5}"])
    run_scenario(sc, root / "sync", progress=False)
    for r in ("async", "sync"):
        html_report(root / r)
    return root


@pytest.mark.parametrize("which", ["async", "sync"])
def test_breakdown_sums_to_the_run_time_and_matches_the_trace(runs, which):
    run = runs / which
    t_end = json.loads((run / "summary.json").read_text())["virtual_time_s"]
    trace = load_trace(run)
    table = client_breakdown(gather(run), t_end)
    assert len(table) == trace.loc[trace["kind"].isin(["download", "compute", "upload"]), "client"].nunique()
    assert np.allclose(table[list(BREAKDOWN_KEYS)].sum(axis=1), t_end, rtol=1e-9, atol=1e-9)
    tol = 4 * t_end / 200_000 * 300  # sampling error: a few samples per record boundary
    for c in table.index[:3]:
        want = _brute_force(trace, int(c), t_end)
        got = table.loc[c, list(BREAKDOWN_KEYS)].to_dict()
        assert got == pytest.approx(want, abs=tol), c
    if which == "async":
        assert table["queue"].sum() > 0.1 and table["round_wait"].sum() == 0
    else:
        assert table["round_wait"].sum() > 0.1 and table["queue"].sum() == 0 and table["drops"].sum() > 0


@pytest.mark.parametrize("which", ["async", "sync"])
def test_server_numbers_match_the_trace_and_summary(runs, which):
    run = runs / which
    summary = json.loads((run / "summary.json").read_text())
    trace = load_trace(run)
    srv = trace[trace["kind"] == "server"]
    t_end = summary["virtual_time_s"]
    busy = (srv["end"].clip(upper=t_end) - srv["start"].clip(upper=t_end)).sum()
    stats = server_stats(gather(run), t_end, workers=int(summary["server"]["workers"]))
    assert stats["utilisation"] == pytest.approx(busy / t_end)
    # the server's own accounting also counts a request still in service at the end (at most one service)
    service = srv["service"].max()
    assert 0 <= summary["server"]["utilisation"] - stats["utilisation"] <= service / t_end + 1e-9
    assert stats["mean_wait"] == pytest.approx(srv["wait"].mean()) and stats["peak_wait"] == pytest.approx(srv["wait"].max())
    assert stats["requests"] == len(srv)
    page = (run / "report.html").read_text()
    assert f"<tr><th>server utilisation</th><td>{summary['server']['utilisation']:.1%}</td></tr>" in page


def test_rounds_stragglers_and_drops_match_the_trace(runs):
    trace = load_trace(runs / "sync")
    data = panels_data(runs / "sync")
    rounds = trace[trace["kind"] == "round"]
    ups = trace[trace["kind"] == "upload"]
    assert len(data["rounds"]["rounds"]) == len(rounds)
    for r, got in zip(rounds.itertuples(), data["rounds"]["rounds"]):
        assert got["dropped"] == list(r.dropped)
        done = ups[ups["client"].isin(set(r.clients) - set(r.dropped)) & (ups["end"] >= r.start) & (ups["end"] <= r.end)]
        if len(done):
            assert got["straggler"] == int(done.loc[done["end"].idxmax(), "client"])
    assert len(data["rounds"]["drops"]) == (trace["kind"] == "drop").sum() > 0
    st = trace[trace["kind"] == "apply"]["staleness"].value_counts().sort_index()
    hist = data["staleness"]["hist"]
    assert dict(zip(hist["lo"], hist["n"])) == {int(k): int(v) for k, v in st.items()}


def test_sweep_and_seeds_folders_get_a_report_with_working_links(tmp_path):
    from fedsim.sweep import run_seeds, run_sweep

    common = ["data.num_clients=4", "model.name=logreg", "train.local_steps=1", "stop={max_versions: 2}",
              "algorithm=[{name: fedavg, clients_per_round: 2}]", "eval.every_versions=1"]
    run_seeds(load_scenario("default", common), [0, 1], tmp_path / "seeds", progress=False)
    run_sweep("default", common + ["network.latency_s=0.01,0.1"], tmp_path / "sweep", target=None, progress=False)
    for folder, runs in (("seeds", ["seed-0", "seed-1"]), ("sweep", ["network.latency_s=0.01", "network.latency_s=0.1"])):
        page = (tmp_path / folder / "report.html").read_text(encoding="utf-8")
        links = re.findall(r"<li><a href='([^']+)'", page)
        assert len(links) == 2
        for link, run in zip(links, runs):
            from urllib.parse import unquote

            target = tmp_path / folder / unquote(link)
            assert target.exists() and target.parent.name == run
            sub = target.read_text(encoding="utf-8")
            up = re.search(r"class='fp-up' href='([^']+)'", sub)
            assert up and (target.parent / unquote(up.group(1))).resolve() == (tmp_path / folder / "report.html").resolve()
        assert "id='glossary'" in page and "every run&#x27;s accuracy" in page  # every run's curve, one axis
    assert not (tmp_path / "sweep" / "runs_accuracy.png").exists()


# ------------------------------------------------------------------------------------------ browser

from test_report_browser import BROWSER, Chrome  # noqa: E402 - the browser driver of the timeline's test


@pytest.mark.skipif(BROWSER is None, reason="no Chromium installed (apt-get install chromium)")
def test_every_panel_is_present_has_data_and_answers_a_hover(runs, tmp_path):
    chrome = Chrome(BROWSER, tmp_path / "profile")
    try:
        for which in ("async", "sync"):
            chrome.events.clear()
            chrome.page("Runtime.enable")
            chrome.page("Log.enable")
            chrome.page("Page.enable")
            chrome.page("Emulation.setDeviceMetricsOverride", width=1024, height=900, deviceScaleFactor=1, mobile=False)
            chrome.page("Page.navigate", url=(runs / which / "report.html").resolve().as_uri())
            chrome.wait_for("Page.loadEventFired")
            data = panels_data(runs / which)
            drawn = chrome.js("window.fedsimPanels.drawn")
            assert drawn["breakdown"] == data["clients"]["id"][:40]
            assert drawn["server"] > 0 and drawn["staleHist"] > 0 and drawn["staleTime"] > 0 and drawn["traffic"] > 0

            def hover(selector: str) -> str:
                return chrome.js("""(() => { const n = document.querySelector(%s);
                    n.dispatchEvent(new MouseEvent('mouseover', {bubbles: true}));
                    return document.getElementById('fp-tip').textContent; })()""" % json.dumps(selector))

            tip = hover("#fp-segs rect[data-part='download']")
            assert re.search(r"client \d+: download\n", tip) and "of the run" in tip
            assert "staleness" in hover("#fp-stale-time circle.fp-sdot")
            assert "updates" in hover("#fp-stale-hist rect.fp-hbar")
            assert "utilisation" in hover("#fp-server rect.fp-hit")
            assert "records" in hover("#fp-traffic rect.fp-traffic-bar")
            assert "glossary" in chrome.js("document.querySelector('nav.fp-nav').textContent")
            # the idle reasons: in the legend, drawn where the run has them (async: slots; sync: rounds)
            legend = chrome.js("document.getElementById('fp-legend').textContent")
            assert "waiting for a slot (concurrency limit)" in legend and "not selected" in legend
            reason = "concurrency" if which == "async" else "not_selected"
            assert "client" in hover(f"#fp-segs rect[data-part='{reason}']")
            top = chrome.js("""(() => { const s = document.getElementById('fp-sort'); s.value = %s;
                s.dispatchEvent(new Event('change')); return window.fedsimPanels.drawn.breakdown[0]; })()"""
                            % json.dumps(reason))
            parts = data["clients"]["parts"][data["keys"].index(reason)]
            assert parts[data["clients"]["id"].index(top)] == max(parts)
            if which == "sync":
                assert drawn["rounds"] > 0
                assert "straggler: client" in hover("#fp-rounds rect.fp-round")
                assert "dropped at" in hover("#fp-rounds rect.fp-hit[width='10']")
            # sort by the slowest: the first bar is the client with the longest time per task
            order = chrome.js("""(() => { const s = document.getElementById('fp-sort'); s.value = 'slowest';
                s.dispatchEvent(new Event('change')); return window.fedsimPanels.drawn.breakdown; })()""")
            per = dict(zip(data["clients"]["id"], data["clients"]["per_task"]))
            assert order[0] == max(per, key=lambda c: -1 if per[c] is None else per[c])
            picked = chrome.js("""(() => { const p = document.getElementById('fp-pick'); p.value = '1, 3-4';
                p.dispatchEvent(new Event('input')); return window.fedsimPanels.drawn.breakdown; })()""")
            assert picked == [1, 3, 4]
            # zoom the timeline: the time-series panels follow its view
            chrome.js("document.getElementById('fs-in').click()")
            time.sleep(0.3)
            view = chrome.js("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => "
                             "r([window.fedsimView, window.fedsimPanels.view]))))")
            assert view[1] == [view[0]["start"], view[0]["end"]] and view[0]["end"] < data["t_end"]
            assert chrome.errors() == []
    finally:
        chrome.close()


# ------------------------------------------------------------------------------- the streamed panels

def _streamed(run: Path, block_lines: int = 64):
    from fedsim.output.panels import _FIELDS, _KINDS, PanelStream
    from fedsim.sim.trace import iter_blocks

    stream = PanelStream()
    for b in iter_blocks(run, kinds=_KINDS, fields=_FIELDS, block_lines=block_lines):
        stream.add(b)
        if b.closes:
            stream.piece_read()
    return stream


@pytest.mark.parametrize("which", ["async", "sync", "hand-made"])
def test_streamed_panels_equal_the_exact_reading_window_by_window(runs, which, tmp_path, monkeypatch):
    """The panels fed by the figures' single pass, summing the breakdown window by window behind a
    watermark (here after every few dozen intervals), give the numbers of the reading that holds them all."""
    import fedsim.output.panels as rp

    if which == "hand-made":
        run = tmp_path
        _write_trace(run, SYNTHETIC, 10.0)
    else:
        run = runs / which
    monkeypatch.setattr(rp, "PENDING_MAX", 40)
    t_end = json.loads((run / "summary.json").read_text())["virtual_time_s"]
    stream = _streamed(run)
    assert not stream.unstable
    if which != "hand-made":
        assert stream.done > 0.2 * t_end  # most of the run was summed before the end
    got = stream.breakdown(t_end)
    g = gather(run)
    want = client_breakdown(g, t_end)
    assert list(got.index) == list(want.index) and list(got.columns) == list(want.columns)
    assert np.allclose(got.to_numpy(dtype=float), want.to_numpy(dtype=float), rtol=1e-9, atol=1e-9, equal_nan=True)
    assert stream.server(t_end, 1, None) == server_stats(g, t_end, 1, None)
    assert stream.round_table() == round_stats(g)
    monkeypatch.setattr(rp.PanelStream, "breakdown", lambda self, t, n=None: None)
    exact = rp.panels_data(run)
    monkeypatch.undo()
    streamed = rp.panels_data(run)
    assert streamed.keys() == exact.keys()
    for k in streamed:
        if k != "clients":
            assert streamed[k] == exact[k], k
    for k in streamed["clients"]:
        assert np.allclose(np.array(streamed["clients"][k], dtype=float), np.array(exact["clients"][k], dtype=float),
                           rtol=1e-5, equal_nan=True), k


def test_a_record_reaching_behind_the_watermark_makes_the_stream_fall_back(tmp_path, monkeypatch):
    import fedsim.output.panels as rp

    late = [{"t": 0.1 * i + 0.1, "kind": "compute", "client": i % 3, "start": 0.1 * i, "end": 0.1 * i + 0.1}
            for i in range(60)]
    late.append({"t": 6.1, "kind": "offline", "client": 0, "start": 0.5, "end": 6.1})  # reaches far back
    _write_trace(tmp_path, late, 6.5)
    monkeypatch.setattr(rp, "PENDING_MAX", 10)
    stream = _streamed(tmp_path, block_lines=8)
    assert stream.done > 0 and stream.unstable and stream.breakdown(6.5) is None
    data = rp.panels_data(tmp_path, stream)  # read again the exact way
    i = data["keys"].index("unavailable")
    assert data["clients"]["parts"][i][0] == pytest.approx(5.6 - 18 * 0.1)  # the spell less client 0's computes
    assert client_breakdown(gather(tmp_path), 6.5).loc[0, "unavailable"] == pytest.approx(3.8)


# --------------------------------------------------------------- the timeline: rounds, what, picked rows

def _pixels(png: Path, colour: str) -> int:
    import matplotlib.image as mimage

    rgb = (mimage.imread(png)[..., :3] * 255).round().astype(int)
    want = np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)])
    return int((np.abs(rgb - want).sum(axis=-1) < 40).sum())


def test_timeline_png_marks_rounds_stragglers_and_drops(runs, tmp_path):
    """The sync run's timeline.png: round starts, stragglers (gold) and drops (red) drawn; none without rounds."""
    from fedsim.output.digest import digest_trace
    from fedsim.output.report import timeline_figure

    run = runs / "sync"
    data = panels_data(run)
    rounds = data["rounds"]
    assert rounds["rounds"] and rounds["drops"]
    digest = digest_trace(run, timeline_clients=30)
    timeline_figure(digest, tmp_path / "with.png", rounds=rounds)
    timeline_figure(digest, tmp_path / "without.png")
    assert _pixels(tmp_path / "without.png", "#c9a100") == 0 and _pixels(tmp_path / "without.png", "#d62728") == 0
    # every straggler's marker and every drop's cross shows (a few pixels each; the legend adds one of each)
    assert _pixels(tmp_path / "with.png", "#c9a100") > 10 * sum(r["straggler"] is not None for r in rounds["rounds"])
    assert _pixels(tmp_path / "with.png", "#d62728") > 10 * len(rounds["drops"])


@pytest.fixture(scope="module")
def split_run(tmp_path_factory):
    """GAS (split learning) for 1 s of virtual time, report written."""
    run = tmp_path_factory.mktemp("split") / "gas"
    sc = load_scenario("gas", ["stop={max_time_s: 1}", "train.systems_only=true", "output.figures=false"])
    run_scenario(sc, run, progress=False)
    html_report(run)
    return run


def test_split_learning_downloads_name_their_gradients(split_run):
    trace = load_trace(split_run)
    down = trace[trace["kind"] == "download"]
    unversioned = down["version"].isna()
    assert unversioned.any() and (down.loc[unversioned, "what"] == "gradients").all()
    assert down.loc[~unversioned, "what"].isna().all()  # a model download names its version instead
    from fedsim.output.report import interactive_data

    data = interactive_data(split_run)
    names = set(data["whats"])
    assert {"gradients", "activations", "sfl-gradient"} <= names


@pytest.mark.skipif(BROWSER is None, reason="no Chromium installed (apt-get install chromium)")
def test_timeline_marks_rounds_shows_what_and_follows_the_client_picker(runs, split_run, tmp_path):
    chrome = Chrome(BROWSER, tmp_path / "profile")

    def open_page(run: Path) -> None:
        chrome.events.clear()
        for m in ("Runtime.enable", "Log.enable", "Page.enable"):
            chrome.page(m)
        chrome.page("Emulation.setDeviceMetricsOverride", width=1024, height=900, deviceScaleFactor=1, mobile=False)
        chrome.page("Page.navigate", url=(run / "report.html").resolve().as_uri())
        chrome.wait_for("Page.loadEventFired")

    def view() -> dict:
        return chrome.js("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(window.fedsimView))))")

    def hover(selector: str) -> str:
        return chrome.js("""(() => { const n = document.querySelector(%s);
            if (!n) return null;
            n.dispatchEvent(new MouseEvent('mouseover', {bubbles: true}));
            return document.getElementById('fs-tip').textContent; })()""" % json.dumps(selector))

    try:
        # rounds: their starts, stragglers and drops are on the timeline and answer a hover
        open_page(runs / "sync")
        data = panels_data(runs / "sync")
        v = view()
        rounds, drops = data["rounds"]["rounds"], data["rounds"]["drops"]
        assert v["marks"] >= len(rounds) + len(drops) > 0
        assert chrome.js("document.querySelectorAll('#fs-marks .fs-straggler').length") == \
            sum(r["straggler"] is not None for r in rounds)
        assert chrome.js("document.querySelectorAll('#fs-marks .fs-drop').length") == len(drops)
        tip = hover("#fs-marks rect.fs-round")
        assert tip.startswith("round ") and "straggler: client" in tip
        assert "straggler: client" in hover("#fs-marks .fs-straggler")
        assert "dropped at" in hover("#fs-marks rect.fs-drop")
        # the per-client panel's picker picks the timeline's rows, in its order
        assert v["rows"] == data["clients"]["id"][:40]
        rows = chrome.js("""(() => { const p = document.getElementById('fp-pick'); p.value = '4, 1, 3';
            p.dispatchEvent(new Event('input')); return window.fedsimPanels.drawn.timeline; })()""")
        assert rows == [4, 1, 3] and view()["rows"] == [4, 1, 3]
        labels = chrome.js("[...document.querySelectorAll('#fs-rows text')].map(t => t.textContent)")
        assert labels == ["server", "client 4", "client 1", "client 3"]
        bar_rows = chrome.js("[...new Set([...document.querySelectorAll('#fs-bars rect')].map(r => r.getAttribute('y')))]"
                             ".map(Number).sort((a, b) => a - b)")
        assert max(bar_rows) < 4 + 4 * 14  # no bar below the fourth row
        most = chrome.js("""(() => { const p = document.getElementById('fp-pick'); p.value = '';
            const s = document.getElementById('fp-sort'); s.value = 'drops'; s.dispatchEvent(new Event('change'));
            return window.fedsimView.rows; })()""")
        view()
        drops_of = dict(zip(data["clients"]["id"], data["clients"]["drops"]))
        assert drops_of[view()["rows"][0]] == max(drops_of.values()) > 0 and most is not None
        assert chrome.errors() == []

        # split learning: activations, gradients and models apart in colour and in the tooltip
        open_page(split_run)
        view()
        chrome.js("document.getElementById('fs-in').click()")  # zoom until single bars show
        for _ in range(12):
            if view()["bars"] > 0:
                break
            chrome.js("document.getElementById('fs-in').click()")
        fills = chrome.js("""(() => { const out = {};
            document.querySelectorAll('#fs-bars rect.fs-bar').forEach(r => {
              r.dispatchEvent(new MouseEvent('mouseover', {bubbles: true}));
              const t = document.getElementById('fs-tip').textContent, m = t.match(/carries (\\w+)|request: ([\\w-]+)/);
              if (m) out[m[1] || m[2]] = r.getAttribute('fill'); });
            return out; })()""")
        assert fills.get("activations") == "#e15759" and fills.get("gradients") == "#76b7b2", fills
        assert any(k.startswith("sfl-") for k in fills), fills  # a server step's request type
        legend = chrome.js("document.getElementById('fs-legend').textContent")
        assert "activations (upload)" in legend and "gradients (download)" in legend
        assert chrome.errors() == []
    finally:
        chrome.close()


# ------------------------------------------------------------------ why a client is idle

#: A hand-made trace for the idle reasons (worked out by hand below): an asynchronous loop's one slot taken
#: 0-3 and 7-10 (slots records), a round 6-8 with client 0 only, client 0 offline 4-5; client 2 is in no record.
IDLE_TRACE = [
    {"t": 0, "kind": "slots", "busy": 1, "limit": 1},
    {"t": 1, "kind": "download", "client": 0, "start": 0, "end": 1, "bytes": 10, "version": 0},
    {"t": 2, "kind": "compute", "client": 0, "start": 1, "end": 2, "what": "train"},
    {"t": 3, "kind": "upload", "client": 0, "start": 2, "end": 3, "bytes": 10},
    {"t": 3, "kind": "slots", "busy": 0, "limit": 1},
    {"t": 4, "kind": "download", "client": 1, "start": 3, "end": 4, "bytes": 10, "version": 1},
    {"t": 5, "kind": "upload", "client": 1, "start": 4, "end": 5, "bytes": 10},
    {"t": 5, "kind": "offline", "client": 0, "start": 4, "end": 5},
    {"t": 6.5, "kind": "download", "client": 0, "start": 6, "end": 6.5, "bytes": 10, "version": 1},
    {"t": 7, "kind": "upload", "client": 0, "start": 6.5, "end": 7, "bytes": 10},
    {"t": 7, "kind": "slots", "busy": 1, "limit": 1},
    {"t": 8, "kind": "round", "round": 1, "start": 6, "end": 8, "clients": [0], "dropped": []},
]
# every slot taken: [0, 3] and [7, 10]; a round running: [6, 8], so "not selected" can only be [6, 7]
IDLE_WANT = {
    # own: download 0-1, 6-6.5; compute 1-2; upload 2-3, 6.5-7; offline 4-5; its round 6-8 leaves 7-8 waiting;
    # slots full 8-10 (0-3 is its own work); nothing explains 3-4 and 5-6
    0: {"download": 1.5, "compute": 1, "upload": 1.5, "queue": 0, "served": 0, "unavailable": 1, "round_wait": 1,
        "concurrency": 2, "not_selected": 0, "idle": 2},
    # own: download 3-4, upload 4-5; slots full 0-3 and 7-10; the round without it 6-7; idle 5-6
    1: {"download": 1, "compute": 0, "upload": 1, "queue": 0, "served": 0, "unavailable": 0, "round_wait": 0,
        "concurrency": 6, "not_selected": 1, "idle": 1},
    # never in the trace (summary.json's num_clients names it): slots 0-3 and 7-10, the round 6-7, idle 3-6
    2: {"download": 0, "compute": 0, "upload": 0, "queue": 0, "served": 0, "unavailable": 0, "round_wait": 0,
        "concurrency": 6, "not_selected": 1, "idle": 3},
}


def _idle_run(run: Path, records: list[dict]) -> None:
    _write_trace(run, records, 10.0)
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "num_clients": 3}))


@pytest.mark.fast
@pytest.mark.parametrize("pending", [None, 0, 3])
def test_idle_reasons_of_a_hand_made_trace_to_1e9(tmp_path, monkeypatch, pending):
    """Each reason's seconds equal the hand-worked ones to 1e-9, every row sums to the run's 10 s, read the
    exact way (the spans added to each client's intervals; ``pending`` 0: subtracted as measures, the way
    for many clients and rounds) and streamed window by window (``pending`` 3: fold every few intervals)."""
    import fedsim.output.panels as rp

    _idle_run(tmp_path, IDLE_TRACE)
    if pending == 0:
        monkeypatch.setattr(rp, "SPANS_PER_CLIENT_MAX", 0)
    if not pending:
        table = client_breakdown(gather(tmp_path), 10.0, num_clients=3)
    else:
        monkeypatch.setattr(rp, "PENDING_MAX", pending)
        stream = _streamed(tmp_path)
        table = stream.breakdown(10.0, 3)
        assert table is not None and not stream.unstable
    assert list(table.index) == [0, 1, 2]
    for c, want in IDLE_WANT.items():
        got = table.loc[c, list(BREAKDOWN_KEYS)].to_dict()
        assert set(got) == set(want)
        for k in want:
            assert abs(got[k] - want[k]) <= 1e-9, (c, k, got[k], want[k])
        assert abs(sum(got.values()) - 10.0) <= 1e-9


@pytest.mark.fast
def test_without_the_records_the_reasons_are_plain_idle(tmp_path):
    """The reasons come from the records only: with the slots and round records taken out, what they
    explained is plain idle (so a breakdown that guessed a reason would fail here)."""
    _idle_run(tmp_path, [r for r in IDLE_TRACE if r["kind"] not in ("slots", "round")])
    table = client_breakdown(gather(tmp_path), 10.0, num_clients=3)
    assert (table[["concurrency", "not_selected", "round_wait"]].to_numpy() == 0).all()
    assert table.loc[2, "idle"] == pytest.approx(10.0) and table.loc[1, "idle"] == pytest.approx(8.0)


def test_the_breakdown_csv_and_the_page_show_the_reasons(tmp_path):
    _idle_run(tmp_path, IDLE_TRACE)
    page = panels_html(tmp_path)
    csv = pd.read_csv(tmp_path / "client_breakdown.csv")
    assert list(csv["client"]) == [0, 1, 2]
    for c, want in IDLE_WANT.items():
        row = csv[csv["client"] == c].iloc[0]
        assert {k: row[k] for k in want} == pytest.approx(want, abs=1e-7)
    for label in ("waiting for a slot (concurrency limit)", "not selected (a round ran without it)",
                  "<dt>not selected</dt>", "client_breakdown.csv"):
        assert label in page, label
    data = panels_data(tmp_path)
    assert {"concurrency", "not_selected", "idle"} <= set(data["keys"])
    assert len(set(data["colours"])) == len(data["colours"])  # one colour per reason


def _tiny_run(tmp_path: Path, algorithm: dict, **extra) -> tuple[Path, pd.DataFrame, pd.DataFrame]:
    from tests.conftest import TINY
    import copy
    raw = copy.deepcopy(TINY)
    raw["algorithm"] = algorithm
    raw["train"] = {**raw["train"], "systems_only": True}
    raw.update(extra)
    from fedsim import scenario_from_mapping
    run_scenario(scenario_from_mapping(raw), tmp_path, progress=False)
    t_end = json.loads((tmp_path / "summary.json").read_text())["virtual_time_s"]
    return tmp_path, client_breakdown(gather(tmp_path), t_end, num_clients=6), load_trace(tmp_path)


def test_fedavg_choosing_2_of_6_the_others_are_not_selected(tmp_path):
    """Synchronous FedAvg picks 2 of 6 clients a round: a client's "not selected" time is exactly the length of
    the rounds that did not pick it (rounds do not overlap; a client has no record in them), and nothing is
    "waiting for a slot"."""
    run, table, trace = _tiny_run(tmp_path, {"name": "fedavg", "clients_per_round": 2}, stop={"max_versions": 6})
    rounds = trace[trace["kind"] == "round"]
    assert len(rounds) >= 5
    for c in range(6):
        without = sum(float(e) - float(s) for s, e, who in zip(rounds["start"], rounds["end"], rounds["clients"])
                      if c not in who)
        assert table.loc[c, "not_selected"] == pytest.approx(without, abs=1e-9), c
    assert (table["concurrency"] == 0).all()
    assert (table["not_selected"] > 0).all()  # 2 of 6: every client sat some round out
    assert np.allclose(table[list(BREAKDOWN_KEYS)].sum(axis=1), json.loads((run / "summary.json").read_text())
                       ["virtual_time_s"], atol=1e-9)


@pytest.mark.parametrize("name", ["fedasync", "fedbuff"])
def test_async_with_fewer_slots_than_clients_waits_for_a_slot(tmp_path, name):
    """FedAsync / FedBuff with 2 slots for 6 always-online clients: every slot is always taken (the slots
    records say so), so all the time a client is not working is "waiting for a slot": nothing is left idle
    or "not selected" (there are no rounds)."""
    run, table, trace = _tiny_run(tmp_path, {"name": name, "concurrency": 2}, stop={"max_versions": 8})
    slots = trace[trace["kind"] == "slots"]
    assert len(slots) >= 1 and (slots["busy"] == slots["limit"]).all() and (slots["limit"] == 2).all()
    assert (table["idle"].abs() < 1e-9).all() and (table["not_selected"] == 0).all()
    assert (table["concurrency"] > 0).all()
    t_end = json.loads((run / "summary.json").read_text())["virtual_time_s"]
    busy = table[["download", "compute", "upload", "queue", "served"]].sum(axis=1)
    assert np.allclose(table["concurrency"], t_end - busy, atol=1e-9)


def test_a_client_with_an_offline_schedule_is_offline_not_waiting(tmp_path):
    """With clients going offline, the time an offline record covers is "offline" (exactly the union of its
    offline records inside the run, since the work it had under way was cut when it went), never one of the
    idle reasons."""
    run, table, trace = _tiny_run(tmp_path, {"name": "fedasync", "concurrency": 2}, stop={"max_time_s": 3.0},
                                  availability={"model": "exponential", "mean_on_s": 0.3, "mean_off_s": 0.3})
    t_end = json.loads((run / "summary.json").read_text())["virtual_time_s"]
    off = trace[trace["kind"] == "offline"]
    assert len(off) > 3
    for c in sorted(off["client"].unique()):
        mine = off[off["client"] == c]
        s = mine["start"].astype(float).clip(0, t_end).to_numpy()
        e = mine["end"].astype(float).fillna(t_end).clip(0, t_end).to_numpy()
        from fedsim.output.digest import merge_intervals
        a, b = merge_intervals(s, e, 0.0)
        assert table.loc[int(c), "unavailable"] == pytest.approx(float(np.sum(b - a)), abs=1e-9), c
    assert (table["unavailable"] > 0).sum() >= 3
