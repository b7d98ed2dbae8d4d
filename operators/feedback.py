"""The Kafka feedback loop across restores: incarnation frames on hub→spoke messages.

Hub→spoke envelopes leave the job through the ``psMessages`` topic and come back as the
spokes' input. After a failure, Flink restores spokes, hubs and the topic's read offset
to the last checkpoint, but the topic keeps what hubs wrote after that checkpoint and
before the failure: messages of a timeline that no longer exists. The restored hubs send
new messages with the *same* sequence numbers (their channels were restored too), so the
middleware's de-duplication (:class:`middleware.channel.Inbox`) alone would deliver
whichever copy comes first, and the dead one comes first.

So every hub→spoke record is framed with the hub kernel's *incarnation* (a random id drawn
whenever the kernel is created or restored), the incarnation it restored from (``prev``)
and the channel's ``base``: the sequence number the restored hub resumed at. Messages of
``prev`` numbered below ``base`` were sent before the checkpoint (still valid, possibly not
yet read); those at or above it belong to the dead timeline. A restored spoke holds every
hub message of a channel until the hub answers its ``resync`` (a frame carrying the
spoke's nonce), which names the hub's current incarnation; then it delivers the held
messages that are valid, in order, drops the dead ones, and goes on. Kafka keeps each
channel's records in order (one partition per destination), so every message of an older
incarnation precedes the answer.

The frame's wire format is :func:`middleware.codec.frame` (37 bytes of header: incarnation,
prev, base, network, hub index, spoke index, nonce; then the envelope bytes, or nothing for
a resync answer).

A hub kernel keeps what it framed until the spoke acknowledges it (:class:`ResendWindow`)
and sends again what stays unacknowledged too long: a record the topic holds but the job's
source never delivered.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from middleware import codec

__all__ = ["new_incarnation", "SpokeChannels", "ResendWindow"]


def new_incarnation() -> int:
    """A random non-zero 63-bit id."""
    return random.SystemRandom().randrange(1, 1 << 63)


def _seq(body: bytes) -> int:
    return codec.header(body).seq


@dataclass
class _Channel:
    current: int = 0  # the hub incarnation this spoke follows (0: none seen yet)
    cuts: dict[int, int] = field(default_factory=dict)  # incarnation → first dead seq
    nonce: int = 0  # != 0 while holding after a restore, until the resync answer
    held: list[tuple[int, bytes]] = field(default_factory=list)  # (incarnation, body)


class SpokeChannels:
    """A spoke's view of its hub→spoke channels, one per (pipeline, hub).

    Attributes
    ----------
    dead : int
        Messages dropped because they belong to a timeline that a restore discarded.
    """

    def __init__(self) -> None:
        self.channels: dict[tuple[int, int], _Channel] = {}
        self.dead = 0

    def restored(self, network: int, hub: int) -> int:
        """This spoke was just restored: hold the channel's messages until the hub's
        answer to a resync with the returned nonce."""
        ch = self.channels.setdefault((network, hub), _Channel())
        ch.nonce = new_incarnation()
        return ch.nonce

    def forget(self, network: int) -> None:
        """A pipeline was deleted."""
        for key in [k for k in self.channels if k[0] == network]:
            del self.channels[key]

    def _valid(self, ch: _Channel, inc: int, body: bytes) -> bool:
        if inc == ch.current:
            return True
        cut = ch.cuts.get(inc)
        return cut is not None and _seq(body) < cut

    def accept(self, data: bytes) -> tuple[tuple[int, int], list[bytes]]:
        """Take one framed record; ``((network, hub), envelopes to deliver in order)``.

        Raises
        ------
        middleware.errors.CodecError
            When ``data`` is not a frame.
        """
        (inc, prev, base, network, hub, _spoke, nonce), body = codec.unframe(data)
        key = (network, hub)
        ch = self.channels.setdefault(key, _Channel())
        if prev:
            ch.cuts.setdefault(prev, base)
        if ch.nonce:  # holding after a restore
            if nonce != ch.nonce:
                if body:
                    ch.held.append((inc, body))
                return key, []
            ch.nonce, ch.current = 0, inc
            held, ch.held = ch.held, []
            out = []
            for h_inc, h_body in held:
                if self._valid(ch, h_inc, h_body):
                    out.append(h_body)
                else:
                    self.dead += 1
            return key, out
        if not ch.current:
            ch.current = inc
        elif inc != ch.current:
            if prev == ch.current:  # the hub restored without this spoke (not in Flink)
                ch.current = inc
            elif not self._valid(ch, inc, body):
                if body:
                    self.dead += 1
                return key, []
        return key, [body] if body else []


class ResendWindow:
    """A hub kernel's hub→spoke frames not yet acknowledged, per (network, spoke) channel.

    Attributes
    ----------
    frames : dict[tuple[int, int], list[tuple[int, float, bytes]]]
        ``(network, spoke)`` → ``[(envelope seq, time sent in seconds, frame bytes)]``.
    resent : int
        Frames sent again (:meth:`overdue`).
    """

    def __init__(self) -> None:
        # (network, spoke) -> [(envelope seq, time sent in seconds, frame bytes)]
        self.frames: dict[tuple[int, int], list[tuple[int, float, bytes]]] = {}
        self.resent = 0

    def add(self, network: int, spoke: int, seq: int, sent: float, record: bytes) -> None:
        """Keep ``record`` (a frame carrying envelope ``seq``, sent at ``sent``)."""
        self.frames.setdefault((network, spoke), []).append((seq, sent, record))

    def acknowledge(self, network: int, spoke: int, expected: int) -> None:
        """Spoke ``spoke`` delivered everything of ``network`` numbered below ``expected``."""
        self.frames[(network, spoke)] = [
            f for f in self.frames.get((network, spoke), []) if f[0] >= expected]

    def overdue(self, network: int, now: float, after: float) -> list[bytes]:
        """The frames of ``network`` (every spoke) sent more than ``after`` seconds before
        ``now``; they count as sent again at ``now``."""
        out = []
        for (net, _), pending in self.frames.items():
            if net != network:
                continue
            for i, (seq, sent, record) in enumerate(pending):
                if now - sent > after:
                    pending[i] = (seq, now, record)
                    out.append(record)
        self.resent += len(out)
        return out

    def forget(self, network: int) -> None:
        """A pipeline was deleted."""
        for key in [k for k in self.frames if k[0] == network]:
            del self.frames[key]

    def __len__(self) -> int:
        return sum(len(v) for v in self.frames.values())
