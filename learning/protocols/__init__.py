"""Synchronization protocols: each a spoke class and a hub class written only against the
middleware (proxies, promises), never against Flink or Kafka (papers/002 §2.2, §3.3.2).

:func:`make_spoke` / :func:`make_hub` build the node pair of a pipeline from its parsed
Create request; the kernel attaches them to its network contexts. Each protocol declares
its ``trainingConfiguration`` parameters once (:mod:`learning.protocols.parameters`);
:func:`register_protocol` binds the declaration to the protocol's names.
"""

from __future__ import annotations

import inspect

from learning.errors import RequestError
from learning.protocols import adaptive, asynchronous, easgd, evenflow, fda, ssp, tensair
from learning.protocols.adaptive import AdaptiveHub, AdaptiveSpoke
from learning.protocols.asynchronous import AsynchronousHub, AsynchronousSpoke
from learning.protocols.base import PipelineHub, PipelineSpoke
from learning.protocols.easgd import ElasticAveragingHub, ElasticAveragingSpoke
from learning.protocols.evenflow import EvenFlowHub, EvenFlowSpoke
from learning.protocols.fda import FunctionalDynamicAveragingHub, FunctionalDynamicAveragingSpoke
from learning.protocols.independent import IndependentHub, IndependentSpoke
from learning.protocols.parameters import TRAINING_DEFAULTS, ProtocolParams, declare
from learning.protocols.ssp import StaleSynchronousHub, StaleSynchronousSpoke
from learning.protocols.synchronous import SynchronousHub, SynchronousSpoke
from learning.protocols.tensair import TensAIRHub, TensAIRSpoke

__all__ = ["PROTOCOLS", "register_protocol", "make_spoke", "make_hub", "PipelineSpoke", "PipelineHub",
           "AsynchronousSpoke", "AsynchronousHub"]

#: protocol name → its (spoke, hub) classes (its parameters:
#: :func:`learning.protocols.parameters.declared`)
PROTOCOLS: dict[str, tuple[type[PipelineSpoke], type[PipelineHub]]] = {}


def register_protocol(name: str, spoke: type[PipelineSpoke], hub: type[PipelineHub],
                      parameters: ProtocolParams = ProtocolParams()) -> None:
    """Make a protocol available to Create requests under ``name``.

    A job loads user protocols by importing the modules named in its configuration
    (``JobConfig.protocol_modules``), which call this at import time.

    Parameters
    ----------
    name : str
        What ``trainingConfiguration.protocol`` names it.
    spoke, hub : type
        The node classes.
    parameters : ProtocolParams
        Its own ``trainingConfiguration`` keys (:mod:`learning.protocols.parameters`):
        requests are validated against them, and the schema and the docs list them.

    Raises
    ------
    TypeError
        When the classes are not a PipelineSpoke / PipelineHub pair.
    ValueError
        When ``name`` is taken by another pair, or ``parameters`` redeclares a common key.
    """
    if not (issubclass(spoke, PipelineSpoke) and issubclass(hub, PipelineHub)):
        raise TypeError(f"protocol {name!r}: need a PipelineSpoke and a PipelineHub subclass")
    old = PROTOCOLS.get(name)
    if old is not None and [_origin(c) for c in old] != [_origin(spoke), _origin(hub)]:
        raise ValueError(f"protocol {name!r} is already registered by {old[0].__module__}")
    declare(name, parameters)
    PROTOCOLS[name] = (spoke, hub)


def _origin(cls: type) -> tuple[str, str]:
    """Where a class is defined: the same module imported under two names (a test
    collector does that) registers the same protocol, not a rival one."""
    return inspect.getfile(cls), cls.__qualname__


for _names, _spoke, _hub, _parameters in (
        (("Asynchronous",), AsynchronousSpoke, AsynchronousHub, asynchronous.PARAMETERS),
        (("Independent",), IndependentSpoke, IndependentHub,
         ProtocolParams(reference="no synchronization (for learners that cannot be averaged)")),
        (("Synchronous",), SynchronousSpoke, SynchronousHub,
         ProtocolParams(term="BSP", reference="papers/002 §2.2.1, papers/003 §II.B")),
        (("SSP", "StaleSynchronous"), StaleSynchronousSpoke, StaleSynchronousHub, ssp.PARAMETERS),
        (("EASGD", "ElasticAveraging"), ElasticAveragingSpoke, ElasticAveragingHub,
         easgd.PARAMETERS),
        (("Adaptive",), AdaptiveSpoke, AdaptiveHub, adaptive.PARAMETERS),
        (("FDA", "FunctionalDynamicAveraging"), FunctionalDynamicAveragingSpoke,
         FunctionalDynamicAveragingHub, fda.PARAMETERS),
        (("EVENFLOW", "EvenFlow"), EvenFlowSpoke, EvenFlowHub, evenflow.PARAMETERS),
        (("TensAIR", "Decentralized"), TensAIRSpoke, TensAIRHub, tensair.PARAMETERS)):
    for _name in _names:
        register_protocol(_name, _spoke, _hub, _parameters)


def _pair(request) -> tuple[type[PipelineSpoke], type[PipelineHub]]:
    name = request.training_configuration.get("protocol", TRAINING_DEFAULTS["protocol"])
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
