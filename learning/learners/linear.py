"""What linear multi-class classifiers share: one row ``[W_k | b_k]`` per label in canonical
order, arg-max prediction, the multi-class hinge, and the flat-vector plumbing (layout,
grow, project, JSON) that lets protocols average models of nodes that have seen different
label sets (papers/002_9b954bd89ad87406.txt §3.3.3).

:class:`learning.learners.PAClassifier` and :class:`learning.learners.OnlineSVM` derive
from :class:`LinearClassifier` and only add their update rule.
"""

from __future__ import annotations

import abc
from typing import Any, Sequence

import numpy as np

from learning.errors import ParameterError
from learning.learners.base import Learner, as_labels, as_matrix, as_test_matrix
from learning.learners.labels import LabelIndex

__all__ = ["LinearClassifier", "check_n_features", "grow_n_features", "load_matrix"]


def check_n_features(d: Any, name: str = "n_features") -> int:
    """``d`` as an int >= 1.

    Raises
    ------
    learning.errors.ParameterError
        E.g. ``n_features must be an integer >= 1, got 0``.
    """
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1:
        raise ParameterError(name, f"{name} must be an integer >= 1, got {d!r}")
    return int(d)


def grow_n_features(learner: Any, layout: dict) -> None:
    """Adopt ``layout["n_features"]`` when ``learner`` does not know its width yet
    (``learner._set_n_features(d)``); nothing when the layout names none.

    Raises
    ------
    ValueError
        If ``layout`` names another ``n_features`` than the learner's.
    """
    d = layout.get("n_features")
    if d is None:
        return
    if learner.n_features is None:
        learner._set_n_features(check_n_features(d))
    elif d != learner.n_features:
        raise ValueError(f"layout has n_features={d}, the model has {learner.n_features}")


def load_matrix(parameters: dict, name: str, shape: tuple, hint: str = "") -> np.ndarray | None:
    """``parameters[name]`` as a finite float64 array of ``shape``; None when missing.

    Raises
    ------
    learning.errors.ParameterError
        Naming ``name`` when the value is not numbers of that shape.
    """
    value = parameters.get(name)
    if value is None:
        return None
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ParameterError(name, f"{name} must hold numbers") from None
    if arr.shape != tuple(shape) or not np.all(np.isfinite(arr)):
        raise ParameterError(name, f"{name} must be finite numbers of shape {tuple(shape)}"
                             f"{hint}, got shape {arr.shape}")
    return arr


class LinearClassifier(Learner, abc.ABC):
    """Base of linear classifiers with one row ``[W_k | b_k]`` per class.

    The model is ``W: (n_classes, n_features) float64`` and ``b: (n_classes,) float64``
    stored together as ``_Wb: (n_classes, n_features + 1)``; row ``k`` belongs to
    ``classes[k]`` (canonical label order, see :class:`learning.learners.labels.LabelIndex`).
    Scores are ``s = X W^T + b``; the prediction is the arg-max (ties: the first label).
    Records are learned one at a time, in order: subclasses implement the per-record loop
    ``_stream`` (their update rule) and may keep extra learned state (e.g. a step counter)
    through ``_extra_json`` / ``_load_extra``.

    Attributes
    ----------
    classes : list
        Labels seen, canonical order.
    n_features : int or None
        Record width, None until the first batch.
    """

    #: keys of ``parameters`` besides classes, n_features, W, b (subclass state)
    _EXTRA_KEYS: tuple[str, ...] = ()
    #: wording of :meth:`_load_parameters`' errors: the keys an unknown one is told to be
    #: instead of (None: the known keys, sorted), and the shape hint of ``b``
    _EXPECTED_KEYS: str | None = None
    _B_HINT = " (classes)"

    def _init_model(self) -> None:
        self._labels = LabelIndex()
        self.n_features: int | None = None
        self._Wb = np.zeros((0, 1))

    @property
    def classes(self) -> list:
        return self._labels.classes

    # --- learning -----------------------------------------------------------------------

    def _walk(self, walk, X: np.ndarray, labels: list, X_test: np.ndarray | None,
              want_predictions: bool, params: tuple, out: np.ndarray) -> list | None:
        """Run a compiled per-record walk (:func:`learning.compiled.pa_walk`,
        :func:`~learning.compiled.svm_walk`) over a mini-batch, called as ``walk(X,
        X_test, Wb, label rows, start, predict start, want_predictions, *params, pred,
        out)``. A record whose label has no row yet stops it; the row is added here (after
        the record's prediction, which names the classes as they were) and the walk goes
        on from that record. Returns the predictions (None unless wanted)."""
        n = X.shape[0]
        X = np.ascontiguousarray(X, dtype=np.float64)
        X_test = X if X_test is None else np.ascontiguousarray(X_test, dtype=np.float64)
        index = self._labels
        yidx = np.asarray(index.rows(labels), dtype=np.int64)
        pred = np.empty(n, dtype=np.int64)
        predictions = [None] * n if want_predictions else None
        i, predict_first = 0, True
        while True:
            if not self._Wb.flags.c_contiguous:  # (a loaded or inserted-into model)
                self._Wb = np.ascontiguousarray(self._Wb)
            stop = walk(X, X_test, self._Wb, yidx, i, predict_first, want_predictions,
                        *params, pred, out)
            if want_predictions:
                classes, lo = self.classes, i if predict_first else i + 1
                for j, row in enumerate(pred[lo:stop + 1].tolist(), lo):
                    if row >= 0:
                        predictions[j] = classes[row]
            if stop >= n:
                return predictions
            self._add_labels([labels[stop]])  # a zero row at its sorted position
            yidx[stop:] = index.rows(labels[stop:])
            i, predict_first = stop, False

    @abc.abstractmethod
    def _stream(self, X: np.ndarray, labels: list, X_test: np.ndarray | None,
                want_predictions: bool) -> tuple[list | None, float]:
        """The per-record loop, the only place the model is updated: predict record ``i``
        (``X_test[i]``, or ``X[i]`` when None) with the model after records ``< i`` if
        ``want_predictions``, then learn ``X[i]``. Returns the predictions (None unless
        wanted) and the sum of the losses suffered, each before its record's update."""

    def fit(self, X: np.ndarray, y: Sequence) -> None:
        """Learn the records in order, one update each.

        Parameters
        ----------
        X : (n_records, n_features) float64
        y : sequence of n_records labels

        Raises
        ------
        ValueError
            If ``len(y) != n_records``, the width is not ``n_features`` or a label is not
            a JSON scalar.
        """
        X, labels = self._check_batch(X, y)
        if labels:
            self._stream(X, labels, None, want_predictions=False)

    def test_then_train(self, X: np.ndarray, y: Sequence,
                        X_test: np.ndarray | None = None) -> tuple[list, float]:
        """Predict record ``i`` with the model after records ``< i``, then learn it.

        Equivalent to river's ``predict_one`` / ``learn_one`` loop over the batch.

        Parameters
        ----------
        X : (n_records, n_features) float64
            Records as learned.
        y : sequence of n_records labels
        X_test : (n_records, n_features) float64 or None
            Records as predicted (None: ``X``).

        Returns
        -------
        predictions : list of n_records labels (None before any label was seen)
        loss_sum : float
            Sum of the multi-class hinge losses, each before its record's update.
        """
        X, labels = self._check_batch(X, y)
        X_test = as_test_matrix(X_test, X)
        if not labels:
            return [], 0.0
        return self._stream(X, labels, X_test, want_predictions=True)

    # --- batches ------------------------------------------------------------------------

    def _check_batch(self, X: Any, y: Sequence) -> tuple[np.ndarray, list]:
        X = as_matrix(X, self.n_features)
        labels = as_labels(y)
        if len(labels) != X.shape[0]:
            raise ValueError(f"y has {len(labels)} labels, X has {X.shape[0]} records")
        if self.n_features is None and X.shape[0]:
            self._set_n_features(X.shape[1])
        return X, labels

    def _add_labels(self, labels: list) -> None:
        """Give every new label in ``labels`` a zero row at its canonical place."""
        for label in labels:
            if label not in self._labels:
                pos = self._labels.add(label)
                self._Wb = np.insert(self._Wb, pos, 0.0, axis=0)

    # --- prediction and evaluation ------------------------------------------------------

    def _scores(self, X: np.ndarray) -> np.ndarray:
        """``(n_records, n_classes)`` scores ``X W^T + b``."""
        d = self.n_features
        if d is None:
            return np.broadcast_to(self._Wb[:, 0], (X.shape[0], len(self.classes))).copy()
        return X @ self._Wb[:, :d].T + self._Wb[:, d]

    def predict(self, X: np.ndarray) -> list:
        """Arg-max class per record (ties: the first in canonical order).

        Parameters
        ----------
        X : (n_records, n_features) float64

        Returns
        -------
        list of n_records labels; all None if no label was ever learned.

        Raises
        ------
        ValueError
            If the width is not ``n_features``.
        """
        X = as_matrix(X, self.n_features)
        K, n = len(self.classes), X.shape[0]
        if K < 2:
            return [self.classes[0] if K else None] * n
        classes = self.classes
        return [classes[j] for j in self._scores(X).argmax(axis=1).tolist()]

    def _hinge(self, S: np.ndarray, yi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per-record multi-class hinge ``max(0, 1 - (s_y - s_r))`` and rival row ``r``.

        ``S``: (n, K) scores, ``yi``: (n,) rows of the true labels; needs K >= 2."""
        rows = np.arange(S.shape[0])
        sy = S[rows, yi].copy()
        S = S.copy()
        S[rows, yi] = -np.inf
        r = S.argmax(axis=1)
        return np.maximum(0.0, 1.0 - sy + S[rows, r]), r

    def loss(self, X: np.ndarray, y: Sequence) -> float:
        """Sum over the batch of the multi-class hinge ``max(0, 1 - (s_y - max_{r≠y} s_r))``.

        Unseen labels score 0 (the zero row they would get) and count as rivals; a record
        with no rival class has loss 0. The model is unchanged.
        """
        X = as_matrix(X, self.n_features)
        labels = as_labels(y)
        if len(labels) != X.shape[0]:
            raise ValueError(f"y has {len(labels)} labels, X has {X.shape[0]} records")
        if not labels:
            return 0.0
        index = LabelIndex(self.classes)
        for v in labels:
            index.add(v)
        if len(index) < 2:
            return 0.0
        S = np.zeros((len(labels), len(index)))
        if self.classes:
            S[:, index.rows(self.classes)] = self._scores(X)
        return float(self._hinge(S, np.array(index.rows(labels)))[0].sum())

    # --- the flat vector ----------------------------------------------------------------

    def get_params(self) -> np.ndarray:
        """``[W_0 | b_0, W_1 | b_1, ...]`` in the order of ``classes``: 1-D float64 of size
        ``n_classes * (n_features + 1)`` (``n_features`` counts as 0 while unknown)."""
        return self._Wb.ravel().copy()

    def set_params(self, w: np.ndarray) -> None:
        """Replace ``[W | b]`` with ``w`` laid out as :meth:`get_params`.

        Raises
        ------
        ValueError
            If ``w`` is not 1-D of size ``n_classes * (n_features + 1)``.
        """
        w = np.asarray(w, dtype=np.float64)
        K, width = self._Wb.shape
        if w.ndim != 1 or w.size != K * width:
            raise ValueError(
                f"expected a 1-D vector of {K * width} parameters ({K} classes x "
                f"({width - 1} features + 1 intercept)), got shape {w.shape}")
        self._Wb = w.reshape(K, width).copy()

    def layout(self) -> dict:
        """``{"classes": [...], "n_features": d or None}``: row ``k`` of the vector is
        ``[W_k | b_k]`` of ``classes[k]``."""
        return {"classes": list(self.classes), "n_features": self.n_features}

    def class_block_width(self) -> int | None:
        """``n_features + 1`` (a row ``[W_k | b_k]``) once there are two classes or more and
        the width is known, else None."""
        K, width = self._Wb.shape
        return int(width) if K >= 2 and self.n_features else None

    def grow(self, layout: dict) -> None:
        """Add the classes of ``layout`` this model lacks (zero rows), learn ``n_features``.

        Raises
        ------
        ValueError
            If ``layout`` names another ``n_features`` or holds a non-JSON-scalar label.
        """
        grow_n_features(self, layout)
        self._add_labels(as_labels(layout.get("classes") or []))

    def project(self, w: np.ndarray, layout: dict) -> np.ndarray:
        """Map ``w``, laid out as ``layout``, into this model's layout (after :meth:`grow`);
        rows of classes absent from ``layout`` are zeros.

        Parameters
        ----------
        w : (len(layout["classes"]) * (layout["n_features"] + 1),) float64
        layout : dict

        Returns
        -------
        (n_classes * (n_features + 1),) float64

        Raises
        ------
        ValueError
            If ``w``'s size does not match ``layout``.
        """
        self.grow(layout)
        other = as_labels(layout.get("classes") or [])
        dp = layout.get("n_features") or 0
        w = np.asarray(w, dtype=np.float64)
        if w.ndim != 1 or w.size != len(other) * (dp + 1):
            raise ValueError(f"expected a 1-D vector of {len(other) * (dp + 1)} parameters "
                             f"for layout {layout}, got shape {w.shape}")
        rows = w.reshape(len(other), dp + 1)
        K, width = self._Wb.shape
        out = np.zeros((K, width))
        idx = self._labels.rows(other)
        out[idx, :dp] = rows[:, :dp]
        out[idx, width - 1] = rows[:, dp]
        return out.ravel()

    def _set_n_features(self, d: int) -> None:
        Wb = np.zeros((len(self.classes), d + 1))
        Wb[:, d] = self._Wb[:, -1]
        self.n_features = d
        self._Wb = Wb

    # --- JSON ---------------------------------------------------------------------------

    def _extra_json(self) -> dict:
        """Hook: learned state besides the rows (JSON-safe)."""
        return {}

    def _load_extra(self, parameters: dict) -> None:
        """Hook: load what :meth:`_extra_json` wrote (keys may be missing)."""

    def _parameters_json(self) -> dict:
        d = self.n_features or 0
        return {"classes": list(self.classes), "n_features": self.n_features,
                "W": self._Wb[:, :d].tolist(), "b": self._Wb[:, d].tolist(),
                **self._extra_json()}

    def _load_parameters(self, parameters: dict) -> None:
        """Load ``{"classes", "n_features", "W", "b"}`` plus the subclass's keys; every key
        may be missing or null. Classes may come in any order (rows follow them).

        Raises
        ------
        learning.errors.ParameterError
            Naming the key that is rejected.
        """
        known = {"classes", "n_features", "W", "b", *self._EXTRA_KEYS}
        unknown = set(parameters) - known
        if unknown:
            name = sorted(map(str, unknown))[0]
            expected = self._EXPECTED_KEYS or ", ".join(sorted(known))
            raise ParameterError(name, f"unknown parameter {name!r} for "
                                 f"{type(self).__name__}; expected {expected}")
        classes = LabelIndex.checked(parameters.get("classes"))
        d = parameters.get("n_features")
        d = None if d is None else check_n_features(d)
        K = len(classes)
        Wb = np.zeros((K, (d or 0) + 1))
        W = load_matrix(parameters, "W", (K, d or 0), " (classes x n_features)")
        b = load_matrix(parameters, "b", (K,), self._B_HINT)
        if W is not None:
            Wb[:, :d or 0] = W
        if b is not None:
            Wb[:, d or 0] = b
        order = LabelIndex.canonical_order(classes)
        self._labels = LabelIndex(classes)
        self.n_features = d
        self._Wb = np.ascontiguousarray(Wb[order])
        self._load_extra(parameters)
