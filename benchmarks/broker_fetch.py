"""The embedded brokers' produce → consume latency as a topic fills with record batches.

    .venv/bin/python benchmarks/broker_fetch.py [--batches 20000] [--waits 1,5] [--probes 20]

For each embedded broker (deploy/broker.py: tansu, noida) and each consumer
``fetch.wait.max.ms`` in ``--waits``: a fresh topic gets ``--batches`` one-record batches
(librdkafka producer, ``linger.ms`` 0, one record per batch, as a live producer that sends
each record alone makes them), then a consumer assigned at the topic's end waits for each of
``--probes`` records written one at a time (at most 5 s each). Prints, per row, the seconds
the batches took to write and the latency of each probe in milliseconds (``-`` for a probe
never read within 5 s).

Why: tansu spends time on every fetch in proportion to the batches a topic holds and answers
nothing when that takes longer than the fetch wait, so a job's source of such a topic stops
reading on long runs (docs/operations.md, *Troubleshooting*).
"""

from __future__ import annotations

import argparse
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from deploy.broker import ENGINES, LocalBroker


def probe(servers: str, batches: int, wait_ms: int, probes: int) -> tuple[float, list]:
    """``(seconds to write the batches, [latency ms or None per probe])`` on a fresh topic."""
    topic = f"fetch-{batches}-{wait_ms}"
    admin = AdminClient({"bootstrap.servers": servers})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result()
    p = Producer({"bootstrap.servers": servers, "linger.ms": 0, "batch.num.messages": 1})
    t0 = time.perf_counter()
    for i in range(batches):
        p.produce(topic, b"x")
        if i % 100 == 99:
            p.flush()
    p.flush()
    written = time.perf_counter() - t0
    c = Consumer({"bootstrap.servers": servers, "group.id": topic, "enable.auto.commit": False,
                  "fetch.wait.max.ms": wait_ms})
    _, end = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    c.assign([TopicPartition(topic, 0, end)])
    out = []
    for _ in range(probes):
        p.produce(topic, repr(time.time()).encode())
        p.flush()
        deadline, got = time.monotonic() + 5.0, None
        while time.monotonic() < deadline:
            m = c.poll(0.05)
            if m is not None and not m.error():
                got = (time.time() - float(m.value())) * 1000.0
                break
        out.append(got)
    c.close()
    return written, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=20_000)
    ap.add_argument("--waits", default="1,5", help="fetch.wait.max.ms values, comma-separated")
    ap.add_argument("--probes", type=int, default=20)
    args = ap.parse_args()
    for engine in ENGINES:
        with LocalBroker(engine=engine) as b:
            for wait in (int(w) for w in args.waits.split(",")):
                written, lat = probe(b.bootstrap_servers, args.batches, wait, args.probes)
                read = sorted(v for v in lat if v is not None)
                p50 = f"{read[len(read) // 2]:.1f} ms" if read else "-"
                print(f"{engine:6s} {args.batches:,} batches written in {written:.1f} s, fetch "
                      f"wait {wait} ms: {len(read)} of {len(lat)} probes read, p50 {p50}: "
                      + " ".join("-" if v is None else f"{v:.1f}" for v in lat), flush=True)


if __name__ == "__main__":
    main()
