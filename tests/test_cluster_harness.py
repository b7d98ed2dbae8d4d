"""The standalone session-cluster harness (deploy/cluster.py) against a real Flink 2.0
cluster on loopback: a JobManager and two TaskManagers started with PyFlink's bin/ scripts,
jobs submitted with ``flink run -py``, a TaskManager killed with SIGKILL."""

from __future__ import annotations

import http.client
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from deploy.broker import free_port
from deploy.cluster import ClusterError, SessionCluster

PY = sys.executable

BOUNDED = textwrap.dedent("""
    import sys
    from pyflink.common import Configuration, Types, WatermarkStrategy
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink.datastream.connectors.number_seq import NumberSequenceSource

    n = int(sys.argv[1])
    conf = Configuration()
    conf.set_string("python.execution-mode", "process")
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.from_source(NumberSequenceSource(0, n - 1), WatermarkStrategy.no_watermarks(), "seq") \\
        .map(lambda x: f"harness-bounded {2 * x}", output_type=Types.STRING()).print()
    env.execute("harness-bounded")
""")

# Endless in practice (2**62 numbers), slow (10 ms per record and subtask), checkpointed
# every second, printing nothing. A checkpoint barrier waits until the Python worker has
# processed its whole bundle: with the default bundle size (100000) and 10 ms per record a
# checkpoint takes ~10 s; 50 records bound it to ~0.5 s.
UNBOUNDED = textwrap.dedent("""
    import time
    from pyflink.common import Configuration, Types, WatermarkStrategy
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink.datastream.connectors.number_seq import NumberSequenceSource
    from pyflink.datastream.functions import MapFunction

    class Slow(MapFunction):
        def map(self, x):
            time.sleep(0.01)
            return x

    conf = Configuration()
    conf.set_string("python.execution-mode", "process")
    conf.set_string("python.fn-execution.bundle.size", "50")
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.enable_checkpointing(1000)
    env.from_source(NumberSequenceSource(0, 2**62), WatermarkStrategy.no_watermarks(), "seq") \\
        .uid("seq").map(Slow(), output_type=Types.LONG()).uid("slow") \\
        .filter(lambda x: x < 0).print()
    env.execute("harness-unbounded")
""")


def _step(name: str, t0: float) -> float:
    now = time.monotonic()
    print(f"[cluster-harness] {name}: {now - t0:.1f} s")
    return now


@pytest.fixture(scope="module")
def cluster():
    base = free_port()
    t0 = time.monotonic()
    with SessionCluster(taskmanagers=2, slots=2,
                        prometheus_ports=f"{base}-{base + 5}") as c:
        _step("cluster start (JM + 2 TMs registered)", t0)
        c.prometheus_range = range(base, base + 6)
        yield c


def test_start_submit_and_finish(cluster, tmp_path):
    assert len(cluster.taskmanager_pids()) == 2
    assert cluster.jobmanager_pid() is not None
    overview = cluster.get("/overview")
    assert overview["taskmanagers"] == 2 and overview["slots-total"] == 4
    assert overview["flink-version"].startswith("2.")
    # everything under the cluster's own directory, nothing in site-packages
    assert (cluster.conf_dir / "config.yaml").is_file()
    assert any(cluster.log_dir.glob("flink-*-taskexecutor-1-*.log"))
    # RPC services get a minute to start on a loaded machine (deploy/cluster.py)
    config = {e["key"]: e["value"] for e in cluster.get("/jobmanager/config")}
    assert config["pekko.startup-timeout"] == "60 s"

    script = tmp_path / "bounded.py"
    script.write_text(BOUNDED)
    t0 = time.monotonic()
    job = cluster.submit_python(str(script), "100", pyexec=PY)
    t = _step("bounded job: flink run -d returned", t0)
    assert cluster.wait_for_job_state(job, {"FINISHED"}, timeout=120) == "FINISHED"
    _step("bounded job: submitted -> FINISHED", t0)
    assert cluster.restarts(job) == 0
    printed = [line for f in cluster.log_dir.glob("*taskexecutor*.out")
               for line in f.read_text().splitlines() if "harness-bounded" in line]
    assert sorted(int(line.split()[-1]) for line in printed) == [2 * i for i in range(100)]

    # the Prometheus reporter of the plugins/ dir is loaded and serves the job manager's metrics
    served = []
    for port in cluster.prometheus_range:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                served.append(r.read().decode())
        except (OSError, http.client.HTTPException):  # free, or another process's port:
            continue  # (the cluster's own ephemeral ports may land in the range; one
            # answered a fresh-clone CI run in a binary protocol, BadStatusLine)
    assert len(served) == 3  # JobManager + 2 TaskManagers
    assert any("flink_jobmanager_numRegisteredTaskManagers" in s for s in served)


def test_killed_taskmanager_restarts_job(cluster, tmp_path):
    script = tmp_path / "unbounded.py"
    script.write_text(UNBOUNDED)
    t0 = time.monotonic()
    job = cluster.submit_python(str(script), pyexec=PY, extra=["-p", "2"])
    cluster.wait_for_job_state(job, {"RUNNING"}, timeout=120)
    t = _step("unbounded job: submitted -> all tasks RUNNING", t0)
    first = cluster.wait_for_checkpoint(job, 1, timeout=60)
    t = _step("unbounded job: RUNNING -> first checkpoint", t)

    victims = cluster.taskmanager_pids_of_job(job)
    assert victims and set(victims) <= set(cluster.taskmanager_pids())
    t_kill = time.monotonic()
    cluster.kill_taskmanager(victims[0])
    assert victims[0] not in cluster.taskmanager_pids()
    # with region failover the job may stay RUNNING while the lost tasks restart
    while cluster.tasks_running(job):
        assert time.monotonic() - t_kill < 60, "killed TaskManager not detected"
        time.sleep(0.1)
    t = _step("kill TM -> a task of the job fails (detection)", t_kill)
    # the surviving TaskManager has the slots to run the job again
    cluster.wait_for_job_state(job, {"RUNNING"}, timeout=120)
    t = _step("detection -> all tasks RUNNING again", t)
    assert cluster.wait_for_restarts(job, 1, timeout=15) >= 1
    restored = cluster.checkpoints(job)["latest"]["restored"]
    assert restored and restored["id"] >= first["id"] and not restored["is_savepoint"]
    done = cluster.checkpoints(job)["counts"]["completed"]
    assert cluster.wait_for_checkpoint(job, done + 1, timeout=60)["id"] > restored["id"]
    t = _step("restart -> a new checkpoint completed", t)
    entries = cluster.job_exceptions(job)["exceptionHistory"]["entries"]
    assert entries, "the TaskManager loss is in the exception history"

    new_tm = cluster.start_taskmanager()
    assert new_tm in cluster.taskmanager_pids() and len(cluster.taskmanager_pids()) == 2
    t = _step("start_taskmanager (replacement registered)", t)

    savepoint = cluster.stop_with_savepoint(job, (tmp_path / "sp").as_uri())
    assert cluster.job_status(job) == "FINISHED"
    assert Path(savepoint.removeprefix("file:")).is_dir()
    t = _step("flink stop --savepointPath", t)

    # resumes from the savepoint, then cancel
    job2 = cluster.submit_python(str(script), pyexec=PY, extra=["-p", "2", "-s", savepoint])
    cluster.wait_for_job_state(job2, {"RUNNING"}, timeout=120)
    assert cluster.checkpoints(job2)["latest"]["restored"]["external_path"] == savepoint
    cluster.cancel(job2)
    assert cluster.job_status(job2) == "CANCELED"
    _step("resubmit from savepoint -> RUNNING -> CANCELED", t)


def test_a_rest_port_taken_before_the_jobmanager_binds_it_is_replaced():
    """The REST port is free when the cluster object is made and taken by another process
    before the JobManager binds it (a fresh-clone CI run lost its JobManager this way,
    ``java.net.BindException``): the start tries again on fresh ports and the cluster
    comes up."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        c = SessionCluster(taskmanagers=1, slots=1)
        c.rest_port = port
        c.conf["rest.port"] = port
        c._write_conf()
        try:
            c.start(timeout=120)
            assert c.rest_port != port
            assert len(c.get("/taskmanagers")["taskmanagers"]) == 1
        finally:
            c.stop()


def test_a_jobmanager_that_dies_before_its_log_is_started_again_and_then_explained(caplog):
    """A JobManager JVM that dies before it writes its log (a fresh-clone CI run lost one
    so, with an empty ``.out`` and no log to tell why) is started again; when it dies so
    every time, the error says so and carries the start scripts' and the JVM's own output."""
    c = SessionCluster(taskmanagers=1, slots=1,
                       extra_conf={"env.java.opts.jobmanager": "-Xss1k"})  # too small to start
    try:
        with pytest.raises(ClusterError) as raised:
            c.start(timeout=60, port_retries=1)
    finally:
        c.stop()
    message = str(raised.value)
    assert "the JobManager died before it wrote its log" in message
    assert "===== jobmanager.sh start (exit 0)" in message
    assert "stack size" in message  # the JVM's complaint, from its .out file
    assert not c._marked_pids()  # the failed start left no process behind
    retried = [r for r in caplog.records if "died before its log" in r.getMessage()]
    assert len(retried) == 1  # port_retries=1: one more start, then the error
