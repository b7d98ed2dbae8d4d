"""What every pipeline's spoke and hub do whatever their protocol: mini-batching,
prequential (test-then-train) statistics, predictions, and answering Query requests
(papers/002 §3.3: "to maintain statistics per-learner and globally", "to interact with
the environment through a special control API").
"""

from __future__ import annotations

import itertools
import logging
import math
from collections import Counter, deque
from dataclasses import replace
from functools import partial
from types import SimpleNamespace
from typing import Any

import numpy as np
import orjson

from learning.drift import NONE as NO_DETECTOR
from learning.drift import DriftMonitor, drift_summary
from learning.errors import RequestError
from learning.layout import (DEFAULT_QUORUM, Layout, RecordRejected, all_fit, check_bounds,
                             check_label_bounds, declared_bounds, declared_layout, decide,
                             inspect_record, vote_counter, vote_list)
from learning.learners.base import label_key
from learning.learners.labels import LabelIndex
from learning.metrics import SUPERVISED_TASKS, QualityState, json_number, report
from learning.pipeline import Pipeline
from learning.protocols.parameters import TRAINING_PARAMETERS
from learning.registry import (make_learner, make_pipeline, make_preprocessor,
                               model_learner_spec)
from learning.registry import model_width as _model_width
from learning.scaling import describe, scale_learner, spoke_mini_batch_size
from learning.update import apply_update
from middleware import Node, remote

log = logging.getLogger(__name__)

__all__ = ["PipelineSpoke", "PipelineHub", "RecordRejected"]


def _build_pipeline(request) -> Pipeline:
    """The pipeline a Create request describes (:func:`learning.registry.make_pipeline`:
    its learner built for the records as the preprocessors make them)."""
    return make_pipeline(request.pre_processors, request.learner)


LAYOUT_KEYS = ("n_features", "classes")
#: While a pipeline's layout is pending, a spoke whose held records have no clear majority
#: (the stream is ambiguous) holds at most this many times ``layoutQuorum`` records; beyond,
#: the oldest is dead-lettered (``not_agreed``). With a clear majority hub 0's answer is only
#: in flight (a round trip through Kafka, seconds at a job's start, thousands of records at
#: full rate), and the bound is :data:`HELD_AT_MOST_PER_QUORUM` times ``layoutQuorum``.
HELD_PER_QUORUM = 64
HELD_AT_MOST_PER_QUORUM = 4096
#: Forecasting records a spoke keeps, at most, before it predicts them in one call
#: (:meth:`PipelineSpoke.settle_forecasts`; the model does not change between them, so one
#: matrix product answers them all): a bound on what a long run of forecasts holds, not a
#: tuned value (a crossing brings ``max_batch_records``, 250 by default, at most). The gain, on
#: Shuttle's demo pipeline: docs/performance.md, "Forecasts predicted together".
FORECASTS_PER_CALL = 256
#: The reason of a forecasting record whose regression prediction is inf or NaN (its
#: features overflow the model's score): dead-lettered (``predict_failed``), where JSON
#: would have carried a ``null`` prediction that looks like "nothing learned yet".
NONFINITE_PREDICTION = ("its prediction is not finite (inf or NaN): a feature too large for "
                        "this model's score")
#: Records of one Kafka message (a JSON array), at least, that a pipeline takes as a group
#: (:meth:`PipelineSpoke.on_records`): checked in one pass and buffered by slices, the same
#: records, order, mini-batches and predictions as one at a time. Fewer go one by one.
#: Spoke kernel on e2e's 50-record messages: docs/performance.md, "Records of one message
#: taken together".
GROUP_RECORDS = 8


def dead_letter(rec: Any, exc: RecordRejected, pipeline: Any, spoke: int,
                max_record_bytes: int = 16_384) -> dict:
    """A dead letter: ``{"pipeline", "spoke", "code", "reason", "record"}``; a record
    whose JSON exceeds ``max_record_bytes`` is replaced by ``{"truncated": true, "bytes":
    n, "head": its first 1,000 characters}`` (a dead letter stays below Kafka's 1 MB)."""
    try:
        raw = orjson.dumps(rec)
    except TypeError:
        raw = orjson.dumps(repr(rec))
    if len(raw) > max_record_bytes:
        rec = {"truncated": True, "bytes": len(raw),
               "head": raw[:1000].decode("utf-8", "replace")}
    return {"pipeline": pipeline, "spoke": spoke, "code": exc.code, "reason": str(exc),
            "record": rec}


def _inspect_declared(missing_ok: bool, bounds: tuple | None,
                      label_bounds: tuple[float, float] | None, features: Any, label: Any,
                      labelled: bool) -> tuple[int, str | None]:
    """:func:`learning.layout.inspect_record` for a pipeline that takes missing values
    (``missing_ok``) or declared bounds of its features and (a labelled record's) number
    label (``trainingConfiguration`` ``featureMin`` / ``featureMax``, ``labelMin`` /
    ``labelMax``; None: not declared).

    Raises
    ------
    RecordRejected
        As :func:`learning.layout.inspect_record`, and ``feature_range`` or ``label_range``
        (:func:`learning.layout.check_bounds`, :func:`learning.layout.check_label_bounds`),
        ``width`` where the features' bounds are given per feature for another width.
    """
    width, kind = inspect_record(features, label, labelled, missing_ok)
    if bounds is not None:
        check_bounds(features, bounds)
    if label_bounds is not None and kind is not None:
        check_label_bounds(label, kind, label_bounds)
    return width, kind


def relayout_of(update, current: Layout, task: str, supervised: bool):
    """Split an Update into what :func:`learning.update.apply_update` takes and the new
    layout it declares (``learner.parameters`` ``n_features`` / ``classes``; None when
    it declares none).

    Raises
    ------
    RequestError
        ``invalid_parameter`` when the new layout has no width, or ``classes`` is not a
        list of at least one distinct JSON scalar.
    """
    params = dict(((update.learner or {}).get("parameters")) or {})
    given = {k: params.pop(k) for k in LAYOUT_KEYS if k in params}
    if not given:
        return update, None
    learner = {**update.learner, "parameters": params}
    n_features = given.get("n_features", current.n_features)
    classes = given.get("classes", current.classes)
    if not isinstance(n_features, int) or isinstance(n_features, bool) or n_features < 1:
        raise RequestError("invalid_parameter", f"a layout needs n_features, a positive integer "
                           f"(got {n_features!r})", "learner.parameters.n_features",
                           update.request_id)
    if classes is not None and (not isinstance(classes, list) or not classes or any(
            type(c) not in (bool, int, float, str) for c in classes)):
        raise RequestError("invalid_parameter", "classes is a non-empty list of JSON scalars",
                           "learner.parameters.classes", update.request_id)
    if classes is not None:  # distinct, as at Create (1 and 1.0 and true are three labels)
        try:
            LabelIndex.checked(classes)
        except ValueError as exc:
            raise RequestError("invalid_parameter", str(exc), "learner.parameters.classes",
                               update.request_id) from None
    spec = {"parameters": {"n_features": n_features, "classes": classes}}
    return replace(update, learner=learner), declared_layout(spec, task, supervised)


def with_layout(request, layout: Layout):
    """``request`` whose ``learner.parameters`` declare ``layout`` (and nothing learned)."""
    params = {"n_features": layout.n_features}
    if layout.classes is not None:
        params["classes"] = layout.classes
    return replace(request, learner={**request.learner, "parameters": params})


def needs_reset(learner, layout: Layout, width: int | None = None,
                records_were: int | None = None) -> bool:
    """Whether the pipeline cannot carry on under ``layout``: records of another width
    than ``records_were`` (the preprocessors learned that one, even where the model's
    width stays, as behind a FeatureSelector), a model of another width (``width``, the
    records' width through the preprocessors; by default ``layout.n_features``), or
    classes ``learner`` learned that ``layout`` does not declare."""
    if records_were is not None and records_were != layout.n_features:
        return True
    # a tree has no vector, hence no layout of its own (layout() raises): what it learned
    # was of records_were's width; an Update that declared a pending tree pipeline's layout
    # raised out of the hub kernel
    current = learner.layout() if learner.averageable and hasattr(learner, "layout") else {}
    learned = current.get("n_features")
    if learned is not None and learned != (layout.n_features if width is None else width):
        return True
    if layout.classes is not None and hasattr(learner, "classes"):
        declared = {(type(c), c) for c in layout.classes}
        return any((type(c), c) not in declared for c in learner.classes)
    return False


class _Batch:
    """A mini-batch of a window: ``X`` (n_records, n_features) float64, ``y`` its labels,
    ``failed`` once the learner refused it (no later pass then)."""

    __slots__ = ("X", "y", "failed")

    def __init__(self, X: np.ndarray, y: list) -> None:
        self.X, self.y, self.failed = X, y, False


class ModelWidth:
    """What a pipeline's nodes share: the width of its model, the record layout's width
    through the request's preprocessors (:func:`learning.registry.model_width`),
    remembered per record width (a preprocessor's width never changes by an Update)."""

    _model_widths: dict | None = None  # record width → model width (None: none yet)

    def model_width(self, layout: Layout) -> int | None:
        """The width of this pipeline's model for records laid out as ``layout``."""
        n = layout.n_features
        widths = self._model_widths
        if widths is None:
            widths = self._model_widths = {}
        if n not in widths:
            widths[n] = _model_width(self.request.pre_processors, n)
        return widths[n]


class PipelineSpoke(ModelWidth, Node):
    """One pipeline on one spoke: preprocess → predict, or buffer into mini-batches → fit.

    Parameters
    ----------
    request : learning.requests.Request
        The Create request; ``trainingConfiguration.miniBatchSize`` (records),
        ``miniBatches`` (mini-batches per synchronization) and ``scaling`` are read from
        it. Once attached to a network of ``n`` spokes, the spoke fits mini-batches of
        ``max(1, round(miniBatchSize / n))`` records under ``scaling`` ``batch`` or
        ``both``, and its learner steps at ``1 / n`` of its declared step size under
        ``learning-rate`` or ``both`` (papers/001_00243469e12aa123.txt §II-C, eq. 3 and 4;
        :mod:`learning.scaling`).

    Training (papers/003_026f5d1641a0ab17.txt §II.A, "The notion of epoch in a streaming
    setting"; §IV: a window of 256 tuples in 4 batches, 8 epochs): the spoke collects
    ``window`` records (W; 0: one mini-batch), then trains on them ``epochs`` times (E) in
    mini-batches of its ``mini_batch_size``, in stream order. The first pass is
    test-then-train (:meth:`learning.pipeline.Pipeline.test_then_train`): each record is
    predicted once, before any training on it, and counted in ``fitted`` and the quality
    metrics then; the later passes only fit (the preprocessors transform without learning
    again). The protocol hook :meth:`on_batch_fitted` runs after every fitted mini-batch,
    of every pass; while a synchronization pauses the stream (``ctx.pauses``) the rest of
    the window waits, and goes on as soon as the stream resumes, before the records that
    came meanwhile.

    Statistics (records): ``fitted``, ``predicted`` (forecasting records answered),
    ``rejected``, ``correct`` (prequential hits), ``loss_sum`` (sum of per-record losses),
    ``quality``: the prequential predictions' confusion counts or error moments, cumulative
    and over this spoke's share of ``trainingConfiguration.metricsWindow``
    (:class:`learning.metrics.QualityState`; None for clustering); a Query also reports
    ``held``: records waiting while this pipeline's stream is paused.
    """

    #: class defaults, so that a spoke restored from a snapshot taken before the field
    #: existed reports no quality metrics instead of failing
    quality: QualityState | None = None
    drift: DriftMonitor | None = None  # trainingConfiguration.driftDetector (learning.drift)
    window, epochs = 0, 1
    _work: deque | None = None
    _fitted_at_query = -1  # records fitted when the previous Query came (class default:
    # snapshots taken before it existed)
    _forecasts: list | None = None  # forecasting records taken, not yet predicted
    #: global models taken in (:meth:`model_version`); the synchronizing protocols count
    #: them, ``Independent`` takes none
    rounds = 0

    def __init__(self, request) -> None:
        super().__init__()
        self.request = request
        cfg = request.training_configuration
        self.scaling = TRAINING_PARAMETERS["scaling"].of(cfg)
        self.mini_batch_size = int(cfg["miniBatchSize"])  # per spoke once attached
        self.mini_batches = int(cfg["miniBatches"])
        self.pipeline = _build_pipeline(request)
        learner = self.pipeline.learner
        self._supervised = learner.supervised
        self._task = learner.task
        self.layout = declared_layout(request.learner or {}, self._task, self._supervised)
        self.quorum = int(cfg.get("layoutQuorum", DEFAULT_QUORUM))
        # a classifier's labels of this spoke's stream, while classes are not declared
        self._seen_classes: set | None = set() if self._counts_classes() else None
        # records held while the layout is pending: (training?, record, width, label kind)
        self._held: list[tuple[bool, dict, int, str | None]] = []
        self._votes: Counter = Counter()  # signatures of held records not yet told hub 0
        self._held_by: Counter = Counter()  # signatures of the held records
        self._vote_every = 0  # held records that make the next vote (set on attach)
        self.rejected_by: Counter = Counter()  # reason code -> records refused
        self._X: list[list[float]] = []
        self._y: list[Any] = []
        self.window = TRAINING_PARAMETERS["window"].of(cfg)   # W, records
        self.epochs = TRAINING_PARAMETERS["epochs"].of(cfg)   # E
        self._fill_at = self.window or self.mini_batch_size   # records that make a window
        # the window's mini-batches still to fit, in order: (batch, first pass?)
        self._work: deque[tuple[_Batch, bool]] = deque()
        self.fitted = self.predicted = self.rejected = self.correct = self.batches = 0
        self.fit_errors = 0
        self.last_error: str | None = None
        self.protocol_errors = 0
        self.loss_sum = 0.0
        self.queries = 0
        self.quality = QualityState(self._task, TRAINING_PARAMETERS["metricsWindow"].of(cfg)) \
            if self._supervised and self._task in SUPERVISED_TASKS else None

    @property
    def n_features(self) -> int | None:
        """The pipeline's record width (None while its layout is pending)."""
        return self.layout.n_features

    #: the last record width found to fit ``max_model_params`` while the layout is pending
    #: (:meth:`_check_size` builds the preprocessors to size the model: not per record)
    _sized_width: int | None = None

    #: ``trainingConfiguration.maxClasses`` and the labels counted against it; class
    #: defaults for spokes pickled before the cap (their classes are not counted)
    max_classes = 1000
    _seen_classes: set | None = None
    #: ``(featureMin, featureMax)`` and ``(labelMin, labelMax)`` of
    #: ``trainingConfiguration`` (-inf / inf where one is not declared; the features' as
    #: two tuples where given per feature: :func:`learning.layout.declared_bounds`), None
    #: when neither is (:func:`learning.layout.check_bounds`,
    #: :func:`learning.layout.check_label_bounds`)
    _bounds: tuple | None = None
    _label_bounds: tuple[float, float] | None = None
    #: whether a record's feature may be ``null`` (a missing value): the pipeline's first
    #: preprocessor fills them (``fills_missing``: :class:`learning.preprocessors.StatImputer`)
    missing_ok = False
    #: a record's checks before the layout's, ``(features, label, labelled) -> (width,
    #: kind)``: :func:`learning.layout.inspect_record`, or with the declared bounds and
    #: missing values (:func:`_inspect_declared`), chosen once by :meth:`configure` so
    #: that a pipeline without them pays nothing per record
    _inspect = staticmethod(inspect_record)

    def _counts_classes(self) -> bool:
        """Whether this spoke counts its stream's classes against ``maxClasses``: a
        classifier whose classes are not declared."""
        return self._task == "classification" and self._supervised and self.layout.classes is None

    def _new_class(self, label: Any) -> None:
        """Take ``label``, a class this spoke's stream had not brought yet, under
        ``maxClasses`` (PA-I: 0.8 µs a record at 10 classes, 17 at 1,000, 151 at 8,600, 20
        features; every synchronization carries classes × (features + 1) numbers; a
        regression target sent to a classifier makes a class of every record).

        Raises
        ------
        RecordRejected
            ``too_many_classes`` when the cap is reached.
        """
        seen = self._seen_classes
        if len(seen) >= self.max_classes:
            raise RecordRejected(
                f"a label of a new class ({label!r:.80}) past the {self.max_classes} classes "
                f"this spoke's stream brought (trainingConfiguration.maxClasses): declare "
                f"learner.parameters.classes, or raise maxClasses", "too_many_classes")
        if self.ctx.max_model_params is not None:
            known = getattr(self.pipeline.learner, "classes", None) or ()
            if label_key(label) not in {label_key(c) for c in known}:  # typed: 1 is not True
                # the model grows by a class (a row, an output)
                self._check_size(self.layout.n_features, max(len(seen), len(known)) + 1)
        seen.add(label)

    def _check_size(self, width: int, n_classes: int | None) -> None:
        """Refuse a record that would make this pipeline's model larger than the
        service's ``max_model_params`` (``ctx.max_model_params``; a Create's declared
        layout is checked when it is parsed, :func:`learning.registry.check_model_size`):
        records of ``width`` features while the layout is agreed from the stream (a
        Ridge model of 10,000 features holds 50 million numbers), or a new class that
        takes a classifier to ``n_classes`` (None: the declared classes, or none yet).
        The model is sized by :meth:`learning.learners.base.Learner.declared_size` at
        its width through the preprocessors (:func:`learning.registry.model_width`).

        Raises
        ------
        RecordRejected
            ``model_too_large``, naming the size and the limit.
        """
        limit = self.ctx.max_model_params
        if limit is None:
            return
        try:  # not remembered per width (model_width): any width may come while pending
            model_width = _model_width(self.request.pre_processors, width)
        except RequestError:
            return  # a preprocessor that cannot take the width: refused where it is used
        classes = self.layout.classes if n_classes is None else range(n_classes)
        learner = self.pipeline.learner
        size = type(learner).declared_size(learner.hyperparameters(),
                                           {"n_features": model_width, "classes": classes})
        if size > limit:
            what = (f"records of {width} features" if n_classes is None else
                    f"a new class ({n_classes} in all) at {width} features")
            raise RecordRejected(
                f"{what} would make a {type(learner).__name__} of {size:,} parameters, "
                f"above the service's max_model_params = {limit:,}: select features "
                f"(preProcessors FeatureSelector) or declare learner.parameters",
                "model_too_large")

    def attach(self, ctx) -> None:
        """As :meth:`Node.attach`; then the mini-batch and the learner's step are scaled to
        the network's ``n_spokes`` (:meth:`configure`)."""
        super().attach(ctx)
        self.configure()

    def configure(self) -> None:
        """Read mini-batching and ``scaling`` from ``self.request`` and scale for this
        pipeline's ``n`` spokes (papers/001 §II-C): ``mini_batch_size`` becomes
        ``max(1, round(miniBatchSize / n))`` records under ``batch`` / ``both`` (eq. 3),
        and the learner steps at ``1 / n`` of its declared step size under
        ``learning-rate`` / ``both`` (eq. 4); its declared hyperparameters stay as given.
        The rolling quality metrics keep ``ceil(metricsWindow / n)`` records on this spoke;
        ``window``, ``epochs``, ``maxClasses``, ``layoutQuorum`` and the bounds
        (``featureMin``, ``featureMax``, ``labelMin``, ``labelMax``) are read again; a new
        ``driftDetector`` starts afresh (:mod:`learning.drift`), an unchanged one goes on.

        Raises
        ------
        RequestError
            ``unsupported_pairing`` for step-size scaling of a learner without a step size
            (a request validated by :func:`learning.requests.parse_request` and
            :func:`learning.update.apply_update` never gets here with one).
        """
        cfg = self.request.training_configuration
        n = self.ctx.n_spokes
        self.scaling = TRAINING_PARAMETERS["scaling"].of(cfg)
        self.mini_batch_size = spoke_mini_batch_size(int(cfg["miniBatchSize"]), self.scaling, n)
        self.mini_batches = int(cfg["miniBatches"])
        self.window = TRAINING_PARAMETERS["window"].of(cfg)
        self.epochs = TRAINING_PARAMETERS["epochs"].of(cfg)
        self.max_classes = TRAINING_PARAMETERS["maxClasses"].of(cfg)
        self._bounds = declared_bounds(TRAINING_PARAMETERS["featureMin"].of(cfg),
                                      TRAINING_PARAMETERS["featureMax"].of(cfg))
        self._label_bounds = declared_bounds(TRAINING_PARAMETERS["labelMin"].of(cfg),
                                             TRAINING_PARAMETERS["labelMax"].of(cfg))
        preps = self.pipeline.preprocessors
        self.missing_ok = bool(preps) and preps[0].fills_missing
        declared = (self.missing_ok, self._bounds, self._label_bounds)
        self._inspect = inspect_record if declared == (False, None, None) else partial(
            _inspect_declared, *declared)
        quorum = TRAINING_PARAMETERS["layoutQuorum"].of(cfg)  # while the layout is pending
        if quorum != getattr(self, "quorum", None):
            self.quorum, self._vote_every = quorum, 0  # the next vote at the new quorum's share
        self._sized_width = None  # an Update may have changed the model's size
        self._fill_at = self.window or self.mini_batch_size
        scale_learner(self.pipeline.learner, self.scaling, n)
        if self.quality is not None:
            self.quality.resize(-(-TRAINING_PARAMETERS["metricsWindow"].of(cfg) // n))
        detector = TRAINING_PARAMETERS["driftDetector"].of(cfg)
        if detector == NO_DETECTOR or self.quality is None:
            self.drift = None
        elif self.drift is None or self.drift.name != detector:
            self.drift = DriftMonitor(detector, self._task)

    # -- stream --------------------------------------------------------------------------
    def on_record(self, train: bool, rec: dict) -> None:
        """One data record from the stream (a parsed JSON object with ``features``): check
        it, then fit (buffer into a mini-batch) or predict, emitting the prediction
        (``{"id", "pipeline", "spoke", "prediction"}``) or a dead letter through the
        context. While the layout is pending the record is held and votes for its
        signature (:mod:`learning.layout`); it is taken, in order, once hub 0 decides.
        """
        label = rec.get("label")
        features = rec["features"]
        layout = self.layout
        try:
            width, kind = self._inspect(features, label, train and self._supervised)
            if layout.pending:
                if width != self._sized_width:  # the width of the last record that fit
                    self._check_size(width, None)
                    self._sized_width = width
                self._hold(train, rec, width, kind)
                return
            if width != layout.n_features or (kind is not None and (
                    kind != layout.label_type or layout.classes is not None)):
                layout.check(width, kind, label)  # the common case needs no call
            seen = self._seen_classes
            if train and seen is not None and label not in seen:
                self._new_class(label)
        except RecordRejected as exc:
            self.refuse(rec, exc)
            return
        if self._work:  # a window paused by a synchronization goes on first
            self._train()
        if train:  # _take, inlined on the hot path
            self._X.append(features)
            self._y.append(label)
            if len(self._X) >= self._fill_at:
                self.flush()
        else:
            self._take(False, rec)

    def on_records(self, train: bool, recs: list) -> int:
        """The records of one Kafka message (a JSON array of objects with ``features``),
        in order, as :meth:`on_record` would take them one by one; returns how many were
        taken: fewer when the stream paused midway (a synchronization), and the host then
        holds the rest, in order.

        With at least :data:`GROUP_RECORDS` records that all fit the settled layout
        (:func:`learning.layout.all_fit`) and no paused window to finish first, they are
        buffered by slices: training records up to each mini-batch window's end (fitted
        there, as one by one), forecasting records up to :data:`FORECASTS_PER_CALL`. Else,
        and from wherever a window's end left work pending, one by one.
        """
        n, i, ctx = len(recs), 0, self.ctx
        if n >= GROUP_RECORDS and not self._work:
            features = [rec["features"] for rec in recs]
            labels = [rec.get("label") for rec in recs] if train else None
            seen = self._seen_classes
            if all_fit(self.layout, features, labels if self._supervised else None,
                       self._bounds, self._label_bounds) and (
                    not train or seen is None or seen.issuperset(labels)):
                i = self._take_group(train, recs, features, labels)
        for k in range(i, n):
            if ctx.pauses or ctx.backlog:
                return k
            self.on_record(train, recs[k])
        return n

    def _take_group(self, train: bool, recs: list, features: list, labels: list | None) -> int:
        """:meth:`on_records`' group path: take records that fit, slice by slice, until
        all are taken or the stream pauses or leaves work pending (then the rest goes one
        by one); returns how many were taken."""
        n, i, ctx = len(recs), 0, self.ctx
        while i < n and not (ctx.pauses or ctx.backlog or self._work):
            if train:
                X = self._X
                j = min(n, i + max(1, self._fill_at - len(X)))
                X.extend(features[i:j])
                self._y.extend(labels[i:j])
                i = j
                if len(X) >= self._fill_at:
                    self.flush()
            else:
                forecasts = self._forecasts
                if forecasts is None:
                    forecasts = self._forecasts = []
                j = min(n, i + max(1, FORECASTS_PER_CALL - len(forecasts)))
                forecasts.extend(recs[i:j])
                i = j
                if len(forecasts) >= FORECASTS_PER_CALL:
                    self.settle_forecasts()
        return i

    def _take(self, train: bool, rec: dict) -> None:
        if self._work:
            self._train()
        if train:
            self._X.append(rec["features"])
            self._y.append(rec.get("label"))
            if len(self._X) >= self._fill_at:
                self.flush()
            return
        forecasts = self._forecasts
        if forecasts is None:
            forecasts = self._forecasts = []
        forecasts.append(rec)
        if len(forecasts) >= FORECASTS_PER_CALL:
            self.settle_forecasts()

    def settle_forecasts(self) -> None:
        """Predict the forecasting records taken since the model last changed, in one call,
        and emit their predictions in order (``{"id", "pipeline", "spoke", "prediction",
        "modelVersion"}``, plus ``classes`` and ``probabilities`` with
        ``JobConfig.prediction_scores``). A pipeline defers its forecasts until its model is
        about to change (:meth:`_train`, first thing) or its host is done with a crossing
        (:class:`operators.spoke_kernel.SpokeKernel` calls this at the end of every
        batch, record and message): each prediction is the one the model of its record's
        arrival gives. If the whole group cannot be predicted (a learner error), each record
        is tried on its own, so a refused record is dead-lettered alone, as before."""
        recs = self._forecasts
        if not recs:
            return
        self._forecasts = []
        with_scores = self.ctx.prediction_scores
        try:
            X = np.asarray([rec["features"] for rec in recs], dtype=np.float64)
            predictions = self.pipeline.predict(X)
            scores = self._scores_of(X) if with_scores else None
        except (ValueError, TypeError, ArithmeticError, RuntimeError, NotImplementedError,
                RecordRejected):
            for rec in recs:
                self._forecast_one(rec, with_scores)
            return
        if self._task == "regression" and not (
                np.isfinite(predictions).all() if isinstance(predictions, np.ndarray)
                else all(map(math.isfinite, predictions))):
            for rec in recs:  # an overflowing score: that record alone is refused, in order
                self._forecast_one(rec, with_scores)
            return
        self.predicted += len(recs)
        if isinstance(predictions, np.ndarray) and (predictions.dtype.kind in "biuUO"
                                                    or predictions.dtype == np.float64):
            predictions = predictions.tolist()  # the same JSON, faster (not float32's)
        version, make = self.model_version, self._prediction
        self.ctx.emit_all(None, [make(rec, p, version, s) for rec, p, s
                                 in zip(recs, predictions, scores or itertools.repeat({}))])

    def _forecast_one(self, rec: dict, with_scores: bool) -> None:
        try:  # scores first: a record they refuse is not counted as predicted
            scores = self._scores(rec["features"]) if with_scores else {}
            prediction = self._predict(rec["features"])
        except RecordRejected as exc:
            self.refuse(rec, exc)
            return
        self.ctx.emit(None, self._prediction(rec, prediction, self.model_version, scores))

    def _prediction(self, rec: dict, prediction: Any, version: int, scores: dict) -> dict:
        """What goes on the predictions topic for one forecasting record."""
        return {"id": rec.get("id"), "pipeline": self.ctx.network, "spoke": self.ctx.index,
                "prediction": prediction, "modelVersion": version, **scores}

    def refuse(self, rec: Any, exc: RecordRejected) -> None:
        """Count a refused record under its reason and dead-letter it (with this pipeline)."""
        self.rejected += 1
        self.rejected_by[exc.code] += 1
        self.ctx.emit("deadLetters", dead_letter(rec, exc, self.ctx.network, self.ctx.index))

    def count_refused(self, code: str) -> None:
        """A record refused before it reached any pipeline (not JSON, not a record)."""
        self.rejected += 1
        self.rejected_by[code] += 1

    # -- layout agreement (learning.layout) ------------------------------------------------
    def _hold(self, train: bool, rec: dict, width: int, kind: str | None) -> None:
        self._held.append((train, rec, width, kind))
        self._held_by[(width, kind)] += 1
        self._votes[(width, kind)] += 1
        held = len(self._held)
        if held > HELD_PER_QUORUM * self.quorum and (
                held > HELD_AT_MOST_PER_QUORUM * self.quorum or not self._clear_majority()):
            # the stream itself is ambiguous (or hub 0 is unreachable for very long): bounded
            _, old, w, k = self._held.pop(0)
            self._held_by[(w, k)] -= 1
            self.refuse(old, RecordRejected(
                f"no layout agreed after {held - 1} records held on this spoke (no width and "
                f"label type has a strict majority): declare learner.parameters.n_features",
                "not_agreed"))
        if not self._vote_every:  # first vote: a quorum's share of this spoke
            self._vote_every = -(-self.quorum // self.ctx.n_spokes)
        if sum(self._votes.values()) >= self._vote_every:
            self.peers[0].vote(self.ctx.index, vote_list(self._votes))
            self._votes.clear()
            self._vote_every *= 2  # a vote takes a round trip to be answered: few messages

    def _clear_majority(self) -> bool:
        """Whether this spoke's held records alone agree on a layout (a strict majority of
        at least ``layoutQuorum``): then hub 0's answer is only in flight. A record without
        a label (forecasting) agrees with every label type of its width: a spoke that got
        mostly forecasting records at the start (its training topic read later) is not an
        ambiguous stream."""
        held = self._held_by
        n = max((held[(w, k)] + (held[(w, None)] if k is not None else 0)
                 for (w, k) in held), default=0)
        return n >= self.quorum and 2 * n > len(self._held)

    @remote(oneway=True)
    def agreed(self, layout: dict) -> None:
        """Hub 0 decided the layout: take the held records that fit it, in order."""
        if self.layout.pending:
            self.install_layout(Layout.from_json(layout))

    def install_layout(self, layout: Layout) -> None:
        """Use ``layout`` from now on; the held records are taken (or refused) in order.
        If the pipeline pauses midway (a synchronization), the rest waits in its backlog."""
        self.layout = layout
        if not self._counts_classes():  # declared classes: the layout refuses the others
            self._seen_classes = None
        elif self._seen_classes is None:
            self._seen_classes = set()
        held, self._held = self._held, []
        self._votes.clear()
        self._held_by.clear()
        for i, (train, rec, width, kind) in enumerate(held):
            if self.ctx.pauses:
                self.ctx.backlog.extendleft(reversed([(t, r) for t, r, *_ in held[i:]]))
                return
            try:
                layout.check(width, kind, rec.get("label"))
                seen = self._seen_classes
                if train and seen is not None and rec.get("label") not in seen:
                    self._new_class(rec.get("label"))
            except RecordRejected as exc:
                self.refuse(rec, exc)
                continue
            self._take(train, rec)

    def when_layout_settled(self, fn) -> None:
        """Run ``fn()`` now, or, while the layout is pending, once hub 0 has decided on
        what every spoke told it so far (a Query forces a decision: a strict majority of
        at least two records; with none, ``fn`` runs and the records stay held)."""
        if not self.layout.pending:
            fn()
            return
        votes = vote_list(self._votes)
        self._votes.clear()

        def settled(layout: dict | None) -> None:
            if layout is not None and self.layout.pending:
                self.install_layout(Layout.from_json(layout))
            fn()

        self.peers[0].settle(self.ctx.index, votes).then(settled).on_error(lambda _: fn())

    # -- direct feeding (the in-process kernel) ----------------------------------------------
    def on_train(self, features: list, label: Any) -> None:
        """Take one clean labelled training record; fit when a mini-batch is full. For
        callers that feed validated records one by one (the in-process kernel of
        ``omldm experiment``): a pending layout is fixed by the first record.

        Raises
        ------
        RecordRejected
            When the record does not fit this pipeline (counted in ``rejected``).
        """
        rec = {"features": features, "label": label}
        try:
            width, kind = self._inspect(features, label, self._supervised)
            self._adopt(width, kind)
            self.layout.check(width, kind, label)
        except RecordRejected as exc:
            self.rejected += 1
            self.rejected_by[exc.code] += 1
            raise
        self._take(True, rec)

    def on_predict(self, features: list) -> Any:
        """Predict one clean forecasting record (a JSON scalar label, or None before any
        fit); as :meth:`on_train`, for callers that feed records directly.

        Raises
        ------
        RecordRejected
            When the record does not fit this pipeline (counted in ``rejected``).
        """
        try:
            width, _ = self._inspect(features, None, False)
            self._adopt(width, None)
            self.layout.check(width, None, None)
            return self._predict(features)
        except RecordRejected as exc:
            self.rejected += 1
            self.rejected_by[exc.code] += 1
            raise

    def _adopt(self, width: int, kind: str | None) -> None:
        if self.layout.pending:
            self.layout = Layout(width, "number" if self._task == "regression" and kind else kind,
                                 None, "inferred")

    @property
    def model_version(self) -> int:
        """The version of the model this spoke predicts with: the global models it has
        taken in so far (``rounds`` of the synchronizing protocols: averaging rounds,
        answered pushes, elastic steps), 0 before the first and always for ``Independent``,
        counted on from a warm start's ``version`` (an export's, as the hubs count their
        updates on from it). Under the round protocols (BSP, FDA, EVENFLOW) it is the
        weights topic's version of that model (:mod:`operators.weights`). Every prediction
        carries it as ``modelVersion``."""
        return int(self.request.version or 0) + int(self.rounds)

    def _scores(self, features: list) -> dict:
        """``{"classes", "probabilities"}`` of one record, where the learner has class
        probabilities (``has_proba``); ``{}`` otherwise (``JobConfig.prediction_scores``)."""
        try:
            return self._scores_of(np.asarray([features], dtype=np.float64))[0]
        except (ValueError, TypeError, ArithmeticError, RuntimeError, NotImplementedError) as exc:
            raise RecordRejected(f"the learner cannot score it: {exc}", "predict_failed") from exc

    def _scores_of(self, X: np.ndarray) -> list[dict]:
        """:meth:`_scores` of each row of ``X`` ((n_records, n_features) float64); raises
        what the learner raises."""
        learner = self.pipeline.learner
        if not learner.has_proba or not learner.classes:
            return [{}] * len(X)
        classes = list(learner.classes)
        return [{"classes": classes,
                 "probabilities": [float(p) if math.isfinite(p) else None for p in row]}
                for row in self.pipeline.predict_proba(X).tolist()]

    def _predict(self, features: list) -> Any:
        try:
            X = np.asarray([features], dtype=np.float64)
            prediction = self.pipeline.predict(X)[0]
        except (ValueError, TypeError, ArithmeticError, RuntimeError) as exc:
            raise RecordRejected(f"the learner cannot predict it: {exc}", "predict_failed") from exc
        if self._task == "regression" and not math.isfinite(prediction):
            raise RecordRejected(NONFINITE_PREDICTION, "predict_failed")
        self.predicted += 1
        return prediction

    def flush(self) -> None:
        """Train on the buffered (possibly partial) window: its mini-batches of
        ``mini_batch_size`` records, test-then-train, then ``epochs − 1`` more passes that
        only fit; what a synchronization paused before is fitted first. Stops while the
        stream is paused (``ctx.pauses``): the rest goes on once it resumes."""
        if self._X:
            # every buffered record passed inspect_record and the layout: one width, numbers
            X = np.asarray(self._X, dtype=np.float64)
            y = self._y
            self._X, self._y = [], []
            b = self.mini_batch_size
            batches = [_Batch(X[lo:lo + b], y[lo:lo + b]) for lo in range(0, len(X), b)]
            if self._work is None:  # a spoke restored from a snapshot taken before windows
                self._work = deque()
            self._work.extend((batch, True) for batch in batches)
            for _ in range(self.epochs - 1):
                self._work.extend((batch, False) for batch in batches)
        self._train()

    def _train(self) -> None:
        """Fit the pending mini-batches in order until none is left or the stream pauses;
        the forecasts taken before are predicted first, with the model they came to."""
        if self._forecasts:
            self.settle_forecasts()
        work = self._work
        while work and not self.ctx.pauses:
            batch, first = work.popleft()
            if first:
                self._test_then_train(batch)
            elif not batch.failed:
                self._refit(batch)
        if work:  # paused midway: go on first thing once the stream resumes, before any
            # record that came meanwhile (the host runs a callable in the backlog)
            self.ctx.backlog.appendleft((None, self._train))

    def _refit(self, batch: "_Batch") -> None:
        """Another pass over a mini-batch: fit only, nothing counted but the hook's
        mini-batch (``on_batch_fitted(0)``: no record is new)."""
        if not self.fit_again(batch):
            batch.failed = True  # its records were counted at the first pass
            return
        self._batch_fitted(0)

    def fit_again(self, batch: "_Batch") -> bool:
        """Fit a mini-batch that was predicted and counted before, with the preprocessors'
        statistics as they are; nothing is counted and no hook runs. Returns False when the
        learner refuses it now (counted in ``fit_errors``, ``last_error`` set)."""
        try:
            self.pipeline.fit(batch.X, batch.y, learn_preprocessors=False)
        except (ValueError, TypeError, ArithmeticError, RuntimeError) as exc:
            self.fit_errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            return False
        return True

    def _test_then_train(self, batch: "_Batch") -> None:
        """The first pass over a mini-batch: each record predicted, then learned."""
        X, y = batch.X, batch.y
        try:
            predictions, n_correct, loss, proba = self.pipeline.test_then_train(
                X, y, with_proba=True)
        except (ValueError, TypeError, ArithmeticError, RuntimeError) as exc:
            # a batch the learner cannot take (e.g. a CNN fed records of the wrong width):
            # each record counted and dead-lettered with the reason, never fatal to the job
            self.fit_errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            refused = RecordRejected(f"the pipeline could not fit its mini-batch: "
                                     f"{self.last_error}", "fit_failed")
            for features, label in zip(X.tolist(), y):
                self.refuse({"features": features, "label": label}, refused)
            batch.failed = True  # no later pass over records that were refused
            return
        refused = self.pipeline.learner.refused_rows
        if refused:
            predictions, proba, y = self._refuse_rows(batch, refused, predictions, proba)
            X = batch.X
        if self.drift is not None:
            self._watch_drift(y, predictions)
        self.fitted += len(X)
        if self.quality is not None:
            self.quality.update(y, predictions, proba,
                                None if proba is None else self.pipeline.learner.classes)
        self.correct += n_correct
        self.loss_sum += float(loss)
        self.batches += 1
        self._batch_fitted(len(X))

    def _watch_drift(self, y: list, predictions: list) -> None:
        """Feed a first pass's prequential errors to the drift detector; each detection is
        logged and written to the responses topic (:meth:`DriftMonitor.event`)."""
        for at in self.drift.update(y, predictions, self.fitted):
            log.warning("pipeline %s, %s: concept drift detected by %s at the spoke's record %d "
                        "(%d so far)", self.ctx.network, self.name, self.drift.name, at,
                        self.drift.detected)
            self.ctx.emit("responses", self.drift.event(self.ctx.network, self.ctx.index, at))

    def _refuse_rows(self, batch: "_Batch", rows: tuple[int, ...], predictions: list,
                     proba: Any) -> tuple[list, Any, list]:
        """The records of ``batch`` the learner left out of its step (``rows``,
        :attr:`Learner.refused_rows`) are dead-lettered (``fit_failed``, with the learner's
        reason) and leave the batch, so later passes and replays do not see them; returns
        the predictions, probabilities and labels of the records kept."""
        reason = RecordRejected(f"the learner left the record out of its mini-batch: "
                                f"{self.pipeline.learner.refused_reason}", "fit_failed")
        out = set(rows)
        keep = [i for i in range(len(batch.y)) if i not in out]
        for i in rows:
            self.refuse({"features": batch.X[i].tolist(), "label": batch.y[i]}, reason)
        batch.X, batch.y = batch.X[keep], [batch.y[i] for i in keep]
        return ([predictions[i] for i in keep], None if proba is None else proba[keep],
                batch.y)

    #: mini-batches after which the protocol hook failed; a class default for snapshots
    #: taken before it was counted
    protocol_errors = 0

    def _batch_fitted(self, n_records: int) -> None:
        """:meth:`on_batch_fitted`, whose failure (a protocol's bug, or state an Update left
        behind) is logged with its traceback and counted in ``protocolErrors``: it never
        leaves the kernel, where it would fail the job and stop every pipeline (but where
        the host asks for it, ``ctx.reraise``: the in-process kernel's tests and
        experiments)."""
        try:
            self.on_batch_fitted(n_records)
        except Exception:  # a protocol's failure: keep the job (and other pipelines)
            self.protocol_errors += 1
            log.exception("%s: the protocol failed after a mini-batch", self.name)
            if self.ctx.reraise:
                raise

    def on_batch_fitted(self, n_records: int) -> None:
        """Protocol hook: a mini-batch was just fitted; ``n_records``: its records fitted
        for the first time (all of them in a window's first pass, 0 in the later epochs)."""

    # -- control -------------------------------------------------------------------------
    #: set while :meth:`query` runs a Query that asks for ``export``
    _exporting = False

    def query(self, request_id: Any, service: dict | None = None, export: bool = False) -> None:
        """Answer a Query (:meth:`on_query`); with ``export`` spoke 0 also gathers what
        hub 0 needs to export the whole global model (:meth:`gather_export`)."""
        self._exporting = export
        try:
            self.on_query(request_id, service)
        finally:
            self._exporting = False

    def check_export(self) -> None:
        """Whether a Query may ask this pipeline for ``export``.

        Raises
        ------
        RequestError
            ``unsupported`` (field ``export``): this protocol keeps no global model (every
            spoke learns alone, e.g. ``Independent``; protocols with hubs override this).
        """
        raise RequestError("unsupported", f"protocol {self.request.training_configuration['protocol']}"
                           f" keeps no global model to export: every spoke learns alone",
                           "export")

    def gather_export(self, done) -> None:
        """Collect what hub 0 lacks to export the global model and call ``done(extra)``
        (a JSON-safe dict reported with this spoke's statistics as ``export``)."""
        done({})

    def quiet_since_last_query(self) -> bool:
        """Whether this spoke fitted no record since the previous Query or lull (False at
        the first); this one becomes the previous. Call once per :meth:`on_lull`, after
        :meth:`flush`: the protocols' idle spokes (BSP, SSP, TensAIR) start from it."""
        quiet = self.fitted == self._fitted_at_query
        self._fitted_at_query = self.fitted
        return quiet

    def on_lull(self) -> None:
        """Protocol hook: the stream may have ended — a Query came, or this spoke got no
        data record for ``JobConfig.idle_after_ms`` (the host's timer). Fit what is
        buffered; the protocols that wait on every spoke (BSP, SSP with a bound, TensAIR
        with ``maxStaleness``) also push what they have, or push as idle when nothing was
        fitted since the previous lull (README, "The end of a finite stream")."""
        self.flush()

    def on_query(self, request_id: Any, service: dict | None = None) -> None:
        """:meth:`on_lull`, then report this spoke's statistics (and the kernel's
        ``service`` counters) to hub 0, which answers once every spoke has reported."""
        self.on_lull()
        self.queries += 1
        stats = self.statistics()
        stats["service"] = service or {}
        query = self.queries
        if self._exporting and self.ctx.index == 0:
            def send(extra: dict) -> None:
                stats["export"] = extra
                self.peers[0].report(query, request_id, stats)
            self.gather_export(send)
            return
        self.peers[0].report(query, request_id, stats)

    def update(self, request) -> None:
        """Apply an Update request (hyperparameters, mini-batching; the model is kept) and
        a new layout (``learner.parameters`` ``n_features`` / ``classes``): records are
        then checked against it, held ones included. A new width, or learned classes
        outside the new ``classes``, resets the model (learner and preprocessors start
        again from scratch); counters and the protocol go on.

        Raises
        ------
        RequestError
            Nothing changed (see :func:`learning.update.apply_update`, :func:`relayout_of`).
        """
        stripped, layout = relayout_of(request, self.layout, self._task, self._supervised)
        self.request = apply_update(self.request, stripped, self.pipeline)
        if layout is not None:
            self.request = with_layout(self.request, layout)
            if needs_reset(self.pipeline.learner, layout, self.model_width(layout),
                           self.layout.n_features):
                self._recheck_buffered(layout)
                self.pipeline = _build_pipeline(self.request)
                self._seen_classes = set()  # the new model has learned none (counted anew)
                self.on_relayout()
        declared = (self._bounds, self._label_bounds)
        self.configure()  # mini-batching and scaling, for the new pipeline too
        if layout is not None:
            self.install_layout(layout)
        elif (self._bounds, self._label_bounds) != declared:
            self._recheck_bounds()
        self.on_update()

    def _recheck_bounds(self) -> None:
        """After an Update that changed the declared bounds, the records taken but not yet
        predicted (the mini-batch being filled, the mini-batches a pause left to fit) are
        checked against them: those outside are refused (counted and dead-lettered), the
        others stay where they are. A mini-batch left empty leaves the work queue, with its
        later passes."""
        if self._X:
            X, y, self._X, self._y = self._X, self._y, [], []
            for features, label in zip(X, y):
                if self._fits_bounds(features, label):
                    self._X.append(features)
                    self._y.append(label)
        if not self._work:
            return
        for batch in {id(b): b for b, first in self._work if first}.values():
            rows, labels = self._taken(batch)
            keep = [i for i, (features, label) in enumerate(zip(rows, labels))
                    if self._fits_bounds(features, label)]
            if len(keep) < len(rows):
                batch.X, batch.y = batch.X[keep], [labels[i] for i in keep]
        self._work = deque(item for item in self._work if len(item[0].y))

    def _fits_bounds(self, features: list, label: Any) -> bool:
        """Whether a taken record passes this pipeline's record checks as they are now (the
        declared bounds among them); if not it is refused."""
        try:
            self._inspect(features, label, self._supervised)
        except RecordRejected as exc:
            self.refuse({"features": features, "label": label}, exc)
            return False
        return True

    def _taken(self, batch: _Batch) -> tuple[list, list]:
        """A mini-batch's records as they were taken: features lists (a missing value, NaN
        in the batch, null again: the imputer's input) and labels."""
        rows = batch.X.tolist()
        if self.missing_ok:
            rows = [[None if v != v else v for v in row] for row in rows]
        return rows, batch.y.tolist() if hasattr(batch.y, "tolist") else list(batch.y)

    def _recheck_buffered(self, layout: Layout) -> None:
        """The records taken but not yet predicted (the mini-batch being filled, and the
        mini-batches a pause left to fit) are checked against the new ``layout``: those
        that fit it stay, to be fitted on the new model; the others are refused (counted
        and dead-lettered with the reason), never dropped unseen."""
        X, y = list(self._X), list(self._y)
        for batch, first in self._work or ():
            if first:
                rows, labels = self._taken(batch)
                X.extend(rows)
                y.extend(labels)
        self._X, self._y, self._work = [], [], deque()
        for features, label in zip(X, y):
            rec = {"features": features, "label": label}
            try:
                layout.check(*self._inspect(features, label, self._supervised), label)
            except RecordRejected as exc:
                self.refuse(rec, exc)
                continue
            self._X.append(features)
            self._y.append(label)

    def on_update(self) -> None:
        """Protocol hook: ``self.request.training_configuration`` may have changed."""

    def on_relayout(self) -> None:
        """Protocol hook: an Update changed the layout and the model was reset."""

    def statistics(self) -> dict:
        crossing = self.ctx.crossing_ms()
        return {
            "spoke": self.ctx.index, "subtask": self.ctx.subtask,
            "fitted": self.fitted, "predicted": self.predicted,
            "rejected": self.rejected, "rejectedBy": dict(self.rejected_by),
            "correct": self.correct, "loss": self.loss_sum,
            "batches": self.batches, "fitErrors": self.fit_errors, "lastError": self.last_error,
            "protocolErrors": self.protocol_errors,
            "held": self.ctx.held(), "heldBytes": self.ctx.held_bytes,
            # a paused stream: how long, and the calls it waits on (then_sync)
            "pausedForS": self.ctx.paused_for(),
            "waitingOn": self.waiting_on,
            # wall ms of the spoke's data crossings: what a hub's answer may wait behind
            "crossingMsP50": crossing[0] if crossing else None,
            "crossingMsP95": crossing[1] if crossing else None,
            "layoutHeld": len(self._held),
            "layout": self.layout.to_json(), "network": self.stats.to_json(),
            "scaling": describe(self.pipeline.learner, self.scaling, self.mini_batch_size),
            "quality": self.quality.to_json() if self.quality is not None else None,
            "drift": self.drift.to_json() if self.drift is not None else None,
        }


class PipelineHub(ModelWidth, Node):
    """One pipeline on one hub (a shard of the parameter server): holds the global model
    as a learner instance used as a parameter container, and answers Queries."""

    feedback_round_trip_ms: float | None = None  # a snapshot from before the field: none

    def __init__(self, request) -> None:
        super().__init__()
        # the definition as it runs: every preprocessor's hyperparameters, defaults included
        self.request = replace(request, pre_processors=[
            {**p, "hyperParameters": make_preprocessor(p, i).hyperparameters()}
            for i, p in enumerate(request.pre_processors)])
        self.learner = make_learner(model_learner_spec(request.pre_processors, request.learner))
        self.updates = int(request.version or 0)  # a warm start counts on from its export
        self._reports: dict[int, dict[int, dict]] = {}
        self._task = self.learner.task
        self._supervised = self.learner.supervised
        self.layout = declared_layout(request.learner or {}, self._task, self._supervised)
        self.quorum = int(request.training_configuration.get("layoutQuorum", DEFAULT_QUORUM))
        self.layout_votes: Counter = Counter()  # (width, label kind) -> records, all spokes
        #: the feedback loop's last round trip to a spoke and back, milliseconds; set by the
        #: host kernel from the spokes' acknowledgements (operators.hub_kernel); None: none yet
        self.feedback_round_trip_ms: float | None = None

    # -- layout agreement (hub 0; learning.layout) -----------------------------------------
    @remote(oneway=True)
    def vote(self, spoke: int, votes: list) -> None:
        """A spoke's held records by signature ``[[width, label kind, records], ...]``."""
        self._count_votes(votes, force=False)

    @remote()
    def settle(self, spoke: int, votes: list) -> dict | None:
        """As :meth:`vote`, for a Query: decide now if any layout has a strict majority
        of at least two records; returns the layout (JSON) or None."""
        self._count_votes(votes, force=True)
        return None if self.layout.pending else self.layout.to_json()

    def _count_votes(self, votes: list, force: bool) -> None:
        if not self.layout.pending:
            return
        self.layout_votes.update(vote_counter(votes))
        got = decide(self.layout_votes, self.quorum, force, self._task, self._supervised)
        if got is not None:
            self.layout = got
            self.broadcast.agreed(got.to_json())

    @remote(oneway=True)
    def report(self, query: int, request_id: Any, stats: dict) -> None:
        """A spoke's statistics for its ``query``-th Query; answered when all are in."""
        got = self._reports.setdefault(query, {})
        got[stats["spoke"]] = stats
        if len(got) == self.n_peers:
            del self._reports[query]
            try:
                answer = self.query_response(request_id, [got[i] for i in sorted(got)])
            except RequestError as err:  # an export that cannot be answered
                answer = {"requestId": request_id, "id": self.request.id, "request": "Query",
                          "status": "error", "error": err.to_json()}
            self.ctx.emit("responses", answer)

    def update(self, request) -> None:
        """Apply an Update request to the hub's copy of the definition and learner; a new
        layout resets the hub's model as the spokes' (:meth:`PipelineSpoke.update`)."""
        stripped, layout = relayout_of(request, self.layout, self._task, self._supervised)
        holder = SimpleNamespace(learner=self.learner, preprocessors=[
            make_preprocessor(p, i) for i, p in enumerate(self.request.pre_processors)])
        self.request = apply_update(self.request, stripped, holder)
        self.quorum = TRAINING_PARAMETERS["layoutQuorum"].of(self.request.training_configuration)
        if layout is not None:
            self.request = with_layout(self.request, layout)
            was, self.layout = self.layout, layout
            if needs_reset(self.learner, layout, self.model_width(layout), was.n_features):
                self.learner = make_learner(model_learner_spec(self.request.pre_processors,
                                                               self.request.learner))
                self.on_relayout()

    def on_relayout(self) -> None:
        """Protocol hook: an Update changed the layout and the model was reset."""

    def global_statistics(self) -> dict:
        """Protocol statistics of this hub (protocols extend it)."""
        return {"name": self.request.training_configuration["protocol"], "updates": self.updates}

    def model_summary(self, limit: int) -> dict:
        """The global model for a Query: its parameters as a JSON array when it has at
        most ``limit`` of them, else a size-bounded summary with ``truncated: true``."""
        try:
            w = self.learner.get_params()
        except NotImplementedError:
            return {"available": False, "reason": f"{type(self.learner).__name__} has no "
                    "parameter vector (not averageable)"}
        finite = w[np.isfinite(w)]
        out = {"available": True, "size": int(w.size), "layout": self.learner.layout(),
               "truncated": bool(w.size > limit)}
        if w.size > limit:
            out["summary"] = {
                "l2Norm": float(np.linalg.norm(finite)), "nonFinite": int(w.size - finite.size),
                "min": float(finite.min()) if finite.size else None,
                "max": float(finite.max()) if finite.size else None,
                "mean": float(finite.mean()) if finite.size else None,
                "head": [float(x) for x in w[:16]]}
            out["params"] = []
        else:
            out["params"] = [x if math.isfinite(x) else None for x in w.tolist()]
        return out

    def query_response(self, request_id: Any, spokes: list[dict]) -> dict:
        """The answer to a Query, from every spoke's statistics and this hub's model;
        ``metrics``: the quality metrics of :func:`learning.metrics.report` (None for
        clustering), also per spoke over its own share of the window."""
        limit = self.ctx.max_response_params
        fitted = sum(s["fitted"] for s in spokes)
        correct = sum(s["correct"] for s in spokes)
        # a spoke whose losses summed to inf or NaN reports null (JSON): the sum is NaN,
        # answered as null, never a Query that fails for good
        loss = sum(json_number(s["loss"]) for s in spokes)
        net = [s["network"] for s in spokes]
        service: dict = {}
        for s in spokes:
            for k, v in s.get("service", {}).items():
                service[k] = (max(service.get(k, 0), v) if k in ("pipelines", "switchIntervalMs")
                              else service.get(k, 0) + v)
        proto = self.global_statistics()
        proto.update({
            "messagesToHubs": sum(n["messages_sent"] for n in net),
            "bytesToHubs": sum(n["bytes_sent"] for n in net),
            "messagesToSpokes": sum(n["messages_received"] for n in net),
            "bytesToSpokes": sum(n["bytes_received"] for n in net),
            "duplicatesDropped": sum(n["duplicates_dropped"] for n in net),
        })
        # what the spokes ran (learning.scaling): the same on every spoke
        proto.update(spokes[0]["scaling"])
        window = TRAINING_PARAMETERS["metricsWindow"].of(self.request.training_configuration)
        quality = [s["quality"] for s in spokes if s.get("quality")]
        return {
            "requestId": request_id, "id": self.request.id, "request": "Query", "status": "ok",
            "fitted": fitted, "fittedPerSpoke": [s["fitted"] for s in spokes],
            "predicted": sum(s["predicted"] for s in spokes),
            "rejected": sum(s["rejected"] for s in spokes),
            "rejectedBy": dict(sum((Counter(s.get("rejectedBy", {})) for s in spokes), Counter())),
            "layout": {**self.layout.to_json(), "votes": sum(self.layout_votes.values()),
                       "held": sum(s.get("layoutHeld", 0) for s in spokes)},
            "task": self.learner.task,
            "prequentialAccuracy": (correct / fitted if fitted and
                                    self.learner.task == "classification" else None),
            "cumulativeLoss": loss, "meanLoss": loss / fitted if fitted else None,
            "metrics": report(quality, window) if quality else None,
            "drift": drift_summary(spokes),
            "protocol": proto,
            "spokes": [{
                "spoke": s["spoke"], "subtask": s.get("subtask"),
                "fitted": s["fitted"], "predicted": s["predicted"],
                "rejected": s["rejected"], "rejectedBy": s.get("rejectedBy", {}),
                "layoutHeld": s.get("layoutHeld", 0), "fitErrors": s["fitErrors"], "lastError": s["lastError"],
                "protocolErrors": s.get("protocolErrors", 0),
                "held": s.get("held", 0), "heldBytes": s.get("heldBytes", 0),
                "pausedForS": s.get("pausedForS"), "waitingOn": s.get("waitingOn", []),
                "crossingMsP50": s.get("crossingMsP50"), "crossingMsP95": s.get("crossingMsP95"),
                "messagesSent": s["network"]["messages_sent"],
                "bytesSent": s["network"]["bytes_sent"],
                "messagesReceived": s["network"]["messages_received"],
                "bytesReceived": s["network"]["bytes_received"],
                "duplicatesDropped": s["network"]["duplicates_dropped"],
                "metrics": report([s["quality"]], s["quality"]["window"])
                if s.get("quality") else None,
                "drift": s.get("drift"),
                **s.get("protocol", {})} for s in spokes],
            "learner": {"name": self.request.learner["name"],
                        "hyperParameters": self.learner.hyperparameters()},
            "preProcessors": [{"name": p["name"], "hyperParameters": p.get("hyperParameters") or {}}
                              for p in self.request.pre_processors],
            "trainingConfiguration": self.request.training_configuration,
            "service": service,
            "model": self.model_summary(limit),
        }
