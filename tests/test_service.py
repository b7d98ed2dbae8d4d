"""omldm as a long-lived service (issue 4), on the real broker and a real MiniCluster:
several pipelines at once, Update without losing the model, Delete, Query; and a table of
hostile requests, each answered with its code while another pipeline loses nothing."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import jsonschema
import numpy as np
import orjson
import pytest

from flink_jobs.session import Session, local_config
from learning.datasets import shuttle


RESPONSE_SCHEMA = json.loads(
    (Path(__file__).parent.parent / "learning" / "schema" / "response.schema.json").read_text())


def assert_documented(response: dict) -> None:
    """Every response is described by the published response schema."""
    jsonschema.validate(response, RESPONSE_SCHEMA)


def create(pid: int, learner: str = "PA", hyper: dict | None = None,
           pre: str = "StandardScaler", **config) -> dict:
    return {"id": pid, "request": "Create", "requestId": f"create-{pid}",
            "preProcessors": [{"name": pre}],
            "learner": {"name": learner, "hyperParameters": hyper or {}},
            "trainingConfiguration": {"protocol": "Asynchronous", "miniBatchSize": 32, **config}}


@pytest.fixture(scope="module")
def data():
    X, y = shuttle()
    return X[:24_000], y[:24_000]


def test_two_pipelines_update_query_delete(broker, data):
    X, y = data
    cfg = local_config(broker.bootstrap_servers, topic_prefix="svc-", spokes=2, hubs=1)
    with Session(cfg, "service-lifecycle") as s:
        assert s.request(create(10, "PA", {"C": 0.01, "mode": 1}))["status"] == "ok"
        assert s.request(create(11, "SVM", {"lam": 0.001}, pre="MinMaxScaler"))["status"] == "ok"
        # 1st third: both pipelines see every record
        _, a_train, a_fore = s.stream(X[:8000], y[:8000])
        q10 = s.wait_until_counted(10, a_train, a_fore)
        q11 = s.wait_until_counted(11, a_train, a_fore)
        assert q10["learner"]["hyperParameters"]["C"] == 0.01
        assert q11["learner"]["name"] == "SVM"
        assert q11["preProcessors"] == [{"name": "MinMaxScaler", "hyperParameters": {}}]

        # Update pipeline 11 mid-stream: new λ and mini-batch size, same model
        up = s.request({"id": 11, "request": "Update", "learner": {"hyperParameters": {"lam": 0.0005}},
                        "trainingConfiguration": {"miniBatchSize": 64}})
        assert up["status"] == "ok", up
        assert up["learner"]["hyperParameters"]["lam"] == 0.0005
        assert up["trainingConfiguration"]["miniBatchSize"] == 64
        after = s.query(11)
        assert after["fitted"] == q11["fitted"]  # nothing refitted, nothing lost
        assert after["model"]["params"] == q11["model"]["params"]  # the model survived
        assert after["learner"]["hyperParameters"]["lam"] == 0.0005
        bad = s.request({"id": 11, "request": "Update", "learner": {"hyperParameters": {"lam": -1}}})
        assert bad["error"]["code"] == "invalid_hyperparameter"
        assert bad["error"]["field"] == "learner.hyperParameters.lam"
        assert s.query(11)["learner"]["hyperParameters"]["lam"] == 0.0005  # all or nothing

        # 2nd third, then delete pipeline 10
        _, b_train, b_fore = s.stream(X[8000:16000], y[8000:16000], first_id=8000)
        s.wait_until_counted(10, a_train + b_train, a_fore + b_fore)
        s.wait_until_counted(11, a_train + b_train, a_fore + b_fore)
        assert s.request({"id": 10, "request": "Delete"})["status"] == "ok"
        assert s.query(10)["error"]["code"] == "not_found"

        # last third: pipeline 11 is unaffected, its counts exact
        _, c_train, c_fore = s.stream(X[16000:], y[16000:], first_id=16000)
        final = s.wait_until_counted(11, a_train + b_train + c_train, a_fore + b_fore + c_fore)
        for r in (q10, q11, up, after, bad, final):
            assert_documented(r)
        assert final["service"]["pipelines"] == 1  # pipeline 10 is gone everywhere
        assert final["prequentialAccuracy"] > 0.98
        assert final["trainingConfiguration"]["miniBatchSize"] == 64
        preds10 = s.predictions_of(10)
        assert len(preds10) == a_fore + b_fore  # none after the delete


BIG = 2_000_000  # bytes: above the default max_request_bytes (1,000,000)

HOSTILE = [
    # (name, raw request, expected code, expected field or None)
    ("truncated", b'{"id": 1, "request": "Cre', "invalid_json", None),
    ("empty", b"", "invalid_json", None),
    ("array", b"[1, 2, 3]", "invalid_json", None),
    ("string", b'"Create"', "invalid_json", None),
    ("number", b"42", "invalid_json", None),
    ("not utf-8", b"\x80\x81\x82", "invalid_json", None),
    ("deep nesting", b"[" * 5000 + b"]" * 5000, "invalid_json", None),
    ("fake envelope", b"\xff\x01garbage", "invalid_message", None),
    ("missing id", {"request": "Query"}, "schema", "id"),
    ("negative id", {"id": -1, "request": "Query"}, "schema", "id"),
    ("id as text", {"id": "seven", "request": "Query"}, "schema", "id"),
    ("huge id", {"id": 2**40, "request": "Query"}, "schema", "id"),
    ("unknown request", {"id": 1, "request": "Destroy"}, "schema", "request"),
    ("unknown key", {"id": 1, "request": "Query", "sneaky": 1}, "schema", "sneaky"),
    ("requestId object", {"id": 1, "request": "Query", "requestId": {"a": 1}}, "schema", "requestId"),
    ("create without learner", {"id": 1, "request": "Create"}, "schema", "learner"),
    ("unknown learner", create(1, "Oracle"), "unknown_learner", "learner.name"),
    ("unknown preprocessor", create(1, pre="Magic"), "unknown_preprocessor", "preProcessors[0].name"),
    ("negative C", create(1, hyper={"C": -1}), "invalid_hyperparameter", "learner.hyperParameters.C"),
    ("C as text", create(1, hyper={"C": "big"}), "invalid_hyperparameter", "learner.hyperParameters.C"),
    ("unknown hyperparameter", create(1, hyper={"gamma": 3}), "invalid_hyperparameter",
     "learner.hyperParameters.gamma"),
    ("zero mini-batch", create(1, miniBatchSize=0), "schema", "trainingConfiguration.miniBatchSize"),
    ("negative mini-batches", create(1, miniBatches=-5), "schema", "trainingConfiguration.miniBatches"),
    ("mini-batches as text", create(1, miniBatches="four"), "schema", "trainingConfiguration.miniBatches"),
    ("unknown config key", create(1, minibatchSize=8), "schema", "trainingConfiguration.minibatchSize"),
    ("unknown protocol", create(1, protocol="Gossip"), "unknown_protocol", "trainingConfiguration.protocol"),
    ("absurd hubs", create(1, hubParallelism=1000), "schema", "trainingConfiguration.hubParallelism"),
    ("more hubs than the job", create(1, hubParallelism=2), "too_many_hubs",
     "trainingConfiguration.hubParallelism"),
    ("10^9-wide model", {**create(1), "learner": {"name": "PA", "parameters": {"n_features": 10**9}}},
     "too_large", "learner.parameters.n_features"),
    # each number below max_model_params (10^7), their product far above: refused before
    # anything is allocated (before, 8 GB per node)
    ("10^6 features x 1,000 classes", {**create(1), "learner": {
        "name": "PA", "parameters": {"n_features": 10**6, "classes": list(range(1000))}}},
     "too_large", "learner.parameters"),
    ("MLP of 10^10 weights", {**create(1), "learner": {
        "name": "MLP", "hyperParameters": {"hidden_layers": [100_000, 100_000]}}},
     "too_large", "learner.parameters"),
    ("update to 10^6 features x 1,000 classes", {"id": 20, "request": "Update", "learner": {
        "parameters": {"n_features": 10**6, "classes": list(range(1000))}}},
     "too_large", "learner.parameters"),
    ("2 MB request", b'{"id": 1, "request": "Query", "pad": "' + b"x" * BIG + b'"}', "too_large", None),
    ("5 MB valid request", {"id": 1, "request": "Query", "pad": "x" * 5_000_000}, "too_large", None),
    ("duplicate create", create(20), "exists", "id"),
    ("query missing", {"id": 404, "request": "Query"}, "not_found", "id"),
    ("update missing", {"id": 404, "request": "Update", "learner": {"hyperParameters": {"C": 1}}},
     "not_found", "id"),
    ("delete missing", {"id": 404, "request": "Delete"}, "not_found", "id"),
    ("update replaces learner", {"id": 20, "request": "Update", "learner": {"name": "PAClassifier"}},
     "unsupported", "learner.name"),  # PAClassifier is PA's class name, not the name it was created with
    ("update changes protocol", {"id": 20, "request": "Update",
                                 "trainingConfiguration": {"protocol": "Independent"}},
     "unsupported", "trainingConfiguration.protocol"),
    ("update bad C", {"id": 20, "request": "Update", "learner": {"hyperParameters": {"C": 0}}},
     "invalid_hyperparameter", "learner.hyperParameters.C"),
    ("update learned parameters", {"id": 20, "request": "Update",
                                   "learner": {"parameters": {"W": [[1]]}}}, "unsupported",
     "learner.parameters"),
]


def test_hostile_requests_are_answered_and_harm_nothing(broker, data):
    X, y = data
    cfg = local_config(broker.bootstrap_servers, topic_prefix="hostile-", spokes=2, hubs=1)
    with Session(cfg, "hostile-requests") as s:
        assert s.request(create(20))["status"] == "ok"
        chunks = np.array_split(np.arange(len(y)), 4)
        n_train = n_fore = 0
        answers = {}
        for k, (name, raw, code, field) in enumerate(HOSTILE):
            if k % 10 == 0 and chunks:
                idx = chunks.pop(0)
                _, a, b = s.stream(X[idx], y[idx], first_id=int(idx[0]))
                n_train, n_fore = n_train + a, n_fore + b
            rid = None  # what cannot be parsed far enough is answered with requestId null
            if isinstance(raw, dict):
                if not isinstance(raw.get("requestId"), dict):  # that case tests requestId itself
                    rid = f"hostile-{k}"
                    raw = {**raw, "requestId": rid}
                raw = orjson.dumps(raw)
            s.producer.send(cfg.topics.requests, raw)
            s.producer.flush()
            try:
                answers[name] = s.response(rid, timeout=60)
            except TimeoutError:
                answers[name] = {"status": "no answer"}
        for idx in chunks:
            _, a, b = s.stream(X[idx], y[idx], first_id=int(idx[0]))
            n_train, n_fore = n_train + a, n_fore + b
        final = s.wait_until_counted(20, n_train, n_fore, timeout=180)
        # a 100 MB request: fetched (JobConfig.max_fetch_bytes), refused, the service goes on
        s.producer.send(cfg.topics.requests, b'{"id": 20, "request": "Query", "pad": "'
                        + b"x" * (100 * 1024 * 1024) + b'"}')
        s.producer.flush()
        huge = s.response(None, timeout=120)
        assert huge["error"]["code"] == "too_large" and "104857" in huge["error"]["message"]
        assert s.query(20)["fitted"] == n_train
        leftover = list(s.responses.drain(idle_ms=500))

    failures = []
    for name, raw, code, field in HOSTILE:
        got = answers[name]
        assert_documented(got)
        if got.get("status") != "error":
            failures.append(f"{name}: not an error: {got}")
            continue
        err = got["error"]
        if code is not None and (err["code"], err["field"]) != (code, field):
            failures.append(f"{name}: got {err['code']}/{err['field']}, want {code}/{field}")
        if not err["message"]:
            failures.append(f"{name}: no message")
    assert not failures, "\n".join(failures)
    assert len(HOSTILE) >= 25
    assert not [r for r in leftover if r.get("status") == "error"]  # each answered once
    assert_documented(final)
    assert_documented(huge)
    # every spoke counts each rejected request; "fake envelope" only spoke 0 counts
    assert final["service"]["requestsRejected"] == 2 * len(HOSTILE) - 1
    assert final["prequentialAccuracy"] > 0.98 and final["rejected"] == 0


@pytest.mark.parametrize("learner,size", [
    ({"name": "PA", "parameters": {"n_features": 10**6, "classes": list(range(1000))}},
     1_000_001_000),
    ({"name": "Ridge", "parameters": {"n_features": 10_000}}, 50_025_002),
    ({"name": "KMeans", "hyperParameters": {"n_clusters": 10_000},
      "parameters": {"n_features": 10_000}}, 100_010_000),
    ({"name": "MLP", "hyperParameters": {"hidden_layers": [100_000, 100_000]}},
     10_000_300_002),
])
def test_a_model_too_large_is_refused_before_it_is_allocated(learner, size):
    """Each number of the request below ``max_model_params`` (10^7), the model they make
    far above it (``Learner.declared_size``): the Create, and an Update that declares such
    a layout, are answered ``too_large`` on the spoke kernel before anything is allocated,
    and the pipelines already running go on."""
    from tests.test_layout import DeadWire

    w = DeadWire()
    w.request(create(1, "PA"))
    tracemalloc.start()  # numpy's arrays are traced: a model allocated shows in the peak
    try:
        w.request({**create(2), "learner": learner})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, f"{peak:,} bytes allocated for a refused Create"
    (answer,) = [r for r in w.responses if r.get("requestId") == "create-2"]
    assert (answer["status"], answer["error"]["code"], answer["error"]["field"]) == \
        ("error", "too_large", "learner.parameters")
    assert f"{size:,} parameters" in answer["error"]["message"]
    if learner["name"] == "PA":
        w.request({"id": 1, "request": "Update", "requestId": "u",
                   "learner": {"parameters": learner["parameters"]}})
        (answer,) = [r for r in w.responses if r.get("requestId") == "u"]
        assert answer["error"]["code"] == "too_large"
    for i in range(8):
        w.data(i % 2, "T", {"id": i, "features": [1.0, float(i % 2)], "label": i % 2})
    assert w.query(1)["fitted"] == 8 and 2 not in w.spokes[0].nodes
