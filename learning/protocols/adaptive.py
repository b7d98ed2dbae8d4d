"""Adaptive communication period (papers/004_3662ede9dd93cf62.txt §3.5): elastic averaging
exchanges triggered by the training loss instead of a fixed period.

Each spoke accumulates the training loss it suffers (the prequential per-record losses of
its mini-batches); when the sum since its last exchange reaches ``lossThreshold`` it runs
one asynchronous EASGD exchange (:mod:`learning.protocols.easgd`, the parameter
exchanging of papers/004) and resets the sum. While the model improves the loss drops, so
the period between exchanges grows: "the communication period will increase as the
training loss drops". A learner without a loss (NaN) falls back to one exchange every
``miniBatches`` mini-batches.
"""

from __future__ import annotations

import math

from learning.protocols.easgd import PARAMETERS as EASGD_PARAMETERS
from learning.protocols.easgd import ElasticAveragingHub, ElasticAveragingSpoke
from learning.protocols.parameters import Param, ProtocolParams

__all__ = ["AdaptiveSpoke", "AdaptiveHub", "LOSS_THRESHOLD", "PARAMETERS"]

#: ``trainingConfiguration.lossThreshold``: the summed loss that triggers an exchange
LOSS_THRESHOLD = Param("lossThreshold", float, 10.0, "summed training loss since the last "
                       "exchange that triggers the next", interval="(0, inf)")
#: Adaptive's declaration: EASGD's and the loss threshold (:mod:`learning.protocols.parameters`)
PARAMETERS = ProtocolParams(reference="papers/004 §3.5",
                            params=(*EASGD_PARAMETERS.params, LOSS_THRESHOLD),
                            rules=EASGD_PARAMETERS.rules)


class AdaptiveHub(ElasticAveragingHub):
    """The same centre-variable shard as EASGD."""


class AdaptiveSpoke(ElasticAveragingSpoke):
    """Exchange when the loss accumulated since the last exchange reaches the threshold."""

    peer = AdaptiveHub

    def __init__(self, request) -> None:
        super().__init__(request)
        self.threshold = LOSS_THRESHOLD.of(request.training_configuration)
        self._loss_mark = 0.0
        self.periods: list[int] = []  # records between consecutive exchanges

    def on_update(self) -> None:
        super().on_update()
        self.threshold = LOSS_THRESHOLD.of(self.request.training_configuration)

    def accumulated_loss(self) -> float:
        return self.loss_sum - self._loss_mark

    def due(self) -> bool:
        acc = self.accumulated_loss()
        if math.isnan(acc):
            return super().due()
        return acc >= self.threshold

    def on_exchange(self) -> None:
        self.periods.append(self.fitted - sum(self.periods))
        self._loss_mark = self.loss_sum

    def protocol_statistics(self) -> dict:
        out = super().protocol_statistics()
        out.update({"lossThreshold": self.threshold, "accumulatedLoss": self.accumulated_loss(),
                    "lastPeriod": self.periods[-1] if self.periods else None})
        return out


AdaptiveHub.peer = AdaptiveSpoke
