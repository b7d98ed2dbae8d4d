"""Passive-aggressive regression with the ε-insensitive loss.

References
----------
Crammer, K., Dekel, O., Keshet, J., Shalev-Shwartz, S., Singer, Y. (2006) Online
passive-aggressive algorithms. JMLR 7:551–585 (§4: regression; §3: PA, PA-I, PA-II).

papers/002_9b954bd89ad87406.txt §3.3.3 ("Passive-Aggressive (PA) regressor").
"""

from __future__ import annotations

import numpy as np

from learning import compiled
from learning.hyperparameters import Hyperparameter, check_stored
from learning.learners.base import NONFINITE_STEP
from learning.learners.regressor import LinearRegressor

__all__ = ["PARegressor"]


class PARegressor(LinearRegressor):
    """Passive-aggressive regressor (PA, PA-I, PA-II), ε-insensitive.

    The model is ``ŷ = w · x + b`` with ``w: (n_features,)`` and ``b`` float64. For each
    record ``(x, y)`` in order, with ``ŷ`` the prediction before the update, the suffered
    loss is ``l = max(0, |y - ŷ| - ε)`` and, with ``q = ‖x‖²`` (the intercept is not in
    the norm, as in river)::

        mode 0 (PA):    τ = l / q                 (0 when q == 0)
        mode 1 (PA-I):  τ = min(C, l / q)         (0 when q == 0)
        mode 2 (PA-II): τ = l / (q + 1 / (2 C))

        w += τ sign(y - ŷ) x,   b += τ sign(y - ŷ)   (b only with learn_intercept)

    This is river's ``linear_model.PARegressor(C, mode, eps, learn_intercept)`` step for
    step, except for one river 0.23 defect that is not copied: river's
    ``optim.losses.EpsilonInsensitiveHinge`` maps the target to ``2 y - 1`` (a leftover of
    its binary losses), so river's loss — and its step size — is ``max(0, |2y - 1 - ŷ| -
    ε)``. With river's loss patched to the paper's, both models agree to rounding (see
    ``tests/test_learners_quality.py``).

    Mini-batches change nothing: :meth:`test_then_train` predicts record ``i`` with the
    model after records ``< i``. ``loss`` is the sum of absolute errors and ``score`` the
    negative MAE (:class:`learning.learners.regressor.Regressor`).

    A record whose step would leave ``w`` or ``b`` inf or NaN (mode 0's ``l / q`` on a
    record of tiny norm, a target near float64's limit) is not learned: it is named in
    :attr:`~learning.learners.Learner.refused_rows` and its error is left out of the loss.

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
    eps : float, >= 0
        Width of the insensitive band: errors up to ``eps`` cost nothing.
    learn_intercept : bool
        Whether ``b`` is learned (it stays 0 otherwise).

    Attributes
    ----------
    n_features : int or None
    coef : (n_features,) float64
    intercept : float

    Raises
    ------
    learning.errors.HyperparameterError
        E.g. ``eps must be >= 0, got -1``.

    Examples
    --------
    river's TrumpApproval (1,001 records, 6 features) through a running standard scaler,
    prequential MAE:

    >>> from river import datasets
    >>> import numpy as np
    >>> from learning import Pipeline, StandardScaler
    >>> data = list(datasets.TrumpApproval())
    >>> X = np.array([list(x.values()) for x, _ in data])
    >>> y = [target for _, target in data]
    >>> pipe = Pipeline([StandardScaler()], PARegressor(C=1.0, mode=1, eps=0.1))
    >>> _, _, abs_errors = pipe.test_then_train(X, y)
    >>> print(f"MAE {abs_errors / len(y):.3f}")
    MAE 0.883

    References
    ----------
    Crammer, K., Dekel, O., Keshet, J., Shalev-Shwartz, S., Singer, Y. (2006) Online
    passive-aggressive algorithms. JMLR 7:551–585.
    """

    HYPERPARAMETERS = (
        Hyperparameter("C", float, 1.0, "aggressiveness: the step cap (PA-I) or slack "
                       "penalty (PA-II), the step size scaling divides; unused by PA",
                       interval="(0, inf)"),
        Hyperparameter("mode", int, 1, "0 = PA, 1 = PA-I, 2 = PA-II (Crammer et al. 2006)",
                       choices=(0, 1, 2)),
        Hyperparameter("eps", float, 0.1, "width of the insensitive band (epsilon): errors "
                       "up to eps cost nothing, in label units", interval="[0, inf)"),
        Hyperparameter("learn_intercept", bool, True, "whether the intercept b is learned "
                       "(it stays 0 otherwise)"),
    )

    def __init__(self, C: float = 1.0, mode: int = 1, eps: float = 0.1,
                 learn_intercept: bool = True):
        self.C = C
        self.mode = mode
        self.eps = eps
        self.learn_intercept = learn_intercept
        check_stored(self)
        self._init_model()

    def step_size(self) -> str | None:
        """``"C"`` in modes 1 (PA-I, the step cap) and 2 (PA-II); None in mode 0, whose step
        ``l / ‖x‖²`` no hyperparameter sets (see ``C`` above)."""
        return "C" if self.mode in (1, 2) else None

    def _learn(self, X: np.ndarray, t: np.ndarray, X_test: np.ndarray | None,
               want_predictions: bool) -> list:
        """The per-record loop, compiled (:func:`learning.compiled.pa_regress_walk`): the
        only place the model is updated. Returns the prediction of each record (as
        predicted, ``X_test``) before its update, wanted or not (they are a by-product of
        the update)."""
        compiled.compile_all()
        X = np.ascontiguousarray(X, dtype=np.float64)
        has_test = X_test is not None
        X_test = np.ascontiguousarray(X_test, dtype=np.float64) if has_test else X
        targets = np.ascontiguousarray(t, dtype=np.float64)
        C, mode, eps = float(self.C) * self.step_scale, int(self.mode), float(self.eps)
        if not self._wb.flags.c_contiguous:  # (a loaded model)
            self._wb = np.ascontiguousarray(self._wb)
        pred = np.empty(X.shape[0])
        refused = np.empty(X.shape[0], dtype=np.int64)
        n = compiled.pa_regress_walk(X, X_test, has_test, self._wb, targets, C, mode, 0.5 / C,
                                     eps, bool(self.learn_intercept), refused, pred)
        self.refused_rows = tuple(refused[:n].tolist()) if n else ()
        self.refused_reason = NONFINITE_STEP
        return pred.tolist()
