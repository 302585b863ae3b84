"""FedAvg with partial participation (non-convex, non-IID): two published bounds with explicit constants.

The statements are those of the project's specification of partial-participation bounds (read from the
proceedings; see ``docs/guide.md``, "Partial-participation bounds"):

* **Theorem A**: Jhunjhunwala, Sharma, Nagarkatti & Joshi, "FedVARP: Tackling the Variance Due to Partial
  Client Participation in Federated Learning", UAI 2022 (PMLR 180), Theorem 1 ("FedAvg error
  decomposition"), in the explicit form of the last line of its proof (supplement §2.2).  M of N clients
  sampled uniformly *without* replacement, τ local SGD steps at η_c, server update
  w ← w − η_s·(1/M)Σ_{i∈S}(w − w_i^τ).  If η_c ≤ 1/(8Lτ) and η_sη_c ≤ 1/(24τL)::

      (1/T) Σ_{t<T} E‖∇f(w_t)‖² ≤ 4(f(w_0) − f*)/(η_sη_cτT) + 4η_sη_cLσ²/M + 8η_c²L²(τ−1)σ²
                                  + 12η_sη_cτL (N−M)/((N−1)M) σ_g² + 32η_c²L²τ(τ−1)σ_g².

  (The supplement's last line has f(w_0) − f(w_T); f(w_T) ≥ f* makes f(w_0) − f* valid.)  The factor
  (N−M)/((N−1)M) is 0 at M = N (full participation, no sampling variance), which also defines it at N = 1.

* **Theorem B**: Jiang & Zhu, "On the Convergence of Hierarchical Federated Learning with Partial Worker
  Participation", UAI 2024 (PMLR 244), Theorem 2, specialised (algebra, not stated in the paper) to one
  cluster, M = 1, I = G = K = τ, ε = 0, ε_1² = σ_G²: plain FedAvg with local rate η, τ local steps and the
  server update x ← x − η_gη_c·(1/n)Σ_{j∈S}(x − x_j^τ), n of m clients sampled uniformly with replacement
  (strategy 1, β = 1) or without (strategy 2, β = (m−n)/(m−1); β = 0 at n = m, the full-participation
  bound of the paper's Remark 4).  If η ≤ 1/(10τL), η_cη ≤ 1/(10τL), η_gη_cη ≤ 1/(τL) and
  bracket := 1/2 − 40τ²η_c²η²L² − 100τ²η²L² − 10βη_gη_cηLτ/n > 0 (the theorem's strict "< 1/2"), then for
  every constant 0 < c < bracket (the range the appendix gives, pp. 1821 and 1823)::

      min_{t} E‖∇f(x_t)‖² ≤ (f_0 − f*)/(c η_gη_cη τ T) + (1/c)[Φ_1 + Φ_2 + Φ_3],
      Φ_1 = (9τη_c²η²L²/m + 8τη²L²)σ² + 75τ²η²L²σ_G²,   Φ_2 = Lη_gη_cη σ²/(2n),
      Φ_3 = (3β/4)·η_gη_cηLσ²/n + (15β/2)·η_gη_cηLτσ_G²/n.

  ``c=None`` takes c = bracket·(1 − 10⁻⁹) (``c_margin``): strictly inside the interval, so admissible, and
  within a relative 10⁻⁹ of the infimum of the bound over c.  A positive bracket already needs
  100τ²η²L² < 1/2, i.e. η < 1/(√200·τL) ≈ 0.071/(τL), so η ≤ 1/(10τL) never binds on its own (it is kept as
  a row because the source states it).

Both theorems assume each client's f_i is L-smooth, its stochastic gradients unbiased with variance ≤ σ²,
and ‖∇f_i(w) − ∇f(w)‖² ≤ σ_g² for all i and all w (uniform bounds, not values along a run), with the
objective f = (1/N)Σ_i f_i, each client weighted 1/N.

**fedsim's FedAvg and FedProx (μ = 0) in these symbols.**  A round (``fedsim/algorithms/loops/sync_rounds.py``
``SyncRounds.run``) draws ``clients_per_round`` clients by ``SyncRounds.select`` →
``Algorithm.sample_clients`` (``fedsim/algorithms/algorithm.py``), which calls ``rng.choice(..., replace=False)``
over the eligible, reachable clients: uniform, *without replacement*, a fresh independent draw every round.
It is uniform over all m clients only when every client is eligible (no ``only_fitting``) and always
reachable (``AlwaysOn`` availability, no deadline drops); otherwise the draw is over a subset and neither
theorem covers it.  Each client runs ``train.local_steps`` SGD steps at ``train.lr`` (``fedsim/learn/sgd.py``
``num_steps``; with ``local_epochs`` instead, τ varies with the client's data).  The server rule
(``fedsim/algorithms/fedavg.py`` ``fedavg_rule``) returns the average of the returned weights w_i weighted
by samples processed (``Update.weight = stats.samples``, ``fedsim/algorithms/pipeline.py``), and the loop
applies ``ServerStep`` (``fedsim/algorithms/server_opt.py``): w ← w + server_lr·(avg − w)
= w − server_lr·Σ_i p_i (w − w_i^τ), with p_i = s_i/Σ_{j∈S} s_j.  So, with equal p_i = 1/M:

====================  =======================  ==============================================
fedsim                Theorem A                Theorem B (§3.1)
====================  =======================  ==============================================
``train.lr``          η_c                      η
``server_lr``         η_s                      η_gη_c (only the product enters the update)
``local_steps``       τ                        K = G = I = τ
``clients_per_round`` M                        n
``num_clients``       N                        m
sampling              without replacement      strategy 2 (``with_replacement=False``)
====================  =======================  ==============================================

(:func:`fedavg_symbols` returns both keyword sets.)  In Theorem B only η_gη_c reaches the algorithm, so any
split η_g = server_lr/η_c is an instance of the theorem; η_c enters the bound only through terms that grow
with it, so a smaller η_c gives a smaller, equally valid bound (``fedavg_symbols`` uses η_c = 1, the
specification's choice).

**Weights.**  The theorems' update averages the sampled clients' models with weight 1/M, and their f weights
each client 1/N (``analysis.probes`` measures that f: the uniform average of the clients' losses).  fedsim
weights by samples processed; the two agree exactly when every client processes the same number of samples
per round (``local_steps`` fixed and ``fedsim.learn.sgd.samples_processed`` equal for every client, e.g.
every client holds at least ``local_steps × batch_size`` samples).  Otherwise the update is a biased
estimate of the 1/N-weighted one and neither theorem applies: :func:`equal_weights_condition` is that row.
Other settings neither theorem covers (each a condition row for the check): momentum, weight decay,
gradient clipping, a server optimiser, FedProx's μ > 0, deadline drops, and a client's local steps walking
one shuffled pass of its data (the theorems' oracle draws each minibatch independently given the past).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

__all__ = ["Term", "Condition", "Bound", "theorem_a", "theorem_b", "c_interval", "participation_factor",
           "beta", "fedavg_symbols", "equal_weights_condition", "THEOREM_A", "THEOREM_B", "C_MARGIN"]

THEOREM_A = "Theorem A (Jhunjhunwala et al., UAI 2022, Thm 1)"
THEOREM_B = "Theorem B (Jiang & Zhu, UAI 2024, Thm 2, M=1)"
#: c = bracket·(1 − C_MARGIN) when no c is given: strictly inside Jiang & Zhu's open interval (0, bracket)
C_MARGIN = 1e-9


@dataclass(frozen=True)
class Term:
    """One named term of a bound's right-hand side, so a table can show where the bound comes from."""

    name: str
    value: float


@dataclass(frozen=True)
class Condition:
    """One step-size or sampling condition of a theorem: ``holds`` is measured ≤ required (or < where the
    source is strict)."""

    name: str
    measured: float
    required: float
    holds: bool


@dataclass(frozen=True)
class Bound:
    """A theorem's right-hand side at given constants (``math.inf`` when a condition fails: the theorem
    then says nothing), its terms and conditions, and the sampling scheme it is stated for."""

    theorem: str
    lhs: str
    value: float
    terms: tuple[Term, ...]
    conditions: tuple[Condition, ...]
    sampling: str
    notes: tuple[str, ...] = field(default=())


def _le(name: str, measured: float, required: float) -> Condition:
    return Condition(name, float(measured), float(required), bool(measured <= required))


def _lt(name: str, measured: float, required: float) -> Condition:
    return Condition(name, float(measured), float(required), bool(measured < required))


def _positive(**values: float) -> None:
    for k, v in values.items():
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise ValueError(f"{k} must be a finite number > 0, got {v!r}")


def _nonneg(**values: float) -> None:
    for k, v in values.items():
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise ValueError(f"{k} must be a finite number >= 0, got {v!r}")


def _count(**values: int) -> None:
    for k, v in values.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{k} must be an integer >= 1, got {v!r}")


def participation_factor(N: int, M: int) -> float:
    """(N − M)/((N − 1)M), the without-replacement sampling-variance factor of Theorem A (FedVARP, UAI 2022,
    Thm 1): 1/M times the finite-population correction (N − M)/(N − 1), defined as 0 at M = N (every client
    every round, no sampling variance; this includes N = M = 1)."""
    _count(N=N, M=M)
    if M > N:
        raise ValueError(f"cannot sample M={M} of N={N} clients without replacement")
    return 0.0 if M == N else (N - M) / ((N - 1) * M)


def beta(*, n: int, m: int, with_replacement: bool) -> float:
    """Jiang & Zhu's (UAI 2024, Thm 2) sampling factor for one cluster: 1 with replacement (strategy 1),
    α = (m − n)/(m − 1) without (strategy 2), 0 at n = m without replacement (Remark 4)."""
    _count(n=n, m=m)
    if with_replacement:
        return 1.0
    if n > m:
        raise ValueError(f"cannot sample n={n} of m={m} clients without replacement")
    return 0.0 if n == m else (m - n) / (m - 1)


def theorem_a(*, L: float, sigma2: float, sigma_g2: float, gap: float, eta_c: float, eta_s: float,
              tau: int, T: int, M: int, N: int) -> Bound:
    """Theorem A: the right-hand side of FedVARP's (UAI 2022) Theorem 1 in its supplement's explicit last line
    (§2.2), for FedAvg sampling M of N clients uniformly without replacement.  ``gap`` = f(w_0) − f*."""
    _positive(L=L, eta_c=eta_c, eta_s=eta_s)
    _nonneg(sigma2=sigma2, sigma_g2=sigma_g2, gap=gap)
    _count(tau=tau, T=T, M=M, N=N)
    q = participation_factor(N, M)
    s = eta_s * eta_c
    conditions = (
        _le("eta_c <= 1/(8 L tau)", eta_c, 1.0 / (8.0 * L * tau)),
        _le("eta_s eta_c <= 1/(24 tau L)", s, 1.0 / (24.0 * tau * L)),
    )
    terms = (
        Term("gap", 4.0 * gap / (s * tau * T)),
        Term("stochastic", 4.0 * s * L * sigma2 / M + 8.0 * eta_c**2 * L**2 * (tau - 1) * sigma2),
        Term("partial participation", 12.0 * s * tau * L * q * sigma_g2),
        Term("drift", 32.0 * eta_c**2 * L**2 * tau * (tau - 1) * sigma_g2),
    )
    ok = all(c.holds for c in conditions)
    notes = ("stochastic = 4 eta_s eta_c L sigma^2/M + 8 eta_c^2 L^2 (tau-1) sigma^2 (the paper's "
             "'stochastic gradient error'); partial participation uses (N-M)/((N-1)M), 0 at M = N",
             "the supplement's f(w_0) - f(w_T) is bounded by gap = f(w_0) - f*")
    return Bound(THEOREM_A, "average over t of E||grad f(w_t)||^2",
                 math.fsum(t.value for t in terms) if ok else math.inf, terms, conditions,
                 "without replacement", notes)


def c_interval(*, L: float, eta: float, eta_c: float, eta_g: float, tau: int, n: int, m: int,
               with_replacement: bool) -> tuple[float, float]:
    """Jiang & Zhu's (UAI 2024) admissible range of the constant c for one cluster (appendix D, before
    eqs. (51) and (61)): the open interval (0, bracket), bracket = 1/2 − 40τ²η_c²η²L² − 100τ²η²L²
    − 10βη_gη_cηLτ/n.  bracket ≤ 0 means no admissible c: the theorem gives no bound."""
    return 0.0, 0.5 - _bracket_lhs(L=L, eta=eta, eta_c=eta_c, eta_g=eta_g, tau=tau, n=n, m=m,
                                   with_replacement=with_replacement)


def _bracket_lhs(*, L: float, eta: float, eta_c: float, eta_g: float, tau: int, n: int, m: int,
                 with_replacement: bool) -> float:
    """40τ²η_c²η²L² + 100τ²η²L² + 10βη_gη_cηLτ/n, which Jiang & Zhu's Theorem 2 needs below 1/2."""
    _positive(L=L, eta=eta, eta_c=eta_c, eta_g=eta_g)
    _count(tau=tau)
    b = beta(n=n, m=m, with_replacement=with_replacement)
    return float(40.0 * tau**2 * eta_c**2 * eta**2 * L**2 + 100.0 * tau**2 * eta**2 * L**2
                 + 10.0 * b * eta_g * eta_c * eta * L * tau / n)


def theorem_b(*, L: float, sigma2: float, sigma_g2: float, gap: float, eta: float, eta_g: float, tau: int,
              T: int, n: int, m: int, with_replacement: bool, eta_c: float = 1.0,
              c: float | None = None, c_margin: float = C_MARGIN) -> Bound:
    """Theorem B: Jiang & Zhu's (UAI 2024) Theorem 2 with one cluster (the specification's §3.1), for FedAvg
    with local rate ``eta``, server rate ``eta_g * eta_c`` and n of m clients sampled uniformly with or
    without replacement.  ``gap`` = f_0 − f*.  ``c=None``: c = bracket·(1 − ``c_margin``), just inside the
    admissible interval; a given c must be > 0 and is checked against the bracket as a condition."""
    _positive(L=L, eta=eta, eta_g=eta_g, eta_c=eta_c)
    _nonneg(sigma2=sigma2, sigma_g2=sigma_g2, gap=gap)
    _count(tau=tau, T=T, n=n, m=m)
    if c is not None:
        _positive(c=c)
    if not 0.0 < c_margin < 1.0:
        raise ValueError(f"c_margin must be in (0, 1), got {c_margin!r}")
    b = beta(n=n, m=m, with_replacement=with_replacement)
    lhs_bracket = _bracket_lhs(L=L, eta=eta, eta_c=eta_c, eta_g=eta_g, tau=tau, n=n, m=m,
                               with_replacement=with_replacement)
    bracket = 0.5 - lhs_bracket  # c's admissible interval is (0, bracket)
    p = eta_g * eta_c * eta
    conditions = [
        _le("eta <= 1/(10 tau L)", eta, 1.0 / (10.0 * tau * L)),
        _le("eta_c eta <= 1/(10 tau L)", eta_c * eta, 1.0 / (10.0 * tau * L)),
        _le("eta_g eta_c eta <= 1/(tau L)", p, 1.0 / (tau * L)),
        _lt("40 tau^2 eta_c^2 eta^2 L^2 + 100 tau^2 eta^2 L^2 + 10 beta eta_g eta_c eta L tau/n < 1/2",
            lhs_bracket, 0.5),
    ]
    notes = [f"beta = {b:.6g} ({'with replacement: 1' if with_replacement else 'without replacement: (m-n)/(m-1), 0 at n = m'})",
             "stochastic = (Phi_1's sigma^2 part + Phi_2)/c; drift = Phi_1's sigma_G^2 part/c; "
             "partial participation = Phi_3/c (proportional to beta/n)",
             "t runs over the server models x_0 .. x_{T-1} of Algorithm 1's T rounds (the appendix's averaging "
             "is written to t = T)"]
    if c is None:
        c_used = bracket * (1.0 - c_margin) if bracket > 0 else math.nan
        notes.append(f"c = bracket*(1 - {c_margin:g}) = {c_used:.6g}, just inside the admissible (0, {bracket:.6g})")
    else:
        c_used = float(c)
        conditions.append(_lt("c < bracket (Jiang & Zhu, appendix D)", c_used, bracket))
        notes.append(f"c = {c_used:.6g} given; admissible c lies in (0, {bracket:.6g})")
    raw = (
        ("stochastic", (9.0 * tau * eta_c**2 * eta**2 * L**2 / m + 8.0 * tau * eta**2 * L**2) * sigma2
         + L * p * sigma2 / (2.0 * n)),
        ("drift", 75.0 * tau**2 * eta**2 * L**2 * sigma_g2),
        ("partial participation", 0.75 * b * p * L * sigma2 / n + 7.5 * b * p * L * tau * sigma_g2 / n),
    )
    if c_used > 0:  # nan (no admissible c) compares False
        terms = (Term("gap", gap / (c_used * p * tau * T)),) + tuple(Term(k, v / c_used) for k, v in raw)
    else:
        terms = (Term("gap", math.inf),) + tuple(Term(k, math.inf) for k, _ in raw)
        notes.append("no admissible c (bracket <= 0): the theorem gives no bound")
    ok = bracket > 0 and all(cd.holds for cd in conditions)
    return Bound(THEOREM_B, "min over t of E||grad f(x_t)||^2",
                 math.fsum(t.value for t in terms) if ok else math.inf, terms, tuple(conditions),
                 "with replacement" if with_replacement else "without replacement", tuple(notes))


def fedavg_symbols(*, lr: float, local_steps: int, server_lr: float, clients_per_round: int,
                   num_clients: int) -> dict[str, dict[str, float | int | bool]]:
    """fedsim's FedAvg / FedProx (μ = 0) settings as the keyword arguments of :func:`theorem_a` and
    :func:`theorem_b` (module docstring: fedsim samples uniformly without replacement and moves the server
    by ``server_lr`` toward the average).  Theorem B's split takes η_c = 1, η_g = ``server_lr``."""
    return {
        "A": {"eta_c": lr, "eta_s": server_lr, "tau": local_steps, "M": clients_per_round, "N": num_clients},
        "B": {"eta": lr, "eta_g": server_lr, "eta_c": 1.0, "tau": local_steps, "n": clients_per_round,
              "m": num_clients, "with_replacement": False},
    }


def equal_weights_condition(samples: Sequence[float]) -> Condition:
    """Whether fedsim's aggregation weights (samples processed per client per round, ``Update.weight``) are
    the theorems' equal weights 1/M: measured is (max − min)/max of the per-client samples, required 0.
    Both theorems average the sampled clients' models with weight 1/M and weight each client 1/N in f."""
    s = [float(x) for x in samples]
    if not s or min(s) < 0 or not all(math.isfinite(x) for x in s):
        raise ValueError("samples must be a non-empty sequence of finite non-negative counts")
    spread = 0.0 if max(s) == 0 else (max(s) - min(s)) / max(s)
    return _le("aggregation weights equal (1/M), as the theorems' update and 1/N objective", spread, 0.0)
