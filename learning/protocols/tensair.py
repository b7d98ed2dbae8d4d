"""TensAIR: decentralized asynchronous learning, replicas exchanging their updates directly
(papers/000_b1771d206afbfb03.txt, Algorithm 1, §III-B, §III-C).

Every spoke is a model replica. Per papers/000 Algorithm 1 (``train``):

- a mini-batch of its own records: compute the update, apply it locally at once (the
  fit), add it to the outgoing buffer; once the buffer holds ``maxGradBuffer`` updates,
  send their sum to every other spoke (one-way, :attr:`Node.sibling_broadcast`) and empty it;
- an update from another spoke: apply it at once (add it to the local parameters);
- predictions come from the replica's current model (``predict``).

No parameter server is in the data path: the hubs only answer Query, Update and Delete
(hub 0 gathers the spokes' reports, as for every protocol).

What "gradient" means here: the change of the learner's flat parameter vector over one
mini-batch, ``Δ = w_after − w_before``, whatever the learner (papers/000 ships gradients of
a TensorFlow model; omldm's protocols see only the flat vector). For the linear learners
(PA, SVM, the SGD regressors) it is the mini-batch's step; for the PyTorch learners it is
the optimizer's step (with momentum or Adam: the step the optimizer took, not the raw
gradient; the optimizer's own state stays local). Learners that cannot be averaged
(trees) are refused at Create with ``unsupported_pairing``
(:func:`learning.registry.check_pairing`). A learner whose layout grows (new classes) sends
its update with its layout; the receiver grows its model to it first
(``learner.project``).

Preprocessor statistics travel with the updates: once the records a replica fitted since
it last sent statistics are :data:`STATISTICS_SHARE` of all it fitted, its next message
also carries the running statistics (records, means, M2, minima, maxima) its
preprocessors gathered from those records (its statistics minus those it last sent, with
the peers' merged since: :meth:`learning.preprocessors.Preprocessor.subtract_statistics`),
and the receivers merge them exactly (Chan et al.'s parallel update), so every replica
scales features as one scaler that saw all but the last quarter of each replica's
records, as the parameter-server protocols' spokes do at every synchronization
(:mod:`learning.protocols.sharding`). With local scalers a replica took
the first update of a peer when its own scaler had seen two or three records: k-means on
Waveform (4 replicas, seed 1) scored a prequential sum of squared distances of 4,451
instead of 13, from the first 40 records' 443,870.

Clusters: a k-means update's clusters are matched to the receiver's before it is added
(:meth:`learning.learners.kmeans.KMeans.match` on the update's own ``[count, count ×
center]`` rows, whose centers are the means of the records the sender assigned since its
previous message): replicas seed on their own records, so cluster ``j`` of one is not
cluster ``j`` of another.

Staleness (papers/000 §III-B): for an update sent by replica i and applied by replica j,
``|G_i ∪ G_j| − |G_i ∩ G_j|``, where ``G_i`` is the set of updates i had applied when it
computed the update and ``G_j`` the set j had applied just before applying it. Each replica
applies the updates of every origin in the order they were made (its own at once, the
others' FIFO per sibling channel), so an applied set is fully described by a count per
origin (a vector clock) and the symmetric difference is ``Σ_o |c_i[o] − c_j[o]|``. Every
message carries the sender's clock, less the updates the message holds (with
``maxGradBuffer`` 1: the clock when the update was computed; with more, when the last
update of the buffer was computed, less the buffer); the receiver records the staleness
of each message it applies (an update applied locally has staleness 0 and is not counted).

Bounded staleness (papers/000 §III-C: SSP as the convergence condition): with
``maxStaleness`` s, a replica whose own update count ``c_i`` is more than s ahead of the
updates it has applied from some peer j waits, stream paused (``then_sync``), on a call
``until(c_i − s)`` to j, which j answers once it has sent that many updates; FIFO channels
deliver those updates before the answer. A replica asked for updates it has already made
but still buffers sends its partial buffer at once, so two replicas never wait on each
other (the one ahead always has what the one behind asks for). At the end of a finite
stream the slowest replica makes no more updates: a Query (the stream's end, as for BSP
and SSP) sends every partial buffer and answers every wait pending at that time. A replica
that fitted nothing since the previous Query is **idle** from that Query on (until it fits
again): it answers ``until`` at once, saying so, and a replica told so no longer waits on it
until an update of it arrives. Without this a replica that was ahead waited again after its
next mini-batch, until the next Query: one mini-batch per Query (as BSP's and SSP's idle
spokes, :mod:`learning.protocols.synchronous`).

``updateScaling: replicas`` divides every update by the number of replicas n, applied
locally and sent: n replicas each applying all n updates then move as one learner taking
the mean update (papers/000 §III-C's learning-rate discussion; unlike the common
``scaling: learning-rate``, it needs no step-size hyperparameter, e.g. PA). ``none``
applies and sends each update as computed. Unset, it follows the pipeline's aggregation
rule (``trainingConfiguration.aggregation``, else the learner's default,
:func:`learning.protocols.sharding.aggregation_of`): ``sum`` and ``diversity`` →
``none``, ``average`` → ``replicas``, as the parameter-server protocols add or average
the same updates. Measured on the in-process kernel (4 replicas, digits, prequential
accuracy, centralized 0.9252 MLP / 0.9658 PA): the MLP (Adam) with ``maxGradBuffer`` 1
0.9214 unscaled, 0.9344 scaled; with 4, 0.8527 unscaled (four replicas' Adam steps added
at once, stale) and 0.9064 scaled; PA with 1 0.9626 unscaled, 0.9497 scaled (RandomRBF
0.8016 against 0.7790).

Statistics (Query, per spoke): ``updatesMade`` (mini-batches, own updates),
``updatesSent`` (messages), ``updatesApplied`` (messages from others), ``updatesReceived``
(updates in them), ``updatesDropped`` (messages from others of a model before an Update
changed the layout: another width, or classes left out; not applied),
``statisticsDropped`` (peers' preprocessor statistics that did not fit), ``bytesToSiblings``
/ ``bytesFromSiblings``, ``staleness`` (``mean``, ``p95``, ``max``), ``clock``, ``waits``
(times it paused on ``maxStaleness``), ``maxLead``, ``idle`` (fitted nothing between the
last two Queries). The pipeline's
``protocol`` adds the staleness over all spokes and the replicas' ``spread``: the largest
L2 distance of a replica's parameter vector from the replicas' mean at Query time
(``model``: that mean).
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from typing import Any

import numpy as np

from learning.errors import RequestError
from learning.protocols.base import PipelineHub, PipelineSpoke
from learning.protocols.parameters import Param, ProtocolParams
from learning.protocols.sharding import ADDS_DELTAS, aggregation_of
from middleware import Promise, remote

log = logging.getLogger(__name__)

__all__ = ["TensAIRSpoke", "TensAIRHub", "PARAMETERS", "MAX_GRAD_BUFFER", "MAX_STALENESS",
           "UPDATE_SCALING", "staleness_summary"]

#: ``trainingConfiguration.maxGradBuffer``: updates per message (papers/000 Algorithm 1)
MAX_GRAD_BUFFER = Param("maxGradBuffer", int, 1, "updates (mini-batches) a replica buffers "
                        "before sending their sum to every other replica (papers/000 Alg. 1)",
                        interval="[1, 100000]")
#: ``trainingConfiguration.maxStaleness``: the SSP-style bound (None: unbounded)
MAX_STALENESS = Param("maxStaleness", int, None, "s, own updates a replica may make beyond "
                      "those it applied from its slowest peer before it waits (unset: "
                      "never waits; papers/000 §III-C)", interval="[0, 100000]")
#: ``trainingConfiguration.updateScaling``
UPDATE_SCALING = Param("updateScaling", str, None, "replicas: every update is divided by "
                       "the number of replicas, applied and sent; none: as computed (unset: "
                       "none under the sum aggregation rule, replicas under average)",
                       choices=("none", "replicas"))
#: a replica sends its preprocessors' statistics with an update once the records it
#: fitted since it last sent them are this share of all it fitted: with every message
#: while the scalers are young, ever more rarely as they settle (its records grow by a
#: third from one send to the next: about 25 sends over 12,500 records), and no replica
#: lacks more than this share of another's records. With every message (share 0) they
#: cost 20-80 % more bytes and half the in-process speed on digits-PA, RandomRBF,
#: Waveform and Phishing with PA; at 0.25, 1-15 % more bytes on the quality experiment's
#: long streams and 41-61 % on Phishing (1,250 records), for the same accuracy or better
#: (README, "TensAIR"; in process, 4 replicas, buffer 1: Phishing 0.8870 against 0.8770
#: with statistics of its own, digits-PA 0.9644 against 0.9626)
STATISTICS_SHARE = 0.25
#: TensAIR's declaration (:mod:`learning.protocols.parameters`)
PARAMETERS = ProtocolParams(
    term="TensAIR", reference="papers/000 Algorithm 1, §III-B (staleness), §III-C (SSP bound)",
    params=(MAX_GRAD_BUFFER, MAX_STALENESS, UPDATE_SCALING))


def staleness_summary(histogram: Counter) -> dict:
    """``{"count", "mean", "p95", "max"}`` of a histogram (staleness → applied messages);
    p95 is the nearest-rank percentile; None for an empty histogram."""
    count = sum(histogram.values())
    if not count:
        return {"count": 0, "mean": None, "p95": None, "max": None}
    values = sorted(histogram)
    rank, seen, p95 = math.ceil(0.95 * count), 0, values[-1]
    for v in values:
        seen += histogram[v]
        if seen >= rank:
            p95 = v
            break
    return {"count": count, "mean": sum(v * n for v, n in histogram.items()) / count,
            "p95": p95, "max": values[-1]}


def _records_held(statistics: list | None) -> int:
    """Records a replica's preprocessor statistics hold (its first with a count)."""
    return max((int(st.get("n", 0)) for st in statistics or () if st), default=-1)


class TensAIRHub(PipelineHub):
    """Not in the data path: answers Query (hub 0 gathers the replicas' reports), Update
    and Delete. A Query's ``model`` is the mean of the replicas at Query time, with
    ``preProcessors``: the statistics of the replica whose scalers hold the most records
    (the replicas share theirs)."""

    _mean: tuple[np.ndarray, dict] | None = None  # the replicas' mean at the last Query
    #: the preprocessor statistics of the replica holding the most records at the last Query
    _scalers: list | None = None

    def query_response(self, request_id: Any, spokes: list[dict]) -> dict:
        replicas = [s.pop("replica") for s in spokes]
        scalers = [s.pop("scalers", None) for s in spokes]
        # the statistics of the replica that holds the most records (they share theirs)
        self._scalers = max(scalers, key=_records_held, default=None)
        self._mean = None
        spread = None
        layouts = [layout for _, layout in replicas]
        if replicas and all(layout == layouts[0] for layout in layouts):
            vectors = np.stack([np.asarray(w, dtype=np.float64) for w, _ in replicas])
            self._mean = (vectors.mean(axis=0), layouts[0])
            spread = float(np.linalg.norm(vectors - self._mean[0], axis=1).max()) \
                if vectors.size else 0.0
        answer = super().query_response(request_id, spokes)
        histogram = Counter()
        for s in answer["spokes"]:
            histogram.update({int(v): int(n) for v, n in s.pop("stalenessHistogram")})
        first = answer["spokes"][0] if answer["spokes"] else {}
        answer["protocol"].update({
            "updates": sum(s["updatesMade"] for s in answer["spokes"]),
            "updatesSent": sum(s["updatesSent"] for s in answer["spokes"]),
            "updatesApplied": sum(s["updatesApplied"] for s in answer["spokes"]),
            "bytesBetweenSpokes": sum(s["bytesToSiblings"] for s in answer["spokes"]),
            "staleness": staleness_summary(histogram),
            "spread": spread,
            "updateScaling": first.get("updateScaling"),  # every replica runs the same rule
        })
        return answer

    def model_summary(self, limit: int) -> dict:
        """The replicas' mean (as :meth:`PipelineHub.model_summary` shows a model); not
        available when the replicas' layouts differ."""
        mean = self._mean
        if mean is None:
            return {"available": False, "reason": "the replicas' layouts differ"}
        w, layout = mean
        out = {"available": True, "size": int(w.size), "layout": layout,
               "truncated": bool(w.size > limit), "mean": "of the replicas"}
        if w.size > limit:
            out["summary"] = {"l2Norm": float(np.linalg.norm(w)), "head": [float(x) for x in w[:16]]}
            out["params"] = []
        else:
            out["params"] = [x if math.isfinite(x) else None for x in w.tolist()]
        if self._scalers is not None:
            out["preProcessors"] = [None if st is None else
                                    {k: v.tolist() if isinstance(v, np.ndarray) else v
                                     for k, v in st.items()} for st in self._scalers]
        return out


class TensAIRSpoke(PipelineSpoke):
    """A TensAIR model replica (papers/000 Algorithm 1), with sibling proxies only.

    Attributes
    ----------
    applied : list[int]
        The vector clock: updates applied, per origin replica (this one's own included).
    updates_sent, updates_applied : int
        Messages sent to every other replica (one broadcast counts once); messages applied.
    staleness : collections.Counter
        Staleness (papers/000 §III-B) → messages applied with it.
    waits, max_lead : int
        Times the stream paused on ``maxStaleness``; the largest lead ``c_i − min_j
        applied[j]`` this replica went on with over the peers not idle (≤ ``maxStaleness``
        when set).
    idle : bool
        This replica fitted nothing between the last two Queries and nothing since.
    """

    talks_to_siblings = True
    # class defaults for snapshots taken before these existed
    idle = False
    _idle_peers: frozenset = frozenset()  # peers that said they were idle, since

    peer = None  # TensAIRHub, set below

    def __init__(self, request) -> None:
        super().__init__(request)
        values = PARAMETERS.of(request.training_configuration)
        self.max_grad_buffer = values["maxGradBuffer"]
        self.max_staleness = values["maxStaleness"]
        self.update_scaling = self._scaling(values)
        self.applied: list[int] = []
        self.updates_sent = self.updates_applied = self.updates_received = 0
        self.staleness: Counter = Counter()
        self.waits = self.max_lead = 0
        self._sent = 0  # own updates sent
        self._buffer: tuple[np.ndarray, dict] | None = None  # summed updates not yet sent
        self._buffered = 0
        self._base: tuple[np.ndarray, dict] | None = None  # parameters after the last change
        self._asked: list[tuple[int, Promise]] = []  # peers' until(n) not answered yet
        self._waiting = False

    #: the preprocessors' statistics when this replica last sent them, with every peer's
    #: merged since (None for one without statistics); None: a snapshot from before they
    #: travelled
    _prep_sent: list | None = None
    #: records this replica had fitted when it last sent statistics
    _stats_fitted = 0
    #: peers' statistics that did not fit this replica's (another width), left out
    statistics_dropped = 0

    def attach(self, ctx) -> None:
        super().attach(ctx)
        self.applied = [0] * ctx.n_spokes
        self._base = self._params()
        self._prep_sent = [p.statistics() for p in self.pipeline.preprocessors]

    def on_update(self) -> None:
        super().on_update()
        values = PARAMETERS.of(self.request.training_configuration)
        self.max_grad_buffer = values["maxGradBuffer"]
        self.max_staleness = values["maxStaleness"]
        self.update_scaling = self._scaling(values)

    def _scaling(self, values: dict) -> str:
        """``updateScaling`` as given, else by the aggregation rule: ``sum`` and
        ``diversity`` → ``none``, ``average`` → ``replicas``."""
        if values["updateScaling"] is not None:
            return values["updateScaling"]
        rule = aggregation_of(self.request.training_configuration, self.pipeline.learner)
        return "none" if rule in ADDS_DELTAS else "replicas"

    def on_relayout(self) -> None:
        super().on_relayout()
        self._buffer, self._buffered = None, 0  # updates of the model that was reset
        self._base = self._params()
        self._prep_sent = [p.statistics() for p in self.pipeline.preprocessors]
        self._stats_fitted = self.fitted

    def _params(self) -> tuple[np.ndarray, dict]:
        learner = self.pipeline.learner
        return learner.get_params().copy(), learner.layout()

    def _in_current(self, vec_layout: tuple[np.ndarray, dict]) -> np.ndarray:
        vec, layout = vec_layout
        return self.pipeline.learner.project(vec, layout)

    # -- Algorithm 1, a mini-batch of this replica's records ---------------------------------
    def on_batch_fitted(self, n_records: int) -> None:
        self.idle = False
        learner = self.pipeline.learner
        w = learner.get_params()
        base = self._in_current(self._base)
        delta = w - base
        if self.update_scaling == "replicas" and self.ctx.n_spokes > 1:
            delta /= self.ctx.n_spokes
            w = base + delta
            learner.set_params(w)
        self._base = (w.copy(), learner.layout())
        self.applied[self.ctx.index] += 1
        if self._buffer is None:
            self._buffer = (delta, learner.layout())
        else:
            self._buffer = (self._in_current(self._buffer) + delta, learner.layout())
        self._buffered += 1
        if self._buffered >= self.max_grad_buffer:
            self._send_buffer()
        self._keep_within_bound()

    def _send_buffer(self) -> None:
        if not self._buffered:
            return
        delta, layout = self._buffer
        clock = list(self.applied)
        clock[self.ctx.index] -= self._buffered
        self.sibling_broadcast.apply(delta, layout, self._buffered, self.ctx.index, clock,
                                     self._statistics_since_sent())
        self.updates_sent += 1
        self._sent += self._buffered
        self._buffer, self._buffered = None, 0
        still = []
        for n, p in self._asked:
            if self._sent >= n:
                p.fulfil(self._sent)
            else:
                still.append((n, p))
        self._asked = still

    def _statistics_since_sent(self) -> list | None:
        """What this replica's preprocessors learned from its own records since it last
        sent statistics (per preprocessor; None for one without statistics), once those
        records are :data:`STATISTICS_SHARE` of all it fitted; else None, as when none
        has statistics (or a snapshot from before they travelled)."""
        sent = self._prep_sent
        new = self.fitted - self._stats_fitted
        if sent is None or new <= 0 or new < STATISTICS_SHARE * self.fitted \
                or all(s is None for s in sent):
            return None
        self._stats_fitted = self.fitted
        preps = self.pipeline.preprocessors
        now = [p.statistics() for p in preps]
        self._prep_sent = now
        return [None if s is None else type(p).subtract_statistics(s, b)
                for p, s, b in zip(preps, now, sent)]

    def _merge_statistics(self, stats: list) -> None:
        """Merge a peer's statistics (of its own records since its previous message) into
        this replica's preprocessors, and into what it counts as sent: they are not its
        own to send. Statistics that do not fit (another number of preprocessors, another
        width) are left out and counted (``statisticsDropped``), never raised."""
        preps, sent = self.pipeline.preprocessors, self._prep_sent
        try:
            if len(stats) != len(preps):
                raise ValueError(f"statistics of {len(stats)} preprocessors, the pipeline "
                                 f"has {len(preps)}")
            merged = [None if d is None else type(p).merge_statistics(p.statistics(), d)
                      for p, d in zip(preps, stats)]
            bases = None if sent is None else [  # None: an older snapshot's, which sends none
                b if d is None else type(p).merge_statistics(b, d)
                for p, d, b in zip(preps, stats, sent)]
        except (ValueError, TypeError, KeyError) as exc:
            self.statistics_dropped += 1
            log.warning("%s: a peer's preprocessor statistics left out: %s", self.name, exc)
            return
        for p, m in zip(preps, merged):
            if m is not None:
                p.load_statistics(m)
        self._prep_sent = bases

    # -- Algorithm 1, an update from another replica ----------------------------------------
    @remote(oneway=True)
    def apply(self, delta: np.ndarray, layout: dict, count: int, spoke: int, clock: list,
              statistics: list | None = None) -> None:
        """Replica ``spoke``'s sum of ``count`` updates, made with ``clock`` applied (its
        vector clock, less these updates): apply it at once (papers/000 Algorithm 1), and
        merge ``statistics``, what its preprocessors learned from its records since its
        previous message."""
        applied = self.applied
        self._idle_peers = self._idle_peers - {spoke}  # it fits again
        self.staleness[sum(abs(int(c) - a) for c, a in zip(clock, applied))] += 1
        applied[spoke] += int(count)
        learner = self.pipeline.learner
        # of a model from before an Update of the layout
        if self.layout.misfit(layout, self.model_width(self.layout)):
            self.updates_dropped += 1  # counted in the clock, as applied: nobody waits on it
            return
        if statistics is not None:
            self._merge_statistics(statistics)
        d = learner.project(delta, layout)  # grows this model to the sender's layout first
        if learner.matches_units:  # the sender's units (k-means' clusters) in this model's order
            [d] = learner.match([d], learner.get_params())
        base = self._in_current(self._base)
        w = learner.get_params() + d
        learner.set_params(w)
        self._base = (base + d, learner.layout())
        self.updates_applied += 1
        self.updates_received += int(count)

    #: updates of another replica's model from before an Update that changed the layout
    #: (another width, or classes this pipeline no longer declares), dropped unapplied; a
    #: class default for snapshots taken before they were counted
    updates_dropped = 0

    # -- bounded staleness (papers/000 §III-C) ----------------------------------------------
    @remote
    def until(self, n: int):
        """Answer once this replica has sent ``n`` of its own updates (sending its partial
        buffer at once when it has made them); FIFO delivers them before the answer. An
        idle replica answers at once ``[updates sent, True]``: it makes no more."""
        if self.idle:
            self._send_buffer()
            return [self._sent, True]
        if self._sent < n <= self.applied[self.ctx.index]:
            self._send_buffer()
        if self._sent >= n:
            return self._sent
        p = Promise()
        self._asked.append((int(n), p))
        return p

    def _keep_within_bound(self) -> None:
        s = self.max_staleness
        me = self.ctx.index
        own = self.applied[me]
        others = [j for j in range(self.ctx.n_spokes) if j != me]
        if s is None or not others or self._waiting:
            return
        active = [j for j in others if j not in self._idle_peers]
        behind = [j for j in active if own - self.applied[j] > s]
        if not behind:
            if active:
                self.max_lead = max(self.max_lead, own - min(self.applied[j] for j in active))
            return
        self.waits += 1
        self._waiting = True
        pending = set(behind)

        def arrived(j: int):
            def cb(value: Any) -> None:
                if isinstance(value, list) and value[1]:  # j is idle: wait no more on it
                    self._idle_peers = self._idle_peers | {j}
                pending.discard(j)
                if not pending:
                    self._waiting = False
                    still = [k for k in others if k not in self._idle_peers]
                    if still:
                        self.max_lead = max(self.max_lead, self.applied[me] - min(
                            self.applied[k] for k in still))
            return cb

        for j in behind:
            self.siblings[j].until(own - s).then_sync(arrived(j))

    # -- Query -------------------------------------------------------------------------------
    def on_lull(self) -> None:
        """Fit what is buffered, send the partial update buffer, answer every peer's
        pending ``until`` (the stream may have ended; idle, saying so)."""
        self.flush()
        # not while paused on a peer: then records wait behind the pause
        self.idle = self.quiet_since_last_query() and not self._waiting
        self._send_buffer()
        asked, self._asked = self._asked, []
        for _, p in asked:
            p.fulfil([self._sent, True] if self.idle else self._sent)

    def check_export(self) -> None:
        """A Query may not ask TensAIR for ``export``.

        Raises
        ------
        RequestError
            ``unsupported`` (field ``export``): no node holds a global model to re-create
            a pipeline from (a Query's ``model`` is the replicas' mean at that moment).
        """
        raise RequestError("unsupported", "protocol TensAIR keeps no global model to export: "
                           "each replica holds its own (a Query's model shows their mean)",
                           "export")

    def statistics(self) -> dict:
        out = super().statistics()
        stats = self.stats
        w, layout = self._params()
        out["replica"] = [w, layout]
        out["scalers"] = [p.statistics() for p in self.pipeline.preprocessors]
        out["protocol"] = {
            "updatesMade": self.applied[self.ctx.index], "updatesSent": self.updates_sent,
            "updatesApplied": self.updates_applied, "updatesReceived": self.updates_received,
            "updatesDropped": self.updates_dropped,
            "statisticsDropped": self.statistics_dropped,
            "bytesToSiblings": stats.sibling_sent_bytes,
            "bytesFromSiblings": stats.sibling_received_bytes,
            "staleness": staleness_summary(self.staleness),
            "stalenessHistogram": sorted(self.staleness.items()),
            "clock": list(self.applied), "waits": self.waits, "maxLead": self.max_lead,
            "idle": self.idle,
            "maxGradBuffer": self.max_grad_buffer, "maxStaleness": self.max_staleness,
            "updateScaling": self.update_scaling,
        }
        return out


TensAIRSpoke.peer = TensAIRHub
TensAIRHub.peer = TensAIRSpoke
