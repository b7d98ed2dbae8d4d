"""``omldm experiment protocols``: the command writes the table (markdown), the JSON rows
with the keys the issue names, and the PNG; on the in-process kernel and, for two
protocols on a slice of Shuttle, on the Flink MiniCluster through the local broker."""

from __future__ import annotations

import io
import json

import pytest

from flink_jobs.cli import main
from flink_jobs.experiment import run_experiment

KEYS = {"dataset", "protocol", "variant", "prequential_accuracy", "bytes_to_hubs",
        "bytes_to_spokes", "rounds", "records_per_second"}


def test_the_command_on_the_in_process_kernel_writes_table_json_and_plot(tmp_path, capsys):
    path = tmp_path / "rows.json"
    assert main(["experiment", "protocols", "--kernel", "local", "--dataset", "shuttle",
                 "--limit", "12000", "--protocol", "Synchronous", "--protocol", "EVENFLOW",
                 "--json", str(path)]) == 0
    rows = json.loads(path.read_text())
    assert [(r["protocol"], r["variant"]) for r in rows] == [
        ("Synchronous", None), ("EVENFLOW", "basic"), ("EVENFLOW", "fast")]
    assert all(KEYS <= set(r) for r in rows)
    bsp = rows[0]
    assert bsp["rounds"] > 0 and bsp["prequential_accuracy"] > 0.9
    for r in rows[1:]:  # the dynamic variants synchronize less than BSP on this stream
        assert r["bytes_to_hubs"] + r["bytes_to_spokes"] < bsp["bytes_to_hubs"] + bsp["bytes_to_spokes"]
    assert path.with_suffix(".png").stat().st_size > 10_000
    table = capsys.readouterr().out
    assert "| shuttle | EVENFLOW (fast) |" in table and "| shuttle | Synchronous |" in table


def test_the_experiment_on_the_flink_minicluster(broker, tmp_path):
    out = io.StringIO()
    rows = run_experiment(tmp_path / "flink.json", kernel="flink", datasets=("shuttle",),
                          limit=4000, protocols=("Synchronous", "EVENFLOW"),
                          bootstrap_servers=broker.bootstrap_servers, out=out)
    assert [(r["protocol"], r["variant"]) for r in rows] == [
        ("Synchronous", None), ("EVENFLOW", "basic"), ("EVENFLOW", "fast")]
    n = 4000
    for r in rows:
        assert KEYS <= set(r) and r["kernel"] == "flink"
        assert r["fitted"] + r["predicted"] == n and r["records_per_second"] > 0
        assert r["prequential_accuracy"] > 0.9
    bsp = rows[0]["bytes_to_hubs"] + rows[0]["bytes_to_spokes"]
    assert all(r["bytes_to_hubs"] + r["bytes_to_spokes"] < bsp for r in rows[1:])
    assert json.loads((tmp_path / "flink.json").read_text()) == rows
    assert "| shuttle | EVENFLOW (fast) |" in out.getvalue()
