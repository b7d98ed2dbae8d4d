"""Synchronization protocols: each a spoke class and a hub class written only against the
middleware (proxies, promises), never against Flink or Kafka (papers/002 §2.2, §3.3.2).

:func:`make_spoke` / :func:`make_hub` build the node pair of a pipeline from its parsed
Create request; the kernel attaches them to its network contexts.
"""

from __future__ import annotations

from learning.errors import RequestError
from learning.protocols.asynchronous import AsynchronousHub, AsynchronousSpoke
from learning.protocols.base import PipelineHub, PipelineSpoke

__all__ = ["PROTOCOLS", "make_spoke", "make_hub", "PipelineSpoke", "PipelineHub",
           "AsynchronousSpoke", "AsynchronousHub"]

PROTOCOLS: dict[str, tuple[type[PipelineSpoke], type[PipelineHub]]] = {
    "Asynchronous": (AsynchronousSpoke, AsynchronousHub),
}


def _pair(request) -> tuple[type[PipelineSpoke], type[PipelineHub]]:
    name = request.training_configuration.get("protocol", "Asynchronous")
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise RequestError("unknown_protocol", f"protocol {name!r} is not implemented yet; "
                           f"available: {sorted(PROTOCOLS)}", "trainingConfiguration.protocol") from None


def make_spoke(request) -> PipelineSpoke:
    """The spoke node of the pipeline a Create request describes.

    Raises
    ------
    RequestError
        Unknown protocol, learner or preprocessor, or bad hyperparameters.
    """
    return _pair(request)[0](request)


def make_hub(request) -> PipelineHub:
    """The hub node of the pipeline a Create request describes (same errors as make_spoke)."""
    return _pair(request)[1](request)
