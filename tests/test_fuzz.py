"""Fuzzed data records against the real broker and a real Flink MiniCluster: more than
forty kinds of malformed records before, between and after the good records of a real
stream (Shuttle), on ``training`` and ``forecasting``.

Two pipelines run side by side: one declares its layout at Create (``n_features``,
``classes``), the other agrees on it from the stream (learning.layout). The same script
of good records runs again in a second job without the fuzz. Every good record is fitted
or predicted exactly once, prequential accuracy stays within 0.002 of the run without
fuzz, every bad record is counted once (per pipeline, under its reason) and dead-lettered
once, and the job never restarts.

The job has one spoke, so that each pipeline's learning depends only on the order of its
records and two runs can be compared (the layout agreement across spokes is tested by
tests/test_layout.py and through the whole loop by tests/test_end_to_end.py).
"""

from __future__ import annotations

import time
from collections import Counter

import orjson
import pytest

from flink_jobs.kafka_io import TopicReader
from flink_jobs.session import Session, local_config
from learning.datasets import shuttle
from learning.layout import REASONS

D = 9  # Shuttle's width
N = 3000  # good records (every 5th a forecasting one)
EVERY = 5


def create(pid: int, declared: bool) -> dict:
    learner = {"name": "PA", "hyperParameters": {"C": 0.01, "mode": 1}}
    if declared:
        learner["parameters"] = {"n_features": D, "classes": [0, 1]}
    return {"id": pid, "request": "Create", "requestId": f"create-{pid}",
            "preProcessors": [{"name": "StandardScaler"}], "learner": learner,
            "trainingConfiguration": {"protocol": "Asynchronous", "miniBatchSize": 1,
                                      "miniBatches": 4}}


GOOD = [1.0] * D
_GOOD = object()


def rec(features=_GOOD, label=1) -> bytes:
    return orjson.dumps({"id": -1, "features": GOOD if features is _GOOD else features,
                         "label": label})


# (name, Kafka record value, what it is): "K<n>" n records no pipeline can use (not JSON,
# not a record), each dead-lettered once ("K<n>P": and one refused by both pipelines);
# "P" refused by both pipelines; "P0" refused by
# the declared pipeline only (an unseen class of the right type is a new class to the
# other). Kinds that concern labels are sent to ``training`` only (a forecasting record's
# label is not read).
FEATURE_FUZZ = [
    ("not json", b"{not json", "K1"),
    ("truncated", rec()[:20], "K1"),
    ("empty", b"", "K1"),
    ("binary", bytes(range(256)), "K1"),
    ("invalid utf-8", b'{"features": [1], "label": "\xff\xfe"}', "K1"),
    ("lone surrogate", b'{"features": [1], "label": "\\ud800"}', "K1"),
    ("bom", b"\xef\xbb\xbf" + rec(), "K1"),
    ("trailing garbage", rec() + b" x", "K1"),
    ("trailing comma", b'{"features": [1, 2,], "label": 1}', "K1"),
    ("single quotes", b"{'features': [1], 'label': 1}", "K1"),
    ("NaN", b'{"features": [NaN, 1, 1, 1, 1, 1, 1, 1, 1], "label": 1}', "K1"),
    ("nan quoted lowercase", b'{"features": [nan, 1, 1, 1, 1, 1, 1, 1, 1], "label": 1}', "K1"),
    ("Infinity", b'{"features": [Infinity, 1, 1, 1, 1, 1, 1, 1, 1], "label": 1}', "K1"),
    ("-Infinity", b'{"features": [-Infinity, 1, 1, 1, 1, 1, 1, 1, 1], "label": 1}', "K1"),
    ("1e309", b'{"features": [1e309, 1, 1, 1, 1, 1, 1, 1, 1], "label": 1}', "K1"),
    ("-0.", b'{"features": [-0., 1, 1, 1, 1, 1, 1, 1, 1], "label": 1}', "K1"),
    ("-.0", b'{"features": [-.0, 1, 1, 1, 1, 1, 1, 1, 1], "label": 1}', "K1"),
    ("+0", b'{"features": [+0, 1, 1, 1, 1, 1, 1, 1, 1], "label": 1}', "K1"),
    ("00", b'{"features": [00, 1, 1, 1, 1, 1, 1, 1, 1], "label": 1}', "K1"),
    ("hex", b'{"features": [0x10, 1, 1, 1, 1, 1, 1, 1, 1], "label": 1}', "K1"),
    ("null", b"null", "K1"),
    ("number", b"42", "K1"),
    ("-0 alone", b"-0", "K1"),
    ("string", b'"a string"', "K1"),
    ("bool", b"true", "K1"),
    ("array of numbers", b"[1, 2, 3]", "K3"),
    ("array of garbage", b'[null, "x", {}, [1]]', "K4"),
    ("empty object", b"{}", "K1"),
    ("no features", b'{"feature": [1, 1, 1, 1, 1, 1, 1, 1, 1], "label": 1}', "K1"),
    ("1 MB not JSON", b"{" + b"x" * 1_000_000, "K1"),
    ("features string", rec("1,1,1,1,1,1,1,1,1"), "P"),
    ("features object", rec({"a": 1}), "P"),
    ("features null", rec(None), "P"),
    ("features nested", rec([[1.0] * D]), "P"),
    ("features nested wide", rec([[1.0]] * D), "P"),
    ("features empty", rec([]), "P"),
    ("feature null", rec([None] + [1.0] * (D - 1)), "P"),
    ("feature string", rec(["1"] * D), "P"),
    ("feature array", rec([1.0, [2.0]] + [1.0] * (D - 2)), "P"),
    ("feature object", rec([{}] + [1.0] * (D - 1)), "P"),
    ("1e308", rec([1e308] + [1.0] * (D - 1)), "P"),
    ("-1e308", rec([-1e308] + [1.0] * (D - 1)), "P"),
    ("width 1", rec([1.0]), "P"),
    ("width d-1", rec([1.0] * (D - 1)), "P"),
    ("width d+1", rec([1.0] * (D + 1)), "P"),
    ("width 100,000", rec([0.5] * 100_000), "P"),
]
LABEL_FUZZ = [
    ("label missing", orjson.dumps({"id": -1, "features": GOOD}), "P"),
    ("label null", rec(label=None), "P"),
    ("label object", rec(label={"a": 1}), "P"),
    ("label array", rec(label=[1]), "P"),
    ("label huge string", rec(label="x" * 100_000), "P"),
    ("label string", rec(label="1"), "P"),
    ("label float", rec(label=1.0), "P"),
    ("label bool", rec(label=True), "P"),
    ("label 1e300", rec(label=1e300), "P"),
    ("1 MB record", rec(label="y" * 1_000_000), "P"),
    ("unseen class", rec(label=99), "P0"),
]


def mixed(good: list[bytes]) -> bytes:
    """A JSON array mixing two good records with two records that are none (K2) and one
    that no pipeline can take (P)."""
    return b"[" + b", ".join([b'"bad"', good[0], b"null", good[1], b'{"features": "x"}']) + b"]"


def zero_spellings(value: bytes) -> bytes:
    """The same record with every feature 0 spelled as JSON allows -0 and 0 to be."""
    doc = orjson.loads(value)
    spellings = iter([b"-0", b"-0.0", b"-0e0", b"0E+0", b"-0.0e-0"] * 10)
    parts = [next(spellings) if v == 0 else orjson.dumps(v) for v in doc["features"]]
    head = {k: v for k, v in doc.items() if k != "features"}
    return orjson.dumps(head)[:-1] + b', "features": [' + b", ".join(parts) + b"]}"


def script(fuzz: bool):
    """The Kafka records of one run in order: (topic, value, kind); kind is None for
    good records, or (name, expectation) for fuzz."""
    X, y = shuttle()
    X, y = X[:N], y[:N]
    out = []
    good = []
    for i in range(N):
        if i % EVERY == EVERY - 1:
            good.append(("forecasting", orjson.dumps({"id": i, "features": X[i].tolist()}), None))
        else:
            good.append(("training", orjson.dumps({"id": i, "features": X[i].tolist(),
                                                   "label": int(y[i])}), None))

    def fuzz_block():
        block = [("training", v, (name, what)) for name, v, what in FEATURE_FUZZ + LABEL_FUZZ]
        block += [("forecasting", v, (name, what)) for name, v, what in FEATURE_FUZZ]
        return block

    half = N // 2
    if fuzz:
        out += fuzz_block()
    out += good[:half]
    if fuzz:
        out += fuzz_block()
        # two good training records of the stream inside an array of bad ones
        a, b = good[half], good[half + 1]
        assert a[0] == b[0] == "training"
        out.append(("training", mixed([a[1], b[1]]), ("mixed array", "K2P")))
        rest = good[half + 2:]
        # records with zeros, their zeros spelled every accepted way: good records
        rest = [(t, zero_spellings(v), None) if (j % 7 == 0 and b'0.0' in v) else (t, v, None)
                for j, (t, v, _) in enumerate(rest)]
        out += rest
        out += fuzz_block()
    else:
        out += good[half:]
    return out, good


def expected(items) -> dict:
    """Dead letters and refusals the fuzz must cause."""
    kernel = per_pipeline = only_declared = extra_fitted = 0
    for topic, _, kind in items:
        if kind is None:
            continue
        what = kind[1]
        if what.startswith("K"):
            kernel += int(what[1])
            per_pipeline += what.endswith("P")
        elif what == "P":
            per_pipeline += 1
        elif what == "P0":
            only_declared += 1
            extra_fitted += topic == "training"
    return {"kernel": kernel, "both": per_pipeline, "declared": only_declared,
            "extra_fitted": extra_fitted}


def run(broker, prefix: str, items) -> dict:
    cfg = local_config(broker.bootstrap_servers, topic_prefix=prefix, spokes=1, hubs=1)
    n_train = sum(1 for t, _, k in items if k is None and t == "training") + 2 * any(
        k and k[0] == "mixed array" for _, _, k in items)
    n_fore = sum(1 for t, _, k in items if k is None and t == "forecasting")
    with Session(cfg, prefix) as s:
        for pid, declared in ((0, True), (1, False)):
            assert s.request(create(pid, declared), timeout=120)["status"] == "ok"
        topics = {"training": cfg.topics.training, "forecasting": cfg.topics.forecasting}
        for topic, value, _ in items:
            s.producer.send(topics[topic], value)
        s.producer.flush()
        out = {"n_train": n_train, "n_fore": n_fore}
        exp = expected(items)
        s.wait_until_counted(0, n_train, n_fore, timeout=300)
        s.wait_until_counted(1, n_train + exp["extra_fitted"], n_fore, timeout=120)
        # the fuzz after the last good record: every bad record counted too
        for pid, want in ((0, exp["kernel"] + exp["both"] + exp["declared"]),
                          (1, exp["kernel"] + exp["both"])):
            deadline = time.monotonic() + 60
            while (q := s.query(pid))["rejected"] < want and time.monotonic() < deadline:
                time.sleep(0.5)
            out[pid] = q
        reader = TopicReader(broker.bootstrap_servers, cfg.topics.predictions)
        try:
            out["predictions"] = Counter((p["pipeline"], p["id"]) for p in reader.drain(idle_ms=1000))
        finally:
            reader.close()
        dead = TopicReader(broker.bootstrap_servers, cfg.topics.dead_letters)
        try:
            out["dead"] = list(dead.drain(idle_ms=1000))
        finally:
            dead.close()
    return out


@pytest.fixture(scope="module")
def runs(broker):
    fuzzed, good = script(fuzz=True)
    clean, _ = script(fuzz=False)
    return {"fuzz": run(broker, "fuzz-", fuzzed), "clean": run(broker, "clean-", clean),
            "expected": expected(fuzzed), "kinds": len(FEATURE_FUZZ) + len(LABEL_FUZZ) + 2,
            "held": {orjson.loads(v)["id"] for t, v, _ in good if t == "forecasting"}}


def test_there_are_more_than_forty_kinds_of_bad_records(runs):
    assert runs["kinds"] >= 40


def test_every_good_record_is_fitted_or_predicted_exactly_once(runs):
    fuzz, clean, exp = runs["fuzz"], runs["clean"], runs["expected"]
    assert fuzz["n_train"] == clean["n_train"] and fuzz["n_fore"] == clean["n_fore"]
    for pid in (0, 1):
        q = fuzz[pid]
        assert q["fitted"] == fuzz["n_train"] + (exp["extra_fitted"] if pid == 1 else 0)
        assert q["predicted"] == fuzz["n_fore"]
        ids = {i for (p, i), n in fuzz["predictions"].items() if p == pid}
        assert ids == runs["held"]
        assert all(n == 1 for (p, _), n in fuzz["predictions"].items() if p == pid)
        assert q["service"]["restores"] == 0  # the job never restarted


def test_accuracy_is_that_of_the_run_without_fuzz(runs):
    for pid in (0, 1):
        a, b = runs["fuzz"][pid]["prequentialAccuracy"], runs["clean"][pid]["prequentialAccuracy"]
        print(f"pipeline {pid}: prequential accuracy with fuzz {a:.4f}, without {b:.4f}")
        assert abs(a - b) <= 0.002
        assert b > 0.95


def test_every_bad_record_is_counted_and_dead_lettered_once_with_its_reason(runs):
    fuzz, exp = runs["fuzz"], runs["expected"]
    dead = fuzz["dead"]
    kernel = [d for d in dead if d.get("pipeline") is None]
    assert len(kernel) == exp["kernel"]
    for pid in (0, 1):
        mine = [d for d in dead if d.get("pipeline") == pid]
        want = exp["both"] + (exp["declared"] if pid == 0 else 0)
        assert len(mine) == want, Counter(d["code"] for d in mine)
        q = fuzz[pid]
        assert q["rejected"] == exp["kernel"] + want
        assert sum(q["rejectedBy"].values()) == q["rejected"]
        assert q["layout"]["source"] == ("declared" if pid == 0 else "inferred")
        assert (q["layout"]["nFeatures"], q["layout"]["labelType"]) == (D, "int")
    assert all(d["code"] in REASONS and d["reason"] for d in dead)
    assert "expected 9 features, got 100000" in {d["reason"] for d in dead}
    assert max(len(orjson.dumps(d)) for d in dead) < 100_000  # big records truncated
    assert runs["clean"][0]["rejected"] == runs["clean"][1]["rejected"] == 0
