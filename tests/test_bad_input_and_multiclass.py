"""Bad records and bad requests never hurt the job; multi-class learning through the whole
loop on scikit-learn's bundled digits (1,797 real 8×8 handwritten digits, 10 classes).

Both run on a real broker and a real Flink MiniCluster.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits

from flink_jobs.demo import shuttle_create_request
from flink_jobs.kafka_io import TopicReader
from flink_jobs.session import Session, local_config
from learning.datasets import shuttle
from middleware import Kind, codec


def test_bad_records_and_requests_are_answered_counted_and_harmless(broker):
    X, y = shuttle()
    X, y = X[:2000], y[:2000]
    cfg = local_config(broker.bootstrap_servers, topic_prefix="bad-", spokes=2, hubs=1)
    with Session(cfg, "bad-input") as s:
        assert s.request(shuttle_create_request(0), timeout=120)["status"] == "ok"
        t = cfg.topics
        # bad requests: each answered once, with a machine-readable code
        answers = {
            "truncated": s.request(b'{"id": 1, "request": "Cre', timeout=60),
            "unknown learner": s.request({"id": 1, "request": "Create", "learner": {"name": "Nope"}}),
            "missing id": s.request({"id": 7, "request": "Query"}),
            "duplicate": s.request(shuttle_create_request(0) | {"requestId": "dup"}),
            "zero batch": s.request(shuttle_create_request(2) | {
                "requestId": "zero", "trainingConfiguration": {"miniBatchSize": 0}}),
            "unknown protocol": s.request(shuttle_create_request(3) | {
                "requestId": "proto", "trainingConfiguration": {"protocol": "Gossip"}}),
        }
        codes = {k: v["error"]["code"] for k, v in answers.items()}
        assert all(v["status"] == "error" for v in answers.values()), answers
        assert codes == {"truncated": "invalid_json", "unknown learner": "unknown_learner",
                         "missing id": "not_found", "duplicate": "exists",
                         "zero batch": "schema", "unknown protocol": "unknown_protocol"}
        assert answers["truncated"]["requestId"] is None
        assert answers["zero batch"]["error"]["field"] == "trainingConfiguration.miniBatchSize"
        # bad records in the middle of good ones
        half = 1000
        held1, n1, f1 = s.stream(X[:half], y[:half])
        for bad in (b"{not json", b"[1, 2", b'{"features": [1, 2, 3], "label": 0}',
                    b'{"features": "abc", "label": 1}', b'"just a string"'):
            s.producer.send(t.training, bad)
        s.producer.send(t.forecasting, b'{"id": -1, "features": [1.0]}')
        held2, n2, f2 = s.stream(X[half:], y[half:], first_id=half)
        final = s.wait_until_counted(0, n1 + n2, f1 + f2, timeout=120)
        assert final["rejected"] == 6
        dead = []
        while len(dead) < 6:
            dead.extend(s.dead_letters.poll(500))
        assert len(dead) == 6 and all(d["reason"] for d in dead)
        assert final["prequentialAccuracy"] > 0.97
        assert s.query(7)["error"]["code"] == "not_found"  # still answering


def test_multiclass_digits_through_the_whole_loop(broker):
    digits = load_digits()
    X = np.tile(digits.data, (3, 1))  # three passes, in order
    y = np.tile(digits.target, 3)
    # 2 KB messages: the 5.2 KB model travels hub → Kafka → spoke as fragments
    cfg = local_config(broker.bootstrap_servers, topic_prefix="digits-", spokes=2, hubs=1,
                       max_message_bytes=2048)
    req = {"id": 5, "request": "Create", "requestId": "digits",
           "preProcessors": [{"name": "StandardScaler"}],
           "learner": {"name": "PA", "hyperParameters": {"C": 0.01, "mode": 1}},
           "trainingConfiguration": {"protocol": "Asynchronous", "miniBatchSize": 16,
                                     "miniBatches": 2}}
    with Session(cfg, "digits") as s:
        assert s.request(req, timeout=120)["status"] == "ok"
        held, n_train, n_fore = s.stream(X, y, between=s.keep_pace(5, lag=1000), chunk=1000)
        final = s.wait_until_counted(5, n_train, n_fore, timeout=120)
        preds = s.predictions_of(5)
        feedback = TopicReader(broker.bootstrap_servers, cfg.topics.ps_messages, json=False)
        kinds = [codec.decode(codec.unframe(b)[1]).kind for b in feedback.drain(idle_ms=1000)]
        feedback.close()
    assert Kind.FRAGMENT in kinds and len(kinds) >= 3 * final["protocol"]["updates"]
    assert final["model"]["layout"]["classes"] == list(range(10))
    assert final["model"]["size"] == 10 * 65
    # the producer keeps within 1,000 records of the job (keep_pace), so a forecasting
    # record of the third pass is predicted by a model that has seen every digit twice
    third = {i: label for i, label in held.items() if i >= 2 * len(digits.target)}
    forecast = sum(preds[i] == label for i, label in third.items()) / len(third)
    print(f"digits: prequential {final['prequentialAccuracy']:.4f}, forecast (3rd pass) {forecast:.4f}")
    assert final["prequentialAccuracy"] > 0.90
    assert forecast > 0.90
