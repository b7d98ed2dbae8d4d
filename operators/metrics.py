"""Flink metrics of the spoke and hub operators, per pipeline.

Metric group ``omldm`` of each operator subtask (Flink adds the job, operator and subtask
as scope variables: ``subtask_index`` and ``operator_name`` labels in Prometheus), with a
key-value group ``pipeline`` (a ``pipeline`` label) per pipeline id:

=========================  =====  ==========================================================
name                       side   value
=========================  =====  ==========================================================
fitted                     spoke  records fitted by this spoke's pipeline (records)
predicted                  spoke  forecasting records answered (records)
rejected                   spoke  records refused (dead letters; records)
batches                    spoke  mini-batches fitted
prequentialAccuracyPpm     spoke  prequential (test-then-train) accuracy, parts per million
messagesToHubs/bytesToHubs spoke  envelopes and bytes sent to hubs
messagesFromHubs/...Bytes  spoke  envelopes and bytes received from hubs (psMessages)
rollingAccuracyPpm         spoke  classifiers: accuracy over this spoke's share of the
                                  rolling window (``metricsWindow``), parts per million
rollingMacroF1Ppm          spoke  classifiers: macro F1 over it, parts per million
rollingKappaPpm            spoke  classifiers: Cohen's kappa over it, parts per million
                                  (negative when worse than chance)
rollingMaeMicro            spoke  regressors: mean absolute error over it, millionths of
                                  the label's unit
rollingRmseMicro           spoke  regressors: root mean squared error, likewise
rollingR2Ppm               spoke  regressors: R² over it, parts per million
rollingLogLossMicro        spoke  binary classifiers with class probabilities (MLP, CNN,
                                  Hoeffding trees): log loss over it, millionths
rollingRocAucPpm           spoke  likewise: ROC AUC over it, parts per million
driftsDetected             spoke  pipelines with a ``driftDetector``: concept drifts its
                                  detector found in this spoke's prequential errors
                                  (:mod:`learning.drift`)
updates                    hub    updates applied to the global model (synchronizations)
messagesToSpokes/...       hub    envelopes and bytes sent to spokes, received from them
feedbackRoundTripMs        hub    milliseconds from a hub→spoke frame sent to the spoke's
                                  acknowledgement of it (the last one; see
                                  :meth:`operators.hub_kernel.HubKernel.acknowledged`)
=========================  =====  ==========================================================

The rolling quality metrics are each spoke's own (:class:`learning.metrics.QualityState`,
river's definitions): a pipeline's value is about the average over its spoke subtasks
(exact in a Query, which merges the spokes' statistics). They appear once the window has
records; a pipeline of the other task, or with ``metricsWindow`` 0, has none (nor has log
loss and ROC AUC a learner without probabilities, or a pipeline of three classes or more).
The Grafana dashboard (:mod:`deploy.grafana`) does not chart these two.

a meter ``fittedPerSecond`` per pipeline on spokes (records fitted per second, Flink's
``MeterView`` over 60 s), and, without the pipeline group, the kernel's service counters (``requestsAccepted``,
``requestsRejected``, ``badMessages``, ``handlerErrors``, ``recordsWithoutPipeline``,
``restores``, ``dataRecords``, ``dataBatches``: their ratio is the mean batch size; on
hubs ``weightsRecords``, records written to the weights topic).

All are Flink *counters* holding the current value (Flink's Prometheus reporter exports
counters as gauges). They are refreshed from the kernel at most once per
``refresh_s`` seconds, on the operator's own thread: PyFlink gauges would be called back
from the reporter's thread, which thread mode (pemja) does not survive reliably.
"""

from __future__ import annotations

import time
from typing import Any, Callable

__all__ = ["OperatorMetrics", "SPOKE_METRICS", "HUB_METRICS"]


def _sum(counter) -> int:
    return int(sum(counter.values()))


def _rolling(value: str, scale: float) -> Callable[[Any], int]:
    """Reads a spoke's own rolling ``value`` (:meth:`learning.metrics.QualityState.own_values`),
    scaled to an integer; raises (the metric is skipped) where the pipeline has none."""
    def read(node) -> int:
        got = node.quality.own_values()["rolling"][value]
        if got is None:
            raise LookupError(value)
        return round(scale * got)
    return read


SPOKE_METRICS: dict[str, Callable[[Any], int]] = {
    "fitted": lambda n: n.fitted,
    "predicted": lambda n: n.predicted,
    "rejected": lambda n: n.rejected,
    "batches": lambda n: n.batches,
    "prequentialAccuracyPpm": lambda n: round(1e6 * n.correct / n.fitted) if n.fitted else 0,
    "messagesToHubs": lambda n: _sum(n.stats.sent_messages),
    "bytesToHubs": lambda n: _sum(n.stats.sent_bytes),
    "messagesFromHubs": lambda n: _sum(n.stats.received_messages),
    "bytesFromHubs": lambda n: _sum(n.stats.received_bytes),
    **{name: _rolling(value, scale) for name, value, scale in (
        ("rollingAccuracyPpm", "accuracy", 1e6), ("rollingMacroF1Ppm", "macroF1", 1e6),
        ("rollingKappaPpm", "kappa", 1e6), ("rollingMaeMicro", "mae", 1e6),
        ("rollingRmseMicro", "rmse", 1e6), ("rollingR2Ppm", "r2", 1e6),
        ("rollingLogLossMicro", "logLoss", 1e6), ("rollingRocAucPpm", "rocAuc", 1e6))},
    "driftsDetected": lambda n: n.drift.detected,  # AttributeError (skipped) without one
}
HUB_METRICS: dict[str, Callable[[Any], int]] = {
    "updates": lambda n: n.updates,
    "messagesToSpokes": lambda n: _sum(n.stats.sent_messages),
    "bytesToSpokes": lambda n: _sum(n.stats.sent_bytes),
    "messagesFromSpokes": lambda n: _sum(n.stats.received_messages),
    "bytesFromSpokes": lambda n: _sum(n.stats.received_bytes),
    "feedbackRoundTripMs": lambda n: round(n.feedback_round_trip_ms),
}
#: per-pipeline metrics that are a mean over the spokes of one subtask where it hosts several
#: (``JobConfig.spoke_parallelism``); the others are sums
AVERAGED = frozenset({"prequentialAccuracyPpm", "rollingAccuracyPpm", "rollingMacroF1Ppm",
                      "rollingKappaPpm", "rollingMaeMicro", "rollingRmseMicro", "rollingR2Ppm",
                      "rollingLogLossMicro", "rollingRocAucPpm"})
SERVICE_METRICS = ("requestsAccepted", "requestsRejected", "badMessages", "handlerErrors",
                   "recordsWithoutPipeline", "restores", "dataRecords", "dataBatches",
                   "weightsRecords")


class OperatorMetrics:
    """Keeps Flink counters equal to a kernel's statistics.

    Parameters
    ----------
    runtime_context : RuntimeContext
        The operator's (``open``); its metric group gets the ``omldm`` group.
    per_pipeline : dict[str, callable]
        :data:`SPOKE_METRICS` or :data:`HUB_METRICS`: name → function of a node → int.
    refresh_s : float
        Seconds between refreshes (a refresh reads every pipeline's statistics).
    """

    def __init__(self, runtime_context, per_pipeline: dict[str, Callable[[Any], int]],
                 refresh_s: float = 1.0) -> None:
        self.group = runtime_context.get_metrics_group().add_group("omldm")
        self.per_pipeline = per_pipeline
        self.refresh_s = refresh_s
        self.next = 0.0
        self.counters: dict[tuple, Any] = {}
        self.values: dict[tuple, int] = {}
        self.meters: dict[int, Any] = {}

    def _set(self, key: tuple, value: int) -> None:
        counter = self.counters.get(key)
        if counter is None:
            group = self.group if len(key) == 1 else self.group.add_group("pipeline", str(key[0]))
            counter = self.counters[key] = group.counter(key[-1])
            self.values[key] = 0
        delta = int(value) - self.values[key]
        if delta > 0:
            counter.inc(delta)
            if key[-1] == "fitted" and len(key) == 2:
                meter = self.meters.get(key[0])
                if meter is None:
                    meter = self.meters[key[0]] = self.group.add_group(
                        "pipeline", str(key[0])).meter("fittedPerSecond")
                meter.mark_event(delta)
        elif delta < 0:  # after a restore the statistics may go back
            counter.dec(-delta)
        self.values[key] = int(value)

    def refresh(self, kernel, force: bool = False) -> None:
        """Set the counters from a kernel's ``nodes`` (pipeline id → node) and its
        ``service()`` counters, at most every ``refresh_s`` seconds unless ``force``.
        ``kernel`` may be a list of the kernels one subtask hosts (several spokes in one
        subtask): their counters are added up, and the metrics in :data:`AVERAGED` are
        their mean."""
        now = time.monotonic()
        if now < self.next and not force:
            return
        self.next = now + self.refresh_s
        kernels = kernel if isinstance(kernel, list) else [kernel]
        totals: dict[tuple, list[int]] = {}
        for one in kernels:
            service = one.service()
            for name in SERVICE_METRICS:
                if name in service:
                    totals.setdefault((name,), []).append(service[name])
            for pid, node in one.nodes.items():
                for name, read in self.per_pipeline.items():
                    try:
                        value = read(node)
                    except Exception:  # a protocol without that statistic
                        continue
                    totals.setdefault((pid, name), []).append(value)
        for key, values in totals.items():
            self._set(key, round(sum(values) / len(values)) if key[-1] in AVERAGED
                      else sum(values))
