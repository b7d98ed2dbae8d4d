"""What online regressors share: real-valued targets, absolute-error evaluation.

A regressor predicts a real number per record. Its :meth:`Regressor.loss` is the **sum of
absolute errors** and its :meth:`Regressor.score` the **negative mean absolute error**, so
that the spoke's ``loss_sum`` (summed from :meth:`Learner.test_then_train`) divided by the
records fitted — the Query response's ``meanLoss`` — is the prequential MAE, river's
``metrics.MAE`` on the same stream. The prequential *accuracy* of a regression pipeline
counts exact hits and is meaningless (practically 0).
"""

from __future__ import annotations

import abc
import math
from typing import Any, ClassVar, Sequence

import numpy as np

from learning.errors import ParameterError
from learning.learners.base import Learner, as_matrix, as_test_matrix
from learning.learners.linear import check_n_features, grow_n_features, load_matrix

__all__ = ["Regressor", "LinearRegressor", "as_targets"]


def as_targets(y: Any) -> np.ndarray:
    """Regression targets as a ``(n_records,)`` float64 array.

    Raises
    ------
    ValueError
        If a target is not a finite real number (``bool``, ``str`` and None are rejected).
    """
    values = y.tolist() if isinstance(y, np.ndarray) else [
        v.item() if isinstance(v, np.generic) else v for v in y]
    for v in values:
        if type(v) not in (int, float) or (type(v) is float and not math.isfinite(v)):
            raise ValueError(f"regression targets must be finite real numbers, got {v!r}")
    return np.asarray(values, dtype=np.float64).reshape(len(values))


class Regressor(Learner, abc.ABC):
    """Base of regressors: predictions are Python floats, loss is the sum of absolute
    errors, score the negative MAE (see the module docstring)."""

    task: ClassVar[str] = "regression"
    #: the width records must have (features), None until the first fit
    n_features: int | None = None

    def _check_targets(self, X: Any, y: Sequence, n_features: int | None
                       ) -> tuple[np.ndarray, np.ndarray]:
        X = as_matrix(X, n_features)
        t = as_targets(y)
        if t.shape[0] != X.shape[0]:
            raise ValueError(f"y has {t.shape[0]} targets, X has {X.shape[0]} records")
        return X, t

    @abc.abstractmethod
    def _predict_array(self, X: np.ndarray) -> np.ndarray:
        """``(n_records,)`` float64 predictions of a checked ``X``."""

    def predict(self, X: np.ndarray) -> list[float]:
        """Predict a real number per record (0.0 before anything was learned).

        Parameters
        ----------
        X : (n_records, n_features) float64

        Returns
        -------
        list of n_records floats

        Raises
        ------
        ValueError
            If the width is not ``n_features``.
        """
        return self._predict_array(as_matrix(X, self.n_features)).tolist()

    def loss(self, X: np.ndarray, y: Sequence) -> float:
        """Sum over the batch of ``|y - ŷ|`` (the model is unchanged).

        Raises
        ------
        ValueError
            For a width other than ``n_features``, a length mismatch or a non-real target.
        """
        X, t = self._check_targets(X, y, self.n_features)
        if not t.size:
            return 0.0
        return float(np.abs(t - self._predict_array(X)).sum())

    def score(self, X: np.ndarray, y: Sequence) -> float:
        """Negative mean absolute error on the batch (higher is better); NaN if empty."""
        n = len(y)
        return -self.loss(X, y) / n if n else float("nan")


class LinearRegressor(Regressor, abc.ABC):
    """A regressor whose model is ``ŷ = w · x + b`` and whose flat vector is ``[w | b]``
    (:class:`learning.learners.OnlineRidge` keeps the model but replaces the vector).

    State: ``n_features`` (None until the first batch) and ``_wb: (n_features + 1,)``
    float64 (``w`` then ``b``; empty while ``n_features`` is unknown, as nothing can have
    been learned then). Subclasses implement ``_learn``, their update rule.
    """

    def _init_model(self) -> None:
        self.n_features: int | None = None
        self._wb = np.zeros(0)

    def _learn_width(self, X: np.ndarray) -> None:
        if self.n_features is None and X.shape[0]:
            self._set_n_features(X.shape[1])

    def _set_n_features(self, d: int) -> None:
        self.n_features = d
        self._wb = np.zeros(d + 1)

    # --- learning -----------------------------------------------------------------------

    @abc.abstractmethod
    def _learn(self, X: np.ndarray, t: np.ndarray, X_test: np.ndarray | None,
               want_predictions: bool) -> Any:
        """Learn the records ``X`` (targets ``t``, at least one) in order. If
        ``want_predictions``, return the prediction of each record (``X_test[i]``, or
        ``X[i]`` when None) by the model after records ``< i`` (a list or an array)."""

    def fit(self, X: np.ndarray, y: Sequence) -> None:
        """Learn the batch (see the class docstring).

        Parameters
        ----------
        X : (n_records, n_features) float64
        y : sequence of n_records real targets

        Raises
        ------
        ValueError
            If ``len(y) != n_records``, the width is not ``n_features`` or a target is not
            a finite real number.
        """
        X, t = self._check_targets(X, y, self.n_features)
        self._learn_width(X)
        if t.size:
            self._learn(X, t, None, want_predictions=False)

    def test_then_train(self, X: np.ndarray, y: Sequence,
                        X_test: np.ndarray | None = None) -> tuple[list, float]:
        """Predict record ``i`` with the model after records ``< i``, then learn it.

        Parameters
        ----------
        X : (n_records, n_features) float64
            Records as learned.
        y : sequence of n_records real targets
        X_test : (n_records, n_features) float64 or None
            Records as predicted (None: ``X``).

        Returns
        -------
        predictions : list of n_records floats
        loss_sum : float
            Sum of the absolute errors ``|y - ŷ|`` of those predictions (not the training
            loss): the prequential MAE times ``n_records``.
        """
        X, t = self._check_targets(X, y, self.n_features)
        X_test = as_test_matrix(X_test, X)
        self._learn_width(X)
        if not t.size:
            return [], 0.0
        predictions = np.asarray(self._learn(X, t, X_test, want_predictions=True))
        errors = np.abs(t - predictions)
        if self.refused_rows:  # left out of the step (Learner.refused_rows): out of the sum
            errors[list(self.refused_rows)] = 0.0
        return predictions.tolist(), float(errors.sum())

    @property
    def coef(self) -> np.ndarray:
        """``w``: (n_features,) float64 (empty while ``n_features`` is unknown)."""
        return self._wb[:-1].copy()

    @property
    def intercept(self) -> float:
        return float(self._wb[-1]) if self._wb.size else 0.0

    def _predict_array(self, X: np.ndarray) -> np.ndarray:
        if self.n_features is None:
            return np.zeros(X.shape[0])
        return X @ self._wb[:-1] + self._wb[-1]

    # --- the flat vector ----------------------------------------------------------------

    @staticmethod
    def _vector_size(d: int) -> int:
        """The size of :meth:`get_params` for ``d`` features."""
        return d + 1

    def get_params(self) -> np.ndarray:
        """``[w | b]``: 1-D float64 of size ``n_features + 1`` (0 while unknown)."""
        return self._wb.copy()

    def set_params(self, w: np.ndarray) -> None:
        """Replace ``[w | b]``.

        Raises
        ------
        ValueError
            If ``w`` is not 1-D of size ``n_features + 1``.
        """
        w = np.asarray(w, dtype=np.float64)
        if w.ndim != 1 or w.shape != self._wb.shape:
            raise ValueError(f"expected a 1-D vector of {self._wb.size} parameters "
                             f"({self.n_features} features + 1 intercept), got shape {w.shape}")
        self._wb = w.copy()

    def layout(self) -> dict:
        """``{"n_features": d or None}``."""
        return {"n_features": self.n_features}

    def grow(self, layout: dict) -> None:
        """Learn ``n_features`` from ``layout`` if unknown.

        Raises
        ------
        ValueError
            If ``layout`` names another ``n_features``.
        """
        grow_n_features(self, layout)

    def project(self, w: np.ndarray, layout: dict) -> np.ndarray:
        """``w`` in this layout (after :meth:`grow`); a vector of a model that never knew
        its width (size 0) is the zero model.

        Raises
        ------
        ValueError
            If ``w``'s size does not match ``layout``.
        """
        self.grow(layout)
        w = np.asarray(w, dtype=np.float64)
        d = layout.get("n_features")
        size = 0 if d is None else self._vector_size(d)
        if w.ndim != 1 or w.size != size:
            raise ValueError(f"expected a 1-D vector of {size} parameters for layout "
                             f"{layout}, got shape {w.shape}")
        return w.copy() if size else np.zeros_like(self.get_params())

    # --- JSON ---------------------------------------------------------------------------

    def _parameters_json(self) -> dict:
        return {"n_features": self.n_features, "w": self._wb[:-1].tolist(),
                "b": self.intercept}

    def _load_parameters(self, parameters: dict) -> None:
        """Load ``{"n_features", "w", "b"}`` (each may be missing or null).

        Raises
        ------
        learning.errors.ParameterError
            Naming the key that is rejected.
        """
        unknown = set(parameters) - {"n_features", "w", "b"}
        if unknown:
            name = sorted(map(str, unknown))[0]
            raise ParameterError(name, f"unknown parameter {name!r} for "
                                 f"{type(self).__name__}; expected n_features, w, b")
        d = parameters.get("n_features")
        if d is None:
            if parameters.get("w") or parameters.get("b"):
                raise ParameterError("n_features", "n_features is required with w or b")
            self._init_model()
            return
        self._set_n_features(check_n_features(d))
        w = load_matrix(parameters, "w", (d,), " (n_features)")
        b = load_matrix(parameters, "b", (), "")
        if w is not None:
            self._wb[:-1] = w
        if b is not None:
            self._wb[-1] = float(b)
