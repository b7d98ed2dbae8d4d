"""Mergeable sufficient statistics of the records a preprocessor learned
(papers/002_9b954bd89ad87406.txt §3.3.1).

Two kinds, each a dict of plain ints and 1-D float64 arrays of one width ``d``:

- moments ``{"n": int, "mean": (d,), "m2": (d,)}`` (``m2``: sum of squared deviations
  from the mean), kept by the standard scaler and the running mean and variance;
- extremes ``{"n": int, "min": (d,), "max": (d,)}``, kept by the min-max scaler;
- counted means ``{"n": int, "count": (d,), "mean": (d,)}`` (``count``: per feature, the
  records in which it was present), kept by the imputer of missing values.

``{"n": 0}`` (or None) is the empty record set. ``merge_*`` gives the statistics of the
union of two disjoint record sets; ``subtract_*`` those of the records of a set that are
not in a subset of it. Spokes of a parameter server use them to send their new records'
statistics to a hub, which merges them exactly into global statistics.

References
----------
Chan, T. F., Golub, G. H., LeVeque, R. J. (1983) Algorithms for computing the sample
variance: analysis and recommendations. The American Statistician 37(3):242–247
(the pairwise update, eq. 1.5b).
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from learning.errors import ParameterError

__all__ = ["MOMENTS", "EXTREMES", "COUNTED_MEANS", "MergeableStatistics", "combine_moments",
           "batch_moments", "check_moments", "merge_moments", "subtract_moments",
           "check_extremes", "merge_extremes", "subtract_extremes",
           "check_counted_means", "merge_counted_means", "subtract_counted_means"]

MOMENTS = ("mean", "m2")
EXTREMES = ("min", "max")
COUNTED_MEANS = ("count", "mean")


def combine_moments(n_a: Any, mean_a: np.ndarray, m2_a: np.ndarray,
                    n_b: Any, mean_b: np.ndarray, m2_b: np.ndarray
                    ) -> tuple[Any, np.ndarray, np.ndarray]:
    """Chan et al.'s pairwise update: the moments of the union of two disjoint record sets.

    With ``δ = mean_b − mean_a`` and ``n = n_a + n_b``: ``mean = mean_a + δ n_b / n``,
    ``m2 = m2_a + m2_b + δ² n_a n_b / n``. Unchecked; every argument may broadcast (e.g.
    ``n_b`` a ``(n_records, 1)`` column of prefix counts).

    Parameters
    ----------
    n_a, n_b : int or array of int, ``n_a + n_b > 0``
        Record counts.
    mean_a, mean_b, m2_a, m2_b : (d,) float64
        Means and sums of squared deviations.

    Returns
    -------
    n : int or array of int
    mean, m2 : (d,) float64

    References
    ----------
    Chan, Golub, LeVeque (1983), eq. 1.5b.

    Examples
    --------
    >>> import numpy as np
    >>> n, mean, m2 = combine_moments(2, np.array([2.0]), np.array([2.0]),
    ...                               1, np.array([5.0]), np.array([0.0]))
    >>> n, mean.tolist(), m2.tolist()   # the moments of 1, 3, 5
    (3, [3.0], [8.0])
    """
    n = n_a + n_b
    delta = mean_b - mean_a
    return n, mean_a + delta * (n_b / n), m2_a + m2_b + delta * delta * (n_a * n_b / n)


def batch_moments(X: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    """Count, mean and sum of squared deviations of a batch, per feature.

    Shifted by the first record, so a constant feature gets exactly its value as mean and
    exactly 0 as ``m2``.

    Parameters
    ----------
    X : (n_records, d) float64, n_records >= 1

    Returns
    -------
    n : int
    mean, m2 : (d,) float64
    """
    c = X[0]
    D = X - c
    shift = D.mean(axis=0)
    return X.shape[0], c + shift, ((D - shift) ** 2).sum(axis=0)


def _count(s: dict) -> int:
    n = s.get("n")
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
        raise ParameterError("n", f"n must be an integer >= 0, got {n!r}")
    return int(n)


def _vector(s: dict, name: str, d: int | None) -> np.ndarray:
    try:
        v = np.array(s.get(name), dtype=np.float64)  # a copy, never a view
    except (TypeError, ValueError):
        raise ParameterError(name, f"{name} must hold numbers") from None
    if v.ndim != 1 or v.shape[0] < 1:
        raise ParameterError(name, f"{name} must be a 1-D array of >= 1 numbers, got shape "
                             f"{v.shape}")
    if d is not None and v.shape[0] != d:
        raise ParameterError(name, f"{name} has {v.shape[0]} features, expected {d}")
    if not np.all(np.isfinite(v)):
        raise ParameterError(name, f"{name} must be finite, got {v.tolist()}")
    return v


def _check(s: dict | None, keys: tuple[str, str], n_features: int | None) -> dict | None:
    """A validated copy of ``s`` (ints and new float64 arrays), or None for no records."""
    if s is None:
        return None
    if not isinstance(s, dict):
        raise ParameterError("statistics", f"statistics must be a dict or None, got "
                             f"{type(s).__name__}")
    unknown = set(s) - {"n", *keys}
    if unknown:
        name = sorted(map(str, unknown))[0]
        raise ParameterError(name, f"unknown statistic {name!r}; expected n, {', '.join(keys)}")
    n = _count(s)
    if n == 0:
        return None
    missing = [k for k in keys if s.get(k) is None]
    if missing:
        raise ParameterError(missing[0], f"{missing[0]} is required when n > 0")
    first = _vector(s, keys[0], n_features)
    return {"n": n, keys[0]: first, keys[1]: _vector(s, keys[1], first.shape[0])}


def _same_width(a: dict | None, b: dict | None, key: str) -> None:
    if a is not None and b is not None and a[key].shape != b[key].shape:
        raise ParameterError(key, f"cannot combine statistics of {a[key].shape[0]} and "
                             f"{b[key].shape[0]} features")


def _subtracted_count(total: dict | None, part: dict | None) -> int:
    n, n_a = (0 if total is None else total["n"]), (0 if part is None else part["n"])
    if n_a > n:
        raise ParameterError("n", f"part has more records ({n_a}) than total ({n})")
    return n - n_a


def check_moments(s: dict | None, n_features: int | None = None) -> dict | None:
    """Validate moments ``{"n", "mean", "m2"}``.

    Parameters
    ----------
    s : dict or None
        ``{"n": int >= 0, "mean": (d,), "m2": (d,)}``; the arrays may be absent when
        ``n == 0``.
    n_features : int or None
        The width ``d`` expected, if known.

    Returns
    -------
    dict or None
        A copy with new float64 arrays, or None when ``s`` holds no records.

    Raises
    ------
    learning.errors.ParameterError (a ValueError)
        Naming the statistic: a negative or non-integer ``n``, an unknown key, a missing,
        non-finite or wrongly sized array, a negative ``m2``.
    """
    s = _check(s, MOMENTS, n_features)
    if s is not None and np.any(s["m2"] < 0):
        raise ParameterError("m2", f"m2 must be >= 0, got {s['m2'].tolist()}")
    return s


def merge_moments(a: dict | None, b: dict | None) -> dict:
    """The moments of the union of two disjoint record sets (Chan et al. 1983).

    Parameters
    ----------
    a, b : dict or None
        Moments ``{"n", "mean": (d,), "m2": (d,)}``; None or ``{"n": 0}`` for no records.

    Returns
    -------
    dict
        New moments; ``{"n": 0}`` when neither side has records.

    Raises
    ------
    learning.errors.ParameterError (a ValueError)
        If either side is invalid (:func:`check_moments`) or the widths differ.

    Examples
    --------
    >>> import numpy as np
    >>> a = {"n": 2, "mean": np.array([2.0]), "m2": np.array([2.0])}   # records 1, 3
    >>> b = {"n": 1, "mean": np.array([5.0]), "m2": np.array([0.0])}   # record 5
    >>> m = merge_moments(a, b)
    >>> m["n"], m["mean"].tolist(), m["m2"].tolist()
    (3, [3.0], [8.0])
    >>> merge_moments(None, {"n": 0})
    {'n': 0}
    """
    a, b = check_moments(a), check_moments(b)
    _same_width(a, b, "mean")
    if a is None or b is None:
        return a or b or {"n": 0}
    n, mean, m2 = combine_moments(a["n"], a["mean"], a["m2"], b["n"], b["mean"], b["m2"])
    return {"n": n, "mean": mean, "m2": m2}


def subtract_moments(total: dict | None, part: dict | None) -> dict:
    """The moments of the records in ``total`` that are not in ``part`` (``part ⊆ total``).

    Chan et al.'s update solved for ``b``: ``n_b = n − n_a``,
    ``δ = mean_b − mean_a = (mean − mean_a) n / n_b``, ``mean_b = mean_a + δ``,
    ``m2_b = m2 − m2_a − δ² n_a n_b / n``, clamped at 0 against rounding. Equal means give
    ``δ = 0`` exactly, so a constant feature keeps ``m2 == 0`` exactly.

    Parameters
    ----------
    total, part : dict or None
        Moments ``{"n", "mean": (d,), "m2": (d,)}``; None or ``{"n": 0}`` for no records.

    Returns
    -------
    dict
        New moments; ``{"n": 0}`` when ``part`` has every record of ``total``.

    Raises
    ------
    learning.errors.ParameterError (a ValueError)
        If either side is invalid (:func:`check_moments`), the widths differ, or ``part``
        has more records than ``total``.

    Examples
    --------
    >>> import numpy as np
    >>> total = {"n": 3, "mean": np.array([3.0]), "m2": np.array([8.0])}   # records 1, 3, 5
    >>> part = {"n": 2, "mean": np.array([2.0]), "m2": np.array([2.0])}    # records 1, 3
    >>> b = subtract_moments(total, part)
    >>> b["n"], b["mean"].tolist(), b["m2"].tolist()
    (1, [5.0], [0.0])
    >>> subtract_moments(total, total)
    {'n': 0}
    """
    total, part = check_moments(total), check_moments(part)
    _same_width(total, part, "mean")
    n_b = _subtracted_count(total, part)
    if n_b == 0:
        return {"n": 0}
    if part is None:
        return total
    n, n_a = total["n"], part["n"]
    delta = (total["mean"] - part["mean"]) * (n / n_b)
    m2 = np.maximum(total["m2"] - part["m2"] - delta * delta * (n_a * n_b / n), 0.0)
    return {"n": n_b, "mean": part["mean"] + delta, "m2": m2}


def check_extremes(s: dict | None, n_features: int | None = None) -> dict | None:
    """Validate extremes ``{"n", "min", "max"}``.

    Parameters
    ----------
    s : dict or None
        ``{"n": int >= 0, "min": (d,), "max": (d,)}``; the arrays may be absent when
        ``n == 0``.
    n_features : int or None
        The width ``d`` expected, if known.

    Returns
    -------
    dict or None
        A copy with new float64 arrays, or None when ``s`` holds no records.

    Raises
    ------
    learning.errors.ParameterError (a ValueError)
        Naming the statistic: a negative or non-integer ``n``, an unknown key, a missing,
        non-finite or wrongly sized array, ``max < min``.
    """
    s = _check(s, EXTREMES, n_features)
    if s is not None and np.any(s["max"] < s["min"]):
        raise ParameterError("max", "max must be >= min")
    return s


def merge_extremes(a: dict | None, b: dict | None) -> dict:
    """The extremes of the union of two disjoint record sets: counts added, elementwise
    minimum and maximum.

    Parameters
    ----------
    a, b : dict or None
        Extremes ``{"n", "min": (d,), "max": (d,)}``; None or ``{"n": 0}`` for no records.

    Returns
    -------
    dict
        New extremes; ``{"n": 0}`` when neither side has records.

    Raises
    ------
    learning.errors.ParameterError (a ValueError)
        If either side is invalid (:func:`check_extremes`) or the widths differ.

    Examples
    --------
    >>> import numpy as np
    >>> m = merge_extremes({"n": 2, "min": np.array([1.0]), "max": np.array([3.0])},
    ...                    {"n": 1, "min": np.array([5.0]), "max": np.array([5.0])})
    >>> m["n"], m["min"].tolist(), m["max"].tolist()
    (3, [1.0], [5.0])
    """
    a, b = check_extremes(a), check_extremes(b)
    _same_width(a, b, "min")
    if a is None or b is None:
        return a or b or {"n": 0}
    return {"n": a["n"] + b["n"], "min": np.minimum(a["min"], b["min"]),
            "max": np.maximum(a["max"], b["max"])}


def subtract_extremes(total: dict | None, part: dict | None) -> dict:
    """The count of the records in ``total`` that are not in ``part`` (``part ⊆ total``),
    with ``total``'s extremes.

    Extremes cannot be subtracted; ``total``'s bound those of the remaining records, and
    merging is idempotent for extremes, so ``merge_extremes(part, subtract_extremes(total,
    part))`` is exactly ``total``, as is merging the result into any superset of ``part``.

    Parameters
    ----------
    total, part : dict or None
        Extremes ``{"n", "min": (d,), "max": (d,)}``; None or ``{"n": 0}`` for no records.

    Returns
    -------
    dict
        ``{"n": n − n_a, "min", "max"}`` (new arrays), or ``{"n": 0}`` when ``part`` has
        every record of ``total``.

    Raises
    ------
    learning.errors.ParameterError (a ValueError)
        If either side is invalid (:func:`check_extremes`), the widths differ, or ``part``
        has more records than ``total``.

    Examples
    --------
    >>> import numpy as np
    >>> total = {"n": 3, "min": np.array([1.0]), "max": np.array([5.0])}
    >>> b = subtract_extremes(total, {"n": 2, "min": np.array([1.0]), "max": np.array([3.0])})
    >>> b["n"], b["min"].tolist(), b["max"].tolist()
    (1, [1.0], [5.0])
    """
    total, part = check_extremes(total), check_extremes(part)
    _same_width(total, part, "min")
    n_b = _subtracted_count(total, part)
    if n_b == 0:
        return {"n": 0}
    return {**total, "n": n_b}


def check_counted_means(s: dict | None, n_features: int | None = None) -> dict | None:
    """Validate counted means ``{"n", "count", "mean"}``.

    Parameters
    ----------
    s : dict or None
        ``{"n": int >= 0, "count": (d,), "mean": (d,)}``: per feature the records in which
        it was present (whole numbers in [0, n]) and the mean of its values there (0 where
        the count is 0); the arrays may be absent when ``n == 0``.
    n_features : int or None
        The width ``d`` expected, if known.

    Returns
    -------
    dict or None
        A copy with new float64 arrays, or None when ``s`` holds no records.

    Raises
    ------
    learning.errors.ParameterError (a ValueError)
        Naming the statistic: a bad ``n``, an unknown key, a missing, non-finite or
        wrongly sized array, a count that is not a whole number in [0, n].
    """
    s = _check(s, COUNTED_MEANS, n_features)
    if s is not None:
        c = s["count"]
        if np.any(c < 0) or np.any(c > s["n"]) or np.any(c != np.round(c)):
            raise ParameterError("count", f"count must be whole numbers in [0, n = {s['n']}]")
    return s


def _counted_mean(count: np.ndarray, mean: np.ndarray, shifted: np.ndarray) -> np.ndarray:
    """``mean`` moved by ``shifted`` where ``count > 0``, else 0."""
    return np.where(count > 0, mean + shifted, 0.0)


def merge_counted_means(a: dict | None, b: dict | None) -> dict:
    """The counted means of the union of two disjoint record sets: counts added, per
    feature ``mean = mean_a + (mean_b − mean_a) count_b / count`` (0 where no record had
    the feature).

    Parameters
    ----------
    a, b : dict or None
        Counted means ``{"n", "count": (d,), "mean": (d,)}``; None or ``{"n": 0}`` for no
        records.

    Returns
    -------
    dict
        New counted means; ``{"n": 0}`` when neither side has records.

    Raises
    ------
    learning.errors.ParameterError (a ValueError)
        If either side is invalid (:func:`check_counted_means`) or the widths differ.

    Examples
    --------
    >>> import numpy as np
    >>> a = {"n": 2, "count": np.array([2.0, 0.0]), "mean": np.array([2.0, 0.0])}
    >>> b = {"n": 1, "count": np.array([1.0, 1.0]), "mean": np.array([5.0, 7.0])}
    >>> m = merge_counted_means(a, b)
    >>> m["n"], m["count"].tolist(), m["mean"].tolist()
    (3, [3.0, 1.0], [3.0, 7.0])
    """
    a, b = check_counted_means(a), check_counted_means(b)
    _same_width(a, b, "mean")
    if a is None or b is None:
        return a or b or {"n": 0}
    count = a["count"] + b["count"]
    safe = np.where(count > 0, count, 1.0)
    mean = _counted_mean(count, a["mean"], (b["mean"] - a["mean"]) * (b["count"] / safe))
    return {"n": a["n"] + b["n"], "count": count, "mean": mean}


def subtract_counted_means(total: dict | None, part: dict | None) -> dict:
    """The counted means of the records in ``total`` that are not in ``part``
    (``part ⊆ total``): counts subtracted, per feature
    ``mean_b = mean_a + (mean − mean_a) count / count_b`` (0 where ``count_b`` is 0).

    Parameters
    ----------
    total, part : dict or None
        Counted means; None or ``{"n": 0}`` for no records.

    Returns
    -------
    dict
        New counted means; ``{"n": 0}`` when ``part`` has every record of ``total``.

    Raises
    ------
    learning.errors.ParameterError (a ValueError)
        If either side is invalid (:func:`check_counted_means`), the widths differ, or
        ``part`` has more records than ``total`` (in all, or of one feature).
    """
    total, part = check_counted_means(total), check_counted_means(part)
    _same_width(total, part, "mean")
    n_b = _subtracted_count(total, part)
    if n_b == 0:
        return {"n": 0}
    if part is None:
        return total
    count_b = total["count"] - part["count"]
    if np.any(count_b < 0):
        raise ParameterError("count", "part has more records of a feature than total")
    safe = np.where(count_b > 0, count_b, 1.0)
    mean = _counted_mean(count_b, part["mean"],
                         (total["mean"] - part["mean"]) * (total["count"] / safe))
    return {"n": n_b, "count": count_b, "mean": mean}


class MergeableStatistics:
    """What a preprocessor with running statistics of one kind (:data:`MOMENTS`,
    :data:`EXTREMES` or :data:`COUNTED_MEANS`, named by ``_STATISTICS``) shares: ``statistics``,
    ``load_statistics``, ``merge_statistics`` and ``subtract_statistics`` of
    :class:`learning.preprocessors.Preprocessor`, from two hooks: ``_get_statistics()``
    (the two arrays of the kind, ``(d,)`` float64 each, while ``n > 0``) and
    ``_set_statistics(n, a, b)`` (``a``, ``b`` None for ``n = 0``). The class keeps ``n``
    and ``n_features``.
    """

    _STATISTICS: tuple[str, str]

    def _kind(self) -> tuple:
        return _KINDS[self._STATISTICS]

    def statistics(self) -> dict:
        """``{"n": int, <the kind's two statistics>: (d,) float64}`` (new arrays), or
        ``{"n": 0}`` before any record."""
        if self.n == 0:
            return {"n": 0}
        a, b = self._get_statistics()
        return {"n": self.n, self._STATISTICS[0]: np.array(a, dtype=np.float64),
                self._STATISTICS[1]: np.array(b, dtype=np.float64)}

    def load_statistics(self, s: dict | None) -> None:
        """Replace the running statistics with ``s``; None or ``{"n": 0}`` returns to the
        no-record state (a known width is kept).

        Raises
        ------
        learning.errors.ParameterError (a ValueError)
            Naming the statistic rejected, e.g. a width other than ``n_features``
            (:func:`check_moments`, :func:`check_extremes`).
        """
        s = self._kind()[0](s, self.n_features)
        if s is None:
            self._set_statistics(0, None, None)
            return
        a, b = (s[k] for k in self._STATISTICS)
        self.n_features = a.shape[0]
        self._set_statistics(s["n"], a, b)

    @classmethod
    def merge_statistics(cls, a: dict | None, b: dict | None) -> dict:
        """:func:`merge_moments` or :func:`merge_extremes`."""
        return _KINDS[cls._STATISTICS][1](a, b)

    @classmethod
    def subtract_statistics(cls, total: dict | None, part: dict | None) -> dict:
        """:func:`subtract_moments` or :func:`subtract_extremes` (for extremes the count is
        subtracted and the extremes stay ``total``'s, which merging keeps exact)."""
        return _KINDS[cls._STATISTICS][2](total, part)


#: kind → (check, merge, subtract)
_KINDS = {MOMENTS: (check_moments, merge_moments, subtract_moments),
          EXTREMES: (check_extremes, merge_extremes, subtract_extremes),
          COUNTED_MEANS: (check_counted_means, merge_counted_means, subtract_counted_means)}
