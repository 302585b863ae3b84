"""Sub-models: what part of the global model one client trains, as data, and the real smaller module it trains.

A paper's rule (HeteroFL's fixed width per device class, FjORD's ordered dropout, FedRolex's rolling
window, Fed-RAA's neuron fragments, Co-S²P's learned masks and depth window, EmbracingFL's frozen
input-side layers) becomes a :class:`SubModel`:

- ``keep``: per width group of the model (:meth:`BlockModel.width_groups`), the kept unit indices (a
  group not named keeps all its units).  A unit is a neuron, a channel, or a whole attention head; the
  group slices every tensor it ties together (a layer's output rows and the next layer's input columns;
  every tensor on a residual stream), so the kept parts always fit together.
- ``states``: per block, ``"train"`` (forward and backward, updated, sent back), ``"frozen"`` (forward
  only: its parameters have ``requires_grad=False``, so no gradient and no optimizer state; downloaded,
  never uploaded) or ``"removed"`` (not in the client's module at all, not run, not sent).

:func:`extract` builds the client's module: a real :class:`BlockModel` holding the sliced tensors, so the
FLOP counter, the byte count and the memory estimate of :mod:`fedsim.learn.costs` measure the smaller
model.  :func:`insert` writes the trained tensors back into full-shape tensors and returns the coverage
mask (1 exactly at the entries of trainable blocks that the sub-model kept), which the one averaging
function, ``masked_weighted_average``, aggregates entry by entry.

BatchNorm follows the model's ``bn`` mode (:data:`fedsim.learn.models.BN_MODES`): with ``static`` (HeteroFL's
sBN) the layers have no running statistics, so only the affine weights are sliced, trained and averaged,
and training normalises with each batch's statistics.  At evaluation they normalise with each evaluation
batch's statistics (``eval.bn_stats: batch``, batches of ``eval.batch_size``), or with statistics of the
evaluated model gathered from clients' training samples (``eval.bn_stats: train``,
:func:`fedsim.learn.sgd.static_bn_statistics`; per width, since each width is its own model).  With ``global`` the running mean and variance
are members of their channel's width group: sliced with it, updated by local training, written back and
averaged per channel over the clients that kept the channel, like weights.  Integer buffers
(``num_batches_tracked``) of a trainable block are sent back unsliced and follow the averaging function's
one rule for integer buffers.

Residual adds: the built-in models tie the channels joined by a residual add into one group, so shapes
always match; :func:`fedsim.learn.models.residual_add` zero-pads the narrower operand if a hand-made
sub-model breaks that.
"""
from __future__ import annotations

import copy
import math
import numbers
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Mapping, Sequence

import torch
from torch import nn

from fedsim.errors import ConfigError

from .costs import FlopCost, MemoryEstimate, flops_per_sample, memory_estimate, tensor_bytes
from .models import BlockModel, WidthGroup, block_of, scaled

__all__ = ["WidthGroup", "SubModel", "STATES", "SCHEMES", "full_submodel", "width_submodel", "with_states",
           "depth_window", "fragments", "fragment_submodel", "validate_submodel", "extract", "insert",
           "sub_state_bytes", "SubModelCosts", "submodel_costs"]

BlockState = Literal["train", "frozen", "removed"]
#: Block states, in the order the compact summary abbreviates them (t, f, r).
STATES: tuple[str, ...] = ("train", "frozen", "removed")
#: Index schemes of :func:`width_submodel`.
SCHEMES: tuple[str, ...] = ("prefix", "rolling")

_SUMMARY_CACHE: dict[tuple, dict[str, Any]] = {}


@dataclass(frozen=True)
class SubModel:
    """What one client trains: kept unit indices per width group and a state per block.

    Kept indices are stored sorted (a kept set, not an order): the extracted tensors hold the kept units in
    increasing index order, so a set that is everything is the full model bit for bit.  ``groups`` are the
    model's width groups the indices refer to (bound by the constructors below; not
    part of equality or :meth:`key`).  Construct with :func:`full_submodel`, :func:`width_submodel`,
    :func:`fragment_submodel` or ``SubModel.of(model, keep, states)``.
    """

    keep: Mapping[str, tuple[int, ...]]
    states: tuple[str, ...]
    groups: Mapping[str, WidthGroup] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        keep = {str(g): tuple(sorted(int(i) for i in idx)) for g, idx in sorted(dict(self.keep).items())}
        object.__setattr__(self, "keep", keep)
        object.__setattr__(self, "states", tuple(str(s) for s in self.states))
        object.__setattr__(self, "groups", dict(self.groups))

    @classmethod
    def of(cls, model: BlockModel, keep: Mapping[str, Iterable[int]] | None = None,
           states: Sequence[str] | None = None) -> "SubModel":
        """A sub-model of ``model`` (bound to its width groups); ``states`` default: every block trains."""
        return cls({g: tuple(v) for g, v in (keep or {}).items()},
                   tuple(states) if states is not None else ("train",) * model.num_blocks(),
                   model.width_groups())

    def key(self) -> tuple:
        """Hashable identity (kept indices and block states): the cache key of the sub-model's costs."""
        return (tuple(self.keep.items()), self.states)

    def __hash__(self) -> int:
        return hash(self.key())

    @property
    def num_blocks(self) -> int:
        return len(self.states)

    def blocks_in(self, *states: str) -> tuple[int, ...]:
        """Indices of the blocks whose state is one of ``states``."""
        return tuple(j for j, s in enumerate(self.states) if s in states)

    def summary(self, model: BlockModel | Mapping[str, torch.Tensor]) -> dict[str, Any]:
        """Compact description for the trace: kept fraction of the whole model's floating-point entries,
        kept fraction per block (0 for a removed block), and the block states as letters (t/f/r)."""
        arch = getattr(model, "arch", None)
        cached = _SUMMARY_CACHE.get((arch, self.key())) if arch is not None else None
        if cached is not None:
            return {**cached, "blocks": list(cached["blocks"])}
        shapes = _shapes(model)
        plan = _plan(self._groups_for(model), self.keep, {k: v[0] for k, v in shapes.items()})
        kept = [0] * self.num_blocks
        total = [0] * self.num_blocks
        for k, (shape, is_float, _) in shapes.items():
            if not is_float:
                continue
            j = block_of(k)
            total[j] += math.prod(shape)
            if self.states[j] != "removed":
                kept[j] += _sliced_numel(shape, plan.get(k))
        frac = [round(a / b, 4) if b else 0.0 for a, b in zip(kept, total)]
        whole = sum(kept) / sum(total) if sum(total) else 0.0
        out = {"kept": round(whole, 4), "blocks": frac, "states": "".join(s[0] for s in self.states)}
        if arch is not None:
            _SUMMARY_CACHE[(arch, self.key())] = out
        return {**out, "blocks": list(out["blocks"])}

    def _groups_for(self, model: Any) -> Mapping[str, WidthGroup]:
        if isinstance(model, BlockModel):
            return model.width_groups()
        if self.keep and not self.groups:
            raise ValueError("this SubModel is not bound to a model's width groups: build it with "
                             "SubModel.of(model, ...), width_submodel or fragment_submodel")
        return self.groups


# ------------------------------------------------------------------------------------------ constructors

def full_submodel(model: BlockModel) -> SubModel:
    """The whole model, every block trainable (what plain FedAvg trains)."""
    return SubModel.of(model)


def _check_groups(model: BlockModel, groups: Iterable[str] | None, field_: str) -> list[str]:
    all_groups = model.width_groups()
    names = list(all_groups) if groups is None else list(groups)
    for g in names:
        if g not in all_groups:
            raise ConfigError(field_, f"unknown width group {g!r} (allowed: {_list(all_groups)})")
    return names


def width_submodel(model: BlockModel, width: float, scheme: str = "prefix", offset: int = 0, *,
                   groups: Iterable[str] | None = None, states: Sequence[str] | None = None,
                   field: str = "width") -> SubModel:
    """Keep ``ceil(width * n)`` (at least 1) units of every width group (or of ``groups``).

    ``prefix`` (HeteroFL, FjORD's ordered dropout): units 0..k-1.  ``rolling`` (FedRolex): the window of k
    consecutive units starting at ``offset mod n``, wrapping past the end ({n-2, n-1, 0, 1} for k = 4); FedRolex
    advances ``offset`` by one per round.  A group that keeps all its units in order is left out of
    ``keep``, so width 1.0 is exactly the full model.  ``states`` default: every block trains.
    """
    if isinstance(width, bool) or not isinstance(width, (int, float)) or not 0 < width <= 1:
        raise ConfigError(field, f"a sub-model width must be in (0, 1], got {width!r}")
    if scheme not in SCHEMES:
        raise ConfigError(field, f"unknown width scheme {scheme!r} (allowed: {', '.join(SCHEMES)})")
    all_groups = model.width_groups()
    keep: dict[str, tuple[int, ...]] = {}
    for g in _check_groups(model, groups, field):
        n = all_groups[g].size
        k = scaled(n, width)
        start = 0 if scheme == "prefix" else int(offset) % n
        idx = tuple(sorted((start + i) % n for i in range(k)))
        if idx != tuple(range(n)):
            keep[g] = idx
    sub = SubModel(keep, tuple(states) if states is not None else ("train",) * model.num_blocks(), all_groups)
    validate_submodel(model, sub, field)
    return sub


def with_states(sub: SubModel, states: Mapping[int, str] | Sequence[str], *, field: str = "states") -> SubModel:
    """``sub`` with new block states: a full sequence, or ``{block index: state}`` for the blocks to change."""
    n = sub.num_blocks
    if isinstance(states, Mapping):
        new = list(sub.states)
        for j, s in states.items():
            if isinstance(j, bool) or not isinstance(j, numbers.Integral) or not 0 <= j < n:
                raise ConfigError(field, f"block {j!r} does not exist (the model has {n} blocks: 0..{n - 1})")
            new[int(j)] = s
    else:
        new = list(states)
    out = SubModel(sub.keep, tuple(new), sub.groups)
    _check_states(out.states, n, field)
    return out


def depth_window(n_blocks: int, start: int, length: int, *, field: str = "depth") -> tuple[str, ...]:
    """Block states of a depth window: blocks ``[0, start)`` frozen (they feed the window), ``[start,
    start + length)`` trained, the rest removed (Co-S²P's depth pruning; EmbracingFL is the window that
    reaches the output: ``length = n_blocks - start``)."""
    for name, v in (("start", start), ("length", length)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError(f"{field}.{name}", f"must be an integer, got {v!r}")
    if start < 0 or length < 1 or start + length > n_blocks:
        raise ConfigError(field, f"window of {length} blocks from block {start} does not fit a model of "
                                 f"{n_blocks} blocks (need 0 <= start, 1 <= length, start + length <= {n_blocks})")
    return ("frozen",) * start + ("train",) * length + ("removed",) * (n_blocks - start - length)


def fragments(n: int, ratios: Sequence[float]) -> list[tuple[int, ...]]:
    """Cut units 0..n-1 into contiguous fragments with shares ``ratios`` (normalised), in order.

    Sizes are rounded by largest remainder, so they sum to n exactly; every fragment keeps at least one
    unit (Fed-RAA's Table 4 splits, e.g. 200 neurons by (0.2, 0.3, 0.5) -> 40, 60, 100).
    """
    if not ratios or any(not r > 0 for r in ratios):
        raise ConfigError("fragments", f"ratios must be positive, got {list(ratios)!r}")
    if n < len(ratios):
        raise ConfigError("fragments", f"cannot cut {n} units into {len(ratios)} non-empty fragments")
    total = float(sum(ratios))
    share = [r / total * n for r in ratios]
    sizes = [max(1, int(math.floor(s))) for s in share]
    order = sorted(range(len(ratios)), key=lambda i: -(share[i] - math.floor(share[i])))
    i = 0
    while sum(sizes) < n:
        sizes[order[i % len(order)]] += 1
        i += 1
    while sum(sizes) > n:  # only when the at-least-one rule overshot: take from the largest
        sizes[max(range(len(sizes)), key=lambda j: sizes[j])] -= 1
    out, start = [], 0
    for s in sizes:
        out.append(tuple(range(start, start + s)))
        start += s
    return out


def fragment_submodel(model: BlockModel, index: int, ratios: Sequence[float] | None = None, *,
                      groups: Iterable[str] | None = None, field: str = "fragment") -> SubModel:
    """Fragment ``index`` of the designated layers (``groups``; default the model's ``designated`` groups,
    else all): the ``index``-th contiguous neuron set of :func:`fragments` in every such group, with its
    input-side rows and output-side columns (the IST-style isolated sub-network), every block trainable.
    Tensors in no designated group (the output layer's bias) are trained with every fragment, so the
    average over fragments is their plain weighted mean.  ``ratios`` default: the model's
    ``fragment_ratios`` (``fragment_mlp``)."""
    ratios = tuple(ratios if ratios is not None else getattr(model, "fragment_ratios", ()))
    if not ratios:
        raise ConfigError(field, "no fragment ratios given and the model declares none")
    if not 0 <= index < len(ratios):
        raise ConfigError(field, f"fragment {index!r} does not exist (allowed: 0..{len(ratios) - 1})")
    names = _check_groups(model, groups if groups is not None else getattr(model, "designated", None), field)
    all_groups = model.width_groups()
    keep = {g: fragments(all_groups[g].size, ratios)[index] for g in names}
    return SubModel(keep, ("train",) * model.num_blocks(), all_groups)


# ------------------------------------------------------------------------------------------ validation

def _list(names: Iterable[str], limit: int = 8) -> str:
    names = list(names)
    if not names:
        return "none: the model has no width groups"
    more = f", ... ({len(names)} in all)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def _check_states(states: tuple[str, ...], n_blocks: int, field: str) -> None:
    if len(states) != n_blocks:
        raise ConfigError(f"{field}", f"gives {len(states)} block states for a model of {n_blocks} blocks")
    for j, s in enumerate(states):
        if s not in STATES:
            raise ConfigError(f"{field}[{j}]", f"unknown block state {s!r} (allowed: {', '.join(STATES)})")
    if "train" not in states:
        raise ConfigError(field, "no trainable block: at least one block must be 'train'")


def validate_submodel(model: BlockModel, sub: SubModel, field: str) -> None:
    """Refuse a sub-model that does not describe a part of ``model``, naming ``field``: block states (one
    per block, each of :data:`STATES`, at least one trainable) and kept indices (known groups, indices in
    range, no repeats, at least one unit per group)."""
    _check_states(sub.states, model.num_blocks(), f"{field}.states")
    groups = model.width_groups()
    for g, idx in sub.keep.items():
        if g not in groups:
            raise ConfigError(f"{field}.keep", f"unknown width group {g!r} (allowed: {_list(groups)})")
        n = groups[g].size
        if not idx:
            raise ConfigError(f"{field}.keep.{g}", "keeps no unit (keep at least one, or drop the block instead)")
        bad = [i for i in idx if not 0 <= i < n]
        if bad:
            raise ConfigError(f"{field}.keep.{g}", f"index {bad[0]} out of range (group {g!r} has {n} units: 0..{n - 1})")
        if len(set(idx)) != len(idx):
            raise ConfigError(f"{field}.keep.{g}", "repeats an index")


# ------------------------------------------------------------------------------------------ slicing

def _shapes(model: BlockModel | Mapping[str, torch.Tensor]) -> dict[str, tuple[tuple[int, ...], bool, int]]:
    """key -> (shape, is floating point, element size)."""
    state = model.state_dict() if isinstance(model, nn.Module) else model
    return {k: (tuple(v.shape), bool(torch.is_floating_point(v)), int(v.element_size())) for k, v in state.items()}


def _plan(groups: Mapping[str, WidthGroup], keep: Mapping[str, tuple[int, ...]],
          shapes: Mapping[str, tuple[int, ...]], device: torch.device | None = None
          ) -> dict[str, dict[int, torch.Tensor]]:
    """key -> {dim: kept entry indices along dim}: each kept unit u of a group owns entries
    [u*s, (u+1)*s) of a member's dim, s = shape[dim] // group size.  ``device``: where the indices meet
    the state they slice (the CPU when None)."""
    plan: dict[str, dict[int, torch.Tensor]] = {}
    for g, idx in keep.items():
        grp = groups[g]
        units = torch.as_tensor(idx, dtype=torch.int64, device=device)
        for key, dim in grp.members:
            s = int(shapes[key][dim]) // grp.size
            entries = (units[:, None] * s + torch.arange(s, device=device)[None, :]).reshape(-1)
            dims = plan.setdefault(key, {})
            if dim in dims:
                raise ValueError(f"width groups overlap: {key!r} dim {dim} is in two groups (one is {g!r})")
            dims[dim] = entries
    return plan


def _device_of(state: Mapping[str, torch.Tensor]) -> torch.device | None:
    """The device of a state's tensors (None for an empty state)."""
    return next((v.device for v in state.values()), None)


def _sliced_numel(shape: tuple[int, ...], dims: Mapping[int, torch.Tensor] | None) -> int:
    if not dims:
        return math.prod(shape)
    return math.prod(len(dims[d]) if d in dims else n for d, n in enumerate(shape))


def _slice(t: torch.Tensor, dims: Mapping[int, torch.Tensor] | None) -> torch.Tensor:
    for d, idx in (dims or {}).items():
        t = t.index_select(d, idx)
    return t


def _grid(dims: Mapping[int, torch.Tensor], shape: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
    """Broadcastable index tensors selecting the kept entries of a full tensor (same order as :func:`_slice`)."""
    out = []
    for d, n in enumerate(shape):
        idx = dims.get(d)
        if idx is None:
            idx = torch.arange(n, device=next(iter(dims.values())).device)
        view = [1] * len(shape)
        view[d] = -1
        out.append(idx.view(view))
    return tuple(out)


_ATOMIC = (bool, int, float, str, type(None))


def _skeleton_copy(module: nn.Module, memo: dict[int, Any]) -> nn.Module:
    """What ``copy.deepcopy(module, memo)`` gives, for ``memo`` mapping every parameter and buffer to
    itself: a new module tree (new submodules, dicts and attributes) whose tensors are the originals, for
    the caller to replace.  Why: :func:`extract` copies every kept block and replaces all its tensors, and
    deepcopy's generic walk cost about 1 ms per transformer block, most of a small sub-model's extraction,
    against about 0.13 ms here.  Same steps as deepcopy of a module (its ``__getstate__``, each value
    copied, ``__setstate__`` on a bare instance), with empty containers and atomic values made directly;
    a module class with its own copy protocol is deep-copied."""
    cls = type(module)
    if (getattr(cls, "__deepcopy__", None) is not None or cls.__reduce_ex__ is not object.__reduce_ex__
            or cls.__reduce__ is not object.__reduce__):
        return copy.deepcopy(module, memo)
    new = cls.__new__(cls)
    memo[id(module)] = new
    state: dict[str, Any] = {}
    for k, v in module.__getstate__().items():
        if k == "_modules":
            state[k] = type(v)((n, c if c is None else memo[id(c)] if id(c) in memo else _skeleton_copy(c, memo))
                               for n, c in v.items())
        elif k in ("_parameters", "_buffers"):
            state[k] = type(v)((n, memo[id(t)] if id(t) in memo else copy.deepcopy(t, memo)) for n, t in v.items())
        elif type(v) in _ATOMIC:
            state[k] = v
        elif type(v) in (dict, OrderedDict, set) and not v:
            state[k] = type(v)()
        else:
            state[k] = copy.deepcopy(v, memo)
    new.__setstate__(state)
    return new


def _fix_sizes(module: nn.Module) -> None:
    """Make layer attributes agree with their (sliced) weights, so repr and shape-reading code stay true."""
    for m in module.modules():
        w = getattr(m, "weight", None)
        if isinstance(m, nn.Linear):
            m.out_features, m.in_features = int(w.shape[0]), int(w.shape[1])
        elif isinstance(m, nn.modules.conv._ConvNd):
            m.out_channels, m.in_channels = int(w.shape[0]), int(w.shape[1]) * m.groups
        elif isinstance(m, nn.modules.batchnorm._NormBase):
            ref = w if w is not None else m.running_mean
            if ref is not None:
                m.num_features = int(ref.shape[0])
        elif isinstance(m, nn.LayerNorm) and w is not None:
            m.normalized_shape = (int(w.shape[0]),)


def _local_key(key: str, j: int, k: int) -> str:
    return f"blocks.{k}." + key[len(f"blocks.{j}."):]


def _local_groups(groups: Mapping[str, WidthGroup], sub: SubModel, kept: tuple[int, ...]) -> dict[str, WidthGroup]:
    """The width groups of an extracted module: sizes of what was kept, keys renamed to its block indices,
    members in removed blocks dropped (a group left with no member is dropped)."""
    local = {j: k for k, j in enumerate(kept)}
    out: dict[str, WidthGroup] = {}
    for name, g in groups.items():
        members = tuple((_local_key(key, block_of(key), local[block_of(key)]), dim)
                        for key, dim in g.members if block_of(key) in local)
        if members:
            out[name] = WidthGroup(name, len(sub.keep[name]) if name in sub.keep else g.size, g.unit, members)
    return out


def extract(model: BlockModel, state: Mapping[str, torch.Tensor], sub: SubModel) -> BlockModel:
    """The client's module: the non-removed blocks of ``model`` (in order) holding copies of the kept
    entries of ``state``; frozen blocks' parameters have ``requires_grad=False``.

    The result is a :class:`BlockModel` whose block k is global block ``block_ids[k]``; it runs, trains and
    is costed like any model.  ``model`` supplies the architecture and width groups, ``state`` the values.
    The module declares its own width groups (the kept units, renumbered 0..k-1 in index order), so a
    sub-model of it can be extracted and inserted again: FjORD trains a narrower prefix of a client's
    module at each step, and a prefix of a prefix is the global prefix.
    """
    validate_submodel(model, sub, "submodel")
    groups = model.width_groups()
    shapes = {k: tuple(v.shape) for k, v in state.items()}
    plan = _plan(groups, sub.keep, shapes, _device_of(state))
    kept = sub.blocks_in("train", "frozen")
    blocks: list[nn.Module] = []
    for k, j in enumerate(kept):
        src = model.blocks[j]
        blk = _skeleton_copy(src, {id(t): t for t in (*src.parameters(), *src.buffers())})  # tensors replaced below
        trainable = sub.states[j] == "train"
        for name, mod in blk.named_modules():
            base = f"blocks.{j}." + (f"{name}." if name else "")
            for pname, p in list(mod._parameters.items()):
                if p is not None:
                    key = base + pname
                    mod._parameters[pname] = nn.Parameter(_slice(state[key], plan.get(key)).detach().clone(),
                                                          requires_grad=trainable)
            for bname, b in list(mod._buffers.items()):
                if b is not None:
                    key = base + bname
                    mod._buffers[bname] = _slice(state[key], plan.get(key)).detach().clone()
        _fix_sizes(blk)
        blocks.append(blk)
    arch = None if model.arch is None else (*model.arch[:-2], ("sub", sub.key()), 0, len(blocks))
    out = BlockModel(blocks, arch=arch, groups=_local_groups(groups, sub, kept))
    out.block_ids = kept  # type: ignore[attr-defined]
    out.train(model.training)
    return out


def insert(global_state: Mapping[str, torch.Tensor], sub: SubModel,
           trained_state: Mapping[str, torch.Tensor] | None) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Full-shape tensors of the trainable blocks with the trained entries written in, and their masks.

    ``trained_state`` is the extracted module's state dict (None: nothing was trained, e.g. a systems-only
    run; the tensors then hold ``global_state``'s values under the same mask).  Returns ``(tensors, mask)``: ``tensors`` has
    exactly the keys of trainable blocks (frozen and removed blocks are not covered); ``mask[key]`` is 1 at
    the kept entries and 0 elsewhere, for sliced tensors only (a key absent from ``mask`` is fully
    covered).  Entries outside the kept set hold ``global_state``'s values.  Integer buffers are copied.
    """
    groups = sub.groups
    if sub.keep and not groups:
        raise ValueError("this SubModel is not bound to a model's width groups: build it with "
                         "SubModel.of(model, ...), width_submodel or fragment_submodel")
    n_blocks = 1 + max((block_of(k) for k in global_state), default=-1)
    if n_blocks != sub.num_blocks:
        raise ValueError(f"the sub-model has {sub.num_blocks} block states, the state {n_blocks} blocks")
    plan = _plan(groups, sub.keep, {k: tuple(v.shape) for k, v in global_state.items()}, _device_of(global_state))
    local = {j: k for k, j in enumerate(sub.blocks_in("train", "frozen"))}
    tensors: dict[str, torch.Tensor] = {}
    mask: dict[str, torch.Tensor] = {}
    for key, ref in global_state.items():
        j = block_of(key)
        if sub.states[j] != "train":
            continue
        lkey = _local_key(key, j, local[j])
        if trained_state is None:
            dims = plan.get(key)
            tensors[key] = ref.detach().clone()
            if dims and torch.is_floating_point(ref):
                m = torch.zeros_like(ref)
                m[_grid(dims, tuple(ref.shape))] = 1
                mask[key] = m
            continue
        if lkey not in trained_state:
            raise ValueError(f"trained state lacks {lkey!r} (global {key!r}): was it extracted with this sub-model?")
        t = trained_state[lkey].detach()
        dims = plan.get(key)
        if not dims or not torch.is_floating_point(ref):
            if tuple(t.shape) != tuple(ref.shape):
                raise ValueError(f"trained {lkey!r} has shape {tuple(t.shape)}, global {key!r} {tuple(ref.shape)}")
            tensors[key] = t.clone().to(ref.dtype)
            continue
        full = ref.detach().clone()
        m = torch.zeros_like(ref)
        idx = _grid(dims, tuple(ref.shape))
        full[idx] = t.to(ref.dtype)
        m[idx] = 1
        tensors[key] = full
        mask[key] = m
    return tensors, mask


def sub_state_bytes(model: BlockModel, sub: SubModel, *, state: Mapping[str, torch.Tensor] | None = None,
                    trained_only: bool = False) -> int:
    """Bytes of the sub-model's tensors, from shapes alone (no module built): every non-removed block
    (what a client downloads), or the trainable blocks only (``trained_only``: what it uploads).
    ``state`` (default the model's own) gives the shapes and dtypes."""
    shapes = _shapes(model if state is None else state)
    plan = _plan(sub._groups_for(model), sub.keep, {k: v[0] for k, v in shapes.items()})
    wanted = ("train",) if trained_only else ("train", "frozen")
    return sum(_sliced_numel(shape, plan.get(k)) * size
               for k, (shape, _, size) in shapes.items() if sub.states[block_of(k)] in wanted)


# ------------------------------------------------------------------------------------------ costs

@dataclass(frozen=True)
class SubModelCosts:
    """What one sub-model costs, measured on its extracted module."""

    flops: FlopCost  # per sample: forward of the non-removed blocks, backward into the trainable ones
    download_bytes: int  # every tensor of the extracted module
    upload_bytes: int  # the trainable blocks' tensors only
    memory: MemoryEstimate  # training memory of the extracted module at the given batch size


_COST_CACHE: dict[tuple, SubModelCosts] = {}


def submodel_costs(model: BlockModel, sub: SubModel, input_shape: tuple[int, ...], batch_size: int, *,
                   momentum: bool = True, state: Mapping[str, torch.Tensor] | None = None) -> SubModelCosts:
    """FLOPs, bytes and training memory of ``sub``, measured on the module :func:`extract` builds.

    Cached per (architecture, :meth:`SubModel.key`, input shape, batch size, momentum): values do not
    change costs, so the module is built (from ``state``, default the model's own) only on a miss.
    """
    input_shape = tuple(int(s) for s in input_shape)
    key = (model.arch if model.arch is not None else id(model), sub.key(), input_shape, int(batch_size), bool(momentum))
    hit = _COST_CACHE.get(key)
    if hit is not None:
        return hit
    module = extract(model, model.state_dict() if state is None else state, sub)
    download = sum(tensor_bytes(t) for t in module.state_dict().values())
    upload = sum(tensor_bytes(t) for j, blk in zip(module.block_ids, module.blocks)
                 if sub.states[j] == "train" for t in blk.state_dict().values())
    cost = SubModelCosts(flops=flops_per_sample(module, input_shape), download_bytes=download,
                         upload_bytes=upload, memory=memory_estimate(module, input_shape, batch_size, momentum=momentum))
    if model.arch is not None:
        _COST_CACHE[key] = cost
    return cost
