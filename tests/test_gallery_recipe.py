"""The gallery recipe still runs (quick mode) and every run folder gets a self-contained report.html."""
from __future__ import annotations

import base64
import re

from figures.gallery import RUNS, main


def test_gallery_recipe_runs_quick(tmp_path):
    assert main(["--quick", "--out", str(tmp_path)]) == 0
    expected = {dst for _, _, keep in RUNS for dst in keep.values()}
    expected |= {f"check_{n}" for n in ("grad_norm_vs_bound.png", "svcca_by_layer.png", "dissimilarity_over_versions.png")}
    assert expected <= {p.name for p in tmp_path.iterdir()}


def test_report_html_embeds_summary_and_every_figure(tmp_path):
    from fedsim.cli import main as cli

    out = tmp_path / "r"
    assert cli(["run", "fedasync", "data.num_clients=4", "stop={max_versions: 4}", "--out", str(out), "--quiet"]) == 0
    page = (out / "report.html").read_text(encoding="utf-8")
    svgs = sorted(p.name for p in out.glob("*.svg"))  # the run's figures, written as SVG
    assert svgs and all(f"alt='{n}'" in page for n in svgs) and not list(out.glob("*.png"))
    embedded = re.findall(r"data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)", page)
    assert len(embedded) == len(svgs) and all(base64.b64decode(e).startswith(b"<svg ") for e in embedded)
    assert "<th>status</th><td>ok</td>" in page and "src='runs" not in page  # nothing points outside the page
