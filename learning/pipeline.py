"""A pipeline: preprocessors chained before one learner (papers/002 §3.3).

Training batches go through :meth:`Pipeline.test_then_train`, which predicts each record
before learning it (prequential evaluation) with exactly the semantics of river's
``predict_one`` then ``learn_one`` loop, but on numpy mini-batches. A preprocessor of the
target (:class:`learning.preprocessors.TargetStandardScaler`) scales a regressor's targets
instead of the features and maps its predictions back.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from learning.learners.base import Learner, as_labels, as_matrix
from learning.learners.regressor import as_targets
from learning.preprocessors.base import Preprocessor

__all__ = ["Pipeline"]


class Pipeline:
    """Preprocessors, in order, then a learner.

    Parameters
    ----------
    preprocessors : list of Preprocessor
        Applied in order; may be empty.
    learner : Learner

    Raises
    ------
    TypeError
        If an element is not a :class:`Preprocessor` or ``learner`` not a :class:`Learner`.

    Examples
    --------
    Digits, streamed once in file order in mini-batches of 64, prequential accuracy:

    >>> from sklearn.datasets import load_digits
    >>> from learning import PAClassifier, StandardScaler
    >>> X, y = load_digits(return_X_y=True)
    >>> pipe = Pipeline([StandardScaler()], PAClassifier(C=0.01, mode=1))
    >>> hits = sum(pipe.test_then_train(X[i:i + 64], y[i:i + 64])[1]
    ...            for i in range(0, len(X), 64))
    >>> print(f"{hits / len(X):.3f}")
    0.935
    """

    def __init__(self, preprocessors: list[Preprocessor], learner: Learner):
        self.preprocessors = preprocessors
        self.learner = learner
        for i, p in enumerate(preprocessors):
            if not isinstance(p, Preprocessor):
                raise TypeError(f"preprocessors[{i}] must be a Preprocessor, got {p!r}")
        if not isinstance(learner, Learner):
            raise TypeError(f"learner must be a Learner, got {learner!r}")

    @property
    def target_scaler(self) -> Preprocessor | None:
        """The preprocessor of the target (``targets``: a
        :class:`~learning.preprocessors.TargetStandardScaler`), or None: the learner fits
        the targets it scales and its predictions are mapped back; the features pass it
        by."""
        for p in self.preprocessors:
            if p.targets:
                return p
        return None

    def _transform(self, X: Any) -> np.ndarray:
        X = as_matrix(X)
        for p in self.preprocessors:
            if not p.targets:
                X = p.transform(X)
        return X

    def predict(self, X: np.ndarray) -> list:
        """Predict without learning (preprocessor statistics unchanged).

        Parameters
        ----------
        X : (n_records, n_features) float64

        Returns
        -------
        list of n_records labels (None while the learner has seen no label); a
        regressor's behind a target scaler mapped back to the target's units.
        """
        predictions = self.learner.predict(self._transform(X))
        target = self.target_scaler
        return predictions if target is None else target.inverse(predictions).tolist()

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Class probabilities without learning, where the learner has them
        (``learner.has_proba``; :meth:`learning.learners.Learner.predict_proba`).

        Parameters
        ----------
        X : (n_records, n_features) float64

        Returns
        -------
        (n_records, len(learner.classes)) float64, over ``learner.classes`` in canonical
        order.

        Raises
        ------
        NotImplementedError
            For a learner without probabilities (PA, SVM, ridge, regressors, k-means).
        """
        return self.learner.predict_proba(self._transform(X))

    def fit(self, X: np.ndarray, y: Sequence, *, learn_preprocessors: bool = True) -> None:
        """Learn a mini-batch: each preprocessor learns and transforms, then the learner fits.

        Parameters
        ----------
        X : (n_records, n_features) float64
        y : sequence of n_records labels
        learn_preprocessors : bool
            False: the preprocessors only transform, as they are (records they learned
            already: another epoch over a window, papers/003 §II.A); the learner fits.
        """
        X = as_matrix(X)
        for p in self.preprocessors:
            if p.targets:
                t = as_targets(y)
                y = p.learn_targets(t) if learn_preprocessors else p.scale_targets(t)
            else:
                X = p.learn_transform(X) if learn_preprocessors else p.transform(X)
        self.learner.fit(X, y)

    def test_then_train(self, X: np.ndarray, y: Sequence, *, with_proba: bool = False
                        ) -> tuple[list, int, float] | tuple[list, int, float, Any]:
        """Predict every record before it is learned, then learn it (prequential).

        Record ``i`` is predicted by the preprocessors and learner as they are after records
        ``< i`` of this batch, exactly as river's per-record ``predict_one`` /
        ``learn_one`` loop (river does not learn during prediction).

        Parameters
        ----------
        X : (n_records, n_features) float64
        y : sequence of n_records labels
        with_proba : bool
            Also return the class probabilities the predictions were made with.

        Returns
        -------
        predictions : list of n_records labels
        n_correct : int
            How many predictions equal their label (type-aware: ``True`` is not ``1``);
            0 for regressors and clusterers (``learner.task`` not ``"classification"``).
        loss_sum : float
            Sum of the learner's per-record training losses (hinge for PA, ``|y − ŷ|``
            for a regressor: behind a target scaler in the target's units).
        proba : (n_records, len(learner.classes)) float64 or None, only with ``with_proba``
            Over ``learner.classes`` as they are after the batch, NaN for a class the
            learner did not know yet when it predicted the record (see
            :meth:`learning.learners.Learner.test_then_train`); None for learners without
            probabilities (``learner.has_proba`` False: PA, SVM, ridge, regressors,
            k-means).

        The rows the learner left out of its step (``learner.refused_rows``: a network's
        records whose loss is not finite in float32, PA's and ridge's whose step would
        make the model inf or NaN) count in neither sum; their predictions are returned
        and mean nothing.
        """
        X = as_matrix(X)
        labels = as_labels(y) if self.learner.supervised else list(y)
        X_test = X
        target = None
        for p in self.preprocessors:
            if p.targets:
                target = p
            else:
                X_test, X = p.prequential_transform(X, X_test)
        fitted = labels
        if target is not None:  # checked before the statistics learn them
            truth = as_targets(labels)
            fitted, mean_before, std_before = target.prequential_targets(truth)
        proba = None
        if with_proba and self.learner.has_proba:
            predictions, loss_sum, proba = self.learner.test_then_train(
                X, fitted, X_test=None if X_test is X else X_test, with_proba=True)
        else:
            predictions, loss_sum = self.learner.test_then_train(
                X, fitted, X_test=None if X_test is X else X_test)
        refused = self.learner.refused_rows  # left out of the step: out of the sums too
        if target is not None:  # back to the target's units, the loss (|y − ŷ|) too
            mapped = mean_before + std_before * np.asarray(predictions, dtype=np.float64)
            predictions = mapped.tolist()
            errors = np.abs(truth - mapped)
            if refused:
                errors[list(refused)] = 0.0
            loss_sum = float(errors.sum())
        if self.learner.task != "classification":
            n_correct = 0  # accuracy means nothing here
        else:
            # label_key(p) == label_key(t), without building the keys: labels are JSON
            # scalars, whose type names are their types
            n_correct = sum(1 for p, t in zip(predictions, labels)
                            if p == t and type(p) is type(t))
            if refused:
                n_correct -= sum(1 for i in refused if predictions[i] == labels[i]
                                 and type(predictions[i]) is type(labels[i]))
        if with_proba:
            return predictions, n_correct, float(loss_sum), proba
        return predictions, n_correct, float(loss_sum)

    def loss(self, X: np.ndarray, y: Sequence) -> float:
        """Sum of the learner's losses on the transformed batch (nothing learned); behind
        a target scaler ``Σ |y − ŷ|`` in the target's units."""
        if self.target_scaler is not None:
            return float(np.abs(as_targets(y) - np.asarray(self.predict(X))).sum())
        return self.learner.loss(self._transform(X), y)

    def score(self, X: np.ndarray, y: Sequence) -> float:
        """The learner's score on the transformed batch (nothing learned): accuracy in
        [0, 1], a regressor's negative MAE (in the target's units); NaN if empty."""
        if self.target_scaler is not None:
            return -self.loss(X, y) / len(y) if len(y) else float("nan")
        return self.learner.score(self._transform(X), y)

    def clone(self) -> "Pipeline":
        """Fresh preprocessors and learner with the same hyperparameters."""
        return Pipeline([p.clone() for p in self.preprocessors], self.learner.clone())

    def record_width(self) -> int | None:
        """The width of the records this pipeline takes: its learner's, unless a
        preprocessor changes the width (feature selection, polynomial features), then the
        input width the first such one has; None while unknown."""
        for p in self.preprocessors:
            if type(p).output_width is not Preprocessor.output_width:
                return getattr(p, "n_features", None)
        layout = self.learner.layout() if hasattr(self.learner, "layout") else {}
        return layout.get("n_features")

    def to_json(self) -> dict:
        """``{"preProcessors": [...], "learner": {...}}`` with all state, JSON-safe; as
        in a Create request, the learner's ``parameters.n_features`` is the width of a
        record (:meth:`record_width`), not of what the preprocessors make of it.

        :func:`learning.registry.make_pipeline` rebuilds the pipeline from it (names are
        resolved there, so that this module knows no concrete class)::

            make_pipeline(d["preProcessors"], d["learner"])
        """
        learner = self.learner.to_json()
        params = learner.get("parameters") or {}
        width = self.record_width() if params.get("n_features") is not None else None
        if width is not None:
            learner["parameters"] = {**params, "n_features": width}
        return {"preProcessors": [p.to_json() for p in self.preprocessors], "learner": learner}

    def __repr__(self) -> str:
        return f"Pipeline({self.preprocessors!r}, {self.learner!r})"
