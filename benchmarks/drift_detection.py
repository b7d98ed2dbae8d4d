"""Concept drift detection on spokes (``trainingConfiguration.driftDetector``,
:mod:`learning.drift`): how late, and how often wrongly, river's detectors fire on each
spoke's share of a stream, against one detector on the whole stream.

    .venv/bin/python benchmarks/drift_detection.py [--dataset agrawal|sea|sine ...]
                                                   [--detector ADWIN ...]
                                                   [--spokes 1,4] [--seeds 0,1,2]
                                                   [--records 20000] [--position 10000]
                                                   [--width 200] [--protocol Asynchronous]
                                                   [--json PATH]

Per dataset (:func:`learning.datasets.drift`: river's ``ConceptDriftStream``, seeded,
``--records`` records switching concept around record ``--position`` over ``--width``
records), detector and spoke count, one run per seed on the in-process kernel
(:func:`flink_jobs.local_run.stream_local`: StandardScaler → PA-I at C = 0.01, mini-batches
of 16, every record trained on, dealt to spokes at random from the seed, messages
delivered after every record). With 1 spoke (protocol ``Independent``) the detector sees
the whole stream: the reference. Each detection (a drift event on the responses topic) is
mapped from the spoke's record count back to the stream's record index (the job's random
dealing, ``numpy.random.default_rng(seed).integers(0, spokes, n)``).

Printed, the mean over seeds: false alarms (detections before ``position − width``, all
spokes together, per 10,000 records of the stream), the delay of the pipeline's first
detection after ``position − width`` in the stream's records (None: none), the share of
spokes that detected it, the prequential accuracy, and records/s against the same runs
without a detector (the detector's cost).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flink_jobs.local_run import stream_local  # noqa: E402
from learning import datasets  # noqa: E402


def request(protocol: str, detector: str | None) -> dict:
    cfg = {"protocol": protocol, "miniBatchSize": 16}
    if detector:
        cfg["driftDetector"] = detector
    return {"id": 1, "request": "Create", "preProcessors": [{"name": "StandardScaler"}],
            "learner": {"name": "PA", "hyperParameters": {"C": 0.01}},
            "trainingConfiguration": cfg}


def one_run(X: np.ndarray, y: np.ndarray, detector: str | None, spokes: int, seed: int,
            protocol: str, start: int) -> dict:
    """One run; ``start``: the first stream index counted as after the drift."""
    run = stream_local(request(protocol if spokes > 1 else "Independent", detector), X, y,
                       spokes=spokes, every=0, seed=seed)
    dealt = np.random.default_rng(seed).integers(0, spokes, len(X)) if spokes > 1 \
        else np.zeros(len(X), dtype=np.int64)
    per_spoke = [np.flatnonzero(dealt == s) for s in range(spokes)]
    fitted = run.final["fittedPerSpoke"]
    assert [len(p) for p in per_spoke] == fitted, "the dealing is not the job's"
    at = sorted((int(per_spoke[e["spoke"]][e["atRecord"] - 1]), e["spoke"])
                for e in run.net.outputs["responses"] if e.get("event") == "drift")
    before = [i for i, _ in at if i < start]
    after = [(i, s) for i, s in at if i >= start]
    return {"falseAlarmsPer10k": 1e4 * len(before) / start,
            "delay": after[0][0] - start if after else None,
            "spokesDetecting": len({s for _, s in after}) / spokes,
            "accuracy": run.final["prequentialAccuracy"],
            "recordsPerS": len(X) / run.seconds}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", action="append", choices=sorted(datasets.DRIFT))
    p.add_argument("--detector", action="append")
    p.add_argument("--spokes", default="1,4")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--records", type=int, default=20_000)
    p.add_argument("--position", type=int, default=10_000)
    p.add_argument("--width", type=int, default=200)
    p.add_argument("--protocol", default="Asynchronous")
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    seeds = [int(s) for s in a.seeds.split(",")]
    start = a.position - a.width
    rows = []
    print("| dataset | detector | spokes | false alarms / 10k records | first detection, "
          "records after the drift | spokes detecting | prequential accuracy | records/s |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for ds in a.dataset or sorted(datasets.DRIFT):
        X, y = datasets.drift(ds, n=a.records, position=a.position, width=a.width)
        for spokes in [int(s) for s in a.spokes.split(",")]:
            for detector in [None, *(a.detector or ["ADWIN", "HDDM_A", "HDDM_W", "DDM", "PageHinkley"])]:
                runs = [one_run(X, y, detector, spokes, seed, a.protocol, start)
                        for seed in seeds]
                delays = [r["delay"] for r in runs if r["delay"] is not None]
                row = {"dataset": ds, "detector": detector or "none", "spokes": spokes,
                       "falseAlarmsPer10k": statistics.mean(r["falseAlarmsPer10k"] for r in runs),
                       "delay": statistics.mean(delays) if delays else None,
                       "missed": len(runs) - len(delays),
                       "spokesDetecting": statistics.mean(r["spokesDetecting"] for r in runs),
                       "accuracy": statistics.mean(r["accuracy"] for r in runs),
                       "recordsPerS": statistics.mean(r["recordsPerS"] for r in runs),
                       "runs": len(runs)}
                rows.append(row)
                delay = "–" if row["delay"] is None else (
                    f"{row['delay']:,.0f}" + (f" ({row['missed']} of {len(runs)} missed)"
                                              if row["missed"] else ""))
                print(f"| {ds} | {row['detector']} | {spokes} | "
                      f"{row['falseAlarmsPer10k']:.1f} | {delay} | "
                      f"{row['spokesDetecting']:.2f} | {row['accuracy']:.4f} | "
                      f"{row['recordsPerS']:,.0f} |", flush=True)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
