"""Promises (deferred answers at the callee) and calls (pending answers at the caller).

They follow the contract of asyncio's Future: pending, then done or failed exactly once;
answering twice raises :class:`PromiseError`; a callback added after completion still
runs; a remote failure nobody handled is logged (papers/002 §3.1.2–3.1.3).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable

from middleware.errors import PromiseError, RemoteCallError

__all__ = ["Promise", "BroadcastPromise", "Call"]

log = logging.getLogger(__name__)
_PENDING, _DONE, _FAILED = "pending", "done", "failed"


class Promise:
    """A remote method's answer that is not known yet.

    A remote method returns an unfulfilled ``Promise``; the middleware binds it to the
    call and sends the answer to the caller when :meth:`fulfil` (or :meth:`fail`) runs.

    Examples
    --------
    A hub that answers pulls only when the next model is ready::

        class Hub(Node):
            @remote
            def pull(self):
                p = Promise()
                self.waiting.append(p)
                return p                      # answered later

            def model_ready(self):
                Promise.fulfil_all(self.waiting, [self.w] * len(self.waiting))
                self.waiting = []
    """

    def __init__(self) -> None:
        self._state = _PENDING
        self._value: Any = None
        self._listeners: list[Callable[["Promise"], None]] = []

    @property
    def done(self) -> bool:
        return self._state != _PENDING

    @property
    def value(self) -> Any:
        return self._value

    @property
    def failed(self) -> bool:
        return self._state == _FAILED

    def fulfil(self, value: Any = None) -> None:
        """Answer with ``value``. Raises :class:`PromiseError` when already answered."""
        self._settle(_DONE, value)

    def fail(self, error: BaseException) -> None:
        """Answer with an error. Raises :class:`PromiseError` when already answered."""
        self._settle(_FAILED, error)

    @staticmethod
    def fulfil_all(promises: Iterable["Promise"], values: Iterable[Any]) -> None:
        """Fulfil several promises at once, pairwise with ``values``."""
        promises, values = list(promises), list(values)
        if len(promises) != len(values):
            raise PromiseError(f"{len(promises)} promises but {len(values)} values")
        for p, v in zip(promises, values):
            p.fulfil(v)

    def _settle(self, state: str, value: Any) -> None:
        if self._state != _PENDING:
            raise PromiseError(f"promise already {self._state}")
        self._state, self._value = state, value
        listeners, self._listeners = self._listeners, []
        for fn in listeners:
            fn(self)

    def _on_settle(self, fn: Callable[["Promise"], None]) -> None:
        if self.done:
            fn(self)
        else:
            self._listeners.append(fn)


class BroadcastPromise(Promise):
    """One answer for calls from every node of the other side (papers/002 §3.1.2).

    The same object is returned by a remote method to many callers; the answer is sent
    to all of them once (a) every node of the other side has called, and (b) it is
    fulfilled. A barrier is a remote method returning an already fulfilled one
    (``return BroadcastPromise.fulfilled()``): a new, already fulfilled broadcast promise
    joins the round of the same method that is still waiting for callers, so such a
    method answers everyone once all have called. A broadcast promise answers one round
    only: returning it again after it was answered, or twice to the same caller, sends
    that caller a :class:`PromiseError`.
    """

    def __init__(self) -> None:
        super().__init__()
        self.bound: dict[int, int] = {}  # caller index -> call id
        self._sent = False  # the answer has gone to every caller

    @classmethod
    def fulfilled(cls, value: Any = None) -> "BroadcastPromise":
        p = cls()
        p.fulfil(value)
        return p


class Call:
    """The caller's handle on a remote call: register what happens with the answer(s).

    For a broadcast call, the callbacks run once per answer (papers/002 §3.1.2, case 4).

    Examples
    --------
    On a spoke::

        self.peers[0].push(delta).then(self.install).on_error(self.log_failure)
        self.broadcast.pull().then_sync(self.install_shard)   # stream paused until all came
    """

    def __init__(self, method: str, expected: int, on_sync_start: Callable[[], None] | None = None,
                 on_sync_end: Callable[[], None] | None = None) -> None:
        self.method = method
        self.expected = expected
        self.received = 0
        self._then: list[Callable[[Any], None]] = []
        self._errors: list[Callable[[RemoteCallError], None]] = []
        self._answers: list[tuple[bool, Any]] = []
        self._sync = False
        self._sync_hooks = (on_sync_start, on_sync_end)

    @property
    def done(self) -> bool:
        return self.received >= self.expected

    @property
    def pausing(self) -> bool:
        """Whether the spoke's stream waits on this call (:meth:`then_sync`, not yet all
        answered)."""
        return self._sync

    def then(self, callback: Callable[[Any], None]) -> "Call":
        """Run ``callback(value)`` for each answer (also for answers already received)."""
        self._then.append(callback)
        for ok, value in self._answers:
            if ok:
                callback(value)
        return self

    def then_sync(self, callback: Callable[[Any], None]) -> "Call":
        """Like :meth:`then`, and pause the spoke's input stream until every answer
        has arrived and the callbacks have run (papers/002 §3.1.3)."""
        if self._sync:
            raise PromiseError(f"then_sync already set on call to {self.method}")
        start = self._sync_hooks[0]
        if start is None:
            raise PromiseError("then_sync is available on spokes only")
        self.then(callback)
        if not self.done:
            self._sync = True
            start()
        return self

    def on_error(self, callback: Callable[[RemoteCallError], None]) -> "Call":
        """Run ``callback(error)`` for each answer that is a remote failure."""
        self._errors.append(callback)
        for ok, value in self._answers:
            if not ok:
                callback(value)
        return self

    def _answer(self, ok: bool, value: Any) -> None:
        self.received += 1
        self._answers.append((ok, value))
        try:
            if ok:
                for cb in self._then:
                    cb(value)
            elif self._errors:
                for cb in self._errors:
                    cb(value)
            else:
                log.error("unhandled remote failure: %s\n%s", value,
                          getattr(value, "remote_traceback", ""))
        finally:  # a raising callback must not leave the spoke's stream paused forever
            if self.done and self._sync:
                self._sync = False
                self._sync_hooks[1]()
