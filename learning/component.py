"""The base shared by learners and preprocessors (papers/002_9b954bd89ad87406.txt §3.3).

:class:`learning.learners.Learner` and :class:`learning.preprocessors.Preprocessor` both
derive from :class:`Component`, which turns stored constructor arguments into
hyperparameters and gives cloning and the JSON round trip for free.
"""

from __future__ import annotations

import inspect
from typing import Any, Self

from learning.errors import check_hyperparameters

__all__ = ["Component"]


class Component:
    """What learners and preprocessors share: constructor arguments as hyperparameters,
    run-time hyperparameter updates, clone, JSON round trip (papers/002 §3.3.3: models
    serialize to plain data, no pickle).

    Subclasses store their constructor arguments unchanged under their own names and
    implement the two state hooks ``_parameters_json`` / ``_load_parameters`` (the learned
    state as JSON-safe data, and back).
    """

    @classmethod
    def _hyperparameter_names(cls) -> tuple[str, ...]:
        """The constructor's parameter names, in order."""
        return tuple(p for p in inspect.signature(cls.__init__).parameters if p != "self")

    def hyperparameters(self) -> dict:
        """The constructor arguments by name, as stored (JSON-safe)."""
        return {name: getattr(self, name) for name in self._hyperparameter_names()}

    def update_hyperparameters(self, **kw: Any) -> None:
        """Change hyperparameters at run time; nothing changes if any value is rejected.

        Raises
        ------
        learning.errors.HyperparameterError (a ValueError)
            Naming the parameter, the value and what is allowed.
        """
        current = self.hyperparameters()
        check_hyperparameters(type(self).__name__, kw, tuple(current))
        type(self)(**{**current, **kw})  # validates with the constructor's own checks
        for name, value in kw.items():
            setattr(self, name, value)
        self._on_hyperparameters()

    def _on_hyperparameters(self) -> None:
        """Hook: refresh anything derived from hyperparameters."""

    def clone(self) -> Self:
        """A fresh instance (unfitted, no learned state) with the same hyperparameters."""
        return type(self)(**self.hyperparameters())

    def to_json(self) -> dict:
        """``{"name", "hyperParameters", "parameters"}`` (papers/002 §3.4), JSON-safe."""
        return {"name": type(self).__name__, "hyperParameters": self.hyperparameters(),
                "parameters": self._parameters_json()}

    @classmethod
    def from_json(cls, d: dict) -> Self:
        """Rebuild from :meth:`to_json` output (or a request's learner / preprocessor spec).

        ``hyperParameters`` and ``parameters`` may be missing or null, and so may any
        field of ``hyperParameters``: defaults are used.

        Raises
        ------
        learning.errors.HyperparameterError
            For a rejected hyperparameter or parameter (its ``name`` says which).
        """
        hyper = {k: v for k, v in (d.get("hyperParameters") or {}).items() if v is not None}
        check_hyperparameters(cls.__name__, hyper, cls._hyperparameter_names())
        component = cls(**hyper)
        component._load_parameters(d.get("parameters") or {})
        return component

    def _parameters_json(self) -> dict:
        raise NotImplementedError(f"{type(self).__name__} cannot be written as JSON")

    def _load_parameters(self, parameters: dict) -> None:
        if parameters:
            raise NotImplementedError(f"{type(self).__name__} takes no parameters")

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.hyperparameters().items())
        return f"{type(self).__name__}({args})"
