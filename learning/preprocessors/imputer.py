"""Missing values: a running mean imputer (papers/002 §3.3.1, a preprocessor with mergeable
statistics).

A record's missing feature is a JSON ``null`` (NaN in a float64 batch). The imputer
replaces it with the running mean of that feature's values seen so far, 0 before any, as
river's ``preprocessing.StatImputer`` with ``stats.Mean`` per feature: ``learn_one``
updates each feature's mean with the values present, ``transform_one`` fills the missing
ones. Its statistics are per feature, since each feature has its own count of values
present: ``{"n": records, "count": (d,), "mean": (d,)}``, merged exactly at the hubs as
the scalers' moments are (:mod:`learning.preprocessors.moments`).

It comes first in a pipeline's ``preProcessors`` (a Create that places it later is refused,
``unsupported_pairing``): a spoke then takes records with ``null`` features
(:attr:`learning.protocols.base.PipelineSpoke.missing_ok`), and no other preprocessor or
learner ever sees a missing value.

References
----------
river ``preprocessing.StatImputer`` (river 0.23), with ``stats.Mean`` per feature.
"""

from __future__ import annotations

import numpy as np

from learning.hyperparameters import check_stored
from learning.preprocessors import moments
from learning.preprocessors.base import Preprocessor
from learning.preprocessors.scalers import _as_batch, _check_count

__all__ = ["StatImputer"]


class StatImputer(moments.MergeableStatistics, Preprocessor):
    """Running mean imputer: a missing feature (NaN, from a JSON ``null``) becomes the mean
    of that feature's values present in the records learned before, 0 before any; present
    values pass unchanged.

    Attributes
    ----------
    n : int
        Records learned.
    count : (n_features,) float64 or None
        Per feature, the records learned in which it was present (whole numbers).
    mean : (n_features,) float64 or None
        Per feature, the mean of its present values (0 where ``count`` is 0); None before
        the first record.

    Examples
    --------
    >>> import numpy as np
    >>> imputer = StatImputer()
    >>> imputer.learn_transform(np.array([[1.0, np.nan], [np.nan, 4.0], [3.0, np.nan]]))
    array([[1., 0.],
           [1., 4.],
           [3., 4.]])
    >>> imputer.transform(np.array([[np.nan, np.nan]]))
    array([[2., 4.]])
    """

    _STATISTICS = moments.COUNTED_MEANS
    HYPERPARAMETERS = ()
    fills_missing = True

    def __init__(self):
        check_stored(self)
        self.n = 0
        self.n_features: int | None = None
        self.count: np.ndarray | None = None
        self.mean: np.ndarray | None = None

    def _fill(self, X: np.ndarray, count: np.ndarray, total: np.ndarray) -> np.ndarray:
        """``X`` with each missing entry replaced by ``total / count`` of its row (0 where
        the count is 0); ``count``, ``total`` broadcast against ``X``."""
        missing = np.isnan(X)
        if not missing.any():
            return X.copy()
        means = np.zeros(np.broadcast_shapes(X.shape, count.shape))
        np.divide(total, count, out=means, where=count > 0)
        return np.where(missing, means, X)

    def _before(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        """Per feature, the count and the sum of the values learned so far."""
        if self.n == 0:
            return np.zeros(d), np.zeros(d)
        return self.count, self.mean * self.count

    def learn_transform(self, X: np.ndarray) -> np.ndarray:
        """Learn the records in order; record ``i``'s missing features are filled with
        the means of records ``< i`` (those of records ``<= i`` are the same: a missing
        value adds nothing).

        Parameters
        ----------
        X : (n_records, n_features) float64, NaN where a value is missing

        Returns
        -------
        (n_records, n_features) float64, no NaN

        Raises
        ------
        ValueError
            If the width differs from the one learned before.
        """
        return self.prequential_transform(X)[1]

    def prequential_transform(self, X: np.ndarray, X_test: np.ndarray | None = None
                              ) -> tuple[np.ndarray, np.ndarray]:
        """Both views of a training batch (:meth:`Preprocessor.prequential_transform`),
        vectorized with cumulative sums: a missing feature of record ``i`` gets the mean of
        the values present in the records before it, in either view."""
        X = _as_batch(X, self.n_features)
        X_test = X if X_test is None else _as_batch(X_test, X.shape[1])
        if X.shape[0] == 0:
            return X_test.copy(), X.copy()
        count0, total0 = self._before(X.shape[1])
        present = ~np.isnan(X)
        values = np.where(present, X, 0.0)
        counts = count0 + np.cumsum(present, axis=0)  # through record i
        totals = total0 + np.cumsum(values, axis=0)
        before_c = counts - present  # before record i
        before_t = totals - values
        out = self._fill(X, before_c, before_t)
        out_test = out if X_test is X else self._fill(X_test, before_c, before_t)
        self.n += X.shape[0]
        self.n_features = X.shape[1]
        self.count = counts[-1].astype(np.float64)
        self.mean = np.zeros(X.shape[1])
        np.divide(totals[-1], self.count, out=self.mean, where=self.count > 0)
        return out_test, out

    def transform(self, X: np.ndarray) -> np.ndarray:
        """Fill missing features with the current means (0 before any value), learning
        nothing."""
        X = _as_batch(X, self.n_features)
        return self._fill(X, *self._before(X.shape[1]))

    def _parameters_json(self) -> dict:
        return {"n": self.n, "n_features": self.n_features,
                "count": None if self.count is None else self.count.tolist(),
                "mean": None if self.mean is None else self.mean.tolist()}

    def _load_parameters(self, parameters: dict) -> None:
        """Load ``{"n", "n_features", "count", "mean"}``.

        Raises
        ------
        learning.errors.ParameterError
            Naming the key rejected: a count below 0, above ``n`` or not whole.
        """
        n, d = _check_count(parameters)
        self.n, self.n_features = n, d
        if n:
            s = moments.check_counted_means(
                {"n": n, "count": parameters.get("count"), "mean": parameters.get("mean")}, d)
            self.count, self.mean = s["count"], s["mean"]

    # mergeable statistics (moments.MergeableStatistics)
    def _get_statistics(self) -> tuple[np.ndarray, np.ndarray]:
        return self.count, self.mean

    def _set_statistics(self, n: int, count: np.ndarray | None, mean: np.ndarray | None
                        ) -> None:
        self.n, self.count, self.mean = n, count, mean
