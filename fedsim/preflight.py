"""Every check that can fail, run before anything is written: data, partition, model, device and server
profiles, memory, ``train.device``, and the work estimate (SGD steps, events and slots the stop rules
allow, refused past the ``LARGE_*`` limits unless ``--allow-large``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import simpy
import torch

from fedsim.algorithms.algorithm import build_algorithm
from fedsim.build import Prepared, build_global_model, prepare_data
from fedsim.errors import ConfigError
from fedsim.learn.accelerator import data_on, deterministic_workspace, memory_available, run_device
from fedsim.learn.costs import memory_estimate
from fedsim.learn.sgd import num_steps
from fedsim.context import Context
from fedsim.scenario import AlgorithmSpec, Scenario
from fedsim.sim.rng import Streams
from fedsim.system.devices import check_memory
from fedsim.system.world import World
from fedsim.training import sgd_config
from fedsim.messages import Work


def check_memory_fits(world: World, model: torch.nn.Module, scenario: Scenario, input_shape: tuple[int, ...]) -> None:
    """Refuse a model that does not fit a device of the mix (names the device, the need and the budget)."""
    if not scenario.devices.check_memory:
        return
    need = memory_estimate(model, input_shape, scenario.train.batch_size, momentum=scenario.train.momentum > 0).total
    for prof in world.profiles.values():
        check_memory(prof, need, f"training model '{scenario.model.name}' (batch {scenario.train.batch_size})")


#: Work beyond these needs ``allow_large`` (``--allow-large``): real SGD steps, simulated events, slots.
LARGE_SGD_STEPS = 10**8
LARGE_EVENTS = 10**7
LARGE_SLOTS = 10**5
#: Evaluations a run may do before ``eval.every_s`` is refused as dominating the run.
MAX_EVALUATIONS = 10**5


def count_text(n: float) -> str:
    """A count in an error line, every digit shown (``12,502,499``, never ``1e+07`` beside a limit of
    ``1e+07``); ``unbounded`` when no stop rule bounds it."""
    return f"{n:,.0f}" if math.isfinite(n) else "unbounded"


@dataclass
class Estimate:
    """What a run will cost, known before it starts (upper bounds where the stop rules allow)."""

    steps_per_task: int
    tasks: float
    sgd_steps: float
    events: float
    slots: int
    fastest_task_s: float
    bound: str = "stop"
    server_steps: int = 0  # the server's own SGD steps per model version


def _fastest_task_s(scenario: Scenario, world: World, model: torch.nn.Module, prepared: Prepared, steps: list[int]) -> float:
    """Jitter-free lower estimate of one task: download + compute + upload of the fastest client (the
    world's own expected times, as a scheduler that knows each client's speed would estimate them)."""
    from fedsim.learn.costs import flops_per_sample, state_bytes
    from fedsim.learn.sgd import samples_processed

    cost = flops_per_sample(model, tuple(prepared.data.train.input_shape)).total
    nbytes = state_bytes(model.state_dict())
    best = math.inf
    for c, idx in enumerate(prepared.parts):
        samples = samples_processed(len(idx), steps[c], scenario.train.batch_size)
        comp = world.expected_compute_seconds(c, cost * samples, samples=samples)
        best = min(best, comp + world.expected_transfer_seconds(c, nbytes, nbytes))
    return float(best)


#: Trace records one task writes at most: dispatch, download, compute, upload, apply, and one of the
#: algorithm's own (a drop, Fed-RAA's ``assign``).  Measured: 5 for FedAvg and FedBuff, 6 for Fed-RAA.
RECORDS_PER_TASK = 6
#: Records per local step of split learning, where every step exchanges activations and gradients
#: (compute, activation, upload, server, download, server step).  Measured: 5.0 (S2FL, SemiSFL) to 8.1 (GAS).
RECORDS_PER_SPLIT_STEP = 9
#: Records per model version besides its tasks: server, round, aggregate and up to two of the algorithm's
#: own (a dissimilarity, a Co-S²P round, a fragment).  Measured: 3 for FedAvg, 4 for GAS and Fed-RAA.
RECORDS_PER_VERSION = 5
#: Records once per run (an algorithm's set-up record, a final probe) and evaluations beyond the count.
RECORDS_PER_RUN = 10


def trace_records(scenario: Scenario, work: Work, tasks: float, versions: float, per_task: int, slots: int,
                  clients: int) -> float:
    """An upper bound on the trace records of a run (what ``LARGE_EVENTS`` limits and ``summary.json``'s
    ``trace_events`` counts): every task the stop rules allow plus one in flight per slot at the stop, each
    at :data:`RECORDS_PER_TASK` (and :data:`RECORDS_PER_SPLIT_STEP` per local step for split learning),
    :data:`RECORDS_PER_VERSION` and the server's own steps per version, and one record per evaluation.
    Tested against the counts of the built-in algorithms' runs (``tests/test_estimates.py``); on a large
    FedAvg run it is about 1.2 times the count (6 + 3/clients-per-round records per task against 5)."""
    started = tasks + min(slots, clients)
    per = RECORDS_PER_TASK + (RECORDS_PER_SPLIT_STEP * per_task if work.exchanges_per_step else 0)
    ev = scenario.eval
    evals = versions / ev.every_versions + 1 if ev.every_versions else 0.0
    if ev.every_s is not None:
        horizon = scenario.stop.max_time_s
        evals += MAX_EVALUATIONS if horizon is None else min(MAX_EVALUATIONS, horizon / ev.every_s + 1)
    return started * per + versions * (RECORDS_PER_VERSION + work.server_steps) + evals + RECORDS_PER_RUN


def estimate_work(scenario: Scenario, spec: AlgorithmSpec, world: World, model: torch.nn.Module,
                  prepared: Prepared) -> Estimate:
    """Tasks, SGD steps and events the stop rules allow, from the algorithm's knobs and the fastest task."""
    work = spec.cls.work(spec.params)  # declared by the algorithm, never guessed from its config
    sgd = sgd_config(scenario)
    fixed = work.steps_per_task
    steps = [int(fixed) if fixed is not None else num_steps(len(ix), sgd) for ix in prepared.parts]
    n = len(prepared.parts)
    slots = n if work.all_clients else int(work.slots)
    per_version = max(1, n if work.all_clients else int(work.per_version))  # updates one model version needs
    fastest = _fastest_task_s(scenario, world, model, prepared, steps)
    st = scenario.stop
    bounds = []
    if st.max_versions is not None:
        bounds.append((float(st.max_versions) * per_version, "stop.max_versions"))
    if st.max_updates is not None:
        bounds.append((float(st.max_updates) + slots, "stop.max_updates"))
    if st.max_time_s is not None and fastest > 0:
        bounds.append((st.max_time_s / fastest * min(slots, n) + slots, "stop.max_time_s"))
    tasks, bound = min(bounds) if bounds else (math.inf, "stop")
    tasks = max(tasks, float(min(slots, n)))  # every slot starts a task at once
    per_task = max(steps)
    server = int(work.server_steps)
    versions = float(st.max_versions) if st.max_versions is not None else tasks / per_version + 1
    sgd_steps = 0.0 if scenario.train.systems_only else tasks * per_task + versions * server
    events = trace_records(scenario, work, tasks, versions, per_task, slots, n)
    return Estimate(per_task, tasks, sgd_steps, events, slots, fastest, bound, server)


def _check_estimate(scenario: Scenario, spec: AlgorithmSpec, est: Estimate, allow_large: bool) -> list[str]:
    """Refuse runaway runs (unless ``allow_large``), eval intervals that dominate a run, hopeless deadlines."""
    alg = "algorithm" if len(scenario.algorithms) == 1 else f"algorithm.{spec.label}"
    work = spec.cls.work(spec.params)
    notes = []
    if not allow_large:
        if est.slots > LARGE_SLOTS and not work.all_clients:  # every client at once is no setting to lower
            raise ConfigError(f"{alg}.{work.slots_field}", f"{est.slots} parallel slots is absurd for "
                              f"{scenario.data.num_clients} clients (allowed: at most {LARGE_SLOTS:,}; --allow-large to run anyway)")
        if est.sgd_steps > LARGE_SGD_STEPS:
            steps_field = (f"{alg}.{work.steps_field}" if work.steps_per_task is not None else "train.local_steps")
            field = steps_field if est.steps_per_task > LARGE_SGD_STEPS / 100 else est.bound
            server = ""
            if est.server_steps > LARGE_SGD_STEPS / 100:
                field = f"{alg}.{work.server_field}" if work.server_field else est.bound
            if est.server_steps:
                server = f" + {est.server_steps:,} server steps per version"
            raise ConfigError(field, f"the run would take about {count_text(est.sgd_steps)} SGD steps "
                              f"({est.steps_per_task:,} per task × {count_text(est.tasks)} tasks{server}; allowed without "
                              f"--allow-large: {LARGE_SGD_STEPS:,}); lower the steps or the stop rules, or pass --allow-large")
        if est.events > LARGE_EVENTS:
            raise ConfigError(est.bound, f"the run would write up to {count_text(est.events)} trace events (allowed "
                              f"without --allow-large: {LARGE_EVENTS:,}); lower the stop rules or pass --allow-large")
    horizon = scenario.stop.max_time_s
    if horizon is None and math.isfinite(est.tasks):
        horizon = est.tasks * est.fastest_task_s / max(1, min(est.slots, scenario.data.num_clients))
    retry = work.retry_s
    idle_possible = est.slots > scenario.data.num_clients or scenario.availability.model != "always"
    if retry is not None and idle_possible and horizon is not None and not allow_large:
        # a slot (or round) that finds nobody reachable waits retry_s and tries again
        retries = horizon / retry * max(1, est.slots)
        if retries > LARGE_EVENTS:
            raise ConfigError(f"{alg}.retry_s", f"got {retry!r}: idle slots would retry about {retries:.3g} times in "
                              f"{horizon:.3g} s of virtual time (allowed without --allow-large: {LARGE_EVENTS:.0e}; "
                              f"i.e. retry_s >= {horizon * max(1, est.slots) / LARGE_EVENTS:.3g})")
    every = scenario.eval.every_s
    if every is not None:
        if horizon is not None and horizon / every > MAX_EVALUATIONS:
            raise ConfigError("eval.every_s", f"got {every!r}: about {horizon / every:.3g} evaluations in "
                              f"{horizon:.3g} s of virtual time would dominate the run (allowed: at most "
                              f"{MAX_EVALUATIONS:,} evaluations, i.e. every_s >= {horizon / MAX_EVALUATIONS:.3g})")
    deadline = work.deadline_s
    # sub-model algorithms train smaller models than the full one the estimate costs: no lower bound there
    if deadline is not None and not spec.cls.fits_devices(spec.params) and deadline < est.fastest_task_s:
        raise ConfigError(f"{alg}.deadline_s", f"got {deadline!r}: shorter than the fastest client's task "
                          f"({est.fastest_task_s:.4g} s of download, compute and upload without jitter), so "
                          f"every round would drop every client (allowed: >= {est.fastest_task_s:.4g})")
    return notes


def preflight(scenario: Scenario, *, allow_large: bool = False) -> Prepared:
    """Every check that can fail, before anything is written: data, partition, model, profiles, memory,
    settings with no effect, the work estimate.  Returns the prepared data for the run."""
    from fedsim.sim.trace import Trace as _Trace

    device = run_device(scenario.train)  # an accelerator this machine lacks is refused before any work
    if scenario.train.deterministic:
        deterministic_workspace(device)  # before the first cuBLAS call, which fixes its workspace
    if scenario.train.systems_only and scenario.stop.target_accuracy is not None:
        raise ConfigError("stop.target_accuracy", f"got {scenario.stop.target_accuracy!r}, but a systems-only run "
                          "(train.systems_only: true) measures no accuracy, so this stop rule can never fire")
    for spec in scenario.algorithms:  # a simulation that cannot fit is refused before its data is built
        _check_simulation_memory(scenario, spec, scenario.data.num_clients)
    prepared = prepare_data(scenario)
    world = World.from_scenario(simpy.Environment(), Streams(scenario.seed), _Trace(None), len(prepared.parts), scenario)
    prepared.warnings.extend(w for w in world.input_warnings if w not in prepared.warnings)
    model = build_global_model(scenario, prepared.data)
    prepared.data = data_on(prepared.data, device)  # moved once; every variant's context shares it
    for spec in scenario.algorithms:
        if not spec.cls.fits_devices(spec.params):  # else the algorithm fits clients itself
            check_memory_fits(world, model, scenario, tuple(prepared.data.train.input_shape))
        note = (_check_host_memory(scenario, spec, model, prepared, device)
                or _check_simulation_memory(scenario, spec, len(prepared.parts)))  # again: the data is held now
        if note and note not in prepared.notes:
            prepared.notes.append(note)
        estimate = estimate_work(scenario, spec, world, model, prepared)
        _check_estimate(scenario, spec, estimate, allow_large)
        prepared.events = max(prepared.events, estimate.events)
        # the algorithm's own set-up checks (cut layer, task kind, ...) on a throwaway context
        variant = scenario.variant(spec)
        env = simpy.Environment()
        streams = Streams(scenario.seed)
        trial = _Trace(None)
        w = World.from_scenario(env, streams, trial, len(prepared.parts), variant)
        ctx = Context(variant, env, streams, trial, w, prepared.data, prepared.parts, build_global_model(scenario, prepared.data))
        build_algorithm(spec.cls, ctx, spec.params)
    return prepared


#: Measured on the CPU (``benchmarks/batched_memory.py``): a batched round holds, per client, about 2.1 times
#: the saved activations (autograd's saved tensors and the gradients flowing back through them under
#: ``vmap``), its stacked parameters, gradients and momentum, two more copies of the parameters (the update
#: and the returned state) and about 0.7 MiB besides (small tensors, the allocator); and once per round
#: about 8 times one client's activations (the backward pass's workspaces).
BATCHED_ACTIVATION_FACTOR = 2.2
BATCHED_PER_CLIENT_EXTRA = 3 * 2**18  # 0.75 MiB
BATCHED_ROUND_ACTIVATIONS = 8


def batched_round_bytes(scenario: Scenario, model: torch.nn.Module, prepared: Prepared, clients: int) -> dict[str, int]:
    """Bytes a batched round of ``clients`` clients needs (``per_client``; ``round``, all of them and the
    round's workspaces) beside the dataset (``data``, on the device for the whole run): an upper bound on
    the measured peak, 1.35, 1.15 and 1.09 times it at 10, 20 and 60 clients of the default CNN on digits
    (``benchmarks/batched_memory.py``, CPU; the table in docs/performance.md), loosest for small rounds.
    From :func:`~fedsim.learn.costs.memory_estimate` at ``train.batch_size`` and the factors above."""
    tr = scenario.train
    e = memory_estimate(model, tuple(prepared.data.train.input_shape), tr.batch_size, momentum=tr.momentum > 0)
    per_client = (e.params * 3 + e.grads + e.optimizer + BATCHED_ACTIVATION_FACTOR * e.activations
                  + BATCHED_PER_CLIENT_EXTRA)
    data = sum(t.numel() * t.element_size() for ds in (prepared.data.train, prepared.data.test) for t in (ds.x, ds.y))
    return {"per_client": int(per_client), "round": int(per_client * clients + BATCHED_ROUND_ACTIVATIONS * e.activations),
            "data": int(data)}


#: Memory of the simulation itself, measured by ``benchmarks/scale.py`` (docs/performance.md, FedAvg,
#: systems-only): about 0.8 kB per client (its index, device, link, a few numbers) and, per client working
#: at once, 5.4 kB in the event engine (a SimPy process, its generator frames, an update) and 1.1 kB in the
#: vector engine.  Rounded up here, so the estimate is an upper bound.
SIM_BYTES_PER_CLIENT = 1024
SIM_BYTES_PER_ACTIVE_EVENT = 6 * 1024
SIM_BYTES_PER_ACTIVE_VECTOR = 1536


def address_space_left() -> float | None:
    """Bytes this process may still map under its address-space limit (``ulimit -v``, ``RLIMIT_AS``), or
    None when there is no such limit (or it cannot be read).  A run under such a cap fails with
    MemoryError when it passes it, whatever the machine has free."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft == resource.RLIM_INFINITY:
            return None
        with open("/proc/self/status", encoding="ascii") as fh:
            size = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmSize:"))
        return float(soft - size)
    except (ImportError, OSError, ValueError, StopIteration):
        return None


def simulation_bytes(scenario: Scenario, spec: AlgorithmSpec, clients: int) -> float:
    """An upper bound on the memory the simulation of a systems-only run holds (beyond the process's own):
    :data:`SIM_BYTES_PER_CLIENT` per client and, per client working at once (the algorithm's slots, every
    client for an all-clients loop), :data:`SIM_BYTES_PER_ACTIVE_EVENT` (or ``_VECTOR`` with
    ``engine: vector``)."""
    work = spec.cls.work(spec.params)
    active = clients if work.all_clients else min(int(work.slots), clients)
    vector = getattr(spec.params, "engine", "event") == "vector"
    return clients * SIM_BYTES_PER_CLIENT + active * (SIM_BYTES_PER_ACTIVE_VECTOR if vector else SIM_BYTES_PER_ACTIVE_EVENT)


def _check_simulation_memory(scenario: Scenario, spec: AlgorithmSpec, clients: int) -> str:
    """A systems-only run's memory estimate (:func:`simulation_bytes` for ``clients`` clients) against what
    it may use: the host's available memory, and the room left under an address-space limit.  Refused past
    it (one line), else returned as a note ("" for a run that trains: its training memory is checked by its
    own estimate).  The preflight asks twice: before the data is built (from ``data.num_clients``: a run
    that cannot fit is refused in about a second, not after minutes of building its clients' data), and
    after, with the data held and the partition's own client count."""
    if not scenario.train.systems_only:
        return ""
    need = simulation_bytes(scenario, spec, clients)
    free = memory_available(torch.device("cpu"))
    room = [(free[0], free[1])] if free is not None else []
    left = address_space_left()
    if left is not None:
        room.append((left, "left under this process's address-space limit (ulimit -v)"))
    if not room:
        return ""
    have, what = min(room)
    mib = 2.0 ** 20
    line = (f"the simulation of {clients:,} clients needs up to {need / mib:,.0f} MiB besides the "
            f"process itself; {have / mib:,.0f} MiB {what}")
    if need > have:
        alg = "algorithm" if len(scenario.algorithms) == 1 else f"algorithm.{spec.label}"
        raise ConfigError("data.num_clients", f"{line} (allowed: a run that fits; fewer clients or clients per round, "
                          f"{alg}.engine: vector where offered, or more memory)")
    return f"train.systems_only: {line}" if need > 64 * mib else ""  # a small run: nothing worth saying


def _check_host_memory(scenario: Scenario, spec: AlgorithmSpec, model: torch.nn.Module, prepared: Prepared,
                       device: torch.device) -> str:
    """Batched rounds train a round's clients at once on the host device: refuse a round that does not fit
    its memory (one line: need, what is free, where), else return that finding as one line ("" when the
    run trains nothing batched, or the device's memory cannot be read).

    The need is, per client of a round (at most the algorithm's parallel slots), the model's training
    memory at ``train.batch_size`` (:func:`~fedsim.learn.costs.memory_estimate`: parameters, gradients,
    momentum, activations), plus the dataset, which lives on the device for the whole run."""
    from fedsim.learn.batched import can_batch

    tr = scenario.train
    if not tr.batched or tr.systems_only or not can_batch(model, prepared.data.train.task):
        return ""
    work = spec.cls.work(spec.params)
    clients = max(1, min(len(prepared.parts) if work.all_clients else int(work.slots), len(prepared.parts)))
    sizes = batched_round_bytes(scenario, model, prepared, clients)
    per_client, data, need = sizes["per_client"], sizes["data"], sizes["round"] + sizes["data"]
    free = memory_available(device)
    if free is None:
        return ""
    have, what = free
    gib = 2.0 ** 30
    line = (f"a batched round of {clients} clients needs about {need / gib:.3g} GiB on {device} "
            f"({per_client / gib:.3g} GiB per client at batch {tr.batch_size}, {data / gib:.3g} GiB of data); "
            f"{have / gib:.3g} GiB {what}")
    if need > have:
        raise ConfigError("train.batched", f"{line} (allowed: a round that fits; fewer clients per round, a smaller "
                                           "batch_size, or train.batched: false)")
    return f"train.batched: {line}"
