"""Preprocessors that change a record's width (feature selection, polynomial features):
``learner.parameters.n_features`` declares the width of a record, and the learner is
built for what the preprocessors make of it (:func:`learning.registry.model_width`).

Before, a pipeline with such a preprocessor and a declared width refused every record
(``fit_failed``: "X has 2 features, the model expects 3"), and under every protocol
with a hub the hubs refused every push as a model of another width (the pipeline ran as
independent learners, its synchronizations all failed); an export declared the model's
width as the records'. Through the job's own kernels, in process."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from flink_jobs.follower import predict_records
from learning.preprocessors.polynomial import PolynomialFeatures
from learning.preprocessors.selection import FeatureSelector
from learning.registry import make_pipeline, model_width
from operators.local import LocalNetwork
from tests.test_layout import DeadWire
from tests.test_relayout import RUNS, create, synchronizations

WIDTH = 3
PREPROCESSORS = {
    "selection": [{"name": "StandardScaler"},
                  {"name": "FeatureSelector", "hyperParameters": {"indices": [0, 2]}}],
    "polynomial": [{"name": "PolynomialFeatures", "hyperParameters": {"degree": 2}},
                   {"name": "StandardScaler"}],
}


def _records(n: int, seed: int, train: bool = True) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for i, x in enumerate(rng.normal(size=(n, WIDTH))):
        rec = {"id": i, "features": x.tolist()}
        if train:
            rec["label"] = int(x[0] * x[2] > 0)  # a product: polynomial features help
        out.append(rec)
    return out


def _create(pid: int, protocol: str, variant: str | None, extra: dict, pre: list,
            declared: bool, m: int = 1) -> dict:
    req = create(protocol, variant, {**extra, "hubParallelism": m}, "sum", None)
    if declared:
        req["learner"]["parameters"] = {"n_features": WIDTH, "classes": [0, 1]}
    return {**req, "id": pid, "requestId": f"c{pid}", "preProcessors": pre}


def test_output_width_is_the_width_transform_makes():
    for d, degree, interaction_only, bias in itertools.product(
            (1, 2, 3, 9), (1, 2, 3), (False, True), (False, True)):
        p = PolynomialFeatures(degree=degree, interaction_only=interaction_only,
                               include_bias=bias)
        assert p.output_width(d) == p.transform(np.zeros((1, d))).shape[1]
    for indices, drop, d in (([0, 1], False, 3), ([0, -1], True, 4), ([1, 1], False, 3),
                             ([0, 0], True, 3)):
        f = FeatureSelector(indices=indices, drop=drop)
        assert f.output_width(d) == f.transform(np.zeros((1, d))).shape[1]
    assert model_width(PREPROCESSORS["selection"], WIDTH) == 2
    assert model_width(PREPROCESSORS["polynomial"], WIDTH) == 9
    assert model_width(PREPROCESSORS["polynomial"], None) is None


@pytest.mark.parametrize("declared", [False, True], ids=["inferred", "declared"])
@pytest.mark.parametrize("pre", sorted(PREPROCESSORS))
@pytest.mark.parametrize("protocol,variant,extra", [r for r in RUNS if r[0] != "TensAIR"])
def test_every_protocol_synchronizes_a_pipeline_whose_preprocessors_change_the_width(
        protocol, variant, extra, pre, declared):
    if "threshold" in extra:  # FDA, EVENFLOW: synchronize on this short stream too
        extra = {**extra, "threshold": 0.002}
    w = DeadWire()
    w.request(_create(0, protocol, variant, extra, PREPROCESSORS[pre], declared))
    assert w.responses[-1]["status"] == "ok"
    for i, rec in enumerate(_records(240, seed=1)):
        w.data(i % 2, "T", rec)
    q, before = w.query(), None
    while q["fitted"] != before:  # each Query closes a round a spoke left open
        before, q = q["fitted"], w.query()
    assert q["fitted"] == 240 and q["rejected"] == 0
    assert sum(s.get("syncFailures", 0) for s in q["spokes"]) == 0
    assert synchronizations(q) > 0
    assert q["layout"]["nFeatures"] == WIDTH
    assert q["model"]["layout"]["n_features"] == model_width(PREPROCESSORS[pre], WIDTH)


@pytest.mark.parametrize("pre", sorted(PREPROCESSORS))
def test_a_sharded_model_and_tensair_replicas_take_the_width_the_preprocessors_make(pre):
    for protocol, m in (("Synchronous", 2), ("Asynchronous", 2), ("TensAIR", 1)):
        net = LocalNetwork(n_spokes=3, n_hubs=m, reraise=True)
        net.request(_create(0, protocol, None, {}, PREPROCESSORS[pre], True, m))
        assert net.outputs["responses"][-1]["status"] == "ok"
        net.stream([(True, rec) for rec in _records(300, seed=2)])
        q, before = net.query(), None
        while q["fitted"] != before:  # each Query closes a round a spoke left open
            before, q = q["fitted"], net.query()
        assert q["fitted"] == 300 and q["rejected"] == 0, protocol
        assert synchronizations(q) > 0, protocol
        assert sum(s.get("syncFailures", 0) + s.get("updatesDropped", 0)
                   for s in q["spokes"]) == 0, protocol


def test_a_selector_that_cannot_take_the_declared_width_is_refused_at_create():
    w = DeadWire()
    pre = [{"name": "FeatureSelector", "hyperParameters": {"indices": [0, 5]}}]
    w.request(_create(0, "Synchronous", None, {}, pre, True))
    answer = w.responses[-1]
    assert answer["status"] == "error"
    assert answer["error"]["code"] == "invalid_hyperparameter"
    assert answer["error"]["field"] == "preProcessors[0].hyperParameters"
    assert "out of range for 3 features" in answer["error"]["message"]


@pytest.mark.parametrize("pre", sorted(PREPROCESSORS))
def test_an_export_declares_the_records_width_and_warm_starts_where_it_was(pre):
    net = LocalNetwork(n_spokes=3, n_hubs=1)
    net.request(_create(0, "Synchronous", None, {}, PREPROCESSORS[pre], False))
    net.stream([(True, rec) for rec in _records(240, seed=1)])
    net.request({"id": 0, "request": "Query", "requestId": "x", "export": True})
    body = net.outputs["responses"][-1]["export"]
    assert body["learner"]["parameters"]["n_features"] == WIDTH
    net.request({**body, "id": 1})
    assert net.outputs["responses"][-1]["status"] == "ok", net.outputs["responses"][-1]
    held_out = _records(40, seed=3, train=False)
    net.stream([(False, rec) for rec in held_out])
    reference = make_pipeline(body["preProcessors"], body["learner"])
    got = {p["id"]: p["prediction"] for p in net.outputs["predictions"] if p["pipeline"] == 1}
    assert [got[r["id"]] for r in held_out] == \
        reference.predict(np.asarray([r["features"] for r in held_out]))
    # a pipeline's JSON says the same: the records' width
    assert reference.to_json()["learner"]["parameters"]["n_features"] == WIDTH


@pytest.mark.parametrize("pre", sorted(PREPROCESSORS))
def test_a_weights_follower_rebuilds_the_model_for_the_records_width(pre):
    from operators.weights import ModelAssembler

    net = LocalNetwork(n_spokes=3, n_hubs=2, limits={"weights_every_ms": 0})
    net.request(_create(0, "Synchronous", None, {}, PREPROCESSORS[pre], True, m=2))
    net.stream([(True, rec) for rec in _records(240, seed=1)])
    net.request({"id": 0, "request": "Query", "requestId": "x", "export": True})
    body = net.outputs["responses"][-1]["export"]
    follower = ModelAssembler()
    for record in net.outputs["weights"]:
        follower.add(record)
    model = follower.model(0)
    assert model is not None and model.consistent and model.version == body["version"]
    X = [r["features"] for r in _records(40, seed=3, train=False)]
    expected = make_pipeline(body["preProcessors"], body["learner"]).predict(np.asarray(X))
    assert model.predict(X) == expected
    # omldm predict checks a record against the records' width, not the learner's
    assert model.record_width == WIDTH
    out = predict_records(model, [{"id": i, "features": x} for i, x in enumerate(X)]
                          + [{"id": 99, "features": X[0][:2]}])
    assert [o["prediction"] for o in out[:-1]] == expected
    assert out[-1] == {"id": 99, "pipeline": 0, "error": "2 features; pipeline 0 takes 3"}


def test_pipelines_behind_width_changing_preprocessors_synchronize_in_flink(broker):
    """Through the real broker and a Flink MiniCluster, 2 spokes: a BSP pipeline with
    PolynomialFeatures and Shuttle's declared 9 features (a model of 54), and a TAP one
    with a FeatureSelector and an inferred layout, fit and predict every record,
    synchronize without a failure and learn (before: the first refused every record, the
    second's pushes were all refused)."""
    from flink_jobs.session import Session, local_config
    from learning.datasets import shuttle

    X, y = shuttle()
    X, y = X[:3000], y[:3000]
    runs = {
        0: ([{"name": "PolynomialFeatures"}, {"name": "StandardScaler"}], "Synchronous",
            {"n_features": 9, "classes": sorted({int(v) for v in np.unique(shuttle()[1])})}),
        1: ([{"name": "StandardScaler"},
             {"name": "FeatureSelector", "hyperParameters": {"indices": [0, 2, 4, 6, 8]}}],
            "Asynchronous", None),
    }
    cfg = local_config(broker.bootstrap_servers, topic_prefix="width-", spokes=2, hubs=1)
    with Session(cfg, "width") as s:
        for pid, (pre, protocol, params) in runs.items():
            learner = {"name": "PA", "hyperParameters": {"C": 0.01}}
            if params:
                learner["parameters"] = params
            assert s.request({"id": pid, "request": "Create", "requestId": f"c{pid}",
                              "preProcessors": pre, "learner": learner,
                              "trainingConfiguration": {"protocol": protocol,
                                                        "miniBatchSize": 8}},
                             timeout=120)["status"] == "ok"
        _, n_train, n_fore = s.stream(X, y)
        for pid in runs:
            q = s.wait_until_counted(pid, n_train, n_fore, timeout=180)
            assert q["rejected"] == 0 and q["prequentialAccuracy"] > 0.9
            assert q["protocol"]["rounds"] > 10
            assert sum(sp.get("syncFailures", 0) for sp in q["spokes"]) == 0
        assert s.query(0)["model"]["layout"]["n_features"] == 54


def test_polynomial_features_too_wide_for_memory_are_refused_and_the_job_goes_on():
    """Degree 4 of 300 features would be 348,881,875 features a record (a mini-batch of
    them terabytes: the process killed, every pipeline with it). A declared width is
    refused at Create; an inferred one refuses the records, each dead-lettered with the
    reason (``fit_failed``, ``predict_failed``), and the pipeline beside it learns on."""
    poly = [{"name": "PolynomialFeatures", "hyperParameters": {"degree": 4}}]
    w = DeadWire()
    w.request({**_create(0, "Asynchronous", None, {}, poly, False),
               "learner": {"name": "PA", "parameters": {"n_features": 300}}})
    answer = w.responses[-1]
    assert answer["status"] == "error" and answer["error"]["code"] == "invalid_hyperparameter"
    assert "348,881,875" in answer["error"]["message"]
    w.request(_create(0, "Asynchronous", None, {}, poly, False))
    w.request(_create(1, "Asynchronous", None, {}, [{"name": "StandardScaler"}], False))
    rng = np.random.default_rng(0)
    for i in range(40):
        x = rng.normal(size=300).tolist()
        rec = {"id": i, "features": x, "label": int(x[0] > 0)} if i % 5 else {"id": i,
                                                                              "features": x}
        w.data(i % 2, "T" if i % 5 else "P", rec)
    q = w.query(0)
    assert q["rejectedBy"] == {"fit_failed": 32, "predict_failed": 8}
    assert sorted(d["code"] for d in w.dead) == ["fit_failed"] * 32 + ["predict_failed"] * 8
    assert all("max_features = 100,000" in d["reason"] for d in w.dead)
    assert {len(d["record"]["features"]) for d in w.dead} == {300}
    other = w.query(1)
    assert other["fitted"] == 32 and other["predicted"] == 8 and other["rejected"] == 0


@pytest.mark.parametrize("protocol,variant,extra", [r for r in RUNS if r[0] != "TensAIR"])
def test_an_update_of_the_records_width_behind_a_selector_starts_the_pipeline_again(
        protocol, variant, extra):
    """Records of 3 features, then an Update declares 5: behind a FeatureSelector of
    columns 0 and 2 the model keeps its width (2), but the scaler before it learned 3, so
    the pipeline starts again, as for any new width (before, with the model's width
    compared alone, the scaler refused every record after the Update: ``fit_failed``)."""
    if "threshold" in extra:
        extra = {**extra, "threshold": 0.002}
    w = DeadWire()
    w.request(_create(0, protocol, variant, extra, PREPROCESSORS["selection"], False))
    for i, rec in enumerate(_records(80, seed=1)):
        w.data(i % 2, "T", rec)
    w.request({"id": 0, "request": "Update", "requestId": "u",
               "learner": {"parameters": {"n_features": 5}}})
    before = w.query()
    rng = np.random.default_rng(4)
    for i, x in enumerate(rng.normal(size=(160, 5))):
        w.data(i % 2, "T", {"id": 1000 + i, "features": x.tolist(), "label": int(x[0] * x[2] > 0)})
    q, fitted = w.query(), None
    while q["fitted"] != fitted:  # each Query closes a round a spoke left open
        fitted, q = q["fitted"], w.query()
    assert q["fitted"] == 80 + 160 and q["rejected"] == 0
    assert sum(s.get("syncFailures", 0) for s in q["spokes"]) == 0
    assert synchronizations(q) > synchronizations(before)
    assert q["layout"]["nFeatures"] == 5 and q["model"]["layout"]["n_features"] == 2
