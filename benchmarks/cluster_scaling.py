"""Records/s against spoke parallelism on the local session cluster (``deploy/cluster.py``),
submitted as ``flink run -py flink_jobs/flink_run.py`` is in production: the cross-check of
docs/performance.md's "Scaling with spokes, on paper".

    .venv/bin/python benchmarks/cluster_scaling.py [--parallelism 1,2,4] [--records 196388]
                                                   [--mode process] [--json PATH]

One local broker and one session cluster (2 TaskManagers of 2 slots) serve the whole run.
Per parallelism P, a fresh job with P spokes and 1 hub (``--spokes P``), fresh topics, the
demo's pipeline (``shuttle_create_request(0)``: StandardScaler → PA, Asynchronous); once
its Create is answered the clock starts, Shuttle repeated to ``--records`` records (one
per Kafka message, every 5th to ``forecasting``) is written by a librdkafka producer as
fast as it goes (`benchmarks/e2e.py`'s `produce`), and the clock stops when a Query counts
every record. The job is then cancelled.

Columns: ``records/s`` records fitted or predicted per second of the clock; ``vs P=1``
that over the first row's; ``cpu`` each kind of process's CPU time over the clock, as a
share of one core (`benchmarks/e2e.py`'s `cpu_seconds`: ``jvm`` is the JobManager, both
TaskManagers and this script's own client JVM, ``workers`` process mode's Python workers);
``prequential`` the final Query's accuracy.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from e2e import cpu_seconds, messages, produce  # benchmarks/e2e.py, beside this file
from deploy.assets import job_jars
from deploy.broker import LocalBroker
from deploy.cluster import SessionCluster
from flink_jobs.config import JobConfig, Topics
from flink_jobs.demo import shuttle_create_request
from flink_jobs.session import Session
from learning.datasets import shuttle

ENTRY = str(Path(__file__).resolve().parent.parent / "flink_jobs" / "flink_run.py")


def row(cluster: SessionCluster, servers: str, parallelism: int, mode: str,
        X: np.ndarray, y: np.ndarray) -> dict:
    """One fresh job with ``parallelism`` spokes; its throughput on the whole stream."""
    prefix = f"scale{parallelism}-{int(time.time())}-"
    conf = Path(tempfile.mkdtemp(prefix="omldm-scaling-")) / "omldm.yaml"
    conf.write_text(f"kafka: {{bootstrap_servers: '{servers}'}}\ntopic_prefix: {prefix}\n"
                    f"spokes: {parallelism}\nhubs: 1\nexecution_mode: {mode}\n"
                    f"checkpoint_interval_ms: 60000\njob_name: omldm-scaling-{parallelism}\n")
    cfg = JobConfig(bootstrap_servers=servers,
                    topics=Topics.prefixed(prefix))
    msgs, n_train, n_fore = messages(X, y, 1)
    s = Session(cfg, "scaling").connect()
    job = cluster.submit_python(ENTRY, "--config", str(conf), pyexec=sys.executable,
                                jars=[str(p) for p in job_jars()])
    try:
        cluster.wait_for_job_state(job, ("RUNNING",), timeout=180)
        created = s.request(shuttle_create_request(0), timeout=180)
        if created.get("status") != "ok":
            raise RuntimeError(f"Create failed: {created}")
        cpu0 = cpu_seconds()
        t0 = time.perf_counter()
        produce(servers, cfg.topics, msgs)
        final = s.wait_until_counted(0, n_train, n_fore, timeout=900, every=0.2)
        elapsed = time.perf_counter() - t0
        cpu1 = cpu_seconds()
    finally:
        cluster.cancel(job)
        s.close()
    return {"parallelism": parallelism, "mode": mode, "records": len(y), "seconds": elapsed,
            "records_per_second": (final["fitted"] + final["predicted"]) / elapsed,
            "prequential_accuracy": final["prequentialAccuracy"],
            **{f"cpu_{k}": (cpu1[k] - cpu0[k]) / elapsed for k in cpu1}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parallelism", default="1,2,4", help="spoke counts, comma-separated")
    ap.add_argument("--records", type=int, default=196_388, help="records per row")
    ap.add_argument("--mode", choices=("process", "thread"), default="process",
                    help="PyFlink execution mode (flink run's default: process)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    X0, y0 = shuttle()
    reps = -(-args.records // len(y0))
    X, y = np.tile(X0, (reps, 1))[:args.records], np.tile(y0, reps)[:args.records]
    rows = []
    with LocalBroker() as broker, \
            SessionCluster(Path(tempfile.mkdtemp(prefix="omldm-scaling-cluster-")),
                           taskmanagers=2, slots=2) as cluster:
        for p in (int(v) for v in args.parallelism.split(",")):
            r = row(cluster, broker.bootstrap_servers, p, args.mode, X, y)
            rows.append(r)
            base = rows[0]["records_per_second"]
            cpu = ", ".join(f"{k[4:]} {r[k]:.0%}" for k in r if k.startswith("cpu_"))
            print(f"P={p} {args.mode}: {r['records_per_second']:,.0f} records/s "
                  f"({r['records_per_second'] / base:.2f}x P=1), prequential "
                  f"{r['prequential_accuracy']:.4f}, cpu {cpu}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
