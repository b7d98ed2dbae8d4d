"""One pipeline streamed through the in-process kernel (:class:`operators.local.LocalNetwork`,
the job's own spoke and hub kernels in one Python process): what the experiments' local
runs share (``omldm experiment protocols --kernel local``, :mod:`flink_jobs.experiment`;
``omldm experiment sharding``, :mod:`flink_jobs.experiment_sharding`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["LocalRun", "stream_local"]


@dataclass
class LocalRun:
    """What :func:`stream_local` leaves: the network after the stream and the last Query.

    Attributes
    ----------
    net : operators.local.LocalNetwork
        The network, quiet: its spokes' and hubs' nodes (``net.spokes``, ``net.hubs``)
        hold the final local and global models.
    final : dict
        The last Query's response (:meth:`learning.protocols.base.PipelineHub.query_response`).
    curve : list of [records fitted, cumulative mean loss]
    seconds : float
        Wall time from the first record to the last Query.
    queries : int
        Queries sent at the end (each closes a BSP/SSP round left open).
    report_bytes : int
        Bytes of the Query reports in ``final``'s statistics (all Queries but the last).
    dealt : int
        Records the sharder dealt to spokes, ``distribution-aware``'s broadcast copies
        counted once per spoke.
    """

    net: Any
    final: dict
    curve: list
    seconds: float
    queries: int
    report_bytes: int
    dealt: int


def stream_local(request: dict, X: np.ndarray, y: np.ndarray, *, spokes: int = 4,
                 every: int = 5, points: int = 40, seed: int = 0, sharding: str = "random",
                 sharding_options: dict | None = None, lag: int = 1,
                 shuffle: bool = False) -> LocalRun:
    """Stream ``(X, y)`` through one pipeline on :class:`operators.local.LocalNetwork` (the
    job's own kernels, in process, one hub): the Create ``request``, then the records as
    the job gets them (JSON), dealt to spokes by the job's sharder, then Queries until every
    dealt record is counted.

    Parameters
    ----------
    request : dict
        The Create request (e.g. :func:`flink_jobs.experiment.create_request`).
    X : (n_records, n_features) float64
    y : (n_records,) labels
    spokes : int
        Spokes of the network.
    every : int
        Every ``every``-th record is forecast (no label), the others are trained on;
        0: all trained on.
    points : int
        About how many points the ``loss_curve`` gets.
    seed : int
        Seed of the network: the ``random`` sharding's draws (one per record, what
        ``numpy.random.default_rng(seed).integers(0, spokes, n)`` gives), the
        ``distribution-aware`` sharding's k-means and the ``shuffle`` order.
    sharding : str
        A strategy of :data:`operators.sharding.SHARDINGS` (:meth:`LocalNetwork.stream`).
    sharding_options : dict or None
        ``warmup``, ``clusters``, ``refresh`` (:func:`operators.sharding.make_sharder`).
    lag : int
        Records between deliveries: the records are streamed ``lag`` at a time (each
        spoke's share of them as one batch) and the messages they caused are delivered
        after each ``lag`` records; 1: after every record. With ``lag > 1`` spokes train
        on while their pushes wait, so asynchronous protocols install stale models.
    shuffle : bool
        Deliver queued messages in a seeded random order (:class:`LocalNetwork`).

    Returns
    -------
    LocalRun
        The quiet network, the last Query's response and the loss curve.

    Raises
    ------
    ValueError
        When the Create is refused, or for ``lag`` below 1 or an unknown sharding.
    """
    from operators.local import LocalNetwork

    if lag < 1:
        raise ValueError(f"lag must be >= 1, got {lag}")
    pid = request["id"]
    net = LocalNetwork(n_spokes=spokes, n_hubs=1, network=pid, shuffle=shuffle, seed=seed,
                       sharding=sharding, sharding_options=sharding_options)
    net.request(request)
    created = net.outputs["responses"][-1]
    if created["status"] != "ok":
        raise ValueError(f"Create refused: {created['error']}")
    feats, labels = X.tolist(), y.tolist()
    records = [(False, {"id": i, "features": feats[i]}) if every and i % every == every - 1
               else (True, {"id": i, "features": feats[i], "label": labels[i]})
               for i in range(len(feats))]
    curve, step = [], max(1, len(X) // points)
    t0 = time.perf_counter()
    for start in range(0, len(records), lag):
        end = min(start + lag, len(records))
        net.stream(records[start:end])
        if end // step > start // step:  # crossed a curve point
            fitted = sum(sp.fitted for sp in net.spokes)
            if fitted:
                curve.append([fitted, sum(sp.loss_sum for sp in net.spokes) / fitted])
    dealt = sum(net.sharder.per_spoke)

    def query() -> dict:
        net.request({"id": pid, "request": "Query", "requestId": "final"})
        return net.outputs["responses"][-1]

    # a Query closes a synchronous round that a spoke without records left open; the
    # records paused behind it are fitted after that Query's statistics were taken
    final, queries, before = query(), 1, -1
    while final["fitted"] + final["predicted"] < dealt and queries < 100 \
            and final["fitted"] + final["predicted"] > before:  # while Queries still help
        before = final["fitted"] + final["predicted"]
        final, queries = query(), queries + 1
    seconds = time.perf_counter() - t0
    report_bytes = 0
    if queries > 1:  # the reports of the earlier Queries are in these statistics
        again = query()
        report_bytes = (again["protocol"]["bytesToHubs"] - final["protocol"]["bytesToHubs"]) \
            * (queries - 1)
    return LocalRun(net, final, curve, seconds, queries, max(0, report_bytes), dealt)
