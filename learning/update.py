"""Applying an Update request to a running pipeline without losing its model
(papers/002 §3.4: "change/modify the hyperparameters of an algorithm that already runs on
the module and fine-tune it in real-time").

An Update may name new hyperparameters of the learner and of each preprocessor (same names,
same order as created) and new training-configuration values. Everything is validated
first; then all of it is applied, or none of it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from learning.drift import check_drift_pairing
from learning.errors import HyperparameterError, RequestError
from learning.hyperparameters import typed
from learning.pipeline import Pipeline
from learning.protocols.parameters import (TRAINING_PARAMETERS, declared,
                                           validate_training_configuration)
from learning.scaling import check_scaling

if TYPE_CHECKING:  # a type only: learning.requests imports the protocols, which import this
    from learning.requests import Request

__all__ = ["apply_update", "FIXED_TRAINING_KEYS"]

#: Training-configuration keys a running pipeline cannot change (delete and create instead).
FIXED_TRAINING_KEYS = ("protocol", "hubParallelism")


def _fixed(msg: str, field: str, update: Request) -> RequestError:
    return RequestError("unsupported", msg, field, update.request_id)


def _changes(current: Request, update: Request, pipeline: Pipeline) -> list[tuple[Any, dict, str]]:
    out = []
    if update.learner is not None:
        name = update.learner.get("name")
        if name is not None and name != current.learner.get("name"):
            raise _fixed(f"the learner cannot be replaced ({current.learner.get('name')!r} → "
                         f"{name!r}); delete and create the pipeline", "learner.name", update)
        if update.learner.get("parameters"):
            raise _fixed("an Update changes hyperparameters, not learned parameters",
                         "learner.parameters", update)
        out.append((pipeline.learner, update.learner.get("hyperParameters") or {}, "learner"))
    if update.pre_processors:
        if len(update.pre_processors) != len(current.pre_processors):
            raise _fixed(f"the pipeline has {len(current.pre_processors)} preprocessors; an "
                         f"Update lists the same ones, in order", "preProcessors", update)
        for i, (new, old, pre) in enumerate(zip(update.pre_processors, current.pre_processors,
                                                pipeline.preprocessors)):
            if new.get("name") not in (None, old.get("name")):
                raise _fixed(f"preprocessor {i} is {old.get('name')!r}, not {new.get('name')!r}",
                             f"preProcessors[{i}].name", update)
            out.append((pre, new.get("hyperParameters") or {}, f"preProcessors[{i}]"))
    for key in FIXED_TRAINING_KEYS:
        if key in update.training_configuration and \
                update.training_configuration[key] != current.training_configuration.get(key):
            raise _fixed(f"{key} of a running pipeline cannot change", f"trainingConfiguration.{key}",
                         update)
    protocol = current.training_configuration.get("protocol")
    own = declared().get(protocol)
    for p in own.params if own is not None else ():  # a protocol's fixed parameters
        new, old = update.training_configuration.get(p.name), \
            current.training_configuration.get(p.name, p.default)
        if p.fixed and p.name in update.training_configuration and new != old:
            raise _fixed(f"{p.name} of a running {protocol} pipeline cannot change ({old!r} → "
                         f"{new!r}): its nodes' state is built for it; delete and create the "
                         f"pipeline", f"trainingConfiguration.{p.name}", update)
    return out


def _own_keys(config: dict) -> dict:
    """A pipeline's ``trainingConfiguration`` without the keys its protocol does not
    declare: a pipeline created before another protocol's keys were refused (restored
    from a snapshot or savepoint) may hold some, which it ignored, and the merged
    configuration an Update is checked as would then be refused for them whatever the
    Update says. An unknown protocol keeps everything (its own check refuses it)."""
    own = declared().get(config.get("protocol"))
    if own is None:
        return config
    return {k: v for k, v in config.items() if k in TRAINING_PARAMETERS or k in own}


def apply_update(current: Request, update: Request, pipeline: Pipeline) -> Request:
    """Validate and apply ``update`` to ``pipeline``; returns the pipeline's new definition.

    Parameters
    ----------
    current : Request
        The pipeline's definition (its Create request, with earlier updates folded in).
    update : Request
        The Update request.
    pipeline : Pipeline
        The live pipeline; its learned state is kept.

    Raises
    ------
    RequestError
        ``invalid_hyperparameter`` (field names it), ``unsupported`` (replacing the
        learner, the preprocessor chain, the protocol or the hub count), ``schema`` (the
        training configuration, merged with the update, breaks a declared parameter or
        rule, e.g. EASGD's α·ρ ≤ 1: :mod:`learning.protocols.parameters`) or
        ``unsupported_pairing`` (``scaling`` ``learning-rate`` / ``both`` with the learner
        as it would be having no step size, e.g. PA switched to mode 0:
        :func:`learning.scaling.check_scaling`; a ``driftDetector`` the learner's task
        cannot feed: :func:`learning.drift.check_drift_pairing`); nothing changed.
    """
    changes = [(c, typed(type(c), {k: v for k, v in kw.items() if v is not None}), where)
               for c, kw, where in _changes(current, update, pipeline)]  # JSON's 64.0 is 64
    would_be = pipeline.learner  # the learner with the update's hyperparameters
    for component, kw, where in changes:  # dry run on clones: all or nothing
        try:
            clone = component.clone()
            clone.update_hyperparameters(**kw)
        except HyperparameterError as exc:
            name = getattr(exc, "name", None)
            raise RequestError("invalid_hyperparameter", str(exc),
                               f"{where}.hyperParameters" + (f".{name}" if name else ""),
                               update.request_id) from None
        if component is pipeline.learner:
            would_be = clone
    config = {**_own_keys(current.training_configuration), **update.training_configuration}
    try:  # the running configuration as it would be, checked whole: all or nothing
        validate_training_configuration(config, create=True)
        check_scaling(would_be, TRAINING_PARAMETERS["scaling"].of(config),
                      current.learner.get("name"))
        check_drift_pairing(TRAINING_PARAMETERS["driftDetector"].of(config), would_be.task)
    except RequestError as exc:
        exc.request_id = update.request_id
        raise
    for component, kw, _ in changes:
        if kw:
            component.update_hyperparameters(**kw)
    learner = dict(current.learner)
    learner["hyperParameters"] = pipeline.learner.hyperparameters()
    pre = [dict(spec, hyperParameters=p.hyperparameters())
           for spec, p in zip(current.pre_processors, pipeline.preprocessors)]
    return replace(current, learner=learner, pre_processors=pre, training_configuration=config)
