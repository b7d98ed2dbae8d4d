"""``omldm experiment protocols`` (alias ``quality``): the command writes the table
(markdown), the JSON rows with the keys the issue names, and the PNG; on the in-process
kernel and, for two protocols on a slice of Shuttle, on the Flink MiniCluster through the
local broker. Every dataset has a Centralized reference row (one spoke, the whole stream);
the datasets' loaders return documented shapes in a deterministic order."""

from __future__ import annotations

import io
import json
import time

import numpy as np
import pytest

from flink_jobs import experiment
from flink_jobs.cli import main
from flink_jobs.experiment import (DATASETS, QUICK_LIMIT, RATE_TICK_S, markdown_table,
                                   rate_limited, run_experiment, run_local, summarize)
from learning.datasets import phishing, synth

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


def test_a_stream_rate_on_the_flink_minicluster(broker, tmp_path):
    """``--rate``: the producer writes no faster than the rate; the row carries it and the
    table names it. With the spokes in one subtask (``--spoke-parallelism 1``)."""
    out = io.StringIO()
    rows = run_experiment(tmp_path / "rate.json", kernel="flink", datasets=("shuttle",),
                          limit=3000, protocols=("Asynchronous",), rates=(1000,),
                          spoke_parallelism=1,
                          bootstrap_servers=broker.bootstrap_servers, out=out)
    assert [r["variant"] for r in rows] == [None, "no warm-up"]  # TAP, and without its warm-up
    row = rows[0]
    assert row["rate"] == 1000 and row["spoke_parallelism"] == 1
    assert row["execution_mode"] == "thread"
    assert row["fitted"] + row["predicted"] == 3000
    assert row["records_per_second"] <= 1000 * 1.05
    assert "| shuttle | Asynchronous (1,000 records/s) |" in out.getvalue()


def test_a_stream_rate_holds_the_writes_to_it_and_still_paces():
    """:func:`rate_limited` on a fake clock: every write waits for its time at the rate, and
    the job's pace is still asked after every chunk."""
    now = [0.0]
    paced: list[int] = []

    def sleep(s: float) -> None:
        assert s > 0
        now[0] += s

    between, write = rate_limited(2000, paced.append, 500, clock=lambda: now[0], sleep=sleep)
    assert write == int(2000 * RATE_TICK_S) == 20
    for sent in range(write, 2001, write):
        between(sent)
    # each write is held until its records' time: 2,000 records at 2,000 records/s
    assert now[0] == pytest.approx(1.0)
    assert paced == [500, 1000, 1500, 2000]
    assert rate_limited(None, paced.append, 500) == (paced.append, 500)
    with pytest.raises(ValueError, match="rate"):
        rate_limited(0, paced.append, 500)


def test_rates_group_apart_and_compare_with_bsp_at_the_same_rate():
    def row(protocol, acc, rate):
        return {"dataset": "d", "protocol": protocol, "variant": None, "spokes": 4,
                "rate": rate, "prequential_accuracy": acc, "mean_loss": 0.1,
                "bytes_to_hubs": 10, "bytes_to_spokes": 10, "rounds": 3,
                "records_per_second": 10.0}

    rows = [row("Synchronous", 0.90, None), row("Asynchronous", 0.85, None),
            row("Synchronous", 0.80, 2000), row("Asynchronous", 0.84, 2000),
            row("Asynchronous", 0.86, 4000), row("Asynchronous", 0.88, 4000)]
    assert [(r["protocol"], r["rate"], r["runs"]) for r in summarize(rows)] == [
        ("Synchronous", None, 1), ("Asynchronous", None, 1), ("Synchronous", 2000, 1),
        ("Asynchronous", 2000, 1), ("Asynchronous", 4000, 2)]
    lines = {x.split(" | ")[1]: x.split(" | ") for x in markdown_table(rows).splitlines()[2:]}
    assert lines["Asynchronous"][4] == "-0.0500"
    assert lines["Asynchronous (2,000 records/s)"][4] == "+0.0400"  # BSP at 2,000
    assert lines["Asynchronous (4,000 records/s)"][4] == "-0.0300"  # no BSP there: its own pace


def test_a_stream_rate_and_a_spoke_layout_are_refused_off_flink(tmp_path):
    with pytest.raises(ValueError, match="Flink kernel"):
        run_experiment(tmp_path / "x.json", kernel="local", rates=(1000,))
    with pytest.raises(ValueError, match="rates"):
        run_experiment(tmp_path / "x.json", kernel="flink", rates=(0,))
    with pytest.raises(ValueError, match="spoke_parallelism"):
        run_experiment(tmp_path / "x.json", kernel="local", spoke_parallelism=1)
    with pytest.raises(ValueError, match="spoke_parallelism"):
        run_experiment(tmp_path / "x.json", kernel="flink", spokes=(2, 4), spoke_parallelism=3)
    with pytest.raises(ValueError, match="execution_mode"):
        run_experiment(tmp_path / "x.json", kernel="local", execution_mode="process")
    for which in ("sharding", "regression"):
        for flag, value in (("--rate", "1"), ("--spoke-parallelism", "1"),
                            ("--execution-mode", "process")):
            assert main(["experiment", which, "--json", str(tmp_path / "x.json"),
                         flag, value]) == 2
    for which in ("quality", "sharding"):  # the regression experiment's own option
        assert main(["experiment", which, "--json", str(tmp_path / "x.json"),
                     "--target-scaler"]) == 2


def test_quick_run_has_a_centralized_row_per_dataset_equal_to_a_single_spoke_run(tmp_path, capsys):
    path = tmp_path / "quick.json"
    t0 = time.perf_counter()
    assert main(["experiment", "quality", "--kernel", "local", "--quick", "--json", str(path)]) == 0
    assert time.perf_counter() - t0 < 120
    rows = json.loads(path.read_text())
    runs = [("Centralized", None, 1), ("Independent", None, 4), ("Synchronous", None, 4),
            ("FDA", "naive", 4)]
    assert [(r["dataset"], r["protocol"], r["variant"], r["spokes"]) for r in rows] == [
        (ds, p, v, k) for ds in DATASETS for p, v, k in runs]
    assert all(KEYS | {"spokes", "aggregation"} <= set(r) for r in rows)
    # the rule that ran: none without synchronization, else the one SETTINGS gives the run
    # (Waveform's and Hyperplane's FDA naive average), else the learner's default
    for r in rows:
        chosen = next((e.get("aggregation") for p, v, e in experiment.SETTINGS[r["dataset"]]
                       if (p, v) == (r["protocol"], r["variant"])), None)
        # (digits: the MLP at Adam 0.03, whose configuration names average)
        expected = None if r["protocol"] in ("Centralized", "Independent") else \
            chosen or ("average" if r["dataset"] == "digits" else "sum")
        assert r["aggregation"] == expected, r
    assert {r["dataset"] for r in rows if r["protocol"] == "FDA" and
            r["aggregation"] == "average"} == {"digits", "waveform", "hyperplane"}
    for row in rows[::4]:
        n = min(QUICK_LIMIT, 1250 if row["dataset"] == "phishing" else QUICK_LIMIT)
        assert row["kernel"] == "local" and row["fitted"] + row["predicted"] == n
        direct = run_local(row["dataset"], "Independent", None, {}, spokes=1, limit=QUICK_LIMIT)
        for key in ("prequential_accuracy", "mean_loss", "fitted", "predicted", "loss_curve"):
            assert row[key] == direct[key], (row["dataset"], key)
    table = capsys.readouterr().out
    assert "| Δ vs centralized | Δ vs BSP |" in table
    for ds in DATASETS:
        central = next(r for r in rows if r["dataset"] == ds and r["protocol"] == "Centralized")
        line = next(x for x in table.splitlines() if x.startswith(f"| {ds} | Centralized |"))
        assert line.split(" | ")[2:4] == [f"{central['prequential_accuracy']:.4f}", "+0.0000"]
        naive = ("FDA (naive, average)" if ds in ("waveform", "hyperplane") else
                 "FDA (naive, diversity)" if ds == "led" else
                 "FDA (naive, momentum)" if ds in ("rbf", "digits-pa") else "FDA (naive)")
        assert f"| {ds} | Independent |" in table and f"| {ds} | {naive} |" in table


def test_a_spokes_sweep_groups_by_spokes_and_runs_centralized_once(tmp_path):
    out = io.StringIO()
    rows = run_experiment(tmp_path / "sweep.json", kernel="local", datasets=("phishing",),
                          spokes=(2, 4), repeats=2, quick=True, out=out)
    assert [(r["protocol"], r["spokes"], r["repeat"]) for r in rows] == [
        ("Centralized", 1, 0)] + [(p, k, rep) for k in (2, 4) for rep in (0, 1)
                                  for p in ("Independent", "Synchronous", "FDA")]
    summary = summarize(rows)
    assert [(r["protocol"], r["spokes"], r["runs"]) for r in summary] == [
        ("Centralized", 1, 1)] + [(p, k, 2) for k in (2, 4)
                                  for p in ("Independent", "Synchronous", "FDA")]
    lines = out.getvalue().splitlines()
    bsp = [x for x in lines if x.startswith("| phishing | Synchronous |")]
    assert len(bsp) == 2 and all(x.split(" | ")[4] == "+0.0000" for x in bsp)
    # two BSP lines: the one-spoke Centralized row has no BSP to compare with
    central = next(x for x in lines if x.startswith("| phishing | Centralized |"))
    assert central.split(" | ")[4] == "–"


def test_aggregation_goes_to_every_run_but_centralized_and_independent(tmp_path, monkeypatch):
    calls = []

    def fake(dataset, protocol, variant, extra, *, spokes=4, limit=None, seed=0, **_):
        calls.append((dataset, protocol, variant, dict(extra), spokes, limit))
        return {"dataset": dataset, "protocol": protocol, "variant": variant, "spokes": spokes,
                "aggregation": extra.get("aggregation"), "prequential_accuracy": 0.5,
                "mean_loss": 1.0, "bytes_to_hubs": 10, "bytes_to_spokes": 10, "rounds": 1,
                "records_per_second": 1.0, "kernel": "local", "loss_curve": [[1, 1.0]]}

    monkeypatch.setattr(experiment, "run_local", fake)
    rows = run_experiment(tmp_path / "agg.json", kernel="local", datasets=("shuttle", "rbf"),
                          spokes=(2, 8), aggregation="sum", limit=100, out=io.StringIO())
    for ds in ("shuttle", "rbf"):
        mine = [c for c in calls if c[0] == ds]
        assert mine[0][1:3] == ("Independent", None) and mine[0][4] == 1  # Centralized
        assert len(mine) == 1 + 2 * len(experiment.SETTINGS[ds])
        for _, protocol, _, extra, _, limit in mine:
            assert limit == 100
            assert ("aggregation" in extra) == (protocol != "Independent")
        runs = len(experiment.SETTINGS[ds])
        assert [c[4] for c in mine[1:]] == [2] * runs + [8] * runs
    assert [r["aggregation"] for r in rows if r["protocol"] in ("Centralized", "Independent")] \
        == [None] * 6
    assert {r["aggregation"] for r in rows
            if r["protocol"] not in ("Centralized", "Independent")} == {"sum"}
    assert {r["protocol"] for r in rows if r["spokes"] == 1} == {"Centralized"}
    with pytest.raises(ValueError, match="aggregation"):
        run_experiment(tmp_path / "x.json", kernel="local", aggregation="median")
    with pytest.raises(ValueError, match="spokes"):
        run_experiment(tmp_path / "x.json", kernel="local", spokes=(4, 0))


def test_scaling_goes_to_every_run_but_centralized_and_the_rows_say_it(tmp_path, capsys):
    """``--scaling batch`` (papers/001 eq. 3) reaches every run's Create but the
    Centralized one (in process, 800 digits records) and the rows carry it; the Create keeps
    the global mini-batch; more than one value, or an unknown one, is refused."""
    from flink_jobs.cli import main as omldm

    rows = run_experiment(tmp_path / "s.json", kernel="local", datasets=("digits-pa",),
                          protocols=("Centralized", "Asynchronous", "Independent"),
                          scaling="batch", limit=800, out=io.StringIO())
    assert [(r["protocol"], r["scaling"]) for r in rows] == [
        ("Centralized", None), ("Independent", "batch"), ("Asynchronous", "batch"),
        ("Asynchronous", "batch")]  # TAP, and without its warm-up
    _, runs = experiment._select("digits-pa", ("Asynchronous",), False, None, "batch")
    request = experiment.create_request("digits-pa", *runs[0])
    assert request["trainingConfiguration"]["scaling"] == "batch"
    assert request["trainingConfiguration"]["miniBatchSize"] == 16  # the global B
    with pytest.raises(ValueError, match="scaling must be one of"):
        run_experiment(tmp_path / "x.json", kernel="local", scaling="half")
    assert omldm(["experiment", "quality", "--kernel", "local", "--json",
                  str(tmp_path / "y.json"), "--scaling", "batch", "--scaling", "none"]) != 0
    assert "--scaling: experiment protocols takes one value" in capsys.readouterr().err


def test_the_table_reads_bytes_relative_to_bsp_as_a_fraction():
    def row(protocol, variant, acc, nbytes, spokes=4):
        return {"dataset": "d", "protocol": protocol, "variant": variant, "spokes": spokes,
                "prequential_accuracy": acc, "mean_loss": 0.1, "bytes_to_hubs": nbytes,
                "bytes_to_spokes": nbytes, "rounds": 3, "records_per_second": 10.0}

    table = markdown_table([row("Centralized", None, 0.95, 0, 1),
                            row("Synchronous", None, 0.9, 6200),
                            row("FDA", "naive", 0.85, 1000), row("Asynchronous", None, 0.8, 9300)])
    lines = {x.split(" | ")[1]: x.split(" | ") for x in table.splitlines()[2:]}
    assert lines["FDA (naive)"][3:6] == ["-0.1000", "-0.0500", "4"]
    assert lines["FDA (naive)"][8] == "1/6.2" and lines["Asynchronous"][8] == "1.50"
    assert lines["Synchronous"][8] == "1.00" and lines["Centralized"][8] == "0"
    assert lines["Centralized"][4] == "+0.0500"


def test_the_table_names_a_rule_other_than_bsps():
    """A summing BSP beside an averaging FDA run: the FDA row says ``average``."""
    def row(protocol, variant, aggregation):
        return {"dataset": "d", "protocol": protocol, "variant": variant, "spokes": 4,
                "aggregation": aggregation, "prequential_accuracy": 0.9, "mean_loss": 0.1,
                "bytes_to_hubs": 10, "bytes_to_spokes": 10, "rounds": 3,
                "records_per_second": 10.0}

    table = markdown_table([row("Synchronous", None, "sum"), row("FDA", "naive", "average"),
                            row("FDA", "linear", "sum"), row("Independent", None, None)])
    names = [x.split(" | ")[1] for x in table.splitlines()[2:]]
    assert names == ["Synchronous", "FDA (naive, average)", "FDA (linear)", "Independent"]


def test_the_experiment_help_is_plain_text(capsys):
    assert main(["experiment", "--help"]) == 0
    text = capsys.readouterr().out
    assert "``" not in text and ":data:" not in text and ":mod:" not in text
    for flag in ("--spokes", "--aggregation", "--quick", "quality"):
        assert flag in text


@pytest.mark.parametrize("name, n_features, n_classes", [
    ("waveform", 21, 3), ("rbf", 20, 5), ("led", 7, 10), ("hyperplane", 10, 2)])
def test_the_generators_give_documented_shapes_deterministically(name, n_features, n_classes):
    X, y = synth(name)
    assert X.shape == (50_000, n_features) and X.dtype == np.float64
    assert y.shape == (50_000,) and y.dtype == np.int64
    assert set(np.unique(y)) == set(range(n_classes))
    X2, y2 = synth(name, n=2_000)  # the same generator, the same order: a prefix
    assert np.array_equal(X2, X[:2_000]) and np.array_equal(y2, y[:2_000])
    X3, _ = synth(name, n=2_000, seed=7)
    assert not np.array_equal(X3, X2)
    with pytest.raises(ValueError, match="unknown generator"):
        synth("sea")


def test_phishing_gives_documented_shape_deterministically():
    X, y = phishing()
    assert X.shape == (1_250, 9) and X.dtype == np.float64 and y.shape == (1_250,)
    assert set(np.unique(y)) == {0, 1} and 0.0 <= X.min() and X.max() <= 1.0
    X2, y2 = phishing()
    assert np.array_equal(X, X2) and np.array_equal(y, y2)
