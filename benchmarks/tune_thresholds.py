"""The threshold grid behind ``flink_jobs.experiment.SETTINGS`` (FDA naive, linear, sketch;
EVENFLOW basic, fast), on the in-process kernel with the Flink loop's latency simulated.

    .venv/bin/python benchmarks/tune_thresholds.py [--dataset rbf ...] [--lag 500]
                                                   [--within 0.005] [--grid 0.04,0.02,...]
                                                   [--aggregation sum|average|diversity|momentum]
                                                   [--diversity-blocks class|model]
                                                   [--seeds 0,1,2] [--json PATH]

For every dataset, variant and threshold of the grid (``--grid``, default 0.04, 0.02,
0.01, 0.005) and every seed of the spoke shares (``--seeds``, default 0): one run of
:func:`flink_jobs.experiment.run_local` (4 spokes, the whole stream) with messages
delivered only every ``--lag`` records; with several seeds a line shows the means (and
the accuracy's standard deviation), BSP's bytes the mean of its own runs. On
Flink a check (FDA's poll, EVENFLOW's ``begin_sync``) travels back through Kafka while
spokes train on, so rounds end late and, under PA's ``sum`` rule, overshoot; delivering
every 500 records reproduces that (RandomRBF, FDA naive at 0.04 without waiting
increments: 0.7395 here, 0.7808 on Flink with 112 rounds, against 0.7726 with every
message delivered at once). ``--aggregation`` runs every variant under that rule instead
of the one :data:`~flink_jobs.experiment.SETTINGS` gives it (BSP, the bytes' yardstick,
keeps its own: its bytes do not depend on the rule); ``--diversity-blocks`` sets
``trainingConfiguration.diversityBlocks`` of those runs (under ``diversity``: one scale per
class row, or one for the model).

Printed per dataset: each run's prequential accuracy, bytes both ways and rounds, BSP's
bytes beside them, and the pick: the largest threshold within ``--within`` of the
centralized learner (digits-pa: 0.015, its target being 0.02), else the smallest (``!``).
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from flink_jobs.experiment import (AGGREGATIONS, CENTRALIZED, SETTINGS, run_centralized,
                                   run_local)

GRID = (0.04, 0.02, 0.01, 0.005)
VARIANTS = (("FDA", "naive"), ("FDA", "linear"), ("FDA", "sketch"),
            ("EVENFLOW", "basic"), ("EVENFLOW", "fast"))
#: datasets whose target is looser than the long streams' 0.01 (issue 13: digits 0.02)
WITHIN = {"digits-pa": 0.015}


def _one(job: tuple[str, str, str | None, float | None, int, str | None, int,
                   str | None]) -> dict:
    dataset, protocol, variant, threshold, lag, aggregation, seed, blocks = job
    if protocol == CENTRALIZED:
        row = run_centralized(dataset)
    else:
        extra = dict(next(e for p, v, e in SETTINGS[dataset] if (p, v) == (protocol, variant)))
        if threshold is not None:
            extra["threshold"] = threshold
            if aggregation is not None:
                extra["aggregation"] = aggregation
            if blocks is not None:
                extra["diversityBlocks"] = blocks
        row = run_local(dataset, protocol, variant, extra, spokes=4, lag=lag, seed=seed)
    return {"dataset": dataset, "protocol": protocol, "variant": variant,
            "threshold": threshold, "lag": lag, "seed": seed, "diversity_blocks": blocks,
            "accuracy": row["prequential_accuracy"],
            "bytes": row["bytes_to_hubs"] + row["bytes_to_spokes"], "rounds": row["rounds"],
            "aggregation": row["aggregation"], "diversity_scale": row["diversity_scale"]}


def _mean(runs: list[dict]) -> dict:
    """One line of the printout: the first run's keys, with the means over ``runs`` (one
    per seed) of accuracy, bytes, rounds and the diversity scale, and ``sd``, the
    accuracy's standard deviation."""
    acc = np.array([r["accuracy"] for r in runs])
    betas = [r["diversity_scale"] for r in runs if r["diversity_scale"] is not None]
    return {**runs[0], "accuracy": float(acc.mean()), "sd": float(acc.std()),
            "bytes": float(np.mean([r["bytes"] for r in runs])),
            "rounds": float(np.mean([r["rounds"] for r in runs])),
            "diversity_scale": float(np.mean(betas)) if betas else None}


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
    ap.add_argument("--diversity-blocks", choices=("class", "model"), default=None,
                    help="diversityBlocks of every FDA and EVENFLOW run (default: left out, "
                         "class)")
    ap.add_argument("--seeds", default="0",
                    help="seeds of the spoke shares, comma-separated (default %(default)s)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    grid = tuple(sorted((float(t) for t in args.grid.split(",")), reverse=True))
    seeds = tuple(int(x) for x in args.seeds.split(","))
    datasets = args.dataset or ["shuttle", "waveform", "rbf", "led", "hyperplane", "digits-pa"]
    jobs = []
    for ds in datasets:
        jobs += [(ds, CENTRALIZED, None, None, 1, None, 0, None)]
        jobs += [(ds, "Synchronous", None, None, args.lag, None, seed, None) for seed in seeds]
        jobs += [(ds, p, v, t, args.lag, args.aggregation, seed, args.diversity_blocks)
                 for p, v in VARIANTS for t in grid for seed in seeds]
    with ProcessPoolExecutor(2) as pool:
        rows = list(pool.map(_one, jobs))
    for ds in datasets:
        mine = [r for r in rows if r["dataset"] == ds]
        central = next(r for r in mine if r["protocol"] == CENTRALIZED)["accuracy"]
        bsp = _mean([r for r in mine if r["protocol"] == "Synchronous"])
        bar = WITHIN.get(ds, args.within)
        print(f"\n{ds}: centralized {central:.4f}, BSP {bsp['accuracy']:.4f} with "
              f"{bsp['bytes']:,.0f} bytes (lag {args.lag}, seeds {args.seeds}); pick: within "
              f"{bar} of centralized")
        picks = []
        for p, v in VARIANTS:
            runs = [_mean([r for r in mine if (r["protocol"], r["variant"], r["threshold"])
                           == (p, v, t)]) for t in grid]
            for r in runs:
                sd = f" ± {r['sd']:.4f}" if len(seeds) > 1 else ""
                print(f"  {p} {v:6} {r['threshold']:<6g} {r['aggregation'] or '':7} "
                      f"acc {r['accuracy']:.4f}{sd} "
                      f"({r['accuracy'] - central:+.4f}) bytes 1/{bsp['bytes'] / r['bytes']:.1f} "
                      f"of BSP, {r['rounds']:.0f} rounds"
                      + (f", beta {r['diversity_scale']:.2f}" if r["diversity_scale"] else ""))
            ok = [r["threshold"] for r in runs if r["accuracy"] >= central - bar]
            picks.append(f"{max(ok):g}" if ok else f"{min(grid):g}!")
        print(f"  pick (naive, linear, sketch, basic, fast): {', '.join(picks)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
