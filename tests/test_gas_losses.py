"""Logit-adjusted cross-entropy (GAS eq. 6) against a hand-written numpy softmax."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedsim.errors import ConfigError
from fedsim.learn.losses import label_log_prior, logit_adjusted_cross_entropy

pytestmark = pytest.mark.fast  # a quick file: part of `pytest -m fast` (tests/README.md)


def _np_adjusted_ce(logits: np.ndarray, y: np.ndarray, prior: np.ndarray, tau: float) -> np.ndarray:
    z = logits + tau * np.log(prior)
    losses = []
    for row, label in zip(z, y):
        e = [math.exp(v) for v in row]
        losses.append(-math.log(e[label] / sum(e)))
    return np.array(losses)


def test_label_log_prior_is_log_frequency_plus_eps():
    lp = label_log_prior([6, 0, 2, 2]).numpy()
    np.testing.assert_allclose(lp, np.log([0.6 + 1e-12, 1e-12, 0.2 + 1e-12, 0.2 + 1e-12]), rtol=1e-6)
    assert lp[1] == pytest.approx(math.log(1e-12), rel=1e-6)


@pytest.mark.parametrize("tau", [0.0, 1.0, 0.5])
def test_logit_adjusted_ce_matches_hand_softmax(tau):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(6, 4)) * 2
    y = np.array([0, 1, 2, 3, 0, 2])
    counts = np.array([5.0, 1.0, 3.0, 1.0])
    lp = label_log_prior(torch.tensor(counts, dtype=torch.float64))
    got = logit_adjusted_cross_entropy(torch.tensor(logits), torch.tensor(y), lp, tau=tau, reduction="none")
    want = _np_adjusted_ce(logits, y, counts / counts.sum() + 1e-12, tau)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10)
    mean = logit_adjusted_cross_entropy(torch.tensor(logits), torch.tensor(y), lp, tau=tau)
    assert mean.item() == pytest.approx(want.mean(), rel=1e-10)


def test_gradient_pushes_less_towards_frequent_labels():
    # With equal logits the adjusted softmax equals the prior, so d loss / d logit_j = P(j) - 1[j=y].
    counts = torch.tensor([8.0, 2.0], dtype=torch.float64)
    logits = torch.zeros(1, 2, dtype=torch.float64, requires_grad=True)
    logit_adjusted_cross_entropy(logits, torch.tensor([0]), label_log_prior(counts)).backward()
    np.testing.assert_allclose(logits.grad.numpy(), [[0.8 - 1.0, 0.2]], atol=1e-10)


def test_bad_inputs():
    with pytest.raises(ConfigError, match="positive count"):
        label_log_prior([0, 0])
    with pytest.raises(ConfigError, match="classes"):
        logit_adjusted_cross_entropy(torch.zeros(2, 3), torch.tensor([0, 1]), torch.zeros(4))
