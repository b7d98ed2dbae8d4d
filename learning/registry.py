"""Names in requests → learner and preprocessor classes (papers/002 §3.4).

A spec is ``{"name": str, "hyperParameters": dict | None, "parameters": dict | None}``,
the same shape :meth:`Learner.to_json` writes, so a model can be restored from a spec.
"""

from __future__ import annotations

from typing import Any

from learning.errors import HyperparameterError, ParameterError, RequestError
from learning.learners.base import Learner
from learning.learners.passive_aggressive import PAClassifier
from learning.preprocessors.base import Preprocessor
from learning.preprocessors.scalers import MinMaxScaler, StandardScaler

__all__ = ["LEARNERS", "PREPROCESSORS", "register_learner", "register_preprocessor",
           "make_learner", "make_preprocessor", "make_pipeline"]

#: learner name in a request → class
LEARNERS: dict[str, type[Learner]] = {
    "PA": PAClassifier,
    "PassiveAggressive": PAClassifier,
    "PAClassifier": PAClassifier,
}

#: preprocessor name in a request → class
PREPROCESSORS: dict[str, type[Preprocessor]] = {
    "StandardScaler": StandardScaler,
    "MinMaxScaler": MinMaxScaler,
}


def register_learner(name: str, cls: type[Learner]) -> None:
    """Make ``cls`` available to requests under ``name``."""
    if not (isinstance(cls, type) and issubclass(cls, Learner)):
        raise TypeError(f"{cls!r} is not a Learner class")
    LEARNERS[name] = cls


def register_preprocessor(name: str, cls: type[Preprocessor]) -> None:
    """Make ``cls`` available to requests under ``name``."""
    if not (isinstance(cls, type) and issubclass(cls, Preprocessor)):
        raise TypeError(f"{cls!r} is not a Preprocessor class")
    PREPROCESSORS[name] = cls


def _build(spec: Any, table: dict, field: str, code: str, kind: str) -> Any:
    if not isinstance(spec, dict):
        raise RequestError("schema", f"{field} must be an object, got {spec!r}", field)
    name = spec.get("name")
    if not isinstance(name, str):
        raise RequestError("schema", f"{field}.name must be a string, got {name!r}",
                           f"{field}.name")
    cls = table.get(name)
    if cls is None:
        raise RequestError(code, f"unknown {kind} {name!r}; known: {', '.join(sorted(table))}",
                           f"{field}.name")
    for key in ("hyperParameters", "parameters"):
        if spec.get(key) is not None and not isinstance(spec[key], dict):
            raise RequestError("schema", f"{field}.{key} must be an object or null",
                               f"{field}.{key}")
    try:
        return cls.from_json(spec)
    except ParameterError as e:
        raise RequestError("invalid_parameter", str(e), f"{field}.parameters.{e.name}") \
            from None
    except HyperparameterError as e:
        raise RequestError("invalid_hyperparameter", str(e),
                           f"{field}.hyperParameters.{e.name}") from None
    except (TypeError, ValueError) as e:
        raise RequestError("invalid_hyperparameter", f"{field}: {e}",
                           f"{field}.hyperParameters") from None


def make_learner(spec: dict, field: str = "learner") -> Learner:
    """Build a learner from ``{"name", "hyperParameters", "parameters"}``.

    Parameters
    ----------
    spec : dict
        Null or missing ``hyperParameters`` / ``parameters`` (or fields of them) take
        the defaults.
    field : str
        Path of ``spec`` in its request, used in error fields.

    Raises
    ------
    learning.errors.RequestError
        ``unknown_learner`` (field ``learner.name``), ``invalid_hyperparameter`` (field
        e.g. ``learner.hyperParameters.C``), ``invalid_parameter`` (field e.g.
        ``learner.parameters.W``) or ``schema``.
    """
    return _build(spec, LEARNERS, field, "unknown_learner", "learner")


def make_preprocessor(spec: dict, index: int = 0) -> Preprocessor:
    """Build the preprocessor at position ``index`` of a request's ``preProcessors``.

    Raises
    ------
    learning.errors.RequestError
        ``unknown_preprocessor`` (field ``preProcessors[i].name``),
        ``invalid_hyperparameter``, ``invalid_parameter`` or ``schema``.
    """
    return _build(spec, PREPROCESSORS, f"preProcessors[{index}]", "unknown_preprocessor",
                  "preprocessor")


def make_pipeline(pre_processors: list[dict] | None, learner: dict):
    """Build a :class:`~learning.pipeline.Pipeline` from request specs.

    Raises
    ------
    learning.errors.RequestError
        As :func:`make_learner` and :func:`make_preprocessor`.
    """
    from learning.pipeline import Pipeline

    pres = [make_preprocessor(spec, i) for i, spec in enumerate(pre_processors or [])]
    return Pipeline(pres, make_learner(learner))
