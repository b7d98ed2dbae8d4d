"""Per-pipeline quality metrics beyond accuracy (issue 20, part 4; :mod:`learning.metrics`):
the Query's ``metrics`` equal river's metrics over the same prequential predictions, on one
spoke and merged over several, cumulative and rolling, for classifiers and regressors,
through pickling, with ``metricsWindow`` validated.

Every network runs on the in-process kernel (:class:`operators.local.LocalNetwork`).
"""

from __future__ import annotations

import pickle

import cloudpickle
import numpy as np
import pytest
from river import metrics as rm

from learning.errors import RequestError
from learning.metrics import QualityState, report
from learning.protocols import make_hub, make_spoke
from learning.requests import parse_request
from operators.local import LocalNetwork


def create(learner: dict, *, batch: int = 16, window: int | None = None,
           protocol: str = "Asynchronous", pre: list | None = None) -> dict:
    cfg = {"protocol": protocol, "miniBatchSize": batch, "miniBatches": 2}
    if window is not None:
        cfg["metricsWindow"] = window
    return {"id": 3, "request": "Create", "requestId": "c", "preProcessors": pre or [],
            "learner": learner, "trainingConfiguration": cfg}


def network(req: dict, k: int) -> LocalNetwork:
    r = parse_request(req)
    return LocalNetwork([make_spoke(r) for _ in range(k)], [make_hub(r)], network=r.id)


def record_predictions(net: LocalNetwork) -> list[list]:
    """Per spoke, the ``(label, prediction)`` pairs its pipeline scored, in order."""
    seen: list[list] = [[] for _ in net.spokes]
    for s, spoke in enumerate(net.spokes):
        pipeline = spoke.pipeline
        fit = pipeline.test_then_train

        def spy(X, y, fit=fit, out=seen[s]):
            predictions, n_correct, loss = fit(X, y)
            out.extend(zip(list(y), predictions))
            return predictions, n_correct, loss

        pipeline.test_then_train = spy
    return seen


def stream(net: LocalNetwork, X, y, *, every: int = 50) -> None:
    k = len(net.spokes)
    for i in range(len(X)):
        s = i % k
        net.feed(s, lambda s=s, i=i: net.spokes[s].on_train(X[i].tolist(), y[i].item()))
        if i % every == 0:
            net.run()
    net.run()


def query(net: LocalNetwork) -> dict:
    for s in net.spokes:
        s.on_query("q")
    net.run()
    return net.outputs["responses"][-1]


def river_classification(pairs) -> dict:
    """river's metrics as river's progressive_val_score feeds them: None predictions skipped."""
    cm = rm.ConfusionMatrix()
    acc, f1, kappa = rm.Accuracy(cm=cm), rm.MacroF1(cm=cm), rm.CohenKappa(cm=cm)
    for t, p in pairs:
        if p is not None:
            cm.update(t, p)
    return {"records": cm.n_samples, "accuracy": acc.get(), "macroF1": f1.get(),
            "kappa": kappa.get()}


def river_regression(pairs) -> dict:
    mae, rmse, r2 = rm.MAE(), rm.RMSE(), rm.R2()
    for t, p in pairs:
        for m in (mae, rmse, r2):
            m.update(t, p)
    return {"records": len(pairs), "mae": mae.get(), "rmse": rmse.get(), "r2": r2.get()}


def assert_close(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key


@pytest.fixture(scope="module")
def shuttle_head():
    from learning.datasets import shuttle

    X, y = shuttle()
    return X[:3000], y[:3000]


PA = {"name": "PA", "hyperParameters": {"C": 0.01, "mode": 1}}


def test_one_spoke_equals_river_over_the_same_predictions(shuttle_head):
    X, y = shuttle_head
    net = network(create(PA, window=500, pre=[{"name": "StandardScaler"}]), 1)
    seen = record_predictions(net)
    stream(net, X, y)
    q = query(net)
    pairs = seen[0]
    assert len(pairs) == 3000 and q["metrics"]["task"] == "classification"
    assert_close(q["metrics"]["cumulative"], river_classification(pairs))
    # prequentialAccuracy is kept, and agrees but for the first record (predicted None)
    assert q["metrics"]["cumulative"]["records"] == 2999
    assert q["metrics"]["cumulative"]["accuracy"] * 2999 == pytest.approx(
        q["prequentialAccuracy"] * 3000)
    n = q["metrics"]["windowRecords"]
    assert 500 <= n < 500 + 32 + 16  # a chunk (ceil(500 / 16)) and a mini-batch at most
    assert_close(q["metrics"]["rolling"], river_classification(pairs[-n:]))
    assert q["spokes"][0]["metrics"]["cumulative"] == q["metrics"]["cumulative"]


def test_several_spokes_merge_to_river_over_the_union(shuttle_head):
    X, y = shuttle_head
    net = network(create(PA, window=600), 3)
    seen = record_predictions(net)
    stream(net, X, y)
    q = query(net)
    union = [pair for pairs in seen for pair in pairs]
    assert_close(q["metrics"]["cumulative"], river_classification(union))
    assert q["metrics"]["window"] == 600
    for s, pairs in enumerate(seen):
        spoke = q["spokes"][s]["metrics"]
        assert spoke["window"] == 200  # ceil(600 / 3) each
        assert_close(spoke["cumulative"], river_classification(pairs))
        assert_close(spoke["rolling"], river_classification(pairs[-spoke["windowRecords"]:]))
    tails = [pair for s, pairs in enumerate(seen)
             for pair in pairs[len(pairs) - q["spokes"][s]["metrics"]["windowRecords"]:]]
    assert q["metrics"]["windowRecords"] == len(tails)
    assert_close(q["metrics"]["rolling"], river_classification(tails))


def test_rolling_accuracy_drops_after_a_concept_change_while_the_cumulative_lags(shuttle_head):
    X, y = shuttle_head
    net = network(create(PA, window=200, pre=[{"name": "StandardScaler"}]), 2)
    stream(net, X, y)
    before = query(net)["metrics"]
    stream(net, X[:200], 1 - y[:200])  # labels flipped: the old model is now wrong
    after = query(net)["metrics"]
    assert before["rolling"]["accuracy"] > 0.9
    assert after["rolling"]["accuracy"] < 0.5
    assert after["cumulative"]["accuracy"] > 0.8  # most records were seen before the change
    assert after["rolling"]["kappa"] < before["rolling"]["kappa"]


def test_regression_metrics_equal_river(shuttle_head):
    X, _ = shuttle_head
    rng = np.random.default_rng(0)
    w = rng.normal(size=X.shape[1])
    target = (X - X.mean(0)) / X.std(0) @ w + rng.normal(scale=0.1, size=len(X))
    net = network(create({"name": "PARegressor"}, window=300,
                         pre=[{"name": "StandardScaler"}]), 2)
    seen = record_predictions(net)
    stream(net, X, target)
    q = query(net)
    m = q["metrics"]
    assert m["task"] == "regression" and q["prequentialAccuracy"] is None
    assert_close(m["cumulative"], river_regression([p for s in seen for p in s]))
    tails = [pair for s, pairs in enumerate(seen)
             for pair in pairs[len(pairs) - q["spokes"][s]["metrics"]["windowRecords"]:]]
    assert_close(m["rolling"], river_regression(tails))
    assert m["rolling"]["r2"] > 0.5  # it learns


def test_clustering_has_no_supervised_metrics(shuttle_head):
    X, y = shuttle_head
    net = network(create({"name": "KMeans", "hyperParameters": {"n_clusters": 3}}), 2)
    stream(net, X[:300], y[:300])
    q = query(net)
    assert q["metrics"] is None and q["spokes"][0]["metrics"] is None


def test_window_zero_keeps_cumulative_only(shuttle_head):
    X, y = shuttle_head
    net = network(create(PA, window=0), 2)
    stream(net, X[:500], y[:500])
    m = query(net)["metrics"]
    assert m["rolling"] is None and m["windowRecords"] == 0
    assert m["cumulative"]["records"] == 498  # each spoke's first record is predicted None


def test_metric_state_survives_pickling(shuttle_head):
    """Spokes are pickled into Flink state (cloudpickle): the state is compact, and a restored
    spoke reports as before and counts on."""
    X, y = shuttle_head
    net = network(create(PA, window=1000), 1)
    stream(net, X[:2000], y[:2000])
    spoke = net.spokes[0]
    size = len(pickle.dumps(spoke.quality))
    assert size < 4000  # counts, not records
    restored = cloudpickle.loads(cloudpickle.dumps(spoke.quality))
    assert restored.to_json() == spoke.quality.to_json()
    restored.update([0, 1], [0, 0])
    assert restored.cumulative.records == spoke.quality.cumulative.records + 2


def test_regression_state_json_round_trip():
    a = QualityState("regression", 10)
    a.update([1.0, 2.0, 4.0], [1.5, 2.0, 3.0])
    b = QualityState("regression", 10)
    b.update([0.0], [0.5])
    m = report([a.to_json(), b.to_json()], 20)
    want = river_regression([(1.0, 1.5), (2.0, 2.0), (4.0, 3.0), (0.0, 0.5)])
    assert_close(m["cumulative"], want)
    assert_close(m["rolling"], want)


def test_labels_of_every_json_kind_merge():
    for labels in (["a", "b"], [True, False], [3, 7]):
        a, b = QualityState("classification", 4), QualityState("classification", 4)
        a.update(labels, [labels[0], None])
        b.update(labels[::-1], labels[::-1])
        import orjson

        parts = [orjson.loads(orjson.dumps(s.to_json())) for s in (a, b)]
        got = report(parts, 8)["cumulative"]
        pairs = list(zip(labels, [labels[0], None])) + list(zip(labels[::-1], labels[::-1]))
        assert_close(got, river_classification(pairs))


@pytest.mark.parametrize("bad", [-1, 1.5, "1000", 10_000_001])
def test_metrics_window_is_validated(bad):
    with pytest.raises(RequestError) as e:
        parse_request(create(PA, window=bad))
    assert e.value.field == "trainingConfiguration.metricsWindow"


def test_query_response_follows_its_schema(shuttle_head):
    import json

    import jsonschema

    from learning.requests import SCHEMA_PATH

    X, y = shuttle_head
    schema = json.loads(SCHEMA_PATH.with_name("response.schema.json").read_text())
    for learner, target in ((PA, y), ({"name": "PARegressor"}, X[:, 0] / 100.0),
                            ({"name": "KMeans", "hyperParameters": {"n_clusters": 2}}, y)):
        net = network(create(learner), 2)
        stream(net, X[:400], target[:400])
        jsonschema.validate(query(net), schema)


# -- the Grafana dashboard (deploy/grafana) ------------------------------------------------------
def test_dashboard_queries_only_metrics_the_operators_export():
    import json

    from deploy.grafana import DASHBOARD, METRIC_PREFIX, queried_metrics
    from operators.metrics import HUB_METRICS, SPOKE_METRICS

    board = json.loads(DASHBOARD.read_text())
    assert board["panels"] and any(v["name"] == "pipeline" for v in board["templating"]["list"])
    exported = {*SPOKE_METRICS, *HUB_METRICS, "fittedPerSecond"}
    names = queried_metrics()
    assert names and all(n.startswith(METRIC_PREFIX) for n in names), names
    assert {n[len(METRIC_PREFIX):] for n in names} <= exported
    for needed in ("fittedPerSecond", "rollingKappaPpm", "rollingMaeMicro", "bytesToHubs",
                   "bytesToSpokes", "feedbackRoundTripMs"):
        assert METRIC_PREFIX + needed in names


def test_spoke_and_hub_metrics_read_the_quality_state(shuttle_head):
    from operators.metrics import HUB_METRICS, SPOKE_METRICS

    X, y = shuttle_head
    net = network(create(PA, window=400, batch=16), 2)
    stream(net, X[:1000], y[:1000])
    spoke, hub = net.spokes[0], net.hubs[0]
    own = spoke.quality.own_values()["rolling"]
    assert SPOKE_METRICS["rollingAccuracyPpm"](spoke) == round(1e6 * own["accuracy"])
    assert SPOKE_METRICS["rollingKappaPpm"](spoke) == round(1e6 * own["kappa"])
    with pytest.raises(KeyError):  # a classifier has no regression metrics: not exported
        SPOKE_METRICS["rollingMaeMicro"](spoke)
    assert HUB_METRICS["feedbackRoundTripMs"](hub) >= 0  # the spokes acknowledged frames
