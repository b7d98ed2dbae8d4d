"""The network / middleware layer: an asynchronous RMI-style API over a bipartite network
of spokes and hubs (papers/002_9b954bd89ad87406.txt §3.1).

A node class declares its remote methods with :func:`remote`; every node gets a proxy for
each node of the other side and a broadcast proxy, and the same for the other nodes of its
own side (``siblings``, ``sibling_broadcast``: spoke→spoke channels); calls never block and return a
:class:`~middleware.promise.Call` on which ``then``, ``then_sync`` and ``on_error`` register
callbacks. Remote methods may answer later through a :class:`~middleware.promise.Promise`
or, for all nodes of the other side at once, a :class:`~middleware.promise.BroadcastPromise`.
Messages are :class:`~middleware.envelope.Envelope` objects, encoded to bytes by
:mod:`middleware.codec` only; channels are FIFO with duplicates dropped by sequence number.

The kernel (Flink, or the in-process kernel of the tests) provides each node a
:class:`~middleware.node.NetworkContext` and hands it incoming message bytes with
:meth:`~middleware.node.Node.deliver`. Nothing here imports Flink or Kafka.
"""

from middleware.codec import Float32, Sparse
from middleware.envelope import BROADCAST, HUB, SPOKE, Envelope, Kind
from middleware.errors import (CodecError, OmldmError, PromiseError, RemoteCallError,
                               RemoteInterfaceError)
from middleware.node import NetworkContext, Node
from middleware.promise import BroadcastPromise, Call, Promise
from middleware.remote import remote, remote_methods

__all__ = [
    "BROADCAST", "HUB", "SPOKE", "Envelope", "Kind",
    "OmldmError", "CodecError", "PromiseError", "RemoteCallError", "RemoteInterfaceError",
    "Float32", "Sparse", "NetworkContext", "Node", "Promise", "BroadcastPromise", "Call", "remote", "remote_methods",
]
