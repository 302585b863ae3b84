"""Declared split exchanges (``fedsim.messages.Exchange``): the split shapes move and charge exactly what an
algorithm declares.  The local-loss example of docs/extending/ is held against its traffic and timeline
worked out by hand from its declaration, the model's layer sizes and the link rates; bad declarations are
refused before the run (or, for a ``client_forward`` that contradicts its declaration, at that iteration)
in one line."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pytest

import fedsim
from fedsim.algorithms import Exchange, ExchangeError, SplitSession, SplitSlots, SplitSlotsConfig
from fedsim.cli import main
from fedsim.runner import run_scenario
from fedsim.sim.trace import load_trace

ROOT = Path(__file__).resolve().parents[1]
EXT = ROOT / "docs" / "extending"

# the scenario below, by hand: digits (64 features, 10 classes), mlp [32, 16] cut after block 1
F = 1e8  # client FLOP/s (fixed, no jitter)
UP, DOWN, LAT = 10e6, 50e6, 0.001  # bit/s each way, one-way latency (dedicated links)
B, E, C = 16, 5, 2  # batch, local iterations, clients per round
CLIENT_FWD = 2 * 64 * 32  # Linear(64 -> 32) forward, per sample
CLIENT_BWD = 2 * 64 * 32  # its weight gradient (the input needs none)
ACT, LABEL = 32 * 4, 8  # cut-layer activations (float32) and an int64 label, bytes per sample
MODEL = (64 * 32 + 32) * 4  # the client part's bytes
SERVER = 3 * (2 * 32 * 16 + 2 * 16 * 10)  # Linear(32 -> 16), Linear(16 -> 10): forward + two backward products
AUX = 6 * 32 * 10  # the example's declared auxiliary head: 6 d m
SERVER_S = 35.58e12 * 0.5  # rtx-3090 fp32 peak x efficiency
OVERHEAD = 0.002


def _scenario(algorithm: dict, **over) -> dict:
    sc = {"name": "exchange", "seed": 3,
          "data": {"name": "digits", "num_clients": 6, "partition": {"method": "shards", "labels_per_client": 2}},
          "model": {"name": "mlp", "hidden": [32, 16]},
          "train": {"lr": 0.05, "batch_size": B, "local_steps": E},
          "devices": {"mix": [{"profile": "jetson-nano", "flops_per_s": F}], "jitter": 0.0},
          "channel": {"uplink": {"model": "fixed", "mbps": UP / 1e6}, "downlink": {"model": "fixed", "mbps": DOWN / 1e6}},
          "network": {"latency_s": LAT},
          "algorithm": {"cut": 1, **({} if "concurrency" in algorithm else {"clients_per_round": C}), **algorithm},
          "stop": {"max_versions": 1}, "eval": {"every_versions": None}, "output": {"figures": False}}
    sc.update(over)
    return sc


def _run(tmp_path: Path, algorithm: dict, **over):
    summary = run_scenario(fedsim.scenario_from_mapping(_scenario(algorithm, **over), source_dir=EXT), tmp_path,
                           progress=False)[0]
    return summary, load_trace(tmp_path)


@pytest.mark.parametrize("k", [2, 3])
def test_local_loss_example_traffic_and_timeline_by_hand(tmp_path, k):
    """Uploads on iterations 0, k, 2k, ... only, no gradient downloads, the auxiliary head on the client on
    every iteration, one server step per uploading iteration, and the clients never wait."""
    s, df = _run(tmp_path, {"name": "local_loss:LocalLossSFL", "upload_every": k})
    uploads = [e for e in range(E) if e % k == 0]
    n_up = math.ceil(E / k)
    assert len(uploads) == n_up
    act_bytes = B * (ACT + LABEL)
    assert s["bytes_up"] == C * (n_up * act_bytes + MODEL)
    assert s["bytes_down"] == C * MODEL  # the client model only: no gradient comes back
    down, up = df[df["kind"] == "download"], df[df["kind"] == "upload"]
    assert len(down) == C and (down["bytes"] == MODEL).all() and not (down["what"] == "gradients").any()
    assert sorted(up["bytes"]) == sorted([act_bytes] * (C * n_up) + [MODEL] * C)

    t_d, t_m = LAT + MODEL * 8 / DOWN, LAT + MODEL * 8 / UP
    t_u = LAT + act_bytes * 8 / UP
    t_f, t_a, t_b = CLIENT_FWD * B / F, AUX * B / F, CLIENT_BWD * B / F
    comp = df[df["kind"] == "compute"].assign(dt=lambda d: d["end"] - d["start"])
    for what, n, dt, flops in (("sfl-forward", E, t_f, CLIENT_FWD * B), ("sfl-aux", E, t_a, AUX * B),
                               ("sfl-backward", E, t_b, CLIENT_BWD * B)):
        rows = comp[comp["what"] == what]
        assert len(rows) == C * n and rows["dt"].to_numpy() == pytest.approx(dt, rel=1e-12)
        assert (rows["flops"] == flops).all()
    # each client's timeline, back to back: the model down, E iterations (forward, the upload where declared,
    # the auxiliary head, backward), the model up
    arrivals, t = {}, t_d
    for e in range(E):
        t += t_f
        if e % k == 0:
            t += t_u
            arrivals[e] = t
        t += t_a + t_b
    end = t + t_m
    for c, g in up.groupby("client"):
        assert g["end"].max() == pytest.approx(end, rel=1e-12)
    steps = df[(df["kind"] == "server") & (df["what"] == "sfl-step")]
    assert len(steps) == n_up
    assert steps["start"].to_numpy() == pytest.approx([arrivals[e] for e in uploads], rel=1e-12)
    assert steps["service"].to_numpy() == pytest.approx(OVERHEAD + SERVER * C * B / SERVER_S, rel=1e-9)
    busy = comp.groupby("client")["dt"].sum()
    assert busy.to_numpy() == pytest.approx(E * (t_f + t_a + t_b), rel=1e-12)


def test_the_classic_exchange_on_the_same_scenario_is_what_the_local_loss_one_removes(tmp_path):
    """The hand-worked numbers above discriminate: the default exchange on the same scenario moves a gradient
    down and an activation up on every iteration, and runs no auxiliary head."""
    s, df = _run(tmp_path, {"name": "minibatch-sfl", "batch_rule": "fixed"})
    assert s["bytes_down"] == C * (MODEL + E * B * ACT)
    assert s["bytes_up"] == C * (E * B * (ACT + LABEL) + MODEL)
    assert (df[df["kind"] == "download"]["what"] == "gradients").sum() == C * E
    assert not (df[df["kind"] == "compute"]["what"] == "sfl-aux").any()


def test_a_barrier_without_a_gradient_waits_for_the_server_step(tmp_path):
    """``wait=True`` with no gradient: each iteration after an upload starts when the server's step ends."""
    _, df = _run(tmp_path / "free", {"name": "local_loss:LocalLossSFL", "upload_every": 2})
    free = df[(df["kind"] == "server") & (df["what"] == "sfl-step")]["end"].tolist()
    _, dw = _run(tmp_path / "barrier", {"name": WaitingLocalLoss, "upload_every": 2})
    steps = dw[(dw["kind"] == "server") & (dw["what"] == "sfl-step")]
    fwd = dw[(dw["kind"] == "compute") & (dw["what"] == "sfl-forward")].sort_values("start")
    for end in steps["end"].tolist()[:-1]:  # the next forward after a step starts exactly when it ends
        assert fwd[fwd["start"] >= end - 1e-15]["start"].min() == pytest.approx(end, rel=1e-12)
    assert steps["end"].max() > max(free)  # waiting made the round longer


def _load_local_loss():
    import sys

    sys.path.insert(0, str(EXT))
    try:
        from local_loss import LocalLossSFL
    finally:
        sys.path.remove(str(EXT))
    return LocalLossSFL


class WaitingLocalLoss(_load_local_loss()):
    """The example with a barrier after every upload (nothing comes back, but the clients wait)."""

    name = "waiting-local-loss"

    def exchange(self) -> Exchange:
        return Exchange(upload_every=self.cfg.upload_every, gradient=False, wait=True,
                        aux_flops=6.0 * self.costs.activation_dim * self.num_classes)


class SlotsLocalLoss(SplitSlots):
    """Asynchronous local-loss split learning, systems only: uploads every 2nd iteration, nothing back."""

    name = "slots-local-loss"

    @dataclass
    class Config(SplitSlotsConfig):
        local_iterations: int | None = E

    def exchange(self) -> Exchange:
        return Exchange(upload_every=2, gradient=False, aux_flops=float(AUX))

    def client_forward(self, s: SplitSession, e: int):
        return len(s.batches[e]) if self.uploads(e) else None

    def client_backward(self, s: SplitSession, e: int) -> None:
        assert s.grad is None

    def plan_server_step(self, msgs):
        return sum(msgs), None

    def server_step(self, msgs, plan) -> None:
        pass


def test_split_slots_run_a_local_loss_exchange(tmp_path):
    s, df = _run(tmp_path, {"name": SlotsLocalLoss, "concurrency": 1, "activation_buffer": 1,
                            "model_buffer": 1},
                 train={"lr": 0.05, "batch_size": B, "local_steps": E, "systems_only": True},
                 stop={"max_versions": 2})
    uploads = df[(df["kind"] == "upload") & (df["what"] == "activations")]
    assert len(uploads) == 2 * math.ceil(E / 2)
    assert not (df[df["kind"] == "download"]["what"] == "gradients").any()
    assert not (df[df["kind"] == "server"]["what"] == "sfl-gradient").any()
    assert (df[df["kind"] == "server"]["what"] == "sfl-step").sum() >= 3
    assert (df[df["kind"] == "compute"]["what"] == "sfl-aux").sum() == 2 * E
    assert s["bytes_down"] == 2 * MODEL


# ------------------------------------------------------------------------------------------ refusals

@pytest.mark.parametrize("kwargs, words", [
    ({"upload_every": 0}, "upload_every must be a whole number >= 1"),
    ({"upload_every": 1.5}, "upload_every must be a whole number >= 1"),
    ({"gradient": True, "wait": False}, "a gradient the client does not wait for"),
    ({"aux_flops": 100.0}, "the auxiliary head would never run"),
    ({"aux_flops": -1.0}, "aux_flops must be a finite number"),
    ({"server_flops": float("nan")}, "server_flops must be a finite number"),
    ({"gradient": "no"}, "gradient must be true or false"),
])
def test_bad_exchanges_are_refused_where_they_are_declared(kwargs, words):
    with pytest.raises(ExchangeError, match=words):
        Exchange(**kwargs)


def test_good_exchanges_say_which_iterations_upload():
    plan = Exchange(upload_every=3, gradient=False)
    assert plan.wait is False and [e for e in range(7) if plan.uploads(e)] == [0, 3, 6] and plan.uploads_in(7) == 3
    assert not any(plan.answered(e) for e in range(7))
    classic = Exchange()
    assert classic.wait is True and all(classic.answered(e) for e in range(4)) and classic.uploads_in(4) == 4


BAD_MODULE = '''
from fedsim.algorithms import Exchange, MiniBatchSFL


class ZeroK(MiniBatchSFL):
    def exchange(self):
        return Exchange(upload_every=0, gradient=False)


class NotAnExchange(MiniBatchSFL):
    def exchange(self):
        return {"upload_every": 2}


class SlotsWait(__import__("fedsim.algorithms", fromlist=["GAS"]).GAS):
    def exchange(self):
        return Exchange(gradient=False, wait=True)

    def client_backward(self, s, e):  # written for no gradient: only the wait is wrong here
        return None


class InheritsBackward(MiniBatchSFL):
    def exchange(self):
        return Exchange(gradient=False)  # but MiniBatchSFL's client_backward applies the server's gradient


class TwoCosts(MiniBatchSFL):
    def exchange(self):
        return Exchange(server_flops=10.0)

    def step_flops(self, samples):
        return 20.0 * samples


class GASEveryOther(__import__("fedsim.algorithms", fromlist=["GAS"]).GAS):
    def exchange(self):
        return Exchange(upload_every=2)


class SaysKUploadsAlways(MiniBatchSFL):
    def exchange(self):
        return Exchange(upload_every=2)
'''


@pytest.mark.parametrize("ref, base, words", [
    ("ZeroK", "minibatch-sfl", "ZeroK.exchange .*upload_every must be a whole number >= 1 .*got 0"),
    ("NotAnExchange", "minibatch-sfl", "NotAnExchange.exchange .*returned dict, not a fedsim.messages.Exchange"),
    ("SlotsWait", "gas", "SlotsWait.exchange .*asynchronous split learning has no barrier"),
    ("TwoCosts", "minibatch-sfl", "TwoCosts.exchange .*one of the two would be ignored"),
    ("InheritsBackward", "minibatch-sfl", "InheritsBackward.exchange .*Exchange\\(gradient=False\\), but "
     "client_backward\\(\\) is MiniBatchSFL's, which applies the server's gradient"),
    ("SaysKUploadsAlways", "minibatch-sfl",
     "MiniBatchSFL.client_forward .*returned \\d+ bytes to upload on local iteration 1, which the declared exchange "
     "does not upload"),
    ("GASEveryOther", "gas", "AsyncSFL.client_forward .*returned a message on local iteration 1, which the declared "
     "exchange does not upload"),
])
def test_a_bad_declaration_is_one_line_and_exit_4(tmp_path, capsys, ref, base, words):
    (tmp_path / "bad_exchange.py").write_text(BAD_MODULE)
    import yaml

    raw = _scenario({"name": f"bad_exchange:{ref}"})
    if base != "minibatch-sfl":
        raw["algorithm"] = {"name": f"bad_exchange:{ref}", "cut": 1, "concurrency": 2}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    code = main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 4 and len(err) == 1, err
    assert err[0].startswith("fedsim: error in your code: ")
    import re

    assert re.search(words, err[0]), err[0]


def test_a_bad_k_in_the_examples_config_is_exit_2(tmp_path, capsys):
    import yaml

    (tmp_path / "s.yaml").write_text(yaml.safe_dump(_scenario({"name": "local_loss:LocalLossSFL", "upload_every": 0})))
    (tmp_path / "local_loss.py").write_text((EXT / "local_loss.py").read_text())
    code = main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "algorithm.upload_every" in err[0], err


def test_the_builtin_local_loss_sfl_is_the_docs_example_bit_for_bit(tmp_path):
    """``local-loss-sfl`` (the built-in decoupled split baseline) and the docs' example written on the public
    API train the same model and write the same systems records; with k = 1 it still moves no gradient."""
    import torch

    over = {"stop": {"max_versions": 2}, "output": {"figures": False, "checkpoints": 2}}
    sa, da = _run(tmp_path / "builtin", {"name": "local-loss-sfl", "upload_every": 2}, **over)
    sb, db = _run(tmp_path / "example", {"name": "local_loss:LocalLossSFL", "upload_every": 2}, **over)
    keep = ["kind", "client", "what", "bytes", "start", "end"]
    sys_kinds = ["download", "upload", "compute", "server"]
    assert da[da["kind"].isin(sys_kinds)][keep].equals(db[db["kind"].isin(sys_kinds)][keep])
    wa, wb = (torch.load(next((tmp_path / d).rglob("final_model.pt")), weights_only=True) for d in ("builtin", "example"))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    _, d1 = _run(tmp_path / "k1", {"name": "local-loss-sfl", "upload_every": 1})
    assert not (d1[d1["kind"] == "download"]["what"] == "gradients").any()
    assert len(d1[(d1["kind"] == "upload") & (d1["what"] == "activations")]) == C * E
