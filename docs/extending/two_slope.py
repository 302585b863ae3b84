"""A path-loss model of one's own, named in a scenario as ``channel.uplink.model: "two_slope:two_slope"``.

A channel model is a function ``f(d_m, config, los) -> path loss in dB`` at 2-D distance ``d_m`` metres (a float
or an array; return the same shape), where ``config`` is the link's ``fedsim.system.channel.ChannelConfig``
(``frequency_hz``, ``bandwidth_hz``, ``tx_power_w``, ...) and ``los`` whether the client is in line of sight.
fedsim adds the shadowing, the fading, the SNR and the Shannon rate, exactly as for its own models.

This one is the two-slope model: free-space loss up to a breakpoint distance, then a steeper exponent beyond
it (a common ground-reflection approximation).  Its own constants are module-level here; the link's generic
fields (frequency, bandwidth, power, noise, shadowing, fading) are read from ``config``.
"""
from __future__ import annotations

import math

import numpy as np

BREAKPOINT_M = 100.0
EXPONENT_BEYOND = 4.0


def free_space_db(d_m, f_hz):
    """Friis free-space loss, written as fedsim's ``free_space`` model writes it (so the two agree to the bit)."""
    return 20 * np.log10(d_m) + 20 * np.log10(f_hz) + 20 * np.log10(4 * math.pi / 299_792_458.0)


def two_slope(d_m, config, los):
    """Free space up to ``BREAKPOINT_M``, then ``10 · EXPONENT_BEYOND · log10(d / BREAKPOINT_M)`` dB more."""
    d = np.asarray(d_m, dtype=float)
    near = free_space_db(d, config.frequency_hz)
    beyond = free_space_db(BREAKPOINT_M, config.frequency_hz) + 10 * EXPONENT_BEYOND * np.log10(d / BREAKPOINT_M)
    out = np.where(d <= BREAKPOINT_M, near, beyond)
    return float(out) if np.ndim(d_m) == 0 else out
