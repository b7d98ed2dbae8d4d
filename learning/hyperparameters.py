"""Declared hyperparameters of learners and preprocessors, in the manner of Flink ML's
``pyflink.ml.param`` and of :mod:`learning.protocols.parameters`: each one is declared once,
as a :class:`Hyperparameter` with its name, type, default, allowed interval or choices and a
one-line description, in the ``HYPERPARAMETERS`` tuple of its class.

Everything else is derived from that declaration: the check of a constructor's values
(:func:`check_stored`, which every constructor calls once its arguments are stored, hence
of a request's ``hyperParameters``, of
:meth:`~learning.component.Component.update_hyperparameters` and of a model read from JSON), the per-component ``hyperParameters`` part of
``learning/schema/request.schema.json`` (:func:`component_schema`) and ``omldm list``
(:func:`describe`). Conditions between several hyperparameters (``init_size >=
n_clusters``, an odd ``kernel_size``) stay in the classes.

A user's class without ``HYPERPARAMETERS`` (or one whose declaration does not name exactly
its constructor's arguments, e.g. a subclass with another ``__init__``) is *undeclared*: its
constructor's arguments are its hyperparameters, of any type, checked by the class alone
(:func:`declaration`).
"""

from __future__ import annotations

import inspect
import math
import operator
import re
from dataclasses import dataclass
from typing import Any, Mapping

from learning.errors import HyperparameterError

__all__ = ["interval_bounds", "Hyperparameter", "INT_LIST", "ANY", "UNDECLARED", "declaration", "is_declared",
           "check", "check_stored", "typed", "component_schema", "summary", "describe"]

#: The type of a list of integers (MLP's ``hidden_layers``); tuples are accepted too.
INT_LIST = list[int]
#: The type of an undeclared hyperparameter: any value.
ANY = object

_TYPES = {bool: ("boolean", "bool"), int: ("integer", "int"), float: ("number", "float"),
          str: ("string", "str"), INT_LIST: ("array", "list[int]"), ANY: (None, "any")}
#: The description of an undeclared hyperparameter.
UNDECLARED = "undeclared (a constructor argument; the class checks it)"


def _number(text: str) -> float | None:
    text = text.strip()
    return None if text in ("inf", "-inf") else float(text)


def interval_bounds(name: str, interval: str | None) -> tuple[float | None, float | None]:
    """``(low, high)`` of an interval in the declarations' notation (``"[0, 1)"``,
    ``"(0, inf)"``), None for no interval or an unbounded end; also the check of
    :class:`learning.protocols.parameters.Param`'s intervals.

    Raises
    ------
    ValueError
        On a malformed interval, naming ``name``.
    """
    if interval is None:
        return None, None
    text = interval.strip()
    if text[:1] not in "[(" or text[-1:] not in "])" or text.count(",") != 1:
        raise ValueError(f"{name}: interval must look like '[0, 1)', got {text!r}")
    lo, hi = (_number(part) for part in text[1:-1].split(","))
    return lo, hi


def _text(v: Any) -> str:
    """A bound or value as messages write it: ``0``, ``1e-07``, ``[64]``, ``'relu'``."""
    if isinstance(v, float):
        return format(int(v) if v.is_integer() and abs(v) < 1e15 else v, "g")
    return repr(v)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@dataclass(frozen=True)
class Hyperparameter:
    """One constructor argument of a learner or preprocessor: its declaration and checker.

    Parameters
    ----------
    name : str
        The constructor argument, also the key in a request's ``hyperParameters``.
    type : type
        ``bool``, ``int`` (a Python int, not a bool; in JSON an integral number),
        ``float`` (any finite real number; an int is kept as given), ``str``,
        :data:`INT_LIST` (a list or tuple of ints; ``interval`` bounds each item) or
        ``object`` (anything: an undeclared hyperparameter).
    default : Any
        The value of the constructor's default (None with ``optional``: see the
        description).
    description : str
        One line: what it is, with its unit and the paper's symbol where there is one.
    interval : str or None
        Allowed numbers in interval notation, ``[`` / ``]`` closed, ``(`` / ``)`` open,
        ``inf`` for no bound: ``"(0, inf)"``, ``"(0, 1)"``, ``"[1, inf)"``.
    choices : tuple or None
        The allowed values (strings or ints), compared with their type (``True`` is not
        ``1``).
    length : int or None
        :data:`INT_LIST` only: the number of items required.
    optional : bool
        None is allowed too (its meaning is in the description).

    Raises
    ------
    ValueError
        For a declaration that contradicts itself (an unknown type, a malformed interval,
        a default that is not allowed).

    Examples
    --------
    >>> C = Hyperparameter("C", float, 0.01, "aggressiveness", interval="(0, inf)")
    >>> C.allowed()
    'a number > 0'
    >>> C.check(-1)
    Traceback (most recent call last):
    ...
    learning.errors.HyperparameterError: C must be > 0, got -1
    """

    name: str
    type: Any
    default: Any
    description: str
    interval: str | None = None
    choices: tuple | None = None
    length: int | None = None
    optional: bool = False

    def __post_init__(self) -> None:
        if self.type not in _TYPES:
            raise ValueError(f"{self.name}: type must be one of bool, int, float, str, "
                             f"list[int], object, got {self.type!r}")
        if self.interval is not None:
            if self.type not in (int, float, INT_LIST):
                raise ValueError(f"{self.name}: only numbers have an interval")
            lo, hi = self.bounds()
            if lo is not None and hi is not None and lo > hi:
                raise ValueError(f"{self.name}: empty interval {self.interval}")
        if self.length is not None and self.type is not INT_LIST:
            raise ValueError(f"{self.name}: only a list has a length")
        if "\n" in self.description or not self.description:
            raise ValueError(f"{self.name}: the description must be one line")
        try:
            self.check(self.default)
        except HyperparameterError as e:
            raise ValueError(f"default: {e}") from None

    # -- the declaration -------------------------------------------------------------------
    @property
    def type_name(self) -> str:
        """``bool``, ``int``, ``float``, ``str``, ``list[int]`` or ``any``; ``int or None``
        when optional."""
        name = _TYPES[self.type][1]
        return f"{name} or None" if self.optional else name

    def bounds(self) -> tuple[float | None, float | None]:
        """``(low, high)`` of :attr:`interval`, None for an unbounded end."""
        return interval_bounds(self.name, self.interval)

    def _limits(self) -> list[tuple[str, float]]:
        """The interval as comparisons, e.g. ``[(">", 0.0), ("<", 1.0)]``."""
        if self.interval is None:
            return []
        lo, hi = self.bounds()
        text = self.interval.strip()
        out = []
        if lo is not None:
            out.append((">" if text[0] == "(" else ">=", lo))
        if hi is not None:
            out.append(("<" if text[-1] == ")" else "<=", hi))
        return out

    def allowed(self) -> str:
        """What is allowed, in words: ``a number > 0``, ``one of 0, 1, 2``, ``true or
        false``, ``a list of integers >= 1``, ``an integer >= 1, or None``."""
        limits = self._limits()
        if len(limits) == 2:
            lo, hi = limits
            bounds = (f" in {'[' if lo[0] == '>=' else '('}{_text(lo[1])}, {_text(hi[1])}"
                      f"{']' if hi[0] == '<=' else ')'}")
        else:
            bounds = "".join(f" {op} {_text(b)}" for op, b in limits)
        if self.choices is not None:
            text = f"one of {', '.join(repr(c) for c in self.choices)}"
        elif self.type is bool:
            text = "true or false"
        elif self.type is int:
            text = f"an integer{bounds}"
        elif self.type is float:
            text = f"a number{bounds}"
        elif self.type is str:
            text = "a string"
        elif self.type is INT_LIST:
            count = f"{self.length} " if self.length is not None else ""
            text = f"a list of {count}integers{bounds}"
        else:
            text = "any value"
        return f"{text}, or None" if self.optional else text

    def schema(self) -> dict:
        """The JSON Schema (draft 2020-12) of the value in a request; null is always
        allowed (null takes the default)."""
        out: dict[str, Any] = {"description": self.description}
        json_type = _TYPES[self.type][0]
        if json_type is not None:
            out["type"] = [json_type, "null"]
        if self.choices is not None:
            out["enum"] = [*self.choices, None]
        limits = {">": "exclusiveMinimum", ">=": "minimum", "<": "exclusiveMaximum",
                  "<=": "maximum"}
        numeric = {limits[op]: int(b) if self.type is not float or b.is_integer() else b
                   for op, b in self._limits()}
        if self.type is INT_LIST:
            out["items"] = {"type": "integer", **numeric}
            if self.length is not None:
                out.update(minItems=self.length, maxItems=self.length)
        else:
            out.update(numeric)
        if self.default is not None:
            out["default"] = list(self.default) if isinstance(self.default, (list, tuple)) \
                else self.default
        return out

    # -- checking --------------------------------------------------------------------------
    def _fail(self, value: Any, what: str | None = None) -> HyperparameterError:
        return HyperparameterError(self.name, f"{self.name} must be "
                                   f"{what or self.allowed()}, got {value!r}")

    def _in_bounds(self, v: float) -> str | None:
        """The first comparison ``v`` fails, e.g. ``"> 0"``; None when it is in bounds."""
        holds = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}
        for op, b in self._limits():
            if not holds[op](v, b):
                return f"{op} {_text(b)}"
        return None

    def check(self, value: Any) -> None:
        """Refuse a value this declaration does not allow (the value is not converted:
        constructor arguments are stored as given).

        Raises
        ------
        learning.errors.HyperparameterError
            Naming the hyperparameter, what is allowed and the value, e.g. ``C must be >
            0, got -1``, ``mode must be one of 0, 1, 2, got 3``, ``hidden_layers must be a
            list of integers >= 1, got [0]``.
        """
        if value is None and self.optional or self.type is ANY:
            return
        if self.choices is not None:
            if not any(value == c and type(value) is type(c) for c in self.choices):
                raise self._fail(value)
        elif self.type is bool:
            if not isinstance(value, bool):
                raise self._fail(value)
        elif self.type is str:
            if not isinstance(value, str):
                raise self._fail(value)
        elif self.type is int:
            if not _is_int(value) or self._in_bounds(value) is not None:
                raise self._fail(value)
        elif self.type is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise self._fail(value, "a real number")
            if not math.isfinite(value):
                raise self._fail(value, "finite")
            failed = self._in_bounds(float(value))
            if failed is not None:
                raise self._fail(value, failed)
        elif self.type is INT_LIST:
            if not isinstance(value, (list, tuple)) or any(
                    not _is_int(v) or self._in_bounds(v) is not None for v in value):
                raise self._fail(value)
            if self.length is not None and len(value) != self.length:
                raise self._fail(value, f"{self.length} integers")

    def typed(self, value: Any) -> Any:
        """``value`` as read from JSON made the declared type where that loses nothing:
        an integral float (``64.0``) as an int for ``int`` and ``list[int]`` (JSON does not
        tell ``64`` from ``64.0``; the schema's ``integer`` accepts both). Anything else is
        returned as it is (and :meth:`check` judges it)."""
        def whole(v: Any) -> Any:
            return int(v) if isinstance(v, float) and v.is_integer() else v

        if self.type is int:
            return whole(value)
        if self.type is INT_LIST and isinstance(value, list):
            return [whole(v) for v in value]
        return value


# -- a class's declaration -----------------------------------------------------------------
def _signature(cls: type) -> list[inspect.Parameter]:
    return [p for name, p in inspect.signature(cls.__init__).parameters.items()
            if name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def is_declared(cls: type) -> bool:
    """Whether ``cls`` has ``HYPERPARAMETERS`` naming exactly its constructor's arguments,
    in order."""
    params = getattr(cls, "HYPERPARAMETERS", None)
    return params is not None and [p.name for p in params] == [p.name for p in _signature(cls)]


def declaration(cls: type) -> tuple[Hyperparameter, ...]:
    """The hyperparameters of learner or preprocessor class ``cls``: its ``HYPERPARAMETERS``
    when :func:`is_declared`, else one undeclared :class:`Hyperparameter` (type ``object``,
    described as :data:`UNDECLARED`) per constructor argument, with the signature's
    default (None where there is none)."""
    if is_declared(cls):
        return tuple(cls.HYPERPARAMETERS)
    return tuple(Hyperparameter(p.name, ANY, None if p.default is p.empty else p.default,
                                UNDECLARED) for p in _signature(cls))


def check(cls: type, values: Mapping[str, Any]) -> None:
    """Check the hyperparameters ``values`` (some or all) of ``cls`` against its
    :func:`declaration`.

    Raises
    ------
    learning.errors.HyperparameterError
        An unknown name (``unknown hyperparameter 'c' for PAClassifier; expected one of C,
        mode, learn_intercept``) or a value :meth:`Hyperparameter.check` refuses.
    """
    known = {p.name: p for p in declaration(cls)}
    for key, value in values.items():
        p = known.get(key)
        if p is None:
            raise HyperparameterError(
                str(key), f"unknown hyperparameter {key!r} for {cls.__name__}; expected one "
                f"of {', '.join(known)}")
        p.check(value)


def check_stored(component: Any) -> None:
    """Check every stored hyperparameter of a learner or preprocessor against its class's
    declaration: what a constructor calls once it stored its arguments (and before it
    checks conditions between them).

    Raises
    ------
    learning.errors.HyperparameterError
        As :func:`check`, for the first hyperparameter refused.
    """
    check(type(component), component.hyperparameters())


def typed(cls: type, values: Mapping[str, Any]) -> dict:
    """``values`` with each declared one :meth:`Hyperparameter.typed`; unknown names are
    kept (for :func:`check` to refuse)."""
    known = {p.name: p for p in declaration(cls)}
    return {k: known[k].typed(v) if k in known else v for k, v in values.items()}


def component_schema(cls: type) -> dict:
    """The JSON Schema (draft 2020-12) of ``hyperParameters`` for ``cls``: an object (or
    null) of its declared hyperparameters, nothing else."""
    return {"type": ["object", "null"], "additionalProperties": False,
            "properties": {p.name: p.schema() for p in declaration(cls)}}


def summary(cls: type) -> str:
    """The first sentence of ``cls``'s docstring as plain text (empty without one)."""
    doc = inspect.getdoc(cls) or ""
    first = doc.strip().split("\n\n")[0].replace("\n", " ")
    return re.sub(r":\w+:`~?([^`]*)`", r"\1", first).replace("``", "")


def describe(cls: type) -> dict:
    """What ``omldm list`` prints of ``cls``: ``{"class", "summary", "declared",
    "hyperParameters": [{"name", "type", "default", "allowed", "description"}]}``,
    JSON-safe."""
    def default(p: Hyperparameter) -> Any:
        return list(p.default) if isinstance(p.default, (list, tuple)) else p.default

    return {"class": f"{cls.__module__}.{cls.__qualname__}", "summary": summary(cls),
            "declared": is_declared(cls),
            "hyperParameters": [{"name": p.name, "type": p.type_name, "default": default(p),
                                 "allowed": p.allowed(), "description": p.description}
                                for p in declaration(cls)]}
