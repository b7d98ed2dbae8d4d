"""Parsing and validation of control requests (papers/002_9b954bd89ad87406.txt §3.4).

A request is a JSON object on the requests topic::

    {"id": 0, "request": "Create", "requestId": "abc",
     "preProcessors": [{"name": "StandardScaler"}],
     "learner": {"name": "PA", "hyperParameters": {"C": 0.01}},
     "trainingConfiguration": {"protocol": "Asynchronous", "miniBatchSize": 64}}

:func:`parse_request` checks it against ``schema/request.schema.json`` (JSON Schema draft
2020-12), then checks the protocol name and the ``trainingConfiguration`` against the
protocol's declared parameters (:mod:`learning.protocols.parameters`), and builds the
learner and preprocessors once, so that every mistake is reported when the request
arrives, as a :class:`RequestError` with a machine-readable ``code`` and the dotted
``field`` at fault. Bad requests are answered, never fatal.

The schema's ``trainingConfiguration`` part is generated from those declarations, and
each built-in learner's and preprocessor's ``hyperParameters`` from its ``HYPERPARAMETERS``
(:mod:`learning.hyperparameters`) (:func:`request_schema`; :func:`write_schema` writes the
file). A request's hyperparameters are checked by those declarations themselves (any
registered class's, with messages naming the value and what is allowed), not by the schema.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection, Mapping

import jsonschema
import orjson

from learning.drift import check_drift_pairing
from learning.errors import RequestError
from learning.protocols.parameters import (TRAINING_DEFAULTS, TRAINING_PARAMETERS,
                                           ProtocolParams, configuration_schema, declared,
                                           generation, validate_training_configuration)
from learning.scaling import check_scaling

__all__ = ["Request", "parse_request", "REQUEST_TYPES", "TRAINING_DEFAULTS", "SCHEMA_PATH",
           "request_schema", "write_schema"]

#: The request kinds.
REQUEST_TYPES = ("Create", "Update", "Delete", "Query")
#: the largest pipeline id (request.schema.json's ``id`` maximum: a Java int in the job)
MAX_ID = 2**31 - 1

SCHEMA_PATH = Path(__file__).with_name("schema") / "request.schema.json"
_SCALARS = (str, int, float, bool, type(None))


def _named(table: Mapping[str, type], kind: str) -> dict:
    """``$defs.learner`` / ``$defs.preProcessor``: a component whose ``hyperParameters``
    are those its ``name`` declares (:func:`learning.hyperparameters.component_schema`)."""
    from learning.hyperparameters import component_schema

    groups: dict[type, list[str]] = {}
    for name, cls in table.items():
        groups.setdefault(cls, []).append(name)
    return {"description": f"A {kind}; the hyperParameters each name allows. Generated from "
                           "the classes' HYPERPARAMETERS (learning.requests.write_schema); do "
                           "not edit by hand.",
            "$ref": "#/$defs/component",
            "allOf": [{"if": {"properties": {"name": {"enum": names}}, "required": ["name"]},
                       "then": {"properties": {"hyperParameters": component_schema(cls)}}}
                      for cls, names in groups.items()]}


def request_schema(table: Mapping[str, ProtocolParams] | None = None,
                   learners: Mapping[str, type] | None = None,
                   preprocessors: Mapping[str, type] | None = None, *,
                   hyperparameters: bool = True) -> dict:
    """The request schema: ``schema/request.schema.json`` with its
    ``$defs.trainingConfiguration`` made from the declared parameters
    (:func:`learning.protocols.parameters.configuration_schema`) and its ``$defs.learner``
    / ``$defs.preProcessor`` from the declared hyperparameters of each learner and
    preprocessor (:func:`learning.hyperparameters.component_schema`).

    Parameters
    ----------
    table : mapping or None
        Protocol name → :class:`~learning.protocols.parameters.ProtocolParams`; None: every
        registered protocol's.
    learners, preprocessors : mapping or None
        Name → class; None: the built-in ones
        (:data:`learning.registry.BUILT_IN_LEARNERS`, ``BUILT_IN_PREPROCESSORS``).
    hyperparameters : bool
        False leaves ``hyperParameters`` any object, as :func:`parse_request` checks it
        (the declarations check it after, naming the value and what is allowed).
    """
    from learning.registry import BUILT_IN_LEARNERS, BUILT_IN_PREPROCESSORS

    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    schema["$defs"]["trainingConfiguration"] = configuration_schema(table)
    for key, kind, given, built_in in (("learner", "learner", learners, BUILT_IN_LEARNERS),
                                       ("preProcessor", "preprocessor", preprocessors,
                                        BUILT_IN_PREPROCESSORS)):
        schema["$defs"][key] = _named(built_in if given is None else given, kind) \
            if hyperparameters else {"$ref": "#/$defs/component"}
    schema["properties"]["learner"] = {"$ref": "#/$defs/learner"}
    schema["properties"]["preProcessors"]["items"]["$ref"] = "#/$defs/preProcessor"
    return schema


def _dumps(value: Any, level: int = 0, width: int = 96) -> str:
    """JSON, 2-space indented, with every object or array that fits in ``width``
    characters on one line."""
    flat = json.dumps(value, ensure_ascii=False)
    if not isinstance(value, (dict, list)) or not value or 2 * level + len(flat) <= width:
        return flat
    pad = "  " * (level + 1)
    if isinstance(value, dict):
        items = [f"{pad}{json.dumps(k, ensure_ascii=False)}: {_dumps(v, level + 1, width)}"
                 for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + "  " * level + "}"
    items = [pad + _dumps(v, level + 1, width) for v in value]
    return "[\n" + ",\n".join(items) + "\n" + "  " * level + "]"


def write_schema(path: Path = SCHEMA_PATH,
                 table: Mapping[str, ProtocolParams] | None = None) -> None:
    """Write :func:`request_schema` to ``path``: run it after changing a declaration
    (``tests/test_protocol_parameters.py`` checks that the file agrees)."""
    path.write_text(_dumps(request_schema(table)) + "\n", encoding="utf-8")


@functools.lru_cache(maxsize=1)
def _validator(declarations: int) -> jsonschema.Draft202012Validator:
    """The validator of :func:`request_schema` as of the ``declarations``-th declaration
    (a protocol registered later may bring its own keys)."""
    return jsonschema.Draft202012Validator(request_schema(hyperparameters=False))


@dataclass(frozen=True)
class Request:
    """A validated request.

    Attributes
    ----------
    id : int
        The pipeline id, 0 .. 2**31 - 1.
    request : str
        ``"Create"``, ``"Update"``, ``"Delete"`` or ``"Query"``.
    request_id : JSON scalar or None
        The client's ``requestId``, echoed in responses.
    pre_processors : list of dict
        Specs ``{"name", "hyperParameters", "parameters"}``, in pipeline order.
    learner : dict or None
        The learner spec; always present for Create.
    training_configuration : dict
        For Create, with :data:`TRAINING_DEFAULTS` filled in; for Update only the keys
        given (an Update changes only what it names); empty for Delete and Query.
    export : bool
        Query only: also answer ``export``, a Create request that re-creates the pipeline
        from its global model (:meth:`learning.protocols.sharding.ShardedHub.export`).
    version : int or None
        Create only: the global model version ``learner.parameters`` were exported at
        (an export's ``version``); the hubs count their updates on from it.
    """

    id: int
    request: str
    request_id: Any = None
    pre_processors: list = field(default_factory=list)
    learner: dict | None = None
    training_configuration: dict = field(default_factory=dict)
    export: bool = False
    version: int | None = None

    def to_json(self) -> dict:
        """The request as a JSON-safe dict in the wire's camelCase keys (parses back)."""
        d: dict = {"id": self.id, "request": self.request}
        if self.request_id is not None:
            d["requestId"] = self.request_id
        if self.pre_processors:
            d["preProcessors"] = self.pre_processors
        if self.learner is not None:
            d["learner"] = self.learner
        if self.training_configuration:
            d["trainingConfiguration"] = self.training_configuration
        if self.export:
            d["export"] = True
        if self.version is not None:
            d["version"] = self.version
        return d


def _path(parts: Any) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _join(base: str, key: str) -> str:
    return f"{base}.{key}" if base else key


def _schema_error(error: jsonschema.ValidationError, request_id: Any,
                  doc: Mapping[str, Any] | None = None) -> RequestError:
    """Turn the most relevant schema violation of ``doc`` into
    ``RequestError(code="schema")``."""
    where = _path(error.absolute_path)
    instance = error.instance
    config = doc.get("trainingConfiguration") if doc is not None else None
    if isinstance(config, dict) and (
            error.validator is None and where == "trainingConfiguration"
            or error.validator == "anyOf" and where.startswith("trainingConfiguration.")):
        # a key the named protocol does not take (a false subschema): the validator says
        # whose; a value none of a key's forms allows: the validator says which it allows
        try:
            validate_training_configuration(config, create=doc.get("request") == "Create")
        except RequestError as exc:
            exc.request_id = request_id
            return exc
    if error.validator == "additionalProperties" and isinstance(instance, dict):
        allowed = set(error.schema.get("properties", {}))
        key = sorted(str(k) for k in instance if k not in allowed)[0]
        allowed_text = ", ".join(sorted(allowed))
        return RequestError("schema", f"unknown key {_join(where, key)!r}; allowed here: "
                            f"{allowed_text}", _join(where, key), request_id)
    if error.validator == "required" and isinstance(instance, dict):
        key = next((k for k in error.validator_value if k not in instance),
                   error.validator_value[0])
        return RequestError("schema", f"missing required key {_join(where, key)!r}",
                            _join(where, key), request_id)
    return RequestError("schema", f"{where or 'request'}: {error.message}", where or None,
                        request_id)


#: An oversized request is still parsed, up to this many times the limit, only to answer
#: it with its ``requestId``.
OVERSIZE_PARSE_FACTOR = 64


def _too_large(raw: bytes | str, size: int, max_bytes: int) -> RequestError:
    """``too_large``, carrying the request's ``requestId`` when it can be read."""
    request_id = None
    if size <= OVERSIZE_PARSE_FACTOR * max_bytes:
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            doc = None
        if isinstance(doc, dict) and isinstance(doc.get("requestId"), _SCALARS):
            request_id = doc.get("requestId")
    return RequestError("too_large", f"request is {size} bytes, the limit is {max_bytes}",
                        None, request_id)


def _load(raw: bytes | str | dict, max_bytes: int) -> dict:
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        if len(raw) > max_bytes or (4 * len(raw) > max_bytes
                                    and len(raw.encode("utf-8", "surrogatepass")) > max_bytes):
            raise _too_large(raw, len(raw.encode("utf-8", "surrogatepass")), max_bytes)
    elif isinstance(raw, (bytes, bytearray, memoryview)):
        if len(raw) > max_bytes:
            raise _too_large(raw, len(raw), max_bytes)
    else:
        raise RequestError("invalid_json",
                           f"a request must be bytes, str or dict, got {type(raw).__name__}")
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise RequestError("invalid_json", f"request is not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise RequestError("invalid_json",
                           f"a request must be a JSON object, got {type(doc).__name__}")
    return doc


def _check_protocol(name: str, served: Collection[str] | None, request_id: Any) -> None:
    known = declared()
    served = known if served is None else served
    if name in served:
        return
    fld = "trainingConfiguration.protocol"
    if name in known:
        raise RequestError("unknown_protocol", f"protocol {name!r} is not implemented yet",
                           fld, request_id)
    raise RequestError("unknown_protocol", f"unknown protocol {name!r}; implemented: "
                       f"{', '.join(sorted(served))}", fld, request_id)


def parse_request(raw: bytes | str | dict, max_bytes: int = 1_000_000,
                  protocols: Collection[str] | None = None,
                  max_model_params: int | None = None) -> Request:
    """Parse and validate one request.

    Parameters
    ----------
    raw : bytes, str or dict
        The message (UTF-8 JSON) or an already decoded object.
    max_bytes : int
        Largest accepted message, in bytes (not checked for a dict).
    protocols : collection of str or None
        Protocol names that can be served; None means every registered one
        (:func:`learning.protocols.register_protocol`). A registered protocol not among them
        is "not implemented yet".
    max_model_params : int or None
        A Create or Update with an integer hyperparameter or parameter above it
        (:func:`learning.registry.check_sizes`), or a Create whose model would have more
        parameters (float64 numbers, :func:`learning.registry.check_model_size`), is
        refused before anything is built; None: not checked.

    Returns
    -------
    Request

    Raises
    ------
    learning.errors.RequestError
        ``code`` is one of

        - ``too_large``: more than ``max_bytes`` bytes (field None), or a size above
          ``max_model_params`` (field the number's, or ``learner.parameters`` for a
          Create's model);
        - ``invalid_json``: not parseable, or not a JSON object (field None);
        - ``schema``: violates ``request.schema.json`` or a declared parameter
          (:func:`learning.protocols.parameters.validate_training_configuration`: a
          protocol's required parameters and rules), or for Create ``featureMin`` /
          ``featureMax`` arrays of another length than the learner's ``n_features``;
          ``field`` is the dotted path of the offending key (e.g. ``trainingConfiguration.miniBatchSize``), an unknown key is
          named by its own path;
        - ``unknown_protocol`` (field ``trainingConfiguration.protocol``);
        - ``unknown_learner``, ``unknown_preprocessor``, ``invalid_hyperparameter``,
          ``invalid_parameter`` (from :mod:`learning.registry`) for Create, and for
          Update where it names a learner or preprocessors;
        - ``unsupported_pairing`` for Create: a learner that cannot be averaged with a
          synchronizing protocol (:func:`learning.registry.check_pairing`), a
          preprocessor of the target before a learner that is not a regressor, or a second
          one, or a preprocessor that fills missing values after another
          (:func:`learning.registry.check_preprocessor_order`), or ``scaling``
          ``learning-rate`` / ``both`` for a learner without a step size
          (:func:`learning.scaling.check_scaling`), or a ``driftDetector`` the learner's
          task cannot feed (:func:`learning.drift.check_drift_pairing`); an Update is
          checked by :func:`learning.update.apply_update`, which knows the running learner.

        Its ``request_id`` holds the request's ``requestId`` whenever the message was a
        JSON object with a scalar ``requestId``.
    """
    doc = _load(raw, max_bytes)
    request_id = doc.get("requestId")
    if not isinstance(request_id, _SCALARS):
        request_id = None

    try:
        return _parse(doc, request_id, protocols, max_model_params)
    except RequestError as exc:  # answered with the pipeline and kind where they are valid
        exc.pipeline = int(doc["id"]) if _valid_id(doc.get("id")) else None
        exc.kind = doc.get("request") if doc.get("request") in REQUEST_TYPES else None
        raise


def _check_bounds_width(config: dict, learner: dict | None) -> None:
    """Refuse features' bounds given per feature (``featureMin`` / ``featureMax`` arrays)
    for another width than the learner's declared ``n_features``: every record would be
    refused (``width``).

    Raises
    ------
    RequestError
        ``schema``, field ``trainingConfiguration.featureMin`` (or ``featureMax``).
    """
    n_features = None
    for part in ("parameters", "hyperParameters"):
        n_features = ((learner or {}).get(part) or {}).get("n_features")
        if n_features is not None:
            break
    for key in ("featureMin", "featureMax"):
        bounds = config.get(key)
        if isinstance(bounds, list) and isinstance(n_features, int) and \
                len(bounds) != n_features:
            raise RequestError("schema", f"trainingConfiguration.{key} has {len(bounds)} "
                               f"values, one per feature, but the learner declares "
                               f"n_features {n_features}", f"trainingConfiguration.{key}")


def _valid_id(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)
            or isinstance(value, float) and value.is_integer()) and 0 <= value <= MAX_ID


def _parse(doc: dict, request_id: Any, protocols: Collection[str] | None,
           max_model_params: int | None) -> Request:
    """:func:`parse_request` past the loading of ``doc``."""
    error = jsonschema.exceptions.best_match(_validator(generation()).iter_errors(doc))
    if error is not None:
        raise _schema_error(error, request_id, doc)

    kind = doc["request"]
    for key, allowed in (("export", "Query"), ("version", "Create")):
        if doc.get(key) not in (None, False) and kind != allowed:
            raise RequestError("schema", f"{key!r} is a {allowed} option, not one of {kind}",
                               key, request_id)
    given = doc.get("trainingConfiguration") or {}
    if "protocol" in given or kind == "Create":
        _check_protocol(given.get("protocol", TRAINING_DEFAULTS["protocol"]), protocols,
                        request_id)
    config: dict = {}
    if kind in ("Create", "Update"):
        try:
            if kind == "Create":  # a learner no protocol can average: before their parameters
                from learning.registry import check_pairing
                check_pairing(doc.get("learner"), given.get("protocol",
                                                            TRAINING_DEFAULTS["protocol"]))
            config = validate_training_configuration(given, create=kind == "Create")
        except RequestError as e:
            e.request_id = request_id
            raise

    pre_processors = list(doc.get("preProcessors") or [])
    learner = doc.get("learner")
    if kind in ("Create", "Update"):
        from learning.registry import (check_model_size, check_preprocessor_order, check_sizes,
                                       make_learner, make_preprocessor, model_learner_spec)

        try:
            if kind == "Create":
                check_preprocessor_order(pre_processors, learner)
                _check_bounds_width(config, learner)
            if max_model_params is not None:  # before anything is built
                check_sizes(learner, pre_processors, max_model_params)
            for i, spec in enumerate(pre_processors):
                if kind == "Create" or spec.get("name") is not None:
                    make_preprocessor(spec, i)
            built = None
            if learner is not None and (kind == "Create" or learner.get("name") is not None):
                # a warm start's arrays are of the model's width (a Create declares
                # the records'); an Update's learner carries no arrays
                spec = model_learner_spec(pre_processors, learner) if kind == "Create" \
                    else learner
                if kind == "Create" and max_model_params is not None:
                    check_model_size(spec, max_model_params)  # before it is allocated
                built = make_learner(spec)
            if kind == "Create":
                check_scaling(built, TRAINING_PARAMETERS["scaling"].of(config), learner["name"])
                check_drift_pairing(TRAINING_PARAMETERS["driftDetector"].of(config), built.task)
        except RequestError as e:
            e.request_id = request_id
            raise

    return Request(id=int(doc["id"]), request=kind, request_id=request_id,
                   pre_processors=pre_processors, learner=learner,
                   training_configuration=config, export=bool(doc.get("export")),
                   version=doc.get("version"))
