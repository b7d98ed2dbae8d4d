"""Running mean and variance of the stream, records passed through unchanged
(papers/002_9b954bd89ad87406.txt §3.3.1, "Running mean and variance").

References
----------
Chan, T. F., Golub, G. H., LeVeque, R. J. (1983) Algorithms for computing the sample
variance: analysis and recommendations. The American Statistician 37(3):242–247 (the
pairwise merge of a batch into running moments).
"""

from __future__ import annotations

import numpy as np

from learning.errors import ParameterError
from learning.preprocessors import moments
from learning.preprocessors.base import Preprocessor

__all__ = ["RunningMeanVariance"]


class RunningMeanVariance(moments.MergeableStatistics, Preprocessor):
    """Keep the running per-feature mean and variance; pass the records through.

    A monitor in the pipeline: it transforms nothing (:meth:`transform` returns a copy of
    ``X``), so it can sit anywhere in a chain to expose the statistics of what flows at
    that point (its ``parameters`` in the pipeline's JSON state, hence in a Query's model
    dump). Standardizing is :class:`~learning.preprocessors.StandardScaler`'s job.

    Each learned batch ``B`` (``(n_records, n_features)`` float64) is merged into the
    running moments with Chan et al.'s update: with ``n_A, mean_A, M2_A`` so far and
    ``n_B, mean_B, M2_B`` of the batch, ``δ = mean_B − mean_A``,
    ``mean = mean_A + δ n_B / n``, ``M2 = M2_A + M2_B + δ² n_A n_B / n``
    (:func:`learning.preprocessors.moments.combine_moments`); the same update merges the
    :meth:`statistics` of several instances (:meth:`merge_statistics`).

    Attributes
    ----------
    n : int
        Records learned.
    mean : (n_features,) float64 or None
    var : (n_features,) float64 or None
        Population variance ``M2 / n``; :meth:`sample_var` gives ``M2 / (n − 1)``.
    std : (n_features,) float64 or None

    Examples
    --------
    >>> import numpy as np
    >>> stats = RunningMeanVariance()
    >>> stats.learn_transform(np.array([[1.0, 10.0], [3.0, 10.0]]))
    array([[ 1., 10.],
           [ 3., 10.]])
    >>> stats.learn_transform(np.array([[5.0, 10.0]]))
    array([[ 5., 10.]])
    >>> stats.n, stats.mean.tolist(), stats.var.tolist()
    (3, [3.0, 10.0], [2.6666666666666665, 0.0])
    """

    _STATISTICS = moments.MOMENTS

    HYPERPARAMETERS = ()

    def __init__(self):
        self.n = 0
        self.n_features: int | None = None
        self.mean: np.ndarray | None = None
        self._m2: np.ndarray | None = None

    @property
    def var(self) -> np.ndarray | None:
        return None if self._m2 is None else self._m2 / self.n

    @property
    def std(self) -> np.ndarray | None:
        return None if self._m2 is None else np.sqrt(self._m2 / self.n)

    def sample_var(self) -> np.ndarray | None:
        """``M2 / (n − 1)`` per feature (NaN while ``n < 2``; None before any record)."""
        if self._m2 is None:
            return None
        return self._m2 / (self.n - 1) if self.n > 1 else np.full_like(self._m2, np.nan)

    def _check(self, X: np.ndarray) -> np.ndarray:
        X = np.ascontiguousarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D (n_records, n_features), got shape {X.shape}")
        if self.n_features is not None and X.shape[1] != self.n_features:
            raise ValueError(f"X has {X.shape[1]} features, expected {self.n_features}")
        return X

    def _learn(self, X: np.ndarray) -> None:
        if not X.shape[0]:
            return
        batch = moments.batch_moments(X)
        if self.n == 0:
            self.n_features = X.shape[1]
            self.n, self.mean, self._m2 = batch
            return
        self.n, self.mean, self._m2 = moments.combine_moments(self.n, self.mean, self._m2,
                                                              *batch)

    # mergeable statistics (moments.MergeableStatistics)
    def _get_statistics(self) -> tuple[np.ndarray, np.ndarray]:
        return self.mean, self._m2

    def _set_statistics(self, n: int, mean: np.ndarray | None, m2: np.ndarray | None) -> None:
        self.n, self.mean, self._m2 = n, mean, m2

    def learn_transform(self, X: np.ndarray) -> np.ndarray:
        """Learn the batch; return it unchanged (a copy).

        Raises
        ------
        ValueError
            If the width differs from the one learned before.
        """
        X = self._check(X)
        self._learn(X)
        return X.copy()

    def transform(self, X: np.ndarray) -> np.ndarray:
        """``X`` unchanged (a copy)."""
        return self._check(X).copy()

    def prequential_transform(self, X: np.ndarray, X_test: np.ndarray | None = None
                              ) -> tuple[np.ndarray, np.ndarray]:
        """Learn ``X``; both views pass through unchanged."""
        X = self._check(X)
        X_test = X if X_test is None else self._check(X_test)
        self._learn(X)
        return X_test.copy(), X.copy()

    def _parameters_json(self) -> dict:
        return {"n": self.n, "n_features": self.n_features,
                "mean": None if self.mean is None else self.mean.tolist(),
                "m2": None if self._m2 is None else self._m2.tolist()}

    def _load_parameters(self, parameters: dict) -> None:
        """Load ``{"n", "n_features", "mean", "m2"}`` (each may be missing or null).

        Raises
        ------
        learning.errors.ParameterError
            Naming the key that is rejected.
        """
        unknown = set(parameters) - {"n", "n_features", "mean", "m2"}
        if unknown:
            name = sorted(map(str, unknown))[0]
            raise ParameterError(name, f"unknown parameter {name!r} for RunningMeanVariance;"
                                 " expected n, n_features, mean, m2")
        n, d = parameters.get("n") or 0, parameters.get("n_features")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ParameterError("n", f"n must be an integer >= 0, got {n!r}")
        if d is not None and (isinstance(d, bool) or not isinstance(d, int) or d < 1):
            raise ParameterError("n_features", f"n_features must be an integer >= 1, got {d!r}")
        if n and d is None:
            raise ParameterError("n_features", "n_features is required when n > 0")
        self.n, self.n_features = n, d
        if not n:
            return
        for name in ("mean", "m2"):
            try:
                v = np.asarray(parameters.get(name), dtype=np.float64)
            except (TypeError, ValueError):
                raise ParameterError(name, f"{name} must hold numbers") from None
            if v.shape != (d,) or not np.all(np.isfinite(v)):
                raise ParameterError(name, f"{name} must be {d} finite numbers, got {v.shape}")
            if name == "m2" and np.any(v < 0):
                raise ParameterError("m2", "m2 must be >= 0")
            setattr(self, "mean" if name == "mean" else "_m2", v)
