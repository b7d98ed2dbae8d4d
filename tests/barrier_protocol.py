"""A probe protocol for the barrier (papers/002 §3.1.3): every ``miniBatches``
mini-batches each spoke calls ``barrier`` on hub 0 and pauses its stream (``then_sync``)
until every spoke has called it. The hub's method returns an already fulfilled broadcast
promise, which is how the middleware expresses a barrier.

The same classes run on the in-process kernel and, registered through
``JobConfig.protocol_modules = ("tests.barrier_protocol",)``, on the Flink kernel.
"""

from __future__ import annotations

from learning.protocols import register_protocol
from learning.protocols.base import PipelineHub, PipelineSpoke
from middleware import BroadcastPromise, remote


class BarrierProbeHub(PipelineHub):
    """Counts barrier calls and the largest lead of one spoke over the slowest."""

    def __init__(self, request) -> None:
        super().__init__(request)
        self.rounds_called: dict[int, int] = {}  # spoke -> last round it called
        self.max_lead = 0
        self.calls = 0

    @remote
    def barrier(self, round_: int, spoke: int) -> BroadcastPromise:
        self.calls += 1
        self.rounds_called[spoke] = round_
        if len(self.rounds_called) == self.n_peers:
            self.max_lead = max(self.max_lead,
                                max(self.rounds_called.values()) - min(self.rounds_called.values()))
        return BroadcastPromise.fulfilled(round_)

    def global_statistics(self) -> dict:
        out = super().global_statistics()
        out.update({"barrierCalls": self.calls, "maxLead": self.max_lead})
        return out


class BarrierProbeSpoke(PipelineSpoke):
    """Calls the barrier every ``miniBatches`` mini-batches and waits for it."""

    peer = BarrierProbeHub

    def __init__(self, request) -> None:
        super().__init__(request)
        self.since = 0
        self.round = 0
        self.passed: list[int] = []
        self.fitted_when_called: list[int] = []

    def on_batch_fitted(self, n_records: int) -> None:
        self.since += 1
        if self.since < self.mini_batches:
            return
        self.since = 0
        self._barrier()

    def _barrier(self) -> None:
        self.round += 1
        self.fitted_when_called.append(self.fitted)
        self.peers[0].barrier(self.round, self.ctx.index).then_sync(self.passed.append)

    def on_query(self, request_id, service=None) -> None:
        """A Query joins the next barrier when this spoke is not waiting in one, as BSP
        does (learning/protocols/synchronous.py): spokes get unequal shares of a finite
        stream, and one waiting at a barrier the others will never reach would hold its
        records forever."""
        self.flush()
        if len(self.passed) == self.round:
            self.since = 0
            self._barrier()
        super().on_query(request_id, service)

    def statistics(self) -> dict:
        out = super().statistics()
        out["protocol"] = {"rounds": self.round, "passed": self.passed}
        return out


BarrierProbeHub.peer = BarrierProbeSpoke
register_protocol("BarrierProbe", BarrierProbeSpoke, BarrierProbeHub)
