"""Every learner and preprocessor of the registry through the shared conformance checks
(tests/checks.py), plus the behaviours specific to each: exactness against river or a
brute-force reference, the meaning of each flat vector for the protocols, the refusal to
average a tree, and the Independent protocol on the in-process kernel."""

from __future__ import annotations

import math

import numpy as np
import orjson
import pytest

from learning import Pipeline, StandardScaler
from learning.errors import HyperparameterError, ParameterError, RequestError
from learning.learners import (CNN, MLP, HoeffdingAdaptiveTree, HoeffdingTree, KMeans,
                               MLPRegressor, OnlineRidge, OnlineSVM, PAClassifier,
                               PARegressor)
from learning.preprocessors import (FeatureSelector, MinMaxScaler, PolynomialFeatures,
                                    RunningMeanVariance, StatImputer, TargetStandardScaler)
from learning.registry import LEARNERS, PREPROCESSORS, check_pairing, make_learner
from tests.checks import (batches, check_learner, check_preprocessor,
                          check_target_preprocessor)


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return X[:320] / 16.0, y[:320].tolist()


@pytest.fixture(scope="module")
def trump():
    from river import datasets

    data = list(datasets.TrumpApproval())[:300]
    X = np.array([list(x.values()) for x, _ in data])
    return (X - X.mean(axis=0)) / X.std(axis=0), [float(t) for _, t in data]


LEARNER_CASES = {
    "PAClassifier": (lambda: PAClassifier(C=0.1, mode=1), "digits", 16),
    "OnlineSVM": (lambda: OnlineSVM(lam=0.01), "digits", 16),
    "PARegressor": (lambda: PARegressor(C=1.0, mode=2, eps=0.1), "trump", 16),
    "OnlineRidge": (lambda: OnlineRidge(alpha=1.0), "trump", 16),
    "KMeans": (lambda: KMeans(n_clusters=5, seed=3), "digits", 16),
    "HoeffdingTree": (lambda: HoeffdingTree(grace_period=40), "digits", 16),
    # majority-class leaves: river's naive Bayes over 64 features x 10 classes is slow
    "HoeffdingAdaptiveTree": (lambda: HoeffdingAdaptiveTree(grace_period=40,
                                                            leaf_prediction="mc", seed=2),
                              "digits", 16),
    "MLP": (lambda: MLP(hidden_layers=[16], learning_rate=0.01, seed=1), "digits", 16),
    "CNN": (lambda: CNN(image_shape=[1, 8, 8], channels=[4], hidden=8, seed=1), "digits", 16),
    "MLPRegressor": (lambda: MLPRegressor(hidden_layers=[8], learning_rate=0.01, seed=1),
                     "trump", 16),
}


def test_every_registered_learner_is_checked():
    assert {cls.__name__ for cls in LEARNERS.values()} == set(LEARNER_CASES)
    for name, cls in LEARNERS.items():  # to_json's name resolves to the class
        assert LEARNERS[cls.__name__] is cls, name


@pytest.mark.parametrize("name", sorted(LEARNER_CASES))
def test_learner_conformance(name, request):
    make, data, size = LEARNER_CASES[name]
    X, y = request.getfixturevalue(data)
    check_learner(make, X, y, size)


PREPROCESSOR_CASES = {
    "StandardScaler": lambda: StandardScaler(),
    "MinMaxScaler": lambda: MinMaxScaler(),
    "FeatureSelector": lambda: FeatureSelector(indices=[5, 0, -1, 5]),
    "FeatureSelector-drop": lambda: FeatureSelector(indices=[1, 2], drop=True),
    "RunningMeanVariance": lambda: RunningMeanVariance(),
    "PolynomialFeatures": lambda: PolynomialFeatures(degree=2),
    "PolynomialFeatures-interactions": lambda: PolynomialFeatures(degree=3,
                                                                  interaction_only=True),
    "TargetStandardScaler": lambda: TargetStandardScaler(),
    "TargetStandardScaler-mean": lambda: TargetStandardScaler(with_std=False),
    "StatImputer": lambda: StatImputer(),  # with missing values: tests/test_imputer.py
}


def test_every_registered_preprocessor_is_checked():
    assert {cls.__name__ for cls in PREPROCESSORS.values()} <= \
        {name.split("-")[0] for name in PREPROCESSOR_CASES}


@pytest.mark.parametrize("name", sorted(PREPROCESSOR_CASES))
def test_preprocessor_conformance(name, trump):
    X, y = trump
    make = PREPROCESSOR_CASES[name]
    if make().targets:
        check_target_preprocessor(make, X, np.asarray(y, dtype=np.float64), size=16)
    else:
        check_preprocessor(make, X * 3.0 + 1.0, size=16)


# --- exact against references ------------------------------------------------------------

def test_pa_regressor_is_river_with_the_papers_loss(trump):
    """Record for record river's PARegressor once river's ε-insensitive loss is the
    paper's (river 0.23 maps the target to 2y - 1 inside it, see PARegressor's docstring)."""
    from river import linear_model, optim

    class PaperLoss(optim.losses.EpsilonInsensitiveHinge):
        def __call__(self, y_true, y_pred):
            return max(abs(y_pred - y_true) - self.eps, 0.0)

    X, y = trump
    for C, mode, eps, intercept in ((1.0, 0, 0.1, True), (0.05, 1, 0.5, True),
                                    (0.3, 2, 0.0, False)):
        river = linear_model.PARegressor(C=C, mode=mode, eps=eps, learn_intercept=intercept)
        river.loss = PaperLoss(eps)
        expected = []
        for xi, yi in zip(X.tolist(), y):
            x = dict(enumerate(xi))
            expected.append(river.predict_one(x))
            river.learn_one(x, yi)
        ours = PARegressor(C=C, mode=mode, eps=eps, learn_intercept=intercept)
        got = []
        for Xb, yb in batches(X, y, 37):
            got += ours.test_then_train(Xb, yb)[0]
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9)
        w = [river.weights.get(i, 0.0) for i in range(X.shape[1])] + [river.intercept]
        np.testing.assert_allclose(ours.get_params(), w, rtol=1e-9, atol=1e-9)


def test_ridge_predicts_the_exact_ridge_solution_of_the_past():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(60, 3))
    y = (X @ [1.0, -2.0, 0.5] + 3.0 + 0.1 * rng.normal(size=60)).tolist()
    for intercept in (True, False):
        model = OnlineRidge(alpha=0.7, fit_intercept=intercept)
        got = []
        for Xb, yb in batches(X, y, 7):
            got += model.test_then_train(Xb, yb)[0]
        expected = [0.0]
        D = np.diag([0.7, 0.7, 0.7, 0.0])
        for i in range(1, 60):
            XA = np.c_[X[:i], np.ones(i)] if intercept else X[:i]
            A = XA.T @ XA + (D if intercept else 0.7 * np.eye(3))
            w = np.linalg.solve(A, XA.T @ np.asarray(y[:i]))
            expected.append(float((np.r_[X[i], 1.0] if intercept else X[i]) @ w))
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9)


def test_ridge_statistics_add_up_across_spokes():
    """Summing two spokes' vectors is the ridge regression of both streams."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(80, 4))
    y = (X @ rng.normal(size=4) + 1.0).tolist()
    a, b, both = OnlineRidge(), OnlineRidge(), OnlineRidge()
    a.fit(X[:30], y[:30])
    b.fit(X[30:], y[30:])
    both.fit(X, y)
    hub = OnlineRidge()
    hub.grow(a.layout())
    hub.set_params(a.get_params() + b.get_params())
    np.testing.assert_allclose(hub.coef, both.coef, rtol=1e-10)
    assert hub.n == 80


def test_kmeans_vector_pools_cluster_means():
    X = np.array([[0.0, 0.0], [10.0, 10.0], [0.2, 0.0], [10.2, 10.0]])
    a = KMeans(n_clusters=2, init_size=2)
    a.fit(X)
    w = a.get_params().reshape(2, 3)
    assert sorted(w[:, 0].tolist()) == [2.0, 2.0]
    hub = KMeans(n_clusters=2)
    hub.grow(a.layout())
    assert not hub.get_params().any()
    hub.set_params(a.get_params() + a.get_params())
    np.testing.assert_allclose(np.sort(hub.centers, axis=0), [[0.1, 0.0], [10.1, 10.0]])
    assert hub.predict(np.array([[9.0, 9.0]])) == a.predict(np.array([[9.0, 9.0]]))
    assert KMeans(n_clusters=2).predict(X[:1]) == [None]
    with pytest.raises(HyperparameterError, match="n_clusters"):
        a.update_hyperparameters(n_clusters=3)


def test_kmeans_matches_clusters_to_the_reference_before_a_merge():
    """KMeans.match: each vector's clusters reordered to the reference's nearest ones as a
    whole (empty clusters go anywhere); without reference clusters the vector of the most
    records is the reference; nothing to match, nothing changed."""
    def vector(rows):  # rows of (count, center)
        return np.array([[n, *(n * np.asarray(c, dtype=float))] for n, c in rows]).ravel()

    km = KMeans(n_clusters=3)
    km.grow({"n_clusters": 3, "n_features": 2})
    ref = vector([(5, [0, 0]), (5, [10, 0]), (5, [0, 10])])
    spoke = vector([(2, [0.2, 9.8]), (3, [0.1, 0.1]), (4, [9.9, 0.3])])
    [got] = km.match([spoke], ref)
    np.testing.assert_allclose(got, vector([(3, [0.1, 0.1]), (4, [9.9, 0.3]), (2, [0.2, 9.8])]))
    assert np.array_equal(km.match([ref], ref)[0], ref)  # aligned: the identity
    # an empty cluster on either side: the others still go to their nearest
    partial = vector([(0, [0, 0]), (2, [0.1, 9.9]), (1, [10.1, 0])])
    [got] = km.match([partial], ref)
    np.testing.assert_allclose(got.reshape(3, 3)[1:], [[1, 10.1, 0], [2, 0.2, 19.8]])
    # no global clusters yet: the heaviest vector (9 records) is the reference
    light = vector([(1, [10, 0]), (1, [0, 0]), (0, [0, 0])])
    heavy = vector([(3, [0, 0]), (3, [10, 0]), (3, [0, 10])])
    got = km.match([light, heavy], np.zeros(9))
    np.testing.assert_allclose(got[0].reshape(3, 3)[:2], [[1, 0, 0], [1, 10, 0]])
    assert np.array_equal(got[1], heavy)
    assert km.match([np.zeros(9)], np.zeros(9))[0].sum() == 0
    assert KMeans(n_clusters=3).match([np.zeros(0)], np.zeros(0))[0].size == 0


def test_kmeans_batch_of_one_is_macqueen():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(50, 2))
    model = KMeans(n_clusters=3, init_size=3, seed=0)
    model.fit(X[:3])
    centers, counts = model.centers.copy(), model.counts.copy()
    for x in X[3:]:
        j = int(((centers - x) ** 2).sum(axis=1).argmin())
        counts[j] += 1
        centers[j] += (x - centers[j]) / counts[j]
        model.fit(x[None, :])
    np.testing.assert_allclose(model.centers, centers, rtol=1e-12)


def test_svm_binary_is_pegasos():
    """Two classes: W_1 - W_0 is the binary Pegasos iterate (with its projection)."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(200, 3))
    y = (X @ [1.0, -1.0, 0.5] > 0).astype(int).tolist()
    lam = 0.05
    model = OnlineSVM(lam=lam)
    model.fit(X[:1], y[:1])
    first_other = y.index(1 - y[0])
    model.fit(X[1:first_other], y[1:first_other])  # one class known: nothing learned
    assert model.t == 0 and not model.get_params().any()
    model.fit(X[first_other:], y[first_other:])
    v = np.zeros(4)
    for t, (x, label) in enumerate(zip(X[first_other:], y[first_other:]), start=1):
        xa, s = np.r_[x, 1.0], 1.0 if label == 1 else -1.0
        hit = s * (v @ xa) < 1.0
        v *= 1.0 - 1.0 / t
        if hit:
            v += s / (lam * t) * xa
        v *= min(1.0, (1.0 / math.sqrt(lam)) / max(np.linalg.norm(v), 1e-300))
    W = model.get_params().reshape(2, 4)
    np.testing.assert_allclose(W[1] - W[0], v, rtol=1e-9, atol=1e-12)


def test_hoeffding_tree_is_rivers_tree():
    from river import datasets, tree

    data = list(datasets.Phishing())
    X = np.array([list(x.values()) for x, _ in data], dtype=float)
    y = [label for _, label in data]
    for ours, theirs in ((HoeffdingTree(grace_period=100),
                          tree.HoeffdingTreeClassifier(grace_period=100)),
                         (HoeffdingAdaptiveTree(seed=3),
                          tree.HoeffdingAdaptiveTreeClassifier(seed=3))):
        expected = []
        for xi, yi in zip(X.tolist(), y):
            x = dict(enumerate(xi))
            expected.append(theirs.predict_one(x))
            theirs.learn_one(x, yi)
        got = []
        for Xb, yb in batches(X, y, 64):
            got += ours.test_then_train(Xb, yb)[0]
        assert got == expected
        assert ours.n_nodes == theirs.n_nodes > 1


def test_tree_state_is_json_and_refuses_another_river_version():
    from river import datasets

    data = list(datasets.Phishing())[:600]
    X = np.array([list(x.values()) for x, _ in data], dtype=float)
    model = HoeffdingAdaptiveTree(grace_period=50)
    model.fit(X, [label for _, label in data])
    doc = orjson.loads(orjson.dumps(model.to_json()))
    doc["parameters"]["river"] = "0.0.1"
    with pytest.raises(ParameterError, match="river"):
        HoeffdingAdaptiveTree.from_json(doc)
    evil = {"name": "HoeffdingTree", "parameters": {
        "river": doc["parameters"]["river"], "tree": {"$obj": "os:system", "$id": 0}}}
    evil["parameters"]["river"] = __import__("river").__version__
    with pytest.raises(ParameterError, match="refusing"):
        HoeffdingTree.from_json(evil)


def test_tree_hyperparameters_river_allows_are_updatable():
    model = HoeffdingTree()
    model.update_hyperparameters(grace_period=50, delta=1e-5)
    assert model._tree.grace_period == 50 and model._tree.delta == 1e-5
    with pytest.raises(HyperparameterError, match="split_criterion"):
        model.update_hyperparameters(split_criterion="gini")


def test_neural_vector_is_the_displacement_from_the_seeded_start(digits):
    X, y = digits
    a, b = MLP(hidden_layers=[8], seed=5), MLP(hidden_layers=[8], seed=5)
    a.grow({"classes": [0, 1], "n_features": 64})
    assert not a.get_params().any()  # fresh: zero, like every learner the hubs start from
    a.fit(X[:64], y[:64])
    b.grow(a.layout())
    b.set_params(a.get_params())
    assert b.predict(X) == a.predict(X)
    c = MLP(hidden_layers=[8], seed=6)
    c.grow(a.layout())
    c.set_params(a.get_params())  # another seed: another start, other weights
    assert c.predict(X) != a.predict(X)
    with pytest.raises(ValueError, match="architecture"):
        MLP(hidden_layers=[9]).grow(a.layout())
    with pytest.raises(HyperparameterError, match="hidden_layers"):
        a.update_hyperparameters(hidden_layers=[4])
    a.update_hyperparameters(learning_rate=0.1)
    assert a._opt.param_groups[0]["lr"] == 0.1


def test_cnn_checks_the_image_shape(digits):
    X, y = digits
    with pytest.raises(ValueError, match="image_shape"):
        CNN(image_shape=[1, 7, 7]).fit(X[:4], y[:4])
    with pytest.raises(HyperparameterError, match="kernel_size"):
        CNN(kernel_size=2)


def test_regressors_report_absolute_errors(trump):
    X, y = trump
    for model in (PARegressor(), OnlineRidge()):
        pipe = Pipeline([StandardScaler()], model)
        predictions, n_correct, abs_errors = pipe.test_then_train(X[:50], y[:50])
        assert all(type(p) is float for p in predictions)
        assert n_correct == 0  # prequential accuracy means nothing for a regressor
        assert abs_errors == pytest.approx(np.abs(np.array(y[:50]) - predictions).sum())
        assert model.score(X[:50], y[:50]) == pytest.approx(-model.loss(X[:50], y[:50]) / 50)
        with pytest.raises(ValueError, match="real"):
            model.fit(X[:2], ["a", "b"])


# --- pairing and the Independent protocol ---------------------------------------------

def test_check_pairing():
    for name in ("HoeffdingTree", "HoeffdingAdaptiveTree"):
        with pytest.raises(RequestError) as e:
            check_pairing({"name": name}, "Asynchronous")
        assert e.value.code == "unsupported_pairing"
        assert e.value.field == "trainingConfiguration.protocol"
        assert e.value.message == f"{name} cannot be averaged; use protocol 'Independent'"
        check_pairing({"name": name}, "Independent")
    for name in LEARNERS:
        if LEARNERS[name].averageable:
            check_pairing({"name": name}, "Asynchronous")
    check_pairing({"name": "NoSuchLearner"}, "Asynchronous")  # make_learner reports it


@pytest.mark.parametrize("config", [{"protocol": "FDA"}, {"protocol": "EVENFLOW"},
                                    {"protocol": "EASGD", "alpha": 0.9, "rho": 2.0}])
def test_a_tree_under_a_synchronizing_protocol_is_told_so_before_the_protocols_parameters(config):
    """A Create of a tree under FDA without its threshold was answered "needs threshold";
    given one, "cannot be averaged": the request that can never be served is told so
    first."""
    from learning.requests import parse_request

    with pytest.raises(RequestError) as e:
        parse_request({"id": 1, "request": "Create", "learner": {"name": "HoeffdingTree"},
                       "trainingConfiguration": config})
    assert e.value.code == "unsupported_pairing", e.value


def test_independent_protocol_on_the_in_process_kernel():
    from river import datasets

    from learning.protocols import PROTOCOLS, make_hub, make_spoke
    from learning.protocols.independent import IndependentHub, IndependentSpoke
    from learning.requests import parse_request
    from operators.local import LocalNetwork

    assert PROTOCOLS["Independent"] == (IndependentSpoke, IndependentHub)
    data = list(datasets.Phishing())
    req = parse_request({"id": 5, "request": "Create", "requestId": "q",
                         "learner": {"name": "HoeffdingTree",
                                     "hyperParameters": {"grace_period": 50}},
                         "trainingConfiguration": {"protocol": "Independent",
                                                   "miniBatchSize": 16}})
    spokes, hub = [make_spoke(req), make_spoke(req)], make_hub(req)
    net = LocalNetwork(spokes, [hub], network=req.id)
    for i, (x, label) in enumerate(data):
        net.feed(i % 2, lambda i=i, x=x, label=label:
                 spokes[i % 2].on_train([float(v) for v in x.values()], label))
    net.run()
    for s in spokes:
        net.feed(s.ctx.index, lambda s=s: s.on_query("q"))
    net.run()
    answer = net.outputs["responses"][-1]
    assert answer["fitted"] == len(data)
    assert answer["protocol"]["messagesToHubs"] == 0  # no parameter ever travels
    assert answer["model"]["available"] is False
    assert 0.7 < answer["prequentialAccuracy"] < 1.0
    trees = [s.pipeline.learner for s in spokes]
    # each spoke grew its own tree from its half of the stream (one split, one not yet);
    # the hub's learner is a container, never fitted
    assert sorted(t.n_nodes for t in trees) == [1, 3] and hub.learner.n_nodes == 0
    assert all(t.classes == [False, True] for t in trees)
    assert trees[0].predict(np.ones((1, 9))) is not None
    assert make_learner({"name": "HoeffdingTree"}).averageable is False
