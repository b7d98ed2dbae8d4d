"""The aggregation rules under every protocol: the measurement behind the learners'
default rules (:data:`learning.protocols.sharding.DEFAULT_AGGREGATION`,
:data:`~learning.protocols.sharding.SAFE_ZONE_AGGREGATION`, ridge's ``sum``).

    .venv/bin/python benchmarks/aggregation_rules.py [--dataset waveform|digits|friedman|
                                                      diabetes|trump ...]
                                                     [--learner MLP|CNN|Ridge|PARegressor|
                                                      MLPRegressor]
                                                     [--preprocessor StandardScaler ...]
                                                     [--learning-rate 0.005]
                                                     [--hidden-layers 64]
                                                     [--protocol Synchronous ...]
                                                     [--rule average --rule sum ...]
                                                     [--seeds 0,1] [--lag 1]
                                                     [--mini-batches 1]
                                                     [--threshold 0.05] [--json PATH]

Per dataset (``waveform``: the first 8,000 records of the quality experiment's Waveform;
``digits``: its 10,782 records of digits; regression streams: ``friedman``, 8,000 records
of river's seeded Friedman #1, ``diabetes``, scikit-learn's bundled 442 patients five times
over (2,210 records, 10 features, target 25–346), ``trump``, river's bundled TrumpApproval
(1,001 days, 6 features, target 37–48)): one run of the centralized learner (one spoke,
``Independent``), then independent learners and every protocol under every rule on 4
spokes of the in-process kernel (:func:`flink_jobs.local_run.stream_local`: the
``--preprocessor`` list, StandardScaler by default, ``none`` for none; the learner at its
defaults but for ``--learning-rate`` and ``--hidden-layers``; a classification stream runs
a classifier, MLP unless ``--learner`` names CNN, a regression stream a regressor,
MLPRegressor unless ``--learner`` names another; mini-batches of 16, ``--mini-batches``
of them between synchronizations, every 5th record forecast, every record to a spoke drawn
at random with each of ``--seeds``, messages delivered every ``--lag`` records). FDA and
EVENFLOW run at ``--threshold``.

Printed: a markdown table of the mean over seeds of the prequential accuracy
(classifiers) or the prequential mean absolute error (regressors, lower is better), one
row per protocol, one column per rule.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from flink_jobs.experiment import AGGREGATIONS, load, load_friedman
from flink_jobs.local_run import stream_local
from learning.datasets import diabetes, trump_approval

PROTOCOLS = ("Synchronous", "SSP", "Asynchronous", "EASGD", "Adaptive", "FDA:naive",
             "FDA:linear", "FDA:sketch", "EVENFLOW:basic", "EVENFLOW:fast")
#: records of the streams cut from longer ones
RECORDS = 8000
#: the regression streams (the others are classification streams)
REGRESSION = ("friedman", "diabetes", "trump")
#: the learners ``--learner`` may name for them
REGRESSORS = ("MLPRegressor", "Ridge", "PARegressor")


def stream(dataset: str) -> tuple[np.ndarray, np.ndarray]:
    """``(X, y)`` of a dataset of this benchmark."""
    if dataset == "friedman":
        X, y, _, _ = load_friedman(RECORDS, 0.0)
        return X, y
    if dataset == "diabetes":
        return diabetes()
    if dataset == "trump":
        return trump_approval()
    X, y = load(dataset)
    return (X[:RECORDS], y[:RECORDS]) if dataset == "waveform" else (X, y)


def create(protocol: str, learner: dict, extra: dict, preprocessors: list[dict]) -> dict:
    """The Create request of one run; ``protocol`` may be ``name:variant``."""
    name, _, variant = protocol.partition(":")
    cfg = {"protocol": name, "miniBatchSize": 16, "miniBatches": 1, **extra}
    if variant:
        cfg["variant"] = variant
    return {"id": 0, "request": "Create", "requestId": "rules",
            "preProcessors": preprocessors, "learner": learner, "trainingConfiguration": cfg}


def score(dataset: str, learner: dict, protocol: str, extra: dict, spokes: int,
          seeds: list[int], lag: int, preprocessors: list[dict]) -> float:
    """The mean over ``seeds`` of the prequential accuracy, or of the mean absolute error
    for a regressor (one run for one spoke: no shares to draw)."""
    X, y = stream(dataset)
    values = []
    for seed in seeds[:1] if spokes == 1 else seeds:
        final = stream_local(create(protocol, learner, extra, preprocessors), X, y,
                             spokes=spokes, every=5, seed=seed, lag=lag).final
        values.append(final["meanLoss"] if dataset in REGRESSION
                      else final["prequentialAccuracy"])
    return float(np.mean(values))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", action="append",
                    choices=("waveform", "digits") + REGRESSION)
    ap.add_argument("--learner", choices=("MLP", "CNN") + REGRESSORS, default="MLP",
                    help="a classifier for the classification streams, a regressor for the "
                         "regression ones (the other kind's default where it does not fit)")
    ap.add_argument("--preprocessor", action="append",
                    help="default: StandardScaler; none: no preprocessor")
    ap.add_argument("--mini-batches", type=int, default=1,
                    help="mini-batches between a spoke's synchronizations (miniBatches)")
    ap.add_argument("--learning-rate", type=float, default=None,
                    help="the learner's learning_rate (default: its own)")
    ap.add_argument("--hidden-layers", default=None,
                    help="comma-separated widths (MLP, MLPRegressor; default: their own)")
    ap.add_argument("--protocol", action="append", help=f"default: {', '.join(PROTOCOLS)}")
    ap.add_argument("--rule", action="append", choices=AGGREGATIONS,
                    help="default: average and sum")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--lag", type=int, default=1)
    ap.add_argument("--threshold", type=float, default=0.05)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    rules = args.rule or ["average", "sum"]
    names = args.preprocessor or ["StandardScaler"]
    preprocessors = [] if names == ["none"] else [{"name": n} for n in names]
    rows = []
    for dataset in args.dataset or ["waveform", "digits", "friedman"]:
        regression = dataset in REGRESSION
        name = args.learner
        if regression != (name in REGRESSORS):
            name = "MLPRegressor" if regression else "MLP"
        hyper: dict = {"seed": 0} if name.startswith(("MLP", "CNN")) else {}
        if args.learning_rate is not None:
            hyper["learning_rate"] = args.learning_rate
        if args.hidden_layers is not None and name.startswith("MLP"):
            hyper["hidden_layers"] = [int(h) for h in args.hidden_layers.split(",")]
        learner = {"name": name, "hyperParameters": hyper}
        metric = "prequential MAE" if regression else "prequential accuracy"
        print(f"\n{dataset}: {name} {hyper}, {names}, 4 spokes, seeds {seeds}, "
              f"{args.mini_batches} mini-batches a round, messages every {args.lag} records; "
              f"{metric}")
        runs = {"seeds": seeds, "lag": args.lag, "preprocessors": preprocessors}
        base = {"miniBatches": args.mini_batches}
        central = score(dataset, learner, "Independent", base, 1, **runs)
        alone = score(dataset, learner, "Independent", base, 4, **runs)
        print(f"centralized {central:.4f}, independent learners {alone:.4f}\n")
        print("| protocol | " + " | ".join(rules) + " |")
        print("| --- |" + " ---: |" * len(rules))
        for protocol in args.protocol or PROTOCOLS:
            cells = []
            for rule in rules:
                extra = {**base, "aggregation": rule}
                if protocol.startswith(("FDA", "EVENFLOW")):
                    extra["threshold"] = args.threshold
                value = score(dataset, learner, protocol, extra, 4, **runs)
                cells.append(f"{value:.4f}")
                rows.append({"dataset": dataset, "learner": learner, "protocol": protocol,
                             "aggregation": rule, "value": value, "metric": metric,
                             "centralized": central, "independent": alone,
                             "miniBatches": args.mini_batches, **runs})
            print(f"| {protocol} | " + " | ".join(cells) + " |", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
