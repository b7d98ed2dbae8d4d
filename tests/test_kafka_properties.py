"""Any Kafka client property (``--kafka-config FILE``, ``-X key=value``): the properties
syntax, precedence, what reaches the job's Java clients and the SQL table, what reaches
kafka-python; and ``omldm topics`` on the real broker."""

from __future__ import annotations

import logging
import time

import pytest

from flink_jobs import connection
from flink_jobs.cli import _parser, main
from flink_jobs.config import JobConfig, Topics
from flink_jobs.connection import (PYTHON_UNSUPPORTED, KafkaConnection, parse_properties)
from flink_jobs.job import _kafka_bytes_source, feedback_source, kafka_table_options
from flink_jobs.kafka_io import JsonProducer, create_topics

SCRAM = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
         'username="svc" password="p\\"w";')


def test_the_java_properties_syntax():
    text = "\n".join([
        "# a comment", "   ! another", "", "a=1", "b : two words", "c value",
        "d.long = first \\", "      second", "e\\:f=g\\=h", "tab=x\\ty", "uni=caf\\u00e9",
        "empty", "back=slash\\\\", "# not=this",
    ])
    assert dict(parse_properties(text)) == {
        "a": "1", "b": "two words", "c": "value", "d.long": "first second", "e:f": "g=h",
        "tab": "x\ty", "uni": "café", "empty": "", "back": "slash\\"}
    assert parse_properties("k=1\nk=2") == (("k", "1"), ("k", "2"))  # order kept: last wins
    with pytest.raises(ValueError, match="uxxxx"):
        parse_properties("k=\\u12")


def test_file_then_x_over_the_dedicated_flags(tmp_path):
    f = tmp_path / "client.properties"
    f.write_text("security.protocol=SASL_SSL\nsasl.mechanism: SCRAM-SHA-512\n"
                 "sasl.jaas.config=" + SCRAM.replace("\\", "\\\\")  # a file doubles \\
                 + "\nrequest.timeout.ms=1000\n")
    args = _parser().parse_args(["topics", "--bootstrap-servers", "k:9093", "--ssl-cafile",
                                 "/ca.pem", "--kafka-config", str(f), "-X",
                                 "request.timeout.ms=2000", "-X", "linger.ms=7", "-X",
                                 "request.timeout.ms=3000"])
    conn = KafkaConnection.from_args(args)
    java = conn.java_properties()
    assert java["security.protocol"] == "SASL_SSL"  # the file beats --security-protocol's default
    assert java["request.timeout.ms"] == "3000"  # the last -X wins over the file
    assert java["sasl.jaas.config"] == SCRAM and java["linger.ms"] == "7"
    assert java["ssl.truststore.location"] == "/ca.pem"  # from the flag, untouched
    hash(JobConfig("k:9093", connection=conn))  # still frozen and hashable
    assert conn.properties[0] == ("security.protocol", "SASL_SSL")


def test_reserved_and_bad_properties_are_refused(tmp_path):
    with pytest.raises(ValueError, match="bootstrap.servers is set by --bootstrap-servers"):
        KafkaConnection("k:1", properties=(("bootstrap.servers", "x:1"),))
    assert main(["topics", "--bootstrap-servers", "k:1", "-X", "group.id=g"]) == 2
    assert main(["topics", "--bootstrap-servers", "k:1", "--kafka-config",
                 str(tmp_path / "missing")]) == 2
    with pytest.raises(SystemExit):
        _parser().parse_args(["topics", "-X", "novalue"])
    with pytest.raises(ValueError, match="request.timeout.ms='soon'"):
        KafkaConnection("k:1", properties=(("request.timeout.ms", "soon"),)).client_kwargs()
    # SASL from the properties alone satisfies --security-protocol SASL_SSL
    KafkaConnection("k:1", "SASL_SSL", properties=(("sasl.mechanism", "PLAIN"),
                                                   ("sasl.jaas.config", SCRAM)))


def test_python_clients_get_the_translated_properties(caplog):
    conn = KafkaConnection("k:1", properties=(
        ("security.protocol", "SASL_SSL"), ("sasl.mechanism", "SCRAM-SHA-256"),
        ("sasl.jaas.config", SCRAM), ("ssl.ca.location", "/ca.pem"), ("client.id", "me"),
        ("acks", "-1"), ("compression.type", "none"), ("request.timeout.ms", "5000"),
        ("max.poll.records", "10"), ("ssl.endpoint.identification.algorithm", ""),
        ("ssl.keystore.type", "PEM"), ("ssl.keystore.location", "/me.pem"),
        ("ssl.truststore.location", "/trust.jks"), ("sasl.login.callback.handler.class", "X"),
        ("some.future.property", "1")))
    common = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256",
              "sasl_plain_username": "svc", "sasl_plain_password": 'p"w', "ssl_cafile": "/ca.pem",
              "client_id": "me", "request_timeout_ms": 5000, "ssl_check_hostname": False,
              "ssl_certfile": "/me.pem"}
    connection._warned.clear()
    with caplog.at_level(logging.WARNING, logger="flink_jobs.connection"):
        assert conn.client_kwargs() == common
        assert conn.client_kwargs("producer") == {**common, "acks": "all", "compression_type": None}
        assert conn.client_kwargs("consumer") == {**common, "max_poll_records": 10}
    warned = [r.getMessage() for r in caplog.records]
    # each untranslatable key warned once, however many clients were built
    assert sorted(m.split()[2] for m in warned) == [
        "sasl.login.callback.handler.class", "some.future.property", "ssl.truststore.location"]
    assert any("PEM" in m for m in warned if "ssl.truststore.location" in m)
    assert "ssl.truststore.location" in PYTHON_UNSUPPORTED
    with pytest.raises(ValueError, match="role"):
        conn.client_kwargs("admin")


def test_a_pem_truststore_is_the_python_cafile():
    conn = KafkaConnection("k:1", ssl_cafile="/ca.pem")  # the flag's own Java properties
    assert conn.client_kwargs() == {"security_protocol": "PLAINTEXT", "ssl_cafile": "/ca.pem"}
    gssapi = KafkaConnection("k:1", properties=(
        ("sasl.jaas.config", "com.sun.security.auth.module.Krb5LoginModule required;"),))
    assert "sasl_plain_username" not in gssapi.client_kwargs()


def test_the_sql_table_gets_every_property():
    conn = KafkaConnection("k:1", "SASL_SSL", "PLAIN", "u", "it's", properties=(
        ("fetch.max.wait.ms", "99"), ("client.id", "omldm")))
    options = kafka_table_options(JobConfig("k:1", connection=conn,
                                            topics=Topics(training="p-training",
                                                          forecasting="p-forecasting")))
    assert options["topic"] == "p-training;p-forecasting"
    assert options["properties.bootstrap.servers"] == "k:1"
    assert options["properties.fetch.max.wait.ms"] == "99"  # a user value beats the job's
    assert options["properties.client.id"] == "omldm"
    assert options["properties.security.protocol"] == "SASL_SSL"
    assert "password=\"it's\"" in options["properties.sasl.jaas.config"]


def test_the_feedback_source_fetches_with_its_own_wait():
    """psMessages: ``feedback_fetch_max_wait_ms`` (default 5 ms), the request source
    ``fetch_max_wait_ms`` (20 ms); a user's property beats both."""
    from flink_jobs.job import create_environment
    from flink_jobs.session import local_config

    def waits(**kw) -> tuple[str, str]:
        cfg = local_config("k:1", **kw)
        create_environment(cfg)  # the connector jars on the gateway
        return tuple(src.get_java_function().getConfiguration().toMap()["fetch.max.wait.ms"]
                     for src in (feedback_source(cfg), _kafka_bytes_source(cfg, "requests")))

    assert waits() == ("5", "20")
    assert waits(feedback_fetch_max_wait_ms=7, fetch_max_wait_ms=50) == ("7", "50")
    user = KafkaConnection("k:1", properties=(("fetch.max.wait.ms", "99"),))
    assert waits(connection=user) == ("99", "99")
    with pytest.raises(ValueError, match="feedback_fetch_max_wait_ms"):
        JobConfig("k:1", feedback_fetch_max_wait_ms=-1)


def test_topics_lists_only_the_prefixed_job_topics(broker, capsys):
    servers = broker.bootstrap_servers
    t = Topics.prefixed("tp-")
    create_topics(servers, [t.training, t.requests, "tp-other", "training"])
    p = JsonProducer(servers)
    for i in range(3):  # one flush per record: one offset per record even on this broker
        p.send(t.training, {"id": i})
        p.flush()
    p.send(t.requests, {"id": 0})
    p.close()
    for extra in ([], ["--read"]):
        assert main(["topics", "--bootstrap-servers", servers, "--topic-prefix", "tp-",
                     "-X", "client.id=omldm-topics-test", *extra]) == 0
        rows = dict(line.split() for line in capsys.readouterr().out.splitlines()[1:])
        assert list(rows) == t.all()  # the seven, in order, nothing else
        assert rows[t.training] == "3" and rows[t.requests] == "1"
        assert rows[t.predictions] == "missing"


def test_producer_and_consumer_properties_win_over_the_clis_own(broker, tmp_path, capsys):
    """``-X acks=all -X compression.type=gzip`` reach ``omldm stream``'s producer (over its
    own ``acks=1``) and ``-X fetch.max.wait.ms`` ``omldm tail``'s reader (over its 50 ms):
    the records arrive, nothing is refused as a duplicate setting."""
    from flink_jobs.kafka_io import TopicReader

    servers = broker.bootstrap_servers
    data = tmp_path / "two.csv"
    data.write_text("a,b,label\n1,2,x\n3,4,y\n")
    common = ["--bootstrap-servers", servers, "--topic-prefix", "xprops-"]
    create_topics(servers, ["xprops-training", "xprops-forecasting"])
    assert main(["stream", str(data), "--forecast-every", "0", "--no-progress", *common,
                 "-X", "acks=all", "-X", "compression.type=gzip", "-X", "linger.ms=0"]) == 0
    assert main(["tail", "training", "--from-beginning", "-n", "2", "--timeout", "30", *common,
                 "-X", "fetch.max.wait.ms=10"]) == 0
    out = capsys.readouterr().out
    assert '"features":[1.0,2.0]' in out and '"features":[3.0,4.0]' in out
    reader = TopicReader(servers, "xprops-training", fetch_max_wait_ms=10,
                         isolation_level="read_committed")
    assert reader.isolation_level == "read_committed" and len(list(reader.drain(1000))) == 2
    reader.close()


def test_the_local_broker_answers_the_feedback_wait_on_a_long_topic(broker):
    """The local broker spends time on every fetch in proportion to the record batches a
    topic holds and answers nothing when that takes longer than the fetch's wait; a hub
    answer at a live pace is a batch of its own. On a topic of 4,000 one-record batches a
    consumer at the job's default ``feedback_fetch_max_wait_ms`` reads every record (at
    1 ms, the default before, this machine's consumers read none of 8,000; see
    docs/operations.md, *Troubleshooting*)."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = "long-feedback"
    create_topics(broker.bootstrap_servers, [topic])
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, linger_ms=0)
    for i in range(4000):
        producer.send(topic, b"x" * 200).get(timeout=10)  # one batch per record
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers,
                             enable_auto_commit=False,
                             fetch_max_wait_ms=JobConfig.feedback_fetch_max_wait_ms)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    read, deadline = 0, time.monotonic() + 30
    while read < 4000 and time.monotonic() < deadline:
        read += sum(len(r) for r in consumer.poll(timeout_ms=500).values())
    consumer.close()
    assert read == 4000
