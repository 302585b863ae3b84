"""Co-S²P client pieces: STE mask learning converges to R^w with frozen weights; Eq. 3 against a hand
computation."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedsim.learn.cos2p import distill_loss, final_keep, kept_fraction, ste_sample, train_masks


def test_ste_passes_the_sigmoid_gradient():
    lg = torch.tensor([0.3, -1.0], requires_grad=True)
    m = ste_sample(lg, torch.Generator().manual_seed(0))
    assert set(m.detach().tolist()) <= {0.0, 1.0}
    m.sum().backward()
    s = torch.sigmoid(torch.tensor([0.3, -1.0]))
    assert torch.allclose(lg.grad, s * (1 - s))


@pytest.mark.parametrize("target", [0.25, 0.5])
def test_mask_kept_fraction_converges_to_the_width_rate_on_a_toy_layer(target):
    g = torch.Generator().manual_seed(1)
    body = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    before = {k: v.clone() for k, v in body.state_dict().items()}
    x = torch.randn(512, 8, generator=g)
    y = (x @ torch.randn(8, 4, generator=g)).argmax(1)
    logits = {"h": torch.full((32,), 2.0)}
    members = {"h": [("0.weight", 0), ("0.bias", 0), ("2.weight", 1)]}
    idx = torch.arange(512)
    fr = []
    for _ in range(6):
        st = train_masks(body, logits, members, x, y, idx, steps=50, batch_size=64, target=target, lambda1=2.0,
                         lr=0.1, generator=g)
        fr.append(st["mask_fraction"])
    assert abs(fr[-1] - target) < 0.06, fr
    assert abs(float(torch.sigmoid(logits["h"]).mean()) - target) < 0.1
    keep = final_keep(logits, target)
    assert len(keep["h"]) == round(32 * target)
    for k, v in body.state_dict().items():
        assert torch.equal(v, before[k])  # weights frozen while masks train
    # the kept fraction weighs units by their row size
    assert float(kept_fraction({"a": torch.tensor([1.0, 0.0]), "b": torch.tensor([1.0])}, {"a": 1.0, "b": 2.0})) == 0.75


def test_distillation_loss_matches_eq3_by_hand():
    z1 = torch.tensor([[1.0, 0.0, -1.0]])
    z2 = torch.tensor([[0.0, 2.0, 0.0]])
    y = torch.tensor([1])
    lam, t = 0.3, 3.0
    ps = [math.exp(v / t) for v in (1.0, 0.0, -1.0)]
    ps = [p / sum(ps) for p in ps]
    pt = [math.exp(v / t) for v in (0.0, 2.0, 0.0)]
    pt = [p / sum(pt) for p in pt]
    kl_st = sum(a * math.log(a / b) for a, b in zip(ps, pt))
    kl_ts = sum(b * math.log(b / a) for a, b in zip(ps, pt))
    ce1, ce2 = float(F.cross_entropy(z1, y)), float(F.cross_entropy(z2, y))
    got = distill_loss([z1, z2], y, lambda2=lam, temperature=t)
    assert float(got) == pytest.approx((1 - lam) * (ce1 + ce2) + lam * t * t * kl_st, rel=1e-6)
    got = distill_loss([z1, z2], y, lambda2=lam, temperature=t, direction="teacher_student")
    assert float(got) == pytest.approx((1 - lam) * (ce1 + ce2) + lam * t * t * kl_ts, rel=1e-6)
    # the teacher gets no KL gradient when detached
    a = z1.clone().requires_grad_(True)
    b = z2.clone().requires_grad_(True)
    distill_loss([a, b], y, lambda2=1.0, temperature=t).backward()
    assert b.grad is not None and torch.count_nonzero(b.grad) == 0
    assert float(distill_loss([z1, z2], y, lambda2=0.0, temperature=t)) == pytest.approx(ce1 + ce2, rel=1e-6)
