"""Per-sample gradients from layer hooks (analysis.layer_grads) against the ``vmap`` path they replace: the
same per-sample norms, float64 sums (σ²'s inputs), losses and kept rows on an MLP, the cos2p ViT and a conv
model; models with a parameter the hooks cannot attribute to one sample take the ``vmap`` path instead."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

from analysis.estimators import per_sample_pass
from analysis.layer_grads import Unsupported, hooked_grads, layer_plan
from analysis.probes import cross_entropy_loss
from fedsim.learn.models import build_model


def _data(shape, n, classes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, *shape, generator=g), torch.randint(0, classes, (n,), generator=g)


def _mlp():
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(7, 9), nn.Tanh(), nn.Linear(9, 4)), (7,), 4


def _vit():
    model = build_model("vit", (3, 32, 32), 10, depth=2, options={"embed_dim": 32, "heads": 4, "mlp_ratio": 2.0,
                                                                  "patch": 8}, seed_generator=torch.Generator().manual_seed(3))
    with torch.no_grad():  # non-zero embeddings, so their per-sample gradients differ between samples
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    return model, (3, 32, 32), 10


class _Conv(nn.Module):
    """Conv1d, a grouped and strided Conv2d with padding, BatchNorm in eval mode, LayerNorm, Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv1d(2, 4, 3, padding=1)
        self.c2 = nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2)
        self.bn = nn.BatchNorm2d(6)
        self.ln = nn.LayerNorm(6)
        self.fc = nn.Linear(6 * 4 * 4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        h = torch.tanh(self.c1(x.reshape(b, 2, 64)))        # (b, 4, 64)
        h = self.bn(self.c2(h.reshape(b, 4, 8, 8)))          # (b, 6, 4, 4)
        h = self.ln(h.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return self.fc(torch.relu(h).reshape(b, -1))


def _conv():
    torch.manual_seed(2)
    model = _Conv()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 2.0)
        model.bn.weight.uniform_(0.5, 1.5)
        model.ln.weight.uniform_(0.5, 1.5)
        model.ln.bias.uniform_(-0.2, 0.2)
    return model.eval(), (2, 8, 8), 5


def _compare(model, shape, classes, n=23, chunk=6):
    x, y = _data(shape, n, classes)
    datasets = [(x[:9], y[:9]), (x[9:10], y[9:10]), (x[10:], y[10:])]
    keep = [22, 0, 9, 4, 13]
    fast, rows_fast = per_sample_pass(model, cross_entropy_loss, datasets, chunk=chunk, keep=keep)
    slow, rows_slow = per_sample_pass(model, cross_entropy_loss, datasets, chunk=chunk, keep=keep, hooks=False)
    for a, b in zip(fast, slow):
        assert a.n == b.n
        assert a.sq_mean == pytest.approx(b.sq_mean, rel=1e-6)
        assert a.loss == pytest.approx(b.loss, rel=1e-6)
        np.testing.assert_allclose(a.grad, b.grad, rtol=1e-5, atol=1e-6 * np.abs(b.grad).max())
        assert float(a.grad @ a.grad) == pytest.approx(float(b.grad @ b.grad), rel=1e-6)
        assert a.minibatch_variance(4) == pytest.approx(b.minibatch_variance(4), rel=1e-6)
    np.testing.assert_allclose(rows_fast.numpy(), rows_slow.numpy(), rtol=1e-4, atol=1e-6 * float(rows_slow.abs().max()))
    norms_fast, norms_slow = rows_fast.double().norm(dim=1), rows_slow.double().norm(dim=1)
    np.testing.assert_allclose(norms_fast.numpy(), norms_slow.numpy(), rtol=1e-6)


@pytest.mark.parametrize("make", [_mlp, _vit, _conv], ids=["mlp", "cos2p-vit", "conv"])
def test_hooked_per_sample_gradients_equal_the_vmap_ones(make):
    model, shape, classes = make()
    assert layer_plan(model, cross_entropy_loss) is not None  # these models take the hooked path
    _compare(model, shape, classes)


def test_a_caller_no_grad_block_does_not_send_the_pass_to_vmap(monkeypatch):
    import analysis.estimators as est

    model, shape, classes = _mlp()
    x, y = _data(shape, 10, classes)
    used = []
    monkeypatch.setattr(est, "hooked_grads", lambda *a: used.append(1) or hooked_grads(*a))
    with torch.no_grad():
        a, _ = per_sample_pass(model, cross_entropy_loss, [(x, y)])
    b, _ = per_sample_pass(model, cross_entropy_loss, [(x, y)], hooks=False)
    assert used and a[0].sq_mean == pytest.approx(b[0].sq_mean, rel=1e-6)


def test_the_cos2p_model_is_hooked_as_built_for_a_run():
    """The run's own ViT (depth 8, embed 32, patch 8 on digits32's shape) takes the hooked path."""
    model = build_model("vit", (3, 32, 32), 10, depth=8, options={"embed_dim": 32, "heads": 4, "mlp_ratio": 2.0,
                                                                  "patch": 8}).eval()
    assert layer_plan(model, cross_entropy_loss) is not None


class _Tied(nn.Module):
    """A weight used by its layer and again outside it: the hooks cannot see the second use."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(5, 5)
        self.b = nn.Linear(5, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.tanh(self.a(x)) @ self.a.weight)


class _Twice(_Tied):
    """The same layers, the first called twice."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.tanh(self.a(torch.tanh(self.a(x)))))


class _Raw(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(5))
        self.b = nn.Linear(5, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(x * self.scale)


def test_unsupported_models_fall_back_to_vmap_and_give_the_same_values():
    torch.manual_seed(4)
    bn_train = nn.Sequential(nn.Linear(5, 6), nn.BatchNorm1d(6), nn.Tanh(), nn.Linear(6, 3)).train()
    dropout_train = nn.Sequential(nn.Linear(5, 6), nn.Dropout(0.0), nn.Linear(6, 3)).train()
    assert layer_plan(bn_train, cross_entropy_loss) is None
    assert layer_plan(dropout_train, cross_entropy_loss) is None
    assert layer_plan(_Raw(), cross_entropy_loss) is None
    assert layer_plan(nn.Linear(5, 3), lambda m, x, y: nn.functional.cross_entropy(m(x), y)) is None  # no per_sample
    x, y = _data((5,), 12, 3)
    for model in (_Tied(), _Twice()):
        plan = layer_plan(model, cross_entropy_loss)
        assert plan is not None  # only the pass itself can tell
        with pytest.raises(Unsupported):
            hooked_grads(plan, model, (x, y))
    inplace = nn.Sequential(nn.Linear(5, 6), nn.ReLU(inplace=True), nn.Linear(6, 3))  # changes a layer's output
    with pytest.raises(Unsupported):
        hooked_grads(layer_plan(inplace, cross_entropy_loss), inplace, (x, y))
    for model in (_Tied(), _Twice(), _Raw(), inplace):
        a, _ = per_sample_pass(model, cross_entropy_loss, [(x, y)], chunk=5)
        b, _ = per_sample_pass(model, cross_entropy_loss, [(x, y)], chunk=5, hooks=False)
        assert a[0].sq_mean == pytest.approx(b[0].sq_mean, rel=1e-12)
        np.testing.assert_allclose(a[0].grad, b[0].grad, rtol=1e-12)


def test_a_per_sample_pass_of_the_cos2p_model_does_not_import_the_compiler_stack():
    """The hooked pass needs neither functorch's vmap nor torch._dynamo (about 2 s to import)."""
    code = (
        "import sys, torch\n"
        "from analysis.estimators import per_sample_pass\n"
        "from analysis.probes import cross_entropy_loss\n"
        "from fedsim.learn.models import build_model\n"
        "m = build_model('vit', (3, 32, 32), 10, depth=2, options={'embed_dim': 32, 'heads': 4, 'mlp_ratio': 2.0,"
        " 'patch': 8}).eval()\n"
        "x, y = torch.randn(6, 3, 32, 32), torch.randint(0, 10, (6,))\n"
        "per_sample_pass(m, cross_entropy_loss, [(x, y)], keep=[1, 2])\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"
