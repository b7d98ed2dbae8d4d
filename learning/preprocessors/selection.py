"""Feature selection / filtering by position (papers/002_9b954bd89ad87406.txt §3.3.1).

Records reach the pipeline as lists of numbers without names, so features are chosen by
their index in the record.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from learning.errors import HyperparameterError, ParameterError
from learning.hyperparameters import INT_LIST, Hyperparameter, check_stored
from learning.preprocessors.base import StatelessPreprocessor

__all__ = ["FeatureSelector"]


class FeatureSelector(StatelessPreprocessor):
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

    HYPERPARAMETERS = (
        Hyperparameter("indices", INT_LIST, [], "the features to keep (or drop), in order; "
                       "negative ones count from the end"),
        Hyperparameter("drop", bool, False, "drop indices instead of keeping them"),
    )

    def __init__(self, indices: list[int] | None = None, drop: bool = False):
        self.indices = [] if indices is None else indices
        self.drop = drop
        check_stored(self)
        if not drop and not self.indices:
            raise HyperparameterError("indices", "indices must name at least one feature to keep")
        self.n_features: int | None = None
        self._columns: np.ndarray | None = None

    def output_width(self, n_features: int) -> int:
        """``len(indices)`` kept, or ``n_features`` less the distinct ones dropped.

        Raises
        ------
        ValueError
            For an index out of range for ``n_features``.
        """
        return len(self._resolve(n_features))

    def _resolve(self, d: int) -> np.ndarray:
        bad = [i for i in self.indices if not -d <= i < d]
        if bad:
            raise ValueError(f"feature indices {bad} are out of range for {d} features")
        idx = [i % d for i in self.indices]
        if self.drop:
            idx = [j for j in range(d) if j not in set(idx)]
        return np.asarray(idx, dtype=np.intp)

    def _apply(self, X: Any) -> np.ndarray:
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

    def _load_width(self, d: int) -> None:
        try:
            self._columns = self._resolve(d)
        except ValueError as e:
            raise ParameterError("n_features", str(e)) from None
        self.n_features = d
