"""Tests of the middleware (papers/002 §3.1) on the in-process kernel (operators/local.py)."""

from __future__ import annotations

import logging
import struct

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from middleware import (BROADCAST, HUB, SPOKE, BroadcastPromise, CodecError, Envelope, Kind,
                        Node, OmldmError, Promise, PromiseError, RemoteCallError,
                        RemoteInterfaceError, remote)
from middleware.codec import HEADER, decode, encode, is_envelope, peek
from operators.local import LocalNetwork


# -- nodes used by the tests -------------------------------------------------------------

class Hub(Node):
    """A hub with one remote method per middleware feature under test."""

    def __init__(self) -> None:
        super().__init__()
        self.notes: list = []
        self.held: list[Promise] = []
        self.round = BroadcastPromise()

    @remote(oneway=True)
    def note(self, *values) -> None:
        self.notes.append(values)

    @remote
    def add(self, a, b=0):
        return a + b

    @remote
    def whoami(self):
        return self.ctx.index

    @remote
    def boom(self, x):
        raise ValueError(f"bad x: {x}")

    @remote
    def later(self):
        p = Promise()
        self.held.append(p)
        return p

    @remote
    def gather(self):
        return self.round

    @remote
    def barrier(self):
        return BroadcastPromise.fulfilled("go")

    @remote
    def unencodable(self):
        return {1, 2}

    @remote
    def report(self, value):
        self.ctx.emit("responses", {"hub": self.ctx.index, "value": value})
        return None

    def not_remote(self):
        return "never over the network"


class Spoke(Node):
    peer = Hub

    def __init__(self) -> None:
        super().__init__()
        self.notes: list = []

    @remote(oneway=True)
    def note(self, *values) -> None:
        self.notes.append(values)

    @remote
    def echo(self, x):
        return x


Hub.peer = Spoke


def network(n_spokes: int = 2, n_hubs: int = 2, **kw) -> LocalNetwork:
    return LocalNetwork([Spoke() for _ in range(n_spokes)], [Hub() for _ in range(n_hubs)], **kw)


# -- the readable example ----------------------------------------------------------------

def test_example_running_sum_parameter_server():
    """A tiny parameter server: one hub keeps the running sum of the numbers that two
    spokes push, and answers each push with the sum so far.

    The spokes call ``self.peers[0].push(x)`` (a two-way call: it returns at once, the
    answer comes to the ``then`` callback later); the kernel (``LocalNetwork``) carries the
    messages when ``run()`` is called.
    """
    class SumHub(Node):
        def __init__(self):
            super().__init__()
            self.total = 0

        @remote
        def push(self, x):
            self.total += x
            return self.total

    class Worker(Node):
        peer = SumHub

        def __init__(self):
            super().__init__()
            self.seen = []

        def on_record(self, x):
            self.peers[0].push(x).then(self.seen.append)

    SumHub.peer = Worker
    a, b = Worker(), Worker()
    net = LocalNetwork([a, b], [SumHub()])

    a.on_record(1)
    b.on_record(10)
    a.on_record(100)
    assert net.run() == 6  # three requests, three responses

    assert net.hubs[0].total == 111
    assert a.seen == [1, 111]  # the hub saw 1, then 10 (from b), then 100
    assert b.seen == [11]


# -- codec -------------------------------------------------------------------------------

def envelope(payload, **kw) -> Envelope:
    fields = dict(network=7, src_side=SPOKE, src_index=2, dst_side=HUB, dst_index=1, seq=5,
                  call_id=9, method="push", kind=Kind.REQUEST, payload=payload)
    fields.update(kw)
    return Envelope(**fields)


def assert_same(a, b):
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray)
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, list) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k])
    else:
        assert a == b and type(a) is type(b)


def test_codec_round_trip_nested_payload_with_arrays():
    payload = {
        "w": np.linspace(-1, 1, 6).reshape(2, 3),
        "nested": [1, "two", None, True, 2.5, {"f32": np.arange(4, dtype=np.float32)}],
        "i64": np.array([-(2 ** 62), 0, 2 ** 62], dtype=np.int64),
        "mask": np.array([[True, False], [False, True]]),
        "scalar": np.array(3.25),
        "empty": np.zeros((0, 3)),
        "u8": np.arange(5, dtype=np.uint8),
        "f_order": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
        "strided": np.arange(10.0)[::3],
    }
    env = envelope(payload)
    out = decode(encode(env))
    assert (out.network, out.src_side, out.src_index, out.dst_side, out.dst_index, out.seq,
            out.call_id, out.method, out.kind) == (7, SPOKE, 2, HUB, 1, 5, 9, "push",
                                                   Kind.REQUEST)
    assert_same(payload, out.payload)
    assert out.payload["scalar"].shape == ()
    assert out.payload["empty"].shape == (0, 3)
    assert out.payload["w"].flags.writeable  # a copy, not a view of the message bytes


def test_codec_big_endian_arrays_come_back_with_the_same_values():
    x = np.arange(4, dtype=">i4")
    out = decode(encode(envelope([x]))).payload[0]
    np.testing.assert_array_equal(out, x)
    assert out.dtype == np.dtype("<i4")


def test_codec_arrays_travel_as_raw_little_endian_bytes_not_pickle():
    x = np.array([1.5, -2.0, 3.0], dtype=">f8")  # big-endian in memory
    data = encode(envelope({"x": x}, method="m"))
    *_, mlen, metalen = HEADER.unpack_from(data)
    meta = orjson.loads(data[HEADER.size + mlen:HEADER.size + mlen + metalen])
    assert meta == {"x": {"__nd__": [0, 24, "<f8", [3]]}}
    assert data[HEADER.size + mlen + metalen:] == struct.pack("<3d", 1.5, -2.0, 3.0)
    assert b"numpy" not in data and b"\x80\x04" not in data and b"\x80\x05" not in data


@settings(max_examples=60, deadline=None, database=None)
@given(
    arrays=st.lists(hnp.arrays(
        st.sampled_from([np.float64, np.float32, np.int64, np.int8, np.uint16, np.bool_]),
        hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)), max_size=4),
    extra=st.recursive(
        st.none() | st.booleans() | st.integers(-2 ** 63, 2 ** 63 - 1) | st.text(max_size=8)
        | st.floats(allow_nan=False, allow_infinity=False),
        lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids,
                                                                  max_size=3),
        max_leaves=10),
)
def test_codec_round_trip_property(arrays, extra):
    payload = {"arrays": arrays, "extra": extra}
    out = decode(encode(envelope(payload))).payload
    assert_same(payload, out)


@pytest.mark.parametrize("data", [
    b"",
    b'{"not": "an envelope"}',
    b"\xff\x01",  # shorter than a header
])
def test_decode_refuses_what_is_not_an_envelope(data):
    with pytest.raises(CodecError):
        decode(data)
    with pytest.raises(CodecError):
        peek(data)


def _corrupt(data: bytes, **fields) -> bytes:
    head = list(HEADER.unpack_from(data))
    names = ["magic", "version", "network", "src_side", "src_index", "dst_side", "dst_index",
             "seq", "call_id", "kind", "method_len", "meta_len"]
    for k, v in fields.items():
        head[names.index(k)] = v
    return HEADER.pack(*head) + data[HEADER.size:]


def _with_meta(meta: bytes) -> bytes:
    good = encode(envelope(None, method="m"))
    return _corrupt(good, meta_len=len(meta))[:HEADER.size + 1] + meta


@pytest.mark.parametrize("make", [
    lambda good: good[:-3],  # truncated
    lambda good: _corrupt(good, version=99),
    lambda good: _corrupt(good, kind=42),
    lambda good: _corrupt(good, method_len=60000),
    lambda good: _with_meta(b"{not json"),
    lambda good: _with_meta(b'{"__nd__": [0, 800, "<f8", [100]]}'),  # bytes missing
    lambda good: _with_meta(b'{"__nd__": [0, 0, "|O", [0]]}'),  # object arrays: never
    lambda good: _with_meta(b'{"__nd__": "nonsense"}'),
    lambda good: good[:HEADER.size] + b"\xfe" + good[HEADER.size + 1:],  # method not UTF-8
])
def test_decode_refuses_malformed_envelopes(make):
    good = encode(envelope([1, np.arange(3.0)], method="m"))
    with pytest.raises(CodecError):
        decode(make(good))


@pytest.mark.parametrize("payload", [
    {1, 2},  # a set
    np.array(["a", "b"]),  # strings
    np.array([object()], dtype=object),
    np.array([1 + 2j]),  # complex
    {1: "non-string key"},
])
def test_encode_refuses_what_json_and_numeric_arrays_cannot_carry(payload):
    with pytest.raises(CodecError):
        encode(envelope(payload))


def test_encode_refuses_header_fields_out_of_range():
    with pytest.raises(CodecError):
        encode(envelope(None, src_index=70000))


def test_is_envelope_and_peek():
    data = encode(envelope([1.0], dst_index=BROADCAST))
    assert is_envelope(data)
    assert peek(data) == (7, SPOKE, 2, HUB, BROADCAST)
    assert not is_envelope(b'{"request": "Create"}')
    assert not is_envelope(b"[1, 2]")
    assert not is_envelope(b"")
    assert not is_envelope(orjson.dumps({"x": "\u00ff"}))


# -- proxies: the four cases of papers/002 §3.1.2 ----------------------------------------

def test_one_way_call_to_one_node():
    net = network()
    assert net.spokes[0].peers[1].note("hello", 1) is None
    assert net.hubs[1].notes == []  # never delivered inside the call
    assert net.run() == 1
    assert net.hubs[1].notes == [("hello", 1)]
    assert net.hubs[0].notes == []
    assert sum(net.hubs[1].stats.sent_messages.values()) == 0  # nothing answered


def test_two_way_call_with_then():
    net = network()
    got = []
    call = net.spokes[1].peers[0].add(2, b=3)
    call.then(got.append)
    net.run()
    assert got == [5]
    assert call.done
    late = []
    call.then(late.append)  # a callback added after the answer still runs
    assert late == [5]


def test_one_way_broadcast():
    net = network(n_spokes=1, n_hubs=3)
    assert net.spokes[0].broadcast.note("all") is None
    net.run()
    assert [h.notes for h in net.hubs] == [[("all",)]] * 3


def test_two_way_broadcast_runs_the_callback_once_per_hub():
    net = network(n_spokes=1, n_hubs=3)
    got = []
    net.spokes[0].broadcast.whoami().then(got.append)
    net.run()
    assert sorted(got) == [0, 1, 2]


def test_hubs_call_spokes_too():
    net = network(n_spokes=3, n_hubs=1)
    net.hubs[0].broadcast.note("model", 1)
    net.hubs[0].peers[2].note("only you")
    net.run()
    assert [s.notes for s in net.spokes] == [[("model", 1)], [("model", 1)],
                                            [("model", 1), ("only you",)]]


@pytest.mark.parametrize("method, args, kwargs", [
    ("not_remote", (), {}),
    ("missing", (), {}),
    ("add", (), {}),  # a is required
    ("add", (1, 2, 3), {}),  # too many
    ("add", (1,), {"c": 2}),  # unknown keyword
])
def test_bad_calls_raise_on_the_caller_naming_the_method(method, args, kwargs):
    net = network()
    with pytest.raises(RemoteInterfaceError, match=method):
        getattr(net.spokes[0].peers[0], method)(*args, **kwargs)
    with pytest.raises(RemoteInterfaceError, match=method):
        getattr(net.spokes[0].broadcast, method)(*args, **kwargs)
    assert net.pending == 0 and sum(net.spokes[0].stats.sent_messages.values()) == 0
    assert issubclass(RemoteInterfaceError, TypeError)


def test_private_names_are_not_proxied():
    net = network()
    with pytest.raises(AttributeError):
        net.spokes[0].peers[0]._secret()


def test_remote_exception_comes_back_to_on_error():
    net = network()
    ok, errors = [], []
    net.spokes[0].peers[1].boom(7).then(ok.append).on_error(errors.append)
    net.run()
    assert ok == []
    [err] = errors
    assert isinstance(err, RemoteCallError) and isinstance(err, OmldmError)
    assert (err.node, err.method, err.remote_type) == ("hub 1", "boom", "ValueError")
    assert err.remote_message == "bad x: 7"
    assert "Traceback" in err.remote_traceback
    assert "in boom" in err.remote_traceback and "ValueError: bad x: 7" in err.remote_traceback
    assert "boom() on hub 1" in str(err)


def test_unhandled_remote_failure_is_logged(caplog):
    net = network()
    net.spokes[0].peers[0].boom(1)
    with caplog.at_level(logging.ERROR):
        net.run()
    assert "unhandled remote failure" in caplog.text and "boom" in caplog.text


def test_one_way_failure_is_logged_on_the_callee(caplog):
    net = network()
    net.spokes[0].peers[0].note(1)
    net.hubs[0].note = None  # breaks the method on this instance only
    with caplog.at_level(logging.ERROR):
        net.run()
    assert "one-way call note failed" in caplog.text


def test_unencodable_argument_fails_on_the_caller_and_the_channel_goes_on():
    net = network()
    with pytest.raises(CodecError):
        net.spokes[0].peers[0].note({1, 2})
    with pytest.raises(CodecError):
        net.spokes[0].peers[0].add({1}, 2)
    net.spokes[0].peers[0].note("after")
    net.run()
    assert net.hubs[0].notes == [("after",)]  # no sequence number was lost
    assert net.spokes[0]._calls == {}


def test_unencodable_result_comes_back_as_an_error():
    net = network()
    errors = []
    net.spokes[0].peers[0].unencodable().on_error(errors.append)
    net.run()
    assert [e.remote_type for e in errors] == ["CodecError"]


# -- promises ----------------------------------------------------------------------------

def test_promise_is_answered_when_fulfilled():
    net = network(n_hubs=1)
    got = []
    net.spokes[0].peers[0].later().then(got.append)
    net.run()
    assert got == [] and len(net.hubs[0].held) == 1
    net.hubs[0].held[0].fulfil({"w": np.ones(2)})
    net.run()
    [answer] = got
    np.testing.assert_array_equal(answer["w"], np.ones(2))


def test_promises_fulfilled_all_at_once():
    net = network(n_spokes=3, n_hubs=1)
    got = {}
    for i, spoke in enumerate(net.spokes):
        spoke.peers[0].later().then(lambda v, i=i: got.setdefault(i, v))
    net.run()
    Promise.fulfil_all(net.hubs[0].held, ["a", "b", "c"])
    net.run()
    assert got == {0: "a", 1: "b", 2: "c"}
    with pytest.raises(PromiseError):
        Promise.fulfil_all([Promise()], [1, 2])


def test_fulfilling_twice_raises():
    p = Promise()
    p.fulfil(1)
    with pytest.raises(PromiseError):
        p.fulfil(2)
    with pytest.raises(PromiseError):
        p.fail(ValueError("late"))
    assert p.value == 1 and not p.failed


def test_failed_promise_reaches_on_error():
    net = network(n_hubs=1)
    errors = []
    net.spokes[0].peers[0].later().on_error(errors.append)
    net.run()
    try:
        raise KeyError("no such model")
    except KeyError as exc:
        net.hubs[0].held[0].fail(exc)
    net.run()
    [err] = errors
    assert err.remote_type == "KeyError" and "no such model" in err.remote_traceback


def test_broadcast_promise_fulfilled_after_everyone_called():
    net = network(n_spokes=3, n_hubs=1)
    got = []
    for i, spoke in enumerate(net.spokes):
        spoke.peers[0].gather().then(lambda v, i=i: got.append((i, v)))
    net.run()
    assert got == []  # everyone called, not fulfilled yet
    net.hubs[0].round.fulfil("global model")
    net.run()
    assert sorted(got) == [(0, "global model"), (1, "global model"), (2, "global model")]


def test_broadcast_promise_fulfilled_before_everyone_called():
    net = network(n_spokes=3, n_hubs=1)
    net.hubs[0].round.fulfil(42)
    got = []
    for i, spoke in enumerate(net.spokes):
        spoke.peers[0].gather().then(lambda v, i=i: got.append((i, v)))
        net.run()
        if i < 2:
            assert got == []  # fulfilled, but not every spoke has called
    assert sorted(got) == [(0, 42), (1, 42), (2, 42)]


def test_barrier_is_a_method_returning_a_fulfilled_broadcast_promise():
    net = network(n_spokes=3, n_hubs=2)
    got = []
    for round_ in range(2):  # the same barrier works again in the next round
        for i, spoke in enumerate(net.spokes):
            spoke.broadcast.barrier().then(lambda v, i=i, r=round_: got.append((r, i, v)))
            net.run()
            assert len(got) == (6 * round_ if i < 2 else 6 * (round_ + 1))
    assert sorted(got) == sorted((r, i, "go") for r in range(2) for i in range(3) for _ in "hh")


def test_answered_broadcast_promise_is_not_reused_silently():
    net = network(n_spokes=2, n_hubs=1)
    net.hubs[0].round.fulfil(1)
    for spoke in net.spokes:
        spoke.peers[0].gather()
    net.run()
    errors = []
    net.spokes[0].peers[0].gather().on_error(errors.append)  # round is answered already
    net.run()
    assert [e.remote_type for e in errors] == ["PromiseError"]


# -- then_sync: pausing a spoke's stream -------------------------------------------------

def test_then_sync_pauses_the_stream_until_the_callback_ran():
    net = network(n_spokes=2, n_hubs=1)
    log = []
    net.spokes[0].peers[0].later().then_sync(lambda v: log.append(("answer", v)))
    assert net.paused(0) and not net.paused(1)
    for r in range(5):
        net.feed(0, lambda r=r: log.append(r))
    net.feed(1, lambda: log.append("spoke 1 is not paused"))
    net.run()
    assert log == ["spoke 1 is not paused"] and net.paused(0)
    net.hubs[0].held[0].fulfil("model")
    net.run()
    assert log == ["spoke 1 is not paused", ("answer", "model"), 0, 1, 2, 3, 4]
    assert not net.paused(0)
    net.feed(0, lambda: log.append("live"))
    assert log[-1] == "live"


def test_then_sync_on_a_broadcast_waits_for_every_answer():
    net = network(n_spokes=1, n_hubs=3)
    log = []
    net.spokes[0].broadcast.later().then_sync(log.append)
    net.feed(0, lambda: log.append("record"))
    net.run()
    for i, hub in enumerate(net.hubs):
        assert net.paused(0)
        hub.held[0].fulfil(i)
        net.run()
    assert log == [0, 1, 2, "record"] and not net.paused(0)


def test_a_record_that_syncs_holds_back_the_records_after_it():
    net = network(n_spokes=1, n_hubs=1)
    spoke, log = net.spokes[0], []

    def record(r):
        log.append(r)
        if r == 1:
            spoke.peers[0].add(10, 1).then_sync(lambda v: log.append(("sum", v)))

    for r in range(4):
        net.feed(0, lambda r=r: record(r))
    assert log == [0, 1] and net.paused(0)
    net.run()
    assert log == [0, 1, ("sum", 11), 2, 3]


def test_a_raising_sync_callback_still_resumes_the_stream():
    net = network(n_spokes=1, n_hubs=1)

    def bad(value):
        raise RuntimeError("callback bug")

    net.spokes[0].peers[0].add(1).then_sync(bad)
    net.spokes[0].peers[0].note("queued behind")  # unrelated, must still arrive
    with pytest.raises(RuntimeError, match="callback bug"):
        net.run()
    assert not net.paused(0)
    net.run()
    assert net.hubs[0].notes == [("queued behind",)]


def test_then_sync_is_for_spokes_only():
    net = network(n_spokes=1, n_hubs=1)
    call = net.hubs[0].peers[0].echo(1)
    with pytest.raises(PromiseError, match="spokes only"):
        call.then_sync(print)


# -- FIFO, exactly once, over a shuffling, duplicating transport -------------------------

def test_fifo_exactly_once_under_shuffle_and_duplicates():
    net = network(n_spokes=3, n_hubs=2, shuffle=True, duplicate=0.3, seed=11)
    for seq in range(200):
        for i, spoke in enumerate(net.spokes):
            spoke.peers[seq % 2].note(i, seq)
            spoke.broadcast.note(i, -seq)
    net.run()
    assert net.delivered > 3 * 600  # duplicates were delivered ...
    for h, hub in enumerate(net.hubs):
        assert hub.stats.duplicates > 0  # ... and dropped by the middleware
        for i in range(3):
            seen = [v for src, v in hub.notes if src == i]
            expected = [x for seq in range(200)
                        for x in ([seq] if seq % 2 == h else []) + [-seq]]
            assert seen == expected


def test_answers_keep_their_order_under_shuffle_and_duplicates():
    """FIFO is per channel: answers from one hub come back in the order of the calls."""
    net = network(n_spokes=2, n_hubs=2, shuffle=True, duplicate=0.3, seed=3)
    got = {(i, h): [] for i in range(2) for h in range(2)}
    for x in range(100):
        for i, spoke in enumerate(net.spokes):
            spoke.peers[x % 2].add(x, i).then(got[i, x % 2].append)
    net.run()
    for (i, h), answers in got.items():
        assert answers == [x + i for x in range(h, 100, 2)]
    assert all(s._calls == {} for s in net.spokes)


# -- statistics and the kernel -----------------------------------------------------------

def test_statistics_count_messages_and_bytes_by_kind():
    net = network(n_spokes=1, n_hubs=1)
    spoke, hub = net.spokes[0], net.hubs[0]
    spoke.peers[0].note(np.zeros(100))
    spoke.peers[0].add(1, 2)
    spoke.peers[0].boom(0).on_error(lambda e: None)
    net.run()
    assert spoke.stats.sent_messages == {"ONEWAY": 1, "REQUEST": 2}
    assert hub.stats.received_messages == {"ONEWAY": 1, "REQUEST": 2}
    assert hub.stats.sent_messages == {"RESPONSE": 1, "ERROR": 1}
    assert spoke.stats.received_messages == {"RESPONSE": 1, "ERROR": 1}
    assert spoke.stats.sent_bytes == hub.stats.received_bytes
    assert hub.stats.sent_bytes == spoke.stats.received_bytes
    assert spoke.stats.sent_bytes["ONEWAY"] > 800  # 100 float64 travel as 800 raw bytes
    summary = spoke.stats.to_json()
    assert summary["messages_sent"] == 3 and summary["messages_received"] == 2
    assert summary["bytes_sent"] == sum(spoke.stats.sent_bytes.values())
    orjson.dumps(summary)


def test_a_response_travels_without_its_method_name(monkeypatch):
    """A RESPONSE names its call by ``call_id`` alone: its method's name stays off the
    wire (17 of the 56 bytes of FDA's answer to an increment), while requests and errors
    keep theirs, answers still reach their callers and the per-method statistics still
    count the response under its method."""
    from middleware import codec
    wire: list[bytes] = []
    encode_ = codec.encode
    monkeypatch.setattr(codec, "encode", lambda env: wire.append(encode_(env)) or wire[-1])
    net = network(n_spokes=1, n_hubs=1)
    spoke, hub = net.spokes[0], net.hubs[0]
    got, errors = [], []
    spoke.peers[0].add(1, 2).then(got.append)
    spoke.peers[0].boom(0).on_error(errors.append)
    net.run()
    assert got == [3] and len(errors) == 1 and "boom" in str(errors[0])
    sent = {(e.kind, e.method) for e in map(decode, wire)}
    assert sent == {(Kind.REQUEST, "add"), (Kind.REQUEST, "boom"), (Kind.RESPONSE, ""),
                    (Kind.ERROR, "boom")}
    assert hub.stats.sent_by_method["add"] == 1


def test_statistics_count_duplicates():
    net = network(n_spokes=1, n_hubs=1, duplicate=0.5, seed=1)
    for x in range(50):
        net.spokes[0].peers[0].note(x)
    net.run()
    hub = net.hubs[0]
    assert [v for (v,) in hub.notes] == list(range(50))
    assert hub.stats.duplicates == hub.stats.received_messages["ONEWAY"] - 50 > 0


def test_nodes_emit_outputs_through_the_kernel():
    net = network(n_spokes=1, n_hubs=2)
    net.spokes[0].broadcast.report("ok")
    net.run()
    assert sorted(net.outputs["responses"], key=lambda r: r["hub"]) == [
        {"hub": 0, "value": "ok"}, {"hub": 1, "value": "ok"}]


def test_kernel_drops_bytes_that_are_not_envelopes():
    net = network(n_spokes=1, n_hubs=1)
    net.spokes[0].ctx.send(0, b'{"junk": true}')
    net.spokes[0].peers[0].note("fine")
    assert net.run() == 2
    assert net.dropped == 1 and net.hubs[0].notes == [("fine",)]


def test_kernel_contexts_know_their_place():
    net = network(n_spokes=3, n_hubs=2, network=5)
    ctx = net.hubs[1].ctx
    assert (ctx.network, ctx.side, ctx.index, ctx.n_spokes, ctx.n_hubs) == (5, HUB, 1, 3, 2)
    assert net.spokes[2].name == "spoke 2" and len(net.spokes[2].peers) == 2
    assert len(net.hubs[0].peers) == 3
    with pytest.raises(ValueError):
        net.spokes[0].ctx.send(2, b"")
    with pytest.raises(ValueError, match="duplicate"):
        network(duplicate=1.0)


def test_run_stops_after_max_steps():
    net = network(n_spokes=1, n_hubs=1)
    for x in range(5):
        net.spokes[0].peers[0].note(x)
    assert net.run(max_steps=2) == 2 and net.pending == 3
    assert net.run() == 3 and net.pending == 0


def test_a_node_without_peer_cannot_attach():
    class Lonely(Node):
        pass

    with pytest.raises(RemoteInterfaceError, match="peer"):
        LocalNetwork([Lonely()], [Hub()])
