"""Executors: where training work runs.

The simulator asks an executor for the result of a training task with frozen inputs (a base model
snapshot, a client's indices, a named stream's seed).  Because the inputs are frozen, the result does not
depend on when or where the work is computed: the in-process executor computes it at once, inside the
SimPy step where the client starts computing; :class:`RayExecutor` starts it in a Ray worker at that same
moment and the simulation collects it only when the update is needed (when the client's virtual compute
time has passed), so the tasks of clients computing at overlapping virtual times run in parallel, with
the same numbers.

Same numbers needs the same arithmetic: every worker runs torch with one thread, as the driver does
(``fedsim.runner`` sets ``torch.set_num_threads(1)``), so reductions are summed in the same order and a
run on Ray writes a trace byte-identical to the in-process one (``tests/test_perf_ray.py``).
"""
from __future__ import annotations

import os
import socket
from typing import Any, Callable, Generic, Hashable, Protocol, TypeVar

from fedsim.errors import ConfigError

T = TypeVar("T")


class Executor(Protocol):
    #: False: tasks finish inside ``submit`` (the caller may rely on it); True: they run elsewhere.
    remote: bool

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Any:
        """Start ``fn(*args, **kwargs)``; the returned handle's ``result()`` is the task's output."""
        ...

    def share(self, key: Hashable, value: Any) -> Any:
        """``value`` as an argument handle that is shipped to workers once (large constant inputs)."""
        ...

    def put(self, value: Any) -> Any:
        """``value`` as an argument handle for the tasks submitted next (shipped once, freed with them)."""
        ...

    def close(self) -> None:
        ...


class Done(Generic[T]):
    """The handle of a task that has already run: ``result()`` returns its output or re-raises its error
    (a ``concurrent.futures.Future`` would do, at the cost of a lock per task)."""

    __slots__ = ("_value", "_error")

    def __init__(self, value: T | None = None, error: BaseException | None = None) -> None:
        self._value, self._error = value, error

    def result(self) -> T:
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


class InProcessExecutor:
    """Runs each task immediately in the calling thread (deterministic, no copies)."""

    remote = False

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Done[T]:
        try:
            return Done(fn(*args, **kwargs))
        except BaseException as exc:  # re-raised by .result(), where the caller handles it
            return Done(error=exc)

    def share(self, key: Hashable, value: Any) -> Any:
        return value

    def put(self, value: Any) -> Any:
        return value

    def close(self) -> None:
        pass


class _RayResult:
    def __init__(self, ref: Any) -> None:
        self.ref = ref

    def result(self) -> Any:
        import ray

        return ray.get(self.ref)


def _in_worker(fn: Callable[..., T], threads: int, *args: Any, **kwargs: Any) -> T:
    import torch

    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return fn(*args, **kwargs)


#: seconds a Ray address may take to accept a connection before it counts as unreachable
RAY_CONNECT_TIMEOUT_S = 5.0


def check_ray_address(address: str, field: str, timeout: float = RAY_CONNECT_TIMEOUT_S) -> None:
    """Refuse, in one line and within ``timeout`` seconds, a Ray address ``host:port`` or ``ray://host:port``
    that accepts no connection: Ray itself retries an unreachable head for minutes.  ``auto`` (find the
    local cluster) is left to Ray, which answers at once."""
    if address == "auto":
        return
    rest = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = rest.rstrip("/").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(field, f"{address!r} is not a Ray address (allowed: 'auto', HOST:PORT or ray://HOST:PORT)")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        reason = (f"no answer within {timeout:g} s" if isinstance(exc, TimeoutError)
                  else (exc.strerror or type(exc).__name__).lower())
        raise ConfigError(field, f"cannot reach Ray at {address!r} ({reason}); start the cluster there or give "
                                 f"its head's address") from None


class RayExecutor:
    """Training tasks in Ray workers; the SimPy clock and everything else stay in the driver.

    ``address`` None starts a local Ray with ``workers`` CPUs (default: the machine's cores); ``"auto"``
    or ``"ray://head:10001"`` joins an existing cluster, whose nodes need fedsim and its dependencies
    installed (``pip install fedsim[ray]``).  Workers run torch with ``threads`` threads (the driver's
    count, so results are bit-identical).  Large constant inputs (the training data) go to the object
    store once (:meth:`share`).
    """

    remote = True

    def __init__(self, workers: int | None = None, address: str | None = None, *, threads: int = 1,
                 field: str = "train.ray_address") -> None:
        try:
            import ray
        except ImportError as exc:  # pragma: no cover - depends on the installation
            raise ConfigError("train.executor", "'ray' needs Ray installed (pip install 'fedsim[ray]')") from exc
        self._started = False
        if not ray.is_initialized():
            here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            env = {"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)}}
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR"}
            if address is None:
                kwargs.update(num_cpus=workers or os.cpu_count() or 1, runtime_env=env)
            else:
                check_ray_address(address, field)
            ray.init(address=address, **kwargs)
            self._started = True
        self.threads = int(threads)
        self._task = ray.remote(num_cpus=1)(_in_worker)
        self._shared: dict[Hashable, Any] = {}

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> _RayResult:
        return _RayResult(self._task.remote(fn, self.threads, *args, **kwargs))

    def share(self, key: Hashable, value: Any) -> Any:
        import ray

        ref = self._shared.get(key)
        if ref is None:
            ref = self._shared[key] = ray.put(value)
        return ref

    def put(self, value: Any) -> Any:
        import ray

        return ray.put(value)

    def close(self) -> None:
        import ray

        self._shared.clear()
        if self._started and ray.is_initialized():
            ray.shutdown()
        self._started = False


def make_executor(kind: str, workers: int | None = None, address: str | None = None) -> Executor:
    """The executor of ``train.executor``."""
    if kind == "inprocess":
        return InProcessExecutor()
    if kind == "ray":
        import torch

        return RayExecutor(workers, address, threads=torch.get_num_threads())
    raise ConfigError("train.executor", f"unknown executor {kind!r} (allowed: inprocess, ray)")


#: Most local worker processes a command may ask for (``--jobs``).
MAX_JOBS = 1024


def check_jobs_count(jobs: Any, option: str = "--jobs") -> None:
    """Refuse a number of local worker processes that is not a whole number in [1, :data:`MAX_JOBS`]."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or not 1 <= jobs <= MAX_JOBS:
        raise ConfigError(option, f"got {jobs!r} (allowed: an integer in [1, {MAX_JOBS}] processes)")


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the platform tells it): what fedsim's
    parallel commands size themselves by."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _started() -> None:
    """A local pool worker's first task: done once a worker process has started (run its initializer)."""


def _exit_with_parent() -> None:
    """End this worker when the process that started it ends, however it ends: a pool worker holds both
    ends of its task queue, so it never reads an end of file, and would wait for work forever."""
    import multiprocessing
    import os
    import threading
    from multiprocessing.connection import wait

    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="fedsim-parent-watch", daemon=True).start()


def _group_signals() -> list[int]:
    """The signals a local pool worker never acts on: the terminal's Ctrl-C and a hang-up reach every
    process of the group, and the parent decides what stops (a worker still importing torch would print a
    traceback).  The same pattern as the standard library's resource tracker."""
    import signal

    return [signal.SIGINT] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])


def _worker_start(work: bytes) -> None:
    """A local pool worker's first code: ignore the group's signals, then let them through (they were blocked
    from the worker's first instruction, inherited from :func:`spawn_pool`; one that came while the
    interpreter imported is discarded, not raised), then watch the parent, and only then unpickle and run
    the pool's initializer (``work``: it and its arguments, pickled in the parent), whose module may import
    torch for seconds: a parent killed meanwhile still takes the worker with it."""
    import pickle
    import signal

    group = _group_signals()
    for signum in group:
        signal.signal(signum, signal.SIG_IGN)  # before unblocking: a pending one is discarded
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, group)
    _exit_with_parent()
    initializer, initargs = pickle.loads(work)
    if initializer is not None:
        initializer(*initargs)


def spawn_pool(workers: int, initializer: Callable[..., None] | None = None, initargs: tuple[Any, ...] = ()
               ) -> tuple[Any, list[Any]]:
    """A pool of ``workers`` fresh interpreters for fedsim's parallel commands (``fedsim sweep --jobs``,
    ``fedsim check --jobs``, the second process of ``fedsim run``), started now; returns it and one future
    per worker, each done once a worker has started.

    Spawned, not forked: no copy of the parent's torch state.  Ctrl-C and SIGHUP (the terminal's Ctrl-C
    and a hang-up reach every process of the group; the parent decides what stops) never act in a worker:
    they are blocked while it is spawned, so it starts with them blocked from its first instruction (a
    process inherits its parent's signal mask through fork and exec) and imports with them blocked, and its
    first code ignores them and lets them through (:func:`_worker_start`).  The parent only blocks them
    meanwhile, never ignores them: a Ctrl-C meant for it during the spawn stays pending and is raised once
    the spawn is done, not lost.  Each worker ends when the parent ends, even a killed parent."""
    import multiprocessing
    import pickle
    import signal
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_worker_start, initargs=(pickle.dumps((initializer, initargs)),))
    group = _group_signals()
    try:
        if hasattr(signal, "pthread_sigmask"):
            previous = signal.pthread_sigmask(signal.SIG_BLOCK, group)  # this thread's mask: any thread may spawn
            try:
                started = [pool.submit(_started) for _ in range(workers)]  # each submit starts one process
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, previous)  # a Ctrl-C that came meanwhile: raised now
        else:  # no signal masks (Windows): the workers inherit nothing; they ignore Ctrl-C once they start
            started = [pool.submit(_started) for _ in range(workers)]
    except BaseException:  # interrupted while starting: no worker is left behind
        for proc in list((getattr(pool, "_processes", None) or {}).values()):
            proc.kill()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    return pool, started
