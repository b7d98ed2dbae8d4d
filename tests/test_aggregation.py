"""How hubs fold spokes' work into the global model (``trainingConfiguration.aggregation``,
issue 13): the ``sum`` rule against exact references, ``average`` unchanged, ``diversity``
between the two (the sum where the deltas are orthogonal, the average where they are the
same, the least-squares projection in between), and the preprocessors' statistics merged at the hubs so that every spoke scales like one scaler
that saw the whole stream.

All on the in-process kernel, with the exact least-squares SGD learner of
``tests/test_protocols.py`` and the project's own PA classifier and scalers.
"""

from __future__ import annotations

import numpy as np
import pytest

from learning import PAClassifier, StandardScaler
from learning.errors import RequestError
from learning.protocols import make_spoke
from learning.protocols.sharding import (AGGREGATIONS, DEFAULT_AGGREGATION, aggregation_of,
                                         class_diversity_scales, diversity_scale, shard_bounds)
from learning.requests import parse_request
from tests.test_protocols import (_least_squares_registered, centralized_sgd, create,  # noqa: F401
                                  global_model, network, regression, round_robin_pushes,
                                  stream)


# -- the sum rule ---------------------------------------------------------------------------
@pytest.mark.parametrize("k,m", [(3, 1), (4, 2)])
def test_bsp_sum_is_centralized_sgd_with_k_times_the_batch_and_the_step(k, m):
    """papers/002 §2.1 with β = 1: after every mini-batch the global model moves by the sum
    of the k spokes' SGD steps from it, i.e. one machine's SGD on the k·b records with a
    k-times larger step (the average is the same batch at the same step, §2.2.1)."""
    b, rounds, lr = 8, 20, 0.02
    X, y = regression(k * b * rounds, seed=11)
    net = network(create("Synchronous", hubs=m, batch=b, aggregation="sum",
                         learner={"name": "LeastSquaresSGD",
                                  "hyperParameters": {"learning_rate": lr},
                                  "parameters": {"n_features": 5}}),
                  k, m, shuffle=True, duplicate=0.2, seed=3)
    stream(net, X, y, every=3)
    expected = centralized_sgd(X, y, k * b, lr=k * lr)
    assert np.max(np.abs(global_model(net) - expected)) < 1e-9
    for s in net.spokes:
        assert np.max(np.abs(s.pipeline.learner.get_params() - expected)) < 1e-9
    assert net.query()["protocol"]["aggregation"] == "sum"


def _pa(aggregation: str, protocol: str = "Synchronous", **extra) -> dict:
    return create(protocol, batch=1, aggregation=aggregation,
                  learner={"name": "PA", "hyperParameters": {"C": 1.0, "mode": 1, "learn_intercept": False},
                           "parameters": {"n_features": 8, "classes": [0, 1]}}, **extra)


@pytest.mark.parametrize("protocol", ["Synchronous", "Asynchronous", "FDA"])
def test_sum_of_one_record_per_spoke_is_sequential_training_where_steps_do_not_interact(protocol):
    """One record per spoke, all from the same start, records on disjoint features (no
    record's step changes another's margin): the sum rule gives exactly the model one PA
    learner gets from the records one after the other; the average gives 1/k of it."""
    k = 4
    X = np.zeros((k, 8))
    for i in range(k):
        X[i, 2 * i:2 * i + 2] = [1.0 + i, -0.5 * i]
    y = np.array([1, 0, 1, 0])
    extra = {"threshold": 1e-9} if protocol == "FDA" else {}
    models = {}
    for rule in ("sum", "average", "diversity"):
        net = network(_pa(rule, protocol, **extra), k, 1)
        stream(net, X, y, every=1)
        net.query()  # closes the round of the protocols that wait for one
        models[rule] = global_model(net)
    # one learner of the same pipeline, the records one after the other
    ref = make_spoke(parse_request(_pa("sum"))).pipeline.learner
    for i in range(k):
        ref.fit(X[i:i + 1], [int(y[i])])
    w = ref.get_params()
    assert np.abs(w).sum() > 0
    # however the pushes are grouped into rounds, the deltas add up to the same model
    assert np.max(np.abs(models["sum"] - w)) < 1e-12
    # the deltas are orthogonal (disjoint features), so diversity sums them too; a lone
    # push (TAP) is added as under sum
    assert np.max(np.abs(models["diversity"] - w)) < 1e-12
    if protocol == "Synchronous":  # one round of all four: the average is a quarter of it
        assert np.max(np.abs(models["average"] - w / k)) < 1e-12


# -- the diversity rule ---------------------------------------------------------------------
def test_diversity_scale_is_the_average_for_equal_deltas_and_the_sum_for_orthogonal_ones():
    rng = np.random.default_rng(21)
    d = rng.normal(size=12)
    for k in (2, 4, 8):
        assert diversity_scale([d.copy() for _ in range(k)]) == pytest.approx(1 / k)
        assert diversity_scale(list(np.eye(12)[:k] * rng.uniform(0.5, 2, size=(k, 1)))) == 1.0
    assert diversity_scale([d]) == 1.0
    assert diversity_scale([d, -d]) == 1.0  # they cancel: nothing to scale
    assert diversity_scale([d, -0.9 * d]) == 1.0  # opposed: clamped to the sum
    with pytest.raises(ValueError):
        diversity_scale([])


@pytest.mark.parametrize("seed", range(5))
def test_diversity_scale_projects_the_one_learner_update_onto_the_sum(seed):
    """Deltas Δ_i = c + e_i, a common part plus mutually orthogonal parts orthogonal to
    it: β Σ Δ_i is the least-squares projection of c + Σ e_i (what one learner's steps
    would add up to) onto Σ Δ_i."""
    rng = np.random.default_rng(seed)
    k, n = int(rng.integers(2, 7)), 40
    Q, _ = np.linalg.qr(rng.normal(size=(n, k + 1)))  # k + 1 orthonormal columns
    c = Q[:, 0] * rng.uniform(0.1, 3)
    e = [Q[:, i + 1] * rng.uniform(0.1, 3) for i in range(k)]
    deltas = [c + ei for ei in e]
    total = np.sum(deltas, axis=0)
    target = c + np.sum(e, axis=0)
    projection = float(target @ total) / float(total @ total)
    assert diversity_scale(deltas) == pytest.approx(min(1.0, max(1.0 / k, projection)))
    assert 1.0 / k <= projection <= 1.0


def test_diversity_averages_a_round_in_which_every_spoke_learned_the_same_records():
    """Every spoke fits the same record from the same global model in each round (BSP,
    one record per mini-batch): the deltas are equal, so diversity is the average, which
    here is one learner on the records, and the Query reports β = 1/k."""
    k = 3
    X, y = regression(40, seed=22)
    Xk, yk = np.repeat(X, k, axis=0), np.repeat(y, k)
    models = {}
    for rule in ("average", "diversity"):
        net = network(create("Synchronous", batch=1, aggregation=rule), k, 1)
        stream(net, Xk, yk, every=k)
        models[rule] = global_model(net)
        q = net.query()
        assert q["protocol"]["aggregation"] == rule
    assert np.max(np.abs(models["diversity"] - models["average"])) < 1e-12
    assert np.max(np.abs(models["diversity"] - centralized_sgd(X, y, 1))) < 1e-12
    assert q["protocol"]["diversityScale"] == pytest.approx(1 / k)
    # a learner without class blocks (least squares) takes one β per hub, whatever the scope
    assert q["protocol"]["diversityBlocks"] == "model"


def test_class_diversity_scales_take_every_class_block_alone():
    """Per class block of ``width`` entries, the scale is :func:`diversity_scale` of the
    deltas' parts in it: the average for a block in which every spoke made the same
    correction, the sum for one in which each made its own, within a shard too (its first
    entry at ``offset``, blocks cut at its edges)."""
    rng = np.random.default_rng(23)
    k, width = 4, 5
    same = rng.normal(size=width)
    own = np.eye(width)[:k] * rng.uniform(0.5, 2, size=(k, 1))
    mixed = rng.normal(size=(k, width))
    deltas = [np.concatenate([same, own[i], mixed[i]]) for i in range(k)]
    total = np.sum(deltas, axis=0)
    scales, mean = class_diversity_scales(deltas, total, width)
    expected = [1 / k, 1.0, diversity_scale(list(mixed))]
    assert scales == pytest.approx(np.repeat(expected, width))
    assert mean == pytest.approx(np.mean(expected))
    # a shard from entry 7 to 13: the rest of block 1 (entries 7-9), then block 2's first 4
    part = [d[7:14] for d in deltas]
    scales, _ = class_diversity_scales(part, np.sum(part, axis=0), width, offset=7)
    assert scales[:3] == pytest.approx(diversity_scale([d[:3] for d in part]))
    assert scales[3:] == pytest.approx(diversity_scale([d[3:] for d in part]))
    # a block the deltas do not move keeps scale 1 and does not count in the mean
    still = [np.concatenate([d[:10], np.zeros(width)]) for d in deltas]
    scales, mean = class_diversity_scales(still, np.sum(still, axis=0), width)
    assert np.all(scales[10:] == 1.0) and mean == pytest.approx(np.mean(expected[:2]))
    with pytest.raises(ValueError):
        class_diversity_scales([], total, width)
    with pytest.raises(ValueError):
        class_diversity_scales(deltas, total, 0)


@pytest.mark.parametrize("m", [1, 2])
def test_a_diversity_round_scales_each_class_of_pa_by_its_own_overlap(m):
    """One BSP round of three PA spokes (3 classes, one record each, two of them the same
    record): the hubs add the spokes' deltas scaled per class row within each hub's shard
    (``diversityBlocks: class``, the default), or by one β per hub (``model``), and a Query
    names the scope."""
    k, width = 3, 5
    learner = {"name": "PA", "hyperParameters": {"C": 1.0, "mode": 1},
               "parameters": {"n_features": 4, "classes": [0, 1, 2]}}
    X = np.array([[1.0, 0.0, 0.5, 0.0], [1.0, 0.0, 0.5, 0.0], [0.0, 0.0, 1.0, -1.0]])
    y = np.array([0, 0, 2])
    deltas = []  # each spoke's delta from the zero model they all start from
    for i in range(k):
        ref = make_spoke(parse_request(create("Synchronous", hubs=m, batch=1,
                                              learner=learner))).pipeline.learner
        ref.fit(X[i:i + 1], [int(y[i])])
        deltas.append(ref.get_params())
    total = np.sum(deltas, axis=0)
    models = {}
    for scope in ("class", "model"):
        net = network(create("Synchronous", hubs=m, batch=1, learner=learner,
                             aggregation="diversity", diversityBlocks=scope), k, m)
        stream(net, X, y, every=1)
        models[scope] = global_model(net)
        q = net.query()
        assert q["protocol"]["diversityBlocks"] == scope
    expected = {"class": [], "model": []}
    for lo, hi in shard_bounds(total.size, m):
        part = [d[lo:hi] for d in deltas]
        expected["class"].append(class_diversity_scales(part, total[lo:hi], width, lo)[0]
                                 * total[lo:hi])
        expected["model"].append(diversity_scale(part) * total[lo:hi])
    for scope in ("class", "model"):
        assert models[scope] == pytest.approx(np.concatenate(expected[scope]), abs=1e-12)
    assert not np.allclose(models["class"], models["model"])


# -- the momentum rule ----------------------------------------------------------------------
def momentum_sgd(X, y, batch: int, lr: float, eta: float) -> np.ndarray:
    """Heavy-ball SGD on mini-batches of ``batch``: ``D ← ηD − lr·∇``, ``w ← w + D``."""
    w, D = np.zeros(X.shape[1] + 1), np.zeros(X.shape[1] + 1)
    Xa = np.hstack([X, np.ones((len(X), 1))])
    for lo in range(0, len(X), batch):
        B, t = Xa[lo:lo + batch], y[lo:lo + batch]
        D = eta * D - lr * (B.T @ (B @ w - t)) / len(t)
        w = w + D
    return w


@pytest.mark.parametrize("k,m,eta", [(3, 1, None), (4, 2, None), (4, 2, 0.5), (3, 3, 0.0)])
def test_bsp_momentum_is_heavy_ball_sgd_on_k_times_the_batch(k, m, eta):
    """Chen & Huo's block momentum after every mini-batch: each round's move is the
    spokes' average step (one machine's step on the k·b records), filtered as
    ``D ← ηD + G``: heavy-ball SGD with momentum η, by default 1 − 1/k; η = 0 is the
    ``average`` rule."""
    b, rounds, lr = 8, 20, 0.02
    X, y = regression(k * b * rounds, seed=11)
    extra = {} if eta is None else {"blockMomentum": eta}
    net = network(create("Synchronous", hubs=m, batch=b, aggregation="momentum",
                         learner={"name": "LeastSquaresSGD",
                                  "hyperParameters": {"learning_rate": lr},
                                  "parameters": {"n_features": 5}}, **extra),
                  k, m, shuffle=True, duplicate=0.2, seed=3)
    stream(net, X, y, every=3)
    expected = momentum_sgd(X, y, k * b, lr, 1 - 1 / k if eta is None else eta)
    assert np.max(np.abs(global_model(net) - expected)) < 1e-9
    for s in net.spokes:
        assert np.max(np.abs(s.pipeline.learner.get_params() - expected)) < 1e-9
    q = net.query()["protocol"]
    assert q["aggregation"] == "momentum"
    assert q["blockMomentum"] == pytest.approx(1 - 1 / k if eta is None else eta)
    if eta == 0.0:
        avg = network(create("Synchronous", hubs=m, batch=b, aggregation="average",
                             learner={"name": "LeastSquaresSGD",
                                      "hyperParameters": {"learning_rate": lr},
                                      "parameters": {"n_features": 5}}), k, m)
        stream(avg, X, y, every=3)
        assert np.max(np.abs(global_model(avg) - global_model(net))) < 1e-12


def test_a_momentum_round_weighs_the_spokes_by_their_records_and_keeps_d_when_none_fitted():
    """``G`` is the γ-weighted mean of the deltas (the ``average`` rule's move); a round in
    which no spoke fitted a record moves nothing and keeps ``D`` for the next."""
    net = network(create("Synchronous", aggregation="momentum", blockMomentum=0.5), 2, 1)
    hub = net.hubs[0]
    w0 = hub.shard().copy()
    a, b = w0 + 1.0, w0 - 2.0
    w1 = hub.momentum_move([a, b], [w0, w0], [3, 1])
    assert w1 == pytest.approx(w0 + (3 * 1.0 + 1 * -2.0) / 4)
    hub.set_shard(w1)
    assert np.array_equal(hub.momentum_move([w1, w1], [w1, w1], [0, 0]), w1)
    w2 = hub.momentum_move([w1 + 2.0, w1], [w1, w1], [1, 1])
    assert w2 == pytest.approx(w1 + 0.5 * 0.25 + 1.0)
    assert hub.momentum_rounds == 2


def test_a_lone_push_under_momentum_is_added_as_under_sum():
    """TAP's pushes come one at a time: nothing to average, the delta is added (damped as
    under ``sum``)."""
    k, b, M = 3, 4, 2
    X, y = regression(k * b * M * 15, seed=12)
    models = {}
    for rule in ("sum", "momentum"):
        net = network(create("Asynchronous", batch=b, batches=M, aggregation=rule), k, 1)
        stream(net, X, y, every=1)
        models[rule] = global_model(net)
        assert net.query()["protocol"]["stalenessDamping"] == 0.35
    assert np.array_equal(models["sum"], models["momentum"])


def test_an_update_to_another_rule_drops_the_momentum():
    X, y = regression(200, seed=13)
    net = network(create("Synchronous", batch=10, aggregation="momentum"), 2, 1)
    stream(net, X[:100], y[:100])
    assert net.hubs[0].block_step is not None
    upd = parse_request({"id": 5, "request": "Update", "requestId": "u",
                         "trainingConfiguration": {"aggregation": "average"}})
    for node in (*net.spokes, *net.hubs):
        node.update(upd)
    assert net.hubs[0].block_step is None
    assert "blockMomentum" not in net.query()["protocol"]


def test_the_experiment_offers_every_rule():
    from flink_jobs.experiment import AGGREGATIONS as offered
    assert tuple(offered) == tuple(AGGREGATIONS)


def tap_sum_reference(X, y, k: int, b: int, M: int, lr: float = 0.05,
                      p: float = 0.0) -> tuple[list, np.ndarray]:
    """Asynchronous pushes under the sum rule, computed directly (records round-robin,
    each push answered at once): the global model moves by the spoke's delta from the
    global it was last answered with, times τ^−p (τ: the pushes applied since that answer;
    a spoke's first push: 1)."""
    state = {"g": np.zeros(6), "updates": 0}
    base = [np.zeros(6) for _ in range(k)]
    answered: list[int | None] = [None] * k

    def push(s: int, w: np.ndarray) -> np.ndarray:
        factor = 1.0 if answered[s] is None else max(1, state["updates"] - answered[s]) ** -p
        state["g"] = state["g"] + factor * (w - base[s])
        state["updates"] += 1
        answered[s] = state["updates"]
        base[s] = state["g"].copy()
        return state["g"].copy()

    local = round_robin_pushes(X, y, k, b, M, lr, push)
    return local, state["g"]


@pytest.mark.parametrize("protocol,m,p", [("Asynchronous", 1, 0.0), ("Asynchronous", 3, 0.0),
                                          ("SSP", 1, 0.0), ("EASGD", 1, 0.0), ("EASGD", 2, 0.0),
                                          ("Asynchronous", 1, 1.0), ("Asynchronous", 3, 0.5),
                                          ("SSP", 2, 0.5), ("EASGD", 1, 0.5), ("EASGD", 2, 1.0)])
def test_asynchronous_sum_adds_each_push_delta_from_what_that_spoke_was_answered(protocol, m, p):
    """... scaled by τ^−p under ``stalenessDamping`` = p (Zhang et al.'s η/τ at p = 1):
    round-robin records, each push answered at once, so every push after a spoke's first
    missed the other two spokes' (τ = 2). EASGD under ``sum`` is the same exchange."""
    k, b, M = 3, 4, 2
    X, y = regression(k * b * M * 15, seed=12)
    # the papers' TAP and EASGD (no warm-up): every push answered at once
    extra = {"staleness": 10_000} if protocol == "SSP" else {"warmupRounds": 0}
    extra["stalenessDamping"] = p
    net = network(create(protocol, hubs=m, batch=b, batches=M, aggregation="sum", **extra), k, m)
    stream(net, X, y, every=1)
    local, g = tap_sum_reference(X, y, k, b, M, p=p)
    assert np.max(np.abs(global_model(net) - g)) < 1e-12
    for s in range(k):
        assert np.max(np.abs(net.spokes[s].pipeline.learner.get_params() - local[s])) < 1e-12
    hub = net.query()["protocol"]
    assert hub["stalenessDamping"] == p
    assert hub["updateStaleness"] == {"p50": 2.0, "p95": 2.0, "max": 2}


@pytest.mark.parametrize("protocol", ["Asynchronous", "EASGD"])
def test_staleness_damping_changes_nothing_under_average(protocol):
    """Under ``average`` a push replaces its spoke's contribution (EASGD: the elastic step
    moves the centre): nothing accumulates to damp, the model is the same with p = 1 as
    with p = 0, and Query reports 0."""
    X, y = regression(3 * 4 * 2 * 10, seed=14)
    models = []
    for p in (0.0, 1.0):
        net = network(create(protocol, batch=4, batches=2, aggregation="average",
                             stalenessDamping=p), 3, 1)
        stream(net, X, y, every=1)
        models.append(global_model(net))
        assert net.query()["protocol"]["stalenessDamping"] == 0.0
    assert np.array_equal(models[0], models[1])


def test_aggregation_is_validated_and_defaults_by_learner():
    with pytest.raises(RequestError) as e:
        aggregation_of({"aggregation": "median"}, PAClassifier())
    assert e.value.field == "trainingConfiguration.aggregation"
    assert aggregation_of({}, PAClassifier()) == DEFAULT_AGGREGATION.get("PAClassifier", "average")
    assert aggregation_of({"aggregation": "average"}, PAClassifier()) == "average"


NETWORK_DEFAULTS = [("Synchronous", None, "sum"), ("SSP", None, "sum"),
                    ("Asynchronous", None, "sum"), ("EASGD", None, "sum"),
                    ("Adaptive", None, "sum"), ("FDA", "naive", "diversity"),
                    ("FDA", "sketch", "diversity"), ("EVENFLOW", "basic", "diversity"),
                    ("EVENFLOW", "fast", "diversity")]


@pytest.mark.parametrize("protocol,variant,rule", NETWORK_DEFAULTS)
@pytest.mark.parametrize("learner", ["MLP", "MLPRegressor", "PA", "SVM"])
def test_the_default_rule_depends_on_the_learner_and_how_long_rounds_last(protocol, variant,
                                                                          rule, learner):
    """PA and the networks sum where a synchronization follows a fixed number of
    mini-batches and fold by ``diversity`` where rounds last as long as the spokes stay in
    their safe zone (FDA, EVENFLOW); the SVM averages under every protocol. Spokes, hubs
    and the Query agree on the rule that runs."""
    from operators.local import LocalNetwork

    expected = "average" if learner == "SVM" else rule
    cfg = {"protocol": protocol, "miniBatchSize": 4}
    if variant:
        cfg.update(variant=variant, threshold=0.5)
    net = LocalNetwork(n_spokes=2, n_hubs=1)
    net.request({"id": 0, "request": "Create", "requestId": "c",
                 "learner": {"name": learner, "hyperParameters": {"hidden_layers": [4]}
                             if learner.startswith("MLP") else {}},
                 "trainingConfiguration": cfg})
    assert net.outputs["responses"][-1]["status"] == "ok", net.outputs["responses"]
    rng = np.random.default_rng(0)
    net.stream([(True, {"id": i, "features": rng.normal(size=3).tolist(), "label": i % 2})
                for i in range(40)])
    q = net.query()
    assert q["protocol"]["aggregation"] == expected
    assert {s["aggregation"] for s in q["spokes"]} == {expected}
    # a rule the request names is kept whatever the default
    assert aggregation_of({"aggregation": "average"}, net.spokes[0].pipeline.learner,
                          safe_zone_rounds=variant is not None) == "average"


def test_the_networks_default_rule_learns_as_one_learner_where_averaging_does_not():
    """An MLP regressor at its defaults (Adam, step 0.005) on river's Friedman #1: an Adam
    step has about the same size whatever the gradient's, so averaging the k spokes' steps
    makes one step per k mini-batches and lands where independent learners do; the default,
    the sum under BSP and TAP, comes most of the way to one learner on the whole stream,
    and ``diversity`` under EVENFLOW, whose long rounds a sum would overshoot, a little
    (prequential MAE, in process, 4 spokes, 3,000 records; docs/quality.md, "The default
    rules")."""
    from flink_jobs.experiment import load_friedman
    from flink_jobs.local_run import stream_local

    X, y, _, _ = load_friedman(3000, 0.0)

    def mae(protocol: str, spokes: int = 4, **extra) -> float:
        cfg = {"protocol": protocol, "miniBatchSize": 16, **extra}
        request = {"id": 0, "request": "Create", "requestId": "c",
                   "preProcessors": [{"name": "StandardScaler"}],
                   "learner": {"name": "MLPRegressor", "hyperParameters": {"seed": 0}},
                   "trainingConfiguration": cfg}
        return stream_local(request, X, y, spokes=spokes, every=5, seed=0).final["meanLoss"]

    centralized, independent = mae("Independent", spokes=1), mae("Independent")
    gap = independent - centralized
    for protocol, extra in (("Synchronous", {}), ("Asynchronous", {}),
                            ("EVENFLOW", {"variant": "basic", "threshold": 0.05})):
        averaged, default = mae(protocol, aggregation="average", **extra), mae(protocol, **extra)
        # averaged: where independent learners are (BSP 12.00, TAP 12.55, EVENFLOW 11.74
        # against 11.99; the centralized learner 5.50)
        assert averaged > independent - 0.1 * gap, (protocol, averaged)
        if protocol == "EVENFLOW":  # diversity: a little closer (11.31)
            assert default < averaged, (protocol, default)
        else:  # summed: most of the way (BSP 6.88, TAP 7.95)
            assert default < averaged - 0.5 * gap, (protocol, default)


RIDGE_PROTOCOLS = [("Synchronous", 2, {}), ("SSP", 1, {"staleness": 2}),
                   ("Asynchronous", 2, {}), ("EASGD", 1, {}),
                   ("Adaptive", 1, {"lossThreshold": 1e-9}),
                   ("FDA", 1, {"variant": "naive", "threshold": 1e-9}),
                   ("FDA", 2, {"variant": "sketch", "threshold": 1e-9}),
                   ("EVENFLOW", 1, {"variant": "basic", "threshold": 1e-9})]


@pytest.mark.parametrize("protocol,m,extra", RIDGE_PROTOCOLS)
def test_ridge_sums_under_every_protocol_into_the_ridge_of_every_record(protocol, m, extra):
    """Ridge's vector is sufficient statistics (``Σ x̃ x̃ᵀ``, ``Σ y x̃``): the sum of the
    spokes' deltas is the statistics of every record however the pushes are grouped or
    delayed, so every protocol sums by default (FDA and EVENFLOW too, where the sum of
    other learners' deltas overshoots) and no push is damped for staleness. With every
    spoke's last mini-batch pushed, the global model is the centralized ridge's, to
    rounding, on a transport that reorders and repeats messages."""
    from learning.learners.ridge import OnlineRidge

    k, b = 4, 4
    X, y = regression(k * b * 12, seed=21)
    ridge = {"name": "Ridge", "parameters": {"n_features": 5}}
    net = network(create(protocol, learner=ridge, hubs=m, batch=b, **extra), k, m,
                  shuffle=True, duplicate=0.1, seed=5)
    stream(net, X, y, every=3)
    q = net.query()
    reference = OnlineRidge()
    reference.fit(X, y.tolist())
    expected = reference.get_params()
    assert np.allclose(global_model(net), expected, rtol=1e-9, atol=1e-9)
    assert q["protocol"]["aggregation"] == "sum"
    assert q["protocol"].get("stalenessDamping", 0.0) == 0.0
    # a damping the request names is applied
    if protocol in ("SSP", "Asynchronous", "EASGD"):
        named = network(create(protocol, learner=ridge, batch=b, stalenessDamping=0.5,
                               **extra), k, 1)
        stream(named, X, y, every=3)
        assert named.query()["protocol"]["stalenessDamping"] == 0.5


def test_fda_counts_a_drift_far_past_its_threshold_in_a_message():
    """FDA's counter increment of a model whose drift is ~10²⁵ times the threshold (Ridge's
    statistics on unscaled features: river's TrumpApproval, threshold 1) no longer
    overflows the message's 64-bit integer and stops the stream; the protocol syncs
    after every mini-batch, as that threshold asks, and lands at the centralized ridge."""
    from flink_jobs.local_run import stream_local
    from learning.datasets import trump_approval

    X, y = trump_approval()

    def mae(protocol: str, spokes: int, **extra) -> float:
        request = {"id": 0, "request": "Create", "requestId": "c",
                   "learner": {"name": "Ridge"},
                   "trainingConfiguration": {"protocol": protocol, "miniBatchSize": 16,
                                             "miniBatches": 1, **extra}}
        run = stream_local(request, X, y, spokes=spokes, every=0)
        assert run.final["fitted"] == len(y)
        return run.final["metrics"]["cumulative"]["mae"]

    centralized = mae("Independent", 1)  # 0.507
    assert mae("FDA", 4, variant="naive", threshold=1.0) < centralized + 0.01  # 0.511


def test_fda_counts_a_drift_whose_quotient_overflows_as_k_plus_one():
    """A finite value of φ near float64's largest over the quantum is inf, and
    ``math.floor`` of it raised after every mini-batch (fuzzed: Ridge on 1 spoke, features
    near 1e149); the increment is k + 1, as for any drift past the threshold."""
    from operators.local import LocalNetwork

    net = LocalNetwork(n_spokes=1, n_hubs=1)
    net.request({"id": 0, "request": "Create", "learner": {"name": "Ridge"},
                 "trainingConfiguration": {"protocol": "FDA", "variant": "naive",
                                           "threshold": 0.1, "miniBatchSize": 4}})
    spoke = net.spokes[0]
    spoke._value = lambda: 1.7e308
    spoke.quantum = 1e-3
    spoke.after_batch(4)
    assert spoke.sent == 2


@pytest.mark.parametrize("variant,k", [("naive", 1), ("naive", 2), ("linear", 2),
                                       ("sketch", 2)])
def test_fda_synchronizes_a_drift_past_float64(variant, k):
    """Ridge on features near ±1e149 without a scaler: a spoke's ‖Δ‖² is inf. The
    coordinator's safe-function algebra raised on it (sketch: ``LinAlgError`` in ``state``),
    the polled spokes never got a decision and stayed paused with their records held; an
    inf state is outside any safe zone, so the round now ends in a synchronization."""
    from operators.local import LocalNetwork

    net = LocalNetwork(n_spokes=k, n_hubs=1)
    net.request({"id": 0, "request": "Create", "learner": {"name": "Ridge"},
                 "trainingConfiguration": {"protocol": "FDA", "variant": variant,
                                           "threshold": 0.1, "miniBatchSize": 4}})
    rng = np.random.default_rng(0)
    net.stream([(True, {"id": i, "features": (rng.normal(size=3) * 1e149).tolist(),
                        "label": float(rng.normal())}) for i in range(120)])
    net.query()
    q = net.query()
    assert q["fitted"] == 120 and q["protocol"]["rounds"] >= 1
    assert all(s["held"] == 0 for s in q["spokes"])


@pytest.mark.parametrize("protocol", ["Synchronous", "SSP", "Asynchronous", "EASGD"])
def test_kmeans_spokes_clusters_are_matched_before_the_hubs_merge_them(protocol):
    """Spokes seed their k-means clusters on their own first records, so cluster j of one
    spoke is not cluster j of another; the hub matches them to the global model's
    (:meth:`learning.learners.kmeans.KMeans.match`) before it merges them. Three blobs
    far apart: every blob keeps a global center of its own, and the spokes' prequential
    loss is one learner's. Merged by index, unrelated clusters were pooled into centers
    between the blobs and the counts kept them there."""
    from operators.local import LocalNetwork

    rng = np.random.default_rng(5)
    blobs = np.array([[0.0, 0.0], [20.0, 0.0], [0.0, 20.0]])
    X = blobs[rng.integers(0, 3, 1600)] + rng.normal(scale=0.5, size=(1600, 2))
    net = LocalNetwork(n_spokes=4, n_hubs=1, seed=2)
    net.request({"id": 0, "request": "Create", "requestId": "c",
                 "learner": {"name": "KMeans", "hyperParameters": {"n_clusters": 3}},
                 "trainingConfiguration": {"protocol": protocol, "miniBatchSize": 8}})
    net.stream([(True, {"id": i, "features": x.tolist()}) for i, x in enumerate(X)])
    q = net.query()
    assert q["fitted"] == 1600
    centers = net.hubs[0].learner.centers
    nearest = np.sqrt(((blobs[:, None, :] - centers[None, :, :]) ** 2).sum(-1)).min(axis=1)
    assert (nearest < 1.0).all(), centers
    assert q["meanLoss"] < 3 * 2 * 0.25, q["meanLoss"]  # 2 features of variance 0.25


def test_kmeans_on_a_sharded_parameter_server_is_refused_naming_the_hub_count():
    """Clusters are matched whole at one hub before they are merged; shards of the vector
    cut across them and merged them by index, below independent learners (Waveform, 4
    spokes: 14.09 against 12.58 with one hub). A Create with ``hubParallelism`` > 1 is
    answered with the reason and the field; other pipelines go on."""
    from operators.local import LocalNetwork

    net = LocalNetwork(n_spokes=2, n_hubs=2, network=1)
    net.request({"id": 1, "request": "Create", "requestId": "c",
                 "learner": {"name": "KMeans", "hyperParameters": {"n_clusters": 3},
                             "parameters": {"n_features": 4}},
                 "trainingConfiguration": {"protocol": "Synchronous", "hubParallelism": 2}})
    [answer] = net.outputs["responses"]
    assert answer["status"] == "error" and answer["error"]["code"] == "unsupported"
    assert answer["error"]["field"] == "trainingConfiguration.hubParallelism"
    assert "use hubParallelism 1" in answer["error"]["message"]


def test_an_update_switches_the_rule_of_a_running_pipeline():
    X, y = regression(300, seed=13)
    net = network(create("Synchronous", batch=10, aggregation="average"), 2, 1)
    stream(net, X[:100], y[:100])
    upd = parse_request({"id": 5, "request": "Update", "requestId": "u",
                         "trainingConfiguration": {"aggregation": "sum"}})
    for node in (*net.spokes, *net.hubs):
        node.update(upd)
    stream(net, X[100:], y[100:])
    q = net.query()
    assert q["protocol"]["aggregation"] == "sum"
    assert {s["aggregation"] for s in q["spokes"]} == {"sum"}


# -- preprocessor statistics -------------------------------------------------------------------
@pytest.mark.parametrize("protocol,extra", [("Synchronous", {}), ("Synchronous", {"hubs": 3}),
                                            ("Asynchronous", {}), ("Asynchronous", {"hubs": 2}),
                                            ("SSP", {"staleness": 1}), ("EASGD", {}),
                                            # a round after every mini-batch, the
                                            # Query's flushed one included
                                            ("FDA", {"threshold": 1e-12}),
                                            ("EVENFLOW", {"threshold": 1e-12})])
def test_every_spoke_scales_like_one_scaler_over_the_whole_stream_after_a_round(protocol, extra):
    """Spokes get very different shares (spoke 0 only large values): after the Query's
    round, hub 0's global statistics and every spoke's equal one StandardScaler that
    learned every record, and the Query's model shows them."""
    k = 3
    rng = np.random.default_rng(14)
    X = rng.normal(size=(900, 5)) * [1, 10, 100, 1, 1] + [0, 5, -50, 3, 0]
    y = X @ rng.normal(size=5)
    spoke_of = (lambda i: 0 if X[i, 0] > 0.5 else 1 + i % 2)
    m = extra.get("hubs", 1)  # statistics travel to and from hub 0 only
    net = network(create(protocol, batch=10, batches=2, pre=[{"name": "StandardScaler"}], **extra),
                  k, m)
    stream(net, X, y, spoke_of=spoke_of)
    q = net.query()
    while any(net.paused(i) for i in range(k)) or q["fitted"] < len(X):
        q = net.query()
    if protocol == "Synchronous":  # a spoke idle since the last Query missed its last
        net.query()                # rounds: the next Query's idle answer brings them
    if protocol in ("Asynchronous", "SSP", "EASGD"):  # pushes answered one by one: twice more
        for s in net.spokes:
            s.exchange() if protocol == "EASGD" else s._push()
            net.run()
        for s in net.spokes:  # the first spokes' answers predate the later pushes
            s.exchange() if protocol == "EASGD" else s._push()
            net.run()
    one = StandardScaler()
    one.learn_transform(X)
    probe = rng.normal(size=(7, 5)) * 20
    expected = one.transform(probe)
    hub_scaler = net.hubs[0].preprocessors[0]
    assert hub_scaler.n == len(X)
    np.testing.assert_allclose(hub_scaler.transform(probe), expected, rtol=1e-9, atol=1e-9)
    for s in net.spokes:
        scaler = s.pipeline.preprocessors[0]
        assert scaler.n == len(X)
        np.testing.assert_allclose(scaler.transform(probe), expected, rtol=1e-9, atol=1e-9)
    stats = net.query()["model"]["preProcessors"][0]
    assert stats["n"] == len(X)
    np.testing.assert_allclose(stats["mean"], one.mean, rtol=1e-9)


@pytest.mark.parametrize("share", [0.0, None])
def test_tensair_replicas_share_their_preprocessor_statistics(share, monkeypatch):
    """TensAIR has no hub to merge statistics at: a replica sends what its preprocessors
    learned from its own records with its updates, and every other replica merges it
    exactly. With statistics on every message (share 0) every replica scales like one
    StandardScaler over the whole stream; at the default share (statistics once its new
    records are a quarter of what it holds) each holds its own records and all but less
    than a quarter of each other replica's. Before, each replica scaled by its own share
    alone (spoke 0: only the records with a large first feature)."""
    from learning.protocols import tensair

    if share is not None:
        monkeypatch.setattr(tensair, "STATISTICS_SHARE", share)
    k = 3
    rng = np.random.default_rng(14)
    X = rng.normal(size=(900, 5)) * [1, 10, 100, 1, 1] + [0, 5, -50, 3, 0]
    y = X @ rng.normal(size=5)
    spoke_of = (lambda i: 0 if X[i, 0] > 0.5 else 1 + i % 2)
    net = network(create("TensAIR", batch=10, pre=[{"name": "StandardScaler"}]), k, 1)
    stream(net, X, y, spoke_of=spoke_of)
    assert net.query()["fitted"] == len(X)
    # a Query's model shows the statistics of the replica that holds the most records
    assert net.query()["model"]["preProcessors"][0]["n"] == max(
        s.pipeline.preprocessors[0].n for s in net.spokes)
    one = StandardScaler()
    one.learn_transform(X)
    probe = rng.normal(size=(7, 5)) * 20
    own = [sum(spoke_of(i) == j for i in range(len(X))) for j in range(k)]
    for j, s in enumerate(net.spokes):
        scaler = s.pipeline.preprocessors[0]
        assert s.protocol_errors == 0 and s.statistics_dropped == 0
        if share == 0:
            assert scaler.n == len(X)
            np.testing.assert_allclose(scaler.transform(probe), one.transform(probe),
                                       rtol=1e-9, atol=1e-9)
        else:
            others = [own[i] for i in range(k) if i != j]
            assert scaler.n > own[j] + 0.75 * sum(others), (j, scaler.n, own)


def test_tensair_replicas_match_k_means_clusters_before_adding_an_update():
    """Replicas seed their k-means clusters on their own records, so cluster j of one is
    not cluster j of another; an update's clusters (the means of the records the sender
    assigned) are matched to the receiver's before they are added. Three blobs far apart,
    200 records on every replica before the first updates arrive: every replica keeps a
    center on each blob. Added by index, the first updates pooled unrelated clusters
    (a center between two blobs), and the counts kept them there."""
    rng = np.random.default_rng(5)
    blobs = np.array([[0.0, 0.0], [20.0, 0.0], [0.0, 20.0]])
    X = blobs[rng.integers(0, 3, 1600)] + rng.normal(scale=0.5, size=(1600, 2))
    req = create("TensAIR", batch=8, learner={"name": "KMeans",
                                              "hyperParameters": {"n_clusters": 3}})
    net = network(req, 4, 1)
    stream(net, X, np.zeros(len(X)), every=800)  # 200 records a replica before any update
    assert net.query()["fitted"] == 1600
    for s in net.spokes:
        centers = s.pipeline.learner.centers
        nearest = np.sqrt(((blobs[:, None, :] - centers[None, :, :]) ** 2).sum(-1)).min(axis=1)
        assert (nearest < 1.0).all(), centers


def test_independent_learners_keep_their_own_statistics():
    X, y = regression(300, seed=15)
    net = network(create("Independent", batch=10, pre=[{"name": "StandardScaler"}]), 2, 1)
    stream(net, X, y)
    assert [s.pipeline.preprocessors[0].n for s in net.spokes] == [150, 150]


def test_stateless_preprocessors_add_nothing_to_the_messages():
    X, y = regression(400, seed=16)
    sizes = {}
    for pre in ([], [{"name": "FeatureSelector", "hyperParameters": {"indices": [0, 1, 2, 3, 4]}}]):
        net = network(create("Synchronous", batch=10, pre=pre), 2, 1)
        stream(net, X, y)
        sizes[len(pre)] = net.query()["protocol"]["syncBytesToHubs"]
    assert sizes[0] == sizes[1]


def test_statistics_that_do_not_fit_are_left_out_never_raised():
    """A push whose statistics hub 0 cannot merge (another width) must still end its
    round: the statistics are left out and counted, the model is still aggregated."""
    X, y = regression(200, seed=17)
    net = network(create("Synchronous", batch=10, pre=[{"name": "StandardScaler"}]), 2, 1)
    stream(net, X, y)
    hub = net.hubs[0]
    before = hub.preprocessors[0].statistics()
    hub.merge_preprocessors([{"n": 3, "mean": np.zeros(2), "m2": np.ones(2)}])  # 2 features
    hub.merge_preprocessors([None, None])  # two preprocessors, the pipeline has one
    assert hub.preprocessor_merge_errors == 2
    assert hub.preprocessors[0].statistics()["n"] == before["n"]
    assert net.query()["protocol"]["preprocessorMergeErrors"] == 2
