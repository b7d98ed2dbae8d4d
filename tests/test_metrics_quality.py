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

        def spy(X, y, fit=fit, out=seen[s], **kw):
            got = fit(X, y, **kw)
            out.extend(zip(list(y), got[0]))
            return got

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
    q = net.query()
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
    q = net.query()
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
    before = net.query()["metrics"]
    stream(net, X[:200], 1 - y[:200])  # labels flipped: the old model is now wrong
    after = net.query()["metrics"]
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
    q = net.query()
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
    q = net.query()
    assert q["metrics"] is None and q["spokes"][0]["metrics"] is None
    assert (q["fitted"], q["rejected"]) == (300, 0)  # and it learns as before


def test_window_zero_keeps_cumulative_only(shuttle_head):
    X, y = shuttle_head
    net = network(create(PA, window=0), 2)
    stream(net, X[:500], y[:500])
    m = net.query()["metrics"]
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
        jsonschema.validate(net.query(), schema)


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


def test_a_subtask_hosting_two_spokes_exports_their_sums_and_the_mean_of_rates(shuttle_head):
    """With ``JobConfig.spoke_parallelism`` below the spokes a subtask hosts several
    kernels: its counters are their sums, its accuracies and rolling metrics their mean."""
    from types import SimpleNamespace

    from operators.metrics import SPOKE_METRICS, OperatorMetrics

    class Group:  # Flink's metric group, as far as OperatorMetrics uses it
        def add_group(self, *names):
            return self

        def counter(self, name):
            return SimpleNamespace(inc=lambda n: None, dec=lambda n: None)

        def meter(self, name):
            return SimpleNamespace(mark_event=lambda n: None)

    X, y = shuttle_head
    net = network(create(PA, window=400, batch=16), 2)
    stream(net, X[:1000], y[:1000])
    kernels = [SimpleNamespace(nodes={0: spoke}, service=lambda i=i: {"dataRecords": 10 + i})
               for i, spoke in enumerate(net.spokes)]
    metrics = OperatorMetrics(SimpleNamespace(get_metrics_group=Group), SPOKE_METRICS)
    metrics.refresh(kernels, force=True)
    a, b = net.spokes
    assert metrics.values[(0, "fitted")] == a.fitted + b.fitted > 900
    assert metrics.values[("dataRecords",)] == 21
    rates = [SPOKE_METRICS["prequentialAccuracyPpm"](s) for s in net.spokes]
    assert metrics.values[(0, "prequentialAccuracyPpm")] == round(sum(rates) / 2)
    rolling = [SPOKE_METRICS["rollingKappaPpm"](s) for s in net.spokes]
    assert metrics.values[(0, "rollingKappaPpm")] == round(sum(rolling) / 2)
    metrics.refresh(kernels[0], force=True)  # one kernel: its own values
    assert metrics.values[(0, "fitted")] == a.fitted


# -- log loss and ROC AUC from class probabilities (binary classifiers) ----------------------
def record_probabilities(net: LocalNetwork) -> list[list]:
    """Per spoke, per record fitted, ``(label, p)``: ``p`` the probability of the positive
    class (the second of two in canonical order) it was predicted with, None where it was
    not scored (the learner did not know two classes yet)."""
    seen: list[list] = [[] for _ in net.spokes]
    for s, spoke in enumerate(net.spokes):
        pipeline = spoke.pipeline
        fit = pipeline.test_then_train

        def spy(X, y, fit=fit, out=seen[s], pipeline=pipeline, **kw):
            got = fit(X, y, **kw)
            proba, classes = got[3], pipeline.learner.classes
            assert proba.shape == (len(y), len(classes)) and len(classes) <= 2
            for label, row in zip(y, proba):
                p = None if len(classes) < 2 or np.isnan(row).any() else float(row[1])
                out.append((label == classes[-1], p))
            return got

        pipeline.test_then_train = spy
    return seen


def river_scores(rows) -> dict:
    """river's LogLoss and ROCAUC fed record by record (unscored records skipped)."""
    log_loss, auc = rm.LogLoss(), rm.ROCAUC()
    for positive, p in rows:
        if p is not None:
            log_loss.update(positive, p)
            auc.update(positive, p)
    return {"logLoss": log_loss.get(), "rocAuc": auc.get()}


def scores_of(values: dict) -> dict:
    return {k: values[k] for k in ("logLoss", "rocAuc")}


def tails(seen, q) -> list:
    return [row for s, rows in enumerate(seen)
            for row in rows[len(rows) - q["spokes"][s]["metrics"]["windowRecords"]:]]


@pytest.fixture(scope="module")
def cancer():
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True)
    return X[:400], y[:400]


MLP = {"name": "MLP", "hyperParameters": {"hidden_layers": [8], "learning_rate": 0.01}}
TREE = {"name": "HoeffdingTree", "hyperParameters": {"grace_period": 50}}


def test_mlp_log_loss_and_roc_auc_equal_river_over_its_probabilities(cancer):
    import json

    import jsonschema

    from learning.requests import SCHEMA_PATH

    X, y = cancer
    net = network(create(MLP, window=160, pre=[{"name": "StandardScaler"}]), 1)
    seen = record_probabilities(net)
    stream(net, X, y)
    q = net.query()
    m = q["metrics"]
    rows = seen[0]
    # not scored: until the network knew both classes (the first records are all 0)
    assert len(rows) == 400 and 0 < sum(p is None for _, p in rows) <= 32
    assert_close(scores_of(m["cumulative"]), river_scores(rows))
    assert_close(scores_of(m["rolling"]), river_scores(tails(seen, q)))
    assert m["cumulative"]["rocAuc"] > 0.9 and m["cumulative"]["logLoss"] < 0.5  # it learns
    assert q["spokes"][0]["metrics"]["cumulative"] == m["cumulative"]
    schema = json.loads(SCHEMA_PATH.with_name("response.schema.json").read_text())
    jsonschema.validate(q, schema)


def test_tree_scores_merge_over_spokes_to_river_over_the_union(cancer):
    X, y = cancer
    net = network(create(TREE, window=120, protocol="Independent"), 2)
    seen = record_probabilities(net)
    stream(net, X, y)
    q = net.query()
    m = q["metrics"]
    assert_close(scores_of(m["cumulative"]), river_scores([r for rows in seen for r in rows]))
    assert_close(scores_of(m["rolling"]), river_scores(tails(seen, q)))
    for s, rows in enumerate(seen):
        spoke = q["spokes"][s]["metrics"]
        assert_close(scores_of(spoke["cumulative"]), river_scores(rows))
        assert_close(scores_of(spoke["rolling"]),
                     river_scores(rows[len(rows) - spoke["windowRecords"]:]))
    assert m["cumulative"]["rocAuc"] > 0.8


def test_learners_without_probabilities_report_no_scores(cancer):
    X, y = cancer
    net = network(create(PA, window=100), 2)
    stream(net, X[:200], y[:200])
    m = net.query()["metrics"]
    for values in (m["cumulative"], m["rolling"]):
        assert "logLoss" not in values and "rocAuc" not in values


@pytest.mark.parametrize("learner,protocol", [(MLP, "Asynchronous"), (TREE, "Independent")])
def test_multiclass_has_no_binary_scores(learner, protocol):
    from sklearn.datasets import load_digits

    X, y = load_digits(n_class=3, return_X_y=True)
    net = network(create(learner, window=100, protocol=protocol), 1)
    stream(net, X[:300], y[:300])
    m = net.query()["metrics"]
    assert m["cumulative"]["accuracy"] is not None
    for values in (m["cumulative"], m["rolling"]):
        assert values["logLoss"] is None and values["rocAuc"] is None


def test_spokes_with_different_class_pairs_make_a_multiclass_pipeline():
    import orjson

    a, b = QualityState("classification", 8), QualityState("classification", 8)
    a.update(["x", "y"], ["x", "y"], np.array([[0.9, 0.1], [0.2, 0.8]]), ["x", "y"])
    b.update(["x", "z"], ["x", "z"], np.array([[0.7, 0.3], [0.4, 0.6]]), ["x", "z"])
    parts = [orjson.loads(orjson.dumps(s.to_json())) for s in (a, b)]
    assert report(parts[:1], 8)["cumulative"]["logLoss"] == pytest.approx(
        river_scores([(False, 0.1), (True, 0.8)])["logLoss"])
    merged = report(parts, 8)["cumulative"]
    assert merged["logLoss"] is None and merged["rocAuc"] is None
    # a third class on one spoke drops its scores for good, rolling window included
    a.update(["z"], ["x"], np.array([[0.5, np.nan, np.nan]]), ["x", "y", "z"])
    a.update(["x"], ["x"], np.array([[0.5, 0.3, 0.2]]), ["x", "y", "z"])
    got = report([a.to_json()], 8)
    assert got["cumulative"]["logLoss"] is None and got["rolling"]["rocAuc"] is None
    assert got["cumulative"]["records"] == 4


def test_spoke_metrics_export_the_binary_scores(cancer):
    from operators.metrics import SPOKE_METRICS

    X, y = cancer
    net = network(create(TREE, window=100, protocol="Independent"), 1)
    stream(net, X[:200], y[:200])
    spoke = net.spokes[0]
    own = spoke.quality.own_values()["rolling"]
    assert SPOKE_METRICS["rollingLogLossMicro"](spoke) == round(1e6 * own["logLoss"])
    assert SPOKE_METRICS["rollingRocAucPpm"](spoke) == round(1e6 * own["rocAuc"])
    pa = network(create(PA, window=100), 1)
    stream(pa, X[:200], y[:200])
    with pytest.raises(LookupError):  # no probabilities: not exported
        SPOKE_METRICS["rollingRocAucPpm"](pa.spokes[0])


def test_binary_score_state_survives_pickling(cancer):
    X, y = cancer
    net = network(create(TREE, window=1000, protocol="Independent"), 1)
    stream(net, X, y)
    quality = net.spokes[0].quality
    assert len(pickle.dumps(quality)) < 6000  # counts, not records
    restored = cloudpickle.loads(cloudpickle.dumps(quality))
    assert restored.to_json() == quality.to_json()
    assert restored.own_values() == quality.own_values()


def test_a_regressor_whose_errors_are_not_finite_is_answered_null():
    """A regressor whose errors' squares overflow float64 (a warm start at weights of
    1e200: errors of 2e200): the spokes' error moments travel as JSON null, and reading
    them back raised at hub 0: every Query of the pipeline went unanswered. Read back as
    NaN, the Query answers, those metrics null. (The case first seen, PA's uncapped step
    on features of 1e-100, no longer gets there: a step that would make the model inf or
    NaN is refused, ``tests/test_nonfinite_steps.py``.)"""
    from learning.metrics import ErrorMoments

    net = LocalNetwork(n_spokes=2, n_hubs=1)
    net.request({"id": 0, "request": "Create",
                 "learner": {"name": "PARegressor", "hyperParameters": {"mode": 0},
                             "parameters": {"n_features": 2, "w": [1e200, 1e200], "b": 0.0}},
                 "trainingConfiguration": {"protocol": "Asynchronous", "miniBatchSize": 4,
                                           "warmupRounds": 0}})
    net.stream([(True, {"id": i, "features": [1.0, 1.0], "label": float(i % 3)})
                for i in range(64)])
    q = net.query()
    assert q["status"] == "ok" and q["fitted"] == 64
    cumulative = q["metrics"]["cumulative"]
    assert cumulative["records"] == 64 and cumulative["mae"] > 1e199
    assert cumulative["rmse"] is None and cumulative["r2"] is None
    back = ErrorMoments.from_json({"n": 2, "meanAbsError": None, "meanSquaredError": 1.0,
                                   "yMean": 0.0, "yVariance": 1.0})
    assert back.records == 2 and np.isnan(back.values()["mae"])
