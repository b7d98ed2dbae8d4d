"""``omldm stream`` on a user's own data: the reader (no Kafka) and one run through the
real local broker, reading back exactly the records the job would read."""

from __future__ import annotations

import io
import itertools
import json

import pytest

from flink_jobs.cli import main
from flink_jobs.stream_files import (DEFAULT_GENERATOR_LIMIT, BadRow, RecordReader,
                                     write_stream)

CSV = "a,name,b,label\n1,x,2.5,0\n3,y,4,1\n"


def _write(tmp_path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_csv_with_header_takes_numeric_columns_and_the_label(tmp_path):
    reader = RecordReader(_write(tmp_path, "d.csv", CSV))
    items = list(reader)
    assert items == [{"id": 0, "features": [1.0, 2.5], "label": 0},
                     {"id": 1, "features": [3.0, 4.0], "label": 1}]
    assert (reader.columns, reader.left_out) == (["a", "b"], ["name"])  # said by omldm stream


def test_csv_columns_chosen_by_flags(tmp_path):
    text = "key,a,b,class\n7,1,2,cat\n9,3,4,dog\n"
    items = list(RecordReader(_write(tmp_path, "d.csv", text), label="class", id="key",
                              features=["b"]))
    assert items == [{"id": 7, "features": [2.0], "label": "cat"},
                     {"id": 9, "features": [4.0], "label": "dog"}]


def test_no_label_column_means_unlabelled_and_first_id(tmp_path):
    items = list(RecordReader(_write(tmp_path, "d.csv", "a,b\n1,2\n"), first_id=100))
    assert items == [{"id": 100, "features": [1.0, 2.0]}]


def test_unknown_column_fails_before_reading(tmp_path):
    with pytest.raises(ValueError, match="--label column 'nope'"):
        list(RecordReader(_write(tmp_path, "d.csv", CSV), label="nope"))


def test_a_byte_order_mark_is_not_part_of_the_first_column(tmp_path):
    """Spreadsheet programs start a UTF-8 CSV with a byte order mark; it stayed in the first
    column's name, so ``--label`` naming that column was refused ("not in the header
    ['\\ufeffclass', ...]") and a JSON Lines file's first record was a bad row."""
    path = tmp_path / "excel.csv"
    path.write_bytes(b"\xef\xbb\xbfclass,a,b\r\nx,1,2\r\ny,3,4\r\n")
    assert list(RecordReader(str(path), label="class")) == [
        {"id": 0, "features": [1.0, 2.0], "label": "x"},
        {"id": 1, "features": [3.0, 4.0], "label": "y"}]
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"a": 1, "label": 0}\n{"a": 2, "label": 1}\n')
    assert list(RecordReader(str(path))) == [{"id": 0, "features": [1.0], "label": 0},
                                             {"id": 1, "features": [2.0], "label": 1}]
    assert list(RecordReader("-", stdin=io.StringIO("\ufeffa,label\n1,2\n"))) == [
        {"id": 0, "features": [1.0], "label": 2}]


@pytest.mark.parametrize("text,delimiter", [
    ("a;b;label\n1,5;2;x\n3;4,25;y\n", None),        # a spreadsheet's, decimal commas
    ("a\tb\tlabel\n1.5\t2\tx\n3\t4.25\ty\n", None),
    ("a|b|label\n1.5|2|x\n3|4.25|y\n", None),
    ("a:b:label\n1.5:2:x\n3:4.25:y\n", ":"),
])
def test_the_delimiter_is_the_header_lines_or_the_one_given(tmp_path, text, delimiter):
    """Read with commas, such a file had one column and every record empty features."""
    items = list(RecordReader(_write(tmp_path, "d.csv", text), delimiter=delimiter))
    assert items == [{"id": 0, "features": [1.5, 2.0], "label": "x"},
                     {"id": 1, "features": [3.0, 4.25], "label": "y"}]


def test_a_decimal_comma_label_is_a_number(tmp_path):
    """A regression target written with a decimal comma was streamed as a string, and the
    job refused every record (label_type)."""
    assert list(RecordReader(_write(tmp_path, "d.csv", "a;price\n1;2,5\n2;-0,25\n"),
                             label="price")) == [
        {"id": 0, "features": [1.0], "label": 2.5}, {"id": 1, "features": [2.0], "label": -0.25}]


def test_no_numeric_column_is_an_error_not_empty_records(tmp_path):
    with pytest.raises(ValueError, match=r"no column of the header \['a:b:label'\]"):
        list(RecordReader(_write(tmp_path, "d.csv", "a:b:label\n1:2:x\n")))
    with pytest.raises(ValueError, match="no key is a number"):
        list(RecordReader(_write(tmp_path, "d.jsonl", '{"name": "x", "label": 1}\n')))
    with pytest.raises(ValueError, match="one character"):
        RecordReader(_write(tmp_path, "d.csv", CSV), delimiter=";;")


def test_the_jobs_own_records_keep_their_features_and_ids(tmp_path):
    """A JSON Lines file of the job's own records (``{"id", "features": [...], "label"}``)
    was streamed with empty features: the array is not a number, so no column was one."""
    text = ('{"id": "a7", "features": [1, 2.5], "label": 0}\n'
            '{"id": "a8", "features": [3, "x"], "label": 1}\n'
            '{"id": "a9", "features": [4, 5], "label": 1}\n')
    items = list(RecordReader(_write(tmp_path, "d.jsonl", text)))
    assert items[0] == {"id": "a7", "features": [1.0, 2.5], "label": 0}
    assert isinstance(items[1], BadRow) and "feature 1 is not a finite number" in str(items[1])
    assert items[2] == {"id": "a9", "features": [4.0, 5.0], "label": 1}
    # an id column is the records' id, not a feature (as a label column is their label)
    assert list(RecordReader(_write(tmp_path, "d.csv", "id,a,label\n17,1,x\n"))) == [
        {"id": 17, "features": [1.0], "label": "x"}]


def test_jsonl(tmp_path):
    text = ('{"x": 1, "y": 2.5, "tag": "a", "label": true}\n\n'
            '{"x": 3, "y": 4, "tag": "b", "label": false}\n')
    assert list(RecordReader(_write(tmp_path, "d.jsonl", text))) == [
        {"id": 0, "features": [1.0, 2.5], "label": True},
        {"id": 1, "features": [3.0, 4.0], "label": False}]


def test_stdin_csv_by_default_and_jsonl_by_format():
    assert list(RecordReader("-", stdin=io.StringIO("a,label\n1,2\n"))) == [
        {"id": 0, "features": [1.0], "label": 2}]
    assert list(RecordReader("-", format="jsonl", stdin=io.StringIO('{"a": 5}\n'))) == [
        {"id": 0, "features": [5.0]}]


def test_bad_csv_rows_are_reported_with_their_line_and_skipped(tmp_path):
    text = ("a,b,label\n"
            "1,2,0\n"       # line 2: fine
            "1,oops,1\n"    # line 3: non-numeric feature
            "1,2\n"         # line 4: wrong column count
            "1,2,\n"        # line 5: missing label
            "1,nan,1\n"     # line 6: not finite
            "5,6,1\n")      # line 7: fine
    items = list(RecordReader(_write(tmp_path, "d.csv", text)))
    bad = [str(i) for i in items if isinstance(i, BadRow)]
    assert bad == ["line 3: feature 'b' is not a finite number: 'oops'",
                   "line 4: expected 3 columns, got 2",
                   "line 5: missing label in column 'label'",
                   "line 6: feature 'b' is not a finite number: 'nan'"]
    good = [i for i in items if not isinstance(i, BadRow)]
    assert good == [{"id": 0, "features": [1.0, 2.0], "label": 0},
                    {"id": 5, "features": [5.0, 6.0], "label": 1}]  # ids do not shift


def test_bad_jsonl_lines(tmp_path):
    text = ('{"a": 1, "label": 0}\n'
            '{"a": 1, "label": \n'
            '[1, 2]\n'
            '{"a": "x", "label": 1}\n'
            '{"a": 2}\n'
            '{"a": 3, "label": 1}\n')
    items = list(RecordReader(_write(tmp_path, "d.jsonl", text)))
    bad = [(i.line, i.reason.split(":")[0]) for i in items if isinstance(i, BadRow)]
    assert bad == [(2, "invalid JSON"), (3, "expected a JSON object, got list"),
                   (4, "feature 'a' is not a finite number"), (5, "missing label 'label'")]
    assert [i["id"] for i in items if isinstance(i, dict)] == [0, 5]


def test_limit_counts_records_not_bad_rows(tmp_path):
    text = "a,label\nx,0\n1,0\n2,0\n3,0\n"
    items = list(RecordReader(_write(tmp_path, "d.csv", text), limit=2))
    assert [i["features"] for i in items if isinstance(i, dict)] == [[1.0], [2.0]]
    assert len(items) == 3


def test_forecast_every_and_records_per_message():
    records = [{"id": i, "features": [float(i)], "label": i % 2} for i in range(7)]
    sent = []
    summary = write_stream([*records[:3], BadRow(9, "x"), *records[3:]],
                           lambda topic, value: sent.append((topic, value)),
                           forecast_every=3, records_per_message=2, errors=io.StringIO())
    assert summary.to_json() | {"seconds": 0} == {"dataset": "", "training": 5,
                                                  "forecasting": 2, "skipped": 1, "seconds": 0}
    train = [v for t, v in sent if t == "training"]
    fore = [v for t, v in sent if t == "forecasting"]
    assert train == [[records[0], records[1]], [records[3], records[4]], [records[6]]]
    assert fore == [[{"id": 2, "features": [2.0]}, {"id": 5, "features": [5.0]}]]


def test_one_record_per_message_is_a_plain_object_and_rate_paces():
    sent = []
    summary = write_stream(({"id": i, "features": [0.0]} for i in range(5)),
                           lambda t, v: sent.append(v), rate=100.0)
    assert sent[0] == {"id": 0, "features": [0.0]} and summary.training == 5
    assert summary.seconds >= 0.04  # 5 records at 100/s: the last one at 40 ms


def test_river_phishing():
    reader = RecordReader("river:Phishing", limit=3)
    items = list(reader)
    assert reader.total == 3 and len(items) == 3
    assert items[0]["id"] == 0 and len(items[0]["features"]) == 9
    assert items[0]["label"] is True


def test_river_generator_is_seeded_and_limited():
    first = list(RecordReader("river:synth.Agrawal", seed=7, limit=5))
    again = list(RecordReader("river:synth.Agrawal", seed=7, limit=5))
    other = list(RecordReader("river:synth.Agrawal", seed=8, limit=5))
    assert first == again != other and len(first) == 5
    assert len(first[0]["features"]) == 9 and isinstance(first[0]["label"], int)
    assert RecordReader("river:synth.SEA", seed=1).total == DEFAULT_GENERATOR_LIMIT


@pytest.mark.parametrize("source, kwargs, message", [
    ("river:Nope", {}, "unknown river dataset"),
    ("river:Higgs", {}, "needs a download"),
    ("river:Phishing", {"seed": 1}, "takes no seed"),
    ("river:Phishing", {"label": "y"}, "--label and --id apply"),
    ("data.txt", {}, "cannot tell the format"),
    ("missing.csv", {}, "no such file"),
])
def test_bad_sources_are_refused(source, kwargs, message):
    with pytest.raises(ValueError, match=message):
        RecordReader(source, **kwargs)


def test_the_command_through_the_real_broker(broker, tmp_path, capsys):
    from flink_jobs.kafka_io import TopicReader

    path = _write(tmp_path, "my.csv", "a\tb\tclass\tcolor\n1\t2\tx\tred\n3\t4\ty\tred\n"
                  "5\tbad\tz\tblue\n6\t7\tx\tred\n8\t9\ty\tred\n")
    prefix = "streamfiles-"
    assert main(["stream", path, "--label", "class", "--forecast-every", "2",
                 "--records-per-message", "2", "--no-progress", "--delimiter", "tab",
                 "--bootstrap-servers", broker.bootstrap_servers, "--topic-prefix", prefix]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out.strip().splitlines()[-1]) | {"seconds": 0} == {
        "dataset": path, "training": 2, "forecasting": 2, "skipped": 1, "seconds": 0}
    assert "line 4: feature 'b' is not a finite number: 'bad'" in err
    assert "omldm stream: features: a, b; left out: color (not numbers" in err
    got = {}
    for topic in ("training", "forecasting"):
        reader = TopicReader(broker.bootstrap_servers, prefix + topic)
        got[topic] = list(reader.drain(idle_ms=500))
        reader.close()
    assert got["training"] == [[{"id": 0, "features": [1.0, 2.0], "label": "x"},
                                {"id": 3, "features": [6.0, 7.0], "label": "x"}]]
    assert got["forecasting"] == [[{"id": 1, "features": [3.0, 4.0]},
                                   {"id": 4, "features": [8.0, 9.0]}]]


def test_predict_refuses_a_bad_csv_before_it_waits_for_a_model(tmp_path, capsys):
    path = _write(tmp_path, "my.csv", CSV)
    assert main(["predict", "--pipeline", "0", "--input", path, "--label", "nope",
                 "--bootstrap-servers", "localhost:1"]) == 2
    assert "--label column 'nope' is not in the header" in capsys.readouterr().err


def test_the_command_refuses_a_bad_source_with_exit_2(capsys):
    assert main(["stream", "river:Nope", "--bootstrap-servers", "127.0.0.1:1"]) == 2
    assert "unknown river dataset" in capsys.readouterr().err


# -- categorical columns: one-hot by feature hashing ------------------------------------------
def _one_hot(column: str, value: str, k: int) -> list[float]:
    from flink_jobs.stream_files import bucket

    hot = [0.0] * k
    hot[bucket(column, value, k)] = 1.0
    return hot


def test_a_bucket_is_where_scikit_learns_feature_hasher_puts_the_value():
    from sklearn.feature_extraction import FeatureHasher

    from flink_jobs.stream_files import bucket

    values = ["", "Paris", "Zürich", "São Paulo", "1", "1.5", "true", "x" * 200,
              *(f"merchant-{i}" for i in range(200))]
    for k in (2, 3, 16, 1000, 1 << 16):
        hashed = FeatureHasher(n_features=k, input_type="string", alternate_sign=False)
        matrix = hashed.transform([[f"city={v}"] for v in values]).tocsr()
        assert [matrix[i].indices.tolist() for i in range(len(values))] == \
            [[bucket("city", v, k)] for v in values]


def test_categorical_columns_become_one_hot_features_after_the_numeric_ones(tmp_path):
    text = "a,city,shape,label\n1,Paris,circle,x\n2,Rome,,y\n3,NA,square,x\n4,Paris,circle,y\n"
    reader = RecordReader(_write(tmp_path, "d.csv", text), missing=["NA"],
                          categorical={"city": 8, "shape": 4})
    items = list(reader)
    assert (reader.columns, reader.left_out) == (["a"], [])
    assert items[0] == {"id": 0, "label": "x", "features": [
        1.0, *_one_hot("city", "Paris", 8), *_one_hot("shape", "circle", 4)]}
    assert items[1]["features"] == [2.0, *_one_hot("city", "Rome", 8), *[0.0] * 4]  # empty
    assert items[2]["features"] == [3.0, *[0.0] * 8, *_one_hot("shape", "square", 4)]  # NA
    assert items[3]["features"][1:] == items[0]["features"][1:]
    # a column of numbers only: the categorical column alone, without numeric ones
    only = list(RecordReader("-", stdin=io.StringIO("zip,label\n75001,a\n00100,b\n"),
                             categorical={"zip": 4}))
    assert [r["features"] for r in only] == [_one_hot("zip", "75001", 4),
                                             _one_hot("zip", "00100", 4)]


def test_categorical_keys_of_json_lines_and_river():
    lines = "\n".join(json.dumps(o) for o in (
        {"a": 1, "c": "red", "label": 0}, {"a": 2, "c": 7, "label": 1},
        {"a": 3, "c": True, "label": 0}, {"a": 4, "c": None, "label": 1},
        {"a": 5, "label": 0}, {"a": 6, "c": [1], "label": 1}))
    items = list(RecordReader("-", format="jsonl", stdin=io.StringIO(lines),
                              categorical={"c": 4}))
    assert [r["features"] if isinstance(r, dict) else str(r) for r in items] == [
        [1.0, *_one_hot("c", "red", 4)], [2.0, *_one_hot("c", "7", 4)],
        [3.0, *_one_hot("c", "true", 4)], [4.0, 0.0, 0.0, 0.0, 0.0], [5.0, 0.0, 0.0, 0.0, 0.0],
        "line 6: categorical feature 'c' is a list, not a scalar"]
    river = list(RecordReader("river:synth.STAGGER", seed=1, limit=3,
                              categorical={"size": 3, "color": 3, "shape": 3}))
    assert all(len(r["features"]) == 9 and sum(r["features"]) == 3 for r in river)


@pytest.mark.parametrize("kwargs,message", [
    ({"categorical": {"nope": 4}}, "--categorical columns ['nope'] are not in the header"),
    ({"categorical": {"a": 1}}, "buckets must be an integer in [2, 65536], got 1"),
    ({"categorical": {"a": 4}, "features": ["a"]}, "cannot be categorical and also a feature"),
    ({"categorical": {"label": 4}}, "cannot be categorical and also the label or the id"),
])
def test_bad_categorical_columns_are_refused(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        list(RecordReader(_write(tmp_path, "d.csv", CSV), **kwargs))
    with pytest.raises(ValueError, match="has no categorical columns"):
        RecordReader("shuttle", categorical={"a": 4})


def _stagger_csv(path, codes: bool = True) -> str:
    """river's seeded STAGGER concepts (Schlimmer & Granger 1986), its second concept, as a
    user's CSV of words: size, color and shape (with ``codes``, also as the generator's
    codes 0, 1, 2), and whether the object is of the concept."""
    from river.datasets import synth

    words = {"size": ("small", "medium", "large"), "color": ("red", "green", "blue"),
             "shape": ("circle", "square", "triangle")}
    rows = ["size,color,shape" + (",code_size,code_color,code_shape" if codes else "") +
            ",label"]
    for x, y in itertools.islice(synth.STAGGER(classification_function=1, seed=7), 5000):
        rows.append(",".join([*(words[k][x[k]] for k in words),
                              *(str(x[k]) for k in words if codes), str(int(y))]))
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def test_one_hot_categories_let_a_linear_learner_learn_a_categorical_concept(tmp_path):
    """STAGGER's concept is a disjunction of categories: as the categories' codes (0, 1,
    2) it is not linear, and PA on 2 spokes (TAP) reaches 0.880 prequential accuracy; one
    hot in the default 32 buckets, 0.998. In 8 buckets red and blue share one (the reader
    counts it) and the concept is lost: 0.775."""
    from operators.local import LocalNetwork

    path = _stagger_csv(tmp_path / "stagger.csv")
    accuracy = {}
    shared = {}
    for name, kwargs in (("codes", {"features": ["code_size", "code_color", "code_shape"]}),
                         ("one-hot", {"categorical": {"size": 32, "color": 32, "shape": 32},
                                      "features": []}),
                         ("8 buckets", {"categorical": {"size": 8, "color": 8, "shape": 8},
                                        "features": []})):
        reader = RecordReader(path, **kwargs)
        records = list(reader)
        shared[name] = reader.shared
        net = LocalNetwork(n_spokes=2, n_hubs=1)
        net.request({"id": 0, "request": "Create", "preProcessors": [{"name": "StandardScaler"}],
                     "learner": {"name": "PA"},
                     "trainingConfiguration": {"protocol": "Asynchronous", "miniBatchSize": 16}})
        net.stream([(True, rec) for rec in records])
        q = net.query()
        assert q["fitted"] == 5000 and q["rejected"] == 0
        accuracy[name] = q["prequentialAccuracy"]
    assert accuracy["one-hot"] > 0.99 and accuracy["codes"] < 0.9, accuracy
    assert shared["one-hot"] == {"size": 0, "color": 0, "shape": 0}
    assert shared["8 buckets"] == {"size": 1, "color": 1, "shape": 0}
    assert accuracy["8 buckets"] < 0.8, accuracy


def test_categorical_columns_through_the_real_broker(broker, tmp_path, capsys):
    from flink_jobs.kafka_io import TopicReader

    path = _write(tmp_path, "shop.csv", "amount,merchant,country,label\n12.5,acme,FR,0\n"
                  "990,shady,,1\n")
    prefix = "categorical-"
    assert main(["stream", path, "--categorical", "merchant,country:4", "--no-progress",
                 "--bootstrap-servers", broker.bootstrap_servers, "--topic-prefix", prefix]) == 0
    err = capsys.readouterr().err
    assert "omldm stream: features: amount, merchant (32 one-hot), country (4 one-hot)" in err
    assert "omldm stream: merchant: 2 values in 32 buckets\n" in err
    reader = TopicReader(broker.bootstrap_servers, prefix + "training")
    got = sorted(reader.drain(idle_ms=500), key=lambda r: r["id"])
    reader.close()
    assert got == [
        {"id": 0, "label": 0, "features": [12.5, *_one_hot("merchant", "acme", 32),
                                           *_one_hot("country", "FR", 4)]},
        {"id": 1, "label": 1, "features": [990.0, *_one_hot("merchant", "shady", 32),
                                           0.0, 0.0, 0.0, 0.0]}]
    assert main(["stream", path, "--categorical", "merchant:many",
                 "--bootstrap-servers", broker.bootstrap_servers]) == 2
    assert "--categorical 'merchant:many': the buckets after ':' must be an integer" in \
        capsys.readouterr().err


def test_on_flink_a_categorical_concept_is_learned_from_a_csv_of_words(broker, tmp_path,
                                                                        capsys):
    """The user's path, end to end: a CSV of words streamed by ``omldm stream
    --categorical`` into a running job, a PA pipeline on 2 spokes learning STAGGER's
    concept from the one-hot features."""
    from flink_jobs.session import Session, local_config

    path = _stagger_csv(tmp_path / "stagger.csv", codes=False)
    cfg = local_config(broker.bootstrap_servers, topic_prefix="categorical-flink-", spokes=2)
    with Session(cfg, "categorical") as s:
        assert s.request({"id": 0, "request": "Create", "requestId": "c",
                          "preProcessors": [{"name": "StandardScaler"}],
                          "learner": {"name": "PA", "parameters": {"n_features": 96}},
                          "trainingConfiguration": {"protocol": "Asynchronous",
                                                    "miniBatchSize": 16}},
                         timeout=120)["status"] == "ok"
        assert main(["stream", path, "--categorical", "size,color,shape", "--no-progress",
                     "--records-per-message", "20", "--bootstrap-servers",
                     broker.bootstrap_servers, "--topic-prefix", "categorical-flink-"]) == 0
        q = s.wait_until_counted(0, 4000, 1000, timeout=120)
    assert "features: size (32 one-hot), color (32 one-hot), shape (32 one-hot)" in \
        capsys.readouterr().err
    assert q["rejected"] == 0 and q["prequentialAccuracy"] > 0.99, q["prequentialAccuracy"]
