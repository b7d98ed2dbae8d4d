"""The in-process kernel: the job's own spoke and hub kernels in one Python process, with an
in-memory transport standing in for Flink and Kafka (papers/002 §3.2.1).

:class:`LocalNetwork` hosts one :class:`~operators.spoke_kernel.SpokeKernel` per spoke and
one :class:`~operators.hub_kernel.HubKernel` per hub, the very objects the Flink operators
host (:mod:`operators.spoke`, :mod:`operators.hub`), and carries their outputs to each
other as the job does: spoke→hub envelopes and kernel controls to the hub kernels,
hub→spoke frames and spoke→spoke sibling frames with their acknowledgements and resyncs
(the ``psMessages`` loop) to the spoke kernels;
predictions, responses
and dead letters to :attr:`LocalNetwork.outputs`. So pausing, backlogs, frames,
acknowledgements, lifecycle requests and service policy are the job's code; what differs
is only Flink (threads, state, checkpoints) and Kafka (topics, partitions, loss).

Pipelines come two ways: by request (:meth:`LocalNetwork.request`, then records with
:meth:`LocalNetwork.records` — the job's data path, JSON bytes in batches), or as nodes
built by the caller (``LocalNetwork(spokes, hubs)``: any :class:`middleware.node.Node`
classes, fed with :meth:`LocalNetwork.feed`; the middleware's and protocols' tests).

The transport can behave like Kafka at its worst: ``shuffle=True`` delivers queued
messages in a seeded random order (across and within channels) and ``duplicate=p``
delivers a message again later with probability ``p`` (at-least-once). Nodes still see each
channel FIFO and exactly once: that is the middleware's job (:mod:`middleware.channel`).
It loses nothing, so the kernels' clocks stand still: nothing is sent again for being
overdue, and runs are reproducible.

Examples
--------
>>> from middleware import Node, remote
>>> class Hub(Node):
...     total = 0
...     @remote
...     def push(self, x):
...         self.total += x
...         return self.total
>>> class Spoke(Node):
...     peer = Hub
>>> Hub.peer = Spoke
>>> net = LocalNetwork([Spoke(), Spoke()], [Hub()])
>>> answers = []
>>> for spoke, x in zip(net.spokes, [1, 2]):
...     _ = spoke.peers[0].push(x).then(answers.append)
>>> net.run()
4
>>> answers
[1, 3]
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any, Callable, Iterable

import orjson

from middleware import codec
from middleware.codec import Wire
from middleware.envelope import HUB, SPOKE
from middleware.node import Node
from operators.hub_kernel import HubKernel
from operators.sharding import Sharder, make_sharder
from operators.spoke_kernel import HUBS, SPOKES, SpokeKernel

__all__ = ["LocalNetwork"]


def _still() -> float:
    """The clock of a transport that loses nothing: it stands still."""
    return 0.0


class _Sink(list):
    """A kernel's ``out``: each output goes to the network at once, in the order of all
    kernels' outputs (a host would take them after each call)."""

    def __init__(self, net: "LocalNetwork", side: int) -> None:
        super().__init__()
        self._net = net
        self._side = side

    def append(self, item: tuple[Any, Any]) -> None:
        stream, value = item
        net = self._net
        if self._side == SPOKE:
            if stream == HUBS:
                key, data = value
                net._put(HUB, key, data)
                return
            if stream == SPOKES:  # a sibling frame (psMessages in the job)
                net._put(SPOKE, codec.frame_destination(value), value)
                return
        elif stream is None:  # a hub's frame for psMessages
            net._put(SPOKE, codec.frame_destination(value), value)
            return
        elif stream == "weights":  # weights records stay bytes (operators.weights)
            net.outputs["weights"].append(value)
            return
        net.outputs["predictions" if stream is None else stream].append(orjson.loads(value))

    def extend(self, items) -> None:
        for item in items:
            self.append(item)


class LocalNetwork:
    """The job's spoke and hub kernels over an in-memory transport.

    Parameters
    ----------
    spokes, hubs : list[Node], optional
        Nodes of one network, built by the caller, hosted by the kernels as pipeline
        ``network`` (the kernels attach them). Without them, give ``n_spokes`` and
        ``n_hubs`` and create pipelines with :meth:`request`.
    network : int
        The network (pipeline) id of ``spokes``/``hubs``; :attr:`spokes` and
        :attr:`hubs` show that pipeline's nodes.
    n_spokes, n_hubs : int, optional
        The job's parallelism when no nodes are given.
    shuffle : bool
        Deliver queued messages in random order instead of first-in first-out.
    duplicate : float
        Probability, in [0, 1), that a delivered message is queued again to be delivered
        a second time later.
    seed : int
        Seed of the random order and duplication.
    limits : dict, optional
        Service limits (:data:`operators.service.DEFAULT_LIMITS`).
    reraise : bool
        Let a node's failure (a handler or callback raising) propagate out of
        :meth:`run` after the kernel counted it (the job logs it and goes on).
    sharding : str or Sharder
        How :meth:`stream` deals records to spokes: a strategy of
        :data:`operators.sharding.SHARDINGS` (built with ``seed`` and
        ``sharding_options``: ``warmup``, ``clusters``, ``refresh``), or a sharder.
    sharding_options : dict, optional
        Options of :func:`operators.sharding.make_sharder`.

    Attributes
    ----------
    spoke_kernels, hub_kernels : list
        The kernels (:class:`SpokeKernel`, :class:`HubKernel`).
    outputs : collections.defaultdict[str, list]
        What the kernels sent out, decoded from JSON, per stream: ``"predictions"``,
        ``"responses"``, ``"deadLetters"``; and ``"weights"``: the weights records (bytes,
        :mod:`operators.weights`) when ``limits["weights_every_ms"]`` is set.
    sharder : operators.sharding.Sharder
        The sharding of :meth:`stream` (its ``stats()`` count what it dealt).
    delivered : int
        Node messages handed to kernels (envelopes, frames carrying one, and anything
        else a node sent), duplicates included; the kernels' own bookkeeping
        (acknowledgements, lifecycle controls, resync answers) is not counted.

    Raises
    ------
    ValueError
        For ``duplicate`` outside [0, 1), no nodes and no ``n_spokes``/``n_hubs``, or an
        unknown sharding.
    middleware.errors.RemoteInterfaceError
        When a node cannot attach (its class has no ``peer``).
    """

    def __init__(self, spokes: list[Node] | None = None, hubs: list[Node] | None = None,
                 network: int = 0, *, n_spokes: int | None = None, n_hubs: int | None = None,
                 shuffle: bool = False, duplicate: float = 0.0, seed: int = 0,
                 limits: dict | None = None, reraise: bool = True,
                 sharding: str | Sharder = "random", sharding_options: dict | None = None) -> None:
        if not 0.0 <= duplicate < 1.0:
            raise ValueError(f"duplicate must be in [0, 1), got {duplicate}")
        k = len(spokes) if spokes else n_spokes
        m = len(hubs) if hubs else n_hubs
        if not k or not m:
            raise ValueError("give spokes and hubs, or n_spokes and n_hubs")
        self.network = network
        self.sharder = sharding if isinstance(sharding, Sharder) else make_sharder(
            sharding, k, seed=seed, **(sharding_options or {}))
        self.shuffle = shuffle
        self.duplicate = duplicate
        self.seed = seed
        self.outputs: defaultdict[str, list] = defaultdict(list)
        self.delivered = 0
        self._rng = random.Random(seed)
        self._queue: list[tuple[int, int, bytes, bool]] = []  # (side, index, bytes, counted?)
        self._head = 0  # FIFO read position in _queue when not shuffling
        self._counted = 0  # counted messages queued and not yet delivered
        self.spoke_kernels = [SpokeKernel(i, k, m, list(range(m)), limits, "process")
                              for i in range(k)]
        self.hub_kernels = [HubKernel(j, k, limits) for j in range(m)]
        for kernel in self.spoke_kernels:
            kernel.out, kernel.clock, kernel.reraise = _Sink(self, SPOKE), _still, reraise
        for kernel in self.hub_kernels:
            kernel.out, kernel.clock, kernel.reraise = _Sink(self, HUB), _still, reraise
        for i, node in enumerate(spokes or ()):
            self.spoke_kernels[i].adopt(network, node, m)
        for j, node in enumerate(hubs or ()):
            self.hub_kernels[j].adopt(network, node, m)

    # -- the nodes -----------------------------------------------------------------------
    @property
    def spokes(self) -> list:
        """The spoke nodes of pipeline :attr:`network`, by spoke index."""
        return [kernel.nodes[self.network] for kernel in self.spoke_kernels]

    @property
    def hubs(self) -> list:
        """The hub nodes of pipeline :attr:`network`, by hub index (those it has)."""
        return [kernel.nodes[self.network] for kernel in self.hub_kernels
                if self.network in kernel.nodes]

    @property
    def pending(self) -> int:
        """Node messages queued and not yet delivered (as :attr:`delivered` counts)."""
        return self._counted

    @property
    def dropped(self) -> int:
        """Messages the kernels refused: not an envelope, or for no pipeline they host."""
        return (sum(k.bad_messages for k in self.spoke_kernels)
                + sum(k.dropped for k in self.hub_kernels))

    def paused(self, spoke_index: int) -> bool:
        """True while a pipeline on spoke ``spoke_index`` waits on a ``then_sync`` answer."""
        return self.spoke_kernels[spoke_index].paused > 0

    # -- input ---------------------------------------------------------------------------
    def feed(self, spoke_index: int, fn: Callable[[], Any]) -> None:
        """Run ``fn()`` (a stream record for pipeline :attr:`network` on that spoke) now,
        or after the pipeline's stream resumes, in feeding order, when it is paused."""
        self.spoke_kernels[spoke_index].feed(self.network, fn)

    def request(self, req: dict | str | bytes) -> None:
        """A control request (JSON, as on the ``requests`` topic) to every spoke, then
        :meth:`run` until quiet; the answer lands in ``outputs["responses"]``."""
        data = req if isinstance(req, bytes) else (
            req.encode() if isinstance(req, str) else orjson.dumps(req))
        for kernel in self.spoke_kernels:
            kernel.on_message(data)
        self.run()

    def query(self, request_id: str = "q") -> dict:
        """Ask every spoke node of pipeline :attr:`network` for a Query (as a Query
        request reaches them), :meth:`run` until quiet and return the one response it
        caused, decoded.

        Raises
        ------
        AssertionError
            When the Query caused no response or more than one.
        """
        responses = self.outputs["responses"]
        before = len(responses)
        for node in self.spokes:
            node.on_query(request_id)
        self.run()
        assert len(responses) == before + 1, responses[before:]
        return responses[-1]

    def lull(self) -> None:
        """Every spoke's lull timer fires once (the job's ``JobConfig.idle_after_ms``:
        :meth:`SpokeKernel.on_lull`), then :meth:`run`. A kernel acts from the second
        call with no data record in between: call it twice after a stream ends."""
        for kernel in self.spoke_kernels:
            kernel.on_lull()
        self.run()

    def records(self, spoke_index: int, records: Iterable[tuple[bool, bytes | dict]]) -> None:
        """One batch of data records to a spoke, as the job's Java record batcher sends
        it: ``(training?, the Kafka record's value)``, a dict being JSON-encoded here.
        Call :meth:`run` to carry the messages they cause."""
        self.spoke_kernels[spoke_index].on_batch(codec.record_batch(
            (train, rec if isinstance(rec, bytes) else orjson.dumps(rec))
            for train, rec in records))

    def stream(self, records: Iterable[tuple[bool, bytes | dict]],
               partitions: list[int] | None = None) -> None:
        """Data records as they come from the Kafka topics (``(training?, value)``, a dict
        being JSON-encoded here; ``partitions``: each one's Kafka partition), dealt to the
        spokes by :attr:`sharder` as the job deals them, each spoke's share as one batch in
        arrival order, then :meth:`run`."""
        items = [(train, rec if isinstance(rec, bytes) else orjson.dumps(rec))
                 for train, rec in records]
        for i, share in enumerate(self.sharder.shard(items, partitions)):
            if share:
                self.records(i, share)
        self.run()

    # -- transport -----------------------------------------------------------------------
    def _put(self, side: int, index: int, data: bytes) -> None:
        kind = codec.wire_kind(data)
        counted = kind is not Wire.CONTROL and not (  # a resync answer, an acknowledgement
            kind is Wire.FRAME and len(data) <= codec.FRAME.size
            or kind is Wire.SIBLING and len(data) <= codec.SIBLING_FRAME.size)
        self._queue.append((side, index, data, counted))
        self._counted += counted

    def run(self, max_steps: int = 1_000_000) -> int:
        """Deliver queued messages, and those they cause, until none is left or
        ``max_steps`` node messages were delivered. Returns the number delivered.

        Raises
        ------
        Exception
            A node's failure, with ``reraise`` (the message that caused it was delivered).
        """
        steps = 0
        while self._head < len(self._queue) and steps < max_steps:
            side, index, data, counted = self._take()
            if self.duplicate and self._rng.random() < self.duplicate:
                self._queue.append((side, index, data, counted))
                self._counted += counted
            if counted:
                steps += 1
                self.delivered += 1
                self._counted -= 1
            if side == SPOKE:
                self.spoke_kernels[index].on_message(data)
            else:
                self.hub_kernels[index].on_message(data)
            if self._head >= len(self._queue):  # idle: what the job's timers would publish
                for kernel in self.hub_kernels:
                    kernel.flush_weights(force=True)
        return steps

    def _take(self) -> tuple[int, int, bytes, bool]:
        if self.shuffle:
            i = self._rng.randrange(self._head, len(self._queue))
            self._queue[i], self._queue[self._head] = self._queue[self._head], self._queue[i]
        item = self._queue[self._head]
        self._head += 1
        if self._head > 1024 and self._head * 2 > len(self._queue):  # forget delivered items
            del self._queue[:self._head]
            self._head = 0
        return item
