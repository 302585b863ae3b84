"""Co-S²P client-side pieces (Algorithm 2): learned structured width masks and self-distillation.

Width masks (§4.1).  One real logit I per unit of a width group (an MLP neuron, a whole attention
head); P = sigmoid(I); a binary mask M ~ Bernoulli(P) is sampled every step and used in the forward pass
as w̃ = w ⊙ M̂ (M broadcast over the unit's rows of every output-side member tensor), while the backward
pass treats the sample as P (straight-through estimator: ``M + P − stop_grad(P)``).  The loss is
CE + λ₁ · |Σ sum(M̂) / Σ size(M̂) − R^w| (Eq. 2) with the weights frozen.  The kept fraction counts
entries, so a unit weighs by its row size (d_in), as M̂ does in the paper.

After the mask phase the mask is frozen.  The paper does not say which binary mask is kept; here each
group keeps its ``max(1, round(R^w · units))`` units of largest logit, so every client's sub-model has
exactly its planned width (memory and time are then what the device was sized for).

Self-distillation (Eq. 3).  Σ_i [(1 − λ₂) CE(ŷ_i, y) + λ₂ t² KL_i], the deepest exit ŷ_c the teacher (its
own KL term is 0).  The paper writes KL(student ‖ teacher) = Σ p_s log(p_s / p_t); the usual
knowledge-distillation direction is KL(teacher ‖ student): ``direction`` picks one.  Whether the teacher
receives the KL gradient is not stated; ``detach_teacher=True`` (default) stops it.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import torch
import torch.nn.functional as F

from fedsim.errors import ConfigError

__all__ = ["ste_sample", "unit_masks_to_params", "kept_fraction", "mask_loss", "final_keep", "distill_loss"]


def ste_sample(logits: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """A Bernoulli(sigmoid(logits)) sample whose gradient w.r.t. ``logits`` is that of sigmoid(logits)."""
    p = torch.sigmoid(logits)
    with torch.no_grad():
        hard = torch.bernoulli(p.detach(), generator=generator)
    return hard + p - p.detach()


def unit_masks_to_params(params: Mapping[str, torch.Tensor], masks: Mapping[str, torch.Tensor],
                         members: Mapping[str, Sequence[tuple[str, int]]], units: Mapping[str, int]
                         ) -> dict[str, torch.Tensor]:
    """w̃ = w ⊙ M̂ for every output-side (dim 0) member of the masked groups; other tensors as they are.

    ``masks[g]`` has one entry per unit of group ``g``; ``units[g]`` rows form one unit (head_dim for a
    head)."""
    out = dict(params)
    for g, m in masks.items():
        row = m.repeat_interleave(int(units[g]))
        for key, dim in members[g]:
            if dim != 0 or key not in out:
                continue
            w = out[key]
            if w.shape[0] != row.numel():
                raise ConfigError("model.width_groups", f"group '{g}' masks {row.numel()} rows but '{key}' has {w.shape[0]}")
            out[key] = w * row.view(-1, *([1] * (w.dim() - 1))).to(w.dtype)
    return out


def kept_fraction(masks: Mapping[str, torch.Tensor], row_sizes: Mapping[str, float]) -> torch.Tensor:
    """Σ_g Σ_units M · row_size_g / Σ_g units_g · row_size_g: the fraction of masked entries kept."""
    num = sum(m.sum() * float(row_sizes[g]) for g, m in masks.items())
    den = sum(m.numel() * float(row_sizes[g]) for g, m in masks.items())
    return num / den


def mask_loss(ce: torch.Tensor, fraction: torch.Tensor, target: float, lambda1: float) -> torch.Tensor:
    """Eq. 2: CE + λ₁ · |kept fraction − R^w|."""
    return ce + lambda1 * (fraction - target).abs()


def final_keep(logits: Mapping[str, torch.Tensor], rate: float) -> dict[str, tuple[int, ...]]:
    """The frozen mask: per group the ``max(1, round(rate · units))`` units of largest logit (sorted indices)."""
    out = {}
    for g, lg in logits.items():
        k = max(1, min(lg.numel(), int(round(rate * lg.numel()))))
        top = torch.topk(lg.detach(), k).indices
        out[g] = tuple(sorted(int(i) for i in top))
    return out


def distill_loss(exits: Sequence[torch.Tensor], y: torch.Tensor, *, lambda2: float, temperature: float,
                 direction: str = "student_teacher", detach_teacher: bool = True) -> torch.Tensor:
    """Eq. 3 summed over the exits (shallow to deep; the last is the teacher).

    With ``lambda2 = 0`` it is the plain sum of cross-entropies; with one exit it is (1 − λ₂)·CE, as written
    in the paper (the teacher's KL term is 0)."""
    if not exits:
        raise ConfigError("exits", "need at least one exit")
    t = float(temperature)
    teacher = exits[-1].detach() if detach_teacher else exits[-1]
    total = torch.zeros((), dtype=exits[-1].dtype, device=exits[-1].device)
    for i, z in enumerate(exits):
        ce = F.cross_entropy(z, y)
        if i == len(exits) - 1 or lambda2 == 0:
            total = total + (1 - lambda2) * ce
            continue
        log_s = F.log_softmax(z / t, dim=1)
        log_t = F.log_softmax(teacher / t, dim=1)
        if direction == "student_teacher":
            kl = (log_s.exp() * (log_s - log_t)).sum(1).mean()
        elif direction == "teacher_student":
            kl = (log_t.exp() * (log_t - log_s)).sum(1).mean()
        else:
            raise ConfigError("algorithm.kl_direction", f"got {direction!r} (allowed: student_teacher, teacher_student)")
        total = total + (1 - lambda2) * ce + lambda2 * t * t * kl
    return total


class ExitNet(torch.nn.Module):
    """A client's extracted module with early exits: ``exits[k]`` reads the output of the module's block
    ``k``.  ``forward`` returns the exit logits shallow to deep; with ``head_last`` the module's own last
    block (the global classifier) gives the deepest logits."""

    def __init__(self, body: torch.nn.Module, exits: Mapping[int, torch.nn.Module], head_last: bool) -> None:
        super().__init__()
        self.body = body
        self.exits = torch.nn.ModuleDict({str(k): m for k, m in exits.items()})
        self.head_last = head_last

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        outs = []
        blocks = self.body.blocks
        for k, blk in enumerate(blocks):
            x = blk(x)
            if str(k) in self.exits:
                outs.append(self.exits[str(k)](x))
        if self.head_last:
            outs.append(x)
        return outs


def train_masks(body: torch.nn.Module, logits: Mapping[str, torch.Tensor], members: Mapping[str, Sequence[tuple[str, int]]],
                x: torch.Tensor, y: torch.Tensor, indices: torch.Tensor, *, steps: int, batch_size: int,
                target: float, lambda1: float, lr: float, generator: torch.Generator,
                readout: torch.nn.Module | None = None) -> dict[str, float]:
    """Algorithm 2 lines 1–10: learn the unit logits with the weights frozen (Eq. 2, STE).

    ``body`` is the full-width module (its parameters are read, not changed); ``readout`` (optional) maps
    the body's output to logits (a local exit when the body does not end in the classifier).  Adam on the
    logits (the paper uses Adan; plain SGD barely moves them because the sparsity term's gradient per
    unit is tiny; :class:`fedsim.learn.sgd.PlainAdam`, ``torch.optim.Adam``'s arithmetic without its import
    of the compiler stack).  Returns mean loss and mean sampled kept fraction."""
    from torch.func import functional_call

    from fedsim.learn.sgd import PlainAdam, batch_schedule

    params = {k: v.detach() for k, v in body.named_parameters()}
    buffers = {k: v for k, v in body.named_buffers()}
    row_sizes = {}
    units = {}
    for g, lg in logits.items():
        key, _ = next((k, d) for k, d in members[g] if d == 0)
        w = params[key]
        units[g] = w.shape[0] // lg.numel()
        row_sizes[g] = float(units[g] * (w[0].numel() if w.dim() > 1 else 1))
    leaves = {g: lg.detach().clone().requires_grad_(True) for g, lg in logits.items()}
    opt = PlainAdam(list(leaves.values()), lr=lr)
    losses, fracs = [], []
    was = body.training
    body.train()
    for pos in batch_schedule(len(indices), steps, batch_size, generator):
        b = indices[pos]
        masks = {g: ste_sample(v, generator) for g, v in leaves.items()}
        p = unit_masks_to_params(params, masks, members, units)
        out = functional_call(body, {**p, **buffers}, (x[b],))
        if readout is not None:
            out = readout(out)
        frac = kept_fraction(masks, row_sizes)
        loss = mask_loss(F.cross_entropy(out, y[b]), frac, target, lambda1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        fracs.append(float(frac.detach()))
    body.train(was)
    for g, v in leaves.items():
        logits[g].copy_(v.detach())  # type: ignore[index]
    return {"mask_loss": sum(losses) / max(1, len(losses)), "mask_fraction": sum(fracs) / max(1, len(fracs)),
            "mask_steps": float(len(losses))}


@torch.no_grad()
def classification_scores(model, x: torch.Tensor, y: torch.Tensor, num_classes: int,
                          batch_size: int = 1024) -> dict[str, float]:
    """Top-1, Top-5 (Top-k with k = min(5, classes)) accuracy and macro F1 (mean over classes of the
    per-class F1; a class never predicted nor present counts 0) — the paper's metrics; its F1 averaging
    is not stated, macro is the usual choice for ImageNet subsets."""
    was = getattr(model, "training", False)
    if hasattr(model, "eval"):
        model.eval()
    preds, top5 = [], []
    k = min(5, num_classes)
    try:
        for i in range(0, len(y), batch_size):
            out = model(x[i:i + batch_size])
            preds.append(out.argmax(1))
            top5.append((out.topk(k, dim=1).indices == y[i:i + batch_size, None]).any(1))
    finally:
        if hasattr(model, "train"):
            model.train(was)
    p = torch.cat(preds)
    hit5 = torch.cat(top5)
    f1s = []
    for c in range(num_classes):
        tp = int(((p == c) & (y == c)).sum())
        fp = int(((p == c) & (y != c)).sum())
        fn = int(((p != c) & (y == c)).sum())
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)
    return {"top1": float((p == y).float().mean()), "top5": float(hit5.float().mean()), "f1": float(sum(f1s) / num_classes)}
