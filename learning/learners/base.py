"""The learner contract: what protocols, pipelines and spokes may ask of any learner.

Protocols see only the flat parameter vector (:meth:`Learner.get_params` /
:meth:`Learner.set_params`) plus a JSON-safe :meth:`Learner.layout` saying what the vector's
entries mean, so that vectors from nodes which have seen different label sets can be
aligned (:meth:`Learner.project`, :meth:`Learner.grow`). See DESIGN.md, "Contracts", and
papers/002_9b954bd89ad87406.txt §3.3.3 (the ``Learn`` trait).
"""

from __future__ import annotations

import abc
import math
from typing import Any, ClassVar, Sequence

import numpy as np

from learning.component import Component

__all__ = ["Learner", "label_key", "as_labels", "as_matrix", "as_test_matrix", "widen_proba",
           "declared_width", "NONFINITE_STEP"]

#: :attr:`Learner.refused_rows`' reason where a record's step would leave a float64 linear
#: learner's model inf or NaN (PA's ``l / ‖x‖²`` on a record of tiny norm in mode 0, a
#: target near float64's limit, ridge's ``x xᵀ`` of a feature beyond about 1e154): the
#: record is left out, the model kept.
NONFINITE_STEP = ("its step would make the model's weights inf or NaN (a record of tiny "
                  "norm under PA's uncapped step, a target near float64's limit, or a "
                  "feature whose square overflows)")
#: JSON scalar types a label may have. ``bool`` is its own type: ``True`` is not ``1``.
LABEL_TYPES = (bool, int, float, str)


def label_key(label: Any) -> tuple:
    """Canonical sort / identity key of a label: ``(type name, label)``.

    ``True`` and ``1`` (or ``1`` and ``1.0``) are different labels and never share a key,
    whereas Python's ``==`` and ``hash`` would conflate them.
    """
    return (type(label).__name__, label)


def as_labels(y: Any) -> list:
    """Labels as a list of native Python JSON scalars (numpy scalars converted).

    Parameters
    ----------
    y : sequence or (n_records,) ndarray of bool, int, float or str

    Raises
    ------
    ValueError
        If a label is None, NaN or not a JSON scalar.
    """
    labels = y.tolist() if isinstance(y, np.ndarray) else list(y)
    for i, v in enumerate(labels):  # one pass: this runs on every mini-batch
        t = type(v)
        if t is float:
            if v != v:
                raise ValueError(f"labels must be bool, int, float or str, got {v!r}")
        elif t not in LABEL_TYPES:
            if isinstance(v, np.generic):
                labels[i] = v = v.item()
                if type(v) in LABEL_TYPES and v == v:
                    continue
            raise ValueError(f"labels must be bool, int, float or str, got {v!r}")
    return labels


def as_matrix(X: Any, n_features: int | None = None) -> np.ndarray:
    """``X`` as a C-contiguous float64 matrix, checked against ``n_features``.

    Parameters
    ----------
    X : (n_records, n_features) array-like of real numbers
    n_features : int or None
        The width expected; None accepts any width.

    Raises
    ------
    ValueError
        If ``X`` is not 2-D or its width is not ``n_features``.
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (n_records, n_features), got shape {X.shape}")
    if n_features is not None and X.shape[1] != n_features:
        raise ValueError(f"X has {X.shape[1]} features, the model expects {n_features}")
    return X


def as_test_matrix(X_test: Any, X: np.ndarray) -> np.ndarray | None:
    """``X_test`` (the records as predicted) checked against ``X`` (as learned): the same
    width and number of records; None stays None.

    Raises
    ------
    ValueError
        If ``X_test`` is not 2-D or its shape is not ``X``'s.
    """
    if X_test is None:
        return None
    X_test = as_matrix(X_test, X.shape[1])
    if X_test.shape[0] != X.shape[0]:
        raise ValueError(f"X_test has {X_test.shape[0]} records, X has {X.shape[0]}")
    return X_test


def widen_proba(proba: np.ndarray, before: Sequence, after: Sequence,
                predictions: Sequence) -> np.ndarray:
    """Probabilities over the classes ``before`` a batch laid out over those ``after`` it:
    NaN in the columns of classes learned since, and in the rows of None predictions.

    Parameters
    ----------
    proba : (n_records, len(before)) float64
    before, after : sequences of labels in canonical order, ``before`` within ``after``
    predictions : sequence of n_records labels or None

    Returns
    -------
    (n_records, len(after)) float64
    """
    n = len(predictions)
    if len(before) == len(after):
        out = np.array(proba, dtype=np.float64).reshape(n, len(after))
    else:
        col = {label_key(c): j for j, c in enumerate(after)}
        out = np.full((n, len(after)), np.nan)
        out[:, [col[label_key(c)] for c in before]] = proba
    missing = [i for i, p in enumerate(predictions) if p is None]
    if missing:
        out[missing] = np.nan
    return out


def declared_width(parameters: dict) -> int | None:
    """``parameters["n_features"]`` when it is an int (a declared width), else None."""
    d = parameters.get("n_features")
    return d if isinstance(d, int) and not isinstance(d, bool) else None


class Learner(Component, abc.ABC):
    """An online learner that fits mini-batches and exposes a flat parameter vector.

    Subclasses store their constructor arguments unchanged under their own names (which
    makes :meth:`hyperparameters`, :meth:`clone` and :meth:`to_json` free, see
    :class:`learning.component.Component`), declare them once in a ``HYPERPARAMETERS``
    tuple of :class:`learning.hyperparameters.Hyperparameter` (name, type, default,
    allowed values, description: what requests, the schema and ``omldm list`` use), call
    :func:`learning.hyperparameters.check_stored` once they are stored, and implement :meth:`fit`, :meth:`predict`,
    :meth:`get_params`, :meth:`set_params` and the two state hooks ``_parameters_json`` /
    ``_load_parameters``. Optional abilities raise :class:`NotImplementedError`.

    Labels are native JSON scalars (bool, int, float, str); predictions are too, never
    numpy scalars.

    Class attributes describe what a learner is, for spokes, protocols and requests:

    - ``supervised``: whether :meth:`fit` needs labels (spokes reject unlabelled training
      records when True; k-means is False);
    - ``averageable``: whether :meth:`get_params` / :meth:`set_params` / :meth:`project`
      exist, i.e. whether a parameter-averaging protocol can synchronize it (a Hoeffding
      tree is False and runs only with the ``Independent`` protocol, see
      :func:`learning.registry.check_pairing`);
    - ``task``: ``"classification"``, ``"regression"`` or ``"clustering"``: what
      :meth:`predict` returns (a label, a real number, a cluster index) and so whether
      prequential accuracy means anything (only for classification);
    - ``has_proba``: whether :meth:`predict_proba` exists and :meth:`test_then_train`
      takes ``with_proba=True`` (class probabilities, which log loss and ROC AUC need:
      :mod:`learning.metrics`). Only learners whose model *is* a distribution over the
      classes have them (the networks' softmax, the trees' leaf distributions); a margin
      (PA, SVM, ridge) is not a probability and is not turned into one.
    """

    supervised: ClassVar[bool] = True
    averageable: ClassVar[bool] = True
    #: whether :meth:`match` reorders anything (a hub skips the call, and the copy of the
    #: global model it takes, for a learner whose entries mean the same on every spoke)
    matches_units: ClassVar[bool] = False
    #: whether the flat vector is sums over the records learned (sufficient statistics,
    #: :class:`learning.learners.ridge.OnlineRidge`): the sum of the spokes' deltas is then
    #: the model of all their records, exactly, however long a round or stale a push, so
    #: every protocol sums by default and no push is damped for staleness
    #: (:func:`learning.protocols.sharding.aggregation_of`)
    additive: ClassVar[bool] = False
    task: ClassVar[str] = "classification"
    has_proba: ClassVar[bool] = False
    #: True for learners whose native bindings cannot run in a Python interpreter embedded
    #: in the JVM (PyFlink's thread mode): PyTorch's pybind11 calls PyGILState_Ensure, which
    #: deadlocks under pemja's thread states (seen: ``import torch`` hangs in
    #: ``pybind11::detail::get_local_internals``); river's trees hang likewise. Kernels that
    #: embed Python refuse them; PyFlink's process mode runs them.
    needs_own_interpreter: ClassVar[bool] = False
    #: The factor this learner's step size runs at (:meth:`set_step_scale`); not a
    #: hyperparameter: :meth:`hyperparameters`, :meth:`clone` and :meth:`to_json` keep the
    #: declared step size, and a clone or a learner read from JSON runs at 1.
    step_scale: float = 1.0
    #: The rows (indices into the last :meth:`fit` / :meth:`test_then_train` batch) that
    #: call left out of its step, and why: the float32 networks leave out a record whose
    #: own loss is not finite and step on the others (:func:`neural._finite_rows`); PA
    #: (classifier and regressor) and ridge leave out a record whose step would make
    #: their model inf or NaN (:data:`NONFINITE_STEP`). The spoke dead-letters those records
    #: (``fit_failed``) and counts the rest; the loss sum and the predictions' metrics
    #: leave them out. Empty for every other learner.
    refused_rows: tuple[int, ...] = ()
    refused_reason: str = ""

    @classmethod
    def declared_size(cls, hyperparameters: dict, parameters: dict) -> int:
        """The parameters (float64 numbers) of the model that ``hyperparameters`` (the
        request's; a missing one at its default) and a declared layout (``parameters``
        ``n_features`` and ``classes``) make, computed before anything is allocated: the
        service refuses a request above its ``max_model_params``. 0 while the width is not
        declared. This default is a linear model's ``(n_features + 1) × max(1,
        n_classes)``; learners that hold more per feature say so.
        """
        d = declared_width(parameters)
        return 0 if d is None else (d + 1) * max(1, len(parameters.get("classes") or ()))

    # --- required verbs -----------------------------------------------------------------

    @abc.abstractmethod
    def fit(self, X: np.ndarray, y: Sequence) -> None:
        """Learn from a mini-batch, record by record in order.

        Parameters
        ----------
        X : (n_records, n_features) float64
        y : sequence of n_records labels (JSON scalars)

        Raises
        ------
        ValueError
            If the shapes disagree with each other or with the model.
        """

    @abc.abstractmethod
    def predict(self, X: np.ndarray) -> list:
        """Predict a label per record.

        Parameters
        ----------
        X : (n_records, n_features) float64

        Returns
        -------
        list of n_records labels; None where the model has seen no label yet.
        """

    @abc.abstractmethod
    def get_params(self) -> np.ndarray:
        """A copy of the model as a 1-D float64 vector laid out as :meth:`layout` says."""

    @abc.abstractmethod
    def set_params(self, w: np.ndarray) -> None:
        """Replace the model with ``w`` (1-D float64, the layout of :meth:`get_params`).

        Raises
        ------
        ValueError
            If ``w`` does not have the expected size (the message names it).
        """

    # --- optional abilities -------------------------------------------------------------

    def loss(self, X: np.ndarray, y: Sequence) -> float:
        """Sum of the per-record losses over the batch (not the mean)."""
        raise NotImplementedError(f"{type(self).__name__} has no loss")

    def score(self, X: np.ndarray, y: Sequence) -> float:
        """Accuracy in [0, 1] of :meth:`predict` on the batch; NaN for an empty batch."""
        labels = as_labels(y)
        if not labels:
            return float("nan")
        predictions = self.predict(X)
        hits = sum(p is not None and label_key(p) == label_key(t)
                   for p, t in zip(predictions, labels))
        return hits / len(labels)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Class probabilities per record (only where ``has_proba``).

        Parameters
        ----------
        X : (n_records, n_features) float64

        Returns
        -------
        (n_records, len(classes)) float64
            Row ``i`` over ``classes`` in canonical order (:func:`label_key`), summing to
            1; no columns while no label was learned.

        Raises
        ------
        NotImplementedError
            For learners without probabilities (``has_proba`` False).
        """
        raise NotImplementedError(f"{type(self).__name__} has no class probabilities")

    def test_then_train(self, X: np.ndarray, y: Sequence,
                        X_test: np.ndarray | None = None, *, with_proba: bool = False
                        ) -> tuple[list, float] | tuple[list, float, np.ndarray]:
        """Predict each record, then learn from it (prequential evaluation).

        Parameters
        ----------
        X : (n_records, n_features) float64
            The records as they are to be learned.
        y : sequence of n_records labels
        X_test : (n_records, n_features) float64 or None
            The records as they are to be predicted (they differ from ``X`` when a
            preprocessor's statistics move within the batch); None means ``X``.
        with_proba : bool
            Also return the probabilities the predictions were taken from (only where
            ``has_proba``; learners without it take no such argument).

        Returns
        -------
        predictions : list of n_records labels
        loss_sum : float
            Sum of the per-record training losses.
        proba : (n_records, len(classes)) float64, only with ``with_proba``
            Row ``i``: the probabilities record ``i`` was predicted with, over ``classes``
            as they are *after* the batch (canonical order); NaN for a class the learner
            did not know when it predicted the record (all NaN for a None prediction).

        Notes
        -----
        This default predicts the whole batch with the model as it was before the batch
        and then fits it. Learners that update per record override it so that record ``i``
        is predicted by the model after records ``< i``, as river's ``predict_one`` /
        ``learn_one`` loop does.
        """
        X_test = X if X_test is None else X_test
        predictions = self.predict(X_test)
        if with_proba:
            before = list(self.classes)
            proba = self.predict_proba(X_test)
        try:
            loss_sum = self.loss(X, y)
        except NotImplementedError:
            loss_sum = float("nan")
        self.fit(X, y)
        if not with_proba:
            return predictions, loss_sum
        return predictions, loss_sum, widen_proba(proba, before, self.classes, predictions)

    def step_size(self) -> str | None:
        """The hyperparameter that sets this learner's step size, as it is configured now
        (e.g. ``"learning_rate"``, or PA-I's step cap ``"C"``): what
        ``trainingConfiguration.scaling`` ``learning-rate`` divides by the number of spokes
        (papers/001_00243469e12aa123.txt §II-C, eq. 4; :mod:`learning.scaling`). None, this
        default, for a learner that takes no step set by a hyperparameter of its own
        (closed-form solutions, trees, k-means' ``1/count``)."""
        return None

    def effective_step_size(self) -> float | None:
        """The step size the learner runs at: the :meth:`step_size` hyperparameter times
        :attr:`step_scale`; None without one."""
        name = self.step_size()
        return None if name is None else float(getattr(self, name)) * self.step_scale

    def set_step_scale(self, factor: float) -> None:
        """Take steps ``factor`` times the declared step size from now on (papers/001
        §II-C, eq. 4: ``α_w = α / n`` on ``n`` spokes); the declared hyperparameter is left
        as it is, and a later :meth:`update_hyperparameters` of it keeps the factor.

        Parameters
        ----------
        factor : float, > 0

        Raises
        ------
        ValueError
            If ``factor`` is not a positive finite number.
        NotImplementedError
            If ``factor`` is not 1 and the learner has no :meth:`step_size`.
        """
        factor = float(factor)
        if not (math.isfinite(factor) and factor > 0):
            raise ValueError(f"factor must be a number > 0, got {factor!r}")
        if factor != 1.0 and self.step_size() is None:
            raise NotImplementedError(f"{type(self).__name__} has no step-size hyperparameter")
        if factor != self.step_scale:
            self.step_scale = factor
            self._on_step_scale()

    def _on_step_scale(self) -> None:
        """Hook: refresh what is derived from the effective step size (e.g. an optimizer's
        learning rate); learners that read it at each step need nothing."""

    def layout(self) -> dict:
        """JSON-safe description of what the entries of :meth:`get_params` mean."""
        return {"size": int(self.get_params().size)}

    def class_block_width(self) -> int | None:
        """Entries of :meth:`get_params` per class when the vector is one block per class
        (a multi-class linear model's rows ``[W_c | b_c]``), else None (the default): the
        ``diversity`` rule takes its scale per block (``trainingConfiguration.
        diversityBlocks``, :mod:`learning.protocols.sharding`)."""
        return None

    def match(self, vectors: list[np.ndarray], reference: np.ndarray) -> list[np.ndarray]:
        """Spokes' parameter vectors (each laid out as :meth:`get_params`, 1-D float64 in
        this model's layout) with their units reordered to correspond to ``reference``'s
        (the global model), before a hub folds them into it. The default returns them
        unchanged: an entry means the same on every spoke. A learner whose units have no
        fixed place (k-means' clusters) overrides it and sets :attr:`matches_units`."""
        return vectors

    def grow(self, layout: dict) -> None:
        """Extend the model so that a vector in ``layout`` projects into it losslessly."""
        if layout != self.layout():
            raise NotImplementedError(f"{type(self).__name__} cannot change its layout")

    def project(self, w: np.ndarray, layout: dict) -> np.ndarray:
        """Map a vector expressed in ``layout`` into this learner's current layout.

        Calls :meth:`grow` first. This default accepts only the learner's own layout.
        """
        self.grow(layout)
        return np.array(w, dtype=np.float64)
