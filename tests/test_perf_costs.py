"""The FLOP probe agrees with torch's own FlopCounterMode and does not load torch's compiler stack."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from fedsim.learn.costs import flops_per_sample
from fedsim.learn.models import build_model

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]


def _reference(model: torch.nn.Module, shape: tuple[int, ...]) -> tuple[float, float]:
    """Per-sample forward/backward FLOPs by torch's FlopCounterMode (batch 2, as the probe does)."""
    x = torch.randn(2, *shape, generator=torch.Generator().manual_seed(0))
    params = [p for p in model.parameters() if p.requires_grad]
    with FlopCounterMode(display=False) as fwd:
        out = model(x)
    with FlopCounterMode(display=False) as bwd:
        torch.autograd.grad(out.sum(), params, allow_unused=True)
    return fwd.get_total_flops() / 2.0, bwd.get_total_flops() / 2.0


@pytest.mark.parametrize("name,shape", [("mlp", (1, 8, 8)), ("cnn", (1, 8, 8)), ("cnn", (3, 32, 32)),
                                        ("alexnet_cifar", (3, 32, 32))])
def test_probe_equals_flopcountermode(name, shape):
    model = build_model(name, shape, 10, seed_generator=torch.Generator().manual_seed(1))
    cost = flops_per_sample(model, shape)
    ref_fwd, ref_bwd = _reference(model, shape)
    assert cost.forward == ref_fwd and cost.backward == ref_bwd
    assert cost.forward > 0


def test_probe_does_not_import_the_compiler_stack():
    code = ("import sys, torch\n"
            "from fedsim.learn.costs import flops_per_sample, memory_estimate\n"
            "from fedsim.learn.models import build_model\n"
            "m = build_model('cnn', (1, 8, 8), 10)\n"
            "c = flops_per_sample(m, (1, 8, 8)); memory_estimate(m, (1, 8, 8), 16)\n"
            "assert c.total > 0\n"
            "print('torch._dynamo' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == "False"
