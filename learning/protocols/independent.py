"""Independent learners: no synchronization at all (papers/002_9b954bd89ad87406.txt
§3.3.3: CVFDT, the Hoeffding tree, is the one learner "not parallelized").

Each spoke fits and predicts with its own model, from its own share of the stream, and
never sends a parameter; the hub exists only to gather the spokes' statistics for Query
requests (one one-way ``report`` per spoke per Query, see
:class:`learning.protocols.base.PipelineSpoke`). With one spoke this is a plain
single-node learner; with ``k`` spokes it is ``k`` models, each knowing ``1/k`` of the
stream. It is the only protocol a learner with ``averageable = False`` may use
(:func:`learning.registry.check_pairing`), and any other learner may use it too, e.g. as
the no-communication baseline of a protocol comparison.
"""

from __future__ import annotations

from learning.protocols.base import PipelineHub, PipelineSpoke

__all__ = ["IndependentSpoke", "IndependentHub"]


class IndependentHub(PipelineHub):
    """Answers Queries; holds no model.

    ``self.learner`` is built from the request like every hub's (so its hyperparameters
    are reported and the kernel can snapshot it), but it is never fitted or updated. A
    Query response's ``model`` says ``available: false``: each spoke has its own model
    and there is no global one.
    """

    def model_summary(self, limit: int) -> dict:
        return {"available": False, "reason": "protocol 'Independent' keeps one model per "
                "spoke and no global model"}


class IndependentSpoke(PipelineSpoke):
    """A spoke that learns alone: mini-batches are fitted and nothing is ever pushed."""

    peer = IndependentHub

    def statistics(self) -> dict:
        out = super().statistics()
        out["protocol"] = {"independent": True}
        return out


IndependentHub.peer = IndependentSpoke
