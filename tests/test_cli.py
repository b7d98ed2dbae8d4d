"""The command line against a running job on the real broker: what a user types."""

from __future__ import annotations

import json

import pytest

from flink_jobs.cli import build_request, main, _parser
from flink_jobs.session import Session, local_config


def test_build_request_from_flags_and_file(tmp_path):
    f = tmp_path / "req.json"
    f.write_text(json.dumps({"learner": {"name": "PA", "hyperParameters": {"C": 1}},
                             "trainingConfiguration": {"miniBatches": 2}}))
    args = _parser().parse_args(["request", "create", "--id", "4", "--file", str(f), "--hyper",
                                 "mode=2", "--preprocessor", "StandardScaler",
                                 "--mini-batch-size", "16", "--config", "miniBatches=3"])
    req = build_request(args)
    assert req["id"] == 4 and req["request"] == "Create" and req["requestId"].startswith("cli-")
    assert req["learner"] == {"name": "PA", "hyperParameters": {"C": 1, "mode": 2}}
    assert req["preProcessors"] == [{"name": "StandardScaler"}]
    assert req["trainingConfiguration"] == {"miniBatches": 3, "miniBatchSize": 16}
    # a file an editor saved with a byte order mark
    f.write_bytes(b"\xef\xbb\xbf" + json.dumps({"learner": {"name": "PA"}}).encode())
    args = _parser().parse_args(["request", "create", "--id", "4", "--from", str(f)])
    assert build_request(args)["learner"] == {"name": "PA"}


def test_a_session_from_the_command_line(broker, capsys):
    cfg = local_config(broker.bootstrap_servers, topic_prefix="cli-")
    conn = ["--bootstrap-servers", broker.bootstrap_servers, "--topic-prefix", "cli-"]
    with Session(cfg, "cli"):
        assert main(["request", "create", "--id", "3", "--learner", "PA", "--preprocessor",
                     "StandardScaler", "--wait", *conn]) == 0
        assert json.loads(capsys.readouterr().out)["status"] == "ok"
        assert main(["stream", "shuttle", "--limit", "2000", *conn]) == 0
        assert json.loads(capsys.readouterr().out)["training"] == 1600
        for _ in range(60):  # until everything is fitted
            assert main(["request", "query", "--id", "3", "--wait", *conn]) == 0
            q = json.loads(capsys.readouterr().out)
            if q["fitted"] == 1600 and q["predicted"] == 400:
                break
        assert q["fitted"] == 1600 and q["prequentialAccuracy"] > 0.97
        assert main(["request", "query", "--id", "99", "--wait", *conn]) == 1  # error response
        assert json.loads(capsys.readouterr().out)["error"]["code"] == "not_found"
        assert main(["tail", "predictions", "--from-beginning", "-n", "2", *conn]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert len(lines) == 2 and json.loads(lines[0])["pipeline"] == 3
        assert main(["request", "delete", "--id", "3", "--wait", *conn]) == 0


def test_connection_settings_are_checked(monkeypatch):
    monkeypatch.delenv("OMLDM_BOOTSTRAP_SERVERS", raising=False)
    assert main(["request", "query", "--id", "1"]) == 2  # no bootstrap servers anywhere
    assert main(["request", "query", "--id", "1", "--bootstrap-servers", "x:1",
                 "--security-protocol", "SASL_SSL"]) == 2  # SASL without mechanism/user


def test_a_session_that_times_out_waiting_says_which_spoke_holds_what():
    """``wait_until_counted``'s TimeoutError tells a stalled pipeline (a spoke holding
    records behind a synchronization) from records that never reached the job; no broker
    is needed: the Query is replaced."""
    from flink_jobs.config import JobConfig

    s = Session(JobConfig(bootstrap_servers="127.0.0.1:1"), "t")
    answer = {"fitted": 3, "predicted": 1, "protocol": {"name": "Synchronous", "rounds": 2,
                                                        "idleSpokes": [1]},
              "spokes": [{"spoke": 0, "fitted": 3, "predicted": 1, "held": 5, "rejected": 0,
                          "rounds": 2, "waitMs": 9.0}]}
    s.query = lambda pipeline, timeout=0: answer
    s.prediction_count = lambda pipeline: 1
    with pytest.raises(TimeoutError) as err:
        s.wait_until_counted(0, 4, 1, timeout=0.2, every=0.05)
    text = str(err.value)
    assert "fitted 3/4" in text and "'held': 5" in text and "'idleSpokes': [1]" in text
