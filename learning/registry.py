"""Names in requests → learner and preprocessor classes (papers/002 §3.4).

A spec is ``{"name": str, "hyperParameters": dict | None, "parameters": dict | None}``,
the same shape :meth:`Learner.to_json` writes, so a model can be restored from a spec:
every class is registered under its own class name (what ``to_json`` writes) besides its
short names.

Learners: ``PA`` / ``PassiveAggressive`` / ``PAClassifier``, ``PARegressor``, ``SVM`` /
``OnlineSVM``, ``Ridge`` / ``OnlineRidge``, ``KMeans``, ``HoeffdingTree``,
``HoeffdingAdaptiveTree``, ``MLP``, ``CNN``, ``MLPRegressor``. Preprocessors:
``StandardScaler``, ``MinMaxScaler``, ``FeatureSelector``, ``RunningMeanVariance``,
``PolynomialFeatures``, ``TargetStandardScaler``, ``StatImputer``.

:func:`check_pairing` refuses a learner that cannot be averaged (``averageable = False``,
the Hoeffding trees) with any protocol but ``Independent``.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping

from learning import hyperparameters
from learning.errors import HyperparameterError, ParameterError, RequestError
from learning.learners.base import Learner
from learning.learners.hoeffding import HoeffdingAdaptiveTree, HoeffdingTree
from learning.learners.kmeans import KMeans
from learning.learners.neural import CNN, MLP, MLPRegressor
from learning.learners.pa_regressor import PARegressor
from learning.learners.passive_aggressive import PAClassifier
from learning.learners.ridge import OnlineRidge
from learning.learners.svm import OnlineSVM
from learning.pipeline import Pipeline
from learning.preprocessors.base import Preprocessor
from learning.preprocessors.imputer import StatImputer
from learning.preprocessors.polynomial import PolynomialFeatures
from learning.preprocessors.scalers import MinMaxScaler, StandardScaler
from learning.preprocessors.selection import FeatureSelector
from learning.preprocessors.statistics import RunningMeanVariance
from learning.preprocessors.target import TargetStandardScaler

__all__ = ["LEARNERS", "PREPROCESSORS", "BUILT_IN_LEARNERS", "BUILT_IN_PREPROCESSORS",
           "INDEPENDENT", "register_learner", "register_preprocessor", "make_learner",
           "make_preprocessor", "make_pipeline", "model_width", "model_learner_spec",
           "check_sizes", "check_model_size", "check_pairing", "check_preprocessor_order",
           "catalogue"]

#: learner name in a request → class
LEARNERS: dict[str, type[Learner]] = {
    "PA": PAClassifier,
    "PassiveAggressive": PAClassifier,
    "PAClassifier": PAClassifier,
    "PARegressor": PARegressor,
    "SVM": OnlineSVM,
    "OnlineSVM": OnlineSVM,
    "Ridge": OnlineRidge,
    "OnlineRidge": OnlineRidge,
    "KMeans": KMeans,
    "HoeffdingTree": HoeffdingTree,
    "HoeffdingAdaptiveTree": HoeffdingAdaptiveTree,
    "MLP": MLP,
    "CNN": CNN,
    "MLPRegressor": MLPRegressor,
}

#: preprocessor name in a request → class
PREPROCESSORS: dict[str, type[Preprocessor]] = {
    "StandardScaler": StandardScaler,
    "MinMaxScaler": MinMaxScaler,
    "FeatureSelector": FeatureSelector,
    "RunningMeanVariance": RunningMeanVariance,
    "PolynomialFeatures": PolynomialFeatures,
    "TargetStandardScaler": TargetStandardScaler,
    "StatImputer": StatImputer,
}

#: the learners and preprocessors omldm comes with (what the request schema file
#: describes), whatever is registered later
BUILT_IN_LEARNERS: Mapping[str, type[Learner]] = MappingProxyType(dict(LEARNERS))
BUILT_IN_PREPROCESSORS: Mapping[str, type[Preprocessor]] = MappingProxyType(dict(PREPROCESSORS))

#: the protocol that synchronizes nothing: the only one a non-averageable learner may use
INDEPENDENT = "Independent"


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
    if spec.get("hyperParameters"):  # JSON's 64.0 for an integer hyperparameter is 64
        spec = {**spec, "hyperParameters": hyperparameters.typed(cls, spec["hyperParameters"])}
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


def model_width(pre_processors: list[dict] | None, n_features: int | None) -> int | None:
    """The width of the records the learner sees: a record of ``n_features`` features
    (``learner.parameters.n_features`` of a request: the record layout) through the
    preprocessors in order (feature selection and polynomial features change it; None
    stays None).

    Raises
    ------
    learning.errors.RequestError
        As :func:`make_preprocessor`; ``invalid_hyperparameter`` (field
        ``preProcessors[i].hyperParameters``) when preprocessor ``i`` cannot take records of
        the width it gets (an index out of range) or leaves none.
    """
    if n_features is None:
        return None
    width = n_features
    for i, spec in enumerate(pre_processors or ()):
        try:
            width = make_preprocessor(spec, i).output_width(width)
        except ValueError as exc:
            raise RequestError("invalid_hyperparameter", f"preprocessor {i} "
                               f"({spec.get('name')}) on records of {width} features: {exc}",
                               f"preProcessors[{i}].hyperParameters") from None
        if width < 1:
            raise RequestError("invalid_hyperparameter", f"preprocessor {i} "
                               f"({spec.get('name')}) leaves no feature of records of "
                               f"{n_features}", f"preProcessors[{i}].hyperParameters")
    return width


def model_learner_spec(pre_processors: list[dict] | None, learner: dict) -> dict:
    """A request's ``learner`` spec as the learner is built: ``parameters.n_features``
    declares the width of a record, and the learner takes records as the preprocessors
    make them (:func:`model_width`). Every learner built from a request goes through this
    once; a learner's own ``to_json`` already holds its model width.

    Raises
    ------
    learning.errors.RequestError
        As :func:`model_width`.
    """
    params = (learner or {}).get("parameters") or {}
    n = params.get("n_features")
    if not pre_processors or not isinstance(n, int) or isinstance(n, bool):
        return learner
    width = model_width(pre_processors, n)
    return learner if width == n else {**learner, "parameters": {**params, "n_features": width}}


def check_sizes(learner: dict | None, pre_processors: list | None,
                limit: int) -> None:
    """Refuse absurd sizes (a 10⁹-wide model) before anything is built: any integer
    hyperparameter (or integer in a list of them, e.g. layer sizes) and any top-level
    integer parameter (e.g. ``n_features``) of a request's ``learner`` and
    ``pre_processors`` above ``limit``.

    Raises
    ------
    RequestError
        ``too_large``, with the field at fault.
    """
    def too_big(value) -> bool:
        return (isinstance(value, (int, float)) and not isinstance(value, bool)
                and float(value).is_integer() and value > limit)

    specs = [("learner", learner or {})] + [
        (f"preProcessors[{i}]", p) for i, p in enumerate(pre_processors or ())]
    for where, spec in specs:
        for key, value in ((spec or {}).get("hyperParameters") or {}).items():
            values = value if isinstance(value, list) else [value]
            for v in values:
                if too_big(v):
                    raise RequestError("too_large", f"{where}.hyperParameters.{key} = {v} exceeds "
                                       f"the service's max_model_params = {limit}",
                                       f"{where}.hyperParameters.{key}")
        for key, value in ((spec or {}).get("parameters") or {}).items():
            if too_big(value):
                raise RequestError("too_large", f"{where}.parameters.{key} = {value} exceeds "
                                   f"the service's max_model_params = {limit}",
                                   f"{where}.parameters.{key}")


def check_model_size(learner: dict, limit: int, layout: dict | None = None) -> None:
    """Refuse a model larger than ``limit`` parameters before it is allocated: the size
    :meth:`learning.learners.base.Learner.declared_size` computes from ``learner``'s
    hyperparameters and declared layout (``parameters`` ``n_features``, ``classes``; for
    an Update, ``learner`` is what it changes and ``layout`` the pipeline's current
    ``{"name", "hyperParameters", "n_features", "classes"}``). Each number alone may be
    below the limit and their product far above (10⁶ features × 1,000 classes: 8 GB per
    node, which a Create's validation or an Update allocated on every spoke and hub before
    this check). ``learner.parameters.n_features`` is the model's width here
    (:func:`model_learner_spec`).

    Raises
    ------
    RequestError
        ``too_large`` (field ``learner.parameters``).
    """
    base = layout or {}
    cls = LEARNERS.get(learner.get("name") or base.get("name"))
    if cls is None:
        return  # an unknown learner is refused when it is built
    hyper = {**(base.get("hyperParameters") or {}), **(learner.get("hyperParameters") or {})}
    params = {k: base.get(k) for k in ("n_features", "classes")}
    params.update({k: v for k, v in (learner.get("parameters") or {}).items()
                   if k in ("n_features", "classes") and v is not None})
    size = cls.declared_size(hyper, params)
    if size > limit:
        raise RequestError("too_large", f"{cls.__name__} would have {size:,} parameters "
                           f"(n_features {params.get('n_features')}, "
                           f"{len(params.get('classes') or ())} classes declared, "
                           f"hyperParameters {hyper or 'by default'}), above the service's "
                           f"max_model_params = {limit:,}", "learner.parameters")


def make_pipeline(pre_processors: list[dict] | None, learner: dict) -> Pipeline:
    """Build a :class:`~learning.pipeline.Pipeline` from request specs: the one builder,
    for a Create request's ``preProcessors`` and ``learner`` as for the output of
    :meth:`Pipeline.to_json <learning.pipeline.Pipeline.to_json>` (learned state included)
    or an export; ``learner.parameters.n_features`` is a record's width, the learner is
    built for what the preprocessors make of it (:func:`model_learner_spec`).

    Parameters
    ----------
    pre_processors : list of dict or None
        Preprocessor specs, in order (None: none).
    learner : dict
        The learner spec.

    Raises
    ------
    learning.errors.RequestError
        As :func:`make_learner` and :func:`make_preprocessor`.
    """
    pres = [make_preprocessor(spec, i) for i, spec in enumerate(pre_processors or [])]
    return Pipeline(pres, make_learner(model_learner_spec(pre_processors, learner)))


def check_pairing(learner_spec: Any, protocol_name: str) -> None:
    """Refuse a learner that cannot be averaged paired with a synchronizing protocol.

    Parameters
    ----------
    learner_spec : dict
        The request's learner spec (``{"name", ...}``); an unknown or missing name passes
        (:func:`make_learner` reports it).
    protocol_name : str
        ``trainingConfiguration.protocol`` of the request.

    Raises
    ------
    learning.errors.RequestError
        ``unsupported_pairing`` (field ``trainingConfiguration.protocol``) when the learner
        has ``averageable = False`` and the protocol is not ``Independent``.

    Examples
    --------
    >>> check_pairing({"name": "HoeffdingTree"}, "Independent")
    >>> check_pairing({"name": "PA"}, "Asynchronous")
    >>> check_pairing({"name": "HoeffdingTree"}, "Asynchronous")
    Traceback (most recent call last):
    ...
    learning.errors.RequestError: HoeffdingTree cannot be averaged; use protocol 'Independent'
    """
    name = learner_spec.get("name") if isinstance(learner_spec, dict) else None
    cls = LEARNERS.get(name) if isinstance(name, str) else None
    if cls is None or cls.averageable or protocol_name == INDEPENDENT:
        return
    raise RequestError("unsupported_pairing",
                       f"{name} cannot be averaged; use protocol {INDEPENDENT!r}",
                       "trainingConfiguration.protocol")


def check_preprocessor_order(pre_processors: list, learner_spec: Any) -> None:
    """Refuse a preprocessor of the target (``targets``:
    :class:`~learning.preprocessors.TargetStandardScaler`) that has no regressor to serve,
    or a second one; and one that must come first (``fills_missing``:
    :class:`~learning.preprocessors.StatImputer`) anywhere else.

    Parameters
    ----------
    pre_processors : list of dict
        The request's ``preProcessors``; unknown names pass (:func:`make_preprocessor`
        reports them).
    learner_spec : dict or None
        The request's learner; an unknown or missing name passes.

    Raises
    ------
    learning.errors.RequestError
        ``unsupported_pairing`` (field ``preProcessors[i]``) for a target preprocessor
        before a learner whose ``task`` is not regression (a classifier's labels, a
        clusterer's records have no target to scale), or for a second one; for a
        ``fills_missing`` preprocessor after another.
    """
    name = learner_spec.get("name") if isinstance(learner_spec, dict) else None
    learner = LEARNERS.get(name) if isinstance(name, str) else None
    seen = False
    for i, spec in enumerate(pre_processors):
        given = spec.get("name") if isinstance(spec, dict) else None
        cls = PREPROCESSORS.get(given) if isinstance(given, str) else None
        if cls is not None and cls.fills_missing and i > 0:
            raise RequestError("unsupported_pairing", f"preProcessors[{i}]: {given} must come "
                               "first (it fills missing values before any other preprocessor "
                               "sees them)", f"preProcessors[{i}]")
        if cls is None or not cls.targets:
            continue
        if seen:
            raise RequestError("unsupported_pairing", f"preProcessors[{i}]: a pipeline takes "
                               f"one preprocessor of the target", f"preProcessors[{i}]")
        seen = True
        if learner is not None and learner.task != "regression":
            raise RequestError("unsupported_pairing",
                               f"{given} scales a regressor's target; {name} is a "
                               f"{learner.task} learner", f"preProcessors[{i}]")


def catalogue(table: Mapping[str, type]) -> list[dict]:
    """What ``omldm list learners`` / ``preprocessors`` shows: one entry per class of
    ``table`` (e.g. :data:`LEARNERS`), in registration order, with every name it is
    registered under and :func:`learning.hyperparameters.describe`'s description.

    Returns
    -------
    list of dict
        ``{"names", "class", "summary", "declared", "hyperParameters"}``, JSON-safe.
    """
    out: list[dict] = []
    seen: dict[type, dict] = {}
    for name, cls in table.items():
        if cls in seen:
            seen[cls]["names"].append(name)
            continue
        seen[cls] = {"names": [name], **hyperparameters.describe(cls)}
        out.append(seen[cls])
    return out
