"""Polynomial feature expansion (papers/002_9b954bd89ad87406.txt §3.3.1; §4 trains a PA
classifier on degree-2 features)."""

from __future__ import annotations

from itertools import combinations, combinations_with_replacement

import numpy as np

from learning.errors import HyperparameterError, ParameterError, check_bool
from learning.preprocessors.base import Preprocessor

__all__ = ["PolynomialFeatures"]


class PolynomialFeatures(Preprocessor):
    """All products of up to ``degree`` features, in scikit-learn's order.

    ``X: (n_records, d) float64 → (n_records, n_out) float64``: the features themselves,
    then every product of 2 of them, ..., then every product of ``degree``, each group in
    lexicographic order of the feature indices (``x0 x0, x0 x1, ..., x1 x1, ...``), the
    same columns as ``sklearn.preprocessing.PolynomialFeatures(degree, interaction_only,
    include_bias)``. With ``interaction_only`` a feature never multiplies itself
    (``x0 x1`` but not ``x0²``); with ``include_bias`` a leading column of ones is added.
    ``n_out = Σ_{k=1..degree} C(d + k − 1, k)`` (``C(d, k)`` with ``interaction_only``),
    plus one for the bias: 54 for ``d = 9``, ``degree = 2``. Nothing is learned but the
    width, fixed by the first batch.

    Parameters
    ----------
    degree : int, >= 1
    interaction_only : bool
    include_bias : bool

    Attributes
    ----------
    n_features : int or None
        Input width.
    n_output_features : int or None

    Examples
    --------
    >>> import numpy as np
    >>> PolynomialFeatures(degree=2).learn_transform(np.array([[2.0, 3.0]]))
    array([[2., 3., 4., 6., 9.]])
    >>> PolynomialFeatures(degree=3, interaction_only=True).transform(np.array([[2.0, 3.0, 5.0]]))
    array([[ 2.,  3.,  5.,  6., 10., 15., 30.]])
    """

    def __init__(self, degree: int = 2, interaction_only: bool = False,
                 include_bias: bool = False):
        self.degree = degree
        self.interaction_only = interaction_only
        self.include_bias = include_bias
        if isinstance(degree, bool) or not isinstance(degree, int) or degree < 1:
            raise HyperparameterError("degree", f"degree must be an integer >= 1, got {degree!r}")
        check_bool("interaction_only", interaction_only)
        check_bool("include_bias", include_bias)
        self.n_features: int | None = None
        self._groups: list[np.ndarray] = []

    @property
    def n_output_features(self) -> int | None:
        if self.n_features is None:
            return None
        return int(self.include_bias) + sum(g.shape[0] for g in self._groups)

    def update_hyperparameters(self, **kw) -> None:
        """Nothing may change while the pipeline runs: every hyperparameter changes the
        record width the learner after it was built for.

        Raises
        ------
        learning.errors.HyperparameterError
            For any hyperparameter whose value would change.
        """
        for name, value in kw.items():
            if name in self.hyperparameters() and value != getattr(self, name):
                raise HyperparameterError(name, f"{name} cannot change while the pipeline "
                                          "runs (it changes the record width)")
        super().update_hyperparameters(**kw)

    def _plan(self, d: int) -> None:
        """Index tuples of each degree: one ``(n_terms_k, k)`` array per ``k``."""
        pick = combinations if self.interaction_only else combinations_with_replacement
        self._groups = []
        for k in range(1, self.degree + 1):
            terms = list(pick(range(d), k))
            if terms:
                self._groups.append(np.asarray(terms, dtype=np.intp))
        self.n_features = d

    def _expand(self, X: np.ndarray) -> np.ndarray:
        X = np.ascontiguousarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D (n_records, n_features), got shape {X.shape}")
        if self.n_features is None:
            self._plan(X.shape[1])
        elif X.shape[1] != self.n_features:
            raise ValueError(f"X has {X.shape[1]} features, expected {self.n_features}")
        parts = [np.ones((X.shape[0], 1))] if self.include_bias else []
        for idx in self._groups:
            parts.append(X[:, idx].prod(axis=2) if idx.shape[1] > 1 else X[:, idx[:, 0]])
        return np.hstack(parts) if parts else np.empty((X.shape[0], 0))

    def learn_transform(self, X: np.ndarray) -> np.ndarray:
        """The expansion (the first batch fixes the width).

        Raises
        ------
        ValueError
            If the width changes.
        """
        return self._expand(X)

    def transform(self, X: np.ndarray) -> np.ndarray:
        """The expansion (nothing is learned)."""
        return self._expand(X)

    def prequential_transform(self, X: np.ndarray, X_test: np.ndarray | None = None
                              ) -> tuple[np.ndarray, np.ndarray]:
        """Both views expanded (there are no statistics)."""
        out = self._expand(X)
        return (out if X_test is None else self._expand(X_test)), out

    def _parameters_json(self) -> dict:
        return {"n_features": self.n_features}

    def _load_parameters(self, parameters: dict) -> None:
        """Load ``{"n_features"}`` (may be missing or null).

        Raises
        ------
        learning.errors.ParameterError
            For an unknown key or a bad width.
        """
        unknown = set(parameters) - {"n_features"}
        if unknown:
            name = sorted(map(str, unknown))[0]
            raise ParameterError(name, f"unknown parameter {name!r} for PolynomialFeatures; "
                                 "expected n_features")
        d = parameters.get("n_features")
        if d is None:
            return
        if isinstance(d, bool) or not isinstance(d, int) or d < 1:
            raise ParameterError("n_features", f"n_features must be an integer >= 1, got {d!r}")
        self._plan(d)
