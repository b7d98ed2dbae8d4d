"""A pipeline that synchronizes slower than its stream comes holds at most
``max_backlog_bytes`` of records per spoke; past it, its records are dead-lettered with
code ``backlog_full`` and counted, and the other pipeline is untouched. On a real broker
and a real Flink MiniCluster."""

from __future__ import annotations

import time

import pytest

from flink_jobs.config import JobConfig
from flink_jobs.config_file import load_config_file
from flink_jobs.demo import shuttle_create_request
from flink_jobs.session import Session, local_config
from learning.datasets import shuttle
from operators.service import DEFAULT_MAX_BACKLOG_BYTES, limits_of
from operators.spoke_kernel import HELD_COST

LIMIT = 40 * (75 + HELD_COST)  # about 40 Shuttle records per spoke


def test_a_bsp_pipeline_behind_its_stream_sheds_past_its_bound_and_loses_nothing(broker):
    X, y = shuttle()
    X, y = X[:4000], y[:4000]
    cfg = local_config(broker.bootstrap_servers, topic_prefix="backlog-", spokes=2, hubs=1,
                       max_backlog_bytes=LIMIT)
    with Session(cfg, "backlog") as s:
        bsp = shuttle_create_request(1, mini_batch_size=16, mini_batches=1)
        bsp["trainingConfiguration"]["protocol"] = "Synchronous"
        tap = shuttle_create_request(0)
        tap["trainingConfiguration"]["warmupRounds"] = 0  # the papers' TAP: it never waits
        for req in (tap, bsp):
            assert s.request(req, timeout=120)["status"] == "ok"
        _, n_train, n_fore = s.stream(X, y)  # written at once: far faster than BSP's rounds
        alone = s.wait_until_counted(0, n_train, n_fore, timeout=180)
        assert alone["rejected"] == 0  # the Asynchronous pipeline is untouched
        deadline = time.monotonic() + 180
        while True:  # Queries close the rounds that the stream's end leaves open
            q = s.query(1)
            if q["fitted"] + q["predicted"] + q["rejected"] == n_train + n_fore:
                break
            assert time.monotonic() < deadline, (q["fitted"], q["predicted"], q["rejected"])
            time.sleep(0.5)
        shed = q["rejectedBy"].get("backlog_full", 0)
        assert q["rejectedBy"] == {"backlog_full": shed} and shed > 0, q["rejectedBy"]
        assert q["fitted"] > 0 and q["fitted"] + q["predicted"] + shed == n_train + n_fore
        assert all(sp["heldBytes"] <= LIMIT for sp in q["spokes"])
        deadline = time.monotonic() + 60
        while True:  # the Query counts a dead letter before the sink has written it
            dead = [d for d in s.reread(cfg.topics.dead_letters) if d["pipeline"] == 1]
            if len(dead) >= shed or time.monotonic() > deadline:
                break
            time.sleep(1.0)
        assert len(dead) == shed and {d["code"] for d in dead} == {"backlog_full"}
        assert all("max_backlog_bytes" in d["reason"] and "features" in d["record"]
                   for d in dead)
        if s.prediction_count(1) < q["predicted"]:
            s.rescan_predictions()
        assert s.prediction_count(1) == q["predicted"]
        # every forecasting record was either answered or shed, none both
        answered = set(s.predictions_of(1))
        shed_ids = {d["record"]["id"] for d in dead if "label" not in d["record"]}
        assert not answered & shed_ids and len(answered | shed_ids) == n_fore


def test_the_job_and_the_kernels_share_the_default_bound_and_a_config_file_sets_it(tmp_path):
    """``JobConfig.max_backlog_bytes`` reaches the kernels' limits; its default is the
    kernels' own; a ``--config`` file sets it like any limit; a bound below 1 is refused."""
    assert JobConfig("x:1").limits()["max_backlog_bytes"] == DEFAULT_MAX_BACKLOG_BYTES
    assert limits_of(None)["max_backlog_bytes"] == DEFAULT_MAX_BACKLOG_BYTES
    conf = tmp_path / "omldm.yaml"
    conf.write_text("max_backlog_bytes: 1048576\n")
    assert load_config_file(conf)["max_backlog_bytes"] == 1 << 20
    with pytest.raises(ValueError, match="max_backlog_bytes"):
        JobConfig("x:1", max_backlog_bytes=0)
