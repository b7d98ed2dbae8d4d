"""Stale Synchronous Parallel (SSP) on a sharded parameter server (papers/002_9b954bd89ad87406.txt
§2.2.3, after Ho et al., NIPS 2013), with the weighted, stale-compensated global update of
papers/003_026f5d1641a0ab17.txt §II.C.

Each spoke has a clock: the rounds of work it did, a round being ``miniBatches``
mini-batches (Ho et al.'s clock counts iterations, not messages). After every round it
pushes its model (shard ``j`` to hub ``j``) with its clock ``c`` and the records ``γ`` it
fitted since its previous push; a spoke that trained on while a push was in flight
advances its clock by every round it did meanwhile, and every push by at least one (a
Query's push without new work too, so a finite stream's last rounds close). A hub keeps
the latest ``(w_i, γ_i)`` of every spoke and the global shard

    w̃ = Σ_i γ_i w_i / Σ_i γ_i                        (papers/003 eq. 2)

so a push replaces the spoke's previous contribution, ``w̃ ← w̃ + γ_i (w_i^new − w_i^old) /
Σγ`` in the paper's §II.C form (its stale-update compensation; here the γ of the new push
replaces the old one). The hub answers the push with ``w̃`` as soon as
``c − min_j c_j ≤ s`` (``s`` = ``staleness``), else it holds the answer until the slowest
spoke catches up: **no spoke proceeds past round c before every spoke has pushed round
c − s**, i.e. no spoke is more than ``s`` rounds ahead of the slowest.

The spoke installs ``w̃`` plus what it learned while the push was in flight; if that work
takes it more than ``s`` rounds past the slowest clock it knows, it pauses until the
answer comes. It pauses on a push (``then_sync``) only when it must: hubs send the
slowest clock with every answer, and a spoke whose new clock is within ``s`` of the
slowest clock it knows continues at once (the hubs are then certain to answer at once).
Hence:

- ``staleness = 0``: every push waits for all spokes' pushes of the same round, all
  answers carry the same ``w̃`` — exactly BSP (:mod:`learning.protocols.synchronous`);
- a staleness larger than the number of rounds: no spoke ever waits, every push is
  answered at once — TAP with the papers/003 §II.C update;
- no bound at all (the class attribute ``bounded = False``): the same for any number of
  rounds, and the bound is neither applied nor reported — that configuration *is* TAP,
  :mod:`learning.protocols.asynchronous`.

A Query is a synchronization point as for BSP: a spoke with no push in flight pushes
what it has (see :mod:`learning.protocols.synchronous` for why a finite stream needs it:
an answer held for the slowest spoke). Without a bound nothing is ever held, and a Query
only reports.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from learning.protocols.parameters import Param, ProtocolParams
from learning.protocols.sharding import ShardedHub, ShardedSpoke, weighted_average
from middleware import Promise, remote

__all__ = ["StaleSynchronousSpoke", "StaleSynchronousHub", "STALENESS", "PARAMETERS",
           "DEFAULT_STALENESS"]

#: ``trainingConfiguration.staleness``: s of the bound ``c − min_j c_j ≤ s`` (rounds)
STALENESS = Param("staleness", int, 2, "s, rounds a spoke may run ahead of the slowest "
                  "(0: BSP)", interval="[0, 100000]")
#: SSP's declaration (:mod:`learning.protocols.parameters`)
PARAMETERS = ProtocolParams(reference="papers/002 §2.2.3, papers/003 §II.C", params=(STALENESS,))
DEFAULT_STALENESS = STALENESS.default


class StaleSynchronousHub(ShardedHub):
    """An SSP shard: latest contribution of every spoke, clocks, held answers.

    Attributes
    ----------
    bounded : bool
        Class attribute. True: a push is answered only within ``staleness`` rounds of the
        slowest spoke. False: staleness is unbounded, every push is answered at once and
        Query reports no ``staleness`` (TAP:
        :class:`~learning.protocols.asynchronous.AsynchronousHub`).
    clocks : dict[int, int]
        Pushes received per spoke.
    max_lead : int
        The largest ``c − min_j c_j`` of any push when it was answered (never > staleness).
    held : int
        Answers that had to wait for the slowest spoke.
    """

    bounded = True

    def __init__(self, request) -> None:
        super().__init__(request)
        self.staleness = STALENESS.of(request.training_configuration)
        self.clocks: dict[int, int] = {}
        self.max_lead = 0
        self.held = 0
        self._latest: dict[int, tuple[Any, dict, int]] = {}
        self._waiting: list[tuple[int, int, Promise]] = []

    def update(self, request) -> None:
        super().update(request)
        self.staleness = STALENESS.of(self.request.training_configuration)
        self._release()

    def min_clock(self) -> int:
        return min(self.clocks.get(i, 0) for i in range(self.n_peers))

    @remote
    def push(self, shard: np.ndarray, layout: dict, records: int, spoke: int, clock: int,
             prep: list | None = None):
        """Spoke ``spoke``'s model shard at its clock ``clock`` (its ``clock``-th push),
        with its preprocessors' statistics since its last push (``prep``, hub 0).

        ``average`` replaces the spoke's previous contribution to the weighted average;
        ``sum`` adds its delta from the shard it was last answered with.

        Returns
        -------
        ``[w̃ shard, layout, slowest clock, preprocessor statistics]`` now, or a Promise
        of it held until ``clock − min_j c_j ≤ staleness``.
        """
        self.clocks[spoke] = max(self.clocks.get(spoke, 0), int(clock))
        self._latest[spoke] = (shard, layout, int(records))
        if self.aggregation == "sum":
            [w_i] = self.align([(shard, layout)])
            self.set_shard(self.sum_of_deltas([w_i], [self.base_of(spoke)]))
        else:
            order = sorted(self._latest)
            vectors = self.align([self._latest[i][:2] for i in order])
            weights = [self._latest[i][2] for i in order]
            if sum(weights) > 0:
                self.set_shard(weighted_average(vectors, weights))
        self.merge_preprocessors(prep)
        self.updates += 1
        self.rounds = self.min_clock()
        self._release()
        if self._within_bound(clock):
            return self._answer_now(spoke, clock)
        p = Promise()
        self.held += 1
        self._waiting.append((spoke, int(clock), p))
        return p

    def _within_bound(self, clock: int) -> bool:
        """Whether a push at ``clock`` may be answered now: ``clock − min_j c_j ≤ staleness``,
        or always when unbounded."""
        return not self.bounded or clock - self.min_clock() <= self.staleness

    def _answer_now(self, spoke: int, clock: int) -> list:
        lead = clock - self.min_clock()
        self.max_lead = max(self.max_lead, lead)
        shard = self.shard()
        self.remember_base(spoke, shard)
        return self.answer(shard, self.min_clock())

    def _release(self) -> None:
        still = []
        for spoke, clock, p in self._waiting:
            if self._within_bound(clock):
                p.fulfil(self._answer_now(spoke, clock))
            else:
                still.append((spoke, clock, p))
        self._waiting = still

    def global_statistics(self) -> dict:
        out = super().global_statistics()
        if self.bounded:
            out["staleness"] = self.staleness
        out.update({"clocks": [self.clocks.get(i, 0) for i in range(self.n_peers)],
                    "maxLead": self.max_lead, "heldAnswers": self.held})
        return out


class StaleSynchronousSpoke(ShardedSpoke):
    """An SSP worker: push every ``miniBatches`` mini-batches; wait only when ahead.

    Attributes
    ----------
    bounded : bool
        Class attribute, as :attr:`StaleSynchronousHub.bounded`. False: never pause, a
        Query only reports, and Query reports no ``clock``, ``slowestKnown``,
        ``waitedPushes`` (TAP: :class:`~learning.protocols.asynchronous.AsynchronousSpoke`).
    """

    peer = StaleSynchronousHub
    bounded = True
    # paused on the push in flight (work past the bound); class defaults for snapshots
    # taken before this existed
    _blocked = False
    _blocked_at = 0.0

    def __init__(self, request) -> None:
        super().__init__(request)
        self.staleness = STALENESS.of(request.training_configuration)
        self.clock = 0
        self.slowest = 0  # the slowest clock the hubs last told us
        self.in_flight = False
        self.waited = 0  # pushes after which this spoke had to pause
        self._since = 0
        self._pushed: tuple[np.ndarray, dict] | None = None

    def on_update(self) -> None:
        super().on_update()
        self.staleness = STALENESS.of(self.request.training_configuration)

    def after_batch(self, n_records: int) -> None:
        self._since += 1
        if self._since >= self.mini_batches and not self.in_flight:
            self._push()
        elif self.in_flight and self.bounded and not self._blocked and \
                self.clock + self._rounds_since() - self.slowest > self.staleness:
            # the work done while the push is in flight has taken this spoke more than
            # ``staleness`` rounds past the slowest clock it knows: wait for the answer
            self._blocked = True
            self._blocked_at = time.monotonic()
            self.ctx.pause_stream()

    def _push(self) -> None:
        # the rounds of work since the last push, at least one. Counting pushes instead
        # made a spoke that never had to wait (it trains on while its push is in flight,
        # several rounds per push) look slowest: on Flink the others paused behind it
        # with their records held, and SSP ran at 184 records/s against BSP's 2,211
        rounds, self._since = max(1, self._rounds_since()), 0
        w, layout = self.vector()
        records, self.records_since_sync = self.records_since_sync, 0
        self.clock += rounds
        self.pushes += 1
        self.in_flight = True
        self._pushed = (w, layout)
        sync = self.bounded and self.clock - self.slowest > self.staleness
        self.waited += sync
        self.scatter("push", w, layout, records, self.ctx.index, self.clock, sync=sync,
                     on_all=self._on_global, prep=self.preprocessor_delta())

    def _rounds_since(self) -> int:
        """Whole rounds of work (``miniBatches`` mini-batches each) since the last push."""
        return self._since // self.mini_batches

    def _unblock(self) -> None:
        if self._blocked:
            self._blocked = False
            self.wait_ms += (time.monotonic() - self._blocked_at) * 1000.0
            self.ctx.resume_stream()

    def _on_global(self, answers: list) -> None:
        self._unblock()
        learner = self.pipeline.learner
        w_global = self.assemble([a[0] for a in answers], [a[1] for a in answers])
        progress = learner.get_params() - self.in_current(self._pushed)
        learner.set_params(w_global + progress)
        self.install_preprocessors(answers[0][-1])
        self.slowest = max(self.slowest, min(int(a[2]) for a in answers))
        self.rounds += 1
        self.in_flight = False
        if self._since >= self.mini_batches:
            self._push()

    def on_sync_failed(self, method: str, errors: list) -> None:
        self._unblock()
        self.in_flight = False

    def on_query(self, request_id: Any, service: dict | None = None) -> None:
        """Fit what is buffered, push unless a push is in flight, then report; unbounded,
        only report (no answer is ever held: no round a finite stream could leave open)."""
        if self.bounded:
            self.flush()
            if not self.in_flight:
                self._push()
        super().on_query(request_id, service)

    def protocol_statistics(self) -> dict:
        out = super().protocol_statistics()
        if self.bounded:
            out.update({"clock": self.clock, "slowestKnown": self.slowest,
                        "waitedPushes": self.waited})
        return out


StaleSynchronousHub.peer = StaleSynchronousSpoke
