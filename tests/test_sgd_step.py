"""The local SGD step, written once (``fedsim.learn.sgd``: ``sgd_update_``, ``clip_grads_``, ``sgd_step``):
a closed form by hand, ``torch.optim.SGD`` bit for bit, its stacked (batched) form, and the trainers that
must go through it (plain local SGD, FjORD's ordered dropout, batched training)."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import fedsim.learn.batched as batched
import fedsim.learn.sgd as train
from fedsim.algorithms.width import OrderedDropoutTrainer
from fedsim.learn.batched import batched_local_sgd
from fedsim.learn.submodel import extract, insert, width_submodel
from fedsim.learn.sgd import Proximal, SGDConfig, clip_grads_, local_sgd, sgd_step, sgd_update_
from test_width_algorithms import NANO, ORIN, _algo, _width_scenario

torch.set_num_threads(1)


def test_sgd_step_two_steps_by_hand():
    """p = (1, 2), lr 0.1, momentum 0.9, weight decay 0.5, clip 1.  Step 1, gradient (3, 4) of norm 5:
    clipped to (0.6, 0.8); d = (0.6, 0.8) + 0.5 p = (1.1, 1.8) is the first buffer; p = (0.89, 1.82).
    Step 2, gradient 0 (not clipped): d = 0.5 p = (0.445, 0.91); buffer 0.9 (1.1, 1.8) + d = (1.435, 2.53);
    p = (0.7465, 1.567)."""
    cfg = SGDConfig(lr=0.1, momentum=0.9, weight_decay=0.5, clip_norm=1.0)
    p = torch.tensor([1.0, 2.0], dtype=torch.float64)
    bufs: list[torch.Tensor | None] = [None]
    sgd_step([p], [torch.tensor([3.0, 4.0], dtype=torch.float64)], bufs, cfg)
    assert p.tolist() == pytest.approx([0.89, 1.82], abs=1e-6)  # the clip coefficient is 1 / (5 + 1e-6)
    assert bufs[0].tolist() == pytest.approx([1.1, 1.8], abs=1e-6)
    sgd_step([p], [torch.zeros(2, dtype=torch.float64)], bufs, cfg)
    assert bufs[0].tolist() == pytest.approx([1.435, 2.53], abs=1e-6)
    assert p.tolist() == pytest.approx([0.7465, 1.567], abs=1e-6)


@pytest.mark.parametrize("clip", [None, 0.3])
def test_sgd_step_equals_torch_optim_sgd_bit_for_bit(clip):
    """Weight decay, momentum and clipping as ``clip_grad_norm_`` + ``torch.optim.SGD`` compute them."""
    g = torch.Generator().manual_seed(0)
    shapes = [(5, 3), (3,), (2, 2, 2)]
    ours = [torch.randn(s, generator=g) for s in shapes]
    theirs = [nn.Parameter(t.clone()) for t in ours]
    opt = torch.optim.SGD(theirs, lr=0.07, momentum=0.9, weight_decay=1e-3)
    cfg = SGDConfig(lr=0.07, momentum=0.9, weight_decay=1e-3, clip_norm=clip)
    bufs: list[torch.Tensor | None] = [None] * len(ours)
    for _ in range(6):
        grads = [torch.randn(s, generator=g) for s in shapes]
        for q, gr in zip(theirs, grads):
            q.grad = gr.clone()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(theirs, clip)
        opt.step()
        sgd_step(ours, [gr.clone() for gr in grads], bufs, cfg)
        assert all(torch.equal(a, b.detach()) for a, b in zip(ours, theirs))


def test_sgd_update_stacked_rows_equal_one_at_a_time():
    """Batched training's form: the active clients' rows get exactly the single-tensor update, the others
    keep their weights and momentum buffer."""
    g = torch.Generator().manual_seed(1)
    p, buf = torch.randn(3, 4, 2, generator=g), torch.randn(3, 4, 2, generator=g)
    grad = torch.randn(3, 4, 2, generator=g)
    active = torch.tensor([True, False, True])
    kw = dict(lr=0.05, momentum=0.5, weight_decay=1e-2)
    new_p, new_buf = sgd_update_(p, grad, buf, active=active, **kw)
    for c in range(3):
        if active[c]:
            one_p, one_buf = sgd_update_(p[c].clone(), grad[c], buf[c].clone(), **kw)
            assert torch.equal(new_p[c], one_p) and torch.equal(new_buf[c], one_buf)
        else:
            assert torch.equal(new_p[c], p[c]) and torch.equal(new_buf[c], buf[c])


def test_clip_per_client_is_each_clients_own_clip():
    g = torch.Generator().manual_seed(2)
    grads = [torch.randn(4, 6, generator=g) * 3, torch.randn(4, 2, 3, generator=g)]
    grads[0][1] *= 1e-3  # a client below the threshold is not scaled
    stacked = [t.clone() for t in grads]
    clip_grads_(stacked, 1.0, per_client=True)
    for c in range(4):
        one = [t[c].clone() for t in grads]
        clip_grads_(one, 1.0)
        for a, b in zip(stacked, one):
            torch.testing.assert_close(a[c], b, rtol=1e-6, atol=0)


def test_masked_entries_stay_bit_identical():
    """A 0 in the mask keeps the entry as it was, through the objective's term, weight decay and momentum."""
    cfg = SGDConfig(lr=0.1, momentum=0.9, weight_decay=0.1, clip_norm=1.0)
    p = torch.tensor([1.0, -2.0, 3.0])
    start = p.clone()
    prox = Proximal(0.5)
    prox.begin({"w": p - 1.0})
    bufs: list[torch.Tensor | None] = [None]
    mask = torch.tensor([1.0, 0.0, 1.0])
    for _ in range(3):
        sgd_step([p], [torch.tensor([0.3, 5.0, -0.2])], bufs, cfg, objective=prox, names=["w"], masks=[mask])
    assert p[1] == start[1] and bufs[0][1] == 0
    assert p[0] != start[0] and p[2] != start[2]


def _count(monkeypatch, module, name: str) -> list[int]:
    calls = [0]
    real = getattr(module, name)

    def counted(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_batched_training_goes_through_the_shared_update(monkeypatch):
    """One ``sgd_update_`` per parameter tensor and step, and for one client the weights of ``local_sgd``
    (to float rounding: the vectorised loss is a weighted sum, the batches padded, see ``learn/batched.py``;
    the update arithmetic itself is pinned by the stacked-rows test above)."""
    calls = _count(monkeypatch, batched, "sgd_update_")
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(40, 6, generator=g), torch.randint(0, 3, (40,), generator=g)
    model = nn.Sequential(nn.Linear(6, 3))
    base = {k: v.detach().clone() for k, v in model.state_dict().items()}
    cfg = SGDConfig(lr=0.1, momentum=0.9, weight_decay=1e-3, batch_size=8, local_steps=7, clip_norm=0.5)
    ix = torch.arange(3, 33)
    ((state, stats),) = batched_local_sgd(model, base, x, y, [ix], cfg, [torch.Generator().manual_seed(4)])
    assert calls[0] == 7 * 2  # weight and bias, every step
    local_sgd(model, x, y, ix, cfg, torch.Generator().manual_seed(4))
    for k, v in model.state_dict().items():
        torch.testing.assert_close(state[k], v, rtol=1e-6, atol=1e-7)


def test_local_sgd_goes_through_sgd_step(monkeypatch):
    calls = _count(monkeypatch, train, "sgd_step")
    g = torch.Generator().manual_seed(5)
    model = nn.Linear(4, 2)
    local_sgd(model, torch.randn(20, 4, generator=g), torch.randint(0, 2, (20,), generator=g), range(20),
              SGDConfig(lr=0.1, batch_size=5, local_steps=6), torch.Generator().manual_seed(0))
    assert calls[0] == 6


@pytest.mark.parametrize("width,mu,clip", [(0.25, 0.0, None), (0.5, 0.3, 0.5), (0.25, 0.3, None)])
def test_ordered_dropout_with_one_width_is_plain_local_sgd_bit_for_bit(tiny, monkeypatch, width, mu, clip):
    """FjORD's trainer takes ``sgd_step`` once per step; with one allowed width p it trains the p-prefix
    exactly as ``local_sgd`` does (weight decay, momentum, clipping and a proximal objective, whose gradient
    term is taken in w_max coordinates), and leaves the rest of the w_max prefix as downloaded."""
    import fedsim.algorithms.width as width_mod

    calls = _count(monkeypatch, width_mod, "sgd_step")
    s = _width_scenario(copy.deepcopy(tiny), {"name": "fjord", "widths": {NANO: 0.5, ORIN: 0.5}})
    s["train"]["clip_norm"] = clip
    ctx = _algo(s).ctx
    model, state = ctx.training.worker, ctx.global_state
    top, small = width_submodel(model, 0.5), width_submodel(model, width)
    trainer = OrderedDropoutTrainer([width], top, objective=Proximal(mu) if mu else None)
    module = extract(model, state, top)
    idx = ctx.parts[0]
    trainer(module, ctx.training, 0, idx, torch.Generator().manual_seed(11))
    assert calls[0] == ctx.training.sgd.local_steps
    ref = extract(model, state, small)
    g = torch.Generator().manual_seed(11)
    torch.randint(1, (ctx.training.sgd.local_steps,), generator=g)  # the width draws come first
    local_sgd(ref, ctx.data.train.x, ctx.data.train.y, idx, ctx.training.sgd, g, objective=Proximal(mu) if mu else None)
    got, mask_top = insert(state, top, module.state_dict())
    want, mask_small = insert(state, small, ref.state_dict())
    for k in state:
        inside = mask_small.get(k, torch.ones_like(state[k])) == 1
        assert torch.equal(got[k][inside], want[k][inside]), k
        ring = (mask_top.get(k, torch.ones_like(state[k])) == 1) & ~inside
        assert torch.equal(got[k][ring], state[k][ring]), k


def test_an_assignment_refuses_a_trainer_with_an_objective():
    """A trainer replaces the whole local step, so an objective beside it would be silently ignored (yet
    costed on the links): refused where the assignment is made."""
    from fedsim.algorithms import Assignment

    trainer = OrderedDropoutTrainer.__call__  # any callable stands for a trainer here
    with pytest.raises(ValueError, match="a trainer or an objective, not both"):
        Assignment(trainer=trainer, objective=Proximal(0.1))
    assert Assignment(objective=Proximal(0.1)).trainer is None and Assignment(trainer=trainer).objective is None


def test_split_learning_side_optimizer_is_the_shared_step_bit_for_bit(monkeypatch):
    """Split learning's client and server sides step with ``sgd_step``: two steps with momentum, weight decay
    and joint clipping equal ``clip_grad_norm_`` + ``torch.optim.SGD`` bit for bit."""
    import fedsim.learn.split as split

    calls = _count(monkeypatch, split, "sgd_step")
    g = torch.Generator().manual_seed(3)
    params = {"w": torch.randn(5, 3, generator=g), "b": torch.randn(5, generator=g)}
    cfg = SGDConfig(lr=0.1, momentum=0.9, weight_decay=0.01, clip_norm=0.5)
    side = split.SideOptimizer(params, cfg)
    ref = [p.clone().requires_grad_(True) for p in params.values()]
    opt = torch.optim.SGD(ref, lr=0.1, momentum=0.9, weight_decay=0.01)
    for _ in range(2):
        grads = [torch.randn(p.shape, generator=g) for p in ref]
        for p, gr in zip(ref, grads):
            p.grad = gr.clone()
        torch.nn.utils.clip_grad_norm_(ref, 0.5)
        opt.step()
        side.step([gr.clone() for gr in grads])
    assert calls[0] == 2
    for got, want in zip(side.state().values(), ref):
        assert torch.equal(got, want.detach())
