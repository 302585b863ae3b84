"""Energy per device: compute, radio and idle, accumulated as the simulation runs.

The model is the one FL-over-wireless papers use at the system level: E = P x t per state.
Compute energy = board power of the power mode x busy time; radio energy = transmit power x airtime
(the time the radio is actually on, which excludes time waiting for a shared medium); idle energy =
idle power x the rest of the horizon.  For CPU-frequency studies the dynamic-power model
E = kappa c D f^2 (Yang et al., "Energy Efficient Federated Learning over Wireless Communication
Networks", IEEE TWC 2021; Tran et al., FEDL, INFOCOM 2019) is available as ``cpu_dynamic_energy``.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import pandas as pd

from fedsim.errors import ConfigError


def cpu_dynamic_energy(kappa: float, cycles: float, freq_hz: float) -> float:
    """Joules of dynamic CPU energy: kappa x cycles x f^2 (kappa ~ 1e-28 effective switched capacitance)."""
    if kappa < 0 or cycles < 0 or freq_hz < 0:
        raise ConfigError("energy", f"kappa, cycles and frequency must be >= 0, got {kappa}, {cycles}, {freq_hz}")
    return kappa * cycles * freq_hz**2


@dataclass
class EnergyAccount:
    """What one device spent, by state (joules) and how long it was in each state (seconds)."""

    compute_j: float = 0.0
    tx_j: float = 0.0
    rx_j: float = 0.0
    idle_j: float = 0.0
    busy_s: float = 0.0
    tx_s: float = 0.0
    rx_s: float = 0.0
    idle_s: float = 0.0

    @property
    def total_j(self) -> float:
        return self.compute_j + self.tx_j + self.rx_j + self.idle_j


def _check(seconds: float, watts: float) -> None:
    if seconds < 0 or watts < 0:
        raise ConfigError("energy", f"time and power must be >= 0, got {seconds} s at {watts} W")


def _plain(values: Any) -> list[Any]:
    """Python numbers (numpy arrays as lists of ints and floats, so device keys stay plain ints)."""
    return values.tolist() if hasattr(values, "tolist") else list(values)


class EnergyMeter:
    """Accumulates energy per device; call ``close`` at the end to charge idle time."""

    def __init__(self) -> None:
        self.accounts: dict[Any, EnergyAccount] = defaultdict(EnergyAccount)

    def compute(self, device: Any, seconds: float, watts: float) -> float:
        """Charge ``seconds`` of computing at ``watts`` (the power mode's board power); returns joules."""
        _check(seconds, watts)
        a = self.accounts[device]
        a.compute_j += seconds * watts
        a.busy_s += seconds
        return seconds * watts

    def compute_on(self, device: Any, seconds: float, profile, mode: str | None = None) -> float:
        """Charge compute at a DeviceProfile's power in ``mode`` (default mode if None)."""
        return self.compute(device, seconds, profile.power_w(mode))

    def transmit(self, device: Any, airtime_s: float, tx_power_w: float) -> float:
        """Charge radio transmission: transmit power x airtime."""
        _check(airtime_s, tx_power_w)
        a = self.accounts[device]
        a.tx_j += airtime_s * tx_power_w
        a.tx_s += airtime_s
        return airtime_s * tx_power_w

    def receive(self, device: Any, seconds: float, rx_power_w: float) -> float:
        """Charge radio reception (optional: many papers ignore it)."""
        _check(seconds, rx_power_w)
        a = self.accounts[device]
        a.rx_j += seconds * rx_power_w
        a.rx_s += seconds
        return seconds * rx_power_w

    def compute_many(self, devices: Any, seconds: Any, watts: Any) -> None:
        """:meth:`compute` for many devices (parallel sequences), in order."""
        for d, s, w in zip(_plain(devices), _plain(seconds), _plain(watts)):
            self.compute(d, s, w)

    def transmit_many(self, devices: Any, airtime_s: Any, tx_power_w: Any) -> None:
        """:meth:`transmit` for many devices (parallel sequences), in order."""
        for d, s, w in zip(_plain(devices), _plain(airtime_s), _plain(tx_power_w)):
            self.transmit(d, s, w)

    def close(self, device: Any, horizon_s: float, idle_w: float) -> float:
        """Charge idle power for the part of [0, horizon] not spent computing or on the radio.

        Compute and radio time are assumed not to overlap (a client computes, then sends), so
        idle = horizon - busy - tx - rx, floored at zero.
        """
        _check(horizon_s, idle_w)
        a = self.accounts[device]
        idle = max(0.0, horizon_s - a.busy_s - a.tx_s - a.rx_s)
        a.idle_s = idle
        a.idle_j = idle * idle_w
        return a.idle_j

    def total(self, device: Any | None = None) -> float:
        if device is not None:
            return self.accounts[device].total_j if device in self.accounts else 0.0
        return sum(a.total_j for a in self.accounts.values())

    def table(self) -> pd.DataFrame:
        """One row per device with joules and seconds per state."""
        accounts = list(self.accounts.values())
        cols: dict[str, list[Any]] = {"device": list(self.accounts)}
        for name in EnergyAccount.__dataclass_fields__:
            cols[name] = [getattr(a, name) for a in accounts]
        cols["total_j"] = [a.total_j for a in accounts]
        return pd.DataFrame(cols)
