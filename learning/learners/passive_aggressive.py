"""Passive-aggressive classification, binary and multi-class in one formulation.

References
----------
Crammer, K., Dekel, O., Keshet, J., Shalev-Shwartz, S., Singer, Y. (2006) Online
passive-aggressive algorithms. JMLR 7:551–585 (§3: PA, PA-I, PA-II; §7: multi-class).

papers/002_9b954bd89ad87406.txt §3.3.3 (PA learners of OMLDM).
"""

from __future__ import annotations

import bisect
from typing import Any, Sequence

import numpy as np

from learning.errors import ParameterError, check_bool, check_choice, check_real
from learning.learners.base import Learner, as_labels, as_matrix, label_key

__all__ = ["PAClassifier"]

_NEG_INF = float("-inf")


class PAClassifier(Learner):
    """Passive-aggressive classifier (PA, PA-I, PA-II) for any number of classes.

    The model is a weight matrix ``W: (n_classes, n_features) float64`` and intercepts
    ``b: (n_classes,) float64``, one row per label in ``classes``. The score of class
    ``k`` is ``s_k = W_k · x + b_k`` and the prediction is the arg-max (ties: the lowest
    row, i.e. the first label in canonical order).

    For each record ``(x, y)`` in order, with ``r`` the highest-scoring class other than
    ``y``, the suffered loss is ``l = max(0, 1 - (s_y - s_r))``; then, with ``q = ‖x‖²``
    (the intercept is not in the norm, as in river)::

        mode 0 (PA):    t = l / q                 (0 when q == 0)
        mode 1 (PA-I):  t = min(C, l / q)         (0 when q == 0)
        mode 2 (PA-II): t = l / (q + 1 / (2 C))

    and ``W_y += t/2 · x``, ``W_r -= t/2 · x`` (``b_y += t/2``, ``b_r -= t/2`` when
    ``learn_intercept``).

    With exactly two classes ``c0 < c1`` the difference ``(W_1 - W_0, b_1 - b_0)`` evolves
    exactly like the single vector of river's binary ``PAClassifier(C, mode)`` with
    ``c1`` as the positive class (up to float rounding), so binary and multi-class share one
    code path and one parameter layout. For more classes this is Crammer et al.'s
    multi-class PA (§7) with the class-sensitive feature map ``e_k ⊗ x``, whose
    ``‖Φ(x, y) - Φ(x, r)‖² = 2 q``: modes 0 is exactly theirs, and modes 1 and 2 are
    theirs with aggressiveness ``C / 2``.

    Labels are JSON scalars kept in canonical order (sort key ``(type name, label)``;
    ``True`` is not ``1``). A new label gets a zero row at its sorted position when it is
    first learned; with one class seen the model predicts it and cannot update; with none
    it predicts None. ``n_features`` is learned from the first batch (or given as a
    parameter).

    Parameters
    ----------
    C : float, > 0
        Aggressiveness: the step cap (PA-I) or the slack penalty (PA-II). Unused by PA.
    mode : {0, 1, 2}
        0 = PA, 1 = PA-I, 2 = PA-II.
    learn_intercept : bool
        Whether the intercepts ``b`` are learned (they stay 0 otherwise).

    Attributes
    ----------
    classes : list
        The labels seen, in canonical order; row ``k`` of ``W`` belongs to ``classes[k]``.
    n_features : int or None
        The record width, None until known.

    Raises
    ------
    learning.errors.HyperparameterError
        E.g. ``C must be > 0, got -1``.

    Examples
    --------
    >>> import numpy as np
    >>> model = PAClassifier(C=0.01, mode=1)
    >>> model.fit(np.array([[1.0, 0.0], [0.0, 1.0], [0.9, 0.1]]), ["a", "b", "a"])
    >>> model.predict(np.array([[1.0, 0.0], [0.0, 1.0]]))
    ['a', 'b']
    >>> model.layout()
    {'classes': ['a', 'b'], 'n_features': 2}
    >>> model.get_params().shape  # [W_a | b_a, W_b | b_b]
    (6,)

    References
    ----------
    Crammer, K., Dekel, O., Keshet, J., Shalev-Shwartz, S., Singer, Y. (2006) Online
    passive-aggressive algorithms. JMLR 7:551–585.
    """

    def __init__(self, C: float = 0.01, mode: int = 1, learn_intercept: bool = True):
        self.C = C
        self.mode = mode
        self.learn_intercept = learn_intercept
        check_real("C", C, gt=0)
        check_choice("mode", mode, (0, 1, 2))
        check_bool("learn_intercept", learn_intercept)
        self.classes: list = []
        self.n_features: int | None = None
        self._keys: list = []
        self._index: dict = {}
        self._Wb = np.zeros((0, 1))  # (n_classes, n_features + 1): [W | b]

    # --- learning -----------------------------------------------------------------------

    def fit(self, X: np.ndarray, y: Sequence) -> None:
        """Learn from the records in order (one PA step each).

        Parameters
        ----------
        X : (n_records, n_features) float64
        y : sequence of n_records labels

        Raises
        ------
        ValueError
            If ``len(y) != n_records``, the width is not ``n_features`` or a label is not a
            JSON scalar.
        """
        X, labels = self._check_batch(X, y)
        if len(labels):
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
            Sum of the hinge losses suffered, each before its record's update.
        """
        X, labels = self._check_batch(X, y)
        if X_test is not None:
            X_test = as_matrix(X_test, X.shape[1])
            if X_test.shape[0] != X.shape[0]:
                raise ValueError(f"X_test has {X_test.shape[0]} records, X has {X.shape[0]}")
        if not labels:
            return [], 0.0
        return self._stream(X, labels, X_test, want_predictions=True)

    def _check_batch(self, X: Any, y: Sequence) -> tuple[np.ndarray, list]:
        X = as_matrix(X, self.n_features)
        labels = as_labels(y)
        if len(labels) != X.shape[0]:
            raise ValueError(f"y has {len(labels)} labels, X has {X.shape[0]} records")
        if self.n_features is None and X.shape[0]:
            self._set_n_features(X.shape[1])
        return X, labels

    def _stream(self, X: np.ndarray, labels: list, X_test: np.ndarray | None,
                want_predictions: bool) -> tuple[list | None, float]:
        """The per-record loop: the only place the model is updated."""
        n, d = X.shape
        # Row -1 of XA[i] is the record as learned, row 0 as predicted; last column: 1.
        XA = np.ones((n, 1 if X_test is None else 2, d + 1))
        XA[:, -1, :d] = X
        if X_test is not None:
            XA[:, 0, :d] = X_test
        XU = XA[:, -1, :].copy()  # update direction, intercept column 1 or 0
        if not self.learn_intercept:
            XU[:, d] = 0.0
        sq = np.einsum("ij,ij->i", X, X).tolist()
        C, mode = float(self.C), self.mode
        half_C = 0.5 / C

        keys = [label_key(v) for v in labels]
        yidx = [self._index.get(k, -1) for k in keys]
        classes = self.classes
        Wb = self._Wb
        WbT = Wb.T
        K = len(classes)
        predictions = [None] * n if want_predictions else None
        loss_sum = 0.0
        for i in range(n):
            if K >= 2:
                S = (XA[i] @ WbT).tolist()
                if want_predictions:
                    st = S[0]
                    predictions[i] = classes[st.index(max(st))]
            elif want_predictions and K:
                predictions[i] = classes[0]
            yi = yidx[i]
            if yi < 0:  # a new label: a zero row at its sorted position
                self._add_class(labels[i])
                Wb, WbT, K = self._Wb, self._Wb.T, K + 1
                index = self._index
                yidx[i:] = [index.get(k, -1) for k in keys[i:]]
                yi = yidx[i]
                if K < 2:
                    continue
                S = (XA[i] @ WbT).tolist()
            elif K < 2:
                continue
            sl = S[-1]
            sy = sl[yi]
            sl[yi] = _NEG_INF
            sr = max(sl)
            loss = 1.0 - sy + sr
            if loss <= 0.0:
                continue
            loss_sum += loss
            q = sq[i]
            if mode == 1:
                tau = min(C, loss / q) if q > 0.0 else 0.0
            elif mode == 0:
                tau = loss / q if q > 0.0 else 0.0
            else:
                tau = loss / (q + half_C)
            if tau > 0.0:
                u = XU[i] * (0.5 * tau)
                Wb[yi] += u
                Wb[sl.index(sr)] -= u
        return predictions, loss_sum

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

    def loss(self, X: np.ndarray, y: Sequence) -> float:
        """Sum over the batch of the multi-class hinge ``max(0, 1 - (s_y - max_{r≠y} s_r))``.

        Labels the model has not seen score 0 (the zero row :meth:`grow` would add) and
        count as rivals; a record with no rival class has loss 0. The model is unchanged.
        """
        X = as_matrix(X, self.n_features)
        labels = as_labels(y)
        if len(labels) != X.shape[0]:
            raise ValueError(f"y has {len(labels)} labels, X has {X.shape[0]} records")
        n = len(labels)
        if n == 0:
            return 0.0
        index = dict(self._index)
        for v in labels:
            index.setdefault(label_key(v), len(index))
        if len(index) < 2:
            return 0.0
        S = np.zeros((n, len(index)))
        S[:, :len(self.classes)] = self._scores(X)
        rows = np.arange(n)
        yi = np.array([index[label_key(v)] for v in labels])
        sy = S[rows, yi].copy()
        S[rows, yi] = -np.inf
        return float(np.maximum(0.0, 1.0 - sy + S.max(axis=1)).sum())

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

    def grow(self, layout: dict) -> None:
        """Add the classes of ``layout`` this model lacks (zero rows), learn ``n_features``.

        Raises
        ------
        ValueError
            If ``layout`` names another ``n_features`` or holds a label that is not a JSON
            scalar.
        """
        d = layout.get("n_features")
        if d is not None:
            if self.n_features is None:
                self._set_n_features(self._check_n_features(d))
            elif d != self.n_features:
                raise ValueError(f"layout has n_features={d}, the model has {self.n_features}")
        for label in as_labels(layout.get("classes") or []):
            if label_key(label) not in self._index:
                self._add_class(label)

    def project(self, w: np.ndarray, layout: dict) -> np.ndarray:
        """Map ``w``, laid out as ``layout``, into this model's layout (after :meth:`grow`).

        Rows of classes absent from ``layout`` are zeros.

        Parameters
        ----------
        w : (len(layout["classes"]) * (layout["n_features"] + 1),) float64
        layout : dict
            ``{"classes": [...], "n_features": int or None}``.

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
        idx = [self._index[label_key(v)] for v in other]
        out[idx, :dp] = rows[:, :dp]
        out[idx, width - 1] = rows[:, dp]
        return out.ravel()

    # --- structure ----------------------------------------------------------------------

    def _add_class(self, label: Any) -> None:
        key = label_key(label)
        pos = bisect.bisect(self._keys, key)
        self._keys.insert(pos, key)
        self.classes.insert(pos, label)
        self._Wb = np.insert(self._Wb, pos, 0.0, axis=0)
        self._index = {k: i for i, k in enumerate(self._keys)}

    def _set_n_features(self, d: int) -> None:
        Wb = np.zeros((len(self.classes), d + 1))
        Wb[:, d] = self._Wb[:, -1]
        self.n_features = d
        self._Wb = Wb

    @staticmethod
    def _check_n_features(d: Any) -> int:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1:
            raise ParameterError("n_features", f"n_features must be an integer >= 1, got {d!r}")
        return int(d)

    # --- JSON ---------------------------------------------------------------------------

    def _parameters_json(self) -> dict:
        d = self.n_features or 0
        return {"classes": list(self.classes), "n_features": self.n_features,
                "W": self._Wb[:, :d].tolist(), "b": self._Wb[:, d].tolist()}

    def _load_parameters(self, parameters: dict) -> None:
        """Load ``{"classes", "n_features", "W", "b"}``; every key may be missing or null.

        Classes may come in any order (rows of ``W`` and ``b`` follow them); they are put
        in canonical order.

        Raises
        ------
        learning.errors.ParameterError
            Naming the key (``classes``, ``n_features``, ``W``, ``b``) that is rejected.
        """
        unknown = set(parameters) - {"classes", "n_features", "W", "b"}
        if unknown:
            name = sorted(map(str, unknown))[0]
            raise ParameterError(name, f"unknown parameter {name!r} for PAClassifier; "
                                 "expected classes, n_features, W, b")
        try:
            classes = as_labels(parameters.get("classes") or [])
        except (TypeError, ValueError) as e:
            raise ParameterError("classes", f"classes: {e}") from None
        if len({label_key(v) for v in classes}) != len(classes):
            raise ParameterError("classes", f"classes must be distinct, got {classes!r}")
        d = parameters.get("n_features")
        d = None if d is None else self._check_n_features(d)
        K = len(classes)
        Wb = np.zeros((K, (d or 0) + 1))
        for name, shape, target in (("W", (K, d or 0), Wb[:, :d or 0]),
                                    ("b", (K,), Wb[:, d or 0])):
            value = parameters.get(name)
            if value is None:
                continue
            try:
                arr = np.asarray(value, dtype=np.float64)
            except (TypeError, ValueError):
                raise ParameterError(name, f"{name} must hold numbers") from None
            if arr.shape != shape or not np.all(np.isfinite(arr)):
                raise ParameterError(
                    name, f"{name} must be finite numbers of shape {shape} "
                    f"(classes x n_features), got shape {arr.shape}")
            target[...] = arr
        order = sorted(range(K), key=lambda i: label_key(classes[i]))
        self.classes = [classes[i] for i in order]
        self._keys = [label_key(v) for v in self.classes]
        self._index = {k: i for i, k in enumerate(self._keys)}
        self.n_features = d
        self._Wb = np.ascontiguousarray(Wb[order])
