"""The Flink spoke and hub kernels wired together in plain Python (what the job's operators
host, without Flink): a pipeline waiting on its hubs pauses only its own stream."""

from __future__ import annotations

import inspect
import time

import orjson
import pytest

from learning.layout import REASONS
from middleware import codec
from operators import hub_kernel as hub_module
from operators import spoke_kernel as spoke_module
from middleware.node import NetworkContext
from operators.hub_kernel import HubContext, HubKernel
from middleware.codec import record_batch
from operators.spoke_kernel import SpokeContext, SpokeKernel


class Wire:
    """Two spoke kernels and one hub kernel; :meth:`pump` moves messages until quiet."""

    def __init__(self, limits: dict | None = None) -> None:
        self.spokes = [SpokeKernel(i, 2, 1, hub_keys=[0], limits=limits) for i in range(2)]
        self.hub = HubKernel(hub=0, n_spokes=2)
        self.predictions: list[dict] = []
        self.responses: list[dict] = []
        self.dead: list[dict] = []  # dead letters
        self.lose = 0  # hub→spoke frames to lose on the way (as the feedback topic once did)
        self.lose_to: dict[int, int] = {}  # spoke → frames to it to lose on the way

    def pump(self) -> None:
        moved = True
        while moved:
            moved = False
            for spoke in self.spokes:
                out, spoke.out = spoke.out, []
                for stream, value in out:
                    moved = True
                    if stream == "hubs":
                        self.hub.on_message(value[1])
                    elif stream is None:
                        self.predictions.append(orjson.loads(value))
                    elif stream == "responses":
                        self.responses.append(orjson.loads(value))
                    elif stream == "deadLetters":
                        self.dead.append(orjson.loads(value))
            out, self.hub.out = self.hub.out, []
            for stream, value in out:
                moved = True
                if stream is None:
                    assert codec.is_frame(value)
                    dst = codec.unframe(value)[0].spoke
                    if self.lose:
                        self.lose -= 1
                        continue
                    if self.lose_to.get(dst):
                        self.lose_to[dst] -= 1
                        continue
                    self.spokes[dst].on_message(value)
                else:
                    self.responses.append(orjson.loads(value))

    def request(self, req: dict) -> None:
        for spoke in self.spokes:
            spoke.on_message(orjson.dumps(req))
        self.pump()

    def batch(self, spoke: int, records: list[tuple[str, dict | bytes]]) -> None:
        """One batch of records, as the Java record batcher sends them."""
        self.spokes[spoke].on_batch(record_batch(
            (tag == "T", rec if isinstance(rec, bytes) else orjson.dumps(rec)) for tag, rec in records))
        self.pump()

    def data(self, spoke: int, tag: str, rec: dict) -> None:
        self.spokes[spoke].on_data(tag + orjson.dumps(rec).decode())
        self.pump()


def create(pid: int, protocol: str) -> dict:
    return {"id": pid, "request": "Create", "requestId": f"c{pid}",
            "learner": {"name": "PA", "hyperParameters": {"C": 0.01}, "parameters": {"n_features": 2}},
            "trainingConfiguration": {"protocol": protocol, "miniBatchSize": 2, "miniBatches": 1}}


def record(i: int) -> dict:
    return {"id": i, "features": [float(i % 3), 1.0 - (i % 2)], "label": i % 2}


def test_a_paused_pipeline_holds_its_records_and_the_others_go_on():
    """A BSP round waits for spoke 1, which has no records yet: on spoke 0 the BSP
    pipeline holds what comes (in order), while the Independent pipeline fits and answers
    every record; once spoke 1 pushes, the round ends and the held records are fitted."""
    w = Wire()
    w.request(create(0, "Synchronous"))
    w.request(create(1, "Independent"))
    assert sum(r["status"] == "ok" for r in w.responses) == 2
    for i in range(2):  # one mini-batch on spoke 0: BSP pushes and waits for spoke 1
        w.data(0, "T", record(i))
    bsp, alone = w.spokes[0].nodes[0], w.spokes[0].nodes[1]
    assert bsp.ctx.pauses == 1 and bsp.fitted == 2
    for i in range(2, 12):
        w.data(0, "T", record(i))
    w.data(0, "P", {"id": 99, "features": [1.0, 0.0]})
    assert alone.fitted == 12 and bsp.fitted == 2 and len(bsp.ctx.held_records()) == 11
    assert [p["pipeline"] for p in w.predictions] == [1]  # BSP's prediction waits its turn
    assert bsp.statistics()["held"] == 11
    i = 100
    while bsp.ctx.backlog:  # each mini-batch of spoke 1 closes one round on spoke 0
        rounds = bsp.rounds
        w.data(1, "T", record(i))
        w.data(1, "T", record(i + 1))
        i += 2
        assert bsp.rounds == rounds + 1
        assert bsp.fitted == min(2 + 2 * bsp.rounds, 12)  # one held mini-batch per round
    assert bsp.fitted == 12 and bsp.rounds == 6
    assert sorted(p["pipeline"] for p in w.predictions) == [0, 1]
    assert w.spokes[0].paused == bsp.ctx.pauses == 0


def test_a_protocol_that_raises_after_a_mini_batch_stops_neither_the_job_nor_the_others(
        monkeypatch, caplog):
    """A protocol's hook that raises after every third mini-batch (a bug, or state an
    Update left behind): before, the exception left the kernel, which on Flink fails the
    job and stops every pipeline. Now it is logged with its traceback and counted in the
    spoke's ``protocolErrors``; every record of both pipelines is fitted, and the faulty
    one still synchronizes after the mini-batches whose hook did not fail."""
    from learning.protocols.asynchronous import AsynchronousSpoke

    calls = {"n": 0}
    hook = AsynchronousSpoke.after_batch

    def flaky(self, n_records: int) -> None:
        calls["n"] += 1
        if calls["n"] % 3 == 0:
            raise RuntimeError("a protocol bug")
        hook(self, n_records)

    monkeypatch.setattr(AsynchronousSpoke, "after_batch", flaky)
    w = Wire()
    faulty = create(0, "Asynchronous")
    faulty["trainingConfiguration"]["warmupRounds"] = 0  # the papers' TAP: nothing held
    w.request(faulty)
    w.request(create(1, "Independent"))
    for i in range(60):
        w.data(i % 2, "T", record(i))
    faulty = [sp.nodes[0].statistics() for sp in w.spokes]
    alone = [sp.nodes[1].statistics() for sp in w.spokes]
    assert sum(st["fitted"] for st in faulty) == sum(st["fitted"] for st in alone) == 60
    assert sum(st["protocolErrors"] for st in faulty) == 30 // 3  # 30 mini-batches of 2
    assert all(st["protocolErrors"] == 0 for st in alone)
    assert sum(st["protocol"]["pushes"] for st in faulty) == 20
    assert len([r for r in caplog.records if "the protocol failed" in r.getMessage()
                and r.exc_info]) == 10
    # a host that asks for failures (the in-process kernel's tests and experiments) gets it
    w.spokes[0].reraise = True
    with pytest.raises(RuntimeError, match="a protocol bug"):
        for i in range(60, 72):
            w.data(0, "T", record(i))
    assert w.spokes[0].nodes[0].statistics()["protocolErrors"] == faulty[0]["protocolErrors"] + 1


def test_a_full_backlog_sheds_its_pipelines_records_as_dead_letters_and_nothing_else():
    """A paused pipeline holds Kafka records up to ``max_backlog_bytes`` (JSON + HELD_COST
    each); past it its records are dead-lettered with code ``backlog_full``, counted by
    that pipeline alone, while the other pipeline fits everything; once the round closes
    the held records are fitted in order, and records are held again."""
    cost = len(orjson.dumps(record(10))) + spoke_module.HELD_COST
    w = Wire(limits={"max_backlog_bytes": 3 * cost + 2})  # room for 3 of these records
    w.request(create(0, "Synchronous"))
    w.request(create(1, "Independent"))
    for i in range(2):  # one mini-batch on spoke 0: BSP pushes and waits for spoke 1
        w.data(0, "T", record(i))
    bsp, alone = w.spokes[0].nodes[0], w.spokes[0].nodes[1]
    assert bsp.ctx.pauses == 1
    for i in range(10, 16):
        w.data(0, "T", record(i))
    w.batch(0, [("T", orjson.dumps([record(16), record(17)])),
                ("P", {"id": 99, "features": [1.0, 0.0]})])
    assert [r["id"] for _, r in bsp.ctx.held_records()] == [10, 11, 12]
    assert bsp.ctx.held_bytes == 3 * cost and bsp.statistics()["held"] == 3
    shed = [d for d in w.dead if d["code"] == "backlog_full"]
    assert [d["record"]["id"] for d in shed] == [13, 14, 15, 16, 17, 99]
    assert {d["pipeline"] for d in shed} == {0} and "max_backlog_bytes" in shed[0]["reason"]
    assert "backlog_full" in REASONS
    assert bsp.rejected_by == {"backlog_full": 6}
    assert alone.fitted == 10 and alone.rejected == 0 and len(w.predictions) == 1
    w.data(1, "T", record(100))
    w.data(1, "T", record(101))  # spoke 1 pushes: the round closes, the backlog runs
    assert bsp.fitted == 4 and bsp.ctx.held_records() == [(True, record(12))]
    assert bsp.ctx.held_bytes == cost  # paused again after one held mini-batch
    w.data(0, "T", record(18))  # room again: held, not shed
    assert bsp.ctx.held_records()[-1] == (True, record(18)) and bsp.rejected == 6
    q = w.spokes[0].nodes[0].statistics()
    assert q["rejectedBy"] == {"backlog_full": 6} and q["heldBytes"] == 2 * cost


def test_a_query_says_how_long_a_paused_spoke_waits_and_on_what():
    """While a BSP spoke waits for its round, its statistics (a Query's per-spoke details)
    say for how long (``pausedForS``) and on which calls (``waitingOn``); once the round
    closes, neither."""
    w = Wire()
    w.request(create(0, "Synchronous"))
    for i in range(2):  # one mini-batch on spoke 0: BSP pushes and waits for spoke 1
        w.data(0, "T", record(i))
    bsp = w.spokes[0].nodes[0]
    time.sleep(0.05)
    q = bsp.statistics()
    assert q["waitingOn"] == ["push"] and q["pausedForS"] >= 0.05
    assert w.spokes[1].nodes[0].statistics()["pausedForS"] is None
    w.data(1, "T", record(100))
    w.data(1, "T", record(101))  # spoke 1 pushes: the round closes
    q = bsp.statistics()
    assert q["waitingOn"] == [] and q["pausedForS"] is None


def test_a_query_gives_the_wall_time_of_the_spokes_crossings():
    """Each spoke keeps the wall time of its last data crossings (batches) and a Query's
    per-spoke details give their p50 and p95 in milliseconds (None before any batch, and
    for records that came one per call): what a hub's answer may wait behind."""
    w = Wire()
    w.request(create(0, "Independent"))
    node = w.spokes[0].nodes[0]
    assert node.statistics()["crossingMsP50"] is None
    w.data(0, "T", record(0))  # one record per call: no batch
    assert node.statistics()["crossingMsP50"] is None
    for b in range(20):
        w.batch(0, [("T", record(i)) for i in range(10 * b, 10 * b + 10)])
    q = node.statistics()
    assert 0.0 < q["crossingMsP50"] <= q["crossingMsP95"] < 1000.0
    assert len(w.spokes[0].crossings_ms) == 20
    assert w.spokes[1].nodes[0].statistics()["crossingMsP95"] is None


def test_a_batch_that_pauses_its_pipeline_midway_holds_the_rest_in_order():
    """Records of one batch (as ``omldm.RecordBatcher`` groups them in Java) are handled one
    by one: BSP pauses after its first mini-batch, inside the batch, and the rest of the
    batch waits in its backlog in order, while the Independent pipeline fits and predicts
    all of it; bad records in the batch are dead-lettered alone, and training and
    forecasting records share the batch."""
    w = Wire()
    w.request(create(0, "Synchronous"))
    w.request(create(1, "Independent"))
    batch = [("T", record(i)) for i in range(6)] + [("P", {"id": 99, "features": [1.0, 0.0]}),
                                                   ("T", b"{not json"), ("T", b""),
                                                   ("T", orjson.dumps([record(6), record(7)]))]
    w.batch(0, batch)
    bsp, alone = w.spokes[0].nodes[0], w.spokes[0].nodes[1]
    assert bsp.ctx.pauses == 1 and bsp.fitted == 2
    held = bsp.ctx.held_records()
    assert [train for train, _ in held] == [True] * 4 + [False] + [True] * 2
    assert [rec["id"] for _, rec in held] == [2, 3, 4, 5, 99, 6, 7]
    assert bsp.statistics()["held"] == 7
    assert alone.fitted == 8 and [p["pipeline"] for p in w.predictions] == [1]
    dead = [orjson.loads(v) for s, v in w.spokes[0].out if s == "deadLetters"]
    assert not dead  # pumped already: the Wire keeps no dead letters, count them instead
    assert alone.rejected == bsp.rejected == 2
    i = 100
    while bsp.ctx.backlog:
        w.batch(1, [("T", record(i)), ("T", record(i + 1))])
        i += 2
    assert bsp.fitted == 8 and sorted(p["pipeline"] for p in w.predictions) == [0, 1]


def test_an_empty_batch_and_a_batch_of_one_are_handled():
    w = Wire()
    w.request(create(0, "Independent"))
    w.batch(0, [])
    w.batch(0, [("T", record(0))])
    w.batch(0, [("T", record(1))])  # a mini-batch of 2 across two batches
    assert w.spokes[0].nodes[0].fitted == 2


def test_a_lost_answer_to_a_call_in_flight_is_sent_again_without_a_pause(monkeypatch):
    """SSP with a large staleness pushes without pausing. When the hub's answer is lost on
    the way and the stream has ended, the spoke still acknowledges its channel when a
    Query comes (a call is in flight), and the hub sends the answer again."""
    monkeypatch.setattr(spoke_module, "NUDGE_EVERY_S", 0.0)
    monkeypatch.setattr(hub_module, "RESEND_AFTER_S", 0.2)
    w = Wire()
    req = create(0, "SSP")
    req["trainingConfiguration"]["staleness"] = 100
    w.request(req)
    ssp = w.spokes[0].nodes[0]
    w.lose = 1
    for i in range(2):  # one mini-batch: a push, answered at once, and the answer is lost
        w.data(0, "T", record(i))
    assert ssp.pushes == 1 and ssp.rounds == 0 and ssp.ctx.pauses == 0
    assert ssp.calls_in_flight == 1 and w.lose == 0
    time.sleep(0.3)  # the answer is overdue now
    w.request({"id": 0, "request": "Query", "requestId": "q"})
    assert ssp.rounds >= 1 and not ssp.in_flight


def test_a_lost_one_way_message_to_a_spoke_that_waits_on_nothing_is_sent_again(monkeypatch):
    """FDA on Shuttle (Flink) once stalled for good: the coordinator's poll to one spoke,
    whose records had run out, was lost on the way; that spoke waited on nothing, so it
    never acknowledged its channel, and the spokes that had answered the poll stayed
    paused. Their acknowledgements now get the hub to send the poll again; the spoke that
    gets a copy of what it had acknowledges it at once, so nothing is sent over and over."""
    monkeypatch.setattr(spoke_module, "NUDGE_EVERY_S", 0.0)
    monkeypatch.setattr(hub_module, "RESEND_AFTER_S", 0.2)
    w = Wire()
    req = create(0, "FDA")
    req["trainingConfiguration"].update(variant="naive", threshold=1e-9)
    w.request(req)
    fda = [w.spokes[i].nodes[0] for i in range(2)]
    w.spokes[1].acknowledge(0, 0)  # spoke 1 told the hub where its channel is, and its
    w.pump()                        # sends (Query reports) repeat that only when it moves
    w.lose_to[1] = 1  # spoke 1 (no records) misses the poll
    for i in range(2):  # one mini-batch on spoke 0: its drift crosses Θ, the hub polls
        w.data(0, "T", record(i))
    assert fda[0].polled and fda[0].ctx.pauses == 1 and not fda[1].polled and not w.lose_to[1]
    w.data(0, "T", record(2))  # held while paused
    assert fda[0].fitted == 2
    time.sleep(0.3)  # the poll to spoke 1 is overdue now
    w.request({"id": 0, "request": "Query", "requestId": "q"})  # spoke 0 acknowledges
    assert w.hub.resent >= 1 and fda[1].polls_answered == 1
    assert fda[0].ctx.pauses == 0 and fda[0].fda_round == fda[1].fda_round == 1
    assert not fda[0].ctx.backlog and len(fda[0]._X) == 1  # the held record went on
    # what arrived but was never acknowledged (the new round's model: the spokes have not
    # sent since) is sent once more, acknowledged as a copy, and then forgotten
    for _ in range(2):
        time.sleep(0.3)
        resent = w.hub.resent
        w.spokes[0].acknowledge(0, 0, force=True)
        w.pump()
    assert w.hub.resent == resent and all(not p for p in w.hub.unacked.values())


def test_the_in_process_kernel_hosts_the_jobs_kernels():
    """``operators.local.LocalNetwork`` runs the job's own kernels: a Create request, records
    in batches (one malformed), a Query, over a transport that shuffles and duplicates
    messages; every record is fitted once, the bad one dead-lettered, duplicates dropped."""
    from operators.local import LocalNetwork

    net = LocalNetwork(n_spokes=3, n_hubs=2, network=0, shuffle=True, duplicate=0.2, seed=5)
    assert all(isinstance(k, SpokeKernel) for k in net.spoke_kernels)
    assert all(isinstance(k, HubKernel) for k in net.hub_kernels)
    req = create(0, "Synchronous")
    req["trainingConfiguration"]["hubParallelism"] = 2
    req["learner"]["parameters"]["classes"] = [0, 1]
    net.request(req)
    assert net.outputs["responses"][-1]["status"] == "ok"
    for i in range(60):
        net.records(i % 3, [(True, record(i))] + ([(True, b"{not json")] if i == 7 else []))
        net.run()
    net.request({"id": 0, "request": "Query", "requestId": "q"})
    answer = net.outputs["responses"][-1]
    assert answer["requestId"] == "q" and answer["fitted"] == 60 and answer["rejected"] == 1
    assert [d["code"] for d in net.outputs["deadLetters"]] == ["not_json"]
    assert sum(s.stats.duplicates for s in net.spokes + net.hubs) > 0 and net.dropped == 0
    assert not any(net.paused(i) for i in range(3))


def _arrays_run(group_records: int, monkeypatch) -> tuple:
    """Two spokes, a BSP and an Independent pipeline with a standard scaler, fed Kafka
    records that are JSON arrays (training and forecasting, some with bad records inside),
    with :data:`learning.protocols.base.GROUP_RECORDS` set to ``group_records``."""
    from learning.protocols import base

    monkeypatch.setattr(base, "GROUP_RECORDS", group_records)
    w = Wire()
    for pid, protocol in ((0, "Synchronous"), (1, "Independent")):
        req = create(pid, protocol)
        req["preProcessors"] = [{"name": "StandardScaler"}]
        req["trainingConfiguration"]["miniBatchSize"] = 4
        w.request(req)
    bad = [{"id": -1, "features": [1.0, "x"], "label": 0}, {"id": -2, "features": [1.0],
           "label": 1}, {"id": -3, "features": [1.0, 2.0]}, {"id": -4, "features": [1e200, 0.0],
           "label": 0}, {"id": -5, "features": [1.0, 0.0], "label": [1]}]
    i = 0
    for step in range(24):
        spoke = step % 2
        n = (9, 20, 3, 13)[step % 4]
        recs = [record(i + k) for k in range(n)]
        if step % 5 == 3:  # a bad record inside the array
            recs.insert(n // 2, bad[step % len(bad)])
        forecasts = [{"id": 10_000 + i + k, "features": [float(k % 3), 1.0]} for k in range(10)]
        i += n
        w.batch(spoke, [("T", orjson.dumps(recs)), ("P", orjson.dumps(forecasts))])
    for _ in range(1000):  # close BSP's rounds: a mini-batch to the spoke that waits on none
        if not any(sp.nodes[0].ctx.backlog for sp in w.spokes):
            break
        spoke = next(s for s in (0, 1) if not w.spokes[s].nodes[0].ctx.pauses)
        w.batch(spoke, [("T", record(i + k)) for k in range(4)])
        i += 4
    nodes = [sp.nodes[pid] for sp in w.spokes for pid in (0, 1)]
    counts = [(n.fitted, n.predicted, n.rejected, n.correct, dict(n.rejected_by)) for n in nodes]
    models = [n.pipeline.learner.get_params().tolist() for n in nodes]
    return w.predictions, counts, models, [n.ctx.pauses for n in nodes]


def test_the_records_of_one_message_taken_as_a_group_are_taken_as_one_by_one(monkeypatch):
    """A pipeline takes a JSON array's records as a group (checked in one pass, buffered by
    slices) only where that changes nothing: the same predictions in the same order, the
    same dead letters and counts, the same models bit for bit as one record at a time,
    through BSP pauses in the middle of arrays and bad records inside them."""
    one_by_one = _arrays_run(10**9, monkeypatch)
    grouped = _arrays_run(8, monkeypatch)
    assert grouped == one_by_one
    predictions, counts, _, pauses = grouped
    assert len(predictions) == 2 * 24 * 10 and pauses == [0, 0, 0, 0]
    assert sum(c[2] for c in counts) == 2 * 5  # every bad record refused once per pipeline
    assert all(c[0] > 100 for c in counts)


def test_a_group_that_does_not_fit_the_layout_is_taken_one_by_one():
    """:func:`learning.layout.all_fit` says yes only where every record would pass the
    per-record checks without a word."""
    from learning.layout import Layout, all_fit

    ints = Layout(2, "int", None, "declared")
    assert all_fit(ints, [[1.0, 2], [True, 0.5]], [0, 1])
    assert all_fit(ints, [[1.0, 2]], None)  # labels that do not count
    assert not all_fit(ints, [[1.0, 2], [1.0]], [0, 1])  # a width
    assert not all_fit(ints, [[1.0, "2"]], [0])  # a string feature
    assert not all_fit(ints, [[1.0, None]], [0])
    assert not all_fit(ints, [(1.0, 2.0)], [0])  # not a list
    assert not all_fit(ints, [[1e200, 0.0]], [0])  # beyond MAX_ABS_FEATURE
    assert not all_fit(ints, [[10**400, 0.0]], [0])  # an integer too large for a float
    assert not all_fit(ints, [[1.0, 2.0]], [None])  # a missing label
    assert not all_fit(ints, [[1.0, 2.0]], [0.5])  # another label type
    assert not all_fit(Layout(2, "string", None, "declared"), [[1.0, 2.0]], ["a"])
    assert all_fit(Layout(2, "number", None, "declared"), [[1.0, 2.0]] * 2, [1, 0.5])
    assert all_fit(Layout(2, None, None, "declared"), [[1.0, 2.0]] * 2, [1, 0.5])
    number = Layout(2, "number", None, "declared")
    assert not all_fit(number, [[1.0, 2.0]] * 2, [1.0, 1e300])  # a label beyond the bound
    assert not all_fit(number, [[1.0, 2.0]], [10**400])  # too large for a float
    assert not all_fit(Layout(2, "int", [0, 1], "declared"), [[1.0, 2.0]], [0])  # classes
    assert not all_fit(Layout(), [[1.0, 2.0]], [0])  # pending


def test_both_contexts_implement_every_member_the_network_context_declares():
    """What a node may use of its kernel is declared once (``NetworkContext``); the hub's
    and the spoke's contexts have every attribute and method of it, so nodes read them
    directly instead of probing with ``getattr``."""
    attributes = set(NetworkContext.__annotations__)
    methods = {name for name, f in vars(NetworkContext).items()
               if inspect.isfunction(f) and not name.startswith("_")}
    assert {"max_request_bytes", "prediction_scores", "subtask"} <= attributes
    assert {"send", "pause_stream", "emit", "crossing_ms", "paused_for"} <= methods
    hub = HubContext(HubKernel(hub=0, n_spokes=2, subtask=3), network=7, index=0, n_hubs=1)
    spoke = SpokeContext(SpokeKernel(1, 2, 1, hub_keys=[0], limits={"prediction_scores": True}),
                         network=7, n_hubs=1)
    for ctx in (hub, spoke):
        missing = sorted(n for n in attributes | methods if not hasattr(ctx, n))
        assert not missing, (type(ctx).__name__, missing)
        assert all(callable(getattr(ctx, n)) for n in methods)
    assert (hub.prediction_scores, hub.subtask, hub.crossing_ms(), hub.paused_for()) == \
        (False, 3, None, None)
    assert spoke.prediction_scores is True and spoke.paused_for() is None
    assert spoke.max_request_bytes == hub.max_request_bytes == 1_000_000
    assert (spoke.max_model_params, hub.max_model_params) == (10_000_000, None)
