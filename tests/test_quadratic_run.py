"""The ``quadratic`` regression task: a real fedsim FedAvg run held against the local-SGD bound by ``fedsim check``.

Every number the check reports is compared with the same quantity computed independently from the
:class:`~fedsim.learn.quadratic.QuadraticProblem` behind the dataset (rebuilt from the run's seed), in
float64 numpy, at the weights of the run's checkpoints.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

from analysis.probes import checkpoints
from analysis.report import check_run
from analysis.theory import local_sgd
from fedsim.errors import ConfigError
from fedsim.learn.data import load_dataset, quadratic_problem
from fedsim.learn.models import build_model
from fedsim.learn.partition import partition_summary
from fedsim.learn.quadratic import quadratic_loss
from fedsim.learn.sgd import evaluate, half_squared_error, loss_for
from fedsim.build import prepare_data
from fedsim.runner import run_scenario
from fedsim import load_scenario
from fedsim.sim.rng import Streams

SPREADS = (2.0, 0.5)   # center_spread: the spread of the client optima, then 4x tighter
SEEDS = (0, 1, 2)


def _weights(path) -> np.ndarray:
    state = torch.load(path, weights_only=True)
    return state["blocks.0.1.weight"].double().numpy().ravel()


def _run(tmp_path, spread: float, seed: int) -> dict:
    """Run the built-in scenario at one heterogeneity level, check it, and recompute its numbers exactly."""
    scenario = load_scenario("quadratic", [f"seed={seed}", f"data.options.center_spread={spread}",
                                           "output.figures=false"])
    out = tmp_path / f"s{spread}-seed{seed}"
    run_scenario(scenario, out, progress=False)
    table = check_run(out, figures=False, progress=False).set_index("quantity")
    measured = json.loads((out / "measured.json").read_text())
    prob = quadratic_problem(Streams(seed).numpy("data", "load"), scenario.data.num_clients, scenario.data.options)
    found = checkpoints(out)
    T = max(found)
    ws = {v: _weights(p) for v, p in found.items()}
    grad_sq = [float(np.sum(prob.full_grad(w) ** 2)) for v, w in ws.items() if v < T]
    zeta2 = max(float(np.sum((prob.grad(i, w) - prob.full_grad(w)) ** 2))
                for w in ws.values() for i in range(prob.n_clients))
    metrics = pd.read_csv(out / "metrics.csv")
    return {"table": table, "measured": measured, "prob": prob, "scenario": scenario, "T": T,
            "exact_avg": float(np.mean(grad_sq)), "exact_zeta2": zeta2,
            "final_test_loss": float(metrics["loss"].iloc[-1]), "final_w": ws[T]}


def test_fedavg_on_the_quadratic_stays_below_the_local_sgd_bound_and_heterogeneity_orders_both(tmp_path):
    """Acceptance: on the quadratic task, FedAvg's measured (1/T) Σ‖∇F(w_t)‖² stays below Yang, Fang & Liu's
    Theorem 1 evaluated with the run's probed constants, at both heterogeneity levels; tightening the
    client optima (center_spread 2.0 → 0.5) lowers the bound in every run and the measured average over
    seeds.

    Why seeds are averaged for the measured side: with the same seed the two levels share the problem's
    Hessians, the initial model and every minibatch, so w_t − w*(s) = P_t + s·Q_t and the measured average
    is a + 2bs + cs².  The cross term b (the shared transient from the initial model against the drift
    and noise) has no fixed sign; on some seeds it nearly cancels the gain.  The mean over three problems
    and noise draws is what the theorem's expectation speaks about.

    Why the probed L is compared with L_global: the probe measures the curvature of F = (1/m) Σ F_i (its
    Hessian on a probe subset that here holds every sample, so exactly Ā = (1/m) Σ A_i, plus secants of
    F), which is λ_max(Ā) = L/(1 + hessian_spread).  The theorem's L bounds every client's Hessian; the
    bound grows with L, so it is also checked at the construction's L, where it is looser.  ζ² has no
    finite global value here (the Hessians differ); the probe's ζ² is the maximum along the run's
    iterates, compared with the same maximum computed from the problem at the checkpoints.
    """
    runs = {(s, seed): _run(tmp_path, s, seed) for s in SPREADS for seed in SEEDS}
    thm_key = "[local_sgd] Theorem 1: (1/T) sum E||grad f(x_t)||^2"
    for (s, seed), r in runs.items():
        table, m, prob = r["table"], r["measured"], r["prob"]
        thm = table.loc[thm_key]
        assert thm["holds"] is not None and bool(thm["holds"]), (s, seed, thm)
        assert float(thm["measured"]) <= float(thm["bound_or_expectation"])
        assert thm["verdict"] != "refuted"
        # the per-client smoothness and F* the run's data certify are the construction's (float32 data)
        assert m["certified"]["L"]["value"] == pytest.approx(prob.constants.L, rel=1e-5)
        assert m["certified"]["F_star"]["value"] == pytest.approx(prob.f_star, rel=1e-4, abs=1e-5)
        for k in ("step size eta_l <= 1/(8LK)", "step size eta*eta_l <= 1/(KL)", "c = 1/2 - 15K^2 eta_l^2 L^2 > 0"):
            assert bool(table.loc[f"[local_sgd] {k}", "holds"])
        # the left side is the run's own average of ||grad F||^2, recomputed exactly from its checkpoints
        assert float(thm["measured"]) == pytest.approx(r["exact_avg"], rel=1e-4)
        assert m["T"] == r["T"] == 60 and m["K"] == 5 and m["m"] == prob.n_clients
        # probed constants against the construction's
        c = prob.constants
        assert m["L"] == pytest.approx(c.L_global, rel=0.05)
        assert c.L_global == pytest.approx(c.L / 1.5, rel=1e-9)
        assert m["zeta2"] == pytest.approx(r["exact_zeta2"], rel=0.05)
        # the bound at the theorem's per-client L (= 1 by construction, lr = 1/(8LK) exactly) holds too
        assert r["scenario"].train.lr <= 1.0 / (8 * c.L * 5) * (1 + 1e-12)
        strict = local_sgd.bound(eta_l=m["eta_l"], K=m["K"], m=m["m"], T=m["T"], L=c.L, sigma2=m["sigma2"],
                                 zeta2=m["zeta2"], F0_minus_Fstar=m["F0_minus_Fstar"])
        # the bound is evaluated at that certified L and the certified gap F(w0) - F* (>= the run's own drop)
        assert float(thm["bound_or_expectation"]) >= strict * (1 - 1e-9) and float(thm["measured"]) <= strict
        # the held-out test loss is the global objective f itself (fresh rows, same quadratics)
        assert r["final_test_loss"] == pytest.approx(prob.full_loss(r["final_w"]), rel=1e-5)
    for seed in SEEDS:
        hi, lo = (runs[(s, seed)]["table"].loc[thm_key] for s in SPREADS)
        assert float(lo["bound_or_expectation"]) < float(hi["bound_or_expectation"]), seed
        assert runs[(SPREADS[1], seed)]["measured"]["zeta2"] < runs[(SPREADS[0], seed)]["measured"]["zeta2"]
    mean_hi = np.mean([float(runs[(SPREADS[0], seed)]["table"].loc[thm_key, "measured"]) for seed in SEEDS])
    mean_lo = np.mean([float(runs[(SPREADS[1], seed)]["table"].loc[thm_key, "measured"]) for seed in SEEDS])
    assert mean_lo < mean_hi


# ----------------------------------------------------------------------------- the pieces

OPTS = {"dim": 6, "samples": 12, "test_samples": 8, "center_spread": 1.5}


def test_each_clients_empirical_loss_is_its_quadratic():
    rng = Streams(4).numpy("data", "load")
    data = load_dataset("quadratic", num_clients=5, rng=rng, options=OPTS)
    prob = quadratic_problem(Streams(4).numpy("data", "load"), 5, OPTS)
    assert data.train.task == "regression" and data.train.num_classes == 0 and data.train.num_outputs == 1
    assert data.train.y.dtype == torch.float32 and data.train.input_shape == (6,)
    assert len(data.natural_partition) == 5 and len(data.train) == 5 * 12 and len(data.test) == 5 * 8
    model = build_model("linear", (6,), 1, seed_generator=torch.Generator().manual_seed(1))
    assert [n for n, _ in model.named_parameters()] == ["blocks.0.1.weight"]   # no bias: y = x·w exactly
    w = model.blocks[0][1].weight.detach().double().numpy().ravel()
    for i, idx in enumerate(data.natural_partition):
        acc, loss = evaluate(model, data.train.subset(idx))
        assert math.isnan(acc)
        assert loss == pytest.approx(prob.loss(i, w), rel=1e-5)
    # the test split is fresh rows of the same quadratics: its mean loss is f = (1/m) sum f_i
    assert evaluate(model, data.test)[1] == pytest.approx(prob.full_loss(w), rel=1e-5)


def test_regression_loss_is_the_quadratic_loss_convention():
    x = torch.randn(7, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    y = torch.randn(7, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    lin = torch.nn.Linear(3, 1, bias=False).double().requires_grad_(False)
    hand = 0.5 * float(((x @ lin.weight.detach().ravel() - y) ** 2).mean())
    assert float(loss_for("regression")(lin(x), y)) == pytest.approx(hand, rel=1e-12)
    assert float(quadratic_loss(lin, x, y)) == pytest.approx(hand, rel=1e-12)
    assert float(half_squared_error(lin(x), y, reduction="sum")) == pytest.approx(7 * hand, rel=1e-12)
    assert loss_for("classification") is torch.nn.functional.cross_entropy
    with pytest.raises(ConfigError, match="allowed: classification, regression"):
        loss_for("ranking")
    with pytest.raises(ConfigError, match="one output"):
        half_squared_error(torch.zeros(7, 2), torch.zeros(7))


def test_label_noise_keeps_gradients_exact_and_shifts_the_loss():
    prob = quadratic_problem(Streams(2).numpy("q"), 3, {"dim": 4})
    x, y = prob.torch_data(0, 20, Streams(2).numpy("rows"), noise=0.7)
    w = Streams(2).numpy("w").standard_normal(4)
    lin = prob.torch_model(w)
    loss = quadratic_loss(lin, x, y)
    loss.backward()
    assert float(loss.detach()) == pytest.approx(prob.loss(0, w) + 0.5 * 0.7**2, rel=1e-10)
    assert lin.weight.grad.numpy().ravel() == pytest.approx(prob.grad(0, w), rel=1e-8, abs=1e-10)


def test_quadratic_options_and_label_partitions_are_refused_with_clear_errors():
    with pytest.raises(ConfigError, match="unknown builder 'bowl'"):
        load_dataset("quadratic", options={"builder": "bowl"})
    with pytest.raises(ConfigError, match="G2.*another builder"):
        load_dataset("quadratic", options={"builder": "heterogeneous", "G2": 2.0})
    with pytest.raises(ConfigError, match="samples.*at least dim=10"):
        load_dataset("quadratic", options={"samples": 4})
    with pytest.raises(ConfigError, match="unknown option 'alpha'"):
        load_dataset("quadratic", options={"alpha": 1.0})
    made = load_dataset("quadratic", num_clients=4, options={"builder": "make", "G2": 2.0, "dim": 5, "samples": 5})
    assert len(made.natural_partition) == 4
    for method in ("dirichlet", "shards"):
        sc = load_scenario("quadratic", [f"data.partition.method={method}"])
        with pytest.raises(ConfigError, match=f"'{method}' splits by class label.*allowed: iid, quantity, natural"):
            prepare_data(sc)
    parts = prepare_data(load_scenario("quadratic", ["data.partition.method=iid"])).parts
    assert sorted(np.concatenate(parts).tolist()) == list(range(8 * 32))
    table = partition_summary(parts, np.zeros(8 * 32, np.float32), 0)
    assert list(table.columns) == ["client", "samples"] and table["samples"].sum() == 8 * 32
    with pytest.raises(ConfigError, match="no class labels"):
        made.train.label_counts()


def test_split_learning_refuses_a_regression_task(tmp_path):
    sc = load_scenario("gas", ["data.name=quadratic", "data.num_clients=8", "data.partition.method=natural",
                               "model.name=mlp", "stop.max_versions=1", "output.figures=false"])
    with pytest.raises(ConfigError, match="data.name: split learning.*'quadratic' is a regression task"):
        run_scenario(sc, tmp_path, progress=False)
