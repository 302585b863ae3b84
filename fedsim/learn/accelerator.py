"""Where training runs (``train.device``) and how deterministic it is (``train.deterministic``).

The simulated clients' time never depends on this: virtual time is a function of the device profiles,
FLOP counts and bytes only; the host device just computes the weights faster or slower.

Placement, decided once for the whole run:

- the dataset (train and test tensors) is moved to the device once, at set-up (:func:`data_on`);
- the worker model lives there, so the global state, client states and aggregates made from it do too;
- random draws stay on the CPU: every ``torch.Generator`` of a named stream is a CPU generator, so model
  initialisation, batch order and augmentation draws are the same numbers on every device; their index
  tensors are moved to the device where they meet data;
- what leaves the run (checkpoints, ``final_model.pt``) is saved as CPU tensors (:func:`cpu_state`), so
  it loads on any machine.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping

import torch

from fedsim.errors import ConfigError
from fedsim.scenario import DEVICE_CHOICES, DEVICE_PATTERN

#: cuBLAS needs a fixed workspace to be deterministic (CUDA >= 10.2); torch refuses some ops without it.
CUBLAS_WORKSPACE = ":4096:8"

__all__ = ["DEVICE_CHOICES", "resolve_device", "run_device", "data_on", "cpu_state", "set_deterministic",
           "deterministic_workspace", "memory_available"]


def _here() -> str:
    """The ``train.device`` values this machine can run."""
    names = ["auto", "cpu"]
    if torch.cuda.is_available():
        names += ["cuda"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if _mps_available():
        names.append("mps")
    return ", ".join(names)


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def resolve_device(spec: str, field: str = "train.device") -> torch.device:
    """The torch device for ``spec``; ``auto`` is CUDA if there is one, else MPS, else the CPU.  ``cuda``
    names the current CUDA device by its index (``cuda:0``), as tensors moved there report it, so a
    device check never mistakes data already there for data elsewhere.

    Refuses (one line naming ``field``, the value and what is allowed) a malformed name and an accelerator
    this machine does not have, so a run that asked for a GPU never silently trains on the CPU."""
    if not isinstance(spec, str) or not DEVICE_PATTERN.match(spec):
        raise ConfigError(field, f"got {spec!r} (allowed: {DEVICE_CHOICES})")
    if spec == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        if _mps_available():
            return torch.device("mps", 0)
        return torch.device("cpu")
    if spec.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(field, f"got {spec!r} but no CUDA device is available (allowed: {_here()})")
        index = int(spec.split(":")[1]) if ":" in spec else None
        count = torch.cuda.device_count()
        if index is not None and index >= count:
            raise ConfigError(field, f"got {spec!r} but this machine has {count} CUDA device(s) "
                                     f"(allowed: {_here()})")
        return torch.device("cuda", torch.cuda.current_device() if index is None else index)
    if spec == "mps" and not _mps_available():
        raise ConfigError(field, f"got {spec!r} but no MPS device is available (allowed: {_here()})")
    return torch.device("mps", 0) if spec == "mps" else torch.device(spec)


def _on(t: torch.Tensor, device: torch.device) -> bool:
    """Whether ``t`` is on ``device`` (an index-less device name matches any index of its type)."""
    return t.device.type == device.type and (device.index is None or t.device.index == device.index)


def _dataset_on(ds: Any, device: torch.device) -> Any:
    if _on(ds.x, device) and _on(ds.y, device):
        return ds
    return dataclasses.replace(ds, x=ds.x.to(device), y=ds.y.to(device))


def data_on(data: Any, device: torch.device) -> Any:
    """``data`` (a :class:`~fedsim.learn.data.FederatedData`) with its train and test tensors on ``device``:
    the same object when they are already there (every CPU run), else a copy whose tensors were moved once."""
    train, test = _dataset_on(data.train, device), _dataset_on(data.test, device)
    if train is data.train and test is data.test:
        return data
    return dataclasses.replace(data, train=train, test=test)


def cpu_state(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A state dict as CPU tensors (what checkpoints store, so they load without the run's accelerator);
    on a CPU run the tensors themselves, not copies."""
    return {k: v.detach().cpu() if isinstance(v, torch.Tensor) else v for k, v in state.items()}


def set_deterministic(on: bool, device: torch.device) -> bool:
    """Switch torch's deterministic algorithms on or off; returns the previous setting (to restore it).

    On CUDA this also sets ``CUBLAS_WORKSPACE_CONFIG`` (when unset) before cuBLAS starts, which
    deterministic matrix products need."""
    previous = torch.are_deterministic_algorithms_enabled()
    if on:
        deterministic_workspace(device)
    torch.use_deterministic_algorithms(bool(on))
    return previous


def deterministic_workspace(device: torch.device) -> None:
    """Set ``CUBLAS_WORKSPACE_CONFIG`` for a CUDA device unless the user set it (it must be in place before
    the process's first cuBLAS call; on other devices nothing)."""
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)


def memory_available(device: torch.device) -> tuple[float, str] | None:
    """(bytes free, how that was measured) on the host ``device``, or None where it cannot be known.

    CUDA: ``torch.cuda.mem_get_info`` (free device memory now); MPS: the recommended working-set size;
    CPU: the memory the operating system reports available (Linux ``/proc/meminfo``)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return float(free), f"free on {device}"
    if device.type == "mps":
        mps = getattr(torch, "mps", None)
        rec = getattr(mps, "recommended_max_memory", None)
        return (float(rec()), "MPS working set") if rec is not None else None
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024.0, "available host memory"
    except OSError:
        return None
    return None


def run_device(train: Any) -> torch.device:
    """The device a run trains on, from its ``train`` section: :func:`resolve_device`, except that a run
    that trains nothing here (``systems_only``) or on remote workers (``executor: ray``, whose workers
    train on their CPUs) resolves ``auto`` to the CPU and refuses an accelerator named explicitly for Ray."""
    if train.executor == "ray" and train.device not in ("auto", "cpu"):
        raise ConfigError("train.device", f"got {train.device!r} but executor 'ray' trains on the workers' CPUs "
                                          "(allowed with train.executor: ray: auto, cpu)")
    if train.device == "auto" and (train.systems_only or train.executor == "ray"):
        return torch.device("cpu")
    return resolve_device(train.device)
