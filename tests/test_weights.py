"""The weights topic (issue 19, part 1) on the in-process kernel: hubs publish every
pipeline's global model (raw arrays, fragmented when large, never pickle), a follower
rebuilds it and predicts exactly as the global model, versions only grow, a rate limit
holds back and later publishes, deleting publishes a tombstone."""

from __future__ import annotations

import numpy as np
import pytest

from flink_jobs.follower import predict_records
from learning.registry import make_pipeline
from middleware import codec
from operators.local import LocalNetwork
from operators.weights import ModelAssembler, Publisher, weights_records
from tests.test_export import LEARNERS, _create, _export, _records


def _follow(net: LocalNetwork) -> ModelAssembler:
    got = ModelAssembler()
    for record in net.outputs["weights"]:
        got.add(record)
    return got


def _net(m: int = 1, every_ms: int | None = 0, **limits) -> LocalNetwork:
    return LocalNetwork(n_spokes=3, n_hubs=m, limits={"weights_every_ms": every_ms, **limits})


@pytest.mark.parametrize("name", sorted(LEARNERS))
def test_a_follower_predicts_as_the_global_model(name):
    spec, task, width = LEARNERS[name]
    net = _net()
    net.request(_create(0, spec, task, width))
    net.stream(_records(240, width, task, seed=1))
    body = _export(net, 0)["export"]  # a Query closes the open BSP round
    model = _follow(net).model(0)
    assert model is not None and model.consistent
    assert model.version == body["version"]
    reference = make_pipeline(body["preProcessors"], body["learner"])
    X = np.asarray([r["features"] for _, r in _records(40, width, task, seed=2, train=False)])
    np.testing.assert_array_equal(model.model.learner.get_params(), reference.learner.get_params())
    np.testing.assert_allclose(np.asarray(model.predict(X.tolist()), dtype=float),
                               np.asarray(reference.predict(X), dtype=float), rtol=1e-9, atol=1e-12)


def test_versions_grow_and_every_one_is_published_without_a_rate_limit():
    spec, task, width = LEARNERS["PA"]
    net = _net()
    net.request(_create(0, spec, task, width))
    net.stream(_records(240, width, task, seed=1))
    versions = [codec.decode(r).seq for r in net.outputs["weights"]]
    hub = net.hub_kernels[0].nodes[0]
    assert versions == list(range(1, hub.updates + 1))


def test_two_hubs_publish_their_shards_and_the_follower_assembles_them():
    spec, task, width = LEARNERS["PA"]
    net = _net(m=2)
    net.request(_create(0, spec, task, width, m=2))
    net.stream(_records(240, width, task, seed=1))
    _export(net, 0)
    model = _follow(net).model(0)
    whole = np.concatenate([k.nodes[0].shard() for k in net.hub_kernels])
    np.testing.assert_array_equal(model.model.learner.get_params(), whole)
    assert model.shard_versions == [k.nodes[0].updates for k in net.hub_kernels]
    assert model.consistent


def test_the_rate_limit_holds_back_and_the_idle_transport_publishes_the_last_model():
    spec, task, width = LEARNERS["PA"]
    net = _net(every_ms=60_000)  # the in-process clock stands still: only the first passes
    net.request(_create(0, spec, task, width, protocol="Asynchronous"))
    for seed in range(12):
        net.records(seed % 3, _records(20, width, task, seed=seed))
        net.records((seed + 1) % 3, _records(20, width, task, seed=seed + 100))
    net.run()
    hub = net.hub_kernels[0].nodes[0]
    versions = [codec.decode(r).seq for r in net.outputs["weights"]]
    # the first change, then what was held back, once the transport went idle
    assert hub.updates > 4 and versions == [1, hub.updates]


def test_publisher_rate_limit_and_due_time():
    class Node:
        updates = 0

        def weights(self):
            return {"pipeline": 0, "hub": 0, "version": self.updates, "hubs": 1}

    out: list = []
    pub, node = Publisher(1000, 1 << 20), Node()
    pub.changed(0, node, 10.0, out.append)
    assert out == [] and pub.due_in(10.0) is None  # version 0: nothing learned yet
    node.updates = 1
    pub.changed(0, node, 10.0, out.append)
    node.updates = 2
    pub.changed(0, node, 10.5, out.append)
    assert len(out) == 1 and pub.due_in(10.5) == pytest.approx(0.5)
    pub.flush({0: node}, 10.7, out.append)
    assert len(out) == 1  # not yet due
    pub.flush({0: node}, 11.0, out.append)
    assert [codec.decode(r).seq for r in out] == [1, 2] and pub.due_in(11.0) is None


def test_a_large_model_travels_in_fragments_and_is_reassembled():
    spec = {"name": "MLP", "hyperParameters": {"hidden_layers": [256], "seed": 1}}
    net = _net(max_message_bytes=16 * 1024)
    net.request(_create(0, spec, "classification", 64))
    net.stream(_records(120, 64, "classification", seed=1))
    sizes = [len(r) for r in net.outputs["weights"]]
    assert max(sizes) <= 16 * 1024 and len(sizes) > net.hub_kernels[0].nodes[0].updates
    model = _follow(net).model(0)
    np.testing.assert_array_equal(model.model.learner.get_params(),
                                  net.hub_kernels[0].nodes[0].learner.get_params())


def test_fragments_out_of_order_are_dropped_not_misassembled():
    payload = {"pipeline": 3, "hub": 0, "version": 7, "hubs": 1, "shard": np.arange(5000.0)}
    parts = weights_records(payload, 4096)
    assert len(parts) > 2
    got = ModelAssembler()
    for r in [parts[0], parts[2], *parts[1:]]:
        got.add(r)
    assert got.bad == 1 and got.model(3) is None  # dropped once, nothing half-built
    for r in parts:  # in order it reassembles (and is refused: not a real model's payload)
        got.add(r)
    assert got.bad == 2


def test_deleting_a_pipeline_publishes_a_tombstone():
    spec, task, width = LEARNERS["PA"]
    net = _net()
    net.request(_create(0, spec, task, width))
    net.stream(_records(240, width, task, seed=1))
    assert _follow(net).model(0) is not None
    net.request({"id": 0, "request": "Delete", "requestId": "d"})
    follower = _follow(net)
    assert follower.model(0) is None and 0 in follower.deleted


def test_garbage_on_the_topic_is_counted_and_skipped():
    got = ModelAssembler()
    assert got.add(b"not a weights record") is None
    assert got.add(b"\xff\x01") is None
    assert got.bad == 2


def test_publishing_is_off_without_the_setting():
    spec, task, width = LEARNERS["PA"]
    net = LocalNetwork(n_spokes=2, n_hubs=1)
    net.request(_create(0, spec, task, width))
    net.stream(_records(64, width, task, seed=1))
    assert net.outputs["weights"] == []


def test_predict_records_refuses_bad_records_and_keeps_the_good_ones():
    spec, task, width = LEARNERS["MLP"]
    net = _net()
    net.request(_create(0, spec, task, width))
    net.stream(_records(240, width, task, seed=1))
    model = _follow(net).model(0)
    good = [0.1] * width
    out = predict_records(model, [{"id": 1, "features": good}, {"id": 2, "features": [1.0]},
                                  {"id": 3, "features": ["x"] * width}, {"id": 4},
                                  good], scores=True)
    assert [o.get("id") for o in out] == [1, 2, 3, 4, None]
    assert "prediction" in out[0] and "prediction" in out[4]
    assert out[0]["modelVersion"] == model.version and len(out[0]["probabilities"]) == 3
    assert all("error" in o for o in out[1:4])
    assert out[0]["prediction"] == out[4]["prediction"]


def test_the_jobs_model_version_is_the_weights_version_and_a_warm_start_counts_on():
    spec, task, width = LEARNERS["PA"]
    net = _net()
    net.request(_create(0, spec, task, width))
    net.stream(_records(240, width, task, seed=1))
    body = _export(net, 0)["export"]  # closes the round: every spoke holds that model
    net.stream(_records(6, width, task, seed=2, train=False))
    versions = {p["modelVersion"] for p in net.outputs["predictions"] if p["pipeline"] == 0}
    assert versions == {body["version"]} == {_follow(net).model(0).version}
    net.request({**body, "id": 1})  # a warm start from the export
    net.stream(_records(6, width, task, seed=3, train=False))
    warm = {p["modelVersion"] for p in net.outputs["predictions"] if p["pipeline"] == 1}
    assert warm == {body["version"]}
