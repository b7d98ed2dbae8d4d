"""Class labels in canonical order, shared by every classifier whose model has one row (or
output) per class.

Rows follow the canonical order of their labels (sort key :func:`label_key`: type name,
then value), so two nodes that have seen the same label set lay their vectors out the
same way whatever order the labels arrived in, and :meth:`Learner.project` can align
vectors of nodes that have seen different sets (papers/002_9b954bd89ad87406.txt §3.3.3).
"""

from __future__ import annotations

import bisect
from typing import Any, Iterable

from learning.errors import ParameterError
from learning.learners.base import as_labels, label_key

__all__ = ["LabelIndex"]


class LabelIndex:
    """The labels seen so far, in canonical order, with each label's row.

    Attributes
    ----------
    classes : list
        The labels, canonical order; ``classes[k]`` owns row ``k``.

    Examples
    --------
    >>> index = LabelIndex()
    >>> [index.add(v) for v in ["b", 2, "a", True]]
    [0, 0, 1, 0]
    >>> index.classes
    [True, 2, 'a', 'b']
    >>> index.rows(["a", 2, "zzz"])
    [2, 1, -1]
    """

    def __init__(self, classes: Iterable = ()):
        self.classes: list = []
        self._keys: list = []
        self._index: dict = {}
        for label in classes:
            self.add(label)

    def __len__(self) -> int:
        return len(self.classes)

    def __contains__(self, label: Any) -> bool:
        return label_key(label) in self._index

    def add(self, label: Any) -> int:
        """Insert ``label`` at its canonical position if new; return that position (the
        row a caller must insert). An existing label returns its row unchanged."""
        key = label_key(label)
        if key in self._index:
            return self._index[key]
        pos = bisect.bisect(self._keys, key)
        self._keys.insert(pos, key)
        self.classes.insert(pos, label)
        self._index = {k: i for i, k in enumerate(self._keys)}
        return pos

    def row(self, label: Any) -> int:
        """The row of ``label``; -1 if unseen."""
        return self._index.get(label_key(label), -1)

    def rows(self, labels: Iterable) -> list[int]:
        """Rows of ``labels``; -1 for each unseen label."""
        index = self._index
        return [index.get((type(v).__name__, v), -1) for v in labels]  # label_key, inlined

    @staticmethod
    def checked(classes: Any, name: str = "classes") -> list:
        """Loaded ``classes`` as distinct JSON scalars (in the order given).

        Raises
        ------
        learning.errors.ParameterError
            If an element is not a JSON scalar or labels repeat.
        """
        try:
            out = as_labels(classes or [])
        except (TypeError, ValueError) as e:
            raise ParameterError(name, f"{name}: {e}") from None
        if len({label_key(v) for v in out}) != len(out):
            raise ParameterError(name, f"{name} must be distinct, got {out!r}")
        return out

    @staticmethod
    def canonical_order(classes: list) -> list[int]:
        """Positions that sort ``classes`` canonically (to reorder loaded rows)."""
        return sorted(range(len(classes)), key=lambda i: label_key(classes[i]))
