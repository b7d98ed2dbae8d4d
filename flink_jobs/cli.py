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

Connection options (``--bootstrap-servers``, SASL/TLS) are shared by every subcommand and
default to the ``OMLDM_*`` environment variables (:mod:`flink_jobs.connection`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import signal
import sys
import time
import uuid
from typing import Any

import orjson

from flink_jobs.config import JobConfig, Topics, add_sharding_arguments, sharding_settings
from flink_jobs.connection import KafkaConnection

__all__ = ["main", "build_request"]

log = logging.getLogger("omldm")


def _topics(args: argparse.Namespace) -> Topics:
    prefix = args.topic_prefix or ""
    return Topics(**{f: prefix + v for f, v in Topics().__dict__.items()})


def _need_servers(conn: KafkaConnection) -> str:
    if not conn.bootstrap_servers:
        raise SystemExit("omldm: --bootstrap-servers (or $OMLDM_BOOTSTRAP_SERVERS) is required")
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
                       max_batch_delay_ms=args.max_batch_delay_ms, **sharding_settings(args))
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
    from deploy.broker import LocalBroker
    from flink_jobs.session import Session, local_config

    conn = KafkaConnection.from_args(args)
    broker = None
    if args.embedded_broker:
        broker = LocalBroker(port=args.port).start()
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
                       max_batch_delay_ms=args.max_batch_delay_ms, **sharding_settings(args))
    session = Session(cfg, "omldm-serve")
    try:
        session.start()
        t = cfg.topics
        print(f"omldm serving: bootstrap servers {servers}", flush=True)
        print("topics: " + ", ".join(f"{k}={v}" for k, v in t.__dict__.items()), flush=True)
        print(f"job: {cfg.spokes} spokes, {cfg.hubs} hub(s), {cfg.execution_mode} mode; "
              f"Ctrl-C or SIGTERM stops it", flush=True)
        pipelines: dict[int, dict] = {}
        next_report = time.monotonic() + args.progress_interval
        while True:
            for r in session.responses.poll(200):
                rid = str(r.get("requestId", ""))
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
                    print(f"pipeline {r['id']}: fitted {r['fitted']:,} ({rate:,.0f}/s), predicted "
                          f"{r['predicted']:,}, rejected {r['rejected']:,}, prequential "
                          f"{'-' if acc is None else f'{acc:.4f}'}, mean loss "
                          f"{r['meanLoss'] if r['meanLoss'] is None else round(r['meanLoss'], 5)}",
                          flush=True)
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
            raise SystemExit(f"omldm: {flag} takes NAME=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        out[k] = _value(v)
    return out


def build_request(args: argparse.Namespace) -> dict:
    """The request a ``omldm request ...`` invocation describes: a JSON file (or ``-`` for
    stdin) as the base, then the flags on top."""
    req: dict = {}
    if args.file:
        text = sys.stdin.read() if args.file == "-" else open(args.file, encoding="utf-8").read()
        req = json.loads(text)
        if not isinstance(req, dict):
            raise SystemExit("omldm: the request file must hold a JSON object")
    req["request"] = args.kind.capitalize()
    if args.id is not None:
        req["id"] = args.id
    if "id" not in req:
        raise SystemExit("omldm: --id (or an id in the file) is required")
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


def _request(args: argparse.Namespace) -> int:
    from flink_jobs.kafka_io import JsonProducer, TopicReader

    conn = KafkaConnection.from_args(args)
    servers = _need_servers(conn)
    req = build_request(args)
    t = _topics(args)
    reader = (TopicReader(servers, t.responses, from_end=True, **conn.client_kwargs())
              if args.wait else None)
    producer = JsonProducer(servers, **conn.client_kwargs())
    producer.send(t.requests, req)
    producer.close()
    if reader is None:
        print(json.dumps({"sent": req}, indent=2))
        return 0
    try:
        answer = reader.wait_for(lambda r: r.get("requestId") == req["requestId"], args.timeout)
    except TimeoutError:
        print(f"omldm: no response to {req['requestId']!r} within {args.timeout} s", file=sys.stderr)
        return 3
    finally:
        reader.close()
    print(json.dumps(answer, indent=2))
    return 0 if answer.get("status") == "ok" else 1


# -- stream ---------------------------------------------------------------------------------
def _stream(args: argparse.Namespace) -> int:
    from flink_jobs.kafka_io import JsonProducer
    from flink_jobs.stream_files import RecordReader, write_stream

    conn = KafkaConnection.from_args(args)
    features = [c.strip() for c in args.features.split(",") if c.strip()] if args.features else None
    reader = RecordReader(args.source, format=args.format, label=args.label, id=args.id,
                          features=features, seed=args.seed, limit=args.limit,
                          first_id=args.first_id)
    servers = _need_servers(conn)
    t = _topics(args)
    topic = {"training": t.training, "forecasting": t.forecasting}
    producer = JsonProducer(servers, **conn.client_kwargs("producer"))
    try:
        summary = write_stream(reader, lambda kind, value: producer.send(topic[kind], value),
                               forecast_every=args.forecast_every,
                               records_per_message=args.records_per_message, rate=args.rate,
                               progress=not args.no_progress, total=reader.total,
                               source=args.source)
    finally:
        producer.close()
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
                reader = TopicReader(servers, name, json=False, **conn.client_kwargs())
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
    if codec.is_frame(value):  # hub→spoke on psMessages: incarnation frame + envelope
        head, value = codec.unframe(value)
        prefix = f"[hub {head.hub} incarnation {head.incarnation:x} base {head.base}] "
        if not value:
            return (f"{prefix}resync answer network={head.network} → spoke {head.spoke} "
                    f"nonce={head.nonce:x}")
    if codec.is_envelope(value):
        try:
            e = codec.decode(value)
            return (f"{prefix}envelope network={e.network} {'spoke' if e.src_side == 0 else 'hub'} "
                    f"{e.src_index} → {e.dst_index} seq={e.seq} {e.kind.name} {e.method} "
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
                         **conn.client_kwargs())
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


# -- parser --------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="omldm", description="Distributed online machine "
                                     "learning on Apache Flink.")
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)

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

    def sharding(p: argparse.ArgumentParser) -> None:
        add_sharding_arguments(p)

    def exactly_once(p: argparse.ArgumentParser) -> None:
        p.add_argument("--exactly-once-outputs", action="store_true",
                       help="write predictions, responses and deadLetters in Kafka transactions "
                            "committed at checkpoints (read them with isolation.level="
                            "read_committed); needs --checkpoint-interval-ms")

    demo = command("demo", "run the Shuttle demo end to end on a local MiniCluster", _demo, False)
    demo.add_argument("--spokes", type=int, default=2, help="spoke parallelism (default 2)")
    demo.add_argument("--hubs", type=int, default=1, help="hub parallelism (default 1)")
    demo.add_argument("--mode", choices=("thread", "process"), default="thread",
                      help="PyFlink python.execution-mode (default thread)")
    demo.add_argument("--limit", type=int, default=None, help="use only the first N records")
    demo.add_argument("--records-per-message", type=int, default=1,
                      help="records per Kafka message (a JSON array when > 1)")
    demo.add_argument("--mini-batch-size", type=int, default=32)
    demo.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the counts")
    demo.add_argument("--no-progress", action="store_true")
    demo.add_argument("--checkpoint-interval-ms", type=int, default=0,
                      help="checkpoint every N ms (default 0: off)")
    exactly_once(demo)
    batching(demo)
    sharding(demo)

    serve = command("serve", "run the job as a service on a local MiniCluster", _serve)
    serve.add_argument("--embedded-broker", action="store_true",
                       help="start the local broker first (loopback)")
    serve.add_argument("--port", type=int, default=None, help="embedded broker port (default: free)")
    serve.add_argument("--spokes", type=int, default=2)
    serve.add_argument("--hubs", type=int, default=1)
    serve.add_argument("--mode", choices=("thread", "process"), default="thread")
    serve.add_argument("--progress-interval", type=float, default=5.0,
                       help="seconds between per-pipeline progress lines")
    serve.add_argument("--protocol-module", action="append",
                       help="a module registering user protocols (repeatable)")
    serve.add_argument("--checkpoint-interval-ms", type=int, default=0,
                       help="checkpoint every N ms (default 0: off)")
    exactly_once(serve)
    batching(serve)
    sharding(serve)

    req = command("request", "send a request; --wait prints its response", _request)
    req.add_argument("kind", choices=("create", "update", "delete", "query"))
    req.add_argument("--id", type=int, help="pipeline id")
    req.add_argument("--file", help="a JSON request to start from ('-' reads stdin)")
    req.add_argument("--request-id", help="default: generated")
    req.add_argument("--learner", help="learner name, e.g. PA")
    req.add_argument("--hyper", action="append", metavar="NAME=VALUE",
                     help="learner hyperparameter (repeatable; VALUE is JSON or a string)")
    req.add_argument("--preprocessor", action="append", metavar="NAME",
                     help="preprocessor, in order (repeatable)")
    req.add_argument("--protocol")
    req.add_argument("--mini-batch-size", type=int)
    req.add_argument("--mini-batches", type=int)
    req.add_argument("--hub-parallelism", type=int)
    req.add_argument("--config", action="append", metavar="KEY=VALUE",
                     help="other trainingConfiguration keys (repeatable)")
    req.add_argument("--wait", action="store_true", help="print the response; exit 1 on an "
                     "error response, 3 on a timeout")
    req.add_argument("--timeout", type=float, default=30.0)

    stream = command("stream", "write records to training (and every N-th one, without its "
                     "label, to forecasting): a CSV / JSON Lines file or stdin, a river "
                     "dataset or generator, or a bundled data set", _stream)
    stream.add_argument("source", metavar="SOURCE",
                        help="FILE.csv (with a header), FILE.jsonl (one JSON object per line), "
                             "'-' (stdin), river:NAME (river.datasets without download, e.g. "
                             "river:Phishing, river:Bananas, river:synth.Agrawal, "
                             "river:synth.SEA) or shuttle / digits")
    stream.add_argument("--format", choices=("csv", "jsonl"), default=None,
                        help="input format (default: by the file suffix; csv for stdin)")
    stream.add_argument("--label", metavar="COLUMN", default=None,
                        help="label column (default: 'label' if present, else unlabelled)")
    stream.add_argument("--id", metavar="COLUMN", default=None,
                        help="id column (default: the row number, from --first-id)")
    stream.add_argument("--features", metavar="COLUMNS", default=None,
                        help="comma-separated feature columns (default: every other column "
                             "numeric in the first row)")
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
                        help="seed of a river generator (default: none, the generator's own)")
    stream.add_argument("--first-id", type=int, default=0,
                        help="id of the first row when ids are row numbers (default 0)")
    stream.add_argument("--no-progress", action="store_true",
                        help="no progress bar on stderr (default: shown)")

    topics = command("topics", "list the job's topics (--topic-prefix applied) with their "
                     "record counts, from offsets (approximate on the embedded local broker, "
                     "which can give a batch one offset; --read counts exactly)", _topics_cmd)
    topics.add_argument("--read", action="store_true",
                        help="count by reading every record (exact, slower)")
    topics.add_argument("--idle-ms", type=int, default=500,
                        help="--read: a topic is counted when a read stays empty this long")

    tail = command("tail", "follow a topic (predictions, responses, ...)", _tail)
    tail.add_argument("topic", help="predictions, responses, deadLetters, ... or any topic name")
    tail.add_argument("--from-beginning", action="store_true")
    tail.add_argument("-n", type=int, default=None, help="stop after N records")
    tail.add_argument("--timeout", type=float, default=None, help="stop after this many seconds")

    from flink_jobs.experiment import add_parser as add_experiment_parser

    add_experiment_parser(sub)

    setup = sub.add_parser("setup", help="fetch and check the connector jars and the Shuttle file")
    setup.set_defaults(fn=_setup)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return args.fn(args)
    except ValueError as exc:  # bad connection settings and the like
        print(f"omldm: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
