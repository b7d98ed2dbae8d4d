"""Running scalers: standard (mean / variance) and min-max (papers/002 §3.3.1).

Both follow river's ``preprocessing.StandardScaler`` / ``MinMaxScaler`` per-record
semantics exactly, but compute a whole mini-batch at once: the statistics after each
prefix of the batch come from cumulative sums (Chan et al.'s parallel update of mean and
variance) and running minima / maxima, with no Python loop over records.

References
----------
Chan, T. F., Golub, G. H., LeVeque, R. J. (1983) Algorithms for computing the sample
variance: analysis and recommendations. The American Statistician 37(3):242–247.
Welford, B. P. (1962) Note on a method for calculating corrected sums of squares and
products. Technometrics 4(3):419–420.
"""

from __future__ import annotations

import abc
from typing import Any

import numpy as np

from learning import compiled
from learning.errors import ParameterError
from learning.hyperparameters import Hyperparameter, check_stored
from learning.preprocessors import moments
from learning.preprocessors.base import Preprocessor

__all__ = ["StandardScaler", "MinMaxScaler"]


#: the statistics of a scaler that has learned nothing yet, as the compiled loops take them
_NO_STATISTICS = np.zeros(0)


def _safe_div(Z: np.ndarray, denom: np.ndarray) -> np.ndarray:
    """``Z / denom`` where ``denom > 0``, else 0 (river's ``safe_div``)."""
    out = np.zeros_like(Z)
    np.divide(Z, denom, out=out, where=denom > 0)
    return out


def _as_batch(X: Any, d: int | None) -> np.ndarray:
    X = np.ascontiguousarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (n_records, n_features), got shape {X.shape}")
    if d is not None and X.shape[1] != d:
        raise ValueError(f"X has {X.shape[1]} features, the scaler expects {d}")
    return X


def _check_vector(parameters: dict, name: str, d: int) -> np.ndarray:
    try:
        v = np.asarray(parameters.get(name), dtype=np.float64)
    except (TypeError, ValueError):
        raise ParameterError(name, f"{name} must hold numbers") from None
    if v.shape != (d,) or not np.all(np.isfinite(v)):
        raise ParameterError(name, f"{name} must be {d} finite numbers, got shape {v.shape}")
    return v


def _check_count(parameters: dict) -> tuple[int, int | None]:
    n, d = parameters.get("n", 0), parameters.get("n_features")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ParameterError("n", f"n must be an integer >= 0, got {n!r}")
    if d is not None and (isinstance(d, bool) or not isinstance(d, int) or d < 1):
        raise ParameterError("n_features", f"n_features must be an integer >= 1, got {d!r}")
    if n and d is None:
        raise ParameterError("n_features", "n_features is required when n > 0")
    return n, d


class _RunningScaler(Preprocessor):
    """What both scalers share: ``n`` records learned, their width ``n_features`` and two
    running per-feature statistics, the attributes named by ``_STATS`` (None before the
    first record).

    Subclasses compute the statistics after each prefix of a batch (``_prefix``), scale
    with them (``_scale``) and may check loaded statistics (``_check_loaded``).
    """

    _STATS: tuple[str, str]

    @abc.abstractmethod
    def _prefix(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The two statistics after each prefix ``X[:k+1]``: two ``(n_records, n_features)``."""

    @abc.abstractmethod
    def _scale(self, X: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``X`` scaled with the statistics ``a``, ``b`` (one row each, or broadcast)."""

    def _commit(self, X: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
        """Keep the statistics after the whole batch (the last rows of ``_prefix``)."""
        self.n += X.shape[0]
        self.n_features = X.shape[1]
        for name, prefix in zip(self._STATS, (a, b)):
            setattr(self, name, prefix[-1].copy())

    def learn_transform(self, X: np.ndarray) -> np.ndarray:
        """Learn the records in order; record ``i`` is scaled with the statistics of
        records ``<= i``.

        Parameters
        ----------
        X : (n_records, n_features) float64

        Returns
        -------
        (n_records, n_features) float64

        Raises
        ------
        ValueError
            If the width differs from the one learned before.
        """
        X = _as_batch(X, self.n_features)
        if X.shape[0] == 0:
            return X.copy()
        a, b = self._prefix(X)
        self._commit(X, a, b)
        return self._scale(X, a, b)

    def _parameters_json(self) -> dict:
        stats = {name: getattr(self, name) for name in self._STATS}
        return {"n": self.n, "n_features": self.n_features,
                **{name: None if v is None else v.tolist() for name, v in stats.items()}}

    def _load_parameters(self, parameters: dict) -> None:
        """Load ``{"n", "n_features"}`` and the two statistics named by ``_STATS``.

        Raises
        ------
        learning.errors.ParameterError
            Naming the key that is rejected.
        """
        n, d = _check_count(parameters)
        self.n, self.n_features = n, d
        if n:
            for name in self._STATS:
                setattr(self, name, _check_vector(parameters, name, d))
            self._check_loaded()

    def _check_loaded(self) -> None:
        """Hook: reject loaded statistics that are inconsistent (a ParameterError)."""


class StandardScaler(moments.MergeableStatistics, _RunningScaler):
    """Running standard scaler: ``(x - mean) / std`` per feature, river-exact.

    Mean and (population) variance are running statistics of every record learned so far.
    A feature with zero variance maps to 0, as in river (``safe_div``). With
    ``with_std=False`` only the mean is removed.

    Parameters
    ----------
    with_std : bool
        Whether to divide by the running standard deviation.

    Attributes
    ----------
    n : int
        Records learned.
    mean, var : (n_features,) float64 or None
        Running mean and population variance; None before the first record.

    Examples
    --------
    >>> import numpy as np
    >>> scaler = StandardScaler()
    >>> scaler.learn_transform(np.array([[1.0, 5.0], [3.0, 5.0]]))  # river: learn, transform
    array([[0., 0.],
           [1., 0.]])
    >>> scaler.transform(np.array([[4.0, 6.0]]))
    array([[2., 0.]])
    """

    _STATS = ("mean", "var")
    _STATISTICS = moments.MOMENTS

    HYPERPARAMETERS = (
        Hyperparameter("with_std", bool, True, "whether to divide by the running standard "
                       "deviation (else only the mean is removed)"),
    )

    def __init__(self, with_std: bool = True):
        self.with_std = with_std
        check_stored(self)
        self.n = 0
        self.n_features: int | None = None
        self.mean: np.ndarray | None = None
        self.var: np.ndarray | None = None

    def _prefix(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance after each prefix ``X[:k+1]``: two ``(n_records, n_features)``
        (:func:`learning.compiled.moments_prefix`)."""
        compiled.compile_all()
        mean, var = np.empty_like(X), np.empty_like(X)
        compiled.moments_prefix(X, self.n, *self._statistics_before(), mean, var)
        return mean, var

    def _statistics_before(self) -> tuple[np.ndarray, np.ndarray]:
        """``(mean, var)`` as the compiled loops take them: C-contiguous float64, empty
        before the first record."""
        if self.n == 0:
            return _NO_STATISTICS, _NO_STATISTICS
        return (np.ascontiguousarray(self.mean, dtype=np.float64),
                np.ascontiguousarray(self.var, dtype=np.float64))

    def _scale(self, X: np.ndarray, mean: np.ndarray, var: np.ndarray) -> np.ndarray:
        Z = X - mean
        return _safe_div(Z, np.sqrt(var)) if self.with_std else Z

    def prequential_transform(self, X: np.ndarray, X_test: np.ndarray | None = None
                              ) -> tuple[np.ndarray, np.ndarray]:
        """Vectorized :meth:`Preprocessor.prequential_transform`: ``X_test[i]`` scaled with
        the statistics of records ``< i``, ``X[i]`` with those of records ``<= i``."""
        X = _as_batch(X, self.n_features)
        X_test = X if X_test is None else _as_batch(X_test, X.shape[1])
        if X.shape[0] == 0:
            return X_test.copy(), X.copy()
        compiled.compile_all()
        mean, var, Z_test, Z = (np.empty_like(X) for _ in range(4))
        compiled.standard_prequential(X, X_test, self.n, *self._statistics_before(),
                                      bool(self.with_std), mean, var, Z_test, Z)
        self._commit(X, mean, var)
        return Z_test, Z

    def transform(self, X: np.ndarray) -> np.ndarray:
        """Scale with the current statistics (all zeros before any record is learned
        when ``with_std``; unchanged when not)."""
        X = _as_batch(X, self.n_features)
        if self.n == 0:
            return np.zeros_like(X) if self.with_std else X.copy()
        return self._scale(X, self.mean, self.var)

    def _check_loaded(self) -> None:
        if np.any(self.var < 0):
            raise ParameterError("var", "var must be >= 0")

    # mergeable statistics (moments.MergeableStatistics): m2 = var · n
    def _get_statistics(self) -> tuple[np.ndarray, np.ndarray]:
        return self.mean, self.var * self.n

    def _set_statistics(self, n: int, mean: np.ndarray | None, m2: np.ndarray | None) -> None:
        self.n, self.mean, self.var = n, mean, None if m2 is None else m2 / n


class MinMaxScaler(moments.MergeableStatistics, _RunningScaler):
    """Running min-max scaler: ``(x - min) / (max - min)`` per feature, river-exact.

    A feature whose range is still 0 maps to 0 (as does everything before the first
    record is learned).

    Attributes
    ----------
    n : int
        Records learned.
    min, max : (n_features,) float64 or None
        Running extremes; None before the first record.

    Examples
    --------
    >>> import numpy as np
    >>> MinMaxScaler().learn_transform(np.array([[1.0], [3.0], [2.0]]))
    array([[0. ],
           [1. ],
           [0.5]])
    """

    _STATS = ("min", "max")
    _STATISTICS = moments.EXTREMES

    HYPERPARAMETERS = ()

    def __init__(self):
        self.n = 0
        self.n_features: int | None = None
        self.min: np.ndarray | None = None
        self.max: np.ndarray | None = None

    def _prefix(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lo = np.minimum.accumulate(X, axis=0)
        hi = np.maximum.accumulate(X, axis=0)
        if self.n:
            np.minimum(lo, self.min, out=lo)
            np.maximum(hi, self.max, out=hi)
        return lo, hi

    @staticmethod
    def _scale(X: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        return _safe_div(X - lo, hi - lo)

    def prequential_transform(self, X: np.ndarray, X_test: np.ndarray | None = None
                              ) -> tuple[np.ndarray, np.ndarray]:
        """Vectorized :meth:`Preprocessor.prequential_transform`."""
        X = _as_batch(X, self.n_features)
        X_test = X if X_test is None else _as_batch(X_test, X.shape[1])
        if X.shape[0] == 0:
            return X_test.copy(), X.copy()
        lo, hi = self._prefix(X)
        before_lo, before_hi = np.empty_like(lo), np.empty_like(hi)
        before_lo[1:], before_hi[1:] = lo[:-1], hi[:-1]
        if self.n:
            before_lo[0], before_hi[0] = self.min, self.max
        else:  # no extremes yet: range 0, everything maps to 0
            before_lo[0], before_hi[0] = X_test[0], X_test[0]
        self._commit(X, lo, hi)
        return self._scale(X_test, before_lo, before_hi), self._scale(X, lo, hi)

    def transform(self, X: np.ndarray) -> np.ndarray:
        """Scale with the current extremes (all zeros before any record is learned)."""
        X = _as_batch(X, self.n_features)
        if self.n == 0:
            return np.zeros_like(X)
        return self._scale(X, self.min, self.max)

    def _check_loaded(self) -> None:
        if np.any(self.max < self.min):
            raise ParameterError("max", "max must be >= min")

    # mergeable statistics (moments.MergeableStatistics)
    def _get_statistics(self) -> tuple[np.ndarray, np.ndarray]:
        return self.min, self.max

    def _set_statistics(self, n: int, lo: np.ndarray | None, hi: np.ndarray | None) -> None:
        self.n, self.min, self.max = n, lo, hi
