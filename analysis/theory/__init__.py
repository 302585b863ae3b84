"""Bounds of the five papers (and the FedAvg/local-SGD baseline), evaluated on measured constants.

Each module has ``evaluate(measured: dict, params: dict) -> list[Check]``: ``measured`` holds what a
run or a probe measured (gradient norms, L, σ², staleness, N*, …), ``params`` the algorithm's settings
(learning rates, local steps, …); the keys use each paper's own symbols (see the module docstrings).
A check whose inputs are missing is returned with ``holds=None`` and says what it lacks, so a partial
measurement still gives a partial report.  Where a theorem hides its constants in O(·), the check is
about shape (slopes, monotonicity) and says so in its note.
"""
from analysis.theory.base import Check, checks_frame

__all__ = ["Check", "checks_frame", "MODULES", "COMPANIONS"]

#: Theorem id an algorithm declares (``Algorithm.theorems``) -> theory module (import with importlib; see
#: analysis.report).  Each module has ``REFERENCE`` and ``evaluate(measured, params)``; a module whose theorem
#: is written for a setting a run may leave (participation, optimiser, local objective) also has
#: ``applies(setting)``, whose condition rows decide whether its bound is judged at all.
MODULES = {
    "fedasync": "analysis.theory.fedasync",
    "fedbuff": "analysis.theory.fedbuff",
    "cos2p": "analysis.theory.cos2p",
    "fedraa": "analysis.theory.fedraa",
    "gas": "analysis.theory.gas",
    "semisfl": "analysis.theory.semisfl",
    "embracingfl": "analysis.theory.embracingfl",
    "local_sgd": "analysis.theory.local_sgd",
    "fedavg_partial": "analysis.theory.fedavg_partial",
}

#: Verified bounds a declared theorem id brings with it: ``local_sgd`` (FedAvg, FedProx) is held against
#: Yang, Fang & Liu's Theorem 1 (unverified constants) and the verified Theorems A/B of the same algorithm.
COMPANIONS = {"local_sgd": ("fedavg_partial",)}
