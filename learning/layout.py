"""A pipeline's record layout — the width of ``features`` and the type of ``label`` — and
how records are checked against it.

A layout is **declared** at Create (``learner.parameters.n_features`` and, for classifiers,
``classes``) or **agreed** from the stream when it is not: the spokes hold a pipeline's
first records and vote; hub 0 counts the votes of every spoke and decides only when one
layout has a strict majority of at least :data:`DEFAULT_QUORUM` records (the pipeline's
``trainingConfiguration.layoutQuorum``). So a minority of malformed records can never
fix a pipeline's layout, and a width seen once never wins. A Query forces a decision on
what has been seen (still a strict majority of at least two records), so a short stream
is not held for ever.

A record is checked in two steps: :func:`inspect_record` (is it a record at all: a list
of finite numbers of sane magnitude, a scalar label) and :meth:`Layout.check` (does it
fit this pipeline). Each refusal is a :class:`RecordRejected` with a machine-readable
``code`` (:data:`REASONS`) and a message naming what was expected and what came.
"""

from __future__ import annotations

import math
import operator
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

__all__ = ["RecordRejected", "Layout", "inspect_record", "all_fit", "check_bounds",
           "declared_bounds", "check_label_bounds", "label_kind", "REASONS", "DEFAULT_QUORUM",
           "MAX_ABS_FEATURE", "MAX_LABEL_CHARS", "decide", "declared_layout"]

#: Records that must agree (strict majority of the votes) before an undeclared layout is
#: fixed. Each spoke votes after ``ceil(quorum / n_spokes)`` records of its own.
DEFAULT_QUORUM = 32
#: Largest magnitude of a feature: beyond it a square overflows float64 (1e154² = inf),
#: and a variance, a norm or a PA step turns to inf or NaN for good.
MAX_ABS_FEATURE = 1e150
#: Longest string label (characters).
MAX_LABEL_CHARS = 1000

#: Reason codes of refused data records (dead letters' ``code``; a Query's ``rejectedBy``).
REASONS = {
    "not_json": "the Kafka record is not valid JSON (NaN and Infinity are not JSON)",
    "not_a_record": "not a JSON object with a 'features' list",
    "features_type": "'features' is not a list",
    "feature_type": "a feature is not a number (null, string, list, object)",
    "feature_range": f"a feature is beyond ±{MAX_ABS_FEATURE:g}, or outside the pipeline's "
                     "trainingConfiguration featureMin / featureMax",
    "width": "the number of features differs from the pipeline's",
    "label_missing": "a training record without a label, for a supervised learner",
    "label_type": "a label that is not a JSON scalar, or not of the pipeline's label type",
    "label_too_long": f"a string label of more than {MAX_LABEL_CHARS} characters",
    "label_range": f"a number label beyond ±{MAX_ABS_FEATURE:g}, or outside the pipeline's "
                   "trainingConfiguration labelMin / labelMax",
    "unseen_class": "a label outside the classes declared at Create",
    "too_many_classes": "a label of a new class past trainingConfiguration.maxClasses (classes "
                        "not declared)",
    "model_too_large": "a record whose width (layout not declared) or new class would make "
                       "the model larger than the service's max_model_params",
    "not_agreed": "the record disagrees with the layout the spokes agreed on",
    "fit_failed": "the learner refused the mini-batch",
    "predict_failed": "the learner could not predict the record",
    "backlog_full": "the pipeline was paused and already held max_backlog_bytes of records "
                    "on that spoke (operators.spoke_kernel)",
}

_FEATURE_TYPES = frozenset((int, float, bool))
_hypot = math.hypot
_le = operator.le
_SCALARS = {bool: "bool", int: "int", float: "float", str: "string"}
#: label kinds that need no check beyond their type (a string's length is checked)
_PLAIN_KINDS = frozenset(("bool", "int", "float"))
_NUMBER_KINDS = frozenset(("int", "float"))


class RecordRejected(ValueError):
    """A record this pipeline cannot use.

    Attributes
    ----------
    code : str
        One of :data:`REASONS`.
    """

    def __init__(self, message: str, code: str = "not_a_record") -> None:
        super().__init__(message)
        self.code = code


def label_kind(label: Any) -> str:
    """``"bool"``, ``"int"``, ``"float"`` or ``"string"`` for a JSON scalar label.

    Raises
    ------
    RecordRejected
        ``label_type`` for anything else (null, list, object), ``label_too_long`` for a
        string of more than :data:`MAX_LABEL_CHARS` characters, ``label_range`` for a
        number beyond ±:data:`MAX_ABS_FEATURE` (a regressor's error, squared in its
        metrics, would overflow: a target of 1e300 stopped the stream).
    """
    kind = _SCALARS.get(type(label))
    if kind is None:
        raise RecordRejected(f"a label is a JSON scalar (bool, number or string), got "
                             f"{_json_type(label)}", "label_type")
    if kind == "string" and len(label) > MAX_LABEL_CHARS:
        raise RecordRejected(f"a string label has at most {MAX_LABEL_CHARS} characters, got "
                             f"{len(label)}", "label_too_long")
    if kind in _NUMBER_KINDS and not -MAX_ABS_FEATURE <= label <= MAX_ABS_FEATURE:
        shown = f"{label:g}" if kind == "float" else f"an integer of {label.bit_length()} bits"
        raise RecordRejected(f"label = {shown} is beyond ±{MAX_ABS_FEATURE:g}", "label_range")
    return kind


def _json_type(value: Any) -> str:
    return {type(None): "null", dict: "an object", list: "an array", str: "a string",
            bool: "a bool"}.get(type(value), type(value).__name__)


def _check_features(features: list, missing_ok: bool = False) -> None:
    """The slow path of :func:`inspect_record`: which feature is wrong, if any."""
    for i, v in enumerate(features):
        if v is None and missing_ok:
            continue
        if type(v) not in _FEATURE_TYPES:
            hint = " (a missing value: a pipeline imputes it with StatImputer first in its " \
                "preProcessors)" if v is None else ""
            raise RecordRejected(f"feature {i} is {_json_type(v)}, not a number{hint}",
                                 "feature_type")
        if v != v or abs(v) > MAX_ABS_FEATURE:
            shown = f"{v:g}" if type(v) is float else f"an integer of {v.bit_length()} bits"
            raise RecordRejected(f"feature {i} = {shown} is beyond ±{MAX_ABS_FEATURE:g}",
                                 "feature_range")


def inspect_record(features: Any, label: Any, labelled: bool,
                   missing_ok: bool = False) -> tuple[int, str | None]:
    """Check that a record is one at all; returns its signature ``(width, label kind)``.

    Parameters
    ----------
    features : Any
        The record's ``features`` (parsed JSON): must be a list of JSON numbers of
        magnitude at most :data:`MAX_ABS_FEATURE` (``true`` and ``false`` count as 1 and
        0, as in numpy and river; ``-0`` is 0).
    label : Any
        The record's ``label`` (None when absent).
    labelled : bool
        Whether the label counts (a training record for a supervised learner); else it is
        ignored and the kind is None.
    missing_ok : bool
        Whether a feature may be ``null``, a missing value (a pipeline whose first
        preprocessor is :class:`learning.preprocessors.StatImputer`).

    Raises
    ------
    RecordRejected
        ``features_type``, ``feature_type``, ``feature_range``, ``label_missing``,
        ``label_type``, ``label_too_long`` or ``label_range``.
    """
    if type(features) is not list:
        raise RecordRejected(f"'features' is a list of numbers, got {_json_type(features)}",
                             "features_type")
    try:  # the common case in one C call: hypot >= every |x|, and fails on non-numbers
        fine = _hypot(*features) <= MAX_ABS_FEATURE
    except (TypeError, OverflowError):
        fine = False
    if not fine:
        _check_features(features, missing_ok)
    if not labelled:
        return len(features), None
    kind = _SCALARS.get(type(label))
    if kind is None or kind == "string" or kind in _NUMBER_KINDS and not (
            -MAX_ABS_FEATURE <= label <= MAX_ABS_FEATURE):  # the checks that can fail
        if label is None:
            raise RecordRejected("a training record needs a 'label' for this learner",
                                 "label_missing")
        kind = label_kind(label)
    return len(features), kind


def check_bounds(features: list, bounds: tuple) -> None:
    """Refuse a record with a feature outside its pipeline's declared bounds
    (``trainingConfiguration`` ``featureMin`` / ``featureMax``): a sentinel (-9999 for a
    missing reading, 3.4e38 for float32's largest) or a glitch of a sensor is an accepted
    number, and one of them in a running StandardScaler's or MinMaxScaler's statistics
    flattens that feature in every later record, for good (PA behind a StandardScaler on
    1,500 digits records: prequential accuracy 0.885, and 0.250 with six such records
    among them, ``tests/test_feature_bounds.py``); declared bounds keep them out. Bounds
    given feature by feature also catch a sentinel that lies within another feature's
    range (-9999 from a thermometer beside a pressure of -10,000).

    Parameters
    ----------
    features : list
        A record's ``features`` that passed :func:`inspect_record` (JSON numbers, or
        ``null`` for a missing one, which is not compared).
    bounds : (float, float) or (tuple of float, tuple of float)
        ``(featureMin, featureMax)``, one number each for every feature or one tuple each
        with a bound per feature (:func:`declared_bounds`); ``-inf`` / ``inf`` where one is
        not declared.

    Raises
    ------
    RecordRejected
        ``feature_range``, naming the first feature outside and the bounds
        (``feature 3 = 3.4e+38 is outside [featureMin, featureMax] = [-1000, 1000]``);
        ``width`` where the bounds are per feature and the record has another number of
        features.
    """
    lo, hi = bounds
    if type(lo) is tuple:
        _check_each(features, lo, hi)
        return
    try:
        if not features or lo <= min(features) and max(features) <= hi:
            return
    except TypeError:  # a missing value (None), for a pipeline that imputes
        pass
    for i, v in enumerate(features):
        if v is not None and not lo <= v <= hi:
            raise RecordRejected(f"feature {i} = {v:g} is outside [featureMin, featureMax] = "
                                 f"[{lo:g}, {hi:g}]", "feature_range")


def _check_each(features: list, lo: tuple, hi: tuple) -> None:
    """:func:`check_bounds` with a bound per feature."""
    if len(features) != len(lo):
        raise RecordRejected(f"the record has {len(features)} features; featureMin / "
                             f"featureMax declare {len(lo)}", "width")
    try:
        if all(map(_le, lo, features)) and all(map(_le, features, hi)):
            return
    except TypeError:  # a missing value (None), for a pipeline that imputes
        pass
    for i, v in enumerate(features):
        if v is not None and not lo[i] <= v <= hi[i]:
            raise RecordRejected(f"feature {i} = {v:g} is outside [featureMin[{i}], "
                                 f"featureMax[{i}]] = [{lo[i]:g}, {hi[i]:g}]", "feature_range")


def declared_bounds(low: float | list | None, high: float | list | None) -> tuple | None:
    """The bounds :func:`check_bounds` and :func:`check_label_bounds` take from a
    ``trainingConfiguration``'s validated ``featureMin`` and ``featureMax`` (each None, a
    number, or a list of numbers and None per feature) or ``labelMin`` and ``labelMax``:
    ``(low, high)`` as two floats, or where either is a list as two tuples of one float per
    feature; ``-inf`` / ``inf`` where none is declared; None when neither is declared."""
    if low is None and high is None:
        return None
    n = len(low) if isinstance(low, list) else len(high) if isinstance(high, list) else 0
    if not n:
        return (-math.inf if low is None else float(low),
                math.inf if high is None else float(high))

    def each(v: float | list | None, none: float) -> tuple:
        vs = v if isinstance(v, list) else [v] * n
        return tuple(none if x is None else float(x) for x in vs)
    return each(low, -math.inf), each(high, math.inf)


def check_label_bounds(label: Any, kind: str | None, bounds: tuple[float, float]) -> None:
    """Refuse a training record whose number label lies outside its pipeline's declared
    bounds (``trainingConfiguration`` ``labelMin`` / ``labelMax``): a regression target's
    sentinel (-9999) or glitch, as :func:`check_bounds` for features.

    Parameters
    ----------
    label : Any
        The record's label, of ``kind`` (:func:`inspect_record`).
    kind : str or None
        Only ``"int"`` and ``"float"`` labels are compared; others pass.
    bounds : (float, float)
        ``(labelMin, labelMax)``; ``-inf`` / ``inf`` where one is not declared.

    Raises
    ------
    RecordRejected
        ``label_range`` (``label = -9999 is outside [labelMin, labelMax] = [0, 100]``).
    """
    if kind in _NUMBER_KINDS and not bounds[0] <= label <= bounds[1]:
        raise RecordRejected(f"label = {label:g} is outside [labelMin, labelMax] = "
                             f"[{bounds[0]:g}, {bounds[1]:g}]", "label_range")


def all_fit(layout: "Layout", features: list, labels: list | None,
            bounds: tuple[float, float] | None = None,
            label_bounds: tuple[float, float] | None = None) -> bool:
    """Whether every record of a group fits a settled ``layout`` as it is, so that the
    group may be taken without a call per record: True only where :func:`inspect_record`
    and :meth:`Layout.check` would pass each of them without a word (False says nothing
    about a record: the caller then checks each one as usual, and reports those that do
    not fit).

    Parameters
    ----------
    layout : Layout
        Not pending, without declared classes (else False).
    features : list
        Each record's ``features`` (parsed JSON).
    labels : list or None
        Each record's ``label`` (None for a record without one) where the labels count (a
        supervised learner's training records), else None.
    bounds : tuple or None
        The pipeline's ``(featureMin, featureMax)`` (:func:`check_bounds`), None: none.
    label_bounds : (float, float) or None
        Its ``(labelMin, labelMax)`` (:func:`check_label_bounds`), None: none.
    """
    width = layout.n_features
    if layout.pending or layout.classes is not None or width is None:
        return False
    try:  # hypot >= every |x|, and fails on non-numbers, as in inspect_record
        if not all([type(f) is list and len(f) == width and _hypot(*f) <= MAX_ABS_FEATURE
                    for f in features]):
            return False
    except (TypeError, OverflowError):
        return False
    if bounds is not None and features:
        lo, hi = bounds
        if type(lo) is tuple:
            if len(lo) != width or not all(
                    [all(map(_le, lo, f)) and all(map(_le, f, hi)) for f in features]):
                return False
        elif not (lo <= min(map(min, features)) and max(map(max, features)) <= hi):
            return False
    if labels is None:
        return True
    kinds = {_SCALARS.get(type(label)) for label in labels}
    if not kinds <= _PLAIN_KINDS:  # a missing label, a string (its length), a non-scalar
        return False
    try:  # a number's magnitude, as in label_kind
        if labels and _hypot(*labels) > MAX_ABS_FEATURE:
            return False
    except OverflowError:
        return False
    if label_bounds is not None and labels and ("bool" in kinds or not (
            label_bounds[0] <= min(labels) and max(labels) <= label_bounds[1])):
        return False
    want = layout.label_type
    return want is None or kinds == {want} or (want == "number" and kinds <= _NUMBER_KINDS)


@dataclass
class Layout:
    """What a pipeline's records look like.

    Attributes
    ----------
    n_features : int or None
        The width of ``features``; None while not agreed.
    label_type : str or None
        ``"bool"``, ``"int"``, ``"float"``, ``"string"``, ``"number"`` (int or float, for
        regressors), or None (any: an unsupervised learner, or not agreed yet).
    classes : list or None
        Declared classes; labels outside them are refused (``unseen_class``).
    source : str
        ``"declared"`` (at Create or by an Update), ``"inferred"`` (agreed from the
        stream) or ``"pending"`` (records held until the spokes agree).
    """

    n_features: int | None = None
    label_type: str | None = None
    classes: list | None = None
    source: str = "pending"
    _class_keys: frozenset = field(default=frozenset(), repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.classes is not None:
            self._class_keys = frozenset((type(c), c) for c in self.classes)

    @property
    def pending(self) -> bool:
        return self.source == "pending"

    def check(self, width: int, kind: str | None, label: Any) -> None:
        """Whether a record of signature ``(width, kind)`` (from :func:`inspect_record`)
        fits this layout.

        Raises
        ------
        RecordRejected
            ``width`` (``expected 18 features, got 2``), ``label_type`` or ``unseen_class``.
        """
        if width != self.n_features:
            raise RecordRejected(f"expected {self.n_features} features, got {width}", "width")
        if kind is None:
            return
        if self.label_type is None:  # any label type; declared classes of several types
            if self.classes is not None and (type(label), label) not in self._class_keys:
                raise RecordRejected(f"label {label!r:.40} is not one of the declared "
                                     f"classes {self.classes!r:.200}", "unseen_class")
            return
        if self.label_type == "number":
            if kind not in ("int", "float"):
                raise RecordRejected(f"expected a number label, got a {kind}", "label_type")
            return
        if kind != self.label_type:
            raise RecordRejected(f"expected a{'n' if self.label_type == 'int' else ''} "
                                 f"{self.label_type} label, got a {kind} ({label!r:.40})",
                                 "label_type")
        if self.classes is not None and (type(label), label) not in self._class_keys:
            raise RecordRejected(f"label {label!r:.40} is not one of the declared classes "
                                 f"{self.classes!r:.200}", "unseen_class")

    def misfit(self, model_layout: dict, width: int | None = None) -> str | None:
        """Why a model laid out as ``model_layout`` (a learner's ``layout()``: a shard
        pushed to a hub, a replica's update) is not of this pipeline's model, or None: its
        width differs from ``width``, the model's width for these records (the records'
        width through the preprocessors; by default this layout's ``n_features``), both
        known, or it has classes outside the declared ones: a model from before an Update
        that changed the layout."""
        learned = model_layout.get("n_features")
        expected = self.n_features if width is None else width
        if learned is not None and expected is not None and learned != expected:
            return f"a model of {learned} features, not {expected}"
        if self.classes is not None:
            extra = [c for c in model_layout.get("classes") or ()
                     if (type(c), c) not in self._class_keys]
            if extra:
                return (f"a model of classes {extra!r:.100} outside the declared "
                        f"{self.classes!r:.100}")
        return None

    def to_json(self) -> dict:
        return {"nFeatures": self.n_features, "labelType": self.label_type,
                "classes": self.classes, "source": self.source}

    @classmethod
    def from_json(cls, d: dict) -> "Layout":
        return cls(d.get("nFeatures"), d.get("labelType"), d.get("classes"), d.get("source", "inferred"))


def declared_layout(learner_spec: dict, task: str, supervised: bool) -> Layout:
    """The layout a Create (or Update) request declares, or a pending one.

    Parameters
    ----------
    learner_spec : dict
        The request's ``learner``: ``n_features`` and ``classes`` are read from its
        ``parameters``, then its ``hyperParameters``.
    task : str
        The learner's task (``"classification"``, ``"regression"``, ``"clustering"``).
    supervised : bool
        Whether the learner needs labels.
    """
    n_features = classes = None
    for part in (learner_spec.get("parameters") or {}, learner_spec.get("hyperParameters") or {}):
        if n_features is None and part.get("n_features") is not None:
            n_features = int(part["n_features"])
        if classes is None and part.get("classes"):
            classes = list(part["classes"])
    label_type = None  # unsupervised: labels are not read
    if supervised and task == "regression":
        label_type = "number"
    elif supervised and classes:
        kinds = {_SCALARS.get(type(c)) for c in classes}
        label_type = kinds.pop() if len(kinds) == 1 else None
    return Layout(n_features, label_type, classes if task == "classification" else None,
                  "declared" if n_features is not None else "pending")


def decide(votes: Counter, quorum: int, force: bool, task: str, supervised: bool) -> Layout | None:
    """The layout the votes agree on, or None.

    Parameters
    ----------
    votes : Counter
        ``(width, label kind or None) → records``, summed over spokes.
    quorum : int
        Records a layout needs, and a strict majority of all votes; with ``force`` (a
        Query) a strict majority of at least two records is enough.
    task, supervised
        As for :func:`declared_layout`; a classifier also needs a strict majority label
        kind among the labelled records of the winning width.
    """
    total = sum(votes.values())
    widths: Counter = Counter()
    for (w, _), n in votes.items():
        widths[w] += n
    if not widths:
        return None
    width, n = widths.most_common(1)[0]
    if n < (2 if force else quorum) or 2 * n <= total:
        return None
    if not supervised:
        return Layout(width, None, None, "inferred")
    if task == "regression":
        return Layout(width, "number", None, "inferred")
    kinds = Counter({k: c for (w, k), c in votes.items() if w == width and k is not None})
    labelled = sum(kinds.values())
    if not labelled:
        return None
    kind, c = kinds.most_common(1)[0]
    if 2 * c <= labelled:
        return None
    return Layout(width, kind, None, "inferred")


def vote_list(votes: Counter) -> list[list]:
    """Votes as JSON: ``[[width, kind, records], ...]``."""
    return [[w, k, n] for (w, k), n in votes.items()]


def vote_counter(rows: Iterable) -> Counter:
    """The inverse of :func:`vote_list` (votes come from spokes: trusted code)."""
    out: Counter = Counter()
    for w, k, n in rows:
        out[(int(w), k)] += int(n)
    return out
