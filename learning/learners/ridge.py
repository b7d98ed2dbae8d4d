"""Online ridge regression by recursive least squares on additive sufficient statistics.

References
----------
Hoerl, A. E., Kennard, R. W. (1970) Ridge regression: biased estimation for nonorthogonal
problems. Technometrics 12(1):55–67.
Haykin, S. (2002) Adaptive Filter Theory, 4th ed., Prentice Hall, ch. 9 (recursive least
squares; the Sherman–Morrison step used within a mini-batch).

papers/002_9b954bd89ad87406.txt §3.3.3 ("Online Ridge Regression").
"""

from __future__ import annotations

import numpy as np

from learning import compiled
from learning.errors import ParameterError
from learning.hyperparameters import Hyperparameter, check_stored
from learning.learners.base import NONFINITE_STEP, declared_width
from learning.learners.linear import check_n_features, load_matrix
from learning.learners.regressor import LinearRegressor

__all__ = ["OnlineRidge"]


class OnlineRidge(LinearRegressor):
    """Online ridge regression: the exact ridge solution on every record seen so far.

    With ``x̃ = [x | 1]`` the model keeps the sufficient statistics of all records learned,

    ``G = Σ x̃ x̃ᵀ: (n_features + 1, n_features + 1)`` and ``h = Σ y x̃: (n_features + 1,)``

    (float64; ``G[-1, -1]`` is the record count), and predicts with ``ŷ = w · x + b``
    where ``[w | b]`` solves ``(G + α D) [w | b] = h``, ``D = diag(1, ..., 1, 0)`` (the
    intercept is not penalized). Without ``fit_intercept`` the last row and column are left
    out and ``b = 0``. A mini-batch adds ``X̃ᵀ X̃`` and ``X̃ᵀ y`` and solves once
    (``O(n d² + d³)``); :meth:`test_then_train` also predicts record ``i`` with the solution
    after records ``< i``, by rank-one Sherman–Morrison (RLS) steps through the batch, so
    mini-batches change no prediction. A record whose ``x̃ x̃ᵀ`` or ``y x̃`` is not finite
    (coordinates beyond about 1e154, e.g. a feature of 1e100 squared by
    ``PolynomialFeatures``) is not learned: it would make the statistics inf for good; it
    is named in :attr:`~learning.learners.Learner.refused_rows` (all of the mini-batch's
    records where the statistics themselves would pass float64's limit).

    **The flat vector is the statistics, not the weights**: ``[upper triangle of G, row by
    row | h]``. Statistics are additive (:attr:`additive`), so the sum of the spokes'
    deltas (``w̃ ← w̃ + Σ Δ_i``, every protocol's default for this learner, stale pushes
    undamped) rebuilds exactly the ridge regression of every record on every spoke. An
    average (``aggregation: average``) adds ``1/k`` of each round's records and lets every
    spoke weigh its own k times above the others' (on scikit-learn's diabetes, BSP after
    every mini-batch, 4 spokes: prequential MAE 52.6 averaged against 47.6 summed, the
    centralized learner 47.1; ``benchmarks/aggregation_rules.py --learner Ridge``).
    Weights averaged instead would not be the solution of anything. The weights are the
    ``coef`` / ``intercept`` attributes. The vector holds ``(d + 1)(d + 2)/2 + d + 1``
    numbers for ``d`` features (27 for 5, 5,151 for 100): this learner is for modest
    widths.

    Parameters
    ----------
    alpha : float, >= 0
        The ridge penalty ``α ‖w‖²``. With 0 (ordinary least squares) a singular system
        falls back to the least-norm solution.
    fit_intercept : bool
        Whether ``b`` is fitted (changing it at run time is safe: the statistics are the
        same either way).

    Attributes
    ----------
    n_features : int or None
    n : int
        Records learned (``G[-1, -1]``; after averaging, a weighted count).
    coef : (n_features,) float64
    intercept : float

    Examples
    --------
    river's TrumpApproval through a running standard scaler, prequential MAE:

    >>> from river import datasets
    >>> import numpy as np
    >>> from learning import Pipeline, StandardScaler
    >>> data = list(datasets.TrumpApproval())
    >>> X = np.array([list(x.values()) for x, _ in data])
    >>> y = [target for _, target in data]
    >>> pipe = Pipeline([StandardScaler()], OnlineRidge(alpha=1.0))
    >>> _, _, abs_errors = pipe.test_then_train(X, y)
    >>> print(f"MAE {abs_errors / len(y):.3f}")
    MAE 0.891

    References
    ----------
    Hoerl, A. E., Kennard, R. W. (1970) Ridge regression: biased estimation for
    nonorthogonal problems. Technometrics 12(1):55–67.
    """

    additive = True

    HYPERPARAMETERS = (
        Hyperparameter("alpha", float, 1.0, "the ridge penalty alpha ||w||^2 (0: ordinary "
                       "least squares, least-norm when singular)", interval="[0, inf)"),
        Hyperparameter("fit_intercept", bool, True, "whether the intercept b is fitted"),
    )

    @classmethod
    def declared_size(cls, hyperparameters: dict, parameters: dict) -> int:
        """``(d + 1)(d + 2)/2 + d + 1`` for ``d`` declared features (0 undeclared)."""
        d = declared_width(parameters)
        return 0 if d is None else (d + 1) * (d + 2) // 2 + d + 1

    def __init__(self, alpha: float = 1.0, fit_intercept: bool = True):
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        check_stored(self)
        self._init_model()

    def _init_model(self) -> None:
        self.n_features: int | None = None
        self._G = np.zeros((0, 0))
        self._h = np.zeros(0)
        self._wb = np.zeros(0)

    def _set_n_features(self, d: int) -> None:
        self.n_features = d
        self._G = np.zeros((d + 1, d + 1))
        self._h = np.zeros(d + 1)
        self._wb = np.zeros(d + 1)

    @property
    def n(self) -> float:
        return float(self._G[-1, -1]) if self._G.size else 0.0

    # --- solving ------------------------------------------------------------------------

    def _system(self) -> tuple[np.ndarray, np.ndarray, int]:
        """``(G + α D, h)`` restricted to the fitted coordinates, and their number."""
        d = self.n_features
        m = d + 1 if self.fit_intercept else d
        A = self._G[:m, :m].copy()
        A[np.arange(d), np.arange(d)] += float(self.alpha)
        return A, self._h[:m].copy(), m

    def _solve(self) -> None:
        """``[w | b]`` from the statistics (zeros before any record)."""
        if self.n_features is None:
            return
        wb = np.zeros(self.n_features + 1)
        if self.n > 0:
            A, h, m = self._system()
            try:
                wb[:m] = np.linalg.solve(A, h)
            except np.linalg.LinAlgError:
                wb[:m] = np.linalg.lstsq(A, h, rcond=None)[0]
        self._wb = wb

    def _on_hyperparameters(self) -> None:
        self._solve()

    # --- learning -----------------------------------------------------------------------

    def _augment(self, X: np.ndarray) -> np.ndarray:
        XA = np.ones((X.shape[0], X.shape[1] + 1))
        XA[:, :-1] = X
        return XA

    def _learn(self, X: np.ndarray, t: np.ndarray, X_test: np.ndarray | None,
               want_predictions: bool) -> np.ndarray | None:
        """Add the batch to the statistics and solve once; the predictions, if wanted, by
        the solution on all records before each (:meth:`_prequential`)."""
        XA = self._augment(X)
        G, h = self._G + XA.T @ XA, self._h + XA.T @ t
        self.refused_rows = ()
        if not (np.isfinite(G).all() and np.isfinite(h).all()):
            keep = self._finite_rows(XA, t)
            self.refused_rows = tuple(np.flatnonzero(~keep).tolist())
            self.refused_reason = NONFINITE_STEP
            G = self._G + XA[keep].T @ XA[keep]
            h = self._h + XA[keep].T @ t[keep]
            if not (np.isfinite(G).all() and np.isfinite(h).all()):
                keep[:] = False  # the statistics themselves near float64's limit
                self.refused_rows = tuple(range(len(XA)))
                G, h = self._G, self._h
        predictions = None
        if want_predictions:
            XT = XA if X_test is None else self._augment(X_test)
            if self.refused_rows:  # the others as if the refused records had not come
                predictions = np.full(len(XA), np.nan)
                predictions[keep] = self._prequential(XA[keep], XT[keep], t[keep])
            else:
                predictions = self._prequential(XA, XT, t)
        self._G, self._h = G, h
        self._solve()
        return predictions

    @staticmethod
    def _finite_rows(XA: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Which records' own terms ``x xᵀ`` and ``t x`` are finite: ``(n,)`` bool."""
        with np.errstate(over="ignore", invalid="ignore"):
            big = np.abs(XA).max(axis=1)
            return np.isfinite(big * big) & np.isfinite(np.abs(t) * big)

    def _prequential(self, XA: np.ndarray, XT: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Predictions of ``XT[i]`` by the solution after records ``< i`` (RLS steps on a
        scratch copy, in the compiled loop :func:`learning.compiled.rls_prequential`; the
        statistics are updated by the caller)."""
        n = XA.shape[0]
        A, h, m = self._system()
        out = np.empty(n)
        wb = self._wb[:m].copy()
        P = None
        start = 0
        if self.n > 0:
            try:
                P = np.linalg.inv(A)
            except np.linalg.LinAlgError:
                P = None
        while start < n and P is None:  # singular: solve directly until invertible
            out[start] = XT[start, :m] @ wb
            A += np.outer(XA[start, :m], XA[start, :m])
            h += t[start] * XA[start, :m]
            start += 1
            try:
                P = np.linalg.inv(A)
                wb = P @ h
            except np.linalg.LinAlgError:
                wb = np.linalg.lstsq(A, h, rcond=None)[0]
        if start < n:
            compiled.compile_all()
            compiled.rls_prequential(XA, XT, np.ascontiguousarray(t, dtype=np.float64), start,
                                     m, np.ascontiguousarray(P), np.ascontiguousarray(wb),
                                     np.empty(m), out)
        return out

    # --- the flat vector ----------------------------------------------------------------

    def _triu(self) -> tuple[np.ndarray, np.ndarray]:
        return np.triu_indices(self._G.shape[0])

    @staticmethod
    def _vector_size(d: int) -> int:
        return (d + 1) * (d + 2) // 2 + d + 1

    def get_params(self) -> np.ndarray:
        """``[upper triangle of G row by row | h]``: 1-D float64 of size
        ``(d + 1)(d + 2)/2 + d + 1`` (0 while ``n_features`` is unknown)."""
        return np.concatenate([self._G[self._triu()], self._h])

    def set_params(self, w: np.ndarray) -> None:
        """Replace the statistics with ``w`` (laid out as :meth:`get_params`) and solve.

        Raises
        ------
        ValueError
            If ``w`` is not 1-D of the size of :meth:`get_params`.
        """
        w = np.asarray(w, dtype=np.float64)
        m = self._G.shape[0]
        size = m * (m + 1) // 2 + m
        if w.ndim != 1 or w.size != size:
            raise ValueError(f"expected a 1-D vector of {size} parameters (statistics of "
                             f"{self.n_features} features), got shape {w.shape}")
        if m == 0:
            return
        G = np.zeros((m, m))
        rows, cols = self._triu()
        G[rows, cols] = w[:-m]
        G[cols, rows] = w[:-m]
        self._G, self._h = G, w[-m:].copy()
        self._solve()

    def layout(self) -> dict:
        """``{"n_features": d or None, "statistics": "triu(G)|h"}``."""
        return {"n_features": self.n_features, "statistics": "triu(G)|h"}

    # --- JSON ---------------------------------------------------------------------------

    def _parameters_json(self) -> dict:
        return {"n_features": self.n_features, "G": self._G.tolist(), "h": self._h.tolist()}

    def _load_parameters(self, parameters: dict) -> None:
        """Load ``{"n_features", "G", "h"}`` (each may be missing or null) and solve.

        Raises
        ------
        learning.errors.ParameterError
            Naming the key that is rejected (``G`` must be symmetric).
        """
        unknown = set(parameters) - {"n_features", "G", "h"}
        if unknown:
            name = sorted(map(str, unknown))[0]
            raise ParameterError(name, f"unknown parameter {name!r} for OnlineRidge; "
                                 "expected n_features, G, h")
        d = parameters.get("n_features")
        if d is None:
            if parameters.get("G") or parameters.get("h"):
                raise ParameterError("n_features", "n_features is required with G or h")
            self._init_model()
            return
        d = check_n_features(d)
        self._set_n_features(d)
        G = load_matrix(parameters, "G", (d + 1, d + 1), " (n_features + 1 square)")
        h = load_matrix(parameters, "h", (d + 1,), " (n_features + 1)")
        if G is not None:
            if not np.allclose(G, G.T, rtol=1e-12, atol=0.0):
                raise ParameterError("G", "G must be symmetric")
            self._G = G
        if h is not None:
            self._h = h
        self._solve()
