"""The hub operator: a ``KeyedProcessFunction`` keyed by hub id (one hub per subtask; see
:mod:`operators.routing`). It hosts one hub node per pipeline; hub→spoke envelopes, in
incarnation frames (:mod:`operators.feedback`), go to the main output (the ``psMessages``
Kafka topic, read back by the spokes), responses to a side output.

Everything a hub holds (its pipelines' hub nodes with the global model shards, protocol
state, middleware sequence numbers and pending promises, the lifecycle bookkeeping) is one
plain-Python :class:`HubKernel` per hub key, kept in that key's ``ValueState`` and handed to
the state after every element (a write-cache reference in process mode, serialized at the
bundle's end and so at every checkpoint barrier).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson
from pyflink.common import Types
from pyflink.datastream import KeyedProcessFunction
from pyflink.datastream.state import ValueStateDescriptor

from learning.errors import RequestError
from learning.protocols import make_hub
from learning.requests import parse_request
from middleware import HUB, codec
from middleware.codec import HEADER
from middleware.errors import CodecError
from operators.feedback import frame, new_incarnation
from operators.metrics import HUB_METRICS, OperatorMetrics
from operators.routing import subtask_index
from operators.snapshot import Snapshot
from operators.spoke import DEFAULT_LIMITS, error_response, import_protocols

__all__ = ["HubFunction", "HubKernel"]

log = logging.getLogger(__name__)
LOG_EVERY_S = 5.0  # seconds between a pipeline's progress lines in the job's log
RESEND_AFTER_S = 2.0  # an unacknowledged hub→spoke frame older than this is sent again


class _HubContext:
    side = HUB

    def __init__(self, op: "HubKernel", network: int, index: int, n_hubs: int) -> None:
        self._op = op
        self.network = network
        self.index = index
        self.n_spokes = op.n_spokes
        self.n_hubs = n_hubs
        self.max_message_bytes = op.max_message_bytes
        self.max_response_params = op.limits["max_response_params"]

    def send(self, dst_index: int, data: bytes) -> None:
        self._op.send(self.network, self.index, dst_index, data)

    def pause_stream(self) -> None:  # hubs have no input stream to pause
        raise RuntimeError("hubs cannot pause a stream")

    resume_stream = pause_stream

    def emit(self, stream: str, value: dict) -> None:
        self._op.emit(value)


class HubKernel:
    """The hub nodes of every pipeline for one hub id, with their bookkeeping: plain
    Python (picklable, no Flink).

    Parameters
    ----------
    hub : int
        The hub index (shard) this kernel serves.
    n_spokes : int
    limits : dict
        As for :class:`~operators.spoke.SpokeKernel` (``max_message_bytes``: envelopes
        above it are fragmented, since psMessages crosses Kafka, whose default message
        limit is 1 MB; ``max_response_params``: larger models are summarized in Query).
    subtask : int
        The hub operator's subtask hosting this kernel (reported in Query).

    Outputs accumulate in :attr:`out` as ``(stream, value)``: ``None`` (hub→spoke
    envelope bytes, to ``psMessages``) or ``"responses"`` (JSON).
    """

    def __init__(self, hub: int, n_spokes: int, limits: dict | None = None,
                 subtask: int = 0) -> None:
        self.hub = hub
        self.n_spokes = n_spokes
        self.limits = {**DEFAULT_LIMITS, **(limits or {})}
        self.max_message_bytes = self.limits["max_message_bytes"]
        self.subtask = subtask
        self.nodes: dict[int, Any] = {}
        self.copies: dict[tuple[int, int], set] = {}
        self.out: list[tuple[Any, Any]] = []
        self.dropped = 0
        self.handler_errors = 0
        self.restores = 0
        self.logged: dict[int, float] = {}
        # the feedback loop's incarnation frames (operators.feedback)
        self.incarnation = new_incarnation()
        self.prev_incarnation = 0
        self.bases: dict[tuple[int, int], int] = {}
        # frames sent and not yet acknowledged, per (network, spoke): (seq, time, frame)
        self.unacked: dict[tuple[int, int], list[tuple[int, float, bytes]]] = {}
        self.resent = 0

    def restored(self) -> None:
        """This kernel was just rebuilt from a checkpoint or savepoint: a new incarnation,
        and each channel's base is where its sequence numbers resume."""
        self.restores += 1
        self.prev_incarnation, self.incarnation = self.incarnation, new_incarnation()
        self.bases = {(network, s): node._outbox.peek(s)
                      for network, node in self.nodes.items() for s in range(self.n_spokes)}

    def send(self, network: int, hub: int, spoke: int, data: bytes = b"", nonce: int = 0) -> None:
        """A hub→spoke record for psMessages: ``data`` (envelope bytes) in a frame, kept
        until the spoke acknowledges it (see :meth:`acknowledged`)."""
        record = frame(self.incarnation, self.prev_incarnation,
                       self.bases.get((network, spoke), 0), network, hub, spoke, data, nonce)
        if data:
            self.unacked.setdefault((network, spoke), []).append(
                (HEADER.unpack_from(data)[7], time.monotonic(), record))
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
        (:meth:`operators.spoke.SpokeKernel.acknowledge`), so each copy is sent once."""
        self.unacked[(network, spoke)] = [
            f for f in self.unacked.get((network, spoke), []) if f[0] >= expected]
        now = time.monotonic()
        for (net, _), pending in self.unacked.items():
            if net != network:
                continue
            for i, (seq, sent, record) in enumerate(pending):
                if now - sent > RESEND_AFTER_S:
                    pending[i] = (seq, now, record)
                    self.out.append((None, record))
                    self.resent += 1

    def service(self) -> dict:
        """This hub's service counters (also Flink metrics)."""
        return {"badMessages": self.dropped, "handlerErrors": self.handler_errors,
                "restores": self.restores, "framesResent": self.resent}

    def emit(self, value: dict) -> None:
        self.out.append(("responses", orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY).decode()))

    def on_message(self, data: bytes) -> None:
        """A spoke→hub envelope or a lifecycle control message (JSON) from a spoke."""
        if codec.is_envelope(data):
            self._envelope(self.hub, data)
        else:
            self._control(self.hub, orjson.loads(data))

    def _envelope(self, hub: int, data: bytes) -> None:
        try:
            network, *_ = codec.peek(data)
        except CodecError:
            self.dropped += 1
            return
        node = self.nodes.get(network)
        if node is None:
            self.dropped += 1  # a pipeline deleted while its messages were in flight
            return
        try:
            node.deliver(data)
        except Exception:  # a protocol's handler failed: keep the job and the other pipelines
            self.handler_errors += 1
            log.exception("hub %d: handling a message of pipeline %d failed", hub, network)
            return
        self._log_progress(hub, network, node)

    def _log_progress(self, hub: int, network: int, node) -> None:
        """A per-pipeline line in the job's log at most every ``LOG_EVERY_S`` seconds."""
        now = time.monotonic()
        if now - self.logged.get(network, 0.0) < LOG_EVERY_S:
            return
        self.logged[network] = now
        stats = node.global_statistics()
        log.info("pipeline %d hub %d: %s; %d messages / %d bytes in, %d / %d out", network, hub,
                 ", ".join(f"{k}={v}" for k, v in stats.items() if not isinstance(v, (dict, list))),
                 sum(node.stats.received_messages.values()), sum(node.stats.received_bytes.values()),
                 sum(node.stats.sent_messages.values()), sum(node.stats.sent_bytes.values()))

    def _attach(self, hub: int, req) -> Any:
        node = make_hub(req)
        node.attach(_HubContext(self, req.id, hub, int(req.training_configuration["hubParallelism"])))
        node.hub_subtask = self.subtask
        self.nodes[req.id] = node
        return node

    def _control(self, hub: int, msg: dict) -> None:
        """Pipeline lifecycle from the spokes: every spoke forwards each Create, Update and
        Delete it accepted (numbered alike on all spokes, as all see the requests in the
        same order); the hub acts on the first copy and answers after the last."""
        if msg["op"] == "resync":  # a restored spoke asks where this hub's timeline is
            self.send(int(msg["network"]), hub, int(msg["spoke"]), nonce=int(msg["nonce"]))
            return
        if msg["op"] == "ack":
            self.acknowledged(int(msg["network"]), int(msg["spoke"]), int(msg["expected"]))
            return
        op, n = msg["op"], msg["n"]
        req = parse_request(msg["request"])
        pid = req.id
        got = self.copies.setdefault((pid, n), set())
        first = not got
        got.add(msg["spoke"])
        if first:
            try:
                if op == "create" and pid not in self.nodes:
                    self._attach(hub, req)
                elif op == "update":
                    node = self.nodes.get(pid)
                    if node is None:  # spokes accepted it, so this should not happen
                        raise RequestError("not_found", f"hub {hub} has no pipeline {pid}", "id")
                    node.update(req)
                elif op == "delete":
                    self.nodes.pop(pid, None)
            except RequestError as err:  # the spokes accepted it: should not happen
                log.error("hub %d: %s of pipeline %d failed: %s", hub, op, pid, err)
                self.copies.pop((pid, n), None)
                if hub == 0:
                    self.emit(error_response(err, req.request_id, pid, req.request))
                return
        if len(got) < self.n_spokes:
            return
        del self.copies[(pid, n)]
        if hub != 0:
            return
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


class HubFunction(KeyedProcessFunction):
    """The Flink host of the :class:`HubKernel` of each hub key on this subtask.

    Parameters
    ----------
    n_spokes : int
    hub_keys : list[int]
        ``hub_keys[j]`` is the Flink key of hub j.
    responses_tag : OutputTag
    limits : dict
        As for :class:`HubKernel`.
    protocol_modules : tuple[str, ...]
        Modules registering user protocols, imported in ``open``.
    persist : bool
        Hand each kernel to keyed state after every element (checkpoints, savepoints).
    metrics : bool
        Register the Flink metrics of :mod:`operators.metrics`.
    """

    def __init__(self, n_spokes: int, hub_keys: list[int], responses_tag,
                 limits: dict | None = None, protocol_modules: tuple[str, ...] = (),
                 persist: bool = True, metrics: bool = True) -> None:
        self.n_spokes = n_spokes
        self.hub_keys = hub_keys
        self.responses_tag = responses_tag
        self.limits = limits
        self.protocol_modules = protocol_modules
        self.persist = persist
        self.metrics_on = metrics

    def open(self, runtime_context) -> None:
        import_protocols(self.protocol_modules)
        self.subtask = subtask_index(runtime_context)
        self.metrics = OperatorMetrics(runtime_context, HUB_METRICS) if self.metrics_on else None
        self.index_of = {k: j for j, k in enumerate(self.hub_keys)}
        self.state = runtime_context.get_state(
            ValueStateDescriptor("hub", Types.PICKLED_BYTE_ARRAY()))
        self.kernels: dict[int, HubKernel] = {}
        self.snapshots: dict[int, Snapshot] = {}

    def _kernel(self, key: int) -> HubKernel:
        kernel = self.kernels.get(key)
        if kernel is None:
            hub = self.index_of[key]
            saved = self.state.value() if self.persist else None
            kernel = saved.kernel if saved is not None else None
            if kernel is None:
                kernel = HubKernel(hub, self.n_spokes, self.limits, self.subtask)
            else:
                kernel.restored()
                kernel.subtask = self.subtask
                log.info("hub %d restored: %d pipeline(s), restore %d", hub, len(kernel.nodes),
                         kernel.restores)
            self.kernels[key] = kernel
            self.snapshots[key] = Snapshot(kernel)
        return kernel

    def process_element(self, value, ctx):
        key = value[0]
        kernel = self._kernel(key)
        kernel.on_message(bytes(value[1]))
        if self.persist:
            self.state.update(self.snapshots[key])
        if self.metrics is not None:
            self.metrics.refresh(kernel)
        if kernel.out:
            out, kernel.out = kernel.out, []
            for stream, v in out:
                yield v if stream is None else (self.responses_tag, v)
