"""Your CSV file → a pipeline → a live stream → rolling quality metrics → a PNG.

Against a running job (``omldm serve --embedded-broker`` prints its bootstrap servers)::

    python examples/csv_to_metrics.py my.csv --label class --bootstrap-servers localhost:PORT

No CSV at hand? ``--demo`` first writes river's bundled Phishing data set (1,250 rows,
binary label ``is_phishing``) to the path you give.

What it does, with the same pieces ``omldm request`` and ``omldm stream`` use:

1. sends a Create request (``StandardScaler | PA`` by default; ``--learner``,
   ``--protocol``, ``--metrics-window``) and stops with exit code 1 on an error response;
2. streams the file in chunks of ``--query-every`` records (every ``--forecast-every``-th
   record, without its label, to forecasting), bad rows reported by line and skipped;
3. after each chunk asks the pipeline (a Query) for its metrics: prequential
   (test-then-train) accuracy, Cohen's kappa and macro F1 for a classifier, MAE and RMSE for
   a regressor, cumulative and over the last ``--metrics-window`` records;
4. plots the rolling and cumulative metric against the records fitted (``--png``) and
   prints one JSON line with the final metrics.

Exit codes: 0 done, 1 an error response, 2 bad arguments, 3 a timeout.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import sys
from pathlib import Path

from flink_jobs.session import Session, local_config
from flink_jobs.stream_files import RecordReader, write_stream

#: the metric plotted, per task: the rolling one first
PLOTTED = {"classification": ("kappa", "Cohen's kappa"), "regression": ("mae", "MAE")}


def write_demo_csv(path: Path) -> None:
    """River's bundled Phishing data set (no download) as a CSV with a header."""
    from river import datasets

    rows = [{**x, "is_phishing": int(y)} for x, y in datasets.Phishing()]
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("csv", type=Path, help="a CSV file with a header row")
    p.add_argument("--label", default="is_phishing", help="the label column")
    p.add_argument("--demo", action="store_true",
                   help="first write river's Phishing data set to the CSV path")
    p.add_argument("--bootstrap-servers", default=os.environ.get("OMLDM_BOOTSTRAP_SERVERS"),
                   help="the running job's Kafka ($OMLDM_BOOTSTRAP_SERVERS)")
    p.add_argument("--topic-prefix", default=os.environ.get("OMLDM_TOPIC_PREFIX", ""),
                   help="the running job's topic prefix ($OMLDM_TOPIC_PREFIX)")
    p.add_argument("--pipeline", type=int, default=0, help="the pipeline id to create")
    p.add_argument("--learner", default="PA", help="learner name (omldm list learners)")
    p.add_argument("--protocol", default="Asynchronous",
                   help="synchronization protocol (omldm list protocols)")
    p.add_argument("--mini-batch-size", type=int, default=16, help="records per mini-batch")
    p.add_argument("--metrics-window", type=int, default=200,
                   help="records the rolling metrics cover")
    p.add_argument("--forecast-every", type=int, default=5,
                   help="every N-th record goes to forecasting without its label")
    p.add_argument("--query-every", type=int, default=100,
                   help="records streamed between two Queries (points of the plot)")
    p.add_argument("--png", type=Path, default=Path("rolling_metrics.png"),
                   help="where the plot goes")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds to wait for each response and for the final counts")
    return p


def create_request(args: argparse.Namespace) -> dict:
    return {"id": args.pipeline, "request": "Create",
            "preProcessors": [{"name": "StandardScaler"}],
            "learner": {"name": args.learner},
            "trainingConfiguration": {"protocol": args.protocol,
                                      "miniBatchSize": args.mini_batch_size,
                                      "metricsWindow": args.metrics_window}}


def plot(points: list[dict], task: str, path: Path, title: str) -> None:
    """Rolling and cumulative metric against records fitted, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key, name = PLOTTED[task]
    x = [p["fitted"] for p in points]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(x, [p["rolling"].get(key) for p in points], label=f"rolling {name}")
    ax.plot(x, [p["cumulative"].get(key) for p in points], label=f"cumulative {name}",
            linestyle="--")
    ax.set_xlabel("records fitted")
    ax.set_ylabel(name)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not args.bootstrap_servers:
        print("csv_to_metrics: --bootstrap-servers (or $OMLDM_BOOTSTRAP_SERVERS) is required",
              file=sys.stderr)
        return 2
    if args.demo:
        write_demo_csv(args.csv)
    try:
        reader = RecordReader(str(args.csv), label=args.label)
    except ValueError as exc:
        print(f"csv_to_metrics: {exc}", file=sys.stderr)
        return 2
    cfg = local_config(args.bootstrap_servers, topic_prefix=args.topic_prefix)
    session = Session(cfg, "csv-to-metrics").connect()
    try:
        created = session.request(create_request(args), timeout=args.timeout)
        if created.get("status") != "ok":
            error = created.get("error") or {}
            print(f"csv_to_metrics: Create refused ({error.get('code')}, field "
                  f"{error.get('field')}): {error.get('message')}", file=sys.stderr)
            return 1
        topic = {"training": cfg.topics.training, "forecasting": cfg.topics.forecasting}
        send = lambda kind, value: session.producer.send(topic[kind], value)  # noqa: E731
        rows, points, sent = iter(reader), [], {"training": 0, "forecasting": 0, "skipped": 0}
        while True:
            chunk = list(itertools.islice(rows, args.query_every))
            if not chunk:
                break
            done = write_stream(chunk, send, forecast_every=args.forecast_every,
                                source=str(args.csv))
            for k in sent:
                sent[k] += getattr(done, k)
            session.producer.flush()
            answer = session.query(args.pipeline, timeout=args.timeout)
            if answer.get("metrics") and answer["fitted"]:
                points.append({"fitted": answer["fitted"], **answer["metrics"]})
        final = session.wait_until_counted(args.pipeline, sent["training"], sent["forecasting"],
                                           timeout=args.timeout)
        points.append({"fitted": final["fitted"], **final["metrics"]})
        plot(points, final["task"], args.png,
             f"{args.csv.name}: {args.learner}, {args.protocol}, "
             f"window {args.metrics_window} records")
        print(json.dumps({"pipeline": args.pipeline, "task": final["task"], **sent,
                          "fitted": final["fitted"], "predicted": final["predicted"],
                          "metrics": final["metrics"], "png": str(args.png)}))
        return 0
    except TimeoutError as exc:
        print(f"csv_to_metrics: {exc}", file=sys.stderr)
        return 3
    finally:
        session.close()


if __name__ == "__main__":
    sys.exit(main())
