"""The sharding operator: deals record batches to spokes in Python, for the strategies the
job cannot compute in SQL or Java (``distribution-aware``, papers/001 §III-B: PCA and
k-means need numpy and scikit-learn).

Input: the batches of ``omldm.RecordBatcher`` (every record under one key, so that one
:class:`~operators.sharding.Sharder` sees the whole stream in arrival order; the key is
stripped by PyFlink, the value is the batch's bytes).
Output: ``Row(spoke key INT, batch BYTES)``, one batch per spoke that got records, each in
arrival order (:func:`middleware.codec.record_batch`), keyed downstream in Java. A record
of a sparse cluster is in every spoke's batch.

The sharder (its PCA/k-means model, deal positions and warm-up window) lives in the key's
``ValueState`` and is handed to it after every batch when state must persist
(:attr:`flink_jobs.config.JobConfig.persist_state`), as spokes do: a restore resumes the
deal where the checkpoint left it, with the same clusters. The cost is a second crossing
into Python per batch plus the sharder's work per record (docs/performance.md).
"""

from __future__ import annotations

from pyflink.common import Row, Types
from pyflink.datastream import KeyedProcessFunction
from pyflink.datastream.state import ValueStateDescriptor

from middleware import codec
from operators.sharding import Sharder, make_sharder
from operators.snapshot import Snapshot

__all__ = ["ShardFunction"]


class ShardFunction(KeyedProcessFunction):
    """The Flink host of a :class:`~operators.sharding.Sharder`.

    Parameters
    ----------
    spoke_keys : list[int]
        The key that lands on spoke subtask i, for each i (:func:`operators.routing.hub_keys`).
    sharding : str
        A strategy of :data:`operators.sharding.SHARDINGS`.
    options : dict
        Options of :func:`operators.sharding.make_sharder` (``warmup``, ``clusters``,
        ``refresh``, ``seed``).
    persist : bool
        Hand the sharder to keyed state after every batch.
    metrics : bool
        Register Flink counters ``omldm.shardedRecords``, ``omldm.shardedBroadcast``
        (records sent to every spoke) and ``omldm.shardingFits`` (times the clusters were
        learned).
    """

    def __init__(self, spoke_keys: list[int], sharding: str, options: dict,
                 persist: bool = True, metrics: bool = True) -> None:
        make_sharder(sharding, len(spoke_keys), **options)  # fail at build time, not on a worker
        self.spoke_keys = spoke_keys
        self.sharding = sharding
        self.options = options
        self.persist = persist
        self.metrics_on = metrics

    def open(self, runtime_context) -> None:
        self.state = runtime_context.get_state(
            ValueStateDescriptor("sharder", Types.PICKLED_BYTE_ARRAY()))
        self.sharder: Sharder | None = None
        self.counters = None
        if self.metrics_on:
            group = runtime_context.get_metrics_group().add_group("omldm")
            self.counters = {name: group.counter(name) for name in
                             ("shardedRecords", "shardedBroadcast", "shardingFits")}
        self.seen = {"shardedRecords": 0, "shardedBroadcast": 0, "shardingFits": 0}

    def _sharder(self) -> Sharder:
        if self.sharder is None:
            saved = self.state.value() if self.persist else None
            self.sharder = saved.kernel if saved is not None else make_sharder(
                self.sharding, len(self.spoke_keys), **self.options)
            self.snapshot = Snapshot(self.sharder)
        return self.sharder

    def process_element(self, value, ctx):
        sharder = self._sharder()
        shares = sharder.shard(codec.read_batch(bytes(value)))
        if self.persist:
            self.state.update(self.snapshot)
        if self.counters is not None:
            now = {"shardedRecords": sharder.records, "shardedBroadcast": sharder.broadcast,
                   "shardingFits": sharder.fits}
            for name, count in now.items():
                if count > self.seen[name]:
                    self.counters[name].inc(count - self.seen[name])
                    self.seen[name] = count
        for key, share in zip(self.spoke_keys, shares):
            if share:
                yield Row(key, codec.record_batch(share))
