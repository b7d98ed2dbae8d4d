"""Replay (``trainingConfiguration.replay``, issue 13): a spoke that trained on while its
push was in flight (SSP, TAP, EASGD, Adaptive) refits those mini-batches on the model the
answer brings, instead of adding the move they made on the older model.

On the in-process kernel with the exact least-squares SGD learner of
``tests/test_protocols.py``; messages are delivered one at a time, so that a push stays in
flight while its spoke fits more mini-batches.
"""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest

import learning.protocols.sharding as sharding
from learning.requests import SCHEMA_PATH, parse_request
from tests.test_protocols import (_least_squares_registered, create,  # noqa: F401
                                  global_model, network, regression, sgd_step)

B, LR = 4, 0.05
#: protocol → the extra configuration that makes it push after every mini-batch and never
#: hold an answer
# the papers' TAP and EASGD (no warm-up), and SSP unbounded: no push is held
PUSHERS = {"Asynchronous": {"warmupRounds": 0}, "SSP": {"staleness": 10_000},
           "EASGD": {"warmupRounds": 0}}


def feed(net, spoke: int, X, y) -> None:
    for i in range(len(X)):
        net.feed(spoke, lambda i=i: net.spokes[spoke].on_train(X[i].tolist(), y[i].item()))


def params(net, spoke: int) -> np.ndarray:
    return net.spokes[spoke].pipeline.learner.get_params()


def late_answer(protocol: str, replay: bool):
    """Two spokes, one hub, ``sum``, no damping, a push after every mini-batch of 4.
    Spoke 0 fits A1 (its push goes), then A2; spoke 1 fits B1 (its push goes), then B2
    and B3 while it is in flight. The hub takes spoke 0's push, then spoke 1's: the
    answer to spoke 1 is ``a1 + b1``, which spoke 1 had not seen when it fitted B2 and
    B3. Returns the network after that answer is delivered, the records and the models
    ``a1``, ``b1``."""
    X, y = regression(5 * B, seed=31)
    A1, A2 = slice(0, 4), slice(4, 8)
    B1, B2, B3 = slice(8, 12), slice(12, 16), slice(16, 20)
    net = network(create(protocol, batch=B, aggregation="sum", stalenessDamping=0.0,
                         replay=replay, **PUSHERS[protocol]), 2, 1)
    feed(net, 0, X[A1], y[A1])
    feed(net, 0, X[A2], y[A2])
    feed(net, 1, X[B1], y[B1])
    feed(net, 1, X[B2], y[B2])
    feed(net, 1, X[B3], y[B3])
    assert net.run(max_steps=3) == 3  # both pushes to the hub, the answer to spoke 0
    a1 = sgd_step(np.zeros(6), X[A1], y[A1], LR)
    b1 = sgd_step(np.zeros(6), X[B1], y[B1], LR)
    assert np.allclose(global_model(net), a1 + b1)
    assert net.run(max_steps=1) == 1  # the answer to spoke 1
    return net, X, y, (A1, A2, B1, B2, B3), a1, b1


@pytest.mark.parametrize("protocol", sorted(PUSHERS))
def test_a_late_answer_refits_the_mini_batches_of_the_flight_on_the_global_model(protocol):
    """With replay spoke 1 continues as if the answer had come at once: B2 and B3 fitted
    on ``a1 + b1``; without it, ``a1 + b1`` plus the move B2 and B3 made on ``b1``."""
    expected = {}
    for replay in (True, False):
        net, X, y, (A1, A2, B1, B2, B3), a1, b1 = late_answer(protocol, replay)
        g = a1 + b1
        if replay:
            want = sgd_step(sgd_step(g, X[B2], y[B2], LR), X[B3], y[B3], LR)
        else:
            moved = sgd_step(sgd_step(b1, X[B2], y[B2], LR), X[B3], y[B3], LR)
            want = g + (moved - b1)
        assert np.max(np.abs(params(net, 1) - want)) < 1e-12
        stats = net.spokes[1].protocol_statistics()
        assert stats.get("replayedRecords") == (8 if replay else None)
        expected[replay] = want
        net.run()  # the pushes the answers set off go through as usual
        assert np.all(np.isfinite(global_model(net)))
    assert not np.allclose(expected[True], expected[False])


def test_the_mini_batch_that_sends_the_push_is_not_replayed():
    """A2 was fitted after spoke 0's push went, A1 before: only A2 is kept (4 records)."""
    net, *_ = late_answer("Asynchronous", True)
    assert net.spokes[0].protocol_statistics()["replayedRecords"] == 4


def test_a_query_sums_the_spokes_replay_counts_and_follows_the_schema():
    """The Query's protocol section carries replayedRecords and replayOverflows summed over
    the spokes (spoke 0 kept A2, spoke 1 B2 and B3: 4 + 8 records); without replay
    neither is there."""
    for replay in (True, False):
        net, *_ = late_answer("Asynchronous", replay)
        net.run()
        q = net.query()
        jsonschema.validate(q, json.loads(
            SCHEMA_PATH.with_name("response.schema.json").read_text()))
        per_spoke = [s.get("replayedRecords") for s in q["spokes"]]
        if replay:
            assert per_spoke == [4, 8]
            assert q["protocol"]["replayedRecords"] == 12
            assert q["protocol"]["replayOverflows"] == 0
        else:
            assert per_spoke == [None, None]
            assert "replayedRecords" not in q["protocol"]
            assert "replayOverflows" not in q["protocol"]


def test_past_the_limit_the_move_is_added_instead(monkeypatch):
    """More than REPLAY_LIMIT records in flight: nothing more is kept and the answer is
    installed as without replay; the overflow is counted."""
    monkeypatch.setattr(sharding, "REPLAY_LIMIT", 6)
    net, X, y, (A1, A2, B1, B2, B3), a1, b1 = late_answer("Asynchronous", True)
    moved = sgd_step(sgd_step(b1, X[B2], y[B2], LR), X[B3], y[B3], LR)
    assert np.max(np.abs(params(net, 1) - (a1 + b1 + moved - b1))) < 1e-12
    stats = net.spokes[1].protocol_statistics()
    assert stats["replayOverflows"] == 1 and stats["replayedRecords"] == 0


def test_replay_is_on_by_default_reported_and_switched_by_an_update():
    net = network(create("Asynchronous", batch=B), 2, 1)
    assert all(s.replay for s in net.spokes)
    upd = parse_request({"id": 5, "request": "Update", "requestId": "u",
                         "trainingConfiguration": {"replay": False}})
    for node in (*net.spokes, *net.hubs):
        node.update(upd)
    assert not any(s.replay for s in net.spokes)
    assert "replayedRecords" not in net.spokes[0].protocol_statistics()


def test_replay_must_be_a_boolean():
    from learning.errors import RequestError
    with pytest.raises(RequestError, match="replay"):
        network(create("Asynchronous", batch=B, replay="yes"), 2, 1)
