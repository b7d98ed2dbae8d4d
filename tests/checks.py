"""The shared conformance checks every learner and preprocessor must pass (in the spirit of
river's ``check_estimator``).

:func:`check_learner` runs them all on one learner factory and a small stream; each check
is also usable alone. A check raises ``AssertionError`` naming what broke.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import orjson

from learning.learners.base import Learner, label_key
from learning.preprocessors.base import Preprocessor
from learning.registry import make_learner, make_preprocessor

__all__ = ["check_learner", "check_preprocessor", "check_target_preprocessor", "batches",
           "same_predictions"]

Factory = Callable[[], Learner]


def batches(X: np.ndarray, y: list, size: int):
    """``(X_batch, y_batch)`` in order."""
    for i in range(0, len(X), size):
        yield X[i:i + size], y[i:i + size]


def same_predictions(a: list, b: list) -> bool:
    """Equal element by element, type-aware (``True`` is not ``1``), floats to 1e-9."""
    if len(a) != len(b):
        return False
    for p, q in zip(a, b):
        if isinstance(p, float) and isinstance(q, float):
            if not abs(p - q) <= 1e-9 * max(1.0, abs(p)):
                return False
        elif (p is None) != (q is None) or (p is not None and label_key(p) != label_key(q)):
            return False
    return True


def _stream(model: Learner, X: np.ndarray, y: list, size: int) -> tuple[list, float]:
    predictions, loss = [], 0.0
    for Xb, yb in batches(X, y, size):
        p, l = model.test_then_train(Xb, yb)
        predictions += p
        loss += l
    return predictions, loss


def _native(value: Any) -> bool:
    return value is None or type(value) in (bool, int, float, str)


def check_predictions_native(make: Factory, X: np.ndarray, y: list) -> None:
    """Predictions are None or native JSON scalars, one per record, before and after fit."""
    model = make()
    p0 = model.predict(X[:5])
    assert len(p0) == 5 and all(_native(v) for v in p0), f"unfitted predictions {p0!r}"
    model.fit(X, y)
    p1 = model.predict(X)
    assert len(p1) == len(X), "one prediction per record"
    assert all(_native(v) for v in p1), f"non-native prediction among {p1[:5]!r}"
    if model.task == "classification" and model.supervised:
        seen = {label_key(v) for v in y}
        assert all(v is None or label_key(v) in seen for v in p1), "predicted an unseen label"


def check_hyperparameters(make: Factory) -> None:
    """Hyperparameters are JSON-safe, survive ``update_hyperparameters`` with their own
    values, and an unknown name is refused naming it."""
    model = make()
    hp = model.hyperparameters()
    assert orjson.loads(orjson.dumps(hp)) == hp, "hyperparameters must be JSON-safe"
    model.update_hyperparameters(**hp)
    assert model.hyperparameters() == hp
    try:
        model.update_hyperparameters(no_such_hyperparameter=1)
    except ValueError as e:
        assert "no_such_hyperparameter" in str(e)
    else:
        raise AssertionError("an unknown hyperparameter must be refused")


def check_clone(make: Factory, X: np.ndarray, y: list, size: int) -> None:
    """A clone of a fitted model has the same hyperparameters and no learned state."""
    model = make()
    for Xb, yb in batches(X, y, size):
        model.fit(Xb, yb)
    clone = model.clone()
    assert type(clone) is type(model) and clone is not model
    assert clone.hyperparameters() == model.hyperparameters()
    fresh = make()
    assert same_predictions(clone.predict(X), fresh.predict(X)), "the clone has learned state"
    if model.averageable:
        assert np.array_equal(clone.get_params(), fresh.get_params())


def check_json_round_trip(make: Factory, X: np.ndarray, y: list, size: int) -> None:
    """``to_json`` is plain JSON (orjson without a default); ``from_json`` — the class's and
    the registry's, by the class name ``to_json`` writes — gives a model that predicts the
    same and keeps learning the same."""
    half = (len(X) // 2 // size) * size or size
    model = make()
    for Xb, yb in batches(X[:half], y[:half], size):
        model.fit(Xb, yb)
    doc = model.to_json()
    blob = orjson.dumps(doc)  # raises on anything that is not plain JSON
    data = orjson.loads(blob)
    assert data["name"] == type(model).__name__
    for back in (type(model).from_json(data), make_learner(data)):
        assert type(back) is type(model)
        assert back.hyperparameters() == model.hyperparameters()
        assert same_predictions(back.predict(X), model.predict(X)), "predictions changed"
        if model.averageable:
            np.testing.assert_array_equal(back.get_params(), model.get_params())
            assert back.layout() == model.layout()
    twin = type(model).from_json(orjson.loads(blob))
    a = _stream(model, X[half:], y[half:], size)
    b = _stream(twin, X[half:], y[half:], size)
    assert same_predictions(a[0], b[0]), "a restored model learns differently"
    assert abs(a[1] - b[1]) <= 1e-9 * max(1.0, abs(a[1]))
    if model.averageable:
        np.testing.assert_allclose(twin.get_params(), model.get_params(), rtol=1e-12, atol=0)


def check_seeded_determinism(make: Factory, X: np.ndarray, y: list, size: int) -> None:
    """Two fresh models fed the same stream agree exactly."""
    a, b = make(), make()
    pa, la = _stream(a, X, y, size)
    pb, lb = _stream(b, X, y, size)
    assert same_predictions(pa, pb), "predictions differ between two identical runs"
    assert la == lb, f"losses differ: {la} != {lb}"
    assert same_predictions(a.predict(X), b.predict(X))
    if a.averageable:
        np.testing.assert_array_equal(a.get_params(), b.get_params())


def check_params_round_trip(make: Factory, X: np.ndarray, y: list, size: int) -> None:
    """``get_params`` is a 1-D float64 copy laid out as ``layout``; a clone grown to that
    layout and given the vector predicts the same; a wrong size is refused; ``project`` of
    the model's own vector and layout is the identity. A model that is not averageable
    raises ``NotImplementedError`` instead."""
    model = make()
    for Xb, yb in batches(X, y, size):
        model.fit(Xb, yb)
    if not model.averageable:
        for call in (model.get_params, model.layout, lambda: model.set_params(np.zeros(3))):
            try:
                call()
            except NotImplementedError:
                continue
            raise AssertionError("a non-averageable learner must raise NotImplementedError")
        return
    w = model.get_params()
    assert isinstance(w, np.ndarray) and w.ndim == 1 and w.dtype == np.float64
    layout = model.layout()
    assert orjson.loads(orjson.dumps(layout)) == layout, "layout must be JSON-safe"
    other = make()
    other.grow(layout)
    assert other.layout() == layout
    assert other.get_params().size == w.size
    other.set_params(w)
    np.testing.assert_array_equal(other.get_params(), w)
    assert same_predictions(other.predict(X), model.predict(X))
    w[...] = 12345.0  # a copy: the model is untouched
    assert not np.array_equal(model.get_params(), w)
    np.testing.assert_array_equal(model.project(model.get_params(), layout), model.get_params())
    try:
        model.set_params(np.zeros(model.get_params().size + 1))
    except ValueError:
        pass
    else:
        raise AssertionError("set_params must refuse a vector of the wrong size")
    # an unfitted model's vector is the zero model (protocols start hubs from it)
    fresh = make()
    fresh.grow(layout)
    assert not np.any(fresh.get_params()), "a fresh model's vector must be zeros"


def check_new_labels_mid_stream(make: Factory, X: np.ndarray, y: list, size: int) -> None:
    """A classifier takes labels it has never seen at any point: the label set grows, a
    label is never predicted before it was learned, vectors of the smaller label set
    project into the larger layout, and labels of different types stay distinct."""
    model = make()
    if model.task != "classification" or not model.supervised:
        return
    labels = sorted({label_key(v): v for v in y}.values(), key=label_key)
    assert len(labels) >= 3, "the check needs a stream with at least 3 labels"
    late = labels[-1]
    keep = [i for i, v in enumerate(y) if label_key(v) != label_key(late)]
    n_early = min(len(keep), max(2 * size, len(keep) // 2))
    early_X, early_y = X[keep[:n_early]], [y[i] for i in keep[:n_early]]
    for Xb, yb in batches(early_X, early_y, size):
        model.fit(Xb, yb)
    before_predictions = model.predict(X)
    assert all(p is None or label_key(p) != label_key(late) for p in before_predictions)
    if model.averageable:
        small_w, small_layout = model.get_params(), model.layout()
    # the late label arrives in the middle of a mixed batch
    idx_late = [i for i, v in enumerate(y) if label_key(v) == label_key(late)][:size]
    mixed = keep[n_early:n_early + size] + idx_late
    model.test_then_train(X[mixed], [y[i] for i in mixed])
    assert any(label_key(c) == label_key(late) for c in model.classes), "label set did not grow"
    assert [label_key(c) for c in model.classes] == sorted(label_key(c) for c in model.classes), \
        "classes are kept in canonical order"
    if model.averageable:
        grown = model.project(small_w, small_layout)
        assert grown.size == model.get_params().size
        peer = make()
        for Xb, yb in batches(early_X, early_y, size):
            peer.fit(Xb, yb)
        peer.grow(model.layout())  # a node that has not seen the label learns of it
        assert peer.layout() == model.layout()
        peer.set_params(model.get_params())
        assert same_predictions(peer.predict(X), model.predict(X))
    # labels of different JSON types are different labels
    typed = make()
    mixed_types = [True, 1, "1", 1.5]
    Xt = np.vstack([X[:4]] * 4)
    typed.fit(Xt, mixed_types * 4)
    assert len(typed.classes) == 4, f"True, 1, '1', 1.5 collapsed into {typed.classes!r}"
    for p in typed.predict(Xt):
        assert p is None or any(type(p) is type(v) and p == v for v in mixed_types)


def check_learner(make: Factory, X: np.ndarray, y: list, size: int = 16) -> None:
    """Every conformance check on ``make()`` with the stream ``(X, y)`` in batches of
    ``size`` records."""
    check_hyperparameters(make)
    check_predictions_native(make, X, y)
    check_clone(make, X, y, size)
    check_json_round_trip(make, X, y, size)
    check_seeded_determinism(make, X, y, size)
    check_params_round_trip(make, X, y, size)
    check_new_labels_mid_stream(make, X, y, size)


def check_preprocessor(make: Callable[[], Preprocessor], X: np.ndarray, size: int = 16) -> None:
    """Clone, JSON round trip (also through the registry), prequential views that agree
    with ``learn_transform`` and ``transform``, and widths that stay fixed."""
    p = make()
    hp = p.hyperparameters()
    assert orjson.loads(orjson.dumps(hp)) == hp
    a, b = make(), make()
    for i in range(0, len(X), size):
        Xb = X[i:i + size]
        before = a.transform(Xb) if i else None
        tested, learned = a.prequential_transform(Xb)
        np.testing.assert_allclose(learned, b.learn_transform(Xb), rtol=1e-12, atol=1e-12)
        if before is not None:  # the first record of a batch sees the statistics before it
            np.testing.assert_allclose(tested[0], before[0], rtol=1e-12, atol=1e-12)
        assert tested.shape == learned.shape and tested.shape[0] == Xb.shape[0]
    np.testing.assert_allclose(a.transform(X), b.transform(X), rtol=1e-12, atol=1e-12)
    doc = orjson.loads(orjson.dumps(a.to_json()))
    for back in (type(a).from_json(doc), make_preprocessor(doc)):
        np.testing.assert_allclose(back.transform(X), a.transform(X), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(back.learn_transform(X[:size]), make_copy(a).learn_transform(
            X[:size]), rtol=1e-12, atol=1e-12)
    clone = a.clone()
    assert clone.hyperparameters() == a.hyperparameters()
    np.testing.assert_allclose(clone.transform(X[:size]), make().transform(X[:size]))
    try:
        a.transform(np.zeros((2, X.shape[1] + 1)))
    except ValueError:
        pass
    else:
        raise AssertionError("a record of another width must be refused")


def check_target_preprocessor(make: Callable[[], Preprocessor], X: np.ndarray, y: np.ndarray,
                              size: int = 16) -> None:
    """A preprocessor of the target (``targets``): the features pass through unchanged;
    the prequential view of each mini-batch's targets agrees with ``learn_targets``, its
    first record's statistics with ``inverse`` before the batch; clone and the JSON round
    trip (also through the registry) keep the statistics."""
    a, b = make(), make()
    assert a.targets
    np.testing.assert_array_equal(a.transform(X), X)
    np.testing.assert_array_equal(a.learn_transform(X), X)
    tested, learned = a.prequential_transform(X, X + 1.0)
    np.testing.assert_array_equal(tested, X + 1.0)
    np.testing.assert_array_equal(learned, X)
    for i in range(0, len(y), size):
        t = y[i:i + size]
        before = a.inverse(np.array([0.0, 1.0]))
        scaled, mean_before, std_before = a.prequential_targets(t)
        np.testing.assert_allclose(scaled, b.learn_targets(t), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose([mean_before[0], mean_before[0] + std_before[0]], before,
                                   rtol=1e-12, atol=1e-12)
        assert scaled.shape == mean_before.shape == std_before.shape == t.shape
    np.testing.assert_allclose(a.scale_targets(y), b.scale_targets(y), rtol=1e-12)
    doc = orjson.loads(orjson.dumps(a.to_json()))
    for back in (type(a).from_json(doc), make_preprocessor(doc)):
        np.testing.assert_allclose(back.inverse(y), a.inverse(y), rtol=1e-12)
        np.testing.assert_allclose(back.learn_targets(y[:size]),
                                   make_copy(a).learn_targets(y[:size]), rtol=1e-12)
    clone = a.clone()
    assert clone.hyperparameters() == a.hyperparameters() and clone.n == 0


def make_copy(p: Preprocessor) -> Preprocessor:
    """An independent copy of ``p`` with its state, through JSON."""
    return type(p).from_json(orjson.loads(orjson.dumps(p.to_json())))
