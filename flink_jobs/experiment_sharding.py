"""``omldm experiment sharding``: does systematic data sharding make asynchronous
parameter-server training more repeatable? papers/001 (Provatas et al.) trains the same
model five times per sharding and reports the variance of the final validation metrics
across the runs: stratified sharding (§III-A, Fig. 4) gave 1.8-6.1× less variance of
the validation accuracy than random sharding, distribution-aware sharding (§III-B,
Fig. 6) up to about 2× (abstract; §IV). This experiment asks the same question of
omldm's protocols and sharders, on non-IID streams.

Everything runs on the **in-process kernel** (:class:`operators.local.LocalNetwork`: the
job's own spoke and hub kernels and the job's own sharders,
:mod:`operators.sharding`, in one Python process, one hub), never on Flink.

Streams (:data:`STREAMS`; all from installed packages, nothing downloaded). Each source
is a fixed sequence of records; its **last 20%** (:data:`HOLDOUT`) is the held-out set,
never streamed; the first 80% is the stream, reordered where the name says so:

``digits-sorted``
    scikit-learn's digits (1,797 images, 64 pixels, 10 classes) in file order; the
    1,437 streamed records sorted by label (all 0s, then all 1s, ...:
    :func:`learning.datasets.label_order`).
``phishing-sorted``
    river's Phishing (1,250 records, 9 features, 2 classes), the 1,000 streamed records
    sorted by label.
``agrawal-drift``
    4,000 records of river's ``ConceptDriftStream`` from ``Agrawal`` function 0 to
    function 6, centred at record 1,600, 400 records wide
    (:func:`learning.datasets.drift`); 3,200 streamed in generator order, so the
    held-out tail is all new concept.
``sea-drift``
    The same with ``SEA`` variant 2 (``x0 + x1 > 7``) to variant 3 (``> 9.5``), 10%
    label noise.
``rbf-bursts``
    4,000 records of river's ``RandomRBF`` (20 features, 5 classes;
    :func:`learning.datasets.synth`), the 3,200 streamed records reordered into bursts of
    :data:`BURST` records of one class, the classes in turn
    (:func:`learning.datasets.burst_order`); the held-out tail keeps generator order.

Every stream trains the PA-I pipeline of ``omldm experiment protocols``' PA datasets
(:data:`PIPELINE`: StandardScaler → PA-I, C = 0.01, mini-batches of 16, a
synchronization after each mini-batch; every streamed record is a training record).

The grid: every stream × spokes (``--spokes``, default 4 and 8) × protocol
(:data:`PROTOCOLS`: ``Asynchronous`` = TAP, ``SSP`` with staleness 2, ``Synchronous`` =
BSP) × sharding (every strategy of :data:`operators.sharding.SHARDINGS` but
``partition``, which deals by Kafka partition and the in-process stream has none) ×
``trainingConfiguration.scaling`` (:data:`SCALINGS`; papers/001 §II-C: ``batch``
divides the mini-batch by the number of spokes, eq. 3, ``learning-rate`` the learning
rate, eq. 4, ``both`` does both; ``none`` leaves the key out of the request) × repeat
(``--repeats``, default 5).

How runs differ (what papers/001's five runs vary). Repeat ``r`` runs the network with
``seed = r`` and ``shuffle=True``, and delivers messages only every ``lag`` records
(``--lag``, default :data:`LAG`): the stream goes in chunks of ``lag`` records, each
spoke's share of a chunk as one batch, then the network carries the messages they caused,
in a seeded random order. So within a chunk spokes train on while their pushes wait, and
the hub applies TAP's and SSP's pushes in a different order in every repeat: a spoke
installs a global model that others have since moved (stale updates). ``random``
sharding also draws its spokes from ``seed``; ``distribution-aware`` seeds its k-means
with it. ``round-robin`` and ``stratified`` deal the same way in every repeat. A
consequence worth knowing when reading the table: BSP's rounds wait for every spoke and
average in spoke order, so BSP with a deterministic sharding computes the same model in
every repeat (zero variance, a variance ratio of ∞); only TAP and SSP see the message
timing.

``distribution-aware`` learns its PCA and k-means on the first ``warmup`` training
records (``--warmup``; default 10% of each stream, :data:`WARMUP_SHARE`), clusters
twice the labels seen (§V), and deals ``stratified`` until then; ``--refresh N`` learns
them again every N records on the latest ``warmup`` (default 0: never). On a
label-sorted stream the warm-up prefix holds the first class only: its clusters split
that class, and later records are dealt round-robin by the nearest of them.

The held-out model. After the stream, Queries until every dealt record is counted (a
Query closes a BSP or SSP round that a spoke left open; TAP's Query only reports). The
**final global model** is then what hub 0 holds: its learner, the parameter server's
``w̃`` (``learning.protocols.sharding.ShardedHub``: the latest pushes, folded by the
pipeline's aggregation rule, PA's default ``sum``), behind hub 0's preprocessors, which
hold the *synchronized* StandardScaler statistics merged exactly from every spoke's
pushes (the same statistics a Query reports under ``model.preProcessors``). Records a
spoke fitted after its last push are not in it. That pipeline (copies; nothing learned)
predicts the held-out records.

Columns of the table (markdown on stdout: one line per (stream, spokes, protocol,
sharding, scaling); mean ± sample standard deviation over the repeats, ``ddof = 1``):

``prequential``
    Prequential (test-then-train) accuracy over the streamed records, all spokes.
``held-out``
    Accuracy of the final global model on the held-out records.
``spoke spread``
    The standard deviation across spokes (``ddof = 0``) of each spoke's own prequential
    accuracy: how differently the spokes' shares went; mean ± sd over repeats.
``loss-curve var``
    The prequential loss curve (cumulative mean hinge loss, sampled at about
    :data:`POINTS` points of the stream), its variance across repeats at each point
    (``ddof = 1``), averaged over the points.
``var ratio``
    papers/001's measure: the variance of the held-out accuracy across repeats under
    ``random`` sharding divided by that under this sharding, same stream, spokes,
    protocol and scaling (> 1: this sharding is the more repeatable; ``∞`` where this
    sharding's variance is 0 and random's is not).

A second table (:func:`claim_table`) asks whether papers/001's claim holds here: per
(sharding, protocol), over the (stream, spokes, scaling) groups, in how many the
sharding's held-out variance was below random's, at least 3× below, below by more than
chance (a one-sided F test at 5%), above, and the median ratio. Five repeats make a
variance ratio a coarse measure: two samples of five runs with the *same* true variance
give a ratio outside [1/9.6, 9.6] one time in twenty (F(4, 4)), and a held-out accuracy
moves in steps of one record (1/250 on ``phishing-sorted``); papers/001's 3-6× rest on
five runs too.

JSON rows (``--json``, one per run, written after every stream) have, besides the keys
of ``omldm experiment protocols``' rows: ``stream``, ``sharding``, ``scaling``,
``term`` (TAP/SSP/BSP), ``repeat``, ``seed``, ``lag``, ``warmup``, ``records``
(streamed), ``holdout_records``, ``holdout_accuracy``, ``holdout_loss`` (mean hinge
loss per held-out record), ``spoke_accuracy`` (per spoke), ``spoke_accuracy_sd``,
``spoke_records`` (records dealt to each spoke, broadcast copies included) and
``sharder`` (:meth:`operators.sharding.Sharder.stats`). The PNG (``--png``, default next
to the JSON) shows, per stream, the standard deviation of the held-out accuracy for
every sharding, protocol and number of spokes (pooled over the scalings as the root mean
variance), beside the mean held-out accuracy.

``--quick``: :data:`QUICK`, a few hundred records of one stream, for tests.

Measured (2026-11-24, the default grid, 2,400 runs in 588 s on two shared cores): under
TAP, stratified sharding's held-out variance was below random's in 24 of 39 groups
(median ratio 1.33; ≥ 3× in 9, significant at 5% in 5) while the loss curve's variance
fell about 38× (median over groups 2.3e-6 vs 8.8e-5): the systematic shardings make
training reproducible, the final model only slightly so. Under SSP the median ratio was
4.9 (significant in 14 of 40): random shares leave some spokes behind, so the staleness
bound binds at random moments, while with balanced shares it hardly binds (164 of 200
stratified SSP runs equal their TAP runs). Under BSP the deterministic shardings have no
variance at all. Accuracy itself hardly moves: a group's mean held-out accuracy is
within 0.004 of random's (median; at most 0.08, phishing-sorted, 8 spokes, BSP, batch).

References
----------
Provatas, N., Konstantinou, I., Koziris, N. Is Systematic Data Sharding able to Stabilize
Asynchronous Parameter Server Training? (papers/001_00243469e12aa123.txt): §II-C eq. 3-4
(scaling), §III-A Fig. 4 (stratified), §III-B Fig. 6 (distribution-aware), §IV-B (five
runs, mean and variance of the final training and validation metrics), §IV-C1, D1, E1
(with stratified shards the validation accuracy's variance was 3.03× (CIFAR-10), 6.11×
(coarse CIFAR-100) and 1.81× (fine CIFAR-100) below random sharding's; 12 asynchronous
TensorFlow workers, §IV-A).
"""

from __future__ import annotations

import copy
import json
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from flink_jobs.local_run import stream_local
from operators.sharding import SHARDINGS

if TYPE_CHECKING:
    from learning.pipeline import Pipeline

__all__ = ["STREAMS", "PROTOCOLS", "SHARDING_STRATEGIES", "SCALINGS", "PIPELINE", "HOLDOUT",
           "LAG", "WARMUP_SHARE", "QUICK", "load_stream", "create_request", "run_one",
           "run_sharding_experiment", "summarize", "markdown_table", "claim_table", "plot",
           "command"]

log = logging.getLogger(__name__)

#: the share of each source held out (its tail), never streamed
HOLDOUT = 0.2
#: records per burst of ``rbf-bursts``
BURST = 100
#: records of each river generator's source (streamed: the first 80%)
SYNTH_SOURCE = 4000
#: records between message deliveries (``--lag``)
LAG = 20
#: ``distribution-aware``'s default warm-up: this share of the stream's records
WARMUP_SHARE = 0.1
#: about how many points each loss curve gets
POINTS = 40

#: protocol → (term, extra trainingConfiguration keys)
PROTOCOLS: dict[str, tuple[str, dict]] = {
    # the papers' TAP, as the sharding tables were measured (its 20-round warm-up, the
    # default since 2026-12-07, came after; learning.protocols.asynchronous, "Warm-up")
    "Asynchronous": ("TAP", {"warmupRounds": 0}),
    "SSP": ("SSP", {"staleness": 2}),
    "Synchronous": ("BSP", {}),
}
#: the shardings the in-process stream can deal (``partition`` needs Kafka partitions)
SHARDING_STRATEGIES: tuple[str, ...] = tuple(s for s in SHARDINGS if s != "partition")
#: ``trainingConfiguration.scaling`` (papers/001 §II-C, eq. 3-4); ``none`` is left out of
#: the request
SCALINGS: tuple[str, ...] = ("none", "batch", "learning-rate", "both")
#: StandardScaler → PA-I (C = 0.01), mini-batches of 16, a synchronization after each: the
#: PA pipeline of ``omldm experiment protocols`` (``digits-pa``, ``phishing``, ...)
PIPELINE: tuple[list, dict, dict] = (
    [{"name": "StandardScaler"}],
    {"name": "PA", "hyperParameters": {"C": 0.01, "mode": 1}},
    {"miniBatchSize": 16, "miniBatches": 1})


@dataclass(frozen=True)
class Quick:
    """The ``--quick`` subset."""

    stream: str = "phishing-sorted"
    source: int = 500  # records of the source: 400 streamed, 100 held out
    spokes: tuple[int, ...] = (4,)
    protocols: tuple[str, ...] = ("Asynchronous", "Synchronous")
    shardings: tuple[str, ...] = ("random", "stratified", "distribution-aware")
    scalings: tuple[str, ...] = ("none",)
    repeats: int = 2


#: ``--quick``: one stream, 4 spokes, TAP and BSP, three shardings, two repeats
QUICK = Quick()


# -- streams --------------------------------------------------------------------------------
def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return X.astype(np.float64), y.astype(np.int64)


def _phishing() -> tuple[np.ndarray, np.ndarray]:
    from learning.datasets import phishing

    return phishing()


def _agrawal() -> tuple[np.ndarray, np.ndarray]:
    from learning.datasets import drift

    return drift("agrawal", n=SYNTH_SOURCE)


def _sea() -> tuple[np.ndarray, np.ndarray]:
    from learning.datasets import drift

    return drift("sea", n=SYNTH_SOURCE)


def _rbf() -> tuple[np.ndarray, np.ndarray]:
    from learning.datasets import synth

    return synth("rbf", n=SYNTH_SOURCE)


def _sorted(y: np.ndarray) -> np.ndarray:
    from learning.datasets import label_order

    return label_order(y)


def _bursts(y: np.ndarray) -> np.ndarray:
    from learning.datasets import burst_order

    return burst_order(y, BURST)


def _as_is(y: np.ndarray) -> np.ndarray:
    return np.arange(len(y))


#: stream → (source loader, reordering of the streamed part: labels → permutation)
STREAMS: dict[str, tuple[Callable[[], tuple[np.ndarray, np.ndarray]],
                         Callable[[np.ndarray], np.ndarray]]] = {
    "digits-sorted": (_digits, _sorted),
    "phishing-sorted": (_phishing, _sorted),
    "agrawal-drift": (_agrawal, _as_is),
    "sea-drift": (_sea, _as_is),
    "rbf-bursts": (_rbf, _bursts),
}


def load_stream(name: str, source: int | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A stream and its held-out set (see the module docstring).

    Parameters
    ----------
    name : a key of :data:`STREAMS`
    source : int or None
        Use only the first ``source`` records of the source (before the split).

    Returns
    -------
    X : (n_stream, n_features) float64
        The streamed records, in stream order (the first 80% of the source, reordered).
    y : (n_stream,) int64
    X_holdout : (n_holdout, n_features) float64
        The source's last 20% (``ceil``), in source order.
    y_holdout : (n_holdout,) int64

    Raises
    ------
    ValueError
        For an unknown name or fewer than 10 records.
    """
    if name not in STREAMS:
        raise ValueError(f"unknown stream {name!r}; known: {', '.join(STREAMS)}")
    load, reorder = STREAMS[name]
    X, y = load()
    if source is not None:
        X, y = X[:source], y[:source]
    if len(X) < 10:
        raise ValueError(f"stream {name!r} needs at least 10 records, got {len(X)}")
    cut = len(X) - int(np.ceil(HOLDOUT * len(X)))
    order = reorder(y[:cut])
    return X[:cut][order], y[:cut][order], X[cut:], y[cut:]


# -- one run --------------------------------------------------------------------------------
def create_request(protocol: str, scaling: str = "none", pipeline: int = 0) -> dict:
    """The Create request of one run: :data:`PIPELINE` under ``protocol`` (with its
    :data:`PROTOCOLS` keys) and ``trainingConfiguration.scaling`` unless ``none``."""
    pre, learner, base = copy.deepcopy(PIPELINE)
    config = {"protocol": protocol, "hubParallelism": 1, **base, **PROTOCOLS[protocol][1]}
    if scaling != "none":
        config["scaling"] = scaling
    return {"id": pipeline, "request": "Create", "requestId": f"sharding-{pipeline}",
            "preProcessors": pre, "learner": learner, "trainingConfiguration": config}


def global_model(net) -> Pipeline:
    """The final global model of a network's pipeline, as a pipeline that predicts: copies
    of hub 0's preprocessors (the synchronized statistics) and of its learner (``w̃``).
    One hub: hub 0 holds the whole vector."""
    from learning.pipeline import Pipeline

    hub = net.hubs[0]
    return Pipeline(copy.deepcopy(hub.preprocessors), copy.deepcopy(hub.learner))


def run_one(stream: str, data: tuple, protocol: str, sharding: str, scaling: str, *,
            spokes: int, repeat: int, lag: int = LAG, warmup: int | None = None,
            refresh: int = 0) -> dict:
    """One run: the Create request, the stream dealt by ``sharding`` with ``seed =
    repeat``, shuffled message delivery every ``lag`` records, the final Queries, then the
    held-out accuracy of the final global model (:func:`global_model`).

    Parameters
    ----------
    stream : name of the stream (a key of :data:`STREAMS`; only written in the row)
    data : ``(X, y, X_holdout, y_holdout)`` of :func:`load_stream`
    protocol, sharding, scaling : str
        A key of :data:`PROTOCOLS`, one of :data:`SHARDING_STRATEGIES`, one of
        :data:`SCALINGS`.
    spokes, repeat, lag : int
    warmup : int or None
        ``distribution-aware``'s warm-up (training records); None: 10% of the stream.
    refresh : int
        ``distribution-aware`` learns its clusters again every ``refresh`` records (0:
        never).

    Returns
    -------
    dict
        One JSON row (the keys of the module docstring).

    Raises
    ------
    ValueError
        When the Create is refused (e.g. a ``scaling`` the request schema does not know).
    """
    X, y, Xh, yh = data
    if warmup is None:
        warmup = max(2, round(WARMUP_SHARE * len(X)))
    options = {"warmup": warmup, "refresh": refresh} if sharding == "distribution-aware" \
        else None
    request = create_request(protocol, scaling)
    run = stream_local(request, X, y, spokes=spokes, every=0, points=POINTS, seed=repeat,
                       sharding=sharding, sharding_options=options, lag=lag, shuffle=True)
    final, net = run.final, run.net
    model = global_model(net)
    spoke_acc = [sp.correct / sp.fitted if sp.fitted else None for sp in net.spokes]
    known = [a for a in spoke_acc if a is not None]
    proto = final["protocol"]
    return {
        "stream": stream, "dataset": stream, "spokes": spokes, "protocol": protocol,
        "term": PROTOCOLS[protocol][0], "variant": None, "sharding": sharding,
        "scaling": scaling, "repeat": repeat, "seed": repeat, "lag": lag,
        "warmup": warmup if sharding == "distribution-aware" else None,
        "kernel": "local", "aggregation": proto.get("aggregation"),
        "records": len(X), "holdout_records": len(Xh),
        "prequential_accuracy": final["prequentialAccuracy"], "mean_loss": final["meanLoss"],
        "holdout_accuracy": float(model.score(Xh, yh)),
        "holdout_loss": float(model.loss(Xh, yh)) / len(Xh),
        "spoke_accuracy": spoke_acc,
        "spoke_accuracy_sd": float(np.std(known)) if known else None,
        "spoke_records": list(net.sharder.per_spoke),
        "sharder": net.sharder.stats(),
        "fitted": final["fitted"], "fitted_per_spoke": final["fittedPerSpoke"],
        "bytes_to_hubs": int(proto["syncBytesToHubs"]),
        "bytes_to_spokes": int(proto["syncBytesToSpokes"]),
        "rounds": int(proto.get("rounds", proto.get("updates", 0))),
        "queries": run.queries, "seconds": run.seconds,
        "records_per_second": final["fitted"] / run.seconds if run.seconds > 0 else None,
        "loss_curve": run.curve,
    }


# -- summary --------------------------------------------------------------------------------
GROUP = ("stream", "spokes", "protocol", "sharding", "scaling")


def _sd(values: list[float]) -> float:
    """Sample standard deviation (``ddof = 1``); exactly 0 for equal values (numpy's mean
    of equal floats may differ from them in the last bit, leaving a variance of ~1e-33)."""
    if len(values) < 2 or min(values) == max(values):
        return 0.0
    return float(np.std(values, ddof=1))


def _curve_variance(curves: list[list]) -> float | None:
    """Mean over curve points of the variance across repeats (``ddof = 1``) of the loss
    (exactly 0 at points where every repeat has the same value)."""
    n = min((len(c) for c in curves), default=0)
    if len(curves) < 2 or n == 0:
        return None
    losses = np.asarray([[point[1] for point in c[:n]] for c in curves], dtype=np.float64)
    var = np.where(np.ptp(losses, axis=0) > 0, np.var(losses, axis=0, ddof=1), 0.0)
    return float(var.mean())


def summarize(rows: list[dict]) -> list[dict]:
    """One row per (stream, spokes, protocol, sharding, scaling), in first-seen order:
    ``runs``; mean and sd (``ddof = 1``) over repeats of ``prequential_accuracy``,
    ``holdout_accuracy``, ``spoke_accuracy_sd``; ``holdout_variance`` (the sd squared);
    ``curve_variance``; ``variance_ratio``: random's ``holdout_variance`` over this one's
    (same stream, spokes, protocol, scaling; ``inf`` when only this one is 0, None when
    both are 0 or random is missing)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in GROUP), []).append(r)
    out = []
    for key, rs in groups.items():
        s = dict(zip(GROUP, key))
        s["term"] = rs[0].get("term")
        s["runs"] = len(rs)
        for name in ("prequential_accuracy", "holdout_accuracy", "spoke_accuracy_sd"):
            vals = [r[name] for r in rs if r[name] is not None]
            s[name] = float(np.mean(vals)) if vals else None
            s[name + "_std"] = _sd(vals)
        s["holdout_variance"] = s["holdout_accuracy_std"] ** 2
        s["curve_variance"] = _curve_variance([r["loss_curve"] for r in rs])
        out.append(s)
    random = {tuple(s[k] for k in GROUP if k != "sharding"): s for s in out
              if s["sharding"] == "random"}
    for s in out:
        base = random.get(tuple(s[k] for k in GROUP if k != "sharding"))
        s["variance_ratio"] = None if base is None or base["runs"] < 2 else _ratio(
            base["holdout_variance"], s["holdout_variance"])
    return out


def _ratio(a: float, b: float) -> float | None:
    if b > 0:
        return a / b
    return float("inf") if a > 0 else None


def _pm(mean: float | None, sd: float, runs: int) -> str:
    if mean is None:
        return "–"
    return f"{mean:.4f}" + (f" ± {sd:.4f}" if runs > 1 else "")


def _ratio_text(r: float | None) -> str:
    if r is None:
        return "–"
    return "∞" if r == float("inf") else f"{r:.2f}"


def markdown_table(rows: list[dict]) -> str:
    """The table (GitHub markdown) of :func:`summarize`'s rows; see the module docstring
    for the columns."""
    lines = ["| stream | spokes | protocol | sharding | scaling | prequential | held-out "
             "| spoke spread | loss-curve var | var ratio (random / this) | runs |",
             "| --- | ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for s in summarize(rows):
        cv = s["curve_variance"]
        cv = "–" if cv is None else "0" if cv == 0 else f"{cv:.2e}"
        lines.append(
            f"| {s['stream']} | {s['spokes']} | {s['protocol']} ({s['term']}) | "
            f"{s['sharding']} | {s['scaling']} | "
            f"{_pm(s['prequential_accuracy'], s['prequential_accuracy_std'], s['runs'])} | "
            f"{_pm(s['holdout_accuracy'], s['holdout_accuracy_std'], s['runs'])} | "
            f"{_pm(s['spoke_accuracy_sd'], s['spoke_accuracy_sd_std'], s['runs'])} | {cv} | "
            f"{_ratio_text(s['variance_ratio'])} | {s['runs']} |")
    return "\n".join(lines)


def _f_critical(runs: int, level: float = 0.95) -> float:
    """The one-sided F test's critical ratio of two sample variances of ``runs`` runs
    each: with equal true variances, random's / this one's exceeds it with probability
    ``1 - level`` (F(4, 4): 6.39 for five runs)."""
    from scipy.stats import f

    return float(f.ppf(level, runs - 1, runs - 1))


def claim_table(rows: list[dict]) -> str:
    """Per (sharding, protocol), over every (stream, spokes, scaling) group with a random
    baseline: groups, how many have a held-out variance below random's (ratio > 1), how
    many at least 3× below (papers/001's 3-6×), how many below by more than chance
    (a one-sided F test at 5%: ratio ≥ F(0.95; r-1, r-1), 6.39 for five repeats), how
    many above (ratio < 1), and the median ratio (GitHub markdown). Groups where both
    variances are 0 are counted apart."""
    summary = [s for s in summarize(rows) if s["sharding"] != "random"]
    lines = ["| sharding | protocol | groups | below random | ≥ 3× below | F test 5% "
             "| above random | median ratio |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    keys = list(dict.fromkeys((s["sharding"], s["protocol"]) for s in summary))
    for sharding, protocol in keys:
        mine = [s for s in summary if (s["sharding"], s["protocol"]) == (sharding, protocol)
                and s["runs"] > 1]
        known = [s for s in mine if s["variance_ratio"] is not None]
        ratios = [s["variance_ratio"] for s in known]
        both_zero = len(mine) - len(known)
        median = _ratio_text(float(np.median(ratios))) if ratios else "–"
        significant = sum(s["variance_ratio"] >= _f_critical(s["runs"]) for s in known)
        lines.append(f"| {sharding} | {protocol} ({PROTOCOLS.get(protocol, ('?',))[0]}) | "
                     f"{len(known)}" + (f" (+{both_zero} both 0)" if both_zero else "") +
                     f" | {sum(r > 1 for r in ratios)} | {sum(r >= 3 for r in ratios)} | "
                     f"{significant} | {sum(r < 1 for r in ratios)} | {median} |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> Path:
    """Per stream: the standard deviation over repeats of the held-out accuracy (pooled
    over the scalings as the root mean variance) per sharding, for every (protocol,
    spokes); beside it the mean held-out accuracy with that sd as error bars.

    Raises
    ------
    ImportError
        When matplotlib is not installed.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = summarize(rows)
    streams = list(dict.fromkeys(s["stream"] for s in summary))
    shardings = [x for x in SHARDING_STRATEGIES if any(s["sharding"] == x for s in summary)]
    fig, axes = plt.subplots(len(streams), 2, figsize=(14, 4 * len(streams)), squeeze=False)
    for (ax_sd, ax_acc), stream in zip(axes, streams):
        mine = [s for s in summary if s["stream"] == stream]
        cells = list(dict.fromkeys((s["protocol"], s["spokes"]) for s in mine))
        x = np.arange(len(cells))
        width = 0.8 / max(1, len(shardings))
        low, high = 1.0, 0.0
        for i, sharding in enumerate(shardings):
            sds, means = [], []
            for protocol, k in cells:
                g = [s for s in mine if (s["protocol"], s["spokes"], s["sharding"])
                     == (protocol, k, sharding)]
                sds.append(float(np.sqrt(np.mean([s["holdout_variance"] for s in g])))
                           if g else 0.0)
                means.append(float(np.mean([s["holdout_accuracy"] for s in g])) if g else 0.0)
            low = min([low] + [m - d for m, d in zip(means, sds)])
            high = max([high] + [m + d for m, d in zip(means, sds)])
            offset = (i - (len(shardings) - 1) / 2) * width
            ax_sd.bar(x + offset, sds, width, label=sharding)
            ax_acc.bar(x + offset, means, width, yerr=sds, capsize=2, label=sharding)
        names = [f"{PROTOCOLS.get(p, (p,))[0]} k={k}" for p, k in cells]
        ax_sd.set_xticks(x, names, fontsize=8)
        ax_sd.set(title=f"{stream}: sd of held-out accuracy over repeats",
                  ylabel="standard deviation")
        ax_sd.legend(fontsize=7)
        ax_acc.set_xticks(x, names, fontsize=8)
        ax_acc.set(title=f"{stream}: held-out accuracy of the final global model",
                   ylabel="accuracy", ylim=(max(0.0, low - 0.02), min(1.0, high + 0.02)))
        ax_acc.legend(fontsize=7, loc="lower right")
    fig.suptitle("omldm experiment sharding (in-process kernel)", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


# -- the experiment -------------------------------------------------------------------------
def _check_scalings(scalings: tuple[str, ...]) -> None:
    """Fail fast when the request schema refuses a ``scaling`` (before any run)."""
    from operators.local import LocalNetwork

    for scaling in scalings:
        if scaling == "none":
            continue
        net = LocalNetwork(n_spokes=1, n_hubs=1)
        net.request(create_request("Asynchronous", scaling))
        answer = net.outputs["responses"][-1]
        if answer.get("status") != "ok":
            raise ValueError(f"trainingConfiguration.scaling {scaling!r} is refused by this "
                             f"build: {answer.get('error')} (run with --scaling none)")


def _choose(name: str, given: tuple | None, allowed: tuple, default: tuple) -> tuple:
    if given is None:
        return default
    bad = [g for g in given if g not in allowed]
    if bad or not given:
        raise ValueError(f"{name} must be one or more of {', '.join(map(str, allowed))}; "
                         f"got {', '.join(map(str, bad or given))}")
    return tuple(dict.fromkeys(given))


def run_sharding_experiment(json_path: str | Path, *, streams: tuple[str, ...] | None = None,
                            spokes: tuple[int, ...] | None = None,
                            protocols: tuple[str, ...] | None = None,
                            shardings: tuple[str, ...] | None = None,
                            scalings: tuple[str, ...] | None = None, repeats: int | None = None,
                            lag: int = LAG, warmup: int | None = None, refresh: int = 0,
                            source: int | None = None, quick: bool = False,
                            png_path: str | Path | None = None, out=None) -> list[dict]:
    """Run the grid; write the JSON rows (after every stream) and the PNG, print a progress
    line per group and then both tables; returns the rows.

    Parameters
    ----------
    json_path : path
    streams, spokes, protocols, shardings, scalings : tuples or None
        Subsets of :data:`STREAMS`, spokes >= 1, :data:`PROTOCOLS`,
        :data:`SHARDING_STRATEGIES`, :data:`SCALINGS`; None: all (spokes: 4 and 8), or
        :data:`QUICK`'s with ``quick``.
    repeats : int or None
        Runs per group, seeds 0 .. repeats - 1 (None: 5, or 2 with ``quick``).
    lag : int
        Records between message deliveries.
    warmup : int or None
        ``distribution-aware``'s warm-up records (None: 10% of each stream).
    refresh : int
        ``distribution-aware`` relearns its clusters every ``refresh`` records (0: never).
    source : int or None
        Only the first ``source`` records of each source (``quick``: :data:`QUICK`'s).
    quick : bool
        :data:`QUICK` for whatever is not given.
    png_path : path or None
        Default: ``json_path`` with ``.png``; skipped with a warning without matplotlib.
    out : text stream or None
        Default: standard output.

    Raises
    ------
    ValueError
        For an unknown stream, protocol, sharding (``partition`` included: the in-process
        stream has no Kafka partitions) or scaling, spokes or repeats below 1 or 2, ``lag``
        below 1, a ``warmup`` not below a stream's length, or a ``scaling`` the request
        schema refuses.
    """
    out = out or sys.stdout
    q = QUICK if quick else None
    streams = _choose("stream", streams, tuple(STREAMS), (q.stream,) if q else tuple(STREAMS))
    protocols = _choose("protocol", protocols, tuple(PROTOCOLS),
                        q.protocols if q else tuple(PROTOCOLS))
    if shardings is not None and "partition" in shardings:
        raise ValueError("sharding 'partition' deals by Kafka partition; the in-process "
                         "stream has no partitions")
    shardings = _choose("sharding", shardings, SHARDING_STRATEGIES,
                        q.shardings if q else SHARDING_STRATEGIES)
    scalings = _choose("scaling", scalings, SCALINGS, q.scalings if q else SCALINGS)
    spokes = tuple(spokes) if spokes else (q.spokes if q else (4, 8))
    repeats = repeats if repeats is not None else (q.repeats if q else 5)
    source = source if source is not None else (q.source if q else None)
    if any(k < 1 for k in spokes):
        raise ValueError(f"spokes must be >= 1, got {spokes}")
    if repeats < 2:
        raise ValueError(f"repeats must be >= 2 (a variance needs two runs), got {repeats}")
    if lag < 1:
        raise ValueError(f"lag must be >= 1, got {lag}")
    _check_scalings(scalings)
    json_path = Path(json_path)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    t0 = time.perf_counter()
    for stream in streams:
        data = load_stream(stream, source)
        if warmup is not None and warmup >= len(data[0]) and "distribution-aware" in shardings:
            raise ValueError(f"warmup {warmup} is not below the {len(data[0])} records of "
                             f"stream {stream!r}: distribution-aware would never be ready")
        for k in spokes:
            for protocol in protocols:
                for scaling in scalings:
                    for sharding in shardings:
                        t = time.perf_counter()
                        group = [run_one(stream, data, protocol, sharding, scaling, spokes=k,
                                         repeat=r, lag=lag, warmup=warmup, refresh=refresh)
                                 for r in range(repeats)]
                        rows.extend(group)
                        acc = [g["holdout_accuracy"] for g in group]
                        print(f"  {stream:15s} k={k} {PROTOCOLS[protocol][0]:3s} "
                              f"{sharding:18s} {scaling:13s} held-out {np.mean(acc):.4f} "
                              f"± {_sd(acc):.4f} ({time.perf_counter() - t:.1f} s)",
                              file=out, flush=True)
        json_path.write_text(json.dumps(rows, indent=1))
    json_path.write_text(json.dumps(rows, indent=1))
    print(f"{len(rows)} runs in {time.perf_counter() - t0:.0f} s (in-process kernel)",
          file=out, flush=True)
    print(markdown_table(rows), file=out, flush=True)
    print(file=out)
    print(claim_table(rows), file=out, flush=True)
    png = Path(png_path) if png_path else json_path.with_suffix(".png")
    try:
        plot(rows, png)
        print(f"plot: {png}", file=out, flush=True)
    except ImportError:
        log.warning("matplotlib is not installed: no plot")
    return rows


def command(args: Any) -> int:
    """``omldm experiment sharding`` (the arguments of :func:`flink_jobs.experiment.add_parser`).

    Raises
    ------
    ValueError
        As :func:`run_sharding_experiment`, and for options of the protocols experiment
        (``--kernel flink``, ``--aggregation``).
    """
    if args.kernel not in (None, "local"):
        raise ValueError("experiment sharding runs on the in-process kernel only (--kernel local)")
    if args.aggregation is not None:
        raise ValueError("--aggregation belongs to experiment protocols")
    run_sharding_experiment(
        args.json, streams=tuple(args.dataset) if args.dataset else None,
        spokes=tuple(args.spokes) if args.spokes else None,
        protocols=tuple(args.protocol) if args.protocol else None,
        shardings=tuple(args.sharding) if args.sharding else None,
        scalings=tuple(args.scaling) if args.scaling else None, repeats=args.repeats,
        lag=args.lag if args.lag is not None else LAG, warmup=args.warmup,
        refresh=args.refresh or 0, source=args.limit, quick=args.quick, png_path=args.png)
    return 0
