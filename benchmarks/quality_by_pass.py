"""Where in the stream a protocol loses prequential accuracy against the centralized
learner: the accuracy of each pass over scikit-learn's digits (the quality experiment's
``digits-pa`` stream, 6 passes of 1,797 images), or of each sixth of another stream.

    .venv/bin/python benchmarks/quality_by_pass.py [--dataset digits-pa]
                                                   [--protocol Synchronous ...]
                                                   [--seeds 0,1,2] [--lag 1]

On the in-process kernel (:class:`operators.local.LocalNetwork`, the experiment's Create
requests and records: :func:`flink_jobs.experiment.create_request` with each protocol's
runs of :data:`flink_jobs.experiment.SETTINGS`, its variants and thresholds, every 5th record
forecast, every record to one of 4 spokes drawn at random from the seed, messages
delivered every ``--lag`` records): the centralized learner (one spoke, ``Independent``)
once, each protocol once per seed. Printed: per pass (sixth), the training records'
prequential accuracy, the mean over seeds, and the whole stream's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flink_jobs.experiment import SETTINGS, create_request, load  # noqa: E402
from operators.local import LocalNetwork  # noqa: E402

PARTS = 6


def by_part(dataset: str, protocol: str, variant: str | None, extra: dict, spokes: int,
            seed: int, lag: int) -> list[float]:
    """The prequential accuracy of each sixth of the training records, then the whole's."""
    X, y = load(dataset)
    request = create_request(dataset, protocol, variant, extra)
    net = LocalNetwork(n_spokes=spokes, n_hubs=1, network=request["id"], seed=seed)
    net.request(request)
    feats, labels = X.tolist(), y.tolist()
    records = [(False, {"id": i, "features": feats[i]}) if i % 5 == 4 else
               (True, {"id": i, "features": feats[i], "label": labels[i]})
               for i in range(len(feats))]
    n_train = sum(1 for train, _ in records if train)
    edges = [round(n_train * k / PARTS) for k in range(1, PARTS + 1)]
    marks = [(0, 0)]  # (fitted, correct) at each part's end, as the counts cross it
    for start in range(0, len(records), lag):
        net.stream(records[start:start + lag])
        fitted = sum(s.fitted for s in net.spokes)
        while len(marks) <= PARTS and fitted >= edges[len(marks) - 1]:
            marks.append((fitted, sum(s.correct for s in net.spokes)))
    fitted = sum(s.fitted for s in net.spokes)
    correct = sum(s.correct for s in net.spokes)
    while len(marks) <= PARTS:  # a last mini-batch still buffered
        marks.append((fitted, correct))
    parts = [(c1 - c0) / (f1 - f0) if f1 > f0 else float("nan")
             for (f0, c0), (f1, c1) in zip(marks, marks[1:])]
    return parts + [correct / fitted]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="digits-pa")
    p.add_argument("--protocol", action="append")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--lag", type=int, default=1)
    a = p.parse_args(argv)
    seeds = [int(s) for s in a.seeds.split(",")]
    print("| run | " + " | ".join(f"part {k}" for k in range(1, PARTS + 1)) + " | whole |")
    print("| --- |" + " ---: |" * (PARTS + 1))
    rows = [("Centralized", by_part(a.dataset, "Independent", None, {}, 1, 0, a.lag))]
    wanted = a.protocol or ["Independent", "Synchronous", "Asynchronous"]
    for protocol, variant, extra in SETTINGS[a.dataset]:
        if protocol not in wanted:
            continue
        runs = [by_part(a.dataset, protocol, variant, extra, 4, seed, a.lag) for seed in seeds]
        rows.append((protocol + (f" {variant}" if variant else ""),
                     [statistics.mean(v) for v in zip(*runs)]))
    for name, values in rows:
        print(f"| {name} | " + " | ".join(f"{v:.4f}" for v in values) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
