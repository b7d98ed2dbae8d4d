"""Request parsing and validation (papers/002_9b954bd89ad87406.txt §3.4)."""

from __future__ import annotations

import orjson
import pytest

from learning import PAClassifier, RequestError, StandardScaler, make_learner, make_pipeline
from learning.requests import TRAINING_DEFAULTS, Request, parse_request


def create(**extra) -> dict:
    d = {"id": 3, "request": "Create", "requestId": "req-1",
         "preProcessors": [{"name": "StandardScaler"}],
         "learner": {"name": "PA", "hyperParameters": {"C": 0.05, "mode": 2}}}
    d.update(extra)
    return d


def error_of(raw, **kw) -> RequestError:
    with pytest.raises(RequestError) as e:
        parse_request(raw, **kw)
    assert set(e.value.to_json()) == {"code", "message", "field"}
    return e.value


def test_good_create_fills_defaults():
    for raw in (orjson.dumps(create()), orjson.dumps(create()).decode(), create()):
        r = parse_request(raw)
        assert isinstance(r, Request)
        assert (r.id, r.request, r.request_id) == (3, "Create", "req-1")
        assert r.pre_processors == [{"name": "StandardScaler"}]
        assert r.learner["name"] == "PA"
        assert r.training_configuration == {"protocol": "Asynchronous", "hubParallelism": 1,
                                            "miniBatchSize": 64, "miniBatches": 4}
    r = parse_request(create(trainingConfiguration={"miniBatchSize": 8}))
    assert r.training_configuration == {**TRAINING_DEFAULTS, "miniBatchSize": 8}
    assert parse_request(r.to_json()) == r
    with pytest.raises(Exception):
        r.id = 4  # frozen


def test_other_request_kinds():
    r = parse_request({"id": 0, "request": "Update",
                       "trainingConfiguration": {"miniBatches": 8.0}})
    assert r.training_configuration == {"miniBatches": 8}  # only what the Update names
    assert type(r.training_configuration["miniBatches"]) is int
    r = parse_request(b'{"id": 2147483647, "request": "Query", "requestId": 5}')
    assert (r.id, r.request_id, r.learner, r.pre_processors) == (2147483647, 5, None, [])
    assert parse_request('{"id": 1, "request": "Delete"}').training_configuration == {}


def test_invalid_json():
    e = error_of(orjson.dumps(create())[:-7])  # truncated
    assert (e.code, e.field, e.request_id) == ("invalid_json", None, None)
    assert error_of("[1, 2]").code == "invalid_json"
    assert error_of(b"\xff\xfe").code == "invalid_json"
    assert error_of(42).code == "invalid_json"


def test_too_large():
    big = create(learner={"name": "PA", "parameters": {"W": [[0.5] * 1000] * 520}})
    raw = orjson.dumps(big)
    assert len(raw) > 2_000_000
    e = error_of(raw)
    assert (e.code, e.field) == ("too_large", None)
    assert error_of(raw.decode()).code == "too_large"
    assert error_of(b'{"id": 1, "request": "Query"}', max_bytes=10).code == "too_large"


def test_an_oversized_request_that_is_valid_json_is_answered_with_its_request_id():
    raw = orjson.dumps({"id": 1, "request": "Query", "requestId": "big-1", "pad": "x" * 5_000_000})
    e = error_of(raw)
    assert (e.code, e.request_id) == ("too_large", "big-1")
    assert error_of(raw.decode()).request_id == "big-1"
    # beyond 64 times the limit it is not parsed at all
    assert error_of(raw, max_bytes=1000).request_id is None


@pytest.mark.parametrize("doc,field", [
    (create(trainingConfiguration={"miniBatchSize": 0}), "trainingConfiguration.miniBatchSize"),
    (create(trainingConfiguration={"miniBatchSize": 100_001}),
     "trainingConfiguration.miniBatchSize"),
    (create(trainingConfiguration={"miniBatches": "4"}), "trainingConfiguration.miniBatches"),
    (create(trainingConfiguration={"hubParallelism": 65}),
     "trainingConfiguration.hubParallelism"),
    (create(trainingConfiguration={"minibatchSize": 8}), "trainingConfiguration.minibatchSize"),
    (create(id=-1), "id"),
    (create(id=2**31), "id"),
    (create(id=True), "id"),
    (create(request="Creat"), "request"),
    (create(bogus=1), "bogus"),
    (create(learner={"name": "PA", "hyper": {}}), "learner.hyper"),
    (create(learner={"nam": "PA"}), "learner.nam"),  # the typo is named
    (create(preProcessors=[{"name": "StandardScaler", "x": 1}]), "preProcessors[0].x"),
    (create(learner={"name": "PA", "hyperParameters": [1]}), "learner.hyperParameters"),
    (create(requestId=[1]), "requestId"),
    ({"request": "Query"}, "id"),
    ({"id": 1, "request": "Create"}, "learner"),
])
def test_schema_errors_name_the_field(doc, field):
    e = error_of(doc)
    assert (e.code, e.field) == ("schema", field)
    assert field in e.message


def test_request_id_recovered_on_errors():
    assert error_of(create(trainingConfiguration={"miniBatchSize": 0})).request_id == "req-1"
    assert error_of(create(requestId=17, bogus=1)).request_id == 17
    assert error_of(create(learner={"name": "Nope"})).request_id == "req-1"
    assert error_of(create(requestId=[1])).request_id is None


def test_an_error_answer_names_the_pipeline_and_kind_where_they_are_valid():
    """Before, every request refused by the parser was answered with ``id: null`` and
    ``request: null``, though most of them name both rightly."""
    from operators.service import error_response

    e = error_of(create(trainingConfiguration={"miniBatchSize": 0}))
    assert (e.pipeline, e.kind) == (create()["id"], "Create")
    answer = error_response(e, e.request_id, e.pipeline, e.kind)
    assert (answer["id"], answer["request"]) == (create()["id"], "Create")
    e = error_of(create(id=-1))
    assert (e.pipeline, e.kind) == (None, "Create")
    e = error_of({"id": 3.0, "request": "Remove"})
    assert (e.pipeline, e.kind) == (3, None) and type(e.pipeline) is int
    e = error_of({"id": True, "request": "Query"})
    assert (e.pipeline, e.kind) == (None, "Query")


def test_unknown_protocol():
    # a service that serves only Asynchronous: the others are known but not served
    e = error_of(create(trainingConfiguration={"protocol": "FDA"}), protocols={"Asynchronous"})
    assert (e.code, e.field) == ("unknown_protocol", "trainingConfiguration.protocol")
    assert e.message == "protocol 'FDA' is not implemented yet"
    for name in ("Synchronous", "SSP", "EASGD", "EVENFLOW", "Adaptive"):
        assert error_of(create(trainingConfiguration={"protocol": name}),
                        protocols={"Asynchronous"}).code == "unknown_protocol"
    e = error_of(create(trainingConfiguration={"protocol": "Gossip"}))
    assert e.code == "unknown_protocol" and "Gossip" in e.message
    r = parse_request(create(trainingConfiguration={"protocol": "SSP"}),
                      protocols={"Asynchronous", "SSP"})
    assert r.training_configuration["protocol"] == "SSP"


def test_unknown_names_and_bad_hyperparameters():
    e = error_of(create(learner={"name": "NoSuchLearner"}))
    assert (e.code, e.field) == ("unknown_learner", "learner.name")
    e = error_of(create(preProcessors=[{"name": "StandardScaler"}, {"name": "PCA"}]))
    assert (e.code, e.field) == ("unknown_preprocessor", "preProcessors[1].name")
    e = error_of(create(learner={"name": "PA", "hyperParameters": {"C": -1}}))
    assert (e.code, e.field) == ("invalid_hyperparameter", "learner.hyperParameters.C")
    assert e.message == "C must be > 0, got -1"
    e = error_of(create(learner={"name": "PA", "hyperParameters": {"c": 1}}))
    assert (e.code, e.field) == ("invalid_hyperparameter", "learner.hyperParameters.c")
    e = error_of(create(preProcessors=[{"name": "StandardScaler",
                                        "hyperParameters": {"with_std": "no"}}]))
    assert (e.code, e.field) == ("invalid_hyperparameter",
                                 "preProcessors[0].hyperParameters.with_std")
    e = error_of(create(learner={"name": "PA", "parameters": {"classes": [0, 1],
                                                              "n_features": 2, "W": [1.0]}}))
    assert (e.code, e.field) == ("invalid_parameter", "learner.parameters.W")
    e = error_of({"id": 1, "request": "Update", "learner": {"name": "NoSuchLearner"}})
    assert e.code == "unknown_learner"


def test_registry_builds_from_specs():
    pa = make_learner({"name": "PassiveAggressive",
                       "hyperParameters": {"C": None, "mode": 0}, "parameters": None})
    assert isinstance(pa, PAClassifier) and (pa.C, pa.mode) == (0.01, 0)
    pa = make_learner({"name": "PA", "parameters": {"classes": [1, 0], "n_features": 2,
                                                    "W": [[1.0, 0.0], [0.0, 1.0]],
                                                    "b": [0.0, 0.0]}})
    assert pa.classes == [0, 1]  # canonical order, rows follow
    assert pa.predict([[1.0, 0.0], [0.0, 1.0]]) == [1, 0]
    r = parse_request(create())
    pipe = make_pipeline(r.pre_processors, r.learner)
    assert isinstance(pipe.preprocessors[0], StandardScaler)
    assert pipe.learner.hyperparameters() == {"C": 0.05, "mode": 2, "learn_intercept": True}


def test_request_error_json():
    e = RequestError("schema", "x must be 1", "a.x", request_id=3)
    assert e.to_json() == {"code": "schema", "message": "x must be 1", "field": "a.x"}
    assert orjson.loads(orjson.dumps(e.to_json()))["field"] == "a.x"
