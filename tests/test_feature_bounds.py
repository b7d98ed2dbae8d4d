"""Declared bounds (``trainingConfiguration`` ``featureMin`` / ``featureMax``,
``labelMin`` / ``labelMax``): a sentinel or a glitch of a sensor (-9999 for a missing
reading, 3.4e38, float32's largest) is a JSON number the record checks accept, and one of
them in a running scaler's statistics flattens every later record for good. With bounds
declared such a record is refused alone (``feature_range``, dead-lettered with the
feature and the bounds), and the pipeline predicts exactly as on the stream without it;
without bounds the same stream costs the pipeline most of its accuracy. The same for a
regression target's sentinel (``label_range``). Bounds given feature by feature (arrays)
catch a sentinel that lies within another feature's range: Shuttle's sixth feature spans
-26,739 to 15,164, so one range for all features lets a -9999 in the first (27 to 126)
through."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from learning.errors import RequestError
from learning.layout import Layout, RecordRejected, all_fit, check_bounds, declared_bounds
from learning.requests import parse_request
from operators.local import LocalNetwork

SENTINEL = 3.4e38  # float32's largest, a common "no reading"


def test_a_feature_outside_the_bounds_is_named_with_the_bounds():
    check_bounds([0.0, 16.0, 3.5], (0.0, 16.0))
    check_bounds([True, -5], (-5.0, float("inf")))
    with pytest.raises(RecordRejected) as e:
        check_bounds([1.0, 2.0, SENTINEL], (0.0, 16.0))
    assert e.value.code == "feature_range"
    assert str(e.value) == "feature 2 = 3.4e+38 is outside [featureMin, featureMax] = [0, 16]"
    with pytest.raises(RecordRejected, match="feature 0 = -9999 is outside"):
        check_bounds([-9999, 1.0], (-1000.0, float("inf")))
    layout = Layout(2, "int", None, "declared")
    assert all_fit(layout, [[0.0, 1.0], [16.0, 2.0]], [0, 1], (0.0, 16.0))
    assert not all_fit(layout, [[0.0, 1.0], [16.0, 17.0]], [0, 1], (0.0, 16.0))
    assert not all_fit(layout, [[-0.5, 1.0], [16.0, 2.0]], [0, 1], (0.0, float("inf")))


def _create(pid: int, **bounds) -> dict:
    return {"id": pid, "request": "Create", "requestId": f"c{pid}",
            "preProcessors": [{"name": "StandardScaler"}],
            "learner": {"name": "PA", "hyperParameters": {"C": 0.01}},
            "trainingConfiguration": {"protocol": "Asynchronous", "miniBatchSize": 16,
                                      **bounds}}


def test_bounds_are_checked_at_create_and_update():
    req = parse_request(orjson.dumps(_create(0, featureMin=0, featureMax=16)))
    assert req.training_configuration["featureMin"] == 0.0
    for bad, field in (({"featureMin": 5, "featureMax": 1}, "featureMax"),
                       ({"featureMax": True}, "featureMax"), ({"featureMin": "low"}, "featureMin"),
                       ({"labelMin": 100, "labelMax": 0}, "labelMax")):
        with pytest.raises(RequestError) as e:
            parse_request(orjson.dumps(_create(0, **bad)))
        assert e.value.code == "schema" and e.value.field == f"trainingConfiguration.{field}"
    net = LocalNetwork(n_spokes=2, n_hubs=1)
    net.request(_create(0, featureMax=16))
    net.request({"id": 0, "request": "Update", "requestId": "u1",
                 "trainingConfiguration": {"featureMin": 20}})  # above the pipeline's max
    net.request({"id": 0, "request": "Update", "requestId": "u2",
                 "trainingConfiguration": {"featureMin": 0}})
    answers = {r["requestId"]: r for r in net.outputs["responses"]}
    assert answers["u1"]["status"] == "error" and "featureMin <= featureMax" in \
        answers["u1"]["error"]["message"]
    assert answers["u2"]["status"] == "ok"
    q = net.query()
    assert (q["trainingConfiguration"]["featureMin"],
            q["trainingConfiguration"]["featureMax"]) == (0.0, 16.0)


def _digits_records(sentinels: bool, per_message: int, chunk: int = 150) -> list:
    """digits (8×8 images, features 0..16) in file order, every 5th record a forecast;
    with ``sentinels`` nine glitches among them (3.4e38 or -9999 in one feature or in
    all, six of training, three of forecasting; the first after record 50). Returns the
    stream's parts of ``chunk`` records each, as lists of ``((training?, Kafka record),
    partition)``: ``per_message`` records a Kafka record (a JSON array when more than
    one), the partition the ``id``'s parity, so that each good record reaches the same
    spoke at the same place with the glitches or without."""
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    recs = []  # (part, training?, record)
    for i in range(1500):
        train = i % 5 != 4
        rec = {"id": i, "features": X[i].tolist()}
        if train:
            rec["label"] = int(y[i])
        recs.append((i // chunk, train, rec))
        if sentinels and i % 180 == 50:
            k = i // 180
            glitch = {"id": 10_000 + k, "features": X[i].tolist()}
            value = SENTINEL if k % 2 else -9999.0
            if k % 3 == 0:  # one pixel
                glitch["features"][(7 * k) % 64] = value
            else:  # a dead reading: every pixel
                glitch["features"] = [value] * 64
            if k < 6:
                glitch["label"] = int(y[i])
            recs.append((i // chunk, k < 6, glitch))
    parts = []
    for part in range(1500 // chunk):
        items = []
        for parity in (0, 1):
            for train in (True, False):
                mine = [rec for c, t, rec in recs
                        if c == part and t is train and rec["id"] % 2 == parity]
                for lo in range(0, len(mine), per_message):
                    group = mine[lo:lo + per_message]
                    value = group[0] if per_message == 1 else orjson.dumps(group)
                    items.append(((train, value), parity))
        parts.append(items)
    return parts


def _run(sentinels: bool, per_message: int = 1) -> LocalNetwork:
    """Two pipelines on one stream (2 spokes, TAP): 0 without bounds, 1 with digits'
    [0, 16]."""
    net = LocalNetwork(n_spokes=2, n_hubs=1, sharding="partition")
    net.request(_create(0))
    net.request(_create(1, featureMin=0, featureMax=16))
    for items in _digits_records(sentinels, per_message):
        net.stream([item for item, _ in items], partitions=[p for _, p in items])
    return net


def _query(net: LocalNetwork, pipeline: int) -> dict:
    net.request({"id": pipeline, "request": "Query", "requestId": f"q{pipeline}"})
    return next(r for r in reversed(net.outputs["responses"])
                if r.get("requestId") == f"q{pipeline}")


@pytest.mark.parametrize("per_message", [1, 50])  # one by one, and the group path
def test_bounds_refuse_the_glitches_alone_and_the_pipeline_predicts_as_without_them(per_message):
    net, twin = _run(True, per_message), _run(False, per_message)
    by_pipeline = {0: [], 1: []}
    for p in net.outputs["predictions"]:
        by_pipeline[p["pipeline"]].append(p)
    clean = [p for p in twin.outputs["predictions"] if p["pipeline"] == 1]
    assert by_pipeline[1] == clean  # every prediction as without the glitches
    letters = [d for d in net.outputs["deadLetters"] if d["pipeline"] == 1]
    assert len(letters) == 9 and {d["code"] for d in letters} == {"feature_range"}
    assert sorted(d["record"]["id"] for d in letters) == list(range(10_000, 10_009))
    assert all("outside [featureMin, featureMax] = [0, 16]" in d["reason"] for d in letters)
    q0, q1, clean_q = _query(net, 0), _query(net, 1), _query(twin, 1)
    assert q1["rejectedBy"] == {"feature_range": 9} and q1["fitted"] == clean_q["fitted"]
    assert q1["prequentialAccuracy"] == clean_q["prequentialAccuracy"]
    # without bounds the six glitches among 1,200 training records wreck the scaler (0.250
    # against 0.885 one by one)
    assert q0["rejected"] == 0 and q0["fitted"] == q1["fitted"] + 6
    assert q0["prequentialAccuracy"] < q1["prequentialAccuracy"] - 0.2, \
        (q0["prequentialAccuracy"], q1["prequentialAccuracy"])


def _shuttle_ranges() -> tuple[list, list]:
    """Shuttle's ranges feature by feature, one wider each way: what a user declares from
    the sensors' specifications."""
    from learning.datasets import shuttle

    X, _ = shuttle()
    return (np.floor(X.min(axis=0)) - 1).tolist(), (np.ceil(X.max(axis=0)) + 1).tolist()


def test_on_flink_bounds_refuse_sentinels_and_the_stream_goes_on(broker):
    """Three pipelines on Shuttle with ten records at 3.4e38 (one feature each) and ten at
    -9999 in the first feature (27 to 126): 0 without bounds takes all twenty, 1 with one
    range for all features refuses the first ten, 2 with Shuttle's ranges feature by
    feature all twenty."""
    from flink_jobs.session import Session, local_config
    from learning.datasets import shuttle

    X, y = shuttle()
    X, y = X[:3000].copy(), y[:3000]
    glitches = np.arange(100, 3000, 300)  # ten records, one feature each at the sentinel
    X[glitches, glitches % 9] = SENTINEL
    minus = np.arange(150, 3000, 283)[:10]  # ten records, -9999 in the first feature
    assert not set(minus) & set(glitches)
    X[minus, 0] = -9999.0
    low, high = _shuttle_ranges()
    cfg = local_config(broker.bootstrap_servers, topic_prefix="bounds-", spokes=2)
    with Session(cfg, "bounds") as s:
        for pid, bounds in ((0, {}), (1, {"featureMin": -1e6, "featureMax": 1e6}),
                            (2, {"featureMin": low, "featureMax": high})):
            create = {**_create(pid, **bounds), "learner": {
                "name": "PA", "hyperParameters": {"C": 0.01}, "parameters": {"n_features": 9}}}
            assert s.request(create, timeout=120)["status"] == "ok"
        _, n_train, n_fore = s.stream(X, y, records_per_message=50)
        q = {}
        for pid, bad in ((1, glitches), (2, np.concatenate([glitches, minus]))):
            bad_fore = sum(1 for i in bad if i % 5 == 4)
            q[pid] = s.wait_until_counted(pid, n_train - (len(bad) - bad_fore),
                                          n_fore - bad_fore, timeout=120)
        q[0] = s.wait_until_counted(0, n_train, n_fore, timeout=120)  # taken, as any number
        letters = s.reread(cfg.topics.dead_letters)
        spec = s.request({"id": 2, "request": "Query", "requestId": "q2"}, timeout=60)
    by = {pid: [d for d in letters if d.get("pipeline") == pid] for pid in (1, 2)}
    assert q[1]["rejectedBy"] == {"feature_range": 10} and q[1]["service"]["restores"] == 0
    assert sorted(d["record"]["id"] for d in by[1]) == glitches.tolist()
    assert all("= 3.4e+38 is outside [featureMin, featureMax] = [-1e+06, 1e+06]" in d["reason"]
               for d in by[1])
    assert q[2]["rejectedBy"] == {"feature_range": 20}
    assert sorted(d["record"]["id"] for d in by[2]) == sorted(glitches.tolist() + minus.tolist())
    assert sum("feature 0 = -9999 is outside [featureMin[0], featureMax[0]] = [26, 127]"
               == d["reason"] for d in by[2]) == 10
    assert spec["trainingConfiguration"]["featureMin"] == low
    assert q[0]["rejected"] == 0
    assert q[1]["prequentialAccuracy"] > 0.95 and q[2]["prequentialAccuracy"] > 0.95


def test_per_feature_bounds_name_the_feature_and_declare_the_width():
    bounds = declared_bounds([0, None, -5], 10.0)
    assert bounds == ((0.0, -np.inf, -5.0), (10.0, 10.0, 10.0))
    assert declared_bounds(None, None) is None and declared_bounds(None, 3) == (-np.inf, 3.0)
    check_bounds([0.0, -1e9, 10.0], bounds)
    check_bounds([None, -1e9, 10.0], bounds)  # a missing value, for a pipeline that imputes
    for features, code, reason in (
            ([1.0, 2.0, 11.0], "feature_range",
             "feature 2 = 11 is outside [featureMin[2], featureMax[2]] = [-5, 10]"),
            ([None, 2.0, -6.0], "feature_range",
             "feature 2 = -6 is outside [featureMin[2], featureMax[2]] = [-5, 10]"),
            ([1.0, 2.0], "width", "the record has 2 features; featureMin / featureMax declare 3")):
        with pytest.raises(RecordRejected) as e:
            check_bounds(features, bounds)
        assert (e.value.code, str(e.value)) == (code, reason)
    layout = Layout(3, "int", None, "declared")
    assert all_fit(layout, [[0.0, -1e9, 10.0], [5.0, 3.0, -5.0]], [0, 1], bounds)
    assert not all_fit(layout, [[0.0, 1.0, 10.0], [5.0, 3.0, -5.5]], [0, 1], bounds)
    assert not all_fit(Layout(2, "int", None, "declared"), [[0.0, 1.0]], [0], bounds)


def test_per_feature_bounds_are_checked_at_create():
    req = parse_request(orjson.dumps(_create(0, featureMin=[0, None, 1], featureMax=16)))
    assert req.training_configuration["featureMin"] == [0.0, None, 1.0]
    with_width = {**_create(0, featureMin=[0, 0]), "learner": {
        "name": "PA", "parameters": {"n_features": 3}}}
    for bad, field, message in (
            (_create(0, featureMin=[0, "a"]), "featureMin[1]", "'a' is not of type 'number'"),
            (_create(0, featureMin=[]), "featureMin", "should be non-empty"),
            (_create(0, featureMax=True), "featureMax", "featureMax must be a number, or an "
                                                        "array of one number (or null: none) "
                                                        "per feature, got True"),
            (_create(0, featureMin=[0, 1], featureMax=[1]), "featureMax", "two arrays of one"),
            (_create(0, featureMin=[0, 3], featureMax=[1, 2]), "featureMax",
             "featureMin = [0.0, 3.0], featureMax = [1.0, 2.0]"),
            (_create(0, featureMin=[0, 1], featureMax=0.5), "featureMax", "featureMin <= "),
            (with_width, "featureMin", "has 2 values, one per feature, but the learner "
                                       "declares n_features 3")):
        with pytest.raises(RequestError) as e:
            parse_request(orjson.dumps(bad))
        assert (e.value.code, e.value.field) == ("schema", f"trainingConfiguration.{field}")
        assert message in str(e.value), str(e.value)
    with pytest.raises(RequestError, match=r"\[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, ...\]"):
        parse_request(orjson.dumps(_create(0, featureMin=[0] * 1000, featureMax=-1)))


def _shuttle_stream(glitches: bool) -> list:
    """3,000 Shuttle records in file order, every 5th a forecast, to 2 spokes by the
    ``id``'s parity, in parts of 100; with ``glitches`` ten more records, each a copy of
    one with -9999 in its first feature (four of them forecasts), in its part."""
    from learning.datasets import shuttle

    X, y = shuttle()
    parts = []
    for i in range(3000):
        if i % 100 == 0:
            items = []
            parts.append(items)
        rec = {"id": i, "features": X[i].tolist()}
        train = i % 5 != 4
        if train:
            rec["label"] = int(y[i])
        items.append(((train, rec), i % 2))
        if glitches and i % 300 == 150:
            bad = {"id": 10_000 + i, "features": [-9999.0, *X[i, 1:].tolist()]}
            if i % 1200 < 600:
                bad["label"] = int(y[i])
            items.append(((i % 1200 < 600, bad), i % 2))
    return parts


def _shuttle_run(glitches: bool) -> LocalNetwork:
    low, high = _shuttle_ranges()
    net = LocalNetwork(n_spokes=2, n_hubs=1, sharding="partition")
    net.request(_create(0, featureMin=-30_000, featureMax=30_000))  # the widest feature's
    net.request(_create(1, featureMin=low, featureMax=high))
    for items in _shuttle_stream(glitches):
        net.stream([item for item, _ in items], partitions=[p for _, p in items])
    return net


def test_per_feature_bounds_catch_a_sentinel_within_another_features_range():
    """One range for all features must hold Shuttle's widest (-26,739 to 15,164) and takes
    the ten -9999 readings of the first feature; Shuttle's ranges feature by feature refuse
    them, and the pipeline predicts every record as on the stream without them."""
    net, twin = _shuttle_run(True), _shuttle_run(False)
    ranged = [p for p in net.outputs["predictions"] if p["pipeline"] == 1]
    assert ranged == [p for p in twin.outputs["predictions"] if p["pipeline"] == 1]
    letters = [d for d in net.outputs["deadLetters"] if d["pipeline"] == 1]
    assert sorted(d["record"]["id"] for d in letters) == [10_000 + i for i in range(150, 3000, 300)]
    assert {d["reason"] for d in letters} == {
        "feature 0 = -9999 is outside [featureMin[0], featureMax[0]] = [26, 127]"}
    q0, q1 = _query(net, 0), _query(net, 1)
    assert q0["rejected"] == 0 and q0["fitted"] == q1["fitted"] + 6
    assert q1["rejectedBy"] == {"feature_range": 10}
    assert q1["prequentialAccuracy"] == _query(twin, 1)["prequentialAccuracy"]


def test_an_update_of_the_bounds_rechecks_the_records_already_taken():
    """Records a spoke took before the Update and has not predicted yet — the mini-batch
    being filled (TAP), the mini-batches of a window a synchronization paused (BSP) — are
    checked against the new bounds: those outside are refused, the others fitted."""
    from tests.test_layout import DeadWire

    good = [{"id": i, "features": [float(i % 7), float(i % 3)], "label": i % 2}
            for i in range(64)]
    bad = [{"id": 1000 + i, "features": [-9999.0, 1.0], "label": 0} for i in range(4)]
    for protocol, extra in (("Asynchronous", {"miniBatchSize": 32}),
                            ("Synchronous", {"miniBatchSize": 4, "miniBatches": 1,
                                             "window": 16})):
        w = DeadWire()
        w.request({"id": 0, "request": "Create", "requestId": "c",
                   "learner": {"name": "PA", "parameters": {"n_features": 2}},
                   "trainingConfiguration": {"protocol": protocol, **extra}})
        for rec in good[:6] + bad + good[6:12]:  # to spoke 0, nothing delivered
            w.spokes[0].on_data("T" + orjson.dumps(rec).decode())
        node = w.spokes[0].nodes[0]
        taken = len(node._X) + sum(len(b.y) for b, first in node._work or () if first)
        assert taken == 16 if protocol == "Asynchronous" else taken == 12, taken
        w.request({"id": 0, "request": "Update", "requestId": "u",
                   "trainingConfiguration": {"featureMin": [0, None]}})
        assert next(r for r in w.responses if r.get("requestId") == "u")["status"] == "ok"
        for i, rec in enumerate(good[12:]):
            w.data(i % 2, "T", rec)
        q, before = w.query(), -1
        while q["fitted"] + q["rejected"] > before:
            before = q["fitted"] + q["rejected"]
            q = w.query()
        assert q["rejectedBy"] == {"feature_range": 4}, (protocol, q["rejectedBy"])
        assert q["fitted"] == 64, (protocol, q["fitted"])
        assert sorted(d["record"]["features"][0] for d in w.dead) == [-9999.0] * 4


FEATURES = np.random.default_rng(0).uniform(0, 1, size=(2000, 4))
TARGETS = 10 + 80 * FEATURES @ [0.4, 0.3, 0.2, 0.1]


def _regression(sentinels: bool, bounded: bool) -> LocalNetwork:
    """PARegressor behind both scalers on a linear target in [10, 90] (2 spokes, TAP, by
    the ``id``'s parity); with ``sentinels`` five training records whose target is -9999
    (a missing reading), in a JSON array of 20 records each time (the group path) or
    alone."""
    X, t = FEATURES, TARGETS
    config = {"protocol": "Asynchronous", "miniBatchSize": 8}
    if bounded:
        config.update(labelMin=0, labelMax=100)
    net = LocalNetwork(n_spokes=2, n_hubs=1, sharding="partition")
    net.request({"id": 0, "request": "Create", "learner": {"name": "PARegressor"},
                 "preProcessors": [{"name": "StandardScaler"},
                                   {"name": "TargetStandardScaler"}],
                 "trainingConfiguration": config})
    for lo in range(0, 2000, 200):
        items = []
        for parity in (0, 1):
            recs = [{"id": i, "features": X[i].tolist(), "label": float(t[i])}
                    for i in range(lo + parity, lo + 200, 2)]
            forecasts = [{"id": i, "features": X[i].tolist()}
                         for i in range(lo + parity, lo + 20, 2)]
            if sentinels and lo % 400 == 0:
                glitch = {"id": 10_000 + lo + parity, "features": X[lo].tolist(),
                          "label": -9999.0}
                if parity:  # alone
                    items.append(((True, glitch), parity))
                else:  # inside a JSON array
                    recs = recs[:10] + [glitch] + recs[10:]
            for k in range(0, len(recs), 20):
                items.append(((True, orjson.dumps(recs[k:k + 20])), parity))
            items.append(((False, orjson.dumps(forecasts)), parity))
        net.stream([item for item, _ in items], partitions=[p for _, p in items])
    return net


def test_label_bounds_refuse_a_regression_targets_sentinel_alone():
    net, twin = _regression(True, True), _regression(False, True)
    assert net.outputs["predictions"] == twin.outputs["predictions"]
    letters = net.outputs["deadLetters"]
    assert len(letters) == 10 and {d["code"] for d in letters} == {"label_range"}
    assert all(d["reason"] == "label = -9999 is outside [labelMin, labelMax] = [0, 100]"
               for d in letters)
    q, clean = net.query(), twin.query()
    assert q["rejectedBy"] == {"label_range": 10} and q["fitted"] == clean["fitted"] == 2000
    # without bounds: every target is in [10, 90], and the forecasts' mean absolute error
    # is 35.1 against 0.375 (the ten sentinels in the scalers' and the model's sums)
    without = _regression(True, False)
    assert without.query()["fitted"] == 2010
    assert _forecast_mae(without) > 50 * _forecast_mae(net), (_forecast_mae(without),
                                                              _forecast_mae(net))


def _forecast_mae(net: LocalNetwork) -> float:
    predictions = net.outputs["predictions"]
    assert len(predictions) == 200
    return float(np.mean([abs(p["prediction"] - TARGETS[p["id"]]) for p in predictions]))


def test_the_external_predictor_refuses_a_record_outside_the_bounds():
    """``omldm predict`` (the weights follower) checks a forecasting record against the
    pipeline's bounds, which the weights topic carries, as the spokes do."""
    from flink_jobs.follower import predict_records
    from learning.datasets import shuttle
    from operators.weights import ModelAssembler

    low, high = _shuttle_ranges()
    net = LocalNetwork(n_spokes=2, n_hubs=1, sharding="partition",
                       limits={"weights_every_ms": 0})
    net.request(_create(1, featureMin=low, featureMax=high))
    for items in _shuttle_stream(False)[:10]:
        net.stream([item for item, _ in items], partitions=[p for _, p in items])
    follower = ModelAssembler()
    for record in net.outputs["weights"]:
        follower.add(record)
    x = shuttle()[0][0].tolist()
    out = predict_records(follower.model(1), [{"id": 1, "features": x},
                                              {"id": 2, "features": [-9999.0, *x[1:]]}])
    assert "prediction" in out[0]
    assert out[1] == {"id": 2, "pipeline": 1, "error": "feature 0 = -9999 is outside "
                      "[featureMin[0], featureMax[0]] = [26, 127]"}
