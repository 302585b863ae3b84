"""Checks on every decision an algorithm's method returns to a loop shape: the clients it selects, the weights and
state its rule returns, the assignment it gives, its quorum, clock, staleness limit and batch sizes.

A shape never acts on a decision it has not checked: duplicates in a selection would dispatch one client twice
and apply its update twice, a weight list of the wrong length would be cut short by ``zip``, an out-of-range id
would fail deep inside the world.  A bad value in the user's method is one line naming the method and the value
(:class:`fedsim.errors.UserDecisionError`, exit 4); in a built-in's method it is fedsim's own bug (exit 3).
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

from fedsim.errors import UserDecisionError

#: the algorithm whose decision is checked (a ``fedsim.algorithms.algorithm.Algorithm``; typed ``Any`` so this
#: module stays below ``algorithm`` in the import graph, which imports it)
AlgorithmLike = Any

__all__ = ["check_assignment", "check_batch_sizes", "check_clients", "check_clock", "check_quorum", "check_rule",
           "check_staleness_limit"]


def _shown(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}…"


def _refuse(algo: AlgorithmLike, method: str, value: Any, why: str) -> Exception:
    """The error for a bad ``value`` returned by ``algo.method``: the user's (exit 4) when the method is defined
    in the user's class, else an internal error (a built-in returned it)."""
    owner = next((k for k in type(algo).__mro__ if method in vars(k)), type(algo))
    where = f"{owner.__module__}:{owner.__qualname__}.{method}"
    text = f"{where} returned {_shown(value)}: {why}"
    if owner.__module__ == "fedsim" or owner.__module__.startswith("fedsim."):
        return RuntimeError(text)
    return UserDecisionError(text)


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def check_clients(algo: AlgorithmLike, method: str, value: Any, k: int | None) -> list[int]:
    """A selection: a list of distinct client ids in ``0..num_clients-1``, at most ``k`` of them (the round size
    the algorithm declared; None: no limit).  Returns it as plain ints."""
    n = algo.ctx.num_clients
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__iter__"):
        raise _refuse(algo, method, value, f"expected a list of client ids in 0..{n - 1}")
    ids = list(value)
    for c in ids:
        if not _is_int(c):
            raise _refuse(algo, method, value, f"{_shown(c)} is {type(c).__name__}, not a client id (an int in "
                          f"0..{n - 1})")
        if not 0 <= int(c) < n:
            raise _refuse(algo, method, value, f"client {int(c)} is out of range (the run has {n} clients: "
                          f"0..{n - 1})")
    seen: set[int] = set()
    for c in ids:
        if int(c) in seen:
            raise _refuse(algo, method, value, f"client {int(c)} appears more than once (a selection names "
                          "distinct clients)")
        seen.add(int(c))
    if k is not None and len(ids) > k:
        raise _refuse(algo, method, value, f"{len(ids)} clients, more than the {k} a round takes (the round size "
                      "the algorithm declares in work())")
    return [int(c) for c in ids]


def check_rule(algo: AlgorithmLike, method: str, value: Any, updates: int) -> tuple[Any, list[float]]:
    """A server rule's result: ``(state, weights)``, the state a mapping of tensors with the model's names and
    the weights one finite, non-negative number per update."""
    if not (isinstance(value, tuple) and len(value) == 2):
        raise _refuse(algo, method, value, "expected a pair (new_state, weights)")
    state, weights = value
    if not isinstance(state, Mapping):
        raise _refuse(algo, method, state, f"the new state is {type(state).__name__}, not a mapping of tensors "
                      "(a state dict)")
    names = set(algo.ctx.global_state)
    if set(state) != names:
        missing, extra = sorted(names - set(state)), sorted(set(state) - names)
        raise _refuse(algo, method, sorted(state), f"the new state's names differ from the model's (missing "
                      f"{missing[:4]}, unknown {extra[:4]})")
    if isinstance(weights, (str, bytes, Mapping)) or not hasattr(weights, "__len__"):
        raise _refuse(algo, method, weights, f"the weights are {type(weights).__name__}, not a list of "
                      f"{updates} numbers (one per update)")
    listed = list(weights)
    if len(listed) != updates:
        raise _refuse(algo, method, weights, f"{len(listed)} weights for {updates} updates (one per update)")
    out = []
    for w in listed:
        if not isinstance(w, numbers.Real) or isinstance(w, bool):
            try:
                w = float(w)  # a 0-d tensor or array
            except (TypeError, ValueError):
                raise _refuse(algo, method, weights, f"weight {_shown(w)} is not a number") from None
        if not math.isfinite(float(w)) or float(w) < 0:
            raise _refuse(algo, method, weights, f"weight {float(w)!r} is not a finite number >= 0")
        out.append(float(w))
    return state, out


def check_assignment(algo: AlgorithmLike, method: str, value: Any) -> Any:
    """An assignment: a :class:`fedsim.messages.Assignment`."""
    from fedsim.messages import Assignment

    if not isinstance(value, Assignment):
        raise _refuse(algo, method, value, f"{type(value).__name__}, not a fedsim.algorithms.Assignment")
    return value


def check_quorum(algo: AlgorithmLike, method: str, value: Any) -> int:
    """A quorum: an int in ``1..num_clients`` (a round waits for that many arrivals)."""
    n = algo.ctx.num_clients
    if not _is_int(value) or not 1 <= int(value) <= n:
        raise _refuse(algo, method, value, f"expected an int in 1..{n} (the arrivals a round waits for; the run "
                      f"has {n} clients)")
    return int(value)


def check_clock(algo: AlgorithmLike, method: str, value: Any) -> float | None:
    """A clock: None (close at the quorum) or finite seconds >= 0."""
    if value is None:
        return None
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise _refuse(algo, method, value, "expected None or finite seconds >= 0")
    return float(value)


def check_staleness_limit(algo: AlgorithmLike, method: str, value: Any) -> int | None:
    """A staleness limit: None (none dropped) or an int >= 0 (versions)."""
    if value is None:
        return None
    if not _is_int(value) or int(value) < 0:
        raise _refuse(algo, method, value, "expected None or an int >= 0 (versions)")
    return int(value)


def check_batch_sizes(algo: AlgorithmLike, method: str, value: Any, clients: int) -> list[int]:
    """Each client's minibatch size: ``clients`` ints >= 1."""
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__iter__"):
        raise _refuse(algo, method, value, f"expected a list of {clients} batch sizes (ints >= 1)")
    sizes = list(value)
    if len(sizes) != clients or any(not _is_int(b) or int(b) < 1 for b in sizes):
        raise _refuse(algo, method, value, f"expected {clients} batch sizes, one per client, each an int >= 1")
    return [int(b) for b in sizes]
