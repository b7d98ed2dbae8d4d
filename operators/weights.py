"""The weights topic: hubs publish the global model, followers rebuild it and predict
(papers/003_026f5d1641a0ab17.txt §II, Fig. 1: "the training pipeline … publishes the
learned weights to the Weights Topic", read by separate Predictors).

Publication (:class:`Publisher`, hosted by :class:`operators.hub_kernel.HubKernel`). After a
synchronization changed a pipeline's global model (its hub's ``updates`` counter moved),
each hub publishes its shard, at most once every ``weights_every_ms`` milliseconds per
pipeline; a change held back by that limit is published when the interval has passed (a
processing-time timer in the job, :meth:`Publisher.flush`), so the last model of a stream
that stops is published too. Deleting a pipeline publishes a tombstone (hub 0).

Record format. Every record is an envelope of :mod:`middleware.codec` (no pickle: JSON
meta, numeric arrays as raw little-endian buffers with dtype and shape), sent by the hub
(``src_side`` hub, ``src_index`` j) of network = pipeline id, method ``"weights"``,
``seq`` = the model version. Its payload (:meth:`learning.protocols.sharding.ShardedHub.
weights`):

==================  =================================================================
``pipeline``        the pipeline id (int)
``version``         the model version: the hub's ``updates`` (synchronizations that
                    changed its shard), monotonically increasing; every hub of a
                    pipeline takes part in every synchronization, so hubs count alike
``hub``, ``hubs``   this shard's hub index j and the pipeline's hub count m
``start``, ``stop``  the entries ``[start, stop)`` of the global vector in this shard
``size``            D, the length of the global parameter vector
``layout``          the learner's layout (classes, n_features, …): ``learner.grow``
``recordWidth``     the width of the pipeline's records (the learner's ``n_features`` is
                    what the preprocessors make of them); None while not agreed
``shard``           (stop − start,) float64, the global model's entries
``learner``         the learner spec the pipeline runs (``name``, ``hyperParameters``,
                    ``parameters``): rebuilt with :func:`learning.registry.make_learner`
                    for the preprocessors' width (``model_learner_spec``)
``preProcessors``   hub 0: the preprocessor specs (``name``, ``hyperParameters``)
``statistics``      hub 0: per preprocessor, its global statistics (records, means, M2,
                    minima, maxima as arrays) or None
``timeMs``          wall-clock milliseconds at publication
==================  =================================================================

A tombstone has method ``"deleted"`` and payload ``{"pipeline", "timeMs"}``.
A record larger than ``max_message_bytes`` travels as fragments (kind FRAGMENT, payload
``[index, count, uint8 piece]``, ``seq`` = version), consecutive on the topic partition,
reassembled by :class:`ModelAssembler` (a fragment out of order drops the partial record).

A follower (:class:`ModelAssembler`, and :class:`flink_jobs.follower.ModelFollower` over
Kafka) keeps each hub's latest shard and assembles the global vector when it has one of
every hub of the same layout. Each hub publishes on its own clock, so with ``m > 1`` hubs
an assembled model may combine shards of consecutive versions (as a parameter server's
readers do); its ``version`` is the smallest shard version and ``consistent`` says
whether all are equal. After the stream stops every hub publishes its last shard, and
the assembled model is exactly the job's global model (``tests/test_weights.py``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from learning.pipeline import Pipeline
from learning.registry import make_learner, make_preprocessor, model_learner_spec
from middleware import codec
from middleware.envelope import HUB, SPOKE, Envelope, Kind
from middleware.errors import CodecError
from middleware.node import FRAGMENT_OVERHEAD

__all__ = ["WEIGHTS_METHOD", "TOMBSTONE_METHOD", "weights_records", "tombstone_record",
           "Publisher", "ModelAssembler", "GlobalModel"]

log = logging.getLogger(__name__)

WEIGHTS_METHOD = "weights"
TOMBSTONE_METHOD = "deleted"


def weights_records(payload: dict, max_bytes: int) -> list[bytes]:
    """One weights record (or its fragments, each at most ``max_bytes`` bytes) for
    ``payload`` (see the module docstring).

    Raises
    ------
    middleware.errors.CodecError
        When the payload holds something neither JSON nor a numeric array.
    """
    network, hub, version = int(payload["pipeline"]), int(payload["hub"]), int(payload["version"])
    data = codec.encode(Envelope(network, HUB, hub, SPOKE, 0, version, 0, WEIGHTS_METHOD,
                                 Kind.ONEWAY, payload))
    if len(data) <= max_bytes:
        return [data]
    step = max(1, max_bytes - FRAGMENT_OVERHEAD)
    pieces = [np.frombuffer(data, np.uint8, count=min(step, len(data) - i), offset=i)
              for i in range(0, len(data), step)]
    return [codec.encode(Envelope(network, HUB, hub, SPOKE, 0, version, i, WEIGHTS_METHOD,
                                  Kind.FRAGMENT, [i, len(pieces), piece]))
            for i, piece in enumerate(pieces)]


def tombstone_record(network: int, hub: int = 0) -> bytes:
    """The record saying pipeline ``network`` was deleted."""
    return codec.encode(Envelope(network, HUB, hub, SPOKE, 0, 0, 0, TOMBSTONE_METHOD,
                                 Kind.ONEWAY, {"pipeline": network,
                                               "timeMs": int(time.time() * 1000)}))


class Publisher:
    """When a hub kernel publishes each pipeline's shard (the rate limit of the module
    docstring).

    Parameters
    ----------
    every_ms : int or None
        Milliseconds between two publications of one pipeline (0: after every
        synchronization); None: publishing is off.
    max_bytes : int
        Largest record; larger ones are fragmented.

    Attributes
    ----------
    published : dict[int, int]
        Per pipeline, the version published last.
    records : int
        Records written (fragments counted one by one).
    """

    def __init__(self, every_ms: int | None, max_bytes: int) -> None:
        self.every_ms = every_ms
        self.max_bytes = max_bytes
        self.published: dict[int, int] = {}
        self._last: dict[int, float] = {}   # pipeline -> seconds of its last publication
        self.pending: set[int] = set()      # pipelines with a change held back
        self.records = 0

    @property
    def on(self) -> bool:
        return self.every_ms is not None

    def changed(self, network: int, node: Any, now: float, out: Callable[[bytes], None]) -> None:
        """Publish ``node``'s shard if its version moved and the interval has passed
        (``now``: seconds, the kernel's clock); else remember it for :meth:`flush`."""
        if not self.on or not hasattr(node, "weights"):
            return
        if node.updates == self.published.get(network, -1) or node.updates == 0:
            return
        last = self._last.get(network)
        if last is not None and (now - last) * 1000.0 < self.every_ms:
            self.pending.add(network)
            return
        self._publish(network, node, now, out)

    def due_in(self, now: float) -> float | None:
        """Seconds until the earliest held-back change may be published (0: now), or None
        when nothing is held back."""
        if not self.pending:
            return None
        return max(0.0, min(self._last.get(n, now) + self.every_ms / 1000.0 - now
                            for n in self.pending))

    def flush(self, nodes: dict, now: float, out: Callable[[bytes], None],
              force: bool = False) -> None:
        """Publish every held-back change whose interval has passed (all with ``force``)."""
        for network in sorted(self.pending):
            node = nodes.get(network)
            if node is None:
                self.pending.discard(network)
                continue
            if force or (now - self._last.get(network, now)) * 1000.0 >= self.every_ms:
                self._publish(network, node, now, out)

    def _publish(self, network: int, node: Any, now: float, out: Callable[[bytes], None]) -> None:
        self.pending.discard(network)
        self._last[network] = now
        self.published[network] = node.updates
        try:
            records = weights_records(node.weights(), self.max_bytes)
        except (CodecError, ValueError, TypeError) as exc:  # never stop the hub for this
            log.warning("pipeline %d: weights not published: %s", network, exc)
            return
        for r in records:
            out(r)
        self.records += len(records)

    def deleted(self, network: int, hub: int, out: Callable[[bytes], None]) -> None:
        """Pipeline ``network`` was deleted: hub 0 publishes a tombstone."""
        self.pending.discard(network)
        self.published.pop(network, None)
        self._last.pop(network, None)
        if self.on and hub == 0:
            out(tombstone_record(network, hub))
            self.records += 1


@dataclass
class GlobalModel:
    """A pipeline's global model as rebuilt from the weights topic.

    Attributes
    ----------
    pipeline : int
    version : int
        The smallest version of its shards.
    shard_versions : list[int]
        Each hub's shard version (index = hub).
    consistent : bool
        Whether every shard has the same version.
    model : learning.pipeline.Pipeline
        Preprocessors (with the global statistics) and learner (with the global
        parameters): ``model.predict(X)`` with X ``(n_records, n_features)`` float64.
    record_width : int or None
        ``n_features``, the width of the pipeline's records (None when the publishing
        job did not say).
    published_ms : int
        The newest shard's publication time (wall-clock milliseconds).
    """

    pipeline: int
    version: int
    shard_versions: list[int]
    consistent: bool
    model: Pipeline
    published_ms: int = 0
    meta: dict = field(default_factory=dict)
    record_width: int | None = None

    def predict(self, features: list) -> list:
        """Predictions for ``features`` (a list of records' feature lists, all of the
        pipeline's width), as the job's spokes make them.

        Raises
        ------
        ValueError
            For records of another width, or non-numeric features.
        """
        X = np.asarray(features, dtype=np.float64)
        if X.ndim != 2:
            raise ValueError(f"expected a list of feature lists, got shape {X.shape}")
        return self.model.predict(X)

    def scores(self, features: list) -> dict | None:
        """``{"classes", "probabilities"}`` (probabilities ``(n_records, n_classes)``) where
        the learner has class probabilities, else None."""
        learner = self.model.learner
        if not learner.has_proba or not learner.classes:
            return None
        proba = self.model.predict_proba(np.asarray(features, dtype=np.float64))
        return {"classes": list(learner.classes), "probabilities": proba}


class ModelAssembler:
    """Rebuilds pipelines' global models from weights records, in topic order.

    ``add(record)`` takes one record's bytes; ``model(pipeline)`` is the latest assembled
    :class:`GlobalModel` (None before a shard of every hub arrived, or after a
    tombstone). Records that are not weights records are counted in ``bad`` and skipped.
    """

    def __init__(self) -> None:
        self.shards: dict[int, dict[int, dict]] = {}   # pipeline -> hub -> payload
        self.models: dict[int, GlobalModel] = {}
        self._parts: dict[tuple[int, int], tuple[int, list[bytes] | None]] = {}
        self.bad = 0
        self.deleted: set[int] = set()

    def add(self, data: bytes) -> int | None:
        """Take one record; returns the pipeline whose model changed (None otherwise)."""
        try:
            env = codec.decode(bytes(data))
            if env.kind is Kind.FRAGMENT:
                whole = self._fragment(env)
                if whole is None:
                    return None
                env = codec.decode(whole)
            if env.method == TOMBSTONE_METHOD:
                pid = int(env.payload["pipeline"])
                self.shards.pop(pid, None)
                self.models.pop(pid, None)
                self.deleted.add(pid)
                return pid
            if env.method != WEIGHTS_METHOD or env.kind is not Kind.ONEWAY:
                raise CodecError(f"not a weights record: {env.method} {env.kind.name}")
            return self._shard(env.payload)
        except (CodecError, KeyError, TypeError, ValueError) as exc:
            self.bad += 1
            log.warning("weights topic: skipped a record: %s", exc)
            return None

    def _fragment(self, env: Envelope) -> bytes | None:
        """Collect a fragment; the whole record once its last fragment arrived. A record
        whose fragments come out of order is dropped once (counted in ``bad``); its
        remaining fragments are skipped silently."""
        index, count, piece = env.payload
        key = (env.network, env.src_index)
        version, parts = self._parts.get(key, (env.seq, []))
        if index == 0:
            version, parts = env.seq, []
        if parts is None and version == env.seq:  # the rest of a record already dropped
            return None
        if version != env.seq or parts is None or index != len(parts):
            self._parts[key] = (env.seq, None)
            raise CodecError(f"fragment {index} of {count} of pipeline {env.network} hub "
                             f"{env.src_index} out of order: the record is dropped")
        parts.append(bytes(piece))
        if index + 1 < count:
            self._parts[key] = (version, parts)
            return None
        self._parts.pop(key, None)
        return b"".join(parts)

    def _shard(self, p: dict) -> int | None:
        pid, hub, hubs = int(p["pipeline"]), int(p["hub"]), int(p["hubs"])
        self.deleted.discard(pid)
        got = self.shards.setdefault(pid, {})
        old = got.get(hub)
        if old is not None and int(old["version"]) > int(p["version"]):
            return None  # an older version (a restored job publishing again): keep ours
        got[hub] = p
        for j in [j for j in got if j >= hubs]:  # a re-created pipeline with fewer hubs
            del got[j]
        if len(got) < hubs or any(q["layout"] != p["layout"] or int(q["size"]) != int(p["size"])
                                  for q in got.values()):
            return None
        self.models[pid] = self._assemble(pid, [got[j] for j in range(hubs)])
        return pid

    @staticmethod
    def _assemble(pid: int, parts: list[dict]) -> GlobalModel:
        first = parts[0]
        w = np.zeros(int(first["size"]), dtype=np.float64)
        for q in parts:
            w[int(q["start"]):int(q["stop"])] = np.asarray(q["shard"], dtype=np.float64)
        learner = make_learner(model_learner_spec(first.get("preProcessors"), first["learner"]))
        learner.grow(first["layout"])
        learner.set_params(w)
        preps = []
        for i, (spec, stats) in enumerate(zip(first.get("preProcessors") or [],
                                              first.get("statistics") or [])):
            prep = make_preprocessor(spec, i)
            if stats is not None:
                prep.load_statistics(stats)
            preps.append(prep)
        versions = [int(q["version"]) for q in parts]
        return GlobalModel(pid, min(versions), versions, len(set(versions)) == 1,
                           Pipeline(preps, learner), max(int(q.get("timeMs", 0)) for q in parts),
                           {"trainingConfiguration": first.get("trainingConfiguration")},
                           first.get("recordWidth"))

    def model(self, pipeline: int) -> GlobalModel | None:
        return self.models.get(pipeline)
