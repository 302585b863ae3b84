"""State-dict operations: the one place where model states are copied, differenced, mixed and averaged.

Every algorithm's server rule is built from these.  Two conventions hold everywhere:

* **Floating tensors** are combined arithmetically; sums are accumulated in float64 and cast back to the
  tensor's dtype, so the order of clients does not change the low bits more than one rounding.
* **Integer tensors** (BatchNorm's ``num_batches_tracked``, any counter) are never averaged.  They count
  something that only grows, so the one rule is: *a combination takes the largest contributor's value*.
  A delta carries an integer entry as the new value itself (not a difference); applying or mixing a state
  with such an entry keeps the larger of the two values.

``masked_weighted_average`` is the single averaging rule: for every entry, the weighted mean over the
updates whose coverage mask includes it; entries that nobody covered keep their value (weights) or get a
zero step (deltas).  FedAvg, FedBuff, the SFL client-model average, HeteroFL/FjORD/FedRolex, Fed-RAA
fragments, Co-S²P segments and EmbracingFL's partial layers all reduce to it.
"""
from __future__ import annotations

from typing import Callable, Literal, Mapping, Protocol, Sequence

import torch

from fedsim.errors import ConfigError

__all__ = ["State", "Mask", "Contribution", "is_counter", "clone_state", "state_sub", "state_axpy", "state_mix",
           "masked_weighted_average", "coverage_counts"]

State = dict[str, torch.Tensor]
Mask = dict[str, torch.Tensor]


class Contribution(Protocol):
    """What ``masked_weighted_average`` reads from an update (``fedsim.messages.Update`` is one)."""

    tensors: Mapping[str, torch.Tensor]
    kind: Literal["weights", "delta"]
    mask: Mapping[str, torch.Tensor] | None

    def weight_of(self, name: str) -> float: ...


def is_counter(t: torch.Tensor) -> bool:
    """Integer (or bool) tensors are counters: combined by the maximum, never averaged."""
    return not torch.is_floating_point(t)


def clone_state(state: Mapping[str, torch.Tensor]) -> State:
    """A detached copy of every tensor."""
    return {k: v.detach().clone() for k, v in state.items()}


def state_sub(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> State:
    """The delta ``a − b`` (keys of ``a``); counters carry ``a``'s value itself."""
    return {k: a[k].clone() if is_counter(a[k]) else a[k] - b[k] for k in a}


def state_axpy(base: Mapping[str, torch.Tensor], delta: Mapping[str, torch.Tensor], alpha: float) -> State:
    """``base + alpha · delta``; a counter becomes max(base, delta's value) (``base`` if delta lacks it)."""
    out: State = {}
    for k, v in base.items():
        if is_counter(v):
            out[k] = torch.maximum(v, delta[k]) if k in delta else v.clone()
        else:
            out[k] = v + alpha * delta[k]
    return out


def state_toward(base: Mapping[str, torch.Tensor], target: Mapping[str, torch.Tensor], lr: float) -> State:
    """``base + lr · (target − base)``: a server step toward an aggregate; at ``lr`` 1 the aggregate itself
    (exactly, not through the subtraction)."""
    return dict(target) if lr == 1.0 else state_axpy(base, state_sub(target, base), lr)


def state_mix(old: Mapping[str, torch.Tensor], new: Mapping[str, torch.Tensor], alpha: float) -> State:
    """``(1 − α)·old + α·new``, the FedAsync mixing rule; counters take the maximum."""
    return {k: torch.maximum(v, new[k]) if is_counter(v) else torch.lerp(v, new[k], alpha) for k, v in old.items()}


def state_weighted_sum(reference: Mapping[str, torch.Tensor], states: Sequence[Mapping[str, torch.Tensor]],
                       coeffs: Sequence[float]) -> State:
    """``Σ_i c_i · states_i`` over the keys of ``reference``, unnormalised (a rule that weights by its own
    coefficients, e.g. CA2FL's cached deltas), accumulated in each tensor's own dtype from zero; counters
    take the largest value (starting from 0), never a sum."""
    out: State = {}
    for k, ref in reference.items():
        if is_counter(ref):
            acc = torch.zeros_like(ref)
            for s in states:
                acc = torch.maximum(acc, s[k].to(ref.dtype))
        else:
            acc = torch.zeros_like(ref)
            for s, c in zip(states, coeffs):
                acc += float(c) * s[k].to(ref.dtype)
        out[k] = acc
    return out


def masked_weighted_average(
    updates: Sequence[Contribution],
    base: Mapping[str, torch.Tensor],
    *,
    extra_weight: Callable[[Contribution], float] | None = None,
) -> State:
    """Entry-wise weighted mean of the updates over the updates that covered each entry.

    An update covers a tensor's entries where its ``mask`` is non-zero (``mask`` None, or the name absent
    from it: the whole tensor), and covers nothing of a tensor absent from its ``tensors``.  Weights are
    ``update.weight_of(name)`` times ``extra_weight(update)`` (e.g. a staleness factor); a mask entry
    multiplies them (masks are 0/1, a fractional mask weights entries).  For delta updates the result is
    the averaged delta (0 where nobody covered); for weight updates the averaged weights (``base`` where
    nobody covered).  Counters follow the module rule: the largest covering contributor's value.
    """
    if not updates:
        raise ConfigError("updates", "cannot average zero updates")
    kinds = {u.kind for u in updates}
    if len(kinds) != 1:
        raise ConfigError("updates", f"cannot mix update kinds {sorted(kinds)}")
    is_delta = kinds == {"delta"}
    out: State = {}
    for name, ref in base.items():
        if is_counter(ref):
            vals = [u.tensors[name] for u in updates if name in u.tensors]
            if not vals:
                out[name] = ref.clone()
            else:
                top = vals[0]
                for v in vals[1:]:
                    top = torch.maximum(top, v)
                out[name] = top.clone() if is_delta else torch.maximum(ref, top)
            continue
        if all(u.mask is None or name not in u.mask for u in updates):
            out[name] = _dense_average(updates, name, ref, is_delta, extra_weight)
            continue
        num = torch.zeros_like(ref, dtype=torch.float64)
        den = torch.zeros_like(ref, dtype=torch.float64)
        for u in updates:
            if name not in u.tensors:
                continue
            w = u.weight_of(name) * (extra_weight(u) if extra_weight else 1.0)
            if w == 0.0:
                continue
            t = u.tensors[name].to(torch.float64)
            m = None if u.mask is None else u.mask.get(name)
            if m is None:
                num.add_(t, alpha=w)
                den.add_(w)
            else:
                mw = m.to(torch.float64) * w
                num.add_(t * mw)
                den.add_(mw)
        covered = den > 0
        avg = torch.where(covered, num / torch.where(covered, den, torch.ones_like(den)), torch.zeros_like(den))
        if is_delta:
            out[name] = avg.to(ref.dtype)
        else:
            out[name] = torch.where(covered, avg.to(ref.dtype), ref)
    return out


def _dense_average(updates: Sequence[Contribution], name: str, ref: torch.Tensor, is_delta: bool,
                   extra_weight: Callable[[Contribution], float] | None) -> torch.Tensor:
    """``masked_weighted_average`` for one tensor that no update masks: the same float64 sums, with the
    weight total kept as one number instead of a tensor of equal entries (bit-identical, less work)."""
    num: torch.Tensor | None = None
    den = 0.0
    for u in updates:
        if name not in u.tensors:
            continue
        w = u.weight_of(name) * (extra_weight(u) if extra_weight else 1.0)
        if w == 0.0:
            continue
        if num is None:
            num = torch.zeros_like(ref, dtype=torch.float64)
        num.add_(u.tensors[name].to(torch.float64), alpha=w)
        den += w
    if num is None or not den > 0:
        return torch.zeros_like(ref) if is_delta else ref.clone()
    return (num / den).to(ref.dtype)


def coverage_counts(updates: Sequence[Contribution], base: Mapping[str, torch.Tensor]) -> tuple[float, float, int]:
    """N_q^i over the floating entries of ``base``: how many of ``updates`` covered each entry.

    Returns (minimum, mean, number of entries); Co-S²P's N* is the minimum over rounds of the minimum.
    """
    total = 0.0
    lo = float("inf")
    n = 0
    for name, ref in base.items():
        if is_counter(ref):
            continue
        cnt = torch.zeros_like(ref, dtype=torch.float64)
        for u in updates:
            if name not in u.tensors:
                continue
            m = None if u.mask is None else u.mask.get(name)
            if m is None:
                cnt.add_(1.0)
            else:
                cnt.add_((m != 0).to(torch.float64))
        if cnt.numel():
            lo = min(lo, float(cnt.min()))
            total += float(cnt.sum())
            n += cnt.numel()
    return (lo if n else 0.0), (total / n if n else 0.0), n
