"""Polynomial feature expansion (papers/002_9b954bd89ad87406.txt §3.3.1; §4 trains a PA
classifier on degree-2 features)."""

from __future__ import annotations

import math
from itertools import combinations, combinations_with_replacement

import numpy as np

from learning.hyperparameters import Hyperparameter, check_stored
from learning.preprocessors.base import StatelessPreprocessor

__all__ = ["PolynomialFeatures", "MAX_FEATURES"]

#: ``max_features`` by default: a mini-batch of 256 records of 100,000 features is 205 MB
#: of float64 (degree 2 of 446 features); degree 4 of 300 would be 338 million features, a
#: terabyte, and the process would be killed with every pipeline beside it
MAX_FEATURES = 100_000


class PolynomialFeatures(StatelessPreprocessor):
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
    max_features : int, >= 1
        The most features it makes of a record (:data:`MAX_FEATURES` by default); a batch
        of wider records raises ValueError (a pipeline refuses them: ``fit_failed``,
        ``predict_failed``), and a declared width that would make more is refused at Create.

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

    HYPERPARAMETERS = (
        Hyperparameter("degree", int, 2, "the highest degree of the products",
                       interval="[1, inf)"),
        Hyperparameter("interaction_only", bool, False, "a feature never multiplies itself "
                       "(x0 x1 but not x0^2)"),
        Hyperparameter("include_bias", bool, False, "add a leading column of ones"),
        Hyperparameter("max_features", int, MAX_FEATURES, "the most features it makes of a "
                       "record; records of a width that would make more are refused (a "
                       "mini-batch of them would not fit in memory)", interval="[1, inf)"),
    )

    def __init__(self, degree: int = 2, interaction_only: bool = False,
                 include_bias: bool = False, max_features: int = MAX_FEATURES):
        self.degree = degree
        self.interaction_only = interaction_only
        self.include_bias = include_bias
        self.max_features = max_features
        check_stored(self)
        self.n_features: int | None = None
        self._groups: list[np.ndarray] = []

    @property
    def n_output_features(self) -> int | None:
        if self.n_features is None:
            return None
        return int(self.include_bias) + sum(g.shape[0] for g in self._groups)

    def output_width(self, n_features: int) -> int:
        """``n_out`` for ``d = n_features`` (the class docstring's formula).

        Raises
        ------
        ValueError
            When ``n_out`` exceeds ``max_features``.
        """
        d = n_features
        n_out = int(self.include_bias)
        for k in range(1, min(self.degree, d if self.interaction_only else self.degree) + 1):
            n_out += math.comb(d, k) if self.interaction_only else math.comb(d + k - 1, k)
            if n_out > self.max_features and self.degree > 32:  # not summed to the end:
                # a degree of a million would take minutes of big integers
                raise ValueError(f"records of {d} features make more than {n_out:,} at "
                                 f"degree {self.degree}, above max_features = "
                                 f"{self.max_features:,}")
        if n_out > self.max_features:
            raise ValueError(f"records of {d} features make {n_out:,} at degree "
                             f"{self.degree}, above max_features = {self.max_features:,}")
        return n_out

    def _plan(self, d: int) -> None:
        """Index tuples of each degree: one ``(n_terms_k, k)`` array per ``k``.

        Raises
        ------
        ValueError
            As :meth:`output_width`, before anything is allocated.
        """
        self.output_width(d)
        pick = combinations if self.interaction_only else combinations_with_replacement
        self._groups = []
        for k in range(1, self.degree + 1):
            terms = list(pick(range(d), k))
            if terms:
                self._groups.append(np.asarray(terms, dtype=np.intp))
        self.n_features = d

    def _load_width(self, d: int) -> None:
        self._plan(d)

    def _apply(self, X: np.ndarray) -> np.ndarray:
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
