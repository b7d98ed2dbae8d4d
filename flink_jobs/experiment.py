"""``omldm experiment protocols``: every synchronization protocol on the same stream.

For each dataset — river's Shuttle (49,097 records, StandardScaler → PA-I) and
scikit-learn's digits (1,797 images streamed :data:`DIGITS_PASSES` times, StandardScaler →
MLP) — every protocol of :mod:`learning.protocols` trains one pipeline with ``k`` spokes
(default 4) and one hub on the same stream in file order (every 5th record goes to
``forecasting`` without its label, as in the demo), on the Flink MiniCluster through the
local broker (``--kernel flink``, the default) or on the in-process kernel (``--kernel
local``: same protocols, same messages, no Flink; fast, for tuning). Each record goes to a
spoke drawn at random, on both kernels. Each run is its own job, one after the other;
``--repeats N`` runs each protocol N times (the accuracy of one digits run varies by about
±0.004 with the spoke shares alone).

The result is a table (markdown on stdout, one line per protocol with the means over the
repeats and the accuracy and bytes relative to BSP; JSON rows at ``--json``, one per run,
with its ``repeat``) with, per run:
``dataset``, ``protocol``, ``variant``, ``prequential_accuracy``, ``mean_loss``,
``bytes_to_hubs`` / ``bytes_to_spokes`` (synchronization traffic: everything the
middleware sent between spokes and hubs except the one-way statistics reports that answer
Queries), ``rounds`` (synchronizations performed by hub 0: averaging rounds for BSP, FDA
and EVENFLOW, applied pushes for SSP and TAP, exchanges for EASGD/Adaptive),
``records_per_second`` (training plus forecasting records over the time from the first
record written to the last one counted), and a PNG (``--png``, default next to the JSON)
with the prequential loss over records and the bytes per protocol.

On Flink the producer keeps pace with the job, as a live source would (:data:`PACE`): it
writes at most about ``lag`` records ahead of what the pipeline has handled, as read from
the predictions topic (a Query would be a synchronization point for BSP and SSP), and
waits at most :data:`PATIENCE_S` for it before writing on. Written
all at once, the stream is a backlog the job reads at full speed, and a dynamic protocol's
check (spoke → hub → Kafka → spoke, a second or so under that load in process mode) arrives
only after thousands of records: FDA and EVENFLOW then end 1–3 rounds on digits and their
accuracy falls to that of independent learners, while BSP, which pauses the stream for
every round, is unaffected. ``records_per_second`` is then the paced rate.

BSP and SSP treat a Query as a synchronization point (:mod:`learning.protocols.synchronous`),
so the progress Queries of a Flink run (one every :data:`PROGRESS_EVERY_S` seconds) add a
few rounds to theirs; ``queries`` in each row says how many there were.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import numpy as np

__all__ = ["add_parser", "run_experiment", "SETTINGS", "DATASETS", "create_request",
           "run_local", "run_flink", "summarize", "markdown_table", "plot"]

log = logging.getLogger(__name__)

#: dataset → (preprocessors, learner, training configuration shared by every protocol)
DATASETS: dict[str, tuple[list, dict, dict]] = {
    "shuttle": ([{"name": "StandardScaler"}],
                {"name": "PA", "hyperParameters": {"C": 0.01, "mode": 1}},
                {"miniBatchSize": 32, "miniBatches": 4}),
    "digits": ([{"name": "StandardScaler"}],
               {"name": "MLP", "hyperParameters": {"hidden_layers": [32], "optimizer": "adam",
                                                   "learning_rate": 0.03, "seed": 0}},
               {"miniBatchSize": 16, "miniBatches": 1}),
}

#: dataset → (lag, chunk): on Flink the producer writes ``chunk`` records at a time and
#: waits until the pipeline has handled all but ``lag`` of those written
#: (:meth:`flink_jobs.session.Session.keep_pace`)
PACE = {"shuttle": (2000, 500), "digits": (100, 50)}
#: seconds the producer waits at most for the job to catch up, then writes on as a live
#: source would (without it a BSP round and the pacing can wait on each other for good)
PATIENCE_S = 1.0
#: seconds between the progress Queries of a Flink run (points of the loss curve)
PROGRESS_EVERY_S = 3.0

#: passes over scikit-learn's digits (1,797 images) in the experiment's stream: BSP's
#: bytes grow with the stream while the dynamic protocols' rounds thin out once the model
#: settles (papers/002 §5.2.1: FDA "catches up" after its first rounds)
DIGITS_PASSES = 6

#: dataset → PyFlink execution mode: PyTorch cannot run in thread mode's embedded
#: interpreter, so the MLP runs in process mode
EXECUTION_MODE = {"shuttle": "thread", "digits": "process"}

#: dataset → runs: (protocol, variant or None, extra trainingConfiguration keys). The
#: thresholds were chosen on the in-process kernel (``--kernel local``) for these learners.
SETTINGS: dict[str, list[tuple[str, str | None, dict]]] = {
    "shuttle": [
        ("Independent", None, {}),
        ("Asynchronous", None, {}),
        ("Synchronous", None, {}),
        ("SSP", None, {"staleness": 2}),
        ("EASGD", None, {"alpha": 0.25}),
        ("Adaptive", None, {"alpha": 0.25, "lossThreshold": 20.0}),
        ("FDA", "naive", {"threshold": 0.02}),
        ("FDA", "linear", {"threshold": 0.02}),
        ("FDA", "sketch", {"threshold": 0.02, "precision": 0.25}),
        ("EVENFLOW", "basic", {"threshold": 0.02, "monitoredFunction": "l2"}),
        ("EVENFLOW", "fast", {"threshold": 0.02, "monitoredFunction": "l2", "coefficients": 8}),
    ],
    "digits": [
        ("Independent", None, {}),
        ("Asynchronous", None, {}),
        ("Synchronous", None, {}),
        ("SSP", None, {"staleness": 2}),
        ("EASGD", None, {"alpha": 0.25}),
        ("Adaptive", None, {"alpha": 0.25, "lossThreshold": 50.0}),
        # papers/002 §5.1.1 uses Θ = 8 for its DL task. Per variant here, chosen on Flink
        # (three runs each) to end 20-26 rounds there, 5.4-6.6x fewer than BSP's 140: the
        # loop's latency lets spokes train on while a check is in flight, so a threshold
        # ends 20-30% fewer rounds on Flink than on the in-process kernel with the same
        # random shares, and loses more accuracy at the same number of rounds
        ("FDA", "naive", {"threshold": 1.25}),
        ("FDA", "linear", {"threshold": 1.25}),
        ("FDA", "sketch", {"threshold": 0.75, "precision": 0.25}),
        ("EVENFLOW", "basic", {"threshold": 1.5, "monitoredFunction": "l2"}),
        ("EVENFLOW", "fast", {"threshold": 0.4, "monitoredFunction": "l2", "coefficients": 50}),
    ],
}


def load(dataset: str) -> tuple[np.ndarray, np.ndarray]:
    """``(X, y)`` of a dataset, in file order."""
    if dataset == "shuttle":
        from learning.datasets import shuttle

        return shuttle()
    if dataset == "digits":
        from sklearn.datasets import load_digits

        X, y = load_digits(return_X_y=True)
        # DIGITS_PASSES passes in file order (10,782 records): one pass (1,797) is over
        # before the dynamic protocols' first rounds end on a cluster
        return np.tile(X.astype(np.float64), (DIGITS_PASSES, 1)), np.tile(y, DIGITS_PASSES)
    raise ValueError(f"unknown dataset {dataset!r}; known: {', '.join(DATASETS)}")


def create_request(dataset: str, protocol: str, variant: str | None, extra: dict,
                   pipeline: int = 0) -> dict:
    """The Create request of one run."""
    pre, learner, base = DATASETS[dataset]
    config = {"protocol": protocol, "hubParallelism": 1, **base, **extra}
    if variant is not None:
        config["variant"] = variant
    return {"id": pipeline, "request": "Create", "requestId": f"exp-{pipeline}",
            "preProcessors": pre, "learner": learner, "trainingConfiguration": config}


def _row(dataset: str, protocol: str, variant: str | None, final: dict, seconds: float,
         kernel: str, queries: int, curve: list, report_bytes: int) -> dict:
    proto = final["protocol"]
    if "syncBytesToHubs" in proto:
        to_hubs, to_spokes = proto["syncBytesToHubs"], proto["syncBytesToSpokes"]
    else:  # protocols without per-method accounting: take the Query reports out
        to_hubs, to_spokes = max(0, proto["bytesToHubs"] - report_bytes), proto["bytesToSpokes"]
    done = final["fitted"] + final["predicted"]
    return {
        "dataset": dataset, "protocol": protocol, "variant": variant,
        "prequential_accuracy": final["prequentialAccuracy"], "mean_loss": final["meanLoss"],
        "bytes_to_hubs": int(to_hubs), "bytes_to_spokes": int(to_spokes),
        "rounds": int(proto.get("rounds", proto.get("updates", 0))),
        "records_per_second": done / seconds if seconds > 0 else None,
        "fitted": final["fitted"], "predicted": final["predicted"],
        "messages_to_hubs": proto["messagesToHubs"], "messages_to_spokes": proto["messagesToSpokes"],
        "all_bytes_to_hubs": proto["bytesToHubs"], "wait_ms": proto.get("waitMs"),
        "kernel": kernel, "queries": queries, "seconds": seconds,
        "loss_curve": curve,
    }


# -- in-process kernel ------------------------------------------------------------------
def run_local(dataset: str, protocol: str, variant: str | None, extra: dict, *, spokes: int = 4,
              every: int = 5, limit: int | None = None, points: int = 40, seed: int = 0) -> dict:
    """One run on :class:`operators.local.LocalNetwork`: each record goes to a spoke drawn
    at random (``seed``), as the Flink job draws it (``RAND_INTEGER``), messages are
    delivered after each record, Queries at the end until every record is counted.

    Random shares matter: with round-robin shares the dynamic protocols came within
    0.004-0.007 of BSP's accuracy on digits at settings that, with random shares (and on
    Flink), fell 0.015-0.02 behind."""
    from learning.protocols import make_hub, make_spoke
    from learning.requests import parse_request
    from operators.local import LocalNetwork

    X, y = load(dataset)
    if limit:
        X, y = X[:limit], y[:limit]
    req = parse_request(create_request(dataset, protocol, variant, extra))
    net = LocalNetwork([make_spoke(req) for _ in range(spokes)], [make_hub(req)], network=req.id)
    feats, labels = X.tolist(), y.tolist()
    curve, step = [], max(1, len(X) // points)
    t0 = time.perf_counter()
    shares = np.random.default_rng(seed).integers(0, spokes, len(X)).tolist()
    for i in range(len(X)):
        s = net.spokes[shares[i]]
        if every and i % every == every - 1:
            net.feed(shares[i], lambda s=s, i=i: s.on_predict(feats[i]))
        else:
            net.feed(shares[i], lambda s=s, i=i: s.on_train(feats[i], labels[i]))
        net.run()
        if i % step == step - 1:
            fitted = sum(sp.fitted for sp in net.spokes)
            if fitted:
                curve.append([fitted, sum(sp.loss_sum for sp in net.spokes) / fitted])

    def query() -> dict:
        for s in net.spokes:
            s.on_query("final")
        net.run()
        return net.outputs["responses"][-1]

    # a Query closes a synchronous round that a spoke without records left open; the
    # records paused behind it are fitted after that Query's statistics were taken
    final, queries = query(), 1
    while final["fitted"] + final["predicted"] < len(X) and queries < 5:
        final, queries = query(), queries + 1
    seconds = time.perf_counter() - t0
    report_bytes = 0
    if queries > 1:  # the reports of the earlier Queries are in these statistics
        again = query()
        report_bytes = (again["protocol"]["bytesToHubs"] - final["protocol"]["bytesToHubs"]) \
            * (queries - 1)
    return _row(dataset, protocol, variant, final, seconds, "local", queries, curve,
                max(0, report_bytes))


# -- Flink MiniCluster ------------------------------------------------------------------
def run_flink(dataset: str, runs: list[tuple[str, str | None, dict]], *, spokes: int = 4,
              bootstrap_servers: str | None = None, every: int = 5, limit: int | None = None,
              timeout: float = 600.0, connection=None,
              on_row: Callable[[dict], None] | None = None,
              failures: list[str] | None = None) -> list[dict]:
    """Each run as its own job on a local MiniCluster, one after the other, through the
    local broker (started here unless ``bootstrap_servers`` names a Kafka; ``connection``,
    a :class:`flink_jobs.connection.KafkaConnection`, carries its security settings).

    A run that fails (a Create refused, a ``TimeoutError`` of a pipeline that stopped
    counting) raises, unless ``failures`` is a list: then its line is appended there, it
    has no row, and the next run goes on."""
    from deploy.broker import LocalBroker
    from flink_jobs.session import Session, local_config

    X, y = load(dataset)
    if limit:
        X, y = X[:limit], y[:limit]
    broker = None if bootstrap_servers else LocalBroker().start()
    servers = bootstrap_servers or broker.bootstrap_servers
    rows = []
    try:
        def one(n: int, protocol: str, variant: str | None, extra: dict) -> dict:
            prefix = f"exp-{uuid.uuid4().hex[:6]}-"
            extra_cfg = {"connection": connection} if connection is not None and \
                bootstrap_servers else {}
            cfg = local_config(servers, topic_prefix=prefix, spokes=spokes, hubs=1,
                               execution_mode=EXECUTION_MODE.get(dataset, "thread"), **extra_cfg)
            with Session(cfg, f"experiment-{dataset}-{protocol}-{variant}") as s:
                created = s.request(create_request(dataset, protocol, variant, extra, n), timeout=180)
                if created.get("status") != "ok":
                    raise RuntimeError(f"Create failed: {created}")
                curve: list = []
                queries = [0]

                def seen(q: dict) -> None:
                    if q.get("status") == "ok" and q.get("fitted"):
                        curve.append([q["fitted"], q["meanLoss"]])

                lag, chunk = PACE.get(dataset, (2000, 500))

                def counted(q: dict) -> None:
                    queries[0] += 1
                    seen(q)

                # paced by the predictions topic: Queries would add rounds to BSP's and
                # SSP's; a progress Query (the loss curve) every PROGRESS_EVERY_S seconds
                pace = s.keep_pace(n, lag=lag, timeout=timeout, every=every,
                                   patience=PATIENCE_S)
                last = [time.monotonic()]

                def between(sent: int) -> None:
                    pace(sent)
                    if time.monotonic() - last[0] > PROGRESS_EVERY_S:
                        last[0] = time.monotonic()
                        counted(s.query(n, timeout=timeout))

                t0 = time.monotonic()
                _, n_train, n_fore = s.stream(X, y, every=every, between=between, chunk=chunk)

                final = s.wait_until_counted(n, n_train, n_fore, timeout=timeout, every=0.5,
                                             on_query=counted)
                seconds = time.monotonic() - t0
                # one more Query, nothing in between: the size of one round of reports
                again = s.query(n, timeout=60)
                per_query = again["protocol"]["bytesToHubs"] - final["protocol"]["bytesToHubs"]
                report_bytes = per_query * (queries[0] - 1) if per_query > 0 else 0
                return _row(dataset, protocol, variant, final, seconds, "flink", queries[0],
                            curve, report_bytes)

        for n, (protocol, variant, extra) in enumerate(runs):
            try:
                row = one(n, protocol, variant, extra)
            except Exception as exc:  # one failed run must not cost the others
                log.error("%s %s (%s) failed: %r", dataset, protocol, variant, exc)
                if failures is None:
                    raise
                failures.append(f"{dataset} {protocol}" + (f" ({variant})" if variant else "")
                                + f": {exc!r}")
                continue
            rows.append(row)
            if on_row:
                on_row(row)
    finally:
        if broker is not None:
            broker.stop()
    return rows


# -- output -----------------------------------------------------------------------------
def _name(row: dict) -> str:
    return row["protocol"] + (f" ({row['variant']})" if row.get("variant") else "")


def summarize(rows: list[dict]) -> list[dict]:
    """One row per (dataset, protocol, variant), in first-seen order: the means of
    ``prequential_accuracy``, ``mean_loss``, the bytes, ``rounds`` and
    ``records_per_second`` over the repeats of that run, with ``runs`` (how many) and
    ``accuracy_std`` (sample standard deviation; 0.0 for one run)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["dataset"], r["protocol"], r["variant"]), []).append(r)
    out = []
    for (dataset, protocol, variant), rs in groups.items():
        acc = [r["prequential_accuracy"] for r in rs if r["prequential_accuracy"] is not None]
        row = {"dataset": dataset, "protocol": protocol, "variant": variant, "runs": len(rs),
               "prequential_accuracy": float(np.mean(acc)) if acc else None,
               "accuracy_std": float(np.std(acc, ddof=1)) if len(acc) > 1 else 0.0}
        for key in ("mean_loss", "bytes_to_hubs", "bytes_to_spokes", "rounds",
                    "records_per_second"):
            row[key] = float(np.mean([r[key] or 0 for r in rs]))
        out.append(row)
    return out


def markdown_table(rows: list[dict]) -> str:
    """The table as GitHub markdown, one line per protocol (means over repeated runs,
    :func:`summarize`); accuracy and bytes also relative to BSP of the same dataset."""
    rows = summarize(rows)
    bsp = {r["dataset"]: r for r in rows if r["protocol"] == "Synchronous"}
    repeated = any(r["runs"] > 1 for r in rows)
    lines = ["| dataset | protocol | prequential accuracy | Δ vs BSP | mean loss | bytes → hubs | "
             "bytes → spokes | bytes vs BSP | rounds | records/s |"
             + (" runs |" if repeated else ""),
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
             + (" ---: |" if repeated else "")]
    for r in rows:
        total = r["bytes_to_hubs"] + r["bytes_to_spokes"]
        base = bsp.get(r["dataset"])
        base_bytes = base["bytes_to_hubs"] + base["bytes_to_spokes"] if base else 0
        ratio = f"{total / base_bytes:.3f}" if base_bytes else "–"
        acc = r["prequential_accuracy"]
        acc_s = "–" if acc is None else f"{acc:.4f}" + (
            f" ± {r['accuracy_std']:.4f}" if r["runs"] > 1 else "")
        delta = (f"{acc - base['prequential_accuracy']:+.4f}"
                 if base and acc is not None and base["prequential_accuracy"] is not None else "–")
        lines.append(f"| {r['dataset']} | {_name(r)} | {acc_s} | {delta} | {r['mean_loss']:.4f} | "
                     f"{r['bytes_to_hubs']:,.0f} | {r['bytes_to_spokes']:,.0f} | {ratio} | "
                     f"{r['rounds']:,.0f} | {r['records_per_second']:,.0f} |"
                     + (f" {r['runs']} |" if repeated else ""))
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> Path:
    """Prequential loss over records fitted, and bytes per protocol, one row per dataset.

    Raises
    ------
    ImportError
        When matplotlib is not installed.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    fig, axes = plt.subplots(len(datasets), 2, figsize=(14, 4.5 * len(datasets)), squeeze=False)
    colours = plt.get_cmap("tab20").colors
    for (ax_loss, ax_bytes), ds in zip(axes, datasets):
        mine = [r for r in rows if r["dataset"] == ds and not r.get("repeat")]
        for i, r in enumerate(mine):
            if r["loss_curve"]:
                c = np.asarray(r["loss_curve"], dtype=np.float64)
                ax_loss.plot(c[:, 0], c[:, 1], label=_name(r), color=colours[(2 * i) % 20 + (i >= 10)],
                             linestyle=("-", "--", ":")[i % 3], marker=".")
        kernel = mine[0]["kernel"] if mine else ""
        ax_loss.set(title=f"{ds}: prequential mean loss ({kernel} kernel; points: Queries)"
                    if kernel == "flink" else f"{ds}: prequential mean loss", xlabel="records fitted",
                    ylabel="cumulative mean loss")
        ax_loss.legend(fontsize=7)
        names = [_name(r) for r in mine]
        x = np.arange(len(mine))
        ax_bytes.bar(x - 0.2, [r["bytes_to_hubs"] for r in mine], 0.4, label="spokes → hubs")
        ax_bytes.bar(x + 0.2, [r["bytes_to_spokes"] for r in mine], 0.4, label="hubs → spokes")
        ax_bytes.set_xticks(x, names, rotation=45, ha="right", fontsize=7)
        ax_bytes.set_yscale("symlog")
        ax_bytes.set(title=f"{ds}: synchronization bytes", ylabel="bytes")
        ax_bytes.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run_experiment(json_path: str | Path, *, kernel: str = "flink",
                   datasets: tuple[str, ...] = ("shuttle", "digits"), spokes: int = 4,
                   limit: int | None = None, png_path: str | Path | None = None,
                   bootstrap_servers: str | None = None, protocols: tuple[str, ...] | None = None,
                   connection=None, out=None, repeats: int = 1) -> list[dict]:
    """Run every protocol on every dataset; write the JSON rows (and the PNG), print the
    markdown table; returns the rows.

    Parameters
    ----------
    json_path : path
        Where the JSON list of rows goes (rewritten after every run).
    kernel : {"flink", "local"}
    datasets : names in :data:`DATASETS`
    spokes : int
    limit : int or None
        Use only the first ``limit`` records of each dataset.
    png_path : path or None
        Default: ``json_path`` with the suffix ``.png``. Skipped (with a warning) when
        matplotlib is missing.
    protocols : names or None
        Only these protocols (default: all of :data:`SETTINGS`).
    bootstrap_servers, connection : str, KafkaConnection or None
        A Kafka to use instead of a local broker, and its security settings.
    out : text stream or None
        Where the progress lines and the table go (default: standard output).
    repeats : int
        Runs of every protocol (each a row with its ``repeat`` index; the table shows
        their means and the standard deviation of the accuracy). Local runs draw their
        spoke shares with seed ``repeat``; Flink runs draw them anew every time.

    Raises
    ------
    RuntimeError
        After the table, the JSON and the plot of the runs that succeeded, when a Flink
        run failed (each failure is printed; the other runs still ran).
    ValueError
        For an unknown ``kernel``, or ``repeats`` below 1.
    """
    out = out or sys.stdout
    json_path = Path(json_path)
    rows: list[dict] = []
    failures: list[str] = []

    def save(row: dict | None = None) -> None:
        if row is not None:
            rows.append(row)
            print(f"  {row['dataset']:8s} {_name(row):22s} acc={row['prequential_accuracy']} "
                  f"bytes={row['bytes_to_hubs'] + row['bytes_to_spokes']:,} "
                  f"rounds={row['rounds']} rec/s={row['records_per_second']:,.0f}",
                  file=out, flush=True)
        json_path.write_text(json.dumps(rows, indent=1))

    if kernel not in ("flink", "local"):
        raise ValueError(f"kernel must be 'flink' or 'local', got {kernel!r}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    for ds in datasets:
        runs = [r for r in SETTINGS[ds] if protocols is None or r[0] in protocols]
        for repeat in range(repeats):
            def tagged(row: dict, repeat: int = repeat) -> None:
                save({**row, "repeat": repeat})

            if kernel == "local":
                for protocol, variant, extra in runs:
                    tagged(run_local(ds, protocol, variant, extra, spokes=spokes, limit=limit,
                                     seed=repeat))
            else:
                run_flink(ds, runs, spokes=spokes, bootstrap_servers=bootstrap_servers,
                          limit=limit, connection=connection, on_row=tagged, failures=failures)
    save()
    print(markdown_table(rows), file=out, flush=True)
    png = Path(png_path) if png_path else json_path.with_suffix(".png")
    try:
        plot(rows, png)
        print(f"plot: {png}", file=out, flush=True)
    except ImportError:
        log.warning("matplotlib is not installed: no plot")
    if failures:
        print("failed runs (no row):\n  " + "\n  ".join(failures), file=out, flush=True)
        raise RuntimeError(f"{len(failures)} run(s) failed: {'; '.join(failures)}")
    return rows


def _command(args: argparse.Namespace) -> int:
    from flink_jobs.connection import KafkaConnection

    run_experiment(args.json, kernel=args.kernel, datasets=tuple(args.dataset or DATASETS),
                   spokes=args.spokes, limit=args.limit, png_path=args.png,
                   bootstrap_servers=args.bootstrap_servers,
                   protocols=tuple(args.protocol) if args.protocol else None,
                   connection=KafkaConnection.from_args(args), repeats=args.repeats)
    return 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``experiment protocols`` to the ``omldm`` command line (``subparsers`` is what
    ``ArgumentParser.add_subparsers`` returned); the command runs ``args.fn(args)``."""
    from flink_jobs.connection import KafkaConnection

    p = subparsers.add_parser("experiment", help="run an experiment and write its table",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("which", choices=("protocols",), help="the experiment")
    p.add_argument("--json", required=True, help="where the JSON rows go")
    p.add_argument("--png", default=None, help="the plot (default: the JSON path with .png)")
    p.add_argument("--kernel", choices=("flink", "local"), default="flink",
                   help="the Flink MiniCluster (default) or the in-process kernel")
    p.add_argument("--dataset", action="append", choices=tuple(DATASETS),
                   help="repeatable; default: all")
    p.add_argument("--protocol", action="append", help="only these protocols (repeatable)")
    p.add_argument("--spokes", type=int, default=4)
    p.add_argument("--repeats", type=int, default=1,
                   help="runs of every protocol; the table shows means (default 1)")
    p.add_argument("--limit", type=int, default=None, help="only the first N records")
    KafkaConnection.add_arguments(p)
    p.set_defaults(fn=_command)
    return p
