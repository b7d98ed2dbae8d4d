"""Exceptions of the ML library.

:class:`LearningError` is the root of every error :mod:`learning` raises; it derives from
:class:`middleware.errors.OmldmError`, omldm's single root (learning may import the
middleware: DESIGN.md, layers).
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from middleware.errors import OmldmError

__all__ = ["LearningError", "HyperparameterError", "ParameterError", "RequestError",
           "check_real", "check_choice", "check_bool", "check_hyperparameters"]


class LearningError(OmldmError):
    """Root of all errors raised by :mod:`learning`."""


class HyperparameterError(LearningError, ValueError):
    """A hyperparameter (or parameter) value was rejected.

    Attributes
    ----------
    name : str
        The parameter's name, e.g. ``"C"``; request parsing turns it into a field path such
        as ``"learner.hyperParameters.C"``.
    """

    def __init__(self, name: str, message: str):
        super().__init__(message)
        self.name = name


class ParameterError(HyperparameterError):
    """A model parameter (learned state, e.g. a weight matrix of the wrong shape) was rejected.

    ``name`` is the parameter's key, e.g. ``"W"`` or ``"classes"``.
    """


class RequestError(LearningError):
    """A request (papers/002_9b954bd89ad87406.txt §3.4) was rejected.

    Answered to the user as JSON ``{"code", "message", "field"}``; never fatal to the job.

    Parameters
    ----------
    code : str
        Machine-readable reason: ``invalid_json``, ``invalid_message``, ``too_large``,
        ``schema``, ``unknown_protocol``, ``unknown_learner``, ``unknown_preprocessor``,
        ``invalid_hyperparameter``, ``invalid_parameter``, ``unsupported_pairing``,
        ``exists``, ``not_found``, ``too_many_hubs``, ``too_many_pipelines``,
        ``unsupported`` (the full list, with meanings: learning/schema/response.schema.json).
    message : str
        Human-readable explanation naming the offending field and value.
    field : str or None
        Dotted JSON path of the offending key, list items as ``[i]``
        (e.g. ``"trainingConfiguration.miniBatchSize"``, ``"preProcessors[0].name"``);
        None when the request as a whole is at fault.
    request_id : JSON scalar or None
        The request's ``requestId`` when it could be read, so the answer can be matched.

    Attributes
    ----------
    pipeline : int or None
        The request's ``id`` where it is a valid pipeline id (set by
        :func:`learning.requests.parse_request`), for the answer.
    kind : str or None
        The request's ``request`` where it is a valid kind (``Create``, ...), likewise.
    """

    def __init__(self, code: str, message: str, field: str | None = None,
                 request_id: Any = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field
        self.request_id = request_id
        self.pipeline: int | None = None
        self.kind: str | None = None

    def to_json(self) -> dict:
        """``{"code", "message", "field"}``, JSON-safe."""
        return {"code": self.code, "message": self.message, "field": self.field}

    def __repr__(self) -> str:
        return (f"RequestError(code={self.code!r}, message={self.message!r}, "
                f"field={self.field!r})")


# --- tiny validators shared by learners and preprocessors -------------------------------

def check_real(name: str, value: Any, *, gt: float | None = None,
               ge: float | None = None) -> float:
    """Return ``value`` as a float after checking it is a finite real number within bounds.

    Raises
    ------
    HyperparameterError
        E.g. ``C must be > 0, got -1``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise HyperparameterError(name, f"{name} must be a real number, got {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise HyperparameterError(name, f"{name} must be finite, got {value!r}")
    if gt is not None and not v > gt:
        raise HyperparameterError(name, f"{name} must be > {gt:g}, got {value!r}")
    if ge is not None and not v >= ge:
        raise HyperparameterError(name, f"{name} must be >= {ge:g}, got {value!r}")
    return v


def check_choice(name: str, value: Any, choices: tuple) -> Any:
    """Check ``value`` is one of ``choices``, of the same type (``1.0`` or ``True`` is not ``1``).

    Raises
    ------
    HyperparameterError
        E.g. ``mode must be one of 0, 1, 2, got 3``.
    """
    if not any(value == c and type(value) is type(c) for c in choices):
        allowed = ", ".join(repr(c) for c in choices)
        raise HyperparameterError(name, f"{name} must be one of {allowed}, got {value!r}")
    return value


def check_bool(name: str, value: Any) -> bool:
    """Check ``value`` is a bool.

    Raises
    ------
    HyperparameterError
        E.g. ``learn_intercept must be true or false, got 'yes'``.
    """
    if not isinstance(value, bool):
        raise HyperparameterError(name, f"{name} must be true or false, got {value!r}")
    return value


def check_hyperparameters(owner: str, given: dict, known: tuple) -> None:
    """Reject names not in ``known``.

    Raises
    ------
    HyperparameterError
        E.g. ``unknown hyperparameter 'c' for PAClassifier; expected one of C, mode``.
    """
    for key in given:
        if key not in known:
            raise HyperparameterError(
                str(key), f"unknown hyperparameter {key!r} for {owner}; expected one of "
                f"{', '.join(known)}")
