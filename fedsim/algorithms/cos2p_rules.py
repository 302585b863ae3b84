"""Co-S²P's server rule (Li et al., "Unity is Power", Eqs. 4–5) as pure functions on state dicts.

Segments.  The paper aggregates "segment-wise": a segment is "part parameters of a linear layer or a
head in an MSA layer".  Here a segment is one unit of a width group along a tensor's *output*
dimension (dim 0): one neuron's row of a linear layer (and its bias entry), or a whole attention head's
rows (the group's ``unit`` is the head dimension).  A tensor with no output-side width group (patch
embedding, norms, the classifier) is a single segment.  :func:`segment_index` turns this into one
integer id per entry, so every per-segment sum below is one ``scatter_add``.

γ (Eq. 4).  γ_n^i = ‖Δ_n^i‖₁ / (‖w_q^i − w_{q−τ}^i‖₁ + size(w_q^i)), with Δ the client's weight change on the
entries it trained and w_{q−τ} the global model it started from.  The paper's Δ is the sum of local
gradients, i.e. the weight change divided by the step size η; since γ is only used normalised over the
clients of one segment, the common factor 1/η cancels and the weight change is used directly.

Aggregation (Eq. 5).  w_{q+1}^i = w_q^i + η_s Σ_{n∈N_q^i} γ̃_n^i Δ_n^i with γ̃ the γ normalised over N_q^i,
the clients whose mask covers segment i; segments nobody covered keep their value.  This is exactly the
entry-wise weighted mean of :func:`masked_weighted_average` over the clients covering each entry when
each update's coverage mask carries its per-segment score: the rule builds, per update, the mask
``m ⊙ γ[seg]`` (0 where the client did not train, γ of the entry's segment where it did) and lets the
one averaging function do the rest.  ``weighting="uniform"`` (γ ≡ 1, the ablation of spec §4.5 T4) and
``"samples"`` (the update's own weight, the samples it processed: FedAvg's weight) use the same path.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch

from fedsim.messages import Update
from fedsim.learn.state import State, masked_weighted_average
from fedsim.errors import ConfigError
from fedsim.algorithms.configs import WEIGHTINGS


@dataclass
class SegmentIndex:
    """Entry → segment id for every float tensor of a state, and a readable name per segment."""

    ids: dict[str, torch.Tensor]
    names: list[str]

    @property
    def count(self) -> int:
        return len(self.names)

    @property
    def device(self) -> torch.device:
        """Where the segment ids live: the device of the state they index."""
        return next((t.device for t in self.ids.values()), torch.device("cpu"))

    def sizes(self) -> torch.Tensor:
        """Number of entries of each segment (size(w^i) of Eq. 4)."""
        out = torch.zeros(self.count, dtype=torch.float64, device=self.device)
        for ids in self.ids.values():
            out.scatter_add_(0, ids.reshape(-1), torch.ones(ids.numel(), dtype=torch.float64, device=self.device))
        return out

    def sums(self, values: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Per-segment sum of ``values`` (tensors named like the state; missing names add nothing)."""
        out = torch.zeros(self.count, dtype=torch.float64, device=self.device)
        for name, ids in self.ids.items():
            v = values.get(name)
            if v is not None:
                out.scatter_add_(0, ids.reshape(-1), v.detach().reshape(-1).to(torch.float64))
        return out


def _output_units(groups: Mapping[str, Any] | None) -> dict[str, tuple[str, int]]:
    """State key → (group name, number of units) for tensors that are a width group's member along dim 0."""
    out: dict[str, tuple[str, int]] = {}
    for gname, g in (groups or {}).items():
        for key, dim in g.members:
            if dim == 0 and key not in out:
                out[key] = (gname, int(g.size))
    return out


def segment_index(state: Mapping[str, torch.Tensor], groups: Mapping[str, Any] | None = None) -> SegmentIndex:
    """Segments of ``state`` (see the module docstring); ``groups`` is ``model.width_groups()`` or None
    (then every float tensor is one segment)."""
    by_key = _output_units(groups)
    ids: dict[str, torch.Tensor] = {}
    names: list[str] = []
    for key, t in state.items():
        if not torch.is_floating_point(t):
            continue
        if key in by_key and t.dim() >= 1:
            gname, n_units = by_key[key]
            rows = t.shape[0]
            if n_units < 1 or rows % n_units:
                raise ConfigError("model.width_groups", f"group '{gname}' has {n_units} units, which do not divide "
                                                        f"the {rows} rows of '{key}'")
            unit = rows // n_units
            first = len(names)
            names += [f"{key}[{gname}:{u}]" for u in range(n_units)]
            per_row = first + torch.arange(rows, device=t.device) // unit
            ids[key] = per_row.view(-1, *([1] * (t.dim() - 1))).expand(t.shape).contiguous()
        else:
            ids[key] = torch.full(t.shape, len(names), dtype=torch.int64, device=t.device)
            names.append(key)
    return SegmentIndex(ids, names)


def _covered(update: Update, name: str, ref: torch.Tensor) -> torch.Tensor | None:
    """0/1 float coverage of tensor ``name`` by ``update`` (None: not covered at all)."""
    if name not in update.tensors:
        return None
    m = None if update.mask is None else update.mask.get(name)
    return torch.ones_like(ref, dtype=torch.float64) if m is None else (m != 0).to(torch.float64)


def update_deltas(update: Update, base: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The update's weight change on the entries it covers (0 elsewhere), in float64."""
    out = {}
    for name, ref in base.items():
        if not torch.is_floating_point(ref):
            continue
        cov = _covered(update, name, ref)
        if cov is None:
            continue
        t = update.tensors[name].to(torch.float64)
        d = t if update.kind == "delta" else t - ref.to(torch.float64)
        out[name] = d * cov
    return out


def segment_coverage(update: Update, base: Mapping[str, torch.Tensor], seg: SegmentIndex) -> torch.Tensor:
    """Per segment: 1 if the update trained at least one of its entries (M_{n,q}^i = 1), else 0."""
    cov = {name: c for name, ref in base.items() if torch.is_floating_point(ref)
           for c in [_covered(update, name, ref)] if c is not None}
    return (seg.sums(cov) > 0).to(torch.float64)


def gamma_scores(delta: Mapping[str, torch.Tensor], covered: torch.Tensor, current: Mapping[str, torch.Tensor],
                 started_from: Mapping[str, torch.Tensor], seg: SegmentIndex) -> torch.Tensor:
    """Eq. 4 per segment: ‖Δ^i‖₁ / (‖w_q^i − w_{q−τ}^i‖₁ + size(w^i)); 0 for segments the update did not cover.

    ``current`` is w_q (the global model now), ``started_from`` w_{q−τ} (the model the client downloaded).
    """
    l1 = seg.sums({k: v.abs() for k, v in delta.items()})
    drift = seg.sums({k: (current[k].to(torch.float64) - started_from[k].to(torch.float64)).abs()
                      for k in seg.ids})
    return covered * l1 / (drift + seg.sizes())


@dataclass
class RoundResult:
    """What one Eq. 5 aggregation produced: the new state, each update's scalar trace weight (its mean
    normalised share over the segments it covered), the per-update γ and the coverage counts N_q^i."""

    state: State
    weights: list[float]
    gammas: list[torch.Tensor]
    coverage: torch.Tensor  # N_q^i per segment


def cos2p_aggregate(global_state: State, updates: Sequence[Update], started_from: Sequence[Mapping[str, torch.Tensor]],
                    seg: SegmentIndex, *, weighting: str = "gamma", server_lr: float = 1.0) -> RoundResult:
    """One Co-S²P aggregation (Eq. 5) of ``updates``; ``started_from[k]`` is the global state update k
    was trained from (for Eq. 4's drift term).  Pure: the inputs are not changed."""
    if weighting not in WEIGHTINGS:
        raise ConfigError("algorithm.weighting", f"got {weighting!r} (allowed: {', '.join(WEIGHTINGS)})")
    if not updates:
        raise ConfigError("updates", "cannot aggregate zero updates")
    if not (math.isfinite(server_lr) and server_lr > 0):
        raise ConfigError("algorithm.server_lr", f"must be a finite number > 0, got {server_lr!r}")
    float_keys = [k for k, v in global_state.items() if torch.is_floating_point(v)]
    weighted: list[Update] = []
    gammas: list[torch.Tensor] = []
    covers: list[torch.Tensor] = []
    for u, base in zip(updates, started_from):
        delta = update_deltas(u, base)
        cov = segment_coverage(u, base, seg)
        if weighting == "gamma":
            g = gamma_scores(delta, cov, global_state, base, seg)
        elif weighting == "uniform":
            g = cov.clone()
        else:
            g = cov * float(u.weight_of(next(iter(delta), "")))
        gammas.append(g)
        covers.append(cov)
        # the coverage mask carries γ of each entry's segment (0 where the client did not train)
        mask = {k: g[seg.ids[k]] * _covered(u, k, global_state[k]) for k in delta}
        weighted.append(Update(client=u.client, tensors={k: delta[k] for k in delta}, kind="delta", mask=mask,
                               weight=1.0, base_version=u.base_version))
    avg = masked_weighted_average(weighted, {k: global_state[k] for k in float_keys})
    new: State = {}
    for k, v in global_state.items():
        if k in avg:
            new[k] = (v.to(torch.float64) + server_lr * avg[k].to(torch.float64)).to(v.dtype)
        else:
            new[k] = v.clone()
    total = torch.stack(gammas).sum(0)
    weights = []
    for g, cov in zip(gammas, covers):
        share = torch.where(total > 0, g / torch.where(total > 0, total, torch.ones_like(total)), torch.zeros_like(g))
        n = float(cov.sum())
        weights.append(float(share.sum()) / n if n > 0 else 0.0)
    return RoundResult(new, weights, gammas, torch.stack(covers).sum(0))
