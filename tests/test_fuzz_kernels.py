"""Random pipelines on the in-process kernel (the job's own spoke and hub kernels): every
learner with every protocol, aggregation rule, preprocessor chain, hub count and message
order (shuffled, repeated), fed records whose features and targets reach ±1e149, 1e-300,
constants and labels of the wrong type, with Updates (mini-batch size, a declared width)
and an export that warm-starts a second pipeline. Nothing may raise out of a kernel, every
Query is answered, every record is counted (fitted, predicted or refused) once Queries find
the spokes idle, and an export is a Create the job accepts.

Each failure this found was a record or a request that stopped a stream or left a pipeline
unanswerable: FDA's counter increment past 64 bits or of an inf quotient, FDA's coordinator
on an inf drift, a Query over a spoke's inf error moments or loss, an Update declaring a
tree pipeline's layout, and exports of a model with nothing learned that their own Create
refused. Seeded: the same trials every run.
"""

from __future__ import annotations

import random

import pytest

from operators.local import LocalNetwork

LEARNERS = [("PA", "c"), ("SVM", "c"), ("PARegressor", "r"), ("Ridge", "r"), ("KMeans", "k"),
            ("MLP", "c"), ("MLPRegressor", "r"), ("HoeffdingTree", "c")]
PROTOCOLS = [("Synchronous", {}), ("Asynchronous", {}), ("SSP", {}), ("EASGD", {}),
             ("Adaptive", {}), ("FDA", {"variant": "naive", "threshold": 0.1}),
             ("FDA", {"variant": "sketch", "threshold": 0.1}),
             ("EVENFLOW", {"variant": "basic", "threshold": 0.1}),
             ("EVENFLOW", {"variant": "fast", "threshold": 0.1}), ("TensAIR", {}),
             ("Independent", {})]
PREPROCESSORS = ["StandardScaler", "MinMaxScaler", "RunningMeanVariance", "TargetStandardScaler"]
EXTREMES = [1e149, -1e149, 1e-300, 0.0, 1e20, -1e20, 1e38]
PIPELINE = 3


def _value(rng: random.Random) -> float:
    c = rng.random()
    if c < 0.05:
        return rng.choice(EXTREMES)
    if c < 0.1:
        return 5.0
    return rng.gauss(0, 1) * rng.choice([1, 1, 100, 1e6])


def _trial(rng: random.Random, trial: int) -> None:
    name, task = rng.choice(LEARNERS)
    protocol, extra = rng.choice(PROTOCOLS)
    if name == "HoeffdingTree":
        protocol, extra = "Independent", {}
    pre = [{"name": p} for p in rng.sample(PREPROCESSORS, rng.randint(0, 2))
           if p != "TargetStandardScaler" or task == "r"]
    d, k, m = rng.randint(1, 6), rng.randint(1, 4), rng.choice([1, 1, 2])
    hyper = ({"hidden_layers": [4]} if name.startswith("MLP")
             else {"n_clusters": 2} if name == "KMeans" else {})
    cfg = {"protocol": protocol, "miniBatchSize": rng.choice([1, 4, 16]),
           "miniBatches": rng.choice([1, 2]), **extra}
    if protocol not in ("TensAIR", "Independent"):
        cfg["hubParallelism"] = m
        if rng.random() < 0.3:
            cfg["aggregation"] = rng.choice(["average", "sum", "diversity", "momentum"])
    net = LocalNetwork(n_spokes=k, n_hubs=m, shuffle=rng.random() < 0.3, seed=trial,
                       network=PIPELINE, duplicate=rng.choice([0.0, 0.0, 0.2]))
    net.request({"id": PIPELINE, "request": "Create", "requestId": "c", "preProcessors": pre,
                 "learner": {"name": name, "hyperParameters": hyper},
                 "trainingConfiguration": cfg})
    if net.outputs["responses"][-1]["status"] != "ok":  # a refused pairing: answered
        return

    def record(i: int, width: int) -> tuple[bool, dict]:
        rec = {"id": i, "features": [_value(rng) for _ in range(width)]}
        if task == "c":
            rec["label"] = (rng.choice([0, 1, 2]) if rng.random() > 0.02
                            else rng.choice(["x", 1.5, True]))
        elif task == "r":
            rec["label"] = _value(rng)
        return rng.random() > 0.2, rec

    n = rng.randint(10, 300)
    records = [record(i, d) for i in range(n)]
    for lo in range(0, n, 37):
        net.stream(records[lo:lo + 37])
    if rng.random() < 0.3:
        net.request({"id": PIPELINE, "request": "Update", "requestId": "u",
                     "trainingConfiguration": {"miniBatchSize": rng.choice([2, 8])}})
    if rng.random() < 0.2 and task != "k":
        net.request({"id": PIPELINE, "request": "Update", "requestId": "w",
                     "learner": {"parameters": {"n_features": d + 1}}})
        net.stream([record(5000 + i, d + 1) for i in range(20)])
        n += 20
    if rng.random() < 0.3:
        net.request({"id": PIPELINE, "request": "Query", "requestId": "x", "export": True})
        answer = net.outputs["responses"][-1]
        if answer["status"] == "ok":
            net.request({**answer["export"], "id": PIPELINE + 1, "requestId": "warm"})
            assert net.outputs["responses"][-1]["status"] == "ok", (
                trial, name, protocol, net.outputs["responses"][-1])
    counted = -1
    for _ in range(k + 4):  # each Query may find one more spoke idle (README)
        q = net.query()
        assert q["status"] == "ok", (trial, q)
        if q["fitted"] + q["predicted"] + q["rejected"] == counted:
            break
        counted = q["fitted"] + q["predicted"] + q["rejected"]
    held = (q.get("layout") or {}).get("held") or 0
    buffered = k * 16 * (2 if protocol == "EVENFLOW" else 1)  # partial mini-batches
    assert n - counted - held <= buffered, (trial, name, protocol, cfg, n, q)


@pytest.mark.parametrize("seed", range(4))
def test_random_pipelines_never_stop_the_kernels(seed):
    rng = random.Random(seed)
    for trial in range(15):
        _trial(rng, trial)
