"""Records batched in Java before the one crossing into Python: the settings, omldm's jar
and the batch format (the job itself is tested end to end in test_end_to_end.py)."""

from __future__ import annotations

import zipfile

import orjson
import pytest

from deploy.assets import omldm_jar
from flink_jobs.config import JobConfig
from flink_jobs.flink_run import config_from_args, parser
from middleware.codec import record_batch
from operators.spoke_kernel import SpokeKernel


def test_batch_settings_are_checked():
    assert JobConfig("k:9092").max_batch_delay_ms == 1
    assert JobConfig("k:9092", max_batch_delay_ms=0).max_batch_delay_ms == 0  # one per crossing
    with pytest.raises(ValueError, match="max_batch_delay_ms must be >= 0, got -1"):
        JobConfig("k:9092", max_batch_delay_ms=-1)
    with pytest.raises(ValueError, match="max_batch_records must be >= 1, got 0"):
        JobConfig("k:9092", max_batch_records=0)


def test_flink_run_takes_the_batch_options():
    cfg = config_from_args(parser().parse_args(
        ["--bootstrap-servers", "k:9092", "--max-batch-delay-ms", "7", "--max-batch-records", "50"]))
    assert (cfg.max_batch_delay_ms, cfg.max_batch_records) == (7, 50)


def test_the_batcher_is_compiled_from_its_source_into_a_cached_jar():
    jar = omldm_jar()
    assert jar.name.startswith("omldm-java-") and omldm_jar() == jar  # cached by content
    with zipfile.ZipFile(jar) as zf:
        assert {"omldm/RecordBatcher.class", "omldm/LineSplitter.class"} <= set(zf.namelist())


def test_a_batch_carries_each_record_its_topic_and_its_order():
    k = SpokeKernel(0, 1, 1, hub_keys=[0])
    k.on_message(orjson.dumps({"id": 0, "request": "Create",
                               "learner": {"name": "PA", "parameters": {"n_features": 2}},
                               "trainingConfiguration": {"miniBatchSize": 1}}))
    k.out.clear()
    recs = [(i % 3 != 2, orjson.dumps({"id": i, "features": [float(i), 1.0], "label": i % 2}))
            for i in range(9)]
    k.on_batch(record_batch(recs))
    node = k.nodes[0]
    assert node.fitted == 6
    assert [orjson.loads(v)["id"] for s, v in k.out if s is None] == [2, 5, 8]
    assert (k.data_records, k.data_batches) == (9, 1)


def test_predictions_cross_back_joined_and_java_splits_them_in_order():
    """A spoke hands a crossing's predictions to the JVM as one string joined by newlines
    (``SpokeFunction(join_predictions=True)``); ``omldm.LineSplitter`` gives one element
    per prediction again, in order, skipping empty lines, on a real MiniCluster. (That the
    job's predictions topic holds one prediction per forecasting record, in order per
    spoke, is asserted end to end in test_end_to_end.py.)"""
    from pyflink.common import Types
    from pyflink.datastream import DataStream
    from pyflink.java_gateway import get_gateway

    from flink_jobs.job import create_environment

    env = create_environment(JobConfig("k:9092", spokes=1, jars=(omldm_jar().as_uri(),)))
    joined = ['{"id":1}\n{"id":2}', "", '{"id":3}', '\n\n{"id":4,"s":"a\\nb"}\n']
    src = env.from_collection(joined, type_info=Types.STRING())
    split = DataStream(src._j_data_stream.flatMap(get_gateway().jvm.omldm.LineSplitter(),
                                                  Types.STRING().get_java_type_info()))
    with split.execute_and_collect() as results:
        got = list(results)
    assert [orjson.loads(g)["id"] for g in got] == [1, 2, 3, 4]
    assert orjson.loads(got[-1])["s"] == "a\nb"  # an escaped newline inside JSON stays
