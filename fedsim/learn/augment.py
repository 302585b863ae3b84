"""Image augmentations on tensors (no torchvision), drawn from a torch generator so a client's stream replays.

Inputs are batches of normalised images ``(B, C, H, W)``.  Every random choice comes from the generator
passed in (a named stream), so the same stream gives the same views.

``weak`` views (FixMatch/SemiSFL): ``flip_crop`` = random horizontal flip (p = 1/2) then a random crop
of the image padded by 12.5 % of its side with reflection (the SemiSFL code pads 4 of 32 pixels);
``crop`` = the crop alone (for digits, whose flips change meaning); ``none``.

``strong`` views: ``randaugment`` = the weak view, then ``n`` operations drawn uniformly (with
replacement) from the list below at a magnitude drawn uniformly from 1..``m`` of 10 (the SemiSFL code's
RandAugmentMC), each applied with probability 1/2, then a Cutout of half the side (the code's
``CutoutAbs(16)`` on 32 pixels).  Pixel operations act on each image rescaled to [0, 1] by its own
min/max and are mapped back, so they work on normalised tensors; PIL's ``Equalize`` and ``Posterize`` on
bytes have no exact float counterpart and are replaced by ``autocontrast`` and a 2^(8-bits)-level
quantisation.  ``noise`` is a cheaper stand-in: the weak view plus Gaussian noise of standard deviation
0.1·m/10 and the same Cutout.
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from fedsim.config import require
from fedsim.errors import ConfigError

__all__ = ["WEAK", "STRONG", "RAND_OPS", "check_augmentation", "check_randaugment", "weak_view", "strong_view"]

from fedsim.learn.choices import RAND_OPS, STRONG, WEAK, check_augmentation, check_randaugment  # noqa: E402,F401


def _rand(gen: torch.Generator, *shape: int) -> torch.Tensor:
    """Uniform draws from the (CPU) generator: the same numbers whatever device the images are on."""
    return torch.rand(*shape, generator=gen)


def _crop(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    b, _, h, w = x.shape
    ph, pw = max(1, int(round(h * 0.125))), max(1, int(round(w * 0.125)))
    mode = "reflect" if ph < h and pw < w else "replicate"
    padded = F.pad(x, (pw, pw, ph, ph), mode=mode)
    dev = x.device
    oy = torch.randint(0, 2 * ph + 1, (b,), generator=gen).to(dev)
    ox = torch.randint(0, 2 * pw + 1, (b,), generator=gen).to(dev)
    rows = (oy[:, None] + torch.arange(h, device=dev)[None, :])  # (B, H)
    cols = (ox[:, None] + torch.arange(w, device=dev)[None, :])  # (B, W)
    bi = torch.arange(b, device=dev)[:, None, None]
    out = padded.permute(0, 2, 3, 1)[bi, rows[:, :, None], cols[:, None, :]]  # (B, H, W, C)
    return out.permute(0, 3, 1, 2).contiguous()


def _flip(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    flip = (_rand(gen, x.shape[0]) < 0.5).to(x.device)
    return torch.where(flip[:, None, None, None], x.flip(-1), x)


def weak_view(x: torch.Tensor, name: str, gen: torch.Generator) -> torch.Tensor:
    """The weak view of a batch (``flip_crop``, ``crop`` or ``none``)."""
    check_augmentation(name, WEAK, "augment.weak")
    if x.dim() != 4 or name == "none":
        return x.clone()
    if name == "flip_crop":
        x = _flip(x, gen)
    return _crop(x, gen)


def _cutout(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    b, _, h, w = x.shape
    sh, sw = max(1, h // 2), max(1, w // 2)
    cy = (_rand(gen, b) * h).long().to(x.device)
    cx = (_rand(gen, b) * w).long().to(x.device)
    ys = torch.arange(h, device=x.device)[None, :]
    xs = torch.arange(w, device=x.device)[None, :]
    my = ((ys >= (cy - sh // 2)[:, None]) & (ys < (cy - sh // 2 + sh)[:, None]))
    mx = ((xs >= (cx - sw // 2)[:, None]) & (xs < (cx - sw // 2 + sw)[:, None]))
    hole = (my[:, :, None] & mx[:, None, :])[:, None]  # (B, 1, H, W)
    fill = x.mean(dim=(2, 3), keepdim=True)  # grey in normalised units: the image's own mean
    return torch.where(hole, fill.expand_as(x), x)


def _affine(x: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)


def _apply_op(x: torch.Tensor, op: str, v: torch.Tensor, sign: torch.Tensor) -> torch.Tensor:
    """One RandAugment operation on images ``x`` (n, C, H, W) with magnitudes ``v`` in (0, 1] and signs ±1."""
    n = x.shape[0]
    if op == "identity":
        return x
    if op in ("rotate", "shear_x", "shear_y", "translate_x", "translate_y"):
        theta = torch.zeros(n, 2, 3, dtype=x.dtype, device=x.device)
        theta[:, 0, 0] = 1.0
        theta[:, 1, 1] = 1.0
        s = (sign * v).to(x.dtype)
        if op == "rotate":  # up to 30 degrees
            a = s * math.radians(30.0)
            theta[:, 0, 0], theta[:, 0, 1] = torch.cos(a), -torch.sin(a)
            theta[:, 1, 0], theta[:, 1, 1] = torch.sin(a), torch.cos(a)
        elif op == "shear_x":
            theta[:, 0, 1] = 0.3 * s
        elif op == "shear_y":
            theta[:, 1, 0] = 0.3 * s
        elif op == "translate_x":  # up to 30 % of the side (grid units span 2)
            theta[:, 0, 2] = 0.6 * s
        else:
            theta[:, 1, 2] = 0.6 * s
        return _affine(x, theta)
    lo = x.amin(dim=(1, 2, 3), keepdim=True)
    hi = x.amax(dim=(1, 2, 3), keepdim=True)
    span = torch.where(hi > lo, hi - lo, torch.ones_like(hi))
    u = (x - lo) / span
    vv = v.to(x.dtype)[:, None, None, None]
    ss = sign.to(x.dtype)[:, None, None, None]
    if op == "autocontrast":
        u = u  # the rescale to [0, 1] is the autocontrast itself
    elif op == "brightness":
        u = (u * (1.0 + 0.9 * vv * ss)).clamp(0, 1)
    elif op == "contrast":
        mean = u.mean(dim=(1, 2, 3), keepdim=True)
        u = (mean + (u - mean) * (1.0 + 0.9 * vv * ss)).clamp(0, 1)
    elif op == "posterize":
        bits = (8 - (vv * 4).round()).clamp(4, 8)
        levels = 2.0 ** bits
        u = torch.floor(u * (levels - 1) + 0.5) / (levels - 1)
    elif op == "sharpness":
        c = x.shape[1]
        k = torch.tensor([[1.0, 1.0, 1.0], [1.0, 5.0, 1.0], [1.0, 1.0, 1.0]], dtype=x.dtype, device=x.device) / 13.0
        blur = F.conv2d(F.pad(u, (1, 1, 1, 1), mode="replicate"), k.expand(c, 1, 3, 3), groups=c)
        u = (blur + (u - blur) * (1.0 + 0.9 * vv * ss)).clamp(0, 1)
    elif op == "solarize":
        thr = 1.0 - vv
        u = torch.where(u >= thr, 1.0 - u, u)
    else:  # pragma: no cover - guarded by RAND_OPS
        raise ConfigError("augment.strong", f"unknown operation {op!r}")
    return u * span + lo


def strong_view(x: torch.Tensor, name: str, gen: torch.Generator, *, weak: str = "flip_crop", n: int = 2,
                m: int = 10) -> torch.Tensor:
    """The strong view of a batch: ``randaugment`` (n ops at magnitude ≤ m, then Cutout), ``noise`` or ``none``."""
    check_augmentation(name, STRONG, "augment.strong")
    if name == "none" or x.dim() != 4:
        return weak_view(x, weak, gen) if x.dim() == 4 else x.clone()
    x = weak_view(x, weak, gen)
    b = x.shape[0]
    if name == "noise":
        x = x + 0.1 * (m / 10.0) * torch.randn(x.shape, generator=gen, dtype=x.dtype).to(x.device)
        return _cutout(x, gen)
    ops = torch.randint(0, len(RAND_OPS), (b, n), generator=gen)
    mags = torch.randint(1, m + 1, (b, n), generator=gen).to(x.dtype) / 10.0
    signs = torch.where(_rand(gen, b, n) < 0.5, -1.0, 1.0)
    apply = _rand(gen, b, n) < 0.5
    ops, mags, signs, apply = (t.to(x.device) for t in (ops, mags, signs, apply))  # drawn on the CPU
    for j in range(n):
        out = x.clone()
        for o, op in enumerate(RAND_OPS):
            sel = torch.nonzero((ops[:, j] == o) & apply[:, j]).flatten()
            if len(sel):
                out[sel] = _apply_op(x[sel], op, mags[sel, j], signs[sel, j])
        x = out
    return _cutout(x, gen)
