"""Records fitted per second by each learner, single-threaded, next to river, as a table.

    .venv/bin/python benchmarks/learners.py [--scale 1.0] [--repeat 3]

For each learner: ``fit`` on numpy mini-batches of 1, 32 and 256 records (the best of
``--repeat`` runs), and river's ``learn_one`` loop (and ``learn_many`` on pandas frames of
32 and 256 records, where river has it) on the same records. Features are standardized
once beforehand and river's dicts / frames are built before the clock starts, so only
learning is timed. torch is limited to one thread. ``ratio`` is omldm at 256 over river's
``learn_one``.

Streams: Shuttle (49,097 × 9, binary) for classifiers and k-means; TrumpApproval (1,001 ×
6) repeated 20 times for regressors; digits (1,797 × 64, 10 classes) repeated for the CNN.
Slow learners run on a prefix (the ``records`` column). river counterparts: PAClassifier,
PARegressor, LinearRegression (for ridge), LogisticRegression(loss=Hinge()) (its linear
SVM), KMeans, HoeffdingTreeClassifier / HoeffdingAdaptiveTreeClassifier (which omldm
wraps); river has no MLP or CNN classifier.
"""

from __future__ import annotations

import argparse
import time
from typing import Any, Callable

import numpy as np


def standardized(X: np.ndarray) -> np.ndarray:
    std = X.std(axis=0)
    return (X - X.mean(axis=0)) / np.where(std > 0, std, 1.0)


def streams() -> dict[str, tuple[np.ndarray, list]]:
    from river import datasets
    from sklearn.datasets import load_digits

    from learning.datasets import shuttle

    X, y = shuttle()
    out = {"Shuttle": (standardized(X), y.tolist())}
    data = list(datasets.TrumpApproval())
    Xt = standardized(np.array([list(x.values()) for x, _ in data]))
    out["Trump×20"] = (np.tile(Xt, (20, 1)), [float(t) for _, t in data] * 20)
    Xd, yd = load_digits(return_X_y=True)
    out["digits×5"] = (np.tile(standardized(Xd), (5, 1)), yd.tolist() * 5)
    return out


def rate_ours(make: Callable[[], Any], X: np.ndarray, y: list, batch: int,
              repeat: int) -> float:
    best = 0.0
    for _ in range(repeat):
        model = make()
        pieces = [(X[i:i + batch], y[i:i + batch]) for i in range(0, len(X), batch)]
        t0 = time.perf_counter()
        for Xb, yb in pieces:
            model.fit(Xb, yb)
        best = max(best, len(X) / (time.perf_counter() - t0))
    return best


def rate_river_one(make: Callable[[], Any], X: np.ndarray, y: list, repeat: int,
                   unsupervised: bool = False) -> float:
    rows = [dict(enumerate(x)) for x in X.tolist()]
    best = 0.0
    for _ in range(repeat):
        model = make()
        t0 = time.perf_counter()
        if unsupervised:
            for x in rows:
                model.learn_one(x)
        else:
            for x, t in zip(rows, y):
                model.learn_one(x, t)
        best = max(best, len(X) / (time.perf_counter() - t0))
    return best


def rate_river_many(make: Callable[[], Any], X: np.ndarray, y: list, batch: int,
                    repeat: int) -> float:
    import pandas as pd

    frames = [(pd.DataFrame(X[i:i + batch]), pd.Series(y[i:i + batch]))
              for i in range(0, len(X), batch)]
    best = 0.0
    for _ in range(repeat):
        model = make()
        t0 = time.perf_counter()
        for Xb, yb in frames:
            model.learn_many(Xb, yb)
        best = max(best, len(X) / (time.perf_counter() - t0))
    return best


def cases(scale: float) -> list[dict]:
    from river import cluster, linear_model, optim, tree

    from learning.learners import (CNN, MLP, HoeffdingAdaptiveTree, HoeffdingTree, KMeans,
                                   OnlineRidge, OnlineSVM, PAClassifier, PARegressor)

    n = lambda k: max(1000, int(k * scale))  # noqa: E731
    return [
        dict(name="PAClassifier(C=0.01, mode=1)", stream="Shuttle", records=n(49097),
             ours=lambda: PAClassifier(C=0.01, mode=1),
             river=lambda: linear_model.PAClassifier(C=0.01, mode=1)),
        dict(name="OnlineSVM(lam=0.01)", stream="Shuttle", records=n(49097),
             ours=lambda: OnlineSVM(lam=0.01),
             river=lambda: linear_model.LogisticRegression(loss=optim.losses.Hinge()),
             many=True),
        dict(name="PARegressor(C=1, mode=1)", stream="Trump×20", records=n(20020),
             ours=lambda: PARegressor(), river=lambda: linear_model.PARegressor()),
        dict(name="OnlineRidge(alpha=1)", stream="Trump×20", records=n(20020),
             ours=lambda: OnlineRidge(), river=lambda: linear_model.LinearRegression(),
             many=True),
        dict(name="KMeans(n_clusters=8)", stream="Shuttle", records=n(49097),
             ours=lambda: KMeans(n_clusters=8), river=lambda: cluster.KMeans(n_clusters=8),
             unsupervised=True),
        dict(name="HoeffdingTree()", stream="Shuttle", records=n(10000),
             ours=lambda: HoeffdingTree(), river=lambda: tree.HoeffdingTreeClassifier()),
        dict(name="HoeffdingAdaptiveTree(seed=0)", stream="Shuttle", records=n(5000),
             ours=lambda: HoeffdingAdaptiveTree(seed=0),
             river=lambda: tree.HoeffdingAdaptiveTreeClassifier(seed=0)),
        dict(name="MLP([64], adam)", stream="Shuttle", records=n(20000),
             ours=lambda: MLP(hidden_layers=[64]), river=None),
        dict(name="CNN([1,8,8], conv8)", stream="digits×5", records=n(8985),
             ours=lambda: CNN(image_shape=[1, 8, 8]), river=None),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=1.0,
                    help="fraction of each stream's records to use (>= 1,000 records)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per cell; the best counts")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    data = streams()
    head = (f"{'learner':32s} {'stream':9s} {'records':>7s} {'omldm b=1':>10s} "
            f"{'b=32':>10s} {'b=256':>10s} {'river one':>10s} {'many 32':>10s} "
            f"{'many 256':>10s} {'ratio':>6s}")
    print("records fitted per second (best of", args.repeat, "runs), single-threaded")
    print(head)
    print("-" * len(head))
    fmt = lambda v: "—" if v is None else f"{v:,.0f}"  # noqa: E731
    for case in cases(args.scale):
        X, y = data[case["stream"]]
        X, y = X[:case["records"]], y[:case["records"]]
        ours = [rate_ours(case["ours"], X, y, b, args.repeat) for b in (1, 32, 256)]
        one = many32 = many256 = None
        if case["river"] is not None:
            one = rate_river_one(case["river"], X, y, args.repeat, case.get("unsupervised", False))
            if case.get("many"):
                many32 = rate_river_many(case["river"], X, y, 32, args.repeat)
                many256 = rate_river_many(case["river"], X, y, 256, args.repeat)
        ratio = "—" if one is None else f"{ours[2] / one:.1f}×"
        print(f"{case['name']:32s} {case['stream']:9s} {len(X):7,d} "
              + " ".join(f"{fmt(v):>10s}" for v in (*ours, one, many32, many256))
              + f" {ratio:>6s}", flush=True)


if __name__ == "__main__":
    main()
