"""The spoke kernel: one spoke subtask's whole state and logic in plain Python (no Flink).

A :class:`SpokeKernel` hosts one spoke node per pipeline (papers/002 §3.2.1) and gets
three kinds of input: data records (:meth:`SpokeKernel.on_data`, one per crossing, or
:meth:`SpokeKernel.on_batch`, batches assembled in Java by ``omldm.RecordBatcher``,
:func:`middleware.codec.record_batch`),
messages (:meth:`SpokeKernel.on_message`: hub→spoke envelopes in incarnation frames read
back from ``psMessages``, spoke→spoke envelopes (sibling channels) in sibling frames read
back from the same topic with their channels' bookkeeping, and JSON control requests, one
copy per spoke), and, for callers
that drive nodes directly (the in-process kernel's tests), :meth:`SpokeKernel.feed`.
Outputs accumulate in :attr:`SpokeKernel.out` for the host to send on: the Flink operator
(:mod:`operators.spoke`) or the in-process kernel (:mod:`operators.local`).

Each data record goes to every pipeline; a pipeline whose stream is paused (waiting on
its hubs, ``then_sync``) holds it in its own backlog, in order, and the other pipelines go
on: one pipeline's synchronization never holds up another's.
"""

from __future__ import annotations

import logging
import sys
import time
from collections import Counter, deque
from typing import Any, Callable, Iterator

import numpy as np
import orjson

from learning.errors import RequestError
from learning.layout import RecordRejected
from learning.protocols import make_spoke
from learning.protocols.base import PipelineSpoke, dead_letter
from learning.requests import parse_request
from learning.registry import model_learner_spec
from middleware import SPOKE, codec
from middleware.codec import SiblingOp, Wire
from middleware.errors import CodecError
from operators.feedback import RESEND_AFTER_S, ResendWindow, SpokeChannels, new_incarnation
from operators.service import (DEFAULT_MAX_BACKLOG_BYTES, check_execution_mode,
                               check_model_size, error_response, limits_of)

__all__ = ["SpokeKernel", "SpokeContext", "HUBS", "SPOKES"]

log = logging.getLogger(__name__)
NUDGE_EVERY_S = 1.0  # a paused spoke acknowledges its hub channels at most this often
#: Bytes a held Kafka record costs beyond its JSON: the bytes object and its backlog entry
#: (measured: 170 bytes per 75-byte Shuttle record; parsed, the same record takes 620).
HELD_COST = 96
_TRAIN = "T"  # the SQL source's tag of training records; forecasting ones are "P"
HUBS = "hubs"  # names of the kernel's outputs; None is the main output (predictions)
SPOKES = "spokes"  # spoke→spoke sibling frames (operators.feedback), bytes, for psMessages
_MESSAGES = (HUBS, SPOKES)  # the outputs a host may send on in the middle of a batch
CROSSINGS_KEPT = 1000  # data crossings whose wall time a Query's percentiles are taken over
#: a pipeline created again under a deleted one's id numbers its channels from its Create's
#: control number ``n`` shifted by this many bits (2**40 envelopes per channel before they
#: could meet the next incarnation's; :meth:`middleware.node.Node.start_channels`)
INCARNATION_SHIFT = 40


class SpokeContext:
    """The network context of one pipeline's spoke node (papers/002 §3.2.1; implements
    :class:`middleware.node.NetworkContext`)."""

    side = SPOKE
    # class defaults for contexts restored from snapshots taken before these were kept
    paused_at: float | None = None
    prediction_scores = False
    max_request_bytes: int | None = None
    max_model_params: int | None = None

    def __init__(self, op: "SpokeKernel", network: int, n_hubs: int) -> None:
        self._op = op
        self.network = network
        self.index = op.index
        self.n_spokes = op.n_spokes
        self.n_hubs = n_hubs
        self.max_message_bytes = op.max_message_bytes
        self.max_response_params = op.limits["max_response_params"]
        self.prediction_scores = op.limits["prediction_scores"]
        self.max_request_bytes = op.limits["max_request_bytes"]
        self.max_model_params = op.limits["max_model_params"]  # records that grow a model
        self.pauses = 0  # calls this pipeline's stream waits on (then_sync)
        self.paused_at: float | None = None  # time.time() when the stream last paused
        # what this pipeline got while it was paused, in order: (training?, the Kafka
        # record's bytes, parsed again when it is taken), (training?, a parsed record)
        # put back by the node, or (None, fn) from feed() and the node
        self.backlog: deque[tuple[bool | None, Any]] = deque()
        self.max_backlog_bytes = op.limits.get("max_backlog_bytes", DEFAULT_MAX_BACKLOG_BYTES)
        self.held_bytes = 0  # HELD_COST of the Kafka records in the backlog
        self.held_raw = 0  # backlog entries that are Kafka records' bytes
        self.held_raw_records = 0  # data records in them

    def __setstate__(self, state: dict) -> None:
        """Unpickling: a context pickled before backlogs were bounded holds parsed records
        only, and gets the default bound."""
        self.__dict__.update(state)
        if "held_bytes" not in state:
            self.max_backlog_bytes = DEFAULT_MAX_BACKLOG_BYTES
            self.held_bytes = self.held_raw = self.held_raw_records = 0

    def hold(self, train: bool, raw: bytes, n: int) -> bool:
        """Keep the Kafka record ``raw`` (``n`` data records) at the end of the backlog
        and return True, or return False when that would take :attr:`held_bytes` past
        ``max_backlog_bytes`` (its records are then to be shed)."""
        cost = len(raw) + HELD_COST
        if self.held_bytes + cost > self.max_backlog_bytes:
            return False
        self.held_bytes += cost
        self.held_raw += 1
        self.held_raw_records += n
        self.backlog.append((train, raw))
        return True

    def held(self) -> int:
        """Data records (and callables) in the backlog."""
        return self.held_raw_records + len(self.backlog) - self.held_raw

    def held_records(self) -> list[tuple[bool | None, Any]]:
        """The backlog with each held Kafka record's data records parsed: ``[(training?,
        record dict), ...]`` and ``(None, fn)``, in order (for inspection; O(backlog))."""
        out = []
        for train, rec in self.backlog:
            if type(rec) is bytes:
                out += [(train, r) for r in self._op._records(orjson.loads(rec), False)]
            else:
                out.append((train, rec))
        return out

    def send(self, dst_index: int, data: bytes) -> None:
        if not 0 <= dst_index < self.n_hubs:
            raise ValueError(f"pipeline {self.network} has no hub {dst_index}")
        self._op.out.append((HUBS, (self._op.hub_keys[dst_index], data)))
        self._op.acknowledge(self.network, dst_index)

    def send_sibling(self, dst_index: int, data: bytes) -> None:
        if not 0 <= dst_index < self.n_spokes or dst_index == self.index:
            raise ValueError(f"pipeline {self.network}: spoke {self.index} has no sibling "
                             f"spoke {dst_index} (of {self.n_spokes})")
        self._op.send_sibling(self.network, dst_index, data)

    def pause_stream(self) -> None:
        self._op.paused += 1
        if not self.pauses:  # wall clock: a snapshot may be restored on another machine
            self.paused_at = time.time()
        self.pauses += 1

    @property
    def subtask(self) -> int | None:
        """The Flink subtask hosting this spoke (:attr:`SpokeKernel.subtask`)."""
        return self._op.subtask

    @property
    def reraise(self) -> bool:
        """The kernel's :attr:`SpokeKernel.reraise`."""
        return self._op.reraise

    def crossing_ms(self) -> tuple[float, float] | None:
        """p50 and p95 wall milliseconds of this spoke's last data crossings
        (:meth:`SpokeKernel.crossing_percentiles`)."""
        return self._op.crossing_percentiles()

    def paused_for(self) -> float | None:
        """Seconds since this pipeline's stream paused (None while it runs, or for a
        context restored from a snapshot taken before this was kept)."""
        at = self.paused_at
        return max(0.0, time.time() - at) if self.pauses and at is not None else None

    def resume_stream(self) -> None:
        # the kernel feeds the backlog once the message being handled is done
        self._op.paused -= 1
        self.pauses -= 1

    def emit(self, stream: str | None, value: dict) -> None:
        self._op.emit(stream, value)

    def emit_all(self, stream: str | None, values: list[dict]) -> None:
        self._op.emit_all(stream, values)


class SpokeKernel:
    """One spoke's whole state and logic, plain Python (picklable, no Flink).

    Parameters
    ----------
    index, n_spokes, n_hubs : int
        This spoke's index and the job's spoke and hub parallelism.
    hub_keys : list[int]
        ``hub_keys[j]`` is the key that Flink routes to hub subtask j.
    limits : dict or None
        Service limits over :data:`operators.service.DEFAULT_LIMITS` (requests, pipelines,
        model sizes, message and response sizes).
    execution_mode : str
        PyFlink's ``python.execution-mode``; in ``"thread"`` mode learners with
        ``needs_own_interpreter`` (PyTorch) are refused with code ``unsupported``.

    Outputs accumulate in :attr:`out` as ``(stream, value)``: stream ``None`` (a
    prediction, JSON), :data:`HUBS` (``(hub_key, bytes)``: envelopes and kernel controls,
    :func:`middleware.codec.control`), :data:`SPOKES` (bytes: a sibling frame for another
    spoke, :func:`middleware.codec.sibling_frame`, which the job writes to ``psMessages``
    and routes back by its destination), ``"responses"`` or ``"deadLetters"`` (JSON). The
    host takes them after each call.

    Spoke→spoke envelopes travel in sibling frames (:mod:`operators.feedback`), as
    hub→spoke envelopes travel in hub frames: this kernel frames what its nodes send to
    sibling spokes with its own :attr:`incarnation` (new at creation and at every restore),
    keeps each frame until the receiving spoke acknowledges it and sends again what is
    more than :data:`RESEND_AFTER_S` overdue when a frame from the receiver comes and the
    receiver's acknowledgements have not grown for as long (a lost record, not a slow
    loop: :class:`~operators.feedback.ResendWindow` ``on_stall``); a restored
    kernel holds each sibling channel into it until the sending spoke answers its resync,
    then delivers the valid held messages in order and drops those of the dead timeline
    (``deadSiblingMessagesDropped``). So across restores each sibling update is applied
    exactly once, and never one that the restore discarded. Acknowledgements ride on every
    sibling frame; alone (op ``ACK``) when a copy of what arrived comes again, once a
    second while waiting (:meth:`_nudge`) and at every Query (a spoke that sends nothing
    more, at the end of a stream, acknowledges what it got).

    Attributes
    ----------
    clock : callable
        Seconds, monotonic (``time.monotonic``): when to acknowledge hub channels again
        while waiting (:data:`NUDGE_EVERY_S`). A transport that loses nothing may pass a
        clock that stands still.
    reraise : bool
        After counting a node's failure (``handlerErrors``), raise it again instead of
        going on (the in-process kernel's tests; False in the job).
    crossings_ms : deque[float] or None
        Wall milliseconds of the last :data:`CROSSINGS_KEPT` data crossings
        (:meth:`crossing_percentiles`); None before the first (and in a kernel restored
        from a snapshot taken before they were kept).
    subtask : int or None
        The Flink subtask hosting this spoke, set by its host (:class:`operators.spoke.
        SpokeFunction`; several spokes share one with ``JobConfig.spoke_parallelism``);
        None in process.
    """

    crossings_ms: deque | None = None
    subtask: int | None = None
    #: :meth:`on_lull`'s bookkeeping (class defaults: a kernel pickled before lulls)
    _data_at_lull = -1
    _lulls: dict | None = None
    lulls = 0

    def __init__(self, index: int, n_spokes: int, n_hubs: int, hub_keys: list[int],
                 limits: dict | None = None, execution_mode: str = "thread") -> None:
        self.index = index
        self.n_spokes = n_spokes
        self.n_hubs = n_hubs
        self.hub_keys = hub_keys
        self.limits = limits_of(limits)
        self.max_message_bytes = self.limits["max_message_bytes"]
        self.execution_mode = execution_mode
        self.nodes: dict[int, Any] = {}
        self.out: list[tuple[Any, Any]] = []
        self.paused = 0  # pauses over all pipelines (each pipeline pauses only itself)
        self.records_without_pipeline = 0
        self.bad_records: Counter = Counter()  # reason code -> Kafka records no pipeline can use
        self.data_records = 0  # Kafka records of training and forecasting that came in
        self.data_batches = 0  # crossings that brought them (batches from omldm.RecordBatcher)
        self.bad_messages = 0
        self.requests_accepted = 0
        self.requests_rejected = 0
        self.controls = 0
        self.handler_errors = 0
        self.restores = 0  # times this spoke was rebuilt from a checkpoint or savepoint
        self.feedback = SpokeChannels()  # incarnation frames of hub messages (operators.feedback)
        self.acked: dict[tuple[int, int], int] = {}  # (network, hub) -> last acknowledged
        self.nudged = 0.0
        self.clock: Callable[[], float] = time.monotonic
        self.reraise = False  # let a node's failure propagate after counting it
        # sibling frames (operators.feedback): this kernel as the sender of its spokes'
        # sibling channels
        self.incarnation = new_incarnation()
        self.prev_incarnation = 0
        self.sibling_bases: dict[tuple[int, int], int] = {}  # (network, spoke) -> base
        self.window = ResendWindow(on_stall=True)  # sibling frames not yet acknowledged

    def __setstate__(self, state: dict) -> None:
        """Unpickling (a kernel restored from Flink state): a kernel pickled before sibling
        frames existed gets an incarnation and an empty resend window (:meth:`restored`
        then draws the next one); unframed sibling envelopes its dead timeline left on
        ``psMessages`` are still delivered as before (at most once each)."""
        self.__dict__.update(state)
        if "window" not in state:
            self.incarnation, self.prev_incarnation = new_incarnation(), 0
            self.sibling_bases, self.window = {}, ResendWindow(on_stall=True)

    def acknowledge(self, network: int, hub: int, force: bool = False) -> None:
        """Tell hub ``hub`` how far pipeline ``network``'s channel from it got, when that
        changed since the last time (or ``force``): the hub forgets what was delivered
        and sends again what is overdue (:meth:`operators.hub.HubKernel.acknowledged`)."""
        node = self.nodes.get(network)
        if node is None:
            return
        expected = node.expected_from(hub)
        key = (network, hub)
        if not force and self.acked.get(key) == expected:
            return
        self.acked[key] = expected
        self.out.append((HUBS, (self.hub_keys[hub], codec.control(
            {"op": "ack", "spoke": self.index, "network": network, "expected": expected}))))

    def _nudge(self) -> None:
        """While waiting on hubs or sibling spokes (stream paused, or a remote call not yet
        answered), acknowledge every channel, hub and sibling, at most once per
        :data:`NUDGE_EVERY_S` seconds: an answer lost on the way is sent again. Waiting
        without a pause counts too: an SSP spoke whose push is in flight keeps going, and
        at the end of a stream it gets nothing but Queries, so a lost answer would leave
        every spoke ahead of it waiting for good (seen on digits, staleness 2). Sibling
        channels are acknowledged only in pipelines that have had sibling traffic."""
        now = self.clock()  # called for every record: the cheap test first
        if now - self.nudged < NUDGE_EVERY_S:
            return
        if not self.paused and not any(n.calls_in_flight for n in self.nodes.values()):
            return
        self.nudged = now
        for network, node in self.nodes.items():
            for j in range(node.ctx.n_hubs):
                self.acknowledge(network, j, force=True)
            self.acknowledge_siblings(network)

    def restored(self) -> None:
        """This kernel was just rebuilt from a checkpoint or savepoint: hold each hub's and
        each sibling spoke's messages until it says which of them survived the restore;
        as a sender, a new incarnation, and each sibling channel's base is where its
        sequence numbers resume (operators.feedback)."""
        self.restores += 1
        self.prev_incarnation, self.incarnation = self.incarnation, new_incarnation()
        self.window.restart(self.clock())
        self.sibling_bases = {(network, s): node.next_seq_to_sibling(s)
                              for network, node in self.nodes.items()
                              for s in range(self.n_spokes) if s != self.index}
        for network, node in self.nodes.items():
            for j in range(node.ctx.n_hubs):
                nonce = self.feedback.restored(network, j)
                self.out.append((HUBS, (self.hub_keys[j], codec.control(
                    {"op": "resync", "spoke": self.index, "network": network, "nonce": nonce}))))
            for s in range(self.n_spokes):
                if s != self.index:
                    nonce = self.feedback.restored(network, s, SPOKE)
                    self._sibling_out(SiblingOp.RESYNC, network, s, nonce=nonce)

    # -- sibling channels (operators.feedback) ---------------------------------------------
    def _sibling_out(self, op: SiblingOp, network: int, dst: int, body: bytes = b"",
                     nonce: int = 0) -> bytes:
        """A sibling frame to spoke ``dst``, acknowledging what came from it."""
        node = self.nodes.get(network)
        ack_inc = self.feedback.following(network, dst, SPOKE) if node is not None else 0
        record = codec.sibling_frame(
            op, self.incarnation, self.prev_incarnation, self.sibling_bases.get((network, dst), 0),
            network, self.index, dst, body, nonce, ack_inc,
            node.expected_from_sibling(dst) if ack_inc else 0)
        self.out.append((SPOKES, record))
        return record

    def send_sibling(self, network: int, dst: int, data: bytes) -> None:
        """Envelope ``data`` of pipeline ``network`` to spoke ``dst``, in a sibling frame
        kept until ``dst`` acknowledges it."""
        record = self._sibling_out(SiblingOp.DATA, network, dst, data)
        self.window.add(network, dst, codec.header(data).seq, self.clock(), record)

    def acknowledge_siblings(self, network: int, force: bool = False) -> None:
        """Tell every sibling spoke how far pipeline ``network``'s channel from it got (op
        ``ACK``), so that it sends again what is overdue: when the pipeline has had sibling
        traffic, or with ``force`` (a Query: a spoke none of whose frames arrived still
        gets told) when its protocol talks to siblings (``Node.talks_to_siblings``);
        pipelines of other protocols never write sibling frames."""
        node = self.nodes.get(network)
        if node is None:
            return
        if not (force and node.talks_to_siblings) and not (
                node.stats.sibling_sent_messages or node.stats.sibling_received_messages):
            return
        for s in range(self.n_spokes):
            if s != self.index:
                self._sibling_out(SiblingOp.ACK, network, s)

    def _sibling(self, data: bytes) -> None:
        """A sibling frame from ``psMessages``: its acknowledgement, when it names this
        kernel's incarnation, moves the resend window, and any frame from a sibling sends
        again what is overdue on the pipeline's channels (as
        :meth:`operators.hub_kernel.HubKernel.acknowledged` does); a resync is answered;
        an envelope (or the answer releasing the held ones) is delivered."""
        head, _ = codec.unframe_sibling(data)
        network, src = head.network, head.src
        node = self.nodes.get(network)
        if head.dst != self.index or node is None or not 0 <= src < self.n_spokes \
                or src == self.index:
            self.bad_messages += 1 if head.op == SiblingOp.DATA else 0  # e.g. deleted
            return
        if head.ack_incarnation and head.ack_incarnation == self.incarnation:
            self.window.acknowledge(network, src, head.ack, self.clock())
        for record in self.window.overdue(network, self.clock(), RESEND_AFTER_S):
            self.out.append((SPOKES, record))
        if head.op == SiblingOp.RESYNC:
            self._sibling_out(SiblingOp.ANSWER, network, src, nonce=head.nonce)
            return
        if head.op == SiblingOp.ACK:
            return
        _, bodies = self.feedback.accept(data)
        copies = node.stats.duplicates
        for body in bodies:
            self._envelope(body)
        if node.stats.duplicates > copies and network in self.nodes:
            # src sent again what arrived but was not acknowledged yet: acknowledge, or it
            # keeps coming
            self._sibling_out(SiblingOp.ACK, network, src)

    # -- outputs -------------------------------------------------------------------------
    def emit(self, stream: str | None, value: dict) -> None:
        self.out.append((stream, orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY).decode()))

    def emit_all(self, stream: str | None, values: list[dict]) -> None:
        """:meth:`emit` each of ``values`` (a crossing's predictions), in order."""
        dumps, option = orjson.dumps, orjson.OPT_SERIALIZE_NUMPY
        self.out.extend([(stream, dumps(value, option=option).decode()) for value in values])

    # -- data ----------------------------------------------------------------------------
    def on_data(self, line: str) -> None:
        """A training (``T``) or forecasting (``P``) line from the SQL source (one record
        per crossing, ``max_batch_delay_ms = 0``)."""
        self._nudge()
        self.data_records += 1
        self.data_batches += 1
        self._line(line[0] == _TRAIN, line[1:])
        self._settle()

    def on_batch(self, data: bytes) -> None:
        """A batch of data records from ``omldm.RecordBatcher`` (``flink_jobs/java``;
        :func:`middleware.codec.record_batch`), in the order they came. Each is handled
        as :meth:`on_data` would: a pipeline paused in the middle of the batch holds the
        rest in its backlog."""
        for _ in self.batch_steps(data):
            pass

    def batch_steps(self, data: bytes) -> Iterator[None]:
        """:meth:`on_batch` in steps: a generator that yields (None) after each record
        that added a message for hubs or spokes to :attr:`out`, so that the host can send
        a push to the hubs while the rest of the batch is handled (:meth:`take_messages`)
        instead of after it: the answer travels while this spoke works, which shortens
        the feedback round trip by up to one batch. What the host leaves in :attr:`out`
        stays in order."""
        started = time.perf_counter()
        self._nudge()
        records = codec.read_batch(data)
        self.data_records += len(records)
        self.data_batches += 1
        line, out = self._line, self.out
        n = len(out)
        for train, raw in records:
            line(train, raw)
            if len(out) != n:
                if any(out[j][0] in _MESSAGES for j in range(n, len(out))):
                    yield
                n = len(out)
        self._settle()
        if self.crossings_ms is None:
            self.crossings_ms = deque(maxlen=CROSSINGS_KEPT)
        self.crossings_ms.append((time.perf_counter() - started) * 1000.0)

    def crossing_percentiles(self) -> tuple[float, float] | None:
        """``(p50, p95)`` wall milliseconds of the last :data:`CROSSINGS_KEPT` data
        crossings (:meth:`batch_steps`, from its first record to its last prediction, the
        host's handling of the pushes it yields included); None before the first. A hub's
        answer that reaches a spoke in the middle of a crossing waits for its end: this is
        that wait's scale (docs/performance.md, "Where the feedback round trip goes")."""
        if not self.crossings_ms:
            return None
        p50, p95 = np.percentile(self.crossings_ms, (50, 95))
        return float(p50), float(p95)

    def take_messages(self) -> list[tuple[str, Any]]:
        """Take the messages for hubs and other spokes (:data:`HUBS`, :data:`SPOKES`
        entries) out of :attr:`out`, in order, and leave the rest there in order (the
        same list: :meth:`batch_steps` goes on appending to it)."""
        taken, rest = [], []
        for item in self.out:
            (taken if item[0] in _MESSAGES else rest).append(item)
        if taken:
            self.out[:] = rest
        return taken

    def _settle(self) -> None:
        """Every pipeline predicts the forecasting records it took during this crossing
        (:meth:`learning.protocols.base.PipelineSpoke.settle_forecasts`): one call per run
        of forecasts between two model changes, instead of one per record, and nothing is
        left pending between crossings (a Query, a message or a snapshot sees every
        prediction made). A node that is not a pipeline (a bare
        :class:`middleware.Node`, as in tests) has none."""
        for node in self.nodes.values():
            if isinstance(node, PipelineSpoke):
                node.settle_forecasts()

    def _line(self, train: bool, raw: str | memoryview | bytes) -> None:
        """One Kafka record (a JSON object or array of them) to every pipeline.

        Each record goes to every pipeline; a pipeline whose stream is paused (waiting on
        its hubs, ``then_sync``) holds it in its own backlog, in order, and the other
        pipelines go on: one pipeline's synchronization never holds up another's. A
        paused pipeline holds the Kafka record's bytes (parsed again when it resumes:
        a quarter of the memory of the parsed records), up to ``max_backlog_bytes``
        (:data:`HELD_COST` each beyond the JSON); past that its records are shed:
        dead-lettered with code ``backlog_full`` and counted by that pipeline alone.
        """
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            self._dead(raw if isinstance(raw, str) else bytes(raw).decode("utf-8", "replace"),
                       RecordRejected(f"not valid JSON: {exc}", "not_json"))
            return
        recs = [obj] if type(obj) is dict and "features" in obj else self._records(obj, True)
        if not recs:
            return
        if not self.nodes:
            self.records_without_pipeline += len(recs)
            return
        raw_bytes = None  # made once, for the pipelines that hold the record
        for node in self.nodes.values():
            ctx = node.ctx
            if ctx.pauses or ctx.backlog:
                if raw_bytes is None:
                    raw_bytes = raw.encode() if isinstance(raw, str) else bytes(raw)
                if not ctx.hold(train, raw_bytes, len(recs)):
                    self._shed(node, recs)
                continue
            if len(recs) == 1:
                node.on_record(train, recs[0])
                continue
            taken = node.on_records(train, recs)
            if taken < len(recs):  # paused midway through an array: the rest waits, in order
                ctx.backlog.extend((train, r) for r in recs[taken:])

    def _records(self, obj: Any, report: bool) -> list:
        """The data records of a parsed Kafka record (an object or an array of them); the
        others are left out, and dead-lettered with ``report`` (a held record's were
        already, when it came)."""
        if type(obj) is dict and "features" in obj:  # the common case first
            return [obj]
        recs = obj if isinstance(obj, list) else [obj]
        if all(type(rec) is dict and "features" in rec for rec in recs):
            return recs
        good = []
        for rec in recs:
            if isinstance(rec, dict) and "features" in rec:
                good.append(rec)
            elif report:
                self._dead(rec, RecordRejected(
                    f"a record is a JSON object with a 'features' list, got "
                    f"{'an object without features' if isinstance(rec, dict) else type(rec).__name__}",
                    "not_a_record"))
        return good

    def _shed(self, node, recs: list) -> None:
        """Records that pipeline ``node`` cannot hold (its backlog is full): dead letters
        with code ``backlog_full``, counted by that pipeline alone."""
        ctx = node.ctx
        exc = RecordRejected(
            f"pipeline {ctx.network} is paused (waiting on its hubs) and already holds "
            f"{ctx.held_bytes:,} bytes of records on spoke {self.index}, its limit "
            f"(max_backlog_bytes {ctx.max_backlog_bytes:,}): the stream comes faster than "
            f"the pipeline synchronizes", "backlog_full")
        for rec in recs:
            node.refuse(rec, exc)

    def feed(self, network: int, fn: Callable[[], Any]) -> None:
        """Run ``fn()`` (a stream record for pipeline ``network``'s node, for callers that
        drive nodes directly) now, or, while the pipeline is paused or holds records, after
        what it holds, in order.

        Raises
        ------
        KeyError
            When there is no pipeline ``network``.
        """
        ctx = self.nodes[network].ctx
        if ctx.pauses or ctx.backlog:
            ctx.backlog.append((None, fn))
        else:
            fn()
        self._run_backlogs()

    def adopt(self, network: int, node, n_hubs: int) -> None:
        """Host ``node`` (already built) as pipeline ``network``'s spoke, in a network of
        ``n_hubs`` hubs: for the in-process kernel's networks of arbitrary nodes, fed with
        :meth:`feed`."""
        node.attach(SpokeContext(self, network, n_hubs))
        self.nodes[network] = node

    def _run_backlogs(self) -> None:
        """Feed each resumed pipeline what it held, until it is done or pauses again."""
        for nid, node in list(self.nodes.items()):
            ctx = node.ctx
            backlog = ctx.backlog
            while backlog and not ctx.pauses and nid in self.nodes:
                train, rec = backlog.popleft()
                if train is None:  # fed with feed(), or put back by the node
                    rec()
                elif type(rec) is bytes:  # a held Kafka record: its records go first
                    recs = self._records(orjson.loads(rec), False)
                    ctx.held_bytes -= len(rec) + HELD_COST
                    ctx.held_raw -= 1
                    ctx.held_raw_records -= len(recs)
                    backlog.extendleft((train, r) for r in reversed(recs))
                else:
                    node.on_record(train, rec)

    def _dead(self, record: Any, exc: RecordRejected) -> None:
        """A Kafka record that no pipeline can use: dead-lettered once, counted by every
        pipeline (and in the service's ``badRecords``) under its reason."""
        for node in self.nodes.values():
            node.count_refused(exc.code)
        self.bad_records[exc.code] += 1
        self.emit("deadLetters", dead_letter(record, exc, None, self.index))

    # -- lulls ---------------------------------------------------------------------------
    def on_lull(self) -> None:
        """The host's timer, every ``JobConfig.idle_after_ms``: when no data record came
        since the previous call, the stream may have ended (a file, a replay) or this
        spoke's share may have dried up (an idle Kafka partition under ``partition``
        sharding), and each pipeline does what a Query does before it reports
        (:meth:`learning.protocols.base.PipelineSpoke.on_lull`): fits what it holds, and
        under BSP, SSP with a bound and TensAIR with ``maxStaleness`` pushes it, or, at
        the next quiet call, pushes as idle, so that no round waits for this spoke. Once a
        pipeline has had two quiet calls in a row with nothing fitted, it is left alone
        until it fits again (no idle push every interval). A pending layout is decided
        first, as for a Query. Like a Flink source's idleness (``withIdleness``): without
        it a synchronous pipeline whose spoke gets no more records waits for a Query."""
        if self.data_records != self._data_at_lull:
            self._data_at_lull = self.data_records
            return
        if self._lulls is None:
            self._lulls = {}
        self._nudge()
        for network, node in list(self.nodes.items()):
            if not isinstance(node, PipelineSpoke):
                continue
            fitted, quiet = self._lulls.get(network, (-1, 0))
            quiet = quiet + 1 if node.fitted == fitted else 0
            self._lulls[network] = (node.fitted, quiet)
            if quiet > 1:
                continue
            self.lulls += 1
            try:
                self.acknowledge_siblings(network, force=True)
                node.when_layout_settled(node.on_lull)
            except Exception:  # a protocol's failure: keep the job and the other pipelines
                self.handler_errors += 1
                log.exception("spoke %d: the lull of pipeline %s failed", self.index, network)
                if self.reraise:
                    raise
        self._run_backlogs()
        self._settle()

    # -- messages ------------------------------------------------------------------------
    def on_message(self, data: bytes) -> None:
        """A framed hub→spoke envelope or a sibling frame (``psMessages``), or a JSON
        request (``requests``). A bare spoke→spoke envelope (written by a version before
        sibling frames) is delivered as it is."""
        kind = codec.wire_kind(data)
        if kind is Wire.FRAME and codec.is_frame(data):
            self._frame(data)
        elif kind is Wire.SIBLING and codec.is_sibling_frame(data):
            try:
                self._sibling(data)
            except CodecError:  # an unknown op
                self.bad_messages += 1
        elif kind in (Wire.ENVELOPE, Wire.FRAME, Wire.SIBLING):  # short 0xFE/0xFC: garbage
            self._envelope(data)
        elif kind is Wire.CONTROL:  # spoke→hub bookkeeping has no business here
            self.bad_messages += 1
        else:
            self._request(data)
        self._run_backlogs()
        self._settle()

    def _frame(self, data: bytes) -> None:
        (network, _, hub), bodies = self.feedback.accept(data)
        node = self.nodes.get(network)
        if node is None:
            self.bad_messages += 1 if bodies else 0  # e.g. in flight when deleted
            return
        copies = node.stats.duplicates
        for body in bodies:
            self._envelope(body)
        if node.stats.duplicates > copies and network in self.nodes:
            # the hub sent again what arrived but was never acknowledged (this spoke has
            # not sent since): acknowledge, or it keeps coming
            self.acknowledge(network, hub, force=True)

    def _envelope(self, data: bytes) -> None:
        network = None
        try:
            route = codec.peek(data)
            network = route.network
            node = self.nodes.get(network)
            if node is None or route.dst_side != SPOKE or route.dst_index != self.index:
                self.bad_messages += 1  # e.g. in flight when its pipeline was deleted
                return
            node.deliver(data)
        except CodecError as exc:
            # garbage starting with 0xFF: on psMessages it is routed to spoke 0, on
            # requests it reaches every spoke; spoke 0 answers it either way, once
            self.bad_messages += 1
            if self.index == 0:
                self._reject(RequestError("invalid_message", f"not a valid message: {exc}"))
        except Exception:  # a protocol's handler failed: keep the job (and other pipelines)
            self.handler_errors += 1
            log.exception("spoke %d: handling a message of pipeline %s failed", self.index,
                          network)
            if self.reraise:
                raise

    def _reject(self, err: RequestError, req=None) -> None:
        self.requests_rejected += 1
        if self.index == 0:  # one spoke answers errors, so each request is answered once
            self.emit("responses", error_response(
                err, getattr(req, "request_id", getattr(err, "request_id", None)),
                getattr(req, "id", getattr(err, "pipeline", None)),
                getattr(req, "request", getattr(err, "kind", None))))

    def _request(self, data: bytes) -> None:
        try:
            req = parse_request(data, max_bytes=self.limits["max_request_bytes"],
                                max_model_params=self.limits["max_model_params"])
        except RequestError as err:
            self._reject(err)
            return
        try:
            getattr(self, "_" + req.request.lower())(req)
            self.requests_accepted += 1
        except RequestError as err:
            self._reject(err, req)

    def service(self) -> dict:
        """This spoke's service counters (summed over spokes in a Query response; of
        ``pipelines`` and ``switchIntervalMs`` the largest)."""
        return {"pipelines": len(self.nodes), "requestsAccepted": self.requests_accepted,
                "requestsRejected": self.requests_rejected, "badMessages": self.bad_messages,
                "handlerErrors": self.handler_errors, "restores": self.restores,
                "deadMessagesDropped": self.feedback.dead,
                "deadSiblingMessagesDropped": self.feedback.dead_siblings,
                "siblingFramesResent": self.window.resent,
                "recordsWithoutPipeline": self.records_without_pipeline,
                "badRecords": sum(self.bad_records.values()),
                "dataRecords": self.data_records, "dataBatches": self.data_batches,
                "lulls": self.lulls,  # pipelines' lulls acted on (on_lull)
                # the interpreter's (JobConfig.switch_interval_ms in thread mode), milliseconds
                "switchIntervalMs": sys.getswitchinterval() * 1000.0}

    def _create(self, req) -> None:
        if req.id in self.nodes:
            raise RequestError("exists", f"pipeline {req.id} exists", "id")
        if len(self.nodes) >= self.limits["max_pipelines"]:
            raise RequestError("too_many_pipelines", f"the service runs its maximum of "
                               f"{self.limits['max_pipelines']} pipelines", "id")
        m = int(req.training_configuration["hubParallelism"])
        if m > self.n_hubs:
            raise RequestError("too_many_hubs", f"hubParallelism {m} > the job's {self.n_hubs} hubs",
                               "trainingConfiguration.hubParallelism")
        node = make_spoke(req)
        check_execution_mode(node.pipeline.learner, req.learner["name"], self.execution_mode)
        node.attach(SpokeContext(self, req.id, m))
        # the id of a pipeline deleted before: its envelopes may still be in flight, so the
        # new one's channels start past them (the same on every spoke and, told, on hubs)
        base = (self.controls + 1) << INCARNATION_SHIFT if req.id in self.created else 0
        if base:
            node.start_channels(base)
        self.created = self.created | {req.id}
        self.nodes[req.id] = node
        self._control(m, {"op": "create", "spoke": self.index, "request": req.to_json(),
                          **({"seqBase": base} if base else {})})

    #: ids of every pipeline created on this kernel (immutable, replaced on change; a class
    #: default for kernels pickled before it was kept)
    created: frozenset = frozenset()

    def _delete(self, req) -> None:
        node = self._node(req)
        node.flush()
        del self.nodes[req.id]
        self.feedback.forget(req.id)
        self.window.forget(req.id)
        self.paused -= node.ctx.pauses  # what it held goes with it
        node.ctx.pauses = 0
        self._control(node.ctx.n_hubs, {"op": "delete", "spoke": self.index,
                                        "request": req.to_json()})

    def _query(self, req) -> None:
        self._nudge()
        node = self._node(req)
        self.acknowledge_siblings(req.id, force=True)  # the stream may have ended
        if req.export:
            node.check_export()
        # a pending layout is decided first (learning.layout), so the held records count
        node.when_layout_settled(lambda: node.query(req.request_id, self.service(), req.export))

    def _update(self, req) -> None:
        node = self._node(req)
        current = node.request.learner  # sizes alone: parse_request; the model's here
        check_model_size(model_learner_spec(node.request.pre_processors, req.learner or {}),
                         self.limits["max_model_params"], {
            "name": current["name"], "hyperParameters": current.get("hyperParameters"),
            "n_features": node.model_width(node.layout), "classes": node.layout.classes})
        node.update(req)
        self._control(node.ctx.n_hubs, {"op": "update", "spoke": self.index,
                                        "request": req.to_json()})

    def _node(self, req):
        node = self.nodes.get(req.id)
        if node is None:
            raise RequestError("not_found", f"no pipeline with id {req.id}", "id")
        return node

    def _control(self, n_hubs: int, msg: dict) -> None:
        self.controls += 1  # the same numbering on every spoke: they see the same requests
        data = codec.control({**msg, "n": self.controls})
        for j in range(n_hubs):
            self.out.append((HUBS, (self.hub_keys[j], data)))


