"""Adaptive communication period (papers/004_3662ede9dd93cf62.txt §3.5): elastic averaging
exchanges triggered by the training loss instead of a fixed period.

Each spoke accumulates the training loss it suffers (the prequential per-record losses of
its mini-batches); when the sum since its last exchange reaches ``lossThreshold`` it runs
one asynchronous EASGD exchange (:mod:`learning.protocols.easgd`, the parameter
exchanging of papers/004) and resets the sum. While the model improves the loss drops, so
the period between exchanges grows: "the communication period will increase as the
training loss drops". A learner without a loss (NaN) falls back to one exchange every
``miniBatches`` mini-batches.

A warm-up (``warmupRounds``, 20 rounds by default) is EASGD's (:mod:`learning.protocols.easgd`,
"Warm-up"): a push every round, whatever the loss; the summed loss counts from the last
exchange, the warm-up's records included, so the first exchange after it usually comes at
once.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from learning.protocols.easgd import PARAMETERS as EASGD_PARAMETERS
from learning.protocols.easgd import ElasticAveragingHub, ElasticAveragingSpoke
from learning.protocols.parameters import Param, ProtocolParams

__all__ = ["AdaptiveSpoke", "AdaptiveHub", "LOSS_THRESHOLD", "PARAMETERS", "PERIODS_KEPT",
           "short_period_warnings"]

#: ``trainingConfiguration.lossThreshold``: the summed loss that triggers an exchange
LOSS_THRESHOLD = Param("lossThreshold", float, 10.0, "summed training loss since the last "
                       "exchange that triggers the next", interval="(0, inf)")
#: Adaptive's declaration: EASGD's and the loss threshold (:mod:`learning.protocols.parameters`)
PARAMETERS = ProtocolParams(reference="papers/004 §3.5",
                            params=(*EASGD_PARAMETERS.params, LOSS_THRESHOLD),
                            rules=EASGD_PARAMETERS.rules)


#: exchanges whose periods a spoke remembers (a Query's ``meanPeriod``), since the last
#: Update at most
PERIODS_KEPT = 1000
#: periods after which a spoke whose mean period is at most one mini-batch and a half
#: draws a warning (the loss threshold is reached within about one mini-batch)
SHORT_PERIODS_AFTER = 10


class AdaptiveHub(ElasticAveragingHub):
    """The same centre-variable shard as EASGD; a Query warns when the loss threshold is
    reached within about one mini-batch (the summed loss is in the learner's units: a
    regressor's squared errors reach the default 10 at once)."""

    def query_response(self, request_id: Any, spokes: list[dict]) -> dict:
        out = super().query_response(request_id, spokes)
        batch = out["protocol"].get("effectiveMiniBatchSize") or 1
        out["protocol"]["warnings"] = short_period_warnings(
            [s.get("protocol", {}) for s in spokes], batch)
        return out


def short_period_warnings(protos: list[dict], batch: int) -> list[str]:
    """The Query's ``protocol.warnings`` of an Adaptive pipeline: one message when spokes
    (``protos``: each spoke's ``protocol`` report) that exchanged at least
    :data:`SHORT_PERIODS_AFTER` times did so every 1.5 mini-batches of ``batch`` records
    or sooner; else none. A spoke's ``lossPerMiniBatch`` that was inf or NaN came as null
    (JSON) and is left out of the quoted loss (it raised, and the Query went unanswered)."""
    short = [p for p in protos if p.get("periods", 0) >= SHORT_PERIODS_AFTER
             and p["meanPeriod"] <= 1.5 * batch]
    if not short:
        return []
    losses = [p["lossPerMiniBatch"] for p in short if p["lossPerMiniBatch"] is not None]
    return [f"lossThreshold {short[0]['lossThreshold']:g} is reached within about one "
            f"mini-batch on {len(short)} of {len(protos)} spokes (an exchange every "
            f"{min(p['meanPeriod'] for p in short):.0f} records, a mini-batch's summed loss "
            f"about {max(losses, default=math.nan):.3g}), so Adaptive exchanges as EASGD "
            f"does after every mini-batch; raise trainingConfiguration.lossThreshold with an "
            f"Update (it is a sum of the learner's losses)"]


class AdaptiveSpoke(ElasticAveragingSpoke):
    """Exchange when the loss accumulated since the last exchange reaches the threshold."""

    peer = AdaptiveHub

    def __init__(self, request) -> None:
        super().__init__(request)
        self.threshold = LOSS_THRESHOLD.of(request.training_configuration)
        self._loss_mark = 0.0
        # records between consecutive exchanges, the last PERIODS_KEPT
        self.periods: deque[int] = deque(maxlen=PERIODS_KEPT)
        self.exchanges = 0
        self._fitted_mark = 0  # records fitted at the last exchange

    def on_update(self) -> None:
        super().on_update()
        self.threshold = LOSS_THRESHOLD.of(self.request.training_configuration)
        self.periods.clear()  # a Query's meanPeriod is the periods under this threshold

    def accumulated_loss(self) -> float:
        return self.loss_sum - self._loss_mark

    def due(self) -> bool:
        acc = self.accumulated_loss()
        if math.isnan(acc):
            return super().due()
        return acc >= self.threshold

    #: class defaults for spokes restored from snapshots taken before they existed (their
    #: periods a list of every exchange's)
    exchanges = 0
    _fitted_mark: int | None = None

    def on_exchange(self) -> None:
        if self._fitted_mark is None:  # an older snapshot's list of every period
            self._fitted_mark = sum(self.periods)
            self.periods = deque(self.periods, maxlen=PERIODS_KEPT)
        self.periods.append(self.fitted - self._fitted_mark)
        self._fitted_mark = self.fitted
        self.exchanges += 1
        self._loss_mark = self.loss_sum

    def protocol_statistics(self) -> dict:
        out = super().protocol_statistics()
        periods = self.periods
        mean = sum(periods) / len(periods) if periods else None
        out.update({"lossThreshold": self.threshold, "accumulatedLoss": self.accumulated_loss(),
                    "lastPeriod": periods[-1] if periods else None, "exchanges": self.exchanges,
                    "periods": len(periods), "meanPeriod": mean,
                    "lossPerMiniBatch": (self.loss_sum / self.fitted * self.mini_batch_size
                                         if self.fitted else None)})
        return out


AdaptiveHub.peer = AdaptiveSpoke
