"""``check_run``: the theory quantities of one run directory, held against the algorithm's theorem.

A run directory holds ``trace.jsonl`` (the event trace), ``metrics.csv`` (t, round, version, accuracy,
loss) and ``scenario.yaml``.  Optionally ``measured.json`` holds constants that only probes can measure
(L, σ², G, δ², ‖∇F‖² averages, …) as a flat JSON object, with an optional ``"params"`` object for
algorithm settings the scenario does not spell out; its keys use the theory modules' symbols.

The result has one row per quantity: what the trace says (staleness, τ̄, N*, RU, fairness, accuracy),
consistency checks of the trace itself, and the checks of the matching theory module.  Figures go to
``run_dir/check/``: staleness histogram, N* per round, accuracy against virtual time and, when the run
was probed (checkpoints or live probes, see :mod:`analysis.probes`), dissimilarity over versions, ‖∇F‖²
against the local-SGD bound, and SVCCA by layer against the final model.
"""
from __future__ import annotations

import importlib
import json
import math
import re
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd
import yaml

from analysis import fedraa_metrics
from analysis import trace_metrics as tm
from analysis.theory import COMPANIONS, MODULES, Check, checks_frame
from analysis.theory.base import judge
from fedsim.errors import ConfigError
from fedsim.sim.trace import load_trace, trace_path

#: The run statuses summary.json records; only ``ok`` gets verdicts on learning rows.
OK = "ok"
#: Rows about learning that a run which did not finish must not be judged on (it gets its status instead).
_LEARNING = ("final accuracy", "time to accuracy", "metrics: loss finite")


def run_status(run_dir: str | Path) -> dict[str, Any]:
    """What ``summary.json`` says about a run: ``status`` (ok, diverged, interrupted, error, or "not recorded"
    when the run wrote no summary), a ``line`` saying what happened and when, and ``theorems`` (the ids its
    algorithm declared, ``Algorithm.theorems``; None when the summary does not record them)."""
    path = Path(run_dir) / "summary.json"
    if not path.exists():
        return {"status": "not recorded", "theorems": None,
                "line": "no summary.json: the run was killed before it could write one, or fedsim run did not write "
                        "this folder; no verdict on its learning"}
    from fedsim.rundirs import read_summary

    data = read_summary(path)  # a file cut short or edited: one line naming it, exit 2
    if isinstance(data, list):  # a multi-algorithm folder's list: not one run
        data = data[0] if len(data) == 1 else {}
    status = str(data.get("status", "not recorded"))
    t, version, reason = data.get("virtual_time_s"), data.get("versions"), str(data.get("stop_reason") or "")
    when = " and ".join(p for p in ((f"t = {float(t):.4g} s (virtual)" if t is not None else ""),
                                    (f"version {int(version)}" if version is not None else "")) if p)
    if status == OK:
        line = f"ok: finished at {when}" + (f" ({reason})" if reason else "")
    else:
        line = f"{status} at {when}" + (f": {reason}" if reason else "") + "; no verdict on its learning"
    theorems = data.get("theorems")
    return {"status": status, "line": line, "theorems": None if theorems is None else [str(x) for x in theorems],
            "theorems_declared_by": data.get("theorems_declared_by"),
            "theorems_withheld": data.get("theorems_withheld"),
            "dropped": data.get("dropped"), "versions": version}


def _algorithm(scenario: Mapping[str, Any]) -> tuple[str | None, dict[str, Any]]:
    alg = scenario.get("algorithm")
    if isinstance(alg, Mapping):
        name = alg.get("name") or alg.get("family") or alg.get("type")
        params = {k: v for k, v in alg.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        for v in alg.values():   # one level of nesting (e.g. algorithm.params / algorithm.local)
            if isinstance(v, Mapping):
                params.update({k: w for k, w in v.items() if isinstance(w, (int, float)) and not isinstance(w, bool)})
        return (str(name) if name else None), params
    return (str(alg) if alg else None), {}


def _target(scenario: Mapping[str, Any]) -> float | None:
    for section in ("stop", "evaluation", "eval"):
        sec = scenario.get(section)
        if isinstance(sec, Mapping):
            for key in ("target_accuracy", "target"):
                if isinstance(sec.get(key), (int, float)):
                    return float(sec[key])
    return None


def _row(quantity: str, measured: Any, expectation: Any = None, holds: bool | None = None, note: str = "") -> Check:
    if isinstance(measured, (np.floating, np.integer)):
        measured = measured.item()
    return Check(quantity, measured, expectation, holds, note)


def _finite(values: Any) -> list[float]:
    out = []
    for v in values:
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(f):
            out.append(f)
    return out


def semisfl_rows(trace: pd.DataFrame) -> tuple[list[Check], dict[str, Any]]:
    """SemiSFL's per-round records (K_s, R_h, f_s, f_u, mask rate, impurity, traffic) and probes (G_s², G_u²,
    ‖∇F‖², F, secant L, client drift) as check rows and the measured inputs of Theorem 1 / Lemmas 3–4."""
    rows: list[Check] = []
    measured: dict[str, Any] = {}
    if "kind" not in trace:
        return rows, measured
    rnd = trace[trace["kind"] == "semisfl_round"]
    if not len(rnd):
        return rows, measured
    ks = [int(v) for v in rnd["k_s"]]
    changes = [f"{a}->{b}@{int(r)}" for a, b, r in zip(ks[:-1], ks[1:], rnd["round"].iloc[1:]) if a != b]
    rows.append(_row("SemiSFL: K_s trace (first, last, min)", float(ks[-1]), f"first {ks[0]}, min {min(ks)}",
                     None, "changes: " + (", ".join(changes) if changes else "none")))
    mono = all(b <= a for a, b in zip(ks[:-1], ks[1:]))
    rows.append(_row("SemiSFL: K_s non-increasing", int(mono), 1, mono, "Eq. 10 only lowers K_s"))
    rh = _finite(rnd["r_h"])
    rows.append(_row("SemiSFL: R_h (last)", rh[-1] if rh else None, ">= 0.5 lowers K_s", None,
                     f"first {rh[0]:.3g}, mean {np.mean(rh):.3g} over {len(rh)} evaluations" if rh else "not evaluated yet"))
    for key, label in (("f_s", "f_s (supervised loss, last round)"), ("f_u", "f_u (semi-supervised loss, last round)"),
                       ("mask_rate", "mask rate (last round; share of unlabeled samples below tau)"),
                       ("impurity", "impurity (last round; wrong confident pseudo-labels)")):
        if key in rnd:
            vals = _finite(rnd[key])
            if vals:
                rows.append(_row(f"SemiSFL: {label}", vals[-1], None, None, f"first {vals[0]:.4g}"))
    if "bytes_up" in rnd:
        up, down = rnd["bytes_up"].astype(float), rnd["bytes_down"].astype(float)
        rows.append(_row("SemiSFL: traffic per round, up (MB, mean)", float(up.mean()) / 1e6))
        rows.append(_row("SemiSFL: traffic per round, down (MB, mean)", float(down.mean()) / 1e6))
    measured["H"] = int(len(rnd))
    measured["K_s"] = float(np.mean(ks))
    measured["K_u"] = int(rnd["k_u"].iloc[0])
    measured["eta1"] = float(rnd["lr"].iloc[0])
    if "drift" in rnd:
        drift = [(int(k), float(d)) for v in rnd["drift"] if isinstance(v, list) for k, d in v]
        if drift:
            measured["drift"] = drift
            measured["G_max_sq"] = max(_finite(rnd["G_max_sq"]))
            measured["eta"] = max(_finite(rnd["eta_eff"]))
    pr = trace[trace["kind"] == "semisfl_probe"]
    if len(pr):
        gs, gu = _finite(pr["Gs2_max"]), _finite(pr["Gu2_max"])
        if gs:
            measured["Gs2"] = max(gs)
        if gu:
            measured["Gu2"] = max(gu)
        lips = _finite(pr["L_secant"])
        if lips:
            measured["L"] = max(lips)
        init = pr[pr["tag"] == "init"]
        if len(init):
            measured["F0"] = float(init["F"].iloc[0])
        g2 = _finite(pr["grad_norm_sq"])
        if g2:
            measured["min_grad_norm_sq"] = min(g2)
        for g in ("Gs2", "Gu2"):
            for tag in ("sup", "semi"):
                vals = _finite(pr[pr["tag"] == f"after_{tag}"][f"{g}_mean"])
                if vals:
                    measured[f"{g}_after_{tag}"] = vals
        mb = pr[["minibatch_s_sq", "Gs2_max"]].astype(float).dropna() if "minibatch_s_sq" in pr else None
        if mb is not None and len(mb):
            worst = (mb["minibatch_s_sq"] / mb["Gs2_max"]).idxmax()
            measured["minibatch_sq_norm"] = float(mb.loc[worst, "minibatch_s_sq"])
            measured["max_per_sample_sq_norm"] = float(mb.loc[worst, "Gs2_max"])
        for key, label in (("Gs2", "probe: G_s^2 (max per-sample ||grad l_s||^2)"),
                           ("Gu2", "probe: G_u^2 (max per-sample ||grad l_u||^2)"),
                           ("L", "probe: L (max secant between probe points)"),
                           ("min_grad_norm_sq", "probe: min ||grad F||^2 over probe points")):
            if key in measured:
                rows.append(_row(label, float(measured[key])))
    return rows, measured


def _figures(out: Path, trace: pd.DataFrame, metrics: pd.DataFrame | None) -> list[str]:
    from fedsim.output.report import new_figure, save_figure  # plain Figure objects: no pyplot, nothing left held

    out.mkdir(parents=True, exist_ok=True)
    written = []
    st = tm.staleness_table(trace) if not trace.empty else pd.DataFrame()
    fig, ax = new_figure(figsize=(4.5, 3.2))
    if len(st):
        s = st["staleness"].astype(int)
        ax.hist(s, bins=np.arange(s.min(), s.max() + 2) - 0.5, color="tab:blue", edgecolor="white")
        # integer staleness on integer ticks; a single value (all zero) still gets a readable range
        ax.set_xlim(min(s.min(), 0) - 0.6, max(s.max(), 1) + 0.6)
        from matplotlib.ticker import MaxNLocator as _Int

        ax.xaxis.set_major_locator(_Int(integer=True))
    ax.set(xlabel="staleness (model versions)", ylabel="updates", title="Staleness of applied updates")
    save_figure(fig, out / "staleness_hist.png", dpi=110)
    written.append("staleness_hist.png")
    fig, ax = new_figure(figsize=(4.5, 3.2))
    per = tm.n_star_per_round(trace) if not trace.empty else pd.DataFrame()
    if len(per):
        ax.step(per.index, per["n_star"], where="mid", label="strict N*_q")
        ax.step(per.index, per["n_star_trained"], where="mid", linestyle="--", label="trained segments")
        ax.legend()
    ax.set(xlabel="round", ylabel="min clients covering a segment", title="N* per round")
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if len(per):  # counts from 0, so a constant N* = 10 is not drawn on ticks 9.45-10.50
        from fedsim.output.report import count_axis

        count_axis(ax, pd.concat([per["n_star"], per["n_star_trained"]]))
    else:
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    save_figure(fig, out / "n_star_per_round.png", dpi=110)
    written.append("n_star_per_round.png")
    fig, ax = new_figure(figsize=(4.5, 3.2))
    cur = tm.accuracy_curve(metrics if metrics is not None and len(metrics) else trace)
    regression = metrics is not None and len(metrics) and metrics["accuracy"].isna().all() and "loss" in metrics
    if regression:  # a regression task has no accuracy: its test loss is the curve
        ax.plot(metrics["t"], metrics["loss"], marker=".")
        ax.set(xlabel="virtual time (s)", ylabel="test loss", title="Test loss vs time")
    else:
        if len(cur):
            ax.plot(cur["t"], cur["accuracy"], marker=".")
        ax.set(xlabel="virtual time (s)", ylabel="accuracy", title="Accuracy vs time")
    save_figure(fig, out / "accuracy_vs_time.png", dpi=110)
    written.append("accuracy_vs_time.png")
    return written


def _cos2p_rows(trace: pd.DataFrame, scenario: Mapping[str, Any], extra: Mapping[str, Any], rows: list[Check],
                measured: dict[str, Any], probes: pd.DataFrame | None = None) -> None:
    """Rows and Theorem 1 inputs of a Co-S²P run (its ``cos2p_round``/``cos2p_eval`` events and probes).

    Choices: N* for Theorem 1 is the minimum over the segments trained in each round (the strict minimum
    is 0 as soon as a depth window leaves a segment untrained in some round, which makes the bound
    vacuous; both are reported); E = the largest number of local SGD steps of one participation (the
    theorem counts steps); F1 = the probed training loss at version 0; δ² = the probes' ζ²; G = max over
    probes of σ²_max + mean_n ‖∇F_n‖², a value of E‖∇F_n(w; ξ)‖² along the run's iterates (a lower estimate
    of the theorem's uniform bound)."""
    cs = tm.cos2p_summary(trace)
    if not cs:
        return
    labels = (("n_star", "N* strict (Co-S2P segments: neurons, heads, channels)"),
              ("n_star_trained", "N* over the segments trained in each round"),
              ("n_mean", "mean N_q^i over segments and rounds"), ("K", "|K| segments"), ("Q", "aggregation rounds Q"),
              ("tau_bar", "tau_bar = mean_q tau_q^2 (recorded per round)"),
              ("ru", "RU from the recorded busy times (Eq. 17)"), ("busy_mean", "busy time per update, mean (s)"),
              ("memory_mean", "memory estimate per client round, mean (bytes)"),
              ("memory_max", "memory estimate per client round, max (bytes)"),
              ("server_top1", "server Top-1"), ("server_top5", "server Top-5"), ("server_f1", "server macro F1"),
              ("client_top1", "client Top-1 (size-weighted)"), ("client_top5", "client Top-5 (size-weighted)"),
              ("client_f1", "client macro F1 (size-weighted)"))
    for key, label in labels:
        if key in cs and not math.isnan(cs[key]):
            rows.append(_row(label, cs[key]))
    measured["N_star"] = cs["n_star"]  # the paper's strict N* (0 when a segment goes untrained: vacuous)
    measured["K"] = cs["K"]
    measured["Q"] = cs["Q"]
    measured["tau"] = cs["tau_bar"]
    data = scenario.get("data", {}) if isinstance(scenario, Mapping) else {}
    if isinstance(data, Mapping) and data.get("num_clients"):
        measured["N"] = int(data["num_clients"])
    comp = trace[trace["kind"] == "compute"] if "kind" in trace else trace.iloc[0:0]
    if len(comp) and "steps" in comp:
        steps = pd.to_numeric(comp["steps"], errors="coerce").dropna()
        if len(steps):
            measured["E"] = int(steps.max())
    if extra.get("F0") is not None:
        measured["F1"] = float(extra["F0"])
    if extra.get("zeta2") is not None:
        measured["delta2"] = float(extra["zeta2"])
    if probes is not None and len(probes) and {"sigma2_max", "client_grad_sq_mean"} <= set(probes.columns):
        g = (probes["sigma2_max"].astype(float) + probes["client_grad_sq_mean"].astype(float)).max()
        if math.isfinite(g):
            measured["G"] = float(g)
            rows.append(_row("G = max over probes of sigma^2_max + mean_n ||grad F_n||^2", float(g)))


def _round_clients(trace: pd.DataFrame) -> list[int]:
    """Clients whose updates each recorded round averaged (``round`` records), in order."""
    if "kind" not in trace or "clients" not in trace:
        return []
    rounds = trace[trace["kind"] == "round"]
    return [len(c) for c in rounds["clients"] if isinstance(c, list)]


def settings_params(scenario: Mapping[str, Any], trace: pd.DataFrame, status: Mapping[str, Any]) -> dict[str, Any]:
    """The theorems' settings read from the run's resolved ``scenario.yaml`` (and its trace): η_L = γ =
    ``train.lr``, K = Q = ``train.local_steps``, η = η_g = ``algorithm.server_lr`` (1 when the algorithm has
    none), m = the fewest clients a recorded round averaged (else ``clients_per_round``), T = the versions
    the run installed.  A probe's or ``measured.json``'s value of the same key takes precedence."""
    out: dict[str, Any] = {}
    train = scenario.get("train") if isinstance(scenario.get("train"), Mapping) else {}
    alg = scenario.get("algorithm") if isinstance(scenario.get("algorithm"), Mapping) else {}
    if train.get("lr") is not None:
        out["eta_l"] = out["gamma"] = float(train["lr"])
    if train.get("local_steps") is not None:
        out["K"] = out["Q"] = float(train["local_steps"])
    out["eta_g"] = float(alg.get("server_lr") or 1.0)
    rounds = _round_clients(trace)
    if rounds:
        out["m"] = float(min(rounds))
    elif alg.get("clients_per_round") is not None:
        out["m"] = float(alg["clients_per_round"])
    if status.get("versions") is not None:
        out["T"] = float(status["versions"])
    data = scenario.get("data") if isinstance(scenario.get("data"), Mapping) else {}
    if data.get("num_clients") is not None:
        out["num_clients"] = int(data["num_clients"])
    return out


def _setting(scenario: Mapping[str, Any], trace: pd.DataFrame, status: Mapping[str, Any]) -> dict[str, Any]:
    """What a theorem's ``applies`` reads: the scenario's ``train`` and ``algorithm`` sections, the number of
    clients, the clients of each recorded round and the updates dropped (summary.json)."""
    data = scenario.get("data") if isinstance(scenario.get("data"), Mapping) else {}
    return {"train": dict(scenario.get("train") or {}), "params": dict(scenario.get("algorithm") or {})
            if isinstance(scenario.get("algorithm"), Mapping) else {},
            "num_clients": data.get("num_clients"), "round_clients": _round_clients(trace),
            "dropped": status.get("dropped"), "clipping": clipping_record(trace),
            "aggregation_samples": _aggregation_samples(trace, scenario, status.get("partition"))}


def _aggregation_samples(trace: pd.DataFrame, scenario: Mapping[str, Any],
                         sizes: Mapping[int, int] | None) -> list[list[float]] | None:
    """Each aggregation's weights as fedsim's FedAvg sets them, whatever the rule reported: the samples each
    applied client processed (``fedsim.learn.sgd.samples_processed`` of its ``partition.csv`` size under the
    run's ``train`` settings), grouped by the version the ``apply`` records installed.  Why not the rule's
    own shares: a broken rule (one client's model) reports the weights it used, and the theorems' bound,
    not this condition, is what must catch it.  None when the run has no partition sizes."""
    from fedsim.learn.sgd import SGDConfig, num_steps, samples_processed

    if not sizes or "kind" not in trace or "client" not in trace or "version" not in trace:
        return None
    train = scenario.get("train") if isinstance(scenario.get("train"), Mapping) else {}
    try:
        cfg = SGDConfig(batch_size=int(train.get("batch_size", 32)), local_steps=train.get("local_steps"),
                        local_epochs=train.get("local_epochs", 1.0))
        per = {int(c): float(samples_processed(int(n), num_steps(int(n), cfg), cfg.batch_size))
               for c, n in sizes.items()}
    except (TypeError, ValueError, ConfigError):
        return None
    is_apply = (trace["kind"] == "apply").to_numpy()
    if not is_apply.any():
        return []
    clients = pd.to_numeric(trace["client"][is_apply], errors="coerce").to_numpy(dtype=float)
    versions = pd.to_numeric(trace["version"][is_apply], errors="coerce").to_numpy(dtype=float)
    ok = np.isfinite(clients) & np.isfinite(versions)
    clients, versions = clients[ok].astype(np.int64), versions[ok]
    order = np.argsort(versions, kind="stable")
    clients, versions = clients[order], versions[order]
    cuts = np.flatnonzero(np.diff(versions)) + 1
    table = {c: per.get(int(c), float("nan")) for c in np.unique(clients).tolist()}
    return [[table[c] for c in grp.tolist()] for grp in np.split(clients, cuts)]


def partition_sizes(run_dir: str | Path) -> dict[int, int] | None:
    """Samples per client from the run's ``partition.csv`` (None without one)."""
    path = Path(run_dir) / "partition.csv"
    if not path.exists():
        return None
    try:
        df = pd.read_csv(path)
        return {int(c): int(n) for c, n in zip(df["client"], df["samples"])}
    except (KeyError, ValueError, pd.errors.ParserError):
        return None


def clipping_record(trace: pd.DataFrame) -> dict[str, float] | None:
    """Whether gradient clipping bound, from the ``apply`` records' ``clipped_steps`` / ``steps`` /
    ``max_grad_norm`` (written by the trainer when ``train.clip_norm`` is set): steps clipped, local steps
    and applied tasks over the run, and the largest pre-clip gradient norm.  None when no record has them
    (no clipping, or a trainer that does not report it: the check then takes a set clip_norm to bind)."""
    if "kind" not in trace or "clipped_steps" not in trace:
        return None
    a = trace[(trace["kind"] == "apply") & trace["clipped_steps"].notna()]
    if not len(a):
        return None
    steps = a["steps"].astype(float) if "steps" in a else pd.Series(np.nan, index=a.index)
    return {"clipped_steps": float(a["clipped_steps"].astype(float).sum()), "steps": float(steps.sum()),
            "tasks": float(len(a)), "max_grad_norm": float(a["max_grad_norm"].astype(float).max())
            if "max_grad_norm" in a else float("nan")}


def theory_rows(declared: list[str], status: Mapping[str, Any], scenario: Mapping[str, Any], trace: pd.DataFrame,
                measured: Mapping[str, Any], params: Mapping[str, Any]) -> list[Check]:
    """The rows of every theorem the run's algorithm declared, prefixed ``[id]``: the setting's conditions
    (``applies``), the module's own checks, then :func:`analysis.theory.base.judge`.  No declaration gives
    one line saying so, and no theorem row."""
    if status.get("theorems") is None:
        return [Check("no theorem declared", None, None, None,
                      "summary.json records no Algorithm.theorems (a run written before fedsim recorded them): "
                      "run it again to hold it against its algorithm's theorem", "note")]
    withheld = status.get("theorems_withheld")
    if not declared and withheld:
        return [Check("no theorem: a covered decision is overridden", None, None, None,
                      f"{', '.join(withheld['theorems'])} declared by {withheld['declared_by']} is not inherited: this "
                      f"algorithm overrides {', '.join(withheld['overrides'])}, a decision the theorem covers "
                      "(declare `theorems` again in the subclass if it still applies)", "note")]
    if not declared:
        return [Check("no theorem declared", None, None, None,
                      "the algorithm declares no theorem (Algorithm.theorems is empty): only the trace and the "
                      "measured quantities are reported", "note")]
    out: list[Check] = []
    if status.get("theorems_declared_by"):
        out.append(Check("theorems inherited", None, None, None,
                         f"declared by {status['theorems_declared_by']}, a parent class of this run's algorithm: a "
                         "subclass whose rule differs declares its own (`theorems = ()` for none)", "note"))
    setting = _setting(scenario, trace, status)
    for theorem in [t for d in declared for t in (d, *COMPANIONS.get(d, ())) if t == d or t not in declared]:
        if theorem not in MODULES:
            out.append(Check(f"[{theorem}] unknown theorem", None, None, None,
                             f"the algorithm declares {theorem!r}; known: {', '.join(sorted(MODULES))}", "note"))
            continue
        module = importlib.import_module(MODULES[theorem])
        inputs = dict(measured)
        if theorem == "local_sgd":  # Yang et al.'s eta is the server's step, not the local one
            inputs["eta"] = float(params.get("eta_g", 1.0))
        applies = getattr(module, "applies", None)
        rows = (applies(setting) if applies is not None else []) + module.evaluate(inputs, params)
        for c in judge(rows):
            c.quantity = f"[{theorem}] {c.quantity}"
            out.append(c)
    return out


def check_run(run_dir: str | Path, *, figures: bool = True, progress: bool = True,
              probe_settings: Any = None, jobs: int | None = 1) -> pd.DataFrame:
    """Measure a run and hold it against the theorems its algorithm declared; returns the table (also
    written to ``run_dir/check/checks.csv``) with columns quantity, measured, bound_or_expectation, holds,
    note, role.

    The run's status (``summary.json``) comes first: a run that did not finish (diverged, interrupted,
    error, or no summary at all) gets its status row, the trace and system rows, and no learning row,
    probe or theorem.  The theorems are the ids ``summary.json`` records (``Algorithm.theorems``); each is
    judged by :func:`analysis.theory.base.judge` (its bound only where every condition holds).  A finished
    run with saved checkpoints and no ``probes.csv`` is probed first (:func:`analysis.probes.probe_run`,
    with a progress bar when ``progress``), which fills ``measured.json`` with L, σ², ζ², (G, B), the
    average ‖∇F‖² and F(w_0) − F*; the settings (η_L = ``train.lr``, K = ``train.local_steps``, …) come
    from the run's resolved ``scenario.yaml``.  ``probe_settings``: the :class:`analysis.probes.ProbeSettings`
    to probe with (default: its defaults; ``fedsim check --exact-probes``: ``EXACT_PROBES``); ``jobs``: the
    processes probing the checkpoints (:func:`analysis.probes.probe_jobs`; the numbers are the same for any).
    """
    run = Path(run_dir)
    if not run.is_dir():
        raise ConfigError("run_dir", f"{str(run)!r} is not a directory")
    trace_file = trace_path(run)
    if not trace_file.exists():
        raise ConfigError("run_dir", f"no trace (trace.jsonl or trace.compact.gz) in {str(run)!r}")
    from analysis.probes import ensure_probes, probe_figures, probe_row_note

    status = run_status(run)
    status["partition"] = partition_sizes(run)  # samples per client: FedAvg's aggregation weights
    finished = status["status"] == OK
    declared: list[str] = list(status["theorems"] or [])
    probe_error = ""
    probes = None
    if finished:  # a run that did not finish is not probed: nothing is judged on its learning
        try:
            probes = ensure_probes(run, progress=progress, settings=probe_settings, jobs=jobs)
        except (ConfigError, RuntimeError, KeyError) as exc:  # e.g. checkpoints of a model the probes cannot rebuild
            probes, probe_error = None, f"{type(exc).__name__}: {exc}"
    trace = load_trace(trace_file)
    metrics = pd.read_csv(run / "metrics.csv") if (run / "metrics.csv").exists() else None
    scenario: dict[str, Any] = {}
    if (run / "scenario.yaml").exists():
        scenario = yaml.safe_load((run / "scenario.yaml").read_text()) or {}
    extra: dict[str, Any] = {}
    if (run / "measured.json").exists():
        extra = json.loads((run / "measured.json").read_text())
    alg, params = _algorithm(scenario)
    params = params | dict(scenario.get("theory", {}) or {}) | dict(extra.pop("params", {}) or {})
    rows: list[Check] = [Check(f"run status: {status['status']}", None, None, None, status["line"], "status")]
    partition_rows: list[Check] = []
    if "embracingfl" in declared and probes is not None:   # y/z partitions (EmbracingFL §4.9)
        from analysis.embracingfl import ensure_partition_probes, partition_rows as _partition_rows

        try:
            emb_df, emb = ensure_partition_probes(str(run), progress=progress)
            extra.update(emb)
            partition_rows = _partition_rows(emb_df, emb)
        except (ConfigError, RuntimeError, KeyError) as exc:
            partition_rows = [_row("EmbracingFL partition probes", None, note=f"not measured: {type(exc).__name__}: {exc}")]

    # --- the trace's own consistency
    if not trace.empty and "t" in trace.columns:
        t = trace["t"].astype(float).to_numpy()
        bad = int(np.sum(np.diff(t) < 0))
        rows.append(_row("trace: event times non-decreasing", bad, 0, bad == 0, "count of out-of-order records"))
    st = tm.staleness_table(trace) if not trace.empty else pd.DataFrame()
    if len(st):
        neg = int((st["staleness"] < 0).sum())
        rows.append(_row("trace: staleness >= 0", neg, 0, neg == 0, "applied updates with negative staleness"))
        if "staleness_s" in st.columns:
            neg_s = int((st["staleness_s"].astype(float) < 0).sum())
            rows.append(_row("trace: staleness_s >= 0", neg_s, 0, neg_s == 0, "updates applied before their download"))

    # --- system quantities
    measured: dict[str, Any] = {}
    summ = tm.staleness_summary(trace) if not trace.empty else pd.Series(dtype=float)
    for key, label in (("n_updates", "updates applied"), ("mean", "staleness mean (versions)"),
                       ("p90", "staleness p90 (versions)"), ("max", "staleness max (versions)"),
                       ("mean_s", "staleness mean (s)"), ("max_s", "staleness max (s)"),
                       ("tau_bar", "tau_bar = mean_q tau_q^2 (Co-S2P)")):
        if key in summ.index and not (isinstance(summ[key], float) and math.isnan(summ[key])):
            rows.append(_row(label, float(summ[key])))
    if "tau_bar" in summ.index:
        measured["tau"] = float(summ["tau_bar"])
    if "max" in summ.index and not math.isnan(float(summ["max"])):
        measured["K_hat"] = float(summ["max"])
        measured["tau_max"] = float(summ["max"])
    if len(st):
        ns = tm.n_star(trace)
        rows.append(_row("N* strict (min over rounds, segments)", int(ns["n_star"]), note=f"{ns['n_segments']} segment(s)"))
        rows.append(_row("N* over trained segments", int(ns["n_star_trained"])))
        rows.append(_row("mean coverage N_q^i", float(ns["n_star_mean"])))
        measured["N_star"] = int(ns["n_star"])
        measured.setdefault("Q", int(ns["n_rounds"]))
        cov = tm.entry_coverage(trace)
        if len(cov):
            rows.append(_row("per-parameter coverage N_q^i: min over entries and rounds", float(cov["coverage_min"].min()),
                             note=f"clients updating the least-covered entry; {len(cov)} rounds"))
            rows.append(_row("per-parameter coverage N_q^i: mean of per-round minimum", float(cov["coverage_min"].mean())))
            rows.append(_row("per-parameter coverage N_q^i: mean over entries and rounds", float(cov["coverage_mean"].mean()),
                             note="clients per entry per round"))
            measured["N_star_entry"] = float(cov["coverage_min"].min())
        fair = tm.update_fairness(trace)
        rows.append(_row("update fairness (Jain index)", float(fair["jain"]),
                         note=f"updates per client min {fair['min']:g}, max {fair['max']:g}"))
    # RU for any run whose updates have jobs (FedAvg too, so Co-S²P's RU can be compared with it)
    ru = tm.utilisation(trace) if not trace.empty else float("nan")
    if not math.isnan(ru):
        rows.append(_row("RU (Co-S2P Eq. 17)", ru, note="mean over rounds of mean/max busy time"))
    cur = tm.accuracy_curve(metrics if metrics is not None and len(metrics) else trace)
    if len(cur):
        rows.append(_row("final accuracy", float(cur["accuracy"].iloc[-1])))
        target = _target(scenario)
        if target is not None:
            tta = tm.time_to_accuracy(cur, target)
            rows.append(_row(f"time to accuracy {target:g} (s)", tta, target, None if math.isnan(tta) else True,
                             "not reached" if math.isnan(tta) else ""))
    if metrics is not None and "loss" in metrics.columns and len(metrics):
        finite = bool(np.all(np.isfinite(metrics["loss"].astype(float))))
        rows.append(_row("metrics: loss finite", float(metrics["loss"].iloc[-1]), "finite", finite))

    train = scenario.get("train", {}) if isinstance(scenario, Mapping) else {}
    if isinstance(train, Mapping):  # the step size and local steps are settings, not measurements
        if train.get("lr") is not None:
            measured.setdefault("eta", float(train["lr"]))
        if train.get("local_steps") is not None:
            measured.setdefault("E", int(train["local_steps"]))
    params = settings_params(scenario, trace, status) | params

    # theory inputs read off the run itself (its trace and scenario): their own namespace, applied after
    # measured.json, so no key of that file can overwrite one (the (G, B) fit's "B" is not GAS's batch size)
    own_inputs: dict[str, Any] = {}
    # --- split learning: the buffer's bias and the server-gradient dissimilarity (GAS Fig. 2, Lemma 1)
    steps = trace[trace["kind"] == "server_step"] if "kind" in trace else trace.iloc[0:0]
    if len(steps) and "clients" in steps:
        share = pd.Series([c for cl in steps["clients"] if isinstance(cl, list) for c in cl]).value_counts(normalize=True)
        if len(share):
            rows.append(_row("buffer share per client, max", float(share.max()), note=f"client {share.idxmax()}"))
            rows.append(_row("buffer share per client, min", float(share.min()), 1.0 / len(share), None,
                             f"client {share.idxmin()}; uniform would be {1.0 / len(share):.3g}"))
    dis = trace[trace["kind"] == "dissimilarity"] if "kind" in trace else trace.iloc[0:0]
    if len(dis):
        d_without = float(dis["without_generation"].astype(float).mean())
        d_with = float(dis["with_generation"].astype(float).mean())
        rows.append(_row("server-gradient dissimilarity without generation (mean)", d_without))
        rows.append(_row("server-gradient dissimilarity with generation (mean)", d_with))
        own_inputs["D_with_ga"], own_inputs["D_without_ga"] = d_with, d_without
        gen = dis["n_generated"].astype(float)
        # B̂: generated rows per record (at least 1 when any record generated some; 0 only when none did)
        own_inputs["B_hat"] = max(1, int(round(float(gen.mean())))) if float(gen.max()) > 0 else 0
        batch = int(scenario.get("train", {}).get("batch_size", 0) or 0) if isinstance(scenario, Mapping) else 0
        if batch:
            own_inputs["B"] = batch  # the batch size: GAS's B, never the (G, B) fit's B of measured.json
            own_inputs["Q_s"] = max(1, int(round(float(dis["n_real"].astype(float).mean()) / batch)))
        measured.update(own_inputs)

    # --- SemiSFL: K_s controller, pseudo-labels, traffic and the probes of Theorem 1
    semi_rows, semi_measured = semisfl_rows(trace)
    rows.extend(semi_rows)
    measured.update(semi_measured)

    # --- Fed-RAA: q(j), per-fragment staleness, realised round trips, the Theorem 1 row
    fr_rows, fr_measured = fedraa_metrics.check_rows(trace, probes=probes)
    rows.extend(fr_rows)
    measured.update(fr_measured)
    if fr_rows and "eta" in measured:
        measured.setdefault("gamma", measured["eta"])

    # --- probes of the model (constants the theorems are written in)
    if probe_error:
        rows.append(_row("probes of the model", None, note=f"not measured: {probe_error}"))
    if probes is not None and len(probes):
        for key, label in (("L", "probe: L (max of Hessian top eigenvalue and secant)"),
                           ("sigma2", "probe: sigma^2 (max over clients, batch of train.batch_size)"),
                           ("zeta2", "probe: zeta^2 = max_i ||grad F_i - grad F||^2"),
                           ("B_local_max", "probe: FedProx B-local dissimilarity (max over versions)"),
                           ("avg_grad_norm_sq", "probe: average ||grad F||^2 over probed versions"),
                           ("F0_minus_Fstar", "probe: F(w0) - min F (lower bound of F(w0) - F*)")):
            if extra.get(key) is not None:
                rows.append(_row(label, float(extra[key]), note=probe_row_note(extra, key)))
        if extra.get("G2") is not None:
            rows.append(_row("probe: (G, B) envelope fit, G^2", float(extra["G2"]), note=f"B = {float(extra['B']):.4g}"))

    rows.extend(partition_rows)

    # --- Co-S²P: exact segment coverage, |K|, RU and the final Top-1/Top-5/F1 it recorded (its own events)
    own: dict[str, Any] = {}
    _cos2p_rows(trace, scenario, extra, rows, own, probes)
    if own and measured.get("eta") is not None:
        own["eta"] = measured["eta"]  # the local SGD step (the probes' "eta" is the server's)

    # --- theory: what the algorithm declared, judged only where its conditions hold
    measured.update({k: v for k, v in extra.items()})
    # Fed-RAA's K and K_hat are delays in server updates; a probe's "K" (local steps) must not replace them
    measured.update({k: fr_measured[k] for k in ("K", "K_hat") if k in fr_measured})
    measured.update(own)
    measured.update(own_inputs)
    if not finished:  # measurements stay (what the trace recorded); nothing but the trace itself is judged
        rows = [r if r.quantity.startswith("trace:") else Check(r.quantity, r.measured, r.bound_or_expectation, None,
                                                                r.note, r.role)
                for r in rows if not r.quantity.startswith(_LEARNING)]
    else:
        rows.extend(theory_rows(declared, status, scenario, trace, measured, params))

    table = checks_frame(rows)
    out = run / "check"
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "checks.csv", index=False)
    if figures:
        _figures(out, trace, metrics)
        if probes is not None and len(probes):
            probe_figures(probes, measured, out)
    return table
