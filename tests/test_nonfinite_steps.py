"""A record the float64 linear learners cannot step on, or a model cannot score, is refused
alone, with its reason, and changes nothing for the records around it.

PA's uncapped step (mode 0, ``l / ‖x‖²``) on a record of tiny norm, or a regression target
near float64's limit, used to leave the weights inf or NaN for good: every later prediction
of the pipeline was garbage or ``null``. A forecasting record whose features overflow a
regressor's score went out as ``"prediction": null``, counted as predicted, with no reason.
Ridge's statistics went inf for good on a record whose square overflows (a feature of 1e149
through ``PolynomialFeatures``), and k-means' matching of centers that far apart raised
in every later BSP round and TensAIR exchange, so the pipeline never synchronized again.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest

from learning.learners import PAClassifier, PARegressor
from learning.learners.base import NONFINITE_STEP
from learning.protocols.base import NONFINITE_PREDICTION
from operators.local import LocalNetwork

TINY = [1e-160, 1e-160, 1e-160]  # ‖x‖² = 3e-320, subnormal: l / ‖x‖² overflows to inf


def _stream(n=64, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    return X, [int(v) for v in (X[:, 0] + X[:, 1] > 0)], (X @ [1.0, -2.0, 0.5]).tolist()


@pytest.mark.parametrize("at", [0, 7, 15])
def test_pa_leaves_out_the_record_it_cannot_step_on_and_learns_the_rest(at):
    X, y, _ = _stream()
    bad = np.insert(X[:16], at, TINY, axis=0)
    model, twin = PAClassifier(mode=0), PAClassifier(mode=0)
    model.fit(X[16:32], y[16:32])
    twin.fit(X[16:32], y[16:32])
    labels = y[:16]
    predictions, loss = model.test_then_train(bad, labels[:at] + [1 - labels[at]] + labels[at:])
    expected, twin_loss = twin.test_then_train(X[:16], labels)
    assert model.refused_rows == (at,) and model.refused_reason == NONFINITE_STEP
    assert np.array_equal(model.get_params(), twin.get_params())
    assert predictions[:at] + predictions[at + 1:] == expected and loss == twin_loss
    model.fit(X[32:], y[32:])  # the next mini-batch: nothing left out
    assert model.refused_rows == () and np.isfinite(model.get_params()).all()


def test_pa_regressor_leaves_out_a_target_near_float64s_limit():
    X, _, t = _stream()
    model, twin = PARegressor(mode=0), PARegressor(mode=0)
    targets = t[:16]
    targets[5] = 1e149
    X_bad = X[:16].copy()
    X_bad[5] = TINY
    predictions, loss = model.test_then_train(X_bad, targets)
    keep = [i for i in range(16) if i != 5]
    expected, twin_loss = twin.test_then_train(X[keep], [t[i] for i in keep])
    assert model.refused_rows == (5,)
    assert np.array_equal(model.get_params(), twin.get_params())
    assert [predictions[i] for i in keep] == expected
    assert loss == pytest.approx(twin_loss, rel=1e-12)  # the left-out error is not in it


def _pa_network(recs: list) -> LocalNetwork:
    """PA (mode 0, no intercept: a tiny record scores 0, its loss is 1) on 2 spokes under
    TAP; records dealt by their ``id``'s parity (their Kafka partition), so that a record
    more or less changes no other record's spoke."""
    net = LocalNetwork(n_spokes=2, n_hubs=1, sharding="partition")
    net.request({"id": 0, "request": "Create",
                 "learner": {"name": "PA", "hyperParameters": {"mode": 0, "learn_intercept": False}},
                 "trainingConfiguration": {"protocol": "Asynchronous", "miniBatchSize": 4}})
    net.stream(recs, partitions=[rec["id"] % 2 for _, rec in recs])
    return net


def test_the_kernels_dead_letter_that_record_alone_and_predict_as_without_it():
    X, y, _ = _stream(200)
    good = [(True, {"id": i, "features": X[i].tolist(), "label": y[i]}) for i in range(200)]
    forecasts = [(False, {"id": 1000 + i, "features": X[i].tolist()}) for i in range(20)]
    bad = (True, {"id": 999, "features": TINY, "label": 1})
    net = _pa_network(good[:100] + [bad] + good[100:] + forecasts)
    twin = _pa_network(good + forecasts)
    q = net.query()
    assert q["fitted"] == 200 and q["rejectedBy"] == {"fit_failed": 1}
    (letter,) = net.outputs["deadLetters"]
    assert letter["record"] == {"features": TINY, "label": 1}  # the mini-batch keeps no id
    assert letter["code"] == "fit_failed" and NONFINITE_STEP in letter["reason"]
    assert net.outputs["predictions"] == twin.outputs["predictions"]
    for spoke in net.spokes:
        assert np.isfinite(spoke.pipeline.learner.get_params()).all()


def test_a_forecast_whose_prediction_is_not_finite_is_dead_lettered_with_its_reason():
    X, _, t = _stream(80)  # a float32 network: features of 1e149 score inf
    net = LocalNetwork(n_spokes=1, n_hubs=1)
    net.request({"id": 0, "request": "Create",
                 "learner": {"name": "MLPRegressor",
                             "hyperParameters": {"hidden_layers": [4], "seed": 0}},
                 "trainingConfiguration": {"protocol": "Independent", "miniBatchSize": 4}})
    net.stream([(True, {"id": i, "features": X[i].tolist(), "label": t[i]}) for i in range(80)])
    net.stream([(False, {"id": 100, "features": X[0].tolist()}),
                (False, {"id": 101, "features": [1e149, 1e149, 1e149]}),
                (False, {"id": 102, "features": X[1].tolist()})])
    predictions = net.outputs["predictions"]
    assert [p["id"] for p in predictions] == [100, 102]  # in order, the others kept
    assert all(math.isfinite(p["prediction"]) for p in predictions)
    (letter,) = net.outputs["deadLetters"]
    assert letter["code"] == "predict_failed" and letter["reason"] == NONFINITE_PREDICTION
    assert letter["record"]["id"] == 101
    q = net.query()
    assert q["predicted"] == 2 and q["rejectedBy"] == {"predict_failed": 1}


def test_ridge_leaves_out_a_record_whose_statistics_overflow_and_learns_the_rest():
    from learning.learners import OnlineRidge

    X, _, t = _stream(48)
    model, twin = OnlineRidge(), OnlineRidge()
    model.fit(X[16:], t[16:])
    twin.fit(X[16:], t[16:])
    bad = np.insert(X[:16], 9, [1e200, 1.0, 1.0], axis=0)  # 1e200² overflows: G would be inf
    predictions, loss = model.test_then_train(bad, t[:9] + [3.0] + t[9:16])
    expected, twin_loss = twin.test_then_train(X[:16], t[:16])
    assert model.refused_rows == (9,) and model.refused_reason == NONFINITE_STEP
    assert np.array_equal(model.get_params(), twin.get_params())
    assert predictions[:9] + predictions[10:] == expected
    assert loss == pytest.approx(twin_loss, rel=1e-12)
    model.fit(X[:4], t[:4])
    assert model.refused_rows == () and np.isfinite(model.get_params()).all()


def test_kmeans_assigns_and_matches_centers_beyond_float64s_squares():
    from learning.learners import KMeans

    model = KMeans(n_clusters=2, init_size=2, seed=0)
    model.fit(np.array([[1e200, 0.0], [-1e200, 0.0]]))  # squared distances overflow
    assert model.predict(np.array([[9e199, 5.0], [-2e200, 1.0]])) == [
        int(np.argmax(model.centers[:, 0])), int(np.argmin(model.centers[:, 0]))]
    w = model.get_params()
    swapped = w.reshape(2, -1)[::-1].ravel()  # the same clusters in the other order
    [matched] = model.match([swapped], w)  # raised "matrix contains invalid numeric entries"
    assert np.array_equal(matched, w)


@pytest.mark.parametrize("protocol", ["Synchronous", "TensAIR"])
def test_kmeans_pipelines_go_on_synchronizing_after_records_beyond_float64s_squares(protocol,
                                                                                     caplog):
    rng = np.random.default_rng(0)
    net = LocalNetwork(n_spokes=2, n_hubs=1, reraise=True)
    net.request({"id": 0, "request": "Create", "preProcessors": [{"name": "PolynomialFeatures"}],
                 "learner": {"name": "KMeans", "hyperParameters": {"n_clusters": 3}},
                 "trainingConfiguration": {"protocol": protocol, "miniBatchSize": 4}})
    recs = [(True, {"id": i, "features": rng.normal(size=2).tolist()}) for i in range(300)]
    for i in (40, 41, 120):  # squared by the preprocessor: 1e298
        recs[i][1]["features"] = [1e149, -1e149]
    net.stream(recs)
    q = net.query()
    assert q["status"] == "ok" and q["fitted"] + q["rejected"] >= 280
    assert q["protocol"].get("syncFailures", 0) == 0
    assert all(s.get("protocolErrors", 0) == 0 and s.get("syncFailures", 0) == 0
               for s in q["spokes"])
    failures = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not failures, failures[:3]  # a fold or an exchange that raised is only logged
