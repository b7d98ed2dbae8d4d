"""Nodes, proxies and the dispatch of calls and answers (papers/002 §3.1.1–3.1.3, §3.2.1).

A protocol author subclasses :class:`Node`, marks remote methods with
:func:`~middleware.remote.remote`, and names the remote interface of the other side in
the class attribute ``peer``. Once attached to a kernel's :class:`NetworkContext`, the node
has ``self.peers[j]`` (a proxy of node ``j`` of the other side) and ``self.broadcast`` (a
proxy of all of them)::

    self.peers[0].push(delta).then(self.on_global)        # two-way call, one node
    self.broadcast.pull().then_sync(self.on_shard)        # two-way broadcast, paused stream
    self.peers[1].report(stats)                           # one-way: @remote(oneway=True)

It also has ``self.siblings[j]``, a proxy of node ``j`` of its *own* side (``None`` at its
own index), and ``self.sibling_broadcast``, a proxy of every other node of its side (e.g.
spokes exchanging updates directly, papers/000 Algorithm 1); their remote interface is the
node's own class. Sibling channels are channels of their own: separate sequence numbers,
FIFO order, de-duplication and fragmentation, the same promises and ``then_sync``::

    self.sibling_broadcast.apply(delta, clock)            # one-way, to every other spoke

A node never blocks, starts no threads and shares no state with other nodes.
"""

from __future__ import annotations

import logging
import traceback
from collections import Counter
from typing import Any, ClassVar, Protocol

import numpy as np

from middleware import codec
from middleware.channel import Inbox, Outbox
from middleware.envelope import HUB, SPOKE, Envelope, Kind, side_name
from middleware.errors import (CodecError, PromiseError, RemoteCallError, RemoteInterfaceError,
                               remote_error)
from middleware.promise import BroadcastPromise, Call, Promise
from middleware.remote import remote_methods

__all__ = ["NetworkContext", "Node", "Proxy", "BroadcastProxy", "NodeStats",
           "DEFAULT_MAX_MESSAGE_BYTES"]

#: Default largest envelope (bytes) sent whole: below Kafka's 1 MB default message size.
DEFAULT_MAX_MESSAGE_BYTES = 512 * 1024
#: Room for a fragment's own header and JSON meta (bytes).
FRAGMENT_OVERHEAD = 256

log = logging.getLogger(__name__)


class NetworkContext(Protocol):
    """What a kernel gives each node (papers/002 §3.2.1): everything a node may use of it.

    Attributes
    ----------
    network : int
        The network (pipeline) id.
    side : int
        :data:`~middleware.envelope.SPOKE` or :data:`~middleware.envelope.HUB`.
    index : int
        This node's index within its side.
    n_spokes, n_hubs : int
        Network size.
    max_message_bytes : int
        Envelopes larger than this (bytes) travel as fragments
        (:data:`DEFAULT_MAX_MESSAGE_BYTES` unless the service says otherwise).
    max_response_params : int
        Models with more parameters are summarized in a Query's answer.
    pauses : int
        Calls this node's stream waits on (``then_sync``); always 0 on hubs.
    backlog : collections.abc.Sized
        Stream records held while the stream is paused, in order (a deque of
        ``(training?, record)`` on spokes, where a record may still be its Kafka record's
        bytes, :class:`operators.spoke_kernel.SpokeContext`; empty on hubs).
    max_request_bytes : int or None
        The largest request the service takes (bytes; ``JobConfig.max_request_bytes``):
        what an exported model must fit in to come back as a Create. None: no limit.
    prediction_scores : bool
        Whether predictions carry class probabilities (``JobConfig.prediction_scores``);
        False on hubs, which predict nothing.
    max_model_params : int or None
        The largest model the service builds (parameters; ``JobConfig.max_model_params``):
        spokes refuse records that would grow one past it (a width while the layout is
        agreed from the stream, a new class). None: no limit (hubs; old snapshots).
    subtask : int or None
        The Flink subtask hosting the node; None where its host does not say (the
        in-process kernel's spokes).
    reraise : bool
        Whether a failure the node catches to keep the job going (a protocol's, counted)
        should propagate after all: the host's choice (the in-process kernel's, for tests
        and experiments), False in the job.
    """

    network: int
    side: int
    index: int
    n_spokes: int
    n_hubs: int
    max_message_bytes: int
    max_response_params: int
    pauses: int
    backlog: Any
    max_request_bytes: int | None
    max_model_params: int | None
    prediction_scores: bool
    subtask: int | None
    reraise: bool

    def send(self, dst_index: int, data: bytes) -> None:
        """Ship encoded envelope bytes to node ``dst_index`` of the other side.

        Raises ``ValueError`` when there is no such node."""

    def send_sibling(self, dst_index: int, data: bytes) -> None:
        """Ship encoded envelope bytes to node ``dst_index`` of this node's own side.

        Raises ``ValueError`` when there is no such node, or ``dst_index`` is this node."""

    def pause_stream(self) -> None:
        """Stop feeding stream records to this (spoke) node; buffer them in order."""

    def resume_stream(self) -> None:
        """Feed the buffered records, then the live stream again."""

    def emit(self, stream: str | None, value: dict) -> None:
        """Send ``value`` (JSON-like) to one of the job's outputs: ``None`` (predictions),
        ``"responses"`` or ``"deadLetters"``."""

    def emit_all(self, stream: str | None, values: list[dict]) -> None:
        """:meth:`emit` each of ``values``, in order, in one call."""

    def crossing_ms(self) -> tuple[float, float] | None:
        """p50 and p95 wall milliseconds of the node's last data crossings (None on hubs,
        and before the first)."""

    def paused_for(self) -> float | None:
        """Seconds since the node's stream paused (None while it runs, and on hubs)."""


class NodeStats:
    """Messages and bytes sent and received by this node, per envelope kind.

    Attributes
    ----------
    sent_messages, sent_bytes, received_messages, received_bytes : collections.Counter
        Keyed by kind name (``"ONEWAY"``, ``"REQUEST"``, ``"RESPONSE"``, ``"ERROR"``).
    sent_by_method, sent_bytes_by_method : collections.Counter
        Envelopes and bytes sent per remote method (answers count under the method they
        answer; fragments under the method of the envelope they carry).
    sibling_sent_messages, sibling_sent_bytes, sibling_received_messages, sibling_received_bytes : int
        The part of the above that went to or came from nodes of this node's own side
        (sibling channels), all kinds together.
    duplicates : int
        Envelopes dropped as already delivered (every channel).
    """

    #: class defaults: stats restored from a snapshot taken before sibling channels existed
    sibling_sent_messages = sibling_sent_bytes = 0
    sibling_received_messages = sibling_received_bytes = 0

    def __init__(self) -> None:
        self.sent_messages: Counter = Counter()
        self.sent_bytes: Counter = Counter()
        self.sent_by_method: Counter = Counter()
        self.sent_bytes_by_method: Counter = Counter()
        self.received_messages: Counter = Counter()
        self.received_bytes: Counter = Counter()
        self.sibling_sent_messages = self.sibling_sent_bytes = 0
        self.sibling_received_messages = self.sibling_received_bytes = 0
        self.duplicates = 0

    def to_json(self) -> dict:
        return {
            "messages_sent": sum(self.sent_messages.values()),
            "bytes_sent": sum(self.sent_bytes.values()),
            "messages_received": sum(self.received_messages.values()),
            "bytes_received": sum(self.received_bytes.values()),
            "duplicates_dropped": self.duplicates,
            "sibling_messages_sent": self.sibling_sent_messages,
            "sibling_bytes_sent": self.sibling_sent_bytes,
            "sibling_messages_received": self.sibling_received_messages,
            "sibling_bytes_received": self.sibling_received_bytes,
            "by_kind": {
                "sent_messages": dict(self.sent_messages), "sent_bytes": dict(self.sent_bytes),
                "received_messages": dict(self.received_messages),
                "received_bytes": dict(self.received_bytes),
            },
        }


class Node:
    """Base of spokes and hubs. Subclasses set ``peer`` to the other side's node class,
    and ``talks_to_siblings`` when they call nodes of their own side (TensAIR's replicas):
    a kernel then keeps those channels in step even before any traffic (the spoke kernel
    acknowledges them at every Query)."""

    peer: ClassVar[type | None] = None
    talks_to_siblings: ClassVar[bool] = False

    def __init__(self) -> None:
        self.ctx: NetworkContext | None = None
        self.peers: list[Proxy] = []
        self.broadcast: BroadcastProxy | None = None
        self.siblings: list[Proxy | None] = []
        self.sibling_broadcast: BroadcastProxy | None = None
        self.stats = NodeStats()
        self._outbox = Outbox()
        self._inbox = Inbox()
        self._sibling_outbox = Outbox()  # channels to / from nodes of this node's own side
        self._sibling_inbox = Inbox()
        self._calls: dict[int, Call] = {}
        self._next_call = 1
        self._fragments: dict[int, list[bytes]] = {}
        self._rounds: dict[str, BroadcastPromise] = {}  # method -> latest broadcast promise

    # -- kernel-facing -------------------------------------------------------------------
    def attach(self, ctx: NetworkContext) -> None:
        """Bind this node to its kernel context and build its proxies."""
        if self.peer is None:
            raise RemoteInterfaceError(f"{type(self).__name__}.peer is not set")
        self.ctx = ctx
        n = ctx.n_hubs if ctx.side == SPOKE else ctx.n_spokes
        self.peers = [Proxy(self, j) for j in range(n)]
        self.broadcast = BroadcastProxy(self)
        own = ctx.n_spokes if ctx.side == SPOKE else ctx.n_hubs
        self.siblings = [None if j == ctx.index else Proxy(self, j, sibling=True)
                         for j in range(own)]
        self.sibling_broadcast = BroadcastProxy(self, sibling=True)

    def start_channels(self, base: int) -> None:
        """Number every channel of this node, both ways, from ``base`` instead of 0; call
        it after :meth:`attach`, before any traffic. The kernels do for a pipeline created
        again under the id of one deleted before (on every node of it alike): envelopes of
        the deleted one still in flight are numbered below ``base``, so the new nodes drop
        them as duplicates instead of taking them for their own (before, they filled the
        new channels' sequence numbers: a BSP pipeline stopped with its records held)."""
        self._outbox, self._inbox = Outbox(base), Inbox(base)
        self._sibling_outbox, self._sibling_inbox = Outbox(base), Inbox(base)

    @property
    def name(self) -> str:
        return f"{side_name(self.ctx.side)} {self.ctx.index}" if self.ctx else type(self).__name__

    @property
    def calls_in_flight(self) -> int:
        """Remote calls of this node still waiting for their answers."""
        return len(self._calls)

    @property
    def waiting_on(self) -> list[str]:
        """The methods of the calls the stream waits on (``then_sync``), sorted."""
        return sorted({c.method for c in self._calls.values() if c.pausing})

    @property
    def n_peers(self) -> int:
        return len(self.peers)

    def __setstate__(self, state: dict) -> None:
        """Unpickling (a kernel restored from Flink state): a node pickled before sibling
        channels existed gets empty ones (it had no sibling traffic)."""
        self.__dict__.update(state)
        if "_sibling_outbox" not in state:
            self._sibling_outbox, self._sibling_inbox = Outbox(), Inbox()
            self.siblings, self.sibling_broadcast = [], None

    @property
    def n_siblings(self) -> int:
        """The other nodes of this node's own side."""
        return max(0, len(self.siblings) - 1)

    def _sibling_indices(self) -> list[int]:
        return [j for j, proxy in enumerate(self.siblings) if proxy is not None]

    def expected_from(self, src: int) -> int:
        """The sequence number this node waits for next on the channel from node ``src``
        of the other side: everything numbered below it was delivered."""
        return self._inbox.expected(src)

    def next_seq_to(self, dst: int) -> int:
        """The sequence number the next envelope to node ``dst`` will carry."""
        return self._outbox.peek(dst)

    def expected_from_sibling(self, src: int) -> int:
        """As :meth:`expected_from`, on the channel from node ``src`` of this node's side."""
        return self._sibling_inbox.expected(src)

    def next_seq_to_sibling(self, dst: int) -> int:
        """As :meth:`next_seq_to`, on the channel to node ``dst`` of this node's side."""
        return self._sibling_outbox.peek(dst)

    def deliver(self, data: bytes) -> None:
        """Take one encoded envelope from the kernel; dispatch it and any it unblocks.

        Raises
        ------
        CodecError
            When ``data`` is not a valid envelope (the kernel counts and drops it).
        Exception
            The first exception raised by a ``then``/``on_error`` callback, after every
            envelope this one unblocked has been dispatched (none is lost).
        """
        env = codec.decode(data)
        stats = self.stats
        stats.received_messages[env.kind.name] += 1
        stats.received_bytes[env.kind.name] += len(data)
        if env.src_side == self.ctx.side:
            stats.sibling_received_messages += 1
            stats.sibling_received_bytes += len(data)
            ready = self._sibling_inbox.accept(env)
        else:
            ready = self._inbox.accept(env)
        stats.duplicates = self._inbox.duplicates + self._sibling_inbox.duplicates
        first_error: Exception | None = None
        for e in ready:
            try:
                self._dispatch(e)
            except Exception as exc:  # keep dispatching: these envelopes left the inbox
                log.exception("%s: handling %s of %s failed", self.name, e.kind.name, e.method)
                first_error = first_error or exc
        if first_error is not None:
            raise first_error

    # -- sending -------------------------------------------------------------------------
    def _send(self, dst: int, kind: Kind, method: str, call_id: int, payload: Any,
              sibling: bool = False) -> None:
        """Encode and ship one envelope to node ``dst`` of the other side, or of this
        node's own side with ``sibling``, fragmented when larger than the limit. A
        RESPONSE goes without its method's name: its ``call_id`` names the call, and the
        name was most of the bytes of a small answer (FDA's ``increment_waiting``: 17 of
        56)."""
        ctx = self.ctx
        outbox = self._sibling_outbox if sibling else self._outbox
        dst_side = ctx.side if sibling else (HUB if ctx.side == SPOKE else SPOKE)
        env = Envelope(ctx.network, ctx.side, ctx.index, dst_side, dst, outbox.peek(dst),
                       call_id, "" if kind is Kind.RESPONSE else method, kind, payload)
        data = codec.encode(env)  # may raise CodecError: take the sequence number only after
        limit = ctx.max_message_bytes
        if len(data) <= limit:
            outbox.next_seq(dst)
            self._ship(dst, kind, method, data, sibling)
            return
        # fragments take consecutive sequence numbers on the channel, so the receiver's
        # FIFO reordering and de-duplication put them back in order before reassembly
        step = max(1, limit - FRAGMENT_OVERHEAD)
        pieces = [np.frombuffer(data, np.uint8, count=min(step, len(data) - i), offset=i)
                  for i in range(0, len(data), step)]
        for i, piece in enumerate(pieces):
            frag = Envelope(ctx.network, ctx.side, ctx.index, env.dst_side, dst,
                            outbox.next_seq(dst), call_id, method, Kind.FRAGMENT,
                            [i, len(pieces), piece])
            self._ship(dst, Kind.FRAGMENT, method, codec.encode(frag), sibling)

    def _ship(self, dst: int, kind: Kind, method: str, data: bytes, sibling: bool) -> None:
        stats = self.stats
        stats.sent_messages[kind.name] += 1
        stats.sent_bytes[kind.name] += len(data)
        stats.sent_by_method[method] += 1
        stats.sent_bytes_by_method[method] += len(data)
        if sibling:
            stats.sibling_sent_messages += 1
            stats.sibling_sent_bytes += len(data)
            self.ctx.send_sibling(dst, data)
        else:
            self.ctx.send(dst, data)

    def _reassemble(self, env: Envelope) -> Envelope | None:
        """Collect a fragment; the whole envelope once its last fragment arrived."""
        index, count, piece = env.payload
        key = env.src_index if env.src_side != self.ctx.side else (env.src_side, env.src_index)
        parts = self._fragments.setdefault(key, [])
        if index != len(parts):
            self._fragments.pop(key, None)
            raise CodecError(f"fragment {index} of {count} from {env.src_index} out of order")
        parts.append(piece.tobytes())
        if index + 1 < count:
            return None
        del self._fragments[key]
        return codec.decode(b"".join(parts))

    def _call(self, dsts: list[int], method: str, args: tuple, kwargs: dict,
              sibling: bool = False) -> Call | None:
        iface = type(self) if sibling else self.peer
        side = self.ctx.side if sibling else 1 - self.ctx.side
        entry = remote_methods(iface).get(method)
        if entry is None:
            raise RemoteInterfaceError(
                f"{iface.__name__} ({side_name(side)}) has no remote method "
                f"{method!r}; remote methods: {sorted(remote_methods(iface))}")
        sig, oneway = entry
        try:
            sig.bind(None, *args, **kwargs)
        except TypeError as exc:
            raise RemoteInterfaceError(
                f"bad arguments for {iface.__name__}.{method}() called from {self.name}: "
                f"{exc}") from None
        payload = [list(args), kwargs]
        if oneway:
            for dst in dsts:
                self._send(dst, Kind.ONEWAY, method, 0, payload, sibling)
            return None
        call_id = self._next_call
        self._next_call += 1
        is_spoke = self.ctx.side == SPOKE
        call = Call(method, len(dsts), self.ctx.pause_stream if is_spoke else None,
                    self.ctx.resume_stream if is_spoke else None)
        self._calls[call_id] = call
        try:
            for dst in dsts:
                self._send(dst, Kind.REQUEST, method, call_id, payload, sibling)
        except CodecError:
            del self._calls[call_id]
            raise
        return call

    # -- receiving -----------------------------------------------------------------------
    def _dispatch(self, env: Envelope) -> None:
        if env.kind == Kind.FRAGMENT:
            env = self._reassemble(env)
            if env is None:
                return
        if env.kind in (Kind.RESPONSE, Kind.ERROR):
            call = self._calls.get(env.call_id)
            if call is None:
                log.warning("%s: answer to unknown call %d (%s)", self.name, env.call_id,
                            env.method or env.kind.name)
                return
            if env.kind == Kind.RESPONSE:
                call._answer(True, env.payload)
            else:
                p = env.payload or {}
                call._answer(False, remote_error(
                    f"{side_name(env.src_side)} {env.src_index}", env.method, p.get("type", "?"),
                    p.get("message", ""), p.get("traceback", "")))
            if call.done:
                del self._calls[env.call_id]
            return
        sibling = env.src_side == self.ctx.side
        fn = getattr(self, env.method, None) if env.method in remote_methods(type(self)) else None
        try:
            if fn is None:
                raise RemoteInterfaceError(f"{type(self).__name__} has no remote method {env.method!r}")
            args, kwargs = env.payload
            result = fn(*args, **kwargs)
        except Exception as exc:  # the callee's failure travels back to the caller
            if env.kind == Kind.REQUEST:
                self._send(env.src_index, Kind.ERROR, env.method, env.call_id, {
                    "type": type(exc).__name__, "message": str(exc),
                    "traceback": traceback.format_exc()}, sibling)
            else:
                log.exception("%s: one-way call %s failed", self.name, env.method)
            return
        if env.kind != Kind.REQUEST:
            return
        if isinstance(result, BroadcastPromise):
            result = self._join_round(env.method, result, sibling)
            if result._sent or env.src_index in result.bound:
                self._answer(env, True, PromiseError(
                    f"{env.method}() returned a broadcast promise already "
                    f"{'answered' if result._sent else 'bound to a call from this node'}"))
                return
            result.bound[env.src_index] = env.call_id
            result._on_settle(lambda p: self._answer_broadcast(p, env.method, sibling))
        elif isinstance(result, Promise):
            result._on_settle(lambda p, e=env: self._answer(e, p.failed, p.value))
        else:
            self._answer(env, False, result)

    def _join_round(self, method: str, p: BroadcastPromise, sibling: bool) -> BroadcastPromise:
        """A new, already fulfilled broadcast promise (``return BroadcastPromise.fulfilled()``,
        the barrier of papers/002 §3.1.3) joins the round of ``method`` still gathering
        callers (of the other side, or with ``sibling`` of this node's own side); any other
        broadcast promise is taken as it is."""
        key = (method, True) if sibling else method
        open_round = self._rounds.get(key)
        if (open_round is not None and open_round is not p and not p.bound and p.done
                and not open_round._sent):
            return open_round
        self._rounds[key] = p
        return p

    def _answer(self, env: Envelope, failed: bool, value: Any) -> None:
        sibling = env.src_side == self.ctx.side
        if not failed:
            try:
                self._send(env.src_index, Kind.RESPONSE, env.method, env.call_id, value, sibling)
                return
            except CodecError as exc:  # the caller gets the failure instead of silence
                failed, value = True, exc
        self._send(env.src_index, Kind.ERROR, env.method, env.call_id, _error_payload(value),
                   sibling)

    def _answer_broadcast(self, p: BroadcastPromise, method: str, sibling: bool = False) -> None:
        if len(p.bound) < (self.n_siblings if sibling else self.n_peers) or p._sent:
            return
        p._sent = True
        kind, value = Kind.RESPONSE, p.value
        if p.failed:
            kind, value = Kind.ERROR, _error_payload(p.value)
        for src in sorted(p.bound):
            try:
                self._send(src, kind, method, p.bound[src], value, sibling)
            except CodecError as exc:  # same value for all: every caller gets the failure
                if kind == Kind.ERROR:
                    raise
                kind, value = Kind.ERROR, _error_payload(exc)
                self._send(src, kind, method, p.bound[src], value, sibling)


def _error_payload(exc: BaseException) -> dict:
    """What an ERROR envelope carries: the exception's type, message and traceback text."""
    tb = "".join(traceback.format_exception(exc)) if exc.__traceback__ else ""
    return {"type": type(exc).__name__, "message": str(exc), "traceback": tb}


class Proxy:
    """Stands for node ``index`` of the other side (of the node's own side with
    ``sibling``); attribute access gives its remote methods, checked against the remote
    interface (the other side's ``peer`` class, or the node's own class) on the caller's
    side."""

    def __init__(self, node: Node, index: int, sibling: bool = False) -> None:
        self._node = node
        self._index = index
        self._sibling = sibling

    def __getattr__(self, method: str):
        if method.startswith("_"):
            raise AttributeError(method)
        node, dst, sibling = self._node, [self._index], self._sibling
        return lambda *args, **kwargs: node._call(dst, method, args, kwargs, sibling)


class BroadcastProxy(Proxy):
    """Stands for every node of the other side (with ``sibling``: every other node of the
    node's own side); callbacks run once per answer."""

    def __init__(self, node: Node, sibling: bool = False) -> None:
        super().__init__(node, -1, sibling)

    def __getattr__(self, method: str):
        if method.startswith("_"):
            raise AttributeError(method)
        node = self._node
        if self._sibling:
            return lambda *args, **kwargs: node._call(node._sibling_indices(), method, args,
                                                      kwargs, True)
        return lambda *args, **kwargs: node._call(list(range(node.n_peers)), method, args, kwargs)
