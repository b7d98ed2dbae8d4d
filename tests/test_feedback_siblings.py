"""Sibling frames across restores (operators/feedback.py): TensAIR replicas on real
:class:`~operators.spoke_kernel.SpokeKernel` objects, checkpointed and restored as the job
does it (:class:`~operators.snapshot.Snapshot`, pickled), exchange their updates through a
simulated ``psMessages`` topic that keeps what a dead timeline wrote. Each spoke applies
every other spoke's updates once, in order, and never one the restore discarded."""

from __future__ import annotations

import pickle

import numpy as np
import orjson
import pytest

from middleware import SPOKE, codec
from middleware.codec import SiblingOp, Wire
from operators.feedback import SpokeChannels
from operators.hub_kernel import HubKernel
from operators.snapshot import Snapshot
from operators.spoke_kernel import HUBS, RESEND_AFTER_S, SPOKES, SpokeKernel

PID, D = 5, 4


def create(k_records: int = 2) -> dict:
    return {"id": PID, "request": "Create", "requestId": "c",
            "learner": {"name": "PARegressor", "hyperParameters": {"C": 0.1},
                        "parameters": {"n_features": D}},
            "trainingConfiguration": {"protocol": "TensAIR", "miniBatchSize": k_records}}


class Job:
    """``k`` spoke kernels and one hub kernel as the Flink job wires them: spoke→hub on a
    keyed edge (delivered at once: a checkpoint barrier finds it empty), everything for
    spokes on one ``psMessages`` partition (:attr:`topic`) read from :attr:`offset`; a
    checkpoint pickles every kernel and the offset, a failure restores both and keeps the
    topic."""

    def __init__(self, k: int = 3) -> None:
        self.k = k
        self.spokes = [SpokeKernel(i, k, 1, [0]) for i in range(k)]
        self.hub = HubKernel(0, k)
        self.topic: list[bytes] = []
        self.offset = 0
        self.responses: list[dict] = []
        self.skip: set[int] = set()  # topic offsets the source never delivers
        self.now = 0.0
        self._wire()

    def _wire(self) -> None:
        for kernel in self.spokes + [self.hub]:
            kernel.clock = lambda: self.now

    def _flush(self, kernel) -> None:
        out, kernel.out = kernel.out, []
        for stream, value in out:
            if stream == HUBS:
                self.hub.on_message(value[1])
                self._flush(self.hub)
            elif stream == SPOKES or (stream is None and kernel is self.hub):
                self.topic.append(value)
            elif stream == "responses":
                self.responses.append(orjson.loads(value))

    def request(self, req: dict) -> None:
        for s in self.spokes:
            s.on_message(orjson.dumps(req))
            self._flush(s)

    def records(self, spoke: int, X, y) -> None:
        self.spokes[spoke].on_batch(codec.record_batch(
            (True, orjson.dumps({"features": list(map(float, x)), "label": float(t)}))
            for x, t in zip(X, y)))
        self._flush(self.spokes[spoke])

    def pump(self, n: int | None = None) -> int:
        """Deliver ``n`` topic records (all, and those they cause, when None)."""
        done = 0
        while self.offset < len(self.topic) and (n is None or done < n):
            data, at = self.topic[self.offset], self.offset
            self.offset += 1
            done += 1
            if at in self.skip:
                continue
            dst = codec.frame_destination(data)
            self.spokes[dst].on_message(data)
            self._flush(self.spokes[dst])
        return done

    def checkpoint(self) -> tuple[list[bytes], bytes, int]:
        return ([pickle.dumps(Snapshot(s)) for s in self.spokes], pickle.dumps(Snapshot(self.hub)),
                self.offset)

    def fail(self, saved) -> None:
        spokes, hub, self.offset = saved
        self.spokes = [pickle.loads(s).kernel for s in spokes]
        self.hub = pickle.loads(hub).kernel
        self._wire()
        self.hub.restored()
        for s in self.spokes:
            s.restored()
            self._flush(s)

    # -- what the test checks ------------------------------------------------------------------
    def nodes(self):
        return [s.nodes[PID] for s in self.spokes]

    def check_agreement(self) -> None:
        """Every replica applied every other's updates exactly once (vector clocks), and the
        same ones (parameters equal: a dead update differs from the live one)."""
        nodes = self.nodes()
        for j, nj in enumerate(nodes):
            for i, ni in enumerate(nodes):
                assert nj.applied[i] == ni.applied[i], (j, i, nj.applied, ni.applied)
        w = [n.pipeline.learner.get_params() for n in nodes]
        for wj in w[1:]:
            assert np.allclose(wj, w[0], rtol=0, atol=1e-9), np.abs(wj - w[0]).max()

    @property
    def dead(self) -> int:
        return sum(s.feedback.dead_siblings for s in self.spokes)


def data(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, D))
    return X, X @ rng.normal(size=D) + 0.3


def feed(job: Job, X, y, per: int = 2, pump_every: int | None = 1) -> None:
    """Records to the spokes in turn, ``per`` each, pumping ``pump_every`` topic records
    between batches (None: none)."""
    for b, start in enumerate(range(0, len(X), per)):
        job.records(b % job.k, X[start:start + per], y[start:start + per])
        if pump_every:
            job.pump(pump_every)


def test_sibling_frames_round_trip_and_route_by_destination():
    data_ = codec.sibling_frame(SiblingOp.ANSWER, 5, 3, 9, PID, 1, 2, nonce=11, ack_inc=7, ack=4)
    head, body = codec.unframe_sibling(data_)
    assert head == (SiblingOp.ANSWER, 5, 3, 9, PID, 1, 2, 11, 7, 4) and body == b""
    assert codec.wire_kind(data_) is Wire.SIBLING and codec.frame_destination(data_) == 2
    assert codec.frame_destination(codec.frame(1, 0, 0, PID, 0, 3)) == 3  # hub frames as before
    assert len(codec.frame(1, 0, 0, PID, 0, 3)) == codec.FRAME.size == 37


def test_no_failure_frames_are_transparent():
    job = Job()
    job.request(create())
    X, y = data(60)
    feed(job, X, y)
    job.pump()
    job.check_agreement()
    assert job.nodes()[0].applied == [10, 10, 10] and job.dead == 0
    # the acknowledgements of a Query (the stream's end) empty the resend windows
    assert sum(len(s.window) for s in job.spokes) > 0
    job.request({"id": PID, "request": "Query", "requestId": "q"})
    job.pump()
    assert sum(len(s.window) for s in job.spokes) == 0
    assert sum(s.window.resent for s in job.spokes) == 0


@pytest.mark.parametrize("lag", [0, 7])
def test_one_failure_drops_the_dead_timeline_and_keeps_what_preceded_the_checkpoint(lag):
    job = Job()
    job.request(create())
    X, y = data(120)
    feed(job, X[:30], y[:30])
    # frames written before the checkpoint and read after it (``lag`` of them unread)
    feed(job, X[30:60], y[30:60], pump_every=None)
    job.pump(max(0, len(job.topic) - job.offset - lag))
    saved = job.checkpoint()
    in_flight = len(job.topic) - job.offset
    # the dead timeline: other records (what it computed differs), partly read
    feed(job, X[60:90][::-1], y[60:90][::-1])
    job.fail(saved)
    feed(job, X[60:120], y[60:120])
    job.pump()
    job.request({"id": PID, "request": "Query", "requestId": "q"})
    job.pump()
    job.check_agreement()
    assert job.nodes()[0].applied == [20, 20, 20]
    assert job.dead > 0
    assert in_flight >= lag
    assert all(s.restores == 1 for s in job.spokes)
    q = job.responses[-1]
    assert q["status"] == "ok" and q["fitted"] == 120
    assert q["service"]["deadSiblingMessagesDropped"] == job.dead


def test_two_failures_within_one_checkpoint_interval():
    job = Job()
    job.request(create())
    X, y = data(150)
    feed(job, X[:30], y[:30])
    feed(job, X[30:60], y[30:60], pump_every=None)
    job.pump(max(0, len(job.topic) - job.offset - 5))
    saved = job.checkpoint()
    feed(job, X[60:90][::-1], y[60:90][::-1])  # timeline 0 after the checkpoint: dead
    job.fail(saved)
    feed(job, X[60:80], y[60:80])  # timeline 1 lives briefly and dies before any checkpoint
    first = job.dead
    job.fail(saved)  # so the same checkpoint is restored again
    feed(job, X[60:150], y[60:150])
    job.pump()
    job.check_agreement()
    assert job.nodes()[0].applied == [25, 25, 25]
    assert job.dead > 0 and first >= 0
    assert all(s.restores == 1 for s in job.spokes)  # each restore starts from the checkpoint


def test_a_frame_the_source_never_delivered_is_sent_again():
    job = Job(k=2)
    job.request(create())
    X, y = data(40)
    job.records(0, X[:2], y[:2])  # one update 0 → 1
    job.skip.add(len(job.topic) - 1)  # the source skips it (seen with the local broker)
    job.pump()
    assert job.nodes()[1].applied == [0, 0]
    feed(job, X[2:10], y[2:10])  # 1 → 0 frames acknowledge nothing of 0's: too early to resend
    job.pump()
    assert job.nodes()[1].applied[0] == 0 and job.spokes[0].window.resent == 0
    job.now += RESEND_AFTER_S + 1
    job.request({"id": PID, "request": "Query", "requestId": "q"})  # acknowledgements
    job.pump()
    assert job.spokes[0].window.resent >= 1
    job.check_agreement()
    job.request({"id": PID, "request": "Query", "requestId": "q2"})
    job.pump()
    assert len(job.spokes[0].window) == 0 and len(job.spokes[1].window) == 0


def test_a_dead_timelines_acknowledgement_does_not_discard_live_frames():
    """An acknowledgement read again after the restore names the dead incarnation: the
    restored sender keeps its frames (one may still be lost)."""
    job = Job(k=2)
    job.request(create())
    X, y = data(20)
    saved = job.checkpoint()
    old = job.spokes[0].incarnation
    job.fail(saved)
    job.pump()
    job.records(0, X[:2], y[:2])
    assert len(job.spokes[0].window) == 1
    stale = codec.sibling_frame(SiblingOp.ACK, 1, 0, 0, PID, 1, 0, ack_inc=old, ack=99)
    job.spokes[0].on_message(stale)
    assert len(job.spokes[0].window) == 1


def test_a_spoke_kernel_pickled_before_sibling_frames_restores():
    job = Job(k=2)
    job.request(create())
    X, y = data(20)
    feed(job, X, y)
    job.pump()
    old = job.spokes[0]
    for name in ("incarnation", "prev_incarnation", "sibling_bases", "window"):
        del old.__dict__[name]
    ch = old.feedback
    ch.channels = {(n, i): c for (n, side, i), c in ch.channels.items() if side != SPOKE}
    del ch.__dict__["dead_siblings"]
    restored = pickle.loads(pickle.dumps(Snapshot(old))).kernel
    restored.restored()
    assert restored.prev_incarnation and restored.incarnation != restored.prev_incarnation
    assert all(len(k) == 3 for k in restored.feedback.channels)
    assert restored.service()["deadSiblingMessagesDropped"] == 0



def test_sibling_frames_are_sent_again_only_when_the_receiver_stalls():
    """A slow loop (acknowledgements growing) sends nothing again; a lost record (the
    receiver stuck at it) does, after the timeout."""
    from operators.feedback import ResendWindow

    w = ResendWindow(on_stall=True)
    for seq in range(6):
        w.add(PID, 1, seq, 0.0, b"f%d" % seq)
    w.acknowledge(PID, 1, 2, now=2.5)  # reading, 2.5 s behind
    assert w.overdue(PID, 3.0, RESEND_AFTER_S) == []
    w.acknowledge(PID, 1, 3, now=4.0)
    assert w.overdue(PID, 5.0, RESEND_AFTER_S) == []
    w.acknowledge(PID, 1, 3, now=6.5)  # stuck at 3 since 4.0
    assert w.overdue(PID, 6.5, RESEND_AFTER_S) == [b"f3", b"f4", b"f5"] and w.resent == 3
    hub = ResendWindow()  # the hubs' window: every overdue frame
    hub.add(PID, 1, 0, 0.0, b"h")
    hub.acknowledge(PID, 1, 0)
    assert hub.overdue(PID, 2.5, RESEND_AFTER_S) == [b"h"]


def test_only_protocols_that_talk_to_siblings_write_sibling_frames():
    """A Query acknowledges sibling channels of TensAIR pipelines even before any traffic;
    pipelines of other protocols never put a sibling frame on ``psMessages`` (whose readers,
    e.g. ``omldm tail`` and the tests, expect hub frames there)."""
    for protocol, frames in (("Synchronous", 0), ("TensAIR", 2)):
        spoke = SpokeKernel(0, 3, 1, [0])
        req = create()
        req["trainingConfiguration"]["protocol"] = protocol
        spoke.on_message(orjson.dumps(req))
        spoke.out.clear()
        spoke.on_message(orjson.dumps({"id": PID, "request": "Query", "requestId": "q"}))
        got = [v for s, v in spoke.out if s == SPOKES]
        assert len(got) == frames
        assert all(codec.unframe_sibling(v)[0].op == SiblingOp.ACK for v in got)
