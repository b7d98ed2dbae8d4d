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

The spoke installs ``w̃`` and refits on it the mini-batches it fitted while the push was
in flight (``replay``, :mod:`learning.protocols.sharding`, "Replay"; ``replay: false``:
``w̃`` plus the move they made); if that work
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

Idle spokes. A spoke that has fitted nothing since the previous Query when a Query comes
(its records ran out: the end of a finite stream, or a share that gets no records) pushes
as **idle**: the hubs leave it out of the slowest clock until it pushes work again, so the
spokes that still have records run on (within ``s`` of each other) instead of one round
per Query. An idle spoke is not stale: it fits nothing, and its model is the global one it
was answered with. With records again it pushes after its first mini-batch, and the hubs
put its clock at the slowest active one (``max(c, min_j c_j)`` over the others), so the
bound holds again from the answer on; the answer carries the clock, which the spoke
adopts. Ho et al. count iterations of workers that all have work; a worker with none
holds nobody back. Before this, a spoke that had run 5× the records of two others ended a
finite stream with 1,704 records held, fitted 4 per Query: 426 Queries; now two (the
first finds the others' last records, the second finds them idle). A spoke that merely
pushed just before a Query is not idle: it must have fitted nothing for a whole interval
between Queries.

Stale deltas. Under the ``sum`` rule (and ``diversity``, which adds a lone push as ``sum``
does) a push moves ``w̃`` by the spoke's delta from the shard it was last answered with;
when other spokes' updates were applied meanwhile (τ of them, ``updateStaleness``), that
delta partly corrects what they already corrected, and the sum overshoots.
``stalenessDamping`` = p scales the delta by ``max(1, τ)^−p`` before it is added
(:func:`damping_factor`): p = 1 is Zhang et al.'s staleness-dependent learning rate η/τ
(Staleness-aware Async-SGD, IJCAI 2016, cited by papers/002 §2.2.2), p = 0 leaves the
delta as it is. Under ``average`` a push replaces the spoke's earlier contribution and
nothing accumulates: p changes nothing, and Query reports 0. The hub's side of this is
:class:`StaleDeltaHub`, which EASGD's and Adaptive's hubs share: under ``sum`` their
exchange is the same push.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import numpy as np

from learning.protocols.parameters import Param, ProtocolParams
from learning.protocols.sharding import ADDS_DELTAS, ShardedHub, ShardedSpoke, weighted_average
from middleware import Promise, remote

__all__ = ["StaleSynchronousSpoke", "StaleSynchronousHub", "StaleDeltaHub", "STALENESS",
           "STALENESS_DAMPING", "REPLAY", "PARAMETERS", "DEFAULT_STALENESS", "damping_factor"]

#: ``trainingConfiguration.staleness``: s of the bound ``c − min_j c_j ≤ s`` (rounds)
STALENESS = Param("staleness", int, 2, "s, rounds a spoke may run ahead of the slowest "
                  "(0: BSP)", interval="[0, 100000]")
#: ``trainingConfiguration.stalenessDamping``: p of the factor τ^−p that scales a push's
#: delta under the ``sum`` rule (module docstring, "Stale deltas"); SSP's default 0, none
STALENESS_DAMPING = Param(
    "stalenessDamping", float, 0.0, "p: under aggregation sum a push's delta is scaled by "
    "τ^−p, τ the other spokes' updates it missed (Zhang et al. 2016: 1; 0: not scaled; "
    "Ridge: 0 unless named)",
    interval="[0, 1]")
#: ``trainingConfiguration.replay`` (:mod:`learning.protocols.sharding`, "Replay"), on by
#: default for SSP, TAP, EASGD and Adaptive (PA, 4 spokes, Flink, three runs each,
#: 2026-11-29): SSP on RandomRBF 0.7981 against 0.7967 without, on digits-PA 0.9532
#: against 0.9531
REPLAY = Param("replay", bool, True, "refit the mini-batches fitted while a push was in "
               "flight on the model its answer brings (false: add the move they made on the "
               "older model)")
#: SSP's declaration (:mod:`learning.protocols.parameters`)
PARAMETERS = ProtocolParams(reference="papers/002 §2.2.3, papers/003 §II.C",
                            params=(STALENESS, STALENESS_DAMPING, REPLAY))
DEFAULT_STALENESS = STALENESS.default


def damping_factor(missed: int | None, p: float) -> float:
    """``max(1, τ)^−p``: the factor of a push's delta that missed ``missed`` = τ updates
    (a spoke's first push, None: 1.0). p = 1 is Zhang et al.'s learning rate η/τ
    (Staleness-aware Async-SGD, IJCAI 2016, §3; cited by papers/002 §2.2.2)."""
    if missed is None or p == 0:
        return 1.0
    return float(max(1, missed)) ** -p


class StaleDeltaHub:
    """The hub's side of stale deltas (module docstring, "Stale deltas"), mixed into a
    :class:`~learning.protocols.sharding.ShardedHub` whose spokes push one at a time (SSP,
    TAP, EASGD, Adaptive): per spoke the hub's update count when it was last answered, the
    staleness τ of the last pushes, and the damping ``τ^−p`` of a delta under ``sum``.

    Attributes
    ----------
    damping : float
        ``stalenessDamping`` = p: under ``sum`` (and ``diversity``) a push's delta is scaled
        by τ^−p; read with :attr:`damping_param`, whose default each protocol sets.
    update_staleness : collections.deque[int] or None
        Per push, idle ones left out (the last 10,000): the updates of this shard the
        pushing spoke had not seen, i.e. the other spokes' pushes applied since it was last
        answered (Zhang et al.'s staleness τ of a gradient, IJCAI 2016, cited by papers/002
        §2.2.2; 0 for a spoke alone; a spoke's first push is not counted). Query reports
        p50, p95 and the largest as ``updateStaleness``. None until the first push.
    """

    #: the declaration ``stalenessDamping`` is read with (TAP's has another default)
    damping_param = STALENESS_DAMPING
    damping = 0.0
    # per-spoke update count at its last answer, and the staleness of the last pushes;
    # class defaults for snapshots taken before they existed
    _answered_at: dict | None = None
    update_staleness: deque | None = None

    def read_damping(self) -> None:
        """(Re)read ``stalenessDamping`` from the training configuration; 0 unless named
        for a learner whose deltas are sums over records (``learner.additive``: a damped
        delta would drop part of the records it sums)."""
        cfg = self.request.training_configuration
        self.damping = (0.0 if self.learner.additive and self.damping_param.name not in cfg
                        else self.damping_param.of(cfg))

    def missed_updates(self, spoke: int) -> int | None:
        """The updates of this shard spoke ``spoke`` has not seen: the pushes applied since
        it was last answered (every spoke's, its own previous one excluded); None before its
        first answer."""
        answered = (self._answered_at or {}).get(spoke)
        return None if answered is None else self.updates - answered

    def note_missed(self, missed: int | None) -> None:
        """Record the updates a push missed (nothing for a spoke's first)."""
        if self.update_staleness is None:
            self.update_staleness = deque(maxlen=10_000)
        if missed is not None:
            self.update_staleness.append(missed)

    def damped(self, w_i: np.ndarray, base: np.ndarray, missed: int | None) -> np.ndarray:
        """``base + τ^−p (w_i − base)``: a push's shard with its delta from ``base`` (the
        shard the spoke was last answered with) scaled for the ``missed`` = τ updates it
        had not seen; ``w_i`` itself when p = 0. Arrays ``(shard size,)`` float64."""
        if not self.damping:
            return w_i
        return base + damping_factor(missed, self.damping) * (w_i - base)

    def note_answered(self, spoke: int) -> None:
        """Spoke ``spoke`` is answered now: its next push misses what is applied after."""
        if self._answered_at is None:
            self._answered_at = {}
        self._answered_at[spoke] = self.updates

    def staleness_statistics(self) -> dict:
        """``stalenessDamping`` (0 under ``average``, where it changes nothing) and
        ``updateStaleness`` (p50, p95, max; None before a second push) for Query."""
        tau = np.asarray(self.update_staleness or [], dtype=np.float64)
        return {"stalenessDamping": self.damping if self.aggregation in ADDS_DELTAS else 0.0,
                "updateStaleness": None if not tau.size else {
                    "p50": float(np.percentile(tau, 50)),
                    "p95": float(np.percentile(tau, 95)), "max": int(tau.max())}}


class StaleSynchronousHub(StaleDeltaHub, ShardedHub):
    """An SSP shard: latest contribution of every spoke, clocks, held answers.

    Attributes
    ----------
    bounded : bool
        Class attribute. True: a push is answered only within ``staleness`` rounds of the
        slowest spoke. False: staleness is unbounded, every push is answered at once and
        Query reports no ``staleness`` (TAP:
        :class:`~learning.protocols.asynchronous.AsynchronousHub`).
    clocks : dict[int, int]
        Each spoke's clock: the rounds of work of its latest push, raised to the slowest
        active clock when it returns from idle.
    idle_spokes : frozenset[int]
        Spokes whose latest push was idle (no work since the one before, at a Query):
        left out of :meth:`min_clock` until they push work.
    max_lead : int
        The largest ``c − min_j c_j`` of any push when it was answered (never > staleness).
    held : int
        Answers that had to wait for the slowest spoke.
    update_staleness, damping
        As :class:`StaleDeltaHub`.
    push_records : collections.deque[int] or None
        Per push, idle ones left out (the last 10,000): the records the spoke fitted since
        its previous push (a round's length in records); Query reports p50 and p95 as
        ``recordsPerPush``.
    """

    bounded = True
    # immutable, replaced on change; a class default for snapshots taken before it existed
    idle_spokes: frozenset = frozenset()
    # the records of the last pushes; a class default for snapshots taken before it existed
    push_records: deque | None = None

    def __init__(self, request) -> None:
        super().__init__(request)
        self.staleness = STALENESS.of(request.training_configuration)
        self.read_damping()
        self.clocks: dict[int, int] = {}
        self.max_lead = 0
        self.held = 0
        self._latest: dict[int, tuple[Any, dict, int]] = {}
        self._waiting: list[tuple[int, int, Promise]] = []

    def update(self, request) -> None:
        super().update(request)
        self.staleness = STALENESS.of(self.request.training_configuration)
        self.read_damping()
        self._release()

    def on_relayout(self) -> None:
        """A new layout: the spokes' latest contributions were of the old model."""
        super().on_relayout()
        self._latest.clear()

    def min_clock(self) -> int:
        """The slowest clock of the spokes that are not idle (rounds); with every spoke
        idle, the fastest one's (nothing to wait for)."""
        active = [self.clocks.get(i, 0) for i in range(self.n_peers)
                  if i not in self.idle_spokes]
        return min(active) if active else max(self.clocks.values(), default=0)

    @remote
    def push(self, shard: np.ndarray, layout: dict, records: int, spoke: int, clock: int,
             prep: list | None = None, idle: bool = False):
        """Spoke ``spoke``'s model shard at its clock ``clock`` (rounds of work), with its
        preprocessors' statistics since its last push (``prep``, hub 0); ``idle``: it
        fitted nothing since the previous Query (module docstring, "Idle spokes").

        ``average`` replaces the spoke's previous contribution to the weighted average;
        ``sum`` (and ``diversity``) adds its delta from the shard it was last answered with.

        Returns
        -------
        ``[w̃ shard, layout, slowest clock, the spoke's clock, preprocessor statistics]``
        now, or a Promise of it held until ``clock − min_j c_j ≤ staleness`` (an idle
        push: now).
        """
        # first, before anything changes: a shard of a layout this hub no longer has (a
        # push of the model before an Update reset it) fails the call and leaves no trace
        [w_i] = self.matched(self.align([(shard, layout)]))
        clock = int(clock)
        if idle:
            self.idle_spokes = self.idle_spokes | {spoke}
        elif spoke in self.idle_spokes:  # back with work: rejoin at the slowest active
            clock = max(clock, self.min_clock())  # clock (every spoke idle: the fastest)
            self.idle_spokes = self.idle_spokes - {spoke}
        self.clocks[spoke] = max(self.clocks.get(spoke, 0), clock)
        self._latest[spoke] = (w_i, self.learner.layout(), int(records))
        missed = self.missed_updates(spoke)
        if not idle:
            self._note_staleness(int(records), missed)
        if self.aggregation in ADDS_DELTAS:
            base = self.base_of(spoke)
            # the stale delta scaled (module docstring, "Stale deltas")
            self.set_shard(self.sum_of_deltas([self.damped(w_i, base, missed)], [base]))
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
        clock = self.clocks[spoke]
        if idle or self._within_bound(clock):
            return self._answer_now(spoke, clock)
        p = Promise()
        self.held += 1
        self._waiting.append((spoke, clock, p))
        return p

    def _note_staleness(self, records: int, missed: int | None) -> None:
        """Record a push's records and the updates it missed (nothing for a spoke's first)."""
        if self.push_records is None:
            self.push_records = deque(maxlen=10_000)
        self.push_records.append(records)
        self.note_missed(missed)

    def _within_bound(self, clock: int) -> bool:
        """Whether a push at ``clock`` may be answered now: ``clock − min_j c_j ≤ staleness``,
        or always when unbounded."""
        return not self.bounded or clock - self.min_clock() <= self.staleness

    def _answer_now(self, spoke: int, clock: int) -> list:
        lead = clock - self.min_clock()
        self.max_lead = max(self.max_lead, lead)
        shard = self.shard()
        self.remember_base(spoke, shard)
        self.note_answered(spoke)
        return self.answer(shard, self.min_clock(), self.clocks.get(spoke, clock))

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
        out.update(self.staleness_statistics())
        out.update({"clocks": [self.clocks.get(i, 0) for i in range(self.n_peers)],
                    "maxLead": self.max_lead, "heldAnswers": self.held,
                    "recordsPerPush": None if not self.push_records else {
                        "p50": float(np.percentile(self.push_records, 50)),
                        "p95": float(np.percentile(self.push_records, 95))}})
        if self.bounded:
            out["idleSpokes"] = sorted(self.idle_spokes)
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
    # paused on the push in flight (work past the bound); the last push was idle; class
    # defaults for snapshots taken before these existed
    _blocked = False
    _blocked_at = 0.0
    _idle = False

    def __init__(self, request) -> None:
        super().__init__(request)
        self.staleness = STALENESS.of(request.training_configuration)
        self.replay = REPLAY.of(request.training_configuration)
        self.clock = 0
        self.slowest = 0  # the slowest clock the hubs last told us
        self.in_flight = False
        self.waited = 0  # pushes after which this spoke had to pause
        self._since = 0
        self._pushed: tuple[np.ndarray, dict] | None = None

    def on_update(self) -> None:
        super().on_update()
        self.staleness = STALENESS.of(self.request.training_configuration)
        self.replay = REPLAY.of(self.request.training_configuration)

    def on_relayout(self) -> None:
        """A new layout: the model of the push in flight is gone (its answer is dropped)."""
        super().on_relayout()
        self._pushed = None

    def after_batch(self, n_records: int) -> None:
        self._since += 1
        if (self._since >= self.mini_batches or self._idle) and not self.in_flight:
            self._push()  # back from idle: at once, to rejoin the bound (module docstring)
        elif self.in_flight and self.bounded and not self._blocked and \
                self.clock + self._rounds_since() - self.slowest > self.staleness:
            # the work done while the push is in flight has taken this spoke more than
            # ``staleness`` rounds past the slowest clock it knows: wait for the answer
            self._blocked = True
            self._blocked_at = time.monotonic()
            self.ctx.pause_stream()

    def _push(self, idle: bool = False) -> None:
        # the rounds of work since the last push, at least one (none when idle). Counting
        # pushes instead made a spoke that never had to wait (it trains on while its push
        # is in flight, several rounds per push) look slowest: on Flink the others paused
        # behind it with their records held, and SSP ran at 184 records/s against BSP's
        # 2,211
        rounds, self._since = (0 if idle else max(1, self._rounds_since())), 0
        w, layout = self.vector()
        records, self.records_since_sync = self.records_since_sync, 0
        self.clock += rounds
        self.pushes += 1
        self.in_flight = True
        self._idle = idle
        self._pushed = (w, layout)
        self.take_off()
        sync = self.bounded and not idle and self.clock - self.slowest > self.staleness
        self.waited += sync
        self.scatter("push", w, layout, records, self.ctx.index, self.clock, sync=sync,
                     on_all=self._on_global, prep=self.preprocessor_delta(),
                     **({"idle": True} if idle else {}))

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
        self.install_preprocessors(answers[0][-1])  # first: a replay scales with them
        self.land(lambda: w_global,
                  lambda: w_global + (learner.get_params() - self.in_current(self._pushed)))
        self.slowest = max(self.slowest, min(int(a[2]) for a in answers))
        if len(answers[0]) > 4:  # the clock the hubs hold for this spoke (back from idle)
            self.clock = max(self.clock, min(int(a[3]) for a in answers))
        self.rounds += 1
        self.in_flight = False
        if self._since >= self.mini_batches:
            self._push()

    def on_sync_failed(self, method: str, errors: list) -> None:
        self._unblock()
        self.ground()
        self.in_flight = False

    def on_lull(self) -> None:
        """Fit what is buffered, push unless a push is in flight (idle if nothing was
        fitted since the previous Query or lull); unbounded, only fit (no answer is ever
        held: no round a finite stream could leave open)."""
        self.flush()
        if self.bounded:
            idle = self.quiet_since_last_query() and self._since == 0
            if not self.in_flight:
                self._push(idle=idle)

    def protocol_statistics(self) -> dict:
        out = super().protocol_statistics()
        if self.bounded:
            out.update({"clock": self.clock, "slowestKnown": self.slowest,
                        "waitedPushes": self.waited})
        return out


StaleSynchronousHub.peer = StaleSynchronousSpoke
