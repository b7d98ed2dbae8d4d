"""Declared parameters of a pipeline's ``trainingConfiguration`` (papers/002 §3.4), in the
manner of Flink ML's ``pyflink.ml.param``: each one is declared once, as a :class:`Param`
with its name, type, default, allowed interval or choices and a one-line description.

- :data:`TRAINING_PARAMETERS`: the keys every pipeline has (``protocol``,
  ``hubParallelism``, ``miniBatchSize``, ``miniBatches``, ``window`` and ``epochs``
  (:class:`learning.protocols.base.PipelineSpoke`), ``layoutQuorum``, ``aggregation`` and
  ``diversityBlocks`` (:mod:`learning.protocols.sharding`),
  ``scaling``: :mod:`learning.scaling`; ``metricsWindow``: :mod:`learning.metrics`);
- each protocol's own, in its module (e.g. :data:`learning.protocols.ssp.PARAMETERS`), as a
  :class:`ProtocolParams`; :func:`learning.protocols.register_protocol` binds it to the
  protocol's names with :func:`declare`.

Everything else is derived from these declarations: the one validator of a request's
``trainingConfiguration`` (:func:`validate_training_configuration`, called by
:func:`learning.requests.parse_request`), what the nodes read (:meth:`Param.of`,
:meth:`ProtocolParams.of`), the ``trainingConfiguration`` part of
``learning/schema/request.schema.json`` (:func:`configuration_schema`) and the Markdown
table of the README (:func:`parameter_table`).

The registry imports this module, never the other way round: this module imports nothing
of :mod:`learning.protocols`.
"""

from __future__ import annotations

import math
import reprlib
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Mapping

from learning.errors import RequestError
from learning.hyperparameters import interval_bounds
from learning.layout import DEFAULT_QUORUM

__all__ = ["Param", "Rule", "ProtocolParams", "TRAINING_PARAMETERS", "TRAINING_DEFAULTS",
           "declare", "declared", "generation", "validate_training_configuration",
           "configuration_schema", "parameter_table"]

_TYPES = {int: ("integer", "an integer"), float: ("number", "a number"),
          str: ("string", "a string"), bool: ("boolean", "true or false")}
#: a string parameter without choices is a name: 1 to this many characters
NAME_LENGTH = 128
#: most values of a parameter given feature by feature (``Param.per_feature``): the widest
#: record a pipeline may declare bounds for
MAX_PER_FEATURE = 1_000_000


def _field(name: str) -> str:
    return f"trainingConfiguration.{name}"


def _shown(v: Any) -> str:
    """``repr(v)``, a long list cut short (``[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, ...]``)."""
    return reprlib.repr(v) if isinstance(v, list) else repr(v)


def _text(v: Any) -> str:
    """A value as the Markdown table and the messages write it: ``2``, ``0.25``, ``naive``,
    ``true`` (as JSON writes it)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return format(v, "g")
    return str(v)


@dataclass(frozen=True)
class Param:
    """One ``trainingConfiguration`` key: its declaration and its validator.

    Parameters
    ----------
    name : str
        The JSON key, e.g. ``"staleness"``.
    type : type
        ``int`` (JSON integers; ``64.0`` is accepted as ``64``), ``float`` (any finite JSON
        number, returned as float), ``str`` or ``bool`` (JSON ``true``/``false`` only).
    default : int, float, str, bool or None
        The value when the key is absent; None: none (the node decides, or ``required``).
    description : str
        One line: what it is, with its unit and the paper's symbol where there is one.
    interval : str or None
        Allowed numbers in interval notation, ends ``[`` / ``]`` closed and ``(`` / ``)``
        open, ``inf`` for no bound: ``"[0, 100000]"``, ``"(0, 1]"``, ``"(0, inf)"``.
    choices : tuple of str or None
        The allowed strings. A ``str`` parameter without choices is a name (1 to 128
        characters).
    required : bool
        A Create of a protocol that declares it must give it (``default`` is then None).
    filled : bool
        A Create's ``trainingConfiguration`` gets the default written in (the nodes read it
        unconditionally); only for :data:`TRAINING_PARAMETERS`.
    fixed : bool
        A running pipeline keeps it: an Update that changes it is refused (``unsupported``,
        :func:`learning.update.apply_update`), since the nodes' state is built for it.
    per_feature : bool
        A ``float`` without an interval that may also be given feature by feature: a JSON
        array of one number (or ``null``: none there) per feature of the pipeline's records,
        1 to :data:`MAX_PER_FEATURE` of them, returned as a list of float or None.

    Raises
    ------
    ValueError
        For a declaration that contradicts itself (an unknown type, a malformed interval,
        choices of a number, a default that is not allowed).

    Examples
    --------
    >>> p = Param("staleness", int, 2, "rounds ahead of the slowest spoke", interval="[0, 100000]")
    >>> p.of({}), p.of({"staleness": 5.0}), p.allowed()
    (2, 5, 'an integer in [0, 100000]')
    >>> p.validate(-1)
    Traceback (most recent call last):
    ...
    learning.errors.RequestError: staleness must be an integer in [0, 100000], got -1
    """

    name: str
    type: type
    default: Any
    description: str
    interval: str | None = None
    choices: tuple[str, ...] | None = None
    required: bool = False
    filled: bool = False
    fixed: bool = False
    per_feature: bool = False

    def __post_init__(self) -> None:
        if self.type not in _TYPES:
            raise ValueError(f"{self.name}: type must be int, float, str or bool, got "
                             f"{self.type!r}")
        if self.interval is not None:
            if self.type in (str, bool):
                raise ValueError(f"{self.name}: a {_TYPES[self.type][0]} has no interval")
            lo, hi = self.bounds()
            if lo is not None and hi is not None and lo > hi:
                raise ValueError(f"{self.name}: empty interval {self.interval}")
        if self.choices is not None and self.type is not str:
            raise ValueError(f"{self.name}: only a string has choices")
        if self.per_feature and (self.type is not float or self.interval is not None):
            raise ValueError(f"{self.name}: only a number without an interval is given per "
                             f"feature")
        if self.required and self.default is not None:
            raise ValueError(f"{self.name}: a required parameter has no default")
        if self.default is not None:
            try:
                typed = self.validate(self.default)
            except RequestError as e:
                raise ValueError(f"default: {e}") from None
            if type(typed) is not type(self.default):
                raise ValueError(f"{self.name}: default {self.default!r} is not of type "
                                 f"{self.type.__name__}")

    # -- the declaration -------------------------------------------------------------------
    def bounds(self) -> tuple[float | None, float | None]:
        """``(low, high)`` of :attr:`interval`, None for an unbounded end."""
        return interval_bounds(self.name, self.interval)

    def _open(self) -> tuple[bool, bool]:
        text = self.interval.strip()
        return text[0] == "(", text[-1] == ")"

    def allowed(self) -> str:
        """What is allowed, in words: ``an integer in [0, 100000]``, ``a number > 0``,
        ``one of naive, linear, sketch``."""
        if self.choices is not None:
            return f"one of {', '.join(self.choices)}"
        kind = _TYPES[self.type][1]
        if self.type is str:
            return f"a name of 1 to {NAME_LENGTH} characters"
        if self.type is bool:
            return kind
        if self.per_feature:
            return f"{kind}, or an array of one number (or null: none) per feature"
        lo, hi = self.bounds()
        if lo is None and hi is None:
            return kind
        lo_open, hi_open = self._open()
        if hi is None:
            return f"{kind} {'>' if lo_open else '>='} {_text(self._typed(lo))}"
        if lo is None:
            return f"{kind} {'<' if hi_open else '<='} {_text(self._typed(hi))}"
        return (f"{kind} in {'(' if lo_open else '['}{_text(self._typed(lo))}, "
                f"{_text(self._typed(hi))}{')' if hi_open else ']'}")

    @staticmethod
    def _typed(bound: float) -> int | float:
        """An integral bound as an int (``0``, not ``0.0``, in messages and the schema)."""
        return int(bound) if float(bound).is_integer() else bound

    def schema(self, description: str | None = None) -> dict:
        """The JSON Schema (draft 2020-12) of the value; ``description`` replaces the
        declared one (None: the declared one)."""
        out: dict[str, Any] = {"description": self.description if description is None
                               else description, "type": _TYPES[self.type][0]}
        if self.choices is not None:
            out["enum"] = list(self.choices)
        elif self.type is str:
            out.update(minLength=1, maxLength=NAME_LENGTH)
        elif self.type is not bool:
            lo, hi = self.bounds()
            lo_open, hi_open = self._open() if self.interval is not None else (False, False)
            if lo is not None:
                out["exclusiveMinimum" if lo_open else "minimum"] = self._typed(lo)
            if hi is not None:
                out["exclusiveMaximum" if hi_open else "maximum"] = self._typed(hi)
        if self.per_feature:
            del out["type"]
            out["anyOf"] = [{"type": "number"}, {
                "type": "array", "minItems": 1, "maxItems": MAX_PER_FEATURE,
                "items": {"type": ["number", "null"]}}]
        if self.default is not None:
            out["default"] = self.default
        return out

    # -- validation ------------------------------------------------------------------------
    def error(self, value: Any) -> RequestError:
        """``RequestError("schema", "<name> must be <allowed>, got <value>")`` for field
        ``trainingConfiguration.<name>``."""
        return RequestError("schema", f"{self.name} must be {self.allowed()}, got {value!r}",
                            _field(self.name))

    def validate(self, value: Any) -> int | float | str | bool | list:
        """``value`` as this parameter's type (a list of float or None for an array of a
        ``per_feature`` parameter).

        Raises
        ------
        learning.errors.RequestError
            ``schema`` (field ``trainingConfiguration.<name>``) when ``value`` is not of the
            type or not allowed; a message naming the parameter, the value and what is
            allowed.
        """
        if self.type is str:
            if not isinstance(value, str) or not 1 <= len(value) <= NAME_LENGTH \
                    or (self.choices is not None and value not in self.choices):
                raise self.error(value)
            return value
        if self.type is bool:
            if not isinstance(value, bool):
                raise self.error(value)
            return value
        if self.per_feature and isinstance(value, list):
            if not 1 <= len(value) <= MAX_PER_FEATURE:
                raise RequestError("schema", f"{self.name} as an array has one value per "
                                   f"feature, 1 to {MAX_PER_FEATURE}, got {len(value)}",
                                   _field(self.name))
            out = []
            for i, v in enumerate(value):
                if v is not None and not self._is_number(v):
                    raise RequestError("schema", f"{self.name}[{i}] must be a number or null, "
                                       f"got {v!r}", f"{_field(self.name)}[{i}]")
                out.append(None if v is None else float(v))
            return out
        return self._number(value)

    @staticmethod
    def _is_number(value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and \
            math.isfinite(value)

    def _number(self, value: Any) -> int | float:
        """``value`` as this number parameter's type, within its interval.

        Raises
        ------
        learning.errors.RequestError
            As :meth:`validate`.
        """
        if not self._is_number(value) or (self.type is int and not float(value).is_integer()):
            raise self.error(value)
        typed = self.type(value)
        lo, hi = self.bounds()
        if lo is not None or hi is not None:
            lo_open, hi_open = self._open()
            if (lo is not None and (typed <= lo if lo_open else typed < lo)) or \
                    (hi is not None and (typed >= hi if hi_open else typed > hi)):
                raise self.error(value)
        return typed

    def of(self, cfg: Mapping[str, Any]) -> Any:
        """This parameter's value in a ``trainingConfiguration``: the given value validated,
        else the default.

        Raises
        ------
        learning.errors.RequestError
            ``schema`` as :meth:`validate`, or when a ``required`` parameter is missing.
        """
        value = cfg.get(self.name)
        if value is None:
            if self.required:
                raise RequestError("schema", f"protocol {cfg.get('protocol')!r} needs "
                                   f"{_field(self.name)}, {self.allowed()}", _field(self.name))
            return self.default
        return self.validate(value)


@dataclass(frozen=True)
class Rule:
    """A condition on several parameters of one protocol, e.g. EASGD's ``alpha * rho <= 1``.

    Parameters
    ----------
    params : tuple of str
        The parameters it reads, in the order ``holds`` takes them; the last is blamed
        (the error's field).
    text : str
        The condition as written in the docs and messages.
    holds : callable
        ``holds(*values) -> bool``.
    reason : str
        Why, for the message (optional).
    """

    params: tuple[str, ...]
    text: str
    holds: Callable[..., bool]
    reason: str = ""

    def check(self, values: Mapping[str, Any]) -> None:
        """Raise ``RequestError("schema")`` (field: the last parameter) when the rule fails;
        a rule with a parameter missing from ``values`` is not checked."""
        if any(values.get(p) is None for p in self.params):
            return
        if not self.holds(*(values[p] for p in self.params)):
            got = ", ".join(f"{p} = {_shown(values[p])}" for p in self.params)
            why = f" ({self.reason})" if self.reason else ""
            raise RequestError("schema", f"{self.text} must hold{why}, got {got}",
                               _field(self.params[-1]))


@dataclass(frozen=True)
class ProtocolParams:
    """What a protocol declares about its ``trainingConfiguration``: its own parameters (the
    keys of :data:`TRAINING_PARAMETERS` are every protocol's), the rules between them, and
    for the docs its standard abbreviation and the papers it follows.

    Parameters
    ----------
    reference : str
        Paper sections and equations, e.g. ``"papers/002 §2.2.3, papers/003 §II.C"``.
    params : tuple of Param
    rules : tuple of Rule
    term : str
        The standard abbreviation when it is not the protocol's name, e.g. ``"TAP"``.

    Raises
    ------
    ValueError
        Two parameters of the same name, or a rule over an undeclared parameter.
    """

    reference: str = ""
    params: tuple[Param, ...] = ()
    rules: tuple[Rule, ...] = ()
    term: str = ""

    def __post_init__(self) -> None:
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise ValueError(f"parameters declared twice: {names}")
        for rule in self.rules:
            if not set(rule.params) <= set(names):
                raise ValueError(f"rule {rule.text!r} reads undeclared parameters")

    def __getitem__(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def __contains__(self, name: object) -> bool:
        return any(p.name == name for p in self.params)

    def of(self, cfg: Mapping[str, Any]) -> dict[str, Any]:
        """Every declared parameter's value (:meth:`Param.of`), the rules checked.

        Raises
        ------
        learning.errors.RequestError
            ``schema``, as :meth:`Param.of` and :meth:`Rule.check`.
        """
        values = {p.name: p.of(cfg) for p in self.params}
        for rule in self.rules:
            rule.check(values)
        return values

    def describe(self, p: Param) -> str:
        """``p``'s description, with the rules that blame it and whether a Create must
        give it."""
        rules = [r.text for r in self.rules if r.params[-1] == p.name]
        required = ["required in a Create"] if p.required else []
        fixed = ["fixed while the pipeline runs (an Update is refused)"] if p.fixed else []
        return "; ".join([p.description, *rules, *required, *fixed])


def _ordered(low: float | list, high: float | list) -> bool:
    """Whether ``low <= high``, feature by feature where either is an array (a number then
    stands for every feature, ``null`` for none); two arrays of different lengths are not."""
    if isinstance(low, list) and isinstance(high, list) and len(low) != len(high):
        return False
    n = len(low) if isinstance(low, list) else len(high) if isinstance(high, list) else 0
    if not n:
        return low <= high
    lows = low if isinstance(low, list) else [low] * n
    highs = high if isinstance(high, list) else [high] * n
    return all(lo is None or hi is None or lo <= hi for lo, hi in zip(lows, highs))


#: The keys of every pipeline's ``trainingConfiguration`` (papers/002 §3.4).
TRAINING_PARAMETERS = ProtocolParams(reference="papers/002 §3.4", params=(
    Param("protocol", str, "Asynchronous", "the synchronization protocol, a registered name "
          "(learning.protocols.PROTOCOLS)", filled=True),
    Param("hubParallelism", int, 1, "hubs the global model is sharded over (hub j owns the "
          "j-th contiguous shard)", interval="[1, 64]", filled=True),
    Param("miniBatchSize", int, 64, "records a spoke fits at once (scaling batch or both: "
          "all spokes together, B of papers/001 eq. 3)", interval="[1, 100000]", filled=True),
    Param("miniBatches", int, 4, "mini-batches between a spoke's synchronizations",
          interval="[1, 100000]", filled=True),
    Param("layoutQuorum", int, DEFAULT_QUORUM, "records that must agree (a strict majority of "
          "all spokes' votes) before an undeclared layout is fixed; held until then",
          interval="[2, 100000]"),
    Param("maxClasses", int, 1000, "classes a classifier learns from a spoke's stream when "
          "learner.parameters.classes is not declared; a label of a new class past it is "
          "refused (too_many_classes)", interval="[2, 1000000]"),
    Param("aggregation", str, None, "how hubs fold spokes' work into the global model: average "
          "(papers/003 eq. 2; EASGD/Adaptive: the elastic step), sum of deltas (papers/002 "
          "§2.1, beta = 1), diversity (rounds: beta = the deltas' gradient diversity, Yin et "
          "al. 2018, in [1/k, 1]; a lone push as sum) or momentum (rounds: the average's move "
          "plus blockMomentum times the last round's move, Chen & Huo 2016; a lone push as "
          "sum); default: Ridge sum (its deltas are sums over records: exact), PA and the "
          "networks (MLP, CNN, MLPRegressor) sum, under FDA and EVENFLOW diversity; every "
          "other learner averages",
          choices=("average", "sum", "diversity", "momentum")),
    Param("blockMomentum", float, None, "eta of aggregation momentum: a round moves the "
          "global model by eta times the previous round's move plus the move to the spokes' "
          "weighted average (blockwise model-update filtering, Chen & Huo 2016); default "
          "1 - 1/k, k the pipeline's spokes", interval="[0, 1)"),
    Param("diversityBlocks", str, "class", "under aggregation diversity, what beta is taken "
          "over: class (one beta per class's block [W_c | b_c] of a multi-class linear model, "
          "within each hub's shard; other learners: as model) or model (one beta per hub)",
          choices=("class", "model")),
    Param("scaling", str, "none", "what n spokes divide (papers/001 §II-C): batch: "
          "miniBatchSize is the global B, a spoke fits max(1, round(B/n)) (eq. 3); "
          "learning-rate: the learner's step size / n (eq. 4; learning_rate, PA's C); both",
          choices=("none", "batch", "learning-rate", "both")),  # learning.scaling runs them
    Param("window", int, 0, "W, records a spoke collects before it trains on them (a streaming "
          "window, papers/003 §II.A: W = 256 in §IV): each is predicted once, then the window is "
          "trained epochs times in mini-batches of miniBatchSize; 0: no window (each "
          "mini-batch is its own)", interval="[0, 1000000]"),
    Param("epochs", int, 1, "E, passes over each window (or mini-batch, without one), papers/003 "
          "§II.A (E = 8 in §IV); a record is predicted and counted as fitted once",
          interval="[1, 1000]"),
    Param("metricsWindow", int, 1000, "records of the rolling quality metrics (learning.metrics; "
          "each of n spokes keeps its last ceil(W/n), in whole mini-batches); 0: cumulative only",
          interval="[0, 10000000]"),
    Param("featureMin", float, None, "smallest value a record's feature may take, one for "
          "every feature or an array with one per feature (null: none there; its length is "
          "then the records' width, a record of another is refused: width): a training or "
          "forecasting record with a feature below it is refused (feature_range, "
          "dead-lettered with the feature's index and value), so that a sensor's sentinel or "
          "glitch never reaches the scalers' statistics or the model; default: none (every "
          "record's features are within ±1e150, learning.layout.MAX_ABS_FEATURE)",
          per_feature=True),
    Param("featureMax", float, None, "largest value a record's feature may take, as "
          "featureMin", per_feature=True),
    Param("labelMin", float, None, "smallest number label a training record may carry (a "
          "regression target's sentinel or glitch): below it the record is refused "
          "(label_range); string and bool labels are not compared; default: none (within "
          "±1e150)"),
    Param("labelMax", float, None, "largest number label a training record may carry, as "
          "labelMin"),
    Param("driftDetector", str, "none", "river's concept drift detector over each spoke's "
          "prequential errors (learning.drift: a wrong prediction 1, a right one 0; a "
          "regressor's absolute error, ADWIN and PageHinkley only): each detection is "
          "counted (a Query's drift, the driftsDetected metric) and written to the responses "
          "topic as an event; the learners go on learning; none: no detector",
          choices=("none", "ADWIN", "PageHinkley", "DDM", "HDDM_A", "HDDM_W")),
), rules=(
    Rule(("featureMin", "featureMax"), "featureMin <= featureMax", _ordered,
         "feature by feature, where either is an array; two arrays of one length"),
    Rule(("labelMin", "labelMax"), "labelMin <= labelMax", lambda lo, hi: lo <= hi),
))

#: Written into the ``trainingConfiguration`` of a Create request where missing.
TRAINING_DEFAULTS = MappingProxyType({p.name: p.default for p in TRAINING_PARAMETERS.params
                                      if p.filled})

_DECLARED: dict[str, ProtocolParams] = {}
_generation = [0]


def declare(name: str, params: ProtocolParams) -> None:
    """Bind protocol ``name`` to its declaration (:func:`learning.protocols.register_protocol`
    calls it); a later call for the same name replaces the declaration.

    Raises
    ------
    ValueError
        When the protocol declares a key of :data:`TRAINING_PARAMETERS`.
    """
    common = [p.name for p in params.params if p.name in TRAINING_PARAMETERS]
    if common:
        raise ValueError(f"protocol {name!r} redeclares common parameters {common}")
    _DECLARED[name] = params
    _generation[0] += 1


def declared() -> Mapping[str, ProtocolParams]:
    """Protocol name → its declaration, in registration order (a read-only view)."""
    return MappingProxyType(_DECLARED)


def generation() -> int:
    """Counts :func:`declare` calls: what is derived from :func:`declared` is stale once it
    changed."""
    return _generation[0]


def _groups(table: Mapping[str, ProtocolParams]) -> list[tuple[list[str], ProtocolParams]]:
    """The declarations with all the names each is registered under, in order."""
    out: list[tuple[list[str], ProtocolParams]] = []
    for name, decl in table.items():
        for names, d in out:
            if d is decl:
                names.append(name)
                break
        else:
            out.append(([name], decl))
    return out


def _foreign(key: str, owners: list[str], protocol: str, own: ProtocolParams) -> RequestError:
    """The error for ``key``, a parameter of the protocols ``owners`` that protocol
    ``protocol`` (declared by ``own``) does not take."""
    takes = (f"its own: {', '.join(p.name for p in own.params)}" if own.params
             else "it has none of its own")
    return RequestError("schema", f"{_field(key)} is a parameter of {', '.join(owners)}, not "
                        f"of protocol {protocol!r}, which would ignore it ({takes})",
                        _field(key))


def validate_training_configuration(given: Mapping[str, Any] | None, *, create: bool,
                                    table: Mapping[str, ProtocolParams] | None = None) -> dict:
    """The one validator of a request's ``trainingConfiguration``: typed values, for the
    protocol it names.

    Parameters
    ----------
    given : mapping or None
        The request's ``trainingConfiguration`` (None: empty).
    create : bool
        True for a Create: the defaults of :data:`TRAINING_DEFAULTS` are filled in, the
        protocol's required parameters must be given and its rules hold. False for an
        Update, which names only what it changes: the keys given are checked against the
        protocol it names, or, when it names none (the pipeline's protocol is not known
        here), against any protocol declaring them; the nodes check the rest
        (:meth:`ProtocolParams.of`).
    table : mapping or None
        Protocol name → declaration; None: :func:`declared`.

    Returns
    -------
    dict
        The given keys with typed values (``64.0`` → ``64``, ``1`` → ``1.0`` for a float),
        plus for a Create the filled defaults. A protocol's own defaults are not written in.

    Raises
    ------
    learning.errors.RequestError
        ``schema``, field ``trainingConfiguration.<key>``: an undeclared key, a key of
        another protocol than the declared one named (it would be kept and ignored: a
        pipeline's protocol cannot change), a value of the wrong type or out of its
        interval or choices, a missing required parameter, a broken rule. The protocol's
        name itself is not checked here (see :func:`learning.requests.parse_request`).
    """
    table = declared() if table is None else table
    given = dict(given or {})
    out = {**TRAINING_DEFAULTS} if create else {}
    for key, value in given.items():
        if key in TRAINING_PARAMETERS:
            out[key] = TRAINING_PARAMETERS[key].validate(value)
    for rule in TRAINING_PARAMETERS.rules:  # an Update's are checked merged (learning.update)
        rule.check(out)
    own = table.get(out.get("protocol")) if "protocol" in out else None
    if own is not None:
        for key in given:  # another protocol's key would be kept and do nothing
            if key not in TRAINING_PARAMETERS and key not in own:
                owners = [names[0] for names, d in _groups(table) if key in d]
                if owners:  # (a key of no protocol: "unknown key" below)
                    raise _foreign(key, owners, out["protocol"], own)
        if create:  # every parameter, the required ones and the rules
            values = own.of({**given, "protocol": out["protocol"]})
        else:
            values = {p.name: p.validate(given[p.name]) for p in own.params if p.name in given}
            for rule in own.rules:
                rule.check(values)
        out.update((k, v) for k, v in values.items() if k in given)
    for key, value in given.items():
        if key in out:
            continue
        candidates = [d[key] for _, d in _groups(table) if key in d]
        if not candidates:
            allowed = sorted({p.name for p in TRAINING_PARAMETERS.params}
                             | {p.name for d in table.values() for p in d.params})
            raise RequestError("schema", f"unknown key {_field(key)!r}; allowed here: "
                               f"{', '.join(allowed)}", _field(key))
        for p in candidates:
            try:
                out[key] = p.validate(value)
                break
            except RequestError:
                continue
        else:
            raise candidates[0].error(value)
    return out


def configuration_schema(table: Mapping[str, ProtocolParams] | None = None) -> dict:
    """The JSON Schema (draft 2020-12) of ``trainingConfiguration``: every declared key
    (a key several protocols declare differently allows what any of them allows), and for
    each protocol named, under ``allOf``, what it allows itself and no other protocol's
    key. Required parameters and
    rules are in the descriptions: a Create enforces them, an Update need not repeat them.

    Parameters
    ----------
    table : mapping or None
        Protocol name → declaration; None: :func:`declared`.
    """
    table = declared() if table is None else table
    props = {p.name: p.schema() for p in TRAINING_PARAMETERS.params}
    uses: dict[str, list[tuple[list[str], ProtocolParams, Param]]] = {}
    for names, decl in _groups(table):
        for p in decl.params:
            uses.setdefault(p.name, []).append((names, decl, p))
    for key, group in uses.items():
        kinds: list[dict] = []
        texts: dict[str, list[str]] = {}  # description → the protocols that declare it so
        for names, decl, p in group:
            s = p.schema()
            s.pop("description")
            if s not in kinds:
                kinds.append(s)
            texts.setdefault(decl.describe(p), []).extend(names)
        text = "; ".join(f"{', '.join(names)}: {t}" for t, names in texts.items())
        props[key] = {"description": text, **kinds[0]} if len(kinds) == 1 else \
            {"description": text, "anyOf": kinds}
    # for each protocol: what it allows itself where protocols declare a key differently,
    # and no key of another protocol (validate_training_configuration refuses them)
    own = []
    for names, decl in _groups(table):
        then: dict[str, Any] = {p.name: p.schema(decl.describe(p)) for p in decl.params
                                if "anyOf" in props[p.name]}
        then.update((key, False) for key in uses if key not in decl)
        if then:
            own.append({"if": {"properties": {"protocol": {"enum": names}},
                               "required": ["protocol"]},
                        "then": {"properties": then}})
    out: dict[str, Any] = {
        "description": "Generated from the declarations of learning.protocols.parameters "
                       "(learning.requests.write_schema); do not edit by hand.",
        "type": ["object", "null"], "additionalProperties": False, "properties": props}
    if own:
        out["allOf"] = own
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def parameter_table(table: Mapping[str, ProtocolParams] | None = None) -> str:
    """The Markdown table of every ``trainingConfiguration`` parameter: first those of every
    pipeline, then each protocol's (its names, its papers, one row per parameter). The
    README's table is this output (``tests/test_protocol_parameters.py`` checks it).

    Parameters
    ----------
    table : mapping or None
        Protocol name → declaration; None: :func:`declared`.

    Returns
    -------
    str
        The table, one row per line, ending with a newline.
    """
    table = declared() if table is None else table
    rows = ["| protocol | parameter | default | allowed | meaning | source |",
            "| --- | --- | --- | --- | --- | --- |"]
    groups = [(["every protocol"], TRAINING_PARAMETERS), *(
        ([f"`{n}`" for n in names], d) for names, d in _groups(table))]
    for names, decl in groups:
        who = ", ".join(names) + (f" ({decl.term})" if decl.term else "")
        if not decl.params:
            rows.append(f"| {who} | — | | | | {_cell(decl.reference)} |")
        for i, p in enumerate(decl.params):
            default = "required" if p.required else ("—" if p.default is None
                                                    else f"`{_text(p.default)}`")
            allowed = "; ".join([p.allowed(), *(r.text for r in decl.rules
                                                if r.params[-1] == p.name)])
            first = i == 0
            meaning = p.description + ("; fixed while the pipeline runs" if p.fixed else "")
            rows.append(f"| {who if first else ''} | `{p.name}` | {default} | {_cell(allowed)} | "
                        f"{_cell(meaning)} | {_cell(decl.reference) if first else ''} |")
    return "\n".join(rows) + "\n"
