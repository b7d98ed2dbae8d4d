"""The sharding strategies (papers/001 §III; :mod:`operators.sharding`) on small labelled
streams, in process; the job's deal is compared with these in test_sharding_flink.py."""

from __future__ import annotations

import pickle
from collections import Counter

import numpy as np
import orjson
import pytest

from flink_jobs.config import JobConfig
from flink_jobs.flink_run import config_from_args, parser
from operators.local import LocalNetwork
from operators.sharding import (EVERY, MAX_STRATA, MAX_STRATUM_CHARS, SHARDINGS, make_sharder,
                                stratum)


def _labelled(n: int, seed: int = 0, classes=(0, 1, 2), p=(0.6, 0.3, 0.1)) -> list[tuple[bool, bytes]]:
    rng = np.random.default_rng(seed)
    return [(True, orjson.dumps({"id": i, "features": rng.normal(size=3).tolist(),
                                 "label": int(c)}))
            for i, c in enumerate(rng.choice(classes, size=n, p=p))]


def _per_class(shares) -> list[Counter]:
    return [Counter(orjson.loads(v)["label"] for _, v in share) for share in shares]


def test_stratified_counts_per_class_differ_by_at_most_one_between_spokes():
    records = _labelled(1001, seed=3)
    sharder = make_sharder("stratified", 4)
    per = _per_class(sharder.shard(records))
    for label in (0, 1, 2):
        counts = [c[label] for c in per]
        assert max(counts) - min(counts) <= 1, (label, counts)
    assert sum(sharder.per_spoke) == sharder.records == 1001 and sharder.broadcast == 0
    # totals stay balanced too: the k-th label starts at spoke k mod n
    assert max(sharder.per_spoke) - min(sharder.per_spoke) <= 3


def test_stratified_keeps_a_bounded_deal_on_continuous_labels_and_ids():
    """A regression stream's labels are all new, and so are ids or junk in ``label``: past
    MAX_STRATA strata (and for labels too long to be classes) records are dealt in the
    unlabelled stratum, round-robin, so the deal's state (pickled in Flink, operator state
    in Java) stays bounded and the shares balanced."""
    rng = np.random.default_rng(1)
    sharder = make_sharder("stratified", 4)
    long, limit = "x" * (MAX_STRATUM_CHARS + 1), "y" * MAX_STRATUM_CHARS
    assert sharder.deal(True, orjson.dumps({"label": long})) == 0  # unlabelled: stratum 0
    assert sharder.deal(True, orjson.dumps({"label": limit})) == 1  # its own: stratum 1
    assert sharder.deal(True, orjson.dumps({"label": long + "z"})) == 1  # unlabelled again
    labels = rng.normal(size=5000)
    shares = sharder.shard([(True, orjson.dumps({"label": float(y)})) for y in labels])
    assert len(sharder._next) == MAX_STRATA
    assert long not in sharder._next and limit in sharder._next
    assert max(sharder.per_spoke) - min(sharder.per_spoke) <= 2
    # the labels past the cap are dealt in turn with the unlabelled records
    past = [i for i, share in enumerate(shares) for _, v in share
            if orjson.loads(v)["label"] in set(labels[MAX_STRATA - 2:].tolist())]
    assert sorted(Counter(past).values()) == [1000, 1000, 1001, 1001]
    # a label that has its stratum keeps it past the cap
    first = float(labels[0])
    assert sharder.deal(True, orjson.dumps({"label": first})) == (sharder._next[
        orjson.dumps(first).decode()] - 1) % 4


def test_random_shares_differ_per_class_while_stratified_do_not():
    """papers/001 §IV-D2: random assignment leaves some spokes short of a class."""
    records = _labelled(400, seed=5)
    random_per = _per_class(make_sharder("random", 4, seed=1).shard(records))
    spread = max(max(c[k] for c in random_per) - min(c[k] for c in random_per) for k in (0, 1, 2))
    assert spread > 1


def test_round_robin_balances_counts_and_forecasting_is_its_own_stratum():
    sharder = make_sharder("round-robin", 3)
    assert [sharder.deal(True, b"{}") for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    st = make_sharder("stratified", 3)
    # label 1 is the first stratum (starts at spoke 0), forecasting the second (spoke 1)
    assert st.deal(True, b'{"label": 1}') == 0
    assert st.deal(False, b'{"label": 1}') == 1  # a forecasting record's label is not used
    assert st.deal(True, b'{"label": "1"}') == 1  # the same stratum as 1 (as JSON_VALUE reads it)
    assert st.deal(True, b"not json") == 2  # unlabelled: the forecasting stratum


def test_stratum_is_the_label_as_sql_json_value_reads_it():
    assert stratum(b'{"label": 3}') == "3" and stratum(b'{"label": "cat"}') == "cat"
    assert stratum(b'{"label": 2.5}') == "2.5" and stratum(b'{"label": true}') == "true"
    assert stratum(b'{"label": [1]}') is None and stratum(b'[{"label": 1}]') is None
    assert stratum(b'{"features": [1]}') is None and stratum(b"\xff") is None


def test_partition_sharding_follows_the_kafka_partition():
    sharder = make_sharder("partition", 2)
    shares = sharder.shard([(True, b"{}")] * 6, partitions=[0, 1, 2, 3, 4, 5])
    assert [len(s) for s in shares] == [3, 3]


def _blobs(n_big: int, n_tiny: int, seed: int = 0) -> list[tuple[bool, bytes]]:
    """Two dense clusters and a tiny far-away one, interleaved."""
    rng = np.random.default_rng(seed)
    points = ([(rng.normal(0, 0.3, 4), 0) for _ in range(n_big)]
              + [(rng.normal(5, 0.3, 4), 1) for _ in range(n_big)]
              + [(rng.normal(40, 0.3, 4), 1) for _ in range(n_tiny)])
    order = rng.permutation(len(points))
    return [(True, orjson.dumps({"id": int(i), "features": points[i][0].tolist(),
                                 "label": points[i][1]})) for i in order]


def test_distribution_aware_sends_a_tiny_cluster_to_every_spoke():
    """papers/001 Fig. 6: a cluster with fewer records than spokes (in the warm-up) goes to
    every spoke; dense clusters are dealt round-robin; before the model is ready records
    are dealt stratified."""
    warm = _blobs(100, 2, seed=1)  # 202 training records: the warm-up
    sharder = make_sharder("distribution-aware", 4, warmup=202, clusters=3)
    before = sharder.shard(warm)
    assert sharder.ready and sharder.fits == 1 and sharder.broadcast == 0
    assert sorted(sharder.sizes.tolist()) == [2, 100, 100]
    assert sum(map(len, before)) == 202  # stratified while learning: each record once
    later = _blobs(50, 3, seed=2)
    shares = sharder.shard(later)
    tiny = {orjson.loads(v)["id"] for _, v in later if orjson.loads(v)["features"][0] > 20}
    for share in shares:  # every spoke got every record of the tiny cluster
        assert tiny <= {orjson.loads(v)["id"] for _, v in share}
    assert sharder.broadcast == 3 and sum(map(len, shares)) == 103 + 3 * 3
    dense = [sum(orjson.loads(v)["features"][0] < 20 for _, v in share) for share in shares]
    assert max(dense) - min(dense) <= 2  # two dense clusters, each dealt in turn
    # a forecasting record of the tiny cluster is predicted once
    far = orjson.dumps({"features": [40.0, 40.0, 40.0, 40.0]})
    assert sharder.deal(False, far) != EVERY


def test_distribution_aware_ignores_malformed_records_when_learning():
    """A record of another width or with non-numbers neither bends the clusters nor
    stops the stream: it is dealt stratified, once."""
    good = _blobs(60, 0, seed=4)
    bad = [(True, orjson.dumps({"id": -1, "features": [1e9] * 9, "label": 0})),
           (True, orjson.dumps({"id": -2, "features": ["x"], "label": 1})),
           (True, b"not json")]
    sharder = make_sharder("distribution-aware", 2, warmup=60, clusters=2)
    shares = sharder.shard(bad + good)
    assert sharder.ready and sharder.width == 4 and sharder.broadcast == 0
    assert sum(map(len, shares)) == 123
    clean = make_sharder("distribution-aware", 2, warmup=60, clusters=2)
    clean.shard(good)
    assert np.allclose(np.sort(sharder._centres, axis=0), np.sort(clean._centres, axis=0))


def test_distribution_aware_on_a_regression_stream_deals_instead_of_broadcasting():
    """papers/001 §V's twice-the-labels is for classes: on continuous labels it asked for
    as many clusters as records, every cluster sparse, every record to every spoke (2,000
    of 3,000 broadcast before the cap). Capped at one cluster per 2 records per spoke of
    the warm-up, records are dealt; a classification stream keeps twice its classes."""
    rng = np.random.default_rng(2)
    regression = [(True, orjson.dumps({"features": rng.normal(size=5).tolist(),
                                       "label": float(rng.normal())})) for _ in range(3000)]
    sharder = make_sharder("distribution-aware", 4)
    shares = sharder.shard(regression)
    assert sharder.ready and len(sharder.sizes) == 1000 // 8
    assert sharder.broadcast <= 100 and sum(map(len, shares)) == 3000 + 3 * sharder.broadcast
    assert max(sharder.per_spoke) - min(sharder.per_spoke) <= 40
    classes = make_sharder("distribution-aware", 4, warmup=300)
    classes.shard(_labelled(300, seed=3))
    assert len(classes.sizes) == 6  # 2 x 3 classes, under the cap of 300 // 8


def test_distribution_aware_holds_a_bounded_prefix_of_many_widths():
    """Before its first fit the sharder keeps records of every width until one has
    ``warmup``; a stream of ever-new widths (malformed, or variable-length features) no
    longer grows that prefix without bound, and a width that comes to dominate fits."""
    rng = np.random.default_rng(3)
    sharder = make_sharder("distribution-aware", 2, warmup=50, clusters=2)
    junk = [(True, orjson.dumps({"features": [1.0] * int(w), "label": 0}))
            for w in rng.integers(1, 60, size=2000)]
    shares = sharder.shard(junk)
    assert not sharder.ready and sum(map(len, shares)) == 2000
    assert len(sharder._window) == sharder.HOLD * 50 == sum(sharder._widths.values())
    sharder.shard(_blobs(25, 0, seed=4))  # 50 records of width 4
    assert sharder.ready and sharder.width == 4


def test_distribution_aware_refreshes_and_survives_pickling():
    records = _blobs(300, 0, seed=6)
    sharder = make_sharder("distribution-aware", 3, warmup=100, clusters=2, refresh=200)
    sharder.shard(records[:350])
    assert sharder.fits == 2
    copy = pickle.loads(pickle.dumps(sharder))
    rest = records[350:]
    assert copy.shard(rest) == sharder.shard(rest) and copy.fits == sharder.fits == 3


def test_batches_do_not_change_the_deal():
    records = _blobs(200, 2, seed=8)
    whole = make_sharder("distribution-aware", 3, warmup=150)
    one = make_sharder("distribution-aware", 3, warmup=150)
    expected = whole.shard(records)
    parts = [[] for _ in range(3)]
    for i in range(0, len(records), 37):
        for spoke, share in enumerate(one.shard(records[i:i + 37])):
            parts[spoke] += share
    assert parts == expected


def test_the_in_process_kernel_deals_and_counts_exactly():
    """LocalNetwork.stream deals as the job does: every record fitted once (a sparse
    cluster's once per spoke), counts exact per spoke."""
    net = LocalNetwork(n_spokes=3, n_hubs=1, sharding="stratified")
    net.request({"id": 0, "request": "Create", "learner": {"name": "PA", "parameters":
                 {"n_features": 3, "classes": [0, 1, 2]}},
                 "trainingConfiguration": {"protocol": "Asynchronous", "miniBatchSize": 4}})
    records = _labelled(300, seed=9)
    for i in range(0, 300, 50):
        net.stream(records[i:i + 50])
    net.request({"id": 0, "request": "Query", "requestId": "q"})
    final = net.outputs["responses"][-1]
    assert final["fitted"] == 300
    assert final["fittedPerSpoke"] == net.sharder.per_spoke
    assert max(net.sharder.per_spoke) - min(net.sharder.per_spoke) <= 3


def test_sharding_settings_are_checked_and_reach_the_job():
    assert JobConfig("k:9092").sharding == "random" and "partition" in SHARDINGS
    with pytest.raises(ValueError, match="sharding must be one of"):
        JobConfig("k:9092", sharding="modulo")
    with pytest.raises(ValueError, match="max_batch_delay_ms > 0"):
        JobConfig("k:9092", sharding="stratified", max_batch_delay_ms=0)
    JobConfig("k:9092", sharding="partition", max_batch_delay_ms=0)  # computed in SQL
    with pytest.raises(ValueError, match="sharding_warmup must be >= 2"):
        JobConfig("k:9092", sharding_warmup=1)
    cfg = config_from_args(parser().parse_args(
        ["--bootstrap-servers", "k:9092", "--sharding", "distribution-aware",
         "--sharding-warmup", "500", "--sharding-clusters", "8", "--sharding-refresh", "10000"]))
    assert (cfg.sharding, cfg.sharding_warmup, cfg.sharding_clusters, cfg.sharding_refresh) == (
        "distribution-aware", 500, 8, 10000)
    with pytest.raises(ValueError, match="unknown sharding"):
        make_sharder("modulo", 2)
