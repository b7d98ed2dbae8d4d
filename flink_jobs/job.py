"""Building the omldm Flink job (papers/002 Fig. 3.4)::

    training ┐ SQL Kafka source: tag + spoke key ─ batcher [─ shard] ─ by spoke ┐
    forecasting┘                                                     ├─ connect ─ spokes (KeyedCoProcess) ─ predictions
    requests ─ Kafka source ─ one copy per spoke key ─┐              │              │ side: to hubs, responses,
    psMessages ─ Kafka source ─ destination's key ────┴─ key by spoke┘              │       dead letters
                                                                                    └ key_by hub id ─ hubs (KeyedProcess)
    hubs ─ psMessages (the feedback loop, read back above); hubs ─ responses; hubs ─ weights
    spokes ─ side: to spokes ─ psMessages (spoke→spoke sibling frames, routed back by destination)

Records cross from the JVM into Python once, at the spokes: SQL tags each record with the
topic it came from (the Kafka connector's ``topic`` metadata column) and picks its spoke's
key (``cfg.sharding``, :mod:`operators.sharding`: ``RAND_INTEGER`` for ``random``, the
``partition`` metadata column for ``partition``); ``omldm.RecordBatcher`` (Java,
``flink_jobs/java``, chained to the source) deals the records for ``round-robin`` and
``stratified`` (the label read by ``JSON_VALUE``) and groups each spoke's records into one
batch per crossing (``max_batch_delay_ms``, ``max_batch_records``, ``max_batch_bytes``;
flushed before checkpoint barriers); and the stream is keyed by that column in Java
(PyFlink's own ``KeyByKeySelector``, without the Python key-adding operator ``key_by`` would
put in front). ``distribution-aware`` sharding adds one Python operator before the spokes
(:mod:`operators.shard`, parallelism 1, one crossing per batch). On the way back, with
batching on, a spoke hands the predictions of one crossing to the JVM as one string
(joined by newlines) and ``omldm.LineSplitter`` (Java) splits them into one Kafka record
each (with ``prediction_arrays`` the spoke hands over JSON arrays of them, one Kafka record
each); and ``omldm.ToSpokes`` (Java) routes requests and ``psMessages`` to spoke keys, so a
hub's answer crosses into Python only at its spoke (without batching the Python
:class:`_ToSpokes` routes them).
Spokes are keyed so that their whole state lives in Flink keyed state and survives
failures (checkpoints) and upgrades (savepoints).
"""

from __future__ import annotations

import os
import site
import sys
import uuid

from py4j.java_gateway import JavaClass
from pyflink.common import Configuration, Row, Types, WatermarkStrategy
from pyflink.common.serialization import ByteArraySchema, SimpleStringSchema
from pyflink.datastream import DataStream, KeyedStream, OutputTag, StreamExecutionEnvironment
from pyflink.datastream.connectors.base import DeliveryGuarantee
from pyflink.datastream.connectors.kafka import (KafkaOffsetsInitializer, KafkaRecordSerializationSchema,
                                                 KafkaSink, KafkaSource)
from pyflink.java_gateway import get_gateway
from pyflink.util.java_utils import to_jarray
from pyflink.table import StreamTableEnvironment

from flink_jobs.config import JobConfig
from middleware import codec
from middleware.codec import Wire
from middleware.errors import CodecError
from operators.hub import HubFunction
from operators.routing import MAX_PARALLELISM, hub_keys, spoke_keys as spoke_keys_of
from operators.shard import ShardFunction
from operators.spoke import SpokeFunction

__all__ = ["create_environment", "build_job", "kafka_table_options", "LOCAL_JVM_ARGS"]

#: The local MiniCluster JVM's options when ``JVM_ARGS`` is not set (PyFlink's gateway puts
#: ``JVM_ARGS`` on the command line of the JVM it launches): a heap of 1 GiB committed and
#: touched at the start, so that a long-lived local job's resident memory stays flat. With
#: the JVM's defaults G1 committed more heap in steps while the heap in use stayed the same,
#: and a soak's JVM grew 10–15% after its first minute in three runs of five; with these,
#: +0.04% (thread mode, 20,000,000 records) and +0.05% (process mode, 10,000,000) at the
#: same records/s, the JVM about 1.4–1.7 GiB from the start (docs/performance.md, "Soak").
#: The heap may still grow past 1 GiB (the maximum stays the JVM's default, a quarter of
#: the machine's memory).
LOCAL_JVM_ARGS = "-Xms1g -XX:+AlwaysPreTouch"


def create_environment(cfg: JobConfig, local: bool = True) -> StreamExecutionEnvironment:
    """A StreamExecutionEnvironment configured for omldm: a local MiniCluster when run as
    a plain Python program; the session cluster's when submitted with ``flink run``, in
    which case (``local=False``) the Python executable and path are left to ``-pyexec`` /
    ``-pyarch`` / the cluster's ``python.executable``.

    Locally, unless ``JVM_ARGS`` is set, sets it to :data:`LOCAL_JVM_ARGS` for the JVM
    PyFlink launches (the first call in a process launches it; a JVM already running keeps
    its options)."""
    if local:
        os.environ.setdefault("JVM_ARGS", LOCAL_JVM_ARGS)
    conf = Configuration()
    conf.set_string("python.execution-mode", cfg.execution_mode)
    if local:
        # thread mode imports pemja from the virtual environment (DESIGN.md gotchas)
        conf.set_string("python.pythonpath", os.pathsep.join(
            [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))] + site.getsitepackages()))
    conf.set_string("execution.buffer-timeout.interval", f"{cfg.buffer_timeout_ms}ms")
    conf.set_string("python.fn-execution.bundle.size", str(cfg.bundle_size))
    conf.set_string("python.fn-execution.bundle.time", str(cfg.bundle_time_ms))
    if cfg.jars:
        conf.set_string("pipeline.jars", ";".join(cfg.jars))
    if cfg.checkpoint_interval_ms:
        conf.set_string("execution.checkpointing.interval", f"{cfg.checkpoint_interval_ms}ms")
        conf.set_string("execution.checkpointing.mode", "EXACTLY_ONCE")
        if cfg.checkpoint_dir:
            conf.set_string("execution.checkpointing.dir", cfg.checkpoint_dir)
    for key, value in cfg.flink_options:
        conf.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    if local:
        env.set_python_executable(sys.executable)
    env.set_parallelism(cfg.spoke_subtasks)  # the sources and sinks are as wide as the spokes
    env.set_max_parallelism(MAX_PARALLELISM)
    return env


def _kafka_bytes_source(cfg: JobConfig, topic: str, max_fetch_bytes: int | None = None,
                        fetch_max_wait_ms: int | None = None) -> KafkaSource:
    start = (KafkaOffsetsInitializer.earliest() if cfg.startup_mode == "earliest-offset"
             else KafkaOffsetsInitializer.latest())
    builder = (KafkaSource.builder().set_bootstrap_servers(cfg.bootstrap_servers)
               .set_topics(topic).set_group_id(f"{cfg.group_id}-{topic}")
               .set_starting_offsets(start).set_value_only_deserializer(ByteArraySchema())
               .set_property("fetch.max.wait.ms", str(cfg.fetch_max_wait_ms
                                                       if fetch_max_wait_ms is None
                                                       else fetch_max_wait_ms))
               .set_property("partition.discovery.interval.ms", "10000"))
    if max_fetch_bytes:  # an oversized record must not wedge the topic: fetch it, refuse it
        builder = (builder.set_property("max.partition.fetch.bytes", str(max_fetch_bytes))
                   .set_property("fetch.max.bytes", str(max_fetch_bytes)))
    for key, value in cfg.connection.java_properties().items():
        builder = builder.set_property(key, value)
    return builder.build()


def feedback_source(cfg: JobConfig) -> KafkaSource:
    """The ``psMessages`` source, the feedback loop's way back to the spokes: as the
    request source, but fetching with ``cfg.feedback_fetch_max_wait_ms`` (a hub's answer
    waits up to that long at the broker)."""
    return _kafka_bytes_source(cfg, cfg.topics.ps_messages,
                               fetch_max_wait_ms=cfg.feedback_fetch_max_wait_ms)


#: ``transaction.timeout.ms`` of the exactly-once sinks (milliseconds): below Kafka's default
#: broker maximum (``transaction.max.timeout.ms``, 900,000); a transaction left open longer
#: (a job down that long before its restore) is aborted by the broker and its records lost.
TRANSACTION_TIMEOUT_MS = 600_000


def _check_exactly_once(env: StreamExecutionEnvironment, cfg: JobConfig) -> None:
    """Exactly-once sinks commit their transactions when a checkpoint completes: without
    checkpoints nothing would ever become visible to a ``read_committed`` reader.

    Raises
    ------
    ValueError
        With ``exactly_once_outputs`` on and checkpointing off, or a checkpoint interval
        not below :data:`TRANSACTION_TIMEOUT_MS`.
    """
    if not cfg.exactly_once_outputs:
        return
    if not env.get_checkpoint_config().is_checkpointing_enabled():
        raise ValueError(
            f"exactly_once_outputs needs checkpointing (output transactions commit only at "
            f"checkpoints): set checkpoint_interval_ms > 0 (--checkpoint-interval-ms), got "
            f"{cfg.checkpoint_interval_ms}")
    if env.get_checkpoint_interval() >= TRANSACTION_TIMEOUT_MS:
        raise ValueError(f"checkpoint_interval_ms must be < {TRANSACTION_TIMEOUT_MS} (the output "
                         f"transactions' timeout) with exactly_once_outputs, got "
                         f"{env.get_checkpoint_interval()}")


def _kafka_sink(cfg: JobConfig, topic: str, schema, exactly_once: bool = False,
                job_name: str = "omldm") -> KafkaSink:
    """A sink writing ``schema``-serialized values to ``topic``: at-least-once, or with
    ``exactly_once`` in Kafka transactions committed at checkpoints, whose ids start with
    ``{job_name}-{topic}`` (unique per job and sink, the same after a restore, so that the
    restored job finds and aborts the transactions its predecessor left open)."""
    builder = (KafkaSink.builder().set_bootstrap_servers(cfg.bootstrap_servers)
               .set_record_serializer(KafkaRecordSerializationSchema.builder().set_topic(topic)
                                      .set_value_serialization_schema(schema).build())
               .set_property("linger.ms", "1"))
    if exactly_once:
        builder = (builder.set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
                   .set_transactional_id_prefix(f"{job_name}-{topic}")
                   .set_property("transaction.timeout.ms", str(TRANSACTION_TIMEOUT_MS)))
    else:
        builder = builder.set_delivery_guarantee(DeliveryGuarantee.AT_LEAST_ONCE)
    for key, value in cfg.connection.java_properties().items():
        builder = builder.set_property(key, value)
    return builder.build()


def _sql_string(text: str) -> str:
    """A Flink SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def kafka_table_options(cfg: JobConfig) -> dict[str, str]:
    """The ``WITH`` options of the SQL table the job reads ``training`` and ``forecasting``
    through: the job's own, then every Kafka client property of ``cfg.connection``
    (:meth:`~flink_jobs.connection.KafkaConnection.java_properties`) as
    ``properties.<key>``, a user property overriding the job's value of the same key (as on
    the DataStream sources and sinks)."""
    t = cfg.topics
    options = {"connector": "kafka", "topic": f"{t.training};{t.forecasting}",
               "properties.bootstrap.servers": cfg.bootstrap_servers,
               "properties.group.id": f"{cfg.group_id}-data",
               "properties.fetch.max.wait.ms": str(cfg.fetch_max_wait_ms),
               "scan.startup.mode": cfg.startup_mode, "value.format": "raw"}
    options.update({f"properties.{k}": v for k, v in cfg.connection.java_properties().items()})
    return options


def _keyed(ds: DataStream, value_type) -> KeyedStream:
    """Key a stream of ``Row(key: INT, value)`` by its first field in Java, as PyFlink's
    ``key_by(..., key_type=Types.INT())`` does after its Python key-adding step (so keys
    route as :func:`operators.routing.operator_index` says)."""
    j_keyed = ds._j_data_stream.keyBy(get_gateway().jvm.KeyByKeySelector(),
                                      Types.ROW([Types.INT()]).get_java_type_info())
    return KeyedStream(j_keyed, value_type, ds)


class _ToSpokes:
    """Where the spokes' messages go, in Python, when records are not batched (batched,
    ``omldm.ToSpokes`` does the same in the JVM). Requests go to every spoke key; hub→spoke
    frames, spoke→spoke sibling frames (their envelopes, acknowledgements and resyncs) and
    bare envelopes (a version before sibling frames) to their destination's key (malformed
    bytes to spoke 0, which counts and answers them)."""

    def __init__(self, spoke_keys: list[int]) -> None:
        self.spoke_keys = spoke_keys

    def __call__(self, data):
        data = bytes(data)
        kind = codec.wire_kind(data)
        # hub→spoke and spoke→spoke, framed (operators.feedback); a bare envelope
        if kind is Wire.FRAME or kind is Wire.SIBLING or kind is Wire.ENVELOPE:
            if kind is not Wire.ENVELOPE:
                dst = codec.frame_destination(data)
            else:
                try:
                    dst = codec.peek(data).dst_index
                except CodecError:
                    dst = 0
            yield Row(self.spoke_keys[dst if 0 <= dst < len(self.spoke_keys) else 0], data)
        else:
            for key in self.spoke_keys:
                yield Row(key, data)


#: shardings dealt in Java (``omldm.RecordBatcher``) and in Python (:mod:`operators.shard`);
#: ``random`` and ``partition`` are computed in the source's SQL
JAVA_SHARDINGS = ("round-robin", "stratified")
PYTHON_SHARDINGS = ("distribution-aware",)


def _shard_key(cfg: JobConfig, spoke_keys: list[int]) -> str:
    """The SQL expression of a record's spoke key (papers/001 §III): a uniform draw, the
    Kafka partition modulo the spokes, or, where Java or Python deals, spoke 0's key."""
    keys = f"ARRAY[{', '.join(map(str, spoke_keys))}]"
    if cfg.sharding == "random":
        return f"{keys}[RAND_INTEGER({cfg.spokes}) + 1]"
    if cfg.sharding == "partition":
        return f"{keys}[MOD(`partition`, {cfg.spokes}) + 1]"
    return str(spoke_keys[0])


def _sharding_options(cfg: JobConfig) -> dict:
    return {"warmup": cfg.sharding_warmup, "clusters": cfg.sharding_clusters,
            "refresh": cfg.sharding_refresh}


def build_job(env: StreamExecutionEnvironment, cfg: JobConfig, job_name: str = "omldm") -> None:
    """Add the omldm topology to ``env`` (run it with ``env.execute``/``execute_async``).

    ``job_name`` (the name given to ``execute``) prefixes the transactional ids of the
    exactly-once sinks (``cfg.exactly_once_outputs``); keep it across restores.

    Raises
    ------
    ValueError
        With ``cfg.exactly_once_outputs`` on and checkpointing off in ``env``.
    """
    _check_exactly_once(env, cfg)
    t = cfg.topics
    t_env = StreamTableEnvironment.create(env)
    table = f"omldm_data_{uuid.uuid4().hex[:8]}"
    options = ",\n            ".join(f"{_sql_string(k)} = {_sql_string(v)}"
                                     for k, v in kafka_table_options(cfg).items())
    batched = cfg.max_batch_delay_ms > 0
    partition = ",\n            `partition` INT METADATA VIRTUAL" if cfg.sharding == "partition" else ""
    t_env.execute_sql(f"""
        CREATE TEMPORARY TABLE {table} (
            `v` {"BYTES" if batched else "STRING"},
            `topic` STRING METADATA VIRTUAL{partition}
        ) WITH (
            {options}
        )""")
    # spoke i's key, landing on subtask i % cfg.spoke_subtasks
    spoke_keys = spoke_keys_of(cfg.spokes, cfg.spoke_subtasks)
    gateway = get_gateway()
    j_spoke_keys = to_jarray(gateway.jvm.int, spoke_keys)  # for omldm's Java operators
    key = _shard_key(cfg, spoke_keys)
    bytes_type = Types.PRIMITIVE_ARRAY(Types.BYTE())
    if batched:  # one crossing per batch: omldm.RecordBatcher (flink_jobs/java)
        columns = [Types.INT(), Types.BOOLEAN(), bytes_type]
        label = ""
        if cfg.sharding == "stratified":  # the stratum, read in the JVM
            label, columns = ", JSON_VALUE(CAST(`v` AS STRING), '$.label') AS s", columns + [Types.STRING()]
        rows = t_env.to_append_stream(
            t_env.sql_query(f"SELECT {key} AS k, `topic` <> '{t.forecasting}' AS t, `v`{label} "
                            f"FROM {table}"), Types.ROW(columns))
        batcher_class = gateway.jvm.omldm.RecordBatcher
        if not isinstance(batcher_class, JavaClass):  # py4j's JavaPackage: not on the classpath
            raise RuntimeError(
                "omldm.RecordBatcher is not on the job's classpath: pass omldm's jar (python -c "
                "'from deploy.assets import omldm_jar; print(omldm_jar())') like the connector "
                "jars (flink run -C file://…, or JobConfig.jars), or set max_batch_delay_ms=0 "
                "(--max-batch-delay-ms 0)")
        batcher = batcher_class(cfg.max_batch_delay_ms, cfg.max_batch_records, cfg.max_batch_bytes,
                                cfg.sharding if cfg.sharding in JAVA_SHARDINGS else "keyed",
                                j_spoke_keys)
        keyed_bytes_type = Types.ROW([Types.INT(), bytes_type])
        batches = DataStream(rows._j_data_stream.transform(
            "batch-records", keyed_bytes_type.get_java_type_info(), batcher).uid("batch-records"))
        if cfg.sharding in PYTHON_SHARDINGS:  # every batch through one Python sharder
            batches = (_keyed(batches, bytes_type)
                       .process(ShardFunction(spoke_keys, cfg.sharding, _sharding_options(cfg),
                                              cfg.persist_state, cfg.metrics),
                                output_type=keyed_bytes_type)
                       .name("shard").uid("shard").set_parallelism(1))
        data = _keyed(batches, bytes_type)
    else:
        tagged = t_env.sql_query(
            f"SELECT {key} AS k, CASE WHEN `topic` = '{t.forecasting}' THEN CONCAT('P', `v`) "
            f"ELSE CONCAT('T', `v`) END AS r FROM {table}")
        data = _keyed(t_env.to_append_stream(tagged, Types.ROW([Types.INT(), Types.STRING()])),
                      Types.STRING())

    keyed_bytes = Types.ROW([Types.INT(), bytes_type])
    no_wm = WatermarkStrategy.no_watermarks()
    requests = env.from_source(_kafka_bytes_source(cfg, t.requests, cfg.max_fetch_bytes), no_wm,
                               "requests").uid("requests-source").set_parallelism(1)
    feedback = env.from_source(feedback_source(cfg), no_wm,
                               "psMessages").uid("psMessages-source").set_parallelism(1)
    if batched:  # routed in the JVM (omldm.ToSpokes): a hub's answer skips a crossing
        routed = DataStream(requests.union(feedback)._j_data_stream.flatMap(
            gateway.jvm.omldm.ToSpokes(j_spoke_keys),
            keyed_bytes.get_java_type_info())
            .name("to-spokes").uid("to-spokes").setParallelism(1))
    else:
        routed = (requests.union(feedback)
                  .flat_map(_ToSpokes(spoke_keys), output_type=keyed_bytes)
                  .name("to-spokes").uid("to-spokes").set_parallelism(1))
    messages = _keyed(routed, bytes_type)

    # fresh type objects: a tag's pickling clears only its own Java type, not nested ones
    to_hubs_tag = OutputTag("to-hubs", Types.TUPLE([Types.INT(), Types.PRIMITIVE_ARRAY(Types.BYTE())]))
    responses_tag = OutputTag("responses", Types.STRING())
    dead_tag = OutputTag("dead-letters", Types.STRING())
    to_spokes_tag = OutputTag("to-spokes", Types.PRIMITIVE_ARRAY(Types.BYTE()))
    weights_tag = OutputTag("weights", Types.PRIMITIVE_ARRAY(Types.BYTE())) if cfg.publish_weights else None
    keys = hub_keys(cfg.hubs)

    spokes = (data.connect(messages)
              .process(SpokeFunction(cfg.spokes, cfg.hubs, keys, to_hubs_tag, responses_tag,
                                     dead_tag, cfg.limits(), cfg.protocol_modules,
                                     cfg.execution_mode, cfg.persist_state, cfg.metrics,
                                     to_spokes_tag, join_predictions=batched,
                                     switch_interval_ms=cfg.switch_interval_ms,
                                     spoke_keys=spoke_keys, parallelism=cfg.spoke_subtasks,
                                     prediction_arrays=cfg.prediction_arrays,
                                     idle_after_ms=cfg.idle_after_ms),
                       output_type=Types.STRING())
              .name("spokes").uid("spokes").set_parallelism(cfg.spoke_subtasks))
    predictions = spokes
    if batched and not cfg.prediction_arrays:  # one string per crossing back, split in Java
        # (omldm.LineSplitter); arrays of predictions go to Kafka as the spokes made them
        predictions = DataStream(spokes._j_data_stream.flatMap(
            gateway.jvm.omldm.LineSplitter(), Types.STRING().get_java_type_info())
            .name("split-predictions").uid("split-predictions").setParallelism(cfg.spoke_subtasks))
    hubs = (spokes.get_side_output(to_hubs_tag)
            .key_by(lambda m: m[0], key_type=Types.INT())
            .process(HubFunction(cfg.spokes, keys, responses_tag, weights_tag, cfg.limits(),
                                 cfg.protocol_modules, cfg.persist_state, cfg.metrics),
                     output_type=bytes_type)
            .name("hubs").uid("hubs").set_parallelism(cfg.hubs))

    # outputs exactly-once on request; the feedback loop stays at-least-once (fast, and the
    # middleware drops repeated envelopes)
    def output(topic: str) -> KafkaSink:
        return _kafka_sink(cfg, topic, SimpleStringSchema(), cfg.exactly_once_outputs, job_name)

    predictions.sink_to(output(t.predictions)).name("predictions").uid("predictions-sink")
    # as wide as the hubs (a forward edge): with the job's default width each hub's frames
    # were dealt to several writers, and a spoke's channel reached the topic out of order
    (hubs.sink_to(_kafka_sink(cfg, t.ps_messages, ByteArraySchema())).name("psMessages-out")
     .uid("psMessages-sink").set_parallelism(cfg.hubs))
    # spoke→spoke sibling frames (sibling channels, e.g. TensAIR): one writer per spoke
    # subtask (a forward edge), so each channel reaches the topic in order, as the hubs'
    # frames do
    (spokes.get_side_output(to_spokes_tag)
     .sink_to(_kafka_sink(cfg, t.ps_messages, ByteArraySchema())).name("psMessages-spokes")
     .uid("psMessages-spokes-sink").set_parallelism(cfg.spoke_subtasks))
    (spokes.get_side_output(responses_tag).union(hubs.get_side_output(responses_tag))
     .sink_to(output(t.responses)).name("responses").uid("responses-sink"))
    spokes.get_side_output(dead_tag).sink_to(
        output(t.dead_letters)).name("deadLetters").uid("deadLetters-sink")
    if weights_tag is not None:  # the weights topic (operators.weights), at-least-once
        (hubs.get_side_output(weights_tag).sink_to(_kafka_sink(cfg, t.weights, ByteArraySchema()))
         .name("weights").uid("weights-sink").set_parallelism(cfg.hubs))
