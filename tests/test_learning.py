"""Learners, preprocessors and pipelines of :mod:`learning`, checked against river.

The reference is river 0.23's ``preprocessing.StandardScaler() |
linear_model.PAClassifier(C=0.01, mode=1)`` run record by record (``predict_one`` then
``learn_one``); omldm runs the same stream on numpy mini-batches.
"""

from __future__ import annotations

import math

import numpy as np
import orjson
import pytest
from river import linear_model, preprocessing

from learning import (HyperparameterError, MinMaxScaler, PAClassifier, Pipeline,
                      StandardScaler, make_pipeline)
from learning.learners import Learner, OnlineSVM

NAMES = [f"f{i + 1}" for i in range(9)]


# --- data -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def shuttle():
    from learning.datasets import shuttle as load

    try:
        return load()
    except Exception as e:  # the asset could not be fetched here
        pytest.skip(f"Shuttle dataset unavailable: {e}")


@pytest.fixture(scope="module")
def river_shuttle(shuttle):
    """river's prequential predictions (as 0/1) and final weights on Shuttle, file order."""
    X, y = shuttle
    model = preprocessing.StandardScaler() | linear_model.PAClassifier(C=0.01, mode=1)
    predictions = []
    for xi, yi in zip(X.tolist(), y.tolist()):
        x = dict(zip(NAMES, xi))
        predictions.append(int(bool(model.predict_one(x))))
        model.learn_one(x, yi)
    pa = model["PAClassifier"]
    w = np.array([pa.weights[n] for n in NAMES] + [pa.intercept])
    return np.array(predictions), w


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits

    return load_digits(return_X_y=True)


def prequential(pipe: Pipeline, X, y, batch: int) -> tuple[float, list]:
    hits, predictions = 0, []
    for i in range(0, len(X), batch):
        p, c, _ = pipe.test_then_train(X[i:i + batch], y[i:i + batch])
        hits += c
        predictions += p
    return hits / len(X), predictions


def binary_diff(pa: PAClassifier) -> np.ndarray:
    """``[W_1 - W_0 | b_1 - b_0]``: river's single binary vector."""
    w = pa.get_params().reshape(len(pa.classes), -1)
    return w[1] - w[0]


# --- against river ----------------------------------------------------------------------

@pytest.mark.parametrize("batch", [64, 1])
def test_shuttle_matches_river(shuttle, river_shuttle, batch):
    X, y = shuttle
    river_pred, river_w = river_shuttle
    river_acc = float((river_pred == y).mean())
    pipe = Pipeline([StandardScaler()], PAClassifier(C=0.01, mode=1))
    acc, predictions = prequential(pipe, X, y, batch)
    print(f"\nShuttle, mini-batch {batch}: omldm {acc:.5f}, river {river_acc:.5f}")
    assert abs(acc - river_acc) <= 0.002
    # Same model, record by record: only the first two predictions may differ (river's
    # binary model answers False before it has seen any label; omldm answers None, then
    # the single class seen).
    ours = np.array([-1 if p is None else p for p in predictions])
    assert np.flatnonzero(ours != river_pred).tolist() in ([0, 1], [1], [0], [])
    np.testing.assert_allclose(binary_diff(pipe.learner), river_w, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("mode,C,learn_intercept", [(0, 1.0, True), (1, 0.05, True),
                                                    (1, 0.05, False), (2, 0.3, False)])
def test_binary_pa_equals_river(mode, C, learn_intercept):
    rng = np.random.default_rng(7)
    X = rng.normal(size=(400, 5))
    y = (X @ rng.normal(size=5) + 0.3 * rng.normal(size=400) > 0).astype(int)
    # river's binary model steps on record 0 although one class only is known, where
    # omldm cannot; a zero record 0 makes river's step 0 too (PA-II: without intercept).
    X[0] = 0.0
    river = linear_model.PAClassifier(C=C, mode=mode, learn_intercept=learn_intercept)
    ours = PAClassifier(C=C, mode=mode, learn_intercept=learn_intercept)
    river_pred = []
    for xi, yi in zip(X.tolist(), y.tolist()):
        x = dict(enumerate(xi))
        river_pred.append(int(bool(river.predict_one(x))))
        river.learn_one(x, yi)
    predictions, loss = ours.test_then_train(X, y)
    w = np.array([river.weights[i] for i in range(5)] + [river.intercept])
    np.testing.assert_allclose(binary_diff(ours), w, rtol=1e-9, atol=1e-12)
    first_other = int(np.flatnonzero(y != y[0])[0])
    assert predictions[first_other + 1:] == river_pred[first_other + 1:]
    assert loss > 0


def _score(x: list, row: list) -> float:
    """``x · w + b`` for a row ``[w | b]``, summed in order as the compiled loops do."""
    s = 0.0
    for xj, wj in zip(x, row):
        s += xj * wj
    return s + row[-1]


def _hinge_records(X: list, X_test: list, labels: list, classes: list, W: list,
                   predictions: list):
    """The first half of a multi-class linear step in plain Python, record by record:
    appends the prediction of ``xt`` to ``predictions`` (None without a class; ties: the
    first), adds the label's zero row at its sorted place when new, then, once at least
    two classes are known, yields ``(x, yi, s_y, s_r, r)``: the record, its label's row,
    that row's score, the best other score and its row."""
    for x, xt, label in zip(X, X_test, labels):
        scores = [_score(xt, row) for row in W]
        predictions.append(classes[scores.index(max(scores))] if W else None)
        if label not in classes:
            pos = sorted(classes + [label]).index(label)
            classes.insert(pos, label)
            W.insert(pos, [0.0] * (len(x) + 1))
        if len(W) < 2:
            continue
        yi = classes.index(label)
        s = [_score(x, row) for row in W]
        sy, s[yi] = s[yi], float("-inf")
        sr = max(s)
        yield x, yi, sy, sr, s.index(sr)


def _pa_tau(loss: float, x: list, C: float, mode: int) -> float:
    """PA's step (Crammer et al. 2006 §3) in plain Python, ``‖x‖²`` summed in order."""
    q = 0.0
    for xj in x:
        q += xj * xj
    if mode == 1:
        return min(C, loss / q) if q > 0 else 0.0
    return (loss / q if q > 0 else 0.0) if mode == 0 else loss / (q + 0.5 / C)


def _pa_reference(X: list, X_test: list, labels: list, classes: list, W: list, C: float,
                  mode: int) -> tuple[list, float]:
    """Crammer et al.'s multi-class PA (2006, §3 and §7) one record at a time in plain
    Python, on ``W`` (rows ``[w | b]`` per class of ``classes``, sorted) in place, with the
    compiled walk's order of sums and its ties (first row); returns the predictions and
    the loss sum."""
    predictions, loss_sum = [], 0.0
    for x, yi, sy, sr, ri in _hinge_records(X, X_test, labels, classes, W, predictions):
        loss = 1.0 - sy + sr
        if loss <= 0.0:
            continue
        tau = _pa_tau(loss, x, C, mode)
        loss_sum += loss
        if tau > 0.0:
            h = 0.5 * tau
            for j, xj in enumerate(x + [1.0]):
                u = xj * h
                W[yi][j] += u
                W[ri][j] -= u
    return predictions, loss_sum


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_pa_compiled_walk_is_the_plain_algorithm(shuttle, digits, mode):
    """PA's compiled loop gives the same model, predictions and loss, bit for bit, as the
    algorithm written out in plain Python (Shuttle: few updates; digits: many, and labels
    that arrive in the middle of a mini-batch; both with prequentially scaled test
    records; records whose step is 0 because ‖x‖² = 0)."""
    zeros = shuttle[0][:2000].astype(np.float64)
    zeros[::7] = 0.0
    streams = [(shuttle[0][:3000], shuttle[1][:3000], 32, True),
               (digits[0][:600], digits[1][:600], 16, True),
               (zeros, shuttle[1][:2000], 300, False)]
    for X, y, batch, scaled in streams:
        pa, scaler = PAClassifier(C=0.01, mode=mode), StandardScaler()
        classes, W = [], []
        for i in range(0, len(X), batch):
            X_test, X_learn = (scaler.prequential_transform(X[i:i + batch]) if scaled
                               else (X[i:i + batch], X[i:i + batch]))
            labels = y[i:i + batch].tolist()
            got = pa.test_then_train(X_learn, labels, X_test=X_test)
            want = _pa_reference(X_learn.tolist(), X_test.tolist(), labels, classes, W,
                                 0.01, mode)
            assert got == want
        assert pa.classes == classes
        assert np.array_equal(pa.get_params(), np.ravel(W))
    # a score that is not finite takes the first row, as Python's max does
    pa = PAClassifier(C=0.01)
    X = shuttle[0][:64].astype(np.float64)
    pa.fit(X[:32], shuttle[1][:32].tolist())
    classes, W = list(pa.classes), pa.get_params().reshape(len(pa.classes), -1).tolist()
    X[40, 2] = np.nan  # (the job refuses such a record before any learner sees it)
    labels = shuttle[1][32:64].tolist()
    got = pa.test_then_train(X[32:], labels)
    want = _pa_reference(X[32:].tolist(), X[32:].tolist(), labels, classes, W, 0.01, 1)
    assert got[0] == want[0] and np.array_equal([got[1]], [want[1]], equal_nan=True)
    assert np.array_equal(pa.get_params(), np.ravel(W), equal_nan=True)


def _pa_regressor_reference(X: list, X_test: list, targets: list, wb: list, C: float,
                            mode: int, eps: float, learn_intercept: bool) -> list:
    """PA regression with the ε-insensitive loss (Crammer et al. 2006 §4) one record at a
    time in plain Python, on ``wb`` = ``[w | b]`` in place, with the compiled walk's order
    of sums; returns each record's prediction (``X_test``) before its update."""
    predictions = []
    for x, xt, target in zip(X, X_test, targets):
        p = _score(x, wb)
        predictions.append(_score(xt, wb))
        err = target - p
        loss = abs(err) - eps
        if loss <= 0.0:
            continue
        tau = _pa_tau(loss, x, C, mode)
        if tau > 0.0:
            step = tau if err > 0.0 else -tau
            for j, xj in enumerate(x):
                wb[j] += xj * step
            if learn_intercept:
                wb[-1] += step
    return predictions


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_pa_regressor_compiled_walk_is_the_plain_algorithm(mode):
    """PA regression's compiled loop gives the same model and predictions, bit for bit,
    as the algorithm written out in plain Python (scikit-learn's diabetes records scaled
    prequentially, with and without the intercept, and unscaled with zero records, given
    as the records to predict and not given)."""
    from sklearn.datasets import load_diabetes

    from learning.learners import PARegressor

    X, y = load_diabetes(return_X_y=True)
    X = np.tile(X, (2, 1))
    y = np.tile(y, 2).astype(np.float64)
    X[::9] = 0.0
    for learn_intercept, scaled, given in ((True, True, True), (False, True, True),
                                           (True, False, True), (True, False, False)):
        model = PARegressor(C=0.5, mode=mode, eps=2.0, learn_intercept=learn_intercept)
        scaler, wb = StandardScaler(), [0.0] * (X.shape[1] + 1)
        for i in range(0, len(X), 32):
            X_test, X_learn = (scaler.prequential_transform(X[i:i + 32]) if scaled
                               else (10.0 * X[i:i + 32],) * 2)  # (‖x‖² about 1)
            got = model.test_then_train(X_learn, y[i:i + 32],
                                        X_test=X_test if given else None)[0]
            want = _pa_regressor_reference(X_learn.tolist(), X_test.tolist(),
                                           y[i:i + 32].tolist(), wb, 0.5, mode, 2.0,
                                           learn_intercept)
            assert np.array_equal(got, want)
        assert np.array_equal(model.get_params(), wb) and np.isfinite(wb).all()


def _svm_reference(X: list, X_test: list, labels: list, classes: list, W: list, t: int,
                   lam: float, radius2: float) -> tuple[list, float, int]:
    """Multi-class Pegasos (Shalev-Shwartz et al. 2011 §2, §6; Crammer and Singer's
    hinge) one record at a time in plain Python, on ``W`` (rows ``[w | b]`` per class of
    ``classes``, sorted) in place, with the compiled walk's order of sums and its ties
    (first row); returns the predictions, the loss sum and the steps taken."""
    predictions, loss_sum = [], 0.0
    for x, yi, sy, sr, ri in _hinge_records(X, X_test, labels, classes, W, predictions):
        t += 1
        loss = 1.0 - sy + sr
        for row in W:
            for j, w in enumerate(row):
                row[j] = 0.0 if t == 1 else w * (1.0 - 1.0 / t)
        if loss > 0.0:
            loss_sum += loss
            c = 0.5 / (lam * t)
            for j, xj in enumerate(x + [1.0]):
                u = xj * c
                W[yi][j] += u
                W[ri][j] -= u
        norm2 = 0.0
        for row in W:
            for w in row:
                norm2 += w * w
        if norm2 > radius2:
            f = math.sqrt(radius2 / norm2)
            for row in W:
                for j, w in enumerate(row):
                    row[j] = w * f
    return predictions, loss_sum, t


@pytest.mark.parametrize("projection", [True, False])
def test_svm_compiled_walk_is_the_plain_algorithm(shuttle, digits, projection):
    """The online SVM's compiled loop gives the same model, predictions, loss and step
    count, bit for bit, as Pegasos written out in plain Python: Shuttle and digits with
    prequentially scaled test records, labels that arrive in the middle of a mini-batch
    (and a first label alone, which teaches nothing), and a NaN score."""
    lam = 0.01
    radius2 = 1.0 / (2.0 * lam) if projection else math.inf
    for X, y, batch in ((shuttle[0][:3000], shuttle[1][:3000], 32),
                        (digits[0][:600], digits[1][:600], 16)):
        svm, scaler = OnlineSVM(lam=lam, projection=projection), StandardScaler()
        classes, W, t = [], [], 0
        for i in range(0, len(X), batch):
            X_test, X_learn = scaler.prequential_transform(X[i:i + batch])
            labels = y[i:i + batch].tolist()
            got = svm.test_then_train(X_learn, labels, X_test=X_test)
            *want, t = _svm_reference(X_learn.tolist(), X_test.tolist(), labels, classes, W,
                                      t, lam, radius2)
            assert got == tuple(want)
            assert svm.t == t
        assert svm.classes == classes
        assert np.array_equal(svm.get_params(), np.ravel(W))
    svm = OnlineSVM(lam=lam, projection=projection)
    X = shuttle[0][:64].astype(np.float64)
    svm.fit(X[:32], shuttle[1][:32].tolist())
    classes, W = list(svm.classes), svm.get_params().reshape(len(svm.classes), -1).tolist()
    X[40, 2] = np.nan  # (the job refuses such a record before any learner sees it)
    labels = shuttle[1][32:64].tolist()
    t = svm.t
    got = svm.test_then_train(X[32:], labels)
    *want, t = _svm_reference(X[32:].tolist(), X[32:].tolist(), labels, classes, W, t, lam,
                              radius2)
    assert svm.t == t and got[0] == want[0] and np.array_equal([got[1]], [want[1]], equal_nan=True)
    assert np.array_equal(svm.get_params(), np.ravel(W), equal_nan=True)


def test_standard_scaler_equals_river():
    rng = np.random.default_rng(3)
    X = rng.normal(5.0, 3.0, size=(300, 4)).round(1)
    X[:, 2] = 7.0  # constant: must map to exactly 0
    X[150:, 3] = X[149, 3]  # becomes constant
    for with_std in (True, False):
        river = preprocessing.StandardScaler(with_std=with_std)
        ours = StandardScaler(with_std=with_std)
        before, after = [], []
        for xi in X.tolist():
            x = dict(enumerate(xi))
            before.append([river.transform_one(x)[i] for i in range(4)])
            river.learn_one(x)
            after.append([river.transform_one(x)[i] for i in range(4)])
        got_before, got_after = [], []
        for lo, hi in ((0, 1), (1, 65), (65, 66), (66, 200), (200, 300)):
            b, a = ours.prequential_transform(X[lo:hi])
            got_before.append(b)
            got_after.append(a)
        np.testing.assert_allclose(np.vstack(got_before), before, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(np.vstack(got_after), after, rtol=1e-9, atol=1e-9)
        if with_std:
            assert np.all(np.vstack(got_after)[:, 2] == 0.0)
        # learn_transform is the "after" view; transform uses the final statistics
        fresh = StandardScaler(with_std=with_std)
        np.testing.assert_allclose(fresh.learn_transform(X), after, rtol=1e-9, atol=1e-9)
        x = dict(enumerate(X[0].tolist()))
        np.testing.assert_allclose(fresh.transform(X[:1])[0],
                                   [river.transform_one(x)[i] for i in range(4)], rtol=1e-9)


def test_min_max_scaler_equals_river():
    rng = np.random.default_rng(5)
    X = rng.uniform(-2, 2, size=(120, 3))
    X[:, 1] = 1.5
    river, ours = preprocessing.MinMaxScaler(), MinMaxScaler()
    after = []
    for xi in X.tolist():
        x = dict(enumerate(xi))
        river.learn_one(x)
        after.append([river.transform_one(x)[i] for i in range(3)])
    got = np.vstack([ours.learn_transform(X[:50]), ours.learn_transform(X[50:])])
    np.testing.assert_allclose(got, after, rtol=1e-12)
    b, a = MinMaxScaler().prequential_transform(X)
    np.testing.assert_allclose(a, after, rtol=1e-12)
    np.testing.assert_allclose(b[1:], MinMaxScaler().prequential_transform(X)[0][1:])


# --- multi-class ------------------------------------------------------------------------

def test_digits_multiclass(digits):
    X, y = digits
    pipe = Pipeline([StandardScaler()], PAClassifier(C=0.01, mode=1))
    accs = [prequential(pipe, X, y, 64)[0] for _ in range(3)]
    print("\ndigits, PA-I C=0.01 + StandardScaler, prequential accuracy per pass:",
          ", ".join(f"{a:.4f}" for a in accs))
    assert accs[2] >= 0.96  # measured 0.9727
    assert accs[0] < accs[1] <= accs[2] + 0.01


def test_mini_batches_equal_records(digits):
    """Mini-batch size changes nothing: the batch path is river's per-record loop."""
    X, y = digits
    X, y = X[:400], y[:400]
    a = Pipeline([StandardScaler()], PAClassifier(C=0.05, mode=2))
    b = Pipeline([StandardScaler()], PAClassifier(C=0.05, mode=2))
    _, pa = prequential(a, X, y, 400)
    _, pb = prequential(b, X, y, 1)
    assert pa == pb
    assert a.learner.classes == b.learner.classes == list(range(10))
    np.testing.assert_allclose(a.learner.get_params(), b.learner.get_params(), rtol=1e-9,
                               atol=1e-12)


def test_new_label_mid_batch_is_not_predicted_before_it_is_seen():
    X = np.array([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0], [0.0, 1.0], [-1.0, -1.0]])
    pa = PAClassifier(C=1.0, mode=0)
    predictions, _ = pa.test_then_train(X, ["b", "b", "c", "c", "a"])
    assert predictions[:3] == [None, "b", "b"]
    assert "a" not in predictions
    assert pa.classes == ["a", "b", "c"]
    before = PAClassifier(C=1.0, mode=0)
    before.fit(X[:4], ["b", "b", "c", "c"])
    assert before.layout() == {"classes": ["b", "c"], "n_features": 2}
    # "a" gets a zero row at its sorted place, then one multi-class PA step against the
    # best rival r: W_a += t [x|1], W_r -= t [x|1], t = loss / (2 |x|^2)
    w0 = before.get_params().reshape(2, 3)
    xa = np.array([-1.0, -1.0, 1.0])
    s = w0 @ xa
    r = int(np.argmax(s))
    t = (1.0 + s[r]) / (2 * 2.0)
    expected = np.vstack([t * xa, w0])
    expected[1 + r] -= t * xa
    np.testing.assert_allclose(pa.get_params().reshape(3, 3), expected, rtol=1e-12)


# --- the learner contract ---------------------------------------------------------------

def fitted(labels=(0, 1, 2), n=200, seed=0) -> tuple[PAClassifier, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    y = [labels[i] for i in rng.integers(0, len(labels), size=n)]
    X += np.array([[labels.index(v)] * 4 for v in y], dtype=float)
    pa = PAClassifier(C=0.1)
    pa.fit(X, y)
    return pa, X


def test_predictions_are_native_python():
    pa, X = fitted()
    for p in pa.predict(X[:20]):
        assert type(p) is int
    pa2 = PAClassifier()
    pa2.fit(X[:4], np.array([True, False, True, False]))
    assert all(type(p) is bool for p in pa2.predict(X[:4]))
    assert PAClassifier().predict(X[:3]) == [None, None, None]


def test_labels_keep_their_types():
    pa = PAClassifier()
    pa.fit(np.eye(4), [True, 1, "1", 1.0])
    assert len(pa.classes) == 4
    assert [type(c).__name__ for c in pa.classes] == ["bool", "float", "int", "str"]


def test_get_set_params_round_trip():
    pa, X = fitted()
    w = pa.get_params()
    assert w.dtype == np.float64 and w.ndim == 1 and w.size == 3 * (4 + 1)
    other = pa.clone()
    other.grow(pa.layout())
    other.set_params(w)
    assert other.predict(X) == pa.predict(X)
    w[:] = 0  # a copy
    assert np.any(pa.get_params() != 0)
    with pytest.raises(ValueError, match="15"):
        pa.set_params(np.zeros(14))


def test_json_round_trip():
    pa, X = fitted(labels=("x", "y", "z"))
    d = orjson.loads(orjson.dumps(pa.to_json()))
    back = PAClassifier.from_json(d)
    assert back.predict(X) == pa.predict(X)
    np.testing.assert_array_equal(back.get_params(), pa.get_params())
    assert back.hyperparameters() == pa.hyperparameters()

    pipe = Pipeline([StandardScaler(), MinMaxScaler()], PAClassifier(mode=2))
    pipe.fit(X, ["x", "y"] * (len(X) // 2))
    d = orjson.loads(orjson.dumps(pipe.to_json()))
    back = make_pipeline(d["preProcessors"], d["learner"])
    assert back.predict(X) == pipe.predict(X)
    b1, _, _ = back.test_then_train(X[:10], ["x"] * 10)
    b2, _, _ = pipe.test_then_train(X[:10], ["x"] * 10)
    assert b1 == b2


def test_clone_is_unfitted():
    pa, X = fitted()
    c = pa.clone()
    assert c.classes == [] and c.n_features is None and c.get_params().size == 0
    assert c.hyperparameters() == pa.hyperparameters()
    assert c.predict(X[:2]) == [None, None]
    s = StandardScaler(with_std=False)
    s.learn_transform(X)
    assert s.clone().n == 0 and s.clone().with_std is False


def test_project_and_grow():
    a, X = fitted(labels=(0, 1))
    b, _ = fitted(labels=(0, 1, 2), seed=1)
    wa, wb = a.get_params(), b.get_params()
    # [0, 1] into [0, 1, 2]: rows 0, 1 kept, row 2 zeros
    p = b.project(wa, a.layout()).reshape(3, 5)
    np.testing.assert_array_equal(p[:2], wa.reshape(2, 5))
    np.testing.assert_array_equal(p[2], 0.0)
    assert b.classes == [0, 1, 2]
    # [0, 1, 2] into [0, 1]: the smaller model grows first, then nothing is lost
    p = a.project(wb, b.layout())
    assert a.classes == [0, 1, 2]
    np.testing.assert_array_equal(p, wb)
    np.testing.assert_array_equal(a.get_params().reshape(3, 5)[2], 0.0)
    # a layout in another order aligns by label
    c = PAClassifier()
    c.grow({"classes": [2, 0], "n_features": 4})
    assert c.classes == [0, 2]
    v = np.arange(10.0)
    pc = c.project(v, {"classes": [2, 0], "n_features": 4}).reshape(2, 5)
    np.testing.assert_array_equal(pc, v.reshape(2, 5)[::-1])
    with pytest.raises(ValueError):
        a.grow({"classes": [0], "n_features": 7})
    with pytest.raises(ValueError):
        a.project(wb[:-1], b.layout())


def test_project_from_model_without_features():
    empty = PAClassifier()
    empty.grow({"classes": ["a"], "n_features": None})
    assert empty.get_params().size == 1
    pa = PAClassifier()
    pa.fit(np.ones((2, 3)), ["b", "a"])
    p = pa.project(np.array([0.5]), empty.layout()).reshape(2, 4)
    np.testing.assert_array_equal(p, [[0, 0, 0, 0.5], [0, 0, 0, 0]])


def test_loss_and_score():
    pa = PAClassifier(C=1.0, mode=0, learn_intercept=False)
    X = np.array([[1.0, 0.0], [0.0, 1.0]])
    assert pa.loss(X, [0, 1]) == 2.0  # all scores 0: hinge 1 per record
    pa.fit(X, [0, 1])  # one class at record 0: no step; then a step of 1/2
    assert pa.loss(X, [0, 1]) == 1.0
    pa.fit(X, [0, 1])  # PA (mode 0) then reaches margin 1 on both
    assert pa.score(X, [0, 1]) == 1.0
    assert pa.loss(X, [0, 1]) == pytest.approx(0.0, abs=1e-12)
    assert pa.loss(X, [0, 5]) > 0  # an unseen label scores 0
    assert math.isnan(pa.score(X[:0], []))
    assert pa.loss(X[:0], []) == 0.0


def test_hyperparameters_validated():
    with pytest.raises(HyperparameterError, match=r"C must be > 0, got -1"):
        PAClassifier(C=-1)
    with pytest.raises(ValueError, match="mode"):
        PAClassifier(mode=3)
    with pytest.raises(ValueError, match="learn_intercept"):
        PAClassifier(learn_intercept="yes")
    with pytest.raises(ValueError, match="with_std"):
        StandardScaler(with_std=1)
    pa = PAClassifier()
    with pytest.raises(HyperparameterError) as e:
        pa.update_hyperparameters(C=0.5, mode=True)
    assert e.value.name == "mode" and pa.C == 0.01  # nothing changed
    with pytest.raises(HyperparameterError, match="unknown hyperparameter 'c'"):
        pa.update_hyperparameters(c=1.0)
    pa.update_hyperparameters(C=0.5, mode=2)
    assert pa.hyperparameters() == {"C": 0.5, "mode": 2, "learn_intercept": True}


def test_shape_errors():
    pa = PAClassifier()
    pa.fit(np.ones((2, 3)), [0, 1])
    with pytest.raises(ValueError, match="3"):
        pa.fit(np.ones((2, 4)), [0, 1])
    with pytest.raises(ValueError, match="labels"):
        pa.fit(np.ones((2, 3)), [0])
    with pytest.raises(ValueError):
        pa.fit(np.ones((1, 3)), [None])
    assert isinstance(pa, Learner)


def test_native_modules_are_imported_on_a_thread_of_their_own(tmp_path, monkeypatch):
    """``learning.native.import_in_own_thread``: the module runs its top level on a new
    Python thread (where pybind11's first ``PyGILState_Ensure`` finds that thread's own
    state, not one of pemja's), the caller then finds it in ``sys.modules``, a module
    imported already is not imported again, and an import error reaches the caller."""
    import sys
    import threading

    from learning.native import import_in_own_thread

    (tmp_path / "omldm_probe_native.py").write_text(
        "import threading\nTHREAD = threading.current_thread().name\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "omldm_probe_native", raising=False)
    import_in_own_thread("omldm_probe_native")
    probe = sys.modules["omldm_probe_native"]
    assert probe.THREAD == "omldm-native-import" != threading.current_thread().name
    import_in_own_thread("omldm_probe_native")  # imported: nothing happens
    assert sys.modules["omldm_probe_native"] is probe
    with pytest.raises(ImportError):
        import_in_own_thread("omldm_no_such_module_anywhere")
    assert "river.metrics" in sys.modules  # learning.metrics imported it so


def test_compiled_loops_take_one_signature_and_never_compile_on_the_callers_thread():
    """``learning.compiled``: after ``compile_all`` (on a thread of its own) each loop is
    numba's machine code for one signature; arguments that do not match it raise
    ``TypeError`` instead of compiling again on the calling thread (a PyFlink task thread
    in thread mode), and the results are those of the plain Python function."""
    from learning import compiled

    compiled.compile_all()
    X = np.arange(12.0).reshape(4, 3)
    mean, var = np.empty_like(X), np.empty_like(X)
    compiled.moments_prefix(X, 0, np.zeros(0), np.zeros(0), mean, var)
    want_mean, want_var = np.empty_like(X), np.empty_like(X)
    compiled.moments_prefix.py_func(X, 0, np.zeros(0), np.zeros(0), want_mean, want_var)
    assert np.array_equal(mean, want_mean) and np.array_equal(var, want_var)
    assert len(compiled.moments_prefix.signatures) == 1
    with pytest.raises(TypeError):  # a Fortran-ordered batch: not this signature
        compiled.moments_prefix(np.asfortranarray(X), 0, np.zeros(0), np.zeros(0), mean, var)
    with pytest.raises(TypeError):  # float32: neither
        compiled.moments_prefix(X.astype(np.float32), 0, np.zeros(0), np.zeros(0), mean, var)
    assert len(compiled.moments_prefix.signatures) == 1
