"""report.html in a real headless browser (Chromium over the DevTools protocol on a pipe, no extra Python
package): the page loads without a console error, its interactive timeline draws one bar per interval of
the trace, zooms, and a hovered bar shows its client, phase, bytes, link rate and staleness.  Skipped where
no Chromium is installed.  ``FEDSIM_REPORT_SCREENSHOT=path.png`` keeps the screenshot (the README's)."""
from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import fedsim.output
import yaml
from conftest import TINY
from fedsim.cli import main
from fedsim.output.figures import register_run_figure, unregister_run_figure
from fedsim.output.panels import with_formats
from fedsim.output.report import fmt_bytes, html_report
from fedsim.runner import run_scenario
from fedsim import load_scenario
from fedsim.sim.trace import load_trace

BROWSER = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)
pytestmark = pytest.mark.skipif(BROWSER is None, reason="no Chromium installed (apt-get install chromium)")


class Chrome:
    """A headless Chromium driven over ``--remote-debugging-pipe`` (fd 3: commands in, fd 4: replies out)."""

    def __init__(self, exe: str, profile: Path) -> None:
        to_chrome_r, self._w = os.pipe()
        self._r, from_chrome_w = os.pipe()

        def fds() -> None:  # the child's fds 3 and 4 are the pipe ends Chromium expects
            os.dup2(to_chrome_r, 3)
            os.dup2(from_chrome_w, 4)

        self.proc = subprocess.Popen(
            [exe, "--headless", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-extensions", "--disable-dev-shm-usage", f"--user-data-dir={profile}", "about:blank"],
            preexec_fn=fds, close_fds=False,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf, self._id, self.events = b"", 0, []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def _recv(self, timeout: float) -> dict[str, Any]:
        end = time.time() + timeout
        while b"\0" not in self._buf:
            left = end - time.time()
            if left <= 0 or not select.select([self._r], [], [], left)[0]:
                raise TimeoutError("no reply from the browser")
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                raise RuntimeError("the browser closed its pipe")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, timeout: float = 30.0, session: bool = False, **params: Any) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._recv(timeout)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def page(self, method: str, **params: Any) -> dict[str, Any]:
        return self.call(method, session=True, **params)

    def wait_for(self, method: str, timeout: float = 30.0) -> dict[str, Any]:
        end = time.time() + timeout
        while True:
            for e in self.events:
                if e.get("method") == method:
                    return e
            self.events.append(self._recv(max(0.01, end - time.time())))

    def js(self, expression: str) -> Any:
        r = self.page("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise AssertionError(r["exceptionDetails"])
        return r["result"].get("value")

    def errors(self) -> list[str]:
        out = []
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.exceptionThrown":
                out.append(json.dumps(p["exceptionDetails"])[:500])
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(json.dumps(p.get("args"))[:500])
            elif m == "Log.entryAdded" and p["entry"].get("level") == "error":
                out.append(p["entry"].get("text", ""))
        return out

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.close(self._w)
        os.close(self._r)


@pytest.fixture(scope="module")
def chrome(tmp_path_factory):
    """One Chromium for the module's tests (a launch costs about a second)."""
    chrome = Chrome(BROWSER, tmp_path_factory.mktemp("profile"))
    yield chrome
    chrome.close()


@pytest.fixture
def browser(chrome):
    """The module's Chromium, its record of console messages and errors cleared for this test."""
    chrome.events.clear()
    yield chrome


def test_interactive_report_in_a_headless_browser(tmp_path, browser):
    sc = load_scenario("fedasync", ["data.num_clients=6", "model.name=logreg", "train.local_steps=3",
                                    "algorithm.concurrency=4", "server.overhead_s=0.02", "stop={max_versions: 25}",
                                    "eval.every_versions=5"])
    out = tmp_path / "run"
    run_scenario(sc, out, progress=False)
    html_report(out)  # written by the run already; again to be sure the page is this code's
    trace = load_trace(out)
    phases = trace["kind"].isin(["download", "compute", "upload", "offline"]).sum()
    server = trace[trace["kind"] == "server"]
    queued = int((server["wait"] > 0).sum())
    expected = int(phases + len(server) + queued)
    assert queued > 0 and expected > 100

    browser.page("Runtime.enable")
    browser.page("Log.enable")
    browser.page("Page.enable")
    browser.page("Emulation.setDeviceMetricsOverride", width=1000, height=1000, deviceScaleFactor=1, mobile=False)
    browser.page("Page.navigate", url=(out / "report.html").resolve().as_uri())
    browser.wait_for("Page.loadEventFired")
    assert browser.js("document.querySelectorAll('#fs-bars rect.fs-bar').length") == expected
    view = browser.js("window.fedsimView")
    assert view["start"] == 0 and view["end"] == pytest.approx(float(trace["t"].max()))
    metrics = pd.read_csv(out / "metrics.csv")
    assert browser.js("document.getElementById('fs-queue').querySelector('path').getAttribute('d').length") > 10
    assert browser.js("document.getElementById('fs-curve').querySelectorAll('circle').length") == len(metrics)

    # hover the first upload: the tooltip says client, phase, its bytes and rate, and its update's staleness
    first = trace[trace["kind"] == "upload"].iloc[0]
    tip = browser.js("""(() => { const kinds = JSON.parse(document.getElementById('fedsim-data').textContent).kinds;
        const r = [...document.querySelectorAll('#fs-bars rect.fs-bar')].find(r => r.getAttribute('fill') === '%s');
        r.dispatchEvent(new MouseEvent('mouseover', {bubbles: true}));
        return document.getElementById('fs-tip').textContent; })()""" % "#59a14f")
    assert f"client {int(first['client'])}: upload" in tip and fmt_bytes(first["bytes"]) in tip
    assert "Mbit/s" in tip and "staleness of the update" in tip

    # zoom with the wheel at the middle of the timeline, then drag: the view narrows, then moves
    box = browser.js("(() => { const b = document.getElementById('fs-timeline').getBoundingClientRect();"
                     " return [b.left, b.top, b.width, b.height]; })()")
    x, y = box[0] + box[2] * 0.55, box[1] + box[3] * 0.5
    browser.page("Input.dispatchMouseEvent", type="mouseWheel", x=x, y=y, deltaX=0, deltaY=-600)
    time.sleep(0.3)
    zoomed = browser.js("new Promise(r => requestAnimationFrame(() => r(window.fedsimView)))")
    assert zoomed["end"] - zoomed["start"] < 0.5 * (view["end"] - view["start"])
    browser.page("Input.dispatchMouseEvent", type="mousePressed", x=x, y=y, button="left", clickCount=1)
    browser.page("Input.dispatchMouseEvent", type="mouseMoved", x=x - 200, y=y, button="left")
    browser.page("Input.dispatchMouseEvent", type="mouseReleased", x=x - 200, y=y, button="left", clickCount=1)
    panned = browser.js("new Promise(r => requestAnimationFrame(() => r(window.fedsimView)))")
    assert panned["start"] > zoomed["start"]
    assert panned["end"] - panned["start"] == pytest.approx(zoomed["end"] - zoomed["start"], rel=1e-6)
    browser.js("document.getElementById('fs-reset').click()")

    # a real pointer over an upload bar (input events, not a synthetic DOM event) shows the tooltip
    browser.js("document.getElementById('fs-title').scrollIntoView()")
    centre = browser.js("""new Promise(r => requestAnimationFrame(() => {
        const bars = [...document.querySelectorAll('#fs-bars rect.fs-bar')].filter(b => b.getAttribute('fill') === '#59a14f');
        const b = bars[Math.floor(bars.length / 3)].getBoundingClientRect();
        r([b.left + b.width / 2, b.top + b.height / 2]); }))""")
    browser.page("Input.dispatchMouseEvent", type="mouseMoved", x=centre[0], y=centre[1])
    time.sleep(0.2)
    assert browser.js("getComputedStyle(document.getElementById('fs-tip')).display") == "block"
    assert ": upload" in browser.js("document.getElementById('fs-tip').textContent")

    shot = browser.page("Page.captureScreenshot", format="png")
    import base64

    png = base64.b64decode(shot["data"])
    (tmp_path / "report.png").write_bytes(png)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000
    keep = os.environ.get("FEDSIM_REPORT_SCREENSHOT")
    if keep:
        Path(keep).write_bytes(png)
    assert browser.errors() == []


STATIC = Path(fedsim.output.__file__).parent / "static"


def _syntax_error(browser: Chrome, source: str) -> str | None:
    """The browser's parse of a script: None, or its SyntaxError (nothing is run: the source is compiled as
    a function body)."""
    return browser.js("(() => { try { new Function(%s); return null; } catch (e) { return e.name + ': ' + e.message; } })()"
                      % json.dumps(source))


def test_every_script_of_the_reports_parses_in_chromium(browser):
    """Lint: each .js file of fedsim/output/static parses, as it is and as the page inlines it (the number
    formats in place of its ``//@format`` line); a copy with one parenthesis dropped does not."""
    scripts = sorted(STATIC.glob("*.js"))
    assert {p.name for p in scripts} >= {"report.js", "panels.js", "format.js"}
    for p in scripts:
        text = p.read_text(encoding="utf-8")
        assert _syntax_error(browser, text) is None, p.name
        assert _syntax_error(browser, with_formats(text)) is None, p.name
    good = (STATIC / "report.js").read_text(encoding="utf-8")
    broken = good.replace("  render();\n})();", "  render();\n}();", 1)  # the wrapper's ")" dropped
    assert broken != good
    assert (_syntax_error(browser, broken) or "").startswith("SyntaxError")


def test_a_failed_figure_is_named_on_the_page_in_chromium(tmp_path, capsys, browser):
    """A figure that raises (registered in one place): the run exits 0 and writes report.html; rendered in
    Chromium, the page names the missing figure under "Figures not drawn", shows the other figures and logs
    no console error; summary.json's ``figures_missing`` says which one."""
    def broken(inputs: Any, run_dir: Path) -> Path:
        raise RuntimeError("no ink left")

    register_run_figure("ink_level", ["ink_level.png"], ["metrics"], broken)
    try:
        out = tmp_path / "run"
        (tmp_path / "tiny.yaml").write_text(yaml.safe_dump({**TINY, "output": {"figures": True}}), encoding="utf-8")
        code = main(["run", str(tmp_path / "tiny.yaml"), "--out", str(out), "--quiet"])
    finally:
        unregister_run_figure("ink_level")
    assert code == 0, capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["figures_missing"] == {"ink_level": "RuntimeError: no ink left"}
    browser.page("Runtime.enable")
    browser.page("Log.enable")
    browser.page("Page.enable")
    browser.page("Page.navigate", url=(out / "report.html").resolve().as_uri())
    browser.wait_for("Page.loadEventFired")
    missing = browser.js("[...document.querySelectorAll('#figures-missing + p + ul li')].map(li => li.textContent)")
    assert missing == ["ink_level: RuntimeError: no ink left"]
    # every run figure is an SVG image that Chromium decodes and lays out (naturalWidth > 0)
    drawn = browser.js("[...document.images].filter(i => i.complete && i.naturalWidth > 0).map(i => i.alt).sort()")
    assert drawn == sorted(p.name for p in out.glob("*.svg")) and len(drawn) == 5
    assert browser.js("document.querySelectorAll('#fs-bars rect.fs-bar').length") > 0  # the timeline drew
    assert browser.errors() == []
