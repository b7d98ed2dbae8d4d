"""``omldm experiment protocols``: the command writes the table (markdown), the JSON rows
with the keys the issue names, and the PNG; on the in-process kernel and, for two
protocols on a slice of Shuttle, on the Flink MiniCluster through the local broker."""

from __future__ import annotations

import io
import json

import pytest

from flink_jobs.cli import main
from flink_jobs.experiment import run_experiment, run_local, summarize

KEYS = {"dataset", "protocol", "variant", "prequential_accuracy", "bytes_to_hubs",
        "bytes_to_spokes", "rounds", "records_per_second"}


def test_the_command_on_the_in_process_kernel_writes_table_json_and_plot(tmp_path, capsys):
    path = tmp_path / "rows.json"
    assert main(["experiment", "protocols", "--kernel", "local", "--dataset", "shuttle",
                 "--limit", "12000", "--protocol", "Synchronous", "--protocol", "EVENFLOW",
                 "--repeats", "2", "--json", str(path)]) == 0
    rows = json.loads(path.read_text())
    runs = [("Synchronous", None), ("EVENFLOW", "basic"), ("EVENFLOW", "fast")]
    assert [(r["protocol"], r["variant"], r["repeat"]) for r in rows] == [
        (p, v, k) for k in (0, 1) for p, v in runs]
    assert all(KEYS <= set(r) for r in rows)
    for first in (rows[:3], rows[3:]):
        bsp = first[0]
        assert bsp["rounds"] > 0 and bsp["prequential_accuracy"] > 0.9
        for r in first[1:]:  # the dynamic variants synchronize less than BSP on this stream
            assert r["bytes_to_hubs"] + r["bytes_to_spokes"] < \
                bsp["bytes_to_hubs"] + bsp["bytes_to_spokes"]
    # each repeat draws its own random spoke shares
    assert rows[0]["loss_curve"] != rows[3]["loss_curve"]
    assert path.with_suffix(".png").stat().st_size > 10_000
    table = capsys.readouterr().out
    assert "| shuttle | EVENFLOW (fast) |" in table and "| shuttle | Synchronous |" in table
    # one line per protocol: the mean of the two runs, ± the spread, and the run count
    bsp_line = next(line for line in table.splitlines() if line.startswith("| shuttle | Synchronous |"))
    mean = (rows[0]["prequential_accuracy"] + rows[3]["prequential_accuracy"]) / 2
    assert bsp_line.split(" | ")[2].startswith(f"{mean:.4f} ± ") and bsp_line.endswith(" 2 |")


def test_the_in_process_kernel_draws_spoke_shares_at_random_and_repeatably():
    same = [run_local("shuttle", "Synchronous", None, {}, limit=3000, seed=s) for s in (7, 7, 8)]
    assert same[0]["loss_curve"] == same[1]["loss_curve"]
    assert same[0]["loss_curve"] != same[2]["loss_curve"]
    assert all(r["fitted"] + r["predicted"] == 3000 for r in same)


def test_summarize_takes_means_over_repeats():
    rows = [{"dataset": "d", "protocol": "FDA", "variant": "naive", "prequential_accuracy": a,
             "mean_loss": 0.5, "bytes_to_hubs": b, "bytes_to_spokes": 10, "rounds": 4,
             "records_per_second": 100.0} for a, b in ((0.8, 100), (0.9, 300))]
    (one,) = summarize(rows)
    assert one["runs"] == 2 and one["bytes_to_hubs"] == 200 and one["rounds"] == 4
    assert one["prequential_accuracy"] == pytest.approx(0.85)
    assert one["accuracy_std"] == pytest.approx(0.0707107, rel=1e-5)
    with pytest.raises(ValueError, match="repeats"):
        run_experiment("unused.json", kernel="local", repeats=0)


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
