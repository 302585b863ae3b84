"""Block models: shapes, cuts, the GAS AlexNet's published sizes, deterministic initialisation."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from fedsim.errors import ConfigError
from fedsim.learn.models import MODELS, BlockModel, build_model, split_model

pytestmark = pytest.mark.fast  # a quick file: part of `pytest -m fast` (tests/README.md)

torch.set_num_threads(1)


def _nparams(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def _conv_params(cin, cout, k=3):
    return cin * cout * k * k + cout


@pytest.mark.parametrize("name,shape", [
    ("logreg", (60,)), ("logreg", (1, 8, 8)), ("mlp", (1, 8, 8)), ("mlp", (1, 40)),
    ("cnn", (1, 8, 8)), ("cnn", (1, 40)), ("cnn", (1, 28, 28)), ("cnn", (3, 32, 32)),
    ("alexnet_cifar", (3, 32, 32)), ("alexnet_cifar", (1, 28, 28)),
])
def test_forward_shapes_and_block_ranges(name, shape):
    m = build_model(name, shape, 7, seed_generator=torch.Generator().manual_seed(0))
    x = torch.randn(3, *shape, generator=torch.Generator().manual_seed(1))
    out = m(x)
    assert out.shape == (3, 7)
    n = m.num_blocks()
    for cut in range(1, n):
        assert torch.equal(m(m(x, 0, cut), cut), out)  # running the two ranges in turn is the whole model


def test_logreg_and_mlp_sizes():
    assert _nparams(build_model("logreg", (60,), 10)) == 60 * 10 + 10
    m = build_model("mlp", (1, 8, 8), 10, hidden=(32, 16))
    assert m.num_blocks() == 3
    assert _nparams(m) == (64 * 32 + 32) + (32 * 16 + 16) + (16 * 10 + 10)
    half = build_model("mlp", (1, 8, 8), 10, hidden=(32, 16), width=0.5)
    assert _nparams(half) == (64 * 16 + 16) + (16 * 8 + 8) + (8 * 10 + 10)


def test_cnn_uses_conv1d_for_sequences_and_scales_width():
    m1 = build_model("cnn", (1, 40), 10)
    assert any(isinstance(l, nn.Conv1d) for l in m1.modules())
    m2 = build_model("cnn", (1, 8, 8), 10, width=0.5)
    convs = [l for l in m2.modules() if isinstance(l, nn.Conv2d)]
    assert [c.out_channels for c in convs] == [8, 16]
    # 8x8 -> pool -> 4x4 -> pool -> 2x2: the flattened size is 16 channels * 4
    fc = [l for l in m2.modules() if isinstance(l, nn.Linear)][0]
    assert fc.in_features == 16 * 2 * 2 and fc.out_features == 32


def test_alexnet_cifar_matches_gas_spec():
    m = build_model("alexnet_cifar", (3, 32, 32), 10)
    assert m.num_blocks() == 14
    client, server = split_model(m, 6)
    # hand count: conv(3->32) + conv(32->64)
    assert _nparams(client) == _conv_params(3, 32) + _conv_params(32, 64) == 19_392
    full = (_conv_params(3, 32) + _conv_params(32, 64) + _conv_params(64, 128) + _conv_params(128, 256)
            + _conv_params(256, 256) + (2304 * 1024 + 1024) + (1024 * 512 + 512) + (512 * 10 + 10))
    assert _nparams(m) == full
    assert _nparams(m) * 32 == 123_799_872  # the spec's full-model size in bits
    x = torch.zeros(2, 3, 32, 32)
    assert client(x).shape == (2, 64, 8, 8)  # 4096 floats per sample
    kinds = [type(b).__name__ for b in m.blocks]
    assert kinds[:11] == ["Conv2d", "MaxPool2d", "ReLU", "Conv2d", "MaxPool2d", "ReLU",
                          "Conv2d", "Conv2d", "Conv2d", "MaxPool2d", "ReLU"]
    assert not any(isinstance(l, nn.ReLU) for b in m.blocks[11:] for l in b.modules())  # no ReLU between FCs
    fm = build_model("alexnet_cifar", (1, 28, 28), 10)
    assert split_model(fm, 6)[0](torch.zeros(1, 1, 28, 28)).shape == (1, 64, 7, 7)
    assert fm.blocks[11][1].in_features == 256 * 3 * 3  # pool(3,2) of 7x7 is 3x3, as for 8x8


def test_split_shares_modules():
    m = build_model("cnn", (1, 8, 8), 10)
    c, s = split_model(m, 2)
    assert c.num_blocks() == 2 and s.num_blocks() == 2
    assert c.blocks[0] is m.blocks[0] and s.blocks[0] is m.blocks[2]
    with torch.no_grad():
        s.blocks[-1].weight.add_(1.0)  # a change through the server part is a change of the model
    assert torch.equal(s.blocks[-1].weight, m.blocks[-1].weight)
    x = torch.randn(4, 1, 8, 8)
    assert torch.equal(s(c(x)), m(x))
    for bad in (0, 4, 7):
        with pytest.raises(ConfigError, match="model.cut"):
            split_model(m, bad)


def test_deterministic_init_and_no_global_rng_side_effect():
    torch.manual_seed(99)
    before = torch.get_rng_state()
    a = build_model("alexnet_cifar", (3, 32, 32), 10, seed_generator=torch.Generator().manual_seed(5))
    assert torch.equal(torch.get_rng_state(), before)
    b = build_model("alexnet_cifar", (3, 32, 32), 10, seed_generator=torch.Generator().manual_seed(5))
    c = build_model("alexnet_cifar", (3, 32, 32), 10, seed_generator=torch.Generator().manual_seed(6))
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["blocks.0.weight"], sc["blocks.0.weight"])
    # PyTorch's default init: conv weights ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (kaiming_uniform with a=sqrt(5))
    w = sa["blocks.0.weight"]
    assert w.abs().max() <= 1 / (3 * 9) ** 0.5 + 1e-7


def test_unknown_model():
    with pytest.raises(ConfigError, match=r"model.name: unknown model 'resnet' \(allowed: logreg, mlp, cnn"):
        build_model("resnet", (1, 8, 8), 10)
    assert MODELS == ("logreg", "mlp", "cnn", "alexnet_cifar", "resnet20", "vit", "fragment_mlp", "femnist_cnn")
    assert isinstance(build_model("logreg", (4,), 2), BlockModel)


@pytest.mark.parametrize("name,shape", [("cnn", (1, 8, 8)), ("cnn", (1, 40)), ("femnist_cnn", (1, 28, 28)),
                                        ("cnn", (3, 32, 32))])
@pytest.mark.parametrize("cpu_bytes", [None, 0])
def test_a_model_built_on_meta_has_the_real_builds_shapes(name, shape, cpu_bytes, monkeypatch):
    """The size check builds every model on meta tensors first; the dry run that sizes the layer after a
    flatten runs a CPU copy of the blocks before it (``cpu_bytes=None``) or, for blocks too large to copy
    (``cpu_bytes=0`` forces it), on meta: either way every parameter has the shape of the real build."""
    import fedsim.learn.models as models
    from fedsim.build import _SkipMetaInit

    if cpu_bytes is not None:
        monkeypatch.setattr(models, "DRY_RUN_CPU_BYTES", cpu_bytes)
    real = build_model(name, shape, 10, seed_generator=torch.Generator().manual_seed(0))
    with torch.device("meta"), _SkipMetaInit():
        meta = build_model(name, shape, 10, seed_generator=None)
    assert all(p.is_meta for p in meta.parameters())
    assert [(k, v.shape) for k, v in meta.state_dict().items()] == [(k, v.shape) for k, v in real.state_dict().items()]
