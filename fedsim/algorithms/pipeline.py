"""The client pipeline: one participation from assignment to ``Update``.

    Assignment (what this client trains) → client_task (download, train, upload, timed by the framework)
    → Update (tensors + coverage mask) → a pure server rule → ``VersionKeeper.apply``

``client_task`` is the framework's: an algorithm calls it (the default ``Algorithm.client_job`` does) and
never times a transfer itself; :meth:`fedsim.context.Context.run_client` times it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generator, Sequence

import simpy

from fedsim.learn.costs import state_bytes
from fedsim.learn.state import State, state_sub
from fedsim.messages import Assignment, Update
from fedsim.training import ClientWork

if TYPE_CHECKING:  # pragma: no cover
    from fedsim.context import Context
    from fedsim.training import TrainResult

__all__ = ["client_task"]


# ------------------------------------------------------------------------------------------ client task

def client_task(
    ctx: "Context",
    client: int,
    base_state: State,
    base_version: int,
    *,
    task: int,
    assignment: Assignment | None = None,
    work: "ClientWork | None" = None,
    extra_downloads: Sequence[int] = (),
    extra_uploads: Sequence[tuple[int, str]] = (),
) -> Generator[simpy.events.Event, Any, Update]:
    """One client participation: download the (sub-)model, train locally, upload the update.

    ``base_state`` is the model the server sent at dispatch (the caller snapshots it); training runs
    on exactly that, at the virtual moment computing starts, with the client's own batch stream for
    this task.  Bytes in both directions are those of the tensors that travel (the sub-model's only).
    The framework times it (:meth:`fedsim.context.Context.run_client`: the world writes the ``download``,
    ``compute`` and ``upload`` records).

    ``work`` (:class:`fedsim.training.ClientWork`) replaces the assignment's training when the client program
    is decided on the device (Co-S²P's mask phase): its ``download_bytes`` travel, its ``start()`` computes,
    and its result (state, mask, statistics, FLOPs, upload bytes, ``info``) becomes the ``Update`` as any
    training's does.  ``extra_downloads`` (bytes, each its own record, before the model) and
    ``extra_uploads`` ((bytes, what), after the update) are what else the participation moves (FedSwitch's
    teacher, FedMatch's helpers).  Returns the ``Update`` (``info["arrived"]``: when its upload ended); a SimPy
    interrupt (deadline, going offline) propagates to the caller, who records the drop.
    """
    a = assignment if assignment is not None else Assignment()
    trace_task = ctx.world.task_of[client]  # the dispatch this participation answers (its apply names it)
    if work is None:
        down = ctx.training.download_bytes(a)
        if a.objective is not None:  # declared extra tensors travel with the model (costed)
            down += state_bytes(a.objective.download())
        work = ClientWork(down, lambda: ctx.training.start(client, base_state, task=task, assignment=a))
    sent: dict[str, Any] = {}

    def upload_bytes(result: "TrainResult") -> int:
        """What travels back: the update's tensors (the sub-model's only) and the objective's extras."""
        tensors = state_sub(result.state, base_state) if a.kind == "delta" else result.state
        nbytes = ctx.training.update_bytes(tensors) if result.upload_bytes is None else result.upload_bytes
        extras = a.objective.upload() if a.objective is not None else {}
        sent["tensors"], sent["extras"] = tensors, extras
        return nbytes + (state_bytes(extras) if extras else 0)

    run = yield from ctx.run_client(client, work, version=base_version, upload_bytes=upload_bytes,
                                    extra_downloads=extra_downloads, extra_uploads=extra_uploads)
    result = run.result
    return Update(
        client=client,
        tensors=sent["tensors"],
        kind=a.kind,
        mask=result.mask if a.coverage is None else a.coverage,
        weight=float(result.stats.samples),
        base_version=base_version,
        download_time=run.download_start,
        num_samples=int(len(ctx.parts[client])),
        costs={"flops": result.flops, "bytes_up": run.upload_bytes, "bytes_down": work.download_bytes},
        info={"loss": result.stats.mean_loss, "steps": result.stats.steps, "round": a.round, "assignment": a,
              **_clip_info(result.stats), **result.info, "arrived": run.upload_end, "task": trace_task},
        extras=sent["extras"],
    )


def _clip_info(stats: Any) -> dict[str, Any]:
    """The trainer's record of whether gradient clipping bound (``TrainStats.clipped_steps``,
    ``max_grad_norm``), for the ``apply`` record: empty when the trainer recorded none."""
    n = getattr(stats, "clipped_steps", None)
    if n is None:
        return {}
    return {"clipped_steps": int(n), "max_grad_norm": float(getattr(stats, "max_grad_norm", None) or 0.0)}
