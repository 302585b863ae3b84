"""Algorithms: one module per family, built from the shared pieces in ``base``."""
from __future__ import annotations

from fedsim.algorithms.base import Algorithm


def registry() -> dict[str, type[Algorithm]]:
    """Algorithm name → class, for scenarios and the CLI."""
    from fedsim.algorithms.ca2fl import CA2FL
    from fedsim.algorithms.cos2p import Cos2P
    from fedsim.algorithms.embracingfl import EmbracingFL
    from fedsim.algorithms.fedasync import FedAsync
    from fedsim.algorithms.fedavg import FedAvg
    from fedsim.algorithms.fedbuff import FedBuff
    from fedsim.algorithms.fedprox import FedProx
    from fedsim.algorithms.fedraa import FedRAA
    from fedsim.algorithms.fedraa_baselines import PruneFLLite, RAMFedLite
    from fedsim.algorithms.sfl_async import GAS, AsyncSFL
    from fedsim.algorithms.semifl import FedMatch, FedSwitch, SemiFL
    from fedsim.algorithms.semisfl import FedSwitchSL, SemiSFL, SupervisedOnly
    from fedsim.algorithms.sfl_sync import S2FL, MiniBatchSFL
    from fedsim.algorithms.width import FedRolex, FjORD, HeteroFL

    return {cls.name: cls for cls in (FedAvg, FedAsync, FedBuff, CA2FL, Cos2P, AsyncSFL, GAS, MiniBatchSFL, S2FL,
                                      SemiSFL, FedSwitchSL, SupervisedOnly, SemiFL, FedSwitch, FedMatch,
                                      HeteroFL, FjORD, FedRolex, FedProx, FedRAA, RAMFedLite, PruneFLLite,
                                      EmbracingFL)}
