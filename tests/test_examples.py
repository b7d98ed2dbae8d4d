"""The runnable examples (``examples/``), as a user runs them: ``omldm serve --config FILE``
in its own process on the real local broker, then each example script in its own process
against it; the serve process's progress lines carry the rolling metrics, and SIGTERM stops
it cleanly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PREFIX = "examples-"


class _Serve:
    """``omldm serve`` in a subprocess, its output lines collected by a thread."""

    def __init__(self, args: list[str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "flink_jobs", "serve", *args],
                                     cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, text: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if text in line:
                    return line
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise AssertionError(f"no line with {text!r} in {timeout} s:\n" + "\n".join(self.lines[-30:]))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(90)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise


@pytest.fixture(scope="module")
def serve(broker, tmp_path_factory):
    conf = tmp_path_factory.mktemp("serve") / "omldm.toml"
    conf.write_text(f'spokes = 2\nhubs = 1\ntopic_prefix = "{PREFIX}"\nmax_pipelines = 8\n\n'
                    f'[kafka]\nbootstrap_servers = "{broker.bootstrap_servers}"\n')
    s = _Serve(["--config", str(conf), "--progress-interval", "1"])
    try:
        # thread mode on a local MiniCluster: the spokes share one subtask by default
        s.wait_for("job: 2 spokes on 1 subtask(s), 1 hub(s)", timeout=120)
        time.sleep(5)  # the job's sources find their partitions
        yield s
    finally:
        assert s.stop() == 0
        assert "omldm: stopped" in s.lines


def _env(broker) -> dict:
    return {**os.environ, "OMLDM_BOOTSTRAP_SERVERS": broker.bootstrap_servers,
            "OMLDM_TOPIC_PREFIX": PREFIX}


def test_your_csv_to_rolling_metrics_and_a_png(serve, broker, tmp_path):
    csv, png = tmp_path / "phishing.csv", tmp_path / "rolling.png"
    run = subprocess.run([sys.executable, "examples/csv_to_metrics.py", str(csv), "--demo",
                          "--png", str(png), "--query-every", "250"], cwd=ROOT, env=_env(broker),
                         capture_output=True, text=True, timeout=400)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert (out["training"], out["forecasting"], out["skipped"]) == (1000, 250, 0)
    assert (out["fitted"], out["predicted"], out["task"]) == (1000, 250, "classification")
    cumulative, rolling = out["metrics"]["cumulative"], out["metrics"]["rolling"]
    assert 0.75 < cumulative["accuracy"] <= 1 and 0.5 < cumulative["kappa"] <= 1
    assert 0 < rolling["accuracy"] <= 1 and -1 <= rolling["kappa"] <= 1
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    # what the serve process prints every second about the pipeline
    line = serve.wait_for("pipeline 0: fitted 1,000", timeout=30)
    assert "kappa" in line, line


def test_a_python_session_notebook(serve, broker):
    run = subprocess.run([sys.executable, "examples/session_notebook.py"], cwd=ROOT,
                         env=_env(broker), capture_output=True, text=True, timeout=400)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "ok" in run.stdout.splitlines()[0]
    assert "fitted 1438, predicted 359" in run.stdout
    assert "C is now 0.05" in run.stdout and "delete: ok" in run.stdout


def test_an_example_fails_with_a_clear_exit_code(serve, broker, tmp_path):
    """A Create the job refuses is exit code 1 with the job's reason; no broker is 2."""
    run = subprocess.run([sys.executable, "examples/csv_to_metrics.py", str(tmp_path / "p.csv"),
                          "--demo", "--pipeline", "3", "--learner", "NoSuchLearner"], cwd=ROOT,
                         env=_env(broker), capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and "Create refused" in run.stderr and "NoSuchLearner" in run.stderr
    env = {k: v for k, v in os.environ.items() if k != "OMLDM_BOOTSTRAP_SERVERS"}
    run = subprocess.run([sys.executable, "examples/csv_to_metrics.py", str(tmp_path / "x.csv")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "--bootstrap-servers" in run.stderr


def test_a_drift_detector_on_the_command_line(serve, broker):
    """A user's path to drift detection: ``omldm request create ... --config
    driftDetector=ADWIN``, ``omldm stream sine-drift``; ``omldm serve`` prints each
    detection and the detections in its progress lines."""
    cli = [sys.executable, "-m", "flink_jobs"]
    run = subprocess.run([*cli, "request", "create", "--id", "5", "--learner", "PA", "--hyper",
                          "C=0.01", "--preprocessor", "StandardScaler", "--config",
                          "driftDetector=ADWIN", "--wait", "--timeout", "120"], cwd=ROOT,
                         env=_env(broker), capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout)["status"] == "ok"
    run = subprocess.run([*cli, "stream", "sine-drift", "--records-per-message", "50",
                          "--no-progress"], cwd=ROOT, env=_env(broker), capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    done = serve.wait_for("pipeline 5: fitted 16,000", timeout=240)
    assert done.endswith(tuple(f"drifts {n}" for n in range(1, 20))), done
    found = [int(line.rsplit(" ", 1)[1].replace(",", "")) for line in list(serve.lines)
             if line.startswith("pipeline 5: concept drift detected by ADWIN on spoke")]
    # 20,000 records, 80% trained on, over 2 spokes: the drift begins at about the spokes'
    # 2,800th record (7,000 in the stream); on Flink a spoke may alarm once before it
    # (tests/test_drift.py)
    assert sum(at > 2_400 for at in found) >= 1 and sum(at <= 2_400 for at in found) <= 1, found
