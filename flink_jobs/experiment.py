"""``omldm experiment protocols`` (alias ``quality``): every synchronization protocol on
the same stream, measured against a centralized learner.

Datasets (:data:`DATASETS`): river's Shuttle (49,097 records, StandardScaler → PA-I);
scikit-learn's digits (1,797 images streamed :data:`DIGITS_PASSES` times) with the MLP
(``digits``) and with PA-I (``digits-pa``); river's Phishing (1,250 records, PA-I); and
50,000 records of river's seeded generators Waveform, RandomRBF, LED and the drifting
rotating Hyperplane (PA-I; :func:`learning.datasets.synth`). For each, every protocol of
:mod:`learning.protocols` trains one pipeline with ``k`` spokes (``--spokes``, repeatable
for a sweep; default 4) and one hub on the same stream in file order (every 5th record
goes to ``forecasting`` without its label, as in the demo), on the Flink MiniCluster
through the local broker (``--kernel flink``, the default) or on the in-process kernel
(``--kernel local``: same protocols, same messages, no Flink; fast, for tuning). Each
record goes to a spoke drawn at random, on both kernels. Each run is its own job, one
after the other; ``--repeats N`` runs each protocol N times (the accuracy of one digits
run varies by about ±0.004 with the spoke shares alone).

The references of every dataset: ``Centralized``, one learner (one spoke, protocol
``Independent``) fed the whole stream in the same order, with the same Create request
otherwise (pipeline, mini-batch size, forecasting split), and ``Independent``, ``k``
learners that never synchronize. One spoke's prequential accuracy does not depend on
spoke shares or message timing, so ``Centralized`` runs once per dataset (not per repeat
or per ``k``) and always on the in-process kernel, also under ``--kernel flink``: its row
says ``"kernel": "local"``. ``--aggregation {average,sum,diversity}`` sets
``trainingConfiguration.aggregation`` in every run but ``Centralized`` and
``Independent``; ``--scaling {none,batch,learning-rate,both}`` sets
``trainingConfiguration.scaling`` (papers/001 §II-C) in every run but ``Centralized``,
whose one spoke it would not change; ``--quick`` runs a small subset (:data:`QUICK_RUNS`
on the first :data:`QUICK_LIMIT` records of each dataset).

The result is a table (markdown on stdout, one line per (dataset, protocol, variant,
spokes) with the means over the repeats: accuracy ± its sample standard deviation, Δ vs
the centralized learner and vs BSP, bytes and bytes relative to BSP; JSON rows at
``--json``, one per run, with its ``repeat``) with, per run:
``dataset``, ``protocol``, ``variant``, ``spokes``, ``aggregation`` (the
``trainingConfiguration.aggregation`` of the run, or null), ``scaling`` (its
``trainingConfiguration.scaling``, or null: ``none``), ``diversity_scale`` (under
``diversity``: hub 0's mean β of its rounds, else null), ``prequential_accuracy``,
``mean_loss``, ``bytes_to_hubs`` / ``bytes_to_spokes`` (synchronization traffic:
everything the middleware sent between spokes and hubs except the one-way statistics
reports that answer Queries; for TensAIR, whose spokes exchange updates directly, every
spoke→spoke byte counts as ``bytes_to_spokes``), ``rounds`` (synchronizations performed by
hub 0: averaging rounds for BSP, FDA and EVENFLOW, applied pushes for SSP and TAP,
exchanges for EASGD/Adaptive; TensAIR: the replicas' updates, one per mini-batch), ``records_per_second`` (training plus forecasting records over the time
from the first record written to the last one counted), ``update_staleness`` and
``records_per_push`` (SSP and TAP, hub 0's: p50/p95/max of the updates a push had not
seen, p50/p95 of the records it carried; null for the others), ``round_trip_ms`` (TAP:
each spoke's push → global round trip, p50 and p95, milliseconds), and a PNG (``--png``, default
next to the JSON) with the prequential loss over records and the bytes per protocol.

On Flink the producer keeps pace with the job, as a live source would (:data:`PACE`): it
writes at most about ``lag`` records ahead of what the pipeline has handled, as read from
the predictions topic (a Query would be a synchronization point for BSP and SSP), and
waits at most :data:`PATIENCE_S` for it before writing on. Written
all at once, the stream is a backlog the job reads at full speed, and a dynamic protocol's
check (spoke → hub → Kafka → spoke, a second or so under that load in process mode) arrives
only after thousands of records: FDA and EVENFLOW then end 1–3 rounds on digits and their
accuracy falls to that of independent learners, while BSP, which pauses the stream for
every round, is unaffected. ``records_per_second`` is then the paced rate.

``omldm experiment regression`` (:func:`run_regression`) is EVENFLOW's regression setting
(papers/003 §IV: an MLP trained with MSE, test MSE reported): the ``MLPRegressor`` of
:data:`REGRESSION_LEARNER` on river's Friedman #1 (20,000 seeded records, ``--limit``; the
last 20% held out), Centralized and :data:`REGRESSION_RUNS` (Synchronous, Asynchronous,
EVENFLOW basic and fast with l2, basic with kl) on ``--spokes`` spokes (default 4) of the
in-process kernel; a table of held-out test MSE and MAE, prequential MAE, bytes and rounds.

BSP and SSP treat a Query as a synchronization point (:mod:`learning.protocols.synchronous`),
so the progress Queries of a Flink run (one every :data:`PROGRESS_EVERY_S` seconds) add a
few rounds to theirs; ``queries`` in each row says how many there were.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import logging
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import numpy as np

__all__ = ["add_parser", "run_experiment", "SETTINGS", "DATASETS", "create_request",
           "run_local", "run_centralized", "run_flink", "summarize", "markdown_table", "plot",
           "load", "CENTRALIZED", "QUICK_RUNS", "QUICK_LIMIT", "run_regression",
           "run_regression_one", "load_friedman", "regression_table", "REGRESSION_RUNS",
           "REGRESSION_LEARNER", "rate_limited"]

log = logging.getLogger(__name__)

#: ``trainingConfiguration.aggregation``'s rules (learning.protocols.sharding.AGGREGATIONS,
#: spelled out so that the CLI starts without importing the learning package;
#: tests/test_aggregation.py checks that the two agree)
AGGREGATIONS = ("average", "sum", "diversity", "momentum")

#: the protocol name of every dataset's reference row: one spoke, protocol Independent
CENTRALIZED = "Centralized"
#: ``--quick``: only these (protocol, variant) runs, on the first QUICK_LIMIT records
QUICK_RUNS: tuple[tuple[str, str | None], ...] = (
    (CENTRALIZED, None), ("Independent", None), ("Synchronous", None), ("FDA", "naive"))
QUICK_LIMIT = 4000
#: records of each of river's generators in the experiment (:func:`learning.datasets.synth`)
SYNTH_RECORDS = 50_000


def _pa(mini_batch_size: int, mini_batches: int) -> tuple[list, dict, dict]:
    """StandardScaler → PA-I (C = 0.01), with its own dicts."""
    return ([{"name": "StandardScaler"}],
            {"name": "PA", "hyperParameters": {"C": 0.01, "mode": 1}},
            {"miniBatchSize": mini_batch_size, "miniBatches": mini_batches})


#: dataset → (preprocessors, learner, training configuration shared by every protocol)
DATASETS: dict[str, tuple[list, dict, dict]] = {
    "shuttle": _pa(32, 4),
    # the MLP at Adam 0.03, where averaging is the better rule (the networks' default,
    # sum, is for their default step 0.005: learning.protocols.sharding.DEFAULT_AGGREGATION)
    "digits": ([{"name": "StandardScaler"}],
               {"name": "MLP", "hyperParameters": {"hidden_layers": [32], "optimizer": "adam",
                                                   "learning_rate": 0.03, "seed": 0}},
               {"miniBatchSize": 16, "miniBatches": 1, "aggregation": "average"}),
    "digits-pa": _pa(16, 1),
    "phishing": _pa(16, 1),
    "waveform": _pa(16, 1),
    "rbf": _pa(16, 1),
    "led": _pa(16, 1),
    "hyperplane": _pa(16, 1),
}

#: dataset → (lag, chunk): on Flink the producer writes ``chunk`` records at a time and
#: waits until the pipeline has handled all but ``lag`` of those written
#: (:meth:`flink_jobs.session.Session.keep_pace`)
PACE = {**{ds: (2000, 500) for ds in DATASETS}, "digits": (100, 50)}
#: seconds the producer waits at most for the job to catch up, then writes on as a live
#: source would (without it a BSP round and the pacing can wait on each other for good)
PATIENCE_S = 1.0
#: seconds between the progress Queries of a Flink run (points of the loss curve)
PROGRESS_EVERY_S = 3.0
#: ``--rate``: seconds of stream between the producer's writes (a write is the records of
#: that much time, so that the stream is smooth, not bursts of a whole chunk)
RATE_TICK_S = 0.01


def rate_limited(rate: int | None, pace: Callable[[int], None], chunk: int,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> tuple[Callable[[int], None], int]:
    """The producer's ``between`` callback and the records per write of a Flink run.

    Without ``rate`` (None): ``pace`` after every ``chunk`` records, as fast as the job
    keeps up (``(pace, chunk)``). With ``rate`` (records/s, the stream's rate): writes of
    ``max(1, rate × RATE_TICK_S)`` records, each held until its time at that rate (counted
    from the first call), and ``pace`` still after every ``chunk`` records, so the producer
    never runs more than the pace's lag ahead of the job either: the stream goes at
    ``rate`` where the job keeps up, and at the job's speed where it does not.

    Raises
    ------
    ValueError
        When ``rate`` is not None and below 1.
    """
    if rate is None:
        return pace, chunk
    if rate < 1:
        raise ValueError(f"rate must be >= 1 records/s, got {rate}")
    start: list[float] = []
    paced = [0]

    def between(sent: int) -> None:
        if not start:
            start.append(clock())
        ahead = start[0] + sent / rate - clock()
        if ahead > 0:
            sleep(ahead)
        if sent - paced[0] >= chunk:
            paced[0] = sent
            pace(sent)
    return between, max(1, int(rate * RATE_TICK_S))

#: passes over scikit-learn's digits (1,797 images) in the experiment's stream: BSP's
#: bytes grow with the stream while the dynamic protocols' rounds thin out once the model
#: settles (papers/002 §5.2.1: FDA "catches up" after its first rounds)
DIGITS_PASSES = 6

#: dataset → PyFlink execution mode: PyTorch cannot run in thread mode's embedded
#: interpreter, so the MLP runs in process mode
EXECUTION_MODE = {ds: "process" if learner["name"] == "MLP" else "thread"
                  for ds, (_, learner, _) in DATASETS.items()}


#: the decentralized runs beside the parameter server's (papers/000 Algorithm 1): TensAIR
#: with ``maxGradBuffer`` 1 and 4, and 4 with staleness bounded at 8 updates (§III-C; on
#: Flink the updates come back through Kafka late: RandomRBF, buffer 4, 0.784-0.791
#: unbounded, 0.791-0.793 bounded over five runs, centralized 0.8012); the variant names
#: the row only (TensAIR has none)
TENSAIR = "TensAIR"
TENSAIR_RUNS: list[tuple[str, str | None, dict]] = [
    (TENSAIR, "buffer 1", {"maxGradBuffer": 1}),
    (TENSAIR, "buffer 4", {"maxGradBuffer": 4}),
    (TENSAIR, "buffer 4, staleness ≤ 8", {"maxGradBuffer": 4, "maxStaleness": 8}),
]


def _pa_runs(naive: float, linear: float, sketch: float, basic: float,
             fast: float, staleness: int = 2, averaged: tuple[str, ...] = (),
             diverse: tuple[str, ...] = (),
             momentum: tuple[str, ...] = ()) -> list[tuple[str, str | None, dict]]:
    """The thirteen runs of a PA-I dataset, with the thresholds of FDA (naive, linear,
    sketch) and EVENFLOW (basic, fast), SSP's ``staleness`` (rounds) and TensAIR's runs
    (:data:`TENSAIR_RUNS`); the FDA and EVENFLOW variants named in ``averaged``, and TAP
    where it names ``"Asynchronous"``, run under the ``average`` rule instead of PA's
    default ``sum``, those named in ``diverse`` under ``diversity``, those named in
    ``momentum`` under ``momentum``, and the other FDA and EVENFLOW variants under ``sum``,
    as they were tuned (their default is ``diversity`` since 2026-12-06:
    :data:`learning.protocols.sharding.SAFE_ZONE_AGGREGATION`)."""
    def rule(name: str) -> dict:
        if name in momentum:
            return {"aggregation": "momentum"}
        if name in diverse:
            return {"aggregation": "diversity"}
        if name in averaged:
            return {"aggregation": "average"}
        return {} if name == "Asynchronous" else {"aggregation": "sum"}

    return [
        ("Independent", None, {}),
        ("Asynchronous", None, rule("Asynchronous")),
        ("Synchronous", None, {}),
        ("SSP", None, {"staleness": staleness}),
        ("EASGD", None, {"alpha": 0.25}),
        ("Adaptive", None, {"alpha": 0.25, "lossThreshold": 20.0}),
        ("FDA", "naive", {"threshold": naive, **rule("naive")}),
        ("FDA", "linear", {"threshold": linear, **rule("linear")}),
        ("FDA", "sketch", {"threshold": sketch, "precision": 0.25, **rule("sketch")}),
        ("EVENFLOW", "basic", {"threshold": basic, "monitoredFunction": "l2", **rule("basic")}),
        ("EVENFLOW", "fast", {"threshold": fast, "monitoredFunction": "l2", "coefficients": 8,
                              **rule("fast")}),
        *TENSAIR_RUNS,
    ]


#: dataset → runs: (protocol, variant or None, extra trainingConfiguration keys).
#:
#: Thresholds of the PA-I datasets (naive, linear, sketch, basic, fast), under PA's
#: default ``sum`` rule, each stream tuned on itself: from the grid 0.005, 0.01, 0.02, 0.04
#: the largest whose prequential accuracy stayed within 0.005 of the centralized learner
#: (digits with PA: 0.015, its target being 0.02) on the in-process kernel with 4 spokes,
#: the spoke shares of seed 0 and messages delivered only every 500 records
#: (:func:`run_local`'s ``lag``, which reproduces the Flink loop's latency: a check in
#: flight lets spokes train on, rounds end late and overshoot). Where none did, the
#: smallest (digits-PA sketch and fast). Phishing (1,250 records) keeps the thresholds of
#: the earlier tuning without ``lag`` (within 0.008): on so short a stream one record more
#: or less in a round moves its accuracy by more than the bar. Under ``sum`` a long round
#: overshoots (every spoke's delta corrects the same errors, and the deltas are added), so
#: the thresholds that keep accuracy are small: e.g. RandomRBF, FDA naive at 0.04 (lag
#: 500) ends 125 rounds at 1/4.3 of BSP's bytes and falls 0.013 behind, at 0.02 207 rounds
#: at 1/2.6 and 0.004. The grid and the picks: ``benchmarks/tune_thresholds.py``. The
#: tuning before this one (every message delivered at once, within 0.008) left Waveform's
#: FDA naive and sketch and both EVENFLOW variants 0.011-0.015 behind on Flink.
#:
#: Waveform and Hyperplane were tuned again under the ``average`` rule (``--aggregation
#: average --grid 0.16,0.08,0.04,0.02``), where long rounds do not overshoot: same bar,
#: the grid's largest step taken as 0.08 (at 0.16 FDA sketch ends no round). Averaging
#: wins there: Waveform at 0.08 within 0.0012 of centralized at 1/10.6-1/40 of BSP's bytes
#: (summing: 0.005-0.01), Hyperplane at 0.02 within 0.0044 at 1/5.8-1/7.2 (summing:
#: 0.005-0.01; its sketch fell 0.0061 behind averaged and stays summing). Not elsewhere:
#: on LED averaged runs landed where independent learners do (0.0043-0.0079 behind
#: centralized, independent 0.0068), Shuttle's every run is within 0.0006 whatever the
#: rule, and on RandomRBF averaging falls 0.017-0.029 behind at every threshold from
#: 0.005 to 0.04 (digits-PA: 0.02-0.034). TAP averages there
#: too: in process with messages every 500 records, Waveform 0.8584 averaged against
#: 0.8316 summed, Hyperplane 0.9262 against 0.9245 (RandomRBF: 0.7700 against 0.7765).
#: Hyperplane's four averaged variants are set one grid step past that pick, at 0.04: the
#: target is 0.01 of centralized at 10x fewer bytes than BSP, the tuning's bar of 0.005 a
#: margin, and at 0.04 they end within 0.0069 in process (1/10.5-1/13.9 of BSP's bytes)
#: and, on Flink, 0.0050-0.0063 behind at 1/11.2-1/13.5 (3 runs), where independent
#: learners are 0.0109 behind; FDA sketch averaged at 0.04 ends one round (0.0109 behind)
#: and stays summing at 0.005.
#:
#: LED's were tuned again under ``diversity`` (``--aggregation diversity --grid
#: 0.16,0.08,0.04,0.02,0.01,0.005``), which scales a round's summed deltas down as far as
#: they overlap, so long rounds neither overshoot (``sum``) nor learn at a k-times larger
#: mini-batch (``average``). Every variant at 0.04: in process within 0.0021-0.0058 of
#: centralized at 1/6.8-1/42.9 of BSP's bytes (summing at 0.04: 1/6.1-1/7.2), where
#: independent learners are 0.0069 behind; on Flink (3 runs) 1/11.7-1/41.0 within 0.0037
#: but FDA sketch, 1/7.7 at 0.0057, and 1/13.3 at 0.0052 once the exact drift of its
#: 250-parameter model got FGM subrounds and float32 polls. On RandomRBF it is no way to
#: 10x: on Flink FDA naive and linear and EVENFLOW basic at 0.04 were 0.0094, 0.0101 and
#: 0.0072 behind (means of 3, 3 and 2 runs) at 1/4.8-1/5.0, EVENFLOW fast at 0.01 0.0066
#: at 1/3.9, so RandomRBF keeps its sums; on digits-PA EVENFLOW fast at 0.005 was 0.0213
#: behind at 1/5.0 (3 runs; summing: 0.0228 at 1/5.1), at 0.0075 with 16 coefficients
#: 0.0193 at 1/4.7.
SETTINGS: dict[str, list[tuple[str, str | None, dict]]] = {
    # Shuttle tuned again on a grid that goes higher (``benchmarks/tune_thresholds.py
    # --dataset shuttle --grid 0.32,0.16,0.08,0.04``, 2026-11-27): every variant is within
    # 0.0005 of centralized at every threshold, as independent learners are, and at 0.32
    # ends at most one round, 1/42.7-1/64.9 of BSP's bytes (at 0.04: 1/6.1-1/19.9)
    "shuttle": _pa_runs(0.32, 0.32, 0.32, 0.32, 0.32),
    "digits": [
        ("Independent", None, {}),
        ("Asynchronous", None, {}),
        ("Synchronous", None, {}),
        ("SSP", None, {"staleness": 2}),
        # EASGD's and Adaptive's elastic step α 0.5 and the loss that triggers an
        # exchange, 10, chosen in process (seed 0) on digits itself: Adaptive at α 0.25
        # fell 0.041 behind centralized at lossThreshold 50 and 0.020 at 5 (EASGD 0.011);
        # at α 0.5 0.015 at 10 (1/3.8 of BSP's bytes), 0.019 at 20, 0.031 at 50 (EASGD
        # 0.0075); at α 1 EASGD fell 0.029 behind
        ("EASGD", None, {"alpha": 0.5}),
        ("Adaptive", None, {"alpha": 0.5, "lossThreshold": 10.0}),
        # papers/002 §5.1.1 uses Θ = 8 for its DL task. Per variant here, chosen on Flink
        # (three runs each) to end 20-26 rounds there, 5.4-6.6x fewer than BSP's 140: the
        # loop's latency lets spokes train on while a check is in flight, so a threshold
        # ends 20-30% fewer rounds on Flink than on the in-process kernel with the same
        # random shares, and loses more accuracy at the same number of rounds
        # FDA naive at 2.5 (2026-11-28): at 1.25 it ended 28 rounds in the README's run,
        # 1/4.9 of BSP's bytes, and at 1.5 28 again (1/4.9 at 0.0044 behind; three runs
        # each); at 2.5 20 rounds, 1/6.7 at 0.0057 behind (three runs, BSP +0.0030)
        ("FDA", "naive", {"threshold": 2.5}),
        ("FDA", "linear", {"threshold": 1.25}),
        # FDA sketch at 1.25 (2026-11-29): at 0.75 it ended 26 rounds in a full invocation,
        # 1/4.98 of BSP's bytes at 0.0052 behind; at 1.0 23 rounds, 1/5.5 at 0.0062, at
        # 1.25 20-21 rounds, 1/6.2 at 0.0077 (three runs each)
        ("FDA", "sketch", {"threshold": 1.25, "precision": 0.25}),
        # EVENFLOW basic at 2.5 (2026-11-27): at 1.5 it ended 30 rounds on Flink, 1/4.6 of
        # BSP's bytes at 0.0027 behind; in process (seeds 0-2, messages every 150 records)
        # 1.5 / 1.75 / 2.0 / 2.5 ended 29 / 27 / 26 / 23 rounds, 1/4.6 / 1/5.0 / 1/5.3 /
        # 1/5.9 at 0.0035 / 0.0052 / 0.0059 / 0.0072 behind; on Flink at 2.5 (three runs)
        # 23 rounds, 1/6.1 at 0.0058 behind
        ("EVENFLOW", "basic", {"threshold": 2.5, "monitoredFunction": "l2"}),
        ("EVENFLOW", "fast", {"threshold": 0.4, "monitoredFunction": "l2", "coefficients": 50}),
        *TENSAIR_RUNS,
    ],
    # EVENFLOW fast and SSP chosen on Flink on digits-PA itself (three runs each, 4
    # spokes): fast at 0.005 (the grid's smallest, none within 0.015 in process) fell
    # 0.0228 behind centralized at 1/5.1 of BSP's bytes, at 0.0025 0.0171 at 1/3.5; SSP at
    # staleness 2 0.0200, at 1 0.0139 at BSP's bytes. FDA linear likewise, under
    # ``diversity`` (2026-11-26, Flink, the means of three runs against centralized
    # 0.9658): at 0.04 0.0175 and 0.0179 behind at 1/5.9 and 1/6.0 of BSP's bytes (summed at
    # 0.005: 0.0093 at 1/1.7); at 0.03 0.0160 at 1/4.8, at 0.05 0.0206 at 1/7.1 (in process,
    # messages every 500 records, 0.04: 0.0205 at 1/5.7). Under ``diversity`` the others
    # then gave: naive 0.0184 and 0.0206 at 1/5.5 at
    # 0.04 (0.0172 at 1/4.7 at 0.03), sketch 0.0211 at 1/4.7 at 0.02, EVENFLOW basic 0.0174
    # at 1/3.9 at 0.03 and 0.0210 at 1/4.7 at 0.04, fast with 8 coefficients 0.0207 at 1/6.5
    # at 0.0075 and 0.0216 at 1/5.0 at 0.005
    # FDA naive under ``diversity`` at 0.04 too (Flink, 2026-11-27, three runs, responses
    # without their method's name): 0.0176 behind at 1/5.7 of BSP's bytes; two earlier sets
    # of three, with the names, 0.0184 and 0.0206 at 1/5.5, so 0.0189 over the nine (summed
    # at 0.005: 0.0075 at 1/1.8). EVENFLOW basic so in the same run: 0.0221 at 1/5.0
    # Since ``diversity`` takes its scale per class row (``diversityBlocks: class``,
    # 2026-11-29; Flink, three runs per set, four sets for FDA naive and linear): naive and
    # linear at 0.04 0.0149-0.0179 behind at 1/6.0-1/6.3 of BSP's bytes (one scale for the
    # model: 0.0177 and 0.0181 at 1/5.8 and 1/6.0 in the README's earlier table); EVENFLOW
    # basic at 0.04 0.0164 at 1/5.7 (0.05: 0.0198 at 1/6.2), fast at 0.005 0.0160 at 1/5.8
    # (0.0075: 0.0204 at 1/7.5); FDA sketch under ``diversity`` stays past 0.02 (0.015,
    # 0.02, 0.03: 0.0210 at 1/4.2, 0.0216 at 1/4.9, 0.0227 at 1/6.5), so it keeps its sum
    # Under ``momentum`` (block momentum, 2026-11-29; ``benchmarks/tune_thresholds.py
    # --dataset digits-pa --lag 150 --aggregation momentum --seeds 0,1,2``): FDA naive and
    # linear at 0.04 0.0152 and 0.0154 behind at 1/7.4 (``diversity`` at 0.04: 0.0180 at
    # 1/5.3), sketch at 0.02 0.0141 at 1/4.2 (0.03: 0.0158 at 1/5.2), EVENFLOW basic at
    # 0.04 0.0154 at 1/6.5, fast at 0.005 0.0148 at 1/6.8. On Flink (three runs each, two
    # sets): FDA naive 0.0159 and 0.0166 behind at 1/7.9, linear 0.0150 at 1/7.8-1/8.0,
    # sketch at 0.02 0.0185 at 1/7.0 (at 0.03: 0.0197 at 1/9.2), EVENFLOW basic 0.0157 at
    # 1/7.4, fast 0.0156 at 1/7.5
    "digits-pa": _pa_runs(0.04, 0.04, 0.02, 0.04, 0.005, staleness=1,
                          momentum=("naive", "linear", "sketch", "basic", "fast")),
    "phishing": _pa_runs(0.005, 0.005, 0.005, 0.005, 0.01),
    "waveform": _pa_runs(0.08, 0.08, 0.08, 0.08, 0.08, averaged=(
        "Asynchronous", "naive", "linear", "sketch", "basic", "fast")),
    # Under ``momentum`` (2026-11-29; ``benchmarks/tune_thresholds.py --dataset rbf --lag 150
    # --aggregation momentum --seeds 0,1,2``): FDA naive and linear at 0.12 0.0022 and
    # 0.0025 behind at 1/19.1 and 1/19.5 of BSP's bytes (0.16: 0.0042 at 1/25.7), sketch
    # (the exact drift of a 105-parameter model) at 0.08 0.0047 at 1/9.5 (0.09: 0.0066 at
    # 1/10.9; 0.1: 0.0104 at 1/12.1), EVENFLOW basic at 0.12 0.0009 at 1/18.7, fast at 0.04
    # 0.0009 at 1/18.5; summed, no threshold had come within 0.01 at 1/3. On Flink (three
    # runs each, two sets): FDA naive 0.0018 and 0.0023 behind at 1/19.7 and 1/19.9,
    # linear 0.0021-0.0027 at 1/20.0-1/20.5, sketch at 0.08 0.0044 at 1/14.9 (at 0.09:
    # 0.0085 at 1/15.8), EVENFLOW basic 0.0019 at 1/20.1, fast 0.0012 at 1/19.4
    "rbf": _pa_runs(0.12, 0.12, 0.08, 0.12, 0.04,
                    momentum=("naive", "linear", "sketch", "basic", "fast")),
    "led": _pa_runs(0.04, 0.04, 0.04, 0.04, 0.04, diverse=(
        "naive", "linear", "sketch", "basic", "fast")),
    # FDA sketch under ``diversity`` at 0.03 (Flink, three runs each): 0.0077 behind
    # centralized at 1/8.3 of BSP's bytes with its float64 polls at once (2026-11-26), 0.0087
    # at 1/10.9 since the exact drift of its 22-parameter model gets FGM subrounds and
    # float32 polls and responses no longer carry their method's name (2026-11-27;
    # learning.protocols.fda, SMALL_STATE); summed at 0.005 it was 0.0040 behind at 1/2.1
    "hyperplane": _pa_runs(0.04, 0.04, 0.03, 0.04, 0.04, averaged=(
        "Asynchronous", "naive", "linear", "basic", "fast"), diverse=("sketch",)),
}


#: the protocols with a warm-up (``trainingConfiguration.warmupRounds``, 20 by default,
#: :data:`learning.protocols.asynchronous.WARMUP_ROUNDS`): TAP's, and EASGD's and
#: Adaptive's, which are TAP's hub and spoke with the elastic exchange
#: (:mod:`learning.protocols.easgd`); each runs a second time without it (the papers'
#: protocol), named ``no warm-up``
WARMED = ("Asynchronous", "EASGD", "Adaptive")


def _with_warmup(runs: list[tuple[str, str | None, dict]]) -> list[tuple[str, str | None, dict]]:
    """``runs`` with a second run after each of :data:`WARMED`'s: the same settings and
    ``warmupRounds`` 0, named ``no warm-up``."""
    out = []
    for protocol, variant, extra in runs:
        out.append((protocol, variant, extra))
        if protocol in WARMED and variant is None:
            out.append((protocol, "no warm-up", {**extra, "warmupRounds": 0}))
    return out


SETTINGS = {dataset: _with_warmup(runs) for dataset, runs in SETTINGS.items()}


@functools.lru_cache(maxsize=2)
def load(dataset: str) -> tuple[np.ndarray, np.ndarray]:
    """``(X, y)`` of a dataset, in file (or generator) order; read-only arrays, cached.

    Returns
    -------
    X : (n_records, n_features) float64
    y : (n_records,) int64

    Raises
    ------
    ValueError
        For a name not in :data:`DATASETS`.
    """
    from learning import datasets

    if dataset == "shuttle":
        X, y = datasets.shuttle()
    elif dataset in ("digits", "digits-pa"):
        from sklearn.datasets import load_digits

        X, y = load_digits(return_X_y=True)
        # DIGITS_PASSES passes in file order (10,782 records): one pass (1,797) is over
        # before the dynamic protocols' first rounds end on a cluster
        X, y = np.tile(X.astype(np.float64), (DIGITS_PASSES, 1)), np.tile(y, DIGITS_PASSES)
    elif dataset == "phishing":
        X, y = datasets.phishing()
    elif dataset in datasets.SYNTH:
        X, y = datasets.synth(dataset, n=SYNTH_RECORDS)
    else:
        raise ValueError(f"unknown dataset {dataset!r}; known: {', '.join(DATASETS)}")
    X.setflags(write=False)
    y.setflags(write=False)
    return X, y


#: protocols whose runs' variant only names the run in the table (their settings are in
#: its extra keys), where FDA's and EVENFLOW's is their ``variant``
LABELLED = (TENSAIR, *WARMED)


def create_request(dataset: str, protocol: str, variant: str | None, extra: dict,
                   pipeline: int = 0) -> dict:
    """The Create request of one run."""
    pre, learner, base = copy.deepcopy(DATASETS[dataset])
    config = {"protocol": protocol, "hubParallelism": 1, **base, **extra}
    if variant is not None and protocol not in LABELLED:
        config["variant"] = variant
    return {"id": pipeline, "request": "Create", "requestId": f"exp-{pipeline}",
            "preProcessors": pre, "learner": learner, "trainingConfiguration": config}


def _row(dataset: str, protocol: str, variant: str | None, final: dict, seconds: float,
         kernel: str, queries: int, curve: list, report_bytes: int, *, spokes: int,
         aggregation: str | None, scaling: str | None = None) -> dict:
    proto = final["protocol"]
    if "syncBytesToHubs" in proto:
        to_hubs, to_spokes = proto["syncBytesToHubs"], proto["syncBytesToSpokes"]
    elif "bytesBetweenSpokes" in proto:  # TensAIR: no hub in the data path, spoke → spoke
        to_hubs, to_spokes = 0, proto["bytesBetweenSpokes"]
    else:  # protocols without per-method accounting: take the Query reports out
        to_hubs, to_spokes = max(0, proto["bytesToHubs"] - report_bytes), proto["bytesToSpokes"]
    done = final["fitted"] + final["predicted"]
    return {
        "dataset": dataset, "protocol": protocol, "variant": variant, "spokes": spokes,
        # the rule that ran (the Query says it; the request may leave it to the default);
        # none where nothing synchronizes (a dataset's configuration may name one)
        "aggregation": None if protocol == "Independent" else proto.get("aggregation",
                                                                        aggregation),
        "scaling": scaling,
        # under diversity: the mean scale of the rounds' summed deltas (hub 0's)
        "diversity_scale": proto.get("diversityScale"),
        "prequential_accuracy": final["prequentialAccuracy"],
        "mean_loss": final["meanLoss"],
        "bytes_to_hubs": int(to_hubs), "bytes_to_spokes": int(to_spokes),
        "rounds": int(proto.get("rounds", proto.get("updates", 0))),
        "records_per_second": done / seconds if seconds > 0 else None,
        "fitted": final["fitted"], "predicted": final["predicted"],
        "messages_to_hubs": proto["messagesToHubs"], "messages_to_spokes": proto["messagesToSpokes"],
        "all_bytes_to_hubs": proto["bytesToHubs"], "wait_ms": proto.get("waitMs"),
        # SSP and TAP hubs (hub 0): updates a push missed, records per push (p50, p95)
        "update_staleness": proto.get("updateStaleness"),
        "records_per_push": proto.get("recordsPerPush"),
        # TAP spokes: push → global round trip, milliseconds (each spoke's p50 and p95)
        "round_trip_ms": [[s.get("roundTripMsP50"), s.get("roundTripMsP95")]
                          for s in final.get("spokes", []) if "roundTripMsP50" in s] or None,
        "kernel": kernel, "queries": queries, "seconds": seconds,
        "loss_curve": curve,
    }


# -- in-process kernel ------------------------------------------------------------------
def run_local(dataset: str, protocol: str, variant: str | None, extra: dict, *, spokes: int = 4,
              every: int = 5, limit: int | None = None, points: int = 40, seed: int = 0,
              sharding: str = "random", lag: int = 1) -> dict:
    """One run on :class:`operators.local.LocalNetwork` (the job's own kernels, in
    process; :func:`flink_jobs.local_run.stream_local`): the Create request and the records
    as the job gets them (JSON; by default every record to a spoke drawn at random,
    ``seed``, as the Flink job draws it with ``RAND_INTEGER``), messages delivered after
    each record, Queries at the end until every record is counted.

    Random shares matter: with round-robin shares the dynamic protocols came within
    0.004-0.007 of BSP's accuracy on digits at settings that, with random shares (and on
    Flink), fell 0.015-0.02 behind.

    Parameters
    ----------
    dataset : name in :data:`DATASETS`
    protocol, variant, extra : str, str or None, dict
        The run: ``extra`` goes into ``trainingConfiguration`` (:func:`create_request`).
    spokes : int
        Spokes of the network (one hub).
    every : int
        Every ``every``-th record is forecast (no label), the others are trained on;
        0: all trained on.
    limit : int or None
        Only the first ``limit`` records.
    points : int
        About how many points the ``loss_curve`` gets.
    seed : int
        Seed of the spoke shares.
    sharding : str
        How records are dealt to spokes (:data:`operators.sharding.SHARDINGS`; ``random``,
        the job's default, draws each spoke from ``seed``).
    lag : int
        Deliver messages after every ``lag`` records (1: after each).

    Returns
    -------
    dict
        One row (the keys of the module docstring), ``"kernel": "local"``; ``seconds``
        is wall time in seconds from the first record to the last Query.
    """
    from flink_jobs.local_run import stream_local

    X, y = load(dataset)
    if limit:
        X, y = X[:limit], y[:limit]
    request = create_request(dataset, protocol, variant, extra)
    run = stream_local(request, X, y, spokes=spokes, every=every, points=points, seed=seed,
                       sharding=sharding, lag=lag)
    return _row(dataset, protocol, variant, run.final, run.seconds, "local", run.queries,
                run.curve, run.report_bytes, spokes=spokes,
                aggregation=request["trainingConfiguration"].get("aggregation"),
                scaling=request["trainingConfiguration"].get("scaling"))


def run_centralized(dataset: str, *, every: int = 5, limit: int | None = None,
                    points: int = 40) -> dict:
    """The reference row of a dataset: one learner that sees the whole stream.

    :func:`run_local` with one spoke and protocol ``Independent``, the same Create
    request otherwise (pipeline, mini-batch size), the records in file order with the same
    forecasting split. With one spoke there are no shares to draw and nothing to wait
    for, so its accuracy is the same on every kernel and every repeat.

    Returns
    -------
    dict
        The row of :func:`run_local` with ``"protocol": "Centralized"``, ``"spokes": 1``,
        ``"kernel": "local"`` and ``"aggregation": None``.
    """
    row = run_local(dataset, "Independent", None, {}, spokes=1, every=every, limit=limit,
                    points=points, seed=0)
    return {**row, "protocol": CENTRALIZED}


# -- Flink MiniCluster ------------------------------------------------------------------
def run_flink(dataset: str, runs: list[tuple[str, str | None, dict]], *, spokes: int = 4,
              spoke_parallelism: int = 0,
              bootstrap_servers: str | None = None, every: int = 5, limit: int | None = None,
              timeout: float = 600.0, connection=None,
              on_row: Callable[[dict], None] | None = None,
              failures: list[str] | None = None, rate: int | None = None,
              execution_mode: str | None = None) -> list[dict]:
    """Each run as its own job on a local MiniCluster, one after the other, through the
    local broker (started here unless ``bootstrap_servers`` names a Kafka; ``connection``,
    a :class:`flink_jobs.connection.KafkaConnection`, carries its security settings).

    A run that fails (a Create refused, a ``TimeoutError`` of a pipeline that stopped
    counting) raises, unless ``failures`` is a list: then its line is appended there, it
    has no row, and the next run goes on."""
    from deploy.broker import LocalBroker
    from flink_jobs.session import Session, local_config

    X, y = load(dataset)
    if limit:
        X, y = X[:limit], y[:limit]
    mode = execution_mode or EXECUTION_MODE.get(dataset, "thread")
    broker = None if bootstrap_servers else LocalBroker().start()
    servers = bootstrap_servers or broker.bootstrap_servers
    rows = []
    try:
        def one(n: int, protocol: str, variant: str | None, extra: dict) -> dict:
            prefix = f"exp-{uuid.uuid4().hex[:6]}-"
            extra_cfg = {"connection": connection} if connection is not None and \
                bootstrap_servers else {}
            cfg = local_config(servers, topic_prefix=prefix, spokes=spokes, hubs=1,
                               spoke_parallelism=spoke_parallelism,
                               execution_mode=mode, **extra_cfg)
            request = create_request(dataset, protocol, variant, extra, n)
            with Session(cfg, f"experiment-{dataset}-{protocol}-{variant}") as s:
                created = s.request(request, timeout=180)
                if created.get("status") != "ok":
                    raise RuntimeError(f"Create failed: {created}")
                curve: list = []
                queries = [0]

                def seen(q: dict) -> None:
                    if q.get("status") == "ok" and q.get("fitted"):
                        curve.append([q["fitted"], q["meanLoss"]])

                lag, chunk = PACE.get(dataset, (2000, 500))

                def counted(q: dict) -> None:
                    queries[0] += 1
                    seen(q)

                # paced by the predictions topic: Queries would add rounds to BSP's and
                # SSP's; a progress Query (the loss curve) every PROGRESS_EVERY_S seconds
                pace, write = rate_limited(rate, s.keep_pace(n, lag=lag, timeout=timeout,
                                                             every=every, patience=PATIENCE_S),
                                           chunk)
                last = [time.monotonic()]

                def between(sent: int) -> None:
                    pace(sent)
                    if time.monotonic() - last[0] > PROGRESS_EVERY_S:
                        last[0] = time.monotonic()
                        counted(s.query(n, timeout=timeout))

                t0 = time.monotonic()
                _, n_train, n_fore = s.stream(X, y, every=every, between=between, chunk=write)

                final = s.wait_until_counted(n, n_train, n_fore, timeout=timeout, every=0.5,
                                             on_query=counted)
                seconds = time.monotonic() - t0
                # one more Query, nothing in between: the size of one round of reports
                again = s.query(n, timeout=60)
                per_query = again["protocol"]["bytesToHubs"] - final["protocol"]["bytesToHubs"]
                report_bytes = per_query * (queries[0] - 1) if per_query > 0 else 0
                return {**_row(dataset, protocol, variant, final, seconds, "flink", queries[0],
                               curve, report_bytes, spokes=spokes,
                               aggregation=request["trainingConfiguration"].get("aggregation"),
                               scaling=request["trainingConfiguration"].get("scaling")),
                        "rate": rate, "spoke_parallelism": spoke_parallelism,
                        "execution_mode": mode}

        for n, (protocol, variant, extra) in enumerate(runs):
            try:
                row = one(n, protocol, variant, extra)
            except Exception as exc:  # one failed run must not cost the others
                log.error("%s %s (%s) failed: %r", dataset, protocol, variant, exc)
                if failures is None:
                    raise
                failures.append(f"{dataset} {protocol}" + (f" ({variant})" if variant else "")
                                + f": {exc!r}")
                continue
            rows.append(row)
            if on_row:
                on_row(row)
    finally:
        if broker is not None:
            broker.stop()
    return rows


# -- output -----------------------------------------------------------------------------
def _name(row: dict, rule: bool = False) -> str:
    """``FDA (naive)``; with ``rule``, the aggregation rule too: ``FDA (naive, average)``;
    a run with a stream rate (``--rate``) names it: ``FDA (naive, 4,000 records/s)``."""
    parts = ([row["variant"]] if row.get("variant") else []) + \
        ([row["aggregation"]] if rule and row.get("aggregation") else []) + \
        ([f"{row['rate']:,} records/s"] if row.get("rate") else [])
    return row["protocol"] + (f" ({', '.join(parts)})" if parts else "")


def summarize(rows: list[dict]) -> list[dict]:
    """One row per (dataset, protocol, variant, spokes, rate), in first-seen order: the means of
    ``prequential_accuracy``, ``mean_loss``, the bytes, ``rounds`` and
    ``records_per_second`` over the repeats of that run, with ``runs`` (how many),
    ``accuracy_std`` (sample standard deviation, ``ddof=1``; 0.0 for one run), ``spokes``,
    ``rate`` and ``aggregation`` (None where the rows have no such key)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["dataset"], r["protocol"], r["variant"], r.get("spokes"),
                           r.get("rate")), []).append(r)
    out = []
    for (dataset, protocol, variant, spokes, rate), rs in groups.items():
        acc = [r["prequential_accuracy"] for r in rs if r["prequential_accuracy"] is not None]
        row = {"dataset": dataset, "protocol": protocol, "variant": variant, "spokes": spokes,
               "rate": rate, "aggregation": rs[0].get("aggregation"), "runs": len(rs),
               "prequential_accuracy": float(np.mean(acc)) if acc else None,
               "accuracy_std": float(np.std(acc, ddof=1)) if len(acc) > 1 else 0.0}
        for key in ("mean_loss", "bytes_to_hubs", "bytes_to_spokes", "rounds",
                    "records_per_second"):
            row[key] = float(np.mean([r[key] or 0 for r in rs]))
        out.append(row)
    return out


def _bytes_ratio(total: float, base: float) -> str:
    """``total`` relative to BSP's ``base`` bytes: ``1/6.2`` below 1/1.1, else ``0.95``."""
    if not base:
        return "–"
    if total == 0:
        return "0"
    ratio = total / base
    return f"1/{1 / ratio:.1f}" if ratio < 1 / 1.1 else f"{ratio:.2f}"


def _delta(acc: float | None, base: dict | None) -> str:
    if acc is None or base is None or base["prequential_accuracy"] is None:
        return "–"
    return f"{acc - base['prequential_accuracy']:+.4f}"


def markdown_table(rows: list[dict]) -> str:
    """The table as GitHub markdown, one line per (dataset, protocol, variant, spokes, rate)
    (means over repeated runs, :func:`summarize`): accuracy (± its sample standard
    deviation over two or more runs), Δ accuracy vs the dataset's Centralized row and vs
    BSP (``Synchronous``) with the same number of spokes (and stream rate, else the one at
    the job's own pace), the bytes, the bytes relative to
    BSP's (``1/6.2``: a sixth of them), rounds, records per second and runs. The
    Centralized row (one spoke) is compared with BSP when the table has one BSP line for
    its dataset; ``–`` where there is no reference. A row whose aggregation rule is not
    its BSP line's names it: ``FDA (naive, average)`` beside a summing BSP."""
    rows = summarize(rows)
    bsp = {(r["dataset"], r["spokes"], r.get("rate")): r for r in rows
           if r["protocol"] == "Synchronous"}
    central = {r["dataset"]: r for r in rows if r["protocol"] == CENTRALIZED}
    lines = ["| dataset | protocol | prequential accuracy | Δ vs centralized | Δ vs BSP | spokes "
             "| bytes → hubs | bytes → spokes | bytes vs BSP | rounds | records/s | runs |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        base = bsp.get((r["dataset"], r["spokes"], r.get("rate"))) or \
            bsp.get((r["dataset"], r["spokes"], None))
        if base is None and r["protocol"] == CENTRALIZED:
            mine = [b for (ds, _, _), b in bsp.items() if ds == r["dataset"]]
            base = mine[0] if len(mine) == 1 else None
        total = r["bytes_to_hubs"] + r["bytes_to_spokes"]
        ratio = _bytes_ratio(total, base["bytes_to_hubs"] + base["bytes_to_spokes"]
                             if base else 0)
        acc = r["prequential_accuracy"]
        acc_s = "–" if acc is None else f"{acc:.4f}" + (
            f" ± {r['accuracy_std']:.4f}" if r["runs"] > 1 else "")
        spokes = "–" if r["spokes"] is None else str(r["spokes"])
        rule = bool(base and r.get("aggregation") and base.get("aggregation")
                    and r["aggregation"] != base["aggregation"])
        lines.append(f"| {r['dataset']} | {_name(r, rule)} | {acc_s} | "
                     f"{_delta(acc, central.get(r['dataset']))} | {_delta(acc, base)} | "
                     f"{spokes} | {r['bytes_to_hubs']:,.0f} | {r['bytes_to_spokes']:,.0f} | "
                     f"{ratio} | {r['rounds']:,.0f} | {r['records_per_second']:,.0f} | "
                     f"{r['runs']} |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> Path:
    """Prequential loss over records fitted, and bytes per protocol, one row per dataset
    (the first repeat of each run; labels name the spokes in a ``--spokes`` sweep).

    Raises
    ------
    ImportError
        When matplotlib is not installed.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    fig, axes = plt.subplots(len(datasets), 2, figsize=(14, 4.5 * len(datasets)), squeeze=False)
    colours = plt.get_cmap("tab20").colors
    for (ax_loss, ax_bytes), ds in zip(axes, datasets):
        mine = [r for r in rows if r["dataset"] == ds and not r.get("repeat")]
        sweep = len({r.get("spokes") for r in mine if r["protocol"] != CENTRALIZED}) > 1

        def label(r: dict, sweep: bool = sweep) -> str:
            return _name(r) + (f" k={r['spokes']}" if sweep and r["protocol"] != CENTRALIZED
                               else "")

        for i, r in enumerate(mine):
            if r["loss_curve"]:
                c = np.asarray(r["loss_curve"], dtype=np.float64)
                ax_loss.plot(c[:, 0], c[:, 1], label=label(r), color=colours[(2 * i) % 20 + (i >= 10)],
                             linestyle=("-", "--", ":")[i % 3], marker=".")
        kernel = mine[0]["kernel"] if mine else ""
        ax_loss.set(title=f"{ds}: prequential mean loss ({kernel} kernel; points: Queries)"
                    if kernel == "flink" else f"{ds}: prequential mean loss", xlabel="records fitted",
                    ylabel="cumulative mean loss")
        ax_loss.legend(fontsize=7)
        names = [label(r) for r in mine]
        x = np.arange(len(mine))
        ax_bytes.bar(x - 0.2, [r["bytes_to_hubs"] for r in mine], 0.4, label="spokes → hubs")
        ax_bytes.bar(x + 0.2, [r["bytes_to_spokes"] for r in mine], 0.4, label="hubs → spokes")
        ax_bytes.set_xticks(x, names, rotation=45, ha="right", fontsize=7)
        ax_bytes.set_yscale("symlog")
        ax_bytes.set(title=f"{ds}: synchronization bytes", ylabel="bytes")
        ax_bytes.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _select(dataset: str, protocols: tuple[str, ...] | None, quick: bool,
            aggregation: str | None,
            scaling: str | None = None) -> tuple[bool, list[tuple[str, str | None, dict]]]:
    """Whether the Centralized row runs, and the runs of :data:`SETTINGS` (with
    ``aggregation`` added to all but Independent's, ``scaling`` to all) selected by
    ``protocols`` and ``quick``."""
    def wanted(protocol: str, variant: str | None) -> bool:
        return (protocols is None or protocol in protocols) and \
            (not quick or (protocol, variant) in QUICK_RUNS)

    def configured(protocol: str, extra: dict) -> dict:
        if aggregation is not None and protocol != "Independent":
            extra = {**extra, "aggregation": aggregation}
        return {**extra, "scaling": scaling} if scaling is not None else extra

    runs = [(protocol, variant, configured(protocol, extra))
            for protocol, variant, extra in SETTINGS[dataset] if wanted(protocol, variant)]
    return wanted(CENTRALIZED, None), runs


def run_experiment(json_path: str | Path, *, kernel: str = "flink",
                   datasets: tuple[str, ...] = ("shuttle", "digits"),
                   spokes: int | tuple[int, ...] = 4, limit: int | None = None,
                   png_path: str | Path | None = None, bootstrap_servers: str | None = None,
                   protocols: tuple[str, ...] | None = None, connection=None, out=None,
                   repeats: int = 1, aggregation: str | None = None,
                   scaling: str | None = None, quick: bool = False,
                   rates: tuple[int | None, ...] = (None,),
                   spoke_parallelism: int = 0,
                   execution_mode: str | None = None) -> list[dict]:
    """Run the Centralized reference and every protocol on every dataset; write the JSON
    rows (and the PNG), print the markdown table; returns the rows.

    Per dataset: first the Centralized row (:func:`run_centralized`, once, on the
    in-process kernel whatever ``kernel`` is, ``repeat`` 0), then for each number of
    spokes, each stream rate, each repeat, each run of :data:`SETTINGS`.

    Parameters
    ----------
    json_path : path
        Where the JSON list of rows goes (rewritten after every run).
    kernel : {"flink", "local"}
    datasets : names in :data:`DATASETS`
    spokes : int or tuple of int
        Spokes of every run but Centralized; several: a sweep, each value a full set of
        runs.
    limit : int or None
        Use only the first ``limit`` records of each dataset.
    png_path : path or None
        Default: ``json_path`` with the suffix ``.png``. Skipped (with a warning) when
        matplotlib is missing.
    protocols : names or None
        Only these protocols (default: all of :data:`SETTINGS` and ``"Centralized"``,
        which is one of the names).
    bootstrap_servers, connection : str, KafkaConnection or None
        A Kafka to use instead of a local broker, and its security settings.
    out : text stream or None
        Where the progress lines and the table go (default: standard output).
    repeats : int
        Runs of every protocol (each a row with its ``repeat`` index; the table shows
        their means and the standard deviation of the accuracy). Local runs draw their
        spoke shares with seed ``repeat``; Flink runs draw them anew every time.
        Centralized runs once: it has no shares to draw.
    aggregation : {"average", "sum", "diversity", "momentum"} or None
        ``trainingConfiguration.aggregation`` of every run but Centralized and
        Independent (None: the key is left out, the learner's default).
    scaling : {"none", "batch", "learning-rate", "both"} or None
        ``trainingConfiguration.scaling`` of every run but Centralized (papers/001 §II-C:
        ``batch`` splits each mini-batch over the spokes, eq. 3; ``learning-rate`` divides
        the step size by them, eq. 4); None: the key is left out (``none``). A learner that
        has no step size refuses ``learning-rate`` and ``both`` (the run fails).
    quick : bool
        Only :data:`QUICK_RUNS`, on at most :data:`QUICK_LIMIT` records of each dataset.
    rates : tuple of (int or None)
        Flink only: the stream's rate of each set of runs, records/s at most
        (:func:`rate_limited`; None, the default: as fast as the job keeps up, the pace
        of the tables). Several: a sweep, each a full set of runs, its rows named with
        the rate (``Asynchronous (4,000 records/s)``) and compared with the BSP row at the
        same rate, else with the one at the job's own pace.
    spoke_parallelism : int
        Flink only: :attr:`flink_jobs.config.JobConfig.spoke_parallelism` of every run (0,
        the default and the tables' layout: a subtask per spoke; 1: every spoke in one
        subtask, as ``omldm serve`` runs them in thread mode); each row records it.
    execution_mode : {"thread", "process"} or None
        Flink only: PyFlink's execution mode of every run (None, the default: the
        dataset's, :data:`EXECUTION_MODE`; ``process`` is ``flink run``'s default); each row
        records it.

    Raises
    ------
    RuntimeError
        After the table, the JSON and the plot of the runs that succeeded, when a Flink
        run failed (each failure is printed; the other runs still ran).
    ValueError
        For an unknown ``kernel``, dataset, ``aggregation`` or ``scaling``, ``repeats``
        below 1, no or a non-positive number of ``spokes``, a rate below 1, or a rate on the
        in-process kernel (it has no clock: messages come after a number of records), a
        ``spoke_parallelism`` below 0, above a number of ``spokes``, or on that kernel, or
        an ``execution_mode`` other than thread or process, or on that kernel.
    """
    out = out or sys.stdout
    json_path = Path(json_path)
    rows: list[dict] = []
    failures: list[str] = []
    sweep = (spokes,) if isinstance(spokes, int) else tuple(spokes)

    def save(row: dict | None = None) -> None:
        if row is not None:
            rows.append(row)
            print(f"  {row['dataset']:10s} {_name(row):22s} k={row['spokes']} "
                  f"acc={row['prequential_accuracy']} "
                  f"bytes={row['bytes_to_hubs'] + row['bytes_to_spokes']:,} "
                  f"rounds={row['rounds']} rec/s={row['records_per_second']:,.0f}",
                  file=out, flush=True)
        json_path.write_text(json.dumps(rows, indent=1))

    if kernel not in ("flink", "local"):
        raise ValueError(f"kernel must be 'flink' or 'local', got {kernel!r}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if not sweep or any(k < 1 for k in sweep):
        raise ValueError(f"spokes must be one or more integers >= 1, got {spokes!r}")
    rates = tuple(rates) or (None,)
    if any(r is not None and r < 1 for r in rates):
        raise ValueError(f"rates must be records/s >= 1 (or None), got {rates!r}")
    if kernel == "local" and rates != (None,):
        raise ValueError("a stream rate needs the Flink kernel: the in-process kernel "
                         "delivers messages after a number of records, not after a time")
    if spoke_parallelism and (kernel == "local" or spoke_parallelism < 0
                              or spoke_parallelism > min(sweep)):
        raise ValueError(f"spoke_parallelism must be 0 to the fewest spokes ({min(sweep)}) on "
                         f"the Flink kernel, got {spoke_parallelism} on {kernel}")
    if execution_mode is not None and (kernel == "local"
                                       or execution_mode not in ("thread", "process")):
        raise ValueError(f"execution_mode must be 'thread' or 'process' on the Flink kernel, "
                         f"got {execution_mode!r} on {kernel}")
    if aggregation is not None and aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {', '.join(AGGREGATIONS)} or None, got "
                         f"{aggregation!r}")
    from flink_jobs.experiment_sharding import SCALINGS  # papers/001's choices, declared once

    if scaling is not None and scaling not in SCALINGS:
        raise ValueError(f"scaling must be one of {', '.join(SCALINGS)} or None, got "
                         f"{scaling!r}")
    unknown = [ds for ds in datasets if ds not in DATASETS]
    if unknown:
        raise ValueError(f"unknown dataset(s) {', '.join(unknown)}; known: {', '.join(DATASETS)}")
    if quick:
        limit = QUICK_LIMIT if limit is None else min(limit, QUICK_LIMIT)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    for ds in datasets:
        centralized, runs = _select(ds, protocols, quick, aggregation, scaling)
        if centralized:
            save({**run_centralized(ds, limit=limit), "repeat": 0})
        for k in sweep:
            for rate in rates:
                for repeat in range(repeats):
                    def tagged(row: dict, repeat: int = repeat) -> None:
                        save({**row, "repeat": repeat})

                    if kernel == "local":
                        for protocol, variant, extra in runs:
                            tagged(run_local(ds, protocol, variant, extra, spokes=k,
                                             limit=limit, seed=repeat))
                    elif runs:
                        run_flink(ds, runs, spokes=k, bootstrap_servers=bootstrap_servers,
                                  limit=limit, connection=connection, on_row=tagged,
                                  failures=failures, rate=rate,
                                  spoke_parallelism=spoke_parallelism,
                                  execution_mode=execution_mode)
    save()
    print(markdown_table(rows), file=out, flush=True)
    png = Path(png_path) if png_path else json_path.with_suffix(".png")
    try:
        plot(rows, png)
        print(f"plot: {png}", file=out, flush=True)
    except ImportError:
        log.warning("matplotlib is not installed: no plot")
    if failures:
        print("failed runs (no row):\n  " + "\n  ".join(failures), file=out, flush=True)
        raise RuntimeError(f"{len(failures)} run(s) failed: {'; '.join(failures)}")
    return rows


# -- regression: an MLP regressor on Friedman #1 (EVENFLOW's setting) ------------------
#: river's ``synth.Friedman`` seed of the regression experiment's stream
FRIEDMAN_SEED = 42
#: records of the regression stream (the last :data:`REGRESSION_HOLDOUT` held out)
REGRESSION_RECORDS = 20_000
#: share of the regression stream held out (its tail), never streamed
REGRESSION_HOLDOUT = 0.2
#: the regression experiment's pipeline: an MLP regressor on the raw features (uniform in
#: [0, 1]), Adam, one step per mini-batch of 16 records
REGRESSION_LEARNER = {"name": "MLPRegressor",
                      "hyperParameters": {"hidden_layers": [32, 16], "optimizer": "adam",
                                          "learning_rate": 0.01, "seed": 0}}
#: the regression experiment's runs (protocol, variant, extra trainingConfiguration keys).
#: EVENFLOW's l2 threshold T (on ``‖Δ_i‖²``) from 0.25, 1, 4 on this stream (4 spokes,
#: 20,000 records, seed 0): basic ended 21, 11, 5 rounds at test MSE 6.88, 6.68, 6.63 (BSP:
#: 249 rounds, 6.74); 1 is the middle. kl with T = 0.3 is papers/003 §IV's own setting.
#: Every run averages, as these settings were measured (at Adam 0.01 the networks' default
#: rules, sum and under EVENFLOW diversity, gave test MSE 6.82, 8.61, 6.66, 8.08 and 7.30
#: for these five runs, one run, 2026-12-06).
REGRESSION_RUNS: tuple[tuple[str, str | None, dict], ...] = (
    ("Synchronous", None, {"aggregation": "average"}),
    ("Asynchronous", None, {"aggregation": "average"}),
    ("EVENFLOW", "basic", {"threshold": 1.0, "monitoredFunction": "l2", "aggregation": "average"}),
    ("EVENFLOW", "fast", {"threshold": 1.0, "monitoredFunction": "l2", "coefficients": 50,
                          "aggregation": "average"}),
    ("EVENFLOW", "basic", {"threshold": 0.3, "monitoredFunction": "kl", "aggregation": "average"}),
)


def load_friedman(records: int = REGRESSION_RECORDS, holdout: float = REGRESSION_HOLDOUT,
                  seed: int = FRIEDMAN_SEED) -> tuple[np.ndarray, ...]:
    """river's Friedman #1 stream (``synth.Friedman(seed)``: 10 features uniform in [0,
    1], ``y = 10 sin(π x_0 x_1) + 20 (x_2 − ½)² + 10 x_3 + 5 x_4 + N(0, 1)``), split into
    the streamed head and the held-out tail.

    Returns
    -------
    X, y, X_holdout, y_holdout : float64 arrays, ``(n, 10)``, ``(n,)``, ``(m, 10)``, ``(m,)``
    """
    import itertools

    from river.datasets import synth

    data = list(itertools.islice(synth.Friedman(seed=seed), records))
    X = np.array([list(x.values()) for x, _ in data], dtype=np.float64)
    y = np.array([t for _, t in data], dtype=np.float64)
    cut = len(X) - round(holdout * len(X))
    return X[:cut], y[:cut], X[cut:], y[cut:]


def run_regression_one(data: tuple[np.ndarray, ...], protocol: str, variant: str | None,
                       extra: dict, *, spokes: int = 4, seed: int = 0,
                       target_scaler: bool = False) -> dict:
    """One run of the regression experiment on the in-process kernel
    (:func:`flink_jobs.local_run.stream_local`: every record trained on, each to a spoke
    drawn at random with ``seed``), then the held-out MSE of the final global model: hub
    0's learner (``w̃``) behind its global preprocessor statistics, or the one spoke's
    pipeline for ``Centralized`` (one spoke, protocol ``Independent``). With
    ``target_scaler`` the pipeline scales the target
    (:class:`learning.preprocessors.TargetStandardScaler`); the paper's setting does not.

    Returns
    -------
    dict
        ``protocol``, ``variant``, ``target_scaler``, ``spokes``, ``threshold``,
        ``monitored_function``,
        ``test_mse``, ``test_mae``, ``prequential_mae`` / ``prequential_rmse`` (the Query's
        ``metrics.cumulative``), ``bytes_to_hubs``, ``bytes_to_spokes``, ``rounds``,
        ``fitted``, ``seconds``.
    """
    from flink_jobs.local_run import stream_local
    from learning.pipeline import Pipeline

    X, y, Xh, yh = data
    central = protocol == CENTRALIZED
    config = {"protocol": "Independent" if central else protocol, "hubParallelism": 1,
              "miniBatchSize": 16, "miniBatches": 1, **extra}
    if variant is not None:
        config["variant"] = variant
    pre = [{"name": "TargetStandardScaler"}] if target_scaler else []
    request = {"id": 0, "request": "Create", "requestId": "regression",
               "preProcessors": pre, "learner": copy.deepcopy(REGRESSION_LEARNER),
               "trainingConfiguration": config}
    run = stream_local(request, X, y, spokes=1 if central else spokes, every=0, seed=seed)
    hub = run.net.hubs[0]  # the global model: the hub's learner and global statistics
    model = run.net.spokes[0].pipeline if central else Pipeline(hub.preprocessors, hub.learner)
    predictions = np.asarray(model.predict(Xh), dtype=np.float64)
    final, proto = run.final, run.final["protocol"]
    cumulative = (final.get("metrics") or {}).get("cumulative") or {}
    return {
        "dataset": "friedman", "protocol": protocol, "variant": variant,
        "target_scaler": target_scaler,
        "spokes": 1 if central else spokes, "threshold": extra.get("threshold"),
        "monitored_function": extra.get("monitoredFunction"), "kernel": "local",
        "records": len(X), "holdout_records": len(Xh),
        "test_mse": float(np.mean((yh - predictions) ** 2)),
        "test_mae": float(np.mean(np.abs(yh - predictions))),
        "prequential_mae": cumulative.get("mae"), "prequential_rmse": cumulative.get("rmse"),
        "bytes_to_hubs": int(proto.get("syncBytesToHubs", 0)),
        "bytes_to_spokes": int(proto.get("syncBytesToSpokes", 0)),
        "rounds": int(proto.get("rounds", proto.get("updates", 0))),
        "fitted": final["fitted"], "seconds": run.seconds,
    }


def regression_table(rows: list[dict]) -> str:
    """The regression experiment's rows as GitHub markdown."""
    lines = ["| protocol | spokes | test MSE | test MAE | prequential MAE | bytes → hubs "
             "| bytes → spokes | rounds | seconds |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        name = _name(r) + (f", {r['monitored_function']} T={r['threshold']:g}"
                           if r.get("monitored_function") else "")
        mae = "–" if r["prequential_mae"] is None else f"{r['prequential_mae']:.3f}"
        lines.append(f"| {name} | {r['spokes']} | {r['test_mse']:.3f} | {r['test_mae']:.3f} | "
                     f"{mae} | {r['bytes_to_hubs']:,} | {r['bytes_to_spokes']:,} | "
                     f"{r['rounds']:,} | {r['seconds']:.1f} |")
    return "\n".join(lines)


def run_regression(json_path: str | Path, *, spokes: int = 4,
                   records: int = REGRESSION_RECORDS, protocols: tuple[str, ...] | None = None,
                   seed: int = 0, target_scaler: bool = False, out=None) -> list[dict]:
    """``omldm experiment regression``: :data:`REGRESSION_LEARNER` on river's Friedman #1
    (:func:`load_friedman`, ``records`` records, the last 20% held out), Centralized and
    every run of :data:`REGRESSION_RUNS` on ``spokes`` spokes, on the in-process kernel
    (:func:`run_regression_one`); writes the JSON rows, prints the markdown table
    (:func:`regression_table`) and returns the rows. EVENFLOW's regression setting:
    papers/003_026f5d1641a0ab17.txt §IV (an MLP trained with MSE, test MSE reported).

    Parameters
    ----------
    protocols : names or None
        Only these (``"Centralized"`` is one of the names); default all.
    target_scaler : bool
        Scale the target (``TargetStandardScaler``; ``--target-scaler``).

    Raises
    ------
    ValueError
        For ``spokes`` or ``records`` below 1 (records: below 10).
    """
    out = out or sys.stdout
    if spokes < 1:
        raise ValueError(f"spokes must be >= 1, got {spokes}")
    if records < 10:
        raise ValueError(f"records must be >= 10, got {records}")
    json_path = Path(json_path)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    data = load_friedman(records)
    runs = [(CENTRALIZED, None, {}), *REGRESSION_RUNS]
    rows: list[dict] = []
    for protocol, variant, extra in runs:
        if protocols is not None and protocol not in protocols:
            continue
        row = run_regression_one(data, protocol, variant, extra, spokes=spokes, seed=seed,
                                 target_scaler=target_scaler)
        rows.append(row)
        json_path.write_text(json.dumps(rows, indent=1))
        print(f"  friedman {_name(row):22s} k={row['spokes']} test_mse={row['test_mse']:.3f} "
              f"rounds={row['rounds']} seconds={row['seconds']:.1f}", file=out, flush=True)
    print(f"friedman: {len(data[0]):,} records streamed, {len(data[2]):,} held out; "
          f"{REGRESSION_LEARNER['name']} {REGRESSION_LEARNER['hyperParameters']}"
          f"{', target scaled (TargetStandardScaler)' if target_scaler else ''}; "
          f"in-process kernel", file=out, flush=True)
    print(regression_table(rows), file=out, flush=True)
    return rows


def _one_scaling(values: list[str] | None) -> str | None:
    """``experiment protocols`` takes ``--scaling`` once (``experiment sharding`` sweeps it)."""
    if values and len(values) > 1:
        raise ValueError(f"--scaling: experiment protocols takes one value, got "
                         f"{', '.join(values)} (experiment sharding takes several)")
    return values[0] if values else None


def _command(args: argparse.Namespace) -> int:
    from flink_jobs.connection import KafkaConnection

    flink_only = [f"--{n.replace('_', '-')}" for n in ("rate", "spoke_parallelism",
                                                         "execution_mode")
                  if getattr(args, n) is not None]
    if args.which in ("sharding", "regression") and flink_only:
        raise ValueError(f"{', '.join(flink_only)}: options of experiment protocols (on "
                         f"Flink), not of experiment {args.which}")
    if args.target_scaler and args.which != "regression":
        raise ValueError(f"--target-scaler: an option of experiment regression, not of "
                         f"experiment {args.which}")
    if args.which == "sharding":
        from flink_jobs.experiment_sharding import command

        return command(args)
    given = [f"--{name}" for name in SHARDING_ONLY if getattr(args, name) is not None]
    if given:
        raise ValueError(f"{', '.join(given)}: options of experiment sharding")
    if args.which == "regression":
        others = [f"--{name}" for name in ("dataset", "aggregation", "scaling", "repeats")
                  if getattr(args, name) is not None] + (["--quick"] if args.quick else []) + \
            (["--kernel flink"] if args.kernel == "flink" else []) + \
            (["--png"] if args.png else [])
        if others or len(args.spokes or ()) > 1:
            raise ValueError(f"{', '.join(others) or 'several --spokes'}: not options of "
                             f"experiment regression (one --spokes, --limit, --protocol)")
        run_regression(args.json, spokes=(args.spokes or (4,))[0],
                       records=args.limit or REGRESSION_RECORDS,
                       protocols=tuple(args.protocol) if args.protocol else None,
                       target_scaler=args.target_scaler)
        return 0
    run_experiment(args.json, kernel=args.kernel or "flink",
                   datasets=tuple(args.dataset or DATASETS),
                   spokes=tuple(args.spokes or (4,)), limit=args.limit, png_path=args.png,
                   bootstrap_servers=args.bootstrap_servers,
                   protocols=tuple(args.protocol) if args.protocol else None,
                   connection=KafkaConnection.from_args(args),
                   repeats=args.repeats if args.repeats is not None else 1,
                   aggregation=args.aggregation,
                   scaling=_one_scaling(args.scaling), quick=args.quick,
                   rates=tuple(r or None for r in args.rate or (0,)),
                   spoke_parallelism=args.spoke_parallelism or 0,
                   execution_mode=args.execution_mode)
    return 0


def _non_negative(text: str) -> int:
    """argparse type: an integer >= 0."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _positive(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


#: ``omldm experiment --help``: plain text (argparse prints it as is)
DESCRIPTION = (
    "Train every synchronization protocol on the same streams and measure it against a "
    "centralized learner (one spoke, the whole stream, computed on the in-process kernel) "
    "and against BSP: prints a markdown table (prequential accuracy, delta vs centralized "
    "and vs BSP, bytes to hubs and spokes, bytes relative to BSP, rounds, records per "
    "second), writes one JSON row per run and a PNG of the loss curves and bytes. "
    "'protocols' and 'quality' name the same experiment. 'sharding' is another one, on "
    "the in-process kernel only: every sharding (random, round-robin, stratified, "
    "distribution-aware) under TAP, SSP and BSP on non-IID streams (label-sorted, "
    "drifting, bursty), repeated with shuffled message timing; it prints the mean and "
    "standard deviation of the prequential accuracy and of the held-out accuracy of the "
    "final global model, the spread across spokes, the loss curve's variance and the "
    "variance ratio random / sharding (papers/001). 'regression' trains an MLP regressor "
    "(MSE) on river's Friedman #1 stream with Centralized, Synchronous, Asynchronous and "
    "EVENFLOW on the in-process kernel and prints the held-out test MSE, bytes and rounds "
    "of each (EVENFLOW's regression setting, papers/003 §IV).")

#: the options only ``experiment sharding`` takes (argparse destinations)
SHARDING_ONLY = ("sharding", "lag", "warmup", "refresh")


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``experiment protocols`` (alias ``experiment quality``) and ``experiment
    sharding`` (:mod:`flink_jobs.experiment_sharding`) to the ``omldm`` command line
    (``subparsers`` is what ``ArgumentParser.add_subparsers`` returned); the command runs
    ``args.fn(args)``. One parser serves both: options of one experiment given to the
    other are refused (``ValueError``)."""
    from flink_jobs.connection import KafkaConnection

    from flink_jobs.experiment_sharding import (LAG, PROTOCOLS, QUICK, SCALINGS,
                                                SHARDING_STRATEGIES, STREAMS)

    p = subparsers.add_parser("experiment", help="run an experiment and write its table",
                              description=DESCRIPTION)
    p.add_argument("which", choices=("protocols", "quality", "sharding", "regression"),
                   help="the experiment: protocols, or quality (the same command), or "
                        "sharding, or regression (an MLPRegressor on river's Friedman #1, "
                        "in process: held-out test MSE per protocol; --limit sets the "
                        "records, 20,000 by default)")
    p.add_argument("--json", required=True, help="where the JSON rows go")
    p.add_argument("--png", default=None, help="the plot (default: the JSON path with .png)")
    p.add_argument("--kernel", choices=("flink", "local"), default=None,
                   help="protocols: the Flink MiniCluster (default) or the in-process kernel; "
                        "the Centralized row always runs in process. sharding: always the "
                        "in-process kernel")
    p.add_argument("--dataset", action="append", choices=tuple(DATASETS) + tuple(STREAMS),
                   help=f"repeatable; default: all of the experiment's (protocols: "
                        f"{', '.join(DATASETS)}; sharding: {', '.join(STREAMS)})")
    p.add_argument("--protocol", action="append",
                   help="only these protocols (repeatable; protocols: Centralized is one of "
                        f"them; sharding: {', '.join(PROTOCOLS)})")
    p.add_argument("--spokes", action="append", type=_positive,
                   help="spokes per run; repeatable for a sweep, e.g. --spokes 2 --spokes 4 "
                        "--spokes 8 (default: protocols 4; sharding 4 and 8)")
    p.add_argument("--aggregation", choices=AGGREGATIONS, default=None,
                   help="protocols: trainingConfiguration.aggregation of every run but "
                        "Centralized and Independent (default: left out, the learner's "
                        "default)")
    p.add_argument("--rate", action="append", type=_non_negative,
                   help="protocols, Flink: the stream's rate, records/s at most (the producer "
                        "writes no faster, and no further ahead of the job than without it); "
                        "0 (the default): as fast as the job keeps up; repeatable for a "
                        "sweep, e.g. --rate 2000 --rate 8000 --rate 0")
    p.add_argument("--spoke-parallelism", type=_non_negative, default=None,
                   help="protocols, Flink: subtasks the spokes are dealt over (0, the "
                        "default and the tables' layout: one per spoke; 1: all in one, as "
                        "omldm serve runs them in thread mode)")
    p.add_argument("--execution-mode", choices=("thread", "process"), default=None,
                   help="protocols, Flink: PyFlink's execution mode of every run (default: "
                        "thread, process for the MLP, which cannot run in thread mode; "
                        "process is flink run's default)")
    p.add_argument("--target-scaler", action="store_true",
                   help="experiment regression: scale the target (TargetStandardScaler; the "
                        "paper's setting does not)")
    p.add_argument("--quick", action="store_true",
                   help=f"a small subset. protocols: only Centralized, Independent, "
                        f"Synchronous and FDA (naive), on the first {QUICK_LIMIT:,} records "
                        f"of each dataset; sharding: {QUICK.stream} ({QUICK.source} records), "
                        f"4 spokes, TAP and BSP, {', '.join(QUICK.shardings)}, "
                        f"{QUICK.repeats} repeats")
    p.add_argument("--repeats", type=_positive, default=None,
                   help="runs of every protocol; the table shows means (default: protocols "
                        "1, sharding 5)")
    p.add_argument("--limit", type=_positive, default=None,
                   help="only the first N records (sharding: of each source, before the "
                        "held-out tail is cut)")
    p.add_argument("--sharding", action="append", choices=SHARDING_STRATEGIES,
                   help="sharding: only these strategies (repeatable; default all; "
                        "partition needs Kafka partitions, which the in-process stream "
                        "lacks)")
    p.add_argument("--scaling", action="append", choices=SCALINGS,
                   help="protocols: trainingConfiguration.scaling of every run but "
                        "Centralized (once; default: left out, none); sharding: only these "
                        "values (repeatable; default all; none leaves the key out)")
    p.add_argument("--lag", type=_positive, default=None,
                   help=f"sharding: records between message deliveries (default {LAG})")
    p.add_argument("--warmup", type=_positive, default=None,
                   help="sharding: training records distribution-aware learns its clusters "
                        "on (default: 10%% of each stream)")
    p.add_argument("--refresh", type=_positive, default=None,
                   help="sharding: distribution-aware learns its clusters again every N "
                        "records (default: never)")
    KafkaConnection.add_arguments(p)
    p.set_defaults(fn=_command)
    return p
