"""Cost probes: FLOPs by hand formulas and the GAS spec's published counts, bytes, memory."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from fedsim.learn.costs import (FlopCost, activation_bytes, flops_per_sample, memory_estimate, state_bytes,
                                tensor_bytes)
from fedsim.learn.models import BlockModel, build_model, split_model

pytestmark = pytest.mark.fast  # a quick file: part of `pytest -m fast` (tests/README.md)

torch.set_num_threads(1)


@pytest.mark.parametrize("a,b", [(7, 3), (64, 10), (100, 1)])
def test_linear_forward_is_2ab(a, b):
    cost = flops_per_sample(nn.Linear(a, b), (a,))
    assert cost.forward == 2 * a * b
    # first layer of a model: only the weight gradient is needed (2ab); the input gradient is not
    assert cost.backward == 2 * a * b


def test_backward_is_twice_forward_for_inner_linear_layers():
    m = BlockModel([nn.Linear(12, 20), nn.ReLU(), nn.Linear(20, 6)])
    fwd_l2 = 2 * 20 * 6
    inner = flops_per_sample(m, (12,), start=1)  # a server part: needs weight and input gradients
    assert inner.forward == fwd_l2 and inner.backward == 2 * fwd_l2
    whole = flops_per_sample(m, (12,))
    assert whole.forward == 2 * 12 * 20 + fwd_l2
    assert whole.backward == 2 * 12 * 20 + 2 * fwd_l2
    assert whole.total == whole.forward + whole.backward


def test_conv_by_hand_formula():
    cin, cout, k, h, w, stride, pad = 3, 8, 3, 10, 12, 2, 1
    hout = (h + 2 * pad - k) // stride + 1
    wout = (w + 2 * pad - k) // stride + 1
    cost = flops_per_sample(nn.Conv2d(cin, cout, k, stride=stride, padding=pad), (cin, h, w))
    assert cost.forward == 2 * cout * hout * wout * cin * k * k


def _alexnet_macs(hw=32, cin=3):
    """Multiply-accumulates of the GAS AlexNet, layer by layer, by hand (bias and pooling excluded)."""
    s1, s2 = hw, hw // 2  # conv1 at full size; conv2 after one pool
    s3 = hw // 4
    client = s1 * s1 * 32 * cin * 9 + s2 * s2 * 64 * 32 * 9
    server = s3 * s3 * 9 * (128 * 64 + 256 * 128 + 256 * 256) + 2304 * 1024 + 1024 * 512 + 512 * 10
    return client, server


def test_alexnet_client_flops_match_gas_fvcore_count():
    m = build_model("alexnet_cifar", (3, 32, 32), 10)
    client_macs, server_macs = _alexnet_macs()
    assert client_macs == 5_603_328  # the spec's fvcore number is MACs
    assert client_macs + server_macs == 69_833_728
    c = flops_per_sample(m, (3, 32, 32), end=6)
    # FlopCounterMode counts 2 FLOPs per MAC
    assert c.forward == 2 * 5_603_328
    assert flops_per_sample(m, (3, 32, 32)).forward == 2 * 69_833_728
    s = flops_per_sample(m, (3, 32, 32), start=6)
    assert s.forward == 2 * server_macs and s.backward == 2 * s.forward
    # client backward: weight grads of both convs, input grad of conv2 only
    conv1, conv2 = 32 * 32 * 32 * 3 * 9, 16 * 16 * 64 * 32 * 9
    assert c.backward == 2 * (conv1 + 2 * conv2)
    client, _ = split_model(m, 6)
    assert flops_per_sample(client, (3, 32, 32)) == c  # a split part measures the same as the block range


def test_bytes_match_gas_sizes():
    m = build_model("alexnet_cifar", (3, 32, 32), 10)
    client, _ = split_model(m, 6)
    assert state_bytes(client) * 8 == 620_544  # 19,392 float32 params
    assert state_bytes(m) * 8 == 123_799_872
    assert state_bytes(m.state_dict()) == state_bytes(m)
    assert activation_bytes(m, (3, 32, 32), 6, 1) * 8 == 131_072  # 64x8x8 float32 per sample
    assert activation_bytes(m, (3, 32, 32), 6, 32) == 32 * 64 * 8 * 8 * 4
    assert activation_bytes(m, (3, 32, 32), 3, 1) * 8 == 262_144  # the L1 split of S2FL: 32x16x16
    assert tensor_bytes(torch.zeros(3, 5, dtype=torch.float64)) == 120
    assert tensor_bytes(torch.zeros(7, dtype=torch.float16)) == 14


def test_memory_estimate_closed_form():
    a, h, c, batch = 12, 9, 4, 16
    m = BlockModel([nn.Sequential(nn.Linear(a, h), nn.ReLU()), nn.Linear(h, c)])
    n_params = a * h + h + h * c + c
    est = memory_estimate(m, (a,), batch)
    assert est.params == est.grads == est.optimizer == 4 * n_params
    # saved for backward: the input (weight grad of layer 1) and the ReLU output (its own backward and
    # layer 2's weight grad: one tensor); weights are not activations
    assert est.activations == 4 * batch * (a + h)
    assert est.total == 3 * 4 * n_params + est.activations
    assert memory_estimate(m, (a,), batch, momentum=False).optimizer == 0


def test_flop_cost_is_cached_per_architecture():
    a = build_model("cnn", (1, 8, 8), 10, seed_generator=torch.Generator().manual_seed(1))
    b = build_model("cnn", (1, 8, 8), 10, seed_generator=torch.Generator().manual_seed(2))
    assert flops_per_sample(a, (1, 8, 8)) is flops_per_sample(b, (1, 8, 8))
    wide = build_model("cnn", (1, 8, 8), 10, width=2.0)
    assert flops_per_sample(wide, (1, 8, 8)).forward > 3 * flops_per_sample(a, (1, 8, 8)).forward
    assert isinstance(flops_per_sample(a, (1, 8, 8)), FlopCost)


def test_cache_notices_frozen_parameters():
    m = BlockModel([nn.Linear(6, 5), nn.Linear(5, 2)])
    full = flops_per_sample(m, (6,))
    m.blocks[0].weight.requires_grad_(False)
    m.blocks[0].bias.requires_grad_(False)
    frozen = flops_per_sample(m, (6,))
    # no weight gradient for the frozen first layer, and no input gradient needed for it either
    assert full.backward == 2 * 6 * 5 + 2 * (2 * 5 * 2) and frozen.backward == 2 * 5 * 2


def test_public_api_exported():
    import fedsim.learn as L

    for name in L.__all__:
        assert hasattr(L, name)
