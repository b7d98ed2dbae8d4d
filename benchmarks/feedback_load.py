"""The feedback round trip against the load: how long a spoke's push takes to come back
as the global model (spoke → hub → ``psMessages`` on Kafka → spoke), at fixed stream rates
and at full load.

    .venv/bin/python benchmarks/feedback_load.py [--rates 1000,4000,16000,0] [--seconds 10]
                                                 [--min-records 32000] [--full-records N]
                                                 [--warmup 400000] [--fresh] [--hop]
                                                 [--buffer-timeout-ms 0]
                                                 [--broker tansu|noida] [--json PATH]

One local broker and one job with ``omldm serve``'s defaults (thread mode, 2 spokes in one
subtask, batches of at most 1,000 records or 1 ms); ``--fresh`` starts a fresh broker and
job for every phase instead (tansu's fetches cost more the more record batches a topic
holds, and a paced producer writes many small ones: with one broker for a whole run it took
80-120% of a core at 1,000-32,000 records/s). The stream is Shuttle repeated, one record
per Kafka message, every 5th record a forecasting one, as ``benchmarks/e2e.py`` writes it.
First a warm-up (``--warmup`` records as fast as the producer goes, on pipeline 0,
deleted after) so that the JVM's JIT is past its start. Then one phase per rate, each on a
fresh pipeline with the demo's request (StandardScaler → PA, Asynchronous, mini-batches of
32, a push every 4: a push per 320 records of the stream per spoke at most, since one push
per spoke is in flight at a time), created before the phase and deleted after it, so that
a phase's round trips are its own and one pipeline runs at a time:

* a rate ``r`` > 0 writes ``max(r × --seconds, --min-records)`` records at ``r``
  records/s (a librdkafka producer, in 5 ms slices);
* rate 0 writes ``--full-records`` (default 1,000,000) as fast as the producer goes:
  full load, where ``benchmarks/e2e.py`` measures its ``feedback`` column.

A phase prints the records/s the job reached (every record fitted or predicted, over the
time from the first record written to the Query that counted the last), the pushes the
slower spoke got answered, its push → global round trip p50 / p95 (milliseconds, its last
1,000: ``roundTripMsP50``), with ``--hop`` the sink-and-broker part of it (the hub's
producer's timestamp → arrival at an outside librdkafka reader of ``psMessages``, which
loads the broker with its own fetches), the slower spoke's crossing p50 / p95 (the wall time
of one call of the spokes' Python with a batch of records, ``crossingMsP50``, over the
subtask's last 1,000 crossings whatever the pipeline; a hub's answer waits for the
crossing under way), the phase's records per crossing, and the CPU of the JVM (with the
spokes' and hubs' Python), the broker and this process, in shares of one core.
docs/performance.md ("The feedback round trip against the load") has runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

import numpy as np
from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

from deploy.broker import ENGINES, LocalBroker
from flink_jobs.config import JobConfig
from flink_jobs.demo import _worst, shuttle_create_request
from flink_jobs.session import Session, local_config
from learning.datasets import shuttle

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e import cpu_seconds, messages, produce  # noqa: E402  (benchmarks/ is the script's folder)

#: seconds between a phase's producer slices
SLICE_S = 0.005


def produce_at(servers: str, topics, msgs: list[tuple[str, bytes]], rate: float) -> float:
    """Write ``msgs`` at ``rate`` messages/s, a slice every :data:`SLICE_S`; returns the
    seconds it took (flushed)."""
    p = Producer({"bootstrap.servers": servers, "linger.ms": 1, "acks": 1,
                  "enable.idempotence": False})
    start = time.perf_counter()
    sent = 0
    while sent < len(msgs):
        due = min(len(msgs), int((time.perf_counter() - start) * rate) + 1)
        for kind, value in msgs[sent:due]:
            p.produce(getattr(topics, kind), value)
        sent = max(sent, due)
        p.poll(0)
        time.sleep(SLICE_S)
    p.flush()
    return time.perf_counter() - start


class Hop(threading.Thread):
    """An outside reader of ``psMessages`` (librdkafka, waiting at most 5 ms per fetch, as
    the job's own source does): for each hub message, the milliseconds from its Kafka
    timestamp (set by the hub's producer when the message is handed to it) to its arrival
    here; the sink and broker part of the loop, without Flink's source and the spoke."""

    def __init__(self, servers: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.servers, self.topic = servers, topic
        self.ms: list[float] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def run(self) -> None:
        c = Consumer({"bootstrap.servers": self.servers, "group.id": "feedback-load-hop",
                      "enable.auto.commit": False, "fetch.wait.max.ms": 5,
                      "fetch.min.bytes": 1})
        c.assign([TopicPartition(self.topic, 0, OFFSET_END)])
        while not self.stop.is_set():
            m = c.poll(0.05)
            if m is not None and not m.error():
                with self.lock:
                    self.ms.append(time.time() * 1000.0 - m.timestamp()[1])
        c.close()

    def take(self) -> list[float]:
        """The delays seen since the last call."""
        with self.lock:
            out, self.ms = self.ms, []
        return out


def counted(s: Session, pipeline: int, n_train: int, n_fore: int, timeout: float) -> dict:
    """Query every 0.2 s until the pipeline fitted ``n_train`` and predicted ``n_fore``
    records; returns that Query's response.

    Raises
    ------
    TimeoutError
        With the last counts, when that does not happen within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        q = s.query(pipeline, timeout=60)
        if (q.get("fitted"), q.get("predicted")) == (n_train, n_fore):
            return q
        if time.monotonic() > deadline:
            raise TimeoutError(f"pipeline {pipeline}: fitted {q.get('fitted')}/{n_train}, "
                               f"predicted {q.get('predicted')}/{n_fore}")
        time.sleep(0.2)


def phase(s: Session, pipeline: int, X: np.ndarray, y: np.ndarray, first_id: int,
          rate: float, hop: Hop) -> dict:
    """One pipeline, created, fed ``len(y)`` records at ``rate`` (0: as fast as the
    producer goes), counted and deleted; returns its row."""
    servers, topics = s.cfg.bootstrap_servers, s.cfg.topics
    created = s.request(shuttle_create_request(pipeline), timeout=120)
    if created.get("status") != "ok":
        raise RuntimeError(f"Create failed: {created}")
    msgs, n_train, n_fore = messages(X, y, 1, first_id=first_id)
    before = s.query(pipeline, timeout=60).get("service", {})
    hop.take()
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    if rate > 0:
        produce_at(servers, topics, msgs, rate)
    else:
        produce(servers, topics, msgs)
    q = counted(s, pipeline, n_train, n_fore, timeout=600)
    elapsed, cpu1 = time.perf_counter() - t0, cpu_seconds()
    hop_ms = hop.take()
    deleted = s.request({"id": pipeline, "request": "Delete"}, timeout=120)
    if deleted.get("status") != "ok":
        raise RuntimeError(f"Delete failed: {deleted}")
    service = {k: q.get("service", {}).get(k, 0) - before.get(k, 0)
               for k in ("dataRecords", "dataBatches")}
    return {"pipeline": pipeline, "rate": rate, "records": len(y),
            "records_per_second": len(y) / elapsed, "seconds": elapsed,
            "prequential_accuracy": q.get("prequentialAccuracy"),
            "pushes": min(sp.get("globalsReceived") or 0 for sp in q["spokes"]),
            "feedback_ms_p50": _worst(q["spokes"], "roundTripMsP50"),
            "feedback_ms_p95": _worst(q["spokes"], "roundTripMsP95"),
            "hop_ms_p50": float(np.percentile(hop_ms, 50)) if hop_ms else None,
            "hop_ms_p95": float(np.percentile(hop_ms, 95)) if hop_ms else None,
            "crossing_ms_p50": _worst(q["spokes"], "crossingMsP50"),
            "crossing_ms_p95": _worst(q["spokes"], "crossingMsP95"),
            "records_per_crossing": service["dataRecords"] / max(service["dataBatches"], 1),
            **{f"cpu_{k}": (cpu1[k] - cpu0[k]) / elapsed for k in cpu1}}


def show(row: dict) -> None:
    """Print one phase's row of the table."""
    rate = f"{row['rate']:,.0f}/s" if row["rate"] else "full load"
    fmt = lambda v: "–" if v is None else f"{v:.1f}"  # noqa: E731
    print(f"{rate:>11s} {row['records']:>9,} {row['records_per_second']:>10,.0f} "
          f"{row['pushes']:>6} {fmt(row['feedback_ms_p50']):>6} / {fmt(row['feedback_ms_p95']):<6} "
          f"{fmt(row['hop_ms_p50']):>5} / {fmt(row['hop_ms_p95']):<5} "
          f"{fmt(row['crossing_ms_p50']):>6} / {fmt(row['crossing_ms_p95']):<6} "
          f"{row['records_per_crossing']:>6.0f}   {row['cpu_jvm']:.0%} {row['cpu_broker']:.0%} "
          f"{row['cpu_driver']:.0%}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rates", default="1000,4000,16000,0",
                    help="records/s of each phase, comma-separated (0: full load)")
    ap.add_argument("--seconds", type=float, default=10.0, help="seconds of a paced phase")
    ap.add_argument("--min-records", type=int, default=32_000,
                    help="records of a paced phase at least (about 100 pushes per spoke)")
    ap.add_argument("--full-records", type=int, default=1_000_000,
                    help="records of the full-load phase")
    ap.add_argument("--warmup", type=int, default=400_000,
                    help="records as fast as the producer goes before the phases (0: none)")
    ap.add_argument("--spokes", type=int, default=2)
    ap.add_argument("--broker", choices=ENGINES, default="tansu",
                    help="the embedded broker (deploy/broker.py; noida saves its whole state "
                         "as it changes: short runs only)")
    ap.add_argument("--fresh", action="store_true",
                    help="a fresh broker and job for every phase, each with its own warm-up "
                         "(tansu's fetches cost more the more record batches a topic holds, "
                         "and a paced producer writes many small ones)")
    ap.add_argument("--buffer-timeout-ms", type=int, default=JobConfig.buffer_timeout_ms,
                    help="JobConfig.buffer_timeout_ms: how long Flink's network buffers wait "
                         "to fill (0: sent after every element)")
    ap.add_argument("--hop", action="store_true",
                    help="time the sink and broker part of the loop with an outside reader "
                         "of psMessages (column hop; the reader's fetches load the broker)")
    ap.add_argument("--json", metavar="PATH", help="write the rows as a JSON array")
    args = ap.parse_args()
    X0, y0 = shuttle()
    rates = [float(v) for v in args.rates.split(",")]
    sizes = [args.full_records if r == 0 else max(int(r * args.seconds), args.min_records)
             for r in rates]
    rows: list[dict] = []
    print(f"broker {args.broker}, {args.spokes} spokes, thread mode, buffer timeout "
          f"{args.buffer_timeout_ms} ms; "
          + ("a fresh broker and job per phase" if args.fresh else "one broker and job"),
          flush=True)
    header = (f"{'rate':>11s} {'records':>9s} {'records/s':>10s} {'pushes':>6s} "
              f"{'feedback p50/p95':>15s} {'hop p50/p95':>13s} {'crossing p50/p95':>15s} "
              f"{'rec/x':>6s}   "
              "cpu: jvm broker driver")

    def session(broker: LocalBroker):
        """The job on ``broker``, with an outside reader of its ``psMessages``."""
        s = Session(local_config(broker.bootstrap_servers, spokes=args.spokes,
                                 buffer_timeout_ms=args.buffer_timeout_ms),
                    "omldm-feedback-load").start()
        hop = Hop(broker.bootstrap_servers, s.cfg.topics.ps_messages)
        if args.hop:
            hop.start()
        return s, hop

    def warmed(s: Session, hop: Hop) -> int:
        """The warm-up on pipeline 0; returns the first id after it."""
        if not args.warmup:
            return 0
        X, y = np.resize(X0, (args.warmup, X0.shape[1])), np.resize(y0, args.warmup)
        warm = phase(s, 0, X, y, 0, 0, hop)
        print(f"warm-up: {args.warmup:,} records at {warm['records_per_second']:,.0f} "
              f"records/s", flush=True)
        return args.warmup

    def run(s: Session, hop: Hop, k: int, rate: float, n: int, first: int) -> int:
        X, y = np.resize(X0, (n, X0.shape[1])), np.resize(y0, n)
        rows.append(phase(s, k, X, y, first, rate, hop))
        show(rows[-1])
        return first + n

    plan = list(enumerate(zip(rates, sizes), start=1))
    for n_group, group in enumerate([[item] for item in plan] if args.fresh else [plan]):
        with LocalBroker(engine=args.broker) as broker:
            s, hop = session(broker)
            try:
                first = warmed(s, hop)
                if n_group == 0:
                    print(header, flush=True)
                for k, (rate, n) in group:
                    first = run(s, hop, k, rate, n, first)
            finally:
                hop.stop.set()
                s.close()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
