"""Sub-models: extraction and insertion against independent computations, costs by hand, bad input."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from fedsim.messages import Update
from fedsim.learn.state import masked_weighted_average
from fedsim.errors import ConfigError
from fedsim.learn.costs import flops_per_sample, memory_estimate
from fedsim.learn.models import build_model, residual_add
from fedsim.learn.submodel import (SubModel, depth_window, extract, fragment_submodel, fragments, full_submodel,
                                   insert, sub_state_bytes, submodel_costs, validate_submodel, width_submodel,
                                   with_states)
from fedsim.learn.sgd import SGDConfig, local_sgd

torch.set_num_threads(1)


def _model(name, shape, seed=0, **kw):
    return build_model(name, shape, 10, seed_generator=torch.Generator().manual_seed(seed), **kw)


def _data(shape, n=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, *shape, generator=g), torch.randint(0, 10, (n,), generator=g)


def _clone(state):
    return {k: v.detach().clone() for k, v in state.items()}


SGD = SGDConfig(lr=0.1, momentum=0.9, weight_decay=1e-3, batch_size=8, local_steps=4, local_epochs=None)


@pytest.mark.parametrize("name,shape,kw", [("mlp", (1, 8, 8), {"hidden": (32, 16)}), ("cnn", (1, 8, 8), {}),
                                           ("resnet20", (3, 8, 8), {"depth": 8, "bn": "global"})])
def test_width_one_is_the_full_model_bit_for_bit(name, shape, kw):
    """extract -> local SGD -> insert at width 1.0 gives exactly what local SGD on the full model gives."""
    model = _model(name, shape, **kw)
    x, y = _data(shape)
    base = _clone(model.state_dict())
    sub = width_submodel(model, 1.0, "rolling", offset=3)
    assert sub.keep == {} and sub.key() == full_submodel(model).key()
    client = extract(model, base, sub)
    local_sgd(client, x, y, np.arange(40), SGD, torch.Generator().manual_seed(7))
    tensors, mask = insert(base, sub, client.state_dict())
    local_sgd(model, x, y, np.arange(40), SGD, torch.Generator().manual_seed(7))
    ref = model.state_dict()
    assert mask == {} and set(tensors) == set(ref)
    for k in ref:
        assert torch.equal(tensors[k], ref[k]), k


@pytest.mark.parametrize("name,shape,kw", [("mlp", (1, 8, 8), {"hidden": (32, 16)}), ("cnn", (1, 8, 8), {}),
                                           ("alexnet_cifar", (3, 32, 32), {}),
                                           ("resnet20", (3, 8, 8), {"depth": 8, "bn": "global"}),
                                           ("vit", (3, 16, 16), {"depth": 2, "options": {"patch": 4}})])
def test_extract_copies_blocks_as_deepcopy_would(name, shape, kw, monkeypatch):
    """extract's block copy (its own walk, not copy.deepcopy) builds the module deepcopy would: same module
    types, repr, tensors, trainability and outputs, and no module or tensor shared with the global model."""
    import copy

    import fedsim.learn.submodel as sm

    model = _model(name, shape, **kw)
    x = _data(shape, n=4)[0]
    for sub in (full_submodel(model), width_submodel(model, 0.5),
                with_states(width_submodel(model, 0.5), {0: "frozen", model.num_blocks() - 1: "removed"})):
        ours = extract(model, model.state_dict(), sub)
        with monkeypatch.context() as m:
            m.setattr(sm, "_skeleton_copy", lambda module, memo: copy.deepcopy(module))
            ref = extract(model, model.state_dict(), sub)
        assert repr(ours) == repr(ref)
        assert [type(a) for a in ours.modules()] == [type(b) for b in ref.modules()]
        sa, sb = ours.state_dict(), ref.state_dict()
        assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
        assert [p.requires_grad for p in ours.parameters()] == [p.requires_grad for p in ref.parameters()]
        if sub.states[-1] == "removed":
            ours.blocks = ours.blocks[:-1]  # no head: compare the features
            ref.blocks = ref.blocks[:-1]
        ours.eval(), ref.eval()
        assert torch.equal(ours(x), ref(x))
        mine = {id(t) for t in (*ours.parameters(), *ours.buffers())} | {id(m) for m in ours.modules()}
        assert not mine & ({id(t) for t in (*model.parameters(), *model.buffers())} | {id(m) for m in model.modules()})


@pytest.mark.parametrize("name,shape,kw", [("mlp", (1, 8, 8), {"hidden": (32, 16)}), ("cnn", (1, 8, 8), {}),
                                           ("alexnet_cifar", (3, 32, 32), {}),
                                           ("resnet20", (3, 8, 8), {"depth": 8, "bn": "global"}),
                                           ("vit", (3, 16, 16), {"depth": 2, "options": {"patch": 4}})])
def test_extract_then_insert_without_training_leaves_the_model_unchanged(name, shape, kw):
    model = _model(name, shape, **kw)
    base = _clone(model.state_dict())
    n = model.num_blocks()
    for sub in (width_submodel(model, 0.5), width_submodel(model, 0.3, "rolling", offset=5),
                with_states(width_submodel(model, 0.5, "rolling", offset=2), depth_window(n, 1, n - 2))):
        tensors, mask = insert(base, sub, extract(model, base, sub).state_dict())
        avg = masked_weighted_average([Update(0, tensors, mask=mask)], base)
        for k in base:
            assert torch.equal(avg[k], base[k]), k
            if k in tensors:
                assert torch.equal(tensors[k], base[k]), k


def test_a_frozen_block_never_changes_and_has_no_gradient_or_optimizer_state():
    model = _model("mlp", (1, 8, 8), hidden=(32, 32, 16))
    base = _clone(model.state_dict())
    sub = with_states(width_submodel(model, 0.5), depth_window(4, 2, 2))  # blocks 0, 1 frozen
    client = extract(model, base, sub)
    frozen = [p for b in client.blocks[:2] for p in b.parameters()]
    assert frozen and not any(p.requires_grad for p in frozen)
    before = [p.detach().clone() for p in frozen]
    x, y = _data((1, 8, 8))
    local_sgd(client, x, y, np.arange(40), SGD, torch.Generator().manual_seed(1))
    assert all(torch.equal(a, p) for a, p in zip(before, frozen))
    assert all(p.grad is None for p in frozen)
    # optimizer state (momentum) is sized by the trainable parameters only
    trainable = sum(p.numel() * p.element_size() for b in client.blocks[2:] for p in b.parameters())
    mem = memory_estimate(client, (1, 8, 8), 8, momentum=True)
    assert mem.optimizer == trainable == mem.grads
    tensors, mask = insert(base, sub, client.state_dict())
    assert {k.split(".")[1] for k in tensors} == {"2", "3"}  # frozen blocks are not uploaded


def test_disjoint_fragments_average_to_each_fragment_written_in_place():
    model = _model("fragment_mlp", (1, 8, 8), options={"partitions": 3})
    base = _clone(model.state_dict())
    assert fragments(200, model.fragment_ratios) == [tuple(range(0, 40)), tuple(range(40, 100)), tuple(range(100, 200))]
    g = torch.Generator().manual_seed(3)
    ups, trained = [], []
    for j, w in ((0, 2.0), (2, 1.0)):
        sub = fragment_submodel(model, j)
        client = extract(model, base, sub)
        new = {k: v + torch.randn(v.shape, generator=g) for k, v in client.state_dict().items()}
        trained.append(new)
        t, m = insert(base, sub, new)
        ups.append(Update(j, t, mask=m, weight=w))
    avg = masked_weighted_average(ups, base)
    a, b = trained
    exp = _clone(base)
    exp["blocks.0.1.weight"][0:40] = a["blocks.0.1.weight"]
    exp["blocks.0.1.bias"][0:40] = a["blocks.0.1.bias"]
    exp["blocks.1.0.weight"][:, 0:40] = a["blocks.1.0.weight"]
    exp["blocks.0.1.weight"][100:200] = b["blocks.0.1.weight"]
    exp["blocks.0.1.bias"][100:200] = b["blocks.0.1.bias"]
    exp["blocks.1.0.weight"][:, 100:200] = b["blocks.1.0.weight"]
    exp["blocks.1.0.bias"] = (2.0 * a["blocks.1.0.bias"] + b["blocks.1.0.bias"]) / 3.0  # shared by both
    for k in base:
        torch.testing.assert_close(avg[k], exp[k], rtol=0, atol=1e-6)
    assert torch.equal(avg["blocks.0.1.weight"][40:100], base["blocks.0.1.weight"][40:100])


def test_mlp_flops_and_bytes_by_hand():
    model = _model("mlp", (1, 8, 8), hidden=(32, 16))
    sub = width_submodel(model, 0.5)  # hidden 16, 8
    c = submodel_costs(model, sub, (1, 8, 8), 8, momentum=False)
    macs = [64 * 16, 16 * 8, 8 * 10]
    assert c.flops.forward == 2 * sum(macs)
    assert c.flops.backward == 2 * macs[0] + 4 * (macs[1] + macs[2])  # no input gradient for layer 1
    params = (64 * 16 + 16) + (16 * 8 + 8) + (8 * 10 + 10)
    assert c.download_bytes == c.upload_bytes == sub_state_bytes(model, sub) == 4 * params
    # a frozen first block: downloaded, not uploaded, and no backward through it
    fz = with_states(sub, {0: "frozen"})
    cf = submodel_costs(model, fz, (1, 8, 8), 8)
    assert cf.download_bytes == 4 * params and cf.upload_bytes == sub_state_bytes(model, fz, trained_only=True)
    assert cf.upload_bytes == 4 * ((16 * 8 + 8) + (8 * 10 + 10))
    assert cf.flops.forward == c.flops.forward and cf.flops.backward == 2 * macs[1] + 4 * macs[2]


def test_conv_flops_scale_with_width_squared_inside():
    model = _model("cnn", (1, 8, 8))  # conv 1->16 on 8x8, pool, conv 16->32 on 4x4
    full = flops_per_sample(extract(model, model.state_dict(), full_submodel(model)), (1, 8, 8), start=1, end=2)
    assert full.forward == 2 * 32 * 16 * 9 * 16
    for w, (c1, c2) in ((0.5, (8, 16)), (0.3, (5, 10))):  # ceil(0.3 * 16) = 5, ceil(0.3 * 32) = 10
        client = extract(model, model.state_dict(), width_submodel(model, w))
        conv2 = flops_per_sample(client, (1, 8, 8), start=1, end=2)
        assert conv2.forward == 2 * c2 * c1 * 9 * 16
    half = flops_per_sample(extract(model, model.state_dict(), width_submodel(model, 0.5)), (1, 8, 8), start=1, end=2)
    assert half.forward == full.forward / 4 and half.backward == full.backward / 4


def test_attention_heads_are_pruned_whole():
    model = _model("vit", (3, 16, 16), depth=1, options={"patch": 4, "embed_dim": 16, "heads": 4})
    hd = 4
    base = model.state_dict()
    sub = SubModel.of(model, {"b1.heads": (1, 3)})
    client = extract(model, base, sub)
    cs = client.state_dict()
    rows = torch.cat([torch.arange(4, 8), torch.arange(12, 16)])
    for n in ("q", "k", "v"):
        assert cs[f"blocks.1.attn.{n}.weight"].shape == (8, 16)
        assert torch.equal(cs[f"blocks.1.attn.{n}.weight"], base[f"blocks.1.attn.{n}.weight"][rows])
        for h in (0, 2):  # a pruned head's rows are nowhere in the extracted tensor
            gone = base[f"blocks.1.attn.{n}.weight"][h * hd:(h + 1) * hd]
            assert not any(torch.equal(gone[i], r) for i in range(hd) for r in cs[f"blocks.1.attn.{n}.weight"])
    assert torch.equal(cs["blocks.1.attn.proj.weight"], base["blocks.1.attn.proj.weight"][:, rows])
    # independent check: dropping heads 0 and 2 = zeroing their columns of the output projection
    ref = _model("vit", (3, 16, 16), depth=1, options={"patch": 4, "embed_dim": 16, "heads": 4})
    with torch.no_grad():
        ref.blocks[1].attn.proj.weight[:, 0:4] = 0
        ref.blocks[1].attn.proj.weight[:, 8:12] = 0
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(client(x), ref(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name,kw", [("resnet20", {"bn": "static"}), ("resnet20", {"bn": "global", "depth": 8}),
                                     ("vit", {"depth": 2})])
def test_resnet_and_vit_train_on_32x32_at_several_widths(name, kw):
    model = _model(name, (3, 32, 32), **kw)
    x, y = _data((3, 32, 32), n=4)
    sizes = []
    for w in (1.0, 0.5, 0.25):
        client = extract(model, model.state_dict(), width_submodel(model, w, "rolling", offset=1))
        loss = nn.functional.cross_entropy(client(x), y)
        loss.backward()
        assert math.isfinite(float(loss.detach()))
        assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in client.parameters())
        sizes.append(sum(p.numel() for p in client.parameters()))
    assert sizes[0] > sizes[1] > sizes[2]


def test_resnet20_is_the_standard_cifar_resnet():
    """272,474 parameters (the EmbracingFL spec's recount of He et al.'s ResNet-20 with projection shortcuts)."""
    m = _model("resnet20", (3, 32, 32))
    assert m.num_blocks() == 11 and sum(p.numel() for p in m.parameters()) == 272_474
    assert not any("running" in k for k in m.state_dict())  # static BN carries no running statistics
    assert any("running_mean" in k for k in _model("resnet20", (3, 32, 32), bn="global").state_dict())
    assert _model("resnet20", (3, 32, 32), depth=32).num_blocks() == 3 * 5 + 2


def test_global_bn_running_statistics_follow_their_channels():
    model = _model("resnet20", (3, 8, 8), depth=8, bn="global")
    base = _clone(model.state_dict())
    sub = width_submodel(model, 0.5)  # stage1 keeps channels 0..7 of 16
    client = extract(model, base, sub)
    x, _ = _data((3, 8, 8), n=8)
    client(x)  # a training-mode forward updates the running statistics
    tensors, mask = insert(base, sub, client.state_dict())
    rm = "blocks.0.bn.running_mean"
    assert torch.equal(mask[rm], torch.tensor([1.0] * 8 + [0.0] * 8))
    assert not torch.equal(tensors[rm][:8], base[rm][:8]) and torch.equal(tensors[rm][8:], base[rm][8:])
    assert "blocks.0.bn.num_batches_tracked" in tensors and "blocks.0.bn.num_batches_tracked" not in mask


def test_fedrolex_window_after_r_rounds_wraps_around():
    model = _model("cnn", (1, 8, 8))  # conv1: 16 channels, conv2: 32, fc: 64
    for r, c1, c2 in ((0, (0, 1, 2, 3), tuple(range(0, 8))),
                      (14, (0, 1, 14, 15), tuple(range(14, 22))),
                      (30, (0, 1, 14, 15), (0, 1, 2, 3, 4, 5, 30, 31))):
        sub = width_submodel(model, 0.25, "rolling", offset=r)
        assert sub.keep["conv1"] == c1 and sub.keep["conv2"] == c2
        assert sub.keep["fc"] == tuple(sorted((r + i) % 64 for i in range(16)))
    # the extracted conv1 holds the wrapped window's channels (in index order)
    sub = width_submodel(model, 0.25, "rolling", offset=14)
    w = extract(model, model.state_dict(), sub).state_dict()["blocks.0.0.weight"]
    assert torch.equal(w, model.state_dict()["blocks.0.0.weight"][[0, 1, 14, 15]])


def test_summary_and_depth_window():
    model = _model("mlp", (1, 8, 8), hidden=(32, 16))
    assert depth_window(5, 1, 2) == ("frozen", "train", "train", "removed", "removed")
    s = with_states(width_submodel(model, 0.5), {2: "removed"}).summary(model)
    assert s["states"] == "ttr"
    assert s["blocks"] == [round((64 * 16 + 16) / (64 * 32 + 32), 4), round((16 * 8 + 8) / (32 * 16 + 16), 4), 0.0]


def test_residual_add_zero_pads_the_narrower_operand():
    a, b = torch.ones(2, 3, 4, 4), torch.full((2, 5, 4, 4), 2.0)
    out = residual_add(a, b)
    assert out.shape == (2, 5, 4, 4) and torch.equal(out[:, :3], torch.full((2, 3, 4, 4), 3.0))
    assert torch.equal(out[:, 3:], b[:, 3:])
    assert torch.equal(residual_add(b, a), out)


@pytest.mark.parametrize("make, field, words", [
    (lambda m: width_submodel(m, 0.0), "width", "(0, 1]"),
    (lambda m: width_submodel(m, 1.5), "width", "(0, 1]"),
    (lambda m: width_submodel(m, 0.5, "random"), "width", "prefix, rolling"),
    (lambda m: width_submodel(m, 0.5, groups=["conv9"]), "width", "unknown width group 'conv9'"),
    (lambda m: validate_submodel(m, SubModel.of(m, {"conv9": (0,)}), "sub"), "sub.keep", "allowed: conv1, conv2, fc"),
    (lambda m: validate_submodel(m, SubModel.of(m, {"conv1": (3, 16)}), "sub"), "sub.keep.conv1", "out of range"),
    (lambda m: validate_submodel(m, SubModel.of(m, {"conv1": ()}), "sub"), "sub.keep.conv1", "keeps no unit"),
    (lambda m: with_states(full_submodel(m), {7: "frozen"}), "states", "block 7 does not exist"),
    (lambda m: with_states(full_submodel(m), ["frozen"] * 4), "states", "no trainable block"),
    (lambda m: with_states(full_submodel(m), ["train"] * 3), "states", "3 block states for a model of 4"),
    (lambda m: with_states(full_submodel(m), {1: "sleeping"}), "states[1]", "allowed: train, frozen, removed"),
    (lambda m: depth_window(4, 3, 2), "depth", "does not fit"),
    (lambda m: fragment_submodel(m, 5, (0.5, 0.5)), "fragment", "fragment 5 does not exist"),
])
def test_bad_submodels_give_one_clear_line(make, field, words):
    model = _model("cnn", (1, 8, 8))
    with pytest.raises(ConfigError) as e:
        make(model)
    assert e.value.field == field and words in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("kw, field", [({"depth": 21}, "model.depth"), ({"bn": "batch"}, "model.bn"),
                                        ({"options": {"heads": 3}}, "model.options.heads")])
def test_bad_model_knobs(kw, field):
    name = "vit" if "options" in kw else "resnet20"
    with pytest.raises(ConfigError) as e:
        _model(name, (3, 32, 32), **kw)
    assert e.value.field == field


def test_digits32_is_bilinear_digits_on_three_channels():
    from sklearn.datasets import load_digits

    from fedsim.learn.data import load_dataset

    d32 = load_dataset("digits32", rng=np.random.default_rng(4))
    d8 = load_dataset("digits", rng=np.random.default_rng(4))
    assert d32.train.input_shape == (3, 32, 32) and len(d32.train) == len(d8.train)
    assert torch.equal(d32.train.y, d8.train.y)
    assert torch.equal(d32.train.x[:, 0], d32.train.x[:, 2])
    # hand-made bilinear (half-pixel centres, edge clamp) of the raw image, up to the per-channel affine map
    raw = load_digits().images / 16.0
    perm = np.random.default_rng(4).permutation(len(raw))  # the documented split: 20% test, at random
    src = np.sort(perm[int(round(0.2 * len(raw))):])[0]
    img = d32.train.x[0, 0].double().numpy()
    pos = np.clip((np.arange(32) + 0.5) / 4 - 0.5, 0, 7)
    lo = np.floor(pos).astype(int)
    hi = np.minimum(lo + 1, 7)
    f = pos - lo
    rows = raw[src][lo] * (1 - f)[:, None] + raw[src][hi] * f[:, None]
    hand = rows[:, lo] * (1 - f)[None, :] + rows[:, hi] * f[None, :]
    assert np.corrcoef(hand.ravel(), img.ravel())[0, 1] > 1 - 1e-9


# ------------------------------------------------------------------------------------------ the run-time glue

def _context(mapping):
    import simpy

    from fedsim.build import build_global_model, prepare_data
    from fedsim.context import Context
    from fedsim import scenario_from_mapping
    from fedsim.sim.rng import Streams
    from fedsim.sim.trace import Trace
    from fedsim.system.world import World

    sc = scenario_from_mapping(mapping)
    prep = prepare_data(sc)
    env, streams, trace = simpy.Environment(), Streams(sc.seed), Trace(None)
    world = World.from_scenario(env, streams, trace, len(prep.parts), sc)
    return Context(sc, env, streams, trace, world, prep.data, prep.parts, build_global_model(sc, prep.data))


def _task(ctx, sub, client=0):
    from fedsim.algorithms.pipeline import client_task
    from fedsim.messages import Assignment

    proc = ctx.env.process(client_task(ctx, client, ctx.global_state, 0, task=0, assignment=Assignment(submodel=sub)))
    ctx.env.run()
    return proc.value


def test_a_client_task_trains_downloads_and_uploads_only_the_submodel(tiny):
    tiny["model"] = {"name": "mlp", "hidden": [32, 16]}
    ctx = _context(tiny)
    model, base = ctx.training.worker, _clone(ctx.global_state)
    sub = with_states(width_submodel(model, 0.5, "rolling", offset=30), {0: "frozen"})
    up = _task(ctx, sub)
    assert len(ctx.parts[0]) >= 48
    samples = 3 * 16  # local_steps 3, batch 16
    assert up.costs["bytes_down"] == 4 * ((64 * 16 + 16) + (16 * 8 + 8) + (8 * 10 + 10))
    assert up.costs["bytes_up"] == 4 * ((16 * 8 + 8) + (8 * 10 + 10))  # the frozen block is not sent back
    fwd = 2 * (64 * 16 + 16 * 8 + 8 * 10)
    bwd = 2 * (16 * 8) + 4 * (8 * 10)  # layer 2 needs no input gradient: the first layer is frozen
    assert up.costs["flops"] == (fwd + bwd) * samples
    assert set(up.tensors) == {k for k in base if not k.startswith("blocks.0.")}
    w = "blocks.1.0.weight"  # rows: hidden.1's window (30 mod 16 = 14: 14, 15, 0..5); columns: hidden.0's (30, 31, 0..13)
    rows, cols = [0, 1, 2, 3, 4, 5, 14, 15], [30, 31] + list(range(14))
    expect = torch.zeros(16, 32)
    expect[torch.tensor(rows)[:, None], torch.tensor(cols)[None, :]] = 1
    assert torch.equal(up.mask[w], expect)
    assert torch.equal(up.tensors[w][expect == 0], base[w][expect == 0])
    assert not torch.equal(up.tensors[w][expect == 1], base[w][expect == 1])


def test_the_full_submodel_is_plain_local_sgd(tiny):
    tiny["model"] = {"name": "mlp", "hidden": [32]}
    a, b = _context(tiny), _context(tiny)
    up_sub = _task(a, full_submodel(a.training.worker))
    up_plain = _task(b, None)
    assert up_sub.mask is None and up_sub.costs == up_plain.costs
    assert all(torch.equal(up_sub.tensors[k], up_plain.tensors[k]) for k in up_plain.tensors)


def test_memory_fit_picks_the_largest_submodel_that_fits_and_refuses_in_one_line(tiny, tmp_path):
    tiny["model"] = {"name": "mlp", "hidden": [512]}
    tiny["train"]["momentum"] = 0.9
    profiles = {}
    for name, mib in (("tiny-a", 0.3), ("tiny-b", 0.01)):
        p = tmp_path / f"{name}.yaml"
        src = __import__("device_profiles").PROFILE_DIR
        body = (Path(src) / "raspberry-pi-4.yaml").read_text().replace("name: raspberry-pi-4", f"name: {name}")
        body = body.replace("memory: {value: 4, unit: GiB", f"memory: {{value: {mib}, unit: MiB")
        p.write_text(body)
        profiles[name] = str(p)
    tiny["devices"] = {"mix": [{"profile": profiles["tiny-a"]}], "jitter": 0.0}
    ctx = _context(tiny)
    subs = [width_submodel(ctx.training.worker, w) for w in (1.0, 0.5, 0.25)]
    need = [ctx.training.submodel_costs(s).memory.total for s in subs]
    assert need[0] > 0.3 * 2**20 > need[2] and need[0] > need[1] > need[2]
    fit = ctx.training.fit_submodel(0, subs)
    assert fit == subs[next(i for i, n in enumerate(need) if n <= 0.3 * 2**20)]
    tiny["devices"] = {"mix": [{"profile": profiles["tiny-b"]}], "jitter": 0.0}
    ctx = _context(tiny)
    with pytest.raises(ConfigError) as e:
        ctx.training.fit_submodel(0, subs)
    msg = str(e.value)
    assert "\n" not in msg and "'tiny-b'" in msg and "model 'mlp'" in msg
    assert f"({need[2]:.0f} bytes)" in msg and f"({0.01 * 2**20:.0f} bytes)" in msg


def test_resnet20_flops_by_hand():
    """Forward multiply-adds of ResNet-20 on 32x32, layer by layer (3x3 convs, two 1x1 projections, FC)."""
    macs = (16 * 3 * 9 * 1024 + 6 * 16 * 16 * 9 * 1024            # stem, stage 1
            + 32 * 16 * 9 * 256 + 5 * 32 * 32 * 9 * 256 + 32 * 16 * 256   # stage 2 (+ projection)
            + 64 * 32 * 9 * 64 + 5 * 64 * 64 * 9 * 64 + 64 * 32 * 64      # stage 3 (+ projection)
            + 64 * 10)
    assert macs == 40_813_184
    model = _model("resnet20", (3, 32, 32))
    assert flops_per_sample(model, (3, 32, 32)).forward == 2 * macs
    half = submodel_costs(model, width_submodel(model, 0.5), (3, 32, 32), 4)
    stem, fc = 16 * 3 * 9 * 1024, 64 * 10  # their inputs (3 colours) and outputs (10 classes) keep full width
    assert half.flops.forward == 2 * ((macs - stem - fc) / 4 + (stem + fc) / 2)  # the other convs at w^2


@pytest.mark.parametrize("args, field", [
    (["model.name=resnet20", "model.bn=batch"], "model.bn"),
    (["model.name=vit", "model.options.heads=3"], "model.options.heads"),
    (["model.name=vit", "model.options.dropout=0.1"], "model.options.dropout"),
    (["model.name=resnet20", "model.depth=21"], "model.depth"),
    (["model.name=mlp", "--widths", "1.5"], "--widths"),
])
def test_bad_model_input_on_the_command_line(capsys, args, field):
    from fedsim.cli import main

    code = main(["models", "default", "data.name=digits32", *args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and field in err and "Traceback" not in err


def test_models_command_prints_the_measured_costs(capsys):
    from fedsim.cli import main

    assert main(["models", "default", "model.name=mlp", "model.hidden=[32]", "--widths", "1,0.5"]) == 0
    out = capsys.readouterr().out
    assert "hidden.0 (32)" in out
    assert str(4 * (64 * 16 + 16 + 16 * 10 + 10)) in out  # bytes of the half-width MLP on 8x8 digits


def test_a_submodel_of_an_extracted_module_is_the_nested_submodel():
    """The extracted module declares its own groups: a prefix of a prefix is the global prefix, and
    inserting through both levels writes the same entries (FjORD's per-step widths inside a client)."""
    model = _model("cnn", (1, 8, 8))
    base = _clone(model.state_dict())
    outer = width_submodel(model, 0.5)
    client = extract(model, base, outer)
    assert {g: grp.size for g, grp in client.width_groups().items()} == {"conv1": 8, "conv2": 16, "fc": 32}
    inner = width_submodel(client, 0.5)
    nested = extract(client, client.state_dict(), inner)
    direct = extract(model, base, width_submodel(model, 0.25))
    assert nested.state_dict().keys() == direct.state_dict().keys()
    assert all(torch.equal(nested.state_dict()[k], direct.state_dict()[k]) for k in direct.state_dict())
    trained = {k: v + 1.0 for k, v in nested.state_dict().items()}
    t1, _ = insert(client.state_dict(), inner, trained)
    t2, m2 = insert(base, outer, t1)
    t3, m3 = insert(base, width_submodel(model, 0.25), trained)
    for k in t3:
        assert torch.equal(t2[k] * m3.get(k, 1), t3[k] * m3.get(k, 1)), k
    # a depth window drops the groups that lived only in removed blocks
    win = extract(model, base, with_states(full_submodel(model), depth_window(4, 0, 2)))
    assert set(win.width_groups()) == {"conv1", "conv2"}


def test_static_bn_evaluation_statistics_from_training_data_by_hand():
    from fedsim.learn.sgd import static_bn_statistics

    g = torch.Generator().manual_seed(0)
    bn = nn.BatchNorm1d(3, track_running_stats=False)
    with torch.no_grad():
        bn.weight.copy_(torch.tensor([1.0, 2.0, 0.5]))
        bn.bias.copy_(torch.tensor([0.0, -1.0, 3.0]))
    model = nn.Sequential(bn)
    keys = set(model.state_dict())
    train_x = torch.randn(50, 3, generator=g) * 3 + 1
    test_x = torch.randn(7, 3, generator=g)
    with static_bn_statistics(model, train_x, batch_size=50):  # one batch: the plain mean and unbiased variance
        out = model(test_x)
    mean, var = train_x.mean(0), train_x.var(0, unbiased=True)
    torch.testing.assert_close(out, (test_x - mean) / torch.sqrt(var + bn.eps) * bn.weight + bn.bias)
    assert set(model.state_dict()) == keys and bn.running_mean is None and model.training
    # without the block, static BN normalises with the batch's own statistics
    plain = model.eval()(test_x)
    torch.testing.assert_close(plain, (test_x - test_x.mean(0)) / torch.sqrt(test_x.var(0, unbiased=False) + bn.eps)
                               * bn.weight + bn.bias)


def test_a_resnet_run_evaluates_static_bn_with_train_statistics(tiny):
    tiny["data"]["name"] = "digits32"
    tiny["model"] = {"name": "resnet20", "depth": 8, "width": 0.25}
    tiny["eval"] = {"bn_stats": "train", "bn_samples": 64, "max_samples": 64}
    ctx = _context(tiny)
    assert ctx.training.bn_data.shape == (64, 3, 32, 32)
    keys = set(ctx.training.worker.state_dict())
    row = ctx.versions.evaluate()
    assert 0.0 <= row["accuracy"] <= 1.0 and math.isfinite(row["loss"]) and set(ctx.training.worker.state_dict()) == keys
