"""Online k-means: k-means++ seeding on the first records, then mini-batch updates.

References
----------
Arthur, D., Vassilvitskii, S. (2007) k-means++: the advantages of careful seeding. Proc.
18th ACM-SIAM SODA, 1027–1035 (the D² seeding; "greedy" local trials as in scikit-learn).
MacQueen, J. (1967) Some methods for classification and analysis of multivariate
observations. Proc. 5th Berkeley Symposium 1:281–297 (the online update).
Sculley, D. (2010) Web-scale k-means clustering. Proc. WWW 2010, 1177–1178 (mini-batches
with per-center learning rates 1/count).

papers/002_9b954bd89ad87406.txt §3.3.3 ("KMeans++ clustering").
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Sequence

import numpy as np

from learning.errors import HyperparameterError, ParameterError
from learning.hyperparameters import Hyperparameter, check_stored
from learning.learners.base import Learner, as_matrix, declared_width
from learning.learners.linear import check_n_features, grow_n_features, load_matrix

__all__ = ["KMeans"]


def _check_int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise HyperparameterError(name, f"{name} must be an integer >= {low}, got {value!r}")
    return value


def _counts_centers(M: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(counts, centers)`` of the flat vector's rows ``M: (k, 1 + d)`` (``[n_j, n_j c_j]``):
    counts below 0 read as 0, and the center of an empty cluster is zeros."""
    counts = np.maximum(M[:, 0], 0.0)
    centers = np.zeros_like(M[:, 1:])
    live = counts > 0
    centers[live] = M[live, 1:] / counts[live, None]
    return counts, centers


def _sq_distances(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """``(n, k)`` squared Euclidean distances, never negative (inf or NaN where a square
    overflows float64: coordinates beyond about 1e154; :func:`_scaled_sq_distances`)."""
    D = (X * X).sum(axis=1)[:, None] - 2.0 * (X @ C.T) + (C * C).sum(axis=1)[None, :]
    return np.maximum(D, 0.0)


def _scaled_sq_distances(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """:func:`_sq_distances` of ``X`` and ``C`` both divided by their largest magnitude:
    finite for any finite coordinates, and ordered as the true distances, which is all
    an assignment needs (the nearest center, a matching of centers)."""
    s = max(float(np.abs(X).max(initial=0.0)), float(np.abs(C).max(initial=0.0)))
    if not 0.0 < s < np.inf:
        return np.nan_to_num(_sq_distances(X, C), nan=np.inf)
    return _sq_distances(X / s, C / s)


class KMeans(Learner):
    """Online k-means clustering with k-means++ seeding.

    The model is ``n_clusters`` centers ``C: (n_clusters, n_features)`` float64 with
    member counts ``n: (n_clusters,)``; each center is the mean of the records assigned to
    it so far. The first ``init_size`` records are buffered; then k-means++ (D² sampling
    with ``2 + ⌊ln k⌋`` greedy local trials) picks ``n_clusters`` of them as centers (count
    1 each) and the other buffered records are learned. Afterwards each mini-batch ``B`` is
    assigned to the centers as they were before it and every center moves to the mean of
    its old members and its new ones (Sculley's per-center rate ``1/count``)::

        c_j ← (n_j c_j + Σ_{x ∈ B, nearest(x) = j} x) / (n_j + |{x ∈ B: nearest(x) = j}|)

    With mini-batches of one record this is MacQueen's online k-means. A center whose count
    is 0 (possible only after :meth:`set_params`) is reseeded by D² sampling from the next
    batch.

    :meth:`predict` returns the index (int) of the nearest center, None while seeding;
    :meth:`loss` is the sum of squared distances to the nearest center (0 for records of
    an unseeded model). Labels are ignored (``supervised = False``).

    **The flat vector is additive**: ``[n_0, n_0 c_0, n_1, n_1 c_1, ...]`` (count, then
    count times center), so a protocol summing updates pools each cluster's members exactly
    and one averaging vectors gets the pooled means. Spokes that seeded on different records
    hold unrelated clusters under the same index until they first synchronize, so a hub
    that holds the whole vector matches every spoke's clusters to the global model's
    before it merges them (:meth:`match`), and a TensAIR replica matches the clusters of
    a peer's update to its own before it adds it (the update's rows are the counts and
    sums of the records the peer assigned, so their means are where its clusters were);
    a sharded parameter server (``hubParallelism`` > 1) would merge them by index (the
    first merge mixes them, and the counts then keep the mixture: 14.09 against 12.58 on
    Waveform), so it is refused (:func:`learning.protocols.sharding.fixed_layout`).

    Parameters
    ----------
    n_clusters : int, >= 1
        ``k``; fixed for the life of the model.
    init_size : int or None
        Records buffered before seeding (>= ``n_clusters``); None means ``3 k`` (on
        digits, 3 k gave a better clustering than 10 k or 20 k, prequential and final).
    seed : int
        Seeds the k-means++ sampling (the draws depend only on the seed and the data).

    Attributes
    ----------
    n_features : int or None
    centers : (n_clusters, n_features) float64 or None
        None while seeding.
    counts : (n_clusters,) float64

    Examples
    --------
    scikit-learn's digits (1,797 records of 64 pixels) streamed once in mini-batches of 32;
    the adjusted Rand index of the final clustering against the digit labels:

    >>> from sklearn.datasets import load_digits
    >>> from sklearn.metrics import adjusted_rand_score
    >>> X, y = load_digits(return_X_y=True)
    >>> model = KMeans(n_clusters=10, seed=0)
    >>> for i in range(0, len(X), 32):
    ...     model.fit(X[i:i + 32])
    >>> print(f"ARI {adjusted_rand_score(y, model.predict(X)):.3f}")
    ARI 0.567

    References
    ----------
    Arthur, D., Vassilvitskii, S. (2007) k-means++: the advantages of careful seeding.
    Sculley, D. (2010) Web-scale k-means clustering.
    """

    supervised: ClassVar[bool] = False
    task: ClassVar[str] = "clustering"
    matches_units: ClassVar[bool] = True

    HYPERPARAMETERS = (
        Hyperparameter("n_clusters", int, 8, "k, the number of centers; fixed for the life "
                       "of the model", interval="[1, inf)"),
        Hyperparameter("init_size", int, None, "records buffered before k-means++ seeding, "
                       ">= n_clusters (None: 3 k)", interval="[1, inf)", optional=True),
        Hyperparameter("seed", int, 0, "seeds the k-means++ sampling", interval="[0, inf)"),
    )

    @classmethod
    def declared_size(cls, hyperparameters: dict, parameters: dict) -> int:
        """``n_clusters × (n_features + 1)`` (0 while the width is not declared)."""
        d = declared_width(parameters)
        k = hyperparameters.get("n_clusters")
        return 0 if d is None else (8 if k is None else int(k)) * (d + 1)

    def __init__(self, n_clusters: int = 8, init_size: int | None = None, seed: int = 0):
        self.n_clusters = n_clusters
        self.init_size = init_size
        self.seed = seed
        check_stored(self)
        if init_size is not None:
            _check_int("init_size", init_size, n_clusters)
        self.n_features: int | None = None
        self.centers: np.ndarray | None = None
        self.counts = np.zeros(n_clusters)
        self._buffer: list[np.ndarray] = []
        self._draws = 0  # seeding events so far: the RNG of each is (seed, draws)

    @property
    def _init_size(self) -> int:
        return 3 * self.n_clusters if self.init_size is None else self.init_size

    def update_hyperparameters(self, **kw: Any) -> None:
        """As :meth:`Component.update_hyperparameters`; ``n_clusters`` cannot change.

        Raises
        ------
        learning.errors.HyperparameterError
            For a new ``n_clusters`` (the layout of the vector would change).
        """
        if "n_clusters" in kw and kw["n_clusters"] != self.n_clusters:
            raise HyperparameterError("n_clusters", "n_clusters cannot change while the "
                                      f"model runs (it is {self.n_clusters})")
        super().update_hyperparameters(**kw)

    @property
    def seeded(self) -> bool:
        return self.centers is not None and bool((self.counts > 0).any())

    # --- learning -----------------------------------------------------------------------

    def _check(self, X: Any) -> np.ndarray:
        X = as_matrix(X, self.n_features)
        if self.n_features is None and X.shape[0]:
            self._set_n_features(X.shape[1])
        return X

    def _set_n_features(self, d: int) -> None:
        self.n_features = d
        self.centers = np.zeros((self.n_clusters, d))
        self.counts = np.zeros(self.n_clusters)

    def fit(self, X: np.ndarray, y: Sequence | None = None) -> None:
        """Learn a mini-batch (buffer it while seeding).

        Parameters
        ----------
        X : (n_records, n_features) float64
        y : ignored (labels, if any, are not used)

        Raises
        ------
        ValueError
            If the width is not ``n_features``.
        """
        X = self._check(X)
        if not X.shape[0]:
            return
        if not self.seeded:
            self._buffer.extend(X)
            if len(self._buffer) < self._init_size:
                return
            X = np.array(self._buffer)
            self._buffer = []
            X = self._seed(X)
        elif self._buffer:  # seeded by set_params while buffering
            X = np.vstack([np.array(self._buffer), X])
            self._buffer = []
        if X.shape[0]:
            self._update(X)

    def _rng(self) -> np.random.Generator:
        self._draws += 1
        return np.random.default_rng([self.seed, self._draws])

    def _plus_plus(self, X: np.ndarray, C: list[np.ndarray], n_new: int,
                   rng: np.random.Generator) -> list[int]:
        """Greedy k-means++: ``n_new`` more rows of ``X`` chosen by D² sampling given the
        centers ``C`` (may be empty). Returns row indices."""
        n = X.shape[0]
        trials = 2 + int(math.log(self.n_clusters))
        chosen: list[int] = []
        if C:
            closest = _sq_distances(X, np.array(C)).min(axis=1)
        else:
            first = int(rng.integers(n))
            chosen.append(first)
            closest = _sq_distances(X, X[first:first + 1])[:, 0]
        while len(chosen) < n_new:
            total = closest.sum()
            if total <= 0.0:  # every record sits on a center: any unused row will do
                rest = np.setdiff1d(np.arange(n), chosen)
                pick = int(rng.choice(rest)) if rest.size else int(rng.integers(n))
                chosen.append(pick)
                continue
            cand = np.searchsorted(np.cumsum(closest), rng.random(trials) * total)
            cand = np.minimum(cand, n - 1)
            D = np.minimum(closest[None, :], _sq_distances(X[cand], X).reshape(len(cand), n))
            best = int(D.sum(axis=1).argmin())
            chosen.append(int(cand[best]))
            closest = D[best]
        return chosen

    def _seed(self, X: np.ndarray) -> np.ndarray:
        """Seed all centers from ``X``; return the records of ``X`` not used as seeds."""
        k = self.n_clusters
        picks = self._plus_plus(X, [], min(k, X.shape[0]), self._rng())
        self.centers = np.zeros((k, X.shape[1]))
        self.counts = np.zeros(k)
        self.centers[:len(picks)] = X[picks]
        self.counts[:len(picks)] = 1.0
        keep = np.ones(X.shape[0], dtype=bool)
        keep[picks] = False
        return X[keep]

    def _update(self, X: np.ndarray) -> None:
        empty = np.flatnonzero(self.counts <= 0)
        if empty.size:  # reseed clusters that have no member
            live = [c for c, n in zip(self.centers, self.counts) if n > 0]
            picks = self._plus_plus(X, live, min(empty.size, X.shape[0]), self._rng())
            for j, row in zip(empty, picks):
                self.centers[j] = X[row]
                self.counts[j] = 1.0
            keep = np.ones(X.shape[0], dtype=bool)
            keep[picks] = False
            X = X[keep]
            if not X.shape[0]:
                return
        nearest = self._nearest(X)
        k = self.n_clusters
        added = np.bincount(nearest, minlength=k).astype(np.float64)
        sums = np.zeros_like(self.centers)
        np.add.at(sums, nearest, X)
        moved = added > 0
        total = self.counts[moved] + added[moved]
        self.centers[moved] = (self.centers[moved] * self.counts[moved, None]
                               + sums[moved]) / total[:, None]
        self.counts[moved] = total

    # --- prediction and evaluation ------------------------------------------------------

    def _distances(self, X: np.ndarray) -> np.ndarray:
        D = _sq_distances(X, self.centers)
        D[:, self.counts <= 0] = np.inf
        return D

    def _nearest(self, X: np.ndarray) -> np.ndarray:
        D = self._distances(X)
        nearest = D.argmin(axis=1)
        overflow = ~np.isfinite(D[np.arange(len(D)), nearest])
        if overflow.any() and (self.counts > 0).any():  # a square beyond float64: rescaled
            for i in np.flatnonzero(overflow):
                row = _scaled_sq_distances(X[i:i + 1], self.centers)[0]
                row[self.counts <= 0] = np.inf
                nearest[i] = row.argmin()
        return nearest

    def predict(self, X: np.ndarray) -> list:
        """Index of the nearest center per record (an int); None while seeding.

        Parameters
        ----------
        X : (n_records, n_features) float64

        Raises
        ------
        ValueError
            If the width is not ``n_features``.
        """
        X = as_matrix(X, self.n_features)
        if not self.seeded:
            return [None] * X.shape[0]
        return self._nearest(X).tolist()

    def loss(self, X: np.ndarray, y: Sequence | None = None) -> float:
        """Sum of squared distances to the nearest center (0.0 while seeding); ``y`` is
        ignored."""
        X = as_matrix(X, self.n_features)
        if not self.seeded or not X.shape[0]:
            return 0.0
        return float(self._distances(X).min(axis=1).sum())

    def score(self, X: np.ndarray, y: Sequence | None = None) -> float:
        """Negative mean squared distance to the nearest center (NaN for an empty batch
        or while seeding); ``y`` is ignored."""
        X = as_matrix(X, self.n_features)
        if not self.seeded or not X.shape[0]:
            return float("nan")
        return -self.loss(X) / X.shape[0]

    def test_then_train(self, X: np.ndarray, y: Sequence | None = None,
                        X_test: np.ndarray | None = None) -> tuple[list, float]:
        """Assign the batch with the centers before it, then learn it.

        Returns
        -------
        predictions : list of n_records cluster indices (None while seeding)
        loss_sum : float
            Sum of squared distances to the nearest center before the update (records of
            an unseeded model count 0).
        """
        X = self._check(X)
        seen = X if X_test is None else as_matrix(X_test, X.shape[1])
        predictions = self.predict(seen)
        loss_sum = self.loss(seen)
        self.fit(X)
        return predictions, loss_sum

    # --- the flat vector ----------------------------------------------------------------

    def get_params(self) -> np.ndarray:
        """``[n_0, n_0 c_0, n_1, n_1 c_1, ...]``: 1-D float64 of size
        ``n_clusters * (n_features + 1)`` (0 while ``n_features`` is unknown)."""
        if self.n_features is None:
            return np.zeros(0)
        return np.hstack([self.counts[:, None], self.centers * self.counts[:, None]]).ravel()

    def set_params(self, w: np.ndarray) -> None:
        """Replace counts and centers with ``w`` (laid out as :meth:`get_params`); a
        cluster whose count is not positive is empty.

        Raises
        ------
        ValueError
            If ``w`` is not 1-D of size ``n_clusters * (n_features + 1)``.
        """
        w = np.asarray(w, dtype=np.float64)
        size = 0 if self.n_features is None else self.n_clusters * (self.n_features + 1)
        if w.ndim != 1 or w.size != size:
            raise ValueError(f"expected a 1-D vector of {size} parameters ({self.n_clusters} "
                             f"clusters x ({self.n_features} features + 1)), got {w.shape}")
        if not size:
            return
        self.counts, self.centers = _counts_centers(w.reshape(self.n_clusters, -1))

    def layout(self) -> dict:
        """``{"n_clusters": k, "n_features": d or None}``."""
        return {"n_clusters": self.n_clusters, "n_features": self.n_features}

    def grow(self, layout: dict) -> None:
        """Learn ``n_features`` from ``layout`` if unknown.

        Raises
        ------
        ValueError
            If ``layout`` names another ``n_clusters`` or ``n_features``.
        """
        if layout.get("n_clusters", self.n_clusters) != self.n_clusters:
            raise ValueError(f"layout has n_clusters={layout.get('n_clusters')}, the model "
                             f"has {self.n_clusters}")
        grow_n_features(self, layout)

    def project(self, w: np.ndarray, layout: dict) -> np.ndarray:
        """``w`` in this layout (after :meth:`grow`); the empty vector of a model that
        never knew its width is the empty model (all counts 0).

        Raises
        ------
        ValueError
            If ``w``'s size does not match ``layout``.
        """
        self.grow(layout)
        d = layout.get("n_features")
        size = 0 if d is None else self.n_clusters * (d + 1)
        w = np.asarray(w, dtype=np.float64)
        if w.ndim != 1 or w.size != size:
            raise ValueError(f"expected a 1-D vector of {size} parameters for layout "
                             f"{layout}, got shape {w.shape}")
        return w.copy() if size else np.zeros_like(self.get_params())

    def match(self, vectors: list[np.ndarray], reference: np.ndarray) -> list[np.ndarray]:
        """Each vector's clusters reordered to the ``reference``'s they are nearest to, as
        a whole: the assignment of the ``k`` clusters to the reference's ``k`` with the
        least sum of squared distances between their centers (the Hungarian method,
        :func:`scipy.optimize.linear_sum_assignment`), an empty cluster (count 0) costing
        nothing wherever it goes. When the reference has no cluster (a global model no
        spoke has pushed to yet) the vector of the most records is the reference. Matching
        clusters before merging them, as in distributed k-means, after Wang et al.'s
        matched averaging (Federated learning with matched averaging, ICLR 2020).

        Spokes seed their clusters on their own first records, so before they first
        synchronize cluster ``j`` of one spoke has nothing to do with cluster ``j`` of
        another: merged by index, unrelated clusters were pooled into centers between
        them, which the counts then kept (Waveform, 4 spokes, BSP: a prequential sum of
        squared distances of 14.42 against 13.00 for independent learners, 12.58
        centralized). Once a spoke has installed the global model its clusters are the
        global ones, and the nearest assignment is the identity.

        Parameters
        ----------
        vectors : list of (n_clusters * (n_features + 1),) float64
        reference : (n_clusters * (n_features + 1),) float64, or (0,) while the width is
            unknown

        Returns
        -------
        list of (n_clusters * (n_features + 1),) float64, the same vectors where there is
        nothing to match (no width yet, a vector without clusters)
        """
        from scipy.optimize import linear_sum_assignment

        k = self.n_clusters
        if not vectors or reference.size == 0 or any(v.size != reference.size
                                                     for v in vectors):
            return vectors
        ref_n, ref_c = _counts_centers(np.asarray(reference, dtype=np.float64).reshape(k, -1))
        if not ref_n.any():
            heaviest = max(vectors,
                           key=lambda v: float(_counts_centers(v.reshape(k, -1))[0].sum()))
            ref_n, ref_c = _counts_centers(heaviest.reshape(k, -1))
            if not ref_n.any():
                return vectors
        out = []
        for v in vectors:
            M = np.asarray(v, dtype=np.float64).reshape(k, -1)
            n, C = _counts_centers(M)
            if not n.any():
                out.append(v)
                continue
            cost = _sq_distances(C, ref_c)
            if not np.isfinite(cost).all():  # centers beyond 1e154: the same matching, scaled
                cost = _scaled_sq_distances(C, ref_c)
                cost[~np.isfinite(cost)] = np.finfo(np.float64).max
            cost[n <= 0, :] = 0.0
            cost[:, ref_n <= 0] = 0.0
            rows, cols = linear_sum_assignment(cost)
            N = np.empty_like(M)
            N[cols] = M[rows]
            out.append(N.ravel())
        return out

    # --- JSON ---------------------------------------------------------------------------

    def _parameters_json(self) -> dict:
        return {"n_features": self.n_features,
                "centers": None if self.centers is None else self.centers.tolist(),
                "counts": self.counts.tolist(),
                "buffer": [x.tolist() for x in self._buffer], "draws": self._draws}

    def _load_parameters(self, parameters: dict) -> None:
        """Load ``{"n_features", "centers", "counts", "buffer", "draws"}`` (each may be
        missing or null).

        Raises
        ------
        learning.errors.ParameterError
            Naming the key that is rejected.
        """
        known = {"n_features", "centers", "counts", "buffer", "draws"}
        unknown = set(parameters) - known
        if unknown:
            name = sorted(map(str, unknown))[0]
            raise ParameterError(name, f"unknown parameter {name!r} for KMeans; expected "
                                 f"{', '.join(sorted(known))}")
        draws = parameters.get("draws") or 0
        if isinstance(draws, bool) or not isinstance(draws, int) or draws < 0:
            raise ParameterError("draws", f"draws must be an integer >= 0, got {draws!r}")
        d = parameters.get("n_features")
        if d is None:
            if parameters.get("centers") or parameters.get("buffer"):
                raise ParameterError("n_features", "n_features is required with centers "
                                     "or buffer")
            self._draws = draws
            return
        k = self.n_clusters
        self._set_n_features(check_n_features(d))
        centers = load_matrix(parameters, "centers", (k, d), " (n_clusters x n_features)")
        counts = load_matrix(parameters, "counts", (k,), " (n_clusters)")
        if centers is not None:
            self.centers = centers
        if counts is not None:
            if np.any(counts < 0):
                raise ParameterError("counts", "counts must be >= 0")
            self.counts = counts
        buffer = parameters.get("buffer") or []
        if buffer:
            B = load_matrix({"buffer": buffer}, "buffer", (len(buffer), d),
                            " (records x n_features)")
            self._buffer = list(B)
        self._draws = draws
