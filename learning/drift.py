"""Concept drift detection on a spoke's prequential errors, with river's detectors.

A pipeline that declares ``trainingConfiguration.driftDetector`` gets, on every spoke, a
:class:`DriftMonitor`: the detector (river's, :data:`DETECTORS`, at river's default
hyperparameters) is fed, record by record in the stream's order, the error of each
prequential (test-then-train) prediction the spoke made on its share of the stream:

- classification: 1.0 for a wrong prediction, 0.0 for a right one (the error indicator
  that DDM, HDDM and ADWIN monitor in Gama et al., *A survey on concept drift adaptation*,
  ACM CSUR 46(4), 2014, §3.2: "monitoring the error rate"); a record predicted None (the
  learner knew no label yet) is not fed, as it is not scored (:mod:`learning.metrics`);
- regression: the absolute error ``|y − ŷ|`` (only the detectors of real values: ADWIN
  and PageHinkley; the others test a rate in [0, 1]).

A drift here is a *rise* of the error, as in MOA's ``ADWINChangeDetector`` (Bifet et al.,
JMLR 11, 2010), which reports ADWIN's cut only when its estimate went up: a fall (the learner
getting better, above all while it learns at the start of a stream: ADWIN found one at a
spoke's 96th record of a regression stream, and on river's Agrawal 0 → 6 drift, whose new
concept a linear learner fits better, only falls) is left out; river's PageHinkley runs
with ``mode="up"``; DDM and the HDDMs test for a rise alone.

A detection is *reported*, not acted on: the learners go on learning (passive adaptation,
papers/000 §I, which every protocol's spokes already do; the Hoeffding adaptive tree
adapts actively on its own). Each detection is counted on the spoke (``driftsDetected``
in a Query's spoke, summed in the pipeline's ``drift``, and a Flink metric), and the spoke
writes an event to the responses topic (:meth:`DriftMonitor.event`). Clustering has no
prequential error and takes no detector (``unsupported_pairing``).

Each spoke watches its own share: with ``k`` spokes and random shares a spoke sees about
``1/k`` of the records after a change, so its detector needs more of the stream's records
than one detector on the whole stream would; the pipeline hears of the first spoke's (the
README's "Concept drift" gives the measured delays: 30–160 records more with 4 spokes on
river's Sine).
"""

from __future__ import annotations

import math
import time
from functools import partial
from typing import Any, Sequence

from learning.native import import_in_own_thread

import_in_own_thread("river.drift", "river.drift.binary")
from river import drift as _drift  # noqa: E402
from river.drift import binary as _binary  # noqa: E402

__all__ = ["DETECTORS", "REAL_VALUED", "NONE", "DriftMonitor", "check_drift_pairing",
           "drift_summary"]

#: name → river's detector class (a factory); each at river's default hyperparameters but
#: PageHinkley's mode (rises of the error only)
DETECTORS = {
    "ADWIN": _drift.ADWIN,  # Bifet & Gavaldà, SDM 2007: adaptive windowing, delta 0.002
    "PageHinkley": partial(_drift.PageHinkley, mode="up"),  # Page, Biometrika 1954
    "DDM": _binary.DDM,  # Gama et al., SBIA 2004: error rate + 3 standard deviations
    "HDDM_A": _binary.HDDM_A,  # Frías-Blanco et al., IEEE TKDE 2015: Hoeffding's bounds
    "HDDM_W": _binary.HDDM_W,  # same, on weighted (EWMA) averages
}
#: the detectors that take any real value (the others a rate in [0, 1])
REAL_VALUED = frozenset({"ADWIN", "PageHinkley"})
#: ``driftDetector``'s value for no detector (its default)
NONE = "none"
#: detections a spoke remembers (records and times) for its Query
RECENT = 8


def check_drift_pairing(detector: str | None, task: str) -> None:
    """Refuse a detector the learner's task cannot feed.

    Raises
    ------
    learning.errors.RequestError
        ``unsupported_pairing`` (field ``trainingConfiguration.driftDetector``) for any
        detector (not ``"none"``) with a clustering learner (no prequential error), and for
        a detector of rates (DDM, HDDM_A, HDDM_W) with a regressor (its absolute errors are
        not in [0, 1]).
    """
    from learning.errors import RequestError

    if detector in (None, NONE) or task == "classification":
        return
    field = "trainingConfiguration.driftDetector"
    if task != "regression":
        raise RequestError("unsupported_pairing", f"driftDetector {detector!r} watches the "
                           f"prequential errors of a classifier or a regressor; a {task} "
                           f"learner makes none", field)
    if detector not in REAL_VALUED:
        raise RequestError("unsupported_pairing", f"driftDetector {detector!r} tests an error "
                           f"rate in [0, 1]; a regressor's absolute errors need one of "
                           f"{', '.join(sorted(REAL_VALUED))}", field)


class DriftMonitor:
    """A river detector over one spoke's prequential errors (see the module docstring).

    Parameters
    ----------
    name : str
        A key of :data:`DETECTORS`.
    task : str
        ``"classification"`` or ``"regression"``.

    Raises
    ------
    KeyError
        For a name not in :data:`DETECTORS` (a validated request never has one).

    Examples
    --------
    >>> m = DriftMonitor("ADWIN", "classification")
    >>> m.update([0] * 2000, [0] * 2000, 0)  # right, right, ...
    []
    >>> found = m.update([0] * 1000, [1] * 1000, 2000)  # then every prediction wrong
    >>> m.detected >= 1 and 2000 < found[0] < 2100
    True
    """

    def __init__(self, name: str, task: str) -> None:
        self.name, self.task = name, task
        self.detector = DETECTORS[name]()
        self.detected = 0
        #: the spoke's record counts (1-based: its n-th fitted record) and the epoch times
        #: (ms) of its last :data:`RECENT` detections, oldest first
        self.at_records: list[int] = []
        self.at_ms: list[int] = []

    def update(self, y: Sequence, predictions: Sequence, fitted: int) -> list[int]:
        """Feed one mini-batch's labels and prequential predictions (same length, in the
        stream's order); ``fitted``: the spoke's records fitted before it. Returns the
        record counts (``fitted + i + 1``) at which the detector found a drift (usually
        none)."""
        detector, found = self.detector, []
        both_ways = self.name == "ADWIN"  # a fall of the error is left out (module docstring)
        if self.task == "classification":
            errors = [None if p is None else float(p != t) for t, p in zip(y, predictions)]
        else:
            errors = [None if p is None else abs(float(t) - float(p))
                      for t, p in zip(y, predictions)]
            # an overflowing prediction: not fed (an inf would stay in the detector's sums)
            errors = [e if e is not None and math.isfinite(e) else None for e in errors]
        for i, e in enumerate(errors):
            if e is None:
                continue
            if both_ways:
                before = detector.estimation  # the window's mean (after a cut: the recent part's)
                detector.update(e)
                if detector.drift_detected and detector.estimation > before:
                    found.append(fitted + i + 1)
                continue
            detector.update(e)
            if detector.drift_detected:
                found.append(fitted + i + 1)
        if found:
            now = int(time.time() * 1000)
            self.detected += len(found)
            self.at_records = (self.at_records + found)[-RECENT:]
            self.at_ms = (self.at_ms + [now] * len(found))[-RECENT:]
        return found

    def to_json(self) -> dict:
        """``{"detector", "detected", "atRecords", "atMs"}`` for a spoke's Query."""
        return {"detector": self.name, "detected": self.detected,
                "atRecords": list(self.at_records), "atMs": list(self.at_ms)}

    def event(self, pipeline: Any, spoke: int, at_record: int) -> dict:
        """What a spoke writes to the responses topic for one detection: ``{"event":
        "drift", "id": pipeline id, "spoke", "detector", "atRecord": the spoke's record
        count, "detected": the spoke's detections so far, "timestamp": epoch ms}``; it has
        no ``requestId`` (no request asked for it)."""
        return {"event": "drift", "id": pipeline, "spoke": spoke, "detector": self.name,
                "atRecord": at_record, "detected": self.detected,
                "timestamp": int(time.time() * 1000)}


def drift_summary(spokes: list[dict]) -> dict | None:
    """The pipeline's ``drift`` in a Query from its spokes' statistics (each with
    ``"drift"``: :meth:`DriftMonitor.to_json` or None): ``{"detector", "detected": the
    spokes' detections together, "spokesDetecting": how many spokes detected at least one,
    "lastAtMs": the latest detection's epoch ms (None: none)}``; None without a detector."""
    parts = [s["drift"] for s in spokes if s.get("drift")]
    if not parts:
        return None
    times = [t for p in parts for t in p["atMs"]]
    return {"detector": parts[0]["detector"], "detected": sum(p["detected"] for p in parts),
            "spokesDetecting": sum(1 for p in parts if p["detected"]),
            "lastAtMs": max(times) if times else None}
