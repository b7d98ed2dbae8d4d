"""EVENFLOW: data-driven synchronization with local sphere filters, on a sharded parameter
server (papers/003_026f5d1641a0ab17.txt §III).

The application gives a monitored function ``f(w, w^(t))`` and a threshold ``T``
(``monitoredFunction``, ``threshold``); a synchronization is needed only once
``f(w^(t+ϰ+1), w^(t)) > T`` may hold for the (unknown) global model. After every
mini-batch, spoke ``i`` with drift ``Δ_i = w_i − w^(t) = −η Σ_r g_i^(t+r)`` (eq. 4) builds
the sphere

    B(w^(t) + ½Δ_i, ½‖Δ_i‖)                                    (§III.A)

and asks hub 0 for a synchronization when the sphere may reach ``{f > T}``. Hub 0 then
tells every spoke to push; the hubs average (eq. 5, weighted as eq. 2,
:class:`learning.protocols.sharding.AveragingHub`) and broadcast, and a new round starts.
Because the global model is a convex combination of the ``w^(t) + Δ_i`` (eq. 6), it lies in
the union of the spheres: while no sphere leaves ``{f ≤ T}``, ``f(w̄) ≤ T`` holds.

Monitored functions, with the sphere test ``max_{x ∈ B} f(x) > T`` (the minimum is ≤ T
since ``w^(t)`` lies on every sphere and ``f(w^(t), w^(t)) = 0``):

- ``l2``: ``f = ‖w − w^(t)‖²``; the farthest point of the sphere from ``w^(t)`` is at
  distance ``‖Δ_i‖``, so the test is exact: ``‖Δ_i‖² > T``.
- ``kl``: the paper's setting (§IV: "the monitored function … is KL-divergence, while the
  threshold T is set to 0.3"), here ``f = KL(softmax(w^(t)) ‖ softmax(w))`` over the flat
  parameter vector (the paper does not say which distributions; this is the one defined
  by the vectors alone). ``f`` is convex in ``w`` with gradient ``softmax(w) − p`` (norm ≤
  √2) and Hessian ``⪯ ½ I``, so over a sphere of centre ``c`` and radius ``r``:
  ``max f ≤ f(c) + min(√2 r, ‖∇f(c)‖ r + r²/4)``; the test uses this bound
  (conservative: it may ask for a synchronization a little early, never late).

Variants (``variant``):

- ``basic``: the sphere in the full d-dimensional space (§III.A);
- ``fast``: the sphere built from the top-``m`` coefficients (``coefficients``, default 50)
  of the orthonormal DFT of ``Δ_i`` (numpy's FFT with ``norm="ortho"``, so norms are kept,
  Parseval), ``B(½Δ̂_m, ½‖Δ̂_m‖)`` in the transformed problem (§III.B). For ``l2`` the test
  is ``‖Δ̂_m‖² > T`` in the m-dimensional space; for ``kl`` the sphere is mapped back
  (centre ``w^(t) + ½ Re IDFT(Δ̂_m)``). The radius it uses errs by at most Lemma 1's bound

      | ½‖Δ_i‖ − ½‖Δ̂_m‖ | ≤ ½ √((ϰ+1)(1 − m/d)) · √(Σ_r ‖η g_i^(t+r)‖²)

  which every spoke checks at every test and reports (``lemma1Violations`` must stay 0,
  ``lemma1MaxRatio`` ≤ 1). The paper writes the last factor as ``‖g_i^(t+r)‖``; its own
  proof (Jensen, Ineq. 8) gives the root of the summed squared norms of the ϰ+1 updates,
  and with the largest single update norm instead the bound fails for aligned updates
  (``tests/test_protocols.py`` shows both).

Nobody waits on a spoke's stream except during a synchronization, which every spoke joins
through the message path: a finite stream cannot leave a round open.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from learning.protocols.fda import THRESHOLD
from learning.protocols.parameters import Param, ProtocolParams
from learning.protocols.sharding import AveragingHub, ShardedSpoke
from middleware import remote

__all__ = ["EvenFlowSpoke", "EvenFlowHub", "EVENFLOW_VARIANTS", "MONITORED_FUNCTIONS", "VARIANT",
           "COEFFICIENTS", "MONITORED_FUNCTION", "PARAMETERS",
           "top_dft", "lemma1_bound", "kl_divergence", "kl_sphere_max"]

EVENFLOW_VARIANTS = ("basic", "fast")
MONITORED_FUNCTIONS = ("l2", "kl")

#: ``trainingConfiguration.variant``: the sphere of §III.A or of §III.B
VARIANT = Param("variant", str, "basic", "basic: the sphere in the full space (§III.A); fast: "
                "from the top-m DFT coefficients (§III.B)", choices=EVENFLOW_VARIANTS)
#: ``trainingConfiguration.coefficients``: m of §III.B
COEFFICIENTS = Param("coefficients", int, 50, "m, the DFT coefficients the fast variant keeps "
                     "(top-m, §III.B)", interval="[1, 10000000]")
#: ``trainingConfiguration.monitoredFunction``: f of §III
MONITORED_FUNCTION = Param("monitoredFunction", str, "l2", "f: l2, the squared L2 distance to "
                           "the last global model, or kl, KL divergence of the softmaxes (§IV)",
                           choices=MONITORED_FUNCTIONS)
#: EVENFLOW's declaration (:mod:`learning.protocols.parameters`); ``threshold`` is T
PARAMETERS = ProtocolParams(reference="papers/003 §III",
                            params=(VARIANT, THRESHOLD, COEFFICIENTS, MONITORED_FUNCTION))


def top_dft(v: np.ndarray, m: int) -> np.ndarray:
    """The orthonormal DFT of ``v`` with all but its ``m`` largest-magnitude coefficients
    set to zero: (d,) complex128 (``‖top_dft(v, d)‖ = ‖v‖``, Parseval)."""
    V = np.fft.fft(np.asarray(v, dtype=np.float64), norm="ortho")
    if m >= V.size:
        return V
    out = np.zeros_like(V)
    keep = np.argpartition(np.abs(V), V.size - m)[V.size - m:]
    out[keep] = V[keep]
    return out


def lemma1_bound(update_sq_norms: list[float] | np.ndarray, m: int, d: int) -> float:
    """Lemma 1 of papers/003 (§III.B) for the radius ½‖Σ_r u_r‖ with ``u_r = −η g^(t+r)``:
    ``½ √((ϰ+1)(1 − m/d)) √(Σ_r ‖u_r‖²)``, ``ϰ+1 = len(update_sq_norms)``."""
    n = len(update_sq_norms)
    if d <= 0 or n == 0:
        return 0.0
    return 0.5 * math.sqrt(n * max(0.0, 1.0 - m / d)) * math.sqrt(float(np.sum(update_sq_norms)))


def _log_softmax(w: np.ndarray) -> np.ndarray:
    z = w - np.max(w)
    return z - math.log(float(np.exp(z).sum()))


def kl_divergence(w_ref: np.ndarray, w: np.ndarray) -> float:
    """``KL(softmax(w_ref) ‖ softmax(w))`` (nats); 0 for empty vectors."""
    if w.size == 0:
        return 0.0
    lp, lq = _log_softmax(w_ref), _log_softmax(w)
    return float(np.exp(lp) @ (lp - lq))


def kl_sphere_max(w_ref: np.ndarray, centre: np.ndarray, radius: float) -> float:
    """An upper bound of ``KL(softmax(w_ref) ‖ softmax(x))`` over ``‖x − centre‖ ≤ radius``:
    ``f(c) + min(√2 r, ‖∇f(c)‖ r + r²/4)`` (see the module docstring)."""
    if centre.size == 0:
        return 0.0
    f_c = kl_divergence(w_ref, centre)
    grad = np.exp(_log_softmax(centre)) - np.exp(_log_softmax(w_ref))
    return f_c + min(math.sqrt(2.0) * radius, float(np.linalg.norm(grad)) * radius + radius ** 2 / 4)


class EvenFlowHub(AveragingHub):
    """A shard of the averaging rounds; hub 0 also turns a spoke's request into a
    synchronization of all (``violation`` → ``begin_sync`` to every spoke).

    Attributes
    ----------
    requests : int
        Synchronization requests received (hub 0), duplicates of a round included.
    """

    def __init__(self, request) -> None:
        super().__init__(request)
        values = PARAMETERS.of(request.training_configuration)
        self.variant, self.function = values["variant"], values["monitoredFunction"]
        self.threshold = values["threshold"]
        self.ev_round = 0
        self.requests = 0
        self._syncing = False

    @remote(oneway=True)
    def violation(self, round_: int, spoke: int) -> None:
        """Spoke ``spoke``'s sphere may leave ``{f ≤ T}`` in round ``round_``."""
        self.requests += 1
        if round_ == self.ev_round and not self._syncing:
            self._syncing = True
            self.broadcast.begin_sync(round_)

    def on_round_end(self, w: np.ndarray) -> None:
        self.ev_round += 1
        self._syncing = False

    def global_statistics(self) -> dict:
        out = super().global_statistics()
        out.update({"variant": self.variant, "monitoredFunction": self.function,
                    "threshold": self.threshold, "syncRequests": self.requests})
        return out




class EvenFlowSpoke(ShardedSpoke):
    """An EVENFLOW worker: test the local sphere after every mini-batch, ask for a
    synchronization when it may leave ``{f ≤ T}``, push when hub 0 says so."""

    peer = EvenFlowHub

    def __init__(self, request) -> None:
        super().__init__(request)
        values = PARAMETERS.of(request.training_configuration)
        self.variant, self.function = values["variant"], values["monitoredFunction"]
        self.threshold, self.coefficients = values["threshold"], values["coefficients"]
        self.ev_round = 0
        self.requested = False
        self.in_sync = False
        self.tests = self.requests = 0
        self.lemma1_checks = self.lemma1_violations = 0
        self.lemma1_max_ratio = 0.0
        self.last_value = 0.0
        self._base: tuple[np.ndarray, dict] | None = None   # w^(t)
        self._prev: tuple[np.ndarray, dict] | None = None   # w before the last mini-batch
        self._update_sq: list[float] = []                   # ‖u_r‖², r = 0..ϰ

    def on_update(self) -> None:
        super().on_update()
        self.threshold = THRESHOLD.of(self.request.training_configuration)

    def sphere_max(self) -> float:
        """The largest value ``f`` can take on this spoke's sphere (an upper bound for
        ``kl``), as the variant computes it; also checks Lemma 1 in the fast variant."""
        learner = self.pipeline.learner
        w = learner.get_params()
        w_t = self.in_current(self._base)
        delta = w - w_t
        if self.variant == "basic":
            if self.function == "l2":
                return float(delta @ delta)
            return kl_sphere_max(w_t, w_t + 0.5 * delta, 0.5 * float(np.linalg.norm(delta)))
        D = top_dft(delta, self.coefficients)
        norm_m = float(np.linalg.norm(D))
        self._check_lemma1(float(np.linalg.norm(delta)), norm_m, delta.size)
        if self.function == "l2":
            return norm_m ** 2
        approx = np.fft.ifft(D, norm="ortho").real
        return kl_sphere_max(w_t, w_t + 0.5 * approx, 0.5 * norm_m)

    def _check_lemma1(self, norm: float, norm_m: float, d: int) -> None:
        err = 0.5 * abs(norm - norm_m)
        bound = lemma1_bound(self._update_sq, self.coefficients, d)
        self.lemma1_checks += 1
        if err > bound + 1e-12 * max(1.0, norm):
            self.lemma1_violations += 1
        if bound > 0:
            self.lemma1_max_ratio = max(self.lemma1_max_ratio, err / bound)

    def after_batch(self, n_records: int) -> None:
        w = self.pipeline.learner.get_params()
        u = w - self.in_current(self._prev)
        self._update_sq.append(float(u @ u))
        self._prev = (w, self.pipeline.learner.layout())
        if self.requested or self.in_sync:
            return
        self.tests += 1
        self.last_value = self.sphere_max()
        if self.last_value > self.threshold:
            self.requested = True
            self.requests += 1
            self.peers[0].violation(self.ev_round, self.ctx.index)

    @remote(oneway=True)
    def begin_sync(self, round_: int) -> None:
        """Hub 0 ends round ``round_``: push and wait for the average."""
        if round_ != self.ev_round or self.in_sync:
            return
        self.in_sync = True
        self.sync_models(self._new_round)

    def _new_round(self, w_global: np.ndarray) -> None:
        layout = self.pipeline.learner.layout()
        self._base = (w_global.copy(), layout)
        self._prev = (w_global.copy(), layout)
        self._update_sq = []
        self.ev_round += 1
        self.requested = self.in_sync = False

    def on_sync_failed(self, method: str, errors: list) -> None:
        self.requested = self.in_sync = False

    def protocol_statistics(self) -> dict:
        out = super().protocol_statistics()
        out.update({"variant": self.variant, "monitoredFunction": self.function,
                    "sphereTests": self.tests, "syncRequests": self.requests,
                    "lastSphereMax": self.last_value, "lemma1Checks": self.lemma1_checks,
                    "lemma1Violations": self.lemma1_violations,
                    "lemma1MaxRatio": self.lemma1_max_ratio})
        return out


EvenFlowHub.peer = EvenFlowSpoke
