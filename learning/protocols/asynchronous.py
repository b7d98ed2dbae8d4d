"""Total Asynchronous Parallel (TAP) on a sharded parameter server, with the stale-update
compensation of papers/003_026f5d1641a0ab17.txt §II.C (papers/002_9b954bd89ad87406.txt
§2.2.2 for the protocol).

Each spoke fits its own mini-batches; after every ``miniBatches`` of them it pushes its
model (shard ``j`` to hub ``j``) with ``γ_i``, the records it fitted since its previous
push. The hub applies it at once and answers that spoke alone:

    w̃ ← w̃ + (γ_i w_i^new − γ_i w_i^old) / Σ_j γ_j        (papers/003 §II.C)

i.e. the spoke's previous contribution is replaced (its stale part removed), so that
``w̃ = Σ_j γ_j w_j / Σ_j γ_j`` over every spoke's latest model (papers/003 eq. 2). Under
the ``sum`` rule the hub adds the spoke's delta instead, scaled by ``τ^−0.35`` by default
(τ: the other spokes' updates the push missed; ``stalenessDamping``, after Zhang et al.'s
η/τ, see :mod:`learning.protocols.ssp`, "Stale deltas"). No spoke ever waits for another:
this is :mod:`learning.protocols.ssp` with unbounded staleness, and its hub and spoke are
those classes configured so (``bounded = False``). The spoke installs ``w̃`` and refits on
it what it fitted while the push was in flight (``replay``,
:mod:`learning.protocols.sharding`, "Replay"); one push per spoke is in flight at a time;
a Query only reports. Works for any ``hubParallelism``; the label set may grow with one
hub.

Warm-up (``warmupRounds`` R, 20 by default; 0: none, the papers' TAP). For a spoke's first
R rounds (its clock below R) TAP runs as SSP with staleness 0: the hubs hold the answer to a
push until no other active spoke's clock is behind it, and the spoke pauses for it, as
SSP's spokes do; from round R on nothing is held. The asynchronous protocols lose most
where the model still moves most (docs/quality.md, "pass by pass": TAP's first pass over
digits is 0.061 behind one learner, its sixth 0.005): a bounded start takes that part,
after the synchronous start of post-local SGD (Lin et al., *Don't use large mini-batches,
use local SGD*, ICLR 2020), whose workers run mini-batch SGD before they go local, and
the warm-started replicas of Downpour SGD (Dean et al., *Large Scale Distributed Deep
Networks*, NIPS 2012). What a warm-up costs is the waiting, and some bytes: its pushes
carry one round each, where TAP's carry what passed during a round trip (on Flink, 4
spokes, warm-up 20: RandomRBF +8%, digits-PA +16%; docs/quality.md, "TAP's warm-up").
The default, 20, is measured (:data:`WARMUP_ROUNDS`).

Statistics: SSP's that do not concern the bound (the hub's ``clocks``, ``maxLead``,
``heldAnswers``, ``updateStaleness`` — p50/p95/max of the other spokes' pushes a push had
not seen —, ``recordsPerPush`` — p50/p95 — and ``stalenessDamping``, 0 under ``average``;
no ``staleness``, and no spoke ``clock``, ``slowestKnown``, ``waitedPushes``), plus on
each spoke: globals received, the push → global round trip (p50/p95, milliseconds: the
feedback loop's latency) and a fingerprint of the last global model installed (a test
matches it with the message that carried it through Kafka).
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections import deque

import numpy as np

from learning.protocols.parameters import Param, ProtocolParams
from learning.protocols.ssp import (REPLAY, STALENESS_DAMPING, StaleSynchronousHub,
                                   StaleSynchronousSpoke)

__all__ = ["AsynchronousSpoke", "AsynchronousHub", "global_digest", "PARAMETERS"]

#: TAP's ``stalenessDamping`` (:data:`learning.protocols.ssp.STALENESS_DAMPING`), its own
#: default, chosen by measurement. With ``replay`` (2026-11-29; PA under ``sum``, 4
#: spokes, Flink, three runs per set, Δ vs centralized): RandomRBF −0.0085 and −0.0087
#: at 0.35, −0.0082 to −0.0089 at 0.25 (three sets), −0.0096 at 0.15, −0.0099 to
#: −0.0111 at 0.5 (four sets), −0.0125 at 0; digits-PA −0.0231 and −0.0247 at 0.35,
#: −0.0246 and −0.0271 at 0.25, −0.0233 at 0.5. Without replay 0.5 had been best
#: (below), and lower values lost more (RandomRBF −0.0135 at 0.25, −0.0273 at 0): a
#: refit delta is fresher and needs less damping. Before replay (PA under ``sum``, 4
#: spokes, 3 runs each on Flink, the
#: same session): 0.5 against 0 on RandomRBF 0.7921 against 0.7870 (centralized 0.8012),
#: digits-PA 0.9385 against 0.9340, LED 0.7607 against 0.7580, Phishing 0.8717 against
#: 0.8680, Shuttle 0.9960 against 0.9962. Pushes there come late (the answer travels
#: through Kafka while the spoke trains on) and the delta overlaps the others' more. With
#: every message delivered at once (in process) it costs a little (RandomRBF 0.7956 against
#: 0.7992, LED 0.7616 against 0.7631); with messages every 400 records p = 1 was worse than
#: 0.5 (RandomRBF 0.7832 against 0.7896). SSP keeps 0: its bound keeps pushes fresh, and
#: damping lost there (RandomRBF, every 400 records: 0.7945 at 0.5 against 0.7987).
STALENESS_DAMPING_TAP = dataclasses.replace(STALENESS_DAMPING, default=0.35)
#: ``trainingConfiguration.warmupRounds`` (module docstring, "Warm-up"), 20 by default for
#: TAP, EASGD and Adaptive (whose hub and spoke are TAP's). Chosen for TAP on digits-PA,
#: where TAP is furthest from the centralized learner (2026-12-07, Flink, 4 spokes, three
#: runs each, Δ vs centralized 0.9658: none −0.0238, 20 −0.0139, 40 −0.0130 at 1.19 and
#: 1.49 times the bytes of none; in process, messages every 150 records, seeds 0–2:
#: −0.0214, −0.0143, −0.0124), then run on every stream and for EASGD and Adaptive in one
#: invocation of the whole experiment (2026-12-07, Flink, 4 spokes, three runs each, none →
#: 20, Δ vs centralized): digits-PA TAP −0.0269 → −0.0139, EASGD −0.0275 → −0.0127,
#: Adaptive −0.0233 → −0.0130; RandomRBF TAP −0.0076 → −0.0054, EASGD −0.0080 → −0.0055,
#: Adaptive −0.0092 → −0.0062; LED −0.0029 → −0.0004, −0.0019 → −0.0006, −0.0025 →
#: −0.0008; digits with the MLP −0.0048 → +0.0032, −0.0077 → −0.0008, −0.0146 → −0.0078;
#: Hyperplane, Waveform and Shuttle within their spread; no stream lost more than its
#: spread. It costs TAP and EASGD up to 9% more bytes, Adaptive more where its loss rule
#: exchanges rarely (Shuttle 1/10.7 → 1/3.1 of BSP's bytes, digits-PA 1/8.9 → 1/4.9), and
#: a stream shorter than R rounds of every spoke (Phishing, 1,250 records) runs at BSP's
#: bytes and pace. 0 runs the papers' protocols.
WARMUP_ROUNDS = Param("warmupRounds", int, 20, "R: a spoke's first R rounds run as SSP with "
                      "staleness 0 (answers held until no active spoke is behind), then "
                      "asynchronous; 0: asynchronous from the start (the papers' protocol)",
                      interval="[0, 1000000000]")
#: TAP's declaration (:mod:`learning.protocols.parameters`)
PARAMETERS = ProtocolParams(term="TAP", reference="papers/002 §2.2.2, papers/003 §II.C (stale "
                            "contribution replaced)",
                            params=(STALENESS_DAMPING_TAP, REPLAY, WARMUP_ROUNDS))


def global_digest(w: np.ndarray) -> str:
    """A short fingerprint of a global model as received, (n_params,) float64 → hex str;
    lets a test match a spoke's model with the message that carried it."""
    return hashlib.sha256(np.ascontiguousarray(w, dtype="<f8").tobytes()).hexdigest()[:16]


class AsynchronousHub(StaleSynchronousHub):
    """The parameter server of TAP: apply each push at once (§II.C), answer the pusher (a
    push of a warm-up round: once no active spoke is behind it)."""

    damping_param = STALENESS_DAMPING_TAP
    warmup_rounds = 0  # a class default for snapshots taken before the warm-up

    def __init__(self, request) -> None:
        super().__init__(request)
        self.staleness = 0  # SSP's bound, in the warm-up
        self.warmup_rounds = WARMUP_ROUNDS.of(request.training_configuration)

    def update(self, request) -> None:
        super().update(request)
        self.staleness = 0
        self.warmup_rounds = WARMUP_ROUNDS.of(self.request.training_configuration)
        self._release()  # a shorter warm-up may free held answers

    @property
    def bounded(self) -> bool:
        """Whether any answer may still be held: while some active spoke is in its warm-up."""
        return self.min_clock() < self.warmup_rounds

    def _within_bound(self, clock: int) -> bool:
        """A push at ``clock`` (its spoke's clock after it) is answered now unless it is of a
        warm-up round (``clock < warmupRounds``) and some active spoke is behind it."""
        return clock >= self.warmup_rounds or clock <= self.min_clock()


class AsynchronousSpoke(StaleSynchronousSpoke):
    """A TAP worker: push after every ``miniBatches`` mini-batches, never wait (but in the
    warm-up, module docstring)."""

    peer = AsynchronousHub
    warmup_rounds = 0  # a class default for snapshots taken before the warm-up

    def __init__(self, request) -> None:
        super().__init__(request)
        self.staleness = 0  # SSP's bound, in the warm-up
        self.warmup_rounds = WARMUP_ROUNDS.of(request.training_configuration)
        self.globals_received = 0
        self._last_global: np.ndarray | None = None
        self._pushed_at = 0.0
        self.round_trips_ms: deque[float] = deque(maxlen=1000)  # push → global, milliseconds

    @property
    def bounded(self) -> bool:
        """SSP's bound (staleness 0) holds while this spoke's clock is below
        ``warmupRounds``."""
        return self.clock < self.warmup_rounds

    def on_update(self) -> None:
        super().on_update()
        self.staleness = 0
        self.warmup_rounds = WARMUP_ROUNDS.of(self.request.training_configuration)

    def _push(self, idle: bool = False) -> None:
        self._pushed_at = time.monotonic()
        super()._push(idle)

    def _on_global(self, answers: list) -> None:
        self._last_global = self.assemble([a[0] for a in answers], [a[1] for a in answers])
        self.globals_received += 1
        self.round_trips_ms.append((time.monotonic() - self._pushed_at) * 1000.0)
        super()._on_global(answers)

    def protocol_statistics(self) -> dict:
        out = super().protocol_statistics()
        rtt = np.asarray(self.round_trips_ms)
        out.update({
            "globalsReceived": self.globals_received,
            "lastGlobalDigest": None if self._last_global is None
            else global_digest(self._last_global),
            "roundTripMsP50": float(np.percentile(rtt, 50)) if rtt.size else None,
            "roundTripMsP95": float(np.percentile(rtt, 95)) if rtt.size else None,
        })
        return out


AsynchronousHub.peer = AsynchronousSpoke
