"""The only place where messages become bytes and back (no pickle, ever).

Four kinds of bytes travel between the job's operators; the first byte tells them apart
(:func:`wire_kind`), and only this module reads or writes their headers:

========  =========================  =====================================================
first     kind                       what
========  =========================  =====================================================
``0xFF``  envelope (:func:`encode`)  a node's message (papers/002 §3.2.1), below
``0xFE``  frame (:func:`frame`)      a hub→spoke envelope on ``psMessages`` with its hub's
                                     incarnation (:mod:`operators.feedback`)
``0xFC``  sibling frame              a spoke→spoke record on ``psMessages``: an envelope
          (:func:`sibling_frame`)    with its spoke kernel's incarnation, or that channel's
                                     bookkeeping (resync, answer, acknowledgement)
``0xFD``  control (:func:`control`)  a kernel's bookkeeping, spoke→hub: pipeline
                                     lifecycle, acknowledgements, resync (JSON object)
other     request                    a user's JSON control request (``requests`` topic)
========  =========================  =====================================================

Data records reach the spokes on their own input, in batches assembled in Java
(:func:`record_batch`, :func:`read_batch`).

Envelope wire format, little-endian::

    magic 0xFF | version u8 | network u32 | src_side u8 | src_index u16 | dst_side u8 |
    dst_index u16 | seq u64 | call_id u64 | kind u8 | method_len u16 | meta_len u32 |
    method (utf-8) | meta (JSON, orjson) | array blobs (raw bytes, concatenated)

A RESPONSE's method is empty: its ``call_id`` names the call (:meth:`middleware.node.Node._send`).

0xFF never starts valid UTF-8, so envelopes can share a stream with JSON control
messages. The JSON meta holds the payload with every numpy array replaced by
``{"__nd__": [offset, nbytes, dtype, shape]}``; the array's bytes are its little-endian
C-order buffer. Arrays with dtypes other than bool/int/uint/float are refused.

The sender may choose a cheaper form per array:

* :class:`Float32` — the values as little-endian float32 (half the bytes of float64);
  the receiver gets a float32 array.
* :class:`Sparse` — only the non-zero entries, as ``{"__sp__": [shape, indices, values]}``
  (indices int32, or int64 for arrays of 2**31 entries or more; values in the array's
  dtype or float32); the receiver gets the dense array back.

>>> import numpy as np
>>> from middleware.envelope import Envelope, Kind
>>> w = np.zeros(1000); w[[3, 500]] = [1.5, -2.0]
>>> env = Envelope(0, 0, 1, 1, 0, 0, 7, "push", Kind.REQUEST, [Sparse(w, float32=True)])
>>> data = encode(env)
>>> len(data) < 200, decode(data).payload[0][500]
(True, np.float32(-2.0))
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import orjson

from middleware.envelope import Envelope, Kind
from middleware.errors import CodecError

__all__ = ["MAGIC", "FRAME_MAGIC", "CONTROL_MAGIC", "SIBLING_MAGIC", "HEADER", "FRAME",
           "SIBLING_FRAME", "Wire", "wire_kind", "Sparse", "Float32",
           "encode", "decode", "peek", "header", "Route", "Header", "is_envelope",
           "Frame", "frame", "unframe", "is_frame", "SiblingOp", "SiblingFrame", "sibling_frame",
           "unframe_sibling", "is_sibling_frame", "frame_destination", "control",
           "read_control", "record_batch", "read_batch"]

MAGIC = 0xFF
FRAME_MAGIC = 0xFE
CONTROL_MAGIC = 0xFD
SIBLING_MAGIC = 0xFC
VERSION = 1
HEADER = struct.Struct("<BBIBHBHQQBHI")
FRAME = struct.Struct("<BqqIiHHq")
SIBLING_FRAME = struct.Struct("<BBqqQiHHqqQ")


class Wire(enum.Enum):
    """What a message's bytes are (:func:`wire_kind`)."""

    ENVELOPE = MAGIC
    FRAME = FRAME_MAGIC
    CONTROL = CONTROL_MAGIC
    SIBLING = SIBLING_MAGIC
    REQUEST = 0  # anything else: a user's JSON request, or garbage


def wire_kind(data: bytes) -> Wire:
    """The kind of ``data`` by its first byte (0xFF/0xFE/0xFD/0xFC never start valid
    UTF-8, so a JSON request is never mistaken for the others)."""
    first = data[0] if data else 0
    if first == MAGIC:
        return Wire.ENVELOPE
    if first == FRAME_MAGIC:
        return Wire.FRAME
    if first == CONTROL_MAGIC:
        return Wire.CONTROL
    if first == SIBLING_MAGIC:
        return Wire.SIBLING
    return Wire.REQUEST


class Route(NamedTuple):
    """Where an envelope goes (:func:`peek`)."""

    network: int
    src_side: int
    src_index: int
    dst_side: int
    dst_index: int


class Header(NamedTuple):
    """An envelope's whole header (:func:`header`): route, channel sequence number, call
    id, kind (an int of :class:`~middleware.envelope.Kind`), method and meta lengths
    (bytes)."""

    network: int
    src_side: int
    src_index: int
    dst_side: int
    dst_index: int
    seq: int
    call_id: int
    kind: int
    method_len: int
    meta_len: int
_ND = "__nd__"
_SP = "__sp__"
_KINDS = "biuf"


@dataclass(frozen=True)
class Float32:
    """Wrap an array to send it as float32 (the receiver gets float32 values)."""

    array: np.ndarray


@dataclass(frozen=True)
class Sparse:
    """Wrap an array to send only its non-zero entries (indices + values); the receiver
    gets the dense array, in float32 when ``float32`` is set."""

    array: np.ndarray
    float32: bool = False


def is_envelope(data: bytes) -> bool:
    """True when ``data`` starts like an envelope (a JSON request never does)."""
    return len(data) > 0 and data[0] == MAGIC


def _sparse(sp: Sparse, blobs: list[bytes], offset: list[int]) -> dict:
    a = np.asarray(sp.array)
    if a.dtype.kind not in _KINDS:
        raise CodecError(f"cannot encode an array of dtype {a.dtype}")
    flat = a.reshape(-1)
    idx = np.flatnonzero(flat)
    idx = idx.astype("<i4" if flat.size < 2**31 else "<i8", copy=False)
    vals = flat[idx]
    if sp.float32:
        vals = vals.astype("<f4")
    return {_SP: [list(a.shape), _strip(idx, blobs, offset), _strip(vals, blobs, offset)]}


def _strip(obj: Any, blobs: list[bytes], offset: list[int]) -> Any:
    if isinstance(obj, Sparse):
        return _sparse(obj, blobs, offset)
    if isinstance(obj, Float32):
        obj = np.asarray(obj.array).astype("<f4")
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in _KINDS:
            raise CodecError(f"cannot encode an array of dtype {obj.dtype}")
        arr = obj.astype(obj.dtype.newbyteorder("<"), copy=False)  # keeps 0-d arrays 0-d
        raw = arr.tobytes(order="C")
        ref = {_ND: [offset[0], len(raw), arr.dtype.str, list(arr.shape)]}
        blobs.append(raw)
        offset[0] += len(raw)
        return ref
    if isinstance(obj, (list, tuple)):
        return [_strip(v, blobs, offset) for v in obj]
    if isinstance(obj, dict):
        return {k: _strip(v, blobs, offset) for k, v in obj.items()}
    return obj


def _restore(obj: Any, body: memoryview) -> Any:
    if isinstance(obj, list):
        return [_restore(v, body) for v in obj]
    if isinstance(obj, dict):
        ref = obj.get(_ND)
        if ref is not None and len(obj) == 1:
            try:
                off, n, dtype, shape = ref
                dt = np.dtype(dtype)
                if dt.kind not in _KINDS or off < 0 or n < 0 or off + n > len(body):
                    raise ValueError("bad array reference")
                return np.frombuffer(body[off:off + n], dtype=dt).reshape(shape).copy()
            except (TypeError, ValueError) as exc:
                raise CodecError(f"bad array in payload: {exc}") from exc
        sp = obj.get(_SP)
        if sp is not None and len(obj) == 1:
            return _dense(sp, body)
        return {k: _restore(v, body) for k, v in obj.items()}
    return obj


def _dense(sp: Any, body: memoryview) -> np.ndarray:
    try:
        shape, idx, vals = sp
        idx, vals = _restore(idx, body), _restore(vals, body)
        if not (isinstance(idx, np.ndarray) and isinstance(vals, np.ndarray)):
            raise ValueError("indices and values must be arrays")
        size = int(np.prod(shape, dtype=np.int64))
        if idx.shape != vals.shape or idx.ndim != 1 or idx.dtype.kind not in "iu" or (
                idx.size and (idx.min() < 0 or idx.max() >= size)):
            raise ValueError("indices out of range or not matching the values")
        out = np.zeros(size, dtype=vals.dtype)
        out[idx] = vals
        return out.reshape(shape)
    except (TypeError, ValueError) as exc:
        raise CodecError(f"bad sparse array in payload: {exc}") from exc


def encode(env: Envelope) -> bytes:
    """Encode an envelope.

    Raises
    ------
    CodecError
        When the payload holds something neither JSON nor a numeric numpy array, or a
        header field is out of range (e.g. an index above 65535).
    """
    blobs: list[bytes] = []
    try:
        meta = orjson.dumps(_strip(env.payload, blobs, [0]), option=orjson.OPT_SERIALIZE_NUMPY)
    except TypeError as exc:
        raise CodecError(f"cannot encode payload of {env.method}: {exc}") from exc
    method = env.method.encode()
    try:
        head = HEADER.pack(MAGIC, VERSION, env.network, env.src_side, env.src_index,
                           env.dst_side, env.dst_index, env.seq, env.call_id, int(env.kind),
                           len(method), len(meta))
    except struct.error as exc:
        raise CodecError(f"envelope header out of range for {env.method}: {exc}") from exc
    return b"".join((head, method, meta, *blobs))


def header(data: bytes) -> Header:
    """The envelope's header, read without decoding the payload.

    Raises
    ------
    CodecError
        When ``data`` is not an envelope.
    """
    if len(data) < HEADER.size or data[0] != MAGIC:
        raise CodecError(f"not an envelope ({len(data)} bytes)")
    return Header._make(HEADER.unpack_from(data)[2:])


def peek(data: bytes) -> Route:
    """``Route(network, src_side, src_index, dst_side, dst_index)`` from the header alone
    (the first fields of :func:`header`).

    Raises
    ------
    CodecError
        When ``data`` is not an envelope.
    """
    return Route._make(header(data)[:5])


def decode(data: bytes) -> Envelope:
    """Decode bytes made by :func:`encode`.

    Raises
    ------
    CodecError
        On a wrong magic/version, truncated data, or malformed meta.
    """
    if len(data) < HEADER.size or data[0] != MAGIC:
        raise CodecError(f"not an envelope ({len(data)} bytes)")
    (_, version, network, ss, si, ds, di, seq, call_id, kind, mlen,
     metalen) = HEADER.unpack_from(data)
    if version != VERSION:
        raise CodecError(f"unsupported envelope version {version}")
    start = HEADER.size
    if start + mlen + metalen > len(data):
        raise CodecError("truncated envelope")
    view = memoryview(data)
    try:
        method = bytes(view[start:start + mlen]).decode()
        meta = orjson.loads(view[start + mlen:start + mlen + metalen])
        payload = _restore(meta, view[start + mlen + metalen:])
        return Envelope(network, ss, si, ds, di, seq, call_id, method, Kind(kind), payload)
    except (UnicodeDecodeError, orjson.JSONDecodeError, ValueError) as exc:
        raise CodecError(f"malformed envelope: {exc}") from exc


# -- frames: hub→spoke envelopes on psMessages (operators.feedback) ------------------------

class Frame(NamedTuple):
    """A frame's header (37 bytes, ``<BqqIiHHq`` after the magic 0xFE): the sending hub
    kernel's incarnation, the incarnation it restored from (``prev``, 0: none), the
    channel's ``base`` (the sequence number the restored hub resumed at), the route, and
    the ``nonce`` of the resync it answers (0: none). See :mod:`operators.feedback`."""

    incarnation: int
    prev: int
    base: int
    network: int
    hub: int
    spoke: int
    nonce: int


def frame(inc: int, prev: int, base: int, network: int, hub: int, spoke: int,
          body: bytes = b"", nonce: int = 0) -> bytes:
    """A framed hub→spoke record (``body``: envelope bytes, empty for a resync answer)."""
    return FRAME.pack(FRAME_MAGIC, inc, prev, base, network, hub, spoke, nonce) + body


def is_frame(data: bytes) -> bool:
    return len(data) >= FRAME.size and data[0] == FRAME_MAGIC


def unframe(data: bytes) -> tuple[Frame, bytes]:
    """``(Frame, body)``.

    Raises
    ------
    CodecError
        When ``data`` is not a frame.
    """
    if not is_frame(data):
        raise CodecError(f"not a feedback frame ({len(data)} bytes)")
    return Frame._make(FRAME.unpack_from(data)[1:]), data[FRAME.size:]


# -- sibling frames: spoke→spoke records on psMessages (operators.feedback) ----------------

class SiblingOp(enum.IntEnum):
    """What a sibling frame carries (:func:`sibling_frame`)."""

    DATA = 0    # an envelope of the channel src → dst
    ANSWER = 1  # src's answer to dst's resync ``nonce`` (no body)
    RESYNC = 2  # src, just restored, asks dst where dst's timeline is (``nonce``; no body)
    ACK = 3     # only the acknowledgement fields (no body)


class SiblingFrame(NamedTuple):
    """A sibling frame's header (58 bytes, ``<BBqqQiHHqqQ`` after the magic 0xFC).

    ``op`` (:class:`SiblingOp`); the sending spoke kernel's ``incarnation``, the one it
    restored from (``prev``, 0: none) and the channel's ``base`` (the sequence number the
    restored sender resumed at on the channel ``src`` → ``dst``), as in a hub frame
    (:class:`Frame`); the route (``network``, spoke ``src`` → spoke ``dst``); ``nonce``:
    the resync that an ANSWER answers or a RESYNC asks (0: none). Every op also carries an
    acknowledgement of the reverse channel, ``dst`` → ``src``: ``src`` has delivered
    every envelope numbered below ``ack`` that ``dst``'s incarnation ``ack_incarnation``
    sent it (0: no acknowledgement). See :mod:`operators.feedback`."""

    op: int
    incarnation: int
    prev: int
    base: int
    network: int
    src: int
    dst: int
    nonce: int
    ack_incarnation: int
    ack: int


def sibling_frame(op: SiblingOp, inc: int, prev: int, base: int, network: int, src: int,
                  dst: int, body: bytes = b"", nonce: int = 0, ack_inc: int = 0,
                  ack: int = 0) -> bytes:
    """A framed spoke→spoke record (``body``: envelope bytes for :attr:`SiblingOp.DATA`,
    empty otherwise); the fields are those of :class:`SiblingFrame`.

    Raises
    ------
    CodecError
        When a field is out of range (e.g. a spoke index above 65535).
    """
    try:
        return SIBLING_FRAME.pack(SIBLING_MAGIC, int(op), inc, prev, base, network, src, dst,
                                  nonce, ack_inc, ack) + body
    except struct.error as exc:
        raise CodecError(f"sibling frame header out of range: {exc}") from exc


def is_sibling_frame(data: bytes) -> bool:
    return len(data) >= SIBLING_FRAME.size and data[0] == SIBLING_MAGIC


def unframe_sibling(data: bytes) -> tuple[SiblingFrame, bytes]:
    """``(SiblingFrame, body)``.

    Raises
    ------
    CodecError
        When ``data`` is not a sibling frame, or its op is unknown.
    """
    if not is_sibling_frame(data):
        raise CodecError(f"not a sibling frame ({len(data)} bytes)")
    head = SiblingFrame._make(SIBLING_FRAME.unpack_from(data)[1:])
    if head.op > SiblingOp.ACK:
        raise CodecError(f"unknown sibling frame op {head.op}")
    return head, data[SIBLING_FRAME.size:]


def frame_destination(data: bytes) -> int:
    """The spoke index a hub frame or a sibling frame goes to (-1 when ``data`` is
    neither)."""
    if is_frame(data):
        return FRAME.unpack_from(data)[6]
    if is_sibling_frame(data):
        return SIBLING_FRAME.unpack_from(data)[7]
    return -1


# -- controls: a kernel's bookkeeping, spoke→hub -------------------------------------------

def control(msg: dict) -> bytes:
    """A kernel control message: ``0xFD`` then the JSON object ``msg`` (``{"op": ...}``)."""
    return b"\xfd" + orjson.dumps(msg)


def read_control(data: bytes) -> dict:
    """The JSON object of a control message.

    Raises
    ------
    CodecError
        When ``data`` is not a control message, or its JSON is not an object with ``op``.
    """
    if not data or data[0] != CONTROL_MAGIC:
        raise CodecError(f"not a control message ({len(data)} bytes)")
    try:
        msg = orjson.loads(memoryview(data)[1:])
    except orjson.JSONDecodeError as exc:
        raise CodecError(f"malformed control message: {exc}") from exc
    if not isinstance(msg, dict) or "op" not in msg:
        raise CodecError("a control message is a JSON object with 'op'")
    return msg


# -- record batches: data records from Java's omldm.RecordBatcher (flink_jobs/java) --------

def record_batch(records) -> bytes:
    """A batch of data records as ``omldm.RecordBatcher`` (``flink_jobs/java``) writes it:
    little-endian ``int32 n``, ``int32 length[n]`` (bytes), ``uint8 training[n]`` (1: from
    ``training``, 0: from ``forecasting``), then the records' bytes one after the other.

    Parameters
    ----------
    records : iterable of (bool, bytes)
        ``(training?, the Kafka record's value)`` in arrival order.
    """
    records = list(records)
    return b"".join([struct.pack(f"<i{len(records)}i", len(records), *(len(v) for _, v in records)),
                     bytes(1 if train else 0 for train, _ in records)] + [v for _, v in records])


def read_batch(data: bytes) -> list[tuple[bool, memoryview]]:
    """The records of a :func:`record_batch`: ``[(training?, the record's bytes), ...]`` in
    order (views into ``data``, no copy).

    Raises
    ------
    struct.error
        When ``data`` is shorter than its own lengths say (Java never writes that).
    """
    n = int.from_bytes(data[:4], "little")
    pos = 4 + 5 * n
    training = data[4 + 4 * n:pos]
    view = memoryview(data)
    out = []
    for i, length in enumerate(struct.unpack_from(f"<{n}i", data, 4)):
        out.append((training[i] == 1, view[pos:pos + length]))
        pos += length
    return out
