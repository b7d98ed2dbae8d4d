"""The hub operator: a ``KeyedProcessFunction`` keyed by hub id (one hub per subtask; see
:mod:`operators.routing`). It hosts one hub node per pipeline; hub→spoke envelopes go to
the main output (the ``psMessages`` Kafka topic, read back by the spokes), responses to a
side output.

Keyed state (per hub key) maps pipeline id → JSON of the pipeline definition and the
global model, written at synchronization points; after a restore the nodes are rebuilt
from it on their first message.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson
from pyflink.common import Types
from pyflink.datastream import KeyedProcessFunction
from pyflink.datastream.state import MapStateDescriptor

from learning.errors import RequestError
from learning.protocols import make_hub
from learning.requests import parse_request
from middleware import HUB, codec
from middleware.errors import CodecError
from operators.routing import subtask_index
from operators.spoke import DEFAULT_LIMITS, error_response, import_protocols

__all__ = ["HubFunction"]

log = logging.getLogger(__name__)
LOG_EVERY_S = 5.0  # seconds between a pipeline's progress lines in the job's log


class _HubContext:
    side = HUB

    def __init__(self, op: "HubFunction", network: int, index: int, n_hubs: int) -> None:
        self._op = op
        self.network = network
        self.index = index
        self.n_spokes = op.n_spokes
        self.n_hubs = n_hubs
        self.max_message_bytes = op.max_message_bytes
        self.max_response_params = op.limits["max_response_params"]

    def send(self, dst_index: int, data: bytes) -> None:
        self._op.out.append((None, data))

    def pause_stream(self) -> None:  # hubs have no input stream to pause
        raise RuntimeError("hubs cannot pause a stream")

    resume_stream = pause_stream

    def emit(self, stream: str, value: dict) -> None:
        self._op.emit(value)


class HubFunction(KeyedProcessFunction):
    """Hosts the hub nodes of every pipeline for the hub ids keyed to this subtask.

    Parameters
    ----------
    n_spokes : int
    hub_keys : list[int]
        ``hub_keys[j]`` is the Flink key of hub j.
    responses_tag : OutputTag
    limits : dict
        As for :class:`~operators.spoke.SpokeFunction` (``max_message_bytes``: envelopes
        above it are fragmented, since psMessages crosses Kafka, whose default message
        limit is 1 MB; ``max_response_params``: larger models are summarized in Query).
    protocol_modules : tuple[str, ...]
        Modules registering user protocols, imported in ``open``.
    """

    def __init__(self, n_spokes: int, hub_keys: list[int], responses_tag,
                 limits: dict | None = None, protocol_modules: tuple[str, ...] = ()) -> None:
        self.n_spokes = n_spokes
        self.hub_keys = hub_keys
        self.responses_tag = responses_tag
        self.limits = {**DEFAULT_LIMITS, **(limits or {})}
        self.max_message_bytes = self.limits["max_message_bytes"]
        self.protocol_modules = protocol_modules

    def open(self, runtime_context) -> None:
        import_protocols(self.protocol_modules)
        self.subtask = subtask_index(runtime_context)
        self.index_of = {k: j for j, k in enumerate(self.hub_keys)}
        self.state = runtime_context.get_map_state(
            MapStateDescriptor("pipelines", Types.INT(), Types.PICKLED_BYTE_ARRAY()))
        self.nodes: dict[tuple[int, int], Any] = {}
        self.copies: dict[tuple[int, int, str], set] = {}
        self.out: list[tuple[Any, Any]] = []
        self.dropped = 0
        self.handler_errors = 0
        self.logged: dict[tuple[int, int], float] = {}

    def emit(self, value: dict) -> None:
        self.out.append((self.responses_tag,
                         orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY).decode()))

    def process_element(self, value, ctx):
        key, data = value[0], bytes(value[1])
        hub = self.index_of[key]
        if codec.is_envelope(data):
            self._envelope(hub, data)
        else:
            self._control(hub, orjson.loads(data))
        out, self.out = self.out, []
        for tag, v in out:
            yield v if tag is None else (tag, v)

    def _envelope(self, hub: int, data: bytes) -> None:
        try:
            network, *_ = codec.peek(data)
        except CodecError:
            self.dropped += 1
            return
        node = self.nodes.get((hub, network)) or self._restore(hub, network)
        if node is None:
            self.dropped += 1  # a pipeline deleted while its messages were in flight
            return
        try:
            node.deliver(data)
        except Exception:  # a protocol's handler failed: keep the job and the other pipelines
            self.handler_errors += 1
            log.exception("hub %d: handling a message of pipeline %d failed", hub, network)
            return
        self._save(hub, network, node)
        self._log_progress(hub, network, node)

    def _log_progress(self, hub: int, network: int, node) -> None:
        """A per-pipeline line in the job's log at most every ``LOG_EVERY_S`` seconds."""
        now = time.monotonic()
        if now - self.logged.get((hub, network), 0.0) < LOG_EVERY_S:
            return
        self.logged[(hub, network)] = now
        stats = node.global_statistics()
        log.info("pipeline %d hub %d: %s; %d messages / %d bytes in, %d / %d out", network, hub,
                 ", ".join(f"{k}={v}" for k, v in stats.items() if not isinstance(v, (dict, list))),
                 sum(node.stats.received_messages.values()), sum(node.stats.received_bytes.values()),
                 sum(node.stats.sent_messages.values()), sum(node.stats.sent_bytes.values()))

    def _attach(self, hub: int, req) -> Any:
        node = make_hub(req)
        node.attach(_HubContext(self, req.id, hub, int(req.training_configuration["hubParallelism"])))
        node.hub_subtask = self.subtask
        self.nodes[(hub, req.id)] = node
        return node

    def _save(self, hub: int, network: int, node) -> None:
        self.state.put(network, orjson.dumps({
            "request": node.request.to_json(), "learner": node.learner.to_json(),
            "updates": node.updates}, option=orjson.OPT_SERIALIZE_NUMPY))

    def _restore(self, hub: int, network: int):
        raw = self.state.get(network)
        if raw is None:
            return None
        saved = orjson.loads(raw)
        node = self._attach(hub, parse_request(saved["request"]))
        node.learner = type(node.learner).from_json(saved["learner"])
        node.updates = saved["updates"]
        return node

    def _control(self, hub: int, msg: dict) -> None:
        """Pipeline lifecycle from the spokes: every spoke forwards each Create, Update and
        Delete it accepted (numbered alike on all spokes, as all see the requests in the
        same order); the hub acts on the first copy and answers after the last."""
        op, n = msg["op"], msg["n"]
        req = parse_request(msg["request"])
        pid = req.id
        got = self.copies.setdefault((hub, pid, n), set())
        first = not got
        got.add(msg["spoke"])
        if first:
            try:
                if op == "create" and (hub, pid) not in self.nodes:
                    self._save(hub, pid, self._attach(hub, req))
                elif op == "update":
                    node = self.nodes.get((hub, pid)) or self._restore(hub, pid)
                    if node is None:  # spokes accepted it, so this should not happen
                        raise RequestError("not_found", f"hub {hub} has no pipeline {pid}", "id")
                    node.update(req)
                    self._save(hub, pid, node)
                elif op == "delete":
                    self.nodes.pop((hub, pid), None)
                    self.state.remove(pid)
            except RequestError as err:  # the spokes accepted it: should not happen
                log.error("hub %d: %s of pipeline %d failed: %s", hub, op, pid, err)
                self.copies.pop((hub, pid, n), None)
                if hub == 0:
                    self.emit(error_response(err, req.request_id, pid, req.request))
                return
        if len(got) < self.n_spokes:
            return
        del self.copies[(hub, pid, n)]
        if hub != 0:
            return
        answer = {"requestId": req.request_id, "id": pid, "request": req.request, "status": "ok"}
        if op == "create":
            answer.update(spokes=self.n_spokes, hubs=int(req.training_configuration["hubParallelism"]))
        elif op == "update":
            node = self.nodes[(hub, pid)]
            answer.update(learner={"name": node.request.learner["name"],
                                   "hyperParameters": node.learner.hyperparameters()},
                          preProcessors=node.request.pre_processors,
                          trainingConfiguration=node.request.training_configuration)
        self.emit(answer)
