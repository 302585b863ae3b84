"""What a local training costs, and whether it fits: FLOPs per sample, bytes each way, training memory on the
client's device and the sub-model that fits it.  The counting itself is :mod:`fedsim.learn.costs` and
:mod:`fedsim.learn.submodel`; this is the run's view of it (its model, batch size, devices), mixed into the
training executor, so an algorithm asks ``ctx.training.submodel_costs(sub)`` or ``ctx.training.fit_submodel(...)``."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from fedsim.learn.costs import FlopCost, state_bytes
from fedsim.learn.submodel import SubModel, SubModelCosts, sub_state_bytes, submodel_costs
from fedsim.system.devices import check_memory

if TYPE_CHECKING:  # pragma: no cover
    from fedsim.learn.models import BlockModel
    from fedsim.learn.state import State
    from fedsim.learn.sgd import SGDConfig
    from fedsim.messages import Assignment
    from fedsim.scenario import Scenario
    from fedsim.system.world import World

__all__ = ["TrainingCosts"]


class TrainingCosts:
    """The cost and memory model of a run's trainings (a mixin of :class:`fedsim.training.TrainingExecutor`,
    which sets the attributes declared here)."""

    scenario: "Scenario"
    world: "World"
    worker: "BlockModel"
    sgd: "SGDConfig"
    input_shape: tuple[int, ...]
    reference_state: "State"
    #: FLOPs per sample of the whole model (forward, backward, total)
    flop_cost: FlopCost
    #: bytes of the whole model's state
    model_bytes: int
    #: floating-point parameters of the whole model
    num_params: int

    def submodel_costs(self, sub: SubModel) -> SubModelCosts:
        """FLOPs per sample, bytes both ways and training memory of ``sub`` at this run's batch size
        (:func:`fedsim.learn.submodel.submodel_costs`, cached per sub-model)."""
        return submodel_costs(self.worker, sub, self.input_shape, self.sgd.batch_size,
                              momentum=self.sgd.momentum > 0, state=self.reference_state)

    def check_submodel_memory(self, client: int, sub: SubModel) -> SubModelCosts:
        """The costs of ``sub``; refuses (one line naming the device, the model and both memory figures) when
        its training memory exceeds the client's device and ``devices.check_memory`` is on."""
        costs = self.submodel_costs(sub)
        device = self.world.device(client)
        if self.scenario.devices.check_memory and costs.memory.total > device.memory_bytes:
            kept = sub.summary(self.worker)["kept"]
            check_memory(device, costs.memory.total,
                         f"training model '{self.scenario.model.name}' as a sub-model keeping {kept:.4g} of it "
                         f"(batch {self.sgd.batch_size})")
        return costs

    def fit_submodel(self, client: int, candidates: Sequence[SubModel]) -> SubModel:
        """The first of ``candidates`` (give them largest first) whose training memory fits the client's
        device; when none does, refuses with the smallest candidate's need (the one that came closest).
        With ``devices.check_memory`` off, the first candidate."""
        if not candidates:
            raise ValueError("fit_submodel needs at least one candidate sub-model")
        if not self.scenario.devices.check_memory:
            return candidates[0]
        budget = self.world.device(client).memory_bytes
        for sub in candidates:
            if self.submodel_costs(sub).memory.total <= budget:
                return sub
        smallest = min(candidates, key=lambda s: self.submodel_costs(s).memory.total)
        self.check_submodel_memory(client, smallest)
        return smallest  # pragma: no cover - check_submodel_memory raised

    def update_bytes(self, tensors: State) -> int:
        return state_bytes(tensors)

    def download_bytes(self, assignment: "Assignment | None" = None) -> int:
        """Bytes a client downloads for ``assignment``: the whole model, or the sub-model's tensors only."""
        if assignment is None or assignment.submodel is None:
            return self.model_bytes
        return int(sub_state_bytes(self.worker, assignment.submodel, state=self.reference_state))

    def submodel_summary(self, sub: SubModel) -> dict[str, Any]:
        """The compact trace description of a sub-model (kept fraction per block, block states)."""
        return sub.summary(self.worker)
