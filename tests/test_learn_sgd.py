"""Local SGD: equality with a hand-written loop, closed-form steps, masks, divergence, evaluation."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedsim.errors import ConfigError, DivergenceError
from fedsim.learn.data import ArrayDataset
from fedsim.learn.models import build_model
from fedsim.learn.sgd import SGDConfig, TrainStats, batch_schedule, evaluate, local_sgd, num_steps

torch.set_num_threads(1)


def _data(n=50, d=(1, 8, 8), classes=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, *d, generator=g), torch.randint(0, classes, (n,), generator=g)


def test_num_steps_closed_forms():
    assert num_steps(100, SGDConfig(batch_size=32, local_epochs=1)) == 4  # ceil(100/32)
    assert num_steps(100, SGDConfig(batch_size=32, local_epochs=2.5)) == 10  # ceil(2.5 * 4)
    assert num_steps(100, SGDConfig(batch_size=32, local_epochs=0.3)) == 2  # ceil(1.2)
    assert num_steps(100, SGDConfig(batch_size=32, local_steps=7, local_epochs=5)) == 7  # steps win
    assert num_steps(0, SGDConfig()) == 0


def test_batch_schedule_passes_are_permutations():
    sched = batch_schedule(10, 7, 4, torch.Generator().manual_seed(3))
    assert [len(b) for b in sched] == [4, 4, 2, 4, 4, 2, 4]  # last partial batch of each pass kept
    first, second = torch.cat(sched[:3]), torch.cat(sched[3:6])
    assert sorted(first.tolist()) == list(range(10)) and sorted(second.tolist()) == list(range(10))
    g = torch.Generator().manual_seed(3)  # the documented recipe: one randperm per pass
    assert torch.equal(first, torch.randperm(10, generator=g)) and torch.equal(second, torch.randperm(10, generator=g))


@pytest.mark.parametrize("momentum,wd,clip", [(0.0, 0.0, None), (0.9, 5e-4, None), (0.9, 5e-4, 0.5)])
def test_local_sgd_equals_plain_pytorch_loop(momentum, wd, clip):
    x, y = _data()
    idx = np.array([1, 4, 5, 8, 9, 11, 20, 21, 30, 33, 34, 40, 41, 47])
    cfg = SGDConfig(lr=0.1, momentum=momentum, weight_decay=wd, batch_size=4, local_epochs=2, clip_norm=clip)
    a = build_model("cnn", (1, 8, 8), 10, seed_generator=torch.Generator().manual_seed(0))
    b = build_model("cnn", (1, 8, 8), 10, seed_generator=torch.Generator().manual_seed(0))
    stats = local_sgd(a, x, y, idx, cfg, torch.Generator().manual_seed(7))

    # the hand-written loop: same batches, textbook torch.optim.SGD
    opt = torch.optim.SGD(b.parameters(), lr=0.1, momentum=momentum, weight_decay=wd)
    g = torch.Generator().manual_seed(7)
    ti = torch.as_tensor(idx)
    losses = []
    for _ in range(2):
        perm = torch.randperm(len(idx), generator=g)
        for i in range(0, len(idx), 4):
            bi = ti[perm[i : i + 4]]
            opt.zero_grad()
            loss = F.cross_entropy(b(x[bi]), y[bi])
            loss.backward()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(b.parameters(), clip)
            opt.step()
            losses.append(loss.item())
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
    assert stats.steps == 8 and stats.samples == 2 * len(idx)
    assert stats.last_loss == losses[-1] and math.isclose(stats.mean_loss, float(np.mean(losses)))


def test_one_step_least_squares_equals_closed_form():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(16, 3)).astype(np.float32)
    t = rng.normal(size=(16, 1)).astype(np.float32)
    w0 = rng.normal(size=(1, 3)).astype(np.float32)
    model = nn.Linear(3, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.from_numpy(w0))
    cfg = SGDConfig(lr=0.05, batch_size=16, local_steps=1)
    local_sgd(model, torch.from_numpy(X), torch.from_numpy(t), np.arange(16), cfg, torch.Generator().manual_seed(0),
              loss_fn=F.mse_loss)
    # loss = mean((Xw - t)^2) -> grad = 2/n X^T (Xw - t)
    Xd, td, wd = X.astype(np.float64), t.astype(np.float64), w0.astype(np.float64).T
    grad = 2.0 / 16 * Xd.T @ (Xd @ wd - td)
    expected = (wd - 0.05 * grad).T
    np.testing.assert_allclose(model.weight.detach().numpy(), expected, rtol=1e-5, atol=1e-6)


def test_grad_mask_keeps_masked_entries_bit_identical():
    x, y = _data(n=40)
    m = build_model("mlp", (1, 8, 8), 10, hidden=(16,), seed_generator=torch.Generator().manual_seed(1))
    before = {k: v.clone() for k, v in m.state_dict().items()}
    g = torch.Generator().manual_seed(2)
    mask = {"blocks.0.1.weight": (torch.rand(16, 64, generator=g) < 0.5).float(),
            "blocks.1.0.bias": torch.tensor([1.0] * 5 + [0.0] * 5)}
    cfg = SGDConfig(lr=0.2, momentum=0.9, weight_decay=0.01, batch_size=8, local_steps=12)
    local_sgd(m, x, y, np.arange(40), cfg, torch.Generator().manual_seed(3), grad_mask=mask)
    after = m.state_dict()
    for key, mk in mask.items():
        frozen = mk == 0
        # bitwise: compare the raw bytes, not just values
        assert torch.equal(after[key][frozen].view(torch.int32), before[key][frozen].view(torch.int32))
        assert (after[key][~frozen] != before[key][~frozen]).all()
    assert not torch.equal(after["blocks.1.0.weight"], before["blocks.1.0.weight"])  # unmasked tensors train


def test_all_ones_mask_matches_unmasked_training():
    x, y = _data(n=24)
    cfg = SGDConfig(lr=0.1, momentum=0.9, weight_decay=1e-3, batch_size=8, local_steps=5)
    a = build_model("mlp", (1, 8, 8), 10, hidden=(8,), seed_generator=torch.Generator().manual_seed(4))
    b = build_model("mlp", (1, 8, 8), 10, hidden=(8,), seed_generator=torch.Generator().manual_seed(4))
    ones = {k: torch.ones_like(v) for k, v in a.named_parameters()}
    local_sgd(a, x, y, np.arange(24), cfg, torch.Generator().manual_seed(1), grad_mask=ones)
    local_sgd(b, x, y, np.arange(24), cfg, torch.Generator().manual_seed(1))
    for pa, pb in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(pa, pb, rtol=1e-6, atol=1e-7)


def test_params_restricts_training_and_restores_requires_grad():
    x, y = _data(n=16)
    m = build_model("cnn", (1, 8, 8), 10)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    local_sgd(m, x, y, np.arange(16), SGDConfig(batch_size=8, local_steps=2), torch.Generator().manual_seed(0),
              params=m.blocks[3].parameters())
    after = m.state_dict()
    for k in before:
        changed = not torch.equal(before[k], after[k])
        assert changed == k.startswith("blocks.3.")
    assert all(p.requires_grad for p in m.parameters())


def test_divergence_raises():
    x, y = _data(n=32)
    x = x * 100
    m = build_model("mlp", (1, 8, 8), 10, seed_generator=torch.Generator().manual_seed(0))
    with pytest.raises(DivergenceError, match=r"training loss became (nan|inf) at step \d+"):
        local_sgd(m, x, y, np.arange(32), SGDConfig(lr=1e6, batch_size=8, local_steps=50),
                  torch.Generator().manual_seed(0))


def test_bad_config():
    with pytest.raises(ConfigError, match="train.lr"):
        SGDConfig(lr=-1).validate()
    with pytest.raises(ConfigError, match="local_steps or local_epochs"):
        SGDConfig(local_steps=None, local_epochs=None).validate()


def test_evaluate_against_hand_computation():
    x, y = _data(n=30, d=(5,), classes=3)
    model = nn.Linear(5, 3)
    ds = ArrayDataset(x, y, 3, "toy")
    acc, loss = evaluate(model, ds, batch_size=7)  # several batches, one partial
    with torch.no_grad():
        logits = x @ model.weight.T + model.bias
    logp = logits - torch.logsumexp(logits, dim=1, keepdim=True)
    ref_loss = -logp[torch.arange(30), y].mean().item()
    ref_acc = (logits.argmax(1) == y).double().mean().item()
    assert acc == pytest.approx(ref_acc) and loss == pytest.approx(ref_loss, rel=1e-5)
    assert model.training  # mode restored
    assert isinstance(TrainStats(1, 1, 0.0, 0.0), TrainStats)
