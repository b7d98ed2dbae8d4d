"""The Kafka feedback loop across restores: incarnation frames on hub→spoke and spoke→spoke
messages.

Hub→spoke envelopes, and spoke→spoke envelopes (sibling channels, e.g. TensAIR's updates,
papers/000 Algorithm 1), leave the job through the ``psMessages`` topic and come back as
the spokes' input. After a failure, Flink restores spokes, hubs and the topic's read offset
to the last checkpoint, but the topic keeps what senders wrote after that checkpoint and
before the failure: messages of a timeline that no longer exists. The restored senders send
new messages with the *same* sequence numbers (their channels were restored too), so the
middleware's de-duplication (:class:`middleware.channel.Inbox`) alone would deliver
whichever copy comes first, and the dead one comes first.

So every such record is framed with the sending kernel's *incarnation* (a random id drawn
whenever the kernel is created or restored), the incarnation it restored from (``prev``)
and the channel's ``base``: the sequence number the restored sender resumed at. Messages of
``prev`` numbered below ``base`` were sent before the checkpoint (still valid, possibly not
yet read); those at or above it belong to the dead timeline. A restored spoke holds every
message of each channel into it until the sender answers its ``resync`` (a frame carrying
the spoke's nonce), which names the sender's current incarnation; then it delivers the
held messages that are valid, in order, drops the dead ones, and goes on. ``psMessages``
has one partition, so every message of an older incarnation precedes the answer.

:class:`SpokeChannels` keeps a spoke's channels by ``(network, side, index)``: side
:data:`~middleware.envelope.HUB` for the hub channels, :data:`~middleware.envelope.SPOKE`
for the sibling channels; both follow the rules above.

Wire formats (:mod:`middleware.codec`):

* hub→spoke: :func:`~middleware.codec.frame` (37 bytes of header: incarnation, prev,
  base, network, hub index, spoke index, nonce; then the envelope bytes, or nothing for a
  resync answer). The resync request and the acknowledgements travel spoke→hub as kernel
  controls on the job's keyed edge (:func:`~middleware.codec.control`).
* spoke→spoke: :func:`~middleware.codec.sibling_frame` (first byte 0xFC, 58 bytes of
  header: an op, the same fields with ``src``/``dst`` spokes, and an acknowledgement of
  the reverse channel). Spokes have no other path to each other, so the resync request
  (op ``RESYNC``), the answer (``ANSWER``) and acknowledgements travel through
  ``psMessages`` too, routed by destination spoke like the envelopes. An acknowledgement
  rides on every sibling frame (and alone, op ``ACK``, when the spoke has nothing else to
  send that way); it names the sender incarnation it acknowledges, so one written by a
  dead timeline and read again after the restore (it said the dead messages arrived) is
  ignored by the restored sender.

A sender (a hub kernel, or a spoke kernel for its sibling channels) keeps what it framed
until the receiving spoke acknowledges it (:class:`ResendWindow`) and sends again what
stays unacknowledged too long: a record the topic holds but the job's source never
delivered. Both check for overdue frames when an acknowledgement arrives; a spoke kernel
only on sibling channels whose receiver stopped making progress (``on_stall``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from middleware import codec
from middleware.codec import SiblingOp
from middleware.envelope import HUB, SPOKE

__all__ = ["new_incarnation", "SpokeChannels", "ResendWindow", "RESEND_AFTER_S"]

#: an unacknowledged frame older than this (seconds) is sent again, hub's or sibling's
RESEND_AFTER_S = 2.0


def new_incarnation() -> int:
    """A random non-zero 63-bit id."""
    return random.SystemRandom().randrange(1, 1 << 63)


def _seq(body: bytes) -> int:
    return codec.header(body).seq


@dataclass
class _Channel:
    current: int = 0  # the sender incarnation this spoke follows (0: none seen yet)
    cuts: dict[int, int] = field(default_factory=dict)  # incarnation → first dead seq
    nonce: int = 0  # != 0 while holding after a restore, until the resync answer
    held: list[tuple[int, bytes]] = field(default_factory=list)  # (incarnation, body)


class SpokeChannels:
    """A spoke's view of its framed channels into it, one per ``(network, side, index)``:
    from each hub (side :data:`~middleware.envelope.HUB`) and from each other spoke
    (side :data:`~middleware.envelope.SPOKE`, the sibling channels).

    Attributes
    ----------
    dead : int
        Messages dropped because they belong to a timeline that a restore discarded (all
        channels).
    dead_siblings : int
        The part of :attr:`dead` that came on sibling channels.
    """

    dead_siblings = 0  # class default: channels pickled before sibling frames existed

    def __init__(self) -> None:
        self.channels: dict[tuple[int, int, int], _Channel] = {}
        self.dead = 0
        self.dead_siblings = 0

    def __setstate__(self, state: dict) -> None:
        """Unpickling: channels pickled before sibling frames were keyed ``(network,
        hub)``; they become ``(network, HUB, hub)``."""
        state["channels"] = {(k if len(k) == 3 else (k[0], HUB, k[1])): ch
                             for k, ch in state.get("channels", {}).items()}
        self.__dict__.update(state)

    def restored(self, network: int, index: int, side: int = HUB) -> int:
        """This spoke was just restored: hold the messages of the channel from node
        ``index`` of ``side`` until that node's answer to a resync with the returned
        nonce."""
        ch = self.channels.setdefault((network, side, index), _Channel())
        ch.nonce = new_incarnation()
        return ch.nonce

    def following(self, network: int, index: int, side: int = HUB) -> int:
        """The sender incarnation the channel follows: what an acknowledgement names (0:
        none seen yet, or holding after a restore, when nothing should be acknowledged)."""
        ch = self.channels.get((network, side, index))
        return 0 if ch is None or ch.nonce else ch.current

    def forget(self, network: int) -> None:
        """A pipeline was deleted."""
        for key in [k for k in self.channels if k[0] == network]:
            del self.channels[key]

    def _valid(self, ch: _Channel, inc: int, body: bytes) -> bool:
        if inc == ch.current:
            return True
        cut = ch.cuts.get(inc)
        return cut is not None and _seq(body) < cut

    def _dead(self, key: tuple[int, int, int], n: int = 1) -> None:
        self.dead += n
        if key[1] == SPOKE:
            self.dead_siblings += n

    def accept(self, data: bytes) -> tuple[tuple[int, int, int], list[bytes]]:
        """Take one framed record, a hub frame or a sibling frame;
        ``((network, side, sender index), envelopes to deliver in order)``. A sibling
        frame's acknowledgement and its ops ``RESYNC`` and ``ACK`` are the kernel's
        business (they deliver nothing here).

        Raises
        ------
        middleware.errors.CodecError
            When ``data`` is neither frame.
        """
        if codec.is_sibling_frame(data):
            head, body = codec.unframe_sibling(data)
            key = (head.network, SPOKE, head.src)
            if head.op not in (SiblingOp.DATA, SiblingOp.ANSWER):
                return key, []
            return key, self._take(key, head.incarnation, head.prev, head.base, head.nonce, body)
        (inc, prev, base, network, hub, _spoke, nonce), body = codec.unframe(data)
        key = (network, HUB, hub)
        return key, self._take(key, inc, prev, base, nonce, body)

    def _take(self, key: tuple[int, int, int], inc: int, prev: int, base: int, nonce: int,
              body: bytes) -> list[bytes]:
        ch = self.channels.setdefault(key, _Channel())
        if prev:
            ch.cuts.setdefault(prev, base)
        if ch.nonce:  # holding after a restore
            if nonce != ch.nonce:
                if body:
                    ch.held.append((inc, body))
                return []
            ch.nonce, ch.current = 0, inc
            held, ch.held = ch.held, []
            out = []
            for h_inc, h_body in held:
                if self._valid(ch, h_inc, h_body):
                    out.append(h_body)
                else:
                    self._dead(key)
            return out
        if not ch.current:
            ch.current = inc
        elif inc != ch.current:
            if prev == ch.current:  # the sender restored without this spoke (not in Flink)
                ch.current = inc
            elif not self._valid(ch, inc, body):
                if body:
                    self._dead(key)
                return []
        return [body] if body else []


class ResendWindow:
    """A sender's frames not yet acknowledged, per (network, destination spoke) channel:
    a hub kernel's hub→spoke frames, or a spoke kernel's sibling frames.

    Parameters
    ----------
    on_stall : bool
        Send a channel's overdue frames again only once its receiver has delivered nothing
        more for as long (its acknowledgements stopped growing): a receiver whose
        acknowledgements grow is reading, and what it lacks is still on the way (a loop
        slower than the timeout under load); one that lost a record stalls at it, since
        each channel reaches the topic in order. The spoke kernels' sibling channels, which
        carry far more than the hubs' answers, use it; without it (the hubs), every
        overdue frame is sent again.

    Attributes
    ----------
    frames : dict[tuple[int, int], list[tuple[int, float, bytes]]]
        ``(network, spoke)`` → ``[(envelope seq, time sent in seconds, frame bytes)]``.
    resent : int
        Frames sent again (:meth:`overdue`).
    """

    on_stall = False  # class default: windows pickled before the option existed

    def __init__(self, on_stall: bool = False) -> None:
        # (network, spoke) -> [(envelope seq, time sent in seconds, frame bytes)]
        self.frames: dict[tuple[int, int], list[tuple[int, float, bytes]]] = {}
        self.resent = 0
        self.on_stall = on_stall
        # (network, spoke) -> (acknowledged, when it last grew, seconds); with on_stall
        self.progress: dict[tuple[int, int], tuple[int, float]] = {}

    def add(self, network: int, spoke: int, seq: int, sent: float, record: bytes) -> None:
        """Keep ``record`` (a frame carrying envelope ``seq``, sent at ``sent``)."""
        self.frames.setdefault((network, spoke), []).append((seq, sent, record))

    def acknowledge(self, network: int, spoke: int, expected: int,
                    now: float | None = None) -> None:
        """Spoke ``spoke`` delivered everything of ``network`` numbered below ``expected``
        (with ``on_stall``: as of ``now``, seconds)."""
        key = (network, spoke)
        self.frames[key] = [f for f in self.frames.get(key, []) if f[0] >= expected]
        if self.on_stall and now is not None:
            last = self.progress.get(key)
            if last is None or expected > last[0]:
                self.progress[key] = (expected, now)

    def overdue(self, network: int, now: float, after: float) -> list[bytes]:
        """The frames of ``network`` (every spoke) sent more than ``after`` seconds before
        ``now`` (with ``on_stall``, on channels whose acknowledgements have not grown for
        as long); they count as sent again at ``now``."""
        out = []
        for key, pending in self.frames.items():
            if key[0] != network:
                continue
            if self.on_stall:
                last = self.progress.get(key)
                if last is not None and now - last[1] <= after:
                    continue
            for i, (seq, sent, record) in enumerate(pending):
                if now - sent > after:
                    pending[i] = (seq, now, record)
                    out.append(record)
        self.resent += len(out)
        return out

    def restart(self, now: float) -> None:
        """The sender was restored (perhaps on another machine, whose clock reads
        differently): every frame counts as sent at ``now``, no progress as seen."""
        self.frames = {k: [(seq, now, r) for seq, _, r in v] for k, v in self.frames.items()}
        if self.on_stall:
            self.progress = {}

    def forget(self, network: int) -> None:
        """A pipeline was deleted."""
        for key in [k for k in self.frames if k[0] == network]:
            del self.frames[key]
            if self.on_stall:
                self.progress.pop(key, None)

    def __len__(self) -> int:
        return sum(len(v) for v in self.frames.values())
