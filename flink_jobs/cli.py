"""The ``omldm`` command line (also ``python -m flink_jobs``)."""

from __future__ import annotations

import argparse
import logging
import sys

import orjson

__all__ = ["main"]


def _demo(args: argparse.Namespace) -> int:
    from flink_jobs.demo import run_demo

    summary = run_demo(bootstrap_servers=args.bootstrap_servers, spokes=args.spokes,
                       hubs=args.hubs, execution_mode=args.mode, limit=args.limit,
                       records_per_message=args.records_per_message,
                       mini_batch_size=args.mini_batch_size, timeout=args.timeout,
                       progress=not args.no_progress)
    print(orjson.dumps(summary).decode(), flush=True)
    return 0


def _setup(args: argparse.Namespace) -> int:
    from deploy.assets import fetch_all

    for p in fetch_all():
        print(p)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="omldm", description="Distributed online machine "
                                     "learning on Apache Flink.")
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="run the Shuttle demo end to end on a local MiniCluster")
    demo.add_argument("--bootstrap-servers", default=None,
                      help="a Kafka to use instead of starting the local broker")
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
    demo.set_defaults(fn=_demo)

    setup = sub.add_parser("setup", help="fetch and check the connector jars and the Shuttle file")
    setup.set_defaults(fn=_setup)

    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
