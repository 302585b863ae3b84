"""Semi-supervised pieces of SemiSFL: the memory queue, the contrastive losses, the projection head and the
K_s controller (the teacher's EMA is ``fedsim.learn.state.state_mix``) (spec semisfl.md §2.2, §2.5, §2.6).

The losses follow the SemiSFL code's ``FeatureCache``: anchors are the (L2-normalised) student
projections of the current batch; references are the batch's own teacher keys followed by the queue;
positives are references with the anchor's (pseudo-)label, and — for clustering regularisation — whose
teacher confidence passed the threshold.  The anchor itself is *not* confidence-filtered; an anchor with no
positive contributes 0.  After the loss is computed the batch's keys enter the queue (FIFO).  Keys pushed
without masks (the server's supervised phase) enter with mask 0: Eq. 5's positives are only entries "whose
confidences come up to τ", and the authors' ``FeatureCache`` enqueues supervised keys with mask 0, so a
labeled key is never a positive of C (SupCon T, which takes no masks, still uses them).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedsim.config import positive, require
from fedsim.errors import ConfigError
from fedsim.learn.augment import STRONG, WEAK, check_augmentation, check_randaugment

__all__ = ["FeatureQueue", "contrastive_loss", "ProjectionHead", "KsController", "k_min"]


class FeatureQueue:
    """A FIFO of the last ``size`` teacher keys with their (pseudo-)labels and confidence masks."""

    def __init__(self, dim: int, size: int, device: torch.device | str | None = None) -> None:
        if size < 1:
            raise ConfigError("algorithm.queue_size", f"must be >= 1, got {size!r}")
        self.dim, self.size = int(dim), int(size)
        self.device = dev = torch.device("cpu" if device is None else device)  # the run's train.device
        self.keys = torch.zeros(0, self.dim, device=dev)
        self.labels = torch.zeros(0, dtype=torch.int64, device=dev)
        self.masks = torch.zeros(0, dtype=torch.bool, device=dev)

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def clear(self) -> None:
        self.__init__(self.dim, self.size, self.device)

    def push(self, keys: torch.Tensor, labels: torch.Tensor, masks: torch.Tensor | None = None) -> None:
        """Enqueue a batch (oldest entries leave first); afterwards the queue holds the last ``size`` keys.

        ``masks=None`` (labeled keys of the supervised phase) enqueues mask 0: such keys are never positives
        of the clustering regulariser (Eq. 5 counts only confident entries; the authors' code does the same).
        """
        m = torch.zeros(len(labels), dtype=torch.bool, device=self.device) if masks is None else masks.to(torch.bool)
        self.keys = torch.cat([self.keys, keys.detach().to(self.keys.dtype)])[-self.size:]
        self.labels = torch.cat([self.labels, labels.detach().to(torch.int64)])[-self.size:]
        self.masks = torch.cat([self.masks, m.detach()])[-self.size:]


def contrastive_loss(q: torch.Tensor, k: torch.Tensor, labels: torch.Tensor, queue: FeatureQueue, kappa: float,
                     masks: torch.Tensor | None = None) -> torch.Tensor:
    """SupCon T (eq. 3, ``masks=None``) or clustering regularisation C (eq. 5) of anchors ``q`` (B, d).

    References: the batch's keys ``k`` then the queue.  Positives: same label and, with ``masks``, a
    confident reference.  Mean over anchors of −(mean log-softmax over positives); 0 for an anchor without
    positives.  The queue is then extended by (k, labels, masks).
    """
    refs = torch.cat([k.detach(), queue.keys.to(k.dtype)])
    ref_labels = torch.cat([labels, queue.labels])
    pos = ref_labels[None, :].eq(labels[:, None])
    if masks is not None:
        ref_masks = torch.cat([masks.to(torch.bool), queue.masks])
        pos = pos & ref_masks[None, :]
    logits = q @ refs.T / kappa
    log_prob = logits - torch.logsumexp(logits, dim=1, keepdim=True)
    posf = pos.to(q.dtype)
    n_pos = posf.sum(1)
    mean_pos = (posf * log_prob).sum(1) / torch.where(n_pos > 0, n_pos, torch.ones_like(n_pos))
    loss = (-mean_pos).mean()
    queue.push(k, labels, masks)
    return loss


class ProjectionHead(nn.Module):
    """The server's projection head on flattened cut-layer features, output L2-normalised.

    ``mlp``: Linear(d, hidden)–ReLU–Linear(hidden, out) (the paper's two-layer MLP; the code uses
    hidden = d, here ``hidden`` is configurable as the spec suggests for small runs); ``linear``:
    Linear(d, out); ``none``: the identity (the features themselves, normalised).
    """

    def __init__(self, kind: Literal["mlp", "linear", "none"], d_in: int, hidden: int, d_out: int) -> None:
        super().__init__()
        self.kind = kind
        if kind == "mlp":
            self.net: nn.Module = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, d_out))
            self.d_out = d_out
        elif kind == "linear":
            self.net = nn.Linear(d_in, d_out)
            self.d_out = d_out
        elif kind == "none":
            self.net = nn.Identity()
            self.d_out = d_in
        else:
            raise ConfigError("algorithm.head", f"unknown projection head {kind!r} (allowed: mlp, linear, none)")

    def forward(self, e: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.net(e.flatten(1)), dim=1)


def k_min(beta: float, n_labeled: int, n_total: int, k_u: int) -> int:
    """K_min = floor(β · |D_l| / |D| · K_u) (paper, Sec. IV-B)."""
    return int(math.floor(beta * n_labeled / max(1, n_total) * k_u + 1e-12))


@dataclass
class KsController:
    """The global-updating-frequency controller (Eq. 9–10) in the paper's or the code's version.

    ``record(f_s, f_u, lr, K_u)`` is called once per round with that round's supervised and
    semi-supervised training losses; it returns K_s for the next round.  Windows of ``window`` rounds
    (paper: 10) are averaged; I_n = 1 when the semi-supervised loss fell more than the supervised one from
    window n−1 to n; R_h is the mean of the last ``periods`` (paper: 10) indicators.

    ``paper``: R_h = (1/periods)·Σ I_n over a *full* span of ``periods`` indicators (paper: (1/10)Σ_{n=1}^{10}
    I_n over spans of 100 rounds); Eq. 10 is applied once at the end of each span, and not at all before the
    first span is complete (no decision on partial evidence): if R_h ≥ 0.5, K_s ← max(floor(K_s/α), K_min).
    Choice: the paper does not say how often Eq. 10 is applied; once per span (the authors' code checks
    once per span too) avoids dividing K_s every round on the same evidence.  Until the first span is full
    R_h is NaN.
    ``code``: every ``window·periods`` rounds, once ``window·(periods+1)`` rounds exist (the code's
    ``system_control``): reductions normalised by the window's mean learning rate and step count,
    R = mean(du − dx ≥ 1e-5), and K_s ← round(max(K_s/α, β·K_u·|D_l|/|D|)).
    ``none``: K_s stays fixed (R_h is still computed, as the paper's version, for the trace).
    """

    k_s: int
    mode: Literal["paper", "code", "none"] = "paper"
    alpha: float = 1.5
    beta: float = 8.0
    n_labeled: int = 0
    n_total: int = 1
    window: int = 10
    periods: int = 10
    history: list[tuple[float, float, float, float, float]] = field(default_factory=list)
    indicators: list[int] = field(default_factory=list)
    r_h: float = float("nan")

    def record(self, f_s: float, f_u: float, lr: float, k_u: int) -> int:
        self.history.append((float(f_s), float(f_u), float(lr), float(self.k_s), float(k_u)))
        h = len(self.history)
        if h % self.window == 0 and h >= 2 * self.window:
            a = np.array(self.history[-2 * self.window:])
            prev, cur = a[: self.window].mean(0), a[self.window:].mean(0)
            self.indicators.append(int((prev[1] - cur[1]) > (prev[0] - cur[0])))
            if self.mode != "code" and len(self.indicators) % self.periods == 0:
                self.r_h = float(np.mean(self.indicators[-self.periods:]))
                if self.mode == "paper" and self.r_h >= 0.5:
                    self.k_s = max(int(math.floor(self.k_s / self.alpha)), k_min(self.beta, self.n_labeled,
                                                                                 self.n_total, k_u))
        span = self.window * self.periods
        if self.mode == "code" and h % span == 0 and h >= self.window * (self.periods + 1):
            a = np.array(self.history[-self.window * (self.periods + 1):]).reshape(self.periods + 1, self.window, 5)
            m = a.mean(1)
            xm, um, lrm, xs, us = m[:, 0], m[:, 1], m[:, 2], m[:, 3], m[:, 4]
            dx = (xm[:-1] - xm[1:]) / lrm[:-1] / np.maximum(xs[:-1], 1e-12)
            du = (um[:-1] - um[1:]) / lrm[:-1] / np.maximum(us[:-1], 1e-12)
            self.r_h = float(np.mean(du - dx >= 1e-5))
            if self.r_h >= 0.5:
                self.k_s = int(round(max(self.k_s / self.alpha, self.beta * k_u * self.n_labeled / max(1, self.n_total))))
        return self.k_s
