"""An Update that fixes a pipeline's layout (a new width) under every protocol, through
the job's spoke and hub kernels wired in plain Python (tests/test_spoke_kernel.py's Wire):
the pipeline goes on learning and synchronizing on the new model, as one declared right
from the start, whether or not a synchronization of the old model was in flight when the
Update came (learning.protocols.sharding, "A new layout"). Before, EVENFLOW's spokes
raised out of the data path (on Flink: the job failed), a BSP or SSP pipeline stopped with
its records held for good, and TAP and SSP under ``average`` failed every push after it."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from tests.test_layout import DeadWire

_RNG = np.random.default_rng(7)
#: the good stream: 2 features, the label on which side of a line they lie, each record to
#: a spoke drawn at random (as the job's random sharding)
_X = _RNG.normal(size=(400, 2))
STREAM = [(int(s), {"id": i, "features": x.tolist(), "label": int(x[0] + 0.5 * x[1] > 0)})
          for i, (x, s) in enumerate(zip(_X, _RNG.integers(0, 2, 400)))]

RUNS = [("Synchronous", None, {}), ("SSP", None, {}), ("Asynchronous", None, {}),
        ("EASGD", None, {}), ("Adaptive", None, {"lossThreshold": 0.1}),
        ("FDA", "naive", {"threshold": 0.05}), ("FDA", "linear", {"threshold": 0.05}),
        ("FDA", "sketch", {"threshold": 0.05}), ("EVENFLOW", "basic", {"threshold": 0.05}),
        ("EVENFLOW", "fast", {"threshold": 0.05}), ("TensAIR", None, {})]
GOOD = 400


def create(protocol: str, variant: str | None, extra: dict, aggregation: str,
           n_features: int | None) -> dict:
    config = {"protocol": protocol, "miniBatchSize": 4, "miniBatches": 1,
              "aggregation": aggregation, **extra}
    if variant:
        config["variant"] = variant
    learner = {"name": "PA", "hyperParameters": {"C": 0.01}}
    if n_features:
        learner["parameters"] = {"n_features": n_features}
    return {"id": 0, "request": "Create", "requestId": "c", "learner": learner,
            "trainingConfiguration": config}


def good_records(w: DeadWire) -> dict:
    """The GOOD records of width 2, then Queries until every record is counted (each
    Query closes a BSP or SSP round that a spoke without records left open)."""
    for spoke, rec in STREAM:
        w.data(spoke, "T", rec)
    q, before = w.query(), -1
    while q["fitted"] + q["rejected"] > before:
        before = q["fitted"] + q["rejected"]
        q = w.query()
    return q


def synchronizations(q: dict) -> int:
    """Synchronizations a Query counts: hub rounds or updates, TensAIR's exchanges."""
    proto = q["protocol"]
    return int(proto.get("rounds") or proto.get("updates") or 0) + \
        sum(s.get("appliedFromSiblings", 0) for s in q["spokes"])


def declared(protocol, variant, extra, aggregation) -> dict:
    w = DeadWire()
    w.request(create(protocol, variant, extra, aggregation, 2))
    return good_records(w)


def correct(q: dict) -> int:
    return round(q["prequentialAccuracy"] * q["fitted"]) if q["fitted"] else 0


@pytest.mark.parametrize("aggregation", ["sum", "average"])
@pytest.mark.parametrize("protocol,variant,extra", RUNS)
def test_after_a_quiet_update_the_pipeline_learns_as_one_declared_so(protocol, variant, extra,
                                                                      aggregation):
    """40 records of width 5 agree the layout (a majority of bad records); an Update
    declares width 2; the good records then are learned exactly as by a pipeline
    declared with width 2 at Create: the same predictions (FDA's coordinator keeps its
    round numbers, so within 1%), at least as many synchronizations."""
    w = DeadWire()
    w.request(create(protocol, variant, extra, aggregation, None))
    for i in range(40):
        w.data(i % 2, "T", {"id": -i, "features": [1.0] * 5, "label": 1})
    before = w.query()
    assert before["layout"]["nFeatures"] == 5
    w.request({"id": 0, "request": "Update", "requestId": "u",
               "learner": {"parameters": {"n_features": 2}}})
    after = good_records(w)
    alone = declared(protocol, variant, extra, aggregation)
    assert after["fitted"] == 40 + GOOD and after["rejected"] == 0
    assert abs(correct(after) - correct(before) - correct(alone)) <= GOOD // 100
    assert synchronizations(after) - synchronizations(before) >= synchronizations(alone) > 0
    assert sum(s.get("syncFailures", 0) for s in after["spokes"]) == 0
    assert not any(s["held"] for s in after["spokes"])


@pytest.mark.parametrize("aggregation", ["sum", "average"])
@pytest.mark.parametrize("protocol,variant,extra", RUNS)
def test_an_update_while_a_synchronization_is_in_flight_stops_nothing(protocol, variant, extra,
                                                                      aggregation, caplog):
    """The Update comes while the spokes' last pushes (of the old model) are still on
    their way: what they started is void (a failed synchronization, logged and counted),
    no spoke stays paused, no exception leaves the kernel, and the pipeline synchronizes
    on the new model from then on, within 0.05 of one declared so at Create."""
    w = DeadWire()
    w.request(create(protocol, variant, extra, aggregation, 5))
    for i in range(41):  # the last 11 records' messages are not delivered before the Update
        w.spokes[i % 2].on_data("T" + orjson.dumps(
            {"id": -i, "features": [float(i % 3)] * 5, "label": i % 2}).decode())
        if i < 30:
            w.pump()
    w.request({"id": 0, "request": "Update", "requestId": "u",
               "learner": {"parameters": {"n_features": 2}}})
    mid = w.query()
    after = good_records(w)
    alone = declared(protocol, variant, extra, aggregation)
    # records of width 5 held by a paused spoke are checked against the new layout
    assert after["fitted"] + after["rejected"] == 41 + GOOD
    assert after["rejectedBy"] in ({}, {"width": after["rejected"]})
    assert not any(s["held"] for s in after["spokes"])
    assert not any(s["protocolErrors"] for s in after["spokes"])
    assert synchronizations(after) > synchronizations(mid)
    assert sum(s.get("syncFailures", 0) for s in after["spokes"]) <= 4
    accuracy = (correct(after) - correct(mid)) / (after["fitted"] - mid["fitted"])
    assert accuracy >= alone["prequentialAccuracy"] - 0.05
    assert not [r for r in caplog.records if r.exc_info]  # no handler raised


@pytest.mark.parametrize("protocol,variant,extra", RUNS)
def test_an_update_that_leaves_classes_out_keeps_them_out_of_every_model(protocol, variant,
                                                                         extra):
    """Five classes learned, then an Update declares two while pushes of the five-class
    model are in flight: no hub takes such a push back into the global model (before, SSP,
    TAP, EASGD and Adaptive hubs grew the three classes back, and every spoke with them)."""
    rng = np.random.default_rng(3)
    w = DeadWire()
    w.request(create(protocol, variant, extra, "sum", 2))
    for i in range(61):
        w.spokes[i % 2].on_data("T" + orjson.dumps(
            {"id": -i, "features": rng.normal(size=2).tolist(), "label": i % 5}).decode())
        if i < 50:
            w.pump()
    w.request({"id": 0, "request": "Update", "requestId": "u",
               "learner": {"parameters": {"classes": [0, 1]}}})
    q = good_records(w)
    assert q["model"]["layout"]["classes"] == [0, 1]
    assert [sp.nodes[0].pipeline.learner.layout()["classes"] for sp in w.spokes] == [[0, 1]] * 2
    assert synchronizations(q) > 0


def test_an_update_fixes_the_layout_of_evenflow_and_bsp_pipelines_in_flink(broker):
    """Through the real broker and a Flink MiniCluster, 2 spokes: an EVENFLOW and a BSP
    pipeline agree on a wrong layout (64 records of width 3 come first), an Update
    declares Shuttle's 9 features while the last of them are still being synchronized,
    and Shuttle's records follow: both pipelines fit and predict every one, go on
    synchronizing, learn (prequential accuracy above 0.95) and the job never restarts
    (before, EVENFLOW's spokes raised out of the data path and the job failed)."""
    from flink_jobs.session import Session, local_config
    from learning.datasets import shuttle

    X, y = shuttle()
    X, y = X[:3000], y[:3000]
    cfg = local_config(broker.bootstrap_servers, topic_prefix="relayout-", spokes=2, hubs=1)
    runs = {0: ("EVENFLOW", {"variant": "basic", "threshold": 0.005}), 1: ("Synchronous", {})}
    with Session(cfg, "relayout") as s:
        for pid, (protocol, extra) in runs.items():
            assert s.request({"id": pid, "request": "Create", "requestId": f"c{pid}",
                              "preProcessors": [{"name": "StandardScaler"}],
                              "learner": {"name": "PA", "hyperParameters": {"C": 0.01}},
                              "trainingConfiguration": {"protocol": protocol,
                                                        "miniBatchSize": 8, "miniBatches": 1,
                                                        **extra}},
                             timeout=120)["status"] == "ok"
        rng = np.random.default_rng(0)
        for i in range(64):
            s.producer.send(cfg.topics.training, {"id": -1 - i, "features": rng.normal(
                size=3).tolist(), "label": int(i % 2)})
        for pid in runs:
            q = s.query(pid)
            assert q["layout"]["nFeatures"] in (3, None)
        for pid in runs:
            assert s.request({"id": pid, "request": "Update", "requestId": f"u{pid}",
                              "learner": {"parameters": {"n_features": 9}}},
                             timeout=60)["status"] == "ok"
        before = {pid: s.query(pid) for pid in runs}
        _, n_train, n_fore = s.stream(X, y)
        for pid in runs:
            # the width-3 records a spoke held or buffered at the Update are refused
            q = s.wait_until_counted(pid, before[pid]["fitted"] + n_train, n_fore,
                                     timeout=180)
            assert q["layout"] == {**q["layout"], "nFeatures": 9, "source": "declared"}
            assert q["service"]["restores"] == 0  # the job never restarted
            assert q["prequentialAccuracy"] > 0.95
            assert not any(sp["held"] for sp in q["spokes"])
            assert q["protocol"]["rounds"] > before[pid]["protocol"]["rounds"]


@pytest.mark.parametrize("update", [{"n_features": 2}, {"classes": [0, 1]}])
def test_tensair_replicas_drop_the_updates_of_a_model_an_update_reset(update, caplog):
    """TensAIR on the in-process kernel (its replicas exchange updates spoke to spoke): an
    Update that changes the layout while updates of the old model are on their way; each
    replica drops those (``updatesDropped``, counted in its vector clock as applied, so no
    replica waits on them) instead of raising in the middle of the sibling channel (or,
    for classes left out, growing them back into its model), and the replicas go on
    exchanging and learning."""
    from operators.local import LocalNetwork

    width = 2 if "classes" in update else 5
    net = LocalNetwork(n_spokes=3, n_hubs=1, network=0, seed=0)
    net.request(create("TensAIR", None, {}, "sum", width))
    for i in range(3):  # the messages these cause stay queued until the Update's run
        net.records(i, [(True, {"id": -k, "features": [float(k % 3)] * width,
                                "label": k % 5}) for k in range(i, 60, 3)])
    net.request({"id": 0, "request": "Update", "requestId": "u",
                 "learner": {"parameters": update}})
    mid = net.query()
    net.stream([(True, rec) for _, rec in STREAM])
    q = net.query()
    assert q["fitted"] - mid["fitted"] == GOOD
    assert sum(s["updatesDropped"] for s in q["spokes"]) > 0
    assert sum(s["updatesApplied"] for s in q["spokes"]) > \
        sum(s["updatesApplied"] for s in mid["spokes"])
    assert q["prequentialAccuracy"] > 0.8 and not any(s["held"] for s in q["spokes"])
    if "classes" in update:
        assert [sp.pipeline.learner.layout()["classes"] for sp in net.spokes] == [[0, 1]] * 3
    assert not [r for r in caplog.records if r.exc_info]


@pytest.mark.parametrize("pending", [True, False])
def test_an_update_declares_the_layout_of_a_tree_pipeline(pending):
    """A Hoeffding tree has no parameter vector (its ``layout()`` raises): an Update that
    declared the layout of a tree pipeline still pending (fewer records than the quorum)
    raised out of the hub kernel, which the job would replay after every restore. It is
    applied; the tree learns every record after it (and after an agreed layout, the same
    width changes nothing)."""
    from operators.local import LocalNetwork

    net = LocalNetwork(n_spokes=2, n_hubs=1, network=3)
    net.request({"id": 3, "request": "Create", "requestId": "c",
                 "learner": {"name": "HoeffdingTree"},
                 "trainingConfiguration": {"protocol": "Independent", "miniBatchSize": 4}})
    rng = np.random.default_rng(0)

    def records(first: int, n: int) -> list:
        return [(True, {"id": first + i, "features": rng.normal(size=3).tolist(),
                        "label": int(rng.integers(0, 2))}) for i in range(n)]

    net.stream(records(0, 5 if pending else 60))
    net.request({"id": 3, "request": "Update", "requestId": "u",
                 "learner": {"parameters": {"n_features": 3}}})
    assert net.outputs["responses"][-1]["status"] == "ok"
    before = net.query()["fitted"]
    net.stream(records(1000, 40))
    q = net.query()
    assert q["layout"]["nFeatures"] == 3 and q["fitted"] >= before + 40 - 2 * 4
