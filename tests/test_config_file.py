"""A deployment in one file (``--config FILE``, :mod:`flink_jobs.config_file`): YAML and TOML
give the same job, flags win over the file and the file over environment variables, every
mistake is one clear error naming the file and the key, and the file's Flink options reach
the job's environment."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from flink_jobs.config import JobConfig
from flink_jobs.config_file import load_config_file
from flink_jobs.flink_run import config_from_args, parse

YAML = """\
# a production deployment
spokes: 4
hubs: 2
execution_mode: thread
checkpoint_interval_ms: 5000
checkpoint_dir: file:///tmp/omldm-checkpoints
exactly_once_outputs: true
max_pipelines: 7               # a service limit
max_batch_bytes: 65536         # no flag: straight to JobConfig
sharding: stratified
topic_prefix: prod-
topics: {predictions: scores}
protocol_modules: [my_protocols]
kafka:
  bootstrap_servers: b1:9092,b2:9092
  security_protocol: SASL_SSL
  sasl_mechanism: SCRAM-SHA-512
  sasl_username: omldm
  sasl_password: secret
  properties: {compression.type: lz4, client.id: omldm}
flink:
  pipeline.name: from-a-file
  metrics:
    reporter.prom.port: 9250
"""

TOML = """\
spokes = 4
hubs = 2
execution_mode = "thread"
checkpoint_interval_ms = 5000
checkpoint_dir = "file:///tmp/omldm-checkpoints"
exactly_once_outputs = true
max_pipelines = 7
max_batch_bytes = 65536
sharding = "stratified"
topic_prefix = "prod-"
protocol_modules = ["my_protocols"]

[topics]
predictions = "scores"

[kafka]
bootstrap_servers = "b1:9092,b2:9092"
security_protocol = "SASL_SSL"
sasl_mechanism = "SCRAM-SHA-512"
sasl_username = "omldm"
sasl_password = "secret"
properties = {"compression.type" = "lz4", "client.id" = "omldm"}

[flink]
"pipeline.name" = "from-a-file"
"metrics.reporter.prom.port" = 9250
"""


def _job(tmp_path, name: str, text: str, *flags: str):
    path = tmp_path / name
    path.write_text(text)
    args, settings = parse(["--config", str(path), *flags])
    return config_from_args(args, settings)


def test_yaml_and_toml_describe_the_same_job(tmp_path):
    a = _job(tmp_path, "deploy.yaml", YAML)
    b = _job(tmp_path, "deploy.toml", TOML)
    assert a == b
    bom = tmp_path / "bom.toml"  # a byte order mark, as some editors write
    bom.write_bytes(b"\xef\xbb\xbf" + TOML.encode())
    assert config_from_args(*parse(["--config", str(bom)])) == b
    assert (a.spokes, a.hubs, a.execution_mode, a.checkpoint_interval_ms) == (4, 2, "thread", 5000)
    assert a.checkpoint_dir == "file:///tmp/omldm-checkpoints" and a.exactly_once_outputs
    assert (a.max_pipelines, a.max_batch_bytes, a.sharding) == (7, 65536, "stratified")
    assert a.protocol_modules == ("my_protocols",)
    assert a.topics.training == "prod-training" and a.topics.predictions == "prod-scores"
    c = a.connection
    assert c.bootstrap_servers == "b1:9092,b2:9092" and c.security_protocol == "SASL_SSL"
    assert c.sasl_mechanism == "SCRAM-SHA-512" and c.sasl_username == "omldm"
    assert dict(c.properties) == {"compression.type": "lz4", "client.id": "omldm"}
    assert c.java_properties()["compression.type"] == "lz4"
    assert dict(a.flink_options) == {"pipeline.name": "from-a-file",
                                     "metrics.reporter.prom.port": "9250"}


def test_flags_win_over_the_file_and_the_file_over_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("OMLDM_BOOTSTRAP_SERVERS", "from-env:9092")
    job = _job(tmp_path, "deploy.yaml", YAML, "--hubs", "3", "--mode", "process",
               "-X", "acks=all", "--topic-prefix", "test-")
    assert (job.spokes, job.hubs, job.execution_mode) == (4, 3, "process")
    assert job.connection.bootstrap_servers == "b1:9092,b2:9092"  # the file, not $OMLDM_...
    assert dict(job.connection.properties) == {"compression.type": "lz4", "client.id": "omldm",
                                               "acks": "all"}
    assert job.topics.training == "test-training" and job.topics.predictions == "test-scores"
    job = _job(tmp_path, "small.yaml", "spokes: 3\n")  # what the file leaves out: env, defaults
    assert job.connection.bootstrap_servers == "from-env:9092"
    assert (job.spokes, job.hubs, job.execution_mode, job.checkpoint_interval_ms) == (
        3, 1, "process", 10_000)


@pytest.mark.parametrize("name, text, message", [
    ("a.yaml", "spoke: 4\n", r"unknown setting 'spoke' \(did you mean 'spokes'\?\)"),
    ("a.yaml", "spokes: four\n", "spokes must be an integer, got 'four'"),
    ("a.yaml", "spokes: 2.5\n", "spokes must be an integer, got 2.5"),
    ("a.yaml", "metrics: 1\n", "metrics must be true or false, got 1"),
    ("a.toml", "exactly_once_outputs = 'yes'\n", "exactly_once_outputs must be true or false"),
    ("a.yaml", "kafka: {bootstrap: x:1}\n", r"kafka.bootstrap: unknown Kafka setting \(did you "
                                             r"mean 'bootstrap_servers'\?\)"),
    ("a.yaml", "topics: {prediction: p}\n", r"topics.prediction: not a topic \(did you mean "
                                            r"'predictions'\?\)"),
    ("a.yaml", "flink: [a, b]\n", "flink must be a mapping"),
    ("a.yaml", "protocol_modules: 3\n", "protocol_modules must be a list of module names"),
    ("a.yaml", "- spokes\n", "must be a mapping of settings, got list"),
    ("a.yaml", "spokes: [\n", "not valid YAML"),
    ("a.toml", "spokes = \n", "not valid TOML"),
    ("a.json", "{}", "must end in .yaml, .yml or .toml"),
])
def test_a_bad_file_is_one_clear_error(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as err:
        load_config_file(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_values_are_checked_as_the_flags_are(tmp_path):
    with pytest.raises(ValueError, match="spokes must be >= 1, got 0"):
        _job(tmp_path, "a.yaml", "spokes: 0\nkafka: {bootstrap_servers: x:1}\n")
    with pytest.raises(ValueError, match="sharding must be one of"):
        _job(tmp_path, "a.yaml", "sharding: by-colour\nkafka: {bootstrap_servers: x:1}\n")
    with pytest.raises(ValueError, match="cannot read it"):
        load_config_file(tmp_path / "missing.yaml")


def test_the_files_flink_options_reach_the_job(tmp_path):
    from flink_jobs.job import create_environment

    job = _job(tmp_path, "deploy.yaml", "kafka: {bootstrap_servers: 'x:1'}\n"
               "flink: {pipeline.name: from-a-file, parallelism.default: 3}\n")
    env = create_environment(job, local=False)
    conf = env._j_stream_execution_environment.getConfiguration()
    assert conf.toMap()["pipeline.name"] == "from-a-file"


#: the deployment file docs/operations.md points at
EXAMPLE = Path(__file__).parent.parent / "deploy" / "omldm.example.yaml"


def test_the_example_deployment_file_is_valid():
    """``deploy/omldm.example.yaml``, which docs/operations.md points at, loads."""
    settings = load_config_file(EXAMPLE)
    assert settings["kafka"]["bootstrap_servers"]


def test_the_example_deployment_file_shows_the_defaults():
    """Every job setting ``deploy/omldm.example.yaml`` gives is :class:`JobConfig`'s
    default, so that deploying with the file changes nothing a default was measured for
    (it set ``max_batch_records`` 1,000 after the default became 250)."""
    defaults = JobConfig("k:9092")
    fields = {f.name for f in dataclasses.fields(JobConfig)}
    given = {k: v for k, v in load_config_file(EXAMPLE).items() if k in fields}
    assert "max_batch_records" in given
    assert {k: v for k, v in given.items() if getattr(defaults, k) != v} == {}
