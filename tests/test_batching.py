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


def test_the_spokes_subtasks_are_a_checked_setting():
    """``JobConfig.spoke_parallelism``: 0 (one subtask per spoke) up to the spokes."""
    assert JobConfig("k:9092", spokes=3).spoke_subtasks == 3
    assert JobConfig("k:9092", spokes=3, spoke_parallelism=2).spoke_subtasks == 2
    for bad in (-1, 4):
        with pytest.raises(ValueError, match=f"spoke_parallelism must be between 0 .* got {bad}"):
            JobConfig("k:9092", spokes=3, spoke_parallelism=bad)


def test_the_interpreter_switch_interval_is_a_setting_a_spoke_reports():
    """``JobConfig.switch_interval_ms`` (thread mode; 0: Python's own) is checked, and a
    spoke's service counters say what its interpreter runs at (the end-to-end test
    checks that a thread-mode job's spokes run at the default)."""
    import sys

    assert JobConfig("k:9092").switch_interval_ms == 100
    assert JobConfig("k:9092", switch_interval_ms=0).switch_interval_ms == 0
    with pytest.raises(ValueError, match="switch_interval_ms must be >= 0, got -1"):
        JobConfig("k:9092", switch_interval_ms=-1)
    service = SpokeKernel(0, 1, 1, hub_keys=[0]).service()
    assert service["switchIntervalMs"] == pytest.approx(sys.getswitchinterval() * 1000.0)


def test_flink_run_takes_the_batch_options():
    cfg = config_from_args(parser().parse_args(
        ["--bootstrap-servers", "k:9092", "--max-batch-delay-ms", "7", "--max-batch-records", "50"]))
    assert (cfg.max_batch_delay_ms, cfg.max_batch_records) == (7, 50)


def test_serve_and_demo_take_the_batch_options_and_a_config_file_sets_them(tmp_path):
    """``omldm serve`` and ``omldm demo`` take both batch bounds as flink_run.py does; a
    ``--config`` file's ``max_batch_records`` becomes serve's default, a flag wins."""
    from flink_jobs.cli import _parser
    from flink_jobs.config_file import load_config_file

    for command in ("serve", "demo"):
        args = _parser().parse_args([command])
        assert (args.max_batch_delay_ms, args.max_batch_records) == \
            (JobConfig.max_batch_delay_ms, JobConfig.max_batch_records)
        args = _parser().parse_args([command, "--max-batch-delay-ms", "3",
                                     "--max-batch-records", "64"])
        assert (args.max_batch_delay_ms, args.max_batch_records) == (3, 64)
    (tmp_path / "omldm.yaml").write_text("max_batch_records: 100\n")
    settings = load_config_file(tmp_path / "omldm.yaml")
    assert _parser(settings).parse_args(["serve"]).max_batch_records == 100
    assert _parser(settings).parse_args(
        ["serve", "--max-batch-records", "40"]).max_batch_records == 40


def test_the_batcher_is_compiled_from_its_source_into_a_cached_jar():
    jar = omldm_jar()
    assert jar.name.startswith("omldm-java-") and omldm_jar() == jar  # cached by content
    with zipfile.ZipFile(jar) as zf:
        assert {"omldm/RecordBatcher.class", "omldm/LineSplitter.class",
                "omldm/ToSpokes.class"} <= set(zf.namelist())


def test_two_processes_filling_an_empty_cache_at_once_both_get_the_jar(tmp_path):
    """Two ``omldm`` commands started together on a new machine compile the jar at the
    same time: each writes its own part file and renames it into place, so both end
    with the same good jar (readable by all, as before) and no part file is left behind."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "OMLDM_CACHE": str(tmp_path)}
    code = "from deploy.assets import omldm_jar; print(omldm_jar())"
    runs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [run.communicate(timeout=300) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], [err for _, err in outs]
    paths = {out.strip() for out, _ in outs}
    assert len(paths) == 1
    with zipfile.ZipFile(paths.pop()) as zf:
        assert "omldm/RecordBatcher.class" in zf.namelist()
    assert not list(tmp_path.glob("*.part"))
    assert {p.stat().st_mode & 0o777 for p in tmp_path.glob("*.jar")} == {0o644}


def test_a_batch_carries_each_record_its_topic_and_its_order():
    k = SpokeKernel(0, 1, 1, hub_keys=[0])
    k.on_message(orjson.dumps({"id": 0, "request": "Create",
                               "learner": {"name": "PA", "parameters": {"n_features": 2}},
                               # TAP, no warm-up: no hub answers here
                               "trainingConfiguration": {"miniBatchSize": 1,
                                                         "warmupRounds": 0}}))
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


def test_java_routes_the_spokes_messages_exactly_as_python_does():
    """With batching on, ``omldm.ToSpokes`` routes requests and the ``psMessages`` topic to
    spoke keys in the JVM, so that a hub's answer skips a crossing into Python. On a real
    MiniCluster it gives every input the keys ``job._ToSpokes`` (the path without
    batching) gives: frames and sibling frames to their spoke, bare envelopes to their
    destination, requests and garbage to every spoke, short or out-of-range ones to spoke
    0."""
    from pyflink.common import Types
    from pyflink.datastream import DataStream
    from pyflink.java_gateway import get_gateway

    from pyflink.util.java_utils import to_jarray

    from flink_jobs.job import _ToSpokes, create_environment, hub_keys
    from middleware import codec
    from middleware.envelope import Envelope, Kind

    keys = hub_keys(3)
    env_bytes = codec.encode(Envelope(7, 0, 1, 1, 2, 5, 9, "push", Kind.REQUEST, {"w": [1.0]}))
    inputs = [codec.frame(11, 0, 3, 7, 1, spoke) for spoke in (0, 1, 2, 3, 700)]
    inputs += [codec.frame(11, 0, 3, 7, 1, 2, b"body")[:36],  # shorter than its header
               codec.sibling_frame(codec.SiblingOp.DATA, 5, 0, 0, 7, 0, 2, env_bytes),
               codec.sibling_frame(codec.SiblingOp.ACK, 5, 0, 0, 7, 2, 1)[:57],
               env_bytes, env_bytes[:34], b'{"request": "Query", "id": 4}', b"\xfd{}",
               b"not json", b""]
    expected = [(row[0], bytes(row[1])) for data in inputs for row in _ToSpokes(keys)(data)]

    flink = create_environment(JobConfig("k:9092", spokes=3, jars=(omldm_jar().as_uri(),)))
    src = flink.from_collection([d.hex() for d in inputs], type_info=Types.STRING()).map(
        bytes.fromhex, output_type=Types.PRIMITIVE_ARRAY(Types.BYTE()))  # bytes can't come in
    routed = DataStream(src._j_data_stream.flatMap(
        get_gateway().jvm.omldm.ToSpokes(to_jarray(get_gateway().jvm.int, keys)),
        Types.ROW([Types.INT(), Types.PRIMITIVE_ARRAY(Types.BYTE())]).get_java_type_info()))
    with routed.execute_and_collect() as results:
        got = [(row[0], bytes(b % 256 for b in row[1])) for row in results]  # signed in Java
    assert sorted(got) == sorted(expected)  # (the map above may run in parallel)
    assert [k for k, _ in expected[:5]] == [keys[0], keys[1], keys[2], keys[0], keys[0]]
    assert sum(k == keys[0] for k, _ in expected) > 3
    assert len(expected) == len(inputs) + 4 * 2  # 4 inputs go to all 3 spokes


def _kernel_outputs(learner: dict, batch: int | None, scores: bool = False) -> tuple[list, int]:
    """Shuttle's first 1,500 records (every third one forecast) through one spoke kernel,
    ``batch`` records per crossing (None: one record per ``on_data`` call)."""
    from learning.datasets import shuttle

    X, y = shuttle()
    k = SpokeKernel(0, 1, 1, hub_keys=[0], limits={"prediction_scores": scores},
                    execution_mode="process")  # the Hoeffding tree needs it
    k.on_message(orjson.dumps({
        "id": 0, "request": "Create", "learner": learner,
        "preProcessors": [{"name": "StandardScaler"}],
        "trainingConfiguration": {"protocol": "Independent", "miniBatchSize": 4}}))
    recs = [(i % 3 != 2, orjson.dumps({"id": i, "features": X[i].tolist(), "label": int(y[i])}
                                      if i % 3 != 2 else {"id": i, "features": X[i].tolist()}))
            for i in range(1500)]
    k.out.clear()
    if batch is None:
        for train, raw in recs:
            k.on_data(("T" if train else "P") + raw.decode())
    else:
        for lo in range(0, len(recs), batch):
            k.on_batch(record_batch(recs[lo:lo + batch]))
    return [orjson.loads(v) for s, v in k.out if s is None], k.nodes[0].predicted


@pytest.mark.parametrize("learner, scores", [
    ({"name": "PA", "hyperParameters": {"C": 0.01}, "parameters": {"n_features": 9}}, False),
    ({"name": "HoeffdingTree", "parameters": {"n_features": 9}}, True)])
def test_forecasts_of_a_batch_are_predicted_together_as_each_would_be_alone(learner, scores):
    """A pipeline predicts a batch's forecasting records in one call per run between two
    model changes (``PipelineSpoke.settle_forecasts``): the predictions (and scores) are
    exactly those of one record per crossing, in the same order, every forecast counted,
    with mini-batches of 4 fitted in the middle of each batch."""
    alone, n_alone = _kernel_outputs(learner, None, scores)
    assert n_alone == len(alone) == 500
    for size in (7, 500):
        together, n = _kernel_outputs(learner, size, scores)
        assert n == 500 and together == alone
    assert len({str(p["prediction"]) for p in alone}) >= 3  # the model moved on
    if scores:
        assert sum("probabilities" in p for p in alone) >= 490


def test_a_forecast_the_learner_cannot_predict_is_refused_alone():
    """If the group's prediction fails, each forecast is tried on its own: the one the
    learner cannot predict is dead-lettered (``predict_failed``), the others answered in
    order."""
    k = SpokeKernel(0, 1, 1, hub_keys=[0])
    k.on_message(orjson.dumps({"id": 0, "request": "Create",
                               "learner": {"name": "PA", "parameters": {"n_features": 2}},
                               "trainingConfiguration": {"miniBatchSize": 1}}))
    node = k.nodes[0]
    predict = node.pipeline.predict

    def picky(X):  # a learner that cannot predict a record whose first feature is 13
        if (X[:, 0] == 13.0).any():
            raise ValueError("13 is unlucky")
        return predict(X)

    node.pipeline.predict = picky
    k.out.clear()
    recs = [(True, orjson.dumps({"id": 0, "features": [1.0, 0.0], "label": "a"})),
            (True, orjson.dumps({"id": 1, "features": [0.0, 1.0], "label": "b"}))]
    recs += [(False, orjson.dumps({"id": i, "features": [float(i), 1.0]})) for i in (11, 12, 13, 14)]
    k.on_batch(record_batch(recs))
    assert [orjson.loads(v)["id"] for s, v in k.out if s is None] == [11, 12, 14]
    dead = [orjson.loads(v) for s, v in k.out if s == "deadLetters"]
    assert [(d["record"]["id"], d["code"]) for d in dead] == [(13, "predict_failed")]
    assert "13 is unlucky" in dead[0]["reason"]
    assert (node.predicted, node.rejected_by["predict_failed"]) == (3, 1)


def test_a_push_leaves_in_the_middle_of_its_batch_and_the_rest_keeps_its_order():
    """``SpokeKernel.batch_steps`` stops after each record that left a message for the
    hubs, so the host (``SpokeFunction.process_element1``) sends a push before the rest of
    the batch is handled; what it takes out (``take_messages``) and what stays add up to
    exactly what ``on_batch`` leaves, each in order."""
    def kernel() -> SpokeKernel:
        k = SpokeKernel(0, 2, 1, hub_keys=[0])
        k.on_message(orjson.dumps({
            "id": 0, "request": "Create",
            "learner": {"name": "PA", "parameters": {"n_features": 2, "classes": [0, 1]}},
            # TAP, no warm-up: no hub answers here, and no push waits for one
            "trainingConfiguration": {"protocol": "Asynchronous", "miniBatchSize": 4,
                                      "warmupRounds": 0}}))
        k.out.clear()
        return k

    recs = [(i % 5 != 4, orjson.dumps({"id": i, "features": [float(i % 7), 1.0], "label": i % 2}
                                      if i % 5 != 4 else {"id": i, "features": [1.0, 0.0]}))
            for i in range(200)]
    whole = kernel()
    whole.on_batch(record_batch(recs))
    stepped, sent, steps = kernel(), [], 0
    for _ in stepped.batch_steps(record_batch(recs)):
        steps += 1
        taken = stepped.take_messages()
        assert taken and all(s == "hubs" for s, _ in taken)
        sent.extend(taken)
        if steps == 1:  # the first push left while most records were still to come
            assert stepped.nodes[0].fitted < 40
    assert steps >= 1
    messages = [(s, v) for s, v in whole.out if s == "hubs"]
    assert [v for _, v in sent] + [v for s, v in stepped.out if s == "hubs"] == \
        [v for _, v in messages]
    assert [(s, v) for s, v in stepped.out if s != "hubs"] == \
        [(s, v) for s, v in whole.out if s != "hubs"]
    assert stepped.nodes[0].fitted == whole.nodes[0].fitted == 160


def test_json_arrays_keep_order_and_stay_under_their_limit():
    from operators.spoke import PREDICTION_ARRAY_CHARS, json_arrays

    values = [orjson.dumps({"id": i, "prediction": i % 3}).decode() for i in range(50)]
    assert list(json_arrays([])) == []
    assert list(json_arrays(values)) == ["[" + ",".join(values) + "]"]  # one, well under
    for limit in (40, 100, 333):
        arrays = list(json_arrays(values, limit))
        assert [p["id"] for a in arrays for p in orjson.loads(a)] == list(range(50))
        assert all(len(a) <= limit for a in arrays) and len(arrays) > 1
    big = "[" + "1," * 100 + "1]"  # one value past the limit goes alone
    assert list(json_arrays(["0", big, "2"], 50)) == ["[0]", f"[{big}]", "[2]"]
    assert PREDICTION_ARRAY_CHARS * 4 < 1 << 20  # every array fits Kafka's default 1 MiB


def test_prediction_arrays_is_a_flag_of_serve_and_flink_run():
    from flink_jobs.cli import _parser

    assert JobConfig("k:9092").prediction_arrays is False
    assert _parser().parse_args(["serve", "--prediction-arrays"]).prediction_arrays is True
    cfg = config_from_args(parser().parse_args(["--bootstrap-servers", "k:9092",
                                                "--prediction-arrays"]))
    assert cfg.prediction_arrays is True


def test_predictions_leave_as_json_arrays_each_once_in_order(broker):
    """``JobConfig.prediction_arrays`` on a real MiniCluster and broker: every record on the
    predictions topic is a JSON array, together one prediction per forecasting record
    (ids ascending per spoke, as written), far fewer records than predictions; the
    Session's reader unpacks them."""
    from flink_jobs.demo import shuttle_create_request
    from flink_jobs.kafka_io import TopicReader
    from flink_jobs.session import Session, local_config
    from learning.datasets import shuttle

    X, y = shuttle()
    cfg = local_config(broker.bootstrap_servers, topic_prefix="arrays-", spokes=2,
                       prediction_arrays=True)
    with Session(cfg, "prediction-arrays") as s:
        assert s.request(shuttle_create_request(0), timeout=120)["status"] == "ok"
        held, n_train, n_fore = s.stream(X[:10_000], y[:10_000], records_per_message=50)
        s.wait_until_counted(0, n_train, n_fore, timeout=180)
        assert set(s.predictions_of(0)) == set(held)
        raw = TopicReader(broker.bootstrap_servers, cfg.topics.predictions, json=False)
        records = [orjson.loads(v) for v in raw.drain(idle_ms=500)]
        raw.close()
    assert records and all(isinstance(r, list) and r for r in records)
    flat = [p for r in records for p in r]
    assert len(flat) == n_fore == 2_000 and {p["id"] for p in flat} == set(held)
    assert len(records) < n_fore / 4
    by_spoke: dict[int, list[int]] = {}
    for p in flat:
        by_spoke.setdefault(p["spoke"], []).append(p["id"])
    assert sorted(by_spoke) == [0, 1] and all(ids == sorted(ids) for ids in by_spoke.values())
