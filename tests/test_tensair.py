"""TensAIR (papers/000 Algorithm 1, §III-B, §III-C) on the in-process kernel: replicas
exchanging their updates directly over sibling channels, no parameter server in the data
path."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from learning.errors import RequestError
from learning.protocols import PROTOCOLS, make_hub, make_spoke
from learning.protocols.tensair import TensAIRSpoke, staleness_summary
from learning.requests import parse_request
from operators.local import LocalNetwork

D = 4


def create(protocol: str = "TensAIR", learner: dict | None = None, **config) -> dict:
    return {"id": 3, "request": "Create", "requestId": "c",
            "learner": learner or {"name": "PARegressor", "parameters": {"n_features": D}},
            "trainingConfiguration": {"protocol": protocol, "miniBatchSize": 1,
                                      "miniBatches": 1, **config}, }


def network(k: int, req: dict | None = None, **kw) -> LocalNetwork:
    r = parse_request(req or create())
    return LocalNetwork([make_spoke(r) for _ in range(k)], [make_hub(r)], network=r.id, **kw)


def regression(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, D))
    return X, X @ rng.normal(size=D) + 0.3 + 0.05 * rng.normal(size=n)


def train(net: LocalNetwork, spoke: int, x, y) -> None:
    net.feed(spoke, lambda: net.spokes[spoke].on_train(list(map(float, x)), float(y)))


def test_registered_under_both_names():
    assert PROTOCOLS["TensAIR"] == PROTOCOLS["Decentralized"]
    assert PROTOCOLS["TensAIR"][0] is TensAIRSpoke


def test_trees_are_refused_at_create():
    with pytest.raises(RequestError) as e:
        parse_request(create(learner={"name": "HoeffdingTree"}))
    assert e.value.code == "unsupported_pairing"
    assert e.value.field == "trainingConfiguration.protocol"


def test_parameters_are_validated():
    with pytest.raises(RequestError) as e:
        parse_request(create(maxGradBuffer=0))
    assert e.value.field == "trainingConfiguration.maxGradBuffer"
    with pytest.raises(RequestError) as e:
        parse_request(create(updateScaling="half"))
    assert e.value.field == "trainingConfiguration.updateScaling"


@pytest.mark.parametrize("buffer", [1, 4])
@pytest.mark.parametrize("k", [2, 4])
def test_replicas_converge_to_the_same_model(k, buffer):
    """Every replica ends as the start plus the sum of every replica's updates, whatever
    the order they came in: once the stream stops and the messages drain, the spread is
    rounding only."""
    pa = {"name": "PARegressor", "hyperParameters": {"C": 0.1}, "parameters": {"n_features": D}}
    net = network(k, create(maxGradBuffer=buffer, learner=pa), shuffle=True, duplicate=0.2,
                  seed=k)
    X, y = regression(400)
    for i, (x, t) in enumerate(zip(X, y)):
        train(net, i % k, x, t)
        if i % 7 == 0:
            net.run()
    q = net.query()  # sends the partial buffers
    q = net.query()
    proto = q["protocol"]
    assert proto["spread"] < 1e-9
    assert proto["updates"] == 400 and proto["updatesApplied"] == (k - 1) * proto["updatesSent"]
    w = np.asarray(q["model"]["params"])
    mse = float(np.mean((np.hstack([X, np.ones((400, 1))]) @ w - y) ** 2))
    # the replicas learned the problem together (with C = 1, stale updates overshoot: at
    # k = 4, maxGradBuffer = 4 the error was 6x the variance)
    assert mse < 0.05 * float(np.var(y))
    for s in net.spokes:
        assert s.applied == [400 // k] * k


def test_staleness_is_what_algorithm_1_implies_for_figure_2():
    """papers/000 Fig. 2: model 0 fits blue then yellow, model 1 green, model 2 red, all
    before any update arrives; then every update is delivered in sending order."""
    net = network(3)
    X, y = regression(4)
    train(net, 1, X[0], y[0])  # green
    train(net, 2, X[1], y[1])  # red
    train(net, 0, X[2], y[2])  # blue
    train(net, 0, X[3], y[3])  # yellow
    net.run()
    # model 0 applies green with G_0 = {blue, yellow}, G_1 = {}: 2; then red: 3 (§III-B)
    assert net.spokes[0].staleness == Counter({2: 1, 3: 1})
    # model 1 applies red ({green} vs {}), blue ({green, red} vs {}), yellow
    # ({green, red, blue} vs {blue})
    assert net.spokes[1].staleness == Counter({1: 1, 2: 2})
    assert net.spokes[2].staleness == Counter({1: 1, 2: 2})
    q = net.query()
    assert q["protocol"]["staleness"] == {"count": 8, "mean": 15 / 8, "p95": 3, "max": 3}
    assert [s["staleness"]["max"] for s in q["spokes"]] == [3, 2, 2]


def test_a_buffer_sends_the_sum_of_its_updates_with_the_clock_before_them():
    net = network(2, create(maxGradBuffer=3))
    X, y = regression(4)
    for i in range(3):
        train(net, 0, X[i], y[i])
    assert net.spokes[0].updates_sent == 1
    train(net, 1, X[3], y[3])
    net.run()
    # spoke 1 applies 3 updates made from G_0 = {} while it had applied {its own}: 1
    assert net.spokes[1].staleness == Counter({1: 1}) and net.spokes[1].applied == [3, 1]
    assert net.spokes[0].applied == [3, 0]  # spoke 1's single update is still buffered


def test_max_staleness_makes_the_replica_ahead_wait_for_the_slowest():
    X, y = regression(40)

    def run(bound):
        extra = {} if bound is None else {"maxStaleness": bound}
        net = network(2, create(**extra))
        for i in range(10):  # spoke 0 races ahead; spoke 1 fits one record per 5 of spoke 0
            train(net, 0, X[i], y[i])
            if i % 5 == 4:
                train(net, 1, X[20 + i], y[20 + i])
            net.run()
        return net

    free, bounded = run(None), run(1)
    assert free.spokes[0].waits == 0 and free.spokes[0].applied == [10, 2]
    s0 = bounded.spokes[0]
    assert s0.waits > 0 and s0.max_lead <= 1 and bounded.paused(0)
    assert s0.applied[0] - s0.applied[1] <= 1 + 1  # made one more, waiting to go on
    stale_free = max(free.spokes[1].staleness)
    stale_bounded = max(bounded.spokes[1].staleness)
    assert stale_bounded < stale_free
    # the end of the stream: a Query answers every wait, so nothing deadlocks
    q = bounded.query()
    assert q["status"] == "ok" and q["spokes"][0]["maxLead"] <= 1


def test_a_replica_idle_between_two_queries_holds_nobody_back():
    """Bound 1, spoke 0 holds 30 records behind its wait when spoke 1's run out. The first
    Query answers the wait (spoke 1 fitted since the start: not idle), and spoke 0 waits
    again after one mini-batch; the second finds spoke 1 idle: it answers ``until`` at once
    saying so, spoke 0 stops waiting on it and fits all it holds. Before, one mini-batch per
    Query: 36 Queries. An update of spoke 1 makes it a peer to wait on again."""
    X, y = regression(80)
    net = network(2, create(maxStaleness=1))
    for i in range(10):
        train(net, 0, X[i], y[i])
        if i % 5 == 4:
            train(net, 1, X[20 + i], y[20 + i])
        net.run()
    for i in range(40, 70):  # held behind spoke 0's wait
        train(net, 0, X[i], y[i])
    net.run()
    s0, s1 = net.spokes
    assert net.paused(0) and len(s0.ctx.backlog) > 25
    q = net.query()
    assert not q["spokes"][1]["idle"] and net.paused(0)  # one mini-batch on, waiting again
    q = net.query()
    assert q["spokes"][1]["idle"] and not net.paused(0) and not s0.ctx.backlog
    assert s0.fitted == 40 and s0._idle_peers == frozenset({1})
    train(net, 1, X[75], y[75])  # spoke 1 fits again: its update ends its idleness
    net.run()
    assert not s1.idle and s0._idle_peers == frozenset()


def test_update_scaling_divides_every_update_by_the_replicas():
    X, y = regression(1)
    plain = network(2, create(updateScaling="none"))
    scaled = network(2, create(updateScaling="replicas"))
    for net in (plain, scaled):
        train(net, 0, X[0], y[0])
        net.run()
    w_plain = plain.spokes[0].pipeline.learner.get_params()
    w_scaled = scaled.spokes[0].pipeline.learner.get_params()
    assert np.allclose(w_scaled, w_plain / 2)
    assert np.allclose(scaled.spokes[1].pipeline.learner.get_params(), w_scaled)


def test_query_reports_the_protocol_state():
    net = network(3)
    X, y = regression(30)
    for i in range(30):
        train(net, i % 3, X[i], y[i])
    net.run()
    q = net.query()
    proto = q["protocol"]
    assert proto["name"] == "TensAIR" and proto["spread"] < 1e-9
    assert set(proto["staleness"]) == {"count", "mean", "p95", "max"}
    assert proto["bytesBetweenSpokes"] > 0 and proto["updatesSent"] == 30
    for s in q["spokes"]:
        for key in ("updatesMade", "updatesSent", "updatesApplied", "bytesToSiblings",
                    "bytesFromSiblings", "staleness", "clock", "waits", "maxLead"):
            assert key in s
        assert "stalenessHistogram" not in s and "replica" not in s
        assert s["updatesSent"] == 10 and s["updatesApplied"] == 20
    assert q["model"]["available"] and len(q["model"]["params"]) == D + 1


def test_replicas_drift_apart_while_updates_are_in_flight():
    net = network(2)
    X, y = regression(10)
    for i in range(10):
        train(net, i % 2, X[i], y[i])
    spoke_stats = [s.statistics() for s in net.spokes]  # nothing delivered yet
    a, b = (np.asarray(st["replica"][0]) for st in spoke_stats)
    assert np.linalg.norm(a - b) > 1e-3
    net.run()
    assert np.allclose(net.spokes[0].pipeline.learner.get_params(),
                       net.spokes[1].pipeline.learner.get_params())


def test_staleness_summary():
    assert staleness_summary(Counter()) == {"count": 0, "mean": None, "p95": None, "max": None}
    h = Counter({0: 90, 1: 5, 7: 5})
    assert staleness_summary(h) == {"count": 100, "mean": 0.4, "p95": 1, "max": 7}


def test_by_request_on_the_kernels():
    """The job's data path: Create by request, JSON records, Query by request."""
    net = LocalNetwork(n_spokes=3, n_hubs=1, sharding="round-robin")
    net.request({**create(), "id": 9})
    X, y = regression(60)
    net.stream([(True, {"features": x.tolist(), "label": float(t)}) for x, t in zip(X, y)])
    net.request({"id": 9, "request": "Query", "requestId": "q"})
    q = net.outputs["responses"][-1]
    assert q["status"] == "ok", q
    assert q["fitted"] == 60 and q["protocol"]["spread"] < 1e-9
    assert q["protocol"]["updatesApplied"] == 2 * q["protocol"]["updatesSent"]


# -- the Flink kernel: spoke→spoke envelopes through psMessages ---------------------------------

@pytest.mark.parametrize("width", [0, 1])
def test_replicas_exchange_updates_through_the_kafka_loop_in_flink(broker, width):
    """A real job (2 spokes, each in its own subtask or both in one: ``spoke_parallelism``
    ``width``): spoke→spoke envelopes leave on the spokes' side output to ``psMessages``
    and come back routed by destination; every update reaches the other replica exactly
    once and the replicas agree once the loop drains."""
    import time

    from flink_jobs.session import Session, local_config
    from learning.datasets import shuttle

    X, y = shuttle()
    n = 2000
    cfg = local_config(broker.bootstrap_servers, topic_prefix=f"tensair{width}-", spokes=2,
                       spoke_parallelism=width, hubs=1)
    req = {"id": 1, "request": "Create", "requestId": "t",
           "preProcessors": [{"name": "StandardScaler"}],
           "learner": {"name": "PA", "hyperParameters": {"C": 0.01, "mode": 1},
                       "parameters": {"classes": [0, 1], "n_features": 9}},
           "trainingConfiguration": {"protocol": "TensAIR", "miniBatchSize": 32,
                                     "maxGradBuffer": 2}}
    with Session(cfg, "tensair") as s:
        assert s.request(req, timeout=120)["status"] == "ok"
        _, n_train, n_fore = s.stream(X[:n], y[:n])
        final = s.wait_until_counted(1, n_train, n_fore, every=1.0, timeout=180)
        deadline = time.monotonic() + 60
        while True:  # the updates of the last Query's partial buffers are still on the way
            proto = final["protocol"]
            if proto["updatesApplied"] == proto["updatesSent"] or time.monotonic() > deadline:
                break
            time.sleep(1.0)
            final = s.query(1)
    assert final["fitted"] == n_train and final["predicted"] == n_fore
    assert final["prequentialAccuracy"] >= 0.95
    proto = final["protocol"]
    assert proto["updatesSent"] > 0 and proto["updatesApplied"] == proto["updatesSent"]
    assert proto["bytesBetweenSpokes"] > 0 and proto["duplicatesDropped"] >= 0
    # each replica: its own updates plus the other's, all of them
    assert [s["clock"] for s in final["spokes"]][0] == [s["clock"] for s in final["spokes"]][1]
    assert proto["spread"] < 1e-6  # the parameters agree
    # and the scalers' statistics travelled through Kafka with the updates: the replica
    # holding the most holds its own records and all but the last quarter of the other's
    assert all(sp["statisticsDropped"] == 0 for sp in final["spokes"])
    assert final["model"]["preProcessors"][0]["n"] >= 0.75 * n_train, final["model"]
    assert [sp["subtask"] for sp in final["spokes"]] == ([0, 1] if width == 0 else [0, 0])


@pytest.mark.parametrize("config, learner, expected", [
    ({}, None, "replicas"),  # PARegressor: the average rule by default
    ({"aggregation": "sum"}, None, "none"),
    ({}, {"name": "PA", "parameters": {"n_features": D}}, "none"),  # PA: sum by default
    ({"aggregation": "sum", "updateScaling": "replicas"}, None, "replicas"),
])
def test_update_scaling_follows_the_aggregation_rule_unless_given(config, learner, expected):
    net = network(2, create(learner=learner, **config))
    assert {s.update_scaling for s in net.spokes} == {expected}
    assert net.query()["protocol"]["updateScaling"] == expected
