"""A JSON codec for river model objects (no pickle).

River models are graphs of plain Python objects (trees, nodes, splitters, running
statistics) and a few Cython objects (ADWIN's buckets). :func:`encode` writes such a graph
as JSON-safe data and :func:`decode` rebuilds it, so that a river model can travel in a
learner's ``to_json`` (DESIGN.md, "Codecs": never pickle).

Unlike pickle, decoding runs no code named by the data beyond an allow-list: only classes
defined in ``river.*`` modules (built with ``cls.__new__`` and their state restored with
``__setstate__`` or ``__dict__``), Cython ``__pyx_unpickle_*`` constructors of river
modules, ``random.Random`` (from ``getstate()``), numpy arrays of numeric dtypes, and the
built-in containers. Anything else raises :class:`TypeError` when encoding and
:class:`ValueError` when decoding. The encoding follows river's internal attributes, so it
is tied to the river version that wrote it (callers record and check it).

Encoding of values
------------------
- ``None``, ``bool``, ``str``, ints that fit 64 bits, finite floats: themselves.
- other ints and floats: ``{"$int": "..."}``, ``{"$float": "nan" | "inf" | "-inf"}``.
- ``list``: ``{"$list": [...]}``; ``tuple``: ``{"$tuple": [...]}``.
- ``dict``: ``{"$dict": [[key, value], ...]}`` (keys of any encodable type, in order).
- ``set``, ``frozenset``, ``collections.deque``: ``{"$set" | "$frozenset": [...]}``,
  ``{"$deque": [...], "maxlen": m}``; ``collections.defaultdict`` with a built-in factory
  (``int``, ``float``, ``list``, ``dict``, ``set``) or a river class as factory.
- ``numpy.ndarray``: ``{"$ndarray": [...flat...], "dtype": "float64", "shape": [...]}``.
- river classes: ``{"$class": "module:QualName"}``.
- objects: ``{"$obj": "module:QualName", "$id": n, "state": ...}`` or, for Cython
  classes, ``{"$reduce": "module:__pyx_unpickle_X", "$id": n, "args": [...]}``; a
  second reference to the same object is ``{"$ref": n}`` (shared objects and cycles
  survive).
"""

from __future__ import annotations

import collections
import copyreg
import importlib
import math
import random
from typing import Any

import numpy as np

__all__ = ["encode", "decode"]

_ALLOWED_ROOT = "river"
_FACTORIES = {"int": int, "float": float, "list": list, "dict": dict, "set": set}
_NUMERIC_KINDS = "biufc"


def _allowed_module(module: str) -> bool:
    return module == _ALLOWED_ROOT or module.startswith(_ALLOWED_ROOT + ".")


def _qualified(obj: Any) -> str:
    return f"{obj.__module__}:{obj.__qualname__}"


def _resolve(path: str, *, want_class: bool) -> Any:
    """The allow-listed class or Cython unpickle function named ``module:qualname``."""
    module, _, qualname = path.partition(":")
    if not _allowed_module(module) or not qualname:
        raise ValueError(f"refusing to load {path!r}: only river classes are allowed")
    if not want_class and not qualname.startswith("__pyx_unpickle_"):
        raise ValueError(f"refusing to call {path!r}: only Cython unpickle functions")
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        raise ValueError(f"{path!r} does not exist in this river") from None
    # what was found must itself be defined in river (not, say, a module's import of os)
    if want_class and not isinstance(obj, type):
        raise ValueError(f"{path!r} is not a class")
    if not _allowed_module(getattr(obj, "__module__", "") or "") or \
            getattr(obj, "__qualname__", getattr(obj, "__name__", None)) != qualname:
        raise ValueError(f"refusing to load {path!r}: it is not defined there")
    return obj


class _Encoder:
    def __init__(self) -> None:
        self.ids: dict[int, int] = {}
        self.keep: list[Any] = []  # keeps encoded objects alive so ids stay unique

    def value(self, v: Any) -> Any:
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, int) and type(v) is int:
            return v if -2 ** 63 <= v < 2 ** 63 else {"$int": str(v)}
        if type(v) is float:
            return v if math.isfinite(v) else {"$float": repr(v)}
        if isinstance(v, np.generic):
            return self.value(v.item())
        if type(v) is tuple:
            return {"$tuple": [self.value(x) for x in v]}
        if type(v) is frozenset:
            return {"$frozenset": [self.value(x) for x in v]}
        if isinstance(v, type):
            if not _allowed_module(v.__module__):
                raise TypeError(f"cannot encode the class {_qualified(v)}")
            return {"$class": _qualified(v)}
        ref = self.ids.get(id(v))
        if ref is not None:
            return {"$ref": ref}
        if isinstance(v, np.ndarray):
            if v.dtype.kind not in _NUMERIC_KINDS:
                raise TypeError(f"cannot encode a numpy array of dtype {v.dtype}")
            return {"$ndarray": [self.value(x) for x in v.ravel().tolist()],
                    "dtype": v.dtype.str, "shape": list(v.shape)}
        n = self._remember(v)
        if type(v) is list:
            return {"$list": [self.value(x) for x in v], "$id": n}
        if type(v) is dict:
            return {"$dict": [[self.value(k), self.value(x)] for k, x in v.items()], "$id": n}
        if type(v) is collections.defaultdict:
            factory = v.default_factory
            if factory in _FACTORIES.values():
                name = factory.__name__
            elif isinstance(factory, type) and _allowed_module(factory.__module__):
                name = _qualified(factory)
            else:
                raise TypeError(f"cannot encode a defaultdict with factory {factory!r}")
            return {"$defaultdict": [[self.value(k), self.value(x)] for k, x in v.items()],
                    "factory": name, "$id": n}
        if type(v) is set:
            return {"$set": [self.value(x) for x in v], "$id": n}
        if type(v) is collections.deque:
            return {"$deque": [self.value(x) for x in v], "maxlen": v.maxlen, "$id": n}
        if type(v) is random.Random:
            return {"$random": self.value(v.getstate()), "$id": n}
        return self._object(v, n)

    def _remember(self, v: Any) -> int:
        n = len(self.ids)
        self.ids[id(v)] = n
        self.keep.append(v)
        return n

    def _object(self, v: Any, n: int) -> dict:
        cls = type(v)
        if not _allowed_module(cls.__module__):
            raise TypeError(f"cannot encode {_qualified(cls)}: only river objects are "
                            "written as JSON")
        reduced = v.__reduce_ex__(2)
        func, args = reduced[0], reduced[1]
        state = reduced[2] if len(reduced) > 2 else None
        if len(reduced) > 3 and any(x is not None for x in reduced[3:]):
            raise TypeError(f"cannot encode {_qualified(cls)}: item iterators in its reduce")
        if func is copyreg.__newobj__ and args and args[0] is cls and len(args) == 1:
            return {"$obj": _qualified(cls), "$id": n, "state": self.value(state)}
        name = getattr(func, "__name__", "")
        if name.startswith("__pyx_unpickle_") and _allowed_module(func.__module__):
            out = {"$reduce": f"{func.__module__}:{name}", "$id": n,
                   "args": [self.value(a) for a in args]}
            if state is not None:
                out["state"] = self.value(state)
            return out
        raise TypeError(f"cannot encode {_qualified(cls)}: unsupported reduce {func!r}")


class _Decoder:
    def __init__(self) -> None:
        self.objects: dict[int, Any] = {}

    def value(self, v: Any) -> Any:
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if not isinstance(v, dict) or len(v) == 0:
            raise ValueError(f"unexpected value in a river model encoding: {v!r:.80}")
        if "$ref" in v:
            try:
                return self.objects[v["$ref"]]
            except (KeyError, TypeError):
                raise ValueError(f"dangling reference {v['$ref']!r}") from None
        if "$int" in v:
            return int(v["$int"])
        if "$class" in v:
            return _resolve(v["$class"], want_class=True)
        if "$float" in v:
            return float(v["$float"])
        if "$tuple" in v:
            return tuple(self.value(x) for x in v["$tuple"])
        if "$frozenset" in v:
            return frozenset(self.value(x) for x in v["$frozenset"])
        if "$ndarray" in v:
            dtype = np.dtype(v["dtype"])
            if dtype.kind not in _NUMERIC_KINDS:
                raise ValueError(f"numpy dtype {dtype} is not allowed")
            data = [self.value(x) for x in v["$ndarray"]]
            return np.array(data, dtype=dtype).reshape([int(s) for s in v["shape"]])
        if "$list" in v:
            out: list = self._register(v, [])
            out.extend(self.value(x) for x in v["$list"])
            return out
        if "$dict" in v:
            d: dict = self._register(v, {})
            for k, x in v["$dict"]:
                d[self.value(k)] = self.value(x)
            return d
        if "$defaultdict" in v:
            name = v["factory"]
            factory = _FACTORIES.get(name) or _resolve(name, want_class=True)
            dd = self._register(v, collections.defaultdict(factory))
            for k, x in v["$defaultdict"]:
                dd[self.value(k)] = self.value(x)
            return dd
        if "$set" in v:
            s: set = self._register(v, set())
            s.update(self.value(x) for x in v["$set"])
            return s
        if "$deque" in v:
            q = self._register(v, collections.deque(maxlen=v.get("maxlen")))
            q.extend(self.value(x) for x in v["$deque"])
            return q
        if "$random" in v:
            r = self._register(v, random.Random())
            r.setstate(self.value(v["$random"]))
            return r
        if "$obj" in v:
            cls = _resolve(v["$obj"], want_class=True)
            obj = self._register(v, cls.__new__(cls))
            self._set_state(obj, self.value(v.get("state")))
            return obj
        if "$reduce" in v:
            func = _resolve(v["$reduce"], want_class=False)
            args = [self.value(a) for a in v["args"]]
            if not args or not isinstance(args[0], type) or \
                    not _allowed_module(args[0].__module__):
                raise ValueError(f"{v['$reduce']} must build a river class")
            obj = self._register(v, func(*args))
            if "state" in v:
                self._set_state(obj, self.value(v["state"]))
            return obj
        raise ValueError(f"unknown encoding {sorted(v)!r:.80}")

    def _register(self, v: dict, obj: Any) -> Any:
        n = v.get("$id")
        if not isinstance(n, int) or n in self.objects:
            raise ValueError(f"bad or repeated object id {n!r}")
        self.objects[n] = obj
        return obj

    @staticmethod
    def _set_state(obj: Any, state: Any) -> None:
        if state is None:
            return
        if getattr(type(obj), "__setstate__", None) is not None:
            obj.__setstate__(state)
            return
        slots = None
        if isinstance(state, tuple) and len(state) == 2:
            state, slots = state
        if state:
            obj.__dict__.update(state)
        for k, x in (slots or {}).items():
            setattr(obj, k, x)


def encode(obj: Any) -> Any:
    """``obj`` (a river model or any value it holds) as JSON-safe data.

    Raises
    ------
    TypeError
        For an object outside the allow-list (see the module docstring).
    """
    return _Encoder().value(obj)


def decode(data: Any) -> Any:
    """Rebuild what :func:`encode` wrote.

    Raises
    ------
    ValueError
        For malformed data or a class outside the allow-list.
    """
    return _Decoder().value(data)
