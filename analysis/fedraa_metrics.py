"""Fed-RAA quantities read from a run's trace: q(j), per-fragment staleness, realised round trips, δ.

The algorithm writes one ``fedraa`` record at the start (fragments, K, K_off, estimated cost matrix,
offline assignment), one ``assign`` record per scheduling decision (client, fragment, estimated cost,
whether the feasible set was empty) and one ``fragment`` record per applied fragment update (global and
per-fragment staleness, realised round trip from dispatch to arrival, local steps).  Everything here is a
recount of those records, so it can be checked against the algorithm's own counters.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from analysis.theory.base import Check
from analysis.theory.fedraa import corollary1_shape


def _kind(trace: pd.DataFrame, kind: str) -> pd.DataFrame:
    if trace.empty or "kind" not in trace:
        return trace.iloc[0:0]
    return trace[trace["kind"] == kind]


def setup(trace: pd.DataFrame) -> dict[str, Any] | None:
    """The run's ``fedraa`` record (the first one) as a dict, or None for other algorithms."""
    rows = _kind(trace, "fedraa")
    if rows.empty:
        return None
    rec = rows.iloc[0].to_dict()
    return {k: v for k, v in rec.items() if not (isinstance(v, float) and math.isnan(v))}


def fragment_counts(trace: pd.DataFrame, M: int | None = None) -> np.ndarray:
    """q(j) recounted: applied updates per fragment (a synchronous round counts once per fragment)."""
    fr = _kind(trace, "fragment")
    if M is None:
        s = setup(trace)
        M = int(s["fragments"]) if s else (int(fr["fragment"].max()) + 1 if len(fr) else 0)
    q = np.zeros(M, dtype=np.int64)
    if fr.empty:
        return q
    per = fr.groupby("fragment")["q"].max()
    for j, v in per.items():
        q[int(j)] = int(v)
    return q


def fragment_summary(trace: pd.DataFrame) -> pd.DataFrame:
    """Per fragment: updates, mean/max staleness (global versions and fragment updates), realised round
    trip mean/max (s) and the share of assignments whose realised round trip exceeded K."""
    fr = _kind(trace, "fragment")
    s = setup(trace) or {}
    K = float(s.get("K", math.nan))
    rows = []
    for j in range(int(s.get("fragments", fr["fragment"].max() + 1 if len(fr) else 0))):
        f = fr[fr["fragment"] == j]
        c = f["realised_c"].astype(float) if len(f) else pd.Series(dtype=float)
        rows.append({
            "fragment": j, "updates": len(f),
            "staleness_mean": float(f["staleness"].mean()) if len(f) else math.nan,
            "staleness_max": float(f["staleness"].max()) if len(f) else math.nan,
            "fragment_staleness_mean": float(f["staleness_fragment"].mean()) if len(f) else math.nan,
            "fragment_staleness_max": float(f["staleness_fragment"].max()) if len(f) else math.nan,
            "realised_c_mean": float(c.mean()) if len(c) else math.nan,
            "realised_c_max": float(c.max()) if len(c) else math.nan,
            "over_K": float((c > K).mean()) if len(c) and math.isfinite(K) else math.nan,
        })
    return pd.DataFrame(rows)


def assignment_matrix(trace: pd.DataFrame) -> pd.DataFrame:
    """How often each client was given each fragment (rows clients, columns fragments)."""
    a = _kind(trace, "assign")
    if a.empty:
        return pd.DataFrame()
    return pd.crosstab(a["client"].astype(int), a["fragment"].astype(int))


def check_rows(trace: pd.DataFrame, *, probes: pd.DataFrame | None = None) -> tuple[list[Check], dict[str, Any]]:
    """The ``fedsim check`` rows of a Fed-RAA run and the measured values for the Theorem 1 module."""
    s = setup(trace)
    if s is None:
        return [], {}
    rows: list[Check] = []
    measured: dict[str, Any] = {}
    summ = fragment_summary(trace)
    q = fragment_counts(trace, int(s["fragments"]))
    fr = _kind(trace, "fragment")
    for _, r in summ.iterrows():
        rows.append(Check(f"fragment {int(r['fragment'])}: q(j), staleness mean/max", int(r["updates"]), None, None,
                          f"global {r['staleness_mean']:.3g}/{r['staleness_max']:.3g} versions; "
                          f"fragment {r['fragment_staleness_mean']:.3g}/{r['fragment_staleness_max']:.3g} updates; "
                          f"round trip {r['realised_c_mean']:.3g}/{r['realised_c_max']:.3g} s"))
    cv = float(q.std() / q.mean()) if q.mean() > 0 else math.nan
    rows.append(Check("q(j) balance: min/max", float(q.min() / q.max()) if q.max() > 0 else math.nan, None, None,
                      f"q = {q.tolist()}; CV {cv:.3g} (MP-RAA most even, Random least)"))
    if len(fr):
        k_hat = float(fr["staleness"].max())
        k_hat_f = float(fr["staleness_fragment"].max())
        rows.append(Check("K_hat: max staleness (global versions)", k_hat, None, None,
                          f"mean {fr['staleness'].mean():.3g}, p95 {fr['staleness'].quantile(0.95):.3g}"))
        rows.append(Check("K_hat: max staleness (fragment updates)", k_hat_f, None, None,
                          f"mean {fr['staleness_fragment'].mean():.3g}, p95 {fr['staleness_fragment'].quantile(0.95):.3g}"))
        c = fr["realised_c"].astype(float)
        K = float(s["K"])
        rows.append(Check("realised round trip c_{n,h(n)} max (s)", float(c.max()), K, None,
                          f"scheduler K = {K:.4g} s, K_off = {float(s['K_off']):.4g} s; {100 * float((c > K).mean()):.3g}% "
                          f"of updates over K (jitter and queueing are not in the estimate)"))
        steps = fr["steps"].astype(float)
        steps = steps[steps > 0]
        if len(steps):
            measured["I_min"], measured["I_max"] = float(steps.min()), float(steps.max())
        measured["K_hat"] = k_hat
        measured["fragment_updates"] = q.tolist()
        T = int(len(fr)) if s.get("aggregation") != "sync" else int(q.sum())
        measured["T"] = T
        # the scheduler's K in server epochs: seconds × applied updates per second of the run
        t = fr["t"].astype(float)
        span = float(t.max() - _kind(trace, "fedraa")["t"].astype(float).min()) if len(t) else 0.0
        if span > 0 and s.get("aggregation") != "sync":
            measured["K"] = K * T / span
    a = _kind(trace, "assign")
    if len(a) and s.get("scheduler") == "gre":
        est_over = int((a["cost"].astype(float) > float(s["K"]) * (1 + 1e-9)).sum())
        empty = int(a["empty"].astype(bool).sum())
        rows.append(Check("Gre-RAA: assignments with estimated c > K", est_over, 0, est_over == 0 and empty == 0,
                          f"{len(a)} assignments, feasible set empty {empty} times"))
    if probes is not None and len(probes) and "grad_norm_sq" in probes:
        g = probes["grad_norm_sq"].astype(float).to_numpy()
        running = float(np.min(g))
        rows.append(Check("min_q ||grad F(theta_q)||^2 (probed versions)", running, None, None,
                          f"{len(g)} probed versions; first {g[0]:.4g}, last {g[-1]:.4g}"))
        measured["min_grad_norm_sq"] = running
    if {"T", "K_hat", "I_min", "I_max"} <= measured.keys():
        delta = measured["I_max"] / measured["I_min"]
        shape = corollary1_shape(T=measured["T"], K=measured["K_hat"], delta=delta)
        rows.append(Check("Theorem 1 (Corollary 1 shape) at T, K_hat, delta",
                          measured.get("min_grad_norm_sq"), shape, None,
                          f"T = {measured['T']}, K_hat = {measured['K_hat']:g}, delta = {delta:.3g}; "
                          "(d^3+Kd)/T^0.1 + K^2 d^2/T^0.3 with unit constants: a shape, not a bound"))
    return rows, measured
