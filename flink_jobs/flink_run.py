"""Entry point for ``flink run -py`` on a session cluster (standalone, Kubernetes, YARN)::

    flink run -d -pyexec .venv/bin/python -pyclientexec .venv/bin/python \\
        -C file:///…/flink-connector-kafka.jar -C file:///…/kafka-clients.jar \\
        -py flink_jobs/flink_run.py --bootstrap-servers HOST:PORT --spokes 2 --hubs 1

Checkpointing is on by default (10 s, exactly-once barriers; storage from
``--checkpoint-dir`` or the cluster's ``execution.checkpointing.dir``) and spokes run in
process mode (separate Python workers, whose state writes are cached until the bundle's
end). Resume from a savepoint with ``flink run -s PATH -py flink_jobs/flink_run.py …``
and the same ``--spokes``/``--hubs``. Every option is explained in docs/operations.md.

``--config deploy.yaml`` (or ``.toml``) reads every setting from one file, the same file
``omldm serve --config`` takes (:mod:`flink_jobs.config_file`); flags given on the command
line win over it.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

if __package__ in (None, ""):  # run as a script by flink run: make the packages importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from flink_jobs.config import (JobConfig, Topics, add_sharding_arguments, add_spoke_parallelism_argument,
                               add_weights_arguments,  # noqa: E402
                               sharding_settings, weights_settings)
from flink_jobs.config_file import apply_to_parser, job_settings, read_config_argument  # noqa: E402
from flink_jobs.connection import KafkaConnection  # noqa: E402

__all__ = ["parser", "parse", "config_from_args", "main"]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flink_run.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", metavar="FILE",
                   help="a YAML or TOML file of job settings (flink_jobs/config_file.py); "
                        "flags given here win over it")
    KafkaConnection.add_arguments(p)
    p.add_argument("--topic-prefix", default="", help="prefix of every topic name")
    p.add_argument("--spokes", type=int, default=2, help="spoke parallelism (local learners)")
    add_spoke_parallelism_argument(p)
    p.add_argument("--hubs", type=int, default=1, help="hub parallelism (parameter-server shards)")
    p.add_argument("--mode", choices=("process", "thread"), default="process",
                   help="python.execution-mode (default process: cheap state writes)")
    p.add_argument("--checkpoint-interval-ms", type=int, default=10_000,
                   help="checkpoint interval in ms; 0 leaves it to the cluster's configuration")
    p.add_argument("--checkpoint-dir", default="",
                   help="execution.checkpointing.dir (file://, s3://, hdfs://); default: the cluster's")
    p.add_argument("--exactly-once-outputs", action="store_true",
                   help="write predictions, responses and deadLetters in Kafka transactions "
                        "committed at checkpoints (consumers read with isolation.level="
                        "read_committed; needs checkpointing)")
    p.add_argument("--job-name", default="omldm",
                   help="also the prefix of the output transactions' ids: keep it across restores")
    p.add_argument("--group-id", default="omldm", help="Kafka consumer group id of the sources")
    p.add_argument("--startup-mode", choices=("earliest-offset", "latest-offset"),
                   default="earliest-offset", help="where the sources start without a checkpoint")
    p.add_argument("--protocol-module", action="append", default=[],
                   help="module registering user protocols (importable on the workers)")
    p.add_argument("--max-batch-delay-ms", type=int, default=JobConfig.max_batch_delay_ms,
                   help="data records bound for one spoke cross into Python together, batched "
                        f"in Java for at most this many ms (default {JobConfig.max_batch_delay_ms}; "
                        "0: one record per crossing, and the omldm jar is not needed)")
    p.add_argument("--max-batch-records", type=int, default=JobConfig.max_batch_records,
                   help=f"records per batch at most (default {JobConfig.max_batch_records})")
    add_sharding_arguments(p)
    add_weights_arguments(p)
    p.add_argument("--prediction-scores", action="store_true",
                   help="each prediction also carries the class probabilities it was made "
                        "with, where the learner has them (MLP, CNN, Hoeffding trees)")
    p.add_argument("--prediction-arrays", action="store_true",
                   help="each record on the predictions topic is a JSON array of predictions "
                        "(a spoke's of one crossing) instead of one: fewer records for the job "
                        "and the broker")
    p.add_argument("--metrics", action=argparse.BooleanOptionalAction, default=True,
                   help="register omldm's Flink metrics (counters and gauges per pipeline)")
    return p


def config_from_args(args: argparse.Namespace, file_settings: dict | None = None) -> JobConfig:
    """The JobConfig that the command-line options describe, with the settings of a
    ``--config`` file that no flag takes (``file_settings``, from
    :func:`flink_jobs.config_file.load_config_file`; those with a flag are already the
    flags' defaults, :func:`parse`).

    Raises
    ------
    SystemExit
        Without ``--bootstrap-servers`` (or ``$OMLDM_BOOTSTRAP_SERVERS``).
    ValueError
        On an invalid setting (it names the setting).
    """
    conn = KafkaConnection.from_args(args)
    if not conn.bootstrap_servers:
        raise SystemExit("flink_run.py: --bootstrap-servers (or $OMLDM_BOOTSTRAP_SERVERS) is required")
    extra = {"topics": Topics.prefixed(args.topic_prefix or ""),
             **job_settings(file_settings or {}, args)}
    extra.update(weights_settings(args, extra["topics"]))
    return JobConfig(bootstrap_servers=conn.bootstrap_servers, spokes=args.spokes,
                     spoke_parallelism=args.spoke_parallelism, hubs=args.hubs,
                     execution_mode=args.mode, checkpoint_interval_ms=args.checkpoint_interval_ms,
                     checkpoint_dir=args.checkpoint_dir,
                     exactly_once_outputs=args.exactly_once_outputs, group_id=args.group_id,
                     startup_mode=args.startup_mode, connection=conn,
                     protocol_modules=tuple(args.protocol_module), metrics=args.metrics,
                     max_batch_delay_ms=args.max_batch_delay_ms,
                     max_batch_records=args.max_batch_records,
                     prediction_scores=args.prediction_scores,
                     prediction_arrays=args.prediction_arrays,
                     **{**sharding_settings(args), **extra})


def parse(argv: list[str] | None = None) -> tuple[argparse.Namespace, dict]:
    """The command line, with a ``--config`` file's settings as the flags' defaults:
    (arguments, the file's settings).

    Raises
    ------
    ValueError
        A ``--config`` file that cannot be read or has a bad setting.
    """
    p = parser()
    _, settings = read_config_argument(argv)
    apply_to_parser(p, settings)
    return p.parse_args(argv), settings


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from flink_jobs.job import build_job, create_environment

    args, settings = parse(argv)
    cfg = config_from_args(args, settings)
    env = create_environment(cfg, local=False)
    build_job(env, cfg, args.job_name)
    env.execute(args.job_name)


if __name__ == "__main__":
    main()
