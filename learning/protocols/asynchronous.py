"""Total Asynchronous Parallel (TAP), update-based (papers/002_9b954bd89ad87406.txt §2.2.2).

Each spoke fits its own mini-batches; after every ``miniBatches`` of them it pushes its
*update* Δ = w_local − w_base (w_base: the global model it last received) to the hub,
which adds it to the global model at once, w̃ ← w̃ + Δ, and answers that spoke alone with
w̃. No spoke waits for another. The spoke keeps what it learned while the push was in
flight: on the answer it sets w_local ← w̃ + (w_local − w_pushed), so every local update
reaches the hub exactly once. One push per spoke is in flight at a time.

The label set may grow while streaming; vectors travel with the learner's ``layout()`` and
are aligned with ``project`` on arrival.
"""

from __future__ import annotations

import hashlib
import time
from collections import deque
from typing import Any

import numpy as np

from learning.protocols.base import PipelineHub, PipelineSpoke
from middleware import remote

__all__ = ["AsynchronousSpoke", "AsynchronousHub", "global_digest"]


def global_digest(w: np.ndarray) -> str:
    """A short fingerprint of a global model as received, (n_params,) float64 → hex str;
    lets a test match a spoke's model with the message that carried it."""
    return hashlib.sha256(np.ascontiguousarray(w, dtype="<f8").tobytes()).hexdigest()[:16]


class AsynchronousHub(PipelineHub):
    """The parameter server of TAP: apply each update at once, answer the pusher."""

    @remote
    def push(self, delta: np.ndarray, layout: dict, records: int) -> list:
        """Fold one spoke's update into the global model.

        Parameters
        ----------
        delta : (n_params,) float64
            w_local − w_base in the spoke's ``layout``.
        layout : dict
            The spoke learner's ``layout()``.
        records : int
            Records fitted by that spoke since its last push (statistics only).

        Returns
        -------
        [w, layout] : the new global model, (n_params,) float64, and its layout.
        """
        self.learner.grow(layout)
        w = self.learner.get_params() + self.learner.project(np.asarray(delta, np.float64), layout)
        self.learner.set_params(w)
        self.updates += 1
        return [w, self.learner.layout()]


class AsynchronousSpoke(PipelineSpoke):
    """A TAP worker: push after every ``miniBatches`` mini-batches, never wait."""

    peer = AsynchronousHub

    def __init__(self, request) -> None:
        super().__init__(request)
        if int(request.training_configuration.get("hubParallelism", 1)) != 1:
            from learning.errors import RequestError
            raise RequestError("unsupported", "the Asynchronous protocol runs on one hub for now "
                               "(sharding is issue 6)", "trainingConfiguration.hubParallelism")
        self._since = 0
        self._records_since = 0
        self._in_flight = False
        self._base: tuple[np.ndarray, dict] | None = None
        self._pushed: tuple[np.ndarray, dict] | None = None
        self.pushes = 0
        self.globals_received = 0
        self._pushed_at = 0.0
        self.round_trips_ms: deque[float] = deque(maxlen=1000)  # push → global, milliseconds

    def on_batch_fitted(self, n_records: int) -> None:
        self._since += 1
        self._records_since += n_records
        if self._since >= self.mini_batches and not self._in_flight:
            self._push()

    def _in_current(self, vec_layout: tuple[np.ndarray, dict] | None) -> np.ndarray:
        learner = self.pipeline.learner
        if vec_layout is None:
            return np.zeros_like(learner.get_params())
        return learner.project(*vec_layout)

    def _push(self) -> None:
        learner = self.pipeline.learner
        now = learner.get_params()
        delta = now - self._in_current(self._base)
        self._pushed = (now, learner.layout())
        self._in_flight = True
        self._pushed_at = time.monotonic()
        self.pushes += 1
        records, self._since, self._records_since = self._records_since, 0, 0
        self.peers[0].push(delta, learner.layout(), records).then(self._on_global)

    def _on_global(self, answer: list[Any]) -> None:
        w_global, layout = answer
        learner = self.pipeline.learner
        learner.grow(layout)
        w_global = learner.project(np.asarray(w_global, np.float64), layout)
        progress = learner.get_params() - self._in_current(self._pushed)
        learner.set_params(w_global + progress)
        self._base = (w_global, learner.layout())
        self.globals_received += 1
        self.round_trips_ms.append((time.monotonic() - self._pushed_at) * 1000.0)
        self._in_flight = False
        if self._since >= self.mini_batches:
            self._push()

    def statistics(self) -> dict:
        out = super().statistics()
        base = None if self._base is None else self._base[0]
        rtt = np.asarray(self.round_trips_ms)
        out["protocol"] = {
            "pushes": self.pushes, "globalsReceived": self.globals_received,
            "lastGlobalDigest": None if base is None else global_digest(base),
            # the feedback loop's latency: push → global model back through Kafka
            "roundTripMsP50": float(np.percentile(rtt, 50)) if rtt.size else None,
            "roundTripMsP95": float(np.percentile(rtt, 95)) if rtt.size else None,
        }
        return out


AsynchronousHub.peer = AsynchronousSpoke
