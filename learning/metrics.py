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
- clustering (k-means) has no labels to score: no state (None);
- binary classification by a learner with class probabilities (``has_proba``: the
  networks' softmax, the Hoeffding trees' leaf distributions): river's
  :class:`~river.metrics.LogLoss` (a :class:`~river.stats.Mean` of per-record losses,
  merged with ``+=``) and :class:`~river.metrics.ROCAUC` (per threshold, counts of
  ``(positive?, probability > threshold)``, summed; river's object is filled with them to
  read the value) over the probability of the **positive class, the second of the two in
  canonical label order** (:func:`learning.learners.base.label_key`: ``True`` of
  booleans, ``1`` of ``0``/``1``, ``"b"`` of ``"a"``/``"b"``), as PAClassifier's binary
  convention (:class:`BinaryScores`). A record is scored when the learner knew exactly two
  classes as it predicted it; once a pipeline has three classes (on any spoke, or over
  its spokes together) it reports none (``logLoss``/``rocAuc`` None). Learners without
  probabilities (PA, SVM, ridge: a margin is not a probability) report neither key.

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
from typing import Any, Sequence

import numpy as np

from learning.native import import_in_own_thread

# river's metrics import scipy.stats, whose pybind11 bindings hang if first imported on a
# task thread of PyFlink's thread mode (learning.native)
import_in_own_thread("river.metrics", "river.stats")
from river import metrics as rm  # noqa: E402
from river import stats  # noqa: E402

__all__ = ["QualityState", "ConfusionCounts", "ErrorMoments", "BinaryScores", "report",
           "values", "classification_values", "json_number", "CHUNKS_PER_WINDOW",
           "SUPERVISED_TASKS"]

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


def json_number(value: Any) -> float:
    """A statistic read back from JSON: NaN for null (an inf or NaN when it was sent)."""
    return math.nan if value is None else float(value)


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
        """The moments of :meth:`to_json`; a statistic that was inf or NaN travelled as
        JSON null and comes back NaN (a regressor's squared errors past float64, or a
        NaN prediction: the Query answers null for what they make, instead of failing)."""
        # river's own state constructors (stats.Mean/Var._from_state)
        out = cls()
        n = int(d["n"])
        if n:
            out.abs = stats.Mean._from_state(n, json_number(d["meanAbsError"]))
            out.sq = stats.Mean._from_state(n, json_number(d["meanSquaredError"]))
            out.y = stats.Var._from_state(n, json_number(d["yMean"]),
                                          json_number(d["yVariance"]))
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


#: river's ROCAUC thresholds (``n_thresholds`` 10, its default)
_ROC = rm.ROCAUC()
ROC_THRESHOLDS = np.asarray(_ROC.thresholds, dtype=np.float64)
#: river's LogLoss clamps probabilities into (0, 1) by these (``_clamp_proba``)
_EPS = 1e-15


class BinaryScores:
    """A binary classifier's prequential probabilities ``p`` of the positive class against
    its labels: river's :class:`~river.stats.Mean` of the per-record log losses
    (:class:`~river.metrics.LogLoss`: ``-log p`` for a positive, ``-log(1 - p)`` for a
    negative, ``p`` clamped into ``[1e-15, 1 - 1e-15]``) and, per threshold ``t`` of
    river's :class:`~river.metrics.ROCAUC`, the records per ``(positive?, p > t)``;
    merged with ``+=``.

    JSON: ``{"n", "logLoss", "roc": [[tp, fn, fp, tn] per threshold]}``.
    """

    __slots__ = ("loss", "roc")

    def __init__(self) -> None:
        self.loss = stats.Mean()
        self.roc = np.zeros((ROC_THRESHOLDS.size, 4), dtype=np.int64)

    @classmethod
    def of_batch(cls, y: Sequence, proba: np.ndarray, classes: Sequence) -> "BinaryScores":
        """Score the rows of ``proba`` ((n, 2) over ``classes``, canonical order) without
        NaN (those the learner predicted knowing both classes); ``classes[1]`` is the
        positive one."""
        from learning.learners.base import label_key

        out = cls()
        proba = np.asarray(proba, dtype=np.float64)
        scored = ~np.isnan(proba).any(axis=1)
        if not scored.any():
            return out
        positive = label_key(classes[1])
        t = np.fromiter((label_key(v) == positive for v in y), dtype=bool, count=len(y))
        t, p = t[scored], proba[scored, 1]
        q = np.clip(p, _EPS, 1 - _EPS)
        losses = -np.log(np.where(t, q, 1 - q))
        out.loss = stats.Mean._from_state(int(t.size), float(losses.sum()) / t.size)
        above = p[:, None] > ROC_THRESHOLDS[None, :]  # (n, thresholds)
        pos = t[:, None]
        out.roc = np.stack([(pos & above).sum(0), (pos & ~above).sum(0),
                            (~pos & above).sum(0), (~pos & ~above).sum(0)], axis=1)
        return out

    @property
    def records(self) -> int:
        return int(self.loss.n)

    def __getstate__(self) -> tuple:  # pickled compactly (Flink state): counts as a list
        return self.loss, self.roc.tolist()

    def __setstate__(self, state: tuple) -> None:
        self.loss, roc = state
        self.roc = np.asarray(roc, dtype=np.int64)

    def __iadd__(self, other: "BinaryScores") -> "BinaryScores":
        if other.loss.n:
            self.loss += other.loss
            self.roc = self.roc + other.roc
        return self

    def to_json(self) -> dict:
        return {"n": self.records, "logLoss": self.loss.get(), "roc": self.roc.tolist()}

    @classmethod
    def from_json(cls, d: dict) -> "BinaryScores":
        out = cls()
        n = int(d["n"])
        if n:
            out.loss = stats.Mean._from_state(n, float(d["logLoss"]))
            out.roc = np.asarray(d["roc"], dtype=np.int64).reshape(ROC_THRESHOLDS.size, 4)
        return out

    def values(self) -> dict:
        """``{"logLoss", "rocAuc"}``: river's LogLoss (its mean set to the merged one) and
        ROCAUC (each threshold's confusion matrix filled with the counts, one weighted
        update per cell); None without records."""
        if not self.records:
            return {"logLoss": None, "rocAuc": None}
        log_loss = rm.LogLoss()
        log_loss._mean = self.loss
        auc = rm.ROCAUC()
        for cm, (tp, fn, fp, tn) in zip(auc.cms, self.roc.tolist()):
            for truth, above, n in ((True, True, tp), (True, False, fn),
                                    (False, True, fp), (False, False, tn)):
                if n:
                    cm.update(truth, above, w=n)
        return {"logLoss": float(log_loss.get()), "rocAuc": float(auc.get())}


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
    ``window`` records (in chunks; see the module docstring), and, for a learner with class
    probabilities, their :class:`BinaryScores` (``scores``; None without probabilities)
    while its learner knows at most two classes (``classes``; ``multiclass`` once more).

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

    #: class defaults, so that a state pickled before probabilities were scored loads
    scores: BinaryScores | None = None
    classes: list = []
    multiclass = False

    def __init__(self, task: str, window: int) -> None:
        if task not in _KINDS:
            raise ValueError(f"task must be one of {SUPERVISED_TASKS}, got {task!r}")
        self.task = task
        self.kind = _KINDS[task]
        self.cumulative = self.kind()
        # probabilities (update's proba): None until a batch brings some
        self.scores: BinaryScores | None = None
        self.classes: list = []  # the learner's classes, while at most two
        self.multiclass = False  # more than two: no scores from then on
        # [statistics, records, scores or None] of whole mini-batches, oldest first
        self.chunks: deque = deque()
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

    def update(self, y: Sequence, predictions: Sequence, proba: np.ndarray | None = None,
               classes: Sequence | None = None) -> None:
        """Count one fitted mini-batch: its labels and prequential predictions (same
        length, the order of :meth:`learning.pipeline.Pipeline.test_then_train`) and, for
        a learner with probabilities, those it predicted with: ``proba`` (n, len(classes))
        over ``classes``, the learner's classes after the batch in canonical order, NaN
        where it did not know the class yet (``Pipeline.test_then_train(...,
        with_proba=True)``)."""
        n = len(y)
        if not n:
            return
        batch = self.kind.of_batch(y, predictions)
        scores = self._score(y, proba, classes)
        self.cumulative += batch
        if scores is not None:
            if self.scores is None:
                self.scores = BinaryScores()
            self.scores += scores
        self._values = None
        if not self.window:
            return
        chunks = self.chunks
        if chunks and chunks[-1][1] < self.chunk:
            chunks[-1][0] += batch
            chunks[-1][1] += n
            if scores is not None:
                if len(chunks[-1]) < 3:  # a chunk pickled before scores were kept
                    chunks[-1].append(None)
                if chunks[-1][2] is None:
                    chunks[-1][2] = BinaryScores()
                chunks[-1][2] += scores
        else:
            chunks.append([batch, n, scores])
        self.in_window += n
        while self.in_window - chunks[0][1] >= self.window:
            self.in_window -= chunks.popleft()[1]

    def _score(self, y: Sequence, proba: np.ndarray | None,
               classes: Sequence | None) -> BinaryScores | None:
        """The batch's :class:`BinaryScores` (empty unless the learner knows exactly two
        classes); None without probabilities. A third class drops every score for good."""
        if proba is None or classes is None or self.task != "classification":
            return None
        if self.multiclass:
            return None
        if len(classes) > 2:
            self.multiclass, self.classes = True, []
            self.scores = BinaryScores()
            for chunk in self.chunks:
                chunk[2:] = [None]
            return None
        self.classes = list(classes)
        if len(classes) < 2:
            return BinaryScores()
        return BinaryScores.of_batch(y, proba, classes)

    def rolling(self) -> ConfusionCounts | ErrorMoments:
        """The statistics of the records in the window (merged chunks)."""
        out = self.kind()
        for part, *_ in self.chunks:
            out += part
        return out

    def rolling_scores(self) -> BinaryScores:
        """The :class:`BinaryScores` of the records in the window (merged chunks)."""
        out = BinaryScores()
        for chunk in self.chunks:
            if len(chunk) > 2 and chunk[2] is not None:
                out += chunk[2]
        return out

    def scores_json(self) -> dict | None:
        """``{"classes", "multiclass", "cumulative", "rolling"}`` (scores as
        :meth:`BinaryScores.to_json`, None when ``multiclass``); None without
        probabilities."""
        if self.scores is None:
            return None
        if self.multiclass:
            return {"classes": [], "multiclass": True, "cumulative": None, "rolling": None}
        return {"classes": list(self.classes), "multiclass": False,
                "cumulative": self.scores.to_json(), "rolling": self.rolling_scores().to_json()}

    def to_json(self) -> dict:
        """``{"task", "window", "windowRecords", "cumulative", "rolling", "scores"}``
        (statistics as :meth:`ConfusionCounts.to_json` / :meth:`ErrorMoments.to_json`,
        ``scores`` as :meth:`scores_json`)."""
        return {"task": self.task, "window": self.window, "windowRecords": self.in_window,
                "cumulative": self.cumulative.to_json(), "rolling": self.rolling().to_json(),
                "scores": self.scores_json()}

    def own_values(self) -> dict:
        """:func:`report` of this spoke alone (``{"cumulative": {...}, "rolling": {...},
        ...}``; cached until the next :meth:`update`: the operator's metrics read it once
        a second)."""
        if self._values is None:
            self._values = report([self.to_json()], self.window)
        return self._values


def _merged_scores(parts: list[dict]) -> tuple[BinaryScores, BinaryScores] | None:
    """The spokes' :class:`BinaryScores`, cumulative and rolling, merged; None where no
    spoke has probabilities; empty (values None) for a pipeline with three classes or more
    (on a spoke, or over the spokes' classes together)."""
    from learning.learners.base import label_key

    scored = [p["scores"] for p in parts if p.get("scores")]
    if not scored:
        return None
    cumulative, rolling = BinaryScores(), BinaryScores()
    classes = {label_key(c) for s in scored for c in s["classes"]}
    if any(s["multiclass"] for s in scored) or len(classes) > 2:
        return cumulative, rolling
    for s in scored:
        cumulative += BinaryScores.from_json(s["cumulative"])
        rolling += BinaryScores.from_json(s["rolling"])
    return cumulative, rolling


def report(parts: list[dict], window: int) -> dict:
    """The pipeline's metrics for a Query from its spokes' :meth:`QualityState.to_json`.

    Returns
    -------
    dict
        ``{"task", "window", "windowRecords", "cumulative": {...}, "rolling": {...}}``;
        ``window`` is ``metricsWindow`` (records, the pipeline's) and ``rolling`` None when
        it is 0. Classification values: ``records``, ``accuracy``, ``macroF1``, ``kappa``,
        and, for learners with probabilities, ``logLoss`` and ``rocAuc`` (None unless
        binary, see :class:`BinaryScores`); regression: ``records``, ``mae``, ``rmse``,
        ``r2`` (:func:`values`).
    """
    task = parts[0]["task"]
    kind = _KINDS[task]
    cumulative, rolling = kind(), kind()
    for part in parts:
        cumulative += kind.from_json(part["cumulative"])
        rolling += kind.from_json(part["rolling"])
    out = {"task": task, "window": window,
           "windowRecords": sum(p["windowRecords"] for p in parts),
           "cumulative": values(cumulative), "rolling": values(rolling) if window else None}
    scores = _merged_scores(parts)
    if scores is not None:
        out["cumulative"].update(scores[0].values())
        if window:
            out["rolling"].update(scores[1].values())
    return out
