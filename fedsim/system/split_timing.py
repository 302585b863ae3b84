"""How long split learning's steps take: the world's devices, links and server, under one of two conventions.

Every step is a SimPy process of the world that writes the usual trace record (``compute``, ``upload``,
``download``, ``server``), so arrival order at the server comes from the device, channel and medium models.
This is the framework's timing of split learning: the split loops (``fedsim.algorithms.loops.split_rounds``, ``split_slots``) and
split algorithms call it and never the world's transfers or compute themselves.
The GAS cell itself is the world's ``channel.preset: gas-cell`` (TR 36.814 path loss, P = 0.2 W, the
full W = 10 MHz per client, d ~ U(100, 1000) m, ideal downlink).

``convention``
    ``real`` (default): a client pass costs the real FLOPs of the client part times the batch size; the
    activations *and* labels are uploaded, the activation gradient and the models are downloaded over the
    link, and the server's work (per-client gradient, buffer step, aggregation) queues for a server worker
    for the time its FLOPs take.

    ``gas-code``: the timing conventions of the GAS authors' code (spec gas.md §3.2).  A forward *or*
    backward pass of a minibatch takes the client part's per-image multiply-accumulates (FLOPs / 2, the
    fvcore count) divided by the device speed, not multiplied by B ("parallel computations"); only the
    activations are uploaded (activation bits × B), then the client model; downloads take no time (the
    bytes are still counted and recorded) and server work has zero service time (requests still pass
    through the server's queue).

``client_flops_per_s`` pins each client's speed (FLOP/s) for the client passes instead of the world's
devices, to replay a population drawn elsewhere (e.g. the GAS code's seed-2023 lists; distances are pinned
with ``channel.positions: {kind: fixed, points: ...}``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generator, Literal

from fedsim.config import require
from fedsim.system.world import World

if TYPE_CHECKING:  # pragma: no cover
    from fedsim.learn.split import SplitCosts


class SplitTiming:
    """The SimPy processes one split-learning algorithm uses for time (compute, transfer, server).

    Each step is a generator for ``yield from``; where a step is the world's own (an upload, a served
    request) the world's generator is handed back as it is, one generator fewer per step.  Every record is
    the world's (:meth:`World.compute_pinned` and :meth:`World.download_instant` for the two conventions the
    device and link models do not cover)."""

    def __init__(self, world: World, cfg: Any, costs: "SplitCosts") -> None:
        """``cfg``: the algorithm's ``timing`` settings (``fedsim.algorithms.configs.TimingConfig``: ``convention``,
        ``client_flops_per_s``), read by name so that this module does not import the algorithms' layer."""
        self.cfg = cfg
        self.costs = costs
        self.gas_code = cfg.convention == "gas-code"
        #: downloads take no time (gas-code): :meth:`instant_download` records one without a generator
        self.instant_downloads = self.gas_code
        self.speeds: list[float] | None = None
        if cfg.client_flops_per_s is not None:
            require(len(cfg.client_flops_per_s) == world.num_clients, "algorithm.timing.client_flops_per_s",
                    f"needs one speed per client ({world.num_clients}), got {len(cfg.client_flops_per_s)}")
            self.speeds = [float(f) for f in cfg.client_flops_per_s]
        self.env, self.world = world.env, world

    # ---------------------------------------------------------------------------------- sizes
    def activation_upload_bytes(self, batch: int) -> int:
        """Bytes uploaded per minibatch: activations and labels (real) or activations only (gas-code)."""
        c = self.costs
        return batch * (c.activation_bytes + (0 if self.gas_code else c.label_bytes))

    def gradient_bytes(self, batch: int) -> int:
        return batch * self.costs.activation_bytes

    # ---------------------------------------------------------------------------------- processes
    def client_pass(self, client: int, direction: Literal["forward", "backward"], batch: int
                    ) -> Generator[Any, Any, float]:
        """One forward or backward pass of the client part over a minibatch on the client's device."""
        c = self.costs
        if self.gas_code:
            flops, samples = c.client_forward / 2.0, 1
        else:
            flops = (c.client_forward if direction == "forward" else c.client_backward) * batch
            samples = batch
        what = f"sfl-{direction}"
        if self.speeds is None:
            return self.world.compute(client, flops, what=what, steps=1, samples=samples)
        return self.world.compute_pinned(client, flops, self.speeds[client], what=what)

    def client_aux(self, client: int, flops_per_sample: float, batch: int) -> Generator[Any, Any, float]:
        """The client's own loss over a minibatch (an auxiliary head's forward and backward, ``flops_per_sample``
        each sample), by the convention's rule for a client pass: FLOPs × batch (real), or half the per-sample
        FLOPs once (gas-code's "parallel" multiply-accumulates).  Recorded as ``compute`` with ``what: sfl-aux``."""
        if self.gas_code:
            flops, samples = flops_per_sample / 2.0, 1
        else:
            flops, samples = flops_per_sample * batch, batch
        if self.speeds is None:
            return self.world.compute(client, flops, what="sfl-aux", steps=1, samples=samples)
        return self.world.compute_pinned(client, flops, self.speeds[client], what="sfl-aux")

    def upload(self, client: int, nbytes: int, what: str) -> Generator[Any, Any, float]:
        return self.world.upload(client, nbytes, what=what)

    def download(self, client: int, nbytes: int, *, version: int | None = None) -> Generator[Any, Any, float]:
        """Server → client transfer; instantaneous (bytes still counted and recorded) under gas-code.

        A download without a model ``version`` brings the gradients of the cut layer (the client model's
        downloads name their version): its record says so (``what: gradients``), as an upload's names its
        activations, so the report tells the two apart."""
        if not self.gas_code:
            return self.world.download(client, nbytes, version=version, what=_payload(version))
        return self._instant(client, nbytes, version)

    def _instant(self, client: int, nbytes: int, version: int | None) -> Generator[Any, Any, float]:
        self.instant_download(client, nbytes, version)
        return 0.0
        yield  # pragma: no cover - makes this a generator

    def instant_download(self, client: int, nbytes: int, version: int | None = None) -> None:
        """A gas-code download, which takes no time: counted and recorded now (no generator needed)."""
        self.world.download_instant(client, nbytes, version=version, what=_payload(version))

    def server_seconds(self, flops: float) -> float:
        """Service time of server work of ``flops`` (zero under gas-code: the request still queues), for the
        context's ``serve``."""
        return 0.0 if self.gas_code else self.world.server_compute_time(flops)

    def aggregation_seconds(self, n_models: int, model_bytes: int) -> float:
        """Service time to average ``n_models`` client models (2 FLOPs per float32 parameter per model)."""
        return self.server_seconds(2.0 * (model_bytes / 4.0) * max(1, n_models))


def _payload(version: int | None) -> str | None:
    """The ``what`` of a split-learning download: gradients when it names no model version (see
    :meth:`SplitTiming.download`), else none (a model, which its version names)."""
    return "gradients" if version is None else None
