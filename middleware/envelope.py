"""The message envelope exchanged between nodes (papers/002 §3.2.1: the kernel treats it
as a blob; only :mod:`middleware.codec` turns it into bytes)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

__all__ = ["SPOKE", "HUB", "BROADCAST", "Kind", "Envelope", "side_name"]

SPOKE = 0
HUB = 1
BROADCAST = 0xFFFF  # destination index meaning "every node of the other side"


def side_name(side: int) -> str:
    return "spoke" if side == SPOKE else "hub"


class Kind(enum.IntEnum):
    """What an envelope carries."""

    ONEWAY = 1  # call, no answer expected
    REQUEST = 2  # call, answer expected
    RESPONSE = 3  # answer to a REQUEST
    ERROR = 4  # the remote method raised; payload describes the error
    FRAGMENT = 5  # one piece of a larger encoded envelope: payload [index, count, uint8 array]


@dataclass(frozen=True, slots=True)
class Envelope:
    """One message on a (sender, receiver) channel of one network.

    Attributes
    ----------
    network : int
        The network (pipeline) id, 0 .. 2**32-1.
    src_side, src_index : int
        Sender side (:data:`SPOKE` or :data:`HUB`) and index within its side.
    dst_side, dst_index : int
        Receiver side and index.
    seq : int
        Per-channel sequence number, from 0, assigned by the sender's middleware.
    call_id : int
        Correlates a RESPONSE/ERROR with its REQUEST; 0 for ONEWAY.
    method : str
        Remote method name (for responses: the method answered).
    kind : Kind
    payload : Any
        JSON-like data (None, bool, int, float, str, list, dict with str keys) and numpy
        arrays at any depth.
    """

    network: int
    src_side: int
    src_index: int
    dst_side: int
    dst_index: int
    seq: int
    call_id: int
    method: str
    kind: Kind
    payload: Any = None

    @property
    def channel(self) -> tuple[int, int, int]:
        """``(network, src_side, src_index)``: the receiver's key for FIFO ordering."""
        return self.network, self.src_side, self.src_index
