"""TAP's warm-up (``trainingConfiguration.warmupRounds``, :mod:`learning.protocols.asynchronous`):
a spoke's first rounds run as SSP with staleness 0, then asynchronously; EASGD's and
Adaptive's (:mod:`learning.protocols.easgd`, "Warm-up") are the same pushes, then their
exchanges."""

from __future__ import annotations

import numpy as np
import pytest

from tests.test_protocols import (_least_squares_registered, create, global_model,  # noqa: F401
                                  network, regression, stream)

SHARE = [0] * 5 + [1, 2]  # spoke 0 gets five times the records of the others


def _skewed(net, X, y, after=None) -> None:
    stream(net, X, y, every=1, spoke_of=lambda i: SHARE[i % len(SHARE)], after=after)


def test_tap_in_its_warm_up_is_ssp_with_staleness_0():
    """With a warm-up longer than the stream, TAP computes what SSP at staleness 0 (and
    TAP's damping) computes, message for message: the same global model, every push held
    until the slowest spoke caught up."""
    X, y = regression(1200, seed=3)
    models = {}
    for name, extra in (("Asynchronous", {"warmupRounds": 10**6}),
                        ("SSP", {"staleness": 0, "stalenessDamping": 0.35})):
        net = network(create(name, hubs=2, batch=4, batches=2, **extra), 3, 2, shuffle=True,
                      seed=4)
        _skewed(net, X, y)
        models[name] = global_model(net)
        assert net.hubs[0].max_lead == 0 and net.hubs[0].held > 0, name
        assert net.spokes[0].waited > 0
    assert np.array_equal(models["Asynchronous"], models["SSP"])


def test_after_its_warm_up_tap_never_waits():
    """A warm-up of 5 rounds: no spoke runs ahead of the slowest before its clock reaches
    5 (pushes wait), none waits after; spoke 0 then runs far ahead, and the Query reports
    the bound no more."""
    X, y = regression(2400, seed=7)
    net = network(create("Asynchronous", batch=4, batches=2, warmupRounds=5), 3, 1)
    worst_in_warmup = [0]

    def check(_):
        slowest = min(s.clock for s in net.spokes)
        for s in net.spokes:
            if s.clock < 5:
                worst_in_warmup[0] = max(worst_in_warmup[0], s.rounds - slowest)

    _skewed(net, X, y, after=check)
    assert worst_in_warmup[0] == 0
    assert all(s.waited <= 5 for s in net.spokes) and net.spokes[0].waited > 0
    assert net.hubs[0].held > 0
    assert net.spokes[0].clock - min(s.clock for s in net.spokes) > 5  # unbounded since
    q = net.query()["protocol"]
    assert "staleness" not in q and q["heldAnswers"] == net.hubs[0].held
    assert q["maxLead"] > 5


def test_an_update_ends_a_warm_up_and_frees_what_it_held():
    """Spoke 0 paused on a held answer in a warm-up longer than the stream; an Update to
    ``warmupRounds`` 0 answers it, and the stream goes on asynchronously to the end."""
    X, y = regression(1400, seed=9)
    net = network(create("Asynchronous", batch=4, batches=1, warmupRounds=10**6), 3, 1)
    half = 700
    _skewed(net, X[:half], y[:half])
    assert net.paused(0) and net.hubs[0]._waiting
    net.request({"id": 5, "request": "Update", "requestId": "u",
                 "trainingConfiguration": {"warmupRounds": 0}})
    assert net.outputs["responses"][-1]["status"] == "ok"
    net.run()
    assert not net.paused(0) and not net.hubs[0]._waiting
    waited = net.spokes[0].waited
    stream(net, X[half:], y[half:], every=1, spoke_of=lambda i: SHARE[i % len(SHARE)])
    assert net.spokes[0].waited == waited  # no wait since
    for _ in range(3):
        if net.query()["fitted"] == len(X):
            break
    assert net.query()["fitted"] == len(X)


@pytest.mark.parametrize("protocol", ["EASGD", "Adaptive"])
def test_easgd_and_adaptive_in_their_warm_up_are_taps(protocol):
    """With a warm-up longer than the stream, EASGD and Adaptive push as TAP in its warm-up
    does, message for message (the same global model on both hubs), whatever α."""
    X, y = regression(1200, seed=3)
    models = {}
    for name, extra in (("Asynchronous", {}), (protocol, {"alpha": 0.3})):
        net = network(create(name, hubs=2, batch=4, batches=2, warmupRounds=10**6, **extra),
                      3, 2, shuffle=True, seed=4)
        _skewed(net, X, y)
        models[name] = global_model(net)
        assert net.hubs[0].max_lead == 0 and net.hubs[0].held > 0, name
    assert np.array_equal(models["Asynchronous"], models[protocol])


@pytest.mark.parametrize("protocol,aggregation", [("EASGD", "sum"), ("EASGD", "average"),
                                                  ("Adaptive", "sum")])
def test_after_its_warm_up_easgd_exchanges_and_never_waits(protocol, aggregation):
    """A warm-up of 5 rounds, then exchanges: no spoke ahead of the slowest while in its
    warm-up, no pause after it (every spoke exchanges; spoke 0, with five times the
    records, far more often), and the Query reports the warm-up's pushes and the round
    trips of pushes and exchanges alike."""
    X, y = regression(2400, seed=7)
    extra = {"lossThreshold": 0.5} if protocol == "Adaptive" else {}
    net = network(create(protocol, batch=4, batches=2, warmupRounds=5, alpha=0.3,
                         aggregation=aggregation, **extra), 3, 1)
    worst_in_warmup, waited_after = [0], {}

    def check(_):
        slowest = min(s.clock for s in net.spokes)
        for i, s in enumerate(net.spokes):
            if s.clock < 5:
                worst_in_warmup[0] = max(worst_in_warmup[0], s.rounds - slowest)
            else:
                waited_after.setdefault(i, s.waited)

    _skewed(net, X, y, after=check)
    assert worst_in_warmup[0] == 0
    assert net.hubs[0].held > 0 and net.spokes[0].waited > 0
    assert all(s.waited == waited_after[i] for i, s in enumerate(net.spokes))
    exchanges = [s.pushes - s.clock for s in net.spokes]  # a warm-up push adds ≥ 1 to clock
    assert min(exchanges) > 0 and exchanges[0] > 3 * max(exchanges[1:]), exchanges
    assert not any(net.paused(i) for i in range(3))
    q = net.query()
    assert q["fitted"] == len(X)
    assert "staleness" not in q["protocol"] and min(q["protocol"]["clocks"]) >= 5
    for s, report in zip(net.spokes, q["spokes"]):
        assert report["globalsReceived"] == report["rounds"] > 0
        assert report["roundTripMsP50"] is not None
    assert np.all(np.isfinite(global_model(net)))


@pytest.mark.parametrize("protocol", ["EASGD", "Adaptive"])
def test_an_easgd_snapshot_from_before_the_warm_up_goes_on(protocol):
    """A spoke and a hub pickled before EASGD had a warm-up (their state without TAP's
    clocks, which ran the papers' EASGD) are restored as ones that never pushed, with no
    warm-up (the class default, whatever the default of ``warmupRounds``): they report,
    and exchange on."""
    import pickle

    X, y = regression(600, seed=2)
    extra = {"lossThreshold": 0.5} if protocol == "Adaptive" else {}  # past the warm-up the
    net = network(create(protocol, batch=4, batches=1, **extra), 2, 1)  # loss is small
    stream(net, X[:300], y[:300])
    new = {"staleness", "clock", "slowest", "waited", "globals_received", "_last_global",
           "_pushed_at", "round_trips_ms", "warmup_rounds", "clocks", "max_lead", "held",
           "_latest", "_waiting"}
    for kernel in net.spoke_kernels + net.hub_kernels:  # each node as its old snapshot
        node = kernel.nodes[net.network]
        old = type(node).__new__(type(node))
        old.__dict__.update({k: v for k, v in node.__dict__.items()
                             if k not in new and k != "ctx"})
        kernel.adopt(net.network, pickle.loads(pickle.dumps(old)), 1)
    for node in net.spokes + net.hubs:
        assert node.warmup_rounds == 0 and node.__dict__.get("clock", 0) == 0  # as before
    before = net.hubs[0].updates
    stream(net, X[300:], y[300:])
    assert net.hubs[0].updates > before
    q = net.query()
    assert q["fitted"] == len(X) and q["protocol"]["clocks"] == [0, 0]


@pytest.mark.parametrize("value", [-1, 1.5, "20", True])
def test_warmup_rounds_must_be_a_count(value):
    from learning.errors import RequestError
    from learning.requests import parse_request

    with pytest.raises(RequestError) as e:
        parse_request(create("Asynchronous", warmupRounds=value))
    assert e.value.field == "trainingConfiguration.warmupRounds"


def test_on_flink_a_stream_that_ends_in_the_warm_up_is_counted_whole(broker):
    """The running job, 2 spokes: TAP and EASGD with a warm-up longer than the stream (their
    last answers are held until every spoke pushed: the end of a finite stream must not
    leave one held), TAP and Adaptive with 20 rounds; every record of Shuttle's first
    3,000 is counted."""
    from flink_jobs.session import Session, local_config
    from learning.datasets import shuttle

    X, y = shuttle()
    X, y = X[:3000], y[:3000]
    cfg = local_config(broker.bootstrap_servers, topic_prefix="warmup-", spokes=2)
    runs = {0: ("Asynchronous", 10**6), 1: ("Asynchronous", 20), 2: ("EASGD", 10**6),
            3: ("Adaptive", 20)}
    with Session(cfg, "warmup") as s:
        for pid, (protocol, rounds) in runs.items():
            create_ = {"id": pid, "request": "Create",
                       "preProcessors": [{"name": "StandardScaler"}],
                       "learner": {"name": "PA", "hyperParameters": {"C": 0.01},
                                   "parameters": {"n_features": 9}},
                       "trainingConfiguration": {"protocol": protocol, "miniBatchSize": 16,
                                                 "miniBatches": 1, "warmupRounds": rounds}}
            assert s.request(create_, timeout=120)["status"] == "ok"
        _, n_train, n_fore = s.stream(X, y, records_per_message=50)
        q = {pid: s.wait_until_counted(pid, n_train, n_fore, timeout=180) for pid in runs}
    for pid in (0, 2):
        assert q[pid]["protocol"]["staleness"] == 0 and q[pid]["protocol"]["maxLead"] == 0
    # about 75 rounds per spoke: the 20 of the warm-up are over, nothing is held since
    for pid in (1, 3):
        assert "staleness" not in q[pid]["protocol"] and min(q[pid]["protocol"]["clocks"]) >= 20
    assert all(s["exchanges"] > 0 for s in q[3]["spokes"])  # Adaptive's, after the warm-up
    for pid in runs:
        assert q[pid]["prequentialAccuracy"] > 0.95, q[pid]["prequentialAccuracy"]
