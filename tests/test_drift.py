"""Concept drift detection on spokes (``trainingConfiguration.driftDetector``,
:mod:`learning.drift`): river's detectors over each spoke's prequential errors, reported
in a Query, as events on the responses topic and as a Flink metric; the learning itself
unchanged."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest

from learning.datasets import drift as drift_stream
from learning.drift import DETECTORS, REAL_VALUED, DriftMonitor
from learning.errors import RequestError
from learning.protocols.parameters import TRAINING_PARAMETERS
from learning.requests import SCHEMA_PATH, parse_request

RESPONSE_SCHEMA = json.loads(SCHEMA_PATH.with_name("response.schema.json").read_text())


def test_the_declared_choices_are_the_detectors():
    assert TRAINING_PARAMETERS["driftDetector"].choices == ("none", *DETECTORS)
    assert REAL_VALUED <= set(DETECTORS)


@pytest.mark.parametrize("name", sorted(DETECTORS))
def test_every_detector_finds_a_jump_of_the_error_rate(name):
    """10% errors for 5,000 records, then 50%: every detector finds the change within
    250 records; all but DDM (whose warm-up alarms early: river's) find nothing before."""
    rng = np.random.default_rng(0)
    wrong = np.concatenate([rng.random(5000) < 0.1, rng.random(3000) < 0.5])
    m = DriftMonitor(name, "classification")
    found = []
    for lo in range(0, len(wrong), 16):  # mini-batches, as a spoke feeds it
        w = wrong[lo:lo + 16]
        found += m.update([0] * len(w), [int(v) for v in w], lo)
    assert any(5000 < f < 5250 for f in found), (name, found)
    assert name == "DDM" or found[0] > 5000, (name, found)
    assert m.detected == len(found) and m.at_records == found[-8:]


@pytest.mark.parametrize("name", sorted(DETECTORS))
def test_a_detector_survives_flinks_state_and_goes_on_as_before(name):
    """Spokes are pickled into Flink state (cloudpickle): a restored detector, fed the same
    continuation, finds what the original finds, and its state stays small."""
    import pickle

    import cloudpickle

    rng = np.random.default_rng(1)
    wrong = [int(v) for v in np.concatenate([rng.random(4000) < 0.1, rng.random(2000) < 0.4])]
    m = DriftMonitor(name, "classification")
    m.update([0] * 3000, wrong[:3000], 0)
    assert len(pickle.dumps(m)) < 20_000
    restored = cloudpickle.loads(cloudpickle.dumps(m))
    assert restored.update([0] * 3000, wrong[3000:], 3000) == m.update([0] * 3000, wrong[3000:],
                                                                       3000)
    assert restored.to_json()["detected"] == m.detected


def test_a_prediction_of_none_is_not_fed_and_a_regressors_overflow_neither():
    m = DriftMonitor("ADWIN", "classification")
    assert m.update([1, 2, 3], [None, None, None], 0) == [] and m.detector.n_detections == 0
    assert m.detector.width == 0
    r = DriftMonitor("ADWIN", "regression")
    r.update([1.0, 2.0, 3.0], [1.5, float("inf"), None], 0)
    assert r.detector.width == 1 and r.detector.estimation == 0.5


def _create(learner: dict, detector: str | None, pid: int = 1) -> dict:
    cfg = {"protocol": "Asynchronous", "miniBatchSize": 16}
    if detector is not None:
        cfg["driftDetector"] = detector
    return {"id": pid, "request": "Create", "learner": learner, "trainingConfiguration": cfg}


@pytest.mark.parametrize("learner,detector,code", [
    ({"name": "KMeans"}, "ADWIN", "unsupported_pairing"),
    ({"name": "PARegressor"}, "DDM", "unsupported_pairing"),
    ({"name": "PARegressor"}, "HDDM_W", "unsupported_pairing"),
    ({"name": "PA"}, "KSWIN", "schema"),
    ({"name": "PA"}, "adwin", "schema"),
])
def test_a_create_with_a_detector_its_learner_cannot_feed_is_refused(learner, detector, code):
    with pytest.raises(RequestError) as e:
        parse_request(json.dumps(_create(learner, detector)))
    assert e.value.code == code and e.value.field == "trainingConfiguration.driftDetector"
    parse_request(json.dumps(_create({"name": "PARegressor"}, "PageHinkley")))
    parse_request(json.dumps(_create({"name": "PA"}, "HDDM_A")))
    parse_request(json.dumps(_create({"name": "KMeans"}, "none")))


def _records(X: np.ndarray, y: np.ndarray, every: int = 5) -> list:
    return [(False, {"id": i, "features": X[i].tolist()}) if i % every == every - 1 else
            (True, {"id": i, "features": X[i].tolist(), "label": int(y[i])})
            for i in range(len(X))]


def _network(detector: str | None, records: list, spokes: int = 4):
    from operators.local import LocalNetwork

    net = LocalNetwork(n_spokes=spokes, n_hubs=1, network=1, seed=0)
    net.request({**_create({"name": "PA", "hyperParameters": {"C": 0.01}}, detector),
                 "preProcessors": [{"name": "StandardScaler"}]})
    assert net.outputs["responses"][-1]["status"] == "ok"
    net.stream(records)
    return net


def _query(net) -> dict:
    net.request({"id": 1, "request": "Query", "requestId": "q"})
    return next(r for r in reversed(net.outputs["responses"]) if r.get("requestId") == "q")


def test_spokes_report_a_drift_and_learn_as_without_a_detector():
    """river's Sine, SINE1 then its labels reversed around record 6,000 (width 200), 12,000
    records, 4 spokes under TAP: no spoke detects anything before the drift, every one
    after it; the Query and the events follow the response schema; the predictions are
    those of the same pipeline without a detector."""
    X, y = drift_stream("sine", n=12_000, position=6_000, width=200)
    records = _records(X, y)
    net, plain = _network("ADWIN", records), _network(None, records)
    q = _query(net)
    jsonschema.validate(q, RESPONSE_SCHEMA)
    assert q["drift"]["detector"] == "ADWIN" and q["drift"]["detected"] >= 1
    assert q["trainingConfiguration"]["driftDetector"] == "ADWIN"
    events = [r for r in net.outputs["responses"] if r.get("event") == "drift"]
    assert len(events) == q["drift"]["detected"]
    for e in events:
        jsonschema.validate(e, RESPONSE_SCHEMA)
        assert e["id"] == 1 and "requestId" not in e
    # each spoke fits about a quarter of the 9,600 training records: the drift starts at
    # about its 1,200th (6,000 − 200 in the stream, 80% trained on, 1/4 per spoke)
    for s in q["spokes"]:
        assert all(at > 1_100 for at in s["drift"]["atRecords"]), s["drift"]
    assert q["drift"]["spokesDetecting"] == 4
    assert q["spokes"][0]["drift"]["detector"] == "ADWIN"
    p = _query(plain)
    assert p["drift"] is None and all(s["drift"] is None for s in p["spokes"])
    assert q["prequentialAccuracy"] == p["prequentialAccuracy"]
    predictions = [(r["id"], r["prediction"]) for r in net.outputs["predictions"]]
    assert predictions == [(r["id"], r["prediction"]) for r in plain.outputs["predictions"]]


def test_an_update_sets_changes_and_removes_the_detector():
    X, y = drift_stream("sea", n=2_000)
    records = _records(X, y)
    net = _network(None, records[:1000], spokes=2)
    net.request({"id": 1, "request": "Update", "requestId": "u1",
                 "trainingConfiguration": {"driftDetector": "DDM"}})
    assert net.outputs["responses"][-1]["status"] == "ok"
    assert [type(s.drift.detector).__name__ for s in net.spokes] == ["DDM", "DDM"]
    net.stream(records[1000:])
    q = _query(net)
    assert q["drift"]["detector"] == "DDM"
    net.request({"id": 1, "request": "Update", "requestId": "u2",
                 "trainingConfiguration": {"driftDetector": "ADWIN"}})
    assert _query(net)["drift"] == {"detector": "ADWIN", "detected": 0, "spokesDetecting": 0,
                                    "lastAtMs": None}
    net.request({"id": 1, "request": "Update", "requestId": "u3",
                 "trainingConfiguration": {"driftDetector": "none"}})
    assert net.outputs["responses"][-1]["status"] == "ok", net.outputs["responses"][-1]
    assert _query(net)["drift"] is None


def test_an_update_cannot_give_a_regressor_a_detector_of_rates():
    from operators.local import LocalNetwork

    net = LocalNetwork(n_spokes=2, n_hubs=1, network=1, seed=0)
    net.request(_create({"name": "PARegressor"}, "ADWIN"))
    assert net.outputs["responses"][-1]["status"] == "ok"
    net.request({"id": 1, "request": "Update", "requestId": "u",
                 "trainingConfiguration": {"driftDetector": "HDDM_A"}})
    r = net.outputs["responses"][-1]
    assert r["status"] == "error" and r["error"]["code"] == "unsupported_pairing"
    assert _query(net)["drift"]["detector"] == "ADWIN"


def test_the_spoke_metric_counts_the_detections():
    from operators.metrics import SPOKE_METRICS

    X, y = drift_stream("sine", n=12_000, position=6_000, width=200)
    net = _network("ADWIN", _records(X, y), spokes=1)
    node = net.spokes[0]
    assert SPOKE_METRICS["driftsDetected"](node) == node.drift.detected >= 1
    with pytest.raises(AttributeError):  # a pipeline without one: the metric is skipped
        SPOKE_METRICS["driftsDetected"](_network(None, [], spokes=1).spokes[0])


def test_on_flink_a_spoke_reports_the_drift_and_writes_the_event(broker):
    """The running job, 2 spokes, TAP: river's Sine drifting around record 4,000 of 8,000
    (width 200); the pipeline's Query counts the detections, each is an event on the
    responses topic after the drift began, and the stream's records are all counted."""
    from flink_jobs.session import Session, local_config

    X, y = drift_stream("sine", n=8_000, position=4_000, width=200)
    cfg = local_config(broker.bootstrap_servers, topic_prefix="drift-", spokes=2)
    with Session(cfg, "drift") as s:
        create = {**_create({"name": "PA", "hyperParameters": {"C": 0.01},
                             "parameters": {"n_features": 2}}, "ADWIN", pid=3),
                  "preProcessors": [{"name": "StandardScaler"}]}
        assert s.request(create, timeout=120)["status"] == "ok"
        _, n_train, n_fore = s.stream(X, y, records_per_message=50)
        q = s.wait_until_counted(3, n_train, n_fore, timeout=180)
        responses = s.reread(cfg.topics.responses)
    jsonschema.validate(q, RESPONSE_SCHEMA)
    events = [r for r in responses if r.get("event") == "drift"]
    assert q["drift"]["detected"] >= 1 and len(events) == q["drift"]["detected"], q["drift"]
    for e in events:
        jsonschema.validate(e, RESPONSE_SCHEMA)
        assert e["id"] == 3
    # a spoke fits about half of the 6,400 training records: the drift begins at about its
    # 1,520th (3,800 in the stream, 80% trained on). Not every run is free of a false
    # alarm here, unlike in process: in one of eight, spoke 0 alarmed at its 1,249th
    # record (not traced further)
    early = [(e["spoke"], e["atRecord"]) for e in events if e["atRecord"] <= 1_400]
    assert len(early) <= 1 and len(events) > len(early), early
    assert sum(s_["drift"]["detected"] for s_ in q["spokes"]) == q["drift"]["detected"]
    assert q["rejected"] == 0 and q["prequentialAccuracy"] > 0.8


def test_a_regressors_absolute_errors_show_a_changed_target():
    """PARegressor on y = x·w + noise whose w flips sign at record 3,000 of 6,000 (2 spokes,
    TAP, ADWIN and PageHinkley on the absolute errors): found after the change, not before."""
    from operators.local import LocalNetwork

    rng = np.random.default_rng(0)
    X = rng.normal(size=(6000, 4))
    w = np.array([2.0, -1.0, 0.5, 1.5])
    y = np.where(np.arange(6000) < 3000, X @ w, -(X @ w)) + rng.normal(scale=0.1, size=6000)
    for detector in ("ADWIN", "PageHinkley"):
        net = LocalNetwork(n_spokes=2, n_hubs=1, network=1, seed=0)
        net.request(_create({"name": "PARegressor", "hyperParameters": {"C": 0.1}}, detector))
        assert net.outputs["responses"][-1]["status"] == "ok"
        net.stream([(True, {"id": i, "features": X[i].tolist(), "label": float(y[i])})
                    for i in range(6000)])
        q = _query(net)
        jsonschema.validate(q, RESPONSE_SCHEMA)
        assert q["task"] == "regression" and q["drift"]["spokesDetecting"] == 2, q["drift"]
        for s in q["spokes"]:  # each spoke's first 1,400 or so records are before the change
            assert min(s["drift"]["atRecords"]) > 1_400, (detector, s["drift"])
