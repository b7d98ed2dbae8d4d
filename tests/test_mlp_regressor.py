"""The MLP regressor (learning.learners.neural.MLPRegressor): it learns Friedman #1, its
state survives JSON and the flat vector, it passes the shared conformance checks, and it
trains on 2 spokes of the in-process kernel under Synchronous and EVENFLOW (l2, and kl,
the monitored function of papers/003 §IV's regression setting), reporting regression
metrics in the Query answer."""

from __future__ import annotations

import itertools
import math

import numpy as np
import orjson
import pytest

from learning.errors import HyperparameterError, ParameterError, RequestError
from learning.learners import MLPRegressor
from learning.registry import LEARNERS, make_learner
from tests.checks import check_learner


@pytest.fixture(scope="module")
def friedman():
    from river.datasets import synth

    data = list(itertools.islice(synth.Friedman(seed=7), 6000))
    X = np.array([list(x.values()) for x, _ in data])
    return X, [float(t) for _, t in data]


def test_it_learns_friedman(friedman):
    X, y = friedman
    model = MLPRegressor(hidden_layers=[32, 16], learning_rate=0.01)
    for i in range(0, 5000, 16):
        model.fit(X[i:i + 16], y[i:i + 16])
    mse = model.mse(X[5000:], y[5000:])
    assert mse < 0.4 * np.var(y[5000:])  # variance ≈ 24: predicting the mean
    predictions = model.predict(X[5000:5005])
    assert all(type(p) is float for p in predictions)
    assert model.task == "regression" and not model.has_proba and model.needs_own_interpreter


def test_test_then_train_reports_absolute_errors(friedman):
    X, y = friedman
    model, twin = MLPRegressor(hidden_layers=[8]), MLPRegressor(hidden_layers=[8])
    model.fit(X[:32], y[:32])
    twin.fit(X[:32], y[:32])
    before = twin.predict(X[32:48])
    predictions, abs_errors = model.test_then_train(X[32:48], y[32:48])
    assert predictions == pytest.approx(before)  # the network before the step
    assert abs_errors == pytest.approx(np.abs(np.array(y[32:48]) - before).sum())
    assert twin.loss(X[32:48], y[32:48]) == pytest.approx(abs_errors)
    assert twin.score(X[32:48], y[32:48]) == pytest.approx(-abs_errors / 16)
    assert model.predict(X[32:48]) != before  # one step was taken
    with pytest.raises(ValueError, match="real"):
        model.fit(X[:2], ["a", "b"])
    assert MLPRegressor().predict(X[:3]) == [0.0, 0.0, 0.0]  # nothing built yet


def test_json_round_trip_keeps_weights_and_optimizer(friedman):
    X, y = friedman
    model = MLPRegressor(hidden_layers=[16, 8], learning_rate=0.01, seed=3)
    for i in range(0, 320, 16):
        model.fit(X[i:i + 16], y[i:i + 16])
    doc = orjson.loads(orjson.dumps(model.to_json()))
    assert doc["name"] == "MLPRegressor" and set(doc["parameters"]) == {
        "n_features", "params", "optimizer"}
    copy = make_learner(doc)
    assert copy.predict(X[:50]) == model.predict(X[:50])
    model.fit(X[320:336], y[320:336])
    copy.fit(X[320:336], y[320:336])  # Adam's moments came along: the same next step
    assert copy.predict(X[:50]) == pytest.approx(model.predict(X[:50]), abs=1e-5)
    with pytest.raises(ParameterError, match="classes"):
        MLPRegressor.from_json({**doc, "parameters": {**doc["parameters"], "classes": [0]}})
    with pytest.raises(ParameterError, match="params"):
        MLPRegressor.from_json({**doc, "parameters": {**doc["parameters"], "params": [1.0]}})


def test_flat_vector_is_the_displacement_from_the_seeded_start(friedman):
    X, y = friedman
    a, b = MLPRegressor(hidden_layers=[8], seed=5), MLPRegressor(hidden_layers=[8], seed=5)
    a.grow({"n_features": 10})
    assert a.get_params().shape == (10 * 8 + 8 + 8 + 1,) and not a.get_params().any()
    assert a.layout() == {"n_features": 10, "size": 97}
    a.fit(X[:64], y[:64])
    b.set_params(b.project(a.get_params(), a.layout()))
    assert b.predict(X[:20]) == a.predict(X[:20])
    assert np.array_equal(b.get_params(), a.get_params())
    halfway = MLPRegressor(hidden_layers=[8], seed=5)
    halfway.grow(a.layout())
    halfway.set_params(0.5 * a.get_params())  # averaging displacements averages weights
    assert np.allclose(halfway.get_params(), 0.5 * a.get_params(), atol=1e-6)
    with pytest.raises(ValueError, match="parameters"):
        b.set_params(np.zeros(3))
    with pytest.raises(ValueError, match="architecture"):
        MLPRegressor(hidden_layers=[9]).grow(a.layout())
    with pytest.raises(ValueError, match="n_features"):
        b.grow({"n_features": 11})
    assert not MLPRegressor().project(np.zeros(0), {"n_features": None, "size": 0}).size


def test_hyperparameters_step_size_and_registry():
    assert LEARNERS["MLPRegressor"] is MLPRegressor
    model = MLPRegressor(hidden_layers=[4], optimizer="sgd", learning_rate=0.01)
    model.fit(np.zeros((2, 3)), [1.0, 2.0])
    assert model.step_size() == "learning_rate"
    model.set_step_scale(0.25)  # papers/001 eq. 4 on 4 spokes
    assert model._opt.param_groups[0]["lr"] == pytest.approx(0.0025)
    model.update_hyperparameters(learning_rate=0.02)
    assert model._opt.param_groups[0]["lr"] == pytest.approx(0.005)
    with pytest.raises(HyperparameterError, match="hidden_layers"):
        model.update_hyperparameters(hidden_layers=[5])
    with pytest.raises(RequestError, match="loss_function"):  # MSE only
        make_learner({"name": "MLPRegressor", "hyperParameters": {"loss_function": "mse"}})
    with pytest.raises(RequestError) as e:
        make_learner({"name": "MLPRegressor", "hyperParameters": {"learning_rate": 0}})
    assert e.value.field == "learner.hyperParameters.learning_rate"


def test_conformance(friedman):
    X, y = friedman
    check_learner(lambda: MLPRegressor(hidden_layers=[8], learning_rate=0.01, seed=2),
                  X[:300], y[:300], 16)


def test_thread_mode_refuses_it():
    from operators.service import check_execution_mode

    with pytest.raises(RequestError) as e:
        check_execution_mode(MLPRegressor(), "MLPRegressor", "thread")
    assert (e.value.code, e.value.field) == ("unsupported", "learner.name")
    check_execution_mode(MLPRegressor(), "MLPRegressor", "process")


@pytest.mark.parametrize("protocol,extra", [
    ("Synchronous", {}),
    ("EVENFLOW", {"variant": "basic", "monitoredFunction": "l2", "threshold": 0.5}),
    ("EVENFLOW", {"variant": "fast", "monitoredFunction": "l2", "threshold": 0.5,
                  "coefficients": 20}),
    # papers/003 §IV's own setting: a regression network monitored with KL, T = 0.3
    ("EVENFLOW", {"variant": "basic", "monitoredFunction": "kl", "threshold": 0.3}),
])
def test_two_spokes_fit_every_record_and_report_regression_metrics(friedman, protocol, extra):
    from flink_jobs.local_run import stream_local

    X, y = friedman
    n = 1200
    request = {"id": 1, "request": "Create", "requestId": "c", "preProcessors": [],
               "learner": {"name": "MLPRegressor",
                           "hyperParameters": {"hidden_layers": [16], "learning_rate": 0.01}},
               "trainingConfiguration": {"protocol": protocol, "miniBatchSize": 16,
                                         "miniBatches": 1, **extra}}
    run = stream_local(request, X[:n], np.array(y[:n]), spokes=2, every=0, seed=1)
    q = run.final
    assert q["status"] == "ok" and q["fitted"] == n
    metrics = q["metrics"]
    assert metrics["task"] == "regression" and metrics["cumulative"]["records"] == n
    mae = metrics["cumulative"]["mae"]
    assert math.isfinite(mae) and 0 < mae < 15
    assert q["meanLoss"] == pytest.approx(mae)  # loss_sum: the absolute errors
    assert {"rmse", "r2"} <= set(metrics["cumulative"])
    assert q["protocol"]["rounds"] > 0
    hub = run.net.hubs[0].learner  # the global model predicts floats
    assert all(type(p) is float for p in hub.predict(X[n:n + 5]))
    if protocol == "EVENFLOW" and extra["variant"] == "fast":
        assert all(s["lemma1Violations"] == 0 for s in q["spokes"])


def test_the_regression_experiment_reports_test_mse(tmp_path):
    import io
    import json

    from flink_jobs.experiment import run_regression

    out = io.StringIO()
    rows = run_regression(tmp_path / "r.json", spokes=2, records=800,
                          protocols=("Centralized", "Synchronous", "EVENFLOW"), out=out)
    assert [r["protocol"] for r in rows] == ["Centralized", "Synchronous", "EVENFLOW",
                                             "EVENFLOW", "EVENFLOW"]
    assert all(r["records"] == 640 and r["holdout_records"] == 160 for r in rows)
    assert all(math.isfinite(r["test_mse"]) and r["prequential_mae"] > 0 for r in rows)
    assert rows[0]["bytes_to_hubs"] == 0 and rows[1]["rounds"] > 0
    assert json.loads((tmp_path / "r.json").read_text()) == rows
    assert "| Synchronous | 2 |" in out.getvalue() and "test MSE" in out.getvalue()
    # --target-scaler: the network fits the scaled target, the global model's held-out
    # predictions are mapped back (640 records: test MSE 24.1 → 14.5 centralized, 42.1 →
    # 19.3 under BSP)
    scaled = run_regression(tmp_path / "s.json", spokes=2, records=800,
                            protocols=("Centralized", "Synchronous"), target_scaler=True,
                            out=io.StringIO())
    assert all(r["target_scaler"] for r in scaled) and not rows[0]["target_scaler"]
    for before, after in zip(rows[:2], scaled):
        assert after["test_mse"] < 0.8 * before["test_mse"], (before, after)


def _network(name, friedman):
    X, y = friedman
    X = np.ascontiguousarray(X[:64, :9])
    if name == "MLPRegressor":
        return MLPRegressor(hidden_layers=[8], seed=1), X, y[:64]
    hyper = {"image_shape": [1, 3, 3], "channels": [2], "hidden": 4} if name == "CNN" \
        else {"hidden_layers": [8]}
    return (make_learner({"name": name, "hyperParameters": {**hyper, "seed": 1}}), X,
            [int(t > 14) for t in y[:64]])


@pytest.mark.parametrize("name,bad", [("MLPRegressor", "target"), ("MLP", "feature"),
                                      ("CNN", "feature"), ("MLPRegressor", "feature")])
def test_a_record_beyond_float32_is_left_out_and_its_neighbours_learned(friedman, name,
                                                                          bad):
    """The networks' weights are float32: a target of 1e100 (a valid JSON number, within
    the records' ±1e150) or a feature of 1e39 fed without a scaler made the loss inf and
    every weight NaN at the next step, and then (a first guard) made its whole mini-batch
    refused. Now that record alone is left out (``refused_rows``, with the reason): the
    step is the one the other 15 records make without it (to float32 rounding)."""
    model, X, labels = _network(name, friedman)
    twin, _, _ = _network(name, friedman)
    model.fit(X[:32], labels[:32])
    twin.fit(X[:32], labels[:32])
    Xb, lb = X[32:48].copy(), list(labels[32:48])
    if bad == "target":
        lb[3] = 1e100
    else:
        Xb[3, 0] = 1e39
    predictions, loss = model.test_then_train(Xb, lb)
    assert model.refused_rows == (3,) and "not finite in float32" in model.refused_reason
    keep = [i for i in range(16) if i != 3]
    twin_predictions, twin_loss = twin.test_then_train(Xb[keep], [lb[i] for i in keep])
    assert twin.refused_rows == ()
    np.testing.assert_allclose(model.get_params(), twin.get_params(), rtol=1e-5, atol=1e-6)
    assert math.isclose(loss, twin_loss, rel_tol=1e-5)
    assert [predictions[i] for i in keep] == pytest.approx(twin_predictions, rel=1e-5) \
        if name == "MLPRegressor" else [predictions[i] for i in keep] == twin_predictions
    model.fit(X[48:], labels[48:])  # the next call leaves nothing out
    assert model.refused_rows == () and np.all(np.isfinite(model.get_params()))


@pytest.mark.parametrize("name", ["MLPRegressor", "MLP"])
def test_a_mini_batch_the_model_cannot_step_on_is_refused_and_the_network_kept(friedman,
                                                                                 name):
    """Where no single record is to blame (every record beyond float32: nothing left to
    step on), the step is not taken: the mini-batch is refused with the reason, the
    weights and the optimizer's state stay as they were."""
    model, X, labels = _network(name, friedman)
    model.fit(X[:32], labels[:32])
    before, state = model.get_params(), orjson.dumps(model.to_json())
    Xb = X[32:48].copy()
    Xb[:, 0] = 1e39
    with pytest.raises(ValueError, match="not finite in float32"):
        model.test_then_train(Xb, list(labels[32:48]))
    np.testing.assert_array_equal(model.get_params(), before)
    assert orjson.dumps(model.to_json()) == state  # the optimizer's moments too
    model.fit(X[48:], labels[48:])  # and it goes on learning
    assert np.all(np.isfinite(model.get_params())) and not np.array_equal(
        model.get_params(), before)


def test_the_pipeline_goes_on_and_the_query_answers_after_such_a_record():
    """Through the job's kernels (2 spokes, TAP): the record alone is refused as
    ``fit_failed`` (dead-lettered with the reason; the other 3 of its mini-batch fitted),
    the global model stays finite, forecasts are answered and Queries too; a spoke whose
    losses did sum to NaN (a learner without the guard) no longer fails every Query of
    its pipeline."""
    from operators.local import LocalNetwork

    net = LocalNetwork(n_spokes=2, n_hubs=1)
    net.request({"id": 0, "request": "Create", "preProcessors": [{"name": "StandardScaler"}],
                 "learner": {"name": "MLPRegressor", "hyperParameters": {"seed": 0}},
                 "trainingConfiguration": {"protocol": "Asynchronous", "miniBatchSize": 4,
                                           "warmupRounds": 0}})  # a spoke may run ahead
    rng = np.random.default_rng(0)
    recs = [(True, {"id": i, "features": rng.normal(size=3).tolist(),
                    "label": float(rng.normal())}) for i in range(200)]
    recs.insert(100, (True, {"id": 999, "features": [0.1, 0.2, 0.3], "label": 1e100}))
    recs += [(False, {"id": 1000 + i, "features": rng.normal(size=3).tolist()})
             for i in range(5)]
    net.stream(recs)
    q = net.query()
    assert q["fitted"] == 200 and q["rejectedBy"] == {"fit_failed": 1}
    dead, = net.outputs["deadLetters"]
    assert "not finite in float32" in dead["reason"] and dead["record"]["label"] == 1e100
    assert np.all(np.isfinite(net.hubs[0].shard()))
    assert all(type(p["prediction"]) is float for p in net.outputs["predictions"])
    net.spokes[1].loss_sum = math.nan
    assert net.query()["meanLoss"] is None
