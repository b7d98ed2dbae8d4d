"""A running standard scaler of a regressor's target (river's
``preprocessing.TargetStandardScaler``).

A regressor whose output starts near 0 learns a target far from 0, or of a large spread,
slowly: an MLP on scikit-learn's diabetes (target 25–346) predicted worse than the target's
mean for the whole stream. Scaled, every regressor learns ``(y − mean) / std``, a target
of mean 0 and variance 1, whatever the units, and its predictions are mapped back.

The statistics (count, mean, M2 of the target) are running moments like a
:class:`~learning.preprocessors.StandardScaler`'s, so the parameter server merges them
exactly with the features' (papers/002 §3.3.1; Chan et al.'s parallel update): every spoke
and the global model scale the target alike.

References
----------
Chan, T. F., Golub, G. H., LeVeque, R. J. (1983) Algorithms for computing the sample
variance: analysis and recommendations. The American Statistician 37(3):242–247.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from learning.preprocessors.scalers import StandardScaler, _as_batch, _safe_div

__all__ = ["TargetStandardScaler"]


class TargetStandardScaler(StandardScaler):
    """Running standard scaler of the target: the learner fits ``(y − mean) / std`` and
    its predictions come back as ``mean + std · ŷ``; river's
    ``preprocessing.TargetStandardScaler`` per record.

    Record ``i`` of a mini-batch is learned with the statistics of the targets ``<= i``
    (river: the statistics learn ``y``, then scale it) and predicted with those of the
    targets ``< i``; ``std`` is the sample standard deviation (``ddof`` 1, river's
    ``stats.Var``), 0 until two targets differ, and a target of zero spread scales to 0
    (river's ``safe_div``). Before any target a prediction maps to ``0 + 0 · ŷ = 0``.

    Features pass through unchanged (:meth:`transform`, :meth:`learn_transform`), so the
    preprocessor may sit anywhere in ``preProcessors``; :class:`learning.Pipeline` applies
    it to the targets (:attr:`targets`). A pipeline takes one, before a regressor only
    (:func:`learning.registry.check_preprocessor_order`).

    Parameters
    ----------
    with_std : bool
        Whether to divide by the running standard deviation (else only the mean is
        removed).

    Attributes
    ----------
    n : int
        Targets learned.
    mean, var : (1,) float64 or None
        Running mean and population variance of the targets (what merges with other
        instances); None before the first.

    Examples
    --------
    >>> import numpy as np
    >>> scaler = TargetStandardScaler()
    >>> scaler.learn_targets(np.array([100.0, 110.0, 120.0]))
    array([0.        , 0.70710678, 1.        ])
    >>> scaler.inverse(np.array([0.0, 1.0]))
    array([110., 120.])
    """

    #: transforms the target, not the features (:class:`learning.Pipeline`)
    targets: ClassVar[bool] = True

    # -- the features pass through ----------------------------------------------------
    def learn_transform(self, X: np.ndarray) -> np.ndarray:
        """``X`` unchanged (a copy): this preprocessor learns from targets only."""
        return np.array(X, dtype=np.float64)

    def transform(self, X: np.ndarray) -> np.ndarray:
        """``X`` unchanged (a copy)."""
        return np.array(X, dtype=np.float64)

    def prequential_transform(self, X: np.ndarray, X_test: np.ndarray | None = None
                              ) -> tuple[np.ndarray, np.ndarray]:
        """Both views unchanged (copies)."""
        X = np.array(X, dtype=np.float64)
        return (X.copy() if X_test is None else np.array(X_test, dtype=np.float64)), X

    # -- the targets ------------------------------------------------------------------
    def _std(self, count: np.ndarray, var: np.ndarray) -> np.ndarray:
        """The sample standard deviation from ``count`` targets of population variance
        ``var`` (arrays of one shape); 0 for fewer than two, 1 without ``with_std``."""
        if not self.with_std:
            return np.ones_like(var)
        sample = np.where(count > 1, var * count / np.maximum(count - 1, 1), 0.0)
        return np.sqrt(np.maximum(sample, 0.0))

    def _current(self) -> tuple[float, float]:
        """``(mean, std)`` of the targets learned so far (``(0, 0)`` before any)."""
        if self.n == 0:
            return 0.0, 0.0 if self.with_std else 1.0
        std = self._std(np.array([self.n], dtype=np.float64), self.var)
        return float(self.mean[0]), float(std[0])

    def learn_targets(self, y: np.ndarray) -> np.ndarray:
        """Learn the targets in order; target ``i`` is scaled with the statistics of
        targets ``<= i``.

        Parameters
        ----------
        y : (n_records,) float64

        Returns
        -------
        (n_records,) float64
        """
        scaled, _, _ = self.prequential_targets(y)
        return scaled

    def prequential_targets(self, y: np.ndarray
                            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Learn the targets in order and say how to map back the predictions made
        before each was learned.

        Parameters
        ----------
        y : (n_records,) float64

        Returns
        -------
        scaled : (n_records,) float64
            Target ``i`` scaled with the statistics of targets ``<= i`` (what the learner
            fits).
        mean_before, std_before : (n_records,) float64
            The statistics of targets ``< i``: a prediction ``ŷ_i`` of record ``i`` made
            before it was learned maps back to ``mean_before[i] + std_before[i] · ŷ_i``.
        """
        Y = _as_batch(np.asarray(y, dtype=np.float64).reshape(-1, 1), self.n_features)
        n = Y.shape[0]
        if n == 0:
            return np.zeros(0), np.zeros(0), np.zeros(0)
        first_mean, first_std = self._current()
        counts = self.n + np.arange(1, n + 1, dtype=np.float64)
        mean, var = self._prefix(Y)
        self._commit(Y, mean, var)
        mean, var = mean[:, 0], var[:, 0]
        std = self._std(counts, var)
        scaled = Y[:, 0] - mean
        if self.with_std:
            scaled = _safe_div(scaled, std)
        mean_before = np.concatenate([[first_mean], mean[:-1]])
        std_before = np.concatenate([[first_std], std[:-1]])
        return scaled, mean_before, std_before

    def scale_targets(self, y: np.ndarray) -> np.ndarray:
        """Targets ``(n_records,)`` float64 scaled with the current statistics, learning
        nothing (another pass over records learned before)."""
        mean, std = self._current()
        scaled = np.asarray(y, dtype=np.float64) - mean
        return _safe_div(scaled, np.full_like(scaled, std)) if self.with_std else scaled

    def inverse(self, predictions: np.ndarray) -> np.ndarray:
        """Predictions ``(n_records,)`` float64 in the scaled units mapped back with the
        current statistics: ``mean + std · ŷ``."""
        mean, std = self._current()
        return mean + std * np.asarray(predictions, dtype=np.float64)
