"""SemiSFL against independent computations: MiniBatch-SFL, the spec's byte formulas, a hand-worked K_s
sequence, the FIFO queue, the contrastive loss by hand, hidden labels, augmentations and bad input."""
from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from fedsim.algorithms.semisfl import SemiSFL
from fedsim.cli import main
from fedsim.learn.augment import strong_view, weak_view
from fedsim.learn.partition import partition
from fedsim.algorithms.semisfl_parts import FeatureQueue, KsController, contrastive_loss
from fedsim.runner import run_scenario
from fedsim import scenario_from_mapping

BASE = {
    "name": "semisfl-test",
    "seed": 1,
    "data": {"name": "digits", "num_clients": 4, "partition": {"method": "iid"}},
    "model": {"name": "cnn"},
    "train": {"lr": 0.05, "momentum": 0.9, "weight_decay": 5.0e-4, "batch_size": 8, "local_steps": 3, "clip_norm": 5.0},
    "devices": {"mix": [{"profile": "jetson-nano"}], "jitter": 0.0},
    "channel": {"preset": "semisfl-edge"},
    "network": {"latency_s": 0.0},
    "algorithm": {"name": "semisfl", "cut": 2, "clients_per_round": 3, "labeled": 50, "k_s": 2, "tau": 0.3,
                  "queue_size": 32, "weak": "crop", "strong": "randaugment", "adapt": "none"},
    "stop": {"max_versions": 2},
    "eval": {"every_versions": 1, "max_samples": 64},
    "output": {"figures": False},
}


def _run(mapping: dict, out: Path) -> Path:
    run_scenario(scenario_from_mapping(mapping), out, progress=False)
    return out


def _events(run: Path, kind: str) -> list[dict]:
    return [d for d in map(json.loads, (run / "trace.jsonl").read_text().splitlines()) if d["kind"] == kind]


def test_without_unlabeled_terms_and_ks0_a_client_phase_equals_minibatch_sfl(tmp_path):
    """Labels on every client sample (pseudo-labels replaced, mask 1), no C, no T, K_s = 0, no augmentation:
    one SemiSFL round is one MiniBatch-SFL round on the same batches (same clients, streams, optimizer)."""
    semi = copy.deepcopy(BASE)
    semi["stop"]["max_versions"] = 1
    semi["algorithm"] = {"name": "semisfl", "cut": 2, "clients_per_round": 4, "labeled": 0, "k_s": 0,
                         "client_labeled_fraction": 1.0, "clustering": False, "supcon": False, "adapt": "none",
                         "weak": "none", "strong": "none", "evaluate": "student"}
    mb = copy.deepcopy(semi)
    mb["algorithm"] = {"name": "minibatch-sfl", "cut": 2, "clients_per_round": 4, "batch_rule": "fixed",
                       "aggregate_weights": "uniform"}
    a = torch.load(_run(semi, tmp_path / "semi") / "final_model.pt")
    b = torch.load(_run(mb, tmp_path / "mb") / "final_model.pt")
    assert set(a) == set(b)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6)
    from fedsim.build import build_global_model, prepare_data
    sc = scenario_from_mapping(semi)
    w0 = build_global_model(sc, prepare_data(sc).data).state_dict()
    assert max(float((a[k] - w0[k]).abs().max()) for k in a) > 1e-3  # it did train


def test_traffic_per_round_equals_the_byte_formulas(tmp_path):
    """Spec §3: down 2|w_c| + K_u·B·d·4, up |w_c| + K_u·2·B·d·4 per selected client (fp32, no labels)."""
    run = _run(BASE, tmp_path / "r")
    wc_params = (16 * 1 * 9 + 16) + (32 * 16 * 9 + 32)  # cnn conv blocks on 1x8x8 digits
    wc_bytes = 4 * wc_params
    d = 32 * 2 * 2  # 32 channels on a 2x2 map after two 2x2 pools
    B, K_u, N_h = 8, 3, 3
    rounds = _events(run, "semisfl_round")
    assert len(rounds) == 2
    for r in rounds:
        assert len(r["clients"]) == N_h
        assert r["bytes_down"] == N_h * (2 * wc_bytes + K_u * B * d * 4)
        assert r["bytes_up"] == N_h * (wc_bytes + K_u * 2 * B * d * 4)


def test_ks_controller_paper_version_decides_only_on_full_spans_by_hand():
    """Eq. 10 with R_h = (1/P) Σ I_n over a full span of P = 3 indicators, applied once per span."""
    # K_min = floor(8 · 10/100 · 5) = 4; windows of 2 rounds, so indicator n lands at round 2(n + 1)
    ctl = KsController(k_s=20, mode="paper", alpha=2.0, beta=8.0, n_labeled=10, n_total=100, window=2, periods=3)
    s_win = [10, 9, 7, 6.5, 6, 5.5, 5, 4.5, 4, 3.5]  # window means (both rounds of a window equal)
    u_win = [8, 6, 5.5, 4.5, 4.25, 3.25, 3, 2.75, 2.5, 2.25]
    f_s = [v for v in s_win for _ in range(2)]
    f_u = [v for v in u_win for _ in range(2)]
    # drops s: 1, 2, .5, .5, .5, .5, .5, .5, .5;  u: 2, .5, 1, .25, 1, .25, .25, .25, .25
    # I_n = [u drop > s drop]: 1, 0, 1, 0, 1, 0, 0, 0, 0
    # span 1 (rounds 4, 6, 8): R_h = 2/3 >= 0.5 at round 8 -> K_s = max(floor(20/2), 4) = 10
    # span 2 (rounds 10, 12, 14): R_h = 1/3 -> unchanged; span 3 (16, 18, 20): R_h = 0 -> unchanged
    got = []
    for h, (s, u) in enumerate(zip(f_s, f_u), start=1):
        got.append(ctl.record(s, u, 0.1, 5))
        if h < 8:  # before the first full span: no decision, no R_h (one indicator at round 4 was 1)
            assert math.isnan(ctl.r_h)
        if h == 8:
            assert ctl.r_h == pytest.approx(2 / 3)
        if h == 14:
            assert ctl.r_h == pytest.approx(1 / 3)
    assert ctl.indicators == [1, 0, 1, 0, 1, 0, 0, 0, 0]
    assert got == [20] * 7 + [10] * 13
    assert ctl.r_h == 0.0


def test_ks_controller_paper_version_ignores_a_partial_span():
    """One early indicator of 1 (R_h = 1 on partial evidence) must not lower K_s before P indicators exist."""
    ctl = KsController(k_s=20, mode="paper", alpha=1.5, window=1, periods=10)
    got = [ctl.record(s, u, 0.1, 5) for s, u in zip([5, 5, 5, 5], [5, 3, 1, 0])]
    assert ctl.indicators == [1, 1, 1]
    assert got == [20, 20, 20, 20] and math.isnan(ctl.r_h)


def test_ks_controller_code_version_normalises_by_lr_and_steps():
    """The code's system_control: windows of 2, check every 2·2 rounds once 2·3 exist."""
    ctl = KsController(k_s=20, mode="code", alpha=1.5, beta=8.0, n_labeled=10, n_total=100, window=2, periods=2)
    f_s = [11, 11, 10, 10, 9, 9, 8, 8]
    f_u = [6, 6, 5, 5, 4, 4, 3.5, 3.5]
    got = [ctl.record(s, u, 0.1, 5) for s, u in zip(f_s, f_u)]
    # at h = 8: windows (10, 9, 8) and (5, 4, 3.5); dx = 1/0.1/20 = 0.5, du = (1, 0.5)/0.1/5 = (2, 1):
    # du − dx ≥ 1e-5 twice → R = 1 → round(max(20/1.5, 8·5·10/100)) = 13
    assert got == [20] * 7 + [13]
    assert ctl.r_h == 1.0
    # the paper's unnormalised comparison would see u fall 0.5 < s fall 1 in the last window
    paper = KsController(k_s=20, mode="paper", alpha=1.5, window=2, periods=2)
    for s, u in zip(f_s, f_u):
        paper.record(s, u, 0.1, 5)
    assert paper.indicators[-1] == 0


def test_fifo_queue_holds_exactly_the_last_q_projections():
    q = FeatureQueue(dim=2, size=6)
    keys = torch.arange(24, dtype=torch.float32).reshape(12, 2)
    labels = torch.arange(12)
    for a, b in ((0, 3), (3, 7), (7, 12)):
        q.push(keys[a:b], labels[a:b], labels[a:b] % 2 == 0)
    assert len(q) == 6
    assert torch.equal(q.keys, keys[6:12]) and torch.equal(q.labels, labels[6:12])
    assert q.masks.tolist() == [True, False, True, False, True, False]
    q.push(keys[:1], labels[:1])
    assert q.labels.tolist() == [7, 8, 9, 10, 11, 0]
    with pytest.raises(Exception, match="queue_size"):
        FeatureQueue(dim=2, size=0)


def test_clustering_loss_by_hand():
    """Eq. 5 on two anchors, their two keys and one queue entry, computed with numpy."""
    q = torch.nn.functional.normalize(torch.tensor([[1.0, 0.0], [0.6, 0.8]]), dim=1)
    k = torch.nn.functional.normalize(torch.tensor([[0.8, 0.6], [0.0, 1.0]]), dim=1)
    labels = torch.tensor([0, 1])
    masks = torch.tensor([True, False])  # the second key is not confident: never a positive
    queue = FeatureQueue(2, 4)
    queue.push(torch.tensor([[1.0, 0.0]]), torch.tensor([1]), torch.tensor([True]))
    kappa = 0.5
    got = float(contrastive_loss(q, k, labels, queue, kappa, masks=masks))
    refs = np.array([[0.8, 0.6], [0.0, 1.0], [1.0, 0.0]])
    ref_lab, ref_mask = [0, 1, 1], [1, 0, 1]
    losses = []
    for a, la in zip(q.numpy(), [0, 1]):
        logits = refs @ a / kappa
        logp = logits - np.log(np.exp(logits).sum())
        pos = [j for j in range(3) if ref_lab[j] == la and ref_mask[j]]
        losses.append(-np.mean(logp[pos]) if pos else 0.0)
    assert got == pytest.approx(float(np.mean(losses)), rel=1e-6)
    assert len(queue) == 3  # the batch keys were enqueued after the loss


def test_labeled_keys_are_never_positives_of_the_clustering_regulariser():
    """Eq. 5: a supervised-phase key (pushed without masks) with the anchor's label is not a positive; only
    the confident batch key is.  Hand computation over the references [batch key, labeled key]."""
    queue = FeatureQueue(2, 4)
    labeled_key = torch.tensor([[1.0, 0.0]])
    queue.push(labeled_key, torch.tensor([0]))  # the supervised phase enqueues without masks
    assert queue.masks.tolist() == [False]
    q = torch.tensor([[1.0, 0.0]])
    k = torch.nn.functional.normalize(torch.tensor([[0.6, 0.8]]), dim=1)
    kappa = 0.5
    got = float(contrastive_loss(q, k, torch.tensor([0]), queue, kappa, masks=torch.tensor([True])))
    a, b = 0.6 / kappa, 1.0 / kappa  # logits of the batch key and of the labeled key
    assert got == pytest.approx(-(a - math.log(math.exp(a) + math.exp(b))), rel=1e-6)
    # counting the labeled key as a positive would give the mean over both references instead
    both = -0.5 * ((a + b) - 2 * math.log(math.exp(a) + math.exp(b)))
    assert abs(got - both) > 0.1
    # with no confident batch key the anchor has no positive at all: C = 0 although the labeled key matches
    queue2 = FeatureQueue(2, 4)
    queue2.push(labeled_key, torch.tensor([0]))
    assert float(contrastive_loss(q, k, torch.tensor([0]), queue2, kappa, masks=torch.tensor([False]))) == 0.0


@pytest.mark.parametrize("algo, server_views", [("fedswitch-sl", ["weak_view"] * 2),
                                                ("semisfl", ["strong_view"] * 4)])
def test_fedswitch_sl_server_sees_weak_views_only(tmp_path, monkeypatch, algo, server_views):
    """The views drawn inside the supervised phase: FedSwitch-SL weak only (K_s = 2 steps, no T); SemiSFL
    two strong views per step (CE view + SupCon key view).  Both clients still send strong student views."""
    import fedsim.algorithms.semisfl as mod

    calls: list[tuple[str, bool]] = []
    inside = [False]
    real_sup = mod.SemiSFL.supervised_phase

    def sup(self, *args):
        inside[0] = True
        try:
            return real_sup(self, *args)
        finally:
            inside[0] = False

    monkeypatch.setattr(mod.SemiSFL, "supervised_phase", sup)
    for name in ("strong_view", "weak_view"):
        real = getattr(mod, name)
        monkeypatch.setattr(mod, name, lambda *a, _r=real, _n=name, **k: (calls.append((_n, inside[0])), _r(*a, **k))[1])
    m = copy.deepcopy(BASE)
    m["stop"]["max_versions"] = 1
    m["algorithm"]["name"] = algo
    _run(m, tmp_path / algo)
    assert [n for n, ins in calls if ins] == server_views
    assert ("strong_view", False) in calls and ("weak_view", False) in calls


FL_ALGO = {"clients_per_round": 3, "labeled": 50, "k_s": 2, "weak": "crop", "strong": "randaugment"}


@pytest.mark.parametrize("algo", ["semisfl", "semifl", "fedswitch", "fedmatch"])
def test_hidden_labels_never_reach_a_loss(tmp_path, monkeypatch, algo):
    """Relabel every hidden sample after set-up: the trained model is bit-identical (and, for SemiSFL, the
    impurity metric, which does read them, changes)."""
    from fedsim.algorithms.semifl import SemiFL

    mapping = copy.deepcopy(BASE)
    if algo == "semisfl":
        mapping["algorithm"]["tau"] = 0.1  # every max-softmax of 10 classes passes: pseudo-labels are used
    else:
        mapping["algorithm"] = {"name": algo, **FL_ALGO, "tau": 0.1}
    plain = _run(mapping, tmp_path / "plain")
    cls, hook = (SemiSFL, "setup") if algo == "semisfl" else (SemiFL, "__init__")
    original = getattr(cls, hook)

    def scrambled(self, *args):
        original(self, *args)
        if self.ctx.versions.run_dir is None:  # the pre-flight's throwaway context (same data): leave it to the run
            return
        y = self.ctx.data.train.y
        hidden = self.visible_y < 0
        y[hidden] = (y[hidden] + 1) % self.ctx.data.train.num_classes  # in place: the dataset itself changes

    monkeypatch.setattr(cls, hook, scrambled)
    other = _run(mapping, tmp_path / "other")
    a, b = torch.load(plain / "final_model.pt"), torch.load(other / "final_model.pt")
    assert all(torch.equal(a[k], b[k]) for k in a)
    if algo == "semisfl":
        imp_a = [r["impurity"] for r in _events(plain, "semisfl_round")]
        imp_b = [r["impurity"] for r in _events(other, "semisfl_round")]
        assert imp_a != imp_b  # the metric does read them, so the relabelling took effect


@pytest.mark.parametrize("algo, copies, helpers", [("semifl", 1, 0), ("fedswitch", 2, 0), ("fedmatch", 1, 6)])
def test_fl_baselines_move_whole_models(tmp_path, algo, copies, helpers):
    """SemiFL: |w| down and up per client and round; FedSwitch: student and teacher, 2|w| each way;
    FedMatch: |w| each way plus 2 helper models per client from round 2 on (3 clients of round 1 hold a ψ,
    so each round-2 client finds 2 others): 6 extra models down."""
    mapping = copy.deepcopy(BASE)
    mapping["algorithm"] = {"name": algo, **FL_ALGO}
    run = _run(mapping, tmp_path / "r")
    summary = json.loads((run / "summary.json").read_text())
    w = 4 * ((16 * 9 + 16) + (32 * 16 * 9 + 32) + (128 * 64 + 64) + (64 * 10 + 10))  # the digits CNN, fp32
    rounds, n_h = 2, 3
    assert summary["versions"] == rounds
    assert summary["bytes_up"] == rounds * n_h * copies * w
    assert summary["bytes_down"] == (rounds * n_h * copies + helpers) * w
    from fedsim.build import build_global_model, prepare_data
    sc = scenario_from_mapping(mapping)
    w0 = build_global_model(sc, prepare_data(sc).data).state_dict()
    final = torch.load(run / "final_model.pt")
    assert max(float((final[k] - w0[k]).abs().max()) for k in final) > 1e-3  # it trained


def test_augmentations_replay_per_stream_and_change_the_image():
    x = torch.randn(6, 1, 8, 8)
    g = lambda s: torch.Generator().manual_seed(s)  # noqa: E731
    assert torch.equal(strong_view(x, "randaugment", g(1), weak="crop"), strong_view(x, "randaugment", g(1), weak="crop"))
    assert not torch.equal(strong_view(x, "randaugment", g(1), weak="crop"), strong_view(x, "randaugment", g(2), weak="crop"))
    w = weak_view(x, "flip_crop", g(3))
    assert w.shape == x.shape and not torch.equal(w, x)
    assert torch.equal(weak_view(x, "none", g(3)), x)
    # a crop only moves pixels (the padding reflects): every output value occurs in its input image
    c = weak_view(x, "crop", g(4))
    for i in range(6):
        assert torch.isin(c[i], x[i]).all()


def test_per_client_dirichlet_gives_each_client_its_own_mix():
    labels = np.repeat(np.arange(10), 100)
    parts = partition(labels, 10, "dirichlet_client", np.random.default_rng(0), alpha=0.1, min_size=1)
    allidx = np.concatenate(parts)
    assert len(allidx) == len(labels) and len(np.unique(allidx)) == len(labels)
    top_share = [np.bincount(labels[p], minlength=10).max() / len(p) for p in parts]
    assert np.mean(top_share) > 0.5  # Dir(0.1): most of a client's data is one class
    iid = partition(labels, 10, "dirichlet_client", np.random.default_rng(0), alpha=1000.0)
    assert max(np.bincount(labels[p], minlength=10).max() / len(p) for p in iid) < 0.2


@pytest.mark.parametrize("override, field, allowed", [
    ("algorithm.labeled=5000", "algorithm.labeled", "has only"),
    ("algorithm.queue_size=0", "algorithm.queue_size", ">= 1"),
    ("algorithm.tau=1.0", "algorithm.tau", "(0, 1)"),
    ("algorithm.strong=solarise_all", "algorithm.strong", "allowed"),
])
def test_bad_input_gives_one_line_and_exit_2(capsys, tmp_path, override, field, allowed):
    code = main(["run", "semisfl", override, "stop.max_versions=1", "--out", str(tmp_path), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert field in lines[0] and allowed in lines[0] and "Traceback" not in err


def test_check_reports_r_h_the_ks_trace_and_theorem_1(tmp_path):
    from analysis.report import check_run

    mapping = copy.deepcopy(BASE)
    mapping["stop"]["max_versions"] = 4
    mapping["algorithm"].update({"adapt": "paper", "window": 1, "periods": 2, "probe_every": 2, "probe_samples": 4})
    run = _run(mapping, tmp_path / "r")
    table = check_run(run, figures=False, progress=False).set_index("quantity")
    assert "SemiSFL: R_h (last)" in table.index and "SemiSFL: K_s trace (first, last, min)" in table.index
    assert bool(table.loc["SemiSFL: K_s non-increasing", "holds"])
    thm = table.loc["[semisfl] Theorem 1 (as printed, eta1^3): min E||grad F||^2"]
    assert bool(thm["holds"]) and float(thm["measured"]) > 0
    drift = table.loc["[semisfl] Lemma 4: ||w^k - w^0||^2 <= (k eta G_max)^2 (worst k)"]
    assert bool(drift["holds"]) and float(drift["measured"]) > 0
