"""Data sharding: which spoke gets each data record (papers/001 §III).

papers/001 (Provatas et al.) asks whether the way records are assigned to workers changes
how much asynchronous parameter-server training wobbles, and proposes two systematic
assignments. The job offers five, chosen per job (:attr:`flink_jobs.config.JobConfig.sharding`,
``--sharding``) and the same on the in-process kernel (:class:`operators.local.LocalNetwork`):

``random``
    Each record to a spoke drawn uniformly at random: papers/001's baseline, the job's
    default (its SQL draws ``RAND_INTEGER``).
``round-robin``
    Records dealt in turn, 0, 1, …, n-1, 0, …: the paper's "mod" assignment (§III-C),
    which balances counts exactly (the least-loaded spoke is always next).
``stratified``
    Round-robin within each label (papers/001 §III-A, Fig. 4), so that every spoke sees
    every class in proportion: per label, the counts of any two spokes differ by at most
    one. The k-th label seen starts at spoke ``k mod n`` (the paper starts every class at
    worker 0; starting them in turn keeps the totals balanced too). Records without a
    scalar ``label`` and forecasting records are one more stratum: round-robin. So are
    the labels past the first :data:`MAX_STRATA` strata and labels of more than
    :data:`MAX_STRATUM_CHARS` characters: the deal's state stays bounded on a stream of
    continuous labels (regression: every label new) or of ids.
``distribution-aware``
    papers/001 §III-B, Fig. 6: flatten each record's features, project them with PCA
    (the components keeping 95% of the variance) and cluster them with k-means
    (``clusters``; 0: twice the number of labels seen, the paper's recommendation, §V, but
    at most one cluster per 2 records per spoke of the prefix, see
    :class:`DistributionAwareSharder`; at most 150 iterations, §III-C). Records of a
    dense cluster are dealt round-robin within it; a *sparse* cluster, one with fewer
    records than there are spokes (in the prefix it was learned on), goes to every spoke
    (training records only: a forecasting record is predicted once). The model is learned on a warm-up prefix of ``warmup``
    training records and, with ``refresh`` > 0, learned again every ``refresh`` training
    records on the latest ``warmup``; records before it is ready are dealt
    ``stratified``, and so are records whose features are not a numeric vector of the
    width the model was learned on (a malformed record cannot bend the clusters).
``partition``
    The Kafka partition a record came from, modulo the number of spokes: for producers
    that already shard upstream (their partitioner decides).

A Kafka message is dealt as one unit: a message holding a JSON array of records goes to
one spoke (as unlabelled for ``stratified``, as malformed for ``distribution-aware``).

In the Flink job ``random`` and ``partition`` are computed in the source's SQL,
``round-robin`` and ``stratified`` in Java (``omldm.RecordBatcher``, with the label read
by ``JSON_VALUE``), so records still cross into Python once; ``distribution-aware`` needs
numpy and scikit-learn, so it runs these classes in one Python operator before the spokes
(a second crossing, per batch). Each Kafka source subtask deals on its own: with one
partition (the job's topics have one) the deal is exactly the one described here.

This module is plain Python (no PyFlink): the in-process kernel and the job's Python
sharding operator (:class:`operators.shard.ShardFunction`) run the same code.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Any, Iterable, Sequence

import numpy as np
import orjson

__all__ = ["SHARDINGS", "EVERY", "Sharder", "RandomSharder", "RoundRobinSharder",
           "StratifiedSharder", "DistributionAwareSharder", "PartitionSharder", "make_sharder",
           "stratum", "MAX_STRATA", "MAX_STRATUM_CHARS"]

#: the sharding strategies, by name (``JobConfig.sharding``)
SHARDINGS: tuple[str, ...] = ("random", "round-robin", "stratified", "distribution-aware",
                              "partition")
#: what :meth:`Sharder.deal` returns for a record that goes to every spoke
EVERY = -1
#: label strata a stratified deal keeps apart at most (``omldm.RecordBatcher`` too): a new
#: label once this many strata exist is dealt in the unlabelled stratum
MAX_STRATA = 1000
#: a label of more characters (Unicode code points of its text) is dealt in the unlabelled
#: stratum (as :data:`learning.layout.MAX_LABEL_CHARS`, past which spokes refuse it)
MAX_STRATUM_CHARS = 1000


def _record(value: bytes | str | memoryview) -> dict | None:
    """One Kafka record's JSON object, or None (not JSON, or not one object)."""
    try:
        rec = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    return rec if isinstance(rec, dict) else None


def _label(rec: dict | None) -> str | None:
    label = None if rec is None else rec.get("label")
    if label is None or isinstance(label, (list, dict)):
        return None
    return label if isinstance(label, str) else orjson.dumps(label).decode()


def stratum(value: bytes | str | memoryview) -> str | None:
    """The label of one Kafka record as the job's SQL reads it (``JSON_VALUE(v,
    '$.label')``): the JSON text of a scalar label (``"1"``, ``"2.5"``, ``"true"``; a
    string label as itself), None for no label, a non-scalar one, a JSON array of records
    or bytes that are not JSON."""
    return _label(_record(value))


class Sharder:
    """Assigns data records to spokes.

    Parameters
    ----------
    n_spokes : int
        Spokes to deal to, >= 1.

    Attributes
    ----------
    records : int
        Records dealt (training and forecasting).
    broadcast : int
        Records sent to every spoke (``distribution-aware``'s sparse clusters).
    per_spoke : list[int]
        Records each spoke got, broadcast copies included.
    fits : int
        Times the sharder learned its clusters (``distribution-aware``; 0 for the others).

    Raises
    ------
    ValueError
        For ``n_spokes`` < 1.
    """

    name = ""
    fits = 0

    def __init__(self, n_spokes: int) -> None:
        if n_spokes < 1:
            raise ValueError(f"n_spokes must be >= 1, got {n_spokes}")
        self.n = n_spokes
        self.records = 0
        self.broadcast = 0
        self.per_spoke = [0] * n_spokes

    def deal(self, train: bool, value: bytes, partition: int = 0) -> int:
        """The spoke index of one record (``value``: the Kafka record's bytes), or
        :data:`EVERY`."""
        raise NotImplementedError

    def shard(self, records: Iterable[tuple[bool, bytes]],
              partitions: Sequence[int] | None = None) -> list[list[tuple[bool, bytes]]]:
        """Deal a batch: ``records`` (``(training?, value)``, in arrival order) into one
        list per spoke, each in arrival order; ``partitions``: the Kafka partition of each
        record (``partition`` only)."""
        out: list[list[tuple[bool, bytes]]] = [[] for _ in range(self.n)]
        for i, (train, value) in enumerate(records):
            self._put(out, (train, value), self.deal(train, value,
                                                     partitions[i] if partitions else 0))
        return out

    def _put(self, out: list[list], item: tuple[bool, bytes], spoke: int) -> None:
        self.records += 1
        if spoke == EVERY:
            self.broadcast += 1
            for i, part in enumerate(out):
                part.append(item)
                self.per_spoke[i] += 1
        else:
            out[spoke].append(item)
            self.per_spoke[spoke] += 1

    def stats(self) -> dict[str, Any]:
        """``{"sharding", "records", "broadcast", "perSpoke"}`` (records)."""
        return {"sharding": self.name, "records": self.records, "broadcast": self.broadcast,
                "perSpoke": list(self.per_spoke)}


class RandomSharder(Sharder):
    """Each record to a spoke drawn uniformly at random (seeded): papers/001's baseline."""

    name = "random"

    def __init__(self, n_spokes: int, seed: int = 0) -> None:
        super().__init__(n_spokes)
        # numpy's generator: one draw at a time gives what ``integers(0, n, size)`` gives
        self._rng = np.random.default_rng(seed)

    def deal(self, train: bool, value: bytes, partition: int = 0) -> int:
        return int(self._rng.integers(self.n))


class StratifiedSharder(Sharder):
    """Round-robin within each label (papers/001 §III-A, Fig. 4); forecasting records and
    records without a scalar label as one more stratum. The k-th stratum seen starts at
    spoke ``k mod n``. A label that would be stratum :data:`MAX_STRATA` + 1 or later, or
    has more than :data:`MAX_STRATUM_CHARS` characters, is dealt in the unlabelled stratum
    (at most :data:`MAX_STRATA` + 1 strata are kept). ``omldm.RecordBatcher`` (Java) deals
    the same way."""

    name = "stratified"

    def __init__(self, n_spokes: int) -> None:
        super().__init__(n_spokes)
        self._next: dict[str | None, int] = {}  # stratum -> next spoke

    def deal_stratum(self, key: str | None) -> int:
        """The next spoke of stratum ``key`` (None: the unlabelled stratum)."""
        nxt = self._next.get(key)
        if nxt is None:
            if key is not None and (len(self._next) >= MAX_STRATA
                                    or len(key) > MAX_STRATUM_CHARS):
                return self.deal_stratum(None)
            nxt = len(self._next) % self.n
        self._next[key] = (nxt + 1) % self.n
        return nxt

    def deal(self, train: bool, value: bytes, partition: int = 0) -> int:
        return self.deal_stratum(stratum(value) if train else None)


class RoundRobinSharder(StratifiedSharder):
    """Records dealt in turn (papers/001's "mod" assignment): one stratum for all."""

    name = "round-robin"

    def deal(self, train: bool, value: bytes, partition: int = 0) -> int:
        return self.deal_stratum(None)


class PartitionSharder(Sharder):
    """A spoke per Kafka partition: ``partition mod n``."""

    name = "partition"

    def deal(self, train: bool, value: bytes, partition: int = 0) -> int:
        return partition % self.n


class DistributionAwareSharder(StratifiedSharder):
    """papers/001 §III-B, Fig. 6 on a stream: PCA then k-means learned on a warm-up prefix;
    dense clusters dealt round-robin, sparse ones (fewer records than spokes in that
    prefix) to every spoke; ``stratified`` before the model is ready and for records it
    cannot place.

    Parameters
    ----------
    n_spokes : int
    warmup : int
        Training records the model is learned on (>= 2).
    clusters : int
        Clusters of k-means; 0: twice the number of labels seen in the prefix (at least 2),
        papers/001 §V's recommendation, but at most ``prefix // (2 n)`` (``n`` spokes), so
        that an average cluster holds 2 records per spoke and a sparse one (fewer records
        than spokes, sent to every spoke) stays the exception: a regression stream's
        labels are all new, and twice their number would make every cluster sparse and
        send every record to every spoke. Never more than the distinct records learned on.
    refresh : int
        Learn the model again every ``refresh`` training records after the first, on the
        latest ``warmup``; 0: never.
    seed : int
        Seed of k-means.

    Attributes
    ----------
    fits : int
        Times the model was learned.
    sizes : numpy.ndarray or None
        (clusters,) int64: records of each cluster in the prefix the model was learned on.

    Raises
    ------
    ValueError
        For ``warmup`` < 2, ``clusters`` < 0 or ``refresh`` < 0.
    """

    name = "distribution-aware"
    #: the share of the variance the PCA projection keeps (papers/001 §III-B: "a summarized
    #: version of the data set with minimal loss")
    VARIANCE = 0.95
    #: k-means' iteration cap (papers/001 §III-C: T = 150)
    MAX_ITER = 150
    #: before the first fit, the records of every width are kept until one width has
    #: ``warmup``, but no more than ``HOLD * warmup`` records in all (the oldest go first)
    HOLD = 4

    def __init__(self, n_spokes: int, warmup: int = 1000, clusters: int = 0, refresh: int = 0,
                 seed: int = 0) -> None:
        super().__init__(n_spokes)
        if warmup < 2 or clusters < 0 or refresh < 0:
            raise ValueError(f"warmup must be >= 2, clusters and refresh >= 0; got warmup="
                             f"{warmup}, clusters={clusters}, refresh={refresh}")
        self.warmup, self.clusters, self.refresh, self.seed = warmup, clusters, refresh, seed
        # (features, stratum) of the training records to learn on: before the first fit
        # the latest ``HOLD * warmup`` of every width (the fit takes the first width to
        # have ``warmup`` records among them); after it, the latest ``warmup`` of the
        # model's width
        self._window: deque = deque()
        self._widths: Counter = Counter()
        self._since = 0  # training records since the last fit
        self.fits = 0
        self.width: int | None = None
        self.sizes: np.ndarray | None = None
        self._mean = self._components = self._centres = self._centre_norms = None
        self._dense: np.ndarray | None = None
        self._cluster_next: list[int] = []

    @property
    def ready(self) -> bool:
        """Whether the model has been learned."""
        return self._centres is not None

    def _features(self, value: bytes) -> tuple[np.ndarray | None, str | None]:
        """(flattened float64 features or None, stratum) of one record."""
        rec = _record(value)
        if rec is None:
            return None, None
        key = _label(rec)
        try:
            x = np.asarray(rec.get("features"), dtype=np.float64).ravel()
        except (TypeError, ValueError):
            return None, key
        if x.size == 0 or not np.isfinite(x).all():
            return None, key
        return x, key

    def _fit(self) -> None:
        """papers/001 Fig. 6 lines 8-10 on the window: PCA, then k-means."""
        from sklearn.cluster import KMeans
        from sklearn.decomposition import PCA

        # before the first fit, the first width to reach ``warmup`` records (records of
        # other widths stay out); on a refresh the window holds the model's width only
        width = self._widths.most_common(1)[0][0] if self._widths else self.width
        rows = [(x, key) for x, key in self._window if len(x) == width][-self.warmup:]
        X = np.vstack([x for x, _ in rows])
        labels = {key for _, key in rows if key is not None}
        k = self.clusters or max(2, min(2 * len(labels), len(rows) // (2 * self.n)))
        k = max(1, min(k, len(np.unique(X, axis=0))))
        pca = (PCA(n_components=self.VARIANCE, svd_solver="full")
               if X.shape[1] > 1 and len(X) > 1 else None)
        Z = pca.fit_transform(X) if pca is not None else X
        kmeans = KMeans(n_clusters=k, n_init=3, max_iter=self.MAX_ITER, random_state=self.seed)
        ids = kmeans.fit_predict(Z)
        # only arrays are kept (small to checkpoint); the projection and the nearest centre
        # are computed in numpy: sklearn's checks cost ~170 µs a call
        self.width = width
        self._mean = pca.mean_ if pca is not None else np.zeros(width)
        self._components = pca.components_.T if pca is not None else np.eye(width)
        self._centres = kmeans.cluster_centers_
        self._centre_norms = (self._centres ** 2).sum(axis=1)
        self._window = deque(rows if self.refresh else (), maxlen=self.warmup)
        self._widths.clear()
        self.sizes = np.bincount(ids, minlength=k).astype(np.int64)
        self._dense = self.sizes >= self.n  # papers/001 Fig. 6 line 15 (sparse: < n)
        self._cluster_next = [c % self.n for c in range(k)]
        self.fits += 1
        self._since = 0

    def _cluster_ids(self, X: np.ndarray) -> np.ndarray:
        """(rows,) int: the nearest centre of each row of X (rows, width) after the PCA
        projection (what ``kmeans.predict(pca.transform(X))`` gives)."""
        Z = (X - self._mean) @ self._components
        return np.argmin(self._centre_norms - 2.0 * Z @ self._centres.T, axis=1)

    def shard(self, records: Iterable[tuple[bool, bytes]],
              partitions: Sequence[int] | None = None) -> list[list[tuple[bool, bytes]]]:
        """Deal a batch (see :meth:`Sharder.shard`); the clusters of the batch's records
        are predicted in one call."""
        records = list(records)
        out: list[list[tuple[bool, bytes]]] = [[] for _ in range(self.n)]
        start = 0
        while start < len(records):
            # the records up to the next (re)fit are placed with the same model
            end, placed = start, []
            fitting = False
            while end < len(records) and not fitting:
                train, value = records[end]
                x, key = self._features(value)
                placed.append((x, key))
                if train and x is not None and not self.ready:
                    self._window.append((x, key))
                    self._widths[len(x)] += 1
                    fitting = self._widths[len(x)] >= self.warmup
                    if len(self._window) > self.HOLD * self.warmup:  # many widths: bounded
                        self._widths[len(self._window.popleft()[0])] -= 1
                elif train and x is not None and self.refresh and len(x) == self.width:
                    self._window.append((x, key))
                    self._since += 1
                    fitting = self._since >= self.refresh
                end += 1
            self._place(records[start:end], placed, out)
            if fitting:
                self._fit()
            start = end
        return out

    def _place(self, records: list[tuple[bool, bytes]], placed: list, out: list[list]) -> None:
        ids = None
        if self.ready:
            rows = [i for i, (x, _) in enumerate(placed) if x is not None and len(x) == self.width]
            if rows:
                ids = dict(zip(rows, self._cluster_ids(np.vstack([placed[i][0] for i in rows]))
                               .tolist()))
        for i, item in enumerate(records):
            train = item[0]
            c = ids.get(i) if ids else None
            if c is None:  # not ready, or a record it cannot place: stratified
                spoke = self.deal_stratum(placed[i][1] if train else None)
            elif train and not self._dense[c]:  # papers/001 Fig. 6 lines 22-24
                spoke = EVERY
            else:  # lines 15-21: round-robin within the cluster
                spoke = self._cluster_next[c]
                self._cluster_next[c] = (spoke + 1) % self.n
            self._put(out, item, spoke)

    def deal(self, train: bool, value: bytes, partition: int = 0) -> int:
        out = self.shard([(train, value)])
        return EVERY if sum(map(len, out)) > 1 else next(i for i, p in enumerate(out) if p)

    def stats(self) -> dict[str, Any]:
        """:meth:`Sharder.stats` plus ``ready``, ``fits``, ``clusters`` (None before the
        first fit) and ``sparseClusters``."""
        return {**super().stats(), "ready": self.ready, "fits": self.fits,
                "clusters": None if self.sizes is None else len(self.sizes),
                "sparseClusters": None if self._dense is None else int((~self._dense).sum())}


def make_sharder(name: str, n_spokes: int, *, seed: int = 0, warmup: int = 1000,
                 clusters: int = 0, refresh: int = 0) -> Sharder:
    """The :class:`Sharder` of strategy ``name`` (one of :data:`SHARDINGS`); ``seed`` for
    ``random`` and ``distribution-aware``'s k-means, ``warmup``/``clusters``/``refresh``
    for ``distribution-aware``.

    Raises
    ------
    ValueError
        For an unknown name or invalid options.
    """
    if name == "random":
        return RandomSharder(n_spokes, seed)
    if name == "round-robin":
        return RoundRobinSharder(n_spokes)
    if name == "stratified":
        return StratifiedSharder(n_spokes)
    if name == "distribution-aware":
        return DistributionAwareSharder(n_spokes, warmup, clusters, refresh, seed)
    if name == "partition":
        return PartitionSharder(n_spokes)
    raise ValueError(f"unknown sharding {name!r}; known: {', '.join(SHARDINGS)}")
