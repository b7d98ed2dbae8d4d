"""The synchronization protocols on the Flink kernel: one job (3 spokes dealt over 2 spoke
subtasks, ``spoke_parallelism``: subtask 0 hosts spokes 0 and 2; 2 hubs) runs one pipeline
per protocol over the same few thousand Shuttle records, through the real local broker and
the Kafka feedback loop; sharded pipelines (hubParallelism 2) beside unsharded ones. Two
spokes in one subtask learn, pause (BSP's rounds) and report each on its own. Every record must be fitted or answered (a synchronous round left open by a spoke
whose records ran out would stop its forecasting records forever: the Queries close it),
and each pipeline is waited for alone: a pipeline paused on its hubs (SSP's spoke ahead of
one whose records ran out) never holds up another's records."""

from __future__ import annotations

import pytest

from flink_jobs.session import Session, local_config
from learning.datasets import shuttle

N_RECORDS = 3000
FIXED = {"classes": [0, 1], "n_features": 9}  # what hubParallelism 2 needs

PIPELINES = {
    0: ("Synchronous", 2, {}),
    1: ("SSP", 1, {"staleness": 1}),
    2: ("EASGD", 2, {"alpha": 0.25}),
    3: ("Adaptive", 1, {"lossThreshold": 5.0}),
    4: ("FDA", 2, {"variant": "linear", "threshold": 0.02}),
    5: ("EVENFLOW", 1, {"variant": "fast", "threshold": 0.02, "coefficients": 8}),
}


def create(pid: int) -> dict:
    protocol, hubs, extra = PIPELINES[pid]
    return {"id": pid, "request": "Create", "requestId": f"proto-{pid}",
            "preProcessors": [{"name": "StandardScaler"}],
            "learner": {"name": "PA", "hyperParameters": {"C": 0.01, "mode": 1},
                        "parameters": FIXED if hubs > 1 else {}},
            "trainingConfiguration": {"protocol": protocol, "hubParallelism": hubs,
                                      "miniBatchSize": 16, "miniBatches": 2, **extra}}


@pytest.fixture(scope="module")
def finals(broker):
    X, y = shuttle()
    cfg = local_config(broker.bootstrap_servers, topic_prefix="protocols-", spokes=3,
                       spoke_parallelism=2, hubs=2)
    with Session(cfg, "protocols") as s:
        for pid in PIPELINES:
            created = s.request(create(pid), timeout=120)
            assert created["status"] == "ok", created
            assert created["hubs"] == PIPELINES[pid][1]
        _, n_train, n_fore = s.stream(X[:N_RECORDS], y[:N_RECORDS])
        out = {pid: s.wait_until_counted(pid, n_train, n_fore, every=1.0, timeout=180)
               for pid in PIPELINES}
        # the stream is over: two more Queries find every BSP and SSP spoke idle
        after = {pid: [s.query(pid, timeout=60) for _ in range(2)][-1] for pid in (0, 1)}
    out["idle"] = after
    return out, n_train, n_fore


def test_every_protocol_fits_and_answers_every_record(finals):
    out, n_train, n_fore = finals
    for pid in PIPELINES:
        final = out[pid]
        assert final["fitted"] == n_train and final["predicted"] == n_fore, PIPELINES[pid]
        assert final["rejected"] == 0
        assert final["prequentialAccuracy"] >= 0.95, (PIPELINES[pid], final["prequentialAccuracy"])
        # spoke i on subtask i % 2, each with its own share of the stream
        assert [(sp["spoke"], sp["subtask"]) for sp in final["spokes"]] == [(0, 0), (1, 1), (2, 0)]
        assert all(sp["fitted"] > 0.2 * n_train for sp in final["spokes"]), final["fittedPerSpoke"]


def test_every_protocol_synchronized_and_counted_its_traffic(finals):
    out, _, _ = finals
    for pid in PIPELINES:
        final = out[pid]
        proto = final["protocol"]
        assert proto["name"] == PIPELINES[pid][0] and proto["hubs"] == PIPELINES[pid][1]
        assert proto["rounds"] > 0, PIPELINES[pid]
        assert 0 < proto["syncBytesToHubs"] <= proto["bytesToHubs"]  # reports are not sync
        assert proto["syncBytesToSpokes"] == proto["bytesToSpokes"] > 0
        assert all(s["rounds"] > 0 and s["syncFailures"] == 0 for s in final["spokes"])
    bsp = out[0]["protocol"]
    # lock-step but for a spoke a Query found idle (its rounds closed without it); the
    # Query's own round is still open when the spokes report
    active = [r for i, r in enumerate(bsp["spokeRounds"]) if i not in bsp["idleSpokes"]]
    assert len(set(active)) <= 1 and all(r in (bsp["rounds"], bsp["rounds"] - 1) for r in active)
    assert out[0]["model"]["shard"]["size"] == 20  # hub 0 reports the shard it owns
    assert out[1]["protocol"]["maxLead"] <= 1  # SSP kept its bound on the real kernel
    for pid in (4, 5):  # data-driven protocols synchronize less than BSP
        assert out[pid]["protocol"]["rounds"] < bsp["rounds"]
        assert out[pid]["protocol"]["syncBytesToHubs"] < bsp["syncBytesToHubs"]
        # and say so: rounds longer than BSP's 2 mini-batches, no advice on the threshold
        assert out[pid]["protocol"]["miniBatchesPerRound"] > 2, out[pid]["protocol"]
        assert out[pid]["protocol"]["warnings"] == []
    assert isinstance(out[3]["protocol"]["warnings"], list)  # Adaptive's advice travels too
    assert all(s["lemma1Violations"] == 0 for s in out[5]["spokes"])


def test_spokes_without_records_are_idle_after_the_stream_and_hold_nobody(finals):
    """After the stream, two Queries: every BSP and SSP spoke fitted nothing between them,
    so each pushed as idle (through Kafka, as a keyword of ``push``), was answered at once,
    and nothing waits: no paused spoke, nothing held, no round left open."""
    out, n_train, n_fore = finals
    for pid in (0, 1):
        q = out["idle"][pid]
        assert q["protocol"]["idleSpokes"] == [0, 1, 2], (PIPELINES[pid], q["protocol"])
        assert q["fitted"] == n_train and q["predicted"] == n_fore
        assert all(sp["held"] == 0 for sp in q["spokes"]), q["spokes"]
    assert out["idle"][0]["protocol"]["rounds"] == out[0]["protocol"]["rounds"] or \
        out["idle"][0]["protocol"]["rounds"] == out[0]["protocol"]["rounds"] + 1
