"""FedNova (Wang, Liu, Liang, Joshi and Poor, NeurIPS 2020): normalized averaging, on fedsim's public API.

Clients that take more local steps move further; FedAvg then over-weights their objective.  FedNova
normalises each client's progress by its number of local steps τ_i and rescales the average by the
effective step count τ_eff = Σ p_i τ_i:

    w ← w + τ_eff · Σ_i p_i (w_i − w) / τ_i

p_i is FedAvg's own weight of the update (the samples it processed), so FedNova differs from FedAvg only
in the normalisation.  Written as a weighted average with weights ω_i = p_i·τ_eff/τ_i and a server step
s = Σ ω_i / Σ p_i: with equal local steps ω_i = p_i and s = 1 exactly, so FedNova *is* FedAvg, bit for bit.
Everything else (rounds, sampling, deadlines, transfers, records) is the framework's.
"""
from __future__ import annotations

from dataclasses import dataclass

from fedsim.algorithms import RoundsConfig, SyncRounds, Update
from fedsim.learn.state import State, masked_weighted_average, state_axpy, state_sub


class FedNova(SyncRounds):
    name = "fednova"

    @dataclass
    class Config(RoundsConfig):
        """FedAvg's round settings; FedNova adds none."""

    def server_rule(self, updates: list[Update], base: State) -> tuple[State, list[float]]:
        p = [float(u.weight) for u in updates]
        tau = [int(u.info["steps"]) for u in updates]  # local SGD steps each client took
        tau_eff = sum(pi * ti for pi, ti in zip(p, tau)) / sum(p)
        scaled = [u.scaled(tau_eff / ti) for u, ti in zip(updates, tau)]  # weights ω_i = p_i · τ_eff / τ_i
        avg = masked_weighted_average(scaled, base)
        omega = [float(u.weight) for u in scaled]
        step = sum(omega) / sum(p)
        new = avg if step == 1.0 else state_axpy(base, state_sub(avg, base), step)
        return new, [w / sum(omega) for w in omega]
