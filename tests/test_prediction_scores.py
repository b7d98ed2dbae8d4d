"""What a prediction carries (issue 19, part 4): the version of the model it was made with
(``modelVersion``: the global models the spoke had taken in), and, with
``JobConfig.prediction_scores`` (``--prediction-scores``), the class probabilities where
the learner has them; on the in-process kernel (the job's kernel code) and through
``omldm serve``'s flag."""

from __future__ import annotations

import numpy as np
from sklearn.datasets import load_breast_cancer

from flink_jobs.cli import _parser
from flink_jobs.config import JobConfig
from operators.local import LocalNetwork


def _run(learner: dict, protocol: str, scores: bool, n: int = 400):
    X, y = load_breast_cancer(return_X_y=True)
    net = LocalNetwork(n_spokes=2, n_hubs=1, limits={"prediction_scores": scores})
    net.request({"id": 0, "request": "Create", "requestId": "c", "learner": learner,
                 "preProcessors": [{"name": "StandardScaler"}],
                 "trainingConfiguration": {"protocol": protocol, "miniBatchSize": 16,
                                           "miniBatches": 1}})
    assert net.outputs["responses"][-1]["status"] == "ok", net.outputs["responses"][-1]
    records = []
    for i in range(n):
        rec = {"id": i, "features": X[i].tolist()}
        if i % 5:
            rec["label"] = int(y[i])
        records.append((bool(i % 5), rec))
    net.stream(records)
    return net.outputs["predictions"]


def test_probabilities_come_with_the_prediction_they_made():
    preds = _run({"name": "HoeffdingTree"}, "Independent", scores=True)
    scored = [p for p in preds if "probabilities" in p]
    assert len(preds) == 80 and len(scored) >= 70  # all but those before any label
    for p in scored:
        assert p["classes"] == [0, 1] and abs(sum(p["probabilities"]) - 1) < 1e-9
        assert p["prediction"] == p["classes"][int(np.argmax(p["probabilities"]))]


def test_the_mlp_scores_and_the_model_version_counts_synchronizations():
    preds = _run({"name": "MLP", "hyperParameters": {"hidden_layers": [8]}}, "Synchronous",
                 scores=True)
    assert all(len(p["probabilities"]) == 2 for p in preds if "probabilities" in p)
    versions = [p["modelVersion"] for p in preds]
    assert versions[0] >= 0 and max(versions) >= 5  # a BSP round after every mini-batch
    by_spoke = {}
    for p in preds:  # a spoke's version never goes back
        assert p["modelVersion"] >= by_spoke.get(p["spoke"], 0)
        by_spoke[p["spoke"]] = p["modelVersion"]


def test_without_the_setting_or_without_probabilities_no_scores():
    for learner, scores in (({"name": "HoeffdingTree"}, False), ({"name": "PA"}, True)):
        preds = _run(learner, "Independent", scores=scores, n=100)
        assert preds and not any("probabilities" in p for p in preds)
        assert {p["modelVersion"] for p in preds} == {0}  # Independent never synchronizes


def test_the_flag_and_the_config_field():
    args = _parser().parse_args(["serve", "--prediction-scores"])
    assert args.prediction_scores is True
    assert JobConfig("x:1", prediction_scores=True).limits()["prediction_scores"] is True
    assert JobConfig("x:1").limits()["prediction_scores"] is False
