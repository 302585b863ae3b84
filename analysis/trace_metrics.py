"""System quantities from an event trace (pandas in, pandas out).

The input is the DataFrame of :func:`fedsim.sim.trace.load_trace`: one row per event, columns ``t``,
``kind`` and the fields of each kind (docs/trace-format.md; the records carry their field names, so an
algorithm's own kinds, such as ``cos2p_round``, are read without importing the algorithm).  The quantities:

* staleness of applied updates, in model versions and in seconds (``apply`` events);
* participation per round and the coverage count N_q^i of every parameter segment i in round q, whose
  minimum is Co-S²P's N* (``apply`` events, optional ``coverage`` field), and per single entry
  (``aggregate`` events' ``coverage_min`` / ``coverage_mean``);
* Co-S²P's resource utilisation RU (Eq. 17) from the busy intervals of each applied update's job;
* update counts per client and their Jain fairness index (Fed-RAA);
* time, bytes and energy to reach an accuracy (``eval`` events, or a metrics table with t, accuracy).
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from fedsim.errors import ConfigError

INTERVAL_KINDS = ("download", "compute", "upload")


def _kind(df: pd.DataFrame, kind: str) -> pd.DataFrame:
    if df is None or len(df) == 0 or "kind" not in df.columns:
        return pd.DataFrame()
    return df[df["kind"] == kind]


def _is_missing(v: Any) -> bool:
    if v is None:
        return True
    if isinstance(v, float) and math.isnan(v):
        return True
    return False


def _require(rows: pd.DataFrame, cols: Iterable[str], what: str) -> None:
    missing = [c for c in cols if c not in rows.columns]
    if missing:
        raise ConfigError("trace", f"{what} events lack field(s) {missing}")


# ----------------------------------------------------------------------------- staleness

def staleness_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per applied update: t, client, round, base_version, version, staleness (versions between
    download and application), staleness_s (seconds since download), weight — sorted by time."""
    ap = _kind(df, "apply")
    if ap.empty:
        return pd.DataFrame(columns=["t", "client", "round", "base_version", "version", "staleness", "staleness_s", "weight"])
    _require(ap, ["client", "staleness"], "apply")
    cols = [c for c in ("t", "client", "round", "base_version", "version", "staleness", "staleness_s", "weight") if c in ap.columns]
    return ap[cols].sort_values("t", kind="stable").reset_index(drop=True)


def staleness_summary(df: pd.DataFrame) -> pd.Series:
    """Mean, max, median (p50) and p90 of staleness in versions and in seconds, plus Co-S²P's
    τ̄ = (1/Q) Σ_q τ_q² with τ_q the maximum staleness among the updates aggregated in round q.

    Percentiles use linear interpolation between order statistics (numpy's default).
    """
    st = staleness_table(df)
    out: dict[str, float] = {"n_updates": float(len(st))}
    if st.empty:
        return pd.Series(out | {k: float("nan") for k in ("mean", "max", "p50", "p90", "tau_bar")})
    s = st["staleness"].astype(float).to_numpy()
    out.update(mean=float(s.mean()), max=float(s.max()), p50=float(np.percentile(s, 50)), p90=float(np.percentile(s, 90)))
    if "staleness_s" in st.columns:
        ss = st["staleness_s"].astype(float).dropna().to_numpy()
        if ss.size:
            out.update(mean_s=float(ss.mean()), max_s=float(ss.max()), p50_s=float(np.percentile(ss, 50)),
                       p90_s=float(np.percentile(ss, 90)))
    if "round" in st.columns:
        tau_q = st.groupby("round")["staleness"].max().astype(float)
        out["tau_bar"] = float(np.mean(tau_q.to_numpy() ** 2))
        out["tau_max"] = float(tau_q.max())
    return pd.Series(out)


# ----------------------------------------------------------------------------- participation and N*

def participation_per_round(df: pd.DataFrame) -> pd.DataFrame:
    """Per round: number of applied updates, distinct clients (and their sorted list), dropped clients,
    and the round's start/end when ``round`` events exist.  Dropped counts come from the ``round``
    event's ``dropped`` field (a count or a list) when present, otherwise from ``drop`` events."""
    ap = _kind(df, "apply")
    rd = _kind(df, "round")
    rows: dict[Any, dict[str, Any]] = {}
    if not ap.empty:
        _require(ap, ["client", "round"], "apply")
        for r, grp in ap.groupby("round", sort=True):
            clients = sorted(set(grp["client"].tolist()), key=str)
            rows[r] = {"n_updates": len(grp), "n_clients": len(clients), "clients": clients}
    if not rd.empty:
        for _, ev in rd.iterrows():
            r = ev["round"]
            row = rows.setdefault(r, {"n_updates": 0, "n_clients": 0, "clients": []})
            for f in ("start", "end"):
                if f in ev and not _is_missing(ev[f]):
                    row[f] = float(ev[f])
            d = ev["dropped"] if "dropped" in ev.index else None
            if isinstance(d, (list, tuple)):
                row["dropped"] = len(d)
            elif not _is_missing(d):
                row["dropped"] = int(d)
    dr = _kind(df, "drop")
    if not dr.empty and "round" in dr.columns:
        counts = dr.groupby("round").size()
        for r, c in counts.items():
            row = rows.setdefault(r, {"n_updates": 0, "n_clients": 0, "clients": []})
            row.setdefault("dropped", int(c))
    out = pd.DataFrame.from_dict(rows, orient="index").sort_index()
    out.index.name = "round"
    if "dropped" in out.columns:
        out["dropped"] = out["dropped"].fillna(0).astype(int)
    return out


def _covered(cov: Any, segments: Sequence[str], min_fraction: float) -> set[str]:
    if _is_missing(cov):
        return set(segments)
    if isinstance(cov, Mapping):
        return {str(k) for k, v in cov.items() if float(v) > min_fraction}
    if isinstance(cov, (list, tuple, set)):
        return {str(k) for k in cov}
    raise ConfigError("trace.apply.coverage", f"expected a dict segment -> fraction or a list of segments, got {cov!r}")


def coverage_matrix(df: pd.DataFrame, segments: Sequence[str] | None = None, min_fraction: float = 0.0) -> pd.DataFrame:
    """N_q^i: number of distinct clients whose update aggregated in round q covered segment i.

    A client covers segment i when its ``apply`` event's ``coverage`` lists i or gives it a fraction
    above ``min_fraction``; an update without ``coverage`` covers every segment (a full-model update).
    Segments default to all names seen in coverage fields (``["model"]`` when there are none).  Rounds
    are those with applies or a ``round`` event; a round with no update has N_q^i = 0.
    """
    ap = _kind(df, "apply")
    rounds: set[Any] = set()
    if not ap.empty:
        _require(ap, ["client", "round"], "apply")
        rounds |= set(ap["round"].tolist())
    rd = _kind(df, "round")
    if not rd.empty:
        rounds |= set(rd["round"].tolist())
    has_cov = not ap.empty and "coverage" in ap.columns
    if segments is None:
        names: dict[str, None] = {}  # first-seen order; a dict, so each lookup is O(1)
        if has_cov:
            for cov in ap["coverage"]:
                if isinstance(cov, Mapping):
                    keys: Iterable[Any] = cov.keys()
                elif isinstance(cov, (list, tuple, set)):
                    keys = cov
                else:
                    keys = ()
                for k in keys:
                    names.setdefault(str(k), None)
        segments = list(names) or ["model"]
    segments = [str(s) for s in segments]
    wanted = set(segments)
    counts = {r: {s: set() for s in segments} for r in rounds}
    if not ap.empty:
        covs = ap["coverage"].tolist() if has_cov else [None] * len(ap)
        for rnd, client, cov in zip(ap["round"].tolist(), ap["client"].tolist(), covs):
            for s in _covered(cov, segments, min_fraction) & wanted:
                counts[rnd][s].add(client)
    out = pd.DataFrame({r: {s: len(c) for s, c in segs.items()} for r, segs in counts.items()}).T
    if out.empty:
        out = pd.DataFrame(columns=segments)
    out = out.reindex(columns=segments).sort_index().astype(int)
    out.index.name = "round"
    return out


def n_star_per_round(df: pd.DataFrame, segments: Sequence[str] | None = None, min_fraction: float = 0.0) -> pd.DataFrame:
    """Per round: ``n_star`` = min over segments of N_q^i (strict), ``n_star_trained`` = min over the
    segments trained in that round (N_q^i > 0; 0 if none was)."""
    cov = coverage_matrix(df, segments, min_fraction)
    strict = cov.min(axis=1)
    trained = cov.where(cov > 0).min(axis=1).fillna(0).astype(int)
    return pd.DataFrame({"n_star": strict.astype(int), "n_star_trained": trained})


def n_star(df: pd.DataFrame, segments: Sequence[str] | None = None, min_fraction: float = 0.0) -> pd.Series:
    """Co-S²P's N* = min_{q,i} N_q^i (strict; 0 if any segment goes untrained in some round), the
    variant restricted to segments trained in each round (``n_star_trained``, the one that keeps the
    bound meaningful), and the mean coverage ``n_star_mean`` = average of N_q^i."""
    cov = coverage_matrix(df, segments, min_fraction)
    if cov.empty:
        return pd.Series({"n_star": 0, "n_star_trained": 0, "n_star_mean": float("nan"), "n_rounds": 0,
                          "n_segments": len(cov.columns)}, dtype=object)
    per = n_star_per_round(df, segments, min_fraction)
    pos = per["n_star_trained"][per["n_star_trained"] > 0]
    return pd.Series({"n_star": int(cov.values.min()), "n_star_trained": int(pos.min()) if len(pos) else 0,
                      "n_star_mean": float(cov.values.mean()), "n_rounds": int(len(cov)),
                      "n_segments": int(len(cov.columns))}, dtype=object)


def entry_coverage(df: pd.DataFrame) -> pd.DataFrame:
    """Per-parameter coverage N_q^i at the level of single entries, per round q: ``coverage_min`` (the
    entry covered by the fewest clients of the round) and ``coverage_mean`` (clients per entry, averaged
    over the model's floating entries), as ``VersionKeeper.apply`` records them on each ``aggregate`` event of a
    round with partial updates.  Rounds whose updates were all full models have N_q^i = updates applied
    for every entry.  Empty when no aggregate carries coverage (no sub-model in the run)."""
    ag = _kind(df, "aggregate")
    if ag.empty or "coverage_min" not in ag.columns:
        return pd.DataFrame(columns=["round", "coverage_min", "coverage_mean"])
    n = ag["n_updates"].astype(float) if "n_updates" in ag.columns else pd.Series(np.nan, index=ag.index)
    lo = pd.to_numeric(ag["coverage_min"], errors="coerce").fillna(n)
    mean = pd.to_numeric(ag["coverage_mean"], errors="coerce").fillna(n)
    rnd = ag["round"] if "round" in ag.columns else ag["version"]
    return pd.DataFrame({"round": rnd.to_numpy(), "coverage_min": lo.to_numpy(), "coverage_mean": mean.to_numpy()})


# ----------------------------------------------------------------------------- utilisation (Co-S²P RU)

def update_busy_times(df: pd.DataFrame) -> pd.DataFrame:
    """Busy time of the job behind each applied update: Σ (end − start) of the client's download,
    compute and upload intervals that lie within the job.

    The job of an update from client c applied at time t with base version v starts at the start of c's
    last download of version v before t; if the trace has no such download, at c's previous applied
    update (or the beginning).  Intervals are taken as recorded, [start, end] (a transfer's time on a
    shared medium is part of its communication time).
    """
    st = staleness_table(df)
    if st.empty:
        return pd.DataFrame(columns=["t", "client", "round", "busy"])
    iv = _by_client(df[df["kind"].isin(INTERVAL_KINDS)] if "kind" in df.columns else pd.DataFrame(), ("start", "end"))
    dl_frame = _kind(df, "download")
    dl = _by_client(dl_frame, ("start", "end", "version")) if "version" in dl_frame.columns else {}
    use_base = "base_version" in st.columns
    prev_apply: dict[Any, float] = {}
    rows = []
    # per update, the same selections as a pandas filter, on the client's own numpy arrays (a pandas filter
    # of the whole trace per update made this quadratic in the run's length)
    for _, ev in st.iterrows():  # as before: each row as a Series (its values' types unchanged)
        c, t = ev["client"], float(ev["t"])
        start = prev_apply.get(c, -math.inf)
        if use_base and c in dl and not _is_missing(ev["base_version"]):
            d = dl[c]
            sel = (d["version"] == ev["base_version"]) & (d["end"] <= t + 1e-12)
            if sel.any():
                start = _skipna_max(d["start"][sel])
        busy = 0.0
        if c in iv:
            i = iv[c]
            sel = (i["start"] >= start - 1e-12) & (i["end"] <= t + 1e-12)
            busy = float(np.nansum(i["end"][sel] - i["start"][sel]))  # pandas' sum: NaN skipped, same order
        rows.append({"t": t, "client": c, "round": ev.get("round", np.nan), "busy": busy})
        prev_apply[c] = t
    return pd.DataFrame(rows)


def _by_client(frame: pd.DataFrame, cols: Sequence[str]) -> dict[Any, dict[str, np.ndarray]]:
    """Columns ``cols`` of ``frame``'s rows per client, each in the frame's row order (start and end as
    floats); {} without rows or a client column."""
    if frame.empty or "client" not in frame.columns:
        return {}
    values = {k: frame[k].to_numpy(dtype=float) if k in ("start", "end") else frame[k].to_numpy() for k in cols}
    return {c: {k: v[idx] for k, v in values.items()} for c, idx in frame.groupby("client", sort=False).indices.items()}


def _skipna_max(x: np.ndarray) -> float:
    """``Series.max()``: the largest non-NaN value, NaN when there is none."""
    x = x[~np.isnan(x)]
    return float(x.max()) if x.size else float("nan")


def utilisation_per_round(df: pd.DataFrame) -> pd.Series:
    """RU_q = Σ_n Time(n) / (N_q · max_n Time(n)) over the updates aggregated in round q (Co-S²P Eq. 17);
    Time(n) = training + communication time of the update's job (:func:`update_busy_times`).  Rounds
    whose jobs have zero busy time are left out."""
    bt = update_busy_times(df)
    if bt.empty:
        return pd.Series(dtype=float, name="ru")
    out = {}
    for r, grp in bt.groupby("round", sort=True):
        mx = grp["busy"].max()
        if mx > 0:
            out[r] = float(grp["busy"].sum() / (len(grp) * mx))
    s = pd.Series(out, name="ru", dtype=float)
    s.index.name = "round"
    return s


def utilisation(df: pd.DataFrame) -> float:
    """Co-S²P's resource utilisation RU = (1/Q) Σ_q RU_q; 1.0 for a fully asynchronous run (N_q = 1)."""
    s = utilisation_per_round(df)
    return float(s.mean()) if len(s) else float("nan")


# ----------------------------------------------------------------------------- fairness

def _all_clients(df: pd.DataFrame) -> list[Any]:
    seen: list[Any] = []
    if df is None or df.empty:
        return seen
    if "client" in df.columns:
        for c in df["client"].dropna().tolist():
            if c not in seen:
                seen.append(c)
    rd = _kind(df, "round")
    if not rd.empty and "clients" in rd.columns:
        for lst in rd["clients"]:
            if isinstance(lst, (list, tuple)):
                for c in lst:
                    if c not in seen:
                        seen.append(c)
    return seen


def jain_index(x: Sequence[float]) -> float:
    """Jain's fairness index (Σx)² / (n Σx²): 1 when all equal, 1/n when one gets everything."""
    a = np.asarray(x, dtype=np.float64)
    if a.size == 0 or np.sum(a * a) == 0:
        return float("nan")
    return float(a.sum() ** 2 / (a.size * np.sum(a * a)))


def update_counts(df: pd.DataFrame, clients: Sequence[Any] | None = None) -> pd.Series:
    """Number of applied updates per client; clients seen anywhere in the trace (or listed) but never
    applied count 0."""
    ap = _kind(df, "apply")
    counts = ap.groupby("client").size() if not ap.empty else pd.Series(dtype=int)
    universe = list(clients) if clients is not None else _all_clients(df)
    s = pd.Series({c: int(counts.get(c, 0)) for c in universe}, name="updates", dtype=int)
    s.index.name = "client"
    return s


def update_fairness(df: pd.DataFrame, clients: Sequence[Any] | None = None) -> pd.Series:
    """Fed-RAA's update fairness: n_clients, total, min, max, mean, cv and Jain index of the per-client
    update counts."""
    s = update_counts(df, clients)
    if s.empty:
        return pd.Series({"n_clients": 0, "total": 0, "min": np.nan, "max": np.nan, "mean": np.nan, "cv": np.nan, "jain": np.nan})
    v = s.to_numpy(dtype=float)
    mean = float(v.mean())
    return pd.Series({"n_clients": int(v.size), "total": int(v.sum()), "min": float(v.min()), "max": float(v.max()),
                      "mean": mean, "cv": float(v.std() / mean) if mean > 0 else float("nan"), "jain": jain_index(v)})


# ----------------------------------------------------------------------------- accuracy-based costs

def accuracy_curve(df: pd.DataFrame) -> pd.DataFrame:
    """(t, accuracy) sorted by time, from ``eval`` events of a trace or from a metrics table."""
    rows = _kind(df, "eval") if "kind" in df.columns else df
    if rows.empty or "accuracy" not in rows.columns or "t" not in rows.columns:
        return pd.DataFrame(columns=["t", "accuracy"])
    out = rows[["t", "accuracy"]].dropna().astype(float).sort_values("t", kind="stable").reset_index(drop=True)
    return out


def time_to_accuracy(df: pd.DataFrame, target: float) -> float:
    """Virtual time of the first evaluation with accuracy ≥ ``target`` (NaN if never reached)."""
    cur = accuracy_curve(df)
    hit = cur[cur["accuracy"] >= target]
    return float(hit["t"].iloc[0]) if len(hit) else float("nan")


def _cut(df: pd.DataFrame, target: float | None, metrics: pd.DataFrame | None, scale: float) -> tuple[float, float]:
    cur = accuracy_curve(metrics if metrics is not None else df)
    if cur.empty:
        raise ConfigError("trace", "no evaluations (eval events or a metrics table with t, accuracy)")
    if target is None:
        t_cut, acc = float(cur["t"].iloc[-1]), float(cur["accuracy"].iloc[-1])
    else:
        hit = cur[cur["accuracy"] >= target]
        if hit.empty:
            return float("nan"), float("nan")
        t_cut, acc = float(hit["t"].iloc[0]), float(hit["accuracy"].iloc[0])
    return t_cut, (acc - float(cur["accuracy"].iloc[0])) * scale


def bytes_per_accuracy_point(df: pd.DataFrame, target: float | None = None, *, metrics: pd.DataFrame | None = None,
                             scale: float = 100.0) -> float:
    """Bytes moved (download + upload events ending by the cut time) per accuracy point gained.

    The cut is the first evaluation reaching ``target`` (or the last evaluation); the gain is the
    accuracy there minus the first evaluation's, times ``scale`` (100: accuracies are fractions, points
    are percentage points).  NaN if the target is never reached, inf if nothing was gained.
    """
    t_cut, gain = _cut(df, target, metrics, scale)
    if math.isnan(t_cut):
        return float("nan")
    tx = df[df["kind"].isin(("download", "upload"))] if "kind" in df.columns else pd.DataFrame()
    total = float(tx.loc[tx["t"] <= t_cut + 1e-12, "bytes"].sum()) if not tx.empty and "bytes" in tx.columns else 0.0
    return total / gain if gain > 0 else float("inf")


def energy_per_accuracy_point(df: pd.DataFrame, target: float | None = None, *, metrics: pd.DataFrame | None = None,
                              power_w: Mapping[str, float] | None = None, scale: float = 100.0) -> float:
    """Joules spent per accuracy point gained (cut and gain as in :func:`bytes_per_accuracy_point`).

    Energy is the sum of an ``energy`` field (J) on events up to the cut when the trace has one;
    otherwise ``power_w`` (watts per interval kind, e.g. ``{"compute": 10, "upload": 2}``) times each
    interval's duration.  Without either the energy is unknown and a ConfigError says so.
    """
    t_cut, gain = _cut(df, target, metrics, scale)
    if math.isnan(t_cut):
        return float("nan")
    upto = df[df["t"] <= t_cut + 1e-12]
    if "energy" in df.columns and df["energy"].notna().any():
        energy = float(upto["energy"].fillna(0).sum())
    elif power_w is not None:
        unknown = set(power_w) - set(INTERVAL_KINDS) - {"server"}
        if unknown:
            raise ConfigError("power_w", f"unknown interval kind(s) {sorted(unknown)} (allowed: download, compute, upload, server)")
        energy = 0.0
        for kind, watts in power_w.items():
            iv = upto[upto["kind"] == kind]
            if not iv.empty:
                energy += float(watts) * float((iv["end"] - iv["start"]).sum())
    else:
        raise ConfigError("power_w", "trace has no energy field; pass watts per interval kind")
    return energy / gain if gain > 0 else float("inf")


# ----------------------------------------------------------------------------- Co-S²P rounds

def cos2p_summary(df: pd.DataFrame) -> dict[str, float]:
    """What a Co-S²P run recorded per aggregation round (``cos2p_round`` events) and at its end
    (``cos2p_eval``): N* (strict, and over the segments trained in each round: the one that keeps
    Theorem 1 meaningful), mean N_q^i, the number of segments |K|, rounds Q, τ̄ = mean_q τ_q², RU from the
    recorded busy times (Eq. 17), mean busy time and memory estimate, and the final Top-1/Top-5/F1.
    Empty when the trace has no such events."""
    rd = _kind(df, "cos2p_round")
    out: dict[str, float] = {}
    if not rd.empty:
        taus = [max(t) for t in rd["tau"] if isinstance(t, list) and t]
        rus = [sum(b) / (len(b) * max(b)) for b in rd["busy"] if isinstance(b, list) and b and max(b) > 0]
        busy = [x for b in rd["busy"] if isinstance(b, list) for x in b]
        mem = [float(x) for m in rd["memory"] if isinstance(m, list) for x in m if not _is_missing(x) and x != "nan"]
        out.update(n_star=float(rd["n_star"].min()), n_star_trained=float(rd["n_star_trained"].min()),
                   n_mean=float(rd["n_mean"].mean()), K=float(rd["n_segments"].max()), Q=float(len(rd)),
                   tau_bar=float(np.mean(np.square(taus))) if taus else float("nan"),
                   ru=float(np.mean(rus)) if rus else float("nan"),
                   busy_mean=float(np.mean(busy)) if busy else float("nan"),
                   memory_mean=float(np.mean(mem)) if mem else float("nan"),
                   memory_max=float(np.max(mem)) if mem else float("nan"))
    ev = _kind(df, "cos2p_eval")
    if not ev.empty:
        last = ev.iloc[-1]
        for k in ("server_top1", "server_top5", "server_f1", "client_top1", "client_top5", "client_f1"):
            if k in last.index and not _is_missing(last[k]):
                out[k] = float(last[k])
    return out
