"""What one record costs the spoke kernel, without Flink: the job's Python per record.

Feeds Shuttle (the demo's pipeline: ``StandardScaler | PA``, mini-batches of 32, TAP on one
spoke, ``n_features`` declared) to :class:`operators.spoke_kernel.SpokeKernel` in batches of
``--batch`` records as ``omldm.RecordBatcher`` sends them (:func:`middleware.codec.
record_batch`), and prints the CPU time per record (best of ``--repeats``) for three
streams: training records only, every fifth record a forecast (the demo's and
``benchmarks/e2e.py``'s mix), and forecasts only (to a model that has learned the first
half of the records).

    .venv/bin/python benchmarks/kernel_cost.py [--records 40000] [--batch 500] [--repeats 5]
                                               [--learner PA|SVM|PARegressor|Ridge]
                                               [--per-message 1]

``--per-message 50`` writes each Kafka record as a JSON array of 50 records of one kind
(training or forecasting), as ``benchmarks/e2e.py --per-message 50`` does, in crossings
of about ``--batch`` records.

``--learner SVM`` puts the online SVM (Pegasos, its default λ) in PA's place, ``PARegressor``
and ``Ridge`` PA regression and online ridge regression (their defaults; Shuttle's class
numbers as the targets).

To compare with another revision, run the same file with ``PYTHONPATH`` set to a worktree
of it (``git worktree add /tmp/old REV``; the editable install would otherwise import this
checkout's code).
"""

from __future__ import annotations

import argparse
import time

import orjson

from flink_jobs.demo import shuttle_create_request
from learning.datasets import shuttle
from middleware.codec import record_batch
from operators.spoke_kernel import SpokeKernel


def _kernel(learner: str = "PA") -> SpokeKernel:
    k = SpokeKernel(0, 1, 1, hub_keys=[0])
    req = shuttle_create_request()
    if learner != "PA":
        req["learner"] = {"name": learner, "hyperParameters": {}, "parameters": {}}
    req["learner"]["parameters"]["n_features"] = 9
    k.on_message(orjson.dumps(req))
    k.out.clear()
    return k


def _batches(X, y, lo: int, hi: int, forecast_every: int, size: int,
             per_message: int = 1) -> list[bytes]:
    """Crossings of about ``size`` records; with ``per_message`` > 1 each Kafka record is
    a JSON array of that many records of one kind, as ``benchmarks/e2e.py`` writes them."""
    recs, pending = [], {True: [], False: []}
    for i in range(lo, hi):
        train = not forecast_every or i % forecast_every != forecast_every - 1
        rec = {"id": i, "features": X[i]}
        if train:
            rec["label"] = y[i]
        if per_message == 1:
            recs.append((train, orjson.dumps(rec)))
            continue
        pending[train].append(rec)
        if len(pending[train]) == per_message:
            recs.append((train, orjson.dumps(pending[train])))
            pending[train] = []
    recs += [(train, orjson.dumps(left)) for train, left in pending.items() if left]
    size = max(1, size // per_message)
    return [record_batch(recs[j:j + size]) for j in range(0, len(recs), size)]


def _cost(warm: list[bytes], timed: list[bytes], n: int, repeats: int,
          learner: str = "PA") -> float:
    """Best CPU µs per record of ``timed`` over ``repeats`` fresh kernels (``warm`` first)."""
    best = float("inf")
    for _ in range(repeats):
        k = _kernel(learner)
        for b in warm:
            k.on_batch(b)
            k.out.clear()
        t0 = time.process_time()
        for b in timed:
            k.on_batch(b)
            k.out.clear()
        best = min(best, (time.process_time() - t0) / n * 1e6)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=40_000)
    ap.add_argument("--batch", type=int, default=500, help="records per crossing")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--learner", choices=("PA", "SVM", "PARegressor", "Ridge"), default="PA")
    ap.add_argument("--per-message", type=int, default=1,
                    help="records per Kafka record (a JSON array when more than one)")
    args = ap.parse_args()
    if args.per_message < 1:
        ap.error(f"--per-message must be at least 1, got {args.per_message}")
    X, y = shuttle()
    X, y = X.tolist(), y.tolist()
    n = min(args.records, len(y) // 2)
    print(f"{'stream':28s} {'µs per record':>14s}")
    for name, every in (("training only", 0), ("1 in 5 forecast", 5)):
        us = _cost([], _batches(X, y, 0, n, every, args.batch, args.per_message), n,
                   args.repeats, args.learner)
        print(f"{name:28s} {us:14.2f}", flush=True)
    us = _cost(_batches(X, y, 0, n, 0, args.batch, args.per_message),
               _batches(X, y, n, 2 * n, 1, args.batch, args.per_message), n,
               args.repeats, args.learner)
    print(f"{'forecasts only (trained)':28s} {us:14.2f}", flush=True)


if __name__ == "__main__":
    main()
