"""Co-S²P (Li et al., "Unity is Power"): its figures and tables at a scale that runs on two CPU cores.

    python -m figures.cos2p --out DIR [--quick] [--seeds 0 1 2 3 4] [--stability-seeds 5 6 7 8 9] [--worker]

Every figure is a PNG next to the CSV of exactly what it plots; the runs (trace, metrics, summary) are
kept under ``DIR/runs``.  The world is the built-in ``cos2p`` scenario (E1 at small scale: 8 Jetsons in
the mix 1/0/3/4, a tiny 8-block ViT on digits32, Dirichlet(1.5) with Table 7's per-class data sizes);
every method runs the same virtual-time budget.

* ``accuracy_vs_time``: server Top-1 against virtual time, FedAvg (full model, sync), FedRolex (sync,
  width √R_n per class with Table 7's R_n, so its kept parameters match them), Co-S²P sync (μ = 1,
  T_clk = 0), Co-S²P (semi-async, μ = 0.5, Table 7's R_n per class, the scenario's ``rate_rule: table7``),
  Co-S²P fully async, and Co-S²P with fedsim's ``rate_rule: balanced`` (R_n derived per client so that
  jobs take equal time: the alternative reading in the choices table).
* ``claims.md``: the paper's claims judged per seed by ``figures.claims.RULES``, and the choices that
  matter (R_n: Table 7 or balanced; the evaluation clock) with the verdicts under each reading.
* ``methods``: final server/client Top-1, Top-5, F1 and RU (Eq. 17) per method (Tables 1–2's columns).
* ``sweep_mu`` / ``sweep_tclk``: server and client Top-1, RU, τ̄, N* (over trained segments), mean N_q^i
  and (1/Q) Σ ‖∇F(w_q)‖² against μ and T_clk (Fig. 6, and spec §4.5 T5).  The gradient norm is probed at
  about five checkpoints of each sweep run (full-batch client gradients, F the clients' mean loss);
  ``theorem1_trends``: Theorem 1's trends over each sweep as Spearman correlations (‖∇F‖² should fall as
  N_q^i rises and rise with τ̄).
* ``efficiency``: training memory and round time per device class at Table 7's R_n for Co-S²P's
  structured sub-model (the main Co-S²P run, Table 7's R_n),
  FedRolex-style width-only extraction and unstructured zero masking (the full model: masking saves
  neither memory nor FLOPs), Figs. 1, 9, 10.  Memory from the extracted modules' estimates, round time
  from the runs' traces (zero masking: the FedAvg run, which trains the dense model).
* ``distillation``: server vs client Top-1 with and without self-distillation (Table 3, last rows).
* ``ratio``: R^w/R^d ∈ {0.5, 1, 2} (Table 8).
"""
from __future__ import annotations

import argparse
import copy
import math
from pathlib import Path
from typing import Any, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from analysis import trace_metrics as tm  # noqa: E402
from fedsim import load_scenario, scenario_from_mapping  # noqa: E402
from fedsim.sim.trace import load_trace  # noqa: E402
from figures.claims import (Choice, Claim, Judgement, add_seed_arguments, claim, claims_of,  # noqa: E402
                            commit_hash, default_seeds, judge, judge_acc, judge_value, render_claims, seeds_args,
                            verdicts_of)
from figures.common import Job, run_jobs, save, test_size  # noqa: E402

LABELS = {"fedavg": "FedAvg (full)", "fedrolex": "FedRolex", "cos2p-sync": "Co-S²P sync", "cos2p": "Co-S²P",
          "cos2p-async": "Co-S²P async", "cos2p-balanced": "Co-S²P (balanced R_n)"}
CLASSES = ("jetson-xavier-nx-8gb", "jetson-agx-orin-32gb", "jetson-agx-orin-64gb")


def base_mapping() -> dict[str, Any]:
    m = load_scenario("cos2p").as_mapping()
    m["output"] = {**m.get("output", {}), "figures": False, "checkpoints": None, "flush_every": 4096}
    return m


def method(name: str, cos2p: dict[str, Any]) -> dict[str, Any]:
    """Algorithm mapping of a method; Co-S²P variants start from the scenario's own settings."""
    if name == "fedavg":
        return {"name": "fedavg", "clients_per_round": 8}
    if name == "fedrolex":  # Table 7's rates per class (FedRolex's widths are per device class)
        widths = {c: round(math.sqrt(cos2p["rates"][c]), 6) for c in CLASSES}
        return {"name": "fedrolex", "clients_per_round": 8, "widths": widths}
    a = copy.deepcopy(cos2p)
    if name == "cos2p-sync":
        a.update(mu=1.0, t_clk=0.0)
    elif name == "cos2p-async":
        a.update(mode="async")
    elif name == "cos2p-balanced":
        a.update(rate_rule="balanced")
    return a


def _job(base: dict[str, Any], algo: dict[str, Any], seed: int, time_s: float,
         checkpoints: int | None = None, eval_every_s: float | None = None) -> dict[str, Any]:
    m = copy.deepcopy(base)
    m["seed"] = seed
    m["algorithm"] = algo
    m["stop"] = {"max_time_s": time_s, "max_versions": None}
    every_s = eval_every_s if eval_every_s is not None else time_s / 10
    m["eval"] = {**m.get("eval", {}), "every_versions": None, "every_s": every_s}
    m["output"] = {**m["output"], "checkpoints": checkpoints}
    return m


#: probes for Theorem 1's left side only: full-batch client gradients at each checkpoint (no σ², no Hessian)
GRAD_PROBE = {"sigma_samples": 0, "hessian_samples": 0}


def grad_norm_sq(d: Path) -> float:
    """(1/Q) Σ_q ‖∇F(w_q)‖² over the run's checkpoints (Theorem 1's left side, F the clients' mean local
    loss), from ``probes.csv`` when the run was probed already; nan for a run without checkpoints."""
    from analysis.probes import ProbeSettings, checkpoints, probe_run

    if not checkpoints(d):
        return float("nan")
    path = d / "probes.csv"
    df = pd.read_csv(path) if path.exists() else probe_run(d, settings=ProbeSettings(**GRAD_PROBE))
    return float(df["grad_norm_sq"].mean())


def trend_checks(sweeps: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Theorem 1's trends across a sweep: the average ‖∇F‖² should fall as participation N_q^i rises and
    rise with τ̄.  Spearman rank correlation over the sweep's points; the expected sign is the check."""
    from scipy.stats import spearmanr

    rows = []
    for kind, sw in sweeps.items():
        for col, expect, what in (("n_mean", -1, "mean N_q^i"), ("tau_bar", 1, "τ̄")):
            ok = sw[["grad_norm_sq", col]].dropna()
            rho = float(spearmanr(ok["grad_norm_sq"], ok[col]).statistic) if len(ok) >= 3 else float("nan")
            rows.append({"sweep": kind, "against": what, "points": len(ok), "spearman": rho,
                         "expected_sign": expect, "holds": bool(np.sign(rho) == expect) if math.isfinite(rho) else None})
    return pd.DataFrame(rows)


def summarise(d: Path) -> dict[str, float]:
    """Final metrics of one run: server Top-1 (metrics.csv), Co-S²P's recorded Top-1/5/F1, RU, τ̄, N*."""
    tr = load_trace(d)
    met = pd.read_csv(d / "metrics.csv")
    out = {"server_top1": float(met["accuracy"].iloc[-1]), "ru": tm.utilisation(tr)}
    st = tm.staleness_summary(tr)
    out["tau_bar"] = float(st.get("tau_bar", float("nan")))
    cs = tm.cos2p_summary(tr)
    out.update({k: cs[k] for k in ("server_top5", "server_f1", "client_top1", "client_top5", "client_f1",
                                   "n_star_trained", "n_mean") if k in cs})
    if "server_top5" not in out:  # a baseline: score its final global model on the same server test set
        out.update({f"server_{k}": v for k, v in _server_scores(d).items() if k != "top1"})
    return out


_TEST: dict[str, Any] = {}


def _server_scores(d: Path) -> dict[str, float]:
    """Top-1/Top-5/macro F1 of a run's final model on its server test set (data rebuilt from the run's
    scenario; the test set does not depend on the algorithm, so it is built once)."""
    import torch

    from fedsim.algorithms.cos2p_parts import classification_scores
    from fedsim.build import build_global_model, prepare_data

    sc = load_scenario(d / "scenario.yaml")
    key = f"{sc.seed}"
    if key not in _TEST:
        data = prepare_data(sc).data
        _TEST[key] = (data.test, build_global_model(sc, data))
    test, model = _TEST[key]
    model.load_state_dict(torch.load(d / "final_model.pt"))
    return classification_scores(model, test.x, test.y, test.num_classes)


def _markdown(df: pd.DataFrame) -> str:
    """A Markdown table (3 decimals), without optional dependencies."""
    cols = list(df.columns)
    fmt = lambda v: f"{v:.3f}" if isinstance(v, (float, np.floating)) else str(v)  # noqa: E731
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def _mean(rows: list[dict[str, Any]], by: list[str]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    num = [c for c in df.columns if c not in by and c != "seed"]
    return df.groupby(by, as_index=False)[num].mean()


def work(out: str | Path, *, quick: bool = False, seeds: Sequence[int] | None = None,
         time_s: float | None = None) -> int:
    """Run the recipe's runs only, as one of several worker processes sharing ``out``: a run is taken by
    creating ``runs/<name>.claim`` (exclusively), so workers started at any time split the runs between
    them; finished runs of the identical scenario are skipped.  A later ``make_all`` on the same folder
    reuses them all and writes the tables.  Returns the number of runs this worker made."""
    import os

    from figures.common import finished, run_dir
    from fedsim.runner import run_scenario

    out = Path(out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    made = 0
    for key, mapping in plan(quick, seeds, time_s)[-1].items():
        d = run_dir(out, key)
        scenario = scenario_from_mapping(mapping)
        if finished(d, scenario) is not None:
            continue
        try:
            os.close(os.open(out / "runs" / f"{d.name}.claim", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            continue
        run_scenario(scenario, d, progress=False, force=True)
        made += 1
    return made


def plan(quick: bool, seeds: Sequence[int] | None, time_s: float | None) -> tuple:
    """(seeds, base mapping, Co-S²P settings, time budget, μ values, T_clk values, R^w/R^d values, jobs)."""
    seeds = default_seeds(quick, seeds, None)[0]
    base = base_mapping()
    cos = dict(base["algorithm"])
    # sized to fit about half an hour on two shared cores (a Co-S²P run costs tens of wall seconds per virtual
    # second there): 2 s of virtual time and three points per sweep, the ends and the scenario's own value
    time_s = time_s if time_s is not None else 2.0
    # the sweeps' Co-S²P runs keep about five checkpoints (≈ 8 versions per virtual second) for ‖∇F(w_q)‖²
    every = max(1, round(8 * time_s / 5))
    mus = (0.25, 0.5, 1.0)
    tclks = (0.0, 0.02, 0.1) if quick else (0.0, 0.02, 0.2)
    ratios = (1.0, 2.0) if quick else (0.5, 1.0, 2.0)
    jobs: dict[tuple, dict[str, Any]] = {}
    for s in seeds:
        for name in LABELS:
            jobs[("method", name, s)] = _job(base, method(name, cos), s, time_s, every if name == "cos2p" else None)
        for mu in mus:
            if mu != cos["mu"]:
                jobs[("mu", mu, s)] = _job(base, {**cos, "mu": mu}, s, time_s, every)
        for t in tclks:
            if t != cos["t_clk"]:
                jobs[("tclk", t, s)] = _job(base, {**cos, "t_clk": t}, s, time_s, every)
        jobs[("distill", False, s)] = _job(base, {**cos, "distill": False}, s, time_s)
        for r in ratios:
            if r != 1.0:
                jobs[("ratio", r, s)] = _job(base, {**cos, "width_depth_ratio": r}, s, time_s)
    # the evaluation-clock choice, computed: the first seed's Co-S²P run again with a coarser clock
    jobs[("evalclock", time_s / 4, seeds[0])] = _job(base, method("cos2p", cos), seeds[0], time_s, every,
                                                     eval_every_s=time_s / 4)
    return seeds, base, cos, time_s, mus, tclks, ratios, jobs


def make_all(out: str | Path, *, quick: bool = False, seeds: Sequence[int] | None = None,
             progress: bool = True, time_s: float | None = None,
             stability_seeds: Sequence[int] | None = None) -> dict[str, pd.DataFrame]:
    """Run every recipe and write the figures and their CSVs into ``out`` (``time_s``: the virtual-time
    budget of every run; default 2 s; ``stability_seeds``: the recipe again on them under ``out/stability``,
    every claims row checked against it)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    seeds, stability_seeds = default_seeds(quick, seeds, stability_seeds)
    stab = None
    if stability_seeds:
        stab = claims_of(make_all(out / "stability", quick=quick, seeds=stability_seeds, progress=progress,
                                  time_s=time_s, stability_seeds=[])["claims"])
    seeds, base, cos, time_s, mus, tclks, ratios, jobs = plan(quick, seeds, time_s)
    # a finished run of the identical scenario is reused (re-running the recipe only redraws)
    runs = run_jobs([Job(k, m) for k, m in jobs.items()], out, label="Co-S²P", progress=progress, resume=True)
    dirs = {k: r["dir"] for k, r in runs.items()}
    same = {("mu", cos["mu"]): "cos2p", ("tclk", cos["t_clk"]): "cos2p", ("distill", True): "cos2p",
            ("ratio", 1.0): "cos2p"}

    def d_of(kind: str, value: Any, s: int) -> Path:
        if (kind, value) in same:
            return dirs[("method", same[(kind, value)], s)]
        return dirs[(kind, value, s)]

    results: dict[str, pd.DataFrame] = {}
    # accuracy vs virtual time and the per-method table
    curves, rows = [], []
    for s in seeds:
        for name in LABELS:
            d = dirs[("method", name, s)]
            met = pd.read_csv(d / "metrics.csv")
            curves += [{"method": LABELS[name], "seed": s, "t": float(t), "accuracy": float(a)}
                       for t, a in zip(met["t"], met["accuracy"])]
            rows.append({"method": LABELS[name], "seed": s, **summarise(d)})
    results["methods_seeds"] = pd.DataFrame(rows)
    results["methods_seeds"].to_csv(out / "methods_seeds.csv", index=False)
    cur = pd.DataFrame(curves)
    cur.to_csv(out / "accuracy_vs_time.csv", index=False)
    fig, ax = plt.subplots(figsize=(6, 4))
    for m, g in cur.groupby("method", sort=False):
        mean = g.groupby("t", as_index=False)["accuracy"].mean()
        ax.plot(mean["t"], mean["accuracy"], marker=".", label=m)
    ax.set_xlabel("virtual time (s)")
    ax.set_ylabel("server Top-1")
    ax.legend()
    ax.set_title(f"Co-S²P E1 at small scale ({len(seeds)} seed(s))")
    save(fig, out / "accuracy_vs_time.png")
    tab = _mean(rows, ["method"])
    tab.to_csv(out / "methods.csv", index=False)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(tab["method"], tab["ru"])
    ax.set_ylabel("RU (Eq. 17)")
    ax.set_ylim(0, 1.05)
    ax.tick_params(axis="x", rotation=20)
    save(fig, out / "ru_per_method.png")
    results["methods"] = tab
    # sweeps
    sweeps = {}
    for kind, values, xlabel in (("mu", mus, "μ"), ("tclk", tclks, "T_clk (s)")):
        srows = [{kind: v, "seed": s, **summarise(d_of(kind, v, s)), "grad_norm_sq": grad_norm_sq(d_of(kind, v, s))}
                 for v in values for s in seeds]
        sw = sweeps[kind] = _mean(srows, [kind])
        sw.to_csv(out / f"sweep_{kind}.csv", index=False)
        results[f"sweep_{kind}_seeds"] = pd.DataFrame(srows)
        results[f"sweep_{kind}_seeds"].to_csv(out / f"sweep_{kind}_seeds.csv", index=False)
        fig, axes = plt.subplots(1, 5, figsize=(16, 3.2))
        for ax, (col, lab) in zip(axes, (("server_top1", "server Top-1"), ("ru", "RU"), ("tau_bar", "τ̄"),
                                          ("n_mean", "mean N_q^i"), ("grad_norm_sq", "(1/Q) Σ ‖∇F(w_q)‖²"))):
            if col in sw:
                ax.plot(sw[kind], sw[col], marker="o")
            if col == "server_top1" and "client_top1" in sw:
                ax.plot(sw[kind], sw["client_top1"], marker="s", label="client Top-1")
                ax.legend()
            ax.set_xlabel(xlabel)
            ax.set_title(lab)
        save(fig, out / f"sweep_{kind}.png")
        results[f"sweep_{kind}"] = sw
    trends = trend_checks(sweeps)
    trends.to_csv(out / "theorem1_trends.csv", index=False)
    results["theorem1_trends"] = trends
    t1 = []
    for s in seeds:
        one = trend_checks({k: _only(results[f"sweep_{k}_seeds"], s) for k in sweeps})
        t1 += [{**row, "seed": s} for row in one.to_dict("records")]
    results["theorem1_seeds"] = pd.DataFrame(t1)
    results["theorem1_seeds"].to_csv(out / "theorem1_trends_seeds.csv", index=False)
    # distillation ablation and R^w/R^d
    drows = [{"distill": v, "seed": s, **summarise(d_of("distill", v, s))} for v in (True, False) for s in seeds]
    results["distillation_seeds"] = pd.DataFrame(drows)
    dist = _mean(drows, ["distill"])
    dist.to_csv(out / "distillation.csv", index=False)
    fig, ax = plt.subplots(figsize=(5, 3.5))
    x = np.arange(2)
    for i, col in enumerate(("server_top1", "client_top1")):
        if col in dist:
            ax.bar(x + 0.35 * i, dist[col], width=0.35, label=col.replace("_", " "))
    ax.set_xticks(x + 0.175, ["with self-distillation" if v else "without" for v in dist["distill"]])
    ax.legend()
    save(fig, out / "distillation.png")
    results["distillation"] = dist
    rrows = [{"ratio": r, "seed": s, **summarise(d_of("ratio", r, s))} for r in ratios for s in seeds]
    results["ratio_seeds"] = pd.DataFrame(rrows)
    rat = _mean(rrows, ["ratio"])
    rat.to_csv(out / "ratio.csv", index=False)
    (out / "ratio.md").write_text(_markdown(rat), encoding="utf-8")
    results["ratio"] = rat
    results["efficiency"], results["efficiency_seeds"] = efficiency(base, cos, dirs, seeds, out)
    results["test_size"] = test_size(base)
    results["eval_every_s"] = time_s / 10
    results["eval_clock"] = eval_clock_effect(dirs[("method", "cos2p", seeds[0])],
                                              dirs[("evalclock", time_s / 4, seeds[0])], seeds[0], time_s / 4)
    command = "python -m figures.cos2p" + (" --quick" if quick else "") + seeds_args(seeds, stability_seeds)
    rows = claims(results)
    (out / "claims.md").write_text(render_claims(rows, command=command, seeds=seeds, commit=commit_hash(),
                                                 choices=choices(results, rows), stability=stab,
                                                 stability_seeds=stability_seeds), encoding="utf-8")
    results["claims"] = pd.DataFrame([c.__dict__ for c in rows])
    return results


def _seeds_of(df: pd.DataFrame, col: str, **where: Any) -> np.ndarray:
    """Per seed (in seed order) the value of ``col`` in the rows of a per-seed table matching ``where``."""
    sel = df
    for k, v in where.items():
        sel = sel[sel[k] == v]
    return sel.sort_values("seed")[col].to_numpy(dtype=float)


def _only(df: pd.DataFrame, seed: int) -> pd.DataFrame:
    return df[df["seed"] == seed]


def _ends(sw: pd.DataFrame, kind: str, col: str) -> np.ndarray:
    """Per seed: ``col`` at the sweep's largest value minus at its smallest."""
    lo, hi = sw[kind].min(), sw[kind].max()
    return _seeds_of(sw, col, **{kind: hi}) - _seeds_of(sw, col, **{kind: lo})


#: chance accuracy on digits32's 10 classes (%): accuracy rows are judged only clearly above it
CHANCE = 10.0


def claims(r: dict[str, pd.DataFrame], co: str = "cos2p") -> list[Claim]:
    """The paper's claims against this recipe's per-seed tables (``make_all``'s dict: ``methods_seeds``, the
    sweeps' ``sweep_*_seeds``, ``distillation_seeds``, ``ratio_seeds``, ``efficiency_seeds``,
    ``theorem1_seeds``, ``test_size``); every cell and verdict by :data:`figures.claims.RULES` (Top-1 in
    points, RU as a fraction).  ``co``: which method is "Co-S²P" (``cos2p-balanced`` for the choices table)."""
    ms = r["methods_seeds"]
    n = int(r["test_size"])                      # the server test set (client Top-1 is judged on the same n)
    acc = lambda a, b, paper=None: judge_acc(a, b, paper, n_test=n, chance=CHANCE)  # noqa: E731

    def m(name: str, col: str) -> np.ndarray:
        return _seeds_of(ms, col, method=LABELS[name])

    out = [claim("fully async RU = 100%", "100%",
                 judge_value(100 * float(np.mean(m("cos2p-async", "ru"))), 100.0, digits=1, unit="%"))]
    out.append(claim("RU, Co-S²P vs FedAvg (full)", "87.9 vs 63.5 (1.38×)",
                     judge(m(co, "ru") / m("fedavg", "ru"), 87.9 / 63.5, ratio=True, digits=2)))
    out.append(claim("RU, Co-S²P vs FedRolex", "1.2×", judge(m(co, "ru") / m("fedrolex", "ru"), 1.2, ratio=True,
                                                         digits=2)))
    top = lambda name: 100 * m(name, "server_top1")  # noqa: E731
    cl = lambda name: 100 * m(name, "client_top1")  # noqa: E731
    out.append(claim("server Top-1, Co-S²P above FedRolex", "33.1 vs 24.3 (+8.8 points)",
                     acc(top(co), top("fedrolex"), 8.8)))
    out.append(claim("server Top-1, FedAvg (full) above Co-S²P (the upper reference)", "38.7 vs 33.1 (+5.6 points)",
                     acc(top("fedavg"), top(co), 5.6)))
    out.append(claim("server Top-1, semi-async above fully async", "+5.4 points", acc(top(co), top("cos2p-async"), 5.4)))
    out.append(claim("client Top-1, semi-async above fully async", "+5.1 points", acc(cl(co), cl("cos2p-async"), 5.1)))
    out.append(claim("server Top-1, fully async Co-S²P above FedRolex", "27.7 vs 24.3 (+3.4 points, E1)",
                     acc(top("cos2p-async"), top("fedrolex"), 3.4)))
    for kind, name in (("mu", "μ"), ("tclk", "T_clk")):
        sw = r[f"sweep_{kind}_seeds"]
        span = f"{sw[kind].min():g} → {sw[kind].max():g}"
        out.append(claim(f"larger {name} ({span}) → lower τ̄", "τ̄ ↓ (Fig. 6)", judge(-_ends(sw, kind, "tau_bar"), digits=2)))
        # Fig. 6 plots N* (the participation the server settles on), not the mean N_q^i
        out.append(claim(f"larger {name} ({span}) → larger N*", "N* ↑ (Fig. 6)",
                         judge(_ends(sw, kind, "n_star_trained"), digits=2) if "n_star_trained" in sw
                         else Judgement("n/a", "N* not recorded")))
        out.append(claim(f"larger {name} ({span}) → lower RU", "RU ↓ (Fig. 6)", judge(-_ends(sw, kind, "ru"), digits=3)))
        lo, hi = sw[kind].min(), sw[kind].max()
        out.append(claim(f"larger {name} ({span}) → higher server Top-1", "accuracy ↑ (Fig. 6)",
                         acc(100 * _seeds_of(sw, "server_top1", **{kind: hi}),
                             100 * _seeds_of(sw, "server_top1", **{kind: lo}))))
    ds = r["distillation_seeds"]
    for col, paper, who in (("client_top1", 9.5, "clients"), ("server_top1", 4.9, "the server")):
        if col in ds:
            out.append(claim(f"self-distillation helps {who}", f"+{paper} points (Table 3)",
                             acc(100 * _seeds_of(ds, col, distill=True), 100 * _seeds_of(ds, col, distill=False),
                                 paper)))
    # "clients gain more than the server" is a difference of the two rows above: it is judged only through
    # them (a difference of two effects that are each absent is no evidence either way)
    rs = r["ratio_seeds"]
    for other, paper in ((2.0, 33.1 - 29.7), (0.5, 33.1 - 28.4)):
        if other in set(rs["ratio"]):
            out.append(claim(f"R^w/R^d = 1 beats {other:g} (Table 8)", f"+{paper:.1f} points",
                             acc(100 * _seeds_of(rs, "server_top1", ratio=1.0),
                                 100 * _seeds_of(rs, "server_top1", ratio=other), paper)))
    eff = r["efficiency_seeds"]
    for cls in CLASSES:
        e = eff[eff["device_class"] == cls]
        if not len(e):
            continue
        short = cls.replace("jetson-", "")
        rolex = float(e["memory_fedrolex_MB"].iloc[0])
        # the depth window rolls over every position: judged at the mean position and at the worst one
        for what, col in (("mean over the depth window's positions", "memory_structured_MB"),
                          ("worst position of the depth window", "memory_structured_worst_MB")):
            if col not in e:
                continue
            mem = 100 * (1 - float(e[col].iloc[0]) / rolex)
            out.append(claim(f"memory below FedRolex at Table 7's R_n, {short}, {what} (Fig. 9)", "−22%",
                             judge([mem], 22.0, exact=True, resolution=0.5, res_name="cost model, 0.5%", unit="%",
                                   digits=1)))
        saving = 100 * (1 - e.sort_values("seed")["round_s_structured"].to_numpy(float)
                        / e.sort_values("seed")["round_s_fedrolex"].to_numpy(float))
        out.append(claim(f"round time below FedRolex at Table 7's R_n, {short} (Fig. 10)", "−24%",
                         judge(saving, 24.0, unit="%", digits=0)))
    tr = r["theorem1_seeds"]
    for (kind, against), g in tr.groupby(["sweep", "against"], sort=False):
        sign = -1.0 if against == "mean N_q^i" else 1.0
        out.append(claim(f"Theorem 1: (1/Q) Σ ‖∇F‖² {'falls as' if sign < 0 else 'rises with'} {against} over the "
                         f"{kind} sweep (Spearman per seed)", "↓ with N, ↑ with τ̄",
                         judge(sign * g.sort_values("seed")["spearman"].to_numpy(float), digits=2)))
    return out


def choices(r: dict[str, pd.DataFrame], used: list[Claim]) -> list[Choice]:
    """The readings that move a verdict, with the verdicts under each (the alternative runs are in ``r``)."""
    moved = tuple(c.claim for c in used)        # every row, computed under each reading
    alt = claims(r, co="cos2p-balanced")
    return [Choice("R_n per client (Table 7 per device class, or fedsim's `balanced` rule that equalises job "
                   "times and so maximises Eq. 17's RU by construction)", "Table 7",
                   "the paper's Table 7; the paper says only \"according to the available resources\" for how",
                   {"Table 7": verdicts_of(used, moved), "balanced": verdicts_of(alt, moved)}),
            Choice("evaluation clock", f"every {float(r['eval_every_s']):g} s of virtual time",
                   "no claim here reads a time to a target; every row reads the end of the same time budget, "
                   "which every clock includes",
                   {"another clock": r["eval_clock"]})]


def eval_clock_effect(run: Path, other: Path, seed: int, every_s: float) -> str:
    """Whether the evaluation clock can move a verdict, computed on one seed: the same run with a coarser clock
    must end with the identical final model (every tensor bit for bit) and the identical traffic, updates and
    virtual time; then no row (all read the end of the budget or the trace's training records) can move."""
    import json

    import torch

    a, b = torch.load(run / "final_model.pt"), torch.load(other / "final_model.pt")
    same_model = a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    fields = ("updates_applied", "versions", "bytes_up", "bytes_down", "energy_j", "virtual_time_s", "final_accuracy")
    sa, sb = (json.loads((d / "summary.json").read_text(encoding="utf-8")) for d in (run, other))
    differ = [f for f in fields if sa.get(f) != sb.get(f)]
    where = f"seed {seed} re-run with evaluation every {every_s:g} s"
    if same_model and not differ:
        return f"no verdict moves (computed: {where}: identical final model, accuracy, updates, traffic, energy and time)"
    what = ", ".join((["final model"] if not same_model else []) + differ)
    return f"NOT computed: {where} differs in {what}; the verdicts under that clock need a full re-run"


def efficiency(base: dict[str, Any], cos: dict[str, Any], dirs: dict[tuple, Path], seeds: Sequence[int],
               out: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Memory (extracted-module estimate) and round time (mean busy time in the runs) per device class, and
    per device class and seed (``efficiency_seeds.csv``: what the claims judge)."""
    from fedsim.algorithms.cos2p import split_rates
    from fedsim.learn.costs import memory_estimate
    from fedsim.learn.submodel import SubModel, extract, submodel_costs, width_submodel
    from fedsim.build import build_global_model, prepare_data

    sc = scenario_from_mapping({**base, "algorithm": cos})
    data = prepare_data(sc).data
    model = build_global_model(sc, data)
    shape = tuple(data.train.input_shape)
    L = model.num_blocks() - 2
    state = model.state_dict()
    rows: list[dict[str, Any]] = []
    per_seed: list[dict[str, Any]] = []
    for cls in CLASSES:
        rate = float(cos["rates"][cls])
        batch = int(cos.get("batch_sizes", {}).get(cls, sc.train.batch_size))
        rw, rd = split_rates(rate, float(cos.get("width_depth_ratio", 1.0)))
        w = int(math.floor(L * rd + 1e-9))
        keep = {g: tuple(range(max(1, round(rw * wg.size)))) for g, wg in model.width_groups().items() if g != "embed"}
        structured_at = []
        for start in range(max(1, L - max(1, w) + 1)):   # every position of the rolling depth window
            st = tuple(["train" if start == 0 else "frozen"]
                       + ["frozen" if j <= start else "train" if j <= start + w else "removed" for j in range(1, L + 1)]
                       + ["train" if start + w == L else "removed"])
            # memory only (the FLOP count submodel_costs also measures is not needed here and costs seconds)
            structured_at.append(memory_estimate(extract(model, state, SubModel.of(model, keep, st)), shape,
                                                 batch).total)
        structured = float(np.mean(structured_at))
        rolex = submodel_costs(model, width_submodel(model, math.sqrt(rate)), shape, batch).memory.total
        dense = memory_estimate(model, shape, batch).total
        busy = {}
        # the structured sub-model at Table 7's R_n (the rates FedRolex's widths come from): same kept share
        for name in ("cos2p", "fedrolex", "fedavg"):
            vals = []
            for s in seeds:
                tr = load_trace(dirs[("method", name, s)])
                bt = tm.update_busy_times(tr)
                clients = [c for c in range(8) if _class_of(base, c) == cls]
                got = bt[bt["client"].isin(clients)]["busy"].tolist()
                vals += got
                per_seed.append({"device_class": cls, "seed": s, "method": name,
                                 "busy": float(np.mean(got)) if got else float("nan")})
            busy[name] = float(np.mean(vals)) if vals else float("nan")
        rows.append({"device_class": cls, "R_n": rate, "batch": batch, "memory_structured_MB": structured / 2**20,
                     "memory_structured_worst_MB": max(structured_at) / 2**20, "window_positions": len(structured_at),
                     "memory_fedrolex_MB": rolex / 2**20, "memory_zero_mask_MB": dense / 2**20,
                     "round_s_structured": busy["cos2p"], "round_s_fedrolex": busy["fedrolex"],
                     "round_s_zero_mask": busy["fedavg"]})
    eff = pd.DataFrame(rows)
    eff.to_csv(out / "efficiency.csv", index=False)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    x = np.arange(len(eff))
    for ax, pre, lab in ((axes[0], "memory_", "training memory (MiB)"), (axes[1], "round_s_", "round busy time (s)")):
        for i, (suffix, name) in enumerate((("structured", "Co-S²P structured"), ("fedrolex", "FedRolex-style"),
                                            ("zero_mask", "unstructured zero mask"))):
            col = f"{pre}{suffix}_MB" if pre == "memory_" else f"{pre}{suffix}"
            ax.bar(x + 0.27 * i, eff[col], width=0.27, label=name)
        ax.set_xticks(x + 0.27, [c.replace("jetson-", "") for c in eff["device_class"]], rotation=10)
        ax.set_ylabel(lab)
    axes[0].legend(fontsize=8)
    save(fig, out / "efficiency.png")
    busy = (pd.DataFrame(per_seed).pivot(index=["device_class", "seed"], columns="method", values="busy")
            .reindex(columns=["cos2p", "fedrolex", "fedavg"]))
    busy = busy.rename(columns={"cos2p": "round_s_structured", "fedrolex": "round_s_fedrolex",
                                "fedavg": "round_s_zero_mask"}).reset_index()
    eff_seeds = busy.merge(eff[["device_class", "memory_structured_MB", "memory_structured_worst_MB",
                                "memory_fedrolex_MB"]], on="device_class")
    eff_seeds.to_csv(out / "efficiency_seeds.csv", index=False)
    return eff, eff_seeds


def _class_of(base: dict[str, Any], client: int) -> str:
    """Device class of ``client`` under the scenario's fixed counts (first count clients per group)."""
    order = [g["profile"] for g in base["devices"]["mix"] for _ in range(int(g["count"]))]
    return order[client]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m figures.cos2p", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--quick", action="store_true", help="two seeds, short runs, fewer sweep points")
    add_seed_arguments(p)
    p.add_argument("--worker", action="store_true",
                   help="only make runs, sharing OUT with other workers (then run without --worker for the tables)")
    args = p.parse_args(argv)
    if args.worker:
        n = work(args.out, quick=args.quick, seeds=args.seeds)
        print(f"Co-S²P worker made {n} runs in {args.out}")
        return 0
    make_all(args.out, quick=args.quick, seeds=args.seeds, stability_seeds=args.stability_seeds)
    print(f"Co-S²P figures written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
