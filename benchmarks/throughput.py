"""Throughput and feedback-loop latency of the whole loop on Shuttle, printed as a table.

    .venv/bin/python benchmarks/throughput.py [--repeat 1]

Each row runs ``omldm demo`` in-process (fresh local broker, fresh MiniCluster job) and
reports records/s (records fitted or predicted per second of streaming), bytes per fitted
record each way, and the push → global-model round trip through Kafka (p50/p95 of the
worst spoke, milliseconds). The first row is river's single-process pipeline on the same
stream, for reference.
"""

from __future__ import annotations

import argparse
import io
import time

import orjson

from river import linear_model, preprocessing

from flink_jobs.demo import run_demo
from learning.datasets import shuttle


def river_baseline(parse_json: bool) -> tuple[float, float]:
    """river's prequential loop; with ``parse_json`` each record starts as the same JSON
    string the job reads from Kafka (orjson-parsed, then turned into river's dict)."""
    X, y = shuttle()
    model = preprocessing.StandardScaler() | linear_model.PAClassifier(C=0.01, mode=1)
    names = [f"f{i}" for i in range(1, 10)]
    lines = [orjson.dumps({"id": i, "features": x, "label": label})
             for i, (x, label) in enumerate(zip(X.tolist(), y.tolist()))]
    rows = None if parse_json else [dict(zip(names, orjson.loads(s)["features"])) for s in lines]
    hits = 0
    t0 = time.perf_counter()
    for i, label in enumerate(y.tolist()):
        x = dict(zip(names, orjson.loads(lines[i])["features"])) if parse_json else rows[i]
        hits += int(model.predict_one(x) == label)
        model.learn_one(x, label)
    return len(y) / (time.perf_counter() - t0), hits / len(y)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    print(f"{'configuration':44s} {'records/s':>10s} {'prequential':>11s} {'B/rec→hubs':>10s} "
          f"{'B/rec→spokes':>12s} {'loop p50 ms':>11s} {'loop p95 ms':>11s}")
    for parse, name in ((False, "river, 1 process, dicts ready"), (True, "river, 1 process, from JSON strings")):
        rate, acc = river_baseline(parse)
        print(f"{name:44s} {rate:10,.0f} {acc:11.4f}", flush=True)
    for mode in ("thread", "process"):
        for per_message in (1, 50):
            for _ in range(args.repeat):
                s = run_demo(execution_mode=mode, records_per_message=per_message,
                             progress=False, out=io.StringIO())
                name = f"omldm {mode} mode, 2 spokes, {per_message} rec/message"
                fmt = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
                print(f"{name:44s} {s['records_per_second']:10,.0f} {s['prequential_accuracy']:11.4f} "
                      f"{s['bytes_to_hubs'] / s['fitted']:10.2f} {s['bytes_to_spokes'] / s['fitted']:12.2f} "
                      f"{fmt(s['feedback_round_trip_ms_p50']):>11s} {fmt(s['feedback_round_trip_ms_p95']):>11s}",
                      flush=True)
    # the cost of fault tolerance: checkpoints every second (the kernels in keyed state)
    for mode in ("thread", "process"):
        s = run_demo(execution_mode=mode, progress=False, out=io.StringIO(),
                     checkpoint_interval_ms=1000)
        name = f"omldm {mode} mode, checkpoints every 1 s"
        print(f"{name:44s} {s['records_per_second']:10,.0f} {s['prequential_accuracy']:11.4f} "
              f"{s['bytes_to_hubs'] / s['fitted']:10.2f} {s['bytes_to_spokes'] / s['fitted']:12.2f}",
              flush=True)


if __name__ == "__main__":
    main()
