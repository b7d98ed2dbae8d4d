"""Bulk Synchronous Parallel (BSP) on a sharded parameter server (papers/002_9b954bd89ad87406.txt
§2.2.1; papers/003_026f5d1641a0ab17.txt §II.B).

Every spoke fits ``miniBatches`` mini-batches, pushes its model (shard ``j`` to hub ``j``)
and pauses its stream (``then_sync``). A round ends when every spoke has pushed: each hub
sets its shard to the weighted average (papers/003 eq. 2)

    w̃ = Σ_i γ_i w_i / Σ_i γ_i,   γ_i = records spoke i fitted in the round,

and answers all spokes with one broadcast promise; the spokes install ``w̃`` and resume.
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
"""

from __future__ import annotations

from typing import Any

import numpy as np

from learning.protocols.sharding import AveragingHub, ShardedSpoke

__all__ = ["SynchronousSpoke", "SynchronousHub"]


class SynchronousHub(AveragingHub):
    """A BSP shard: averaging rounds (``push`` → one broadcast promise per round)."""


class SynchronousSpoke(ShardedSpoke):
    """A BSP worker: after every ``miniBatches`` mini-batches, push and wait for ``w̃``."""

    peer = SynchronousHub

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
        self.sync_models(self._installed)

    def _installed(self, w: np.ndarray) -> None:
        self.in_round = False

    def on_sync_failed(self, method: str, errors: list) -> None:
        self.in_round = False

    def on_query(self, request_id: Any, service: dict | None = None) -> None:
        """Fit what is buffered, join (or open) the current round, then report; see the
        module docstring for why a Query closes the open round."""
        self.flush()
        if not self.in_round:
            self._round()
        super().on_query(request_id, service)


SynchronousHub.peer = SynchronousSpoke
