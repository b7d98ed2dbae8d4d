"""Functional Dynamic Averaging (FDA) on a sharded parameter server
(papers/002_9b954bd89ad87406.txt ch. 4), monitored with Functional Geometric Monitoring
(§4.0.5; Samoladas & Garofalakis, EDBT 2019).

Rounds. A round starts when every spoke holds the same global model ``w̃_{t0}``; spokes
then train alone, and the round ends only when the Round Termination Condition

    (1/k) Σ_i ‖w_i − w̄‖² ≤ Θ                                   (eq. 4.1, "model variance")

can no longer be guaranteed; then all models are averaged (weighted, papers/003 eq. 2,
:class:`learning.protocols.sharding.AveragingHub`) and broadcast. ``threshold`` is Θ.
With ``Δ_i = w_i − w̃_{t0}`` the variance is ``(1/k)Σ‖Δ_i‖² − ‖Δ̄‖²`` (eq. 4.8), and each
variant reduces the RTC to ``F(S) ≤ Θ`` over the average ``S`` of small local states
``S_i`` (§4.0.4):

- ``naive``:  ``S_i = ‖Δ_i‖²``, ``F(v) = v``;
- ``linear``: ``S_i = (‖Δ_i‖², ξ·Δ_i)``, ``F(v, x) = v − x²``, with ``ξ`` the unit vector
  along ``w̃_{t0} − w̃_{t0−1}``, the difference of the last two global models (zero in the
  first round, where linear behaves as naive);
- ``sketch``: ``S_i = (‖Δ_i‖², sk(Δ_i))`` with an AMS sketch of ``rows × cols`` (``cols =
  ⌈8/ε²⌉``, ``rows = 2⌈ln(1/δ)⌉ + 1`` raised where a binomial tail says that is too few
  for δ (:func:`median_rows`), ``ε = δ = precision``, default 0.25: 5 × 128),
  ``F(v, Ξ) = v − median_j ‖ξ_j‖² / (1 + ε)``; the RTC then holds with probability
  ``1 − δ``. Its hash functions are computed on the fly from seeded polynomials
  (:class:`AmsSketch`), so a sketch costs memory of its own size, not the model's.
  A sketch compresses only a model larger than itself: for a model of at most
  ``rows·cols`` parameters (20 for PA on Shuttle against 640 sketch cells) the state is
  ``(‖Δ_i‖², Δ_i)`` itself, one exact "row" with ``ε = 0`` (:func:`sketch_dims`), so
  ``F`` is the model variance exactly (eq. 4.8) and the state is smaller than the sketch.

Functional geometric monitoring (§4.0.5). Hub 0 is the coordinator. For the current
estimate ``E`` of the global state (``E = 0`` when a round starts) it builds a convex safe
function ``φ`` with ``φ(S) ≤ 0 ⇒ F(S) ≤ Θ`` and ``φ(E) < 0``:

- naive: ``φ(v) = v − Θ``;
- linear: the tangent halfspace of Fig. 4.1, ``φ(v, x) = v − p + 2q(q − x)``, where
  ``(p, q)`` projects ``E`` on ``{v − x² ≥ Θ}`` (a cubic, solved exactly);
- sketch: by composition: each row condition ``v − ‖ξ_j‖²/(1+ε) ≤ Θ`` gets the tangent
  hyperplane of its paraboloid at the projection of ``E`` (Eq. 4.11); with ``I`` the rows
  holding at ``E`` and ``h = (rows+1)/2`` rows needed for the median, ``φ`` is the mean of
  the ``c = |I| − h + 1`` largest row functions, each scaled to −1 at ``E`` (a weighted
  max-c-sum: ``φ ≤ 0`` leaves at most ``c − 1`` of them positive, so at least ``h`` rows
  hold).

Every spoke tracks its drift ``X_i = S_i − R_i`` since the estimate was made and the value
``φ(E + X_i)``; by convexity ``Σ_i φ(E + X_i) ≤ 0`` implies ``φ(S) ≤ 0`` (Eq. 4.10). The
scalar sum is monitored with FGM's quantized counters: with ``θ = −φ(E)/2``, spoke ``i``
sends ``c_i = ⌊(φ(E + X_i) − φ(E))/θ⌋`` to the coordinator whenever it grows (a few
bytes); while ``Σ c_i ≤ k`` the sum is provably ≤ 0. When ``Σ c_i > k`` the coordinator
polls every spoke; the spokes answer with their states ``S_i`` and pause. If
``F(S) > Θ`` (or ``F(S) > (1 − ε_ψ)Θ``, ``ε_ψ = 0.01``: a zone too thin to monitor), the
round ends with a model synchronization; otherwise ``E ← S`` is broadcast, every spoke
builds the same safe function from it (:func:`safe_function` is deterministic, so ``φ``
itself never travels) and monitoring goes on. Sketch-variant states of more than
:data:`SMALL_STATE` floats (AMS sketches, or the exact drift of a model of two parameters
or more) and their ``E`` travel as float32 (the middleware's :class:`middleware.Float32`);
a spoke keeps as ``R_i`` the rounded state it sent, so ``E`` is exactly the mean of the
``R_i``.

FGM subrounds (sketch variant). A sketch state is ``1 + rows·cols`` floats (641 at the
default precision), so before collecting states the coordinator first asks only for the
scalars ``z_i = φ(E + X_i)``: with ``ψ = Σ z_i``, if ``ψ < ε_ψ·k·φ(E)`` the estimate still
has room and a new subround starts with quantum ``θ' = −ψ/(2k)`` and each spoke counting
``c_i = ⌊(φ(E + X_i) − z_i)/θ'⌋`` (again ``Σ c_i ≤ k ⇒ Σ φ ≤ ψ + 2kθ' = 0``); otherwise
the states are polled as above. The exact drift of a model gets the same subrounds
(its one row function is scaled to −1 at ``E`` too): LED's
250-parameter PA model, FDA sketch under ``diversity`` at 0.04, in process with messages
every 500 records (seeds 0–2), polled 57–63 times a run instead of 89–95 and, with
float32 polls, sent 1/11.3–1/12.0 of BSP's bytes instead of 1/6.8–1/7.3, at the same
accuracy (0.7587–0.7592 against 0.7580–0.7584); on Flink (3 runs) 1/13.3 instead of
1/7.7. Small models too: a message's own framing (about 40 bytes of header, the
method's name, a JSON list) is most of what a subround's scalars cost, while a poll of
Hyperplane's 22-parameter model sends 23 floats each way. Subrounds and float32 polls
took FDA sketch there (under ``diversity`` at 0.03, in process with messages every 500
records, seeds 0–2) from 1/8.3 to 1/10.2 of BSP's bytes at the same accuracy (−0.0080 and
−0.0078 against the centralized learner; on Flink, 3 runs, together with responses sent
without their method's name: 1/10.9 at −0.0087 against 1/8.3 at −0.0077), and Phishing's
(20 parameters) from 1/3.4 to 1/3.9; Shuttle's (20 too, and it hardly ever polls) from
1/22.9 to 1/21.3 at its threshold then, 0.04, the subrounds' requests costing more than
the polls they spare. Until then only models of more than 63 parameters had them. For
naive and linear the state is one or two floats (at most :data:`SMALL_STATE`): a poll
costs what a subround costs and tells more, so they always poll (the coordinator learns
which case holds from the last poll's state sizes).

Increments in the job (``waitOnIncrement``, default true). §4.0.5 assumes the coordinator
hears an increment at once; in the Flink job the poll it causes comes back through Kafka
(the feedback loop), and while it travels every spoke trains on past the violation, so
rounds end late, and under PA's ``sum`` rule a late round overshoots. With
``waitOnIncrement`` the spoke that sends an increment waits (``then_sync``) until hub 0
has taken it in; a poll it causes reaches that spoke before the answer. On the in-process
kernel, which delivers every message before the next record, the models are the same
either way (``tests/test_protocols.py``). Measured on Flink (4 spokes, RandomRBF, naive,
Θ 0.02): one-way increments 112 rounds and 0.7808 prequential accuracy, waiting 201
rounds and 0.7974 (the centralized learner: 0.8012), at 70% of the records/s; in
process with messages delivered every 500 records, 0.7395 against 0.7729 (instant:
0.7726) on the first 20,000 records.

Nobody ever waits on a spoke's stream (a waiting increment waits on hub 0, which answers
at once), so a finite stream cannot leave a round open.
"""

from __future__ import annotations

import functools
import math
from collections import deque
from typing import Any

import numpy as np

from learning.protocols.parameters import Param, ProtocolParams
from learning.protocols.sharding import AveragingHub, ShardedSpoke, short_rounds_warning
from middleware import BroadcastPromise, Float32, remote

__all__ = ["FunctionalDynamicAveragingSpoke", "FunctionalDynamicAveragingHub", "AmsSketch",
           "SafeFunction", "safe_function", "FDA_VARIANTS", "EPSILON_PSI", "THRESHOLD", "VARIANT",
           "PRECISION", "PARAMETERS", "MERSENNE_31"]

FDA_VARIANTS = ("naive", "linear", "sketch")
#: a poll that finds F(S) above (1 − EPSILON_PSI)·Θ ends the round
EPSILON_PSI = 0.01

#: a local state of at most this many floats (FDA naive's and linear's, or the sketch
#: variant's exact drift of a one-parameter model) is polled at once and travels as
#: float64; a larger one of the sketch variant (an AMS sketch, or the exact drift of any
#: larger model) is polled only after FGM subrounds (only the scalars ``φ(E + X_i)``
#: travel) and travels as float32 (module docstring, "FGM subrounds": 64 until
#: Hyperplane's 22-parameter model measured otherwise)
SMALL_STATE = 2
#: polls whose decision the coordinator remembers (``decisions``: a Query's warning reads
#: their values; before, every poll of the pipeline's life was kept)
DECISIONS_KEPT = 1000

#: ``trainingConfiguration.threshold``: Θ of the RTC (eq. 4.1); EVENFLOW's T shares it
THRESHOLD = Param("threshold", float, None, "Θ (FDA, model variance, eq. 4.1) or T (EVENFLOW, "
                  "the monitored function) that ends a round", interval="(0, inf)",
                  required=True)
#: ``trainingConfiguration.variant``: the local states S_i and F (§4.0.4)
VARIANT = Param("variant", str, "naive", "the local state S_i and its function F (§4.0.4)",
                choices=FDA_VARIANTS, fixed=True)
#: ``trainingConfiguration.precision``: ε = δ of the AMS sketch
PRECISION = Param("precision", float, 0.25, "ε = δ of the sketch variant's AMS sketch",
                  interval="(0, 1)", fixed=True)
#: ``trainingConfiguration.waitOnIncrement``: a spoke pauses until the coordinator has
#: its counter increment (see the module docstring, "Increments in the job")
WAIT_ON_INCREMENT = Param("waitOnIncrement", bool, True, "a spoke that sends an FGM counter "
                          "increment pauses its stream until hub 0 has taken it in (and "
                          "polled, if that ends the subround): no training past a violation "
                          "while the feedback loop carries the poll; false: §4.0.5's one-way "
                          "increments")
#: FDA's declaration (:mod:`learning.protocols.parameters`)
PARAMETERS = ProtocolParams(reference="papers/002 ch. 4 (eq. 4.1, §4.0.4–4.0.5)",
                            params=(VARIANT, THRESHOLD, PRECISION, WAIT_ON_INCREMENT))


@functools.lru_cache(maxsize=64)
def median_rows(delta: float) -> int:
    """The odd number of sketch rows whose median errs with probability at most ``delta``.

    Each row errs (by more than ``ε‖v‖²``) with probability at most 1/4, independently
    (:class:`AmsSketch`), and the median of ``r`` rows errs only if at least ``(r+1)/2``
    of them do: probability at most ``P[Bin(r, 1/4) ≥ (r+1)/2]``, a binomial tail computed
    exactly (``scipy.stats.binom``). The count is ``2⌈ln(1/δ)⌉ + 1`` (the usual form,
    kept where it suffices so the default shape stays 5 × 128), raised to the smallest odd
    ``r`` whose tail is at most ``δ`` where that form falls short: below ``δ ≈ 0.1`` it
    does (7 rows at ``δ = 0.05`` err with probability 0.071; 11 at ``δ = 0.01``, 0.034).

    Raises
    ------
    ValueError
        ``delta`` not in ``(0, 1)``.

    >>> median_rows(0.25), median_rows(0.05), median_rows(0.01)
    (5, 9, 19)
    """
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    from scipy.stats import binom  # here: the job's import stays light without a sketch

    rows = 2 * math.ceil(math.log(1.0 / delta)) + 1
    while binom.sf((rows + 1) // 2 - 1, rows, 0.25) > delta:
        rows += 2
    return rows


def sketch_shape(precision: float) -> tuple[int, int]:
    """``(rows, cols)`` of the AMS sketch for ``ε = δ = precision``: ``cols = ⌈8/ε²⌉``
    (each row within ``ε‖v‖²`` with probability 3/4) and ``rows`` of
    :func:`median_rows` (the median within it with probability ``1 − δ``)."""
    return median_rows(precision), math.ceil(8.0 / precision ** 2)


def sketch_dims(size: int, precision: float) -> tuple[int, int, float]:
    """``(rows, cols, ε)`` of the sketch variant's state for a model of ``size``
    parameters: the AMS sketch of :func:`sketch_shape`, or, when that would hold at least
    as many numbers as the model, the drift ``Δ_i`` itself (``(1, size, 0.0)``: exact).

    >>> sketch_dims(20, 0.25), sketch_dims(2442, 0.25)
    ((1, 20, 0.0), (5, 128, 0.25))
    """
    rows, cols = sketch_shape(precision)
    if size <= rows * cols:
        return 1, size, 0.0
    return rows, cols, precision


#: the Mersenne prime 2³¹ − 1: the field of the sketch's hash polynomials
MERSENNE_31 = (1 << 31) - 1


class AmsSketch:
    """The AMS sketch ``sk(v)`` (Alon, Matias & Szegedy, "The space complexity of
    approximating the frequency moments", STOC 1996), in the hashed "fast AGMS" form that
    papers/002 §4.0.4 ("Sketch FDA") cites (Cormode & Garofalakis, "Sketching streams
    through the net", VLDB 2005): a ``(rows, cols)`` matrix whose row ``j`` is
    ``ξ_j[b] = Σ_{l: h_j(l) = b} s_j(l) v_l``; linear in ``v``, and ``median_j ‖ξ_j‖²``
    estimates ``‖v‖²``.

    Hashes. Row ``j`` draws a cubic ``q_j(x) = c_0 + c_1 x + c_2 x² + c_3 x³`` over the
    field of ``p = 2³¹ − 1`` (coefficients uniform in ``[0, p)``, from a generator seeded
    by ``seed``); for distinct indices ``l < p`` the values ``q_j(l)`` are 4-wise
    independent and uniform on ``[0, p)`` (Carter & Wegman; Wegman & Carter, JCSS 1981).
    The index's cell ``g = ⌊2·cols·q_j(l) / 2³¹⌋`` gives both the bucket
    ``h_j(l) = g // 2`` and the sign ``s_j(l) = +1`` if ``g`` is even, else −1, so the
    pairs ``(h_j(l), s_j(l))`` are 4-wise independent and uniform on ``[cols] × {±1}`` up
    to a bias below ``2·cols/p``: more than the sketch needs (signs 4-wise, buckets
    pairwise independent), so ``E‖ξ_j‖² = ‖v‖²`` and ``Var ‖ξ_j‖² ≤ 2‖v‖⁴/cols``; rows
    are independent. With ``cols = ⌈8/ε²⌉`` each row errs by more than ``ε‖v‖²`` with
    probability at most 1/4 (Chebyshev), and the median of ``rows`` such rows only if
    half of them do.

    Nothing of size ``size`` is stored: the hashes are computed when sketching, over
    ``chunk`` indices at a time (about ``24·rows·chunk`` bytes of temporaries), as a
    product of the ``rows × 4`` matrix of each chunk's shifted coefficients with the powers
    ``1, t, t², t³ (mod p)`` of the offsets ``t`` in a chunk. The object (pickled into a
    spoke's state) is a few hundred bytes. Every node with the same ``(size, rows, cols,
    seed)`` gets the same hashes, hence sketches that add up; ``chunk`` only changes the
    order of floating-point sums.

    >>> sk = AmsSketch(1000, 3, 16)
    >>> v = np.random.default_rng(0).standard_normal(1000)
    >>> bool(np.allclose(sk(v) + sk(2 * v), sk(3 * v)))
    True
    """

    def __init__(self, size: int, rows: int, cols: int, seed: int = 0,
                 chunk: int = 65536) -> None:
        for name, value, low in (("size", size, 0), ("rows", rows, 1), ("cols", cols, 1),
                                 ("chunk", chunk, 1)):
            if value < low:
                raise ValueError(f"{name} must be >= {low}, got {value}")
        if size >= MERSENNE_31:
            raise ValueError(f"size must be < {MERSENNE_31} (the hash field), got {size}")
        self.size, self.rows, self.cols, self.seed, self.chunk = size, rows, cols, seed, chunk
        rng = np.random.default_rng(seed)
        #: ``coefficients[j] = (c_0, c_1, c_2, c_3)`` of row ``j``'s cubic
        self.coefficients = [[int(c) for c in row]
                             for row in rng.integers(0, MERSENNE_31, size=(rows, 4))]

    def _shifted(self, start: int) -> np.ndarray:
        """``(rows, 4)`` coefficients ``d`` with ``q_j(start + t) = Σ_k d[j, k] t^k (mod p)``."""
        p = MERSENNE_31
        d = np.empty((self.rows, 4), dtype=np.uint64)
        for j, c in enumerate(self.coefficients):
            for k in range(4):
                d[j, k] = sum(math.comb(m, k) * c[m] * pow(start, m - k, p)
                              for m in range(k, 4)) % p
        return d

    @staticmethod
    def _powers(n: int) -> np.ndarray:
        """``(4, n)``: ``t^k mod p`` for ``k < 4`` and ``t < n`` (uint64)."""
        p = np.uint64(MERSENNE_31)
        t = np.arange(n, dtype=np.uint64)
        t2 = t * t % p
        return np.stack([np.ones_like(t), t, t2, t2 * t % p])

    def hashes(self, start: int, stop: int, powers: np.ndarray | None = None) -> np.ndarray:
        """``q_j(l) mod p`` for ``j < rows`` and ``start ≤ l < stop`` (int64, ``(rows,
        stop − start)``); ``powers``: :meth:`_powers` of at least ``stop − start``."""
        n = stop - start
        powers = self._powers(n) if powers is None else powers[:, :n]
        # each product is below p² < 2⁶², so the sum of four stays below 2⁶⁴
        x = self._shifted(start) @ powers
        p = np.uint64(MERSENNE_31)
        x %= p
        return x.view(np.int64)

    def __call__(self, v: np.ndarray) -> np.ndarray:
        v = np.asarray(v, dtype=np.float64)
        if v.shape != (self.size,):
            raise ValueError(f"v must have shape ({self.size},), got {v.shape}")
        rows, cols = self.rows, self.cols
        cells = np.zeros((rows, 2 * cols))
        powers = self._powers(min(self.chunk, self.size))
        for start in range(0, self.size, self.chunk):
            stop = min(start + self.chunk, self.size)
            g = self.hashes(start, stop, powers)
            g *= 2 * cols
            g >>= 31
            for j in range(rows):
                cells[j] += np.bincount(g[j], weights=v[start:stop], minlength=2 * cols)
        cells = cells.reshape(rows, cols, 2)
        return cells[:, :, 0] - cells[:, :, 1]

    @staticmethod
    def estimate(sk: np.ndarray) -> float:
        """``median_j ‖ξ_j‖²``."""
        return float(np.median(np.einsum("ij,ij->i", sk, sk)))


def _project_on_parabola(v0: float, r: float, a: float, theta: float) -> float:
    """``t`` minimizing ``(a t² + Θ − v0)² + (t − r)²``: the point ``(a t² + Θ, t)`` of the
    parabola ``v = a x² + Θ`` nearest to ``(v0, r)``."""
    roots = np.roots([2 * a * a, 0.0, 2 * a * (theta - v0) + 1.0, -r])
    ts = [float(z.real) for z in roots if abs(z.imag) < 1e-9 * max(1.0, abs(z.real))] or \
        [float(roots[np.argmin(np.abs(roots.imag))].real)]
    return min(ts, key=lambda t: (a * t * t + theta - v0) ** 2 + (t - r) ** 2)


class SafeFunction:
    """A convex ``φ`` with ``φ(S) ≤ 0 ⇒ F(S) ≤ Θ`` for one FDA variant, built at an
    estimate ``E`` (papers/002 §4.0.5). States are flat arrays: ``[v]``, ``[v, x]`` or
    ``[v, Ξ.ravel()]``. ``params`` is what the coordinator sends to the spokes."""

    def __init__(self, variant: str, theta: float, params: dict, eps: float = 0.0,
                 rows: int = 0, cols: int = 0) -> None:
        self.variant, self.theta, self.params = variant, theta, params
        self.eps, self.rows, self.cols = eps, rows, cols
        if variant == "sketch":
            self._idx = np.asarray(params["rows"], dtype=int)
            self._p = np.asarray(params["p"], dtype=np.float64)
            self._q = np.asarray(params["q"], dtype=np.float64).reshape(len(self._idx), cols)
            self._scale = np.asarray(params["scale"], dtype=np.float64)
            self._c = int(params["c"])

    def F(self, S: np.ndarray) -> float:
        """The monitored function of the variant (§4.0.4)."""
        if self.variant == "naive":
            return float(S[0])
        if self.variant == "linear":
            return float(S[0] - S[1] ** 2)
        return float(S[0] - AmsSketch.estimate(S[1:].reshape(self.rows, self.cols)) / (1 + self.eps))

    def __call__(self, S: np.ndarray) -> float:
        if self.variant == "naive":
            return float(S[0] - self.theta)
        if self.variant == "linear":
            p, q = self.params["p"], self.params["q"]
            return float(S[0] - p + 2 * q * (q - S[1]))
        xi = S[1:].reshape(self.rows, self.cols)[self._idx]
        a = 1.0 / (1.0 + self.eps)
        rows = S[0] - self._p - 2 * a * np.einsum("ij,ij->i", self._q, xi - self._q)
        top = np.sort(self._scale * rows)[-self._c:]
        return float(top.sum() / self._c)


#: safe-function parameters that let :meth:`SafeFunction.F` be evaluated (F ignores them)
_PROBE = {"naive": {}, "linear": {"p": 0.0, "q": 0.0},
          "sketch": {"rows": [], "p": [], "q": [], "scale": [], "c": 1}}


def _state_size(variant: str, rows: int, cols: int) -> int:
    """Floats in a local state ``S_i`` of the variant."""
    return {"naive": 1, "linear": 2}.get(variant, 1 + rows * cols)


def safe_function(variant: str, theta: float, E: np.ndarray, eps: float = 0.0,
                  rows: int = 0, cols: int = 0) -> SafeFunction | None:
    """The safe function at estimate ``E``; None when ``F(E)`` leaves no room for one
    (``F(E) > (1 − ε_ψ)Θ``, or fewer than half the sketch rows strictly hold).

    >>> phi = safe_function("linear", 1.0, np.array([0.5, 0.5]))
    >>> phi.F(np.array([0.5, 0.5])), round(phi(np.array([0.5, 0.5])), 6) < 0
    (0.25, True)
    """
    if SafeFunction(variant, theta, _PROBE[variant], eps, rows, cols).F(E) > \
            (1.0 - EPSILON_PSI) * theta:
        return None
    if variant == "naive":
        return SafeFunction("naive", theta, {})
    if variant == "linear":
        t = _project_on_parabola(float(E[0]), float(E[1]), 1.0, theta)
        return SafeFunction("linear", theta, {"p": t * t + theta, "q": t})
    a = 1.0 / (1.0 + eps)
    v0, xi0 = float(E[0]), E[1:].reshape(rows, cols)
    keep, ps, qs, scales = [], [], [], []
    for j in range(rows):
        r = float(np.linalg.norm(xi0[j]))
        t = _project_on_parabola(v0, r, a, theta)
        u = xi0[j] / r if r > 0 else np.eye(1, cols).ravel()
        q = t * u
        p = a * t * t + theta
        at_e = v0 - p - 2 * a * float(q @ (xi0[j] - q))
        if at_e < 0:
            keep.append(j)
            ps.append(p)
            qs.append(q)
            scales.append(-1.0 / at_e)
    h = (rows + 1) // 2
    if len(keep) < h:
        return None
    return SafeFunction("sketch", theta, {"rows": keep, "p": np.asarray(ps), "q": np.stack(qs).ravel(),
                                          "scale": np.asarray(scales), "c": len(keep) - h + 1},
                        eps, rows, cols)


class FunctionalDynamicAveragingHub(AveragingHub):
    """A shard of the averaging rounds; hub 0 is also the FGM coordinator.

    Attributes
    ----------
    polls, continued, violations : int
        Coordinator (hub 0): polls of the spokes' states, polls after which monitoring
        went on with a new safe function, polls that ended the round.
    decisions : collections.deque[tuple[int, str, float]]
        ``(round, action, F(S))`` of the last :data:`DECISIONS_KEPT` polls, in order.
    """

    safe_zone_rounds = True

    def __init__(self, request) -> None:
        super().__init__(request)
        values = PARAMETERS.of(request.training_configuration)
        self.variant, self.theta = values["variant"], values["threshold"]
        self.eps = values["precision"]
        self.fda_round = 0
        self.fgm = 0
        self.sub = 0
        self.polls = self.continued = self.violations = self.subrounds = 0
        self.decisions: deque[tuple[int, str, float]] = deque(maxlen=DECISIONS_KEPT)
        self._counts: dict[int, int] = {}
        self._zetas: dict[int, float] = {}
        self._polling = False
        self._states: dict[int, tuple[np.ndarray, int]] = {}
        self._decision: BroadcastPromise | None = None  # the open poll's answer
        # sketch variant: the last poll's states were larger than SMALL_STATE
        self._large = True

    def __setstate__(self, state: dict) -> None:
        """A hub pickled when the open poll's answer was called ``_answer`` (it hid
        :meth:`middleware.node.Node._answer`, which answers every plain return value), or
        when only real sketches got subrounds (``_sketched``)."""
        if "_answer" in state:
            state = dict(state)
            state["_decision"] = state.pop("_answer")
        if "_sketched" in state:
            state = dict(state)
            state["_large"] = state.pop("_sketched")
        super().__setstate__(state)

    def update(self, request) -> None:
        super().update(request)
        self.theta = THRESHOLD.of(self.request.training_configuration)
        self.decisions.clear()  # a Query's warning quotes the polls under this threshold

    @remote
    def increment_waiting(self, round_: int, fgm: int, spoke: int, count: int,
                          sub: int = 0) -> None:
        """:meth:`increment`, answered (None) once taken in: a poll it starts goes out to
        the spokes before the answer (``waitOnIncrement``)."""
        self.increment(round_, fgm, spoke, count, sub)

    @remote(oneway=True)
    def increment(self, round_: int, fgm: int, spoke: int, count: int, sub: int = 0) -> None:
        """Spoke ``spoke``'s FGM counter (cumulative) in subround ``sub`` of estimate
        ``fgm`` of round ``round_``."""
        if (round_, fgm, sub) != (self.fda_round, self.fgm, self.sub) or self._polling:
            return
        self._counts[spoke] = max(self._counts.get(spoke, 0), int(count))
        if sum(self._counts.values()) > self.n_peers:
            self._polling = True
            if self.variant == "sketch" and self._large:
                self._zetas = {}
                self.broadcast.zeta(round_, fgm, sub).then(self._on_zeta)
            else:
                self._poll()

    def _poll(self) -> None:
        self.polls += 1
        self.broadcast.poll(self.fda_round, self.fgm)

    def _on_zeta(self, reply) -> None:
        """One spoke's ``[spoke, φ(E + X_i)]`` (None: it was not in this subround)."""
        if reply is None:
            self._zetas[-1 - len(self._zetas)] = math.nan
        else:
            self._zetas[int(reply[0])] = float(reply[1])
        if len(self._zetas) < self.n_peers:
            return
        psi = sum(self._zetas.values())
        k = self.n_peers
        # every row function of a sketch safe function is scaled to −1 at E, so φ(E) = −1
        if math.isfinite(psi) and psi < -EPSILON_PSI * k:
            self.sub += 1
            self.subrounds += 1
            self._counts = {}
            self._polling = False
            self.broadcast.subround(self.fda_round, self.fgm, self.sub, -psi / (2 * k))
        else:
            self._poll()

    @remote
    def state(self, round_: int, fgm: int, spoke: int, S: np.ndarray, size: int) -> BroadcastPromise:
        """Spoke ``spoke``'s local state for a poll; answered to all once all replied with
        ``{"action": "continue", "E"}`` (the new estimate; float32 for the sketch variant) or
        ``{"action": "sync"}``."""
        if self._decision is None:
            self._decision = BroadcastPromise()
            self._states = {}
        self._states[spoke] = (np.asarray(S, dtype=np.float64), int(size))
        p = self._decision
        if len(self._states) == self.n_peers:
            p.fulfil(self._decide())
            self._decision, self._states = None, {}
        return p

    def _decide(self) -> dict:
        states = [s for s, _ in self._states.values()]
        sizes = {n for _, n in self._states.values()}
        value, phi = math.inf, None
        # sketches of vectors of different sizes (m = 1, growing layouts) do not add up
        if len(sizes) == 1 or self.variant != "sketch":
            rows, cols, eps = (sketch_dims(sizes.pop(), self.eps) if self.variant == "sketch"
                               else (0, 0, 0.0))
            n = _state_size(self.variant, rows, cols)
            self._large = self.variant == "sketch" and n > SMALL_STATE
            if len({s.size for s in states}) == 1 and states[0].size == n:
                S = np.mean(np.stack(states), axis=0)
                if self._large:  # the E the spokes will receive (float32)
                    S = S.astype(np.float32).astype(np.float64)
                # a drift past float64 (a Ridge's statistics on features near ±1e150: the
                # state's ‖Δ‖² is inf) is outside any safe zone: synchronize, where the
                # safe function's algebra raised and the polled spokes' round never ended
                if np.all(np.isfinite(S)):
                    value = SafeFunction(self.variant, self.theta, _PROBE[self.variant], eps,
                                         rows, cols).F(S)
                    phi = safe_function(self.variant, self.theta, S, eps, rows, cols)
        self._counts = {}
        self._polling = False
        self.sub = 0
        if phi is None:
            self.violations += 1
            self.decisions.append((self.fda_round, "sync", value))
            self.fda_round += 1
            self.fgm = 0
            return {"action": "sync"}
        self.continued += 1
        self.decisions.append((self.fda_round, "continue", value))
        self.fgm += 1
        # only E travels: each spoke builds the same φ from it (safe_function is
        # deterministic), which halves what a poll sends back
        return {"action": "continue", "E": Float32(S) if self._large else S}

    def safe_zone_warnings(self, per_round: float | None, rounds: int) -> list[str]:
        values = sorted(v for _, _, v in self.decisions if math.isfinite(v))
        kind = "bound" if self.variant == "naive" else "estimate"
        observed = (f" (F at the polls, the model variance {kind}: median "
                    f"{values[len(values) // 2]:.3g} over the last {len(values)})"
                    if values else "")
        return short_rounds_warning(rounds, per_round, self.theta, observed)

    def global_statistics(self) -> dict:
        out = super().global_statistics()
        out.update({"variant": self.variant, "threshold": self.theta, "polls": self.polls,
                    "subrounds": self.subrounds, "continued": self.continued,
                    "violations": self.violations})
        return out


def _ignore(_value) -> None:
    pass


class FunctionalDynamicAveragingSpoke(ShardedSpoke):
    """An FDA worker: train, keep the local state, send FGM counter increments, answer
    polls, and average when the coordinator ends the round."""

    safe_zone_rounds = True

    peer = FunctionalDynamicAveragingHub
    #: a spoke restored from a snapshot taken before ``waitOnIncrement`` keeps its one-way
    #: increments
    wait_on_increment = False
    #: a poll for a later round or estimate than this spoke's, kept until it gets there
    _pending_poll: tuple[int, int] | None = None

    def __init__(self, request) -> None:
        super().__init__(request)
        values = PARAMETERS.of(request.training_configuration)
        self.variant, self.theta = values["variant"], values["threshold"]
        self.eps, self.wait_on_increment = values["precision"], values["waitOnIncrement"]
        self._sketches: dict[int, AmsSketch] = {}
        self.fda_round = 0
        self.increments = 0
        self.polls_answered = 0
        self._base: tuple[np.ndarray, dict] | None = None  # w̃_{t0}
        self._xi: tuple[np.ndarray, dict] | None = None    # linear: unit ξ
        self._start_monitoring()

    def on_update(self) -> None:
        super().on_update()
        self.theta = THRESHOLD.of(self.request.training_configuration)
        self.wait_on_increment = WAIT_ON_INCREMENT.of(self.request.training_configuration)

    def on_relayout(self) -> None:
        """A new layout: the round's base and ξ were the old model's, the drift starts
        again from the new model. The monitoring stays in the coordinator's round,
        estimate and subround: a state of another size (the sketch's) reads +inf and
        makes the coordinator poll and end the round, as after a model grew."""
        super().on_relayout()
        self._base = self._xi = None

    # -- local state -----------------------------------------------------------------------
    def delta(self) -> np.ndarray:
        """``Δ_i = w_i − w̃_{t0}`` in the learner's current layout."""
        return self.pipeline.learner.get_params() - self.in_current(self._base)

    def local_state(self) -> np.ndarray:
        """``S_i`` of the variant as a flat array (see the module docstring)."""
        d = self.delta()
        v = float(d @ d)
        if self.variant == "naive":
            return np.array([v])
        if self.variant == "linear":
            xi = self.in_current(self._xi)
            return np.array([v, float(xi @ d) if xi.size else 0.0])
        rows, cols, _ = sketch_dims(d.size, self.eps)
        if rows == 1:  # a sketch would not compress: the exact drift
            return np.concatenate([[v], d])
        sk = self._sketches.get(d.size)
        if sk is None:
            sk = self._sketches[d.size] = AmsSketch(d.size, rows, cols)
        return np.concatenate([[v], sk(d).ravel()])

    def dims(self) -> tuple[int, int, float]:
        """``(rows, cols, ε)`` of this spoke's sketch state for its model's current size
        (:func:`sketch_dims`); ``(0, 0, 0.0)`` for naive and linear."""
        if self.variant != "sketch":
            return 0, 0, 0.0
        return sketch_dims(int(self.pipeline.learner.get_params().size), self.eps)

    def _start_monitoring(self, E: np.ndarray | None = None, R: np.ndarray | None = None) -> None:
        """Monitor ``φ`` built at estimate ``E`` (zero: a new round) from reference state
        ``R`` (this spoke's state when ``E`` was made)."""
        rows, cols, eps = self.dims()
        n = _state_size(self.variant, rows, cols)
        self.E = np.zeros(n) if E is None else np.asarray(E, dtype=np.float64)
        self.R = np.zeros(n) if R is None else R
        self.phi = safe_function(self.variant, self.theta, self.E, eps, rows, cols)
        self.zero = self.phi(self.E)
        self.quantum = -self.zero / 2.0
        self.fgm = 0 if E is None else self.fgm + 1
        self.sub = 0
        self.sent = 0
        self.polled = False
        self._in_sync = False
        self._z: float | None = None
        pending, self._pending_poll = self._pending_poll, None
        if pending is not None and pending == (self.fda_round, self.fgm):
            self.poll(*pending)  # it came before this round's model or estimate did
        elif pending is not None and pending > (self.fda_round, self.fgm):
            self._pending_poll = pending

    # -- monitoring ------------------------------------------------------------------------
    def after_batch(self, n_records: int) -> None:
        if self.polled or self._in_sync:
            return
        value = self._value()
        # a model that grew (m = 1, new label) has a state of another size: the coordinator
        # must poll, see the sizes differ and end the round; a count past k + 1 tells the
        # coordinator nothing more (it polls once the counts sum past k), and one of a
        # model whose drift is far past the threshold (a Ridge's statistics on unscaled
        # features: φ 7.5e25 at threshold 1) would not fit in a message's 64-bit integer,
        # or is inf (φ near float64's largest)
        most = self.ctx.n_spokes + 1
        ratio = (value - self.zero) / self.quantum if math.isfinite(value) else math.inf
        count = math.floor(ratio) if ratio < most else most  # inf and NaN: most
        if count > self.sent:
            self.sent = count
            self.increments += 1
            if self.wait_on_increment:
                self.wait_on(self.peers[0].increment_waiting(
                    self.fda_round, self.fgm, self.ctx.index, count, self.sub), _ignore)
            else:
                self.peers[0].increment(self.fda_round, self.fgm, self.ctx.index, count,
                                        self.sub)

    @remote
    def zeta(self, round_: int, fgm: int, sub: int):
        """FGM subround check: ``[spoke, φ(E + X_i)]``, or None when this spoke is not in
        that subround (the coordinator then polls the states)."""
        if (round_, fgm, sub) != (self.fda_round, self.fgm, self.sub) or self.polled \
                or self._in_sync:
            return None
        self._z = self._value()
        if not math.isfinite(self._z):  # the model grew: the coordinator polls
            self._z = None
            return None
        return [self.ctx.index, self._z]

    def _value(self) -> float:
        """``φ(E + X_i)`` with the drift ``X_i = S_i − R_i``; +inf when the state changed
        size since the estimate (the model grew)."""
        S = self.local_state()
        if S.size != self.E.size:
            return math.inf
        return float(self.phi(self.E + S - self.R))

    @remote(oneway=True)
    def subround(self, round_: int, fgm: int, sub: int, quantum: float) -> None:
        """A new subround: count from the value this spoke reported, in steps of ``quantum``."""
        if (round_, fgm) != (self.fda_round, self.fgm) or self.polled or self._z is None:
            return
        self.sub, self.zero, self.quantum, self.sent = sub, self._z, float(quantum), 0

    @remote(oneway=True)
    def poll(self, round_: int, fgm: int) -> None:
        """The coordinator asks for this spoke's local state; the stream pauses until it
        decided. A poll for a later round or estimate than this spoke's is kept and
        answered once it gets there: with several hubs the last hub's answer to the
        previous round (or hub 0's decision) can come after hub 0's poll, and a poll
        dropped then left the coordinator waiting for this spoke's state for good, the
        other spokes paused."""
        if (round_, fgm) > (self.fda_round, self.fgm):
            self._pending_poll = (round_, fgm)
            return
        if (round_, fgm) != (self.fda_round, self.fgm) or self.polled:
            return
        self.polled = True
        self.polls_answered += 1
        S = self.local_state()
        large = self.variant == "sketch" and S.size > SMALL_STATE
        if large:
            # a large state travels as float32, half the bytes of a poll; R_i is what was
            # sent, so E = mean R_i and X_i = S_i − R_i stay exact
            S = S.astype(np.float32).astype(np.float64)
        self._frozen = S
        self.wait_on(self.peers[0].state(round_, fgm, self.ctx.index,
                                         Float32(S) if large else S,
                                         int(self.delta().size)), self._decided)

    def _decided(self, decision: dict) -> None:
        if decision["action"] == "continue":
            # the same φ the coordinator built at E (safe_function is deterministic)
            self._start_monitoring(np.asarray(decision["E"], dtype=np.float64), self._frozen)
            return
        self._in_sync = True
        previous = self._base
        self.sync_models(lambda w: self._new_round(w, previous))

    def _new_round(self, w_global: np.ndarray, previous: tuple | None) -> None:
        learner = self.pipeline.learner
        if self.variant == "linear":
            step = w_global - self.in_current(previous)
            norm = float(np.linalg.norm(step))
            self._xi = (step / norm, learner.layout()) if norm > 0 else None
        self._base = (w_global.copy(), learner.layout())
        self.fda_round += 1
        self._start_monitoring()

    def on_sync_failed(self, method: str, errors: list) -> None:
        if method == "push":  # the round the coordinator ended failed: its next round
            self.fda_round += 1  # begins here as at the coordinator, from this model
        self._start_monitoring()

    def protocol_statistics(self) -> dict:
        out = super().protocol_statistics()
        out.update({"variant": self.variant, "fdaRound": self.fda_round,
                    "increments": self.increments, "pollsAnswered": self.polls_answered})
        return out


FunctionalDynamicAveragingHub.peer = FunctionalDynamicAveragingSpoke
