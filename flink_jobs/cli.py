"""The ``omldm`` command line (also ``python -m flink_jobs``).

* ``omldm demo`` — the Shuttle demo, end to end.
* ``omldm serve`` — the job as a long-lived service on a local MiniCluster.
* ``omldm request create|update|delete|query`` — send a request, optionally wait for
  its response.
* ``omldm stream FILE.csv|FILE.jsonl|-|river:NAME|shuttle|digits`` — write records to the
  input topics (:mod:`flink_jobs.stream_files`).
* ``omldm topics`` — the job's topics with their record counts.
* ``omldm tail TOPIC`` — follow an output topic.
* ``omldm experiment protocols`` — every synchronization protocol on the same stream.
* ``omldm experiment sharding`` — papers/001's sharding strategies and scaling rules on
  non-IID streams (in-process kernel only).
* ``omldm setup`` — fetch and check the connector jars and the Shuttle file.
* ``omldm list learners|preprocessors|protocols`` — every component with its names and
  every hyperparameter (type, default, allowed values, description), from the declarations
  (:mod:`learning.hyperparameters`, :mod:`learning.protocols.parameters`).
* ``omldm --version``.

Exit codes (:data:`EXIT_CODES`): 0 ok, 1 an error response or a failure, 2 a usage error
(a bad flag or setting), 3 a timeout. An error is one line ``omldm: ...`` on stderr; with
``-v`` its traceback too.

Connection options (``--bootstrap-servers``, SASL/TLS) are shared by every subcommand and
default to the ``OMLDM_*`` environment variables (:mod:`flink_jobs.connection`).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.metadata
import itertools
import json
import logging
import os
import signal
import sys
import time
import traceback
import uuid
from typing import Any

import orjson

from deploy.broker import ENGINES as BROKER_ENGINES
from flink_jobs.config import (JobConfig, Topics, add_sharding_arguments, add_spoke_parallelism_argument,
                               add_weights_arguments, local_spoke_parallelism, sharding_settings,
                               weights_settings)
from flink_jobs.config_file import apply_to_parser, job_settings, read_config_argument
from flink_jobs.connection import KafkaConnection

__all__ = ["main", "build_request", "EXIT_CODES", "version"]

log = logging.getLogger("omldm")

#: exit status → meaning, as ``omldm --help`` lists them
EXIT_CODES = {0: "ok", 1: "an error response to a request, or the command failed",
              2: "usage: a bad flag, a missing or invalid setting",
              3: "timeout: no answer or count in time (--timeout)"}


class UsageError(Exception):
    """A bad flag or setting found after parsing: exit status 2."""


def _topics(args: argparse.Namespace) -> Topics:
    return Topics.prefixed(args.topic_prefix or "")


def _need_servers(conn: KafkaConnection) -> str:
    if not conn.bootstrap_servers:
        raise UsageError("--bootstrap-servers (or $OMLDM_BOOTSTRAP_SERVERS) is required")
    return conn.bootstrap_servers


# -- demo / setup --------------------------------------------------------------------------
def _demo(args: argparse.Namespace) -> int:
    from flink_jobs.demo import run_demo

    summary = run_demo(bootstrap_servers=args.bootstrap_servers, spokes=args.spokes,
                       hubs=args.hubs, execution_mode=args.mode, limit=args.limit,
                       records_per_message=args.records_per_message,
                       mini_batch_size=args.mini_batch_size, timeout=args.timeout,
                       progress=not args.no_progress,
                       checkpoint_interval_ms=args.checkpoint_interval_ms,
                       exactly_once_outputs=args.exactly_once_outputs,
                       max_batch_delay_ms=args.max_batch_delay_ms,
                       max_batch_records=args.max_batch_records,
                       spoke_parallelism=args.spoke_parallelism, **sharding_settings(args))
    print(orjson.dumps(summary).decode(), flush=True)
    return 0


def _setup(args: argparse.Namespace) -> int:
    from deploy.assets import fetch_all

    for p in fetch_all():
        print(p)
    return 0


# -- serve ---------------------------------------------------------------------------------
class _Stop(Exception):
    pass


def _serve(args: argparse.Namespace) -> int:
    from deploy.broker import LocalBroker, embedded_engine
    from flink_jobs.session import Session, local_config

    conn = KafkaConnection.from_args(args)
    broker = None
    if args.embedded_broker:
        engine = (embedded_engine(args.exactly_once_outputs) if args.embedded_broker == "auto"
                  else args.embedded_broker)
        if engine == "tansu" and args.exactly_once_outputs:
            print("warning: on tansu, read_committed readers also see the records of aborted "
                  "transactions (docs/operations.md, 'Exactly-once outputs')", file=sys.stderr)
        broker = LocalBroker(port=args.port, engine=engine).start()
        conn = dataclasses.replace(conn, bootstrap_servers=broker.bootstrap_servers)
    servers = _need_servers(conn)

    def stop(signum, frame):
        raise _Stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    cfg = local_config(servers, topic_prefix=args.topic_prefix or "", spokes=args.spokes,
                       hubs=args.hubs, execution_mode=args.mode, connection=conn,
                       protocol_modules=tuple(args.protocol_module or ()),
                       checkpoint_interval_ms=args.checkpoint_interval_ms,
                       exactly_once_outputs=args.exactly_once_outputs,
                       max_batch_delay_ms=args.max_batch_delay_ms,
                       max_batch_records=args.max_batch_records,
                       spoke_parallelism=local_spoke_parallelism(args.spoke_parallelism, args.mode),
                       prediction_scores=args.prediction_scores,
                       prediction_arrays=args.prediction_arrays, **sharding_settings(args),
                       **job_settings(getattr(args, "config_settings", {}), args))
    cfg = dataclasses.replace(cfg, **weights_settings(args, cfg.topics))
    session = Session(cfg, "omldm-serve")
    try:
        session.start()
        t = cfg.topics
        print(f"omldm serving: bootstrap servers {servers}"
              + (f" (embedded broker: {broker.engine})" if broker is not None else ""),
              flush=True)
        print("topics: " + ", ".join(f"{k}={v}" for k, v in t.__dict__.items()), flush=True)
        print(f"job: {cfg.spokes} spokes"
              + (f" on {cfg.spoke_subtasks} subtask(s)" if cfg.spoke_subtasks < cfg.spokes else "")
              + f", {cfg.hubs} hub(s), {cfg.execution_mode} mode; "
              f"Ctrl-C or SIGTERM stops it", flush=True)
        pipelines: dict[int, dict] = {}
        next_report = time.monotonic() + args.progress_interval
        while True:
            for r in session.responses.poll(200):
                rid = str(r.get("requestId", ""))
                if r.get("event") == "drift" and r.get("id") in pipelines:  # learning.drift
                    print(f"pipeline {r['id']}: concept drift detected by {r['detector']} on "
                          f"spoke {r['spoke']} at its record {r['atRecord']:,}", flush=True)
                    continue
                if r.get("status") != "ok":
                    continue
                if r.get("request") == "Create":
                    pipelines[r["id"]] = {"fitted": 0, "t": time.monotonic()}
                    log.info("pipeline %s created", r["id"])
                elif r.get("request") == "Delete":
                    pipelines.pop(r["id"], None)
                    log.info("pipeline %s deleted", r["id"])
                elif r.get("request") == "Query" and rid.startswith("serve-") and r["id"] in pipelines:
                    p = pipelines[r["id"]]
                    now = time.monotonic()
                    rate = (r["fitted"] - p["fitted"]) / max(now - p["t"], 1e-9)
                    p.update(fitted=r["fitted"], t=now)
                    acc = r.get("prequentialAccuracy")
                    # rolling quality (learning.metrics): kappa / macro F1 or MAE / RMSE
                    quality = ""
                    rolling = (r.get("metrics") or {}).get("rolling") or {}
                    shown = [(k, rolling.get(k)) for k in ("kappa", "macroF1", "mae", "rmse")
                             if rolling.get(k) is not None]
                    if shown:
                        quality = f", rolling {r['metrics']['windowRecords']:,}: " + ", ".join(
                            f"{k} {v:.4f}" if k in ("kappa", "macroF1") else f"{k} {v:.4g}"
                            for k, v in shown)
                    if r.get("drift"):
                        quality += f", drifts {r['drift']['detected']}"
                    print(f"pipeline {r['id']}: fitted {r['fitted']:,} ({rate:,.0f}/s), predicted "
                          f"{r['predicted']:,}, rejected {r['rejected']:,}, prequential "
                          f"{'-' if acc is None else f'{acc:.4f}'}, mean loss "
                          f"{r['meanLoss'] if r['meanLoss'] is None else round(r['meanLoss'], 5)}"
                          f"{quality}", flush=True)
            if time.monotonic() >= next_report:
                next_report = time.monotonic() + args.progress_interval
                for pid in pipelines:
                    session.send_request({"id": pid, "request": "Query",
                                          "requestId": f"serve-{pid}-{uuid.uuid4().hex[:6]}"})
    except _Stop:
        print("omldm: stopping", flush=True)
    finally:
        session.close()
        if broker is not None:
            broker.stop()
    print("omldm: stopped", flush=True)
    return 0


# -- request -------------------------------------------------------------------------------
def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _pairs(items: list[str] | None, flag: str) -> dict:
    out = {}
    for item in items or []:
        if "=" not in item:
            raise UsageError(f"{flag} takes NAME=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        out[k] = _value(v)
    return out


def build_request(args: argparse.Namespace) -> dict:
    """The request a ``omldm request ...`` invocation describes: a JSON file (or ``-`` for
    stdin) as the base, then the flags on top."""
    req: dict = {}
    if args.file:
        text = sys.stdin.read() if args.file == "-" else open(args.file, encoding="utf-8").read()
        req = json.loads(text.removeprefix("\ufeff"))  # a byte order mark, as editors write
        if not isinstance(req, dict):
            raise UsageError("the request file must hold a JSON object")
    req["request"] = args.kind.capitalize()
    if args.id is not None:
        req["id"] = args.id
    if "id" not in req:
        raise UsageError("--id (or an id in the file) is required")
    req["requestId"] = args.request_id or req.get("requestId") or f"cli-{uuid.uuid4().hex[:8]}"
    if args.kind in ("create", "update"):
        hyper = _pairs(args.hyper, "--hyper")
        if args.learner or hyper:
            learner = dict(req.get("learner") or {})
            if args.learner:
                learner["name"] = args.learner
            if hyper:
                learner["hyperParameters"] = {**(learner.get("hyperParameters") or {}), **hyper}
            req["learner"] = learner
        if args.preprocessor:
            req["preProcessors"] = [{"name": n} for n in args.preprocessor]
        tc = dict(req.get("trainingConfiguration") or {})
        for key, value in (("protocol", args.protocol), ("miniBatchSize", args.mini_batch_size),
                           ("miniBatches", args.mini_batches),
                           ("hubParallelism", args.hub_parallelism)):
            if value is not None:
                tc[key] = value
        tc.update(_pairs(args.config, "--config"))
        if tc:
            req["trainingConfiguration"] = tc
    return req


def _isolation(args: argparse.Namespace) -> str:
    """The isolation level of a command's Kafka readers: ``read_committed`` with
    ``--read-committed`` (``$OMLDM_READ_COMMITTED``), else ``read_uncommitted``."""
    return "read_committed" if getattr(args, "read_committed", False) else "read_uncommitted"


def _send(args: argparse.Namespace, req: dict, wait: bool) -> dict | None:
    """Write ``req`` to the requests topic; with ``wait``, its response (read from the
    responses topic's end, opened before the write).

    Raises
    ------
    TimeoutError
        No response within ``args.timeout`` seconds (exit status 3).
    """
    from flink_jobs.kafka_io import JsonProducer, TopicReader

    conn = KafkaConnection.from_args(args)
    servers = _need_servers(conn)
    t = _topics(args)
    reader = (TopicReader(servers, t.responses, from_end=True, isolation_level=_isolation(args),
                          **conn.client_kwargs("consumer"))
              if wait else None)
    try:
        producer = JsonProducer(servers, **conn.client_kwargs("producer"))
        producer.send(t.requests, req)
        producer.close()
        if reader is None:
            return None
        return reader.wait_for(lambda r: r.get("requestId") == req["requestId"], args.timeout)
    except TimeoutError:
        raise TimeoutError(f"no response to {req['requestId']!r} within {args.timeout} s") \
            from None
    finally:
        if reader is not None:
            reader.close()


def _request(args: argparse.Namespace) -> int:
    req = build_request(args)
    answer = _send(args, req, args.wait)
    if answer is None:
        print(json.dumps({"sent": req}, indent=2))
        return 0
    print(json.dumps(answer, indent=2))
    return 0 if answer.get("status") == "ok" else 1


def _export(args: argparse.Namespace) -> int:
    """``omldm export --id N``: a Query with ``export``; prints the Create request that
    re-creates the pipeline (``omldm request create --from FILE`` sends it back)."""
    req = {"id": args.id, "request": "Query", "export": True,
           "requestId": args.request_id or f"cli-{uuid.uuid4().hex[:8]}"}
    answer = _send(args, req, wait=True)
    if answer.get("status") != "ok" or "export" not in answer:
        print(json.dumps(answer, indent=2), file=sys.stderr)
        return 1
    print(json.dumps(answer["export"], indent=2))
    return 0


# -- predict (an external predictor on the weights topic) ------------------------------------
def _predict(args: argparse.Namespace) -> int:
    """``omldm predict --pipeline N``: follow the weights topic (:mod:`flink_jobs.follower`)
    and predict records read from stdin (or ``--input FILE``, or ``--from-topic T``) with
    the latest global model; predictions go to stdout (or ``--output-topic``) one JSON
    object per line, records that cannot be predicted to stderr with the reason (and to
    the output topic as ``{"id", "pipeline", "error"}`` objects). Exit 3 when no model
    comes within ``--wait`` seconds."""
    from flink_jobs.follower import ModelFollower, predict_records
    from flink_jobs.kafka_io import JsonProducer, TopicReader

    conn = KafkaConnection.from_args(args)
    servers = _need_servers(conn)
    rows = None  # a CSV input's records, its header checked before any wait
    if args.from_topic is None and (args.format == "csv" or (
            args.format is None and args.input is not None and args.input.lower().endswith(".csv"))):
        reader = iter(_reader(args, args.input or "-", format="csv"))
        first = next(reader, None)
        rows = itertools.chain([] if first is None else [first], reader)
    weights_topic = args.weights_topic or _topics(args).weights
    follower = ModelFollower(servers, weights_topic, **conn.client_kwargs("consumer"))
    producer = JsonProducer(servers, **conn.client_kwargs("producer")) if args.output_topic else None
    source = None
    counts = {"predicted": 0, "failed": 0}
    try:
        follower.wait_for(args.pipeline, timeout=args.wait)

        def emit(batch: list) -> None:
            follower.poll(0)
            model = follower.model(args.pipeline)
            if model is None:  # deleted meanwhile: a tombstone on the weights topic
                raise RuntimeError(f"pipeline {args.pipeline} was deleted (weights tombstone)")
            for out in predict_records(model, batch, args.scores):
                if "error" in out:
                    counts["failed"] += 1
                    print(json.dumps(out), file=sys.stderr, flush=True)
                else:
                    counts["predicted"] += 1
                if producer is not None:
                    producer.send(args.output_topic, out)
                elif "error" not in out:
                    print(json.dumps(out), flush=True)

        if args.from_topic:
            source = TopicReader(servers, args.from_topic, json=False,
                                 from_end=not args.from_beginning,
                                 isolation_level=_isolation(args), **conn.client_kwargs("consumer"))
            deadline = time.monotonic() + args.timeout if args.timeout else None
            while deadline is None or time.monotonic() < deadline:
                values = source.poll(200)
                batch = []
                for v in values:
                    batch.extend(_records_of(v, counts))
                if batch:
                    emit(batch)
                if args.n is not None and counts["predicted"] + counts["failed"] >= args.n:
                    break
        elif rows is not None:
            from flink_jobs.stream_files import BadRow

            batch = []
            for item in rows:  # as omldm stream reads the file; the label is not sent
                if isinstance(item, BadRow):
                    counts["failed"] += 1
                    print(json.dumps({"id": None, "error": str(item)}), file=sys.stderr,
                          flush=True)
                    continue
                item.pop("label", None)
                batch.append(item)
                if len(batch) == PREDICT_BATCH:
                    emit(batch)
                    batch = []
            if batch:
                emit(batch)
        else:
            stream = sys.stdin if args.input in (None, "-") else open(args.input, encoding="utf-8-sig")
            with stream:
                for line in stream:
                    if line.strip():
                        emit(_records_of(line.encode(), counts))
    except KeyboardInterrupt:
        pass
    finally:
        follower.close()
        if source is not None:
            source.close()
        if producer is not None:
            producer.close()
    print(f"omldm predict: {counts['predicted']} predicted, {counts['failed']} refused, model "
          f"version {follower.version(args.pipeline)}", file=sys.stderr)
    return 0


#: records of a CSV file predicted in one call by ``omldm predict``
PREDICT_BATCH = 256


def _records_of(value: bytes, counts: dict) -> list:
    """The records of one input line or Kafka value: a JSON object, or a JSON array of
    them (``--records-per-message``); a value that is not JSON is counted as refused and
    reported on stderr."""
    try:
        got = json.loads(value)
    except (ValueError, UnicodeDecodeError) as exc:
        counts["failed"] += 1
        print(json.dumps({"id": None, "error": f"not JSON: {exc}"}), file=sys.stderr, flush=True)
        return []
    if isinstance(got, list) and got and all(isinstance(r, dict) for r in got):
        return got
    return [got]


# -- stream ---------------------------------------------------------------------------------
def _reader(args: argparse.Namespace, source: str, **kwargs):
    """The :class:`~flink_jobs.stream_files.RecordReader` of ``source`` with the table
    options of :func:`_table_arguments` (``--delimiter tab`` is a tab)."""
    from flink_jobs.stream_files import RecordReader

    features = ([c.strip() for c in args.features.split(",") if c.strip()]
                if args.features else None)
    delimiter = args.delimiter
    if delimiter is not None and delimiter.lower() in ("tab", "\\t"):
        delimiter = "\t"  # a tab is awkward to type
    missing = None if args.missing is None else args.missing.split(",")
    return RecordReader(source, label=args.label, id=args.id, features=features,
                        delimiter=delimiter, missing=missing,
                        categorical=_categorical(args.categorical), **kwargs)


#: one-hot features of a categorical column when ``--categorical`` gives no number
DEFAULT_BUCKETS = 32


def _categorical(text: str | None) -> dict[str, int] | None:
    """``--categorical city,merchant:64`` as ``{"city": 32, "merchant": 64}``.

    Raises
    ------
    UsageError
        For a number of buckets that is not an integer (the reader checks its range).
    """
    if not text:
        return None
    out = {}
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        name, _, k = item.rpartition(":") if ":" in item else (item, "", "")
        try:
            out[name.strip()] = int(k) if k else DEFAULT_BUCKETS
        except ValueError:
            raise UsageError(f"--categorical {item!r}: the buckets after ':' must be an "
                             "integer") from None
    return out


def _table_arguments(p: argparse.ArgumentParser, label: str) -> None:
    """``--label``, ``--id``, ``--features`` and ``--delimiter``: how a CSV or JSON Lines
    file is read (:func:`_reader`); ``label`` ends the label option's help."""
    p.add_argument("--label", metavar="COLUMN", default=None,
                   help=f"label column (default: 'label' if present){label}")
    p.add_argument("--id", metavar="COLUMN", default=None,
                   help="id column (default: 'id' if present, else the row number)")
    p.add_argument("--features", metavar="COLUMNS", default=None,
                   help="comma-separated feature columns (default: every other column that "
                        "is a number in most of the first 100 rows; JSON Lines objects with a "
                        "'features' array keep it)")
    p.add_argument("--delimiter", metavar="CHAR", default=None,
                   help="CSV delimiter, e.g. ';' or 'tab' (default: whichever of , ; tab | "
                        "the header line holds most of)")
    p.add_argument("--missing", metavar="TOKENS", default=None,
                   help="comma-separated CSV cell texts that mean a missing value, e.g. "
                        "',NA,?' (an empty cell, NA or ?): such a feature is written as null, "
                        "as is a JSON Lines null or absent feature, for a pipeline whose first "
                        "preprocessor is StatImputer (default: none; a row with one is "
                        "skipped as bad)")
    p.add_argument("--categorical", metavar="COLUMNS", default=None,
                   help="comma-separated categorical columns, each COLUMN or COLUMN:BUCKETS: "
                        "its values become BUCKETS one-hot features (default "
                        f"{DEFAULT_BUCKETS}) by feature hashing, as scikit-learn's "
                        "FeatureHasher of 'COLUMN=value', after the numeric features; an "
                        "empty or missing cell sets none. Take a few times more buckets than "
                        "the column has values")


def _stream(args: argparse.Namespace) -> int:
    from flink_jobs.kafka_io import JsonProducer
    from flink_jobs.stream_files import write_stream

    conn = KafkaConnection.from_args(args)
    reader = _reader(args, args.source, format=args.format, seed=args.seed, limit=args.limit,
                     first_id=args.first_id)
    servers = _need_servers(conn)
    t = _topics(args)
    topic = {"training": t.training, "forecasting": t.forecasting}
    producer = JsonProducer(servers, **conn.client_kwargs("producer"))

    def said(items):  # the feature columns the reader chose, said once they are known
        told = reader.features is not None
        for item in items:
            if not told and reader.columns is not None:
                told = True
                left = (f"; left out: {', '.join(reader.left_out)} (not numbers in most of "
                        "the first rows; --features names the columns, --categorical the "
                        "categorical ones)") if reader.left_out else ""
                names = [*reader.columns, *(f"{c} ({k} one-hot)"
                                            for c, k in reader.categorical.items())]
                print(f"omldm stream: features: {', '.join(names)}{left}",
                      file=sys.stderr, flush=True)
            yield item

    try:
        summary = write_stream(said(reader), lambda kind, value: producer.send(topic[kind], value),
                               forecast_every=args.forecast_every,
                               records_per_message=args.records_per_message, rate=args.rate,
                               progress=not args.no_progress, total=reader.total,
                               source=args.source)
    finally:
        producer.close()
    for c, k in reader.categorical.items():
        shared = reader.shared[c]
        print(f"omldm stream: {c}: {reader.values[c]} values in {k} buckets" + (
            f", {shared} of them in a bucket of another value (the learner cannot tell them "
            f"apart: take more buckets, --categorical {c}:{4 * k})" if shared else ""),
              file=sys.stderr, flush=True)
    print(json.dumps(summary.to_json()))
    return 0


# -- topics / tail -------------------------------------------------------------------------
def _topics_cmd(args: argparse.Namespace) -> int:
    """The job's seven topics (``--topic-prefix`` applied) with their record counts: end
    minus beginning offset, summed over partitions, or with ``--read`` the records read.
    Offsets count records on a standard Kafka broker; on the embedded local broker a batch
    of records can take one offset (README, "No record is lost"), so there they undercount
    and ``--read`` gives the exact count."""
    from kafka import KafkaConsumer, TopicPartition

    from flink_jobs.kafka_io import TopicReader

    conn = KafkaConnection.from_args(args)
    servers = _need_servers(conn)
    consumer = KafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False,
                             **conn.client_kwargs("consumer"))
    try:
        existing = consumer.topics()
        print(f"{'topic':32s} {'records':>12s}")
        for name in _topics(args).all():
            if name not in existing:
                print(f"{name:32s} {'missing':>12s}")
                continue
            if args.read:
                reader = TopicReader(servers, name, json=False, isolation_level=_isolation(args),
                                     **conn.client_kwargs("consumer"))
                n = sum(1 for _ in reader.drain(idle_ms=args.idle_ms))
                reader.close()
            else:
                parts = [TopicPartition(name, p)
                         for p in sorted(consumer.partitions_for_topic(name) or ())]
                begin, end = consumer.beginning_offsets(parts), consumer.end_offsets(parts)
                n = sum(end[tp] - begin[tp] for tp in parts)
            print(f"{name:32s} {n:12,d}")
    finally:
        consumer.close()
    return 0


def _show(value: bytes) -> str:
    from middleware import codec

    prefix = ""
    if codec.is_sibling_frame(value):  # spoke→spoke on psMessages: sibling frame
        head, value = codec.unframe_sibling(value)
        prefix = (f"[spoke {head.src} → spoke {head.dst} incarnation {head.incarnation:x} "
                  f"base {head.base} ack {head.ack}] ")
        if not value:
            return (f"{prefix}{codec.SiblingOp(head.op).name.lower()} "
                    f"network={head.network} nonce={head.nonce:x}")
    elif codec.is_frame(value):  # hub→spoke on psMessages: incarnation frame + envelope
        head, value = codec.unframe(value)
        prefix = f"[hub {head.hub} incarnation {head.incarnation:x} base {head.base}] "
        if not value:
            return (f"{prefix}resync answer network={head.network} → spoke {head.spoke} "
                    f"nonce={head.nonce:x}")
    if codec.is_envelope(value):
        try:
            e = codec.decode(value)
            return (f"{prefix}envelope network={e.network} {'spoke' if e.src_side == 0 else 'hub'} "
                    f"{e.src_index} → {e.dst_index} seq={e.seq} {e.kind.name} "
                    f"{e.method or f'to call {e.call_id}'} "
                    f"({len(value)} bytes)")
        except Exception as exc:  # show what it is, never crash the tail
            return f"malformed envelope ({len(value)} bytes): {exc}"
    return value.decode("utf-8", errors="replace")


def _tail(args: argparse.Namespace) -> int:
    from flink_jobs.kafka_io import TopicReader

    conn = KafkaConnection.from_args(args)
    servers = _need_servers(conn)
    topic = getattr(_topics(args), _TOPIC_FIELDS.get(args.topic, ""), None) or args.topic
    reader = TopicReader(servers, topic, json=False, from_end=not args.from_beginning,
                         isolation_level=_isolation(args), **conn.client_kwargs("consumer"))
    shown = 0
    deadline = time.monotonic() + args.timeout if args.timeout else None
    try:
        while args.n is None or shown < args.n:
            for value in reader.poll(200):
                print(_show(value), flush=True)
                shown += 1
                if args.n is not None and shown >= args.n:
                    break
            if deadline and time.monotonic() > deadline:
                break
    except KeyboardInterrupt:
        pass
    finally:
        reader.close()
    return 0


_TOPIC_FIELDS = {"training": "training", "forecasting": "forecasting", "requests": "requests",
                 "psMessages": "ps_messages", "predictions": "predictions",
                 "responses": "responses", "deadLetters": "dead_letters"}


# -- list / version ------------------------------------------------------------------------
def version() -> str:
    """``omldm X (PyFlink Y, Python Z)``: the installed distributions' versions."""
    def of(dist: str) -> str:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    return (f"omldm {of('omldm')} (PyFlink {of('apache-flink')}, Python "
            f"{sys.version.split()[0]})")


def _text(value: Any) -> str:
    return "none" if value is None else json.dumps(value)


def _component_lines(entry: dict) -> list[str]:
    names = entry["names"]
    also = f" (also {', '.join(names[1:])})" if len(names) > 1 else ""
    lines = [f"{names[0]}{also}: {entry['summary']}"]
    if not entry["declared"]:
        lines.append("  hyperparameters not declared (the class's constructor arguments)")
    if not entry["hyperParameters"]:
        lines.append("  no hyperparameters")
    for h in entry["hyperParameters"]:
        lines.append(f"  {h['name']} ({h['type']}, default {_text(h['default'])}; "
                     f"{h['allowed']}): {h['description']}")
    return lines


def _protocol_entries() -> list[dict]:
    """Every protocol declaration with its names (common parameters first), JSON-safe."""
    from learning.protocols import PROTOCOLS
    from learning.protocols.parameters import TRAINING_PARAMETERS, declared
    from learning.hyperparameters import summary

    def params(decl) -> list[dict]:
        return [{"name": p.name, "type": p.type.__name__,
                 "default": None if p.required else p.default, "required": p.required,
                 "allowed": "; ".join([p.allowed(), *(r.text for r in decl.rules
                                                      if r.params[-1] == p.name)]),
                 "description": p.description} for p in decl.params]

    out = [{"names": [], "summary": "the trainingConfiguration keys of every protocol",
            "reference": TRAINING_PARAMETERS.reference, "term": "",
            "parameters": params(TRAINING_PARAMETERS)}]
    groups: list[tuple[list[str], Any]] = []
    for name, decl in declared().items():
        for names, d in groups:
            if d is decl:
                names.append(name)
                break
        else:
            groups.append(([name], decl))
    for names, decl in groups:
        spoke = PROTOCOLS[names[0]][0] if names[0] in PROTOCOLS else None
        out.append({"names": names, "summary": summary(spoke) if spoke else "",
                    "reference": decl.reference, "term": decl.term,
                    "parameters": params(decl)})
    return out


def _protocol_lines(entry: dict) -> list[str]:
    if entry["names"]:
        names = entry["names"]
        term = f" ({entry['term']})" if entry["term"] and entry["term"] != names[0] else ""
        also = f" (also {', '.join(names[1:])})" if len(names) > 1 else ""
        lines = [f"{names[0]}{term}{also}: {entry['summary']} [{entry['reference']}]"]
    else:
        lines = [f"every protocol: {entry['summary']} [{entry['reference']}]"]
    if not entry["parameters"]:
        lines.append("  no parameters of its own")
    for p in entry["parameters"]:
        default = "required" if p["required"] else f"default {_text(p['default'])}"
        lines.append(f"  {p['name']} ({p['type']}, {default}; {p['allowed']}): "
                     f"{p['description']}")
    return lines


def _list(args: argparse.Namespace) -> int:
    from learning.registry import LEARNERS, PREPROCESSORS, catalogue

    for module in args.protocol_module or ():  # user protocols, learners, preprocessors
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as e:
            raise UsageError(f"--protocol-module {module}: {e}") from None
    if args.what == "protocols":
        entries, lines = _protocol_entries(), _protocol_lines
    else:
        table = LEARNERS if args.what == "learners" else PREPROCESSORS
        entries, lines = catalogue(table), _component_lines
    if args.json:
        print(json.dumps(entries, indent=2))
    else:
        print("\n\n".join("\n".join(lines(e)) for e in entries))
    return 0


# -- parser --------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    """A parser whose usage errors are one line on stderr (exit status 2)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's help ends with its default, unless the help already names it; an
    unset default shows as ``none``, a flag's as ``off``."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if ("default" in text.lower() or not action.option_strings
                or action.default is argparse.SUPPRESS):
            return text
        if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            return f"{text} (default: {'on' if action.default else 'off'})"
        if action.default is None or action.default == []:
            return f"{text} (default: none)"
        if action.default == "":
            return f"{text} (default: empty)"
        return f"{text} (default: %(default)s)"


class _TopHelp(_Help, argparse.RawDescriptionHelpFormatter):
    """The top-level help: the epilog's lines (the exit codes) kept as written."""


#: help of the connection flags that :meth:`KafkaConnection.add_arguments` leaves without
#: one (a secret's default is never shown)
_CONNECTION_HELP = {
    "security_protocol": "Kafka security.protocol ($OMLDM_SECURITY_PROTOCOL)",
    "sasl_mechanism": "Kafka sasl.mechanism ($OMLDM_SASL_MECHANISM)",
    "sasl_username": "SASL user name ($OMLDM_SASL_USERNAME)",
    "sasl_password": "SASL password; better given as $OMLDM_SASL_PASSWORD (default: that "
                     "variable, never shown)",
    "ssl_cafile": "PEM file of the CA certificates to trust ($OMLDM_SSL_CAFILE)",
}


def _finish(parser: argparse.ArgumentParser) -> None:
    """Give every subcommand's parser the help formatter and the connection flags their
    help (walks the whole tree, experiment subcommands included)."""
    for action in parser._actions:
        if action.help is None and action.dest in _CONNECTION_HELP:
            action.help = _CONNECTION_HELP[action.dest]
        elif action.dest == "sasl_password":
            action.help = _CONNECTION_HELP["sasl_password"]
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                sub.formatter_class = _Help
                _finish(sub)


def _epilog() -> str:
    codes = "\n".join(f"  {code}  {meaning}" for code, meaning in EXIT_CODES.items())
    return ("exit status:\n" + codes + "\nAn error is one line 'omldm: ...' on stderr; -v "
            "adds its traceback.\n'omldm COMMAND --help' describes a command; 'omldm list "
            "learners|preprocessors|protocols' every hyperparameter.")


def _parser(serve_settings: dict | None = None) -> argparse.ArgumentParser:
    """The ``omldm`` argument parser; ``serve_settings`` (a ``--config`` file's, from
    :func:`flink_jobs.config_file.load_config_file`) become ``omldm serve``'s defaults."""
    parser = _Parser(prog="omldm", description="Distributed online machine learning on "
                     "Apache Flink.", epilog=_epilog(), formatter_class=_TopHelp)
    parser.add_argument("--version", action="version", version=version())
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log at INFO level; an error prints its traceback")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str, fn, topics: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        KafkaConnection.add_arguments(p)
        if topics:
            p.add_argument("--topic-prefix", default=os.environ.get("OMLDM_TOPIC_PREFIX", ""),
                           help="prefix of every topic name ($OMLDM_TOPIC_PREFIX)")
        p.set_defaults(fn=fn)
        return p

    def batching(p: argparse.ArgumentParser) -> None:
        p.add_argument("--max-batch-delay-ms", type=int, default=JobConfig.max_batch_delay_ms,
                       help="data records bound for one spoke cross into Python together, "
                            "batched in Java for at most this many ms (default "
                            f"{JobConfig.max_batch_delay_ms}; 0: one record per crossing)")
        p.add_argument("--max-batch-records", type=int, default=JobConfig.max_batch_records,
                       help="records per batch at most (default "
                            f"{JobConfig.max_batch_records}; a spoke answers its hubs between "
                            "batches)")

    def sharding(p: argparse.ArgumentParser) -> None:
        add_sharding_arguments(p)

    def committed(p: argparse.ArgumentParser) -> None:
        p.add_argument("--read-committed", action="store_true",
                       default=os.environ.get("OMLDM_READ_COMMITTED", "") not in ("", "0"),
                       help="read with isolation.level=read_committed: of a job run with "
                            "--exactly-once-outputs, only the predictions, responses and "
                            "deadLetters its checkpoints committed, each once committed "
                            "($OMLDM_READ_COMMITTED=1; default: everything as soon as it "
                            "is written)")

    def exactly_once(p: argparse.ArgumentParser) -> None:
        p.add_argument("--exactly-once-outputs", action="store_true",
                       help="write predictions, responses and deadLetters in Kafka transactions "
                            "committed at checkpoints (read them with isolation.level="
                            "read_committed); needs --checkpoint-interval-ms")

    demo = command("demo", "run the Shuttle demo end to end on a local MiniCluster", _demo, False)
    demo.add_argument("--spokes", type=int, default=2, help="spoke parallelism (default 2)")
    add_spoke_parallelism_argument(demo, local=True)
    demo.add_argument("--hubs", type=int, default=1, help="hub parallelism (default 1)")
    demo.add_argument("--mode", choices=("thread", "process"), default="thread",
                      help="PyFlink python.execution-mode (default thread)")
    demo.add_argument("--limit", type=int, default=None, help="use only the first N records")
    demo.add_argument("--records-per-message", type=int, default=1,
                      help="records per Kafka message (a JSON array when > 1)")
    demo.add_argument("--mini-batch-size", type=int, default=32,
                      help="trainingConfiguration.miniBatchSize of the demo's pipeline: "
                           "records a spoke fits at once")
    demo.add_argument("--timeout", type=float, default=300.0,
                      help="seconds to wait for every record to be counted (exit 3 past it)")
    demo.add_argument("--no-progress", action="store_true",
                      help="no progress lines while waiting")
    demo.add_argument("--checkpoint-interval-ms", type=int, default=0,
                      help="checkpoint every N ms (default 0: off)")
    exactly_once(demo)
    batching(demo)
    sharding(demo)

    serve = command("serve", "run the job as a service on a local MiniCluster", _serve)
    serve.add_argument("--embedded-broker", nargs="?", const="auto",
                       choices=("auto", *BROKER_ENGINES), metavar="ENGINE",
                       help="start an embedded broker first (loopback): tansu, or noida, "
                            "whose read_committed readers skip aborted transactions (it saves "
                            "its whole state to disk as it changes: for tests and demos, not "
                            "volume); without ENGINE (auto) noida with --exactly-once-outputs, "
                            "else tansu")
    serve.add_argument("--port", type=int, default=None, help="embedded broker port (default: free)")
    serve.add_argument("--spokes", type=int, default=2, help="spoke parallelism")
    add_spoke_parallelism_argument(serve, local=True)
    serve.add_argument("--hubs", type=int, default=1, help="hub parallelism")
    serve.add_argument("--mode", choices=("thread", "process"), default="thread",
                       help="PyFlink python.execution-mode (process for PyTorch and river "
                            "learners)")
    serve.add_argument("--progress-interval", type=float, default=5.0,
                       help="seconds between per-pipeline progress lines")
    serve.add_argument("--protocol-module", action="append", metavar="MODULE",
                       help="a module registering user protocols (repeatable)")
    serve.add_argument("--checkpoint-interval-ms", type=int, default=0,
                       help="checkpoint every N ms (default 0: off)")
    serve.add_argument("--prediction-scores", action="store_true",
                       help="each prediction also carries the class probabilities it was made "
                            "with, where the learner has them (MLP, CNN, Hoeffding trees)")
    serve.add_argument("--prediction-arrays", action="store_true",
                       help="each record on the predictions topic is a JSON array of "
                            "predictions (a spoke's of one crossing) instead of one: fewer "
                            "records for the job and the broker")
    exactly_once(serve)
    batching(serve)
    sharding(serve)
    add_weights_arguments(serve)
    serve.add_argument("--config", metavar="FILE",
                       help="a YAML or TOML file of job settings, every JobConfig field "
                            "(deploy/omldm.example.yaml); flags given here win over it")
    apply_to_parser(serve, serve_settings or {})

    req = command("request", "send a request; --wait prints its response", _request)
    req.add_argument("kind", choices=("create", "update", "delete", "query"),
                     help="the request: create, update, delete or query")
    req.add_argument("--id", type=int, help="pipeline id")
    req.add_argument("--file", "--from", dest="file", metavar="FILE",
                     help="a JSON request to start from ('-' reads stdin), e.g. what omldm "
                          "export printed: a Create that warm-starts from the exported model "
                          "(--id gives it another pipeline id)")
    req.add_argument("--request-id", help="the requestId echoed in the response (default: "
                     "generated)")
    req.add_argument("--learner", help="learner name, e.g. PA")
    req.add_argument("--hyper", action="append", metavar="NAME=VALUE",
                     help="learner hyperparameter (repeatable; VALUE is JSON or a string)")
    req.add_argument("--preprocessor", action="append", metavar="NAME",
                     help="preprocessor, in order (repeatable)")
    req.add_argument("--protocol", help="trainingConfiguration.protocol, e.g. Asynchronous, "
                     "SSP (omldm list protocols)")
    req.add_argument("--mini-batch-size", type=int,
                     help="trainingConfiguration.miniBatchSize: records a spoke fits at once")
    req.add_argument("--mini-batches", type=int,
                     help="trainingConfiguration.miniBatches: mini-batches between "
                          "synchronizations")
    req.add_argument("--hub-parallelism", type=int,
                     help="trainingConfiguration.hubParallelism: hubs the model is sharded "
                          "over")
    req.add_argument("--config", action="append", metavar="KEY=VALUE",
                     help="other trainingConfiguration keys (repeatable)")
    req.add_argument("--wait", action="store_true", help="print the response; exit 1 on an "
                     "error response, 3 on a timeout")
    req.add_argument("--timeout", type=float, default=30.0,
                     help="--wait: seconds to wait for the response (exit 3 past it)")
    committed(req)

    export = command("export", "print the Create request that re-creates a pipeline from "
                     "its global model (learner parameters, every shard; preprocessor "
                     "statistics; version); omldm request create --from FILE sends it", _export)
    export.add_argument("--id", type=int, required=True, help="pipeline id")
    export.add_argument("--request-id", help="the requestId of the Query (default: generated)")
    export.add_argument("--timeout", type=float, default=30.0,
                        help="seconds to wait for the answer (exit 3 past it)")
    committed(export)

    stream = command("stream", "write records to training (and every N-th one, without its "
                     "label, to forecasting): a CSV / JSON Lines file or stdin, a river "
                     "dataset or generator, or a bundled data set", _stream)
    stream.add_argument("source", metavar="SOURCE",
                        help="FILE.csv (with a header), FILE.jsonl (one JSON object per line), "
                             "'-' (stdin), river:NAME (river.datasets without download, e.g. "
                             "river:Phishing, river:Bananas, river:synth.Agrawal, "
                             "river:synth.SEA) or shuttle / digits / agrawal-drift / "
                             "sea-drift / sine-drift (river's seeded generators with one "
                             "concept drift, around 2/5 of 20,000 records or of --limit)")
    stream.add_argument("--format", choices=("csv", "jsonl"), default=None,
                        help="input format (default: by the file suffix; csv for stdin)")
    _table_arguments(stream, ", else unlabelled records")
    stream.add_argument("--forecast-every", "--every", dest="forecast_every", type=int,
                        default=5, metavar="N",
                        help="every N-th record goes to forecasting without its label "
                             "(default 5; 0: none)")
    stream.add_argument("--records-per-message", type=int, default=1, metavar="K",
                        help="records per Kafka message, a JSON array when > 1 (default 1)")
    stream.add_argument("--rate", type=float, default=None, metavar="R",
                        help="records per second, a live replay (default: as fast as possible)")
    stream.add_argument("--limit", type=int, default=None, metavar="N",
                        help="stop after N records (default: all; 10000 for an endless "
                             "river generator)")
    stream.add_argument("--seed", type=int, default=None,
                        help="seed of a river generator or a drift stream (default: none, the "
                             "generator's own; 42 for a NAME-drift)")
    stream.add_argument("--first-id", type=int, default=0,
                        help="id of the first row when ids are row numbers (default 0)")
    stream.add_argument("--no-progress", action="store_true",
                        help="no progress bar on stderr (default: shown)")

    predict = command("predict", "predict records with the latest global model of a pipeline, "
                      "read from the weights topic: an external predictor (papers/003 Fig. 1)",
                      _predict)
    predict.add_argument("--pipeline", type=int, required=True, help="the pipeline id")
    predict.add_argument("--input", metavar="FILE", default=None,
                         help="JSON lines of records {\"id\", \"features\"}, or a CSV file "
                              "read as omldm stream reads it (FILE.csv or --format csv; its "
                              "label column is left out) (default '-': stdin)")
    predict.add_argument("--format", choices=("csv", "jsonl"), default=None,
                         help="--input's format (default: csv for FILE.csv, else JSON lines)")
    _table_arguments(predict, "; a CSV's is left out")
    predict.add_argument("--from-topic", metavar="TOPIC", default=None,
                         help="read the records from this topic instead (e.g. forecasting)")
    predict.add_argument("--from-beginning", action="store_true",
                         help="--from-topic: start at its first record (default: its end)")
    predict.add_argument("--output-topic", metavar="TOPIC", default=None,
                         help="write the predictions to this topic (default: stdout)")
    predict.add_argument("--weights-topic", metavar="NAME", default=None,
                         help="the weights topic (default: weights, with the topic prefix)")
    predict.add_argument("--scores", action="store_true",
                         help="add classes and probabilities where the learner has them")
    predict.add_argument("--wait", type=float, default=60.0,
                         help="seconds to wait for the pipeline's first model (exit 3 past it)")
    predict.add_argument("--timeout", type=float, default=None,
                         help="--from-topic: stop after this many seconds (default: never)")
    predict.add_argument("-n", type=int, default=None,
                         help="--from-topic: stop after N records")
    committed(predict)

    topics = command("topics", "list the job's topics (--topic-prefix applied) with their "
                     "record counts, from offsets (approximate on the embedded local broker, "
                     "which can give a batch one offset; --read counts exactly)", _topics_cmd)
    topics.add_argument("--read", action="store_true",
                        help="count by reading every record (exact, slower)")
    topics.add_argument("--idle-ms", type=int, default=500,
                        help="--read: a topic is counted when a read stays empty this long")
    committed(topics)

    tail = command("tail", "follow a topic (predictions, responses, ...)", _tail)
    tail.add_argument("topic", help="predictions, responses, deadLetters, ... or any topic name")
    tail.add_argument("--from-beginning", action="store_true",
                      help="start at the topic's first record instead of its end")
    tail.add_argument("-n", type=int, default=None, help="stop after N records")
    tail.add_argument("--timeout", type=float, default=None, help="stop after this many seconds")
    committed(tail)

    from flink_jobs.experiment import add_parser as add_experiment_parser

    add_experiment_parser(sub)

    setup = sub.add_parser("setup", help="fetch and check the connector jars and the Shuttle file",
                           description="fetch and check the connector jars and the Shuttle file")
    setup.set_defaults(fn=_setup)

    listing = sub.add_parser("list", help="list the learners, preprocessors or protocols with "
                             "every hyperparameter: type, default, allowed values, meaning",
                             description="list the learners, preprocessors or protocols with "
                             "every hyperparameter: type, default, allowed values, meaning "
                             "(the declarations requests are checked against)")
    listing.add_argument("what", choices=("learners", "preprocessors", "protocols"),
                         help="what to list")
    listing.add_argument("--json", action="store_true", help="print JSON instead of text")
    listing.add_argument("--protocol-module", action="append", metavar="MODULE",
                         help="import this module first, to list the protocols, learners "
                              "and preprocessors it registers (repeatable)")
    listing.set_defaults(fn=_list)
    _finish(parser)
    return parser


def _exit_code(exc: BaseException) -> int:
    """The exit status of a command that raised ``exc`` (:data:`EXIT_CODES`)."""
    if isinstance(exc, TimeoutError) or type(exc).__name__ == "KafkaTimeoutError":
        return 3
    if isinstance(exc, (UsageError, ValueError)):  # bad settings and the like
        return 2
    return 1


def main(argv: list[str] | None = None) -> int:
    """Run one ``omldm`` command line; the exit status (:data:`EXIT_CODES`).

    Every error ends here: one line ``omldm: ...`` on stderr (with ``-v``, its traceback
    before it), never a traceback alone.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    commands = [a for a in argv if not a.startswith("-")]
    try:  # omldm serve --config FILE: the file's settings become serve's defaults
        settings = read_config_argument(argv)[1] if commands[:1] == ["serve"] else {}
    except ValueError as exc:
        print(f"omldm: {exc}", file=sys.stderr)
        return 2
    try:
        args = _parser(settings).parse_args(argv)
        args.config_settings = settings
    except SystemExit as e:  # --help or --version (0), or a usage error, already printed
        return e.code if isinstance(e.code, int) else 2
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return args.fn(args)
    except KeyboardInterrupt:
        print("omldm: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (omldm list ... | head): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:
        code = _exit_code(exc)
        if args.verbose:
            traceback.print_exception(exc, file=sys.stderr)
        text = " | ".join(line.strip() for line in str(exc).strip().splitlines()) or repr(exc)
        if code == 1 and type(exc).__name__ not in text:
            text = f"{type(exc).__name__}: {text}"
        hint = "" if args.verbose or code != 1 else " (-v shows the traceback)"
        print(f"omldm: {text}{hint}", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
