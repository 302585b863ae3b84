"""``fedsim figures RUN``: a finished run's figures for a paper, drawn by matplotlib at a column's width.

PNG at 300 dpi and exactly 3.5 in (or 7.16 in) wide; PDF a vector drawing (paths, no embedded image: a
rasterised PDF is caught by the same check); SVG well-formed and vector; a missing or unfinished run
folder is one error line and exit 2."""
from __future__ import annotations

import io
import json
import re
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path

import pytest
from conftest import TINY
from PIL import Image

from fedsim.cli import main
from fedsim import load_scenario
from fedsim.runner import run_scenario

NS = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("paper") / "tiny"
    sc = load_scenario(TINY)
    run_scenario(sc, out, progress=False)
    return out


def pdf_streams(data: bytes) -> list[bytes]:
    """Every stream of a PDF, inflated where compressed."""
    out = []
    for m in re.finditer(rb"stream\r?\n(.*?)\r?\nendstream", data, re.S):
        raw = m.group(1)
        try:
            out.append(zlib.decompress(raw))
        except zlib.error:
            out.append(raw)
    return out


def is_vector_pdf(data: bytes) -> bool:
    """A PDF that draws paths (``re`` rectangles or ``l`` lines filled or stroked) and embeds no image."""
    if not data.startswith(b"%PDF") or re.search(rb"/Subtype\s*/Image", data):
        return False
    ops = b"\n".join(pdf_streams(data))
    return bool(re.search(rb"\sre\s", ops)) and bool(re.search(rb"\s[lm]\s", ops))


def test_figures_are_png_pdf_and_svg_at_a_columns_width(run, tmp_path, capsys):
    assert main(["figures", str(run)]) == 0
    folder = run / "figures"
    names = {p.stem for p in folder.iterdir()}
    assert {"accuracy_vs_time", "timeline", "link_rates", "server_queue", "energy"} <= names
    for name in names:
        png = Image.open(folder / f"{name}.png")
        assert png.info["dpi"] == pytest.approx((300, 300), abs=0.01)
        assert png.size[0] == round(3.5 * 300)  # a single column, exactly
        assert is_vector_pdf((folder / f"{name}.pdf").read_bytes()), name
        root = ET.parse(folder / f"{name}.svg").getroot()
        assert root.tag == f"{NS}svg" and not list(root.iter(f"{NS}image"))
        assert list(root.iter(f"{NS}path"))
    assert "figures:" in capsys.readouterr().out


def test_page_width_and_one_format(run, tmp_path):
    assert main(["figures", str(run), "--width", "page", "--format", "png", "--out", str(tmp_path / "f")]) == 0
    pngs = list((tmp_path / "f").iterdir())
    assert pngs and all(p.suffix == ".png" for p in pngs)
    assert all(Image.open(p).size[0] == round(7.16 * 300) for p in pngs)


def test_the_vector_check_catches_an_embedded_image(tmp_path):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(2, 2))
    ax = fig.subplots()
    ax.imshow([[0, 1], [1, 0]])
    buf = io.BytesIO()
    fig.savefig(buf, format="pdf")
    assert not is_vector_pdf(buf.getvalue())
    fig = Figure(figsize=(2, 2))
    fig.subplots().plot([0, 1], [1, 0])
    buf = io.BytesIO()
    fig.savefig(buf, format="pdf")
    assert is_vector_pdf(buf.getvalue())


def test_a_missing_or_unfinished_run_is_one_line_and_exit_2(run, tmp_path, capsys):
    assert main(["figures", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fedsim: error: RUN:") and "\n" not in err
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "metrics.csv").write_text((run / "metrics.csv").read_text())
    assert main(["figures", str(unfinished)]) == 2  # no summary.json: still running
    err = capsys.readouterr().err.strip()
    assert "no summary.json" in err and "\n" not in err
    (unfinished / "summary.json").write_text(json.dumps({"status": "building_outputs"}))
    assert main(["figures", str(unfinished)]) == 2
    err = capsys.readouterr().err.strip()
    assert "still being built" in err and "\n" not in err


# ---------------------------------------------------------------------------- a default run never imports matplotlib

IMPORTS = """
import sys
from fedsim import load_scenario
from fedsim.runner import run_scenario
sys.path.insert(0, sys.argv[2])
from conftest import TINY
run_scenario(load_scenario({**TINY, "output": {}}), sys.argv[1], progress=False)
print("matplotlib" in sys.modules)
if len(sys.argv) > 3:  # the paper figures do import it: the check can see an import
    from fedsim.output.paper import paper_figures
    paper_figures(sys.argv[1], formats=["svg"])
    print("matplotlib" in sys.modules)
"""


def test_a_default_run_writes_svg_and_never_imports_matplotlib(tmp_path):
    import subprocess
    import sys

    env = {**__import__("os").environ, "FEDSIM_OUTPUT_PROCESS": "0"}
    out = subprocess.run([sys.executable, "-c", IMPORTS, str(tmp_path / "run"), str(Path(__file__).parent), "paper"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "True"]
    written = {p.name for p in (tmp_path / "run").iterdir()}
    assert {"accuracy_vs_time.svg", "timeline.svg", "energy.svg", "report.html"} <= written
    assert not [n for n in written if n.endswith(".png")]
    for f in (tmp_path / "run").glob("*.svg"):
        ET.parse(f)
