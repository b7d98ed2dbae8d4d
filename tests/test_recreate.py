"""A pipeline deleted and created again under the same id while the deleted one's messages
are still in flight, under every protocol (the job's kernels wired in plain Python,
tests/test_spoke_kernel.py's Wire): the new pipeline learns and synchronizes as one created
under a fresh id. Its nodes number their channels past the old ones'
(:meth:`middleware.node.Node.start_channels`), so the old envelopes are dropped as
duplicates. Before, they took the new channels' first sequence numbers: BSP and SSP
stopped with their records held, TAP and EASGD almost stopped synchronizing."""

from __future__ import annotations

import time

import orjson
import pytest

from middleware.channel import Inbox, Outbox
from middleware.envelope import HUB, SPOKE, Envelope, Kind
from tests.test_layout import DeadWire
from tests.test_relayout import RUNS, create, good_records, synchronizations


def test_channels_numbered_from_a_base_drop_what_came_below_it():
    out, box = Outbox(5 << 40), Inbox(5 << 40)
    assert out.peek(1) == 5 << 40 and out.next_seq(1) == 5 << 40 and out.peek(1) == (5 << 40) + 1

    def env(seq: int) -> Envelope:
        return Envelope(0, SPOKE, 1, HUB, 0, seq, 0, "push", Kind.ONEWAY)

    assert box.accept(env(41)) == [] and box.duplicates == 1  # the deleted pipeline's
    assert [e.seq for e in box.accept(env(5 << 40))] == [5 << 40]
    assert box.expected(1) == (5 << 40) + 1 and Inbox().expected(1) == 0


def _old_pipeline_in_flight(w: DeadWire, protocol, variant, extra) -> None:
    """Pipeline 0 with width 5, 41 records; the last 11 records' messages undelivered."""
    w.request(create(protocol, variant, extra, "sum", 5))
    for i in range(41):
        w.spokes[i % 2].on_data("T" + orjson.dumps(
            {"id": -i, "features": [float(i % 3)] * 5, "label": i % 2}).decode())
        if i < 30:
            w.pump()


@pytest.mark.parametrize("protocol,variant,extra", RUNS)
def test_a_pipeline_created_again_under_a_deleted_ones_id_is_a_new_pipeline(protocol, variant,
                                                                            extra):
    w = DeadWire()
    _old_pipeline_in_flight(w, protocol, variant, extra)
    for spoke in w.spokes:  # Delete and Create again before anything more is delivered
        spoke.on_message(orjson.dumps({"id": 0, "request": "Delete", "requestId": "d"}))
    for spoke in w.spokes:
        spoke.on_message(orjson.dumps(create(protocol, variant, extra, "sum", 2)
                                      | {"requestId": "c2"}))
    w.pump()
    assert [r["status"] for r in w.responses if r.get("requestId") in ("d", "c2")] == ["ok"] * 2
    again = good_records(w)
    fresh = DeadWire()
    fresh.request(create(protocol, variant, extra, "sum", 2))
    alone = good_records(fresh)
    assert again["fitted"] == alone["fitted"] == 400
    assert abs(again["prequentialAccuracy"] - alone["prequentialAccuracy"]) <= 0.01
    assert synchronizations(again) >= synchronizations(alone) > 0
    assert not any(s["held"] for s in again["spokes"])
    assert sum(s.get("syncFailures", 0) for s in again["spokes"]) == 0
    assert again["service"]["handlerErrors"] == 0


def test_a_bsp_pipeline_created_again_under_its_id_in_flink(broker):
    """Through the real broker and a Flink MiniCluster, 2 spokes: a BSP pipeline is deleted
    while its rounds are in flight and created again under its id; the new one fits and
    predicts every record that follows and learns (before: its rounds took the old
    pipeline's answers, and it stopped with records held)."""
    from flink_jobs.demo import shuttle_create_request
    from flink_jobs.session import Session, local_config
    from learning.datasets import shuttle

    X, y = shuttle()
    cfg = local_config(broker.bootstrap_servers, topic_prefix="recreate-", spokes=2, hubs=1)
    bsp = {"protocol": "Synchronous", "miniBatchSize": 8, "miniBatches": 1}
    with Session(cfg, "recreate") as s:
        request = shuttle_create_request(0) | {"trainingConfiguration": bsp}
        assert s.request(request, timeout=120)["status"] == "ok"
        s.stream(X[:3000], y[:3000])  # not waited for: rounds in flight at the Delete
        # the Create right behind the Delete, as a script would send them
        deleted = s.send_request({"id": 0, "request": "Delete", "requestId": "d"})
        created = s.send_request(request | {"requestId": "again"})
        assert s.response(deleted, 60)["status"] == s.response(created, 60)["status"] == "ok"
        s.stream(X[3000:6000], y[3000:6000], first_id=3000)
        # the new pipeline takes every record that comes after its Create: these 3,000 and
        # what the old one had not handled yet; Query until nothing more comes
        deadline, counted, q = time.monotonic() + 180, -1, {}
        while time.monotonic() < deadline:
            q = s.query(0)
            done = q["fitted"] + q["predicted"]
            if done == counted and done >= 3000 and not any(sp["held"] for sp in q["spokes"]):
                break
            counted = done
            time.sleep(2.0)
        assert done == counted >= 3000, q["spokes"]
        assert not any(sp["held"] for sp in q["spokes"])
        assert q["service"]["restores"] == 0 and q["service"]["handlerErrors"] == 0
        assert q["prequentialAccuracy"] > 0.95
        assert q["protocol"]["rounds"] > q["fitted"] // 32  # a round: 8 records on each spoke
