"""Feature selection / filtering by position (papers/002_9b954bd89ad87406.txt §3.3.1).

Records reach the pipeline as lists of numbers without names, so features are chosen by
their index in the record.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from learning.errors import HyperparameterError, ParameterError, check_bool
from learning.preprocessors.base import Preprocessor

__all__ = ["FeatureSelector"]


class FeatureSelector(Preprocessor):
    """Keep (or drop) the features at the given indices.

    ``X: (n_records, n_features) float64 → (n_records, n_out) float64`` where, with
    ``drop=False``, column ``j`` of the output is column ``indices[j]`` of the input
    (indices in the order given, repeats allowed, negative indices count from the end as
    in Python), and with ``drop=True`` the output is the input without those columns, in
    their original order. Nothing is learned but the record width, fixed by the first
    batch; an index out of range for it is an error.

    Parameters
    ----------
    indices : list of int
        The features to keep (or to drop).
    drop : bool
        Drop ``indices`` instead of keeping them.

    Attributes
    ----------
    n_features : int or None
        Input width, None before the first batch.

    Raises
    ------
    learning.errors.HyperparameterError
        E.g. ``indices must be a list of integers, got 'a'``.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[1.0, 2.0, 3.0, 4.0]])
    >>> FeatureSelector(indices=[3, 0]).learn_transform(X)
    array([[4., 1.]])
    >>> FeatureSelector(indices=[0, -1], drop=True).transform(X)
    array([[2., 3.]])
    """

    def __init__(self, indices: list[int] | None = None, drop: bool = False):
        self.indices = [] if indices is None else indices
        self.drop = drop
        if not isinstance(self.indices, (list, tuple)) or any(
                isinstance(i, bool) or not isinstance(i, int) for i in self.indices):
            raise HyperparameterError("indices", f"indices must be a list of integers, got "
                                      f"{self.indices!r}")
        check_bool("drop", drop)
        if not drop and not self.indices:
            raise HyperparameterError("indices", "indices must name at least one feature to keep")
        self.n_features: int | None = None
        self._columns: np.ndarray | None = None

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

    def _resolve(self, d: int) -> np.ndarray:
        bad = [i for i in self.indices if not -d <= i < d]
        if bad:
            raise ValueError(f"feature indices {bad} are out of range for {d} features")
        idx = [i % d for i in self.indices]
        if self.drop:
            idx = [j for j in range(d) if j not in set(idx)]
        return np.asarray(idx, dtype=np.intp)

    def _select(self, X: Any) -> np.ndarray:
        X = np.ascontiguousarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D (n_records, n_features), got shape {X.shape}")
        if self.n_features is None:
            self._columns = self._resolve(X.shape[1])
            self.n_features = X.shape[1]
        elif X.shape[1] != self.n_features:
            raise ValueError(f"X has {X.shape[1]} features, the selector expects "
                             f"{self.n_features}")
        return X[:, self._columns]

    def learn_transform(self, X: np.ndarray) -> np.ndarray:
        """The selected columns (the first batch fixes the width).

        Raises
        ------
        ValueError
            If an index is out of range or the width changes.
        """
        return self._select(X)

    def transform(self, X: np.ndarray) -> np.ndarray:
        """The selected columns (as :meth:`learn_transform`; nothing is learned)."""
        return self._select(X)

    def prequential_transform(self, X: np.ndarray, X_test: np.ndarray | None = None
                              ) -> tuple[np.ndarray, np.ndarray]:
        """Both views are the selected columns (there are no statistics)."""
        out = self._select(X)
        return (out if X_test is None else self._select(X_test)), out

    def _parameters_json(self) -> dict:
        return {"n_features": self.n_features}

    def _load_parameters(self, parameters: dict) -> None:
        """Load ``{"n_features"}`` (may be missing or null).

        Raises
        ------
        learning.errors.ParameterError
            For an unknown key or a width the indices do not fit.
        """
        unknown = set(parameters) - {"n_features"}
        if unknown:
            name = sorted(map(str, unknown))[0]
            raise ParameterError(name, f"unknown parameter {name!r} for FeatureSelector; "
                                 "expected n_features")
        d = parameters.get("n_features")
        if d is None:
            return
        if isinstance(d, bool) or not isinstance(d, int) or d < 1:
            raise ParameterError("n_features", f"n_features must be an integer >= 1, got {d!r}")
        try:
            self._columns = self._resolve(d)
        except ValueError as e:
            raise ParameterError("n_features", str(e)) from None
        self.n_features = d
