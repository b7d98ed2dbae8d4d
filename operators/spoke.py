"""The spoke operator: a ``KeyedCoProcessFunction`` over (data records, messages), keyed by
spoke (one key per subtask, see :mod:`operators.routing`; the keys are computed in Java, so
no Python key selector runs on the data path).

Input 1 carries training and forecasting records, each the JSON of an object ``{"id",
"features", "label"}`` or a JSON array of them, in batches assembled in Java by
``omldm.RecordBatcher`` (``flink_jobs/java``; bytes, see :func:`record_batch`), or, with
``max_batch_delay_ms = 0``, as one string each, tagged by the job's SQL source with the
topic they came from (``T`` training, ``P`` forecasting). They cross from the JVM into
Python once, here: parse, route to every pipeline, preprocess, predict or buffer into a
mini-batch, fit — record by record, in the order they came.

Input 2 carries messages as bytes: hub→spoke envelopes in incarnation frames (first byte
0xFE, :mod:`operators.feedback`, read back from the ``psMessages`` topic: the Kafka
feedback loop) and JSON control requests, one copy per spoke key.

Outputs: predictions (main output, JSON strings), spoke→hub messages (side output
``(hub_key, bytes)``, keyed by hub id downstream), responses and dead letters (JSON).

Everything a spoke holds (pipelines, local models, preprocessor statistics, mini-batch
buffers, protocol state, middleware sequence numbers and pending promises, counters) is one
plain-Python :class:`SpokeKernel`, kept in the spoke key's ``ValueState`` and handed to the
state after every element. In process mode that is a reference put in PyFlink's write
cache, serialized once per bundle and at every checkpoint barrier (the bundle is finished
before the barrier), so a checkpoint holds each spoke exactly as of the records before the
barrier. In thread mode every update serializes, so it is done only when state must persist
(checkpointing on, see :attr:`flink_jobs.config.JobConfig.persist_state`).
"""

from __future__ import annotations

import importlib
import logging
import struct
import time
from collections import Counter, deque
from typing import Any

import orjson
from pyflink.common import Types
from pyflink.datastream import KeyedCoProcessFunction
from pyflink.datastream.state import ValueStateDescriptor

from learning.errors import RequestError
from learning.protocols import make_spoke
from learning.layout import RecordRejected
from learning.protocols.base import dead_letter
from learning.requests import parse_request
from middleware import SPOKE, codec
from middleware.errors import CodecError
from middleware.node import DEFAULT_MAX_MESSAGE_BYTES
from operators.feedback import SpokeChannels, is_frame
from operators.metrics import SPOKE_METRICS, OperatorMetrics
from operators.routing import subtask_index
from operators.snapshot import Snapshot

__all__ = ["SpokeFunction", "SpokeKernel", "DEFAULT_LIMITS", "error_response", "import_protocols",
           "record_batch"]

log = logging.getLogger(__name__)
NUDGE_EVERY_S = 1.0  # a paused spoke acknowledges its hub channels at most this often
_TRAIN = "T"  # the SQL source's tag of training records; forecasting ones are "P"


def import_protocols(modules: tuple[str, ...]) -> None:
    """Import the modules that register user protocols (trusted job configuration)."""
    for name in modules:
        importlib.import_module(name)


def record_batch(records) -> bytes:
    """A batch of data records as ``omldm.RecordBatcher`` (``flink_jobs/java``) writes it,
    the format :meth:`SpokeKernel.on_batch` reads: little-endian ``int32 n``,
    ``int32 length[n]`` (bytes), ``uint8 training[n]`` (1: from ``training``, 0: from
    ``forecasting``), then the records' bytes one after the other.

    Parameters
    ----------
    records : iterable of (bool, bytes)
        ``(training?, the Kafka record's value)`` in arrival order.
    """
    records = list(records)
    return b"".join([struct.pack(f"<i{len(records)}i", len(records), *(len(v) for _, v in records)),
                     bytes(1 if train else 0 for train, _ in records)] + [v for _, v in records])


DEFAULT_LIMITS = {"max_request_bytes": 1_000_000, "max_pipelines": 64,
                  "max_model_params": 10_000_000, "max_message_bytes": DEFAULT_MAX_MESSAGE_BYTES,
                  "max_response_params": 10_000}


def _check_sizes(req, limit: int) -> None:
    """Refuse absurd sizes (a 10⁹-wide model) before anything is allocated: any integer
    hyperparameter (or integer in a list of them, e.g. layer sizes) and any top-level
    integer parameter (e.g. ``n_features``) above ``limit``."""
    def too_big(value) -> bool:
        return (isinstance(value, (int, float)) and not isinstance(value, bool)
                and float(value).is_integer() and value > limit)

    specs = [("learner", req.learner or {})] + [
        (f"preProcessors[{i}]", p) for i, p in enumerate(req.pre_processors)]
    for where, spec in specs:
        for key, value in ((spec or {}).get("hyperParameters") or {}).items():
            values = value if isinstance(value, list) else [value]
            for v in values:
                if too_big(v):
                    raise RequestError("too_large", f"{where}.hyperParameters.{key} = {v} exceeds "
                                       f"the service's max_model_params = {limit}",
                                       f"{where}.hyperParameters.{key}")
        for key, value in ((spec or {}).get("parameters") or {}).items():
            if too_big(value):
                raise RequestError("too_large", f"{where}.parameters.{key} = {value} exceeds "
                                   f"the service's max_model_params = {limit}",
                                   f"{where}.parameters.{key}")


def error_response(err: RequestError, request_id: Any = None, pipeline: Any = None,
                   request: Any = None) -> dict:
    """The JSON answer to a request that failed."""
    return {"requestId": request_id, "id": pipeline, "request": request, "status": "error",
            "error": err.to_json()}


class _SpokeContext:
    """The network context of one pipeline's spoke node (papers/002 §3.2.1)."""

    side = SPOKE

    def __init__(self, op: "SpokeKernel", network: int, n_hubs: int) -> None:
        self._op = op
        self.network = network
        self.index = op.index
        self.n_spokes = op.n_spokes
        self.n_hubs = n_hubs
        self.max_message_bytes = op.max_message_bytes
        self.max_response_params = op.limits["max_response_params"]
        self.pauses = 0  # calls this pipeline's stream waits on (then_sync)
        # this pipeline's records that arrived while it was paused: (training?, record)
        self.backlog: deque[tuple[bool, dict]] = deque()

    def send(self, dst_index: int, data: bytes) -> None:
        self._op.out.append((_HUBS, (self._op.hub_keys[dst_index], data)))
        self._op.acknowledge(self.network, dst_index)

    def pause_stream(self) -> None:
        self._op.paused += 1
        self.pauses += 1

    def resume_stream(self) -> None:
        # the kernel feeds the backlog once the message being handled is done
        self._op.paused -= 1
        self.pauses -= 1

    def emit(self, stream: str, value: dict) -> None:
        self._op.emit(stream, value)


_HUBS = "hubs"  # names of the kernel's outputs; None is the main output (predictions)


class SpokeKernel:
    """One spoke subtask's whole state and logic, plain Python (picklable, no Flink).

    Parameters
    ----------
    index, n_spokes, n_hubs : int
        This spoke's index and the job's spoke and hub parallelism.
    hub_keys : list[int]
        ``hub_keys[j]`` is the key that Flink routes to hub subtask j.
    limits : dict
        Service limits, defaults in :data:`DEFAULT_LIMITS`: ``max_request_bytes`` (larger
        requests: ``too_large``), ``max_pipelines`` (more: ``too_many_pipelines``),
        ``max_model_params`` (a learner hyperparameter or parameter above it, e.g. a
        10⁹-wide model: ``too_large``), ``max_message_bytes`` (larger envelopes are
        fragmented), ``max_response_params`` (larger models are summarized in Query).
    execution_mode : str
        PyFlink's ``python.execution-mode``; in ``"thread"`` mode learners with
        ``needs_own_interpreter`` (PyTorch) are refused with code ``unsupported``.

    Outputs accumulate in :attr:`out` as ``(stream, value)``: stream ``None`` (a
    prediction, JSON), ``"hubs"`` (``(hub_key, bytes)``), ``"responses"`` or
    ``"deadLetters"`` (JSON).
    """

    def __init__(self, index: int, n_spokes: int, n_hubs: int, hub_keys: list[int],
                 limits: dict | None = None, execution_mode: str = "thread") -> None:
        self.index = index
        self.n_spokes = n_spokes
        self.n_hubs = n_hubs
        self.hub_keys = hub_keys
        self.limits = {**DEFAULT_LIMITS, **(limits or {})}
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

    def acknowledge(self, network: int, hub: int, force: bool = False) -> None:
        """Tell hub ``hub`` how far pipeline ``network``'s channel from it got, when that
        changed since the last time (or ``force``): the hub forgets what was delivered
        and sends again what is overdue (:meth:`operators.hub.HubKernel.acknowledged`)."""
        node = self.nodes.get(network)
        if node is None:
            return
        expected = node._inbox.expected(hub)
        key = (network, hub)
        if not force and self.acked.get(key) == expected:
            return
        self.acked[key] = expected
        self.out.append((_HUBS, (self.hub_keys[hub], orjson.dumps(
            {"op": "ack", "spoke": self.index, "network": network, "expected": expected}))))

    def _nudge(self) -> None:
        """While waiting on hubs (stream paused, or a remote call not yet answered),
        acknowledge every channel at most once per :data:`NUDGE_EVERY_S` seconds: a hub
        answer lost on the way is sent again. Waiting without a pause counts too: an SSP
        spoke whose push is in flight keeps going, and at the end of a stream it gets
        nothing but Queries, so a lost answer would leave every spoke ahead of it waiting
        for good (seen on digits, staleness 2)."""
        now = time.monotonic()  # called for every record: the cheap test first
        if now - self.nudged < NUDGE_EVERY_S:
            return
        if not self.paused and not any(n.calls_in_flight for n in self.nodes.values()):
            return
        self.nudged = now
        for network, node in self.nodes.items():
            for j in range(node.ctx.n_hubs):
                self.acknowledge(network, j, force=True)

    def restored(self) -> None:
        """This kernel was just rebuilt from a checkpoint or savepoint: hold each hub's
        messages until it says which of them survived the restore (operators.feedback)."""
        self.restores += 1
        for network, node in self.nodes.items():
            for j in range(node.ctx.n_hubs):
                nonce = self.feedback.restored(network, j)
                self.out.append((_HUBS, (self.hub_keys[j], orjson.dumps(
                    {"op": "resync", "spoke": self.index, "network": network, "nonce": nonce}))))

    # -- outputs -------------------------------------------------------------------------
    def emit(self, stream: str, value: dict) -> None:
        self.out.append((stream, orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY).decode()))

    # -- data ----------------------------------------------------------------------------
    def on_data(self, line: str) -> None:
        """A training (``T``) or forecasting (``P``) line from the SQL source (one record
        per crossing, ``max_batch_delay_ms = 0``)."""
        self._nudge()
        self.data_records += 1
        self.data_batches += 1
        self._line(line[0] == _TRAIN, line[1:])

    def on_batch(self, data: bytes) -> None:
        """A batch of data records from ``omldm.RecordBatcher`` (``flink_jobs/java``):
        little-endian ``int32 n``, ``int32 length[n]``, ``uint8 training[n]``, then the n
        records' bytes, in the order they came. Each is handled as :meth:`on_data` would:
        a pipeline paused in the middle of the batch holds the rest in its backlog."""
        self._nudge()
        n = int.from_bytes(data[:4], "little")
        self.data_records += n
        self.data_batches += 1
        pos = 4 + 5 * n
        training = data[4 + 4 * n:pos]
        view = memoryview(data)
        for i, length in enumerate(struct.unpack_from(f"<{n}i", data, 4)):
            self._line(training[i] == 1, view[pos:pos + length])
            pos += length

    def _line(self, train: bool, raw: str | memoryview) -> None:
        """One Kafka record (a JSON object or array of them) to every pipeline.

        Each record goes to every pipeline; a pipeline whose stream is paused (waiting on
        its hubs, ``then_sync``) holds it in its own backlog, in order, and the other
        pipelines go on: one pipeline's synchronization never holds up another's.
        """
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            self._dead(raw if isinstance(raw, str) else bytes(raw).decode("utf-8", "replace"),
                       RecordRejected(f"not valid JSON: {exc}", "not_json"))
            return
        for rec in (obj if isinstance(obj, list) else (obj,)):
            if not isinstance(rec, dict) or "features" not in rec:
                self._dead(rec, RecordRejected(
                    f"a record is a JSON object with a 'features' list, got "
                    f"{'an object without features' if isinstance(rec, dict) else type(rec).__name__}",
                    "not_a_record"))
                continue
            if not self.nodes:
                self.records_without_pipeline += 1
                continue
            for node in self.nodes.values():
                ctx = node.ctx
                if ctx.pauses or ctx.backlog:
                    ctx.backlog.append((train, rec))
                else:
                    node.on_record(train, rec)

    def _run_backlogs(self) -> None:
        """Feed each resumed pipeline what it held, until it is done or pauses again."""
        for nid, node in list(self.nodes.items()):
            backlog = node.ctx.backlog
            while backlog and not node.ctx.pauses and nid in self.nodes:
                node.on_record(*backlog.popleft())

    def _dead(self, record: Any, exc: RecordRejected) -> None:
        """A Kafka record that no pipeline can use: dead-lettered once, counted by every
        pipeline (and in the service's ``badRecords``) under its reason."""
        for node in self.nodes.values():
            node.count_refused(exc.code)
        self.bad_records[exc.code] += 1
        self.emit("deadLetters", dead_letter(record, exc, None, self.index))

    # -- messages ------------------------------------------------------------------------
    def on_message(self, data: bytes) -> None:
        """A framed hub→spoke envelope (``psMessages``) or a JSON request (``requests``)."""
        if is_frame(data):
            self._frame(data)
        elif codec.is_envelope(data):
            self._envelope(data)
        else:
            self._request(data)
        self._run_backlogs()

    def _frame(self, data: bytes) -> None:
        (network, hub), bodies = self.feedback.accept(data)
        node = self.nodes.get(network)
        if node is None:
            self.bad_messages += 1 if bodies else 0  # e.g. in flight when deleted
            return
        copies = node._inbox.duplicates
        for body in bodies:
            self._envelope(body)
        if node._inbox.duplicates > copies and network in self.nodes:
            # the hub sent again what arrived but was never acknowledged (this spoke has
            # not sent since): acknowledge, or it keeps coming
            self.acknowledge(network, hub, force=True)

    def _envelope(self, data: bytes) -> None:
        try:
            network, *_, dst_side, dst_index = codec.peek(data)
            node = self.nodes.get(network)
            if node is None or dst_side != SPOKE or dst_index != self.index:
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
                          data[2:6].hex())

    def _reject(self, err: RequestError, req=None) -> None:
        self.requests_rejected += 1
        if self.index == 0:  # one spoke answers errors, so each request is answered once
            self.emit("responses", error_response(
                err, getattr(req, "request_id", getattr(err, "request_id", None)),
                getattr(req, "id", None), getattr(req, "request", None)))

    def _request(self, data: bytes) -> None:
        try:
            req = parse_request(data, max_bytes=self.limits["max_request_bytes"])
        except RequestError as err:
            self._reject(err)
            return
        try:
            getattr(self, "_" + req.request.lower())(req)
            self.requests_accepted += 1
        except RequestError as err:
            self._reject(err, req)

    def service(self) -> dict:
        """This spoke's service counters (summed over spokes in a Query response)."""
        return {"pipelines": len(self.nodes), "requestsAccepted": self.requests_accepted,
                "requestsRejected": self.requests_rejected, "badMessages": self.bad_messages,
                "handlerErrors": self.handler_errors, "restores": self.restores,
                "deadMessagesDropped": self.feedback.dead,
                "recordsWithoutPipeline": self.records_without_pipeline,
                "badRecords": sum(self.bad_records.values()),
                "dataRecords": self.data_records, "dataBatches": self.data_batches}

    def _create(self, req) -> None:
        if req.id in self.nodes:
            raise RequestError("exists", f"pipeline {req.id} exists", "id")
        if len(self.nodes) >= self.limits["max_pipelines"]:
            raise RequestError("too_many_pipelines", f"the service runs its maximum of "
                               f"{self.limits['max_pipelines']} pipelines", "id")
        _check_sizes(req, self.limits["max_model_params"])
        m = int(req.training_configuration["hubParallelism"])
        if m > self.n_hubs:
            raise RequestError("too_many_hubs", f"hubParallelism {m} > the job's {self.n_hubs} hubs",
                               "trainingConfiguration.hubParallelism")
        node = make_spoke(req)
        if self.execution_mode == "thread" and getattr(node.pipeline.learner,
                                                       "needs_own_interpreter", False):
            raise RequestError("unsupported", f"{req.learner['name']} needs PyFlink's process "
                               "mode (python.execution-mode: process; omldm --mode process): "
                               "its native bindings deadlock in an interpreter embedded in the "
                               "JVM", 
                               "learner.name")
        node.attach(_SpokeContext(self, req.id, m))
        self.nodes[req.id] = node
        self._control(m, {"op": "create", "spoke": self.index, "request": req.to_json()})

    def _delete(self, req) -> None:
        node = self._node(req)
        node.flush()
        del self.nodes[req.id]
        self.feedback.forget(req.id)
        self.paused -= node.ctx.pauses  # what it held goes with it
        node.ctx.pauses = 0
        self._control(node.ctx.n_hubs, {"op": "delete", "spoke": self.index,
                                        "request": req.to_json()})

    def _query(self, req) -> None:
        self._nudge()
        node = self._node(req)
        # a pending layout is decided first (learning.layout), so the held records count
        node.when_layout_settled(lambda: node.on_query(req.request_id, self.service()))

    def _update(self, req) -> None:
        node = self._node(req)
        _check_sizes(req, self.limits["max_model_params"])
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
        data = orjson.dumps({**msg, "n": self.controls})
        for j in range(n_hubs):
            self.out.append((_HUBS, (self.hub_keys[j], data)))


class SpokeFunction(KeyedCoProcessFunction):
    """The Flink host of a :class:`SpokeKernel`: input 1 is the data (key: this spoke),
    input 2 the messages (requests replicated to every spoke key; hub→spoke envelopes
    keyed by their destination spoke).

    Parameters
    ----------
    n_spokes, n_hubs, hub_keys, limits, execution_mode
        As for :class:`SpokeKernel`.
    to_hubs_tag, responses_tag, dead_letters_tag : OutputTag
        Side outputs.
    protocol_modules : tuple[str, ...]
        Modules registering user protocols, imported in ``open``.
    persist : bool
        Hand the kernel to keyed state after every element (needed for checkpoints and
        savepoints; free in process mode, a serialization per element in thread mode).
    metrics : bool
        Register the Flink metrics of :mod:`operators.metrics`.
    """

    def __init__(self, n_spokes: int, n_hubs: int, hub_keys: list[int], to_hubs_tag,
                 responses_tag, dead_letters_tag, limits: dict | None = None,
                 protocol_modules: tuple[str, ...] = (), execution_mode: str = "thread",
                 persist: bool = True, metrics: bool = True) -> None:
        self.n_spokes = n_spokes
        self.n_hubs = n_hubs
        self.hub_keys = hub_keys
        self.to_hubs_tag = to_hubs_tag
        self.responses_tag = responses_tag
        self.dead_letters_tag = dead_letters_tag
        self.limits = limits
        self.protocol_modules = protocol_modules
        self.execution_mode = execution_mode
        self.persist = persist
        self.metrics_on = metrics

    def open(self, runtime_context) -> None:
        import_protocols(self.protocol_modules)
        self.index = subtask_index(runtime_context)
        self.metrics = OperatorMetrics(runtime_context, SPOKE_METRICS) if self.metrics_on else None
        self.state = runtime_context.get_state(
            ValueStateDescriptor("spoke", Types.PICKLED_BYTE_ARRAY()))
        self.kernel: SpokeKernel | None = None
        self.tags = {_HUBS: self.to_hubs_tag, "responses": self.responses_tag,
                     "deadLetters": self.dead_letters_tag}

    def _kernel(self) -> SpokeKernel:
        kernel = self.kernel
        if kernel is None:
            saved = self.state.value() if self.persist else None
            kernel = saved.kernel if saved is not None else None
            if kernel is None:
                kernel = SpokeKernel(self.index, self.n_spokes, self.n_hubs, self.hub_keys,
                                     self.limits, self.execution_mode)
            else:
                kernel.restored()
                log.info("spoke %d restored: %d pipeline(s), restore %d", self.index,
                         len(kernel.nodes), kernel.restores)
            self.kernel = kernel
            self.snapshot = Snapshot(kernel)
        return kernel

    def _emit(self, kernel: SpokeKernel):
        if self.persist:
            self.state.update(self.snapshot)
        if self.metrics is not None:
            self.metrics.refresh(kernel)
        if kernel.out:
            out, kernel.out = kernel.out, []
            tags = self.tags
            for stream, value in out:
                yield value if stream is None else (tags[stream], value)

    def process_element1(self, value, ctx):
        kernel = self._kernel()
        if isinstance(value, str):
            kernel.on_data(value)
        else:
            kernel.on_batch(bytes(value))
        yield from self._emit(kernel)

    def process_element2(self, value, ctx):
        kernel = self._kernel()
        kernel.on_message(bytes(value))
        yield from self._emit(kernel)
