"""The preprocessor contract (papers/002_9b954bd89ad87406.txt §3.3.1).

A preprocessor keeps running statistics of the records it learns from and transforms
records with them. Learning follows river's pipeline semantics: a record is learned first
and then transformed with statistics that include it; prediction transforms without
learning.
"""

from __future__ import annotations

import abc
from typing import ClassVar

import numpy as np

from learning.component import Component
from learning.errors import HyperparameterError, ParameterError

__all__ = ["Preprocessor", "StatelessPreprocessor"]


class Preprocessor(Component, abc.ABC):
    """Running-statistics transformer over ``(n_records, n_features)`` float64 batches.

    Subclasses store constructor arguments unchanged (hyperparameters, :meth:`clone` and
    JSON then come from :class:`learning.component.Component`), declare them in a
    ``HYPERPARAMETERS`` tuple and check them with
    :func:`learning.hyperparameters.check_stored` (:mod:`learning.hyperparameters`; a class
    without the tuple has undeclared hyperparameters, checked by itself alone), implement
    :meth:`learn_transform`, :meth:`transform` and the JSON state hooks
    ``_parameters_json`` / ``_load_parameters``, and should override
    :meth:`prequential_transform` with a vectorized version; one that changes the record
    width overrides :meth:`output_width` (the learner is built for it). Those with running
    statistics also override :meth:`statistics`, :meth:`load_statistics`,
    :meth:`merge_statistics` and :meth:`subtract_statistics` (see
    :mod:`learning.preprocessors.moments`), so that parameter-server hubs can merge the
    statistics of several instances exactly.

    References
    ----------
    Chan, T. F., Golub, G. H., LeVeque, R. J. (1983) Algorithms for computing the sample
    variance: analysis and recommendations. The American Statistician 37(3):242–247.
    """

    #: True for a preprocessor of a regressor's target (it has ``prequential_targets``,
    #: ``learn_targets``, ``scale_targets`` and ``inverse``, and passes the features
    #: through: :class:`learning.preprocessors.TargetStandardScaler`)
    targets: ClassVar[bool] = False
    #: True for a preprocessor that fills missing values (a feature ``null`` in a record,
    #: NaN in its input): a pipeline whose first preprocessor it is takes records with
    #: them, and it must come first (a Create that places it later is refused:
    #: :func:`learning.registry.check_preprocessor_order`):
    #: :class:`learning.preprocessors.StatImputer`
    fills_missing: ClassVar[bool] = False

    def output_width(self, n_features: int) -> int:
        """The width of what this preprocessor makes of records of ``n_features``
        features (this one keeps the width; feature selection and polynomial features do
        not). Computed from the hyperparameters alone, nothing allocated.

        Raises
        ------
        ValueError
            When records of that width cannot be transformed (an index out of range).
        """
        return n_features

    @abc.abstractmethod
    def learn_transform(self, X: np.ndarray) -> np.ndarray:
        """Learn the records in order; record ``i`` is transformed with the statistics of
        records ``<= i`` (river: ``learn_one`` then ``transform_one``, per record).

        Parameters
        ----------
        X : (n_records, n_features) float64

        Returns
        -------
        (n_records, n_out) float64

        Raises
        ------
        ValueError
            If the width differs from the one learned before.
        """

    @abc.abstractmethod
    def transform(self, X: np.ndarray) -> np.ndarray:
        """Transform with the current statistics, learning nothing (for prediction).

        Shapes as for :meth:`learn_transform`: ``(n_records, n_features)`` float64 in,
        ``(n_records, n_out)`` float64 out.
        """

    def prequential_transform(self, X: np.ndarray,
                              X_test: np.ndarray | None = None
                              ) -> tuple[np.ndarray, np.ndarray]:
        """Both views of a training batch for test-then-train evaluation.

        Parameters
        ----------
        X : (n_records, n_features) float64
            Records to learn, in order.
        X_test : (n_records, n_features) float64 or None
            The same records as the prediction path sees them (they differ from ``X``
            after an earlier preprocessor); None means ``X``.

        Returns
        -------
        X_test_out : (n_records, n_out) float64
            ``X_test[i]`` transformed with the statistics of records ``< i`` (what
            river's ``predict_one`` would see).
        X_out : (n_records, n_out) float64
            ``X[i]`` transformed with the statistics of records ``<= i``
            (:meth:`learn_transform`).

        Notes
        -----
        This default loops over records; subclasses vectorize it.
        """
        X = np.ascontiguousarray(X, dtype=np.float64)
        X_test = X if X_test is None else np.ascontiguousarray(X_test, dtype=np.float64)
        tested, learned = [], []
        for i in range(X.shape[0]):
            tested.append(self.transform(X_test[i:i + 1]))
            learned.append(self.learn_transform(X[i:i + 1]))
        if not learned:
            empty = self.transform(X[:0])
            return empty, empty
        return np.vstack(tested), np.vstack(learned)

    # Mergeable statistics (papers/002 §3.3.1): preprocessors with running statistics
    # override all four; these defaults describe a preprocessor that keeps none.

    def statistics(self) -> dict | None:
        """The sufficient statistics of the records learned, as a new dict.

        Plain ints and new 1-D float64 arrays (never views of the internal state), e.g.
        ``{"n": int, "mean": (d,), "m2": (d,)}``; ``{"n": 0}`` before any record. Two
        instances' statistics combine with :meth:`merge_statistics`.

        Returns
        -------
        dict or None
            None: this preprocessor keeps no statistics (the default).
        """
        return None

    def load_statistics(self, s: dict | None) -> None:
        """Replace the running statistics with ``s`` (from :meth:`statistics`, or merged).

        None or ``{"n": 0}`` returns to the no-record state; a width already known is
        kept and checked against.

        Parameters
        ----------
        s : dict or None

        Raises
        ------
        ValueError
            If ``s`` is invalid: here (no statistics kept), if it holds any record.
        """
        if s is not None and (not isinstance(s, dict) or s.get("n") != 0):
            raise ValueError(f"{type(self).__name__} keeps no statistics; load_statistics "
                             f"takes None or {{'n': 0}}, got {s!r}")

    @classmethod
    def merge_statistics(cls, a: dict | None, b: dict | None) -> dict | None:
        """The statistics of the union of two disjoint record sets (Chan et al. 1983).

        Parameters
        ----------
        a, b : dict or None
            :meth:`statistics` of two instances; None or ``{"n": 0}`` for no records.

        Returns
        -------
        dict or None
            None for a preprocessor without statistics (the default).

        Raises
        ------
        ValueError
            If either side is invalid or the widths differ.
        """
        return None

    @classmethod
    def subtract_statistics(cls, total: dict | None, part: dict | None) -> dict | None:
        """The statistics of the records in ``total`` that are not in ``part``
        (``part ⊆ total``), the inverse of :meth:`merge_statistics`.

        Parameters
        ----------
        total, part : dict or None
            :meth:`statistics`; None or ``{"n": 0}`` for no records.

        Returns
        -------
        dict or None
            None for a preprocessor without statistics (the default).

        Raises
        ------
        ValueError
            If either side is invalid, the widths differ or ``part`` has more records
            than ``total``.
        """
        return None


class StatelessPreprocessor(Preprocessor):
    """What preprocessors without statistics share (feature selection, polynomial
    features): one function of the record, ``_apply`` (subclass), serves learning,
    transforming and both views of a training batch; nothing is learned but the input width
    ``n_features``, fixed by the first batch, which is all the JSON state; and no
    hyperparameter may change while the pipeline runs (each changes the record width).

    Subclasses implement ``_apply`` and ``_load_width`` (take a loaded width).
    """

    @abc.abstractmethod
    def _apply(self, X: np.ndarray) -> np.ndarray:
        """``X`` transformed; the first batch fixes the width (ValueError if it changes)."""

    @abc.abstractmethod
    def _load_width(self, d: int) -> None:
        """Take the loaded width ``d`` (an int >= 1), or raise a ParameterError."""

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

    def learn_transform(self, X: np.ndarray) -> np.ndarray:
        """The transformed records (the first batch fixes the width).

        Raises
        ------
        ValueError
            If the width changes (or does not fit the hyperparameters).
        """
        return self._apply(X)

    def transform(self, X: np.ndarray) -> np.ndarray:
        """As :meth:`learn_transform` (nothing is learned)."""
        return self._apply(X)

    def prequential_transform(self, X: np.ndarray, X_test: np.ndarray | None = None
                              ) -> tuple[np.ndarray, np.ndarray]:
        """Both views transformed alike (there are no statistics)."""
        out = self._apply(X)
        return (out if X_test is None else self._apply(X_test)), out

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
            raise ParameterError(name, f"unknown parameter {name!r} for {type(self).__name__}; "
                                 "expected n_features")
        d = parameters.get("n_features")
        if d is None:
            return
        if isinstance(d, bool) or not isinstance(d, int) or d < 1:
            raise ParameterError("n_features", f"n_features must be an integer >= 1, got {d!r}")
        self._load_width(d)
