"""``omldm demo``: the whole loop on a real stream.

Starts the local broker (unless ``--bootstrap-servers`` names a Kafka), the job on a
local MiniCluster, creates a StandardScaler → PA-I pipeline with the asynchronous protocol,
streams river's Shuttle dataset (49,097 NASA shuttle sensor records, 9 features, ~7%
anomalies) in file order, 80% to ``training`` and every 5th record to ``forecasting``,
shows progress, queries the pipeline, scores the predictions against the held-back
labels, stops everything and prints one JSON line as its last line.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import orjson
from tqdm import tqdm

from deploy.broker import LocalBroker, embedded_engine
from flink_jobs.config import local_spoke_parallelism
from flink_jobs.session import Session, local_config
from learning.datasets import shuttle

__all__ = ["run_demo", "shuttle_create_request"]


def shuttle_create_request(pipeline: int = 0, mini_batch_size: int = 32, mini_batches: int = 4) -> dict:
    """The demo's Create request (papers/002 §3.4 shape)."""
    return {
        "id": pipeline, "request": "Create", "requestId": f"create-{pipeline}",
        "preProcessors": [{"name": "StandardScaler", "hyperParameters": {}, "parameters": {}}],
        "learner": {"name": "PA", "hyperParameters": {"C": 0.01, "mode": 1}, "parameters": {}},
        "trainingConfiguration": {"protocol": "Asynchronous", "hubParallelism": 1,
                                  "miniBatchSize": mini_batch_size, "miniBatches": mini_batches},
    }


def _worst(spokes: list[dict], key: str) -> float | None:
    values = [s[key] for s in spokes if s.get(key) is not None]
    return max(values) if values else None


def run_demo(*, bootstrap_servers: str | None = None, spokes: int = 2, hubs: int = 1,
             execution_mode: str = "thread", limit: int | None = None,
             records_per_message: int = 1, mini_batch_size: int = 32, mini_batches: int = 4,
             timeout: float = 300.0, progress: bool = True, topic_prefix: str = "",
             checkpoint_interval_ms: int = 0, exactly_once_outputs: bool = False,
             max_batch_delay_ms: int | None = None, max_batch_records: int | None = None,
             spoke_parallelism: int | None = None, out=sys.stdout, **sharding) -> dict[str, Any]:
    """Run the demo; returns the summary that the command prints as its last line.
    ``checkpoint_interval_ms`` > 0 turns checkpoints on (in memory on the MiniCluster);
    ``exactly_once_outputs`` (needs checkpoints) writes the outputs in transactions;
    ``max_batch_delay_ms`` and ``max_batch_records`` (default: :class:`JobConfig`'s)
    batch records in Java;
    ``spoke_parallelism`` (:class:`JobConfig`'s; None: :func:`~flink_jobs.config.
    local_spoke_parallelism`'s, 1 in thread mode) deals the spokes over fewer subtasks;
    ``sharding`` takes :class:`JobConfig`'s ``sharding*`` fields.

    Raises
    ------
    TimeoutError
        When the counts do not add up within ``timeout`` seconds.
    """
    t_start = time.monotonic()
    X, y = shuttle()
    if limit:
        X, y = X[:limit], y[:limit]
    broker = None if bootstrap_servers else \
        LocalBroker(engine=embedded_engine(exactly_once_outputs)).start()
    servers = bootstrap_servers or broker.bootstrap_servers
    try:
        cfg = local_config(servers, topic_prefix=topic_prefix, spokes=spokes, hubs=hubs,
                           execution_mode=execution_mode,
                           checkpoint_interval_ms=checkpoint_interval_ms,
                           exactly_once_outputs=exactly_once_outputs,
                           spoke_parallelism=local_spoke_parallelism(spoke_parallelism,
                                                                     execution_mode),
                           **{k: v for k, v in (("max_batch_delay_ms", max_batch_delay_ms),
                                                ("max_batch_records", max_batch_records))
                              if v is not None}, **sharding)
        print(f"broker {servers}" + (f" (embedded: {broker.engine})" if broker else "")
              + f"; job: {spokes} spokes"
              + (f" on {cfg.spoke_subtasks} subtask(s)" if cfg.spoke_subtasks < spokes else "")
              + f", {hubs} hub(s), {execution_mode} mode"
              + (f", checkpoints every {checkpoint_interval_ms} ms" if checkpoint_interval_ms else ""),
              file=out, flush=True)
        with Session(cfg, "omldm-demo") as s:
            created = s.request(shuttle_create_request(0, mini_batch_size, mini_batches), timeout=120)
            if created.get("status") != "ok":
                raise RuntimeError(f"Create failed: {created}")
            print(f"created pipeline 0: {orjson.dumps(created).decode()}", file=out, flush=True)
            n_total = len(y)
            bar = tqdm(total=n_total, unit="rec", file=out, disable=not progress,
                       dynamic_ncols=True, desc="fitted+predicted")
            t_stream = time.monotonic()
            last_q = [0.0]

            def show(q: dict) -> None:
                done = q.get("fitted", 0) + q.get("predicted", 0)
                bar.n = done
                rate = done / max(time.monotonic() - t_stream, 1e-9)
                acc = q.get("prequentialAccuracy")
                bar.set_postfix_str(f"fitted={q.get('fitted', 0)} rec/s={rate:,.0f} "
                                    f"prequential={acc if acc is None else round(acc, 4)}")
                bar.refresh()

            def between(_: int) -> None:
                if time.monotonic() - last_q[0] > 1.0:
                    last_q[0] = time.monotonic()
                    s.send_request({"id": 0, "request": "Query", "requestId": f"progress-{time.time_ns()}"})
                for r in s.responses.poll(0):
                    if str(r.get("requestId", "")).startswith("progress-") and r.get("status") == "ok":
                        show(r)

            held, n_train, n_fore = s.stream(X, y, records_per_message=records_per_message,
                                             between=between)
            final = s.wait_until_counted(0, n_train, n_fore, timeout=timeout, on_query=show,
                                         every=0.25)
            t_done = time.monotonic()
            bar.close()
            preds = s.predictions_of(0)
            hits = sum(1 for i, label in held.items() if preds.get(i) == label)
            shown = {k: v for k, v in final.items() if k != "model"}
            shown["model"] = {k: v for k, v in final["model"].items() if k != "params"}
            print("query response:", json.dumps(shown, indent=2), file=out, flush=True)
            proto = final["protocol"]
            summary = {
                "fitted": final["fitted"], "predictions": s.prediction_count(0),
                "prediction_records_on_topic": s.prediction_records,
                "training_records": n_train, "forecasting_records": n_fore,
                "rejected": final["rejected"],
                "prequential_accuracy": final["prequentialAccuracy"],
                "forecast_accuracy": hits / n_fore if n_fore else None,
                "mean_loss": final["meanLoss"],
                "records_per_second": (final["fitted"] + final["predicted"]) / (t_done - t_stream),
                "messages_to_hubs": proto["messagesToHubs"],
                "messages_to_spokes": proto["messagesToSpokes"],
                "bytes_to_hubs": proto["bytesToHubs"], "bytes_to_spokes": proto["bytesToSpokes"],
                "fitted_per_spoke": final["fittedPerSpoke"],
                "feedback_round_trip_ms_p50": _worst(final["spokes"], "roundTripMsP50"),
                "feedback_round_trip_ms_p95": _worst(final["spokes"], "roundTripMsP95"),
                "crossing_ms_p50": _worst(final["spokes"], "crossingMsP50"),
                "spokes": spokes, "spoke_subtasks": cfg.spoke_subtasks, "hubs": hubs,
                "execution_mode": execution_mode,
                "streaming_seconds": t_done - t_stream,
            }
    finally:
        if broker is not None:
            broker.stop()
    summary["wall_seconds"] = time.monotonic() - t_start
    return summary
