"""Job configuration: every setting has a name, a default chosen by measurement, and a
check that names the setting, the value and what is allowed."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields, replace

from flink_jobs.connection import KafkaConnection
from operators.sharding import SHARDINGS

__all__ = ["Topics", "JobConfig", "add_sharding_arguments", "sharding_settings",
           "add_weights_arguments", "weights_settings", "add_spoke_parallelism_argument",
           "local_spoke_parallelism"]


@dataclass(frozen=True)
class Topics:
    """Kafka topic names (papers/002 §3.4)."""

    training: str = "training"
    forecasting: str = "forecasting"
    requests: str = "requests"
    ps_messages: str = "psMessages"
    predictions: str = "predictions"
    responses: str = "responses"
    dead_letters: str = "deadLetters"
    weights: str = "weights"

    def all(self) -> list[str]:
        return [getattr(self, f.name) for f in fields(self)]

    @classmethod
    def prefixed(cls, prefix: str = "", **names: str) -> "Topics":
        """The default names (or those given in ``names``, by field), each behind
        ``prefix``: ``Topics.prefixed("a-").training == "a-training"``.

        Raises
        ------
        TypeError
            For a name that is not a field.
        """
        return cls(**{f.name: prefix + names.pop(f.name, f.default) for f in fields(cls)},
                   **names)


@dataclass(frozen=True)
class JobConfig:
    """Settings of one omldm job.

    Attributes
    ----------
    bootstrap_servers : str
        Kafka ``host:port[,host:port]``.
    spokes : int
        The spokes (local learners) of every pipeline, >= 1; the spoke operator's
        parallelism unless ``spoke_parallelism`` says otherwise.
    spoke_parallelism : int
        Subtasks of the spoke operator, 1 to ``spokes``; the spokes are dealt round-robin
        over them (spoke i on subtask ``i % spoke_parallelism``), each subtask holding its
        spokes' kernels side by side in keyed state, so what a pipeline learns does not
        change; more learners than slots. 0 (the default): one subtask per spoke. In
        thread mode every spoke of one TaskManager runs in that TaskManager's one
        interpreter anyway: on a local MiniCluster (``omldm serve/demo``, thread mode, where
        :func:`local_spoke_parallelism` makes it 1) one spoke thread taking the crossings
        in turn was faster than a thread per spoke, with a shorter feedback round trip
        (``benchmarks/e2e.py --spoke-parallelisms 0,1``, 1 record per message, 2 spokes:
        120,789 and 135,499 records/s against 86,356 and 111,355, feedback 22.9 and 21.1
        ms p50 against 37.9 and 33.9; docs/performance.md, "Several spokes in one
        subtask"). Keep it across a restore from a savepoint: the spokes' keys depend on
        it.
    hubs : int
        Parallelism of the hub operator (parameter-server shards), >= 1. A pipeline's
        ``hubParallelism`` may not exceed it.
    execution_mode : str
        PyFlink's ``python.execution-mode``: ``"thread"`` (Python inside the JVM) or
        ``"process"`` (separate Python workers).
    buffer_timeout_ms : int
        ``execution.buffer-timeout.interval`` (milliseconds): how long network buffers
        wait to fill. Default 0: a buffer is sent after every element, and no task keeps
        an output-flusher thread waking every millisecond. The job's network edges carry
        batches of records and hub messages, not single records, so that costs little
        and saves the flushers' CPU (an idle job: 24% of a core against 46% at 1 ms) for
        the spokes: ``benchmarks/e2e.py --buffer-timeouts 1,0`` (2026-11-28, one run,
        1,000,000 records after 1,000,000) gave thread mode 148,013 records/s (4.51x the
        peer) against 118,533 (3.61x) and a feedback round trip of 16.9 ms p50 against
        21.1, process mode 119,633 (3.65x) against 82,945 (2.53x); at one record per
        crossing (``max_batch_delay_ms`` 0) 26,461 against 21,593. docs/performance.md,
        "Network buffers sent at once".
    fetch_max_wait_ms : int
        Kafka consumer ``fetch.max.wait.ms`` (milliseconds) of the data and request
        sources; the local broker answers a fetch only after this wait, and nothing when
        the topic holds too many record batches for it (see the next field).
    feedback_fetch_max_wait_ms : int
        The same for the ``psMessages`` source, the feedback loop's way back to the
        spokes: on the local broker every hub answer waits up to this long there, so it
        bounds the round trip from below (a Kafka broker answers as soon as a record
        comes, whatever the wait). Default 5, by measurement on the local broker (the
        Flink learning-quality experiment, RandomRBF, TAP, 4 spokes, thread mode, 3 runs:
        0.0188 behind the centralized learner at 20 ms (undamped), 0.0093 at 1 ms and
        0.0099 at 5 ms (damped, one session); throughput unchanged under a full backlog).
        Not 1: the local broker (tansu 0.6.0, in memory) spends time on every fetch in
        proportion to the record batches the topic holds (about 0.4 µs each) and answers
        nothing when that takes longer than the wait, so a long enough ``psMessages`` (a
        hub answer is often a batch of its own) stops the feedback loop for good: a
        RandomRBF FDA run stalled so at offset 6,240 at 1 ms; of a topic of 8,000
        one-record batches consumers read nothing at 1 and 2 ms and all at 5 ms, of
        24,000 nothing at 5 ms and all at 20 (docs/operations.md, "Troubleshooting").
    switch_interval_ms : int
        Thread mode: the switch interval of the Python interpreter inside the JVM
        (``sys.setswitchinterval``, milliseconds), set when the spokes open; 0 keeps
        Python's own (5 ms). The spokes and the hubs of one TaskManager share that
        interpreter, and a thread that waits for it longer than the interval makes the
        holder hand it over in the middle of its crossing; on two busy cores every such
        hand-over leaves the interpreter idle until the waiting thread is scheduled.
        Default 100, by measurement (``benchmarks/e2e.py --modes thread --per-message 50
        --switch-intervals 0,100``, 2 spokes, docs/performance.md, "The interpreter's switch
        interval"): 50 records per Kafka message, 252,000–260,000 records/s at 100 ms and
        1,000 ms against 217,000–248,000 at 5 ms in alternated runs (one spoke alone:
        296,000); of nine pairs at 1 and 50 records per message the longer interval led
        in six (+3% to +20%) and trailed in three (by 0.7–2.9%), with the same feedback
        round trip: a likely gain, not a certain one. Not applied in process mode (each
        worker has its own interpreter).
    bundle_size : int
        ``python.fn-execution.bundle.size`` (records), process mode.
    bundle_time_ms : int
        ``python.fn-execution.bundle.time`` (milliseconds), process mode.
    max_batch_delay_ms : int
        Data records bound for one spoke cross from the JVM into Python together, in a
        batch assembled in Java (``omldm.RecordBatcher``, compiled from ``flink_jobs/java``):
        a batch leaves when it is this old (milliseconds, processing time) or full, and
        before every checkpoint barrier. 0: one record per crossing, no Java operator.
        Default 1, by measurement (``benchmarks/e2e.py``, Shuttle, 2 spokes, thread mode,
        docs/performance.md): 1, 2, 5, 10 and 20 ms gave 58,000–64,000 records/s (within
        run-to-run noise; 24,000 at 0) and 1 ms the least added latency. Timed after a
        400,000-record warm-up, 5 ms was 1.04–1.38x as fast as 1 ms in four runs, at a
        feedback round trip 6–18 ms longer (p50 under full load): the round trip is the
        asynchronous protocols' staleness, so the default stays 1. Under load a batch
        fills long before the delay ends (hundreds of records per crossing).
    max_batch_records : int
        A batch leaves when it holds this many records. A spoke answers hub messages only
        between batches, so smaller batches shorten the feedback round trip under full
        load; below some size they cost throughput. Measured (2026-11-28, night,
        ``benchmarks/e2e.py --modes thread,process --per-message 1,50 --delays 1``, two
        invocations each, alternated): at 250, thread mode at 1 record per message 4.06×
        and 4.25× the peer with the round trip at 8.2 and 8.0 ms p50, against 3.95× and
        4.36× at 12.3 and 12.7 ms at 1,000; the other rows within their spread (thread at
        50 per message 5.57–6.17× against 5.75–5.79×, process 3.78–4.12× and 4.61–5.36×
        against 3.39–3.68× and 4.55–5.07×). At 100: 3.82× and 7.5 ms.
    max_batch_bytes : int
        A batch leaves when its records hold this many bytes.
    sharding : str
        Which spoke gets each data record (papers/001 §III; :mod:`operators.sharding`):
        ``"random"`` (the default: a uniform draw in the source's SQL), ``"round-robin"``
        (dealt in turn), ``"stratified"`` (round-robin within each label, §III-A),
        ``"distribution-aware"`` (PCA + k-means clusters dealt round-robin, sparse
        clusters to every spoke, §III-B; runs in a Python operator before the spokes) or
        ``"partition"`` (the Kafka partition modulo the spokes). All but ``random`` and
        ``partition`` need the Java record batcher (``max_batch_delay_ms`` > 0).
    sharding_warmup : int
        ``distribution-aware``: training records the PCA/k-means model is learned on.
    sharding_clusters : int
        ``distribution-aware``: k-means clusters; 0: twice the labels seen in the warm-up,
        at most one per 2 records per spoke of it (a regression stream's labels are all
        distinct).
    sharding_refresh : int
        ``distribution-aware``: learn the model again every this many training records
        (on the latest ``sharding_warmup``); 0: never.
    startup_mode : str
        Where sources start: ``"earliest-offset"`` or ``"latest-offset"`` (the Flink SQL
        Kafka connector's ``scan.startup.mode``; also used for the DataStream sources).
    group_id : str
        Kafka consumer group id of the job's sources.
    max_request_bytes : int
        Larger control requests are refused with code ``too_large``.
    max_message_bytes : int
        Hub↔spoke envelopes larger than this (bytes) are fragmented and reassembled;
        below Kafka's default 1 MB ``message.max.bytes``.
    max_fetch_bytes : int
        Largest Kafka record the ``requests`` source fetches (bytes, default 256 MiB): a
        request too large for ``max_request_bytes`` must still be fetched to be refused,
        or it would stop the topic.
    max_pipelines : int
        Pipelines the service runs at most; more Creates get ``too_many_pipelines``.
    max_model_params : int
        A Create or Update whose integer hyperparameters (sizes) exceed it gets
        ``too_large`` (e.g. a 10⁹-wide model), before anything is allocated.
    max_response_params : int
        Query responses carry the global model's parameters up to this many; above it a
        summary with ``truncated: true``.
    max_backlog_bytes : int
        Bytes of data records that one pipeline holds on one spoke while it waits on its
        hubs (``then_sync``: BSP rounds, FDA and EVENFLOW synchronizations), counted as
        each Kafka record's JSON plus 96; past it, the pipeline's records are
        dead-lettered with code ``backlog_full`` (and counted in its ``rejectedBy``)
        until it catches up, and other pipelines are untouched. Default 64 MiB (about
        390,000 Shuttle records, 170 MiB of memory).
    prediction_scores : bool
        Each prediction also carries ``classes`` and ``probabilities`` (the class
        probabilities it was made with) where the pipeline's learner has them (MLP, CNN,
        the Hoeffding trees); off by default (a second pass through the learner per
        forecasting record).
    prediction_arrays : bool
        Each Kafka record on the predictions topic is a JSON array of predictions (those
        one spoke subtask made in one crossing, in order; a new array past 240,000
        characters, :data:`operators.spoke.PREDICTION_ARRAY_CHARS`) instead of one
        prediction: far fewer records for the job's Kafka writer and the broker
        (docs/performance.md, "Predictions as arrays"). Off by default: one JSON object
        per record.
    publish_weights : bool
        Hubs publish every pipeline's global model to the weights topic
        (``topics.weights``; :mod:`operators.weights`, papers/003 Fig. 1), where
        :class:`flink_jobs.follower.ModelFollower` and ``omldm predict`` read it.
    idle_after_ms : int
        A spoke that got no data record for between one and two of these intervals
        (milliseconds) acts as at a Query for each pipeline (:meth:`operators.spoke_kernel.
        SpokeKernel.on_lull`): it fits what it holds and, under BSP, SSP with a bound and
        TensAIR with ``maxStaleness``, pushes it, then at the next quiet interval pushes as
        idle, so that no round waits for a spoke whose records ran out (the end of a file,
        an idle Kafka partition under ``partition`` sharding) and the others run to the
        end without a Query. 0: only Queries do it. Default 5,000: a gap shorter than 5 s
        changes nothing, and a stream's last records are fitted 10-25 s after it ends.
    weights_every_ms : int
        Milliseconds between two publications of one pipeline's model (per hub); 0: after
        every synchronization. A change held back is published once the interval has
        passed, so the last model of a stream is always published. Default 1,000: a
        4,000-parameter model costs ~32 KB per second per pipeline.
    checkpoint_interval_ms : int
        Checkpoint interval (milliseconds, exactly-once barriers); 0 disables
        checkpointing. On by default (10 s); :func:`flink_jobs.session.local_config`
        turns it off for the local thread-mode demo and tests unless asked.
    checkpoint_dir : str
        ``execution.checkpointing.dir`` (``file://``, ``s3://``, ``hdfs://`` ...); empty:
        the cluster's setting (a MiniCluster keeps checkpoints in memory).
    exactly_once_outputs : bool
        Write ``predictions``, ``responses`` and ``deadLetters`` in Kafka transactions
        committed at checkpoints (Flink ``DeliveryGuarantee.EXACTLY_ONCE``), so that a
        restored job does not repeat what it wrote after its last checkpoint; consumers
        must read with ``isolation.level=read_committed`` and see each output only after
        the next checkpoint completes (latency up to about one checkpoint interval,
        docs/operations.md). Needs checkpointing (a ``ValueError`` at job build without
        it). Off: at-least-once. ``psMessages`` and ``weights`` are at-least-once either way.
    flink_options : tuple[tuple[str, str], ...]
        Further Flink configuration keys set on the job (e.g. metrics reporters).
    metrics : bool
        Register omldm's Flink metrics (counters and gauges per pipeline, spoke and hub;
        :mod:`operators.metrics`).
    jars : tuple[str, ...]
        ``file://`` URLs of the Kafka connector jars.
    connection : KafkaConnection
        Security settings for every Kafka client of the job and of the driver
        (``bootstrap_servers`` above is the address).
    protocol_modules : tuple[str, ...]
        Python modules (importable on the workers) that register user protocols with
        :func:`learning.protocols.register_protocol`; imported by every spoke and hub.
        Job configuration is trusted; requests can only name registered protocols.
    """

    bootstrap_servers: str
    spokes: int = 2
    spoke_parallelism: int = 0
    hubs: int = 1
    execution_mode: str = "thread"
    buffer_timeout_ms: int = 0
    fetch_max_wait_ms: int = 20
    feedback_fetch_max_wait_ms: int = 5
    switch_interval_ms: int = 100
    bundle_size: int = 1000
    bundle_time_ms: int = 10
    max_batch_delay_ms: int = 1
    max_batch_records: int = 250
    max_batch_bytes: int = 1 << 20
    sharding: str = "random"
    sharding_warmup: int = 1000
    sharding_clusters: int = 0
    sharding_refresh: int = 0
    startup_mode: str = "earliest-offset"
    group_id: str = "omldm"
    max_request_bytes: int = 1_000_000
    max_message_bytes: int = 512 * 1024
    max_fetch_bytes: int = 256 * 1024 * 1024
    max_pipelines: int = 64
    max_model_params: int = 10_000_000
    max_response_params: int = 10_000
    max_backlog_bytes: int = 64 << 20
    prediction_scores: bool = False
    prediction_arrays: bool = False
    publish_weights: bool = True
    weights_every_ms: int = 1000
    idle_after_ms: int = 5000
    checkpoint_interval_ms: int = 10_000
    checkpoint_dir: str = ""
    exactly_once_outputs: bool = False
    flink_options: tuple[tuple[str, str], ...] = ()
    metrics: bool = True
    topics: Topics = field(default_factory=Topics)
    jars: tuple[str, ...] = ()
    protocol_modules: tuple[str, ...] = ()
    connection: KafkaConnection = field(default_factory=KafkaConnection)

    @property
    def spoke_subtasks(self) -> int:
        """The spoke operator's parallelism: ``spoke_parallelism``, or ``spokes`` for 0."""
        return self.spoke_parallelism or self.spokes

    @property
    def persist_state(self) -> bool:
        """Whether spokes and hubs hand their kernels to keyed state after every element:
        always in process mode (a write-cache reference, serialized per bundle), and in
        thread mode only with checkpointing on (there each update serializes)."""
        return self.execution_mode == "process" or self.checkpoint_interval_ms > 0

    def limits(self) -> dict:
        """The service limits the operators enforce."""
        return {"max_request_bytes": self.max_request_bytes, "max_pipelines": self.max_pipelines,
                "max_model_params": self.max_model_params,
                "max_message_bytes": self.max_message_bytes,
                "max_response_params": self.max_response_params,
                "max_backlog_bytes": self.max_backlog_bytes,
                "prediction_scores": self.prediction_scores,
                "weights_every_ms": self.weights_every_ms if self.publish_weights else None}

    def __post_init__(self) -> None:
        for name in ("spokes", "hubs", "bundle_size", "max_request_bytes", "max_pipelines",
                     "max_model_params", "max_response_params", "max_batch_records",
                     "max_batch_bytes", "max_backlog_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.spoke_parallelism <= self.spokes:
            raise ValueError(f"spoke_parallelism must be between 0 (one subtask per spoke) and "
                             f"spokes ({self.spokes}), got {self.spoke_parallelism}")
        if self.max_message_bytes < 1024:
            raise ValueError(f"max_message_bytes must be >= 1024, got {self.max_message_bytes}")
        for name in ("buffer_timeout_ms", "fetch_max_wait_ms", "feedback_fetch_max_wait_ms",
                     "bundle_time_ms", "switch_interval_ms",
                     "checkpoint_interval_ms", "max_batch_delay_ms", "weights_every_ms",
                     "idle_after_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("sharding_clusters", "sharding_refresh"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.sharding_warmup < 2:
            raise ValueError(f"sharding_warmup must be >= 2, got {self.sharding_warmup}")
        if self.sharding not in SHARDINGS:
            raise ValueError(f"sharding must be one of {', '.join(SHARDINGS)}, got {self.sharding!r}")
        if self.sharding not in ("random", "partition") and self.max_batch_delay_ms == 0:
            raise ValueError(f"sharding {self.sharding!r} deals records in omldm's Java record "
                             f"batcher: set max_batch_delay_ms > 0 (--max-batch-delay-ms), or "
                             f"use random or partition sharding")
        if self.execution_mode not in ("thread", "process"):
            raise ValueError(f"execution_mode must be 'thread' or 'process', got {self.execution_mode!r}")
        if self.startup_mode not in ("earliest-offset", "latest-offset"):
            raise ValueError(f"startup_mode must be 'earliest-offset' or 'latest-offset', "
                             f"got {self.startup_mode!r}")


def local_spoke_parallelism(value: int | None, execution_mode: str) -> int:
    """:attr:`JobConfig.spoke_parallelism` of a job on a local MiniCluster (``omldm
    serve/demo``, ``benchmarks/e2e.py``): ``value`` where given, else 1 in thread mode
    (one TaskManager: its one interpreter runs every spoke, and one spoke thread taking
    the crossings in turn was faster, with a shorter feedback round trip, than a thread
    per spoke: docs/performance.md, "Several spokes in one subtask") and 0 (one subtask
    per spoke) in process mode, where each subtask has its own Python worker."""
    if value is not None:
        return value
    return 1 if execution_mode == "thread" else 0


def add_spoke_parallelism_argument(p: argparse.ArgumentParser, local: bool = False) -> None:
    """``--spoke-parallelism`` (:attr:`JobConfig.spoke_parallelism`), for ``omldm
    demo/serve`` (``local``: default None, resolved by :func:`local_spoke_parallelism`)
    and ``flink_run.py`` (default 0)."""
    p.add_argument("--spoke-parallelism", type=int,
                   default=None if local else JobConfig.spoke_parallelism,
                   help="subtasks the spokes are dealt over, round-robin (1 to --spokes; 0: "
                        "one subtask per spoke; default "
                        + ("1 in thread mode, where one interpreter runs every spoke, and 0 "
                           "in process mode)" if local else "0)"))


def add_sharding_arguments(p: argparse.ArgumentParser) -> None:
    """``--sharding`` and its options (:attr:`JobConfig.sharding`), for ``omldm demo/serve``
    and ``flink_run.py``."""
    p.add_argument("--sharding", choices=SHARDINGS, default=JobConfig.sharding,
                   help="which spoke gets each data record (papers/001): random (default), "
                        "round-robin, stratified (round-robin within each label), "
                        "distribution-aware (PCA + k-means clusters) or partition (the Kafka "
                        "partition modulo the spokes)")
    p.add_argument("--sharding-warmup", type=int, default=JobConfig.sharding_warmup,
                   help="distribution-aware: training records the clusters are learned on "
                        f"(default {JobConfig.sharding_warmup})")
    p.add_argument("--sharding-clusters", type=int, default=JobConfig.sharding_clusters,
                   help="distribution-aware: k-means clusters (default 0: twice the labels "
                        "seen in the warm-up, at most one per 2 records per spoke of it)")
    p.add_argument("--sharding-refresh", type=int, default=JobConfig.sharding_refresh,
                   help="distribution-aware: learn the clusters again every N training "
                        "records (default 0: never)")


def sharding_settings(args: argparse.Namespace) -> dict:
    """The :class:`JobConfig` fields that :func:`add_sharding_arguments`' options set."""
    return {"sharding": args.sharding, "sharding_warmup": args.sharding_warmup,
            "sharding_clusters": args.sharding_clusters, "sharding_refresh": args.sharding_refresh}


def add_weights_arguments(p: argparse.ArgumentParser) -> None:
    """``--weights-topic``, ``--weights-every-ms`` and ``--publish-weights`` /
    ``--no-publish-weights`` (:attr:`JobConfig.publish_weights`), for ``omldm serve`` and
    ``flink_run.py``."""
    p.add_argument("--weights-topic", metavar="NAME", default=None,
                   help="the topic hubs publish every pipeline's global model to "
                        "(default: weights, with the topic prefix)")
    p.add_argument("--weights-every-ms", type=int, default=JobConfig.weights_every_ms,
                   help="milliseconds between two publications of a pipeline's model "
                        f"(default {JobConfig.weights_every_ms}; 0: after every synchronization)")
    p.add_argument("--publish-weights", action=argparse.BooleanOptionalAction,
                   default=JobConfig.publish_weights,
                   help="publish the global models to the weights topic (default on)")


def weights_settings(args: argparse.Namespace, topics: Topics) -> dict:
    """The :class:`JobConfig` fields :func:`add_weights_arguments`' options set, with
    ``topics`` (the names in force) given the ``--weights-topic`` name."""
    out = {"publish_weights": args.publish_weights, "weights_every_ms": args.weights_every_ms}
    if args.weights_topic:
        out["topics"] = replace(topics, weights=args.weights_topic)
    return out
