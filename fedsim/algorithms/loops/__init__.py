"""The framework's loops, one module per shape; an algorithm subclasses one and writes only its decisions.

=================  ===============================  ========================================
loop               module                           config base (``fedsim.algorithms.configs``)
=================  ===============================  ========================================
``SyncRounds``     ``loops.sync_rounds``            ``RoundsConfig``
``AsyncSlots``     ``loops.async_slots``            ``SlotsConfig``
``SemiAsyncRounds``  ``loops.semi_async``           ``SemiAsyncConfig``
``SplitRounds``    ``loops.split_rounds``           ``SplitRoundsConfig``
``SplitSlots``     ``loops.split_slots``            ``SplitSlotsConfig``
=================  ===============================  ========================================

``loops.slots`` holds the slot scheduling the two slot loops share, ``loops.split`` what every split algorithm
shares (the cut model, its costs and timing, a participation's ``SplitSession``), and ``loops.fedavg_vector``
FedAvg's systems-only rounds in numpy (the vector engine: ``engine: vector``; imported by ``FedAvg`` when a run
asks for it, not here).  Each loop keeps one run's
bookkeeping (task counters, slots, buffers, the base-state history) in a state object of its own
(``SlotsState``, ``AsyncSlotsState``, ``SemiAsyncState``, ``SplitRoundsState``, ``SplitSlotsState``), created
when the loop starts and readable from a hook as ``self.loop``.  The public names are importable from
``fedsim.algorithms``.
"""
from __future__ import annotations

from fedsim.algorithms.loops.async_slots import AsyncSlots, AsyncSlotsState
from fedsim.algorithms.loops.semi_async import SemiAsyncRounds, SemiAsyncState, quorum
from fedsim.algorithms.loops.slots import SlotScheduler, SlotsState
from fedsim.algorithms.loops.split import SplitAlgorithm, SplitSession
from fedsim.algorithms.loops.split_rounds import SplitRounds, SplitRoundsState
from fedsim.algorithms.loops.split_slots import SplitSlots, SplitSlotsState
from fedsim.algorithms.loops.sync_rounds import SyncRounds

__all__ = ["AsyncSlots", "AsyncSlotsState", "SemiAsyncRounds", "SemiAsyncState", "SlotScheduler", "SlotsState",
           "SplitAlgorithm", "SplitRounds", "SplitRoundsState", "SplitSession", "SplitSlots", "SplitSlotsState",
           "SyncRounds", "quorum"]
