"""Fed-RAA's resource side: the proximal local objective and the β capability preset."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from fedsim.learn.sgd import Proximal, SGDConfig, local_sgd


def test_prox_term_matches_hand_computed_steps():
    """Loss −c·w (constant gradient −c) plus (μ/2)(w − w₀)²: w₁ = w₀ + γc, w₂ = w₁ + γc − γμ(γc)."""
    lr, mu, c, w0 = 0.1, 2.0, 3.0, 0.5
    model = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(w0)
    x, y = torch.ones(4, 1), torch.zeros(4, dtype=torch.long)
    cfg = SGDConfig(lr=lr, batch_size=4, local_steps=2, local_epochs=None)
    local_sgd(model, x, y, np.arange(4), cfg, torch.Generator().manual_seed(0),
              loss_fn=lambda out, _y: -c * out.mean(), objective=Proximal(mu))
    w1 = w0 + lr * c
    w2 = w1 + lr * c - lr * mu * (w1 - w0)
    assert float(model.weight.detach()) == pytest.approx(w2, rel=1e-6)


def test_prox_keeps_masked_entries_and_zero_mu_is_plain_sgd():
    torch.manual_seed(0)
    x, y = torch.randn(32, 5), torch.randint(0, 3, (32,))
    cfg = SGDConfig(lr=0.1, momentum=0.5, batch_size=8, local_steps=6, local_epochs=None)
    a, b = nn.Linear(5, 3), nn.Linear(5, 3)
    b.load_state_dict(a.state_dict())
    start = {k: v.clone() for k, v in a.state_dict().items()}
    mask = {"weight": torch.zeros(3, 5)}
    mask["weight"][0] = 1
    local_sgd(a, x, y, np.arange(32), cfg, torch.Generator().manual_seed(1), grad_mask=mask, objective=Proximal(5.0))
    assert torch.equal(a.weight[1:], start["weight"][1:]) and not torch.equal(a.weight[0], start["weight"][0])
    c = nn.Linear(5, 3)
    c.load_state_dict(b.state_dict())
    local_sgd(b, x, y, np.arange(32), cfg, torch.Generator().manual_seed(1))
    local_sgd(c, x, y, np.arange(32), cfg, torch.Generator().manual_seed(1), objective=Proximal(0.0))
    assert all(torch.equal(b.state_dict()[k], c.state_dict()[k]) for k in b.state_dict())
