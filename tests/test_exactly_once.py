"""Exactly-once outputs (``JobConfig.exactly_once_outputs``): which sinks are transactional,
the job refusing the option without checkpoints, and, on a real broker and a real Flink
MiniCluster, every output arriving once for a ``read_committed`` reader and only after the
checkpoint that follows it.

The jobs here run on the embedded ``noida`` broker (deploy/broker.py), whose
``read_committed`` readers skip aborted transactions. The default one, tansu, shows them
the records of aborted transactions, and in about one run in three withheld committed
records from them for minutes (docs/operations.md, "Exactly-once outputs"). No restore
here: the kill test of the guarantee is ``tests/test_faults.py``.
"""

from __future__ import annotations

import collections
import json
import time

import numpy as np
import pytest

from deploy.broker import LocalBroker, embedded_engine
from flink_jobs.cli import _isolation, _parser, main
from flink_jobs.demo import shuttle_create_request
from flink_jobs.job import TRANSACTION_TIMEOUT_MS, build_job, create_environment
from flink_jobs.kafka_io import TopicReader
from flink_jobs.session import Session, local_config
from learning.datasets import shuttle

INTERVAL_MS = 2000  # checkpoint interval of the jobs below


def _sinks(cfg, job_name: str) -> dict[str, dict]:
    """The Kafka sinks ``build_job`` adds, by operator name: guarantee, transactional id
    prefix and producer properties, read off the Java objects (nothing runs)."""
    env = create_environment(cfg)
    build_job(env, cfg, job_name)
    out = {}
    for t in env._j_stream_execution_environment.getTransformations():
        if t.getClass().getSimpleName() != "SinkTransformation":
            continue
        sink, fields = t.getSink(), {}
        for f in sink.getClass().getDeclaredFields():
            f.setAccessible(True)
            fields[f.getName()] = f.get(sink)
        out[t.getName()] = {"guarantee": fields["deliveryGuarantee"].toString(),
                            "prefix": fields["transactionalIdPrefix"],
                            "props": {k: str(v) for k, v in
                                      dict(fields["kafkaProducerConfig"]).items()}}
    return out


def test_sinks_are_transactional_only_for_the_outputs_and_only_with_the_option():
    on = _sinks(local_config("localhost:1", topic_prefix="u-", checkpoint_interval_ms=INTERVAL_MS,
                             exactly_once_outputs=True), "unit")
    assert {n: s["guarantee"] for n, s in on.items()} == {
        "predictions": "exactly-once", "responses": "exactly-once", "deadLetters": "exactly-once",
        "psMessages-out": "at-least-once", "psMessages-spokes": "at-least-once",
        "weights": "at-least-once"}
    # the feedback loop and the weights topic stay at-least-once (a repeated weights record
    # is a version a follower has)
    internal = ("psMessages-out", "psMessages-spokes", "weights")
    assert {n: s["prefix"] for n, s in on.items() if n not in internal} == {
        "predictions": "unit-u-predictions", "responses": "unit-u-responses",
        "deadLetters": "unit-u-deadLetters"}  # job name + topic: unique, the same after a restore
    assert TRANSACTION_TIMEOUT_MS <= 900_000  # Kafka's default transaction.max.timeout.ms
    assert all(int(s["props"]["transaction.timeout.ms"]) == TRANSACTION_TIMEOUT_MS
               for n, s in on.items() if n not in internal)
    off = _sinks(local_config("localhost:1", topic_prefix="u-", checkpoint_interval_ms=INTERVAL_MS),
                 "unit")
    assert {s["guarantee"] for s in off.values()} == {"at-least-once"} and len(off) == 6
    assert all(s["prefix"] is None for s in off.values())


def test_the_option_needs_checkpointing():
    cfg = local_config("localhost:1", exactly_once_outputs=True)  # checkpoint_interval_ms=0
    with pytest.raises(ValueError, match="exactly_once_outputs needs checkpointing.*got 0"):
        build_job(create_environment(cfg), cfg)
    with pytest.raises(ValueError, match="isolation_level must be one of"):
        TopicReader("localhost:1", "x", isolation_level="committed")


def _create(pipeline: int = 0) -> dict:
    req = shuttle_create_request(pipeline)  # the layout declared: records count at once
    req["learner"] = {**req["learner"], "parameters": {"n_features": 9, "classes": [0, 1]}}
    return req


def _latencies_ms(s: Session, X: np.ndarray, first_id: int, n: int = 200,
                  pace_s: float = 0.05, timeout: float = 90.0) -> np.ndarray:
    """Write ``n`` forecasting records one every ``pace_s`` seconds; for each, the delay
    from its write (acknowledged) to its prediction read on ``s.predictions``."""
    sent: dict[int, float] = {}
    seen: dict[int, float] = {}
    next_send = time.monotonic()
    deadline = next_send + timeout
    while len(seen) < n:
        if len(sent) < n and time.monotonic() >= next_send:
            rid = first_id + len(sent)
            s.producer.send(s.cfg.topics.forecasting,
                            {"id": rid, "features": X[len(sent)].tolist()})
            s.producer.flush()
            sent[rid] = time.monotonic()
            next_send += pace_s
        wait_ms = int((next_send - time.monotonic()) * 1000) if len(sent) < n else 100
        for p in s.predictions.poll(max(1, min(wait_ms, 100))):
            if p["id"] in sent and p["id"] not in seen:
                seen[p["id"]] = time.monotonic()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(seen)} of {n} predictions within {timeout} s")
    return np.array([(seen[i] - sent[i]) * 1000 for i in sent])


def _read_all(cfg, topic: str, done, timeout: float = 60.0) -> list:
    """What a fresh ``read_committed`` reader finds on ``topic``: read until ``done(values)``
    holds, then until a read stays empty for 1 s.

    Raises
    ------
    TimeoutError
        When ``done`` does not hold within ``timeout`` seconds.
    """
    reader = TopicReader(cfg.bootstrap_servers, topic, isolation_level="read_committed")
    out: list = []
    deadline = time.monotonic() + timeout
    try:
        while not done(out):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: {len(out)} records after {timeout} s")
            out.extend(reader.poll(200))
        out.extend(reader.drain(idle_ms=1000))
    finally:
        reader.close()
    return out


def _run(broker, exactly_once: bool, X: np.ndarray, y: np.ndarray, capsys) -> np.ndarray:
    prefix = f"eo-{'on' if exactly_once else 'off'}-"
    cfg = local_config(broker.bootstrap_servers, topic_prefix=prefix, spokes=2, hubs=1,
                       checkpoint_interval_ms=INTERVAL_MS, exactly_once_outputs=exactly_once)
    with Session(cfg, prefix + "job") as s:
        assert s.predictions.isolation_level == ("read_committed" if exactly_once
                                                 else "read_uncommitted")
        assert s.request(_create(), timeout=120)["status"] == "ok"
        held, n_train, n_fore = s.stream(X[:1000], y[:1000])  # warm up, and counted below
        s.producer.send(cfg.topics.training, b"{not json")
        s.producer.flush()
        s.wait_until_counted(0, n_train, n_fore, timeout=120)
        lat = _latencies_ms(s, X[1000:], first_id=100_000)
        final = s.query(0)
        assert final["status"] == "ok" and final["predicted"] == n_fore + len(lat)
        assert final["rejected"] == 1
        if exactly_once:  # each once, for a reader that starts after the writes
            expected = set(held) | set(range(100_000, 100_000 + len(lat)))
            preds = collections.Counter(
                p["id"] for p in _read_all(cfg, cfg.topics.predictions,
                                           lambda v: len(v) >= len(expected))
                if p["pipeline"] == 0)
            assert set(preds) == expected
            assert set(preds.values()) == {1}, [i for i, c in preds.items() if c > 1][:10]
            answers = collections.Counter(r.get("requestId") for r in _read_all(
                cfg, cfg.topics.responses,
                lambda v: any(r.get("requestId") == final["requestId"] for r in v)))
            # the Create, the Queries of wait_until_counted (at least one: when the job has
            # counted everything by the first, only one) and the final Query
            assert answers["create-0"] == 1 and answers[final["requestId"]] == 1
            assert len(answers) >= 3, answers
            assert set(answers.values()) == {1}, answers.most_common(3)
            assert len(_read_all(cfg, cfg.topics.dead_letters, lambda v: len(v) >= 1)) == 1
            # the command line reads committed outputs when told: a Query's answer comes
            # once its checkpoint commits it, the dead letter is there for the tail
            conn = ["--bootstrap-servers", broker.bootstrap_servers, "--topic-prefix", prefix,
                    "--read-committed"]
            capsys.readouterr()
            assert main(["request", "query", "--id", "0", "--wait", "--timeout", "60",
                         *conn]) == 0
            assert json.loads(capsys.readouterr().out)["fitted"] == final["fitted"]
            assert main(["tail", "deadLetters", "--from-beginning", "-n", "1", "--timeout",
                         "30", *conn]) == 0
            assert "not_json" in capsys.readouterr().out
    return lat


@pytest.fixture(scope="module")
def noida():
    """The module's own broker: ``noida``, whose ``read_committed`` readers skip aborted
    transactions."""
    with LocalBroker(engine="noida") as b:
        yield b


def test_the_embedded_broker_of_a_job_with_exactly_once_outputs_is_noida():
    assert embedded_engine(True) == "noida" and embedded_engine(False) == "tansu"
    with pytest.raises(ValueError, match="engine must be one of tansu, noida"):
        LocalBroker(engine="kafka")
    # omldm serve --embedded-broker [ENGINE]: none, auto (the flag alone), or named
    parse = _parser().parse_args
    assert parse(["serve"]).embedded_broker is None
    assert parse(["serve", "--embedded-broker"]).embedded_broker == "auto"
    assert parse(["serve", "--embedded-broker", "noida"]).embedded_broker == "noida"
    with pytest.raises(SystemExit):
        parse(["serve", "--embedded-broker", "kafka"])


def test_the_command_line_reads_committed_when_told(monkeypatch):
    """``--read-committed`` (or ``$OMLDM_READ_COMMITTED``) on the commands that read the
    job's outputs; the default stays read_uncommitted (sooner, and all a job without
    ``--exactly-once-outputs`` needs)."""
    conn = ["--bootstrap-servers", "x:1"]
    monkeypatch.delenv("OMLDM_READ_COMMITTED", raising=False)
    for argv in (["tail", "predictions"], ["request", "query", "--id", "0", "--wait"],
                 ["export", "--id", "0"], ["topics", "--read"], ["predict", "--pipeline", "0"]):
        assert _isolation(_parser().parse_args([*argv, *conn])) == "read_uncommitted"
        assert _isolation(_parser().parse_args([*argv, *conn, "--read-committed"])) \
            == "read_committed"
    monkeypatch.setenv("OMLDM_READ_COMMITTED", "1")
    assert _isolation(_parser().parse_args(["tail", "responses", *conn])) == "read_committed"


def test_outputs_arrive_once_and_only_after_the_next_checkpoint(noida, capsys):
    broker = noida
    X, y = shuttle()
    X, y = X[:1200], y[:1200]
    on = _run(broker, True, X, y, capsys)
    off = _run(broker, False, X, y, capsys)
    stats = {name: (float(np.median(v)), float(np.percentile(v, 95))) for name, v in
             (("exactly-once", on), ("at-least-once", off))}
    for name, (p50, p95) in stats.items():
        print(f"{name}: prediction visible to its reader after p50 {p50:.0f} ms, p95 {p95:.0f} ms "
              f"(checkpoints every {INTERVAL_MS} ms, 200 records at 20/s)")
    # on: a prediction waits for the checkpoint after it (the next barrier, then the commit)
    p50, p95 = stats["exactly-once"]
    assert p50 > 0.3 * INTERVAL_MS and p95 > 0.6 * INTERVAL_MS
    # off: it is read as soon as it is written
    assert stats["at-least-once"][0] < 0.15 * INTERVAL_MS
    assert stats["at-least-once"][0] * 3 < stats["exactly-once"][0]
