"""An in-process kernel for unit tests: one network of spokes and hubs in one Python
process, with an in-memory transport standing in for Flink and Kafka (papers/002 §3.2.1).

The transport can behave like Kafka at its worst: ``shuffle=True`` delivers queued
messages in a seeded random order (across and within channels) and ``duplicate=p``
delivers a message again later with probability ``p`` (at-least-once). Nodes still see each
channel FIFO and exactly once: that is the middleware's job (:mod:`middleware.channel`).

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
from collections import defaultdict, deque
from typing import Any, Callable

from middleware.envelope import HUB, SPOKE
from middleware.errors import CodecError
from middleware.node import Node

__all__ = ["LocalNetwork", "LocalContext"]


class LocalContext:
    """The network context of one node (implements :class:`middleware.node.NetworkContext`).

    Attributes
    ----------
    network, side, index, n_spokes, n_hubs : int
        The node's network id, side, index within its side, and the network's size.
    pauses : int
        How many ``pause_stream()`` calls are not yet matched by ``resume_stream()``.
    outputs : dict[str, list]
        The network's emitted values per stream name (shared by all nodes).
    """

    def __init__(self, net: "LocalNetwork", side: int, index: int) -> None:
        self._net = net
        self.network = net.network
        self.side = side
        self.index = index
        self.n_spokes = len(net.spokes)
        self.n_hubs = len(net.hubs)
        self.pauses = 0
        self.outputs = net.outputs

    def send(self, dst_index: int, data: bytes) -> None:
        """Queue ``data`` for node ``dst_index`` of the other side (delivered by ``run``)."""
        dst_side = HUB if self.side == SPOKE else SPOKE
        if not 0 <= dst_index < (self.n_hubs if dst_side == HUB else self.n_spokes):
            raise ValueError(f"no {'hub' if dst_side == HUB else 'spoke'} {dst_index}")
        self._net._queue.append((dst_side, dst_index, data))

    def pause_stream(self) -> None:
        self.pauses += 1

    def resume_stream(self) -> None:
        if self.pauses == 0:
            raise RuntimeError(f"resume_stream() without pause_stream() on node {self.index}")
        self.pauses -= 1  # the kernel feeds the backlog once the current delivery returns

    def emit(self, stream: str, value: Any) -> None:
        """Append ``value`` to ``outputs[stream]`` (e.g. ``"responses"``)."""
        self.outputs[stream].append(value)


class LocalNetwork:
    """Hosts ``spokes`` and ``hubs`` of one network and carries their messages.

    Parameters
    ----------
    spokes, hubs : list[Node]
        The nodes; each gets a :class:`LocalContext` attached here.
    network : int
        The network (pipeline) id written in every envelope.
    shuffle : bool
        Deliver queued messages in random order instead of first-in first-out.
    duplicate : float
        Probability, in [0, 1), that a delivered message is queued again to be delivered
        a second time later.
    seed : int
        Seed of the random order and duplication.

    Attributes
    ----------
    outputs : collections.defaultdict[str, list]
        Values emitted by the nodes, per stream.
    delivered : int
        Messages handed to nodes, duplicates included.
    dropped : int
        Messages a node refused as not an envelope (``CodecError``).
    """

    def __init__(self, spokes: list[Node], hubs: list[Node], network: int = 0, *,
                 shuffle: bool = False, duplicate: float = 0.0, seed: int = 0) -> None:
        if not 0.0 <= duplicate < 1.0:
            raise ValueError(f"duplicate must be in [0, 1), got {duplicate}")
        self.spokes = list(spokes)
        self.hubs = list(hubs)
        self.network = network
        self.shuffle = shuffle
        self.duplicate = duplicate
        self.seed = seed
        self.outputs: defaultdict[str, list] = defaultdict(list)
        self.delivered = 0
        self.dropped = 0
        self._rng = random.Random(seed)
        self._queue: list[tuple[int, int, bytes]] = []  # (dst side, dst index, bytes)
        self._head = 0  # FIFO read position in _queue when not shuffling
        self._backlog: list[deque[Callable[[], Any]]] = [deque() for _ in self.spokes]
        self._contexts = {(side, i): LocalContext(self, side, i)
                          for side, nodes in ((SPOKE, self.spokes), (HUB, self.hubs))
                          for i in range(len(nodes))}
        for (side, i), ctx in self._contexts.items():
            (self.spokes if side == SPOKE else self.hubs)[i].attach(ctx)

    @property
    def pending(self) -> int:
        """Messages queued and not yet delivered."""
        return len(self._queue) - self._head

    def paused(self, spoke_index: int) -> bool:
        """True while spoke ``spoke_index`` waits on a ``then_sync`` answer."""
        return self._contexts[SPOKE, spoke_index].pauses > 0

    def feed(self, spoke_index: int, fn: Callable[[], Any]) -> None:
        """Run ``fn()`` now (a stream record for that spoke), or after the spoke's stream
        resumes, in feeding order, when it is paused."""
        self._backlog[spoke_index].append(fn)
        self._drain(spoke_index)

    def run(self, max_steps: int = 1_000_000) -> int:
        """Deliver queued messages, and those they cause, until none is left or
        ``max_steps`` were delivered. Returns the number delivered."""
        steps = 0
        while self.pending and steps < max_steps:
            side, index, data = self._take()
            if self.duplicate and self._rng.random() < self.duplicate:
                self._queue.append((side, index, data))
            node = (self.spokes if side == SPOKE else self.hubs)[index]
            steps += 1
            self.delivered += 1
            try:
                node.deliver(data)
            except CodecError:
                self.dropped += 1
            if side == SPOKE:
                self._drain(index)
        return steps

    def _take(self) -> tuple[int, int, bytes]:
        if self.shuffle:
            i = self._rng.randrange(self._head, len(self._queue))
            self._queue[i], self._queue[self._head] = self._queue[self._head], self._queue[i]
        item = self._queue[self._head]
        self._head += 1
        if self._head > 1024 and self._head * 2 > len(self._queue):  # forget delivered items
            del self._queue[:self._head]
            self._head = 0
        return item

    def _drain(self, spoke_index: int) -> None:
        backlog = self._backlog[spoke_index]
        while backlog and not self.paused(spoke_index):
            backlog.popleft()()
