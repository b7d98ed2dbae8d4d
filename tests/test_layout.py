"""A pipeline's record layout (learning.layout): declared at Create, or agreed by the
spokes through hub 0 so that a minority of bad records never fixes it; refusals carry a
reason code; an Update fixes a wrong layout. The Flink spoke and hub kernels wired in plain
Python (tests/test_spoke_kernel.py's Wire)."""

from __future__ import annotations

from collections import Counter

import orjson
import pytest

from learning.layout import Layout, RecordRejected, decide, inspect_record
from tests.test_spoke_kernel import Wire


def create(pid: int = 0, protocol: str = "Asynchronous", **params) -> dict:
    learner = {"name": "PA", "hyperParameters": {"C": 0.01}}
    if params:
        learner["parameters"] = params
    config = {"protocol": protocol, "miniBatchSize": 4, "miniBatches": 1}
    if protocol == "Asynchronous":  # the papers' TAP: a spoke alone in the stream never
        config["warmupRounds"] = 0  # waits for the others (a warm-up's would, in process)
    return {"id": pid, "request": "Create", "requestId": f"c{pid}", "learner": learner,
            "trainingConfiguration": config}


def good(i: int) -> dict:
    return {"id": i, "features": [float(i % 3), 1.0 - (i % 2)], "label": i % 2}


class DeadWire(Wire):
    """A Wire that answers Queries."""

    def query(self, pid: int = 0) -> dict:
        self.responses.clear()
        self.request({"id": pid, "request": "Query", "requestId": "q"})
        return next(r for r in self.responses if r.get("requestId") == "q")


@pytest.mark.parametrize("features,label,labelled,code", [
    ("abc", 1, True, "features_type"), ({"a": 1}, 1, True, "features_type"),
    (None, 1, True, "features_type"), ([1, "2"], 1, True, "feature_type"),
    ([1, None], 1, True, "feature_type"), ([1, {}], 1, True, "feature_type"),
    ([[1, 2]], 1, True, "feature_type"), ([1e308], 1, True, "feature_range"),
    ([-1e151], 1, True, "feature_range"), ([1.0], None, True, "label_missing"),
    ([1.0], {"a": 1}, True, "label_type"), ([1.0], [1], True, "label_type"),
    ([1.0], "x" * 1001, True, "label_too_long"), ([1.0], 1e300, True, "label_range"),
    ([1.0], -1e151, True, "label_range"), ([1.0], 10 ** 400, True, "label_range"),
])
def test_a_record_that_is_not_one_is_refused_with_its_reason(features, label, labelled, code):
    with pytest.raises(RecordRejected) as e:
        inspect_record(features, label, labelled)
    assert e.value.code == code


def test_signatures_and_checks():
    assert inspect_record([1, -0.0, 2.5], 3, True) == (3, "int")
    assert inspect_record([True, False, 2], "a", True) == (3, "string")  # bools are 1 and 0
    assert inspect_record([9e149] * 9, 1, True) == (9, "int")  # hypot above the bound, each below
    for bad in ([float("nan"), 1.0], [1.0, float("inf")], [10 ** 400]):  # not from JSON
        with pytest.raises(RecordRejected) as e:
            inspect_record(bad, 1, True)
        assert e.value.code == "feature_range"
    assert inspect_record([], None, False) == (0, None)
    assert inspect_record([1.0], {"ignored": "unlabelled"}, False) == (1, None)
    declared = Layout(18, "int", [0, 1], "declared")
    for sig, label, code in [((2, "int"), 1, "width"), ((18, "string"), "1", "label_type"),
                             ((18, "int"), 7, "unseen_class"), ((18, "bool"), True, "label_type")]:
        with pytest.raises(RecordRejected) as e:
            declared.check(*sig, label)
        assert e.value.code == code
    with pytest.raises(RecordRejected, match="expected 18 features, got 2"):
        declared.check(2, "int", 1)
    declared.check(18, "int", 1)
    declared.check(18, None, None)  # a forecasting record


def test_the_votes_need_a_quorum_and_a_strict_majority():
    assert decide(Counter({(2, "int"): 31}), 32, False, "classification", True) is None
    assert decide(Counter({(2, "int"): 32}), 32, False, "classification", True).n_features == 2
    # 20 identical bad records and 20 good ones: no majority, no decision
    assert decide(Counter({(5, "int"): 20, (2, "int"): 20}), 32, False, "classification", True) is None
    got = decide(Counter({(5, "int"): 20, (2, "int"): 22, (2, None): 10}), 32, False,
                 "classification", True)
    assert (got.n_features, got.label_type, got.source) == (2, "int", "inferred")
    # a Query forces a decision, but a width seen once never wins
    assert decide(Counter({(7, "int"): 1}), 32, True, "classification", True) is None
    assert decide(Counter({(7, "int"): 2, (3, "int"): 1}), 32, True, "classification", True).n_features == 7
    # label kinds: a strict majority of the labelled records of the winning width
    assert decide(Counter({(2, "int"): 20, (2, "string"): 20}), 32, False, "classification", True) is None
    assert decide(Counter({(2, "int"): 20, (2, "bool"): 20}), 32, False, "regression", True).label_type == "number"


def test_identical_bad_records_first_do_not_fix_the_layout():
    """Ten identical 5-feature records reach spoke 0 before any good one: under the old
    rule (the first record fixes the width) they poisoned the pipeline. Now the spokes hold
    their records and vote; hub 0 fixes width 2 once it has a quorum with a strict
    majority, and the held bad records are dead-lettered with what was expected."""
    w = DeadWire()
    w.request(create())
    bad = {"features": [1.0, 2.0, 3.0, 4.0, 5.0], "label": 1}
    for i in range(10):
        w.data(0, "T", bad | {"id": -i})
    for i in range(80):
        w.data(i % 2, "T", good(i))
    node = w.spokes[0].nodes[0]
    assert node.layout.to_json() == {"nFeatures": 2, "labelType": "int", "classes": None,
                                     "source": "inferred"}
    q = w.query()
    assert q["fitted"] == 80 and q["rejected"] == 10
    assert q["rejectedBy"] == {"width": 10}
    assert q["layout"]["source"] == "inferred" and q["layout"]["nFeatures"] == 2
    assert q["layout"]["held"] == 0 and q["layout"]["votes"] >= 32
    assert len(w.dead) == 10 and {d["reason"] for d in w.dead} == {"expected 2 features, got 5"}
    assert {(d["code"], d["pipeline"]) for d in w.dead} == {("width", 0)}


def test_held_records_keep_their_order_and_forecasts_are_answered():
    w = DeadWire()
    w.request(create())
    w.data(0, "P", {"id": "early", "features": [1.0, 0.0]})
    for i in range(64):
        w.data(i % 2, "T", good(i))
    assert [p["id"] for p in w.predictions] == ["early"]
    assert w.spokes[0].nodes[0].fitted + w.spokes[1].nodes[0].fitted == 64


def test_a_query_decides_a_short_stream():
    w = DeadWire()
    w.request(create())
    for i in range(3):
        w.data(0, "T", good(i))
    assert w.spokes[0].nodes[0].layout.pending
    q = w.query()
    assert q["fitted"] == 3 and q["layout"]["source"] == "inferred"
    assert not w.spokes[1].nodes[0].layout.pending  # hub 0 told every spoke


def test_a_query_of_a_stream_without_agreement_reports_the_held_records():
    w = DeadWire()
    w.request(create())
    w.data(0, "T", {"features": [1.0], "label": 0})
    w.data(0, "T", {"features": [1.0, 2.0, 3.0], "label": 0})
    q = w.query()
    assert q["fitted"] == 0 and q["layout"]["source"] == "pending" and q["layout"]["held"] == 2


def test_a_declared_layout_refuses_at_once_with_reasons():
    w = DeadWire()
    w.request(create(n_features=2, classes=[0, 1]))
    w.data(0, "T", {"features": [1.0, 2.0, 3.0], "label": 1})
    w.data(0, "T", {"features": [1.0, 2.0], "label": 7})
    w.data(0, "T", {"features": [1.0, 2.0], "label": "1"})
    w.data(0, "T", {"features": [1.0, "x"], "label": 1})
    w.data(0, "T", {"nofeatures": 1})
    w.spokes[0].on_data("T{not json")
    w.pump()
    for i in range(8):
        w.data(i % 2, "T", good(i))
    q = w.query()
    assert q["fitted"] == 8 and q["layout"]["source"] == "declared"
    assert q["rejectedBy"] == {"width": 1, "unseen_class": 1, "label_type": 1,
                               "feature_type": 1, "not_a_record": 1, "not_json": 1}
    assert q["rejected"] == 6 and q["service"]["badRecords"] == 2
    assert len(w.dead) == 6
    assert {d["code"] for d in w.dead} == set(q["rejectedBy"])


def test_an_update_fixes_a_wrong_layout_without_losing_the_pipeline():
    """Declared with the wrong width, the pipeline refuses every record; an Update with the
    right ``n_features`` resets the model for the new width and the records that follow
    are fitted; the pipeline (its id, counters, protocol) goes on."""
    w = DeadWire()
    w.request(create(n_features=3))
    for i in range(8):
        w.data(i % 2, "T", good(i))
    assert w.query()["rejectedBy"] == {"width": 8}
    w.responses.clear()
    w.request({"id": 0, "request": "Update", "requestId": "u",
               "learner": {"parameters": {"n_features": 2}}})
    assert [r["status"] for r in w.responses if r.get("requestId") == "u"] == ["ok"]
    for i in range(40):
        w.data(i % 2, "T", good(i))
    q = w.query()
    assert q["fitted"] == 40 and q["rejected"] == 8
    assert q["layout"] == {"nFeatures": 2, "labelType": None, "classes": None,
                           "source": "declared", "votes": 0, "held": 0}
    assert q["model"]["layout"]["n_features"] == 2
    assert q["prequentialAccuracy"] > 0.5
    # an Update of learned parameters other than the layout is still refused
    w.responses.clear()
    w.request({"id": 0, "request": "Update", "requestId": "u2",
               "learner": {"parameters": {"W": [[1.0]]}}})
    assert next(r for r in w.responses if r.get("requestId") == "u2")["status"] == "error"


def test_an_update_with_classes_refuses_other_labels_from_then_on():
    w = DeadWire()
    w.request(create(n_features=2))
    w.request({"id": 0, "request": "Update", "requestId": "u",
               "learner": {"parameters": {"classes": [0, 1]}}})
    w.data(0, "T", {"features": [1.0, 2.0], "label": 5})
    assert [d["code"] for d in w.dead] == ["unseen_class"]


def test_a_huge_bad_record_is_dead_lettered_truncated():
    w = DeadWire()
    w.request(create(n_features=2))
    w.data(0, "T", {"features": [1.0] * 100_000, "label": 1})
    (d,) = w.dead
    assert d["reason"] == "expected 2 features, got 100000"
    assert d["record"]["truncated"] is True and d["record"]["bytes"] > 100_000
    assert len(orjson.dumps(d)) < 4096


def test_an_update_fixes_a_layout_that_a_majority_of_bad_records_decided():
    """When bad records are the majority of the first ones (here 40 identical 5-feature
    records), the agreed layout is wrong; an Update with the right width repairs it."""
    w = DeadWire()
    w.request(create())
    for i in range(40):
        w.data(i % 2, "T", {"id": -i, "features": [1.0] * 5, "label": 1})
    assert w.spokes[0].nodes[0].layout.n_features == 5
    w.request({"id": 0, "request": "Update", "requestId": "u",
               "learner": {"parameters": {"n_features": 2}}})
    for i in range(40):
        w.data(i % 2, "T", good(i))
    q = w.query()
    assert q["fitted"] == 40 + 40 and q["layout"]["source"] == "declared"
    assert q["model"]["layout"]["n_features"] == 2


def test_records_held_without_agreement_are_bounded(monkeypatch):
    """Two widths in equal numbers never agree; a spoke holds at most 64 × layoutQuorum
    records and dead-letters the oldest beyond (``not_agreed``)."""
    from learning.protocols import base
    monkeypatch.setattr(base, "HELD_PER_QUORUM", 2)
    w = DeadWire()
    w.request(create())
    for i in range(100):
        w.data(0, "T", {"id": i, "features": [1.0] * (2 + i % 2), "label": 1})
    node = w.spokes[0].nodes[0]
    held = len(node._held)  # 64, or 65 when one width has 33 of them (a strict majority)
    assert node.layout.pending and held in (64, 65)
    assert len(w.dead) == 100 - held and {d["code"] for d in w.dead} == {"not_agreed"}
    assert [d["record"]["id"] for d in w.dead] == list(range(100 - held))  # the oldest


def test_forecasting_records_held_first_are_no_ambiguity(monkeypatch):
    """A spoke whose first records are half forecasting ones (no label) holds them all
    while hub 0's answer travels: an unlabelled record agrees with any label type of its
    width (seen on Flink at full rate: 85 forecasting records dead-lettered at a start)."""
    from learning.protocols import base
    monkeypatch.setattr(base, "HELD_PER_QUORUM", 2)
    w = DeadWire()
    w.request(create())
    spoke = w.spokes[0]
    for i in range(300):  # not pumped: half forecasting, half training, one width
        rec = good(i) if i % 2 else {"id": i, "features": good(i)["features"]}
        spoke.on_data(("T" if i % 2 else "P") + orjson.dumps(rec).decode())
    assert not [v for s, v in spoke.out if s == "deadLetters"]
    assert len(spoke.nodes[0]._held) == 300
    w.pump()
    q = w.query()
    assert q["fitted"] == 150 and q["predicted"] == 150 and q["rejected"] == 0


def test_records_of_a_clear_majority_wait_for_hub_0_however_many():
    """At full rate a spoke holds thousands of records while hub 0's decision travels
    through Kafka (seconds at a job's start): with a clear majority of its own none is
    dead-lettered, and its votes become rarer (each twice the last)."""
    w = DeadWire()
    w.request(create())
    spoke = w.spokes[0]
    for i in range(3000):  # not pumped: the votes never reach hub 0
        spoke.on_data("T" + orjson.dumps(good(i) if i % 10 else {"features": [1.0], "label": 1}).decode())
    node = spoke.nodes[0]
    assert node.layout.pending and len(node._held) == 3000
    assert not [v for s, v in spoke.out if s == "deadLetters"]
    assert sum(s == "hubs" for s, _ in spoke.out) <= 10
    w.pump()
    q = w.query()
    assert q["fitted"] == 2700 and q["rejectedBy"] == {"width": 300}


def test_a_classifier_learns_at_most_max_classes_from_a_spokes_stream():
    """Continuous labels sent to a classifier (a regression target in the label column)
    make a class of every record: past ``maxClasses`` a label of a new class is refused
    (``too_many_classes``, counted, dead-lettered), the known classes go on learning, and
    the model stops growing. Records of one Kafka message (an array) are checked alike;
    declared classes are not counted."""
    w = DeadWire()
    request = create()
    request["trainingConfiguration"]["maxClasses"] = 3
    w.request(request)
    for i in range(40):  # the layout is agreed on two classes first
        w.data(i % 2, "T", good(i))
    for i in range(10):  # then 10 labels of new classes on spoke 0
        w.data(0, "T", {"id": 100 + i, "features": [1.0, 0.5], "label": 10 + i})
    w.spokes[1].on_data("T" + orjson.dumps([
        {"id": 200 + i, "features": [1.0, 0.5], "label": 30 + i} for i in range(20)]).decode())
    w.pump()
    q = w.query()
    # each spoke's stream brought one class (good(i) goes to spoke i % 2 with label i % 2),
    # so each takes two new ones
    assert q["rejectedBy"] == {"too_many_classes": 8 + 18}
    assert {d["code"] for d in w.dead} == {"too_many_classes"} and len(w.dead) == 26
    assert "maxClasses" in w.dead[0]["reason"]
    assert len(q["model"]["layout"]["classes"]) == 6 and q["fitted"] == 40 + 4
    # declared classes are the layout's business, not the cap's
    w = DeadWire()
    request = create(n_features=2, classes=list(range(10)))
    request["trainingConfiguration"]["maxClasses"] = 3
    w.request(request)
    for i in range(10):
        w.data(0, "T", {"id": i, "features": [1.0, 0.5], "label": i})
    assert w.query()["fitted"] == 10


def test_records_that_would_grow_a_model_past_max_model_params_are_refused():
    """A Create's declared layout is sized when it is parsed; a layout agreed from the
    stream, or classes learned from it, were not: one wide record made a model of any
    size (a Ridge of 10,000 features: 50 million numbers on every node). Now a record
    whose width, or a label whose new class, would take the model past the service's
    ``max_model_params`` is refused (``model_too_large``, counted, dead-lettered with
    the size and the limit), and the records that fit go on: a minority of wide records
    never fixes the layout, and known classes keep learning."""
    w = DeadWire(limits={"max_model_params": 1000})
    w.request(create())
    for i in range(30):  # 1,500 features: a PA model of 1,501 parameters per class
        w.data(i % 2, "T", {"id": i, "features": [0.5] * 1500, "label": 0})
    for i in range(40):
        w.data(i % 2, "T", good(100 + i))
    w.pump()
    q = w.query()
    assert q["layout"]["nFeatures"] == 2 and q["fitted"] == 40
    assert q["rejectedBy"] == {"model_too_large": 30}
    assert "1,501 parameters" in w.dead[0]["reason"] and "1,000" in w.dead[0]["reason"]
    # classes: 3 features × 250 classes fit in 1,000 parameters, the 251st does not
    w = DeadWire(limits={"max_model_params": 1000})
    w.request(create(n_features=3))
    for i in range(300):
        w.data(0, "T", {"id": i, "features": [1.0, 0.5, float(i)], "label": i})
    for i in range(20):  # known classes go on
        w.data(0, "T", {"id": 1000 + i, "features": [1.0, 0.5, 2.0], "label": i})
    w.pump()
    q = w.query()
    assert len(q["model"]["layout"]["classes"]) == 250
    assert q["rejectedBy"] == {"model_too_large": 50} and q["fitted"] == 270
    assert "251 in all" in w.dead[-1]["reason"]


def test_declared_classes_of_several_types_refuse_every_other_label():
    """Labels are typed (JSON ``1``, ``1.0`` and ``true`` are three classes). With declared
    classes of several types the layout has no one label type, and the classes alone
    decide: before, no label was checked then, a spoke learned label ``1`` of a pipeline
    declared with ``[0, true]``, and the hub refused every push of its model (BSP: every
    round failed)."""
    w = DeadWire()
    w.request(create(protocol="Synchronous", n_features=2, classes=[0, True]))
    labels = [0, True, 1]  # 1 is not true: it is refused
    for i in range(60):
        w.data(i % 2, "T", {**good(i), "label": labels[i % 3]})
    q, before = w.query(), None
    while q["fitted"] != before:  # each Query closes a round a spoke left open
        before, q = q["fitted"], w.query()
    assert q["fitted"] == 40 and q["rejectedBy"] == {"unseen_class": 20}
    assert {d["record"]["label"] for d in w.dead} == {1}
    assert sum(s.get("syncFailures", 0) for s in q["spokes"]) == 0
    assert q["protocol"]["rounds"] >= 4


def test_an_update_with_repeated_classes_is_refused_as_a_create_is():
    w = DeadWire()
    w.request(create(n_features=2, classes=[0, 1]))
    for i in range(20):
        w.data(i % 2, "T", good(i))
    w.request({"id": 0, "request": "Update", "requestId": "u",
               "learner": {"parameters": {"classes": [1, 1]}}})
    answer = next(r for r in w.responses if r.get("requestId") == "u")
    assert answer["status"] == "error"
    assert answer["error"]["code"] == "invalid_parameter"
    assert answer["error"]["field"] == "learner.parameters.classes"
    assert "distinct" in answer["error"]["message"]
    q = w.query()
    assert q["layout"]["classes"] == [0, 1] and q["fitted"] == 20


def test_an_update_of_the_layout_quorum_takes_effect_while_the_layout_is_pending():
    """``layoutQuorum`` was read at Create only: an Update lowering it was answered ok and
    the spokes went on holding their records for the old quorum. Now the spokes vote at
    the new quorum's share and hub 0 decides by it."""
    w = DeadWire()
    request = create()
    request["trainingConfiguration"]["layoutQuorum"] = 1000
    w.request(request)
    for i in range(20):
        w.data(i % 2, "T", good(i))
    w.pump()
    assert sum(len(s.nodes[0]._held) for s in w.spokes) == 20
    w.request({"id": 0, "request": "Update", "requestId": "u",
               "trainingConfiguration": {"layoutQuorum": 8}})
    for i in range(20, 40):
        w.data(i % 2, "T", good(i))
    w.pump()
    assert sum(len(s.nodes[0]._held) for s in w.spokes) == 0
    q = w.query()
    assert q["layout"]["source"] == "inferred" and q["fitted"] == 40


def test_a_regression_target_beyond_the_bound_is_refused_and_the_stream_goes_on():
    """A target of 1e300 (a JSON number) made a regressor's squared error overflow in its
    quality metrics, an exception out of the spoke kernel that stopped the stream (and,
    replayed after a restore, would stop it again): it is refused as ``label_range``,
    alone and inside a group of records taken at once, and the good records go on."""
    import numpy as np

    from operators.local import LocalNetwork

    net = LocalNetwork(n_spokes=2, n_hubs=1)
    net.request({"id": 0, "request": "Create", "learner": {"name": "PARegressor"},
                 "preProcessors": [{"name": "StandardScaler"}],
                 "trainingConfiguration": {"protocol": "Asynchronous", "miniBatchSize": 1,
                                           "warmupRounds": 0}})  # spoke 1 runs ahead
    rng = np.random.default_rng(0)
    good = [{"id": i, "features": rng.normal(size=3).tolist(), "label": float(rng.normal())}
            for i in range(80)]
    bad = {"id": -1, "features": [1.0, 2.0, 3.0], "label": 1e300}
    net.stream([(True, r) for r in good[:40]])
    net.records(0, [(True, bad)])  # alone
    net.records(1, [(True, r) for r in good[40:60]] + [(True, bad)]  # in a group
                + [(True, r) for r in good[60:]])
    net.run()
    q = net.query()
    assert q["fitted"] == len(good) and q["rejectedBy"] == {"label_range": 2}, q["rejectedBy"]
    assert np.isfinite(q["metrics"]["cumulative"]["rmse"])
    assert {d["code"] for d in net.outputs["deadLetters"]} == {"label_range"}
