"""The semi-asynchronous loop shape (``SemiAsyncRounds``): a round closes ⌈μN⌉ arrivals and then a clock
later, the framework writes every record, and a rule written on it gets the model each update started from.

A small algorithm written against the public API only runs here, and so does Co-S²P, the built-in on it.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pytest

import fedsim
from fedsim.algorithms import SemiAsyncRounds, Update, quorum
from fedsim.learn.state import State, masked_weighted_average
from fedsim.runner import run_scenario

N = 6


class QuorumAvg(SemiAsyncRounds):
    """Staleness-weighted average over ⌈μN⌉-then-a-clock rounds; it notes what the shape hands it."""

    name = "quorum-avg"

    @dataclass
    class Config:
        mu: float = 0.5
        t_clk: float | None = 0.05
        retry_s: float = 1.0

    seen: list[dict] = []

    def quorum(self) -> int:
        return quorum(self.cfg.mu, self.ctx.num_clients)

    def clock(self) -> float | None:
        return self.cfg.t_clk

    def server_rule(self, updates: list[Update], base: State, bases: list[State]) -> tuple[State, list[float]]:
        weights = [1.0 / (1 + self.ctx.versions.staleness(u)) for u in updates]
        QuorumAvg.seen.append({"bases_ok": all(b is self.loop.history[u.base_version] for u, b in zip(updates, bases)),
                               "base_is_global": base is self.ctx.global_state})
        avg = masked_weighted_average([u.scaled(w) for u, w in zip(updates, weights)], base)
        return avg, [w / sum(weights) for w in weights]

    def before_apply(self, updates: list[Update], weights: list[float], round_: int | None) -> None:
        QuorumAvg.seen[-1].update(round=round_, start=self.loop.round_start, quorum_at=self.loop.quorum_at, end=self.ctx.env.now,
                                  n=len(updates), arrived=[u.info["arrived"] for u in updates],
                                  service=self.ctx.aggregation_service_time(len(updates)))


def _scenario(algorithm: dict, versions: int = 8) -> dict:
    return {"data": {"name": "digits", "num_clients": N, "partition": {"method": "iid"}},
            "model": {"name": "mlp", "hidden": 16}, "train": {"lr": 0.05, "batch_size": 16, "local_steps": 2},
            "devices": {"mix": [{"profile": "jetson-nano"}, {"profile": "jetson-agx-orin-32gb"}], "jitter": 0.3},
            "algorithm": algorithm, "stop": {"max_versions": versions}, "output": {"figures": False}}


def _run(tmp_path: Path, algorithm: dict, versions: int = 8) -> list[dict]:
    QuorumAvg.seen = []
    run_scenario(fedsim.scenario_from_mapping(_scenario(algorithm, versions)), tmp_path, progress=False)
    return _events(tmp_path)


def _events(folder: Path) -> list[dict]:
    return [json.loads(line) for line in next(folder.rglob("trace.jsonl")).read_text().splitlines()]


@pytest.mark.parametrize("mu,t_clk", [(0.5, 0.05), (0.34, 0.0), (1.0, 0.02)])
def test_a_round_takes_the_quorum_then_closes_at_the_clock(tmp_path, mu, t_clk):
    events = _run(tmp_path, {"name": QuorumAvg, "mu": mu, "t_clk": t_clk})
    q = quorum(mu, N)
    rounds = [e for e in events if e["kind"] == "round"]
    assert len(rounds) == len(QuorumAvg.seen) == 8
    for r, seen in zip(rounds, QuorumAvg.seen):
        close = seen["quorum_at"] + t_clk
        assert len(r["clients"]) >= q and seen["n"] == len(r["clients"])
        assert r["end"] <= close + seen["service"] + 1e-9  # no later than quorum + T_clk + the aggregation
        assert max(seen["arrived"]) <= close + 1e-12  # nothing after the close joins the round
        assert sorted(seen["arrived"])[q - 1] == pytest.approx(seen["quorum_at"])  # the clock starts at the q-th
        assert seen["bases_ok"] and seen["base_is_global"]
    # every client is dispatched at the start and again only after its update was consumed
    dispatches = [e for e in events if e["kind"] == "dispatch"]
    assert sorted(e["client"] for e in dispatches if e["t"] == 0) == list(range(N))
    consumed = sum(len(r["clients"]) for r in rounds)
    assert len(dispatches) == N + consumed


def test_without_a_clock_each_round_is_exactly_the_quorum(tmp_path):
    events = _run(tmp_path, {"name": QuorumAvg, "mu": 0.5, "t_clk": None})
    rounds = [e for e in events if e["kind"] == "round"]
    assert rounds and all(len(r["clients"]) == quorum(0.5, N) for r in rounds)
    # stale updates carry their staleness, computed by the framework
    assert any(e["staleness"] > 0 for e in events if e["kind"] == "apply")


def test_cos2p_rounds_hold_the_quorum_and_end_by_the_clock_plus_service(tmp_path):
    mu, t_clk = 0.5, 0.01
    algo = {"name": "cos2p", "mu": mu, "t_clk": t_clk, "mask_rounds": 1}
    scen = _scenario(algo, versions=5)
    scen["model"] = {"name": "vit", "depth": 4, "options": {"embed_dim": 16, "heads": 2, "mlp_ratio": 1.0, "patch": 4}}
    scen["data"]["name"] = "digits32"
    scen["devices"] = {"mix": [{"profile": "jetson-xavier-nx-8gb"}, {"profile": "jetson-agx-orin-32gb"}],
                       "jitter": 0.2}
    run_scenario(fedsim.scenario_from_mapping(scen), tmp_path, progress=False)
    events = _events(tmp_path)
    measured = {e["round"]: e for e in events if e["kind"] == "cos2p_round"}
    served = {round(e["end"], 12): e for e in events if e["kind"] == "server" and e["what"] == "aggregate"}
    rounds = [e for e in events if e["kind"] == "round"]
    assert len(rounds) == 5
    for r in rounds:
        srv = served[round(r["end"], 12)]
        assert len(r["clients"]) >= math.ceil(mu * N)
        assert srv["start"] <= measured[r["round"]]["quorum_at"] + t_clk + 1e-9
        assert r["end"] <= measured[r["round"]]["quorum_at"] + t_clk + srv["wait"] + srv["service"] + 1e-9
