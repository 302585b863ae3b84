"""Wireless links: path loss, shadowing, block fading, SNR and Shannon rate.

Models and their sources:

* Free space (Friis): ``FSPL = 20 log10(4 pi d f / c)`` (Rappaport, *Wireless Communications*, 2nd ed., eq. 4.5).
* Log-distance: ``PL(d) = PL(d0) + 10 n log10(d / d0)`` (Rappaport, sec. 4.9).
* 3GPP TR 36.814 v9.0.0 (Annex A.2.1.1.2; the table number is not yet checked against the TR), macro cell at 2 GHz: ``128.1 + 37.6 log10(d_km)``, shadowing
  sigma 8 dB.  This is the model of GAS and most wireless-FL papers.
* 3GPP TR 38.901 v17, Table 7.4.1-1, UMi-Street Canyon and UMa, LOS/NLOS, with the breakpoint distance
  ``d'_BP = 4 h'_BS h'_UT f_c / c`` (h' = h - h_E, c = 3.0e8 m/s as in the TR) and the LOS probabilities
  of Table 7.4.2-1.  For UMa the TR draws the effective environment height h_E at random; fedsim uses the
  deterministic h_E = 1 m (the value the TR uses for UMi, and for UMa with probability 1/(1+C)), so
  path loss is a function of geometry only.  Valid for f_c in 0.5-100 GHz, d_2D in 10 m-5 km.
* Small-scale fading (block fading, one draw per transmission): Rayleigh, ``|h|^2 ~ Exp(1)``; Rician
  with K-factor, ``h = sqrt(K/(K+1)) e^{j theta} + sqrt(1/(K+1)) CN(0,1)`` (mean power 1).
* ``SNR = P g |h|^2 / (N0 B F)``, N0 = -174 dBm/Hz = 3.981e-21 W/Hz, F the receiver noise figure;
  ``R = B log2(1 + SNR)`` (Shannon).  The ergodic Rayleigh rate has the closed form
  ``E[log2(1 + rho X)] = log2(e) e^{1/rho} E1(1/rho)`` for X ~ Exp(1) (Alouini & Goldsmith 1999).

Frequencies are in Hz and distances in metres at the API; the 3GPP formulas take f_c in GHz internally.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Literal

import numpy as np

from fedsim.config import num
from fedsim.errors import ConfigError
from fedsim.sim.rng import Streams

C_LIGHT = 299_792_458.0  #: speed of light (m/s), used by Friis
C_3GPP = 3.0e8  #: TR 38.901 sec. 7.4.1 note: c = 3.0e8 m/s in the breakpoint distance
#: the fixed-rate link a scenario gets when it names none: each client's rate drawn log-uniformly in [lo, hi] Mbit/s
DEFAULT_UPLINK_MBPS = [2.0, 20.0]
DEFAULT_DOWNLINK_MBPS = [10.0, 50.0]
N0_W_PER_HZ = 3.981e-21  #: thermal noise PSD, -174 dBm/Hz at 290 K

FADING_MODELS = ("none", "rayleigh", "rician")
#: the link models that state a rate, with no distance, path loss or SNR
RATE_ONLY_MODELS = ("fixed", "uniform_rate", "ideal")
#: what a link's ``model`` stands for, besides these names: ``module:attribute`` or a name a package registers
#: under the entry point ``fedsim.channel_models``, a path-loss model of one's own (:data:`USER_MODEL`)
USER_MODEL = "module:attribute"


def db_to_linear(db):
    """10^(dB/10)."""
    return 10.0 ** (np.asarray(db, dtype=float) / 10.0) if np.ndim(db) else 10.0 ** (float(db) / 10.0)


def linear_to_db(x):
    """10 log10(x)."""
    return 10.0 * np.log10(x)


def _positive(name: str, x: float | np.ndarray) -> None:
    if isinstance(x, (int, float)):  # a number (numpy float64 too) needs no array: compared as it is
        if x <= 0:
            raise ConfigError(f"channel.{name}", f"must be positive, got {x!r}")
    elif np.any(np.asarray(x) <= 0):
        raise ConfigError(f"channel.{name}", f"must be positive, got {x!r}")


# ------------------------------------------------------------------------------------------ path loss

def free_space_db(d_m: float | np.ndarray, f_hz: float) -> float | np.ndarray:
    """Friis free-space path loss in dB: 20 log10(d) + 20 log10(f) + 20 log10(4 pi / c)."""
    _positive("distance_m", d_m)
    _positive("frequency_hz", f_hz)
    return 20 * np.log10(d_m) + 20 * np.log10(f_hz) + 20 * np.log10(4 * math.pi / C_LIGHT)


def log_distance_db(d_m: float | np.ndarray, pl0_db: float, d0_m: float, exponent: float) -> float | np.ndarray:
    """Log-distance path loss: PL(d0) + 10 n log10(d/d0) (Rappaport sec. 4.9); shadowing added separately."""
    _positive("distance_m", d_m)
    _positive("d0_m", d0_m)
    return pl0_db + 10 * exponent * np.log10(np.asarray(d_m, dtype=float) / d0_m)


def tr36814_macro_db(d_m: float | np.ndarray) -> float | np.ndarray:
    """3GPP TR 36.814 macro-cell path loss at 2 GHz: 128.1 + 37.6 log10(d in km)."""
    _positive("distance_m", d_m)
    return 128.1 + 37.6 * np.log10(np.asarray(d_m, dtype=float) / 1000.0)


def _d3d(d_2d: np.ndarray, h_bs: float, h_ut: float) -> np.ndarray:
    return np.sqrt(d_2d**2 + (h_bs - h_ut) ** 2)


def breakpoint_distance_m(f_hz: float, h_bs: float, h_ut: float, h_e: float = 1.0) -> float:
    """TR 38.901 note 1 of Table 7.4.1-1: d'_BP = 4 (h_BS - h_E)(h_UT - h_E) f_c / c."""
    return 4 * (h_bs - h_e) * (h_ut - h_e) * f_hz / C_3GPP


def _check_38901(d_2d, f_hz, h_bs, h_ut) -> np.ndarray:
    _positive("distance_m", d_2d)
    _positive("frequency_hz", f_hz)
    if h_ut <= 1.0 or h_bs <= 1.0:
        raise ConfigError("channel.height", f"antenna heights must exceed h_E = 1 m (got h_bs={h_bs}, h_ut={h_ut})")
    return np.asarray(d_2d, dtype=float)


def tr38901_umi_db(d_2d_m, f_hz: float, h_bs: float = 10.0, h_ut: float = 1.5, los: bool = True):
    """TR 38.901 Table 7.4.1-1 UMi-Street Canyon path loss (dB), LOS or NLOS; sigma_SF 4 / 7.82 dB."""
    d = _check_38901(d_2d_m, f_hz, h_bs, h_ut)
    fc = f_hz / 1e9
    d3 = _d3d(d, h_bs, h_ut)
    dbp = breakpoint_distance_m(f_hz, h_bs, h_ut)
    pl1 = 32.4 + 21 * np.log10(d3) + 20 * np.log10(fc)
    pl2 = 32.4 + 40 * np.log10(d3) + 20 * np.log10(fc) - 9.5 * np.log10(dbp**2 + (h_bs - h_ut) ** 2)
    pl_los = np.where(d <= dbp, pl1, pl2)
    if not los:
        pl_nlos = 35.3 * np.log10(d3) + 22.4 + 21.3 * np.log10(fc) - 0.3 * (h_ut - 1.5)
        pl_los = np.maximum(pl_los, pl_nlos)
    return float(pl_los) if np.ndim(pl_los) == 0 else pl_los


def tr38901_uma_db(d_2d_m, f_hz: float, h_bs: float = 25.0, h_ut: float = 1.5, los: bool = True):
    """TR 38.901 Table 7.4.1-1 UMa path loss (dB), LOS or NLOS; sigma_SF 4 / 6 dB.  h_E = 1 m (see module doc)."""
    d = _check_38901(d_2d_m, f_hz, h_bs, h_ut)
    fc = f_hz / 1e9
    d3 = _d3d(d, h_bs, h_ut)
    dbp = breakpoint_distance_m(f_hz, h_bs, h_ut)
    pl1 = 28.0 + 22 * np.log10(d3) + 20 * np.log10(fc)
    pl2 = 28.0 + 40 * np.log10(d3) + 20 * np.log10(fc) - 9 * np.log10(dbp**2 + (h_bs - h_ut) ** 2)
    pl_los = np.where(d <= dbp, pl1, pl2)
    if not los:
        pl_nlos = 13.54 + 39.08 * np.log10(d3) + 20 * np.log10(fc) - 0.6 * (h_ut - 1.5)
        pl_los = np.maximum(pl_los, pl_nlos)
    return float(pl_los) if np.ndim(pl_los) == 0 else pl_los


def los_probability_umi(d_2d_m, h_ut: float = 1.5):
    """TR 38.901 Table 7.4.2-1, UMi-Street Canyon: 1 if d <= 18 m else 18/d + exp(-d/36)(1 - 18/d)."""
    d = np.asarray(d_2d_m, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(d <= 18.0, 1.0, 18.0 / d + np.exp(-d / 36.0) * (1 - 18.0 / d))
    return float(p) if p.ndim == 0 else p


def los_probability_uma(d_2d_m, h_ut: float = 1.5):
    """TR 38.901 Table 7.4.2-1, UMa: [18/d + e^{-d/63}(1-18/d)] (1 + C'(h_UT) 5/4 (d/100)^3 e^{-d/150})."""
    d = np.asarray(d_2d_m, dtype=float)
    c = 0.0 if h_ut <= 13.0 else ((h_ut - 13.0) / 10.0) ** 1.5
    with np.errstate(divide="ignore", invalid="ignore"):
        base = 18.0 / d + np.exp(-d / 63.0) * (1 - 18.0 / d)
        p = np.where(d <= 18.0, 1.0, base * (1 + c * 1.25 * (d / 100.0) ** 3 * np.exp(-d / 150.0)))
    return float(p) if p.ndim == 0 else p


# ------------------------------------------------------------------------------------------ randomness

#: the path-loss models by name, each ``f(d_m, config, los) -> path loss in dB`` at 2-D distance ``d_m`` metres
#: (``config`` is the link's :class:`ChannelConfig`: frequency, heights, ...); the one list every other list of
#: model names is made from.  A user's model has the same signature and is named ``module:attribute``.
CHANNEL_MODELS: dict[str, Callable] = {
    "free_space": lambda d, c, los: free_space_db(d, c.frequency_hz),
    "log_distance": lambda d, c, los: log_distance_db(d, c.pl0_db, c.d0_m, c.exponent),
    "tr36814": lambda d, c, los: tr36814_macro_db(d),
    "tr38901_umi": lambda d, c, los: tr38901_umi_db(d, c.frequency_hz, c.base_station_height(), c.h_ut, los),
    "tr38901_uma": lambda d, c, los: tr38901_uma_db(d, c.frequency_hz, c.base_station_height(), c.h_ut, los),
}
#: every built-in link model: the path-loss ones, then the rate-only ones
PATHLOSS_MODELS = (*CHANNEL_MODELS, *RATE_ONLY_MODELS)


def is_channel_model(name: object) -> bool:
    """Whether ``name`` may name a link model: a built-in, a ``module:attribute`` reference, or a name a package
    registers (checked further when the scenario is loaded, :func:`channel_model`)."""
    import fedsim.components as components

    return isinstance(name, str) and (name in PATHLOSS_MODELS or components.is_reference(name)
                                      or name in components.installed("channel"))


def channel_model(name: str, field: str = "channel.model", base_dirs: tuple = ()) -> Callable:
    """The path-loss function a link's ``model`` names: a built-in of :data:`CHANNEL_MODELS`, a name a package
    registers under ``fedsim.channel_models``, or ``module:attribute`` (imported from the scenario's folder, the
    working directory, then ``sys.path``, like an algorithm).  One ConfigError line for anything else."""
    fn = CHANNEL_MODELS.get(name)
    if fn is not None:
        return fn
    import fedsim.components as components

    obj = components.find("channel", name, field, base_dirs) if name not in RATE_ONLY_MODELS else None
    if obj is None:
        raise ConfigError(field, f"unknown model {name!r} (allowed: {', '.join(PATHLOSS_MODELS)}; or module:attribute "
                          "for a path-loss model of your own)")
    if not callable(obj) or isinstance(obj, type):
        raise ConfigError(field, f"{name!r} is {type(obj).__name__}, not a function f(d_m, config, los) -> path "
                          "loss in dB")
    return obj


def shadowing_db(rng: np.random.Generator, sigma_db: float, size=None):
    """Log-normal shadowing: a zero-mean Gaussian in dB with standard deviation sigma_db."""
    if sigma_db < 0:
        raise ConfigError("channel.shadowing_db", f"must be >= 0, got {sigma_db!r}")
    return rng.normal(0.0, sigma_db, size=size) if sigma_db > 0 else (0.0 if size is None else np.zeros(size))


def fading_gain(rng: np.random.Generator, kind: str = "rayleigh", k_factor_db: float = 9.0, size=None):
    """Power gain |h|^2 of one block-fading draw (mean 1): none -> 1, rayleigh -> Exp(1), rician(K)."""
    if kind == "none":
        return 1.0 if size is None else np.ones(size)
    if kind == "rayleigh":
        return rng.exponential(1.0, size=size)
    if kind == "rician":
        k = 10.0 ** (k_factor_db / 10.0)
        theta = rng.uniform(0.0, 2 * math.pi, size=size)
        scatter = (rng.standard_normal(size) + 1j * rng.standard_normal(size)) / math.sqrt(2.0)
        h = math.sqrt(k / (k + 1)) * np.exp(1j * theta) + math.sqrt(1 / (k + 1)) * scatter
        g = np.abs(h) ** 2
        return float(g) if size is None else g
    raise ConfigError("channel.fading", f"unknown fading {kind!r} (allowed: {', '.join(FADING_MODELS)})")


# ------------------------------------------------------------------------------------------ SNR and rate

def snr(p_tx_w: float, gain_linear, bandwidth_hz: float, noise_psd_w_hz: float = N0_W_PER_HZ, noise_figure_db: float = 0.0):
    """Received SNR (linear): P g / (N0 B F)."""
    _positive("bandwidth_hz", bandwidth_hz)
    noise_w = noise_psd_w_hz * bandwidth_hz * 10.0 ** (noise_figure_db / 10.0)
    return p_tx_w * (np.asarray(gain_linear, dtype=float) if np.ndim(gain_linear) else gain_linear) / noise_w


def shannon_rate(bandwidth_hz: float, snr_linear):
    """Shannon capacity B log2(1 + SNR) in bit/s."""
    return bandwidth_hz * np.log2(1.0 + snr_linear)


def ergodic_rayleigh_rate(bandwidth_hz: float, mean_snr: float) -> float:
    """E[B log2(1 + rho |h|^2)] for Rayleigh fading: B log2(e) e^{1/rho} E1(1/rho).

    For 1/rho > 700 the product e^x E1(x) is evaluated by its asymptotic series 1/x (1 - 1/x + 2/x^2 - 6/x^3)
    to avoid overflow.
    """
    _positive("mean_snr", mean_snr)
    from scipy.special import exp1  # imported when a Rayleigh rate is first needed (start-up)

    x = 1.0 / mean_snr
    val = math.exp(x) * float(exp1(x)) if x < 700 else (1 / x) * (1 - 1 / x + 2 / x**2 - 6 / x**3)
    return bandwidth_hz * math.log2(math.e) * val


# ------------------------------------------------------------------------------------------ configuration

@dataclass
class LinkPhysics:
    """The settings of one link direction, declared once: the scenario's ``channel.uplink`` and
    ``channel.downlink`` sections (``fedsim.scenario.LinkConfig``) and the channel model's
    :class:`ChannelConfig` both extend it, each adding only how it states rates."""

    model: str = field(default="tr36814", metadata={"doc": "rate-only (fixed, uniform_rate, ideal) or path-loss link model",
                                                    "choices": lambda: PATHLOSS_MODELS})
    frequency_hz: float = num(2.0e9, gt=0, le=1e12, unit="Hz", doc="carrier frequency (path-loss models)")
    bandwidth_hz: float = num(10e6, gt=0, le=1e12, unit="Hz", doc="band of one client's link (Shannon rate)")
    tx_power_w: float = num(0.2, gt=0, le=1e6, unit="W",
                            doc="transmit power: SNR under path loss, and the uplink's transmit energy; a device "
                                "profile's radio.tx_power beats it for both")
    noise_psd_w_hz: float = num(N0_W_PER_HZ, gt=0, le=1, unit="W/Hz", doc="thermal noise power spectral density")
    noise_figure_db: float = num(0.0, ge=0, le=100, unit="dB", doc="receiver noise figure")
    shadowing_db: float | None = num(0.0, ge=0, le=100, unit="dB", doc="log-normal shadowing spread (0: none)")
    fading: str = field(default="none", metadata={"doc": "small-scale fading model", "choices": lambda: FADING_MODELS})
    rician_k_db: float = num(9.0, ge=-100, le=100, unit="dB", doc="rician fading: K factor")
    los: Literal["auto", "los", "nlos"] = field(default="auto",
                                                metadata={"doc": "TR 38.901: line of sight drawn (auto) or forced"})
    exponent: float = num(3.0, gt=0, le=10, doc="path-loss exponent (log_distance)")
    pl0_db: float = num(40.0, ge=0, le=300, unit="dB", doc="log_distance: path loss at d0_m")
    d0_m: float = num(1.0, gt=0, le=1e6, unit="m", doc="log_distance: reference distance")
    h_bs: float | None = num(None, gt=0, le=1e4, unit="m", doc="TR 38.901: base-station height (null: the model's)")
    h_ut: float = num(1.5, gt=0, le=1e4, unit="m", doc="TR 38.901: user-terminal height")


#: the physical fields of a link direction (every field of :class:`LinkPhysics` but its model)
PHYSICAL_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(LinkPhysics) if f.name != "model")


@dataclass
class ChannelConfig(LinkPhysics):
    """One direction of a link (uplink or downlink), with its rates in bit/s.

    ``model`` picks the path-loss model, or one of the rate-only models: ``fixed`` (``rate_bps``),
    ``uniform_rate`` (uniform in ``rate_range_bps``, redrawn per transmission or fixed per client) and
    ``ideal`` (infinite rate: transfers take no time, as in papers that do not model a direction).
    ``shadowing_db`` is the log-normal sigma (None: the model's standard value, 8 dB for TR 36.814,
    4/7.82 dB UMi LOS/NLOS, 4/6 dB UMa; 0 for the rest).  ``los``: 'auto' draws LOS per client from the
    TR 38.901 probability, or force 'los'/'nlos'.
    """

    rate_bps: float | None = None
    rate_range_bps: tuple[float, float] | None = None
    redraw: str = "per_transmission"

    def __post_init__(self) -> None:
        if not is_channel_model(self.model):
            raise ConfigError("channel.model", f"unknown model {self.model!r} (allowed: {', '.join(PATHLOSS_MODELS)}; "
                              "or module:attribute)")
        if self.fading not in FADING_MODELS:
            raise ConfigError("channel.fading", f"unknown fading {self.fading!r} (allowed: {', '.join(FADING_MODELS)})")
        if self.los not in ("auto", "los", "nlos"):
            raise ConfigError("channel.los", f"unknown value {self.los!r} (allowed: auto, los, nlos)")
        if self.redraw not in ("per_transmission", "per_client"):
            raise ConfigError("channel.redraw", f"unknown value {self.redraw!r} (allowed: per_transmission, per_client)")
        for name in ("frequency_hz", "bandwidth_hz", "tx_power_w", "noise_psd_w_hz"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"channel.{name}", f"must be positive, got {getattr(self, name)!r}")
        if self.shadowing_db is not None and self.shadowing_db < 0:
            raise ConfigError("channel.shadowing_db", f"must be >= 0, got {self.shadowing_db!r}")
        if self.model == "fixed" and not (self.rate_bps and self.rate_bps > 0):
            raise ConfigError("channel.rate_bps", f"model 'fixed' needs a positive rate_bps, got {self.rate_bps!r}")
        if self.model == "uniform_rate":
            rr = self.rate_range_bps
            if rr is None or len(rr) != 2 or not (0 < rr[0] <= rr[1]):
                raise ConfigError("channel.rate_range_bps", f"model 'uniform_rate' needs (low, high) with 0 < low <= high, got {rr!r}")

    @property
    def is_rate_only(self) -> bool:
        return self.model in RATE_ONLY_MODELS

    def base_station_height(self) -> float:
        if self.h_bs is not None:
            return self.h_bs
        return 25.0 if self.model == "tr38901_uma" else 10.0

    def sigma_db(self, los: bool) -> float:
        if self.shadowing_db is not None:
            return self.shadowing_db
        return {
            "tr36814": 8.0,
            "tr38901_umi": 4.0 if los else 7.82,
            "tr38901_uma": 4.0 if los else 6.0,
        }.get(self.model, 0.0)

    def path_loss_db(self, d_m, los: bool = True):
        """Deterministic path loss (no shadowing) at 2-D distance ``d_m`` metres, from the model's function
        (:func:`channel_model`); a user's model that returns a value that is not a finite number of dB is one
        line naming it (an error in the user's code)."""
        if self.is_rate_only:
            raise ConfigError("channel.model", f"model {self.model!r} has no path loss (it is rate-only)")
        fn = channel_model(self.model)
        value = fn(d_m, self, los)
        if self.model not in CHANNEL_MODELS:
            try:
                ok = bool(np.all(np.isfinite(np.asarray(value, dtype=float))))
            except (TypeError, ValueError):
                ok = False
            if not ok or np.shape(value) != np.shape(d_m):
                from fedsim.errors import UserDecisionError

                raise UserDecisionError(f"{self.model} returned {value!r} for distance {d_m!r}: expected a finite "
                                        "path loss in dB of the distance's shape")
        return value

    def los_probability(self, d_m) -> float:
        if self.los != "auto" or self.model not in ("tr38901_umi", "tr38901_uma"):
            return 0.0 if self.los == "nlos" else 1.0
        fn = los_probability_umi if self.model == "tr38901_umi" else los_probability_uma
        return fn(d_m, self.h_ut)

    def mean_snr(self, d_m: float, *, los: bool = True, shadow_db: float = 0.0, bandwidth_share: float = 1.0,
                 tx_power_w: float | None = None) -> float:
        """SNR before fading: P 10^{-(PL + X)/10} / (N0 B F), on a fraction ``bandwidth_share`` of the band;
        P is ``tx_power_w`` when given (the client's resolved power, ``devices.resolve_tx_power``), else this
        direction's ``tx_power_w``."""
        pl = self.path_loss_db(d_m, los) + shadow_db
        power = self.tx_power_w if tx_power_w is None else tx_power_w
        return snr(power, 10.0 ** (-pl / 10.0), self.bandwidth_hz * bandwidth_share,
                   self.noise_psd_w_hz, self.noise_figure_db)


@dataclass(frozen=True)
class DuplexConfig:
    """Uplink and downlink, configured separately (papers often state different rates per direction)."""

    uplink: ChannelConfig
    downlink: ChannelConfig
    source: str = ""

    def direction(self, name: str) -> ChannelConfig:
        if name in ("up", "uplink"):
            return self.uplink
        if name in ("down", "downlink"):
            return self.downlink
        raise ConfigError("channel.direction", f"unknown direction {name!r} (allowed: up, down)")


#: Channel settings named after the papers that use them.
CHANNEL_PRESETS: dict[str, DuplexConfig] = {
    # GAS sec. 3.1-3.2: TR 36.814 path loss, P = 0.2 W, W = 10 MHz per client (the code gives every client
    # the full band), N0 = -174 dBm/Hz, no shadowing or fading, downlink not modelled (instantaneous).
    "gas-cell": DuplexConfig(
        uplink=ChannelConfig(model="tr36814", bandwidth_hz=10e6, tx_power_w=0.2, shadowing_db=0.0, fading="none"),
        downlink=ChannelConfig(model="ideal"),
        source="GAS paper sec. 3.1 and its code: 128.1 + 37.6 log10(d_km), P = 0.2 W, W = 10 MHz, d ~ U(0.1, 1) km",
    ),
    # SemiSFL sec. 5: uplink 0.8-8 Mbps and downlink 10-20 Mbps, fluctuating per transfer.
    "semisfl-edge": DuplexConfig(
        uplink=ChannelConfig(model="uniform_rate", rate_range_bps=(0.8e6, 8e6), redraw="per_transmission"),
        downlink=ChannelConfig(model="uniform_rate", rate_range_bps=(10e6, 20e6), redraw="per_transmission"),
        source="SemiSFL: outbound 0.8-8 Mbps, inbound 10-20 Mbps",
    ),
    "fixed": DuplexConfig(
        uplink=ChannelConfig(model="fixed", rate_bps=10e6),
        downlink=ChannelConfig(model="fixed", rate_bps=50e6),
        source="fedsim default: constant 10 Mbps up, 50 Mbps down",
    ),
}

#: GAS draws client distances uniformly in [100 m, 1000 m] (its code; the paper says uniform in the disc).
GAS_DISTANCE_RANGE_M: tuple[float, float] = (100.0, 1000.0)


def preset(name: str, **overrides) -> DuplexConfig:
    """A preset by name; ``uplink__field=value`` / ``downlink__field=value`` override single fields."""
    if name not in CHANNEL_PRESETS:
        raise ConfigError("channel.preset", f"unknown preset {name!r} (allowed: {', '.join(CHANNEL_PRESETS)})")
    base = CHANNEL_PRESETS[name]
    up, down = {}, {}
    for key, val in overrides.items():
        side, _, fld = key.partition("__")
        target = {"uplink": up, "downlink": down}.get(side)
        if target is None or not fld:
            raise ConfigError("channel.preset", f"override {key!r} must be uplink__<field> or downlink__<field>")
        target[fld] = val
    return DuplexConfig(replace(base.uplink, **up), replace(base.downlink, **down), base.source)


# ------------------------------------------------------------------------------------------ link model

def _memo_rate(bandwidth_hz: float, rho_full: float, g: float) -> Callable[[float], float]:
    """``share -> rate_bps`` of one transmission with fading gain ``g``: B s log2(1 + rho g / s), each share
    computed once (a medium asks again for the same share)."""
    memo: dict[float, float] = {}

    def rate(share: float = 1.0) -> float:
        r = memo.get(share)
        if r is None:
            r = memo[share] = shannon_rate(bandwidth_hz * share, rho_full * g / share)
        return r

    return rate


@dataclass
class LinkModel:
    """Rates of one direction of every client's link, drawing all randomness from named streams.

    Large-scale state is per client and drawn once: the shadowing (a standard normal from stream
    ``("channel", "shadowing", client)``, scaled by the direction's sigma, so uplink and downlink see the
    same obstacles) and the LOS state (a uniform from ``("channel", "los", client)`` compared with the LOS
    probability at the current distance).  Small-scale fading and per-transmission rates are drawn from
    ``("channel", direction, "fading", client)`` once per transmission (block fading).
    """

    config: ChannelConfig
    streams: Streams
    direction: str = "up"
    #: each client's transmit power (W), when it is not the config's: the uplink's resolved per device class
    #: (``fedsim.system.devices.resolve_tx_power``), so the SNR uses the power the energy is charged at
    tx_power_of: Callable[[Any], float] | None = None
    _z: dict = field(default_factory=dict, repr=False)
    _u: dict = field(default_factory=dict, repr=False)
    _fading: dict = field(default_factory=dict, repr=False)
    _fixed_rate: dict = field(default_factory=dict, repr=False)
    _snr: dict = field(default_factory=dict, repr=False)  # client -> (distance, full-band mean SNR)
    _static: dict = field(default_factory=dict, repr=False)  # client -> (distance, rate function), no fading

    def _shadow_z(self, client) -> float:
        if client not in self._z:
            self._z[client] = float(self.streams.numpy("channel", "shadowing", client).standard_normal())
        return self._z[client]

    def _los_u(self, client) -> float:
        if client not in self._u:
            self._u[client] = float(self.streams.numpy("channel", "los", client).random())
        return self._u[client]

    def _rng(self, client) -> np.random.Generator:
        if client not in self._fading:
            self._fading[client] = self.streams.numpy("channel", self.direction, "fading", client)
        return self._fading[client]

    def is_los(self, client, distance_m: float) -> bool:
        return self._los_u(client) < self.config.los_probability(distance_m)

    def mean_snr(self, client, distance_m: float, bandwidth_share: float = 1.0) -> float:
        """SNR with path loss and this client's shadowing, before fading.

        A function of (client, distance) once the client's shadowing and LOS draws are made, so the full-band
        value is kept per client and reused while the client stays where it is (every transfer of a fixed
        placement), instead of path loss and SNR recomputed in numpy for each transfer."""
        if bandwidth_share == 1.0:
            hit = self._snr.get(client)
            if hit is not None and hit[0] == distance_m:
                return hit[1]
        cfg = self.config
        los = self.is_los(client, distance_m)
        value = cfg.mean_snr(distance_m, los=los, shadow_db=cfg.sigma_db(los) * self._shadow_z(client),
                             bandwidth_share=bandwidth_share,
                             tx_power_w=None if self.tx_power_of is None else self.tx_power_of(client))
        if bandwidth_share == 1.0:
            self._snr[client] = (distance_m, value)
        return value

    def rate_fn(self, client, distance_m: float | None = None) -> Callable[[float], float]:
        """Draw this transmission's fading now; return ``share -> rate_bps`` on a fraction of the band.

        With a bandwidth share s the noise is N0 s B and the rate s B log2(1 + P g / (N0 s B F)): an FDMA
        sub-band concentrates the transmit power, so the rate is more than 1/n of the full-band rate.
        """
        cfg = self.config
        if cfg.model == "ideal":
            return lambda share=1.0: math.inf
        if cfg.model == "fixed":
            return lambda share=1.0: cfg.rate_bps * share
        if cfg.model == "uniform_rate":
            lo, hi = cfg.rate_range_bps
            if cfg.redraw == "per_client":
                if client not in self._fixed_rate:
                    self._fixed_rate[client] = float(self.streams.numpy("channel", self.direction, "rate", client).uniform(lo, hi))
                r = self._fixed_rate[client]
            else:
                r = float(self._rng(client).uniform(lo, hi))
            return lambda share=1.0: r * share
        if distance_m is None:
            raise ConfigError("channel.distance", f"model {cfg.model!r} needs the client's distance")
        if cfg.fading == "none":  # nothing drawn per transmission: one rate function per client and place
            hit = self._static.get(client)
            if hit is not None and hit[0] == distance_m:
                return hit[1]
            fn = _memo_rate(cfg.bandwidth_hz, self.mean_snr(client, distance_m), 1.0)
            self._static[client] = (distance_m, fn)
            return fn
        g = fading_gain(self._rng(client), cfg.fading, cfg.rician_k_db)
        return _memo_rate(cfg.bandwidth_hz, self.mean_snr(client, distance_m), g)

    def rate(self, client, distance_m: float | None = None, bandwidth_share: float = 1.0) -> float:
        """Rate in bit/s of one transmission (draws fading or the per-transmission rate)."""
        return float(self.rate_fn(client, distance_m)(bandwidth_share))
