"""The hub kernel: the hub nodes of every pipeline for one hub id, with their bookkeeping,
in plain Python (no Flink).

A :class:`HubKernel` gets spoke→hub messages (:meth:`HubKernel.on_message`): envelopes
for its nodes (the parameter server's shards, papers/002 §3.2.1) and the spokes' kernel
controls (:func:`middleware.codec.control`: pipeline lifecycle, acknowledgements,
resyncs). Hub→spoke envelopes leave in incarnation frames (:mod:`operators.feedback`),
kept until acknowledged. Outputs accumulate in :attr:`HubKernel.out` for the host: the
Flink operator (:mod:`operators.hub`) or the in-process kernel (:mod:`operators.local`).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any, Callable

import orjson

from learning.errors import RequestError
from learning.protocols import make_hub
from learning.requests import parse_request
from middleware import HUB, codec
from middleware.codec import Wire
from middleware.errors import CodecError
from operators.feedback import RESEND_AFTER_S, ResendWindow, new_incarnation
from operators.service import error_response, limits_of
from operators.weights import Publisher

__all__ = ["HubKernel", "HubContext"]

log = logging.getLogger(__name__)
LOG_EVERY_S = 5.0  # seconds between a pipeline's progress lines in the job's log
_NO_BACKLOG: deque = deque(maxlen=0)  # hubs have no stream: nothing is ever held


class HubContext:
    """The network context of one pipeline's hub node (implements
    :class:`middleware.node.NetworkContext`)."""

    side = HUB
    pauses = 0  # hubs have no stream to pause
    backlog = _NO_BACKLOG
    prediction_scores = False  # hubs predict nothing
    max_request_bytes: int | None = None  # a snapshot's from before it was kept: no limit
    max_model_params: int | None = None  # hubs take no records: nothing to refuse

    def __init__(self, op: "HubKernel", network: int, index: int, n_hubs: int) -> None:
        self._op = op
        self.network = network
        self.index = index
        self.n_spokes = op.n_spokes
        self.n_hubs = n_hubs
        self.max_message_bytes = op.limits["max_message_bytes"]
        self.max_response_params = op.limits["max_response_params"]
        self.max_request_bytes = op.limits["max_request_bytes"]  # an export must fit a Create

    def send(self, dst_index: int, data: bytes) -> None:
        if not 0 <= dst_index < self.n_spokes:
            raise ValueError(f"pipeline {self.network} has no spoke {dst_index}")
        self._op.send(self.network, self.index, dst_index, data)

    def send_sibling(self, dst_index: int, data: bytes) -> None:
        """Hubs have no channels to each other: each owns an independent shard of the
        parameter server (papers/002 §2.1).

        Raises
        ------
        RuntimeError
            Always.
        """
        raise RuntimeError(f"pipeline {self.network}: hubs cannot call other hubs (a hub "
                           f"owns an independent shard of the parameter server)")

    def pause_stream(self) -> None:  # hubs have no input stream to pause
        raise RuntimeError("hubs cannot pause a stream")

    resume_stream = pause_stream

    def emit(self, stream: str | None, value: dict) -> None:
        self._op.emit(value)

    def emit_all(self, stream: str | None, values: list[dict]) -> None:
        for value in values:
            self._op.emit(value)

    @property
    def subtask(self) -> int:
        """The hub operator's subtask hosting this hub (:attr:`HubKernel.subtask`)."""
        return self._op.subtask

    @property
    def reraise(self) -> bool:
        """The kernel's :attr:`HubKernel.reraise`."""
        return self._op.reraise

    def crossing_ms(self) -> None:  # hubs get no data crossings
        return None

    def paused_for(self) -> None:  # nor a stream to pause
        return None


class HubKernel:
    """The hub nodes of every pipeline for one hub id, with their bookkeeping: plain
    Python (picklable, no Flink).

    Parameters
    ----------
    hub : int
        The hub index (shard) this kernel serves.
    n_spokes : int
    limits : dict or None
        Service limits over :data:`operators.service.DEFAULT_LIMITS`.
    subtask : int
        The hub operator's subtask hosting this kernel (reported in Query).

    Outputs accumulate in :attr:`out` as ``(stream, value)``: ``None`` (hub→spoke frame
    bytes, to ``psMessages``), ``"responses"`` (JSON) or ``"weights"`` (weights records,
    bytes: :mod:`operators.weights`, published when ``limits["weights_every_ms"]`` is
    not None).

    Attributes
    ----------
    clock : callable
        Seconds, monotonic (``time.monotonic``): when an unacknowledged frame is sent
        again (:data:`RESEND_AFTER_S`) and when to log progress. A transport that loses
        nothing may pass a clock that stands still.
    reraise : bool
        After counting a node's failure (``handlerErrors``), raise it again instead of
        going on (the in-process kernel's tests; False in the job).
    """

    publisher: Publisher | None = None  # class default: snapshots from before the weights topic

    def __init__(self, hub: int, n_spokes: int, limits: dict | None = None,
                 subtask: int = 0) -> None:
        self.hub = hub
        self.n_spokes = n_spokes
        self.limits = limits_of(limits)
        self.subtask = subtask
        self.nodes: dict[int, Any] = {}
        # lifecycle controls by number: (spokes whose copy came, the request parsed once)
        self.copies: dict[tuple[int, int], tuple[set, Any]] = {}
        self.out: list[tuple[Any, Any]] = []
        self.dropped = 0
        self.handler_errors = 0
        self.restores = 0
        self.logged: dict[int, float] = {}
        self.clock: Callable[[], float] = time.monotonic
        self.reraise = False  # let a node's failure propagate after counting it
        # the feedback loop's incarnation frames (operators.feedback)
        self.incarnation = new_incarnation()
        self.prev_incarnation = 0
        self.bases: dict[tuple[int, int], int] = {}
        self.window = ResendWindow()  # frames sent and not yet acknowledged
        # the weights topic (operators.weights): when each pipeline's shard is published
        self.publisher = Publisher(self.limits["weights_every_ms"], self.limits["max_message_bytes"])

    @property
    def unacked(self) -> dict:
        """Frames sent and not yet acknowledged: ``{(network, spoke): [(envelope seq,
        time sent in seconds, frame bytes), ...]}`` (read only)."""
        return self.window.frames

    @property
    def resent(self) -> int:
        """Frames sent again for being overdue."""
        return self.window.resent

    def restored(self) -> None:
        """This kernel was just rebuilt from a checkpoint or savepoint: a new incarnation,
        and each channel's base is where its sequence numbers resume."""
        self.restores += 1
        self.prev_incarnation, self.incarnation = self.incarnation, new_incarnation()
        self.bases = {(network, s): node.next_seq_to(s)
                      for network, node in self.nodes.items() for s in range(self.n_spokes)}

    def send(self, network: int, hub: int, spoke: int, data: bytes = b"", nonce: int = 0) -> None:
        """A hub→spoke record for psMessages: ``data`` (envelope bytes) in a frame, kept
        until the spoke acknowledges it (see :meth:`acknowledged`)."""
        record = codec.frame(self.incarnation, self.prev_incarnation,
                             self.bases.get((network, spoke), 0), network, hub, spoke, data, nonce)
        if data:
            self.window.add(network, spoke, codec.header(data).seq, self.clock(), record)
        self.out.append((None, record))

    def acknowledged(self, network: int, spoke: int, expected: int) -> None:
        """Spoke ``spoke`` has delivered everything of ``network`` numbered below
        ``expected``: forget those frames, and send again what any spoke of ``network``
        still lacks that left more than :data:`RESEND_AFTER_S` seconds ago (a record the
        feedback topic holds but the job's source never delivered: seen with the local
        broker).

        Every channel is checked, not only the acknowledging spoke's: a spoke that waits
        on nothing never acknowledges, so a lost one-way message to it (an FDA poll to a
        spoke whose records ran out) is sent again only when the spokes waiting on its
        answer acknowledge theirs (seen: FDA on Shuttle, three spokes paused for good). A
        spoke that gets a copy of what it had acknowledges at once
        (:meth:`operators.spoke_kernel.SpokeKernel.acknowledge`), so each copy is sent once.

        The pipeline's hub node gets ``feedback_round_trip_ms``: milliseconds from sending
        the newest frame this acknowledgement covers to its arrival (hub → psMessages →
        spoke, then the spoke's next message to this hub, which carries the acknowledgement:
        the spoke's work until then included)."""
        sent = [t for seq, t, _ in self.window.frames.get((network, spoke), ()) if seq < expected]
        node = self.nodes.get(network)
        if sent and node is not None:  # the newest frame this acknowledgement covers
            node.feedback_round_trip_ms = 1000.0 * (self.clock() - max(sent))
        self.window.acknowledge(network, spoke, expected)
        for record in self.window.overdue(network, self.clock(), RESEND_AFTER_S):
            self.out.append((None, record))

    def service(self) -> dict:
        """This hub's service counters (also Flink metrics)."""
        return {"badMessages": self.dropped, "handlerErrors": self.handler_errors,
                "restores": self.restores, "framesResent": self.window.resent,
                "weightsRecords": self._publisher().records}

    # -- the weights topic (operators.weights) -------------------------------------------------
    def _publisher(self) -> Publisher:
        got = self.publisher
        if got is None:  # a kernel restored from a snapshot taken before the weights topic
            got = self.publisher = Publisher(self.limits.get("weights_every_ms"),
                                             self.limits["max_message_bytes"])
        return got

    def _weights_out(self, record: bytes) -> None:
        self.out.append(("weights", record))

    def weights_due_in(self) -> float | None:
        """Seconds until a held-back weights publication is due (0: now); None: none is
        held back. The host calls :meth:`flush_weights` then (the job: a timer)."""
        return self._publisher().due_in(self.clock())

    def flush_weights(self, force: bool = False) -> None:
        """Publish the held-back weights whose interval has passed (every one with
        ``force``: the in-process kernel when its transport is idle)."""
        self._publisher().flush(self.nodes, self.clock(), self._weights_out, force)

    def emit(self, value: dict) -> None:
        self.out.append(("responses", orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY).decode()))

    def on_message(self, data: bytes) -> None:
        """A spoke→hub envelope or a spoke kernel's control message; anything else is
        counted in ``badMessages`` and dropped."""
        kind = codec.wire_kind(data)
        if kind is Wire.ENVELOPE:
            self._envelope(data)
            return
        try:
            if kind is not Wire.CONTROL:
                raise CodecError(f"not an envelope or a control message ({len(data)} bytes)")
            self._control(codec.read_control(data))
        except (CodecError, RequestError, KeyError, TypeError, ValueError) as exc:
            self.dropped += 1
            log.warning("hub %d: dropped a message: %s", self.hub, exc)
            if self.reraise and not isinstance(exc, CodecError):
                raise

    def _envelope(self, data: bytes) -> None:
        try:
            network = codec.peek(data).network
        except CodecError:
            self.dropped += 1
            return
        node = self.nodes.get(network)
        if node is None:
            self.dropped += 1  # a pipeline deleted while its messages were in flight
            return
        try:
            node.deliver(data)
        except CodecError:
            self.dropped += 1
            return
        except Exception:  # a protocol's handler failed: keep the job and the other pipelines
            self.handler_errors += 1
            log.exception("hub %d: handling a message of pipeline %d failed", self.hub, network)
            if self.reraise:
                raise
            return
        self._publisher().changed(network, node, self.clock(), self._weights_out)
        self._log_progress(network, node)

    def _log_progress(self, network: int, node) -> None:
        """A per-pipeline line in the job's log at most every ``LOG_EVERY_S`` seconds (a
        node without ``global_statistics``, e.g. a test's, logs its message counts)."""
        now = self.clock()
        if now - self.logged.get(network, -LOG_EVERY_S) < LOG_EVERY_S:
            return
        self.logged[network] = now
        stats = node.global_statistics() if hasattr(node, "global_statistics") else {}
        log.info("pipeline %d hub %d: %s; %d messages / %d bytes in, %d / %d out", network,
                 self.hub, ", ".join(f"{k}={v}" for k, v in stats.items()
                                     if not isinstance(v, (dict, list))),
                 sum(node.stats.received_messages.values()), sum(node.stats.received_bytes.values()),
                 sum(node.stats.sent_messages.values()), sum(node.stats.sent_bytes.values()))

    def _attach(self, req) -> Any:
        node = make_hub(req)
        node.attach(HubContext(self, req.id, self.hub,
                               int(req.training_configuration["hubParallelism"])))
        node.hub_subtask = self.subtask
        self.nodes[req.id] = node
        return node

    def adopt(self, network: int, node, n_hubs: int) -> None:
        """Host ``node`` (already built) as pipeline ``network``'s hub, in a network of
        ``n_hubs`` hubs: for the in-process kernel's networks of arbitrary nodes."""
        node.attach(HubContext(self, network, self.hub, n_hubs))
        self.nodes[network] = node

    def _control(self, msg: dict) -> None:
        """Bookkeeping from the spokes. A restored spoke's ``resync`` is answered with an
        empty frame; an ``ack`` moves the resend window. Pipeline lifecycle: every spoke
        forwards each Create, Update and Delete it accepted (numbered alike on all spokes,
        as all see the requests in the same order); the hub parses the first copy, acts
        on it, and answers after the last.

        Raises
        ------
        KeyError, TypeError, ValueError
            On a malformed message (counted and dropped by :meth:`on_message`).
        """
        op = msg["op"]
        if op == "resync":  # a restored spoke asks where this hub's timeline is
            self.send(int(msg["network"]), self.hub, int(msg["spoke"]), nonce=int(msg["nonce"]))
            return
        if op == "ack":
            self.acknowledged(int(msg["network"]), int(msg["spoke"]), int(msg["expected"]))
            return
        hub = self.hub
        key = (int(msg["request"]["id"]), int(msg["n"]))
        entry = self.copies.get(key)
        if entry is None:  # the first copy: parse it (once) and act on it
            req = parse_request(msg["request"])
            entry = self.copies[key] = (set(), req)
            pid = req.id
            try:
                if op == "create" and pid not in self.nodes:
                    node = self._attach(req)
                    if msg.get("seqBase"):  # created again under a deleted one's id
                        node.start_channels(int(msg["seqBase"]))
                elif op == "update":
                    node = self.nodes.get(pid)
                    if node is None:  # spokes accepted it, so this should not happen
                        raise RequestError("not_found", f"hub {hub} has no pipeline {pid}", "id")
                    node.update(req)
                elif op == "delete":
                    self.nodes.pop(pid, None)
                    self.window.forget(pid)
                    self._publisher().deleted(pid, hub, self._weights_out)
            except RequestError as err:  # the spokes accepted it: should not happen
                log.error("hub %d: %s of pipeline %d failed: %s", hub, op, pid, err)
                del self.copies[key]
                if hub == 0:
                    self.emit(error_response(err, req.request_id, pid, req.request))
                return
        got, req = entry
        got.add(msg["spoke"])
        if len(got) < self.n_spokes:
            return
        del self.copies[key]
        if hub != 0:
            return
        pid = req.id
        answer = {"requestId": req.request_id, "id": pid, "request": req.request, "status": "ok"}
        if op == "create":
            answer.update(spokes=self.n_spokes, hubs=int(req.training_configuration["hubParallelism"]))
        elif op == "update":
            node = self.nodes[pid]
            answer.update(learner={"name": node.request.learner["name"],
                                   "hyperParameters": node.learner.hyperparameters()},
                          preProcessors=node.request.pre_processors,
                          trainingConfiguration=node.request.training_configuration)
        self.emit(answer)
