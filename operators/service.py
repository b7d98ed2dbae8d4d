"""The service's policy toward requests, shared by the spoke and hub kernels: limits, size
checks, what PyFlink's execution mode allows, and the JSON of an error response.

Nothing here knows Flink: the kernels (:mod:`operators.spoke_kernel`,
:mod:`operators.hub_kernel`) apply it, whichever host runs them.
"""

from __future__ import annotations

import importlib
from typing import Any

from learning.errors import RequestError
from learning.registry import check_model_size, check_sizes
from middleware.node import DEFAULT_MAX_MESSAGE_BYTES

__all__ = ["DEFAULT_LIMITS", "DEFAULT_MAX_BACKLOG_BYTES", "limits_of", "check_sizes",
           "check_model_size", "check_execution_mode", "error_response", "import_protocols"]

#: The service's limits (a job may override each, :class:`flink_jobs.config.JobConfig`):
#: ``max_request_bytes`` (bytes; larger requests: ``too_large``), ``max_pipelines`` (more:
#: ``too_many_pipelines``), ``max_model_params`` (a learner hyperparameter or parameter
#: above it, e.g. a 10⁹-wide model: ``too_large``), ``max_message_bytes`` (bytes; larger
#: envelopes are fragmented, since psMessages crosses Kafka, whose default message limit
#: is 1 MB), ``max_response_params`` (larger models are summarized in a Query),
#: ``max_backlog_bytes`` (bytes of records one paused pipeline holds on one spoke; past
#: it, its records are dead-lettered with code ``backlog_full``,
#: :class:`operators.spoke_kernel.SpokeContext`).
#: Two settings ride along that are not limits: ``prediction_scores`` (bool), whether each
#: prediction also carries the class probabilities where the learner has them, and
#: ``weights_every_ms`` (int milliseconds, or None: off), how often hubs publish each
#: pipeline's global model to the weights topic (:mod:`operators.weights`).
#: 64 MiB: about 390,000 Shuttle records (75 bytes of JSON each), ~10 s of a BSP pipeline
#: that falls behind the soak's stream (benchmarks/soak.py)
DEFAULT_MAX_BACKLOG_BYTES = 64 << 20
DEFAULT_LIMITS = {"max_request_bytes": 1_000_000, "max_pipelines": 64,
                  "max_model_params": 10_000_000, "max_message_bytes": DEFAULT_MAX_MESSAGE_BYTES,
                  "max_response_params": 10_000, "max_backlog_bytes": DEFAULT_MAX_BACKLOG_BYTES,
                  "prediction_scores": False,
                  "weights_every_ms": None}


def limits_of(limits: dict | None) -> dict:
    """:data:`DEFAULT_LIMITS` with ``limits`` (may be None) applied.

    Raises
    ------
    ValueError
        For a key that is not a limit.
    """
    unknown = set(limits or {}) - set(DEFAULT_LIMITS)
    if unknown:
        raise ValueError(f"unknown service limits {sorted(unknown)}; known: {sorted(DEFAULT_LIMITS)}")
    return {**DEFAULT_LIMITS, **(limits or {})}


def import_protocols(modules: tuple[str, ...]) -> None:
    """Import the modules that register user protocols (trusted job configuration)."""
    for name in modules:
        importlib.import_module(name)


def check_execution_mode(learner, learner_name: str, execution_mode: str) -> None:
    """Refuse, in PyFlink's ``thread`` mode, a learner that needs its own interpreter
    (``needs_own_interpreter``: PyTorch).

    Raises
    ------
    RequestError
        ``unsupported`` (field ``learner.name``).
    """
    if execution_mode == "thread" and learner.needs_own_interpreter:
        raise RequestError("unsupported", f"{learner_name} needs PyFlink's process mode "
                           "(python.execution-mode: process; omldm --mode process): its native "
                           "bindings deadlock in an interpreter embedded in the JVM",
                           "learner.name")


def error_response(err: RequestError, request_id: Any = None, pipeline: Any = None,
                   request: Any = None) -> dict:
    """The JSON answer to a request that failed: ``{"requestId", "id", "request",
    "status": "error", "error": {"code", "message", "field"}}``."""
    return {"requestId": request_id, "id": pipeline, "request": request, "status": "error",
            "error": err.to_json()}
