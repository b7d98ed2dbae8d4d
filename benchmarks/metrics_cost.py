"""What the quality metrics (:mod:`learning.metrics`) add per record on a spoke.

Runs the project's ``PAClassifier`` test-then-train over all of Shuttle (49,097 records) in
mini-batches, keeps its prequential predictions, then times
:meth:`learning.metrics.QualityState.update` over them (best of ``--repeats``): the cost
each fitted mini-batch pays for the cumulative and rolling metrics. Regression is timed on
the same batches with a numeric target; the MLP row adds class probabilities (log loss and
ROC AUC) on a binary stream (scikit-learn's breast cancer set, repeated).

    .venv/bin/python benchmarks/metrics_cost.py [--batch-sizes 16,64] [--window 1000]

Prints one line per case: microseconds per record for the metrics, and for comparison the
pipeline's own test-then-train.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from learning.datasets import shuttle
from learning.metrics import QualityState
from learning.registry import make_pipeline


def _best(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _batches(pipe, X, y, size: int, with_proba: bool = False) -> tuple[list, float]:
    """The pipeline's prequential output per mini-batch, and its own seconds."""
    out, t0 = [], time.perf_counter()
    for i in range(0, len(X), size):
        yb = y[i:i + size]
        r = pipe.test_then_train(X[i:i + size], yb, with_proba=with_proba)
        out.append((yb, r[0], r[3] if with_proba else None,
                    list(pipe.learner.classes) if with_proba else None))
    return out, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--batch-sizes", default="16,64", help="mini-batch sizes, comma-separated")
    ap.add_argument("--window", type=int, default=1000, help="rolling window (records)")
    ap.add_argument("--repeats", type=int, default=5, help="timings per case; the best counts")
    args = ap.parse_args()
    X, y = shuttle()
    labels, n = y.tolist(), len(X)
    target = (X[:, 0] / 100.0).tolist()
    for size in (int(s) for s in args.batch_sizes.split(",")):
        pipe = make_pipeline([], {"name": "PA", "hyperParameters": {"C": 0.01, "mode": 1}})
        batches, own = _batches(pipe, X, labels, size)

        def classification():
            q = QualityState("classification", args.window)
            for yb, pb, _, _ in batches:
                q.update(yb, pb)

        regression_batches = [(target[i:i + size], [t + 0.1 for t in target[i:i + size]])
                              for i in range(0, n, size)]

        def regression():
            q = QualityState("regression", args.window)
            for yb, pb in regression_batches:
                q.update(yb, pb)

        us = 1e6 / n
        print(f"mini-batch {size:4d}: PA test-then-train {own * us:6.2f} us/record; metrics "
              f"classification {_best(classification, args.repeats) * us:5.3f}, regression "
              f"{_best(regression, args.repeats) * us:5.3f} us/record")
    from sklearn.datasets import load_breast_cancer

    Xb, yb = load_breast_cancer(return_X_y=True)
    Xb, yb = np.tile(Xb, (4, 1)), np.tile(yb, 4).tolist()
    for size in (int(s) for s in args.batch_sizes.split(",")):
        pipe = make_pipeline([{"name": "StandardScaler"}], {"name": "MLP"})
        batches, own = _batches(pipe, Xb, yb, size, with_proba=True)

        def binary():
            q = QualityState("classification", args.window)
            for yt, pb, proba, classes in batches:
                q.update(yt, pb, proba, classes)

        us = 1e6 / len(Xb)
        print(f"mini-batch {size:4d}: MLP test-then-train with probabilities {own * us:6.2f} "
              f"us/record; metrics with log loss and ROC AUC "
              f"{_best(binary, args.repeats) * us:5.3f} us/record")


if __name__ == "__main__":
    main()
