"""A spoke whose records ran out (the end of a file, an idle Kafka partition) acts as at a
Query after ``JobConfig.idle_after_ms`` without data (``SpokeKernel.on_lull``): it fits what
it holds, pushes it, then pushes as idle, so that a synchronous round never waits for it
and the other spokes run to the end of their records without anyone sending a Query.

On the Flink job with ``partition`` sharding and the job's one-partition topics, spoke 0
gets every record and spoke 1 none: BSP's first round waited for spoke 1 for good, its
forecasting records unanswered, until a Query came."""

from __future__ import annotations

import time

import numpy as np
import pytest

from flink_jobs.session import Session, local_config
from learning.datasets import shuttle
from operators.local import LocalNetwork


def _create(protocol: str, extra: dict | None = None) -> dict:
    return {"id": 0, "request": "Create", "requestId": "lull",
            "preProcessors": [{"name": "StandardScaler"}],
            "learner": {"name": "PA", "parameters": {"n_features": 2}},
            "trainingConfiguration": {"protocol": protocol, "miniBatchSize": 4,
                                      **(extra or {})}}


def _records(n: int) -> list:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 2))
    return [(i % 5 != 4, {"id": i, "features": X[i].tolist(), "label": int(X[i, 0] > 0)})
            for i in range(n)]


@pytest.mark.parametrize("protocol, extra", [("Synchronous", {}), ("SSP", {"staleness": 1}),
                                             ("TensAIR", {"maxStaleness": 2})])
def test_the_spokes_run_to_the_end_of_their_records_after_two_quiet_lulls(protocol, extra):
    net = LocalNetwork(n_spokes=3, n_hubs=1, sharding="partition")
    net.request(_create(protocol, extra))
    recs = _records(303)  # spoke 0 gets 9 in 10, spoke 1 the rest, spoke 2 nothing
    net.stream(recs, partitions=[1 if i % 10 == 0 else 0 for i in range(len(recs))])

    def counted() -> int:
        return sum(s.fitted + s.predicted for s in net.spokes)

    assert counted() < 100  # the rounds wait for spoke 2
    net.lull()  # data came since the last check: nothing happens
    assert counted() < 100
    for _ in range(6):
        net.lull()
    assert counted() == len(recs)
    assert all(not s._X for s in net.spokes)  # partial mini-batches fitted too
    net.request({"id": 0, "request": "Query", "requestId": "q"})
    q = net.outputs["responses"][-1]
    assert q["fitted"] + q["predicted"] == len(recs) and q["service"]["lulls"] > 0


def test_a_quiet_pipeline_is_left_alone_after_its_idle_push():
    net = LocalNetwork(n_spokes=2, n_hubs=1)
    net.request(_create("Synchronous"))
    net.stream(_records(100))
    for _ in range(4):
        net.lull()
    sent = net.delivered
    for _ in range(5):  # an idle job: no push every interval
        net.lull()
    assert net.delivered == sent
    net.stream(_records(40))  # the stream comes back: the spokes rejoin the rounds
    for _ in range(4):
        net.lull()
    net.request({"id": 0, "request": "Query", "requestId": "q"})
    assert net.outputs["responses"][-1]["fitted"] + net.outputs["responses"][-1][
        "predicted"] == 140


def test_a_busy_spoke_does_nothing_at_its_lull_timer():
    net = LocalNetwork(n_spokes=2, n_hubs=1)
    net.request(_create("Synchronous"))
    recs = _records(400)
    for lo in range(0, 400, 50):
        net.stream(recs[lo:lo + 50])
        net.lull()  # data came since every previous check
    assert all(k.lulls == 0 for k in net.spoke_kernels)


def test_on_flink_a_spoke_without_records_no_longer_holds_the_others(broker):
    X, y = shuttle()
    cfg = local_config(broker.bootstrap_servers, topic_prefix="lulls-", spokes=2,
                       sharding="partition", idle_after_ms=1000)
    create = {"id": 0, "request": "Create", "requestId": "lull-bsp",
              "preProcessors": [{"name": "StandardScaler"}],
              "learner": {"name": "PA", "parameters": {"n_features": 9}},
              "trainingConfiguration": {"protocol": "Synchronous", "miniBatchSize": 16}}
    with Session(cfg, "lulls") as s:
        assert s.request(create, timeout=120)["status"] == "ok"
        _, n_train, n_fore = s.stream(X[:2000], y[:2000])
        time.sleep(20)  # no Query meanwhile: only the lulls can close the rounds
        q = s.query(0, timeout=60)  # one Query closes one round at most (README)
    assert q["fitted"] == n_train and q["predicted"] == n_fore
    assert q["fittedPerSpoke"] == [n_train, 0]  # one partition: spoke 1 got nothing
    assert q["service"]["lulls"] > 0 and 1 in q["protocol"]["idleSpokes"]
    assert q["prequentialAccuracy"] > 0.9
