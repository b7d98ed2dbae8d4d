"""EVENFLOW as papers/003 has it (issue 19, part 5): user-registered monitored functions
(§III), the bounds of the fast variant (§III.B, Lemma 1 and Corollary 1) where they bind,
and the streaming window trained for several epochs (§II.A, §IV), on the in-process
kernel (:class:`operators.local.LocalNetwork`).
"""

from __future__ import annotations

import numpy as np
import pytest

from learning.errors import RequestError
from learning.protocols import evenflow, make_hub, make_spoke
from learning.protocols.evenflow import (MONITORED_FUNCTIONS, MonitoredFunction, dft_errors,
                                         kl_divergence, kl_sphere_max, lemma1_bound,
                                         register_monitored_function)
from learning.registry import LEARNERS, make_pipeline, register_learner
from learning.requests import parse_request
from operators.local import LocalNetwork
from tests.test_protocols import LeastSquaresSGD


# -- test learners -----------------------------------------------------------------------------
class PlainSGD(LeastSquaresSGD):
    """Linear least squares, one plain SGD step per ``fit`` (``x̃ = [x | 1]``): the test
    learner of ``tests/test_protocols.py``, registered under this module's own name."""


SPIKE_D = 40_000


class Spike(PlainSGD):
    """Every ``fit`` adds the same spike ``0.01 e_0`` to a ``SPIKE_D``-vector: equal,
    aligned updates with a flat DFT spectrum, where §III.B's bounds are tight."""

    def _width(self, d: int) -> None:
        if self.n_features is None:
            self.n_features, self.w = d, np.zeros(SPIKE_D)

    def fit(self, X, y) -> None:
        self._xa(X)
        self.w = self.w.copy()
        self.w[0] += 0.01

    def predict(self, X) -> list:
        return [0.0] * len(self._xa(X))

    def loss(self, X, y) -> float:
        return 0.0


@pytest.fixture(autouse=True, scope="module")
def _learners_registered():
    register_learner("EvenFlowPlainSGD", PlainSGD)
    register_learner("EvenFlowSpike", Spike)
    yield
    LEARNERS.pop("EvenFlowPlainSGD", None)
    LEARNERS.pop("EvenFlowSpike", None)


# -- helpers -----------------------------------------------------------------------------------
def create(protocol: str = "EVENFLOW", *, learner: str = "EvenFlowPlainSGD", batch: int = 4,
           pre: list | None = None, **config) -> dict:
    return {"id": 7, "request": "Create", "requestId": "c", "preProcessors": pre or [],
            "learner": {"name": learner, "hyperParameters": {"learning_rate": 0.05},
                        "parameters": {"n_features": 5}},
            "trainingConfiguration": {"protocol": protocol, "miniBatchSize": batch,
                                      "miniBatches": 1, **config}}


def network(req: dict, k: int) -> LocalNetwork:
    r = parse_request(req)
    return LocalNetwork([make_spoke(r) for _ in range(k)], [make_hub(r)], network=r.id)


def stream(net: LocalNetwork, X, y) -> None:
    k = len(net.spokes)
    for i in range(len(X)):
        s = i % k
        net.feed(s, lambda s=s, i=i: net.spokes[s].on_train(X[i].tolist(), y[i].item()))
        net.run()
    net.run()


def regression(n: int, d: int = 5, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return X, X @ rng.normal(size=d) + 0.5 + 0.1 * rng.normal(size=n)


# -- monitored functions (§III) -------------------------------------------------------------
class LInf(MonitoredFunction):
    """``max_j |w_j − w_ref_j|``; over a ball, at most ``‖c − w_ref‖_∞ + r``."""

    calls = 0

    def value(self, w, w_ref):
        return float(np.max(np.abs(w - w_ref), initial=0.0))

    def sphere_max(self, w_ref, centre, radius):
        LInf.calls += 1
        return float(np.max(np.abs(centre - w_ref), initial=0.0)) + radius


class Other(MonitoredFunction):
    def value(self, w, w_ref):
        return 0.0

    def sphere_max(self, w_ref, centre, radius):
        return 0.0


@pytest.fixture
def linf():
    register_monitored_function("linf", LInf())
    yield
    evenflow._FUNCTIONS.pop("linf", None)


def test_l2_and_kl_are_built_in_registrations():
    assert list(MONITORED_FUNCTIONS)[:2] == ["l2", "kl"]
    w_ref, w = np.zeros(4), np.array([1.0, 2.0, 0.0, -2.0])
    assert MONITORED_FUNCTIONS["l2"].value(w, w_ref) == 9.0
    assert MONITORED_FUNCTIONS["l2"].sphere_max(w_ref, w / 2, 1.5) == 9.0  # exact: ‖Δ‖²
    assert MONITORED_FUNCTIONS["kl"].value(w, w_ref) == kl_divergence(w_ref, w)


def test_a_user_function_drives_the_protocol(linf):
    LInf.calls = 0
    X, y = regression(1200, seed=3)
    net = network(create(threshold=0.05, monitoredFunction="linf"), 3)
    stream(net, X, y)
    q = net.query()
    assert q["fitted"] == 1200 and q["protocol"]["monitoredFunction"] == "linf"
    assert LInf.calls > 100 and q["protocol"]["rounds"] >= 2


def test_an_unregistered_function_is_refused_at_create_naming_the_registered_ones(linf):
    with pytest.raises(RequestError) as e:
        parse_request(create(threshold=1, monitoredFunction="cos"))
    assert (e.value.code, e.value.field) == ("schema", "trainingConfiguration.monitoredFunction")
    assert "'cos' is not registered" in e.value.message
    assert "l2, kl, linf" in e.value.message
    with pytest.raises(RequestError):  # an Update merged into the running configuration too
        evenflow.PARAMETERS.of({"threshold": 1, "monitoredFunction": "cos"})


def test_registration_is_checked_as_register_protocol_checks():
    with pytest.raises(TypeError):
        register_monitored_function("f", lambda w, w_ref: 0.0)
    for name in ("", "x" * 129, 3):
        with pytest.raises(ValueError):
            register_monitored_function(name, Other())
    with pytest.raises(ValueError, match="already registered"):
        register_monitored_function("l2", Other())  # another class under a taken name
    register_monitored_function("kl", evenflow.KL())  # the same class again: replaced
    assert isinstance(MONITORED_FUNCTIONS["kl"], evenflow.KL)


def test_the_kl_sphere_bound_is_never_below_the_sphere():
    """``kl_sphere_max`` ≥ f at random points of the ball, its boundary included."""
    rng = np.random.default_rng(4)
    for _ in range(200):
        d = int(rng.integers(1, 30))
        w_ref, c = rng.normal(size=d) * 2, rng.normal(size=d) * 2
        r = float(rng.exponential(0.5))
        bound = kl_sphere_max(w_ref, c, r)
        for _ in range(30):
            u = rng.normal(size=d)
            x = c + r * u / np.linalg.norm(u) * (1.0 if rng.random() < 0.7 else rng.random())
            assert kl_divergence(w_ref, x) <= bound + 1e-12


# -- Fast EVENFLOW's bounds (§III.B) ---------------------------------------------------------
def test_lemma_1_and_corollary_1_bind_for_equal_spikes():
    """ϰ+1 equal spikes: ‖Δ‖ = Σ‖u_r‖ = √(ϰ+1)·√(Σ‖u_r‖²) and the spectrum is flat, so the
    discarded energy is exactly 1 − m/d: Corollary 1 holds with equality, Lemma 1 with ratio
    (1 − √(m/d)) / √(1 − m/d)."""
    d, m, n = SPIKE_D, 1, 12
    delta = np.zeros(d)
    delta[0] = 0.01 * n
    _, radius_error, centre_error = dft_errors(delta, m)
    bound = lemma1_bound([0.01 ** 2] * n, m, d)
    assert centre_error / bound == pytest.approx(1.0, rel=1e-9)
    assert radius_error / bound == pytest.approx((1 - np.sqrt(m / d)) / np.sqrt(1 - m / d))
    assert 0.99 <= radius_error / bound <= 1.0 + 1e-9


def test_random_updates_never_violate_either_bound():
    rng = np.random.default_rng(5)
    for _ in range(300):
        d, m, n = int(rng.integers(4, 200)), int(rng.integers(1, 20)), int(rng.integers(1, 30))
        U = rng.normal(size=(n, d)) * rng.exponential(size=(n, 1))
        if rng.random() < 0.3:
            U = np.outer(rng.normal(size=n), rng.normal(size=d))  # aligned
        _, radius_error, centre_error = dft_errors(U.sum(axis=0), m)
        bound = lemma1_bound((U * U).sum(axis=1), m, d)
        assert radius_error <= centre_error + 1e-12 and centre_error <= bound + 1e-12


def test_the_spokes_report_both_bounds_binding_and_never_violated():
    """The spokes' own checks on the spike learner: both ratios ≥ 0.99, no violation."""
    X, y = regression(240, seed=6)
    net = network(create(learner="EvenFlowSpike", threshold=1e9, variant="fast",
                         coefficients=1), 2)
    stream(net, X, y)
    for s in net.spokes:
        st = s.protocol_statistics()
        assert st["lemma1Checks"] == st["corollary1Checks"] == 30
        assert st["lemma1Violations"] == st["corollary1Violations"] == 0
        assert st["corollary1MaxRatio"] == pytest.approx(1.0, rel=1e-9)
        assert 0.99 <= st["lemma1MaxRatio"] <= 1.0


# -- the streaming window and epochs (§II.A, §IV) -----------------------------------------------
def test_window_and_epochs_are_declared_and_refused_out_of_range():
    tc = parse_request(create(threshold=1, window=256, epochs=8)).training_configuration
    assert (tc["window"], tc["epochs"]) == (256, 8)
    for key, value in (("window", -1), ("epochs", 0), ("epochs", 1.5)):
        with pytest.raises(RequestError) as e:
            parse_request(create(threshold=1, **{key: value}))
        assert e.value.field == f"trainingConfiguration.{key}"


def reference(X, y, window: int, batch: int, epochs: int):
    """One spoke alone: per window, test-then-train its mini-batches, then fit them
    ``epochs − 1`` more times (the preprocessors learn at the first pass only)."""
    pipe = make_pipeline([{"name": "StandardScaler"}], {
        "name": "EvenFlowPlainSGD", "hyperParameters": {"learning_rate": 0.05},
        "parameters": {"n_features": 5}})
    loss = 0.0
    for lo in range(0, len(X), window):
        batches = [(X[b:b + batch], y[b:b + batch].tolist())
                   for b in range(lo, min(lo + window, len(X)), batch)]
        for Xb, yb in batches:
            loss += pipe.test_then_train(Xb, yb)[2]
        for _ in range(epochs - 1):
            for Xb, yb in batches:
                pipe.fit(Xb, yb, learn_preprocessors=False)
    return pipe.learner.get_params(), loss


@pytest.mark.parametrize("window,epochs", [(0, 1), (16, 1), (16, 3), (0, 2)])
def test_a_window_is_tested_once_then_trained_epochs_times(window, epochs):
    X, y = regression(200, seed=7)
    net = network(create("Independent", pre=[{"name": "StandardScaler"}], window=window,
                         epochs=epochs), 1)
    stream(net, X, y)
    q = net.query()
    w, loss = reference(X, y, window or 4, 4, epochs)
    assert q["fitted"] == 200 and q["cumulativeLoss"] == pytest.approx(loss, rel=1e-9)
    assert np.allclose(net.spokes[0].pipeline.learner.get_params(), w, rtol=1e-9, atol=1e-12)


def test_a_window_with_one_epoch_is_what_no_window_is():
    """BSP, 2 spokes: a round after every mini-batch pauses a window midway; the rest is
    fitted once the round is over, and the rounds average the same mini-batches."""
    X, y = regression(400, seed=8)
    models, losses = [], []
    for window in (0, 32):
        net = network(create("Synchronous", window=window), 2)
        stream(net, X, y)
        q = net.query()  # the last, partial window: its first mini-batch closes a round
        if window:
            assert q["fitted"] == 392  # its second waits on that round: the next Query
            q = net.query()
        models.append(net.hubs[0].shard())
        losses.append(q["cumulativeLoss"])
    assert losses[0] == pytest.approx(losses[1]) and q["fitted"] == 400
    assert np.allclose(models[0], models[1])


def test_evenflow_on_the_papers_setup_window_256_and_8_epochs():
    """§IV: a window of 256 tuples in 4 batches (64 records), 8 epochs; here 3 spokes and
    a small stream. Every record is fitted (and counted) once; the hooks run per fitted
    mini-batch of every epoch; 8 epochs give another model than 1."""
    X, y = regression(3 * 256 * 3, seed=9)
    results = {}
    for epochs in (1, 8):
        net = network(create(threshold=0.5, window=256, epochs=epochs, batch=64), 3)
        stream(net, X, y)
        q = net.query()
        assert q["fitted"] == len(X) and q["fittedPerSpoke"] == [768] * 3
        assert not any(net.paused(i) for i in range(3))
        assert all(0 < s["sphereTests"] <= 3 * 4 * epochs for s in q["spokes"])
        results[epochs] = (net.hubs[0].shard(), q)
    (w1, q1), (w8, q8) = results[1], results[8]
    assert not np.allclose(w1, w8)
    assert q1["protocol"]["rounds"] >= 1 and q8["protocol"]["rounds"] >= 1
    Xa = np.hstack([X, np.ones((len(X), 1))])
    mse = {e: float(np.mean((Xa @ w - y) ** 2)) for e, w in ((1, w1), (8, w8))}
    assert mse[8] < mse[1]  # 8 passes over each window: further down the loss


def test_records_since_sync_counts_each_record_once_over_epochs():
    X, y = regression(3 * 64, seed=10)
    net = network(create(threshold=1e9, window=64, epochs=5, batch=16), 3)
    stream(net, X, y)
    for s in net.spokes:
        assert s.fitted == 64 and s.records_since_sync == 64
        assert s.tests == 4 * 5  # after_batch ran for every fitted mini-batch of every epoch
