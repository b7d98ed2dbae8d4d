"""Faults beyond one TaskManager kill, on a real standalone Flink session cluster
(deploy/cluster.py: a JobManager and two TaskManagers of two slots each), the job submitted
with ``flink run -py flink_jobs/flink_run.py`` as docs/operations.md deploys it: process
mode, 2 spokes, 1 hub, checkpoints on, the Kafka-compatible local broker.

Each fault gets a fresh job with its own topics. The job first counts a warm-up of 2,000
Shuttle records and completes a checkpoint; then a feeder thread writes 12,000 more: 2,000
at once, the rest at about 1,000 records/s, and while the job works through the burst
(1 s after it was written; 0.2 s for the freeze) the fault strikes:

1. the TaskManager that runs the hub of a Synchronous (BSP) pipeline is killed while the
   spokes stream, so a round is open (spokes wait in it with their records paused);
2. two TaskManagers are killed within one checkpoint interval (5 s): the one running the
   job, then the other as soon as the job restarts onto it (3.5 s at most), before any
   checkpoint completed in between; two replacements are started;
3. the broker is frozen for 10 s (SIGSTOP, SIGCONT) under a Synchronous pipeline, whose
   rounds wait on the Kafka feedback loop, so records are held in the spokes when it
   stops — a dedicated broker, not the shared one of the test session;
4. the job is cancelled and resubmitted with ``-s`` from its last retained checkpoint
   (``execution.checkpointing.externalized-checkpoint-retention: RETAIN_ON_CANCELLATION``),
   while the feeder keeps writing;
5. with ``--exactly-once-outputs``, on a dedicated ``noida`` broker (its ``read_committed``
   readers skip aborted transactions; tansu's do not), the TaskManager of the spokes is
   killed: no prediction twice for a ``read_committed`` reader.

For each: records lost (training records never fitted, forecasting records never
answered) and records fitted twice must be 0 — the Query's ``fitted`` equals the training
records written, exactly, once the stream ended. Predictions are at-least-once on their
topic: ids answered more than once are counted (a fresh reader of the whole topic) and
printed, not asserted, except in 5, where the reader is ``read_committed`` and there must be
none. Seconds to recover: from the fault (for the freeze, from the thaw)
until the job is RUNNING with every task and a Query sent then is answered. The table of
the module's rows is printed at its end and kept in docs/operations.md.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Callable
from urllib.parse import urlparse

import pytest

from deploy.assets import job_jars
from deploy.broker import LocalBroker
from deploy.cluster import ClusterError, SessionCluster
from flink_jobs.demo import shuttle_create_request
from flink_jobs.kafka_io import TopicReader
from flink_jobs.session import Session, local_config
from learning.datasets import shuttle

pytestmark = pytest.mark.cluster

ENTRY = str(Path(__file__).resolve().parent.parent / "flink_jobs" / "flink_run.py")
N_WARM = 2_000       # records counted before the fault
N_TOTAL = 14_000     # records per scenario
N_BURST = 2_000      # then written at once by the feeder
FEED_CHUNK, FEED_PAUSE = 250, 0.25  # and the rest at ~1,000 records/s
FAULT_AFTER = 1.0    # seconds after the burst
ROWS: list[dict] = []


def create_request(protocol: str) -> dict:
    """The demo's Shuttle pipeline with its layout declared (9 features, labels 0 and 1),
    so records are processed from the first one."""
    req = shuttle_create_request(0)
    req["learner"]["parameters"] = {"n_features": 9, "classes": [0, 1]}
    req["trainingConfiguration"]["protocol"] = protocol
    return req


@pytest.fixture(scope="module")
def data():
    X, y = shuttle()
    return X[:N_TOTAL], y[:N_TOTAL]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    conf = {"execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION"}
    with SessionCluster(tmp_path_factory.mktemp("faults"), taskmanagers=2, slots=2,
                        extra_conf=conf) as c:
        yield c
    if ROWS:
        print("\n| fault | records | lost | fitted twice | duplicate predictions | failovers "
              "| s to RUNNING | s to recover |\n| --- | --- | --- | --- | --- | --- | --- | --- |")
        for r in ROWS:
            print(f"| {r['fault']} | {r['sent']:,} | {r['lost']} | {r['twice']} | {r['dups']} "
                  f"| {r['failovers']} | {r['running_s']:.1f} | {r['recover_s']:.1f} |")


class Scenario:
    """One job on the cluster with its own topics (``flt-<name>-…``), its Session, the
    warm-up, the feeder thread and the final count (``spokes``: the job's spokes, 2 unless
    given; also used by tests/test_tensair_faults.py)."""

    def __init__(self, cluster: SessionCluster, broker, data, name: str,
                 protocol: str = "Asynchronous", interval_ms: int = 1000, spokes: int = 2,
                 exactly_once: bool = False):
        self.cluster, self.broker, self.name = cluster, broker, name
        self.X, self.y = data
        self.protocol, self.interval_ms, self.spokes = protocol, interval_ms, spokes
        # exactly_once: the job's --exactly-once-outputs, and every reader read_committed
        self.exactly_once = exactly_once
        self.cfg = local_config(broker.bootstrap_servers, topic_prefix=f"flt-{name}-",
                                checkpoint_interval_ms=interval_ms,
                                exactly_once_outputs=exactly_once)
        self.held: dict = {}
        self.n_train = self.n_fore = 0
        self.job: str | None = None
        self.s: Session | None = None
        self._feeder: threading.Thread | None = None
        self._fed: dict = {"written": 0}

    def submit(self, *extra: str) -> str:
        args = ["--bootstrap-servers", self.broker.bootstrap_servers,
                "--topic-prefix", f"flt-{self.name}-", "--spokes", str(self.spokes), "--hubs", "1",
                "--mode", "process", "--checkpoint-interval-ms", str(self.interval_ms),
                "--job-name", f"omldm-faults-{self.name}",
                *(["--exactly-once-outputs"] if self.exactly_once else [])]
        self.job = self.cluster.submit_python(ENTRY, *args, pyexec=sys.executable,
                                              jars=[str(p) for p in job_jars()], extra=list(extra))
        self.cluster.wait_for_job_state(self.job, ("RUNNING",), timeout=180)
        return self.job

    def start(self) -> "Scenario":
        """Two live TaskManagers, the job RUNNING, the pipeline created, the warm-up
        counted and a checkpoint completed after it."""
        c = self.cluster
        c.wait_for_lost_taskmanagers(timeout=60)
        if len(c.taskmanager_pids()) < 2:
            c.start_taskmanagers(2 - len(c.taskmanager_pids()))
        self.s = Session(self.cfg, self.name).connect()
        self.submit()
        created = self.s.request(create_request(self.protocol), timeout=180)
        assert created["status"] == "ok", created
        held, self.n_train, self.n_fore = self.s.stream(self.X[:N_WARM], self.y[:N_WARM])
        self.held.update(held)
        self.s.wait_until_counted(0, self.n_train, self.n_fore, timeout=180)
        done = c.checkpoints(self.job)["counts"]["completed"]
        c.wait_for_checkpoint(self.job, min_completed=done + 1, timeout=120)
        self.failures_before = c.failures(self.job)
        return self

    def feed(self, fault_after: float = FAULT_AFTER) -> None:
        """Start the feeder thread, which writes records N_WARM.. : ``N_BURST`` at once,
        then ``FEED_CHUNK`` every ``FEED_PAUSE`` s; return ``fault_after`` seconds after the
        burst was written, with the job working through it."""
        burst_written = threading.Event()

        def run():
            w = Session(self.cfg, f"{self.name}-feeder").connect()
            try:
                a, b = N_WARM, N_WARM + N_BURST
                held, n_train, n_fore = w.stream(self.X[a:b], self.y[a:b], first_id=a)
                self._fed["written"] = N_BURST
                burst_written.set()

                def between(n: int) -> None:
                    self._fed["written"] = N_BURST + n
                    time.sleep(FEED_PAUSE)
                more, m_train, m_fore = w.stream(self.X[b:], self.y[b:], first_id=b,
                                                 chunk=FEED_CHUNK, between=between)
                self._fed["out"] = ({**held, **more}, n_train + m_train, n_fore + m_fore)
            except BaseException as e:  # re-raised by finish()
                self._fed["error"] = e
            finally:
                burst_written.set()
                w.close()
        self._feeder = threading.Thread(target=run, name=f"feeder-{self.name}", daemon=True)
        self._feeder.start()
        assert burst_written.wait(120), "the feeder did not write its burst"
        time.sleep(fault_after)
        answered = self.s.prediction_count(0)
        written = N_WARM + self._fed["written"]  # at least; the feeder goes on meanwhile
        self.at_fault = (f"{written:,} records written, {answered:,} of "
                         f"{written // 5:,} forecasting records answered")
        assert self._feeder.is_alive(), f"the feed ended before the fault ({self.at_fault})"

    def recovered(self, t0: float, restarted: bool = True) -> None:
        """Wait for the restart (when one is due), all tasks RUNNING and a Query answered;
        the seconds since ``t0``."""
        c = self.cluster
        if restarted:
            c.wait_for_failures(self.job, self.failures_before + 1, timeout=120)
        c.wait_for_job_state(self.job, ("RUNNING",), timeout=240)
        self.running_s = time.monotonic() - t0
        assert self.s.query(0, timeout=240)["status"] == "ok"
        self.recover_s = time.monotonic() - t0

    def finish(self, fault: str, settle: Callable[[dict], dict] | None = None) -> dict:
        """Join the feeder, wait until every record is counted (or 300 s), then, with
        ``settle``, ``final = settle(final)`` (more Queries while the job still runs), read
        the whole predictions topic afresh, cancel the job; the table row."""
        self._feeder.join(timeout=300)
        assert not self._feeder.is_alive(), "the feeder did not finish"
        if "error" in self._fed:
            raise self._fed["error"]
        held, n_train, n_fore = self._fed["out"]
        self.held.update(held)
        self.n_train += n_train
        self.n_fore += n_fore
        try:
            final = self.s.wait_until_counted(0, self.n_train, self.n_fore, timeout=300)
        except TimeoutError:
            final = self.s.query(0, timeout=60)
        if settle is not None:
            final = settle(final)
        seen = self.predictions_on_topic(
            "read_committed" if self.exactly_once else "read_uncommitted")
        row = {"fault": fault, "sent": self.n_train + self.n_fore, "final": final,
               "fitted": final["fitted"], "predicted": final["predicted"],
               "lost": max(0, self.n_train - final["fitted"]) + len(set(self.held) - set(seen)),
               "twice": max(0, final["fitted"] - self.n_train),
               "answered_twice": max(0, final["predicted"] - self.n_fore),
               "dups": sum(n - 1 for n in seen.values() if n > 1),
               "failovers": self.cluster.failures(self.job) - self.failures_before,
               "numRestarts": self.cluster.restarts(self.job),
               "running_s": self.running_s, "recover_s": self.recover_s}
        ROWS.append(row)
        print(f"\nat the fault: {self.at_fault}")
        print(f"{fault}: {row['sent']} records, fitted {row['fitted']}/{self.n_train}, "
              f"predicted {row['predicted']}/{self.n_fore}, lost {row['lost']}, fitted twice "
              f"{row['twice']}, duplicate predictions {row['dups']}, failovers {row['failovers']} "
              f"(numRestarts {row['numRestarts']}), "
              f"RUNNING after {row['running_s']:.1f} s, Query answered after {row['recover_s']:.1f} s")
        self.close()
        return row

    def predictions_on_topic(self, isolation_level: str) -> Counter:
        """How often each id of pipeline 0 is on the predictions topic for a fresh reader
        of the whole topic at ``isolation_level``."""
        reader = TopicReader(self.cfg.bootstrap_servers, self.cfg.topics.predictions,
                             isolation_level=isolation_level)
        try:
            return Counter(p["id"] for p in reader.drain(idle_ms=1000) if p["pipeline"] == 0)
        finally:
            reader.close()

    def close(self) -> None:
        """Cancel the job unless it ended, close the Session; also after a failure."""
        if self.job is not None:
            try:
                if self.cluster.job_status(self.job) not in ("CANCELED", "FINISHED", "FAILED"):
                    self.cluster.cancel(self.job)
            except (ClusterError, OSError) as e:  # teardown: do not mask the test's own error
                print(f"cancel {self.job}: {e!r}"[:500])
        if self.s is not None:
            self.s.close()
            self.s = None

    def check(self, row: dict) -> None:
        assert row["lost"] == 0 and row["twice"] == 0 and row["answered_twice"] == 0, row
        assert row["fitted"] == self.n_train and row["predicted"] == self.n_fore
        assert row["final"]["rejected"] == 0


@pytest.fixture
def scenario(cluster, data):
    """``scenario(broker, name, **kw)``: a started :class:`Scenario`; whatever a failing
    test leaves running is cancelled at teardown."""
    made: list[Scenario] = []

    def make(broker, name: str, **kw) -> Scenario:
        made.append(Scenario(cluster, broker, data, name, **kw))
        return made[-1].start()
    yield make
    for sc in made:
        sc.close()


def test_hub_taskmanager_killed_in_a_synchronous_round(cluster, broker, scenario):
    sc = scenario(broker, "bsp", protocol="Synchronous")
    hub_tms = cluster.taskmanager_pids_of_job(sc.job, vertex="hubs")
    spoke_tms = cluster.taskmanager_pids_of_job(sc.job, vertex="spokes")
    assert len(hub_tms) == 1, hub_tms
    sc.feed()  # rounds open and close while records flow
    t0 = time.monotonic()
    cluster.kill_taskmanager(hub_tms[0], with_workers=True)
    sc.recovered(t0)
    cluster.start_taskmanager()  # the replacement
    row = sc.finish("TaskManager of the hub killed in a BSP round")
    sc.check(row)
    assert row["failovers"] >= 1
    assert row["final"]["protocol"]["rounds"] > 0
    print(f"hub's TaskManager also ran spokes: {hub_tms[0] in spoke_tms}; rounds "
          f"{row['final']['protocol']['rounds']}")


def test_two_taskmanagers_killed_within_one_checkpoint_interval(cluster, broker, scenario):
    sc = scenario(broker, "kill2", interval_ms=5000)
    first = cluster.taskmanager_pids_of_job(sc.job)[0]
    others = [p for p in cluster.taskmanager_pids() if p != first]
    sc.feed()
    first_kill_ms = time.time() * 1000.0
    t0 = time.monotonic()
    cluster.kill_taskmanager(first, with_workers=True)
    # the second loss: as soon as the job restarts onto the other TaskManager, 3.5 s at most
    while time.monotonic() - t0 < 3.5:
        if cluster.failures(sc.job) > sc.failures_before \
                and set(cluster.taskmanager_pids_of_job(sc.job)) & set(others):
            break
        time.sleep(0.1)
    during_restore = cluster.failures(sc.job) > sc.failures_before
    for pid in others:
        cluster.kill_taskmanager(pid, with_workers=True)
    gap = time.monotonic() - t0
    last_kill_ms = time.time() * 1000.0
    cluster.start_taskmanagers(2)  # the replacements
    sc.recovered(t0)
    # checkpoints completed between the kills, by their last acknowledgement's time, not by
    # the REST API's completed count read before the first kill: that count once grew by
    # one between the reads, in fresh-clone CI, with nothing lost or fitted twice (a
    # checkpoint in flight at the first kill, or a count the REST cache had not caught up)
    done = [c["latest_ack_timestamp"] for c in cluster.checkpoints(sc.job).get("history", [])
            if c.get("status") == "COMPLETED" and not c.get("is_savepoint")]
    assert min(done, default=last_kill_ms) < first_kill_ms, done  # the history covers it
    between = sum(1 for t in done if first_kill_ms <= t <= last_kill_ms)
    row = sc.finish("two TaskManagers killed within one 5 s checkpoint interval")
    print(f"second kill {gap:.1f} s after the first, "
          f"{'while the job restarted' if during_restore else 'before the first loss was detected'}; "
          f"checkpoints completed between the kills: {between}")
    sc.check(row)
    assert between == 0  # both losses roll back to the same checkpoint
    assert row["failovers"] >= 1


def test_broker_frozen_for_10_seconds(cluster, scenario):
    # freezing the session's broker would stall other tests' jobs; BSP: rounds on the loop
    with LocalBroker() as own:
        sc = scenario(own, "freeze", protocol="Synchronous")
        sc.feed(fault_after=0.2)  # the job still works on the burst: outputs in flight
        before = cluster.checkpoints(sc.job)["counts"]
        t_freeze = time.monotonic()
        with own.frozen(10.0):
            pass
        t0 = time.monotonic()
        sc.recovered(t0, restarted=False)
        after = cluster.checkpoints(sc.job)["counts"]
        row = sc.finish("broker frozen for 10 s (SIGSTOP/SIGCONT)")
        print(f"frozen {t0 - t_freeze:.1f} s; failovers {row['failovers']}; checkpoints completed "
              f"{after['completed'] - before['completed']}, failed {after['failed'] - before['failed']} "
              f"from the freeze to the first answer")
        sc.check(row)


def test_cancel_and_resume_from_the_retained_checkpoint(cluster, broker, scenario):
    sc = scenario(broker, "resume")
    sc.feed()
    t0 = time.monotonic()
    old = sc.job
    cluster.cancel(old)
    path = cluster.latest_checkpoint_path(old)
    assert path and "/chk-" in path, path
    assert Path(urlparse(path).path).is_dir(), f"{path} was not retained on cancellation"
    sc.submit("-s", path)
    sc.failures_before = 0
    sc.recovered(t0, restarted=False)
    row = sc.finish("job cancelled, resumed from its retained checkpoint")
    print(f"resumed {sc.job} from {path}")
    sc.check(row)
    assert row["final"]["service"]["restores"] >= 1


def _open_transaction_holds(sc: Scenario, least: int = 20, timeout: float = 60.0) -> int:
    """Wait until at least ``least`` predictions of pipeline 0 are on the topic for a
    ``read_uncommitted`` reader and not (yet) for a ``read_committed`` one: written in the
    transaction still open, which the kill that follows must abort. Returns their number.

    Raises
    ------
    AssertionError
        When that does not happen within ``timeout`` seconds.
    """
    readers = {level: TopicReader(sc.cfg.bootstrap_servers, sc.cfg.topics.predictions,
                                  isolation_level=level)
               for level in ("read_uncommitted", "read_committed")}
    seen: dict[str, set] = {level: set() for level in readers}
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            for level, reader in readers.items():
                seen[level].update(p["id"] for p in reader.poll(50) if p["pipeline"] == 0)
            pending = len(seen["read_uncommitted"] - seen["read_committed"])
            if pending >= least:
                return pending
    finally:
        for reader in readers.values():
            reader.close()
    raise AssertionError(f"no open transaction with {least} predictions within {timeout} s "
                         f"({len(seen['read_uncommitted'])} ids uncommitted, "
                         f"{len(seen['read_committed'])} committed)")


def test_exactly_once_outputs_through_a_taskmanager_kill(cluster, scenario):
    """``--exactly-once-outputs``: the TaskManager that runs the spokes (which write the
    predictions) is killed while they work through the burst, as soon as the transaction
    still open holds at least 20 predictions (checkpoints every 5 s, so it is not committed
    in the moment between); a ``read_committed`` reader of the whole predictions topic then
    finds every forecasting record answered exactly once: the restored job wrote those
    predictions again, and the aborted transaction kept the first copies out. On its own
    broker, ``noida`` (deploy/broker.py): the default one, tansu, shows ``read_committed``
    readers the records of aborted transactions.

    What a ``read_uncommitted`` reader finds is printed, not asserted: noida does not always
    keep an aborted transaction's records for it (two runs of 2026-11-28: 633 predictions in
    the open transaction at the kill and then no id twice for either reader; 582 and then
    582 ids twice for ``read_uncommitted``). Waiting for the open transaction is what makes
    the test strike one: in a fresh-clone CI run that killed 1 s after the burst without
    waiting, the kill fell where nothing was pending."""
    with LocalBroker(engine="noida") as own:
        sc = scenario(own, "eo", exactly_once=True, interval_ms=5000)
        spoke_tms = cluster.taskmanager_pids_of_job(sc.job, vertex="spokes")
        sc.feed()
        pending = _open_transaction_holds(sc)
        seen_ms = time.time() * 1000.0
        t0 = time.monotonic()
        cluster.kill_taskmanager(spoke_tms[0], with_workers=True)
        killed_ms = time.time() * 1000.0
        sc.recovered(t0)
        cluster.start_taskmanager()  # the replacement
        uncommitted, history = None, []

        def settle(final: dict) -> dict:
            nonlocal uncommitted, history
            # the last predictions are committed with the checkpoint after them
            sc.cluster.wait_for_checkpoint(
                sc.job, min_completed=sc.cluster.checkpoints(sc.job)["counts"]["completed"] + 1,
                timeout=60)
            uncommitted = sc.predictions_on_topic("read_uncommitted")
            history = sc.cluster.checkpoints(sc.job).get("history", [])
            return final
        row = sc.finish("TaskManager of the spokes killed, exactly-once outputs (noida)",
                        settle=settle)
        extra = sum(n - 1 for n in uncommitted.values() if n > 1)
        # a checkpoint that completed between the sight of the open transaction and the
        # kill would have committed it (a chance of about 1 in 100 at 5 s)
        between = [c["latest_ack_timestamp"] for c in history
                   if c.get("status") == "COMPLETED" and not c.get("is_savepoint")
                   and seen_ms <= c["latest_ack_timestamp"] <= killed_ms]
        print(f"exactly-once: killed with {pending} predictions in the open transaction "
              f"({len(between)} checkpoints completed in between); {row['dups']} ids twice for "
              f"read_committed; {extra} ids more than once for read_uncommitted in "
              f"{len(uncommitted):,} ids")
        sc.check(row)
        assert row["failovers"] >= 1
        assert row["dups"] == 0  # and check(): every id there (lost == 0)
