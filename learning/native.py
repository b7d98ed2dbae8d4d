"""Imports of native (pybind11) extension modules, and numba's compilations, that an
interpreter embedded in the JVM survives: each in a Python thread of its own.

PyFlink's thread mode runs every Python operator on pemja, one interpreter inside the
TaskManager's JVM. A Flink task thread that hosts several chained Python operators (a
hub with the maps after it) holds one pemja thread state per operator, and only the
first is the thread's ``PyGILState`` state. The first call into a pybind11 module
(``pybind11::detail::get_internals``, run when the module is imported) takes the GIL with
``PyGILState_Ensure``; on such a thread that switches to the other thread state and
waits for the GIL the thread itself holds, for ever. Seen: river's metrics import
``scipy.stats``, which imports ``scipy.spatial._distance_pybind``, and a job of 2 spokes
and 2 hubs hung in every operator's ``open`` (``gdb``: the hub thread in ``take_gil``
under ``PyInit__distance_pybind``, the others waiting for its import lock). The same call
in a thread that :mod:`threading` started finds its own state and goes through, and the
module, once initialized, no longer asks. (PyTorch's bindings do it on every call and
stay refused in thread mode: :attr:`learning.learners.base.Learner.needs_own_interpreter`.)
numba's compiler calls back into Python from LLVM through ctypes, and a ctypes callback
takes the GIL the same way: :mod:`learning.compiled` compiles in a thread of its own.
"""

from __future__ import annotations

import importlib
import sys
import threading
from typing import Callable, TypeVar

__all__ = ["import_in_own_thread", "run_in_own_thread"]

T = TypeVar("T")


def run_in_own_thread(fn: Callable[[], T]) -> T:
    """``fn()`` on a new Python thread, waited for; returns its result.

    Raises
    ------
    BaseException
        Whatever ``fn`` raised (re-raised here, on the caller's thread).
    """
    result: list = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            result.append(fn())
        except BaseException as exc:  # handed to the caller
            failure.append(exc)

    t = threading.Thread(target=run, name="omldm-native-import", daemon=True)
    t.start()
    t.join()
    if failure:
        raise failure[0]
    return result[0]


def import_in_own_thread(*names: str) -> None:
    """Import the modules ``names`` (dotted names, str) in a new Python thread and wait for
    it, unless every one is imported already; afterwards ``import name`` finds them in
    ``sys.modules`` on any thread. Not for a module of a package that the calling thread
    is still importing: the new thread would wait for that package's import to end, and
    the caller for the new thread.

    Raises
    ------
    ImportError
        Whatever importing one of them raised (re-raised here, on the caller's thread).
    """
    missing = [n for n in names if n not in sys.modules]
    if missing:
        run_in_own_thread(lambda: [importlib.import_module(name) for name in missing])
