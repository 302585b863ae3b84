"""Seeds and sweep tables people can read, and a sweep plot whose points say what statistic they are.

The seeds and sweep pages printed their CSVs raw: ``1.096e+07`` bytes, ``NaN`` target columns without a
target, and, at 17 columns, a table wider than the page that was cut at ``bytes_up``.  The sweep plot drew
each point's final accuracy alone (FedBuff 0.844 final against 0.916 best)."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from fedsim.output.folder_report import folder_report
from fedsim.output.report import fmt_number, table_html


def seeds_summary(target: bool) -> pd.DataFrame:
    """A seeds_summary.csv as ``fedsim run --seeds`` writes it (two algorithms, three seeds)."""
    t = pd.DataFrame({"algorithm": ["fedavg", "fedbuff"],
                      "final_accuracy_mean": [0.81234, 0.844], "final_accuracy_std": [0.0123, 0.031],
                      "best_accuracy_mean": [0.9, 0.916], "best_accuracy_std": [0.01, 0.02],
                      "virtual_time_s_mean": [12.345, 3600.0], "virtual_time_s_std": [0.1, 2.0],
                      "bytes_up_mean": [10964800.0, 2.3e9], "bytes_up_std": [1e5, 2e6],
                      "bytes_down_mean": [21929600.0, 4.6e9], "bytes_down_std": [2e5, 4e6],
                      "energy_j_mean": [12345.678, 1.5], "energy_j_std": [0.5, 0.25]})
    if target:
        t["reached_target"] = [0, 2]
        t["seeds"] = [3, 3]
        t["time_to_target_s_mean"] = [np.nan, 4.5]
        t["time_to_target_s_std"] = [np.nan, 0.5]
    return t


def cells(page: str) -> list[str]:
    return [re.sub(r"</?small>", "", c) for c in re.findall(r"<td>(.*?)</td>", page)]


def test_numbers_by_hand():
    assert fmt_number(10964800.0) == "10,964,800" and fmt_number(0.81234567) == "0.8123"
    assert fmt_number(1234.5678) == "1,234.6" and fmt_number(float("nan")) == "–"


def test_seeds_table_has_units_no_scientific_notation_and_means_with_their_std():
    page = table_html(seeds_summary(target=True))
    got = cells(page)
    assert got[:2] == ["fedavg", "0.8123 ± 0.0123"]
    assert "10.96 MB ± 100.00 kB" in got and "2.30 GB ± 2.00 MB" in got and "12,345.7 J ± 0.5 J" in got
    assert "not reached" in got and "4.5 s ± 500 ms" in got  # fedavg's seeds never reached the target
    for c in got:
        assert not re.search(r"\de[+-]\d", c) and c.lower() not in ("nan", "inf"), c


def test_a_table_without_a_target_has_no_target_columns():
    t = seeds_summary(target=False)
    t["target"] = np.nan  # a sweep without --target: its target columns are empty
    t["time_to_target_s"] = np.nan
    page = table_html(t)
    assert "target" not in page and "NaN" not in page and "nan" not in page


def test_the_broken_rendering_is_caught():
    # the old rendering (pandas' to_html at 4 significant digits) fails the same checks
    old = seeds_summary(target=True).to_html(index=False, float_format=lambda v: f"{v:.4g}")
    assert re.search(r"\de[+-]\d", old) and "NaN" in old


def test_seeds_page_table_fits_the_page_in_chromium(tmp_path):
    from test_report_browser import BROWSER, Chrome

    if BROWSER is None:
        pytest.skip("no Chromium installed (apt-get install chromium)")
    seeds_summary(target=True).to_csv(tmp_path / "seeds_summary.csv", index=False)
    page = folder_report(tmp_path, "seeds")
    chrome = Chrome(BROWSER, tmp_path / "profile")
    try:
        chrome.page("Page.enable")
        chrome.page("Emulation.setDeviceMetricsOverride", width=1024, height=1000, deviceScaleFactor=1, mobile=False)
        chrome.page("Page.navigate", url=page.resolve().as_uri())
        chrome.wait_for("Page.loadEventFired")
        width = chrome.js("(() => { const d = document.querySelector('.fs-table'), t = d.querySelector('table');"
                          " return [t.getBoundingClientRect().width, d.clientWidth]; })()")
        assert 0 < width[0] <= width[1], width  # every column in view: none cut at bytes_up
    finally:
        chrome.close()


def test_sweep_plot_draws_mean_final_and_best_apart(tmp_path, monkeypatch):
    from fedsim import sweep

    got = {}
    monkeypatch.setattr(sweep, "save_figure", lambda fig, path: got.setdefault("fig", fig))
    table = pd.DataFrame({"algorithm.buffer": [2, 4], "label": ["fedbuff", "fedbuff"], "runs": [3, 3],
                          "target": [None, None], "time_to_target_s": [None, None],
                          "final_accuracy": [0.844, 0.86], "final_accuracy_std": [0.02, 0.01],
                          "best_accuracy": [0.916, 0.92], "best_accuracy_std": [0.01, 0.01]})
    sweep.sweep_figure(table, tmp_path / "s.png", "algorithm.buffer")
    ax = got["fig"].axes[0]
    lines = {ln.get_label(): list(ln.get_ydata()) for ln in ax.get_lines() if not ln.get_label().startswith("_")}
    assert lines["fedbuff (best, mean of 3 seeds)"] == pytest.approx([0.916, 0.92])
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "fedbuff (final, mean ± std, 3 seeds)" in labels
    assert "final (solid), best (dashed)" in ax.get_ylabel()


def test_sweep_table_says_not_reached_for_an_infinite_time_to_target():
    # sweep.csv's layout: a column and its ``_std``; a point none of whose seeds reached the target has inf
    t = pd.DataFrame({"channel.uplink.mbps": [0.5, 8.0], "label": ["fedavg", "fedavg"], "runs": [2, 2],
                      "target": [0.9, 0.9], "time_to_target_s": [np.inf, 12.5], "time_to_target_s_std": [np.nan, 1.5],
                      "reached_target": [0, 2], "bytes_total": [1.2e7, 1.2e7], "bytes_total_std": [0.0, 0.0]})
    got = cells(table_html(t))
    assert got[:6] == ["0.5", "fedavg", "2", "0.9", "not reached", "0"]
    assert "12.5 s ± 1.5 s" in got and "12.00 MB ± 0 B" in got
