"""The accounting invariant as one helper: what a run's totals say equals what its trace adds up to.

A run's ``summary.json`` (bytes up and down, the server's busy time), its ``energy.csv`` (joules and seconds
of compute and transmission per client) and its report's per-client breakdown (seconds per phase) are all
meant to be read from the trace.  :func:`trace_sums` adds the trace up once; :func:`accounting_mismatches`
names every total that disagrees with it (an empty list: every second, byte and joule accounted).  Other
tests import both.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedsim.output.panels import client_breakdown, gather
from fedsim.sim.trace import load_trace, trace_path

PHASES = ("download", "compute", "upload")


def trace_sums(run_dir: str | Path) -> dict[str, Any]:
    """Totals as the trace records them: bytes per direction, seconds per client and phase, the server's
    service seconds, and joules (and radio/compute seconds) per client and phase."""
    tr = load_trace(trace_path(Path(run_dir)))
    out: dict[str, Any] = {"bytes_up": 0, "bytes_down": 0, "server_busy_s": 0.0,
                           "busy_s": {p: {} for p in PHASES}, "energy_j": {p: {} for p in ("compute", "upload")},
                           "airtime_s": {}, "compute_s": {}}
    if not len(tr):
        return out
    for p in PHASES:
        rows = tr[tr["kind"] == p]
        if not len(rows):
            continue
        rows = rows[rows["client"].notna()]
        dur = rows["end"].astype(float) - rows["start"].astype(float)
        out["busy_s"][p] = dur.groupby(rows["client"].astype(int)).sum().to_dict()
        if p != "compute":
            out["bytes_up" if p == "upload" else "bytes_down"] = int(rows["bytes"].sum())
        if p in ("compute", "upload") and "energy" in rows:
            e = rows["energy"].astype(float).fillna(0.0)
            out["energy_j"][p] = e.groupby(rows["client"].astype(int)).sum().to_dict()
        if p == "upload":
            out["airtime_s"] = rows["airtime"].astype(float).fillna(0.0).groupby(rows["client"].astype(int)).sum().to_dict()
        if p == "compute" and "energy" in rows:  # a pass at a pinned speed is charged no energy nor device time
            charged = rows[rows["energy"].notna()]
            d = charged["end"].astype(float) - charged["start"].astype(float)
            out["compute_s"] = d.groupby(charged["client"].astype(int)).sum().to_dict()
    srv = tr[tr["kind"] == "server"]
    if len(srv):
        out["server_busy_s"] = float((srv["end"].astype(float) - srv["start"].astype(float)).sum())
    return out


def _close(a: float, b: float, rel: float = 1e-7, abs_: float = 1e-9) -> bool:
    return math.isclose(float(a), float(b), rel_tol=rel, abs_tol=abs_)


def accounting_mismatches(run_dir: str | Path, *, breakdown: bool = True) -> list[str]:
    """Every total of the run that is not its sum over the trace, one line each (empty when all agree).

    Checked: summary ``bytes_up``/``bytes_down``; the server's busy time (utilisation x span x workers);
    per client, ``energy.csv``'s compute and transmit joules and seconds; and (``breakdown``) the report's
    per-client seconds of download, compute and upload."""
    run = Path(run_dir)
    summary = json.loads((run / "summary.json").read_text())
    sums = trace_sums(run)
    bad: list[str] = []
    for key in ("bytes_up", "bytes_down"):
        if int(summary[key]) != sums[key]:
            bad.append(f"{key}: summary {summary[key]}, trace {sums[key]}")
    srv = summary.get("server") or {}
    if srv:
        busy = srv["utilisation"] * srv["span"] * srv["workers"]
        if not _close(busy, sums["server_busy_s"], 1e-6, 1e-9):
            bad.append(f"server busy: summary {busy!r} s, trace {sums['server_busy_s']!r} s")
    energy_csv = run / "energy.csv"
    if energy_csv.exists():
        en = pd.read_csv(energy_csv).set_index("device")
        for label, col, table in (("compute J", "compute_j", sums["energy_j"]["compute"]),
                                  ("transmit J", "tx_j", sums["energy_j"]["upload"]),
                                  ("transmit s", "tx_s", sums["airtime_s"]),
                                  ("compute s", "busy_s", sums["compute_s"])):
            for dev in en.index:
                want, got = float(en.at[dev, col]), float(table.get(int(dev), 0.0))
                if not _close(want, got):
                    bad.append(f"client {dev} {label}: energy.csv {want!r}, trace {got!r}")
    if breakdown:
        t_end = float(summary["virtual_time_s"])
        g = gather(run)
        table = client_breakdown(g, t_end) if g is not None else pd.DataFrame()
        for p in PHASES:
            for client, secs in sums["busy_s"][p].items():
                shown = float(table.at[client, p]) if client in table.index else 0.0
                if not _close(shown, secs, 1e-6, 1e-9):
                    bad.append(f"client {client} {p} s: report {shown!r}, trace {secs!r}")
    return bad


def cut_records(run_dir: str | Path) -> pd.DataFrame:
    """The trace's records of work cut before it ended (those with an ``ended`` field)."""
    tr = load_trace(trace_path(Path(run_dir)))
    if "ended" not in tr:
        return tr.iloc[0:0]
    return tr[tr["ended"].notna()]


__all__ = ["trace_sums", "accounting_mismatches", "cut_records", "np"]
