"""Payloads of any size and cheaper encodings chosen by the sender (issue 3): fragmentation
and reassembly of a 50 MB vector, sparse and float32 arrays, remote errors that can be
caught as their original built-in type."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from middleware import Float32, Kind, Node, RemoteCallError, Sparse, remote
from middleware.codec import decode, encode
from middleware.envelope import Envelope
from middleware.node import DEFAULT_MAX_MESSAGE_BYTES
from operators.local import LocalNetwork


class Store(Node):
    """A hub keeping what it is sent and answering it back."""

    def __init__(self) -> None:
        super().__init__()
        self.got = []

    @remote
    def put(self, value):
        self.got.append(value)
        return value

    @remote
    def fail(self, kind: str):
        raise {"value": ValueError, "key": KeyError, "custom": _Custom}[kind]("nope")


class _Custom(Exception):
    pass


class Client(Node):
    peer = Store


Store.peer = Client


def pair(shuffle=False, duplicate=0.0):
    client, store = Client(), Store()
    net = LocalNetwork([client], [store], shuffle=shuffle, duplicate=duplicate, seed=11)
    return net, client, store


def test_a_50_mb_vector_is_fragmented_and_reassembled_both_ways():
    net, client, store = pair()
    w = np.random.default_rng(0).standard_normal(50 * 1024 * 1024 // 8)  # 50 MB float64
    answers = []
    t0 = time.perf_counter()
    client.peers[0].put(w).then(answers.append)
    net.run()
    seconds = time.perf_counter() - t0
    assert np.array_equal(store.got[0], w) and np.array_equal(answers[0], w)
    sent = client.stats.sent_messages
    assert sent["FRAGMENT"] == -(-w.nbytes // (DEFAULT_MAX_MESSAGE_BYTES - 256)) and sent["REQUEST"] == 0
    assert max(client.stats.sent_bytes["FRAGMENT"] / sent["FRAGMENT"], 0) <= DEFAULT_MAX_MESSAGE_BYTES
    print(f"50 MB round trip in {sent['FRAGMENT']} fragments each way: {seconds:.2f} s")


@settings(max_examples=25, deadline=None)
@given(size=st.integers(0, 40_000), limit=st.integers(1024, 9000), seed=st.integers(0, 5))
def test_fragments_survive_shuffling_and_duplicates(size, limit, seed):
    client, store = Client(), Store()
    net = LocalNetwork([client], [store], shuffle=True, duplicate=0.3, seed=seed,
                       limits={"max_message_bytes": limit})
    values = [np.arange(size, dtype=np.float64) + k for k in range(3)]
    for v in values:
        client.peers[0].put(v)
    net.run()
    assert len(store.got) == 3
    for got, v in zip(store.got, values):
        assert np.array_equal(got, v)


def test_sparse_payload_sends_only_non_zeros_and_arrives_dense():
    w = np.zeros(100_000)
    w[[7, 70_000, 99_999]] = [1.25, -3.5, 2.0]
    dense = encode(Envelope(0, 0, 0, 1, 0, 0, 1, "put", Kind.REQUEST, [w]))
    sparse = encode(Envelope(0, 0, 0, 1, 0, 0, 1, "put", Kind.REQUEST, [Sparse(w)]))
    assert len(sparse) < 300 < 800_000 < len(dense)
    got = decode(sparse).payload[0]
    assert got.dtype == np.float64 and np.array_equal(got, w)
    net, client, store = pair()
    client.peers[0].put(Sparse(w.reshape(100, 1000), float32=True))
    net.run()
    assert store.got[0].shape == (100, 1000) and store.got[0].dtype == np.float32
    assert np.array_equal(store.got[0].ravel(), w.astype(np.float32))


def test_float32_payload_halves_the_bytes():
    w = np.random.default_rng(1).standard_normal(10_000)
    full = encode(Envelope(0, 0, 0, 1, 0, 0, 1, "put", Kind.REQUEST, [w]))
    half = encode(Envelope(0, 0, 0, 1, 0, 0, 1, "put", Kind.REQUEST, [Float32(w)]))
    assert len(half) < 0.51 * len(full)
    got = decode(half).payload[0]
    assert got.dtype == np.float32 and np.allclose(got, w, rtol=1e-6)


def test_malformed_sparse_payload_is_refused():
    from middleware.errors import CodecError

    data = bytearray(encode(Envelope(0, 0, 0, 1, 0, 0, 1, "put", Kind.REQUEST,
                                     [Sparse(np.eye(3))])))
    data = bytes(data).replace(b'[3,3]', b'[1,1]')  # indices now out of range
    with pytest.raises(CodecError, match="sparse"):
        decode(data)


@pytest.mark.parametrize("kind,builtin", [("value", ValueError), ("key", KeyError)])
def test_remote_builtin_errors_can_be_caught_as_their_type(kind, builtin):
    net, client, _ = pair()
    errors = []
    client.peers[0].fail(kind).on_error(errors.append)
    net.run()
    (err,) = errors
    assert isinstance(err, RemoteCallError) and isinstance(err, builtin)
    assert err.node == "hub 0" and err.method == "fail" and "Traceback" in err.remote_traceback
    with pytest.raises(builtin):
        raise err


def test_remote_user_errors_stay_remote_call_errors():
    net, client, _ = pair()
    errors = []
    client.peers[0].fail("custom").on_error(errors.append)
    net.run()
    assert type(errors[0]) is RemoteCallError and errors[0].remote_type == "_Custom"
