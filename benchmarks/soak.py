"""A long run: millions of records through two pipelines; are the counts exact, and does
memory stay flat?

    .venv/bin/python benchmarks/soak.py [--records 5000000] [--mode thread] [--json PATH]
        [--protocol Synchronous] [--max-backlog-mb 64] [--feedback-wait-ms 20]

One local broker, one job (2 spokes, 1 hub, the default ``max_batch_delay_ms``), two
pipelines fed by the same stream: pipeline 0 the demo's (StandardScaler + PA, Asynchronous,
mini-batches of 32, a push every 4) and pipeline 1 the same with mini-batches of 16 and a
push every 2, under ``--protocol`` (default Asynchronous). With ``--protocol
Synchronous`` pipeline 1 falls behind: a BSP round waits on the Kafka loop (~7,000
records/s here), and a paused pipeline holds what it cannot fit yet while the other goes
on, up to ``max_backlog_bytes`` per spoke (``--max-backlog-mb``); past it its records are
dead-lettered (``backlog_full``), and the run checks that fitted + predicted + shed is
every record, and that each shed record is on the deadLetters topic. Shuttle is repeated to
``--records`` records (every 5th to ``forecasting``) and written by a confluent-kafka
producer in chunks that stay at most ``--lag`` records ahead of what the job has handled,
as a live source would (behind the slower pipeline).

Every ``--every`` seconds it prints the records handled, records/s, and the resident
memory (RSS, MiB) of the MiniCluster's JVM (in thread mode also the spokes' and hubs'
Python) and of process mode's Python workers; once after :data:`GC_PROBE_S` seconds, and
at the end, the JVM's heap in use right after a full GC. At the end: whether both
pipelines fitted and predicted exactly what was written (Query counts, and predictions on
the topic), and how much each measure grew (percent): the resident memory from the first
sample after the first minute to the end, the heap after a full GC from the first probe to
the end. The first probe comes well before the minute because a full GC moves the JVM's
resident memory by itself (G1 gives back or touches committed heap: −15% and +16% in two
runs), so a probe at the minute would make the baseline a step the probe caused.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import time

import numpy as np
import orjson

from deploy.broker import LocalBroker
from flink_jobs.demo import shuttle_create_request
from flink_jobs.kafka_io import predictions_in
from flink_jobs.session import Session, local_config
from learning.datasets import shuttle

from e2e import messages, produce  # noqa: E402  (benchmarks/ is the script's folder)


def descendants() -> list[tuple[int, bytes]]:
    """``(pid, command line)`` of every process started by this one, at any depth: the
    MiniCluster's JVM (PyFlink's gateway) and, in process mode, its Python workers."""
    parent: dict[int, int] = {}
    cmd: dict[int, bytes] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                parent[int(pid)] = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd[int(pid)] = f.read()
        except OSError:
            continue
    mine, todo = [], [os.getpid()]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        mine += kids
        todo += kids
    return [(p, cmd[p]) for p in mine if p in cmd]


def rss_mib() -> dict[str, float]:
    """Resident memory (MiB) of this run's JVM and of its Python workers."""
    out = {"jvm": 0.0, "workers": 0.0}
    for pid, cmd in descendants():
        kind = "jvm" if b"java" in cmd else "workers" if b"pyflink.fn_execution" in cmd else None
        try:
            with open(f"/proc/{pid}/statm") as f:
                pages = int(f.read().split()[1])
        except OSError:
            continue
        if kind:
            out[kind] += pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    return out


#: seconds into the run of the first full-GC probe (:func:`jvm_heap_after_gc`); the RSS
#: baseline is the first sample after 60 s, when the JVM has settled after it
GC_PROBE_S = 30.0
#: seconds into the run of the RSS baseline ("after the first minute")
BASELINE_S = 60.0


def jvm_heap_after_gc() -> float | None:
    """MiB of the MiniCluster JVM's heap in use right after a full GC (``jcmd GC.run``,
    then ``GC.heap_info``); None without a JDK's ``jcmd``. RSS alone cannot tell a leak
    from garbage the JVM has not collected yet: its heap grows lazily up to ``-Xmx``."""
    jcmd = shutil.which("jcmd")
    pids = [str(pid) for pid, cmd in descendants() if b"java" in cmd] if jcmd else []
    if not pids:
        return None
    subprocess.run([jcmd, pids[0], "GC.run"], capture_output=True, timeout=60)
    info = subprocess.run([jcmd, pids[0], "GC.heap_info"], capture_output=True, text=True,
                          timeout=60).stdout
    used = re.search(r"used (\d+)K", info)
    return int(used.group(1)) / 1024 if used else None


def count_per_pipeline(servers: str, topic: str) -> dict[int, int]:
    """Predictions or dead letters on ``topic`` per pipeline (an array of predictions,
    ``JobConfig.prediction_arrays``, counts as its elements), read from the beginning
    (confluent-kafka)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": servers, "group.id": "soak-count",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    counts: dict[int, int] = {}
    idle = time.monotonic()
    while time.monotonic() - idle < 3.0:
        for m in c.consume(10_000, 0.2):
            if not m.error():
                idle = time.monotonic()
                for rec in predictions_in(orjson.loads(m.value())):
                    counts[rec["pipeline"]] = counts.get(rec["pipeline"], 0) + 1
    c.close()
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=5_000_000)
    ap.add_argument("--mode", choices=("thread", "process"), default="thread")
    ap.add_argument("--chunk", type=int, default=100_000, help="records produced at a time")
    ap.add_argument("--lag", type=int, default=300_000, help="most records ahead of the job")
    ap.add_argument("--every", type=float, default=10.0, help="seconds between report lines")
    ap.add_argument("--json", metavar="PATH", help="write the samples and the verdict")
    ap.add_argument("--protocol", default="Asynchronous", help="pipeline 1's protocol")
    ap.add_argument("--max-backlog-mb", type=float, default=None,
                    help="JobConfig.max_backlog_bytes in MiB (default: the job's default)")
    ap.add_argument("--feedback-wait-ms", type=int, default=None,
                    help="JobConfig.feedback_fetch_max_wait_ms (default: the job's, 5); 20 "
                         "for a BSP pipeline on the local broker, whose fetches answer "
                         "nothing once psMessages holds more batches than the wait allows "
                         "(docs/performance.md)")
    args = ap.parse_args()
    X0, y0 = shuttle()
    with LocalBroker() as broker:
        extra = ({"max_backlog_bytes": int(args.max_backlog_mb * 2**20)}
                 if args.max_backlog_mb else {})
        if args.feedback_wait_ms is not None:
            extra["feedback_fetch_max_wait_ms"] = args.feedback_wait_ms
        cfg = local_config(broker.bootstrap_servers, topic_prefix="soak-", spokes=2, hubs=1,
                           execution_mode=args.mode, **extra)
        with Session(cfg, "omldm-soak") as s:
            second = shuttle_create_request(1, mini_batch_size=16, mini_batches=2)
            second["trainingConfiguration"]["protocol"] = args.protocol
            for req in (shuttle_create_request(0), second):
                created = s.request(req, timeout=120)
                if created.get("status") != "ok":
                    raise RuntimeError(f"Create failed: {created}")
            t0 = time.monotonic()
            samples: list[dict] = []
            n_train = n_fore = sent = 0
            last_report = 0.0

            last: list[dict] = []

            def handled() -> int:  # by the slower pipeline (shed records count)
                last[:] = [s.query(0), s.query(1)]
                return min(q["fitted"] + q["predicted"] + q["rejected"] for q in last)

            while sent < args.records or handled() < sent:
                if sent < args.records and sent - handled() < args.lag:
                    n = min(args.chunk, args.records - sent)
                    idx = np.arange(sent, sent + n) % len(y0)
                    msgs, nt, nf = messages(X0[idx], y0[idx], 1)
                    # ids continue across chunks; every 5th record of the whole stream forecasts
                    msgs = [(kind, orjson.dumps({**orjson.loads(v), "id": sent + k}))
                            for k, (kind, v) in enumerate(msgs)]
                    produce(broker.bootstrap_servers, cfg.topics, msgs)
                    sent += n
                    n_train += nt
                    n_fore += nf
                else:
                    time.sleep(0.5)
                now = time.monotonic() - t0
                if now - last_report >= args.every:
                    last_report = now
                    done = handled()
                    mem = rss_mib()
                    heap = jvm_heap_after_gc() if not any("heap_after_gc" in x for x in samples) \
                        and now >= GC_PROBE_S else None
                    held = sum(x["heldBytes"] for x in last[1]["spokes"]) / 2**20
                    samples.append({"t": now, "handled": done, **mem, "held_mib": held,
                                    "shed": last[1]["rejected"],
                                    **({"heap_after_gc": heap} if heap is not None else {})})
                    print(f"{now:7.1f} s  handled {done:>10,}  {done / now:8,.0f} rec/s  "
                          f"RSS jvm {mem['jvm']:7.0f} MiB  workers {mem['workers']:7.0f} MiB  "
                          f"pipeline 1 holds {held:5.1f} MiB, shed {last[1]['rejected']:,}"
                          + (f"  JVM heap after a full GC {heap:6.0f} MiB" if heap else ""),
                          flush=True)
            deadline = time.monotonic() + 600

            def accounted(f: dict) -> bool:  # every record fitted, predicted or shed
                return f["fitted"] + f["predicted"] + f["rejected"] == n_train + n_fore

            while True:
                finals = [s.query(p) for p in (0, 1)]
                if all(accounted(f) for f in finals):
                    break
                if time.monotonic() > deadline:
                    got = [(f["fitted"], f["predicted"], f["rejected"]) for f in finals]
                    raise TimeoutError(f"(fitted, predicted, shed) after 600 s: {got}")
                time.sleep(1.0)
            elapsed = time.monotonic() - t0
            mem = rss_mib()
            heap_end = jvm_heap_after_gc()
            samples.append({"t": elapsed, "handled": sent, **mem, "heap_after_gc": heap_end})
            on_topic = count_per_pipeline(broker.bootstrap_servers, cfg.topics.predictions)
            dead_on_topic = count_per_pipeline(broker.bootstrap_servers, cfg.topics.dead_letters)
    after_minute = next((x for x in samples if x["t"] >= BASELINE_S), samples[0])
    probe = next((x for x in samples if "heap_after_gc" in x), samples[0])
    growth = {k: 100.0 * (samples[-1][k] / base[k] - 1.0) if base.get(k) else None
              for k, base in (("jvm", after_minute), ("workers", after_minute),
                              ("heap_after_gc", probe))}
    verdict = {"records": sent, "training": n_train, "forecasting": n_fore,
               "seconds": elapsed, "records_per_second": sent / elapsed,
               "exact": all(f["fitted"] == n_train and f["predicted"] == n_fore for f in finals),
               "accounted": all(accounted(f) for f in finals)
               and all(dead_on_topic.get(p, 0) == f["rejected"] for p, f in enumerate(finals))
               and all(on_topic.get(p, 0) == f["predicted"] for p, f in enumerate(finals)),
               "protocols": ["Asynchronous", args.protocol],
               "fitted": [f["fitted"] for f in finals],
               "predicted": [f["predicted"] for f in finals],
               "predictions_on_topic": on_topic, "dead_letters_on_topic": dead_on_topic,
               "rejected": [f["rejected"] for f in finals],
               "rejected_by": [f["rejectedBy"] for f in finals],
               "max_backlog_bytes": cfg.max_backlog_bytes,
               "feedback_fetch_max_wait_ms": cfg.feedback_fetch_max_wait_ms,
               "prequential_accuracy": [f["prequentialAccuracy"] for f in finals],
               "rss_growth_after_first_minute_percent": growth, "mode": args.mode}
    print(json.dumps(verdict), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"verdict": verdict, "samples": samples}, f, indent=1)


if __name__ == "__main__":
    main()
