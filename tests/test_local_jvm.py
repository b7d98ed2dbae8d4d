"""The local MiniCluster's JVM: unless ``JVM_ARGS`` is set, omldm launches it with a heap of
1 GiB committed and touched at the start (:data:`flink_jobs.job.LOCAL_JVM_ARGS`), so that a
long-lived local job's resident memory stays flat (docs/performance.md, "Soak"); a user's
``JVM_ARGS`` win. Each case runs in a fresh Python process, whose first
``create_environment`` launches the JVM, and asks that JVM for its own arguments."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBE = """
import json
from flink_jobs.job import create_environment
from flink_jobs.session import local_config
from pyflink.java_gateway import get_gateway

create_environment(local_config("127.0.0.1:9"))
jvm = get_gateway().jvm
print(json.dumps({"args": list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
                              .getInputArguments()),
                  "committed": jvm.java.lang.Runtime.getRuntime().totalMemory()}))
"""


def probe(jvm_args: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "JVM_ARGS"}
    if jvm_args is not None:
        env["JVM_ARGS"] = jvm_args
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_local_jvm_starts_with_its_heap_committed():
    got = probe(None)
    assert "-Xms1g" in got["args"] and "-XX:+AlwaysPreTouch" in got["args"], got["args"]
    assert got["committed"] >= 1 << 30


def test_a_users_jvm_args_win():
    got = probe("-Xms300m")
    assert "-Xms300m" in got["args"] and "-Xms1g" not in got["args"], got["args"]
    assert got["committed"] < 1 << 30
