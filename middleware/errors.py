"""Exceptions of omldm. :class:`OmldmError` is the root of every error omldm raises."""

from __future__ import annotations

import builtins

__all__ = ["OmldmError", "CodecError", "RemoteInterfaceError", "RemoteCallError", "PromiseError",
           "remote_error"]


class OmldmError(Exception):
    """Root of all omldm errors."""


class CodecError(OmldmError):
    """Bytes that are not a valid envelope, or a payload that cannot be encoded."""


class RemoteInterfaceError(OmldmError, TypeError):
    """A call to a method that is not remote, or with arguments its signature rejects.

    Raised on the caller's side, before anything is sent.
    """


class PromiseError(OmldmError):
    """A promise was fulfilled (or failed) twice, or used after it was answered."""


class RemoteCallError(OmldmError):
    """A remote method raised; carries the callee's identity and the remote traceback.

    Attributes
    ----------
    node : str
        The callee, e.g. ``"hub 0"``.
    method : str
        The remote method's name.
    remote_type : str
        The class name of the exception raised remotely.
    remote_message : str
        ``str()`` of that exception.
    remote_traceback : str
        The formatted traceback text on the callee.
    """

    def __init__(self, node: str, method: str, remote_type: str, remote_message: str,
                 remote_traceback: str = ""):
        super().__init__(f"{remote_type} in {method}() on {node}: {remote_message}")
        self.node = node
        self.method = method
        self.remote_type = remote_type
        self.remote_message = remote_message
        self.remote_traceback = remote_traceback


_REMOTE_TYPES: dict[str, type] = {}


def remote_error(node: str, method: str, remote_type: str, remote_message: str,
                 remote_traceback: str = "") -> RemoteCallError:
    """A :class:`RemoteCallError` that can also be caught as the remote exception's type
    when that type is a built-in exception (``ValueError``, ``KeyError``, ...): e.g. an
    error callback may test ``isinstance(err, ValueError)``. Other types (omldm's own,
    user classes) give a plain RemoteCallError; no name is ever imported from a message.
    """
    base = getattr(builtins, remote_type, None)
    if not (isinstance(base, type) and issubclass(base, Exception)) or base is Exception:
        return RemoteCallError(node, method, remote_type, remote_message, remote_traceback)
    cls = _REMOTE_TYPES.get(remote_type)
    if cls is None:
        cls = type(f"Remote{remote_type}", (RemoteCallError, base), {"__str__": _str})
        _REMOTE_TYPES[remote_type] = cls
    err = cls.__new__(cls)
    RemoteCallError.__init__(err, node, method, remote_type, remote_message, remote_traceback)
    return err


def _str(self) -> str:
    return f"{self.remote_type} in {self.method}() on {self.node}: {self.remote_message}"
