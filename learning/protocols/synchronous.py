"""Bulk Synchronous Parallel (BSP) on a sharded parameter server (papers/002_9b954bd89ad87406.txt
§2.2.1; papers/003_026f5d1641a0ab17.txt §II.B).

Every spoke fits ``miniBatches`` mini-batches, pushes its model (shard ``j`` to hub ``j``)
and pauses its stream (``then_sync``). A round ends when every spoke (that is not idle,
below) has pushed: each hub sets its shard to the weighted average (papers/003 eq. 2)

    w̃ = Σ_i γ_i w_i / Σ_i γ_i,   γ_i = records spoke i fitted in the round,

and answers every pusher (each through a promise of its own: a broadcast promise would
wait for the idle spokes' calls too); the spokes install ``w̃`` and resume.
With ``k`` spokes, plain SGD and ``miniBatches = 1`` this is exactly centralized mini-batch
SGD with a ``k×`` larger batch (papers/002 §2.2.1, the derivation after the BSP update
rule; ``tests/test_protocols.py`` checks it to 1e-9).

Ending rounds on a finite stream. A round waits for every spoke; a spoke whose records ran
out (round-robin partitioning over a finite stream leaves the spokes up to one mini-batch
apart) would never push, and the spokes that did push would wait forever with their
stream paused — so forecasting records behind them would never be answered. A partial
mini-batch never triggers a round by itself, but **a Query is a synchronization point**:
on a Query each spoke fits what it buffered and, unless it already waits in the open round,
joins it with what it has (``γ_i`` may be 0, which weighs its model out of the average).
Every spoke sees every Query, so the open round closes at every Query; a Query costs one
round (``k`` pushes and ``k`` answers) when no round was open. The alternative, a hub-side
timeout, would need timers in the hub, which the middleware does not give protocols.

Idle spokes. A Query closes one round, and a spoke still holding records (its share was
larger, or it held them while paused) fits one more round and waits again: without more,
its backlog drained one round per Query (1,712 records of a spoke with 5× the others'
share took 428 Queries; random shares of 3,000 records, 17). So a spoke that fitted
nothing since the previous Query, with no round open for it, pushes as **idle**: the hubs
answer it at once with ``w̃`` (its model: nothing to fold in) and leave it out of the
rounds until it pushes work again; the rounds of the spokes that still have records close
without it. A spoke back with records joins the open round or the next, with work done on
the ``w̃`` it was answered with as idle: under ``sum`` its delta is taken from that ``w̃``
(:meth:`SynchronousHub.round_bases`), under ``average`` its model is averaged in as it
is. That first round is the only one in which not every spoke started from the same
``w̃``, and only after a Query found it idle; from its answer on it is in step again. An
idle spoke predicts with the ``w̃`` of its idle answer: each Query answers it anew, so it
misses at most the rounds closed since the previous Query.

Coming back with several hubs. Each hub decides alone whether a round waits for a spoke,
so a spoke that simply pushed work again could land in different rounds on different
hubs: with two spokes both back from idle, hub 0 taking A's push first closed a round of
A alone and then waited for A with B's, while hub 1, taking B's first, did the mirror
image: each spoke waited on a hub that waited for the other's next push, and the
pipeline stalled for good with both spokes' records held (seen once in CI; 8 of 30 seeds
of shuffled delivery in process). So a spoke comes back in two steps. First it calls
every hub's :meth:`SynchronousHub.rejoin` (paused): each hub stops leaving it out, holds
its open round for it until its push comes, and answers at once with the rounds it has
closed. Then it pushes its work tagged with round T = 1 + the most rounds any hub had
closed. Active spokes push a round only after every hub answered the one before, so hubs
are never more than one round apart: a hub that had closed T − 2 closes round T − 1
without the returning spoke (the other hubs did) and keeps its push for round T; every
other hub takes it into round T at once. From round T on every hub waits for it in the
same rounds.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from learning.protocols.sharding import AveragingHub, ShardedSpoke
from middleware import Promise, remote

__all__ = ["SynchronousSpoke", "SynchronousHub"]


class SynchronousHub(AveragingHub):
    """A BSP shard: averaging rounds of the spokes that are not idle, each pusher answered
    through a promise of its own (a broadcast promise answers only once every spoke has
    called, and an idle spoke does not call).

    Attributes
    ----------
    idle_spokes : frozenset[int]
        Spokes whose latest push was idle (module docstring, "Idle spokes"): no round
        waits for them until they push work.
    """

    # immutable, replaced on change; class defaults for snapshots taken before they existed
    idle_spokes: frozenset = frozenset()
    _returning: frozenset = frozenset()  # pushed work since idle: delta from the idle answer
    _answers: dict | None = None  # spoke → its promise in the open round
    _next: dict | None = None  # spoke → (push arguments, its promise), for the next round

    @remote
    def rejoin(self, spoke: int) -> int:
        """Spoke ``spoke``, idle, has work again (module docstring, "Coming back with
        several hubs"): rounds wait for it from now on, the open one too, until its push
        says which round it takes part in.

        Returns
        -------
        int
            The rounds this hub has closed.
        """
        if spoke in self.idle_spokes:
            self.idle_spokes = self.idle_spokes - {spoke}
            self._returning = self._returning | {spoke}
        return self.rounds

    @remote
    def push(self, shard: np.ndarray, layout: dict, records: int, spoke: int,
             prep: list | None = None, idle: bool = False,
             at_round: int | None = None) -> Promise | list:
        """As :meth:`AveragingHub.push`; ``idle``: spoke ``spoke`` fitted nothing since the
        previous Query and no round waits on it; ``at_round``: the round (1 + the rounds a
        hub has closed) of a spoke's first push after :meth:`rejoin`: one past this hub's
        open round means the open round closes without it.

        Returns
        -------
        Promise or list
            ``[w̃ shard, layout, preprocessor statistics]`` once the round ended, or for
            an idle push at once (then the open round closes if it waited for that spoke
            only).
        """
        if not idle:
            if spoke in self.idle_spokes:  # back without rejoin (one hub, or a snapshot of
                self.idle_spokes = self.idle_spokes - {spoke}  # a job from before it)
                self._returning = self._returning | {spoke}
            mine = Promise()
            if at_round is not None and at_round > self.rounds + 1:
                if self._next is None:
                    self._next = {}
                self._next[spoke] = ((shard, layout, records, spoke, prep), mine)
                if self._round is not None and self.round_complete():
                    self.close_round()
                return mine
            self._join_round(spoke, (shard, layout, records, spoke, prep), mine)
            return mine
        self.idle_spokes = self.idle_spokes | {spoke}
        self.merge_preprocessors(prep)
        now = self.shard()
        self.remember_base(spoke, now)
        answer = self.answer(now)
        if self._round is not None and self.round_complete():
            self.close_round()
        return answer

    def _join_round(self, spoke: int, args: tuple, mine: Promise) -> None:
        if self._answers is None:
            self._answers = {}
        self._answers[spoke] = mine  # before the push: it may end the round
        super().push(*args)

    def close_round(self) -> str | None:
        """As :meth:`AveragingHub.close_round`, answering every pusher's own promise (with
        the error when the round failed); the pushes kept for the next round then open
        it."""
        waiting, self._answers = self._answers or {}, {}
        failed = super().close_round()
        answer = self.answer(self.shard())
        for spoke in sorted(waiting):
            if failed is None:
                waiting[spoke].fulfil(answer)
            else:
                waiting[spoke].fail(ValueError(failed))
        later, self._next = self._next or {}, None
        for spoke in sorted(later):
            self._join_round(spoke, *later[spoke])
        return failed

    def round_complete(self) -> bool:
        """Every spoke that is not idle, and whose push is not kept for the next round,
        has pushed."""
        later = self._next or {}
        return all(i in self._pushed for i in range(self.n_peers)
                   if i not in self.idle_spokes and i not in later)

    def round_bases(self, order: list[int]) -> list[np.ndarray]:
        """``w̃`` for each spoke, but the shard a spoke back from idle was answered with."""
        back, self._returning = self._returning & set(order), self._returning - set(order)
        return [self.base_of(i) if i in back else self.shard() for i in order]

    def global_statistics(self) -> dict:
        out = super().global_statistics()
        out["idleSpokes"] = sorted(self.idle_spokes)
        return out


class SynchronousSpoke(ShardedSpoke):
    """A BSP worker: after every ``miniBatches`` mini-batches, push and wait for ``w̃``."""

    peer = SynchronousHub
    _idle_at_hubs = False  # the last push was idle; a class default for older snapshots

    def __init__(self, request) -> None:
        super().__init__(request)
        self._since = 0
        self.in_round = False

    def after_batch(self, n_records: int) -> None:
        self._since += 1
        if self._since >= self.mini_batches and not self.in_round:
            self._round()

    def _round(self) -> None:
        self._since = 0
        self.in_round = True
        if self._idle_at_hubs:
            self._idle_at_hubs = False
            self._rejoin()
        else:
            self.sync_models(self._installed)

    def _rejoin(self) -> None:
        """Back from idle: :meth:`SynchronousHub.rejoin` on every hub (paused, counted in
        ``wait_ms``), then push into round 1 + the most rounds a hub has closed (module
        docstring). A failed call is logged and counted, and the round is given up
        (:meth:`on_sync_failed`)."""
        m = self.ctx.n_hubs
        closed: dict[int, int] = {}

        def ok(j: int):
            def cb(value: Any) -> None:
                closed[j] = int(value)
                if len(closed) == m:
                    self.sync_models(self._installed, at_round=max(closed.values()) + 1)
            return cb

        for j in range(m):
            self.wait_on(self.peers[j].rejoin(self.ctx.index), ok(j))

    def _installed(self, w: np.ndarray) -> None:
        self.in_round = False

    def on_sync_failed(self, method: str, errors: list) -> None:
        self.in_round = False

    def on_lull(self) -> None:
        """Fit what is buffered, join (or open) the current round — or, having fitted
        nothing since the previous Query or lull, push as idle; see the module docstring
        for why a Query closes the open round."""
        self.flush()
        idle = self.quiet_since_last_query() and self._since == 0
        if not self.in_round:
            if idle:
                self._idle()
            else:
                self._round()

    def _idle(self) -> None:
        """Push as idle (no round waits for this spoke) and install the ``w̃`` answered."""
        self.in_round = True
        self._idle_at_hubs = True
        w, layout = self.vector()

        def install(answers: list) -> None:
            self.pipeline.learner.set_params(
                self.assemble([a[0] for a in answers], [a[1] for a in answers]))
            self.install_preprocessors(answers[0][-1])
            self.in_round = False

        self.scatter("push", w, layout, 0, self.ctx.index, sync=True, on_all=install,
                     prep=self.preprocessor_delta(), idle=True)


SynchronousHub.peer = SynchronousSpoke
