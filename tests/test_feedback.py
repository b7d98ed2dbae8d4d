"""The feedback loop across restores (operators/feedback.py): a restored spoke applies each
hub message once, in order, and never one of the timeline the restore discarded; the
sequences below are what the psMessages topic holds after a TaskManager dies."""

from __future__ import annotations

from middleware import HUB, SPOKE, Kind, codec
from middleware.envelope import Envelope
from middleware.codec import frame, unframe
from operators.feedback import SpokeChannels

NET, HUB0, SPOKE0 = 7, 0, 1


def body(seq: int, timeline: str) -> bytes:
    return codec.encode(Envelope(NET, HUB, HUB0, SPOKE, SPOKE0, seq, seq, "push", Kind.RESPONSE,
                                 [timeline]))


def msg(inc: int, prev: int, base: int, seq: int, timeline: str) -> bytes:
    return frame(inc, prev, base, NET, HUB0, SPOKE0, body(seq, timeline))


def delivered(ch: SpokeChannels, records: list[bytes]) -> list[tuple[int, str]]:
    out = []
    for r in records:
        _, bodies = ch.accept(r)
        out += [(e.seq, e.payload[0]) for e in map(codec.decode, bodies)]
    return out


def test_frames_round_trip():
    head, b = unframe(frame(5, 3, 9, NET, HUB0, SPOKE0, b"xyz", nonce=11))
    assert head == (5, 3, 9, NET, HUB0, SPOKE0, 11) and b == b"xyz"


def test_a_restored_spoke_drops_the_dead_timeline_and_keeps_what_preceded_the_checkpoint():
    I0, I1 = 100, 200
    ch = SpokeChannels()
    # before the failure: seq 0, 1 read; the hub had sent 0..2 at its checkpoint (base 3)
    assert delivered(ch, [msg(I0, 0, 0, 0, "a"), msg(I0, 0, 0, 1, "a")]) == [(0, "a"), (1, "a")]
    nonce = ch.restored(NET, HUB0)  # both restored from the checkpoint
    topic_after_restore = [
        msg(I0, 0, 0, 2, "a"),  # sent before the hub's checkpoint, read after: valid
        msg(I0, 0, 0, 3, "dead"), msg(I0, 0, 0, 4, "dead"),  # written after it: dead
        msg(I1, I0, 3, 3, "b"),  # the restored hub resumes at 3
        frame(I1, I0, 3, NET, HUB0, SPOKE0, nonce=nonce),  # answer to the spoke's resync
        msg(I1, I0, 3, 4, "b"),
        msg(I0, 0, 0, 4, "dead"),  # a late redelivery of the dead timeline
    ]
    assert delivered(ch, topic_after_restore) == [(2, "a"), (3, "b"), (4, "b")]
    assert ch.dead == 3


def test_a_second_failure_before_the_next_checkpoint_discards_that_timeline_too():
    I0, I1, I2 = 100, 200, 300
    ch = SpokeChannels()
    delivered(ch, [msg(I0, 0, 0, 0, "a")])
    ch.restored(NET, HUB0)
    # timeline 1 lives briefly (I1 resumes at 1) and dies before any checkpoint...
    delivered(ch, [msg(I0, 0, 0, 1, "dead0"), msg(I1, I0, 1, 1, "dead1")])
    # ...so the same checkpoint is restored again: the spoke's state is the one above
    ch = SpokeChannels()
    delivered(ch, [msg(I0, 0, 0, 0, "a")])
    nonce = ch.restored(NET, HUB0)
    topic = [msg(I0, 0, 0, 1, "dead0"), msg(I1, I0, 1, 1, "dead1"), msg(I1, I0, 1, 2, "dead1"),
             msg(I2, I0, 1, 1, "c"), frame(I2, I0, 1, NET, HUB0, SPOKE0, nonce=nonce),
             msg(I2, I0, 1, 2, "c")]
    assert delivered(ch, topic) == [(1, "c"), (2, "c")]
    assert ch.dead == 3


def test_without_restores_frames_are_transparent():
    ch = SpokeChannels()
    records = [msg(100, 0, 0, s, "a") for s in range(5)]
    assert delivered(ch, records) == [(s, "a") for s in range(5)]
    assert ch.dead == 0


def test_a_hub_sends_again_what_a_spoke_still_lacks_and_forgets_what_it_got(monkeypatch):
    """A record on psMessages that the job's source never delivered (seen with the local
    broker) stalls a round; the spoke's acknowledgement gets it sent again."""
    import operators.hub_kernel as hub_module
    from operators.hub_kernel import HubKernel

    hub = HubKernel(hub=0, n_spokes=2)
    for seq in range(3):
        hub.send(NET, HUB0, SPOKE0, body(seq, "a"))
    sent, hub.out = [r for _, r in hub.out], []
    hub.acknowledged(NET, SPOKE0, expected=1)  # 0 arrived; 1 and 2 are recent: in flight
    assert hub.out == [] and [s for s, _, _ in hub.unacked[(NET, SPOKE0)]] == [1, 2]
    now = hub.clock()
    hub.clock = lambda: now + hub_module.RESEND_AFTER_S + 1
    hub.acknowledged(NET, SPOKE0, expected=1)  # still missing after the wait: sent again
    assert [r for _, r in hub.out] == sent[1:] and hub.resent == 2
    hub.out = []
    hub.acknowledged(NET, SPOKE0, expected=3)  # everything arrived: nothing kept
    assert hub.out == [] and hub.unacked[(NET, SPOKE0)] == []
    # copies of what already arrived pass the frames and are dropped by the node's inbox
    from middleware.channel import Inbox

    ch, inbox, got = SpokeChannels(), Inbox(), []
    for r in sent + sent[1:]:
        for b in ch.accept(r)[1]:
            got += [e.seq for e in inbox.accept(codec.decode(b))]
    assert got == [0, 1, 2] and inbox.duplicates == 2
