"""Synchronization protocols: each a spoke class and a hub class written only against the
middleware (proxies, promises), never against Flink or Kafka (papers/002 §2.2, §3.3.2).

:func:`make_spoke` / :func:`make_hub` build the node pair of a pipeline from its parsed
Create request; the kernel attaches them to its network contexts.
"""

from __future__ import annotations

import inspect

from learning.errors import RequestError
from learning.protocols.adaptive import AdaptiveHub, AdaptiveSpoke
from learning.protocols.asynchronous import AsynchronousHub, AsynchronousSpoke
from learning.protocols.base import PipelineHub, PipelineSpoke
from learning.protocols.easgd import ElasticAveragingHub, ElasticAveragingSpoke
from learning.protocols.evenflow import EvenFlowHub, EvenFlowSpoke
from learning.protocols.fda import FunctionalDynamicAveragingHub, FunctionalDynamicAveragingSpoke
from learning.protocols.independent import IndependentHub, IndependentSpoke
from learning.protocols.ssp import StaleSynchronousHub, StaleSynchronousSpoke
from learning.protocols.synchronous import SynchronousHub, SynchronousSpoke

__all__ = ["PROTOCOLS", "register_protocol", "make_spoke", "make_hub", "PipelineSpoke", "PipelineHub",
           "AsynchronousSpoke", "AsynchronousHub"]

PROTOCOLS: dict[str, tuple[type[PipelineSpoke], type[PipelineHub]]] = {
    "Asynchronous": (AsynchronousSpoke, AsynchronousHub),
    "Independent": (IndependentSpoke, IndependentHub),
    "Synchronous": (SynchronousSpoke, SynchronousHub),
    "SSP": (StaleSynchronousSpoke, StaleSynchronousHub),
    "StaleSynchronous": (StaleSynchronousSpoke, StaleSynchronousHub),
    "EASGD": (ElasticAveragingSpoke, ElasticAveragingHub),
    "ElasticAveraging": (ElasticAveragingSpoke, ElasticAveragingHub),
    "Adaptive": (AdaptiveSpoke, AdaptiveHub),
    "FDA": (FunctionalDynamicAveragingSpoke, FunctionalDynamicAveragingHub),
    "FunctionalDynamicAveraging": (FunctionalDynamicAveragingSpoke, FunctionalDynamicAveragingHub),
    "EVENFLOW": (EvenFlowSpoke, EvenFlowHub),
    "EvenFlow": (EvenFlowSpoke, EvenFlowHub),
}


def register_protocol(name: str, spoke: type[PipelineSpoke], hub: type[PipelineHub]) -> None:
    """Make a protocol available to Create requests under ``name``.

    A job loads user protocols by importing the modules named in its configuration
    (``JobConfig.protocol_modules``), which call this at import time.

    Raises
    ------
    TypeError
        When the classes are not a PipelineSpoke / PipelineHub pair.
    ValueError
        When ``name`` is taken by another pair.
    """
    if not (issubclass(spoke, PipelineSpoke) and issubclass(hub, PipelineHub)):
        raise TypeError(f"protocol {name!r}: need a PipelineSpoke and a PipelineHub subclass")
    old = PROTOCOLS.get(name)
    if old is not None and [_origin(c) for c in old] != [_origin(spoke), _origin(hub)]:
        raise ValueError(f"protocol {name!r} is already registered by {old[0].__module__}")
    PROTOCOLS[name] = (spoke, hub)


def _origin(cls: type) -> tuple[str, str]:
    """Where a class is defined: the same module imported under two names (a test
    collector does that) registers the same protocol, not a rival one."""
    return inspect.getfile(cls), cls.__qualname__


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
