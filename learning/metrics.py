"""Prequential quality metrics of a pipeline beyond accuracy, cumulative and over a
rolling window, with `river.metrics` defining every value.

A spoke keeps, per pipeline, a :class:`QualityState`: what its prequential
(test-then-train) predictions were against their labels, as *sufficient statistics* that
merge across spokes exactly, counted per mini-batch with no per-record Python object kept:

- classification: confusion counts ``(true label, predicted label) → records``
  (:class:`ConfusionCounts`); river's :class:`~river.metrics.Accuracy`,
  :class:`~river.metrics.MacroF1` and :class:`~river.metrics.CohenKappa` are read from a
  :class:`~river.metrics.ConfusionMatrix` filled with them (:func:`classification_values`);
- regression: river's :class:`~river.stats.Mean` of the absolute and of the squared
  errors and :class:`~river.stats.Var` of the labels, merged with river's ``+=`` (Chan et
  al.'s parallel update); MAE, RMSE and R² follow river's :class:`~river.metrics.MAE`,
  :class:`~river.metrics.RMSE` and :class:`~river.metrics.R2` (:class:`ErrorMoments`);
- clustering (k-means) has no labels to score: no state (None).

Log loss and ROC AUC are not computed: no learner's contract
(:class:`learning.learners.Learner`) returns class probabilities or decision scores with
its prequential predictions, only labels.

The rolling window
------------------
``trainingConfiguration.metricsWindow`` ``W`` (records; 0: no rolling metrics) is split
over the pipeline's ``k`` spokes: each keeps its own last ``ceil(W / k)`` records, so the
pipeline's window is its last ``≈ W`` records while the spokes get records at equal rates.
A spoke counts in *chunks* of whole mini-batches of at least ``ceil(W / (16 k))`` records
and drops its oldest chunk while the others still hold ``ceil(W / k)`` records: its window
holds ``ceil(W / k)`` records up to one chunk plus one mini-batch more (at most 17 chunks,
whatever the mini-batch size). ``windowRecords`` in a Query says how many it holds.

Labels are JSON scalars of one kind per pipeline (:class:`learning.layout.Layout`); a
prediction is one of them, or None before the learner has seen a label: such a record is
not scored, as river's :func:`~river.evaluate.progressive_val_score` skips a None
prediction (``records`` counts the scored ones; ``prequentialAccuracy`` counts it wrong).
Labels that Python finds equal (``1`` and ``1.0``) are one class here.

Examples
--------
Two spokes' statistics merge into the pipeline's metrics:

>>> a, b = QualityState("classification", 4), QualityState("classification", 4)
>>> a.update(["x", "y", "y"], ["x", "y", "x"])
>>> b.update(["x", "x"], ["x", None])
>>> m = report([a.to_json(), b.to_json()], window=8)
>>> m["cumulative"]["records"], m["cumulative"]["accuracy"]  # None is not scored
(4, 0.75)
>>> sorted(m["cumulative"])
['accuracy', 'kappa', 'macroF1', 'records']
"""

from __future__ import annotations

import math
from collections import Counter, deque
from typing import Sequence

import numpy as np
from river import metrics as rm
from river import stats

__all__ = ["QualityState", "ConfusionCounts", "ErrorMoments", "report", "values",
           "classification_values", "CHUNKS_PER_WINDOW", "SUPERVISED_TASKS"]

#: a spoke's window is counted in about this many chunks (its granularity: 1/16 of it)
CHUNKS_PER_WINDOW = 16
SUPERVISED_TASKS = ("classification", "regression")


class ConfusionCounts(Counter):
    """Records per ``(true label, predicted label)``; JSON: ``[[true, predicted, n], ...]``
    (labels as JSON scalars, not object keys: they may be numbers, strings or booleans)."""

    @classmethod
    def of_batch(cls, y: Sequence, predictions: Sequence) -> "ConfusionCounts":
        out = cls(zip(y, predictions))
        for key in [k for k in out if k[1] is None]:  # not scored (river's evaluate)
            del out[key]
        return out

    @property
    def records(self) -> int:
        return sum(self.values())

    def __iadd__(self, other):  # Counter's in place: keeps the class, no zero pruning cost
        self.update(other)
        return self

    def to_json(self) -> list:
        return [[t, p, n] for (t, p), n in self.items() if n]

    @classmethod
    def from_json(cls, triples: list) -> "ConfusionCounts":
        out = cls()
        for t, p, n in triples:
            out[(t, p)] += int(n)
        return out


class ErrorMoments:
    """A regressor's prequential errors: river :class:`~river.stats.Mean` of ``|y - ŷ|``
    and of ``(y - ŷ)²``, :class:`~river.stats.Var` of ``y`` (ddof 1, as
    :class:`river.metrics.R2`); merged with ``+=``.

    JSON: ``{"n", "meanAbsError", "meanSquaredError", "yMean", "yVariance"}``.
    """

    __slots__ = ("abs", "sq", "y")

    def __init__(self) -> None:
        self.abs, self.sq, self.y = stats.Mean(), stats.Mean(), stats.Var()

    @classmethod
    def of_batch(cls, y: Sequence, predictions: Sequence) -> "ErrorMoments":
        out = cls()
        try:
            t = np.asarray(y, dtype=np.float64)
            p = np.asarray(predictions, dtype=np.float64)
        except (TypeError, ValueError):  # a None prediction: not scored
            pairs = [(a, b) for a, b in zip(y, predictions) if b is not None]
            t = np.asarray([a for a, _ in pairs], dtype=np.float64)
            p = np.asarray([b for _, b in pairs], dtype=np.float64)
        n = t.size
        if n:  # river's state constructors (as in from_json): fewer numpy calls than update_many
            e = t - p
            mean = float(t.sum()) / n
            d = t - mean
            out.abs = stats.Mean._from_state(n, float(np.abs(e).sum()) / n)
            out.sq = stats.Mean._from_state(n, float(e @ e) / n)
            out.y = stats.Var._from_state(n, mean, float(d @ d) / (n - 1) if n > 1 else 0.0)
        return out

    @property
    def records(self) -> int:
        return int(self.abs.n)

    def __iadd__(self, other: "ErrorMoments") -> "ErrorMoments":
        if other.abs.n:  # (river's merge of two empty statistics divides by zero)
            self.abs += other.abs
            self.sq += other.sq
            self.y += other.y
        return self

    def to_json(self) -> dict:
        return {"n": self.records, "meanAbsError": self.abs.get(),
                "meanSquaredError": self.sq.get(), "yMean": self.y.mean.get(),
                "yVariance": self.y.get()}

    @classmethod
    def from_json(cls, d: dict) -> "ErrorMoments":
        # river's own state constructors (stats.Mean/Var._from_state)
        out = cls()
        n = int(d["n"])
        if n:
            out.abs = stats.Mean._from_state(n, float(d["meanAbsError"]))
            out.sq = stats.Mean._from_state(n, float(d["meanSquaredError"]))
            out.y = stats.Var._from_state(n, float(d["yMean"]), float(d["yVariance"]))
        return out

    def values(self) -> dict:
        """``{"records", "mae", "rmse", "r2"}``: river's MAE, RMSE and R2 definitions (R²
        is 0 below 2 records or for constant labels, as river's); None without records."""
        n = self.records
        if not n:
            return {"records": 0, "mae": None, "rmse": None, "r2": None}
        total = (n - 1) * self.y.get()  # river.metrics.R2: (n - 1) · Var(y)
        r2 = 1.0 - n * self.sq.get() / total if n > 1 and total else 0.0
        return {"records": n, "mae": self.abs.get(), "rmse": math.sqrt(self.sq.get()), "r2": r2}


def classification_values(counts: ConfusionCounts) -> dict:
    """``{"records", "accuracy", "macroF1", "kappa"}`` from confusion counts, by river's
    :class:`~river.metrics.Accuracy`, :class:`~river.metrics.MacroF1` and
    :class:`~river.metrics.CohenKappa` over one :class:`~river.metrics.ConfusionMatrix`;
    None without records. Each cell is fed once with its count as the weight, and the
    matrix's ``n_samples`` set to the records (CohenKappa divides by it): the same matrix
    as one ``update`` per record."""
    cm = rm.ConfusionMatrix()
    for (t, p), n in counts.items():
        if n:
            cm.update(t, p, w=n)
    cm.n_samples = int(cm.total_weight)
    if not cm.n_samples:
        return {"records": 0, "accuracy": None, "macroF1": None, "kappa": None}
    return {"records": cm.n_samples, "accuracy": rm.Accuracy(cm=cm).get(),
            "macroF1": rm.MacroF1(cm=cm).get(), "kappa": rm.CohenKappa(cm=cm).get()}


def values(stats_: ConfusionCounts | ErrorMoments) -> dict:
    """The metric values of one task's statistics (see :func:`classification_values`,
    :meth:`ErrorMoments.values`)."""
    if isinstance(stats_, ConfusionCounts):
        return classification_values(stats_)
    return stats_.values()


_KINDS = {"classification": ConfusionCounts, "regression": ErrorMoments}


class QualityState:
    """One spoke's prequential statistics of one pipeline: cumulative and over its last
    ``window`` records (in chunks; see the module docstring).

    Parameters
    ----------
    task : str
        ``"classification"`` or ``"regression"`` (:data:`SUPERVISED_TASKS`).
    window : int
        Records this spoke's rolling window holds at least (``ceil(metricsWindow / k)``
        for ``k`` spokes); 0: no rolling statistics.

    Raises
    ------
    ValueError
        For another task or a negative window.
    """

    def __init__(self, task: str, window: int) -> None:
        if task not in _KINDS:
            raise ValueError(f"task must be one of {SUPERVISED_TASKS}, got {task!r}")
        self.task = task
        self.kind = _KINDS[task]
        self.cumulative = self.kind()
        self.chunks: deque = deque()  # [statistics, records] of whole mini-batches, oldest first
        self.in_window = 0  # records in self.chunks
        self.window = self.chunk = 0
        self.resize(window)
        self._values: dict | None = None  # the spoke's own values, until the next update

    def resize(self, window: int) -> None:
        """Hold ``window`` records from now on (older chunks drop at the next update)."""
        if not isinstance(window, int) or window < 0:
            raise ValueError(f"window must be an integer >= 0, got {window!r}")
        self.window = window
        self.chunk = max(1, -(-window // CHUNKS_PER_WINDOW))
        if not window:
            self.chunks.clear()
            self.in_window = 0

    def update(self, y: Sequence, predictions: Sequence) -> None:
        """Count one fitted mini-batch: its labels and prequential predictions (same
        length, the order of :meth:`learning.pipeline.Pipeline.test_then_train`)."""
        n = len(y)
        if not n:
            return
        batch = self.kind.of_batch(y, predictions)
        self.cumulative += batch
        self._values = None
        if not self.window:
            return
        chunks = self.chunks
        if chunks and chunks[-1][1] < self.chunk:
            chunks[-1][0] += batch
            chunks[-1][1] += n
        else:
            chunks.append([batch, n])
        self.in_window += n
        while self.in_window - chunks[0][1] >= self.window:
            self.in_window -= chunks.popleft()[1]

    def rolling(self) -> ConfusionCounts | ErrorMoments:
        """The statistics of the records in the window (merged chunks)."""
        out = self.kind()
        for part, _ in self.chunks:
            out += part
        return out

    def to_json(self) -> dict:
        """``{"task", "window", "windowRecords", "cumulative", "rolling"}`` (statistics as
        :meth:`ConfusionCounts.to_json` / :meth:`ErrorMoments.to_json`)."""
        return {"task": self.task, "window": self.window, "windowRecords": self.in_window,
                "cumulative": self.cumulative.to_json(), "rolling": self.rolling().to_json()}

    def own_values(self) -> dict:
        """``{"cumulative": {...}, "rolling": {...}}`` of this spoke alone (cached until
        the next :meth:`update`: the operator's metrics read it once a second)."""
        if self._values is None:
            self._values = {"cumulative": values(self.cumulative),
                            "rolling": values(self.rolling()) if self.window else None}
        return self._values


def report(parts: list[dict], window: int) -> dict:
    """The pipeline's metrics for a Query from its spokes' :meth:`QualityState.to_json`.

    Returns
    -------
    dict
        ``{"task", "window", "windowRecords", "cumulative": {...}, "rolling": {...}}``;
        ``window`` is ``metricsWindow`` (records, the pipeline's) and ``rolling`` None when
        it is 0. Classification values: ``records``, ``accuracy``, ``macroF1``, ``kappa``;
        regression: ``records``, ``mae``, ``rmse``, ``r2`` (:func:`values`).
    """
    task = parts[0]["task"]
    kind = _KINDS[task]
    cumulative, rolling = kind(), kind()
    for part in parts:
        cumulative += kind.from_json(part["cumulative"])
        rolling += kind.from_json(part["rolling"])
    return {"task": task, "window": window,
            "windowRecords": sum(p["windowRecords"] for p in parts),
            "cumulative": values(cumulative), "rolling": values(rolling) if window else None}
