"""PlainSGD is torch.optim.SGD and PlainAdam torch.optim.Adam bit for bit, and a training run never loads
torch's compiler stack."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fedsim.learn.models import build_model
from fedsim.learn.sgd import PlainAdam, PlainSGD, SGDConfig

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]


def _cnn() -> torch.nn.Module:
    return build_model("cnn", (1, 8, 8), 10, seed_generator=torch.Generator().manual_seed(0))


def _train_twins(a, ours, b, ref, steps: int, seed: int, between=None) -> None:
    """The same batches through model ``a`` with ``ours`` and ``b`` with ``ref``; ``between(model, opt, step)``
    runs after each backward pass, before the step."""
    gen = torch.Generator().manual_seed(seed)
    for step in range(steps):
        x = torch.randn(8, 1, 8, 8, generator=gen)
        y = torch.randint(0, 10, (8,), generator=gen)
        for model, opt in ((a, ours), (b, ref)):
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(x), y).backward()
            if between is not None:
                between(model, opt, step)
            opt.step()


@pytest.mark.parametrize("momentum,weight_decay,clip", [(0.0, 0.0, None), (0.9, 0.0, None), (0.0, 5e-4, None),
                                                        (0.9, 1e-3, None), (0.9, 1e-3, 0.5)])
def test_plain_sgd_is_torch_sgd_bit_for_bit(momentum, weight_decay, clip):
    """PlainSGD (the one step, with the config's clipping) against clip_grad_norm_ + torch.optim.SGD."""
    a, b = _cnn(), _cnn()
    ours = PlainSGD(a.parameters(), SGDConfig(lr=0.05, momentum=momentum, weight_decay=weight_decay, clip_norm=clip))
    ref = torch.optim.SGD(b.parameters(), lr=0.05, momentum=momentum, weight_decay=weight_decay)

    def clip_ref(model, opt, step):
        if clip is not None and opt is ref:
            torch.nn.utils.clip_grad_norm_(b.parameters(), clip)

    _train_twins(a, ours, b, ref, steps=6, seed=3, between=clip_ref)
    for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(pa, pb), name
    assert not torch.equal(a.blocks[0][0].weight, _cnn().blocks[0][0].weight)


@pytest.mark.parametrize("lr,betas,eps", [(0.05, (0.9, 0.999), 1e-8), (1e-3, (0.5, 0.9), 1e-6)])
def test_plain_adam_is_torch_adam_bit_for_bit(lr, betas, eps):
    """PlainAdam against torch.optim.Adam over ten steps of a CNN, one tensor left without a gradient on
    some steps (torch skips it and its step count; a shared count would change its later bias correction)."""
    a, b = _cnn(), _cnn()
    ours = PlainAdam(a.parameters(), lr=lr, betas=betas, eps=eps)
    ref = torch.optim.Adam(b.parameters(), lr=lr, betas=betas, eps=eps)

    def drop_first_grad(model, opt, step):
        if step % 3 == 1:
            next(model.parameters()).grad = None

    _train_twins(a, ours, b, ref, steps=10, seed=5, between=drop_first_grad)
    for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(pa, pb), name
    assert ours.steps[0] < ours.steps[-1] == 10
    assert not torch.equal(a.blocks[0][0].weight, _cnn().blocks[0][0].weight)


def test_a_run_does_not_import_the_compiler_stack(tmp_path):
    code = ("import sys\n"
            "from fedsim.runner import run_scenario\n"
            "from fedsim import scenario_from_mapping\n"
            "sc = scenario_from_mapping({'data': {'num_clients': 4}, 'train': {'local_steps': 2, 'momentum': 0.9},\n"
            "    'algorithm': {'name': 'fedavg', 'clients_per_round': 2}, 'stop': {'max_versions': 2},\n"
            "    'output': {'figures': False}})\n"
            f"[s] = run_scenario(sc, {str(tmp_path)!r}, progress=False)\n"
            "assert s['status'] == 'ok' and s['versions'] == 2, s\n"
            # the size check's first build is on meta tensors: a CNN's dry run before its flatten must not
            # take PyTorch's Python reference ops (they import the compiler stack and sympy, 1-2 s)
            "from fedsim.build import build_global_model, prepare_data\n"
            "for name in ('cnn', 'femnist_cnn'):\n"
            "    cnn = scenario_from_mapping({'data': {'num_clients': 4}, 'model': {'name': name}, 'stop': {'max_versions': 1}})\n"
            "    build_global_model(cnn, prepare_data(cnn).data)\n"
            "print(sorted(m for m in ('torch._dynamo', 'sympy', 'matplotlib') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
