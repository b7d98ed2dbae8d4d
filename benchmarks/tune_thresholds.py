"""The threshold grid behind ``flink_jobs.experiment.SETTINGS`` (FDA naive, linear, sketch;
EVENFLOW basic, fast), on the in-process kernel with the Flink loop's latency simulated.

    .venv/bin/python benchmarks/tune_thresholds.py [--dataset rbf ...] [--lag 500]
                                                   [--within 0.005] [--grid 0.04,0.02,...]
                                                   [--aggregation sum|average] [--json PATH]

For every dataset, variant and threshold of the grid (``--grid``, default 0.04, 0.02,
0.01, 0.005): one run of :func:`flink_jobs.experiment.run_local` (4 spokes, spoke shares
of seed 0, the whole stream) with messages delivered only every ``--lag`` records. On
Flink a check (FDA's poll, EVENFLOW's ``begin_sync``) travels back through Kafka while
spokes train on, so rounds end late and, under PA's ``sum`` rule, overshoot; delivering
every 500 records reproduces that (RandomRBF, FDA naive at 0.04 without waiting
increments: 0.7395 here, 0.7808 on Flink with 112 rounds, against 0.7726 with every
message delivered at once). ``--aggregation`` runs every variant under that rule instead
of the one :data:`~flink_jobs.experiment.SETTINGS` gives it (BSP, the bytes' yardstick,
keeps its own: its bytes do not depend on the rule).

Printed per dataset: each run's prequential accuracy, bytes both ways and rounds, BSP's
bytes beside them, and the pick: the largest threshold within ``--within`` of the
centralized learner (digits-pa: 0.015, its target being 0.02), else the smallest (``!``).
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ProcessPoolExecutor

from flink_jobs.experiment import (AGGREGATIONS, CENTRALIZED, SETTINGS, run_centralized,
                                   run_local)

GRID = (0.04, 0.02, 0.01, 0.005)
VARIANTS = (("FDA", "naive"), ("FDA", "linear"), ("FDA", "sketch"),
            ("EVENFLOW", "basic"), ("EVENFLOW", "fast"))
#: datasets whose target is looser than the long streams' 0.01 (issue 13: digits 0.02)
WITHIN = {"digits-pa": 0.015}


def _one(job: tuple[str, str, str | None, float | None, int, str | None]) -> dict:
    dataset, protocol, variant, threshold, lag, aggregation = job
    if protocol == CENTRALIZED:
        row = run_centralized(dataset)
    else:
        extra = dict(next(e for p, v, e in SETTINGS[dataset] if (p, v) == (protocol, variant)))
        if threshold is not None:
            extra["threshold"] = threshold
            if aggregation is not None:
                extra["aggregation"] = aggregation
        row = run_local(dataset, protocol, variant, extra, spokes=4, lag=lag)
    return {"dataset": dataset, "protocol": protocol, "variant": variant,
            "threshold": threshold, "lag": lag, "accuracy": row["prequential_accuracy"],
            "bytes": row["bytes_to_hubs"] + row["bytes_to_spokes"], "rounds": row["rounds"],
            "aggregation": row["aggregation"], "diversity_scale": row["diversity_scale"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", action="append",
                    default=None, help="repeatable (default: the PA datasets but phishing)")
    ap.add_argument("--lag", type=int, default=500)
    ap.add_argument("--within", type=float, default=0.005)
    ap.add_argument("--grid", default=",".join(map(str, GRID)),
                    help="thresholds, comma-separated (default %(default)s)")
    ap.add_argument("--aggregation", choices=AGGREGATIONS, default=None,
                    help="the rule of every FDA and EVENFLOW run (default: SETTINGS')")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    grid = tuple(sorted((float(t) for t in args.grid.split(",")), reverse=True))
    datasets = args.dataset or ["shuttle", "waveform", "rbf", "led", "hyperplane", "digits-pa"]
    jobs = []
    for ds in datasets:
        jobs += [(ds, CENTRALIZED, None, None, 1, None),
                 (ds, "Synchronous", None, None, args.lag, None)]
        jobs += [(ds, p, v, t, args.lag, args.aggregation) for p, v in VARIANTS for t in grid]
    with ProcessPoolExecutor(2) as pool:
        rows = list(pool.map(_one, jobs))
    for ds in datasets:
        mine = [r for r in rows if r["dataset"] == ds]
        central = next(r for r in mine if r["protocol"] == CENTRALIZED)["accuracy"]
        bsp = next(r for r in mine if r["protocol"] == "Synchronous")
        bar = WITHIN.get(ds, args.within)
        print(f"\n{ds}: centralized {central:.4f}, BSP {bsp['accuracy']:.4f} with "
              f"{bsp['bytes']:,} bytes (lag {args.lag}); pick: within {bar} of centralized")
        picks = []
        for p, v in VARIANTS:
            runs = [r for r in mine if (r["protocol"], r["variant"]) == (p, v)]
            for r in runs:
                print(f"  {p} {v:6} {r['threshold']:<6g} {r['aggregation'] or '':7} "
                      f"acc {r['accuracy']:.4f} "
                      f"({r['accuracy'] - central:+.4f}) bytes 1/{bsp['bytes'] / r['bytes']:.1f} "
                      f"of BSP, {r['rounds']} rounds"
                      + (f", beta {r['diversity_scale']:.2f}" if r["diversity_scale"] else ""))
            ok = [r["threshold"] for r in runs if r["accuracy"] >= central - bar]
            picks.append(f"{max(ok):g}" if ok else f"{min(grid):g}!")
        print(f"  pick (naive, linear, sketch, basic, fast): {', '.join(picks)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
