"""Building the omldm Flink job (papers/002 Fig. 3.4)::

    training ┐ SQL Kafka source, topic-tagged ─ rebalance ┐
    forecasting┘                                         ├─ connect ─ spokes (CoProcess) ─ predictions
    requests ─ Kafka source ─ broadcast ────────┐        │              │ side: to hubs, responses,
    psMessages ─ Kafka source ─ by destination ─┴─ union ┘              │       dead letters
                                                                        └ key_by hub id ─ hubs (KeyedProcess)
    hubs ─ psMessages (the feedback loop, read back above); hubs ─ responses

Records cross from the JVM into Python once, at the spokes; the topic tag comes from the
Kafka connector's ``topic`` metadata column in SQL, so no Python operator runs before the
spokes. Routing to spokes is Java (``rebalance``/``broadcast``); only the low-volume
message paths use Python partitioning.
"""

from __future__ import annotations

import os
import site
import sys
import uuid

from pyflink.common import Configuration, Types, WatermarkStrategy
from pyflink.common.serialization import ByteArraySchema, SimpleStringSchema
from pyflink.datastream import OutputTag, StreamExecutionEnvironment
from pyflink.datastream.connectors.base import DeliveryGuarantee
from pyflink.datastream.connectors.kafka import (KafkaOffsetsInitializer, KafkaRecordSerializationSchema,
                                                 KafkaSink, KafkaSource)
from pyflink.table import StreamTableEnvironment

from flink_jobs.config import JobConfig
from middleware import codec
from operators.hub import HubFunction
from operators.routing import MAX_PARALLELISM, hub_keys
from operators.spoke import SpokeFunction

__all__ = ["create_environment", "build_job"]


def create_environment(cfg: JobConfig) -> StreamExecutionEnvironment:
    """A StreamExecutionEnvironment configured for omldm (local MiniCluster when run
    as a plain Python program; the session cluster's when submitted with ``flink run``)."""
    conf = Configuration()
    conf.set_string("python.execution-mode", cfg.execution_mode)
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
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_python_executable(sys.executable)
    env.set_parallelism(cfg.spokes)
    env.set_max_parallelism(MAX_PARALLELISM)
    return env


def _kafka_bytes_source(cfg: JobConfig, topic: str, max_fetch_bytes: int | None = None) -> KafkaSource:
    start = (KafkaOffsetsInitializer.earliest() if cfg.startup_mode == "earliest-offset"
             else KafkaOffsetsInitializer.latest())
    builder = (KafkaSource.builder().set_bootstrap_servers(cfg.bootstrap_servers)
               .set_topics(topic).set_group_id(f"{cfg.group_id}-{topic}")
               .set_starting_offsets(start).set_value_only_deserializer(ByteArraySchema())
               .set_property("fetch.max.wait.ms", str(cfg.fetch_max_wait_ms))
               .set_property("partition.discovery.interval.ms", "10000"))
    if max_fetch_bytes:  # an oversized record must not wedge the topic: fetch it, refuse it
        builder = (builder.set_property("max.partition.fetch.bytes", str(max_fetch_bytes))
                   .set_property("fetch.max.bytes", str(max_fetch_bytes)))
    for key, value in cfg.connection.java_properties().items():
        builder = builder.set_property(key, value)
    return builder.build()


def _kafka_sink(cfg: JobConfig, topic: str, schema) -> KafkaSink:
    builder = (KafkaSink.builder().set_bootstrap_servers(cfg.bootstrap_servers)
               .set_record_serializer(KafkaRecordSerializationSchema.builder().set_topic(topic)
                                      .set_value_serialization_schema(schema).build())
               .set_delivery_guarantee(DeliveryGuarantee.AT_LEAST_ONCE)
               .set_property("linger.ms", "1"))
    for key, value in cfg.connection.java_properties().items():
        builder = builder.set_property(key, value)
    return builder.build()


def _destination(data: bytes) -> int:
    try:
        return codec.peek(bytes(data))[4]
    except Exception:  # malformed: let spoke 0 count and drop it
        return 0


def _partition(key: int, num_partitions: int) -> int:
    return key if 0 <= key < num_partitions else 0


def build_job(env: StreamExecutionEnvironment, cfg: JobConfig) -> None:
    """Add the omldm topology to ``env`` (run it with ``env.execute``/``execute_async``)."""
    t = cfg.topics
    t_env = StreamTableEnvironment.create(env)
    table = f"omldm_data_{uuid.uuid4().hex[:8]}"
    security = "".join(f",\n            'properties.{k}' = '{v.replace(chr(39), chr(39) * 2)}'"
                       for k, v in cfg.connection.java_properties().items())
    t_env.execute_sql(f"""
        CREATE TEMPORARY TABLE {table} (
            `v` STRING,
            `topic` STRING METADATA VIRTUAL
        ) WITH (
            'connector' = 'kafka',
            'topic' = '{t.training};{t.forecasting}',
            'properties.bootstrap.servers' = '{cfg.bootstrap_servers}',
            'properties.group.id' = '{cfg.group_id}-data',
            'properties.fetch.max.wait.ms' = '{cfg.fetch_max_wait_ms}',
            'scan.startup.mode' = '{cfg.startup_mode}',
            'value.format' = 'raw'{security}
        )""")
    tagged = t_env.sql_query(
        f"SELECT CASE WHEN `topic` = '{t.forecasting}' THEN CONCAT('P', `v`) "
        f"ELSE CONCAT('T', `v`) END AS r FROM {table}")
    data = t_env.to_data_stream(tagged).rebalance()

    no_wm = WatermarkStrategy.no_watermarks()
    requests = (env.from_source(_kafka_bytes_source(cfg, t.requests, cfg.max_fetch_bytes), no_wm,
                                "requests")
                .set_parallelism(1).broadcast())
    feedback = (env.from_source(_kafka_bytes_source(cfg, t.ps_messages), no_wm, "psMessages")
                .set_parallelism(1)
                .partition_custom(_partition, _destination))
    messages = requests.union(feedback)

    bytes_type = Types.PRIMITIVE_ARRAY(Types.BYTE())
    to_hubs_tag = OutputTag("to-hubs", Types.TUPLE([Types.INT(), bytes_type]))
    responses_tag = OutputTag("responses", Types.STRING())
    dead_tag = OutputTag("dead-letters", Types.STRING())
    keys = hub_keys(cfg.hubs)

    spokes = (data.connect(messages)
              .process(SpokeFunction(cfg.spokes, cfg.hubs, keys, to_hubs_tag, responses_tag,
                                     dead_tag, cfg.limits(), cfg.protocol_modules,
                                     cfg.execution_mode),
                       output_type=Types.STRING())
              .name("spokes").uid("spokes").set_parallelism(cfg.spokes))
    hubs = (spokes.get_side_output(to_hubs_tag)
            .key_by(lambda m: m[0], key_type=Types.INT())
            .process(HubFunction(cfg.spokes, keys, responses_tag, cfg.limits(), cfg.protocol_modules),
                     output_type=bytes_type)
            .name("hubs").uid("hubs").set_parallelism(cfg.hubs))

    spokes.sink_to(_kafka_sink(cfg, t.predictions, SimpleStringSchema())).name("predictions")
    hubs.sink_to(_kafka_sink(cfg, t.ps_messages, ByteArraySchema())).name("psMessages-out")
    (spokes.get_side_output(responses_tag).union(hubs.get_side_output(responses_tag))
     .sink_to(_kafka_sink(cfg, t.responses, SimpleStringSchema())).name("responses"))
    spokes.get_side_output(dead_tag).sink_to(
        _kafka_sink(cfg, t.dead_letters, SimpleStringSchema())).name("deadLetters")
