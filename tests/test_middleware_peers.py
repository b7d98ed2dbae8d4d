"""Sibling channels: nodes of one side calling each other directly (spoke→spoke, as
papers/000 Algorithm 1 needs), on the in-process kernel (operators/local.py), with the
FIFO, exactly-once, fragmentation and promise semantics of spoke↔hub channels."""

from __future__ import annotations

import numpy as np
import pytest

from middleware import (SPOKE, BroadcastPromise, Node, Promise, RemoteInterfaceError, remote)
from middleware.codec import peek
from operators.local import LocalNetwork


class Hub(Node):
    @remote(oneway=True)
    def note(self, *values) -> None:
        self.notes = getattr(self, "notes", []) + [values]


class Replica(Node):
    """A spoke whose remote interface is called by the other spokes."""

    peer = Hub

    def __init__(self) -> None:
        super().__init__()
        self.notes: list = []
        self.arrays: list = []
        self.held: list[Promise] = []
        self.round = BroadcastPromise()

    @remote(oneway=True)
    def note(self, *values) -> None:
        self.notes.append(values)

    @remote
    def add(self, a, b=0):
        return a + b + 100 * self.ctx.index

    @remote(oneway=True)
    def put(self, w) -> None:
        self.arrays.append(w)

    @remote
    def later(self):
        p = Promise()
        self.held.append(p)
        return p

    @remote
    def boom(self):
        raise ValueError("replica refuses")

    @remote
    def gather(self):
        return self.round


Hub.peer = Replica


def network(n_spokes: int = 3, **kw) -> LocalNetwork:
    return LocalNetwork([Replica() for _ in range(n_spokes)], [Hub()], **kw)


def test_siblings_are_the_other_nodes_of_the_same_side():
    net = network(4)
    for i, spoke in enumerate(net.spokes):
        assert len(spoke.siblings) == 4 and spoke.siblings[i] is None
        assert spoke.n_siblings == 3
    assert len(net.hubs[0].siblings) == 1 and net.hubs[0].n_siblings == 0


def test_one_way_and_two_way_calls_between_spokes():
    net = network(3)
    a, b, c = net.spokes
    assert a.siblings[1].note("hi", 0) is None
    got = []
    a.siblings[2].add(1, b=2).then(got.append)
    net.run()
    assert b.notes == [("hi", 0)] and c.notes == [] and a.notes == []
    assert got == [203]
    assert a.calls_in_flight == 0


def test_sibling_envelopes_carry_the_same_side_and_travel_on_their_own_channels():
    net = network(2)
    sent = []
    ctx = net.spokes[0].ctx
    send_sibling = ctx.send_sibling
    ctx.send_sibling = lambda dst, data: (sent.append(data), send_sibling(dst, data))
    net.spokes[0].peers[0].note("to the hub")
    net.spokes[0].siblings[1].note("to spoke 1")
    net.spokes[0].siblings[1].note("again")
    route = peek(sent[0])
    assert (route.src_side, route.dst_side, route.dst_index) == (SPOKE, SPOKE, 1)
    # separate sequence numbers: the hub channel and the sibling channel both start at 0
    assert net.spokes[0].next_seq_to(0) == 1 and net.spokes[0].next_seq_to_sibling(1) == 2
    net.run()
    assert net.spokes[1].expected_from_sibling(0) == 2 and net.spokes[1].expected_from(0) == 0
    assert net.hubs[0].notes == [("to the hub",)]
    stats = net.spokes[0].stats.to_json()
    assert stats["sibling_messages_sent"] == 2 and stats["messages_sent"] == 3
    assert net.spokes[1].stats.to_json()["sibling_messages_received"] == 2


def test_calls_are_checked_against_the_nodes_own_class():
    net = network(2)
    with pytest.raises(RemoteInterfaceError, match="Replica .spoke. has no remote method 'push'"):
        net.spokes[0].siblings[1].push(1)
    with pytest.raises(RemoteInterfaceError, match="bad arguments for Replica.add"):
        net.spokes[0].sibling_broadcast.add()


def test_a_node_cannot_ship_to_itself():
    net = network(2)
    with pytest.raises(ValueError, match="no sibling spoke 0"):
        net.spokes[0].ctx.send_sibling(0, b"\xff")


def test_sibling_broadcast_reaches_every_other_spoke_and_answers_once_each():
    net = network(4)
    got = []
    net.spokes[2].sibling_broadcast.add(1).then(got.append)
    net.spokes[2].sibling_broadcast.note("all")
    net.run()
    assert sorted(got) == [1, 101, 301]
    assert [s.notes for s in net.spokes] == [[("all",)], [("all",)], [], [("all",)]]


def test_remote_failure_between_siblings_reaches_on_error():
    net = network(2)
    errors = []
    net.spokes[1].siblings[0].boom().on_error(errors.append)
    net.run()
    assert [(e.remote_type, e.node) for e in errors] == [("ValueError", "spoke 0")]


def test_promises_between_siblings():
    net = network(2)
    got = []
    net.spokes[0].siblings[1].later().then(got.append)
    net.run()
    assert got == []
    net.spokes[1].held[0].fulfil("later")
    net.run()
    assert got == ["later"]


def test_broadcast_promise_waits_for_every_sibling():
    net = network(3)
    got = []
    net.spokes[0].round.fulfil("all in")
    net.spokes[1].siblings[0].gather().then(lambda v: got.append((1, v)))
    net.run()
    assert got == []  # spoke 2 has not called yet
    net.spokes[2].siblings[0].gather().then(lambda v: got.append((2, v)))
    net.run()
    assert sorted(got) == [(1, "all in"), (2, "all in")]


def test_then_sync_on_a_sibling_call_pauses_only_the_caller():
    net = network(2)
    log = []
    net.spokes[0].siblings[1].later().then_sync(lambda v: log.append(("answer", v)))
    net.feed(0, lambda: log.append("held"))
    net.feed(1, lambda: log.append("spoke 1 goes on"))
    net.run()
    assert log == ["spoke 1 goes on"] and net.paused(0)
    net.spokes[1].held[0].fulfil("w")
    net.run()
    assert log == ["spoke 1 goes on", ("answer", "w"), "held"] and not net.paused(0)


def test_fifo_exactly_once_under_shuffle_and_duplicates():
    net = network(3, shuffle=True, duplicate=0.3, seed=5)
    for seq in range(150):
        for i, spoke in enumerate(net.spokes):
            spoke.sibling_broadcast.note(i, seq)
            spoke.peers[0].note(i, seq)  # the hub channel interleaves, numbered apart
            spoke.siblings[(i + 1) % 3].note(i, -seq)
    net.run()
    for j, spoke in enumerate(net.spokes):
        assert spoke.stats.duplicates > 0
        for i in range(3):
            if i == j:
                continue
            seen = [v for src, v in spoke.notes if src == i]
            expected = [x for seq in range(150)
                        for x in [seq] + ([-seq] if (i + 1) % 3 == j else [])]
            assert seen == expected
    for i in range(3):
        assert [v for src, v in net.hubs[0].notes if src == i] == list(range(150))


def test_answers_between_siblings_keep_their_order_under_shuffle_and_duplicates():
    net = network(2, shuffle=True, duplicate=0.3, seed=2)
    got = []
    for x in range(100):
        net.spokes[0].siblings[1].add(x).then(got.append)
    net.run()
    assert got == [100 + x for x in range(100)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_large_arrays_between_siblings_are_fragmented_and_reassembled(seed):
    net = network(3, shuffle=True, duplicate=0.3, seed=seed, limits={"max_message_bytes": 2048})
    values = [np.arange(3000, dtype=np.float64) + k for k in range(3)]
    for v in values:
        net.spokes[0].sibling_broadcast.put(v)
        net.spokes[0].peers[0].note(len(v))  # interleaved with another channel's envelopes
    net.run()
    assert net.spokes[0].stats.sent_messages["FRAGMENT"] > 2 * 3 * 10
    for spoke in net.spokes[1:]:
        assert len(spoke.arrays) == 3
        for got, v in zip(spoke.arrays, values):
            assert np.array_equal(got, v)


def test_a_node_pickled_before_sibling_channels_restores_and_goes_on():
    """Flink state written by an older omldm: the node has no sibling fields; unpickled, it
    gets empty sibling channels and takes hub messages as before."""
    import pickle

    from middleware import codec
    from middleware.envelope import HUB, Envelope, Kind

    spoke = network(2).spokes[0]
    old = Replica.__new__(Replica)
    old.__dict__.update({k: v for k, v in spoke.__dict__.items() if k not in (
        "_sibling_outbox", "_sibling_inbox", "siblings", "sibling_broadcast")})
    restored = pickle.loads(pickle.dumps(old))
    assert restored.siblings == [] and restored.n_siblings == 0
    restored.deliver(codec.encode(Envelope(0, HUB, 0, SPOKE, 0, 0, 0, "note", Kind.ONEWAY,
                                           [["after restore"], {}])))
    assert restored.notes == [("after restore",)] and restored.stats.duplicates == 0
