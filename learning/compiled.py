"""The per-record loops of the spoke's hot path, compiled by numba: the test-then-train
walks of PA, PA regression and the online SVM (:class:`learning.learners.PAClassifier`,
:class:`learning.learners.PARegressor`, :class:`learning.learners.OnlineSVM`), online
ridge regression's prequential RLS steps (:class:`learning.learners.OnlineRidge`) and the
standard scaler's prequential pass (:class:`learning.preprocessors.StandardScaler`). In
numpy PA's walk and the scaler were a dozen calls on arrays of a mini-batch (e.g. 32 × 9
on Shuttle), each paying more in call overhead than in arithmetic: 3.5 of the kernel's 7.2
µs of CPU per record (docs/performance.md, "The kernel compiled"); the SVM's walk made
five numpy calls per record, ridge's six and PA regression's three (the kernel with them:
8.6–9.2, 12.0–12.2 and 6.6–6.8 µs per record; 4.7, 5.6–6.0 and 4.6 compiled).

Three rules keep them safe in PyFlink's thread mode, where every Python operator runs on
pemja, one interpreter inside the JVM, and a task thread that hosts several chained
Python operators holds several thread states (:mod:`learning.native`):

- **No numba runtime** (``_nrt=False``). With it numba wraps every array argument in a
  reference-counted record whose release calls ``PyGILState_Ensure``, on every call: on
  such a thread that waits for the GIL the thread itself holds, for ever (seen: a spoke
  thread hung in ``pyobject_dtor`` under :func:`standard_prequential`). Without it a
  function may not allocate, so the caller passes every output array.
- **One signature each.** A call whose arguments match goes
  straight to the machine code; one that does not raises ``TypeError`` instead of
  compiling on a task thread (LLVM calls back into Python through ctypes while it
  compiles). Arrays are float64 (int64 for rows) and C-contiguous.
- **Compiled on a thread of its own** (:func:`compile_all`, which callers call before the
  first use; numba is imported there too), so that compiling, or loading the compiled code
  from numba's cache (``cache=True``: ``__pycache__`` beside this file), never runs on a
  task thread. Until then the functions here are plain Python (same results, slower).

Sums run in record order, one feature after the other, as plain Python would; numba
does not reorder floating-point operations without ``fastmath``.
"""

from __future__ import annotations

import builtins
import sys
import threading

import numpy as np

from learning.native import run_in_own_thread

__all__ = ["compile_all", "best_row", "label_and_rival", "move_apart", "moves_finite", "pa_tau",
           "pa_walk", "pa_regress_walk", "svm_walk", "rls_prequential", "moments_prefix",
           "standard_prequential"]

_F2 = "float64[:, ::1]"
_F1 = "float64[::1]"
_I1 = "int64[::1]"


def pa_tau(X, i, loss, C, mode, half_C):
    """τ, the PA step of record ``X[i]`` with ``loss > 0`` and ``q = ‖X[i]‖²`` (Crammer et
    al. 2006 §3): ``min(C, l/q)`` (PA-I, ``mode`` 1), ``l/q`` (PA, 0), ``l/(q + 1/(2C))``
    (PA-II, 2; ``half_C`` is ``1/(2C)``); 0 for a zero record in modes 0 and 1. ``min``
    as Python's: a NaN ``l/q`` gives ``C``."""
    q = 0.0
    for j in range(X.shape[1]):
        q += X[i, j] * X[i, j]
    if mode == 1:
        if not q > 0.0:
            return 0.0
        tau = loss / q
        return tau if tau < C else C
    if mode == 0:
        return loss / q if q > 0.0 else 0.0
    return loss / (q + half_C)


def best_row(X, i, Wb):
    """The row of ``Wb`` (K, d + 1) with the highest score ``X[i] · w_k + b_k``; -1 for no
    row. Ties and NaN scores take the first row, as Python's ``max`` and ``list.index``
    do."""
    d = X.shape[1]
    best, arg = 0.0, -1
    for k in range(Wb.shape[0]):
        s = 0.0
        for j in range(d):
            s += X[i, j] * Wb[k, j]
        s += Wb[k, d]
        if k == 0 or s > best:
            best, arg = s, k
    return arg


def label_and_rival(X, i, Wb, yi):
    """``(s_y, s_r, r)``: record ``X[i]``'s score for its label's row ``yi``, and the best
    score of the other rows with its row ``r`` (the label's own counting as -inf; ties
    and NaN take the first row), for the multi-class hinge ``1 − s_y + s_r``."""
    d = X.shape[1]
    sy, sr, ri = 0.0, 0.0, 0
    for k in range(Wb.shape[0]):
        s = 0.0
        for j in range(d):
            s += X[i, j] * Wb[k, j]
        s += Wb[k, d]
        if k == yi:
            sy, s = s, -np.inf
        if k == 0 or s > sr:
            sr, ri = s, k
    return sy, sr, ri


def move_apart(X, i, Wb, yi, ri, c, learn_intercept):
    """Row ``yi`` of ``Wb`` (K, d + 1) moves by ``c [X[i] | 1]`` and row ``ri`` by its
    opposite (the intercept column only with ``learn_intercept``): a multi-class hinge
    step."""
    d = X.shape[1]
    for j in range(d):
        u = X[i, j] * c
        Wb[yi, j] += u
        Wb[ri, j] -= u
    if learn_intercept:
        Wb[yi, d] += c
        Wb[ri, d] -= c


def moves_finite(X, i, Wb, yi, ri, c, learn_intercept):
    """Whether :func:`move_apart` with these arguments leaves rows ``yi`` and ``ri`` of
    ``Wb`` finite (nothing is written): a step that would not is refused."""
    d = X.shape[1]
    for j in range(d):
        u = X[i, j] * c
        if not (np.isfinite(Wb[yi, j] + u) and np.isfinite(Wb[ri, j] - u)):
            return False
    return not learn_intercept or (np.isfinite(Wb[yi, d] + c) and np.isfinite(Wb[ri, d] - c))


def pa_walk(X, X_test, Wb, yidx, start, predict_start, want, C, mode, half_C,
            learn_intercept, refused, pred, out):
    """Records ``start..`` of a mini-batch, one multi-class PA step each (Crammer et al.
    2006, §3 and §7), in place on ``Wb`` (K, d + 1) float64: rows ``[w_k | b_k]``.

    Parameters
    ----------
    X, X_test : (n, d) float64
        The records as learned and as predicted (the same array for no preprocessor).
    yidx : (n,) int64
        Each record's label row; -1 for a label without one.
    start : int
        The first record to handle.
    predict_start : bool
        Whether record ``start`` is still to be predicted (False when the walk resumes
        on it after its label got a row).
    want : bool
        Whether to predict at all.
    C, mode, half_C : float, int, float
        As :func:`pa_tau`.
    learn_intercept : bool
        Whether ``b`` moves.
    refused : (n,) int64
        Out: from ``refused[int(out[2])]`` on, the index of each record whose step would
        have left ``Wb`` inf or NaN (PA's ``l / ‖x‖²`` on a record of tiny norm, or
        weights already near float64's limit): its step is not taken and its loss not
        added.
    pred : (n,) int64
        Out: the row predicted for each record (-1: no class yet), when ``want``.
    out : (3,) float64
        Added to: ``[loss sum, updates, records refused]``.

    Returns
    -------
    int
        The first record from ``start`` whose label has no row, not learned yet (the
        caller adds the row and resumes there with ``predict_start`` False); ``n`` when
        none. Ties and NaN scores take the first row, as Python's ``max`` and
        ``list.index`` do.
    """
    n = X.shape[0]
    K = Wb.shape[0]
    for i in range(start, n):
        if want and (i > start or predict_start):
            pred[i] = best_row(X_test, i, Wb)
        yi = yidx[i]
        if yi < 0:
            return i
        if K < 2:
            continue
        sy, sr, ri = label_and_rival(X, i, Wb, yi)
        loss = 1.0 - sy + sr
        if loss <= 0.0:
            continue
        tau = pa_tau(X, i, loss, C, mode, half_C)
        if tau > 0.0:
            if not moves_finite(X, i, Wb, yi, ri, 0.5 * tau, learn_intercept):
                refused[int(out[2])] = i
                out[2] += 1.0
                continue
            move_apart(X, i, Wb, yi, ri, 0.5 * tau, learn_intercept)
            out[1] += 1.0
        out[0] += loss
    return n


def pa_regress_walk(X, X_test, has_test, wb, targets, C, mode, half_C, eps, learn_intercept,
                    refused, pred):
    """A mini-batch ``X`` (n, d), one PA regression step per record (Crammer et al. 2006
    §4, the ε-insensitive loss; :class:`learning.learners.PARegressor` states it), in
    place on ``wb`` (d + 1,) float64 = ``[w | b]``.

    Parameters
    ----------
    X, X_test : (n, d) float64
        The records as learned and as predicted (the same array for no preprocessor).
    has_test : bool
        Whether ``X_test`` differs from ``X`` (else a record's prediction is the score
        its step uses, not computed twice).
    targets : (n,) float64
    C, mode, half_C : float, int, float
        As :func:`pa_tau`.
    eps : float
        The width of the insensitive band.
    learn_intercept : bool
        Whether ``b`` moves.
    refused : (n,) int64
        Out: the index of each record whose step would have left ``wb`` inf or NaN (as
        :func:`pa_walk`'s), in order: its step is not taken.
    pred : (n,) float64
        Out: each record's prediction (``X_test[i]``) before its update.

    Returns
    -------
    int
        How many records were refused (the first entries of ``refused``).
    """
    n, d = X.shape
    refusals = 0
    for i in range(n):
        p = 0.0
        for j in range(d):
            p += X[i, j] * wb[j]
        p += wb[d]
        if has_test:
            pt = 0.0
            for j in range(d):
                pt += X_test[i, j] * wb[j]
            pred[i] = pt + wb[d]
        else:
            pred[i] = p
        err = targets[i] - p
        loss = abs(err) - eps
        if loss <= 0.0:
            continue
        tau = pa_tau(X, i, loss, C, mode, half_C)
        if tau > 0.0:
            step = tau if err > 0.0 else -tau
            finite = not learn_intercept or np.isfinite(wb[d] + step)
            for j in range(d):
                if not np.isfinite(wb[j] + X[i, j] * step):
                    finite = False
            if not finite:
                refused[refusals] = i
                refusals += 1
                continue
            for j in range(d):
                wb[j] += X[i, j] * step
            if learn_intercept:
                wb[d] += step
    return refusals


def svm_walk(X, X_test, Wb, yidx, start, predict_start, want, lam, radius2,
             learn_intercept, t, pred, out):
    """Records ``start..`` of a mini-batch, one multi-class Pegasos step each
    (Shalev-Shwartz et al. 2011 §2 and §6; Crammer and Singer's hinge, 2001), in place on
    ``Wb`` (K, d + 1) float64: rows ``[w_k | b_k]``
    (:class:`learning.learners.svm.OnlineSVM` states the step).

    Parameters
    ----------
    X, X_test, yidx, start, predict_start, want, learn_intercept, pred
        As :func:`pa_walk`.
    lam : float
        λ, the regularization; the step of step ``t`` is ``1 / (λ t)``.
    radius2 : float
        The squared radius of the projection ball (``inf``: no projection).
    t : (1,) int64
        In and out: the Pegasos steps taken so far.
    out : (1,) float64
        Added to: the loss sum.

    Returns
    -------
    int
        As :func:`pa_walk`: the first record from ``start`` whose label has no row
        (not learned yet), or ``n``. Ties and NaN scores take the first row.
    """
    n, d = X.shape
    K = Wb.shape[0]
    steps = t[0]
    for i in range(start, n):
        if want and (i > start or predict_start):
            pred[i] = best_row(X_test, i, Wb)
        yi = yidx[i]
        if yi < 0:
            t[0] = steps
            return i
        if K < 2:
            continue
        sy, sr, ri = label_and_rival(X, i, Wb, yi)
        steps += 1
        loss = 1.0 - sy + sr
        shrink = 1.0 - 1.0 / steps  # 0 at the first step: 1 - η_1 λ
        for k in range(K):
            for j in range(d + 1):
                Wb[k, j] = 0.0 if steps == 1 else Wb[k, j] * shrink
        if loss > 0.0:
            out[0] += loss
            move_apart(X, i, Wb, yi, ri, 0.5 / (lam * steps), learn_intercept)
        norm2 = 0.0
        for k in range(K):
            for j in range(d + 1):
                norm2 += Wb[k, j] * Wb[k, j]
        if norm2 > radius2:
            f = np.sqrt(radius2 / norm2)
            for k in range(K):
                for j in range(d + 1):
                    Wb[k, j] *= f
    t[0] = steps
    return n


def rls_prequential(XA, XT, t, start, m, P, wb, u, out):
    """Recursive least squares through records ``start..`` of a mini-batch (Haykin 2002
    ch. 9, the Sherman–Morrison step; :class:`learning.learners.OnlineRidge`, whose
    statistics this does not touch): ``out[i]`` = ``XT[i, :m] · wb`` before record ``i``,
    then ``wb`` and ``P`` = ``A⁻¹`` (m, m) float64 take its step, in place (scratch
    copies). ``XA``, ``XT``: (n, ≥ m) float64; ``t``: (n,) float64 targets; ``u``: (m,)
    float64 scratch; ``out``: (n,) float64."""
    n = XA.shape[0]
    for i in range(start, n):
        p = 0.0
        for a in range(m):
            p += XT[i, a] * wb[a]
        out[i] = p
        for a in range(m):  # u = P x
            s = 0.0
            for b in range(m):
                s += P[a, b] * XA[i, b]
            u[a] = s
        xu = 0.0
        xw = 0.0
        for a in range(m):
            xu += XA[i, a] * u[a]
            xw += XA[i, a] * wb[a]
        denom = 1.0 + xu
        r = t[i] - xw
        for a in range(m):  # k = u / (1 + x·u); wb += k r; P -= k uᵀ
            k = u[a] / denom
            wb[a] += k * r
            for b in range(m):
                P[a, b] -= k * u[b]


def moments_prefix(X, n0, mean0, var0, mean, var):
    """Mean and population variance after each prefix ``X[:k+1]`` of a batch ``X`` (n, d),
    continuing ``n0`` records learned before with ``mean0``, ``var0`` ((d,) float64, unread
    when ``n0`` is 0), into ``mean`` and ``var`` (n, d). Per feature: prefix sums of the
    batch shifted by its first record (exact zeros for a constant feature, less
    cancellation), joined to the earlier records by Chan et al.'s parallel update (1983,
    eq. 2.1b)."""
    n, d = X.shape
    for j in range(d):
        c = X[0, j]
        s1 = 0.0
        s2 = 0.0
        for i in range(n):
            e = X[i, j] - c
            s1 += e
            s2 += e * e
            k = i + 1.0
            m = c + s1 / k
            m2 = s2 - s1 * s1 / k
            if m2 < 0.0:
                m2 = 0.0
            if n0 == 0:
                mean[i, j] = m
                var[i, j] = m2 / k
            else:
                N = n0 + k
                delta = m - mean0[j]
                mean[i, j] = mean0[j] + delta * (k / N)
                var[i, j] = (m2 + (var0[j] * n0 + delta * delta * (n0 * k / N))) / N


def _scaled(x, mean, var, with_std):
    """One value standardized; river's ``safe_div``: 0 where the deviation is 0."""
    z = x - mean
    if not with_std:
        return z
    sd = np.sqrt(var)
    return z / sd if sd > 0.0 else 0.0


def standard_prequential(X, X_test, n0, mean0, var0, with_std, mean, var, Z_test, Z):
    """The standard scaler's prequential pass over a batch ``X`` (n, d): the statistics
    after each prefix into ``mean`` and ``var`` (n, d; :func:`moments_prefix`),
    ``X_test[i]`` scaled with those of the records before ``X[i]`` into ``Z_test``, and
    ``X[i]`` with those up to it into ``Z``."""
    moments_prefix(X, n0, mean0, var0, mean, var)
    n, d = X.shape
    for i in range(n):
        for j in range(d):
            if i:
                m, v = mean[i - 1, j], var[i - 1, j]
            elif n0:
                m, v = mean0[j], var0[j]
            else:
                m, v = 0.0, 0.0
            Z_test[i, j] = _scaled(X_test[i, j], m, v, with_std)
            Z[i, j] = _scaled(X[i, j], mean[i, j], var[i, j], with_std)


#: each function's one signature (numba's types)
_SIGNATURES = {
    "best_row": f"int64({_F2}, int64, {_F2})",
    "label_and_rival": f"Tuple((float64, float64, int64))({_F2}, int64, {_F2}, int64)",
    "move_apart": f"void({_F2}, int64, {_F2}, int64, int64, float64, boolean)",
    "pa_tau": f"float64({_F2}, int64, float64, float64, int64, float64)",
    "moves_finite": f"boolean({_F2}, int64, {_F2}, int64, int64, float64, boolean)",
    "pa_walk": f"int64({_F2}, {_F2}, {_F2}, {_I1}, int64, boolean, boolean, float64, int64, "
               f"float64, boolean, {_I1}, {_I1}, {_F1})",
    "pa_regress_walk": f"int64({_F2}, {_F2}, boolean, {_F1}, {_F1}, float64, int64, float64, "
                       f"float64, boolean, {_I1}, {_F1})",
    "svm_walk": f"int64({_F2}, {_F2}, {_F2}, {_I1}, int64, boolean, boolean, float64, "
                f"float64, boolean, {_I1}, {_I1}, {_F1})",
    "rls_prequential": f"void({_F2}, {_F2}, {_F1}, int64, int64, {_F2}, {_F1}, {_F1}, {_F1})",
    "moments_prefix": f"void({_F2}, int64, {_F1}, {_F1}, {_F2}, {_F2})",
    "_scaled": "float64(float64, float64, float64, boolean)",
    "standard_prequential": f"void({_F2}, {_F2}, int64, {_F1}, {_F1}, boolean, {_F2}, {_F2}, "
                            f"{_F2}, {_F2})",
}


_compiled = False
_compiling = threading.Lock()


def compile_all() -> None:
    """Compile every function of :data:`_SIGNATURES`, once per process, on a thread of its
    own: each becomes a numba dispatcher in this module's namespace, so a caller looks it
    up here (``compiled.pa_walk``) after calling this. Call it before the first use, not
    while this module or its package is being imported (numba imports the module of the
    functions it compiles, and a package being imported makes other threads wait).

    Raises
    ------
    numba.core.errors.NumbaError
        If a function does not compile (a bug here, not bad input).
    """
    global _compiled
    if _compiled:
        return
    with _compiling:
        if not _compiled:
            run_in_own_thread(_compile)
            _compiled = True


def _let_numba_find_print() -> None:
    """PyFlink's Beam worker (process mode) replaces ``builtins.print`` by a bound method
    of its own module, and numba's import, which types ``print``, looks it up by name in
    ``print.__module__`` and stops with ``AttributeError`` when that module has no such
    name: give it one (the same object)."""
    p = builtins.print
    module = sys.modules.get(getattr(p, "__module__", None) or "")
    if module is not None and getattr(module, p.__name__, None) is not p:
        setattr(module, p.__name__, p)


def _compile() -> None:
    """Replace each function of :data:`_SIGNATURES` by its compiled self, in order (a
    function calls those compiled before it)."""
    _let_numba_find_print()
    from numba import njit

    for name, signature in _SIGNATURES.items():
        globals()[name] = njit(signature, cache=True, _nrt=False)(globals()[name])
