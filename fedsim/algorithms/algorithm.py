"""The ``Algorithm`` base every loop shape and algorithm extends: its config, its decisions, the class hooks
the framework calls before a run, and the helpers every loop uses (dispatch, the guarded client process,
client sampling, the per-client task counter).  The loops themselves live in :mod:`fedsim.algorithms.loops`."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar, Generator, Literal

import numpy as np
import simpy

from fedsim.algorithms.decisions import check_assignment
from fedsim.algorithms.pipeline import client_task
from fedsim.algorithms.server_opt import ServerStep
from fedsim.learn.state import State
from fedsim.messages import Assignment, Update, Work
from fedsim.system.availability import AlwaysOn

if TYPE_CHECKING:  # pragma: no cover
    from fedsim.context import Context

__all__ = ["Algorithm", "CLASS_HOOKS", "TaskCounter", "build_algorithm", "guarded", "uncalled_hooks",
           "unread_config_fields"]


#: the hooks the framework calls on the class, with the validated ``Config``, before the algorithm exists (the
#: run's up-front estimate and its checks): an override must stay a ``@classmethod``
CLASS_HOOKS = ("work", "fits_devices", "buffer_size_of")

#: the hooks every shape calls (``setup`` once through :func:`build_algorithm`, the class hooks for the estimate)
COMMON_HOOKS = frozenset({"setup", "work", "fits_devices"})
#: the hooks the shapes that exchange model updates add (the split shapes run sessions instead)
UPDATE_HOOKS = frozenset({"assign", "client_job", "before_apply", "task_done"})


class Algorithm:
    """Base class: an algorithm is a SimPy process over a Context, with a validated Config.

    Every hook is an instance method (``self.cfg`` is the validated ``Config``, ``self.ctx`` the run), except
    the ones in :data:`CLASS_HOOKS` (``work``, ``fits_devices``, ``buffer_size_of``): the runner calls those on
    the class with the ``Config`` before the algorithm is built, so they are ``@classmethod`` s here and must
    stay so in a subclass (defining one as a plain method is refused when the class is created)."""

    name = "base"
    #: True for algorithms that fit a sub-model to each client's device themselves (``TrainingExecutor.fit_submodel``):
    #: the runner then skips its check that the whole model fits every device.
    fits_submodels: bool = False
    #: names the algorithm's random streams (the slot schedulers' and split rounds' client selection): a
    #: subclass inherits its parent's, so a variant that changes only a rule draws the same clients as the
    #: built-in it extends; the first named class of a line sets it to its own ``name``.  Set it to a new
    #: string to draw streams of your own.
    family: str = ""
    #: The theory this algorithm is checked against: ids of the theorem modules ``fedsim check`` evaluates
    #: (``local_sgd``, ``fedasync``, ``fedbuff``, ``cos2p``, ``fedraa``, ``gas``, ``semisfl``, ``embracingfl``; see
    #: docs/extending.md).  The runner writes it into ``summary.json`` so the check reads it from the run
    #: folder; a name never decides.  Empty: no theorem, only the trace and measured-quantity rows.
    theorems: tuple[str, ...] = ()
    #: the documented hooks this loop shape calls (each shape lists its own): a user class that defines a hook
    #: of another shape which its own never calls is refused when it is loaded (:func:`uncalled_hooks`)
    hooks: ClassVar[frozenset[str]] = COMMON_HOOKS | {"eligible"}

    @dataclass
    class Config:
        pass

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "hooks" in cls.__dict__ and cls.__module__.startswith("fedsim.algorithms.loops."):
            _SHAPES[cls.__qualname__] = cls  # a loop shape lists its hooks; shapes register (a reload replaces)
        if not cls.family and "name" in cls.__dict__ and "family" not in cls.__dict__:
            cls.family = cls.name  # the first named class of a line names the streams its subclasses inherit
        for hook in CLASS_HOOKS:
            if hook in cls.__dict__ and not isinstance(cls.__dict__[hook], classmethod):
                raise TypeError(f"{cls.__module__}:{cls.__qualname__}.{hook} must be a @classmethod: the framework "
                                f"calls it on the class with the Config before the algorithm exists "
                                f"(write `@classmethod` and `def {hook}(cls, config)`)")

    @classmethod
    def fits_devices(cls, config: Any) -> bool:
        """Whether this algorithm, so configured, keeps every client within its device's memory itself (the
        runner then skips its whole-model check): sub-model algorithms, or FedAvg sampling only the devices
        that fit (``only_fitting``)."""
        return cls.fits_submodels

    @classmethod
    def work(cls, config: Any) -> Work:
        """What this algorithm, so configured, asks of a run (:class:`Work`): the runner's up-front estimate
        asks here and never guesses from config field names.  The loop shapes declare theirs; an algorithm
        with other knobs (a server phase of its own: ``server_steps``) overrides this."""
        return Work()

    def __init__(self, ctx: "Context", config: Any) -> None:
        self.ctx = ctx
        self.cfg = config
        #: the server step the loop shapes apply to every rule's output (``server_lr`` / ``server_opt``, when
        #: the ``Config`` declares ``server_opt``; :class:`fedsim.algorithms.server_opt.ServerStep`)
        self.server_step_of: ServerStep | None = ServerStep.of(config)

    def setup(self) -> None:
        """Once, after the algorithm is built and before the simulation starts, on every shape
        (:func:`build_algorithm` calls it): the place to derive state from ``self.cfg`` and ``self.ctx`` and
        to refuse a setting that cannot work with a ``ConfigError`` (reported before any virtual time passes).
        An override calls ``super().setup()`` first.  Default: nothing."""

    def _prepared(self) -> None:
        """The shape's own checks once every ``setup`` override has run (:func:`build_algorithm` calls it):
        what a shape derives from a user's declarations is fixed here, before the simulation starts."""

    def server_update(self, base: State, aggregate: State) -> State:
        """The model installed after a server rule returned ``aggregate`` from ``base`` (the model its updates
        started from): the configured server step applied to it, or the aggregate itself.  The loop shapes
        call this; a rule never applies ``server_lr`` or ``server_opt`` itself."""
        return aggregate if self.server_step_of is None else self.server_step_of(base, aggregate)

    def run(self) -> Generator[simpy.events.Event, Any, None]:  # pragma: no cover - abstract
        raise NotImplementedError

    # helpers shared by the families ------------------------------------------------------------
    def assign(self, client: int, round_: int | None = None) -> Assignment:
        """What ``client`` trains in this task: the whole model by default.  Sub-model algorithms override
        this one method (a template method: HeteroFL's fixed width, FedRolex's rolling window, ...)."""
        return Assignment(round=round_)

    def dispatch(self, client: int, tasks: "TaskCounter", *, kind: Literal["weights", "delta"] = "weights",
                 round_: int | None = None, assignment: Assignment | None = None,
                 base: State | None = None) -> simpy.Process:
        """Send the current global model (or ``base``, a model of the current version the server keeps
        apart from its global one) to ``client``, record the ``dispatch`` and start its task
        (:meth:`client_job`).

        ``assignment`` defaults to :meth:`assign`; ``kind`` sets its update kind.  The process's value is
        the ``Update``, or None if the task was dropped."""
        ctx = self.ctx
        a = assignment if assignment is not None else check_assignment(self, "assign", self.assign(client, round_))
        a.kind = kind if assignment is None else a.kind
        if a.round is None:
            a.round = round_
        base, version = (ctx.global_state if base is None else base), ctx.version
        ctx.versions.record_dispatch(client, version, round_, submodel=a.submodel)
        k = tasks.next(client)
        ctx.training.note_dispatch(client, k, base, a)
        return self.launch(client, self.client_job(client, base, version, k, a), round_)

    def client_job(self, client: int, base: State, version: int, task: int,
                   assignment: Assignment) -> Generator[simpy.events.Event, Any, Update]:
        """One participation in virtual time: :func:`client_task` (download, train, upload) of ``assignment``
        on ``base``.  Override only when a participation moves more than the model and its declared extras
        (FedSwitch's teacher, FedMatch's helpers) or decides its sub-model on the device after the download
        (Co-S²P's mask phase); the dispatch, the drop and the records stay the framework's."""
        # the pipeline's generator itself, not wrapped in another: one frame less on every event of every task
        return client_task(self.ctx, client, base, version, task=task, assignment=assignment)

    def task_done(self, client: int, update: Update | None) -> None:
        """A client's task ended: its upload arrived (``update``) or it was dropped (None).  The loop shapes
        call this before the server sees the update, for an algorithm's count of work in flight (Fed-RAA's
        fragments being trained); no records, no time.  Default: nothing."""

    def before_apply(self, updates: list[Update], weights: list[float], round_: int | None) -> None:
        """Called by the loop shapes after :meth:`server_rule` and just before its result is installed
        (``VersionKeeper.apply``): the place for an algorithm's own measurements (``ctx.measure``, e.g. Fed-RAA's
        ``fragment``, Co-S²P's ``cos2p_round``) and its counters of applied updates (Fed-RAA's q(j)).  The
        framework's records are not written here.  Default: nothing."""

    def launch(self, client: int, body: Generator[simpy.events.Event, Any, Update], round_: int | None = None) -> simpy.Process:
        """Start a client process whose interruption (deadline, going offline) is recorded as a drop."""
        proc = self.ctx.env.process(guarded(self.ctx, client, body, round_))
        self.ctx.world.watch(client, proc)
        return proc

    def eligible(self, client: int) -> bool:
        """Whether ``client`` may be selected at all (every client by default; e.g. FedAvg restricted to the
        devices that fit the full model overrides this)."""
        return True

    def everyone_eligible(self) -> bool:
        """Whether :meth:`eligible` is true for every client (lets sampling skip listing them)."""
        return type(self).eligible is Algorithm.eligible

    def sample_clients(self, k: int, stream: tuple, exclude: set[int] | None = None) -> list[int]:
        """``k`` distinct clients (uniform, without replacement) among the eligible ones, excluding busy ones.

        When every client is eligible and always online (the common case, and every systems-only study of
        10^5+ devices), the draw is made on positions among the non-excluded clients without listing them
        all: the same positions ``rng.choice`` picks from the listed pool, so the same clients, in
        O(k · |exclude|) instead of O(number of clients) per call.
        """
        ctx = self.ctx
        if self.everyone_eligible() and isinstance(ctx.world.availability, AlwaysOn):
            skip = sorted(exclude) if exclude else []
            size = ctx.num_clients - len(skip)
            if size <= 0:
                return []
            rng = ctx.streams.numpy(*stream)
            picks = rng.choice(size, size=min(k, size), replace=False)
            return sorted(_nth_not_excluded(int(i), skip) for i in picks)
        pool = np.array([c for c in range(ctx.num_clients) if (not exclude or c not in exclude) and self.eligible(c)],
                        dtype=np.int64)
        pool = pool[[ctx.world.is_available(int(c)) for c in pool]] if len(pool) else pool
        if len(pool) == 0:
            return []
        rng = ctx.streams.numpy(*stream)
        k = min(k, len(pool))
        return sorted(int(c) for c in rng.choice(pool, size=k, replace=False))


def build_algorithm(cls: "type[Algorithm]", ctx: "Context", config: Any) -> "Algorithm":
    """The algorithm of a run: ``cls(ctx, config)``, then its :meth:`Algorithm.setup`, once, whatever its shape.

    The one place an algorithm and its loop shape are put together (the run and its pre-flight both build
    through here), so no shape can skip a documented hook."""
    algo = cls(ctx, config)
    algo.setup()
    algo._prepared()
    return algo


#: the loop shapes (``fedsim.algorithms.loops``), registered as they are defined: a class that extends one has
#: loaded the package, so every shape is here when :func:`uncalled_hooks` asks
_SHAPES: "dict[str, type[Algorithm]]" = {}


#: the order the shapes are named in messages (the user guide's order); a shape not listed comes last
_SHAPE_ORDER = ("SyncRounds", "AsyncSlots", "SemiAsyncRounds", "SplitRounds", "SplitSlots")


def _shapes() -> "list[type[Algorithm]]":
    rank = {n: i for i, n in enumerate(_SHAPE_ORDER)}
    return sorted(_SHAPES.values(), key=lambda s: rank.get(s.__name__, len(rank)))


def _is_fedsim(klass: type) -> bool:
    return klass.__module__ == "fedsim" or klass.__module__.startswith("fedsim.")


def uncalled_hooks(cls: "type[Algorithm]") -> str | None:
    """Why ``cls`` cannot run as written, or None: a documented hook it defines that its loop shape never calls
    (``quorum`` on ``SyncRounds``, ``client_forward`` on ``AsyncSlots``, ``eligible`` on ``SemiAsyncRounds``).

    Such a method would be silently ignored, so a user class is refused when it is loaded, naming the hook,
    the shapes that call it and the one it runs on.  A class that writes its own ``run`` calls what it likes;
    a hook that a built-in algorithm between the shape and the class defines is that built-in's to call."""
    shapes = _shapes()
    shape = next((c for c in cls.__mro__ if c in shapes), None)
    if shape is None or "run" in {n for k in cls.__mro__ if not _is_fedsim(k) for n in vars(k)}:
        return None
    known = set().union(*(s.hooks for s in shapes))
    builtin_between = [k for k in cls.__mro__ if _is_fedsim(k) and k is not shape and issubclass(k, shape)]
    for klass in cls.__mro__:
        if _is_fedsim(klass):
            continue
        for name in sorted(vars(klass)):
            if name not in known or name in shape.hooks or any(name in vars(k) for k in builtin_between):
                continue
            callers = ", ".join(s.__name__ for s in shapes if name in s.hooks)
            return (f"{cls.__module__}:{cls.__qualname__} defines {name}(), which only {callers} call(s); it runs "
                    f"on {shape.__name__}, which never calls it (subclass a shape that does, or remove or rename "
                    f"{name})")
    return None


def _config_reads(func: Any) -> frozenset[str]:
    """The config fields a method reads: ``self.cfg.X``, ``cfg.X`` after ``cfg = self.cfg``, and ``config.X`` in
    a class hook (its second parameter)."""
    code = getattr(func, "__code__", None)
    if code is None:
        return frozenset()
    return _reads_of_code(code, func)


@lru_cache(maxsize=None)
def _reads_of_code(code: Any, func: Any) -> frozenset[str]:
    import ast
    import inspect
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    except (OSError, TypeError, SyntaxError):  # no source (a compiled or generated method): nothing to say
        return frozenset()
    fn = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if fn is None:
        return frozenset()
    names = {"cfg"} if "self.cfg" in ast.unparse(fn) else set()
    params = [a.arg for a in fn.args.args]
    if fn.name in CLASS_HOOKS and len(params) > 1:
        names.add(params[1])
    out = set()
    for node in ast.walk(fn):
        if not isinstance(node, ast.Attribute) or not isinstance(node.ctx, ast.Load):
            continue
        v = node.value
        if isinstance(v, ast.Attribute) and v.attr == "cfg" and isinstance(v.value, ast.Name) and v.value.id == "self":
            out.add(node.attr)
        elif isinstance(v, ast.Name) and v.id in names:
            out.add(node.attr)
    return frozenset(out)


def unread_config_fields(cls: "type[Algorithm]") -> str | None:
    """Why ``cls`` cannot run as written, or None: a method it keeps (its own or inherited) reads a config field
    its ``Config`` does not declare.

    A subclass may replace an inherited ``Config`` with its own (so ``fedsim show`` and the reference list only
    the settings its code reads); this says at load, in one line, which inherited method still reads a field
    it left out, instead of an AttributeError in the middle of a run."""
    import dataclasses

    config = cls.Config
    have = {f.name for f in dataclasses.fields(config)} if dataclasses.is_dataclass(config) else set()
    for name in sorted(dir(cls)):
        owner = next((k for k in cls.__mro__ if name in vars(k)), None)
        if owner is None or owner is object:
            continue
        raw = vars(owner)[name]
        func = raw.__func__ if isinstance(raw, (classmethod, staticmethod)) else raw
        if not callable(func) or isinstance(func, type):
            continue
        for field_name in sorted(_config_reads(func)):
            if field_name in have or hasattr(config, field_name):
                continue
            return (f"{cls.__module__}:{cls.__qualname__}.Config has no field {field_name!r}, which "
                    f"{owner.__qualname__}.{name} reads (declare it in your Config, or override {name})")
    return None


def _nth_not_excluded(i: int, skip: list[int]) -> int:
    """The ``i``-th (from 0) of 0, 1, 2, ... once the sorted values ``skip`` are left out."""
    c = i
    for e in skip:
        if e <= c:
            c += 1
        else:
            break
    return c


def guarded(
    ctx: "Context", client: int, body: Generator[simpy.events.Event, Any, Update], round_: int | None = None
) -> Generator[simpy.events.Event, Any, Update | None]:
    """Run a client process; an interrupt (deadline passed, client went offline) becomes a recorded drop."""
    try:
        return (yield from body)
    except simpy.Interrupt as intr:
        ctx.versions.record_drop(client, str(intr.cause), round_)
        return None


class TaskCounter:
    """Per-client participation counter: task k of client c trains with stream ("client", c, "task", k)."""

    def __init__(self, num_clients: int) -> None:
        self._n = np.zeros(num_clients, dtype=np.int64)

    def next(self, client: int) -> int:
        k = int(self._n[client])
        self._n[client] += 1
        return k

