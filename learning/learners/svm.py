"""Online linear support vector machine: mini-batch Pegasos, binary and multi-class.

References
----------
Shalev-Shwartz, S., Singer, Y., Srebro, N., Cotter, A. (2011) Pegasos: primal estimated
sub-gradient solver for SVM. Mathematical Programming 127(1):3–30 (§2: the update, the
optional projection and mini-batches; §6: the bias term).
Crammer, K., Singer, Y. (2001) On the algorithmic implementation of multiclass kernel-based
vector machines. JMLR 2:265–292 (the multi-class hinge).

papers/002_9b954bd89ad87406.txt §3.3.3 ("Online Support Vector Machine (SVM) classifier").
"""

from __future__ import annotations

import math

import numpy as np

from learning import compiled
from learning.errors import ParameterError
from learning.hyperparameters import Hyperparameter, check_stored
from learning.learners.linear import LinearClassifier

__all__ = ["OnlineSVM"]


class OnlineSVM(LinearClassifier):
    """Linear SVM trained online by mini-batch Pegasos, for any number of classes.

    The model is one row ``[W_k | b_k]`` per label (``W: (n_classes, n_features)``,
    ``b: (n_classes,)`` float64, canonical label order, as :class:`PAClassifier`); the
    prediction is the arg-max of ``s_k = W_k · x + b_k``.

    Records are learned one at a time, in order: record ``t = 1, 2, ...`` (counting every
    record learned while at least two classes are known) takes the Pegasos step
    ``η_t = 1 / (λ t)``. With ``r`` the best rival class of the record, ``l = max(0, 1 -
    (s_y - s_r))`` its multi-class hinge and ``x̃ = [x | 1]`` (``[x | 0]`` without
    ``learn_intercept``)::

        [W | b] ← (1 - η_t λ) [W | b] + [l > 0] η_t ½ (e_y - e_r) x̃ᵀ
        then, with ``projection``: scale [W | b] into the ball ‖[W | b]‖_F ≤ 1 / √(2λ)

    With exactly two classes ``c0 < c1`` the difference ``v = [W_1 - W_0 | b_1 - b_0]``
    is exactly the binary Pegasos iterate for ``y = ±1`` (``c1`` positive), including the
    projection onto ``‖v‖ ≤ 1/√λ``: the halves and the ``√2`` make binary and multi-class
    one code path. The bias is handled as a weight on a constant feature 1 and regularized
    with the rest (Shalev-Shwartz et al. §6, first option). The mini-batch size changes
    nothing: a batch is its records in order, and :meth:`test_then_train` predicts each
    record with the model after the previous one (river's ``predict_one`` / ``learn_one``
    loop). Pegasos' averaged-sub-gradient mini-batches (§2.3) were measured and rejected:
    on streams they cost up to 30 points of prequential accuracy at 256 records a batch.

    Labels are JSON scalars in canonical order; a new label gets a zero row. Iterations
    with fewer than two classes known change nothing and do not count in ``t``.

    Parameters
    ----------
    lam : float, > 0
        The regularization λ of ``λ/2 ‖[W | b]‖²`` (per class-row pair, see above);
        the step is ``1/(λ t)``. λ is not a step size: it also sets the objective and the
        projection radius, so this learner has no :meth:`step_size` and refuses
        ``trainingConfiguration.scaling`` ``learning-rate`` (papers/001 §II-C eq. 4;
        :mod:`learning.scaling`).
    projection : bool
        Whether to project after each step onto the ball that holds the optimum
        (``‖v‖ ≤ 1/√λ`` for the binary ``v``; optional in Pegasos, it tames early steps).
    learn_intercept : bool
        Whether ``b`` is learned (it stays 0 otherwise).

    Attributes
    ----------
    classes : list
        Labels seen, canonical order.
    n_features : int or None
    t : int
        Pegasos steps taken (records learned with at least two classes known).

    Raises
    ------
    learning.errors.HyperparameterError
        E.g. ``lam must be > 0, got 0``.

    Examples
    --------
    Phishing (river's bundled stream, 1,250 records) with a running standard scaler,
    mini-batches of 8, prequential accuracy:

    >>> from river import datasets
    >>> import numpy as np
    >>> from learning import Pipeline, StandardScaler
    >>> data = list(datasets.Phishing())
    >>> X = np.array([list(x.values()) for x, _ in data], dtype=float)
    >>> y = [label for _, label in data]
    >>> pipe = Pipeline([StandardScaler()], OnlineSVM(lam=0.01))
    >>> hits = sum(pipe.test_then_train(X[i:i + 8], y[i:i + 8])[1] for i in range(0, len(X), 8))
    >>> print(f"{hits / len(X):.3f}")
    0.876

    References
    ----------
    Shalev-Shwartz, S., Singer, Y., Srebro, N., Cotter, A. (2011) Pegasos: primal estimated
    sub-gradient solver for SVM. Mathematical Programming 127(1):3–30.
    """

    _EXTRA_KEYS = ("t",)

    HYPERPARAMETERS = (
        Hyperparameter("lam", float, 0.01, "regularization lambda of lambda/2 ||[W | b]||^2; "
                       "the step is 1/(lambda t) (Pegasos)", interval="(0, inf)"),
        Hyperparameter("projection", bool, True, "project after each step onto the ball "
                       "||v|| <= 1/sqrt(lambda) that holds the optimum"),
        Hyperparameter("learn_intercept", bool, True, "whether the intercepts b are learned "
                       "(they stay 0 otherwise)"),
    )

    def __init__(self, lam: float = 0.01, projection: bool = True,
                 learn_intercept: bool = True):
        self.lam = lam
        self.projection = projection
        self.learn_intercept = learn_intercept
        check_stored(self)
        self.t = 0
        self._init_model()

    def _stream(self, X: np.ndarray, labels: list, X_test: np.ndarray | None,
                want_predictions: bool) -> tuple[list | None, float]:
        """One Pegasos step per record (see :meth:`LinearClassifier._stream`), in the
        compiled loop :func:`learning.compiled.svm_walk` (:meth:`LinearClassifier._walk`)."""
        compiled.compile_all()
        lam = float(self.lam)
        radius2 = 1.0 / (2.0 * lam) if self.projection else math.inf
        steps = np.array([self.t], dtype=np.int64)
        loss = np.zeros(1)
        predictions = self._walk(compiled.svm_walk, X, labels, X_test, want_predictions,
                                 (lam, radius2, bool(self.learn_intercept), steps), loss)
        self.t = int(steps[0])
        return predictions, float(loss[0])

    # --- JSON ---------------------------------------------------------------------------

    def _extra_json(self) -> dict:
        return {"t": self.t}

    def _load_extra(self, parameters: dict) -> None:
        t = parameters.get("t", 0) or 0
        if isinstance(t, bool) or not isinstance(t, int) or t < 0:
            raise ParameterError("t", f"t must be an integer >= 0, got {t!r}")
        self.t = t
