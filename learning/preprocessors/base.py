"""The preprocessor contract (papers/002_9b954bd89ad87406.txt §3.3.1).

A preprocessor keeps running statistics of the records it learns from and transforms
records with them. Learning follows river's pipeline semantics: a record is learned first
and then transformed with statistics that include it; prediction transforms without
learning.
"""

from __future__ import annotations

import abc
import inspect
from typing import Any

import numpy as np

__all__ = ["Preprocessor"]


class Preprocessor(abc.ABC):
    """Running-statistics transformer over ``(n_records, n_features)`` float64 batches.

    Subclasses store constructor arguments unchanged, implement :meth:`learn_transform`,
    :meth:`transform` and the JSON state hooks ``_parameters_json`` / ``_load_parameters``,
    and should override :meth:`prequential_transform` with a vectorized version.
    """

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

        Parameters
        ----------
        X : (n_records, n_features) float64

        Returns
        -------
        (n_records, n_out) float64
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

    # --- hyperparameters, cloning, JSON (as for learners) -------------------------------

    def hyperparameters(self) -> dict:
        """The constructor arguments by name, as stored (JSON-safe)."""
        names = [p for p in inspect.signature(type(self).__init__).parameters if p != "self"]
        return {name: getattr(self, name) for name in names}

    def update_hyperparameters(self, **kw: Any) -> None:
        """Change hyperparameters at run time; nothing changes if any value is rejected.

        Raises
        ------
        learning.errors.HyperparameterError (a ValueError)
            Naming the parameter.
        """
        from learning.errors import check_hyperparameters

        current = self.hyperparameters()
        check_hyperparameters(type(self).__name__, kw, tuple(current))
        type(self)(**{**current, **kw})
        for name, value in kw.items():
            setattr(self, name, value)

    def clone(self) -> "Preprocessor":
        """A fresh preprocessor, with no statistics, with the same hyperparameters."""
        return type(self)(**self.hyperparameters())

    def to_json(self) -> dict:
        """``{"name", "hyperParameters", "parameters"}`` (papers/002 §3.4), JSON-safe."""
        return {"name": type(self).__name__, "hyperParameters": self.hyperparameters(),
                "parameters": self._parameters_json()}

    @classmethod
    def from_json(cls, d: dict) -> "Preprocessor":
        """Rebuild from :meth:`to_json` output or a request's preprocessor spec.

        Raises
        ------
        learning.errors.HyperparameterError
            For a rejected hyperparameter or parameter.
        """
        from learning.errors import check_hyperparameters

        hyper = {k: v for k, v in (d.get("hyperParameters") or {}).items() if v is not None}
        known = tuple(p for p in inspect.signature(cls.__init__).parameters if p != "self")
        check_hyperparameters(cls.__name__, hyper, known)
        pre = cls(**hyper)
        pre._load_parameters(d.get("parameters") or {})
        return pre

    def _parameters_json(self) -> dict:
        raise NotImplementedError(f"{type(self).__name__} cannot be written as JSON")

    def _load_parameters(self, parameters: dict) -> None:
        if parameters:
            raise NotImplementedError(f"{type(self).__name__} takes no parameters")

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.hyperparameters().items())
        return f"{type(self).__name__}({args})"
