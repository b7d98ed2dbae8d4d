"""``omldm experiment sharding`` (papers/001): the ``--quick`` run through the command line
writes JSON rows with every field, the markdown tables and the PNG; the streams are as
non-IID as the module says (sorted by label, in bursts of one class, drifting); the
variance ratio is random's variance over the strategy's; ``run_local`` deals through the
job's sharder and its default random sharding draws the spokes it drew before."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from flink_jobs import experiment_sharding as es
from flink_jobs.cli import main
from flink_jobs.experiment import create_request as protocols_request
from flink_jobs.experiment import load, run_local
from flink_jobs.local_run import stream_local
from learning.datasets import burst_order, drift, label_order, phishing, synth

#: every key of a run's JSON row (the module docstring's list, plus the protocols
#: experiment's)
ROW_KEYS = {"stream", "dataset", "spokes", "protocol", "term", "variant", "sharding",
            "scaling", "repeat", "seed", "lag", "warmup", "kernel", "aggregation", "records",
            "holdout_records", "prequential_accuracy", "mean_loss", "holdout_accuracy",
            "holdout_loss", "spoke_accuracy", "spoke_accuracy_sd", "spoke_records", "sharder",
            "fitted", "fitted_per_spoke", "bytes_to_hubs", "bytes_to_spokes", "rounds",
            "queries", "seconds", "records_per_second", "loss_curve"}


def test_the_quick_run_writes_rows_tables_and_plot(tmp_path, capsys):
    path = tmp_path / "sharding.json"
    t0 = time.perf_counter()
    assert main(["experiment", "sharding", "--quick", "--json", str(path)]) == 0
    assert time.perf_counter() - t0 < 120
    rows = json.loads(path.read_text())
    q = es.QUICK
    expected = [(q.stream, k, p, sc, sh, r) for k in q.spokes for p in q.protocols
                for sc in q.scalings for sh in q.shardings for r in range(q.repeats)]
    assert [(r["stream"], r["spokes"], r["protocol"], r["scaling"], r["sharding"], r["repeat"])
            for r in rows] == expected
    n_stream, n_holdout = 400, 100  # the first 500 records of Phishing: 80% / 20%
    for r in rows:
        assert set(r) == ROW_KEYS, set(r) ^ ROW_KEYS
        assert r["kernel"] == "local" and r["lag"] == es.LAG and r["seed"] == r["repeat"]
        assert r["records"] == n_stream and r["holdout_records"] == n_holdout
        assert 0.5 < r["holdout_accuracy"] <= 1 and 0.5 < r["prequential_accuracy"] <= 1
        assert r["holdout_loss"] >= 0 and len(r["spoke_accuracy"]) == r["spokes"]
        assert r["spoke_accuracy_sd"] == pytest.approx(np.std(r["spoke_accuracy"]))
        # every dealt record was fitted; distribution-aware's broadcast copies included
        assert r["fitted"] == sum(r["spoke_records"]) == n_stream + r["sharder"]["broadcast"] \
            * (r["spokes"] - 1)
        assert r["bytes_to_hubs"] > 0 and r["rounds"] > 0 and len(r["loss_curve"]) > 10
        assert r["warmup"] == (40 if r["sharding"] == "distribution-aware" else None)
        if r["sharding"] == "distribution-aware":
            assert r["sharder"]["ready"] and r["sharder"]["fits"] == 1
    by = {(r["protocol"], r["sharding"], r["repeat"]): r for r in rows}
    # random sharding draws other spokes in every repeat; stratified deals alike
    assert by["Asynchronous", "random", 0]["spoke_records"] != \
        by["Asynchronous", "random", 1]["spoke_records"]
    assert by["Asynchronous", "stratified", 0]["spoke_records"] == \
        by["Asynchronous", "stratified", 1]["spoke_records"] == [100] * 4
    out = capsys.readouterr().out
    assert "| stream | spokes | protocol | sharding | scaling | prequential | held-out " \
           "| spoke spread | loss-curve var | var ratio (random / this) | runs |" in out
    line = next(x for x in out.splitlines()
                if x.startswith("| phishing-sorted | 4 | Synchronous (BSP) | random | none |"))
    mine = [r["holdout_accuracy"] for r in rows
            if (r["protocol"], r["sharding"]) == ("Synchronous", "random")]
    assert line.split(" | ")[6] == f"{np.mean(mine):.4f} ± {np.std(mine, ddof=1):.4f}"
    assert line.split(" | ")[9] == "1.00" and line.endswith(" 2 |")
    assert "| stratified | Synchronous (BSP) |" in out and "F test 5%" in out
    assert "in-process kernel" in out
    assert path.with_suffix(".png").stat().st_size > 10_000


def test_the_streams_are_non_iid_as_documented():
    # sorted by label: the classes arrive one after the other
    for name, n_classes in (("digits-sorted", 10), ("phishing-sorted", 2)):
        X, y, Xh, yh = es.load_stream(name)
        assert np.all(np.diff(y) >= 0) and np.count_nonzero(np.diff(y)) == n_classes - 1
        assert len(np.unique(y[: len(y) // 5])) == (2 if n_classes == 10 else 1)  # 0s (, 1s)
        assert len(X) + len(Xh) == {"digits-sorted": 1797, "phishing-sorted": 1250}[name]
        assert len(Xh) == int(np.ceil(0.2 * (len(X) + len(Xh))))
        assert len(np.unique(yh)) == n_classes  # the held-out tail keeps file order
    Xp, yp = phishing()
    _, _, Xh, yh = es.load_stream("phishing-sorted")
    assert np.array_equal(Xh, Xp[1000:]) and np.array_equal(yh, yp[1000:])

    # bursts: runs of BURST records of one class while every class lasts
    X, y, Xh, yh = es.load_stream("rbf-bursts")
    change = np.flatnonzero(np.diff(y)) + 1
    runs = np.diff(np.concatenate([[0], change, [len(y)]]))
    smallest = np.bincount(y).min()
    assert np.all(runs[: 5 * (smallest // es.BURST)] == es.BURST)
    same = lambda labels: float(np.mean(labels[1:] == labels[:-1]))  # noqa: E731
    assert same(y) > 0.98 and same(yh) < 0.5  # generator order: about sum p_c^2
    Xs, ys = synth("rbf", n=es.SYNTH_SOURCE)
    assert sorted(map(tuple, X.tolist())) == sorted(map(tuple, Xs[:len(X)].tolist()))

    # drift: a model of the first concept fails on the held-out tail (the new concept)
    from learning import PAClassifier, StandardScaler
    from learning.pipeline import Pipeline

    for name in ("agrawal-drift", "sea-drift"):
        X, y, Xh, yh = es.load_stream(name)
        old = Pipeline([StandardScaler()], PAClassifier(C=0.01, mode=1))
        for i in range(0, 1200, 16):
            old.fit(X[i:i + 16], y[i:i + 16])
        before = old.score(X[1200:1400], y[1200:1400])  # still the first concept
        assert old.score(Xh, yh) < before - 0.1, name


def test_the_reorderings_and_the_drift_streams_are_deterministic():
    y = np.array([2, 0, 1, 0, 2, 1, 0])
    assert label_order(y).tolist() == [1, 3, 6, 2, 5, 0, 4]
    assert y[burst_order(y, 2)].tolist() == [0, 0, 1, 1, 2, 2, 0]
    assert sorted(burst_order(y, 1).tolist()) == list(range(7))
    with pytest.raises(ValueError, match="run"):
        burst_order(y, 0)
    X1, y1 = drift("sea", n=500)
    X2, y2 = drift("sea", n=500)
    assert X1.shape == (500, 3) and np.array_equal(X1, X2) and np.array_equal(y1, y2)
    assert set(np.unique(y1)) == {0, 1} and y1.dtype == np.int64
    assert drift("agrawal", n=300)[0].shape == (300, 9)
    with pytest.raises(ValueError, match="unknown drift"):
        drift("hyperplane")


def test_the_variance_ratio_is_random_over_the_strategy():
    def rows(sharding, accuracies, protocol="Asynchronous"):
        return [{"stream": "s", "spokes": 4, "protocol": protocol, "term": "TAP",
                 "sharding": sharding, "scaling": "none", "prequential_accuracy": 0.9,
                 "holdout_accuracy": a, "spoke_accuracy_sd": 0.01,
                 "loss_curve": [[10, 0.5], [20, 0.4 + a]]} for a in accuracies]

    got = {(s["protocol"], s["sharding"]): s for s in es.summarize(
        rows("random", [0.80, 0.84, 0.82]) + rows("stratified", [0.81, 0.82, 0.83])
        + rows("round-robin", [0.8, 0.8, 0.8])
        + rows("random", [0.7, 0.7], "SSP") + rows("stratified", [0.7, 0.7], "SSP"))}
    assert got["Asynchronous", "random"]["variance_ratio"] == 1.0
    assert got["Asynchronous", "stratified"]["variance_ratio"] == pytest.approx(4.0)
    assert got["Asynchronous", "round-robin"]["variance_ratio"] == float("inf")
    assert got["Asynchronous", "round-robin"]["holdout_accuracy_std"] == 0.0
    assert got["SSP", "stratified"]["variance_ratio"] is None  # both 0
    assert got["Asynchronous", "stratified"]["curve_variance"] == pytest.approx(0.0001 / 2)
    assert got["Asynchronous", "round-robin"]["curve_variance"] == 0.0


def test_requests_and_options():
    req = es.create_request("SSP", "batch")
    assert req["trainingConfiguration"]["scaling"] == "batch"
    assert req["trainingConfiguration"]["staleness"] == 2
    assert "scaling" not in es.create_request("Asynchronous")["trainingConfiguration"]
    assert "partition" not in es.SHARDING_STRATEGIES
    with pytest.raises(ValueError, match="partition"):
        es.run_sharding_experiment("x.json", shardings=("partition",))
    with pytest.raises(ValueError, match="repeats"):
        es.run_sharding_experiment("x.json", quick=True, repeats=1)
    with pytest.raises(ValueError, match="unknown stream"):
        es.load_stream("shuttle")
    # options of one experiment given to the other are refused
    assert main(["experiment", "sharding", "--quick", "--kernel", "flink",
                 "--json", "x.json"]) == 2
    assert main(["experiment", "protocols", "--kernel", "local", "--lag", "5",
                 "--json", "x.json"]) == 2


def test_global_model_is_what_bsp_spokes_install():
    X, y, Xh, yh = es.load_stream("phishing-sorted", source=500)
    run = stream_local(es.create_request("Synchronous"), X, y, spokes=4, every=0, seed=1,
                       sharding="stratified", lag=20, shuffle=True)
    model = es.global_model(run.net)
    for spoke in run.net.spokes:  # the Query closed the last round: every spoke has w̃
        assert np.allclose(spoke.pipeline.learner.get_params(), model.learner.get_params())
        assert spoke.pipeline.score(Xh, yh) == model.score(Xh, yh)
    # the synchronized scaler statistics count every streamed record
    assert model.preprocessors[0].statistics()["n"] == len(X)


def test_run_local_deals_through_the_sharder_as_it_drew_before():
    X, y = load("phishing")
    run = stream_local(protocols_request("phishing", "Synchronous", None, {}), X[:600], y[:600],
                       spokes=4, seed=7)
    drawn = np.random.default_rng(7).integers(0, 4, 600)  # run_local's draws before sharders
    assert run.net.sharder.per_spoke == np.bincount(drawn, minlength=4).tolist()
    assert run.final["fittedPerSpoke"] == [int(np.sum((drawn == i) & (np.arange(600) % 5 != 4)))
                                           for i in range(4)]
    same = run_local("phishing", "Synchronous", None, {}, limit=600, seed=7, sharding="random")
    assert same["prequential_accuracy"] == run.final["prequentialAccuracy"]
    rr = run_local("phishing", "Synchronous", None, {}, limit=600, sharding="round-robin", lag=10)
    assert rr["fitted"] + rr["predicted"] == 600
