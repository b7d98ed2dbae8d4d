"""The quality bars of issue 5, computed on the fly against river on real streams.

Prequential (test-then-train), same record order, same hyperparameters, one spoke. Both
sides are computed here, never hard-coded; each test prints its numbers (``pytest -s``).

- PA-I + standard scaler on Shuttle: within 0.002 of river's accuracy.
- PA-I + standard scaler on Phishing: within 0.01 of river's accuracy.
- Online ridge and PA regressor + standard scaler on TrumpApproval: MAE at most 5% above
  river's ``LinearRegression`` / ``PARegressor`` (ours are lower: see the printed MAEs).
- MLP on digits, in order, 3 passes: >= 0.93 prequential accuracy on the third.
- k-means on digits: adjusted Rand index reported, no worse than river's ``KMeans``.
Also reported (no bar in the issue): the online SVM against river's hinge-loss SGD, the
CNN on digits, and the Hoeffding trees (which are river's, see test_learners_conformance).
"""

from __future__ import annotations

import numpy as np
import pytest
from river import cluster, datasets, linear_model, optim, preprocessing

from learning import Pipeline, StandardScaler
from learning.learners import CNN, MLP, KMeans, OnlineRidge, OnlineSVM, PAClassifier, PARegressor


def river_stream(data):
    """A river dataset as ``(X float64, y list, names)`` in file order."""
    names = list(data[0][0])
    X = np.array([[float(x[n]) for n in names] for x, _ in data])
    return X, [label for _, label in data], names


def prequential(pipe: Pipeline, X, y, batch: int) -> tuple[float, float, list]:
    """Accuracy, mean loss and predictions of one test-then-train pass."""
    hits, loss, predictions = 0, 0.0, []
    for i in range(0, len(X), batch):
        p, c, l = pipe.test_then_train(X[i:i + batch], y[i:i + batch])
        hits, loss, predictions = hits + c, loss + l, predictions + p
    return hits / len(X), loss / len(X), predictions


def river_prequential(model, X, y, names) -> tuple[list, float]:
    """river's ``predict_one`` / ``learn_one`` loop: predictions and accuracy."""
    predictions = []
    for xi, yi in zip(X.tolist(), y):
        x = dict(zip(names, xi))
        predictions.append(model.predict_one(x))
        model.learn_one(x, yi)
    return predictions, float(np.mean([p == t for p, t in zip(predictions, y)]))


@pytest.fixture(scope="module")
def phishing():
    return river_stream(list(datasets.Phishing()))


@pytest.fixture(scope="module")
def trump():
    return river_stream(list(datasets.TrumpApproval()))


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return X, y.tolist()


# --- classification ---------------------------------------------------------------------

def test_pa_on_shuttle_within_0002_of_river():
    from learning.datasets import shuttle

    try:
        X, y = shuttle()
    except Exception as e:  # the asset could not be fetched here
        pytest.skip(f"Shuttle dataset unavailable: {e}")
    names = [f"f{i + 1}" for i in range(X.shape[1])]
    y = y.tolist()
    river = preprocessing.StandardScaler() | linear_model.PAClassifier(C=0.01, mode=1)
    _, river_acc = river_prequential(river, X, y, names)
    acc, _, _ = prequential(Pipeline([StandardScaler()], PAClassifier(C=0.01, mode=1)), X, y, 64)
    print(f"\nShuttle PA-I C=0.01 + scaler: omldm {acc:.5f}, river {river_acc:.5f}")
    assert abs(acc - river_acc) <= 0.002


def test_pa_on_phishing_within_001_of_river(phishing):
    X, y, names = phishing
    river = preprocessing.StandardScaler() | linear_model.PAClassifier(C=0.01, mode=1)
    _, river_acc = river_prequential(river, X, y, names)
    for batch in (1, 64):
        acc, _, _ = prequential(Pipeline([StandardScaler()], PAClassifier(C=0.01, mode=1)),
                                X, y, batch)
        print(f"\nPhishing PA-I C=0.01 + scaler, batch {batch}: omldm {acc:.4f}, "
              f"river {river_acc:.4f}")
        assert abs(acc - river_acc) <= 0.01


def test_svm_against_river_hinge_sgd(phishing):
    """No bar in the issue: reported. river has no SVM class; its linear SVM is
    ``LogisticRegression(loss=Hinge())`` (constant-rate SGD), the reference here."""
    X, y, names = phishing
    river = preprocessing.StandardScaler() | linear_model.LogisticRegression(
        loss=optim.losses.Hinge(), l2=0.0)
    _, river_acc = river_prequential(river, X, y, names)
    acc, _, _ = prequential(Pipeline([StandardScaler()], OnlineSVM(lam=0.01)), X, y, 64)
    print(f"\nPhishing online SVM (Pegasos, λ=0.01) + scaler: omldm {acc:.4f}, "
          f"river hinge-SGD {river_acc:.4f}")
    assert acc >= river_acc - 0.03  # measured: 0.876 against 0.897


# --- regression -------------------------------------------------------------------------

def river_mae(model, X, y, names) -> float:
    errors = []
    for xi, yi in zip(X.tolist(), y):
        x = dict(zip(names, xi))
        errors.append(abs(yi - model.predict_one(x)))
        model.learn_one(x, yi)
    return float(np.mean(errors))


@pytest.mark.parametrize("ours,theirs,label", [
    (lambda: OnlineRidge(alpha=1.0), lambda: linear_model.LinearRegression(),
     "OnlineRidge(alpha=1) vs LinearRegression()"),
    (lambda: PARegressor(C=1.0, mode=1, eps=0.1), lambda: linear_model.PARegressor(
        C=1.0, mode=1, eps=0.1), "PARegressor(C=1, mode=1, eps=0.1), both"),
    (lambda: PARegressor(C=0.01, mode=2, eps=0.1), lambda: linear_model.PARegressor(
        C=0.01, mode=2, eps=0.1), "PARegressor(C=0.01, mode=2, eps=0.1), both"),
], ids=["ridge", "pa-regressor-mode1", "pa-regressor-mode2"])
def test_regressors_on_trump_approval_within_5pct_of_river(trump, ours, theirs, label):
    X, y, names = trump
    reference = river_mae(preprocessing.StandardScaler() | theirs(), X, y, names)
    for batch in (1, 64):
        _, mae, _ = prequential(Pipeline([StandardScaler()], ours()), X, y, batch)
        print(f"\nTrumpApproval {label} + scaler, batch {batch}: MAE omldm {mae:.4f}, "
              f"river {reference:.4f}")
        assert mae <= 1.05 * reference


# --- neural networks --------------------------------------------------------------------

def test_mlp_on_digits_third_pass_at_least_093(digits):
    X, y = digits
    pipe = Pipeline([StandardScaler()], MLP(hidden_layers=[64], learning_rate=0.005, seed=0))
    accs = [prequential(pipe, X, y, 16)[0] for _ in range(3)]
    print("\ndigits MLP [64] Adam 0.005, batch 16, prequential accuracy per pass:",
          ", ".join(f"{a:.4f}" for a in accs))
    assert accs[2] >= 0.93


def test_cnn_on_digits(digits):
    """No bar in the issue for the CNN: held to the MLP's."""
    X, y = digits
    pipe = Pipeline([StandardScaler()], CNN(image_shape=[1, 8, 8], channels=[8], seed=0))
    accs = [prequential(pipe, X, y, 16)[0] for _ in range(3)]
    print("\ndigits CNN conv8 Adam 0.01, batch 16, prequential accuracy per pass:",
          ", ".join(f"{a:.4f}" for a in accs))
    assert accs[2] >= 0.93


# --- clustering -------------------------------------------------------------------------

def test_kmeans_on_digits_no_worse_than_river(digits):
    from sklearn.cluster import KMeans as BatchKMeans
    from sklearn.metrics import adjusted_rand_score as ari

    X, y = digits
    k = 10
    river = cluster.KMeans(n_clusters=k, seed=0)
    river_pred = []
    for xi in X.tolist():
        x = dict(enumerate(xi))
        river_pred.append(river.predict_one(x))
        river.learn_one(x)
    river_final = [river.predict_one(dict(enumerate(xi))) for xi in X.tolist()]
    ours = KMeans(n_clusters=k, seed=0)
    pred = []
    for i in range(0, len(X), 32):
        pred += ours.test_then_train(X[i:i + 32])[0]
    pred = [-1 if p is None else p for p in pred]  # the seeding records: one "cluster"
    batch = BatchKMeans(n_clusters=k, n_init=10, random_state=0).fit(X)
    scores = {"omldm prequential": ari(y, pred), "omldm final": ari(y, ours.predict(X)),
              "river prequential": ari(y, river_pred), "river final": ari(y, river_final),
              "sklearn batch KMeans (reference)": ari(y, batch.labels_)}
    print("\ndigits k-means k=10, adjusted Rand index: "
          + ", ".join(f"{name} {v:.3f}" for name, v in scores.items()))
    assert scores["omldm prequential"] >= scores["river prequential"]
    assert scores["omldm final"] >= scores["river final"]
