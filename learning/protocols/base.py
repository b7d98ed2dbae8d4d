"""What every pipeline's spoke and hub do whatever their protocol: mini-batching,
prequential (test-then-train) statistics, predictions, and answering Query requests
(papers/002 §3.3: "to maintain statistics per-learner and globally", "to interact with
the environment through a special control API").
"""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import numpy as np

from learning.pipeline import Pipeline
from learning.registry import make_learner, make_preprocessor
from learning.update import apply_update
from middleware import Node, remote

__all__ = ["PipelineSpoke", "PipelineHub", "RecordRejected"]


class RecordRejected(ValueError):
    """A record this pipeline cannot use (e.g. the wrong number of features)."""


def _build_pipeline(request) -> Pipeline:
    return Pipeline([make_preprocessor(p, i) for i, p in enumerate(request.pre_processors)],
                    make_learner(request.learner))


def _n_features(request) -> int | None:
    for part in (request.learner or {}).get("parameters") or {}, \
                (request.learner or {}).get("hyperParameters") or {}:
        if part.get("n_features") is not None:
            return int(part["n_features"])
    return None


class PipelineSpoke(Node):
    """One pipeline on one spoke: preprocess → predict, or buffer into mini-batches → fit.

    Parameters
    ----------
    request : learning.requests.Request
        The Create request; ``trainingConfiguration.miniBatchSize`` (records) and
        ``miniBatches`` (mini-batches per synchronization) are read from it.

    Statistics (records): ``fitted``, ``predicted`` (forecasting records answered),
    ``rejected``, ``correct`` (prequential hits), ``loss_sum`` (sum of per-record losses);
    a Query also reports ``held``: records waiting while this pipeline's stream is paused.
    """

    def __init__(self, request) -> None:
        super().__init__()
        self.request = request
        cfg = request.training_configuration
        self.mini_batch_size = int(cfg["miniBatchSize"])
        self.mini_batches = int(cfg["miniBatches"])
        self.pipeline = _build_pipeline(request)
        self.n_features = _n_features(request)
        self._supervised = getattr(self.pipeline.learner, "supervised", True)
        self._X: list[list[float]] = []
        self._y: list[Any] = []
        self.fitted = self.predicted = self.rejected = self.correct = self.batches = 0
        self.fit_errors = 0
        self.last_error: str | None = None
        self.loss_sum = 0.0
        self.queries = 0

    # -- stream --------------------------------------------------------------------------
    def _check(self, features) -> None:
        if not isinstance(features, list):
            raise RecordRejected(f"features must be a list of numbers, got {type(features).__name__}")
        if self.n_features is None:
            self.n_features = len(features)
        elif len(features) != self.n_features:
            raise RecordRejected(f"expected {self.n_features} features, got {len(features)}")

    def on_train(self, features: list, label: Any) -> None:
        """Take one labelled training record; fit when a mini-batch is full.

        Raises
        ------
        RecordRejected
            When the record does not fit this pipeline (counted in ``rejected``).
        """
        try:
            self._check(features)
            if label is None and self._supervised:
                raise RecordRejected("a training record needs a 'label' for this learner")
        except RecordRejected:
            self.rejected += 1
            raise
        self._X.append(features)
        self._y.append(label)
        if len(self._X) >= self.mini_batch_size:
            self.flush()

    def flush(self) -> None:
        """Fit the buffered (possibly partial) mini-batch, test-then-train."""
        if not self._X:
            return
        try:
            X = np.asarray(self._X, dtype=np.float64)
        except (TypeError, ValueError):
            X = self._salvage()
        y = self._y
        self._X, self._y = [], []
        if len(X) == 0:
            return
        try:
            _, n_correct, loss = self.pipeline.test_then_train(X, y)
        except (ValueError, TypeError, ArithmeticError, RuntimeError) as exc:
            # a batch the learner cannot take (e.g. a CNN fed records of the wrong width):
            # counted and reported, never fatal to the job
            self.rejected += len(X)
            self.fit_errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            return
        self.fitted += len(X)
        self.correct += n_correct
        self.loss_sum += float(loss)
        self.batches += 1
        self.on_batch_fitted(len(X))

    def _salvage(self) -> np.ndarray:
        keep_X, keep_y = [], []
        for x, y in zip(self._X, self._y):
            try:
                keep_X.append(np.asarray(x, dtype=np.float64))
                keep_y.append(y)
            except (TypeError, ValueError):
                self.rejected += 1
        self._y = keep_y
        return np.stack(keep_X) if keep_X else np.empty((0, self.n_features or 0))

    def on_predict(self, features: list) -> Any:
        """Predict one forecasting record (a JSON scalar label, or None before any fit).

        Raises
        ------
        RecordRejected
            When the record does not fit this pipeline (counted in ``rejected``).
        """
        try:
            self._check(features)
            X = np.asarray([features], dtype=np.float64)
        except (RecordRejected, TypeError, ValueError) as exc:
            self.rejected += 1
            raise RecordRejected(str(exc)) from exc
        try:
            prediction = self.pipeline.predict(X)[0]
        except (ValueError, TypeError, ArithmeticError, RuntimeError) as exc:
            self.rejected += 1
            raise RecordRejected(f"the learner cannot predict it: {exc}") from exc
        self.predicted += 1
        return prediction

    def on_batch_fitted(self, n_records: int) -> None:
        """Protocol hook: a mini-batch of ``n_records`` was just fitted."""

    # -- control -------------------------------------------------------------------------
    def on_query(self, request_id: Any, service: dict | None = None) -> None:
        """Fit what is buffered, then report this spoke's statistics (and the kernel's
        ``service`` counters) to hub 0, which answers once every spoke has reported."""
        self.flush()
        self.queries += 1
        stats = self.statistics()
        stats["service"] = service or {}
        self.peers[0].report(self.queries, request_id, stats)

    def update(self, request) -> None:
        """Apply an Update request (hyperparameters, mini-batching); the model is kept.

        Raises
        ------
        RequestError
            Nothing changed (see :func:`learning.update.apply_update`).
        """
        self.request = apply_update(self.request, request, self.pipeline)
        cfg = self.request.training_configuration
        self.mini_batch_size = int(cfg["miniBatchSize"])
        self.mini_batches = int(cfg["miniBatches"])
        self.on_update()

    def on_update(self) -> None:
        """Protocol hook: ``self.request.training_configuration`` may have changed."""

    def statistics(self) -> dict:
        return {
            "spoke": self.ctx.index, "fitted": self.fitted, "predicted": self.predicted,
            "rejected": self.rejected, "correct": self.correct, "loss": self.loss_sum,
            "batches": self.batches, "fitErrors": self.fit_errors, "lastError": self.last_error,
            "held": len(getattr(self.ctx, "backlog", ())), "network": self.stats.to_json(),
        }


class PipelineHub(Node):
    """One pipeline on one hub (a shard of the parameter server): holds the global model
    as a learner instance used as a parameter container, and answers Queries."""

    def __init__(self, request) -> None:
        super().__init__()
        # the definition as it runs: every preprocessor's hyperparameters, defaults included
        self.request = replace(request, pre_processors=[
            {**p, "hyperParameters": make_preprocessor(p, i).hyperparameters()}
            for i, p in enumerate(request.pre_processors)])
        self.learner = make_learner(request.learner)
        self.updates = 0
        self._reports: dict[int, dict[int, dict]] = {}

    @remote(oneway=True)
    def report(self, query: int, request_id: Any, stats: dict) -> None:
        """A spoke's statistics for its ``query``-th Query; answered when all are in."""
        got = self._reports.setdefault(query, {})
        got[stats["spoke"]] = stats
        if len(got) == self.n_peers:
            del self._reports[query]
            self.ctx.emit("responses", self.query_response(request_id, [got[i] for i in sorted(got)]))

    def update(self, request) -> None:
        """Apply an Update request to the hub's copy of the definition and learner."""
        holder = SimpleNamespace(learner=self.learner, preprocessors=[
            make_preprocessor(p, i) for i, p in enumerate(self.request.pre_processors)])
        self.request = apply_update(self.request, request, holder)

    def global_statistics(self) -> dict:
        """Protocol statistics of this hub (protocols extend it)."""
        return {"name": self.request.training_configuration["protocol"], "updates": self.updates}

    def model_summary(self, limit: int) -> dict:
        """The global model for a Query: its parameters as a JSON array when it has at
        most ``limit`` of them, else a size-bounded summary with ``truncated: true``."""
        try:
            w = self.learner.get_params()
        except NotImplementedError:
            return {"available": False, "reason": f"{type(self.learner).__name__} has no "
                    "parameter vector (not averageable)"}
        finite = w[np.isfinite(w)]
        out = {"available": True, "size": int(w.size), "layout": self.learner.layout(),
               "truncated": bool(w.size > limit)}
        if w.size > limit:
            out["summary"] = {
                "l2Norm": float(np.linalg.norm(finite)), "nonFinite": int(w.size - finite.size),
                "min": float(finite.min()) if finite.size else None,
                "max": float(finite.max()) if finite.size else None,
                "mean": float(finite.mean()) if finite.size else None,
                "head": [float(x) for x in w[:16]]}
            out["params"] = []
        else:
            out["params"] = [x if math.isfinite(x) else None for x in w.tolist()]
        return out

    def query_response(self, request_id: Any, spokes: list[dict]) -> dict:
        """The answer to a Query, from every spoke's statistics and this hub's model."""
        limit = getattr(self.ctx, "max_response_params", 10_000)
        fitted = sum(s["fitted"] for s in spokes)
        correct = sum(s["correct"] for s in spokes)
        loss = sum(s["loss"] for s in spokes)
        net = [s["network"] for s in spokes]
        service: dict = {}
        for s in spokes:
            for k, v in s.get("service", {}).items():
                service[k] = max(service.get(k, 0), v) if k == "pipelines" else service.get(k, 0) + v
        proto = self.global_statistics()
        proto.update({
            "messagesToHubs": sum(n["messages_sent"] for n in net),
            "bytesToHubs": sum(n["bytes_sent"] for n in net),
            "messagesToSpokes": sum(n["messages_received"] for n in net),
            "bytesToSpokes": sum(n["bytes_received"] for n in net),
            "duplicatesDropped": sum(n["duplicates_dropped"] for n in net),
        })
        return {
            "requestId": request_id, "id": self.request.id, "request": "Query", "status": "ok",
            "fitted": fitted, "fittedPerSpoke": [s["fitted"] for s in spokes],
            "predicted": sum(s["predicted"] for s in spokes),
            "rejected": sum(s["rejected"] for s in spokes),
            "task": getattr(self.learner, "task", "classification"),
            "prequentialAccuracy": (correct / fitted if fitted and getattr(
                self.learner, "task", "classification") == "classification" else None),
            "cumulativeLoss": loss, "meanLoss": loss / fitted if fitted else None,
            "protocol": proto,
            "spokes": [{
                "spoke": s["spoke"], "fitted": s["fitted"], "predicted": s["predicted"],
                "rejected": s["rejected"], "fitErrors": s["fitErrors"], "lastError": s["lastError"],
                "held": s.get("held", 0),
                "messagesSent": s["network"]["messages_sent"],
                "bytesSent": s["network"]["bytes_sent"],
                "messagesReceived": s["network"]["messages_received"],
                "bytesReceived": s["network"]["bytes_received"],
                "duplicatesDropped": s["network"]["duplicates_dropped"],
                **s.get("protocol", {})} for s in spokes],
            "learner": {"name": self.request.learner["name"],
                        "hyperParameters": self.learner.hyperparameters()},
            "preProcessors": [{"name": p["name"], "hyperParameters": p.get("hyperParameters") or {}}
                              for p in self.request.pre_processors],
            "trainingConfiguration": self.request.training_configuration,
            "service": service,
            "model": self.model_summary(limit),
        }
