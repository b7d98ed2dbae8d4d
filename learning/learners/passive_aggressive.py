"""Passive-aggressive classification, binary and multi-class in one formulation.

References
----------
Crammer, K., Dekel, O., Keshet, J., Shalev-Shwartz, S., Singer, Y. (2006) Online
passive-aggressive algorithms. JMLR 7:551–585 (§3: PA, PA-I, PA-II; §7: multi-class).

papers/002_9b954bd89ad87406.txt §3.3.3 (PA learners of OMLDM).
"""

from __future__ import annotations

import numpy as np

from learning.hyperparameters import Hyperparameter, check_stored
from learning.learners.linear import LinearClassifier

__all__ = ["PAClassifier", "pa_step"]

_NEG_INF = float("-inf")
#: the average share of records that moved the model (an exponential average over
#: mini-batches, weight 1/4 for the last) at or under which :meth:`PAClassifier._stream`
#: walks from one positive loss to the next instead of one record at a time
SPARSE_UPDATES = 0.15
#: 0, 1, …, 255: row and column indices of the walk's score blocks, made once
_RANGE = np.arange(256)


def pa_step(loss: float, q: float, C: float, mode: int, half_C: float) -> float:
    """τ, the step of a record with ``loss > 0`` and ``q = ‖x‖²`` (Crammer et al. 2006 §3):
    ``min(C, l/q)`` (PA-I, ``mode`` 1), ``l/q`` (PA, 0), ``l/(q + 1/(2C))`` (PA-II, 2;
    ``half_C`` is ``1/(2C)``); 0 for a zero record in modes 0 and 1."""
    if mode == 1:
        return min(C, loss / q) if q > 0.0 else 0.0
    if mode == 0:
        return loss / q if q > 0.0 else 0.0
    return loss / (q + half_C)


def _learn(Wb: np.ndarray, x: np.ndarray, yi: int, ri: int, tau: float) -> int:
    """The multi-class PA update of ``Wb`` (K, d+1) in place: row ``yi`` (the label) moves
    by ``τ/2 · x``, row ``ri`` (the best rival) by ``−τ/2 · x``; returns 1 if it moved."""
    if tau > 0.0:
        u = x * (0.5 * tau)
        Wb[yi] += u
        Wb[ri] -= u
        return 1
    return 0


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

    #: :data:`SPARSE_UPDATES`' average, a property of the stream, not of the model: not
    #: saved, and a new or loaded learner starts one record at a time
    _update_share = 1.0

    def step_size(self) -> str | None:
        """``"C"`` in modes 1 (PA-I, the step cap) and 2 (PA-II); None in mode 0, whose step
        ``l / ‖x‖²`` no hyperparameter sets (see ``C`` above)."""
        return "C" if self.mode in (1, 2) else None

    def _stream(self, X: np.ndarray, labels: list, X_test: np.ndarray | None,
                want_predictions: bool) -> tuple[list | None, float]:
        """One PA step per record (see :meth:`LinearClassifier._stream`).

        Where few records move the model (an average of at most :data:`SPARSE_UPDATES`
        of the recent mini-batches' records, e.g. 2% on Shuttle, 26-61% on the
        experiment's other streams), the records ahead are scored in one call and walked
        to the next one with a positive loss, which is learned as below, and the rest
        scored again: each record's scores are the same products as one record at a
        time gives, so the model, the predictions and the loss are the same bit for bit,
        in a few numpy calls per update instead of a few per record.
        """
        n, d = X.shape
        XA, XU = self._augmented(X, X_test)  # (n, 1|2, d+1) as learned/predicted; steps
        sq = np.einsum("ij,ij->i", X, X).tolist()
        C, mode = float(self.C) * self.step_scale, self.mode
        half_C = 0.5 / C
        index = self._labels
        yidx = index.rows(labels)
        classes = self.classes
        Wb = self._Wb
        WbT = Wb.T
        K = len(classes)
        predictions = [None] * n if want_predictions else None
        loss_sum = 0.0
        updates = 0
        sparse = self._update_share <= SPARSE_UPDATES
        yarr = np.asarray(yidx) if sparse else None
        slow = False  # the next record goes one at a time (a new label, scores not finite)
        i = -1
        while True:
            i += 1
            if i >= n:
                break
            if sparse and K >= 2 and not slow:
                # scores of records i.. with the model as it is: (m, 1|2, K)
                S = XA[i:] @ WbT
                if not np.isfinite(S).all():  # on NaN numpy's max and Python's part ways:
                    sparse = False  # the rest one at a time, as always
                    i -= 1
                    continue
                m = n - i
                rows = _RANGE[:m] if m <= len(_RANGE) else np.arange(m)
                cols = _RANGE[:K] if K <= len(_RANGE) else np.arange(K)
                yb = yarr[i:]
                # (no argmax and no 2-D fancy assignment: numpy lets go of the GIL in
                # them, and in thread mode that hands the interpreter to another spoke)
                Sl = S[:, -1, :].copy()
                sy = Sl[rows, yb]
                np.copyto(Sl, _NEG_INF, where=cols == yb[:, None])
                loss = 1.0 - sy + Sl.max(axis=1)
                hits = np.flatnonzero((loss > 0.0) | (yb < 0))
                t = i + int(hits[0]) if hits.size else n
                new_label = t < n and yidx[t] < 0
                if want_predictions:
                    upto = t if new_label or t == n else t + 1
                    for j, st in enumerate(S[:upto - i, 0, :].tolist(), i):
                        predictions[j] = classes[st.index(max(st))]
                if t == n:
                    break
                if new_label:  # record t one at a time: it adds a row
                    i, slow = t - 1, True
                    continue
                sl = Sl[t - i].tolist()
                lt, ri = float(loss[t - i]), sl.index(max(sl))
                i = t
                loss_sum += lt
                updates += _learn(Wb, XU[t], yidx[t], ri, pa_step(lt, sq[t], C, mode, half_C))
                continue
            slow = False
            if K >= 2:
                S = (XA[i] @ WbT).tolist()
                if want_predictions:
                    st = S[0]
                    predictions[i] = classes[st.index(max(st))]
            elif want_predictions and K:
                predictions[i] = classes[0]
            yi = yidx[i]
            if yi < 0:  # a new label: a zero row at its sorted position
                self._add_labels([labels[i]])
                Wb, WbT, K = self._Wb, self._Wb.T, K + 1
                yidx[i:] = index.rows(labels[i:])
                if sparse:
                    yarr = np.asarray(yidx)
                yi = yidx[i]
                if K < 2:
                    continue
                S = (XA[i] @ WbT).tolist()
            elif K < 2:
                continue
            sl = S[-1]
            sy = sl[yi]
            sl[yi] = _NEG_INF
            sr = max(sl)
            loss = 1.0 - sy + sr
            if loss <= 0.0:
                continue
            loss_sum += loss
            updates += _learn(Wb, XU[i], yi, sl.index(sr), pa_step(loss, sq[i], C, mode, half_C))
        if n:
            self._update_share = 0.75 * self._update_share + 0.25 * updates / n
        return predictions, loss_sum
