"""Asynchronous Elastic Averaging (EASGD) on a sharded parameter server
(papers/002_9b954bd89ad87406.txt §2.2.4, after Zhang, Choromanska, LeCun, NIPS 2015;
papers/004_3662ede9dd93cf62.txt §2.3).

After every ``miniBatches`` mini-batches a spoke sends its model ``w_i`` (shard ``j`` to
hub ``j``) and keeps training. The hub computes the elastic force against its centre
variable ``w̃`` and moves by it; the spoke moves by the same amount the other way when
the answer comes back (papers/004 §2.3, with papers/002's force ``F = ρ(w_i − w̃)``):

    F = ρ (w_i − w̃)
    w̃   ← w̃   + α F          (hub, at once)
    w_i ← w_i − α F          (spoke, on the answer; what it learned meanwhile is kept)

What it learned meanwhile is kept by refitting those mini-batches on ``w_i − α F`` (``w_i``
the model it sent; ``replay``, :mod:`learning.protocols.sharding`, "Replay"), or with
``replay: false`` by subtracting the step from the model it has now.

``alpha`` (α, the moving rate, default 0.25) and ``rho`` (ρ, the elastic coefficient,
default 1) only act through their product, which must lie in (0, 1]; papers/004 writes the
rule with ρ = 1, papers/002 with α = 1, Zhang et al. with α = ηρ. One exchange per spoke is
in flight at a time; nobody waits, so a finite stream cannot leave anyone blocked.

Under ``sum`` (PA's default rule) the centre moves by the spoke's delta from the centre it
was last moved onto, whatever α: the exchange is then TAP's push
(:mod:`learning.protocols.asynchronous`), and a late delta is damped as TAP's is:
``stalenessDamping`` = p scales it by ``τ^−p``, τ the other spokes' exchanges applied since
(:class:`learning.protocols.ssp.StaleDeltaHub`; Zhang et al.'s η/τ at p = 1). A Query
reports ``stalenessDamping`` and ``updateStaleness`` (p50, p95, max of τ).

Warm-up (``warmupRounds`` R, 20 by default; 0: none, the papers' EASGD), as TAP's
(:mod:`learning.protocols.asynchronous`, "Warm-up"): a spoke's first R rounds of
``miniBatches`` mini-batches are SSP's pushes at staleness 0 (the hubs hold the answer to
a push until no other active spoke is behind it, and the spoke pauses for it; the global
model is the pushes' weighted average under ``average``, their damped deltas under
``sum``), and its exchanges begin at round R. The asynchronous protocols lose most while
the model still moves most (docs/quality.md, "pass by pass"); the hub and the spoke are
TAP's, with the exchange added, so the warm-up is TAP's own code. A Query reports TAP's
``clocks``, ``maxLead``, ``heldAnswers`` and ``recordsPerPush`` of the warm-up's pushes,
and, on each spoke, the round trips of pushes and exchanges alike (``roundTripMsP50``,
``roundTripMsP95``, ``globalsReceived``: answers received).
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque

import numpy as np

from learning.protocols.asynchronous import WARMUP_ROUNDS, AsynchronousHub, AsynchronousSpoke
from learning.protocols.parameters import Param, ProtocolParams, Rule
from learning.protocols.sharding import ADDS_DELTAS
from learning.protocols.ssp import REPLAY, STALENESS_DAMPING
from middleware import remote

__all__ = ["ElasticAveragingSpoke", "ElasticAveragingHub", "ALPHA", "RHO", "PARAMETERS",
           "elastic_rate"]

#: ``trainingConfiguration.alpha``: α of the module docstring
ALPHA = Param("alpha", float, 0.25, "α, the moving rate of the elastic step",
              interval="(0, 1]")
#: ``trainingConfiguration.rho``: ρ of the module docstring
RHO = Param("rho", float, 1.0, "ρ, the elastic coefficient", interval="(0, inf)")
#: EASGD's and Adaptive's ``stalenessDamping`` under ``sum``
#: (:data:`learning.protocols.ssp.STALENESS_DAMPING`), 0.35 as TAP's, chosen by measurement.
#: With ``replay`` (PA, 4 spokes, Flink, three runs each, 2026-11-29, prequential accuracy):
#: digits-PA EASGD 0.9409 at 0.35 against 0.9399 at 0.5 (0.9367 at 0.5 without replay),
#: Adaptive 0.9432 against 0.9423 (0.9413); RandomRBF EASGD 0.7927 against 0.7918 (0.7908),
#: Adaptive at 0.5 0.7924 (0.7916). Before replay
#: (PA, 4 spokes, Flink, three runs of each, 2026-11-28, Δ vs the centralized learner): on
#: digits-PA EASGD −0.0284 at 0.5 against −0.0356 at 0 and −0.0290 at 1, Adaptive (its
#: lossThreshold 20) −0.0231 against −0.0364 at 0, −0.0257 at 0.75 and −0.0281 at 1; on
#: RandomRBF EASGD −0.0121 against −0.0271 at 0
STALENESS_DAMPING_EASGD = dataclasses.replace(STALENESS_DAMPING, default=0.35)
#: EASGD's declaration (:mod:`learning.protocols.parameters`)
PARAMETERS = ProtocolParams(
    reference="papers/002 §2.2.4, papers/004 §2.3",
    params=(ALPHA, RHO, STALENESS_DAMPING_EASGD, REPLAY, WARMUP_ROUNDS),
    rules=(Rule(("alpha", "rho"), "alpha * rho <= 1", lambda a, r: a * r <= 1,
                "the elastic step would overshoot"),))


def elastic_rate(cfg: dict) -> float:
    """``alpha · rho`` of a training configuration (:data:`PARAMETERS`; defaults 0.25, 1).

    Raises
    ------
    learning.errors.RequestError
        ``schema`` (field ``trainingConfiguration.alpha`` or ``.rho``) for a value out of
        its interval or a product above 1.
    """
    values = PARAMETERS.of(cfg)
    return values["alpha"] * values["rho"]


class ElasticAveragingHub(AsynchronousHub):
    """The centre variable's shard: ``exchange`` applies and returns the elastic step;
    TAP's ``push`` serves the warm-up (module docstring, "Warm-up")."""

    damping_param = STALENESS_DAMPING_EASGD

    def __init__(self, request) -> None:
        super().__init__(request)
        self.rate = elastic_rate(request.training_configuration)

    def __setstate__(self, state: dict) -> None:
        """A hub pickled before EASGD had a warm-up (it was no SSP hub) gets the state of
        one whose spokes never pushed."""
        super().__setstate__(state)
        if "clocks" not in state:
            self.staleness, self.clocks, self.max_lead, self.held = 0, {}, 0, 0
            self._latest, self._waiting = {}, []

    def update(self, request) -> None:
        super().update(request)
        self.rate = elastic_rate(self.request.training_configuration)

    @remote
    def exchange(self, shard: np.ndarray, layout: dict, spoke: int = -1,
                 prep: list | None = None) -> list:
        """One exchange with spoke ``spoke``'s model shard ``w_i`` (and, on hub 0, its
        preprocessors' statistics since its last exchange).

        ``average``: the elastic step ``α F`` of the module docstring. ``sum`` (and
        ``diversity``): the centre moves by the spoke's delta from the shard it was last
        answered with, ``w̃ ← w̃ + (w_i − base_i)``, and the spoke is moved onto the new
        centre (its step is ``w_i − w̃``; what it learned meanwhile is kept).

        Returns
        -------
        ``[step shard, layout, preprocessor statistics]``: the spoke subtracts the step.
        """
        [w_sent] = self.align([(shard, layout)])
        [w_i] = self.matched([w_sent])  # the spoke's units in the centre's order
        centre = self.shard()
        missed = self.missed_updates(spoke)
        self.note_missed(missed)
        if self.aggregation in ADDS_DELTAS:
            base = self.base_of(spoke)
            centre = self.sum_of_deltas([self.damped(w_i, base, missed)], [base])
            step = w_i - centre
            self.set_shard(centre)
        else:
            step = self.rate * (w_i - centre)
            self.set_shard(centre + step)
        # what the spoke is moved to (before what it learned meanwhile): the base of its
        # next delta, kept under either rule so that an Update may switch rules
        self.remember_base(spoke, w_i - step)
        self.merge_preprocessors(prep)
        self.updates += 1
        self.rounds += 1
        self.note_answered(spoke)
        # the spoke subtracts the step from the model it sent: with its units reordered
        # (k-means' clusters, matched to the centre's) it ends in the centre's order
        return self.answer(step if w_i is w_sent else step + (w_sent - w_i))


class ElasticAveragingSpoke(AsynchronousSpoke):
    """An asynchronous EASGD worker: exchange every ``miniBatches`` mini-batches, after the
    warm-up's pushes (module docstring)."""

    peer = ElasticAveragingHub
    # the model sent with the exchange in flight; a class default for snapshots taken
    # before it was kept
    _pushed: tuple[np.ndarray, dict] | None = None

    def __init__(self, request) -> None:
        super().__init__(request)
        elastic_rate(request.training_configuration)  # refuse bad values at Create

    def __setstate__(self, state: dict) -> None:
        """A spoke pickled before EASGD had a warm-up (it was no SSP spoke) gets the
        state of one that never pushed."""
        super().__setstate__(state)
        if "clock" not in state:
            self.staleness, self.clock, self.slowest, self.waited = 0, 0, 0, 0
            self.globals_received, self._last_global, self._pushed_at = 0, None, 0.0
            self.round_trips_ms = deque(maxlen=1000)

    def after_batch(self, n_records: int) -> None:
        if self.bounded:  # the warm-up: SSP's push at staleness 0
            super().after_batch(n_records)
            return
        self._since += 1
        if not self.in_flight and self.due():
            self.exchange()

    def _push(self, idle: bool = False) -> None:
        """A push of the warm-up (or an idle one, at a lull in it); past the warm-up, an
        exchange if one is due (SSP's answer asks for the next push)."""
        if self.bounded or idle:
            super()._push(idle)
        elif self.due():
            self.exchange()

    def due(self) -> bool:
        """Whether it is time for an exchange (subclasses change the rule)."""
        return self._since >= self.mini_batches

    def exchange(self) -> None:
        self._since = 0
        w, layout = self.vector()
        self.records_since_sync = 0
        self.pushes += 1
        self.in_flight = True
        self._pushed = (w, layout)
        self._pushed_at = time.monotonic()
        self.take_off()
        self.on_exchange()
        self.scatter("exchange", w, layout, self.ctx.index, sync=False, on_all=self._on_step,
                     prep=self.preprocessor_delta())

    def on_exchange(self) -> None:
        """Hook: an exchange is being sent."""

    def _on_step(self, answers: list) -> None:
        learner = self.pipeline.learner
        step = self.assemble([a[0] for a in answers], [a[1] for a in answers])
        self.globals_received += 1
        self.round_trips_ms.append((time.monotonic() - self._pushed_at) * 1000.0)
        self.install_preprocessors(answers[0][-1])  # first: a replay scales with them
        # replay: from where the step moves the model sent (the hub's view of this spoke)
        self.land(lambda: self.in_current(self._pushed) - step,
                  lambda: learner.get_params() - step)
        self.rounds += 1
        self.in_flight = False
        if self.due():
            self.exchange()


ElasticAveragingHub.peer = ElasticAveragingSpoke
