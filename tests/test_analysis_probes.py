"""Probes of the global model: on real simulated runs (checkpoints and live, same numbers), through
`fedsim check`, and on the known-constant quadratic problem (closed forms)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from analysis import estimators as est
from analysis.probes import (
    PROBE_COLUMNS,
    ProbeSettings,
    probe_point,
    probe_run,
    summarise_probes,
)
from analysis.report import check_run
from fedsim.errors import ConfigError
from fedsim.learn.quadratic import QuadraticProblem, quadratic_loss
from fedsim.build import build_global_model, prepare_data
from fedsim.runner import run_scenario
from fedsim import load_scenario, scenario_from_mapping
from fedsim.sim.rng import Streams


def _scenario(**extra):
    """Tiny FedAvg on digits/logreg in Theorem 1's setting: every client every round, plain SGD, and a step
    size inside its condition (η_L ≤ 1/(8LK), L ≈ 5)."""
    data = {
        "name": "probed", "seed": 3,
        "data": {"name": "digits", "num_clients": 6, "partition": {"method": "iid"}},
        "model": {"name": "logreg"},
        "train": {"lr": 0.01, "batch_size": 16, "local_steps": 2},
        "devices": {"mix": [{"profile": "jetson-nano"}, {"profile": "jetson-agx-orin-32gb"}]},
        "channel": {"uplink": {"model": "fixed", "mbps": [1.0, 10.0]}, "downlink": {"model": "fixed", "mbps": 20.0}},
        "algorithm": {"name": "fedavg", "clients_per_round": 6},
        "stop": {"max_versions": 5},
        "eval": {"every_versions": 2, **extra.get("eval", {})},
        "output": {"figures": False, **extra.get("output", {})},
    }
    return scenario_from_mapping(data)


@pytest.fixture(scope="module")
def probed_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("probed")
    plain = tmp_path_factory.mktemp("plain")
    run_scenario(_scenario(output={"checkpoints": 2}, eval={"probe_every": 2}), run, progress=False)
    run_scenario(_scenario(), plain, progress=False)
    return run, plain


def test_checkpoints_at_version_0_every_n_and_final(probed_run):
    run, plain = probed_run
    saved = sorted(p.name for p in (run / "checkpoints").glob("*.pt"))
    assert saved == ["v000000.pt", "v000002.pt", "v000004.pt", "v000005.pt"]
    final = torch.load(run / "final_model.pt", weights_only=True)
    last = torch.load(run / "checkpoints" / "v000005.pt", weights_only=True)
    assert all(torch.equal(final[k], last[k]) for k in final)
    # Checkpoints and live probes observe the run without changing it: same trace as the plain run.
    assert (run / "trace.jsonl").read_bytes() == (plain / "trace.jsonl").read_bytes()
    assert not (plain / "checkpoints").exists() and not (plain / "probes_live.csv").exists()


def test_checkpoint_probes_equal_live_probes_and_a_direct_computation(probed_run):
    run, _ = probed_run
    df = probe_run(run)
    live = pd.read_csv(run / "probes_live.csv")
    assert list(df["version"]) == [0, 2, 4, 5] == list(live["version"])
    cols = [c for c in PROBE_COLUMNS if c != "version"]
    np.testing.assert_allclose(df[cols].to_numpy(float), live[cols].to_numpy(float), rtol=1e-6, atol=1e-9)
    body = df[cols].drop(columns="L_secant")
    assert np.isfinite(body.to_numpy(float)).all() and np.isfinite(df["L_secant"].iloc[1:]).all()
    assert (df["B_local"] >= 1).all() and (df["svcca_final_block0"].iloc[-1] == pytest.approx(1.0))

    # Independent check of F and ||grad F||^2 at version 2: plain autograd over each client's data.
    scenario = load_scenario(run / "scenario.yaml")
    prep = prepare_data(scenario)
    model = build_global_model(scenario, prep.data)
    model.load_state_dict(torch.load(run / "checkpoints" / "v000002.pt", weights_only=True))
    grads, losses = [], []
    for idx in prep.parts:
        t = torch.as_tensor(idx)
        model.zero_grad()
        loss = F.cross_entropy(model(prep.data.train.x[t]), prep.data.train.y[t])
        loss.backward()
        losses.append(float(loss.detach()))
        grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]).double().numpy())
    g = np.mean(grads, axis=0)
    row = df[df["version"] == 2].iloc[0]
    assert row["loss"] == pytest.approx(np.mean(losses), rel=1e-5)
    assert row["grad_norm_sq"] == pytest.approx(float(g @ g), rel=1e-4)
    dev = [float(np.sum((gi - g) ** 2)) for gi in grads]
    assert row["zeta2_max"] == pytest.approx(max(dev), rel=1e-4)


def test_fedsim_check_evaluates_the_local_sgd_bound_with_measured_constants(probed_run):
    run, _ = probed_run
    (run / "probes.csv").unlink(missing_ok=True)
    table = check_run(run, progress=False)
    assert (run / "probes.csv").exists()
    measured = json.loads((run / "measured.json").read_text())
    probes = pd.read_csv(run / "probes.csv")
    assert measured["T"] == 5 and measured["K"] == 2 and measured["m"] == 6 and measured["eta_l"] == 0.01
    assert measured["avg_grad_norm_sq"] == pytest.approx(probes.loc[probes["version"] < 5, "grad_norm_sq"].mean())
    assert measured["F0_minus_Fstar"] == pytest.approx(probes["loss"].iloc[0] - probes["loss"].min())
    rows = table[table["quantity"].str.startswith("[local_sgd]")]
    conds = rows[rows["role"] == "condition"]
    # 11 setting and step-size conditions (clipping among them), 3 assumptions, the unverified statement's
    # note and the bound
    assert len(rows) == 16 and len(conds) == 14
    # every condition met, or met only at an estimate from below of a constant (never "not met")
    assert ((conds["holds"] == True) | (conds["verdict"] == "unverified")).all()  # noqa: E712
    assert not rows["note"].str.contains("not evaluated").any()
    thm = rows[rows["quantity"].str.contains("Theorem 1")].iloc[0]
    assert thm["measured"] == pytest.approx(measured["avg_grad_norm_sq"])
    assert np.isfinite(float(thm["bound_or_expectation"]))   # the step-size condition holds in this run
    for fig in ("dissimilarity_over_versions.png", "grad_norm_vs_bound.png", "svcca_by_layer.png"):
        assert (run / "check" / fig).exists()


def test_probes_in_two_processes_equal_one_process(probed_run, tmp_path):
    """`jobs=2` probes in this process and a spawned worker, each checkpoint on one thread with its
    version-keyed random choices, and takes L_secant in version order: the same table to the bit."""
    import shutil

    run, _ = probed_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    one = probe_run(copy, jobs=1, store_activations=True)
    acts = {p.name: dict(np.load(p)) for p in (copy / "probes").glob("*.npz")}
    shutil.rmtree(copy / "probes")
    two = probe_run(copy, jobs=2, store_activations=True)
    pd.testing.assert_frame_equal(one, two, check_exact=True)
    assert list(two["version"]) == [0, 2, 4, 5] and np.isfinite(two["L_secant"].iloc[1:]).all()
    again = {p.name: dict(np.load(p)) for p in (copy / "probes").glob("*.npz")}
    assert sorted(again) == sorted(acts) and len(acts) == 4
    assert all(np.array_equal(acts[f][k], again[f][k]) for f in acts for k in acts[f])


def test_probe_jobs_rule_and_bad_values(probed_run, tmp_path, capsys, monkeypatch):
    import os

    from fedsim.cli import main

    from analysis.probes import CHECKPOINTS_PER_JOB, probe_jobs

    default = ProbeSettings()
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(4)), raising=False)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 4)
    assert CHECKPOINTS_PER_JOB == 2
    # one process per core, at most one per two checkpoints rounded up
    assert [probe_jobs(None, n, default) for n in (1, 2, 3, 4, 5, 8, 21)] == [1, 1, 2, 2, 3, 4, 4]
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)  # e.g. OMP_NUM_THREADS=1: one process
    assert probe_jobs(None, 21, default) == 1
    assert probe_jobs(3, 2, default) == 2 and probe_jobs(4, 1, default) == 1
    # a Lanczos start from the previous probe's eigenvector needs the checkpoints in order, in one process
    assert probe_jobs(4, 21, ProbeSettings(hessian_start="previous")) == 1
    assert probe_jobs(4, 21, ProbeSettings(sigma_samples=0)) == 1
    assert probe_jobs(4, 21, ProbeSettings(hessian_start="random")) == 4
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match="jobs"):
            probe_jobs(bad, 21, default)
    run, _ = probed_run
    assert main(["check", str(run), "--jobs", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["fedsim: error: --jobs: got 0 (allowed: an integer in [1, 1024] processes)"]


def test_a_worker_error_reaches_the_check_as_one_note(probed_run, tmp_path):
    """A checkpoint that cannot be loaded fails in whichever process took it; the check reports it, as
    with one process, instead of hanging or losing it."""
    import shutil

    run, _ = probed_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    for f in ("probes.csv", "measured.json"):
        (copy / f).unlink(missing_ok=True)
    for name in ("v000000.pt", "v000002.pt", "v000004.pt"):
        torch.save({"not_a_weight": torch.zeros(2)}, copy / "checkpoints" / name)
    table = check_run(copy, figures=False, progress=False, jobs=2)
    row = table[table["quantity"] == "probes of the model"].iloc[0]
    assert "not measured" in row["note"] and "RuntimeError" in row["note"]
    assert not (copy / "probes.csv").exists()


def test_probe_config_errors(tmp_path, tiny):
    tiny["output"]["checkpoints"] = 0
    with pytest.raises(ConfigError, match="output.checkpoints"):
        scenario_from_mapping(tiny)
    with pytest.raises(ConfigError, match="no checkpoints"):
        probe_run(tmp_path)


def test_summarise_probes_hand_values(tiny):
    df = pd.DataFrame({
        "version": [0, 3, 6], "loss": [2.0, 1.5, 1.2], "grad_norm_sq": [4.0, 2.0, 1.0],
        "client_grad_sq_mean": [5.0, 3.0, 2.0], "B_local": [1.1, 1.2, 1.4], "grad_diversity": [0.2] * 3,
        "zeta2_mean": [0.5, 0.4, 0.3], "zeta2_max": [0.9, 0.7, 0.8], "sigma2_mean": [1.0, 2.0, 3.0],
        "sigma2_max": [2.0, 2.5, 4.0], "L_hessian": [3.0, 3.5, 3.2], "L_secant": [np.nan, 3.7, 1.0],
    })
    s = summarise_probes(df, scenario_from_mapping(tiny), K=3, m=3)
    assert s["T"] == 6 and s["avg_grad_norm_sq"] == pytest.approx(3.0)   # mean of versions 0 and 3
    assert s["L"] == 3.7 and s["sigma2"] == 4.0 and s["zeta2"] == 0.9
    assert s["F0_minus_Fstar"] == pytest.approx(0.8)
    # a = 1 + b exactly: B = 1, G^2 = 1.
    assert s["B"] == pytest.approx(1.0) and s["G2"] == pytest.approx(1.0)


# ----------------------------------------------------------------------------- the known-constant problem

def _torch_clients(problem, n=32, seed=5):
    rng = Streams(seed).numpy("probe-test", "data")
    data = [problem.torch_data(i, n, rng) for i in range(problem.n_clients)]
    return est.TorchClients(problem.torch_model(), data, quadratic_loss, batch_size=4), data


def _probe(clients, data, w, *, previous=None, sigma_samples=16, seed=0):
    pooled = tuple(torch.cat([d[k] for d in data]) for k in range(2))
    s = ProbeSettings()
    return probe_point(clients, w, sigma_samples=sigma_samples, sigma_rng=np.random.default_rng(seed),
                       hessian_batch=pooled, hessian_rng=np.random.default_rng(seed + 1),
                       hessian_iters=s.hessian_iters, hessian_tol=s.hessian_tol, previous=previous)


def test_probes_recover_L_zeta2_sigma2_of_the_quadratic_construction():
    prob = QuadraticProblem.make(6, 8, L=2.0, mu=0.2, G2=1.5, B=1.0, rng=Streams(9).numpy("probe-test", "b1"))
    c = prob.constants
    clients, data = _torch_clients(prob)
    w = Streams(9).numpy("probe-test", "w").standard_normal(8)
    row, g = _probe(clients, data, w, sigma_samples=200)
    assert row["L_hessian"] == pytest.approx(c.L, rel=0.05)
    assert row["zeta2_max"] == pytest.approx(c.zeta2, rel=0.05)
    assert row["zeta2_mean"] == pytest.approx(c.zeta2_mean, rel=0.05)
    assert row["loss"] == pytest.approx(prob.full_loss(w), rel=1e-9)
    assert row["grad_norm_sq"] == pytest.approx(float(np.sum(prob.full_grad(w) ** 2)), rel=1e-9)
    # B = 1: grad f_i = grad f + e_i, so B-local^2 = 1 + G^2/||grad f||^2.
    assert row["B_local"] == pytest.approx(np.sqrt(1 + c.G2 / row["grad_norm_sq"]), rel=1e-9)
    exact = np.mean([QuadraticProblem.minibatch_variance(*d, w, 4) for d in data])
    assert row["sigma2_mean"] == pytest.approx(exact, rel=0.1)
    # Secant along the top eigenvector of the (shared) Hessian is L exactly; along any direction it is <= L.
    top = np.linalg.eigh(prob.hessians[0])[1][:, -1]
    row2, _ = _probe(clients, data, w + 0.3 * top, previous=(w, g))
    assert row2["L_secant"] == pytest.approx(c.L, rel=1e-9)
    row3, _ = _probe(clients, data, w + 0.5, previous=(w, g))
    assert row3["L_secant"] <= c.L * (1 + 1e-9)


def test_probe_rows_fit_G_and_B_of_the_quadratic_construction():
    prob = QuadraticProblem.make(6, 8, L=1.0, mu=0.05, G2=0.8, B=1.1, rng=Streams(9).numpy("probe-test", "b12"))
    clients, data = _torch_clients(prob)
    rng = Streams(9).numpy("probe-test", "points")
    rows = [_probe(clients, data, 2.0 * rng.standard_normal(8), sigma_samples=1)[0] for _ in range(5)]
    fit = est.fit_bgd_norms([r["client_grad_sq_mean"] for r in rows], [r["grad_norm_sq"] for r in rows])
    assert fit.B == pytest.approx(prob.constants.B, rel=0.05)
    assert fit.G2 == pytest.approx(prob.constants.G2, rel=0.05)


def test_check_uses_live_probes_without_checkpoints_and_reports_unprobeable_checkpoints(probed_run, tmp_path):
    import shutil

    run, plain = probed_run
    live_only = tmp_path / "live"
    shutil.copytree(run, live_only)
    shutil.rmtree(live_only / "checkpoints")
    for f in ("probes.csv", "measured.json"):
        (live_only / f).unlink(missing_ok=True)
    table = check_run(live_only, figures=False, progress=False)
    live = pd.read_csv(live_only / "probes_live.csv")
    thm = table[table["quantity"].str.contains("Theorem 1")].iloc[0]
    assert thm["verdict"] in ("consistent with estimated constants", "above the estimated bound (not a refutation)",
                              "uninformative")
    assert thm["measured"] == pytest.approx(live.loc[live["version"] < 5, "grad_norm_sq"].mean())

    broken = tmp_path / "broken"
    shutil.copytree(plain, broken)
    (broken / "checkpoints").mkdir()
    torch.save({"not_a_weight": torch.zeros(2)}, broken / "checkpoints" / "v000000.pt")
    table = check_run(broken, figures=False, progress=False)
    row = table[table["quantity"] == "probes of the model"].iloc[0]
    assert "not measured" in row["note"]
    thm = table[table["quantity"].str.contains("Theorem 1")].iloc[0]
    assert "not evaluated" in thm["note"]


def test_check_prints_each_estimated_constant_with_its_estimator_and_error(probed_run, tmp_path, capsys):
    """`fedsim check` prints L with its Lanczos residual bound (± and the share of L) and σ² as exact;
    `--exact-probes` probes again to a bound of 1e-6 of L and says so."""
    import shutil

    from fedsim.cli import main

    run, _ = probed_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    for f in ("probes.csv", "measured.json"):
        (copy / f).unlink(missing_ok=True)
    assert main(["check", str(copy)]) == 0
    out = capsys.readouterr().out
    measured = json.loads((copy / "measured.json").read_text())
    probes = pd.read_csv(copy / "probes.csv")
    assert measured["probe_settings"]["hessian_tol"] == 1e-2 and measured["L_err"] is not None
    # the stated error is that of the probe that gave L, and it met the stopping rule
    table = pd.read_csv(copy / "check" / "checks.csv")
    note = table.loc[table["quantity"].str.startswith("probe: L"), "note"].iloc[0]
    if measured["L"] == probes["L_hessian"].max():
        at = probes["L_hessian"].idxmax()
        assert measured["L_err"] == probes.loc[at, "L_hessian_err"] <= 1e-2 * measured["L"]
        assert f"± {measured['L_err']:.3g} (" in out and "Lanczos residual bound" in out
        assert note.startswith("± ") and "below 0.01 of L" in note
    else:  # L from the secant: computed, stated as such
        assert measured["L"] == probes["L_secant"].max() and measured["L_err"] == 0 and "secant" in note
    assert "exact, from every sample's gradient" in out

    assert main(["check", str(copy), "--exact-probes"]) == 0
    out = capsys.readouterr().out
    exact = json.loads((copy / "measured.json").read_text())
    assert exact["probe_settings"]["hessian_tol"] == 1e-6 and "below 1e-06 of L" in out
    again = pd.read_csv(copy / "probes.csv")
    assert (again["L_hessian_err"] <= 1e-6 * again["L_hessian"] + 1e-12).all()
    # the default estimate lies within its stated error of the tighter one
    assert (np.abs(probes["L_hessian"] - again["L_hessian"]) <= probes["L_hessian_err"] + again["L_hessian_err"]).all()
    np.testing.assert_allclose(probes["sigma2_max"], again["sigma2_max"], rtol=1e-12)
    # a plain `fedsim check` keeps the tighter probes rather than measuring again
    assert main(["check", str(copy)]) == 0
    assert json.loads((copy / "measured.json").read_text())["probe_settings"]["hessian_tol"] == 1e-6


def test_probe_row_notes_state_the_estimator_and_its_error():
    from analysis.probes import probe_row_note

    lanczos = {"L": 10.0, "L_err": 0.05, "L_hessian": 10.0, "probe_settings": {"hessian_tol": 0.01, "method": "exact"}}
    assert probe_row_note(lanczos, "L").startswith("± 0.05 (0.50%): Lanczos residual bound")
    assert "below 0.01 of L" in probe_row_note(lanczos, "L")
    assert "secant" in probe_row_note({**lanczos, "L_err": 0.0}, "L")
    assert "no error bound" in probe_row_note({"L": 10.0, "L_err": None, "L_hessian": 10.0}, "L")
    assert probe_row_note(lanczos, "sigma2").startswith("exact")
    sampled = {"probe_settings": {"method": "sampled", "sigma_samples": 16}}
    assert probe_row_note(sampled, "sigma2") == "Monte-Carlo mean over 16 minibatches per client: relative s.e. about 35%"
    assert probe_row_note(lanczos, "zeta2") == ""
