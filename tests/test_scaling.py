"""``trainingConfiguration.scaling``: the per-spoke mini-batch ``B / n`` and step size
``α / n`` of papers/001_00243469e12aa123.txt §II-C, eq. (3) and (4), on ``n`` spokes
(:mod:`learning.scaling`).

Through the job's kernels in process (:class:`operators.local.LocalNetwork`): requests
and record batches as the job gets them, answers read from ``outputs["responses"]``.
"""

from __future__ import annotations

import jsonschema
import numpy as np
import pytest

from learning.errors import RequestError
from learning.learners import PAClassifier
from learning.registry import make_learner
from learning.requests import parse_request, request_schema
from learning.protocols.parameters import TRAINING_PARAMETERS
from learning.scaling import check_scaling, spoke_mini_batch_size, step_factor
from operators.local import LocalNetwork

N_SPOKES = 4
D = 3


def pa(C: float = 0.01, mode: int = 1) -> dict:
    return {"name": "PA", "hyperParameters": {"C": C, "mode": mode},
            "parameters": {"n_features": D, "classes": [0, 1]}}


def mlp(learning_rate: float = 0.01) -> dict:
    return {"name": "MLP", "hyperParameters": {"hidden_layers": [4], "optimizer": "sgd",
                                               "learning_rate": learning_rate},
            "parameters": {"n_features": D, "classes": [0, 1]}}


def create(learner: dict, protocol: str = "Asynchronous", pid: int = 7, **config) -> dict:
    # miniBatches high: no synchronization interferes unless a test wants one
    return {"id": pid, "request": "Create", "requestId": "c", "learner": learner,
            "trainingConfiguration": {"protocol": protocol, "miniBatchSize": 64,
                                      "miniBatches": 100_000, **config}}


def records(n: int, seed: int = 0) -> list[tuple[bool, dict]]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, D))
    y = (X @ np.array([1.0, -2.0, 0.5]) > 0).astype(int)
    return [(True, {"features": x.tolist(), "label": int(t)}) for x, t in zip(X, y)]


def started(req: dict) -> LocalNetwork:
    net = LocalNetwork(n_spokes=N_SPOKES, n_hubs=1, network=req["id"])
    net.request(req)
    answer = net.outputs["responses"][-1]
    assert answer["status"] == "ok", answer
    return net


def ask(net: LocalNetwork, doc: dict) -> dict:
    before = len(net.outputs["responses"])
    net.request(doc)
    assert len(net.outputs["responses"]) == before + 1
    return net.outputs["responses"][-1]


def query(net: LocalNetwork) -> dict:
    answer = ask(net, {"id": net.network, "request": "Query", "requestId": "q"})
    assert answer["status"] == "ok", answer
    return answer


def refused(doc: dict) -> RequestError:
    with pytest.raises(RequestError) as e:
        parse_request(doc)
    return e.value


# -- eq. (3): the global mini-batch B, B / n per spoke ----------------------------------------
def test_the_per_spoke_mini_batch_is_b_over_n_rounded_half_up_and_at_least_one():
    assert spoke_mini_batch_size(64, "batch", 4) == 16
    assert spoke_mini_batch_size(64, "both", 4) == 16
    assert spoke_mini_batch_size(10, "batch", 4) == 3  # 2.5, half up
    assert spoke_mini_batch_size(9, "batch", 4) == 2  # 2.25
    assert spoke_mini_batch_size(3, "batch", 8) == 1  # never 0
    for scaling in ("none", "learning-rate"):
        assert spoke_mini_batch_size(64, scaling, 4) == 64
    assert step_factor("learning-rate", 4) == step_factor("both", 4) == 0.25
    assert step_factor("none", 4) == step_factor("batch", 4) == 1.0


def test_batch_scaling_fits_b_over_n_records_per_spoke():
    """miniBatchSize 64 on 4 spokes: each spoke fits mini-batches of 16 records, seen in
    the spoke's fitted batches before any Query and in the Query's protocol section; the
    declared configuration still says 64."""
    net = started(create(pa(), scaling="batch"))
    assert [s.mini_batch_size for s in net.spokes] == [16] * N_SPOKES
    net.records(0, records(40))
    net.run()
    spoke = net.spokes[0]
    assert (spoke.batches, spoke.fitted) == (2, 32)  # 8 records wait for the third
    answer = query(net)
    assert answer["protocol"]["scaling"] == "batch"
    assert answer["protocol"]["effectiveMiniBatchSize"] == 16
    assert answer["protocol"]["effectiveLearningRate"] == 0.01  # the step is not scaled
    assert answer["trainingConfiguration"]["miniBatchSize"] == 64
    assert answer["trainingConfiguration"]["scaling"] == "batch"


def test_without_scaling_a_spoke_fits_the_whole_mini_batch():
    net = started(create(pa()))
    net.records(0, records(40))
    net.run()
    assert (net.spokes[0].batches, net.spokes[0].fitted) == (0, 0)  # 40 < 64: buffered
    answer = query(net)
    assert answer["protocol"]["scaling"] == "none"
    assert answer["protocol"]["effectiveMiniBatchSize"] == 64
    assert "scaling" not in answer["trainingConfiguration"]  # not given, not written in


# -- eq. (4): the step size α / n per spoke ---------------------------------------------------
def test_learning_rate_scaling_divides_pa_c_on_spokes_only():
    """PA-I's step cap C = 0.01 runs at 0.0025 on each of 4 spokes: spoke 0's model is
    exactly a PA-I learner with C = 0.0025 fed the same records. The declared C, the
    hub's learner and the Query's learner section stay 0.01."""
    data = records(48, seed=1)
    net = started(create(pa(C=0.01), scaling="learning-rate", miniBatchSize=16))
    net.records(0, data)
    net.run()
    spoke = net.spokes[0]
    assert spoke.fitted == 48 and spoke.mini_batch_size == 16
    learner = spoke.pipeline.learner
    assert learner.hyperparameters()["C"] == 0.01 and learner.effective_step_size() == 0.0025
    X = np.array([r["features"] for _, r in data])
    y = [r["label"] for _, r in data]
    reference = make_learner(pa(C=0.0025))
    for i in range(0, 48, 16):
        reference.test_then_train(X[i:i + 16], y[i:i + 16])
    assert np.array_equal(learner.get_params(), reference.get_params())
    unscaled = make_learner(pa(C=0.01))
    unscaled.fit(X, y)
    assert not np.allclose(learner.get_params(), unscaled.get_params())  # the cap binds
    hub = net.hubs[0]
    assert hub.learner.hyperparameters()["C"] == 0.01 and hub.learner.step_scale == 1.0
    answer = query(net)
    assert answer["learner"]["hyperParameters"]["C"] == 0.01
    assert answer["protocol"]["learningRateHyperparameter"] == "C"
    assert answer["protocol"]["effectiveLearningRate"] == 0.0025
    assert answer["protocol"]["effectiveMiniBatchSize"] == 16  # not scaled


def test_learning_rate_scaling_divides_the_mlp_optimizer_rate():
    """An MLP at α = 0.01 on 4 spokes takes SGD steps of 0.0025: spoke 1's network is
    the one a learner declared at 0.0025 gets from the same two mini-batches."""
    data = records(16, seed=2)
    net = started(create(mlp(0.01), scaling="learning-rate", miniBatchSize=8))
    net.records(1, data)
    net.run()
    learner = net.spokes[1].pipeline.learner
    assert learner.learning_rate == 0.01 and learner.effective_step_size() == 0.0025
    X = np.array([r["features"] for _, r in data])
    y = [r["label"] for _, r in data]
    reference, unscaled = make_learner(mlp(0.0025)), make_learner(mlp(0.01))
    for model in (reference, unscaled):
        for i in (0, 8):
            model.test_then_train(X[i:i + 8], y[i:i + 8])
    assert np.allclose(learner.get_params(), reference.get_params(), rtol=0, atol=1e-7)
    assert not np.allclose(learner.get_params(), unscaled.get_params(), rtol=0, atol=1e-5)
    answer = query(net)
    assert answer["learner"]["hyperParameters"]["learning_rate"] == 0.01
    assert answer["protocol"]["learningRateHyperparameter"] == "learning_rate"
    assert answer["protocol"]["effectiveLearningRate"] == 0.0025


def test_both_scales_the_mini_batch_and_the_step():
    net = started(create(pa(C=0.02, mode=2), scaling="both"))
    net.records(2, records(20))
    net.run()
    spoke = net.spokes[2]
    assert (spoke.batches, spoke.fitted, spoke.mini_batch_size) == (1, 16, 16)
    assert spoke.pipeline.learner.effective_step_size() == 0.005
    answer = query(net)
    assert {k: answer["protocol"][k] for k in ("scaling", "effectiveMiniBatchSize",
                                               "effectiveLearningRate")} == \
        {"scaling": "both", "effectiveMiniBatchSize": 16, "effectiveLearningRate": 0.005}
    assert answer["learner"]["hyperParameters"]["C"] == 0.02


def test_scaled_spokes_still_synchronize_through_the_hub():
    """Hubs are not scaled and aggregation works: BSP rounds of the B / n mini-batches."""
    net = started(create(pa(C=0.01), protocol="Synchronous", scaling="both", miniBatches=1))
    for s in range(N_SPOKES):
        net.records(s, records(16, seed=s))
    net.run()
    answer = query(net)
    assert answer["fitted"] == 64 and answer["protocol"]["rounds"] >= 1
    w = np.array(answer["model"]["params"])
    assert np.all(np.isfinite(w)) and np.any(w != 0)
    assert all(np.allclose(s.pipeline.learner.get_params(), w) for s in net.spokes)


# -- learners without a step size --------------------------------------------------------------
@pytest.mark.parametrize("learner,protocol", [
    ({"name": "KMeans"}, "Asynchronous"),
    ({"name": "Ridge"}, "Asynchronous"),
    ({"name": "SVM"}, "Asynchronous"),
    ({"name": "PA", "hyperParameters": {"mode": 0}}, "Asynchronous"),
    ({"name": "PARegressor", "hyperParameters": {"mode": 0}}, "Asynchronous"),
    ({"name": "HoeffdingTree"}, "Independent"),
])
@pytest.mark.parametrize("scaling", ["learning-rate", "both"])
def test_step_scaling_of_a_learner_without_a_step_size_is_refused(learner, protocol, scaling):
    e = refused(create(learner, protocol=protocol, scaling=scaling))
    assert e.code == "unsupported_pairing" and e.field == "trainingConfiguration.scaling"
    assert learner["name"] in e.message and "no step-size hyperparameter" in e.message
    parse_request(create(learner, protocol=protocol, scaling="batch"))  # eq. 3 alone is fine


def test_a_refused_create_is_answered_through_the_kernel():
    net = LocalNetwork(n_spokes=N_SPOKES, n_hubs=1, network=7)
    answer = ask(net, create({"name": "KMeans"}, scaling="learning-rate"))
    assert answer["status"] == "error" and answer["requestId"] == "c"
    assert answer["error"]["code"] == "unsupported_pairing"
    assert answer["error"]["field"] == "trainingConfiguration.scaling"
    assert "KMeans" in answer["error"]["message"]
    assert all(7 not in k.nodes for k in net.spoke_kernels)


def test_learners_name_their_step_size():
    assert check_scaling(PAClassifier(mode=1), "both") is None
    names = {n: make_learner({"name": n}).step_size() for n in
             ("PA", "PARegressor", "MLP", "CNN", "SVM", "Ridge", "KMeans", "HoeffdingTree")}
    assert names == {"PA": "C", "PARegressor": "C", "MLP": "learning_rate",
                     "CNN": "learning_rate", "SVM": None, "Ridge": None, "KMeans": None,
                     "HoeffdingTree": None}


def test_the_step_scale_is_not_a_hyperparameter():
    model = PAClassifier(C=0.04)
    model.set_step_scale(0.25)
    assert model.hyperparameters()["C"] == 0.04 and model.effective_step_size() == 0.01
    assert model.to_json()["hyperParameters"]["C"] == 0.04
    assert model.clone().step_scale == 1.0
    model.update_hyperparameters(C=0.08)
    assert model.effective_step_size() == 0.02  # the scale stays
    with pytest.raises(NotImplementedError):
        PAClassifier(mode=0).set_step_scale(0.5)
    with pytest.raises(ValueError):
        model.set_step_scale(0)


# -- validation ----------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["half", "", "Batch", 4, None, True])
def test_an_invalid_scaling_is_refused_by_the_schema(value):
    doc = create(pa(), scaling=value)
    e = refused(doc)
    assert e.code == "schema" and e.field == "trainingConfiguration.scaling"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, request_schema())
    update = {"id": 7, "request": "Update", "trainingConfiguration": {"scaling": value}}
    assert refused(update).field == "trainingConfiguration.scaling"


def test_every_choice_is_accepted():
    for scaling in TRAINING_PARAMETERS["scaling"].choices:
        tc = parse_request(create(pa(), scaling=scaling)).training_configuration
        assert tc["scaling"] == scaling


def test_an_invalid_scaling_is_answered_through_the_kernel():
    net = LocalNetwork(n_spokes=N_SPOKES, n_hubs=1, network=7)
    answer = ask(net, create(pa(), scaling="half"))
    assert answer["status"] == "error" and answer["error"]["code"] == "schema"
    assert answer["error"]["field"] == "trainingConfiguration.scaling"


# -- Update ------------------------------------------------------------------------------------
def test_an_update_changes_scaling_and_mini_batch_size_on_a_running_pipeline():
    net = started(create(pa(C=0.01)))
    net.records(0, records(8))
    net.run()
    answer = ask(net, {"id": 7, "request": "Update", "requestId": "u",
                       "trainingConfiguration": {"scaling": "both"}})
    assert answer["status"] == "ok", answer
    for s in net.spokes:
        assert s.mini_batch_size == 16 and s.pipeline.learner.effective_step_size() == 0.0025
        assert s.request.training_configuration["scaling"] == "both"
        assert s.request.learner["hyperParameters"]["C"] == 0.01  # declared, not scaled
    assert net.hubs[0].request.training_configuration["scaling"] == "both"
    net.records(0, records(8, seed=3))  # 8 buffered before + 8: one mini-batch of 16
    net.run()
    assert (net.spokes[0].batches, net.spokes[0].fitted) == (1, 16)
    answer = ask(net, {"id": 7, "request": "Update", "requestId": "v",
                       "learner": {"hyperParameters": {"C": 0.04}},
                       "trainingConfiguration": {"miniBatchSize": 32}})
    assert answer["status"] == "ok", answer
    assert [s.mini_batch_size for s in net.spokes] == [8] * N_SPOKES
    q = query(net)
    assert q["learner"]["hyperParameters"]["C"] == 0.04
    assert q["protocol"]["effectiveLearningRate"] == 0.01
    assert q["protocol"]["effectiveMiniBatchSize"] == 8
    assert q["trainingConfiguration"]["miniBatchSize"] == 32
    answer = ask(net, {"id": 7, "request": "Update", "requestId": "w",
                       "trainingConfiguration": {"scaling": "none"}})
    assert answer["status"] == "ok"
    q = query(net)
    assert (q["protocol"]["effectiveMiniBatchSize"], q["protocol"]["effectiveLearningRate"]) \
        == (32, 0.04)


def test_an_update_to_step_scaling_without_a_step_size_is_refused_whole():
    """KMeans refuses learning-rate; PA under learning-rate refuses a switch to mode 0.
    Nothing changes: the Update is checked whole before anything is applied."""
    kmeans = {"name": "KMeans", "hyperParameters": {"n_clusters": 2},
              "parameters": {"n_features": D}}
    net = started(create(kmeans, pid=8, scaling="batch"))
    answer = ask(net, {"id": 8, "request": "Update", "requestId": "u",
                       "trainingConfiguration": {"scaling": "learning-rate", "miniBatchSize": 8}})
    assert answer["status"] == "error" and answer["requestId"] == "u"
    assert answer["error"]["code"] == "unsupported_pairing"
    assert "KMeans" in answer["error"]["message"]
    for node in net.spokes + net.hubs:
        assert node.request.training_configuration["scaling"] == "batch"
        assert node.request.training_configuration["miniBatchSize"] == 64
    assert [s.mini_batch_size for s in net.spokes] == [16] * N_SPOKES

    net = started(create(pa(C=0.01), scaling="learning-rate"))
    answer = ask(net, {"id": 7, "request": "Update", "requestId": "m",
                       "learner": {"hyperParameters": {"mode": 0}}})
    assert answer["status"] == "error" and answer["error"]["code"] == "unsupported_pairing"
    assert "mode=0" in answer["error"]["message"]
    assert all(s.pipeline.learner.mode == 1 for s in net.spokes)
    answer = ask(net, {"id": 7, "request": "Update", "requestId": "n",
                       "learner": {"hyperParameters": {"mode": 0}},
                       "trainingConfiguration": {"scaling": "batch"}})
    assert answer["status"] == "ok", answer
    assert all(s.pipeline.learner.effective_step_size() is None for s in net.spokes)
