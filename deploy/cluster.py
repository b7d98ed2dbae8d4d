"""A real standalone Flink session cluster on loopback, for the tests and for trying omldm
locally: one JobManager and N TaskManagers started with PyFlink's own ``bin/`` scripts.

Everything the cluster writes lives in one directory (a temporary one unless ``workdir`` is
given): its own ``conf/`` (``FLINK_CONF_DIR``, a ``config.yaml`` written from scratch plus
the log4j/logback files copied from PyFlink), ``log/`` (``FLINK_LOG_DIR``), ``pid/``
(``FLINK_PID_DIR``), ``tmp/`` (``io.tmp.dirs``, blob and web storage), ``checkpoints/`` and
``savepoints/``. Nothing is written into site-packages, and every port is picked free, so
several clusters (and a developer's own Flink) can coexist on one host.

``flink-daemon.sh`` allows several instances of a daemon per host: it appends each pid to
``pid/flink-<ident>-taskexecutor.pid`` and numbers the logs (``...-taskexecutor-0-<host>.log``,
``-1-``, ...). ``FLINK_IDENT_STRING`` is set to ``omldm`` so the names do not depend on
``$USER`` (unset in containers). Each process of the cluster, the Python workers the
TaskManagers fork included, carries ``OMLDM_FLINK_CLUSTER=<id>`` in its environment, which
is how :meth:`SessionCluster.stop` finds and kills anything left over.

Usage (an operator on a laptop)::

    from deploy.cluster import SessionCluster
    with SessionCluster(workdir=Path("flink-local"), taskmanagers=2) as c:
        print(c.rest_url)        # the web UI
        job = c.submit_python("job.py", pyexec=sys.executable)
        c.wait_for_job_state(job, {"RUNNING"})
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Iterable

from deploy.broker import free_port

log = logging.getLogger(__name__)

__all__ = ["SessionCluster", "FLINK_HOME", "ClusterError"]

import pyflink as _pyflink

FLINK_HOME = Path(_pyflink.__file__).resolve().parent
"""The Flink distribution PyFlink ships (``bin/``, ``lib/``, ``opt/``, ``plugins/``)."""

_IDENT = "omldm"
_MARKER = "OMLDM_FLINK_CLUSTER"
_JOB_ID = re.compile(r"JobID\s+([0-9a-f]{32})")
_SAVEPOINT = re.compile(r"Savepoint completed\.\s+Path:\s+(\S+)")
_TERMINAL = {"FINISHED", "FAILED", "CANCELED", "SUSPENDED"}

# Flink 2.0 on Java 17 needs these (copied from PyFlink's own conf/config.yaml).
_JAVA_OPTS = (
    "--add-exports=java.base/sun.net.util=ALL-UNNAMED "
    "--add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED "
    "--add-exports=jdk.compiler/com.sun.tools.javac.api=ALL-UNNAMED "
    "--add-exports=jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED "
    "--add-exports=jdk.compiler/com.sun.tools.javac.parser=ALL-UNNAMED "
    "--add-exports=jdk.compiler/com.sun.tools.javac.tree=ALL-UNNAMED "
    "--add-exports=jdk.compiler/com.sun.tools.javac.util=ALL-UNNAMED "
    "--add-exports=java.security.jgss/sun.security.krb5=ALL-UNNAMED "
    "--add-opens=java.base/java.lang=ALL-UNNAMED "
    "--add-opens=java.base/java.net=ALL-UNNAMED "
    "--add-opens=java.base/java.io=ALL-UNNAMED "
    "--add-opens=java.base/java.nio=ALL-UNNAMED "
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED "
    "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED "
    "--add-opens=java.base/java.text=ALL-UNNAMED "
    "--add-opens=java.base/java.time=ALL-UNNAMED "
    "--add-opens=java.base/java.util=ALL-UNNAMED "
    "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED "
    "--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED "
    "--add-opens=java.base/java.util.concurrent.locks=ALL-UNNAMED"
)


_LIVE: set = set()  # started clusters, stopped at interpreter exit if the caller did not


@atexit.register
def _stop_leftovers() -> None:
    for c in list(_LIVE):
        c.stop()


class ClusterError(RuntimeError):
    """The cluster did not start, a command failed, or a wait timed out; the message carries
    the tail of the cluster's logs."""


def _yaml_scalar(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(str(value))  # a JSON string is a valid YAML double-quoted scalar


def _pid_alive(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


class SessionCluster:
    """A standalone Flink session cluster (1 JobManager, ``taskmanagers`` TaskManagers) on
    127.0.0.1; a context manager.

    Parameters
    ----------
    workdir : Path, optional
        Directory for conf, logs, pids, tmp files, checkpoints and savepoints; kept after
        :meth:`stop`. A temporary directory, removed by :meth:`stop`, when omitted.
    taskmanagers : int
        TaskManagers started by :meth:`start`.
    slots : int
        ``taskmanager.numberOfTaskSlots``.
    checkpoint_dir : str, optional
        ``execution.checkpointing.dir`` (a path or URI); ``<workdir>/checkpoints`` when omitted.
    prometheus_ports : str, optional
        A port or range (``"9250-9260"``): enables the Prometheus metrics reporter, one port
        of the range per process.
    extra_conf : dict, optional
        More ``config.yaml`` entries (flat keys); they override the defaults.
    """

    #: Memory sizes that fit a 2-core / 24 GiB CI runner with Python workers in process mode.
    JOBMANAGER_MEMORY = "1024m"
    TASKMANAGER_MEMORY = "1728m"

    def __init__(self, workdir: Path | None = None, taskmanagers: int = 2, slots: int = 2,
                 checkpoint_dir: str | None = None, prometheus_ports: str | None = None,
                 extra_conf: dict | None = None):
        self._keep = workdir is not None
        if workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="omldm-flink-"))
        else:
            self.workdir = Path(workdir).resolve()
            self.workdir.mkdir(parents=True, exist_ok=True)
        self.n_taskmanagers = taskmanagers
        self.slots = slots
        self.conf_dir = self.workdir / "conf"
        self.log_dir = self.workdir / "log"
        self.pid_dir = self.workdir / "pid"
        self.tmp_dir = self.workdir / "tmp"
        for d in (self.conf_dir, self.log_dir, self.pid_dir, self.tmp_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.cluster_id = uuid.uuid4().hex[:12]
        self.rest_port = free_port()
        self.rpc_port = free_port()
        self.checkpoint_dir = checkpoint_dir or (self.workdir / "checkpoints").as_uri()
        self.savepoint_dir = (self.workdir / "savepoints").as_uri()
        self.conf = self._default_conf(prometheus_ports)
        self.conf.update(extra_conf or {})
        self._write_conf()
        self._started = False
        self._launched = ""  # the start scripts' output, for error messages

    # ------------------------------------------------------------------ configuration

    def _default_conf(self, prometheus_ports: str | None) -> dict:
        conf = {
            "env.java.opts.all": _JAVA_OPTS,
            "jobmanager.rpc.address": "localhost",
            "jobmanager.rpc.port": self.rpc_port,
            "jobmanager.bind-host": "127.0.0.1",
            "taskmanager.bind-host": "127.0.0.1",
            "taskmanager.host": "localhost",
            "taskmanager.rpc.port": "0",
            "taskmanager.data.port": 0,
            "rest.address": "127.0.0.1",
            "rest.bind-address": "127.0.0.1",
            "rest.port": self.rest_port,
            "blob.server.port": "0",
            "metrics.internal.query-service.port": "0",
            "jobmanager.memory.process.size": self.JOBMANAGER_MEMORY,
            "taskmanager.memory.process.size": self.TASKMANAGER_MEMORY,
            "taskmanager.numberOfTaskSlots": self.slots,
            "parallelism.default": 1,
            "jobmanager.execution.failover-strategy": "region",
            "execution.checkpointing.dir": self.checkpoint_dir,
            "execution.checkpointing.savepoint-dir": self.savepoint_dir,
            "restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": 10,
            "restart-strategy.fixed-delay.delay": "1 s",
            "heartbeat.interval": 2000,
            "heartbeat.timeout": 10000,
            # an RPC service (Pekko's remoting) that takes longer than this to start fails
            # its JVM; the default, 10 s, was not enough for a replacement TaskManager started
            # while a restarting job loaded both cores (a fresh-clone CI run, 2026-11-28:
            # "Could not create actor system", remoting started 12.5 s after it began)
            "pekko.startup-timeout": "60 s",
            "resourcemanager.taskmanager-timeout": 30000,
            # a TaskManager that starts before the ResourceManager is up retries after this
            # delay (default 10 s, which was most of the start-up time)
            "cluster.registration.error-delay": 500,
            "cluster.registration.refused-registration-delay": 1000,
            "slotmanager.redundant-taskmanager-num": 0,
            # the REST API caches metrics (numRestarts) for this long; the default is 10 s
            "metrics.fetcher.update-interval": 1000,
            "io.tmp.dirs": str(self.tmp_dir),
            "blob.storage.directory": str(self.tmp_dir / "blobs"),
            "web.tmpdir": str(self.tmp_dir / "web"),
            "web.cancel.enable": True,
            "web.submit.enable": True,
        }
        if prometheus_ports:
            conf["metrics.reporter.prom.factory.class"] = (
                "org.apache.flink.metrics.prometheus.PrometheusReporterFactory")
            conf["metrics.reporter.prom.port"] = str(prometheus_ports)
        return conf

    def _write_conf(self) -> None:
        src = FLINK_HOME / "conf"
        for pattern in ("log4j*.properties", "logback*.xml"):
            for f in src.glob(pattern):
                shutil.copy(f, self.conf_dir / f.name)
        (self.conf_dir / "masters").write_text("localhost:%d\n" % self.rest_port)
        (self.conf_dir / "workers").write_text("localhost\n" * self.n_taskmanagers)
        lines = ["# Written by deploy/cluster.py (SessionCluster); Flink 2.0 YAML, flat keys."]
        lines += [f"{k}: {_yaml_scalar(v)}" for k, v in self.conf.items()]
        (self.conf_dir / "config.yaml").write_text("\n".join(lines) + "\n")

    @property
    def env(self) -> dict:
        """The environment for PyFlink's ``bin/`` scripts."""
        env = dict(os.environ)
        for k in ("FLINK_CONF_DIR", "FLINK_LOG_DIR", "FLINK_PID_DIR", "FLINK_LIB_DIR",
                  "FLINK_OPT_DIR", "FLINK_PLUGINS_DIR", "FLINK_ENV_JAVA_OPTS", "JVM_ARGS"):
            env.pop(k, None)
        env.update({
            "FLINK_HOME": str(FLINK_HOME),
            "FLINK_CONF_DIR": str(self.conf_dir),
            "FLINK_LOG_DIR": str(self.log_dir),
            "FLINK_PID_DIR": str(self.pid_dir),
            "FLINK_PLUGINS_DIR": str(FLINK_HOME / "plugins"),
            "FLINK_IDENT_STRING": _IDENT,
            _MARKER: self.cluster_id,
        })
        java = shutil.which("java")
        if "JAVA_HOME" not in env and java:
            env["JAVA_HOME"] = str(Path(java).resolve().parent.parent)
        return env

    # ------------------------------------------------------------------ lifecycle

    def _script(self, name: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        cmd = ["bash", str(FLINK_HOME / "bin" / name), *args]
        p = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL, start_new_session=True)
        if p.returncode != 0:
            raise ClusterError(f"{name} {' '.join(args)} exited with {p.returncode}:\n"
                               f"{p.stdout}\n{p.stderr}\n{self.log_tail()}")
        return p

    def _launch(self, names: Iterable[str]) -> None:
        """Run several ``bin/*.sh start`` in parallel (each spends seconds in helper JVMs);
        their output is kept in ``_launched`` for a later error message."""
        procs = [(n, subprocess.Popen(["bash", str(FLINK_HOME / "bin" / n), "start"],
                                      env=self.env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      text=True, start_new_session=True)) for n in names]
        errors, said = [], []
        for n, p in procs:
            out, _ = p.communicate(timeout=120)
            said.append(f"===== {n} start (exit {p.returncode})\n{out.strip()}")
            if p.returncode != 0:
                errors.append(f"{n} start exited with {p.returncode}:\n{out}")
        self._launched = "\n".join(said)
        if errors:
            raise ClusterError("\n".join(errors) + "\n" + self.log_tail())

    def _jobmanager_logged(self) -> bool:
        """Whether the JobManager's JVM got as far as its log file."""
        return any(self.log_dir.glob(f"flink-{_IDENT}-standalonesession-*.log"))

    def start(self, timeout: float = 120, port_retries: int = 2) -> "SessionCluster":
        """Start the JobManager and the TaskManagers; wait until all TaskManagers registered.

        The REST and RPC ports were free when this object was made (:func:`free_port`); a
        process that takes one before the JobManager binds it (the JobManager dies with a
        ``java.net.BindException``; seen once in CI) makes the start try again on fresh
        ports, ``port_retries`` times at most. So does a JobManager that died before its
        JVM wrote a log line (seen once in CI, 2026-11-28: an empty ``.out`` and no log,
        the TaskManagers starting); the error then carries the start scripts' output.

        Raises
        ------
        ClusterError
            A script failed, the JobManager died, or not all TaskManagers registered within
            ``timeout`` seconds; the message ends with the tail of the logs.
        """
        _LIVE.add(self)
        for attempt in range(port_retries + 1):
            self._started = True
            try:
                self._launch(["jobmanager.sh"] + ["taskmanager.sh"] * self.n_taskmanagers)
                self.wait_for_taskmanagers(self.n_taskmanagers, timeout=timeout)
                return self
            except ClusterError as e:
                if attempt < port_retries and ("java.net.BindException" in str(e) or
                                               "died before it wrote its log" in str(e)):
                    log.warning("JobManager could not bind its ports (%d, %d) or died before "
                                "its log; again on fresh ones:\n%s", self.rest_port,
                                self.rpc_port, str(e)[:4000])
                    self._halt()
                    self.rest_port, self.rpc_port = free_port(), free_port()
                    self.conf.update({"rest.port": self.rest_port,
                                      "jobmanager.rpc.port": self.rpc_port})
                    self._write_conf()
                    continue
                self.stop()
                raise
            except BaseException:
                self.stop()
                raise
        raise AssertionError("unreachable")  # the loop returns or raises

    def wait_for_taskmanagers(self, n: int, timeout: float = 120) -> list[dict]:
        """Wait until the REST API lists at least ``n`` TaskManagers and ``n`` × ``slots`` slots;
        return the list."""
        deadline = time.monotonic() + timeout
        last = "no answer"
        while time.monotonic() < deadline:
            if not self._alive(self._pids("standalonesession")):
                early = "" if self._jobmanager_logged() else " before it wrote its log"
                raise ClusterError(f"the JobManager died{early}\n{self._launched}\n"
                                   f"{self.log_tail()}")
            try:
                tms = self.get("/taskmanagers")["taskmanagers"]
                # a TaskManager is listed before its slot report reached the slot manager,
                # with slotsNumber 0 until then: count against the configured slots
                slots = self.get("/overview")["slots-total"]
                if len(tms) >= n and slots >= n * self.slots:
                    return tms
                last = f"{len(tms)} of {n} TaskManagers registered, {slots} slots"
            except (OSError, ValueError) as e:
                last = repr(e)
            time.sleep(0.25)
        raise ClusterError(f"cluster not ready within {timeout} s ({last})\n{self.log_tail()}")

    def stop(self, grace: float = 10) -> None:
        """Stop every process of this cluster (TaskManagers first); SIGKILL what is left after
        ``grace`` seconds. Removes the working directory unless the caller gave it."""
        self._halt(grace)
        _LIVE.discard(self)
        if not self._keep:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _halt(self, grace: float = 10) -> None:
        """Stop every process of this cluster, as :meth:`stop`, keeping its directory."""
        if self._started:
            tms = self._alive(self._pids("taskexecutor"))
            jms = self._alive(self._pids("standalonesession"))
            for group in (tms, jms):
                self._signal(group, signal.SIGTERM)
                self._wait_gone(group, grace / 2)
            rest = self._marked_pids()
            self._signal(rest, signal.SIGTERM)
            self._wait_gone(rest, grace / 2)
            left = self._marked_pids()
            self._signal(left, signal.SIGKILL)
            self._wait_gone(left, 5)
            for f in self.pid_dir.glob("*.pid"):
                f.unlink()
            self._started = False

    def __enter__(self) -> "SessionCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ processes

    def _pids(self, daemon: str) -> list[int]:
        f = self.pid_dir / f"flink-{_IDENT}-{daemon}.pid"
        if not f.exists():
            return []
        return [int(x) for x in f.read_text().split() if x.strip().isdigit()]

    def _ours(self, pid: int) -> bool:
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            return False
        return f"{_MARKER}={self.cluster_id}".encode() in env.split(b"\0")

    def _alive(self, pids: Iterable[int]) -> list[int]:
        return [p for p in pids if _pid_alive(p) and self._ours(p)]

    def _marked_pids(self) -> list[int]:
        """Every live process started for this cluster: JVMs, Python workers, CLI clients."""
        me = os.getpid()
        out = []
        for d in Path("/proc").iterdir():
            if d.name.isdigit() and int(d.name) != me and self._ours(int(d.name)) \
                    and _pid_alive(int(d.name)):
                out.append(int(d.name))
        return out

    @staticmethod
    def _signal(pids: Iterable[int], sig: int) -> None:
        for p in pids:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass

    def _wait_gone(self, pids: list[int], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._alive(pids):
                return True
            time.sleep(0.1)
        return not self._alive(pids)

    def jobmanager_pid(self) -> int | None:
        alive = self._alive(self._pids("standalonesession"))
        return alive[0] if alive else None

    def taskmanager_pids(self) -> list[int]:
        """The live TaskManager JVMs of this cluster, in start order."""
        return self._alive(self._pids("taskexecutor"))

    def kill_taskmanager(self, pid: int | None = None, with_workers: bool = True) -> int:
        """SIGKILL one TaskManager JVM of this cluster (the last started when ``pid`` is
        omitted) and wait until it is gone; returns its pid.

        With ``with_workers`` its Python workers are killed too, as when a machine or
        container dies; otherwise they linger (they do not notice the JVM's death) until
        :meth:`stop`.
        """
        pids = self.taskmanager_pids()
        if pid is None:
            if not pids:
                raise ClusterError("no TaskManager is running")
            pid = pids[-1]
        if pid not in pids:
            raise ValueError(f"{pid} is not a live TaskManager of this cluster ({pids})")
        victims = [pid] + (self._descendants(pid) if with_workers else [])
        self._signal(victims, signal.SIGKILL)
        if not self._wait_gone(victims, 10):
            raise ClusterError(f"TaskManager {pid} survived SIGKILL")
        return pid

    @staticmethod
    def _descendants(pid: int) -> list[int]:
        children: dict[int, list[int]] = {}
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                children.setdefault(ppid, []).append(int(d.name))
        out, todo = [], [pid]
        while todo:
            for c in children.get(todo.pop(), []):
                out.append(c)
                todo.append(c)
        return out

    def start_taskmanager(self, wait: bool = True, timeout: float = 120,
                          attempts: int = 2) -> int:
        """Start one more TaskManager (e.g. to replace a killed one); with ``wait``, until the
        REST API lists a TaskManager it did not list before. Returns its pid.

        A new TaskManager that dies before it registers is started again, up to
        ``attempts`` times in all, as a resource manager would (in one fresh-clone CI run
        the replacement JVM died at once, before writing a line of log, and passed on
        every run since).

        Raises
        ------
        ClusterError
            When ``taskmanager.sh`` writes no pid, or the TaskManager does not register
            within ``timeout`` seconds, or every attempt died (with the logs' tails).
        """
        before_ids = {tm["id"] for tm in self.get("/taskmanagers")["taskmanagers"]} if wait else set()
        for attempt in range(1, attempts + 1):
            before_pids = set(self._pids("taskexecutor"))
            self._script("taskmanager.sh", "start")
            new = [p for p in self._pids("taskexecutor") if p not in before_pids]
            if not new:
                raise ClusterError(f"taskmanager.sh start wrote no pid\n{self.log_tail()}")
            if not wait:
                return new[-1]
            deadline = time.monotonic() + timeout
            while not {tm["id"] for tm in self.get("/taskmanagers")["taskmanagers"]} - before_ids:
                if time.monotonic() > deadline:
                    raise ClusterError(f"the new TaskManager {new[-1]} did not register within "
                                       f"{timeout} s\n{self.log_tail()}")
                if not self._alive(new):
                    if attempt < attempts:
                        log.warning("the new TaskManager %d died before it registered; "
                                    "starting another (%d of %d)", new[-1], attempt + 1,
                                    attempts)
                        break
                    raise ClusterError(f"the new TaskManager {new[-1]} died (attempt {attempt} "
                                       f"of {attempts})\n{self.log_tail()}")
                time.sleep(0.25)
            else:
                return new[-1]
        raise AssertionError("unreachable")

    def start_taskmanagers(self, n: int, timeout: float = 120) -> list[int]:
        """Start ``n`` more TaskManagers at once (the replacements a resource manager would
        bring after several losses) and wait until the REST API lists ``n`` TaskManagers it
        did not list before. Returns their pids."""
        before_pids = set(self._pids("taskexecutor"))
        before_ids = {tm["id"] for tm in self.get("/taskmanagers")["taskmanagers"]}
        self._launch(["taskmanager.sh"] * n)
        new = [p for p in self._pids("taskexecutor") if p not in before_pids]
        if len(new) < n:
            raise ClusterError(f"taskmanager.sh start wrote {len(new)} of {n} pids\n{self.log_tail()}")
        deadline = time.monotonic() + timeout
        while len({tm["id"] for tm in self.get("/taskmanagers")["taskmanagers"]} - before_ids) < n:
            if time.monotonic() > deadline:
                raise ClusterError(f"{n} new TaskManagers did not register within {timeout} s\n"
                                   f"{self.log_tail()}")
            if len(self._alive(new)) < n:
                raise ClusterError(f"a new TaskManager died ({new})\n{self.log_tail()}")
            time.sleep(0.25)
        return new

    def wait_for_lost_taskmanagers(self, timeout: float = 60) -> list[dict]:
        """Wait until the REST API lists no more TaskManagers than are alive (a killed one
        stays listed until its heartbeats time out, ``heartbeat.timeout``); the list."""
        deadline = time.monotonic() + timeout
        while True:
            tms = self.get("/taskmanagers")["taskmanagers"]
            if len(tms) <= len(self.taskmanager_pids()):
                return tms
            if time.monotonic() > deadline:
                raise ClusterError(f"{len(tms)} TaskManagers listed, {len(self.taskmanager_pids())} "
                                   f"alive after {timeout} s")
            time.sleep(0.25)

    def taskmanager_pids_of_job(self, job_id: str, vertex: str | None = None) -> list[int]:
        """The pids of the TaskManagers running tasks of the job (REST
        ``/jobs/<id>/vertices/<vid>/taskmanagers``); with ``vertex``, only of the job
        vertices whose name contains it (e.g. ``"hubs"``: chained operators share a vertex
        named ``"hubs -> ..."``)."""
        ids = []
        for v in self.job(job_id)["vertices"]:
            if vertex is not None and vertex not in v["name"]:
                continue
            for tm in self.get(f"/jobs/{job_id}/vertices/{v['id']}/taskmanagers")["taskmanagers"]:
                if tm.get("status") in ("RUNNING", "DEPLOYING", "INITIALIZING") \
                        and tm["taskmanager-id"] not in ids:
                    ids.append(tm["taskmanager-id"])
        pids = [self.taskmanager_pid(i) for i in ids]
        return [p for p in pids if p is not None]

    def taskmanager_pid(self, tm_id: str) -> int | None:
        """The pid of the TaskManager the REST API names ``tm_id`` (found through its RPC
        port, which is part of the id in a standalone cluster: ``localhost:PORT-xxxxxx``)."""
        m = re.search(r":(\d+)-[0-9a-f]+$", tm_id)
        if not m:
            return None
        port = int(m.group(1))
        inodes = set()
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            try:
                rows = Path(table).read_text().splitlines()[1:]
            except OSError:
                continue
            for row in rows:
                cols = row.split()
                if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(cols[9])
        for pid in self.taskmanager_pids():
            try:
                for fd in Path(f"/proc/{pid}/fd").iterdir():
                    try:
                        link = os.readlink(fd)
                    except OSError:
                        continue
                    if link.startswith("socket:[") and link[8:-1] in inodes:
                        return pid
            except OSError:
                continue
        return None

    # ------------------------------------------------------------------ REST

    @property
    def rest_url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    def get(self, path: str, timeout: float = 10) -> dict:
        """GET ``path`` (e.g. ``/overview``) from the REST API; the decoded JSON."""
        with urllib.request.urlopen(self.rest_url + path, timeout=timeout) as r:
            return json.loads(r.read().decode())

    def _request(self, method: str, path: str, body: dict | None = None,
                 timeout: float = 10) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.rest_url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read().decode()
        return json.loads(raw) if raw.strip() else {}

    def job_status(self, job_id: str) -> str:
        """``RUNNING``, ``FINISHED``, ``RESTARTING``, ... (``/jobs/<id>``)."""
        return self.get(f"/jobs/{job_id}")["state"]

    def job(self, job_id: str) -> dict:
        return self.get(f"/jobs/{job_id}")

    def jobs(self) -> list[dict]:
        """``[{"id": ..., "status": ...}, ...]`` (``/jobs``)."""
        return self.get("/jobs")["jobs"]

    def wait_for_job_state(self, job_id: str, states: Iterable[str] = ("RUNNING",),
                           timeout: float = 120, all_tasks_running: bool = True) -> str:
        """Wait until the job is in one of ``states``; return the state.

        For ``RUNNING`` with ``all_tasks_running``, also wait until every task is RUNNING
        (a job is RUNNING as soon as it is scheduled, before its tasks deployed).
        Raises :class:`ClusterError` on timeout, or when the job reaches another terminal
        state.
        """
        states = {states} if isinstance(states, str) else set(states)
        deadline = time.monotonic() + timeout
        state = "?"
        while time.monotonic() < deadline:
            try:
                job = self.job(job_id)
            except urllib.error.HTTPError as e:
                if e.code != 404:
                    raise
                time.sleep(0.25)
                continue
            state = job["state"]
            if state in states:
                if state != "RUNNING" or not all_tasks_running or self._all_running(job):
                    return state
            elif state in _TERMINAL:
                raise ClusterError(f"job {job_id} is {state}, expected {sorted(states)}\n"
                                   f"{self._exceptions_text(job_id)}\n{self.log_tail()}")
            time.sleep(0.25)
        raise ClusterError(f"job {job_id} still {state} after {timeout} s, expected "
                           f"{sorted(states)}\n{self._exceptions_text(job_id)}\n{self.log_tail()}")

    @staticmethod
    def _all_running(job: dict) -> bool:
        vertices = job.get("vertices", [])
        if not vertices:
            return False
        for v in vertices:
            counts = v.get("tasks")  # per-subtask states; a vertex's own status is an aggregate
            if counts:
                if counts.get("RUNNING", 0) + counts.get("FINISHED", 0) < v["parallelism"]:
                    return False
            elif v.get("status") not in ("RUNNING", "FINISHED"):
                return False
        return True

    def tasks_running(self, job_id: str) -> bool:
        """The job is RUNNING and so is every one of its subtasks (with region failover a
        job stays RUNNING while some of its tasks restart)."""
        job = self.job(job_id)
        return job["state"] == "RUNNING" and self._all_running(job)

    def cancel(self, job_id: str, timeout: float = 60) -> None:
        """Cancel the job (REST ``PATCH /jobs/<id>``) and wait until it is CANCELED."""
        self._request("PATCH", f"/jobs/{job_id}?mode=cancel")
        self.wait_for_job_state(job_id, {"CANCELED", "FINISHED", "FAILED"}, timeout)

    def stop_with_savepoint(self, job_id: str, savepoint_dir: str | None = None,
                            timeout: float = 120) -> str:
        """``flink stop --savepointPath DIR JOBID``; the savepoint's path."""
        target = savepoint_dir or self.savepoint_dir
        p = self.flink("stop", "--savepointPath", str(target), job_id, timeout=timeout)
        m = _SAVEPOINT.search(p.stdout)
        if not m:
            raise ClusterError(f"no savepoint path in the output of flink stop:\n{p.stdout}\n"
                               f"{p.stderr}")
        return m.group(1)

    def checkpoints(self, job_id: str) -> dict:
        """``/jobs/<id>/checkpoints``: ``counts`` (``completed``, ``failed``, ...),
        ``latest``, ``history``."""
        return self.get(f"/jobs/{job_id}/checkpoints")

    def wait_for_checkpoint(self, job_id: str, min_completed: int = 1,
                            timeout: float = 120) -> dict:
        """Wait until ``min_completed`` checkpoints completed; the latest completed one."""
        deadline = time.monotonic() + timeout
        n = 0
        while time.monotonic() < deadline:
            try:
                cp = self.checkpoints(job_id)
                n = cp["counts"]["completed"]
                if n >= min_completed:
                    return cp["latest"]["completed"]
            except (urllib.error.HTTPError, KeyError, TypeError):
                pass
            time.sleep(0.25)
        raise ClusterError(f"job {job_id}: {n} of {min_completed} checkpoints within "
                           f"{timeout} s\n{self._exceptions_text(job_id)}\n{self.log_tail()}")

    def latest_checkpoint_path(self, job_id: str) -> str | None:
        """The ``external_path`` of the job's latest completed checkpoint (``file:/…/chk-N``),
        for ``flink run -s``; None before the first. The REST API still answers for a
        cancelled job; the folder survives the cancel only with
        ``execution.checkpointing.externalized-checkpoint-retention: RETAIN_ON_CANCELLATION``."""
        latest = (self.checkpoints(job_id).get("latest") or {}).get("completed")
        return latest.get("external_path") if latest else None

    def job_exceptions(self, job_id: str) -> dict:
        """``/jobs/<id>/exceptions``: ``exceptionHistory.entries`` (newest first), each with
        ``exceptionName``, ``stacktrace``, ``timestamp``, ``taskManagerId``."""
        return self.get(f"/jobs/{job_id}/exceptions")

    def _exceptions_text(self, job_id: str, n: int = 3) -> str:
        try:
            entries = self.job_exceptions(job_id).get("exceptionHistory", {}).get("entries", [])
        except (OSError, ValueError):
            return ""
        return "\n".join(e.get("stacktrace", "")[:3000] for e in entries[:n])

    def restarts(self, job_id: str) -> int:
        """How often the job (or a failover region of it) restarted: the JobManager's
        ``numRestarts`` job metric; the REST API refreshes it every second
        (``metrics.fetcher.update-interval``)."""
        metrics = self.get(f"/jobs/{job_id}/metrics?get=numRestarts")
        for m in metrics:
            if m.get("id") == "numRestarts" and "value" in m:
                return int(float(m["value"]))
        return 0

    def failures(self, job_id: str) -> int:
        """How many failures the JobManager recorded for the job: the entries of its
        exception history (``/jobs/<id>/exceptions``; at most ``web.exception-history-size``,
        16 by default). The scheduler writes them itself, so unlike :meth:`restarts` they do
        not go through the REST API's metric fetcher: in one trial ``numRestarts`` still read
        0 two minutes after both TaskManagers of a job were killed and it had recovered."""
        return len(self.job_exceptions(job_id).get("exceptionHistory", {}).get("entries", []))

    def wait_for_failures(self, job_id: str, min_failures: int = 1, timeout: float = 60) -> int:
        """Wait until :meth:`failures` reaches ``min_failures``; return it."""
        return self._wait_count(job_id, self.failures, min_failures, "failures", timeout)

    def wait_for_restarts(self, job_id: str, min_restarts: int = 1, timeout: float = 60) -> int:
        """Wait until :meth:`restarts` reaches ``min_restarts``; return it."""
        return self._wait_count(job_id, self.restarts, min_restarts, "restarts", timeout)

    def _wait_count(self, job_id: str, count, least: int, what: str, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        n = 0
        while time.monotonic() < deadline:
            n = count(job_id)
            if n >= least:
                return n
            time.sleep(0.25)
        raise ClusterError(f"job {job_id}: {n} of {least} {what} within {timeout} s\n"
                           f"{self.log_tail()}")

    # ------------------------------------------------------------------ CLI

    def flink(self, *args: str, check: bool = True,
              timeout: float = 180) -> subprocess.CompletedProcess:
        """Run ``bin/flink *args`` against this cluster (its ``FLINK_CONF_DIR`` names the REST
        address and port); output captured as text."""
        cmd = ["bash", str(FLINK_HOME / "bin" / "flink"), *map(str, args)]
        p = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL, start_new_session=True)
        if check and p.returncode != 0:
            raise ClusterError(f"flink {' '.join(map(str, args))} exited with {p.returncode}:\n"
                               f"{p.stdout[-5000:]}\n{p.stderr[-5000:]}")
        return p

    def submit_python(self, script: str, *program_args: str, pyexec: str = sys.executable,
                      jars: Iterable[str] = (), extra: Iterable[str] = (),
                      timeout: float = 180) -> str:
        """``flink run -d -py script`` (detached); the JobID.

        ``pyexec`` is the Python of the TaskManagers' workers and of the client that runs
        ``script``. ``jars`` (paths or ``file:`` URIs) are passed as ``-C <uri>``
        (``pipeline.classpaths``): that puts them on the user classloader of the client,
        where the script's py4j calls (``KafkaSource.builder()``) need them, and of the
        TaskManagers, which read them from the same path (one host). ``-Dpipeline.jars``
        does not work for this: the client's Python gateway never sees those jars ("Could
        not found the Java class ..."). ``extra`` are more ``flink run`` options placed
        before ``-py`` (e.g. ``["-p", "2", "-s", savepoint]``).
        """
        cmd = ["run", "-d", "-pyexec", pyexec, "-pyclientexec", pyexec]
        for j in jars:
            cmd += ["-C", j if "://" in j or j.startswith("file:") else Path(j).resolve().as_uri()]
        cmd += list(extra)
        cmd += ["-py", str(script), *map(str, program_args)]
        p = self.flink(*cmd, timeout=timeout)
        m = _JOB_ID.search(p.stdout) or _JOB_ID.search(p.stderr)
        if not m:
            raise ClusterError(f"no JobID in the output of flink run:\n{p.stdout[-5000:]}\n"
                               f"{p.stderr[-5000:]}")
        return m.group(1)

    # ------------------------------------------------------------------ logs

    def log_tail(self, n: int = 80) -> str:
        """The last ``n`` lines of every log and .out file of the cluster."""
        parts = []
        for f in sorted(self.log_dir.glob("*")):
            if f.is_file():
                try:
                    lines = f.read_text(errors="replace").splitlines()[-n:]
                except OSError:
                    continue
                parts.append(f"===== {f.name} (last {len(lines)} lines)\n" + "\n".join(lines))
        return "\n".join(parts) if parts else f"(no logs in {self.log_dir})"


def main(argv: list[str] | None = None) -> None:
    """``python -m deploy.cluster [--workdir DIR] [--taskmanagers N] [--slots N]``: start a
    cluster, print its web UI address and environment, and keep it until Ctrl-C."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m deploy.cluster", description=main.__doc__)
    ap.add_argument("--workdir", type=Path, help="keep conf/logs/checkpoints here")
    ap.add_argument("--taskmanagers", type=int, default=2)
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--prometheus-ports", help='e.g. "9250-9260"')
    a = ap.parse_args(argv)
    with SessionCluster(a.workdir, a.taskmanagers, a.slots,
                        prometheus_ports=a.prometheus_ports) as c:
        print(f"Flink web UI / REST: {c.rest_url}")
        print(f"Submit with: FLINK_CONF_DIR={c.conf_dir} {FLINK_HOME}/bin/flink run ...")
        print(f"Logs: {c.log_dir}   (Ctrl-C stops the cluster)", flush=True)
        try:
            while c.jobmanager_pid() is not None:
                time.sleep(1)
            print("the JobManager exited\n" + c.log_tail(), file=sys.stderr)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
