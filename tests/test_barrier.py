"""The same barrier test on both kernels: the in-process kernel (with shuffled and
duplicated deliveries) and the Flink kernel through the real broker (papers/002 §3.1.3:
a barrier is a remote method returning an already fulfilled broadcast promise; then_sync
pauses the spoke's stream, buffering input in order, until the answer came)."""

from __future__ import annotations

import pytest

import tests.barrier_protocol  # noqa: F401  (registers "BarrierProbe")
from flink_jobs.session import Session, local_config
from learning.datasets import shuttle
from learning.protocols import make_hub, make_spoke
from learning.requests import parse_request
from operators.local import LocalNetwork

N_RECORDS = 2000  # training records, split evenly over 2 spokes
BATCH, BATCHES = 10, 5  # a barrier every 50 records per spoke
ROUNDS = N_RECORDS // 2 // (BATCH * BATCHES)


def create(pipeline: int = 9) -> dict:
    return {"id": pipeline, "request": "Create", "requestId": f"barrier-{pipeline}",
            "preProcessors": [{"name": "StandardScaler"}], "learner": {"name": "PA"},
            "trainingConfiguration": {"protocol": "BarrierProbe", "miniBatchSize": BATCH,
                                      "miniBatches": BATCHES}}


def check_barrier_run(spokes: list[dict], hub: dict, fitted: int) -> None:
    """What must hold on any kernel."""
    assert fitted == N_RECORDS  # nothing lost while paused
    for s in spokes:
        assert s["rounds"] == ROUNDS
        assert s["passed"] == list(range(1, ROUNDS + 1))  # each barrier passed once, in order
    assert hub["barrierCalls"] == 2 * ROUNDS
    assert hub["maxLead"] <= 1  # no spoke ever got a round ahead of a waiting one


@pytest.mark.parametrize("shuffle,duplicate", [(False, 0.0), (True, 0.3)])
def test_barrier_on_the_in_process_kernel(shuffle, duplicate):
    X, y = shuttle()
    req = parse_request(create())
    spokes, hub = [make_spoke(req), make_spoke(req)], make_hub(req)
    net = LocalNetwork(spokes, [hub], network=req.id, shuffle=shuffle, duplicate=duplicate, seed=3)
    order: list[list[int]] = [[], []]
    for i in range(N_RECORDS):
        k = i % 2
        net.feed(k, lambda k=k, i=i: (order[k].append(i), spokes[k].on_train(X[i].tolist(), int(y[i]))))
        if i % 7 == 0:
            net.run()
    net.run()
    assert not net.paused(0) and not net.paused(1)
    assert order[0] == list(range(0, N_RECORDS, 2)) and order[1] == list(range(1, N_RECORDS, 2))
    stats = [{**s.statistics()["protocol"]} for s in spokes]
    check_barrier_run(stats, hub.global_statistics(), sum(s.fitted for s in spokes))


def test_barrier_on_the_flink_kernel_through_the_broker(broker):
    X, y = shuttle()
    cfg = local_config(broker.bootstrap_servers, topic_prefix="barrier-", spokes=2, hubs=1,
                       protocol_modules=("tests.barrier_protocol",))
    with Session(cfg, "barrier") as s:
        assert s.request(create(), timeout=120)["status"] == "ok"
        _, n_train, n_fore = s.stream(X[:N_RECORDS], y[:N_RECORDS], every=0)
        assert (n_train, n_fore) == (N_RECORDS, 0)
        final = s.wait_until_counted(9, N_RECORDS, 0, timeout=120)
    # records reach the spokes by a random key: shares differ, and Queries (which join
    # the next barrier) close the rounds the stream alone leaves open
    assert final["fitted"] == N_RECORDS  # nothing lost while paused
    rounds = [s["rounds"] for s in final["spokes"]]
    assert all(r >= ROUNDS // 2 for r in rounds)
    for s in final["spokes"]:
        # each passed once, in order; the last Query may have opened one more round
        assert s["passed"] == list(range(1, len(s["passed"]) + 1))
        assert s["rounds"] - len(s["passed"]) in (0, 1)
    assert final["protocol"]["barrierCalls"] == sum(rounds)
    assert final["protocol"]["maxLead"] <= 1  # no spoke ever got a round ahead of a waiting one
