"""Declaring remote interfaces (papers/002 §3.1.2: every node implements a remote
interface, shared by all nodes of its side)."""

from __future__ import annotations

import inspect
from functools import lru_cache
from typing import Callable

__all__ = ["remote", "remote_methods"]

_MARK = "__omldm_remote__"


def remote(fn: Callable | None = None, *, oneway: bool = False):
    """Mark a node method as callable from the other side of the network.

    Use as ``@remote`` (two-way: the caller gets a :class:`~middleware.promise.Call`) or
    ``@remote(oneway=True)`` (one-way: nothing is answered and the proxy call returns None).

    Arguments and return values must be encodable by :mod:`middleware.codec` (JSON-like
    data and numeric numpy arrays). A remote method may return a value (sent back to a
    two-way caller), a :class:`~middleware.promise.Promise` or a
    :class:`~middleware.promise.BroadcastPromise` (answered later).
    """
    def mark(f: Callable) -> Callable:
        setattr(f, _MARK, "oneway" if oneway else "twoway")
        return f

    return mark if fn is None else mark(fn)


@lru_cache(maxsize=None)
def remote_methods(cls: type) -> dict[str, tuple[inspect.Signature, bool]]:
    """The remote interface of a node class: name -> (signature, is one-way)."""
    out = {}
    for name in dir(cls):
        fn = getattr(cls, name, None)
        mark = getattr(fn, _MARK, None) if callable(fn) else None
        if mark:
            out[name] = (inspect.signature(fn), mark == "oneway")
    return out
