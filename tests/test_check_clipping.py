"""Whether gradient clipping bound, recorded by the trainer and read by ``fedsim check``: a clip_norm that
never binds leaves the steps plain SGD's (the condition is met and the theorem is judged as without it); one
that binds is not the method the theorems bound (not met, with the count of clipped steps)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from analysis.report import check_run, clipping_record
from analysis.theory.local_sgd import CLIP_ROW, clipping_condition
from fedsim import load_scenario
from fedsim.learn.sgd import SGDConfig, local_sgd
from fedsim.runner import run_scenario
from fedsim.sim.trace import load_trace, trace_path

#: the discrimination suite's certified quadratic (benchmarks/discrimination.py): 4 clients, full batch, K = 1
CERTIFIED = ["data.num_clients=4", "data.options={builder: make, dim: 4, L: 1.0, mu: 1.0, G2: 50.0, samples: 8}",
             "train.batch_size=8", "train.local_steps=1", "train.lr=0.04", "stop.max_versions=60",
             "output.checkpoints=1", "output.figures=false", "eval.every_versions=60", "algorithm.clients_per_round=4"]


def test_local_sgd_counts_the_steps_clipping_scaled_down():
    """One linear layer, squared loss at w = 0: the full-batch gradient norm is known in closed form, so a
    clip just under it binds on the first step and one far above never does."""
    torch.manual_seed(0)
    x, y = torch.randn(8, 3), torch.randn(8)
    model = torch.nn.Linear(3, 1, bias=False)
    torch.nn.init.zeros_(model.weight)
    g0 = float((x.T @ (x @ torch.zeros(3) - y) / 8).norm())  # gradient of (1/2n)||Xw - y||^2 at w = 0
    for clip, clipped in ((0.5 * g0, True), (1e6, False)):
        torch.nn.init.zeros_(model.weight)
        stats = local_sgd(model, x, y.view(-1, 1), np.arange(8), SGDConfig(lr=1e-3, batch_size=8, local_steps=3,
                          clip_norm=clip), torch.Generator().manual_seed(0), task="regression")
        assert stats.max_grad_norm == pytest.approx(g0, rel=1e-5)  # the first step's, the largest at this lr
        assert (stats.clipped_steps == 3) if clipped else (stats.clipped_steps == 0)
    stats = local_sgd(model, x, y.view(-1, 1), np.arange(8), SGDConfig(lr=1e-3, batch_size=8, local_steps=2),
                      torch.Generator().manual_seed(0), task="regression")
    assert stats.clipped_steps is None and stats.max_grad_norm is None  # no clipping: nothing recorded


def test_the_condition_in_both_directions_and_without_a_record():
    assert clipping_condition(None, None).holds is True
    never = clipping_condition(1e6, {"clipped_steps": 0, "steps": 240, "max_grad_norm": 10.3})
    assert never.quantity == CLIP_ROW and never.holds is True and "0 of 240" in never.note
    bound = clipping_condition(0.01, {"clipped_steps": 17, "steps": 240, "max_grad_norm": 10.3})
    assert bound.holds is False and bound.measured == 17 and "17 of 240" in bound.note
    assert clipping_condition(0.01, None).holds is False  # not recorded: taken to bind (the conservative side)


def _rows(table, text):
    return table[table["quantity"].astype(str).str.contains(text, regex=False)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = {}
    for name, clip in (("binds", "0.01"), ("never", "1e6"), ("none", None)):
        run = tmp_path_factory.mktemp(f"clip-{name}")
        run_scenario(load_scenario("quadratic", CERTIFIED + ([f"train.clip_norm={clip}"] if clip else [])), run,
                     progress=False)
        out[name] = (run, check_run(run, figures=False, progress=False))
    return out


def test_a_tiny_clip_norm_binds_and_the_theorem_does_not_apply(runs):
    run, table = runs["binds"]
    rec = clipping_record(load_trace(trace_path(run)))
    assert rec["clipped_steps"] == rec["steps"] == 240  # 60 versions x 4 clients x 1 step, each clipped
    row = _rows(table, CLIP_ROW).iloc[0]
    assert row["holds"] is False or row["holds"] == False  # noqa: E712 (a pandas bool)
    assert "240 of 240" in row["note"]
    thm = _rows(table, "Theorem A: (1/T)")
    assert (thm["role"] == "bound").all() and (thm["verdict"] == "not applicable").all()


def test_a_huge_clip_norm_never_binds_and_the_verdict_is_the_unclipped_ones(runs):
    run, table = runs["never"]
    rec = clipping_record(load_trace(trace_path(run)))
    assert rec["clipped_steps"] == 0 and rec["steps"] == 240 and math.isfinite(rec["max_grad_norm"])
    row = _rows(table, CLIP_ROW).iloc[0]
    assert bool(row["holds"]) and "never bound" in row["note"]
    plain = runs["none"][1]
    for key in ("Theorem A: (1/T)", "Theorem B: min_t"):
        got, want = _rows(table, key).iloc[0], _rows(plain, key).iloc[0]
        assert got["verdict"] == want["verdict"] == ("holds" if "Theorem A" in key else want["verdict"])
        assert got["measured"] == pytest.approx(want["measured"], rel=1e-12)  # the same steps, bit for bit
