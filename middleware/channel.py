"""Reliable FIFO channels over an at-least-once, possibly reordering transport.

The sender numbers each (sender, receiver) channel 0, 1, 2, ...; the receiver delivers in
that order, buffers what arrives early and drops what it has seen (Kafka redelivery after
a retry or a restart). Exactly-once effect from at-least-once delivery.
"""

from __future__ import annotations

from middleware.envelope import Envelope

__all__ = ["Outbox", "Inbox"]


class Outbox:
    """Next sequence number per destination, from ``base`` (0 but for a pipeline created
    again under a deleted one's id: :meth:`middleware.node.Node.start_channels`)."""

    _base = 0  # a class default for outboxes pickled before bases existed

    def __init__(self, base: int = 0) -> None:
        self._next: dict[int, int] = {}
        self._base = base

    def peek(self, dst: int) -> int:
        """The number the next envelope to ``dst`` will carry, without taking it."""
        return self._next.get(dst, self._base)

    def next_seq(self, dst: int) -> int:
        seq = self._next.get(dst, self._base)
        self._next[dst] = seq + 1
        return seq


class Inbox:
    """Puts each sender's envelopes back in sequence order, dropping duplicates.

    Attributes
    ----------
    duplicates : int
        Envelopes dropped because their sequence number was already delivered or buffered.
    """

    _base = 0  # a class default for inboxes pickled before bases existed

    def __init__(self, base: int = 0) -> None:
        self._expected: dict[int, int] = {}
        self._early: dict[int, dict[int, Envelope]] = {}
        self.duplicates = 0
        self._base = base  # the first sequence number of every channel

    def accept(self, env: Envelope) -> list[Envelope]:
        """The envelopes that are now deliverable, in order (possibly none); one numbered
        below the channel's next (or below ``base``) is a duplicate, dropped."""
        src = env.src_index
        expected = self._expected.get(src, self._base)
        early = self._early.setdefault(src, {})
        if env.seq < expected or env.seq in early:
            self.duplicates += 1
            return []
        if env.seq > expected:
            early[env.seq] = env
            return []
        out = [env]
        expected += 1
        while expected in early:
            out.append(early.pop(expected))
            expected += 1
        self._expected[src] = expected
        return out

    def expected(self, src: int) -> int:
        """The sequence number this inbox waits for next from ``src``."""
        return self._expected.get(src, self._base)

    @property
    def waiting(self) -> int:
        """Envelopes buffered behind a gap."""
        return sum(len(v) for v in self._early.values())
