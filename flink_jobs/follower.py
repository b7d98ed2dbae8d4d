"""External predictors: follow the weights topic and predict with the latest global model
(papers/003_026f5d1641a0ab17.txt Fig. 1: the Predictors read the Weights Topic and the
prediction tuples; the training job is not in their path).

>>> follower = ModelFollower("localhost:9092")                          # doctest: +SKIP
>>> follower.wait_for(0, timeout=30).version                            # doctest: +SKIP
12
>>> follower.predict(0, [{"id": 1, "features": [0.1, 0.2, 0.3]}])        # doctest: +SKIP
[{'id': 1, 'pipeline': 0, 'prediction': 4, 'modelVersion': 12}]

``omldm predict --pipeline 0`` is the command-line form (stdin or a topic in, stdout or a
topic out). The record format and how shards are assembled: :mod:`operators.weights`.
"""

from __future__ import annotations

import math
import time
from typing import Any, Iterable

import numpy as np

from flink_jobs.kafka_io import TopicReader
from learning.layout import RecordRejected, check_bounds, declared_bounds
from operators.weights import GlobalModel, ModelAssembler

__all__ = ["ModelFollower", "predict_records"]


def predict_records(model: GlobalModel, records: Iterable[Any], scores: bool = False
                    ) -> list[dict]:
    """Predictions of ``model`` for ``records``, in order, one dict per record: the job's
    prediction format (``id``, ``pipeline``, ``prediction``, ``modelVersion``; with
    ``scores``, ``classes`` and ``probabilities`` where the learner has them) without
    ``spoke``; a record that cannot be predicted gets ``{"id", "pipeline", "error"}``
    (the reason) instead, and the others are unaffected: a record of another width, with
    a feature that is not a finite number (or null where the pipeline imputes), or outside
    the pipeline's ``featureMin`` / ``featureMax`` (the spokes' reason,
    :func:`learning.layout.check_bounds`).

    Parameters
    ----------
    model : operators.weights.GlobalModel
    records : iterable of dict
        ``{"id": any, "features": [float, ...]}`` (extra keys ignored; a feature may be
        null where the pipeline's first preprocessor is StatImputer); a bare list is taken
        as the features of a record without id.
    scores : bool
    """
    recs = list(records)
    width = model.record_width  # the records', not the learner's (behind the preprocessors)
    if width is None:  # a job from before the field: right unless a preprocessor changes it
        width = model.model.learner.layout().get("n_features")
    preps = model.model.preprocessors
    missing_ok = bool(preps) and preps[0].fills_missing  # it fills a null
    cfg = (model.meta or {}).get("trainingConfiguration") or {}
    bounds = declared_bounds(cfg.get("featureMin"), cfg.get("featureMax"))  # as the spokes
    out: list[dict | None] = [None] * len(recs)
    good: list[int] = []
    rows: list[list[float]] = []
    for i, rec in enumerate(recs):
        rid, features, problem = None, None, None
        if isinstance(rec, list):
            features = rec
        elif isinstance(rec, dict):
            rid, features = rec.get("id"), rec.get("features")
        if not isinstance(features, list):
            problem = "a record is a JSON object with a list 'features' (or a bare list)"
        elif width is not None and len(features) != width:
            problem = f"{len(features)} features; pipeline {model.pipeline} takes {width}"
        elif not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                     and math.isfinite(x) or (x is None and missing_ok) for x in features):
            problem = ("features must be finite numbers, or null where the pipeline imputes"
                       if missing_ok else "features must be finite numbers")
        elif bounds is not None:
            try:
                check_bounds(features, bounds)
            except RecordRejected as exc:
                problem = str(exc)
        if problem is not None:
            out[i] = {"id": rid, "pipeline": model.pipeline, "error": problem}
            continue
        good.append(i)
        rows.append(features)
    if rows:
        try:
            predictions = model.predict(rows)
            proba = model.scores(rows) if scores else None
        except (ValueError, TypeError, ArithmeticError, RuntimeError) as exc:
            for i in good:
                out[i] = {"id": _id(recs[i]), "pipeline": model.pipeline,
                          "error": f"the model cannot predict it: {exc}"}
            return out  # type: ignore[return-value]
        for k, (i, p) in enumerate(zip(good, predictions)):
            o = {"id": _id(recs[i]), "pipeline": model.pipeline, "prediction": _plain(p),
                 "modelVersion": model.version}
            if proba is not None:
                o["classes"] = proba["classes"]
                o["probabilities"] = [float(x) if math.isfinite(x) else None
                                      for x in proba["probabilities"][k]]
            out[i] = o
    return out  # type: ignore[return-value]


def _id(rec: Any) -> Any:
    return rec.get("id") if isinstance(rec, dict) else None


def _plain(value: Any) -> Any:
    """A prediction as a JSON value (numpy scalars to Python)."""
    return value.item() if isinstance(value, np.generic) else value


class ModelFollower:
    """Follows the weights topic and keeps every pipeline's latest global model
    (papers/003's Predictor).

    Parameters
    ----------
    bootstrap_servers : str
    topic : str
        The weights topic (``JobConfig.topics.weights``).
    from_beginning : bool
        Read the topic from its beginning (the models published so far, the latest
        winning); False: only what is published from now on.
    client
        kafka-python consumer settings (``KafkaConnection.client_kwargs("consumer")``).

    Attributes
    ----------
    installed : int
        Models installed so far (a new version of any pipeline).

    Raises
    ------
    RuntimeError
        When the topic does not appear within 10 s.
    """

    def __init__(self, bootstrap_servers: str, topic: str = "weights", *,
                 from_beginning: bool = True, **client) -> None:
        self.assembler = ModelAssembler()
        self.reader = TopicReader(bootstrap_servers, topic, json=False,
                                  from_end=not from_beginning, **client)
        self.installed = 0

    def poll(self, timeout_ms: int = 0) -> list[int]:
        """Read what the topic has (waiting up to ``timeout_ms`` for the first record);
        returns the pipelines whose model changed (or was deleted)."""
        changed = []
        for value in self.reader.poll(timeout_ms):
            pid = self.assembler.add(value)
            if pid is not None:
                changed.append(pid)
                self.installed += pid in self.assembler.models
        return changed

    def model(self, pipeline: int) -> GlobalModel | None:
        """The latest model of ``pipeline`` read so far (None: none, or deleted)."""
        return self.assembler.model(pipeline)

    def version(self, pipeline: int) -> int | None:
        got = self.model(pipeline)
        return None if got is None else got.version

    def wait_for(self, pipeline: int, version: int = 0, timeout: float = 30.0) -> GlobalModel:
        """Poll until ``pipeline`` has a model of at least ``version``.

        Raises
        ------
        TimeoutError
            When none comes within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while True:
            got = self.model(pipeline)
            if got is not None and got.version >= version:
                return got
            if time.monotonic() > deadline:
                have = "none" if got is None else f"version {got.version}"
                raise TimeoutError(f"no model of pipeline {pipeline} at version >= {version} "
                                   f"on the weights topic within {timeout} s (have {have})")
            self.poll(100)

    def predict(self, pipeline: int, records: Iterable[Any], scores: bool = False) -> list[dict]:
        """As :func:`predict_records` with the latest model of ``pipeline`` (read what
        the topic has first).

        Raises
        ------
        LookupError
            When no model of ``pipeline`` has been read.
        """
        self.poll(0)
        got = self.model(pipeline)
        if got is None:
            raise LookupError(f"no model of pipeline {pipeline} on the weights topic yet")
        return predict_records(got, records, scores)

    def close(self) -> None:
        self.reader.close()

    def __enter__(self) -> "ModelFollower":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
