"""Every built-in algorithm's ``Config``, the loop shapes' config bases, and the checks they use: plain
dataclasses that import no torch, so a scenario is loaded and validated (``fedsim show``, ``fedsim reference``)
without loading the algorithms themselves.  Each algorithm class names its config (``FedAvg.Config is
FedAvgConfig``); ``fedsim.algorithms`` re-exports the bases.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence

from fedsim.config import num, positive, require
from fedsim.errors import ConfigError
from fedsim.learn.choices import FRAGMENT_RATIOS, STRONG, WEAK, check_augmentation, check_randaugment

if TYPE_CHECKING:  # pragma: no cover
    from fedsim.scenario import Scenario


# ------------------------------------------------------------------------------------------ shared checks and choices

STALENESS_FUNCTIONS = ("constant", "polynomial", "hinge", "fedbuff")


def validate_staleness(kind: str, a: float, b: float, prefix: str) -> None:
    require(kind in STALENESS_FUNCTIONS, f"{prefix}.staleness", f"got {kind!r} (allowed: {', '.join(STALENESS_FUNCTIONS)})")
    positive(a, f"{prefix}.staleness_a", allow_zero=True)
    positive(b, f"{prefix}.staleness_b", allow_zero=True)


def check_server_lr(server_lr: float, server_opt: ServerOptConfig | None, prefix: str) -> None:
    """The server's learning rate is set once: ``server_lr`` without an optimiser, ``server_opt.lr`` with one."""
    require(server_opt is None or server_lr == 1.0, f"{prefix}.server_lr",
            f"got {server_lr!r} together with server_opt; set the server's learning rate once, as server_opt.lr")


def check_semi_settings(cfg: Any, prefix: str) -> None:
    """The settings every semi-supervised algorithm here shares (SemiSFL and its split baselines, SemiFL,
    FedSwitch, FedMatch): the labeled set, the server's labeled phase, the confidence threshold, the
    teacher's EMA decay and the weak / strong views."""
    positive(cfg.labeled, f"{prefix}.labeled", allow_zero=True)
    require(0.0 <= cfg.client_labeled_fraction <= 1.0, f"{prefix}.client_labeled_fraction",
            f"must be in [0, 1], got {cfg.client_labeled_fraction!r}")
    positive(cfg.k_s, f"{prefix}.k_s", allow_zero=True)
    positive(cfg.server_batch, f"{prefix}.server_batch")
    require(0.0 < cfg.tau < 1.0, f"{prefix}.tau", f"confidence threshold must be in (0, 1), got {cfg.tau!r}")
    require(0.0 < cfg.ema <= 1.0, f"{prefix}.ema", f"EMA decay must be in (0, 1], got {cfg.ema!r}")
    check_augmentation(cfg.weak, WEAK, f"{prefix}.weak")
    check_augmentation(cfg.strong, STRONG, f"{prefix}.strong")
    check_randaugment(cfg.rand_n, cfg.rand_m, prefix)


SCHEDULERS = ("gre", "random", "mp", "offline")


def fragment_ratios(M: int, ratios: Sequence[float] | None, field: str) -> tuple[float, ...]:
    """The ratios to use: ``ratios`` if given (must sum to 1), else Table 4's preset for ``M``
    (``fedsim.learn.models.FRAGMENT_RATIOS``; M = 1 is the whole layer)."""
    if ratios is None or len(ratios) == 0:
        presets = {1: (1.0,), **FRAGMENT_RATIOS}
        if M not in presets:
            raise ConfigError(f"{field}.fragments", f"no Table 4 preset for M={M!r} (presets: {min(presets)}..{max(presets)}); give {field}.ratios")
        return presets[M]
    r = tuple(float(x) for x in ratios)
    if len(r) != M:
        raise ConfigError(f"{field}.ratios", f"has {len(r)} entries but fragments is {M}")
    if any(not math.isfinite(x) or x <= 0 for x in r):
        raise ConfigError(f"{field}.ratios", f"must all be > 0, got {list(r)}")
    if abs(sum(r) - 1.0) > 1e-6:
        raise ConfigError(f"{field}.ratios", f"must sum to 1, got {list(r)} (sum {sum(r):.6g})")
    return r


#: Table 7 (E1): overall kept fraction R_n per device class.
PAPER_RATES = {
    "jetson-xavier-nx-8gb": 0.0625,
    "jetson-xavier-nx-16gb": 0.0625,
    "jetson-agx-orin-32gb": 0.5625,
    "jetson-agx-orin-64gb": 0.5625,
}
ROLLING_RULES = ("round", "client_round", "fixed")
KL_DIRECTIONS = ("student_teacher", "teacher_student")
WEIGHTINGS = ("gamma", "uniform", "samples")
CLIENT_TYPES: tuple[str, ...] = ("strong", "moderate", "weak")


#: HeteroFL's and FedRolex's capacity levels β ∈ {1, 1/2, 1/4, 1/8}.
DEFAULT_WIDTHS: tuple[float, ...] = (0.125, 0.25, 0.5, 1.0)


def check_width(value: Any, field_name: str) -> float:
    """A width is a number in (0, 1]; anything else is one clear error naming the field."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and 0 < value <= 1
    require(ok, field_name, f"a width must be in (0, 1], got {value!r}")
    return float(value)


def device_classes(scenario: "Scenario") -> list[str]:
    """The device classes of a scenario: the distinct ``profile`` names of ``devices.mix``, in order."""
    out: list[str] = []
    for g in scenario.devices.mix:
        if g.profile not in out:
            out.append(g.profile)
    return out


# ------------------------------------------------------------------------------------------ the loop shapes' bases

@dataclass
class ServerOptConfig:
    """``algorithm.server_opt``: the server's optimiser over the aggregate's pseudo-gradient."""

    name: Literal["sgd", "momentum", "adam", "yogi", "adagrad"] = field(default="sgd", metadata={
        "doc": "optimiser: sgd, momentum (FedAvgM), adam, yogi or adagrad"})
    lr: float = num(1.0, gt=0, le=1e6, doc="server learning rate η")
    betas: list[float] = field(default_factory=lambda: [0.9, 0.99],
                               metadata={"doc": "β₁ (momentum) and β₂ (second moment), each in [0, 1)"})
    tau: float = num(1e-3, gt=0, le=1e6, doc="adaptivity τ (adam, yogi, adagrad)")

    def validate(self, prefix: str) -> None:
        require(len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas), f"{prefix}.betas",
                f"must be two numbers in [0, 1), got {self.betas!r}")


@dataclass
class LoopConfig:
    """What every loop shape reads: the wait before it tries again when no client is reachable (a round or a
    slot with nobody to dispatch, an offline client's own slot, a dropped client dispatched again).  Declared
    once here; every shape's config base extends it."""

    retry_s: float = num(10.0, gt=0, le=1e9, unit="s", doc="wait before retrying when nobody is reachable")

    def validate(self, prefix: str) -> None:
        positive(self.retry_s, f"{prefix}.retry_s")


@dataclass
class RoundsConfig(LoopConfig):
    """The settings of a synchronous round (:class:`SyncRounds`; FedAvg and every algorithm built on its
    rounds extend this dataclass)."""

    clients_per_round: int = num(10, ge=1, unit="clients", doc="clients sampled each round")
    deadline_s: float | None = num(None, gt=0, le=1e9, unit="s", doc="round deadline; stragglers are dropped")
    server_lr: float = num(1.0, gt=0, le=1e6, doc="η_g: server step size toward the round's aggregate")
    only_fitting: bool = field(default=False, metadata={
        "doc": "sample only clients whose device fits the full model (the others never train)"})
    #: a server optimiser over the round's aggregate (FedAvgM, FedAdam, FedYogi, FedAdagrad); null: the
    #: aggregate moved by ``server_lr``
    server_opt: ServerOptConfig | None = None

    def validate(self, prefix: str) -> None:
        LoopConfig.validate(self, prefix)
        positive(self.clients_per_round, f"{prefix}.clients_per_round")
        positive(self.deadline_s, f"{prefix}.deadline_s")
        positive(self.server_lr, f"{prefix}.server_lr")
        check_server_lr(self.server_lr, self.server_opt, prefix)


@dataclass
class SlotsConfig(LoopConfig):
    """The settings an :class:`AsyncSlots` algorithm's ``Config`` extends (FedAsync's, FedBuff's, a user's):
    clients at work at once, and the idle retry.  Add ``server_lr`` and ``server_opt``
    (:class:`ServerOptConfig`) to have the shape's server step apply them."""

    concurrency: int = num(10, ge=1, unit="clients", doc="clients training at once")

    def validate(self, prefix: str) -> None:
        LoopConfig.validate(self, prefix)
        positive(self.concurrency, f"{prefix}.concurrency")


@dataclass
class SemiAsyncConfig(LoopConfig):
    """The settings a :class:`SemiAsyncRounds` algorithm's ``Config`` extends (Co-S²P's, a user's): the wait
    before a dropped client is dispatched again (``retry_s``)."""


@dataclass
class TimingConfig:
    """Timing conventions of split-learning steps (see the module docstring)."""

    convention: Literal["real", "gas-code"] = field(default="real", metadata={
        "doc": "real: real FLOPs, uploads and server time; gas-code: the GAS code's timing"})
    client_flops_per_s: list[float] | None = field(default=None, metadata={
        "doc": "one speed per client for the client passes (null: the world's devices)"})

    def validate(self, prefix: str) -> None:
        if self.client_flops_per_s is not None:
            require(all(f > 0 for f in self.client_flops_per_s), f"{prefix}.client_flops_per_s",
                    "every speed must be > 0 (FLOP/s)")


@dataclass
class SplitConfig:
    """Fields shared by the split-learning algorithms."""

    cut: int = field(default=1, metadata={
        "doc": "client part: the model's first cut blocks (the server trains the rest)"})
    local_iterations: int | None = field(default=None, metadata={
        "doc": "E: local iterations per participation (null: train.local_steps or epochs)"})
    aggregate_weights: Literal["data_size", "uniform"] = field(default="data_size", metadata={
        "doc": "client models averaged weighted by data size (data_size) or equally (uniform)"})
    timing: TimingConfig = field(default_factory=TimingConfig)
    cost_input_shape: list[int] | None = field(default=None, metadata={
        "doc": "systems-only: price a model built for this input shape (null: the data's)"})
    cost_model: str | None = field(default=None, metadata={
        "doc": "systems-only: model whose costs are priced (needs cost_input_shape; null: model.name)"})

    def validate(self, prefix: str) -> None:
        positive(self.cut, f"{prefix}.cut")
        positive(self.local_iterations, f"{prefix}.local_iterations")
        if self.cost_model is not None:
            require(self.cost_input_shape is not None, f"{prefix}.cost_model", "needs cost_input_shape as well")
        if self.cost_input_shape is not None:
            require(len(self.cost_input_shape) > 0 and all(s > 0 for s in self.cost_input_shape),
                    f"{prefix}.cost_input_shape", f"must be a list of positive sizes, got {self.cost_input_shape!r}")
            elements = math.prod(self.cost_input_shape)  # the costed model is built for it: bound its input
            require(elements <= 2**20, f"{prefix}.cost_input_shape", f"got {self.cost_input_shape!r}, {elements:.3g} "
                    "values per sample (allowed: at most 2^20 = 1,048,576, e.g. [3, 512, 512])")


@dataclass
class SplitRoundsConfig(SplitConfig):
    """The settings a :class:`SplitRounds` algorithm's ``Config`` extends (a user's): the split and the clients
    of a round."""

    clients_per_round: int = num(10, ge=1, le=10**6, unit="clients", doc="C: clients sampled each round")

    def validate(self, prefix: str) -> None:
        SplitConfig.validate(self, prefix)
        positive(self.clients_per_round, f"{prefix}.clients_per_round")


@dataclass
class SplitSlotsConfig(SplitConfig, SlotsConfig):
    """The settings a :class:`SplitSlots` algorithm's ``Config`` extends (async SFL's, GAS's, a user's): the
    split, the slots and the idle retry (:class:`SlotsConfig`), and the two buffers."""

    activation_buffer: int | None = num(None, ge=1, le=10**6, unit="minibatches",
                                        doc="Q_s: client minibatches per server step (null: concurrency)")
    model_buffer: int | None = num(None, ge=1, le=10**6, unit="models",
                                   doc="Q_c: client models averaged per aggregation (null: concurrency)")

    def validate(self, prefix: str) -> None:
        SplitConfig.validate(self, prefix)
        SlotsConfig.validate(self, prefix)
        positive(self.activation_buffer, f"{prefix}.activation_buffer")
        positive(self.model_buffer, f"{prefix}.model_buffer")


# ------------------------------------------------------------------------------------------ the built-in algorithms

# FedAvg (fedsim/algorithms/fedavg.py)
@dataclass
class FedAvgConfig(RoundsConfig):
    #: ``vector``: each round's client chains computed in numpy, for systems-only studies of 10^5-10^6
    #: devices (``fedsim.algorithms.loops.fedavg_vector``: the same trace as ``event``, refused where it
    #: does not apply)
    engine: Literal["event", "vector"] = field(default="event", metadata={
        "doc": "event: SimPy processes; vector: client chains in numpy (systems-only, huge populations)"})


# FedProx (fedsim/algorithms/fedprox.py)
@dataclass
class FedProxConfig(RoundsConfig):
    mu: float = num(0.01, ge=0, le=1e6, doc="weight of the proximal term")


# FedAsync (fedsim/algorithms/fedasync.py)
@dataclass
class FedAsyncConfig(SlotsConfig):
    alpha: float = num(0.6, gt=0, le=1, doc="mixing weight of a fresh update")
    staleness: str = field(default="polynomial", metadata={
        "doc": "staleness function s(τ): constant, polynomial, hinge or fedbuff (1/√(1+τ))"})
    staleness_a: float = num(0.5, ge=0, le=1e3, doc="a of s(τ): polynomial exponent, hinge slope")
    staleness_b: float = num(4.0, ge=0, le=1e9, unit="versions",
                             doc="b of s(τ): hinge threshold (no discount up to b versions)")
    max_staleness: int | None = num(None, ge=0, le=10**9, unit="versions", doc="staler updates are dropped")

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        require(0 < self.alpha <= 1, f"{prefix}.alpha", f"must be in (0, 1], got {self.alpha!r}")
        validate_staleness(self.staleness, self.staleness_a, self.staleness_b, prefix)
        positive(self.max_staleness, f"{prefix}.max_staleness", allow_zero=True)


# FedBuff (fedsim/algorithms/fedbuff.py)
@dataclass
class FedBuffConfig(SlotsConfig):
    buffer_size: int = num(5, ge=1, le=10**6, unit="updates", doc="K: deltas buffered before each server step")
    server_lr: float = num(1.0, gt=0, le=1e6, doc="η_g: server step size on the buffer's mean delta")
    staleness: str = field(default="fedbuff", metadata={
        "doc": "staleness function s(τ): constant, polynomial, hinge or fedbuff (1/√(1+τ))"})
    staleness_a: float = num(0.5, ge=0, le=1e3, doc="a of s(τ): polynomial exponent, hinge slope")
    staleness_b: float = num(4.0, ge=0, le=1e9, unit="versions",
                             doc="b of s(τ): hinge threshold (no discount up to b versions)")
    #: a server optimiser over the buffer's delta (null: the delta moved by ``server_lr``)
    server_opt: ServerOptConfig | None = None

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        positive(self.buffer_size, f"{prefix}.buffer_size")
        check_server_lr(self.server_lr, self.server_opt, prefix)
        positive(self.server_lr, f"{prefix}.server_lr")
        validate_staleness(self.staleness, self.staleness_a, self.staleness_b, prefix)


# CA2FL (fedsim/algorithms/ca2fl.py)
@dataclass
class CA2FLConfig(FedBuffConfig):
    variant: Literal["canonical", "gas-code"] = field(default="canonical", metadata={
        "doc": "canonical: the paper's calibration; gas-code: GAS code's data-size-weighted cache sum"})
    staleness: str = field(default="constant", metadata={
        "doc": "unused: CA2FL does not scale by staleness (its cache corrects stale clients)"})


# Cos2P (fedsim/algorithms/cos2p.py)
@dataclass
class Cos2PConfig(SemiAsyncConfig):
    mu: float = field(default=0.5, metadata={"doc": "μ: aggregation minimal ratio; a round waits for ⌈μN⌉ updates"})
    t_clk: float = field(default=0.0,
                         metadata={"doc": "T_clk: waiting interval (virtual s) after the ⌈μN⌉-th arrival"})
    mode: Literal["semi", "async"] = field(default="semi", metadata={
        "doc": "semi (Algorithm 1) or async (every arrival aggregated alone)"})
    weighting: str = field(default="gamma", metadata={
        "doc": "segment weights of Eq. 5: gamma (Eq. 4), uniform (γ ≡ 1) or samples (FedAvg's)"})
    server_lr: float = field(default=1.0,
                             metadata={"doc": "η of Eq. 5 on the γ-averaged weight change (1: the average itself)"})
    #: how R_n is chosen: "balanced" (derived per client from its device's compute and link speed so that
    #: every client's job takes about the same time; the paper picks R_n "according to the available
    #: resources" from measured round times) or "table7" (the ``rates`` table per device profile)
    rate_rule: Literal["balanced", "table7"] = field(default="balanced", metadata={
        "doc": "how R_n is chosen: balanced (equal job times per client) or table7 (rates)"})
    #: the largest R_n the balanced rule gives (Table 7's largest E1 rate: no client trains the whole model)
    rate_max: float = num(0.5625, gt=0, le=1, doc="largest kept fraction of the balanced rule")
    rates: dict[str, float] = field(default_factory=lambda: dict(PAPER_RATES), metadata={
        "doc": "kept fraction R_n per device profile for rate_rule: table7 (default: Table 7, E1)"})
    batch_sizes: dict[str, int] = field(default_factory=dict, metadata={
        "doc": "local batch size per device profile (default: train's batch size)"})
    width_depth_ratio: float = field(default=1.0,
                                     metadata={"doc": "R^w / R^d: how R_n splits into width and depth"})
    #: depth-window rolling rule (the paper only says "in a rolling fashion"): the window of a client's
    #: k-th participation starts at encoder block (k·step) mod (L − w + 1) ("round"), at ((k + client)·step)
    #: mod (L − w + 1) ("client_round": clients staggered so the blocks are covered evenly sooner), or
    #: always at the bottom ("fixed")
    rolling: str = field(default="client_round", metadata={
        "doc": "depth-window rolling: round, client_round (staggered by client) or fixed"})
    rolling_step: int = field(default=1, metadata={"doc": "blocks the depth window moves per participation"})
    mask_rounds: int = field(default=2, metadata={"doc": "Q̂: tasks q < Q̂ run the mask phase first"})
    mask_epochs: float = field(default=1.0, metadata={"doc": "local epochs of the mask phase"})
    mask_lr: float = field(default=0.1, metadata={"doc": "learning rate of the mask logits"})
    lambda1: float = field(default=1.0,
                           metadata={"doc": "λ₁: weight of the kept-fraction penalty in the mask loss"})
    mask: Literal["learned", "random"] = field(default="learned",
                                               metadata={"doc": "learned (STE) or random (Table 3's ablation)"})
    distill: bool = field(default=True,
                          metadata={"doc": "self-distillation between local exits (Eq. 3); off: plain CE per exit"})
    lambda2: float = field(default=0.2, metadata={"doc": "λ₂ in [0, 1]: distillation weight of Eq. 3"})
    temperature: float = field(default=3.0, metadata={"doc": "t: distillation temperature of Eq. 3"})
    kl_direction: str = field(default="student_teacher",
                              metadata={"doc": "direction of the KL of Eq. 3: student_teacher or teacher_student"})
    detach_teacher: bool = field(default=True,
                                 metadata={"doc": "stop the gradient through the teacher exit in Eq. 3"})
    local_train_fraction: float = field(default=0.8, metadata={
        "doc": "share of a client's samples for local training (the rest: its test set)"})

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        require(0 < self.mu <= 1, f"{prefix}.mu", f"must be in (0, 1], got {self.mu!r}")
        require(self.t_clk >= 0 and math.isfinite(self.t_clk), f"{prefix}.t_clk",
                f"must be a finite number of seconds >= 0, got {self.t_clk!r}")
        require(self.mode in ("semi", "async"), f"{prefix}.mode", f"got {self.mode!r} (allowed: semi, async)")
        require(self.weighting in WEIGHTINGS, f"{prefix}.weighting",
                f"got {self.weighting!r} (allowed: {', '.join(WEIGHTINGS)})")
        positive(self.server_lr, f"{prefix}.server_lr")
        for k, r in self.rates.items():
            require(isinstance(r, (int, float)) and 0 < r <= 1, f"{prefix}.rates.{k}", f"must be in (0, 1], got {r!r}")
        for k, b in self.batch_sizes.items():
            require(isinstance(b, int) and b >= 1, f"{prefix}.batch_sizes.{k}", f"must be an integer >= 1, got {b!r}")
        require(self.width_depth_ratio > 0 and math.isfinite(self.width_depth_ratio), f"{prefix}.width_depth_ratio",
                f"must be > 0, got {self.width_depth_ratio!r}")
        require(self.rolling in ROLLING_RULES, f"{prefix}.rolling",
                f"got {self.rolling!r} (allowed: {', '.join(ROLLING_RULES)})")
        require(isinstance(self.rolling_step, int) and self.rolling_step >= 0, f"{prefix}.rolling_step",
                f"must be an integer >= 0, got {self.rolling_step!r}")
        require(isinstance(self.mask_rounds, int) and self.mask_rounds >= 0, f"{prefix}.mask_rounds",
                f"must be an integer >= 0, got {self.mask_rounds!r}")
        positive(self.mask_epochs, f"{prefix}.mask_epochs", allow_zero=True)
        positive(self.mask_lr, f"{prefix}.mask_lr")
        require(self.lambda1 >= 0 and math.isfinite(self.lambda1), f"{prefix}.lambda1",
                f"must be a finite number >= 0, got {self.lambda1!r}")
        require(self.mask in ("learned", "random"), f"{prefix}.mask", f"got {self.mask!r} (allowed: learned, random)")
        require(0 <= self.lambda2 <= 1, f"{prefix}.lambda2", f"must be in [0, 1], got {self.lambda2!r}")
        positive(self.temperature, f"{prefix}.temperature")
        require(self.kl_direction in KL_DIRECTIONS, f"{prefix}.kl_direction",
                f"got {self.kl_direction!r} (allowed: {', '.join(KL_DIRECTIONS)})")
        require(0 < self.local_train_fraction <= 1, f"{prefix}.local_train_fraction",
                f"must be in (0, 1], got {self.local_train_fraction!r}")


# FedRAA (fedsim/algorithms/fedraa.py)
@dataclass
class FedRAAConfig(LoopConfig):
    fragments: int = field(default=3, metadata={"doc": "M: fragments the designated layers' units are split into"})
    ratios: list[float] | None = field(default=None, metadata={
        "doc": "fragment size ratios, summing to 1 (null: Table 4's preset for M)"})
    layers: list[str] | None = field(default=None, metadata={
        "doc": "width groups to split into fragments (null: the model's designated ones)"})
    mode: Literal["isolated", "frozen"] = field(default="isolated", metadata={
        "doc": "isolated: the client holds only its fragment; frozen: full model, fragment's entries trained"})
    scheduler: Literal["gre", "random", "mp", "offline"] = field(default="gre", metadata={
        "doc": "fragment choice: gre (Gre-RAA), random, mp (MP-RAA) or offline (Theorem 2's assignment)"})
    K: float | None = field(default=None,
                            metadata={"doc": "delay bound K of Gre-RAA in s of estimated round trip (null: K_off)"})
    count_inflight: bool = field(default=False,
                                 metadata={"doc": "the scheduler's q(j) also counts fragments being trained"})
    aggregation: Literal["async", "sync"] = field(default="async", metadata={
        "doc": "async (Fed-RAA) or sync (Sync Fed-RAA: rounds, the server waits for all)"})
    alpha: float = field(default=0.6,
                         metadata={"doc": "α: mixing weight of a fresh update (α_t = α · s(staleness))"})
    staleness: str = field(default="constant", metadata={
        "doc": "staleness function s(τ): constant, polynomial, hinge or fedbuff (1/√(1+τ))"})
    staleness_a: float = field(default=0.5, metadata={"doc": "a of s(τ): polynomial exponent, hinge slope"})
    staleness_b: float = field(default=4.0,
                               metadata={"doc": "b of s(τ): hinge threshold (no discount up to b versions)"})
    staleness_clock: Literal["global", "fragment"] = field(default="fragment", metadata={
        "doc": "staleness counted in updates of this fragment (fragment) or of any (global)"})
    rho: float = field(default=0.0, metadata={
        "doc": "ρ: proximal weight of the local objective f + ρ/2‖θ − θ_q‖² (0: plain SGD)"})

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        positive(self.fragments, f"{prefix}.fragments")
        fragment_ratios(self.fragments, self.ratios, prefix)
        require(self.scheduler in SCHEDULERS, f"{prefix}.scheduler",
                f"got {self.scheduler!r} (allowed: {', '.join(SCHEDULERS)})")
        require(0 < self.alpha <= 1, f"{prefix}.alpha", f"must be in (0, 1], got {self.alpha!r}")
        validate_staleness(self.staleness, self.staleness_a, self.staleness_b, prefix)
        positive(self.K, f"{prefix}.K")
        positive(self.rho, f"{prefix}.rho", allow_zero=True)


# RAMFedLite (fedsim/algorithms/fedraa_baselines.py)
@dataclass
class RAMFedLiteConfig(RoundsConfig):
    min_width: float = field(default=0.1, metadata={"doc": "floor of a client's width t_fastest / t_n"})

    def validate(self, prefix: str) -> None:
        RoundsConfig.validate(self, prefix)
        require(0 < self.min_width <= 1, f"{prefix}.min_width", f"must be in (0, 1], got {self.min_width!r}")


# PruneFLLite (fedsim/algorithms/fedraa_baselines.py)
@dataclass
class PruneFLLiteConfig(RoundsConfig):
    density: float = field(default=0.3,
                           metadata={"doc": "fraction of each weight matrix's largest-magnitude entries kept"})
    reconfigure_every: int = field(default=5, metadata={"doc": "rounds between recomputing the magnitude mask"})

    def validate(self, prefix: str) -> None:
        RoundsConfig.validate(self, prefix)
        require(0 < self.density <= 1, f"{prefix}.density", f"must be in (0, 1], got {self.density!r}")
        require(self.reconfigure_every >= 1, f"{prefix}.reconfigure_every",
                f"must be a positive integer, got {self.reconfigure_every!r}")


# WidthFedAvg (fedsim/algorithms/width.py)
@dataclass
class WidthConfig(RoundsConfig):
    widths: dict[str, float] | Literal["auto"] = field(default="auto", metadata={
        "doc": "auto, or a table {device class: width in (0, 1]} naming every class of devices.mix"})
    allowed_widths: list[float] = field(default_factory=lambda: list(DEFAULT_WIDTHS),
                                        metadata={"doc": "widths auto chooses from (and FjORD's per-step set)"})

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        require(not self.only_fitting, f"{prefix}.only_fitting",
                "is a FedAvg option; sub-model methods let every device train the width it can hold")
        require(len(self.allowed_widths) > 0, f"{prefix}.allowed_widths", "needs at least one width")
        for i, w in enumerate(self.allowed_widths):
            check_width(w, f"{prefix}.allowed_widths[{i}]")
        if isinstance(self.widths, Mapping):
            require(len(self.widths) > 0, f"{prefix}.widths", "an empty table; give a width per device class or 'auto'")
            for key, w in self.widths.items():
                check_width(w, f"{prefix}.widths.{key}")

    def validate_scenario(self, scenario: "Scenario", prefix: str) -> None:
        """The width table names exactly the device classes of the scenario's mix."""
        if not isinstance(self.widths, Mapping):
            return
        classes = device_classes(scenario)
        for key in self.widths:
            require(key in classes, f"{prefix}.widths.{key}",
                    f"unknown device class {key!r} (the scenario's devices.mix has: {', '.join(classes)})")
        missing = [c for c in classes if c not in self.widths]
        require(not missing, f"{prefix}.widths",
                f"no width for device class(es) {', '.join(missing)} (give one for each of: {', '.join(classes)}, "
                f"or use 'auto')")


# EmbracingFL (fedsim/algorithms/embracingfl.py)
@dataclass
class EmbracingFLConfig(RoundsConfig):
    assign: Literal["fraction", "devices", "memory"] = field(default="fraction", metadata={
        "doc": "client types by: fraction (random draw), devices (the types table) or memory"})
    weak_fraction: float = field(default=0.5, metadata={"doc": "share of clients made weak (assign: fraction)"})
    moderate_fraction: float = field(default=0.0,
                                     metadata={"doc": "share of clients made moderate (assign: fraction)"})
    types: dict[str, str] = field(default_factory=dict, metadata={
        "doc": "{device profile: client type} for assign: devices (unlisted: strong)"})
    memory_share: float = field(default=1.0,
                                metadata={"doc": "share of device memory a type must fit in (assign: memory)"})
    splits: dict[str, int] = field(default_factory=lambda: {"moderate": 2, "weak": 3}, metadata={
        "doc": "input-side blocks a moderate or weak client freezes ({type: blocks})"})

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        for key in ("weak_fraction", "moderate_fraction"):
            v = getattr(self, key)
            require(isinstance(v, (int, float)) and 0.0 <= v <= 1.0, f"{prefix}.{key}",
                    f"must be a fraction in [0, 1], got {v!r}")
        require(self.weak_fraction + self.moderate_fraction <= 1.0 + 1e-12, f"{prefix}.weak_fraction",
                f"weak_fraction + moderate_fraction must be <= 1, got {self.weak_fraction} + {self.moderate_fraction}")
        require(0.0 < self.memory_share <= 1.0, f"{prefix}.memory_share", f"must be in (0, 1], got {self.memory_share!r}")
        for t, k in self.splits.items():
            require(t in ("moderate", "weak"), f"{prefix}.splits.{t}", "unknown client type (allowed: moderate, weak)")
            require(isinstance(k, int) and k >= 1, f"{prefix}.splits.{t}",
                    f"must be the number (>= 1) of input-side blocks the {t} client freezes, got {k!r}")
        if self.types:
            from fedsim.system.devices import list_profiles

            known = set(list_profiles())
            for dev, t in self.types.items():
                require(dev in known, f"{prefix}.types.{dev}",
                        f"unknown device {dev!r} (allowed: {', '.join(sorted(known))})")
                require(t in CLIENT_TYPES, f"{prefix}.types.{dev}",
                        f"unknown client type {t!r} (allowed: {', '.join(CLIENT_TYPES)})")

    def validate_scenario(self, scenario: Any, prefix: str) -> None:
        """A client-type table names device classes of the scenario's ``devices.mix``."""
        if self.assign != "devices":
            return
        classes = device_classes(scenario)
        for dev in self.types:
            require(dev in classes, f"{prefix}.types.{dev}",
                    f"device class {dev!r} is not in devices.mix (the scenario has: {', '.join(classes)})")


@dataclass
class SemiConfig:
    """The settings every semi-supervised algorithm shares (SemiFL, FedSwitch, FedMatch; SemiSFL and its split
    baselines): the server's labeled set and phase, the confidence threshold, the teacher's decay and the two
    views.  Declared once here; each algorithm's ``Config`` extends it."""

    labeled: int = field(default=100, metadata={
        "doc": "labeled samples held by the server, drawn per class from the training set"})
    client_labeled_fraction: float = field(default=0.0, metadata={
        "doc": "share of each client's samples that keep their labels"})
    k_s: int = field(default=20, metadata={"doc": "K_s: server steps per round (the labeled phase)"})
    server_batch: int | None = field(default=None,
                                     metadata={"doc": "batch size of the labeled phase (null: train's batch size)"})
    tau: float = field(default=0.95, metadata={"doc": "τ: confidence threshold of pseudo-labels"})
    weak: str = field(default="flip_crop", metadata={"doc": "weak view: flip_crop, crop or none"})
    strong: str = field(default="randaugment", metadata={"doc": "strong view: randaugment, noise or none"})
    rand_n: int = field(default=2, metadata={"doc": "RandAugment N: operations drawn per image"})
    rand_m: int = field(default=10, metadata={"doc": "RandAugment M: magnitude (1..10)"})
    ema: float = field(default=0.99, metadata={"doc": "teacher EMA decay (SemiSFL's γ; of SemiFL's family only FedSwitch keeps a teacher)"})

    def validate(self, prefix: str) -> None:
        check_semi_settings(self, prefix)


# SemiFL (fedsim/algorithms/semifl.py)
@dataclass
class SemiFLConfig(SemiConfig, LoopConfig):
    """SemiFL's, FedSwitch's (and, extended, FedMatch's) settings on synchronous rounds: the semi-supervised
    ones (:class:`SemiConfig`), the retry (:class:`LoopConfig`, 1 s here: a round with nobody reachable is
    tried again soon, as the semi-supervised split methods do), the clients per round and Mixup's α."""

    retry_s: float = num(1.0, gt=0, le=1e9, unit="s", doc="wait before retrying when nobody is reachable")
    clients_per_round: int = field(default=10, metadata={"doc": "N_h: clients sampled each round"})
    mixup_alpha: float = field(default=0.75, metadata={
        "doc": "α of the Mixup weight λ ~ Beta(α, α) among confident samples (SemiFL)"})

    def validate(self, prefix: str) -> None:
        LoopConfig.validate(self, prefix)
        positive(self.clients_per_round, f"{prefix}.clients_per_round")
        SemiConfig.validate(self, prefix)
        positive(self.mixup_alpha, f"{prefix}.mixup_alpha")


# FedMatch (fedsim/algorithms/semifl.py)
@dataclass
class FedMatchConfig(SemiFLConfig):
    helpers: int = field(default=2, metadata={
        "doc": "helper models (the clients with the closest ψ) downloaded for pseudo-labels"})
    l1: float = field(default=1.0e-4, metadata={"doc": "weight of the L1 penalty on ψ"})

    def validate(self, prefix: str) -> None:
        SemiFLConfig.validate(self, prefix)
        positive(self.helpers, f"{prefix}.helpers", allow_zero=True)
        positive(self.l1, f"{prefix}.l1", allow_zero=True)


# SemiSFL (fedsim/algorithms/semisfl.py)
@dataclass
class SemiSFLConfig(SplitConfig, SemiConfig):
    clients_per_round: int = field(default=10, metadata={"doc": "N_h: clients sampled each round"})
    kappa: float = field(default=0.2, metadata={"doc": "κ: temperature of the clustering and SupCon losses"})
    queue_size: int = field(default=256,
                            metadata={"doc": "memory queue length: the last projections kept as contrastive keys"})
    head: Literal["mlp", "linear", "none"] = field(default="mlp", metadata={
        "doc": "projection head: mlp (two layers), linear or none (the features)"})
    head_dim: int = num(32, ge=1, le=16384, unit="units", doc="projection head output size")
    head_hidden: int = num(64, ge=1, le=16384, unit="units", doc="projection head hidden size")
    clustering: bool = field(default=True,
                             metadata={"doc": "clustering regularisation C (eq. 5) in the client phase"})
    supcon: bool = field(default=True,
                         metadata={"doc": "supervised-contrastive term T (eq. 3-4) in the labeled phase"})
    adapt: Literal["paper", "code", "none"] = field(default="paper", metadata={
        "doc": "K_s controller: paper (Eq. 9-10), code (the authors' rule) or none (fixed)"})
    alpha: float = field(default=1.5, metadata={"doc": "α: K_s decay factor of the controller (≥ 1)"})
    beta: float = field(default=8.0, metadata={"doc": "β: K_min = floor(β · K_u · the labeled share of the data)"})
    window: int = field(default=10, metadata={"doc": "rounds averaged per window of the K_s controller"})
    periods: int = field(default=10, metadata={"doc": "indicators averaged into R_h by the K_s controller"})
    server_view: Literal["strong", "weak"] = field(default="strong", metadata={
        "doc": "view of the labeled batches: strong (SemiSFL, strong twice) or weak (FedSwitch-SL)"})
    lr_schedule: Literal["constant", "cosine"] = field(default="constant", metadata={
        "doc": "learning rate: constant, or cosine from train.lr to min_lr over stop.max_versions"})
    min_lr: float = field(default=0.0, metadata={"doc": "final learning rate of the cosine schedule"})
    evaluate: Literal["teacher", "student"] = field(default="teacher", metadata={
        "doc": "model evaluated: teacher (paper and code) or student"})
    probe_every: int = field(default=0, metadata={"doc": "rounds between theory probes (0: none)"})
    probe_samples: int = field(default=16, metadata={"doc": "fixed samples per probe set"})
    aggregate_weights: Literal["data_size", "uniform"] = field(default="uniform", metadata={
        "doc": "client bottoms averaged equally (uniform, SemiSFL) or by data size (data_size)"})

    def validate(self, prefix: str) -> None:
        SplitConfig.validate(self, prefix)
        positive(self.clients_per_round, f"{prefix}.clients_per_round", allow_zero=True)
        SemiConfig.validate(self, prefix)
        positive(self.kappa, f"{prefix}.kappa")
        require(isinstance(self.queue_size, int) and self.queue_size >= 1, f"{prefix}.queue_size",
                f"must be an integer >= 1 (the memory queue holds the last queue_size projections), got "
                f"{self.queue_size!r}")
        positive(self.head_dim, f"{prefix}.head_dim")
        positive(self.head_hidden, f"{prefix}.head_hidden")
        require(self.alpha >= 1.0, f"{prefix}.alpha", f"K_s decay factor must be >= 1, got {self.alpha!r}")
        positive(self.beta, f"{prefix}.beta", allow_zero=True)
        positive(self.window, f"{prefix}.window")
        positive(self.periods, f"{prefix}.periods")
        positive(self.min_lr, f"{prefix}.min_lr", allow_zero=True)
        positive(self.probe_every, f"{prefix}.probe_every", allow_zero=True)
        positive(self.probe_samples, f"{prefix}.probe_samples")
        require(self.server_view in ("strong", "weak"), f"{prefix}.server_view",
                f"got {self.server_view!r} (allowed: strong, weak)")


# FedSwitchSL (fedsim/algorithms/semisfl.py)
@dataclass
class FedSwitchSLConfig(SemiSFLConfig):  # other defaults; each field means what SemiSFL's does
    clustering: bool = False
    supcon: bool = False
    adapt: Literal["paper", "code", "none"] = "none"
    server_view: Literal["strong", "weak"] = "weak"


# SupervisedOnly (fedsim/algorithms/semisfl.py)
@dataclass
class SupervisedOnlyConfig(SemiSFLConfig):
    clients_per_round: int = field(default=0,
                                   metadata={"doc": "N_h: clients sampled each round (0: the labeled phase only)"})
    adapt: Literal["paper", "code", "none"] = "none"


# AsyncSFL (fedsim/algorithms/gas.py)
@dataclass
class AsyncSFLConfig(SplitSlotsConfig):
    logit_adjust: bool = field(default=True, metadata={
        "doc": "client gradients from logits adjusted by the client's label prior (eq. 6–7)"})
    generate: bool = field(default=False,
                           metadata={"doc": "add generated activations to server steps (GAS; off: async-sfl)"})
    per_label_target: int | None = field(default=None, metadata={
        "doc": "rows per label a server step is topped up to (null: train's batch size)"})
    gaussian_covariance: Literal["diag", "full"] = field(default="diag", metadata={
        "doc": "per-label Gaussian of the activations: diag or full covariance"})
    gaussian_reg: float = field(default=0.0, metadata={
        "doc": "added to the covariance at every merge (0: the paper's; GAS code: 1e-5)"})
    gaussian_weight: Literal["linear", "polynomial", "exponential", "constant"] = field(default="linear", metadata={
        "doc": "time weight s(n) of an activation: linear (n), polynomial, exponential, constant"})
    gaussian_weight_a: float = field(default=1.0,
                                     metadata={"doc": "a of s(n): a·n^b (polynomial) or a·exp(b·n) (exponential)"})
    gaussian_weight_b: float = field(default=1.0,
                                     metadata={"doc": "b of s(n): a·n^b (polynomial) or a·exp(b·n) (exponential)"})
    measure_every: int | None = field(default=None, metadata={
        "doc": "server steps between dissimilarity measurements (null: none)"})
    measure_samples: int = field(default=1000, metadata={
        "doc": "training samples in the population of the dissimilarity measurement"})

    def validate(self, prefix: str) -> None:
        SplitSlotsConfig.validate(self, prefix)
        positive(self.per_label_target, f"{prefix}.per_label_target", allow_zero=True)
        positive(self.gaussian_reg, f"{prefix}.gaussian_reg", allow_zero=True)
        positive(self.gaussian_weight_a, f"{prefix}.gaussian_weight_a")
        positive(self.gaussian_weight_b, f"{prefix}.gaussian_weight_b", allow_zero=True)
        positive(self.measure_every, f"{prefix}.measure_every")
        positive(self.measure_samples, f"{prefix}.measure_samples")


# GAS (fedsim/algorithms/gas.py)
@dataclass
class GASConfig(AsyncSFLConfig):
    generate: bool = True  # what AsyncSFL's field means, on by default


# MiniBatchSFL (fedsim/algorithms/minibatch_sfl.py)
@dataclass
class MiniBatchSFLConfig(SplitConfig):
    clients_per_round: int = field(default=10, metadata={"doc": "C: clients sampled each round"})
    batch_rule: Literal["data_share", "fixed"] = field(default="data_share", metadata={
        "doc": "client minibatch: data_share (its share of the data × B·C, the GAS code's) or fixed (B)"})
    groups: int = field(default=1, metadata={
        "doc": "label-balanced activation groups per server step (1: one batch; S2FL: 2)"})
    group_passes: int = field(default=100, metadata={"doc": "most greedy swap passes of S2FL's grouping"})

    def validate(self, prefix: str) -> None:
        SplitConfig.validate(self, prefix)
        positive(self.clients_per_round, f"{prefix}.clients_per_round")
        positive(self.groups, f"{prefix}.groups")
        positive(self.group_passes, f"{prefix}.group_passes", allow_zero=True)


# S2FL (fedsim/algorithms/minibatch_sfl.py)
@dataclass
class S2FLConfig(MiniBatchSFLConfig):
    groups: int = field(default=2,
                        metadata={"doc": "label-balanced activation groups per server step (S2FL's grouping)"})


# LocalLossSFL (fedsim/algorithms/local_loss_sfl.py)
@dataclass
class LocalLossSFLConfig(SplitRoundsConfig):
    upload_every: int = num(2, ge=1, le=10**6, unit="iterations",
                            doc="k: the client uploads activations on every k-th local iteration (0, k, 2k, ...)")

    def validate(self, prefix: str) -> None:
        SplitRoundsConfig.validate(self, prefix)
        positive(self.upload_every, f"{prefix}.upload_every")
