"""Passive-aggressive classification, binary and multi-class in one formulation.

References
----------
Crammer, K., Dekel, O., Keshet, J., Shalev-Shwartz, S., Singer, Y. (2006) Online
passive-aggressive algorithms. JMLR 7:551–585 (§3: PA, PA-I, PA-II; §7: multi-class).

papers/002_9b954bd89ad87406.txt §3.3.3 (PA learners of OMLDM).
"""

from __future__ import annotations

import numpy as np

from learning import compiled
from learning.hyperparameters import Hyperparameter, check_stored
from learning.learners.base import NONFINITE_STEP
from learning.learners.linear import LinearClassifier

__all__ = ["PAClassifier"]


class PAClassifier(LinearClassifier):
    """Passive-aggressive classifier (PA, PA-I, PA-II) for any number of classes.

    The model is a weight matrix ``W: (n_classes, n_features) float64`` and intercepts
    ``b: (n_classes,) float64``, one row per label in ``classes``. The score of class
    ``k`` is ``s_k = W_k · x + b_k`` and the prediction is the arg-max (ties: the lowest
    row, i.e. the first label in canonical order).

    For each record ``(x, y)`` in order, with ``r`` the highest-scoring class other than
    ``y``, the suffered loss is ``l = max(0, 1 - (s_y - s_r))``; then, with ``q = ‖x‖²``
    (the intercept is not in the norm, as in river)::

        mode 0 (PA):    t = l / q                 (0 when q == 0)
        mode 1 (PA-I):  t = min(C, l / q)         (0 when q == 0)
        mode 2 (PA-II): t = l / (q + 1 / (2 C))

    and ``W_y += t/2 · x``, ``W_r -= t/2 · x`` (``b_y += t/2``, ``b_r -= t/2`` when
    ``learn_intercept``).

    With exactly two classes ``c0 < c1`` the difference ``(W_1 - W_0, b_1 - b_0)`` evolves
    exactly like the single vector of river's binary ``PAClassifier(C, mode)`` with
    ``c1`` as the positive class (up to float rounding), so binary and multi-class share one
    code path and one parameter layout. For more classes this is Crammer et al.'s
    multi-class PA (§7) with the class-sensitive feature map ``e_k ⊗ x``, whose
    ``‖Φ(x, y) - Φ(x, r)‖² = 2 q``: modes 0 is exactly theirs, and modes 1 and 2 are
    theirs with aggressiveness ``C / 2``.

    A record whose step would leave ``W`` or ``b`` inf or NaN (mode 0's ``l / q`` on a
    record of tiny norm) is not learned: it is named in
    :attr:`~learning.learners.Learner.refused_rows` and its loss is left out of the sum.

    Labels are JSON scalars kept in canonical order (sort key ``(type name, label)``;
    ``True`` is not ``1``). A new label gets a zero row at its sorted position when it is
    first learned; with one class seen the model predicts it and cannot update; with none
    it predicts None. ``n_features`` is learned from the first batch (or given as a
    parameter).

    Parameters
    ----------
    C : float, > 0
        Aggressiveness: the step cap (PA-I) or the slack penalty (PA-II). Unused by PA.
        It is the :meth:`step_size` of modes 1 and 2: on ``n`` spokes with
        ``trainingConfiguration.scaling`` ``learning-rate`` they run at ``C / n``, the
        analogue of papers/001 §II-C eq. 4's ``α / n`` (PA-I: every step the cap binds is
        divided by ``n``; PA-II: every step shrinks, ``τ ≤ 2 C l / n``; see
        :mod:`learning.scaling`). Mode 0 has no step-size hyperparameter.
    mode : {0, 1, 2}
        0 = PA, 1 = PA-I, 2 = PA-II.
    learn_intercept : bool
        Whether the intercepts ``b`` are learned (they stay 0 otherwise).

    Attributes
    ----------
    classes : list
        The labels seen, in canonical order; row ``k`` of ``W`` belongs to ``classes[k]``.
    n_features : int or None
        The record width, None until known.

    Raises
    ------
    learning.errors.HyperparameterError
        E.g. ``C must be > 0, got -1``.

    Examples
    --------
    >>> import numpy as np
    >>> model = PAClassifier(C=0.01, mode=1)
    >>> model.fit(np.array([[1.0, 0.0], [0.0, 1.0], [0.9, 0.1]]), ["a", "b", "a"])
    >>> model.predict(np.array([[1.0, 0.0], [0.0, 1.0]]))
    ['a', 'b']
    >>> model.layout()
    {'classes': ['a', 'b'], 'n_features': 2}
    >>> model.get_params().shape  # [W_a | b_a, W_b | b_b]
    (6,)

    References
    ----------
    Crammer, K., Dekel, O., Keshet, J., Shalev-Shwartz, S., Singer, Y. (2006) Online
    passive-aggressive algorithms. JMLR 7:551–585.
    """

    # the wording of its load errors, which predates LinearClassifier
    _EXPECTED_KEYS = "classes, n_features, W, b"
    _B_HINT = " (classes x n_features)"

    HYPERPARAMETERS = (
        Hyperparameter("C", float, 0.01, "aggressiveness: the step cap (PA-I) or slack "
                       "penalty (PA-II), the step size scaling divides; unused by PA",
                       interval="(0, inf)"),
        Hyperparameter("mode", int, 1, "0 = PA, 1 = PA-I, 2 = PA-II (Crammer et al. 2006)",
                       choices=(0, 1, 2)),
        Hyperparameter("learn_intercept", bool, True, "whether the intercepts b are learned "
                       "(they stay 0 otherwise)"),
    )

    def __init__(self, C: float = 0.01, mode: int = 1, learn_intercept: bool = True):
        self.C = C
        self.mode = mode
        self.learn_intercept = learn_intercept
        check_stored(self)
        self._init_model()

    def step_size(self) -> str | None:
        """``"C"`` in modes 1 (PA-I, the step cap) and 2 (PA-II); None in mode 0, whose step
        ``l / ‖x‖²`` no hyperparameter sets (see ``C`` above)."""
        return "C" if self.mode in (1, 2) else None

    def _stream(self, X: np.ndarray, labels: list, X_test: np.ndarray | None,
                want_predictions: bool) -> tuple[list | None, float]:
        """One PA step per record (see :meth:`LinearClassifier._stream`), in the compiled
        loop :func:`learning.compiled.pa_walk` (:meth:`LinearClassifier._walk`)."""
        compiled.compile_all()
        C, mode = float(self.C) * self.step_scale, int(self.mode)
        totals = np.zeros(3)  # loss sum, updates, records refused
        refused = np.empty(X.shape[0], dtype=np.int64)
        predictions = self._walk(compiled.pa_walk, X, labels, X_test, want_predictions,
                                 (C, mode, 0.5 / C, bool(self.learn_intercept), refused), totals)
        self.refused_rows = tuple(refused[:int(totals[2])].tolist()) if totals[2] else ()
        self.refused_reason = NONFINITE_STEP
        return predictions, float(totals[0])
