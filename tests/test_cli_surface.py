"""The command line's surface (issue 20): ``omldm --version``, ``omldm list``, help on every
flag, one-line errors with documented exit codes; and the one declaration of every
learner's and preprocessor's hyperparameters that ``omldm list``, the request schema and
validation share (:mod:`learning.hyperparameters`).

No broker is needed: the Kafka clients of ``omldm request`` are replaced by fakes.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import inspect
import json

import jsonschema
import pytest

from flink_jobs import cli
from learning import hyperparameters as hp
from learning.errors import HyperparameterError, RequestError
from learning.learners.base import Learner
from learning.preprocessors.selection import FeatureSelector
from learning.registry import (BUILT_IN_LEARNERS, BUILT_IN_PREPROCESSORS, LEARNERS,
                               make_learner)
from learning.requests import SCHEMA_PATH, parse_request

CLASSES = sorted({*BUILT_IN_LEARNERS.values(), *BUILT_IN_PREPROCESSORS.values()},
                 key=lambda c: c.__name__)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- --version and list --------------------------------------------------------------------
def test_version(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0
    assert out.startswith(f"omldm {importlib.metadata.version('omldm')} (PyFlink ")


def test_list_learners_text_shows_every_hyperparameter(capsys):
    code, out, _ = run(capsys, "list", "learners")
    assert code == 0
    assert "PA (also PassiveAggressive, PAClassifier): Passive-aggressive classifier" in out
    assert "  C (float, default 0.01; a number > 0): aggressiveness" in out
    assert "  hidden_layers (list[int], default [64]; a list of integers >= 1): widths" in out
    assert "  delta (float, default 1e-07; a number in (0, 1)):" in out
    for cls in set(BUILT_IN_LEARNERS.values()):
        for p in hp.declaration(cls):
            assert f"  {p.name} ({p.type_name}, default " in out, (cls, p.name)


def test_list_json(capsys):
    code, out, _ = run(capsys, "list", "learners", "--json")
    assert code == 0
    entries = {e["names"][0]: e for e in json.loads(out)}
    assert entries["PA"]["names"] == ["PA", "PassiveAggressive", "PAClassifier"]
    C = next(h for h in entries["PA"]["hyperParameters"] if h["name"] == "C")
    assert C == {"name": "C", "type": "float", "default": 0.01, "allowed": "a number > 0",
                 "description": C["description"]} and C["description"]
    layers = entries["MLP"]["hyperParameters"][0]
    assert (layers["name"], layers["type"], layers["default"], layers["allowed"]) == (
        "hidden_layers", "list[int]", [64], "a list of integers >= 1")
    shape = entries["CNN"]["hyperParameters"][0]
    assert shape["allowed"] == "a list of 3 integers >= 1"
    assert all(e["declared"] for e in entries.values())

    code, out, _ = run(capsys, "list", "preprocessors", "--json")
    entries = {e["names"][0]: e for e in json.loads(out)}
    assert entries["StandardScaler"]["hyperParameters"][0]["name"] == "with_std"
    assert entries["MinMaxScaler"]["hyperParameters"] == []

    code, out, _ = run(capsys, "list", "protocols", "--json")
    entries = json.loads(out)
    assert entries[0]["names"] == [] and any(p["name"] == "miniBatchSize"
                                             for p in entries[0]["parameters"])
    ssp = next(e for e in entries if "SSP" in e["names"])
    assert ssp["names"] == ["SSP", "StaleSynchronous"]
    staleness = next(p for p in ssp["parameters"] if p["name"] == "staleness")
    assert (staleness["type"], staleness["default"], staleness["allowed"]) == (
        "int", 2, "an integer in [0, 100000]")
    code, out, _ = run(capsys, "list", "protocols")
    assert "SSP (also StaleSynchronous): " in out and "  staleness (int, default 2; " in out


class _Undeclared(Learner):
    """A user's learner without HYPERPARAMETERS."""

    def __init__(self, rate=0.5, width=None):
        self.rate = rate
        self.width = width

    def fit(self, X, y): pass

    def predict(self, X): return [None] * len(X)

    def get_params(self): raise NotImplementedError

    def set_params(self, w): raise NotImplementedError

    def _parameters_json(self): return {}


def test_a_user_learner_without_a_declaration_works_and_is_listed(capsys, monkeypatch, tmp_path):
    assert not hp.is_declared(_Undeclared)
    assert [(p.name, p.default, p.description) for p in hp.declaration(_Undeclared)] == [
        ("rate", 0.5, hp.UNDECLARED), ("width", None, hp.UNDECLARED)]
    # registered by a module named on the command line
    (tmp_path / "my_learners.py").write_text(
        "from learning.registry import register_learner\n"
        "from tests.test_cli_surface import _Undeclared\n"
        "register_learner('Mine', _Undeclared)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(LEARNERS, "Mine", None)  # undone after the test
    code, out, _ = run(capsys, "list", "learners", "--protocol-module", "my_learners")
    assert code == 0
    assert "Mine: A user's learner without HYPERPARAMETERS." in out
    assert "hyperparameters not declared" in out and "  rate (any, default 0.5; any value)" in out
    assert make_learner({"name": "Mine", "hyperParameters": {"rate": "anything"}}).rate == "anything"
    with pytest.raises(RequestError) as e:
        make_learner({"name": "Mine", "hyperParameters": {"speed": 1}})
    assert (e.value.code, e.value.field) == ("invalid_hyperparameter",
                                             "learner.hyperParameters.speed")


# -- help ----------------------------------------------------------------------------------
def _parsers(parser: argparse.ArgumentParser, path: str = "omldm"):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}")


def test_every_flag_has_help_that_shows_its_default():
    for path, parser in _parsers(cli._parser()):
        formatter = cli._Help(path)
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._VersionAction,
                                   argparse._SubParsersAction)):
                continue
            name = "/".join(action.option_strings) or action.dest
            assert action.help and action.help.strip(), f"{path} {name} has no help"
            if action.option_strings:
                assert "default" in formatter._get_help_string(action).lower(), (path, name)


def test_help_has_no_restructuredtext_and_lists_the_exit_codes(monkeypatch):
    monkeypatch.setenv("OMLDM_SASL_PASSWORD", "s3cret")
    for path, parser in _parsers(cli._parser()):
        text = parser.format_help()
        for markup in ("``", ":mod:", ":func:", ":class:", ":meth:"):
            assert markup not in text, (path, markup)
        assert "s3cret" not in text, path
    top = cli._parser().format_help()
    for code, meaning in cli.EXIT_CODES.items():
        assert f"  {code}  {meaning}" in top


# -- exit codes ----------------------------------------------------------------------------
class _Producer:
    def __init__(self, *args, **kwargs): pass

    def send(self, topic, value): pass

    def close(self): pass


def _reader(answer):
    class Reader:
        def __init__(self, *args, **kwargs): pass

        def wait_for(self, match, timeout):
            if isinstance(answer, BaseException):
                raise answer
            return {**answer, "requestId": "r1"}

        def close(self): pass

    return Reader


REQUEST = ("request", "query", "--id", "1", "--request-id", "r1", "--wait", "--timeout", "0.1",
           "--bootstrap-servers", "localhost:1")


@pytest.mark.parametrize("answer, code", [
    ({"status": "ok"}, 0),
    ({"status": "error", "error": {"code": "not_found"}}, 1),
    (TimeoutError(), 3),
])
def test_request_wait_exit_codes(capsys, monkeypatch, answer, code):
    monkeypatch.setattr("flink_jobs.kafka_io.JsonProducer", _Producer)
    monkeypatch.setattr("flink_jobs.kafka_io.TopicReader", _reader(answer))
    got, out, err = run(capsys, *REQUEST)
    assert got == code
    if code == 3:
        assert err == "omldm: no response to 'r1' within 0.1 s\n"
    else:
        assert json.loads(out)["status"] == answer["status"] and err == ""


def test_a_kafka_timeout_is_a_timeout_and_one_line(capsys, monkeypatch):
    from kafka.errors import KafkaTimeoutError

    monkeypatch.setattr("flink_jobs.kafka_io.JsonProducer", _Producer)
    monkeypatch.setattr("flink_jobs.kafka_io.TopicReader",
                        _reader(KafkaTimeoutError("Unable to bootstrap from localhost:1")))
    code, _, err = run(capsys, *REQUEST)
    assert code == 3
    assert err.count("\n") == 1 and err.startswith("omldm: ") and "bootstrap" in err


def test_a_timeout_anywhere_is_3_and_a_failure_is_1_without_traceback(capsys, monkeypatch):
    def late(**kwargs):
        raise TimeoutError("the counts did not add up within 300 s")

    monkeypatch.setattr("flink_jobs.demo.run_demo", late)
    code, _, err = run(capsys, "demo")
    assert (code, err) == (3, "omldm: the counts did not add up within 300 s\n")

    def broken(**kwargs):
        raise RuntimeError("the MiniCluster died\nsecond line")

    monkeypatch.setattr("flink_jobs.demo.run_demo", broken)
    code, _, err = run(capsys, "demo")
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("omldm: RuntimeError: the MiniCluster died | second line")
    code, _, err = run(capsys, "-v", "demo")
    assert code == 1 and "Traceback" in err and err.splitlines()[-1].startswith("omldm: ")


def test_usage_errors_are_2_and_one_line(capsys, monkeypatch):
    monkeypatch.delenv("OMLDM_BOOTSTRAP_SERVERS", raising=False)
    code, _, err = run(capsys, "request", "destroy")
    assert code == 2 and err.count("\n") == 1 and err.startswith("omldm request: argument kind")
    code, _, err = run(capsys, "--no-such-flag")
    assert code == 2 and err.count("\n") == 1
    code, _, err = run(capsys, "request", "query", "--id", "1")
    assert (code, err) == (2, "omldm: --bootstrap-servers (or $OMLDM_BOOTSTRAP_SERVERS) "
                              "is required\n")
    code, _, err = run(capsys, "request", "create", "--id", "1", "--hyper", "C",
                       "--bootstrap-servers", "localhost:1")
    assert (code, err) == (2, "omldm: --hyper takes NAME=VALUE, got 'C'\n")
    code, _, err = run(capsys, "list", "learners", "--protocol-module", "no_such_module_x")
    assert code == 2 and err.startswith("omldm: --protocol-module no_such_module_x: ")
    code, out, _ = run(capsys, "list", "--help")
    assert code == 0 and "learners" in out


# -- one declaration -----------------------------------------------------------------------
@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_the_declaration_is_the_constructor(cls):
    """Every constructor argument is declared, in order, with the signature's default (a
    None default the class replaces must be replaced by the declared one)."""
    assert hp.is_declared(cls), f"{cls.__name__} has no HYPERPARAMETERS for each argument"
    signature = {name: p.default for name, p in inspect.signature(cls.__init__).parameters.items()
                 if name != "self"}
    declared = hp.declaration(cls)
    assert [p.name for p in declared] == list(signature)
    built = cls(drop=True) if cls is FeatureSelector else cls()  # no indices: drop none
    for p in declared:
        assert p.description and "\n" not in p.description
        if signature[p.name] is None and p.default is not None:
            assert built.hyperparameters()[p.name] == p.default, (cls, p.name)
        else:
            assert signature[p.name] == p.default, (cls, p.name)
            assert type(signature[p.name]) is type(p.default), (cls, p.name)


def _probes(p: hp.Hyperparameter) -> list:
    values: list = [True, False, "x", "", 0, -1, 1, 2, 1.5, 64.0, 1e-9, float("inf"), [],
                    [0], [1], [1, 8, 8], [2.0], [True], {}, *(p.choices or ())]
    for b in p.bounds():
        if b is not None:
            values += [b, b - 1, b + 1, b - 1e-9, b + 1e-9]
    return values


def _passes(p: hp.Hyperparameter, value) -> bool:
    try:
        p.check(p.typed(value))
        return True
    except HyperparameterError:
        return False


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_schema_and_declaration_agree_on_every_value(cls):
    """For every hyperparameter, a value passes the published schema exactly when it
    passes the declaration (conditions between hyperparameters aside)."""
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    is_learner = cls in BUILT_IN_LEARNERS.values()
    for p in hp.declaration(cls):
        for value in _probes(p):
            spec = {"name": cls.__name__, "hyperParameters": {p.name: value}}
            doc = {"id": 1, "request": "Update",
                   **({"learner": spec} if is_learner else {"preProcessors": [spec]})}
            if value != value or value in (float("inf"),):  # not JSON
                assert not _passes(p, value)
                continue
            by_schema = validator.is_valid(doc)
            assert by_schema == _passes(p, value), (cls.__name__, p.name, value, by_schema)


def test_schema_and_parser_refuse_a_bad_hyperparameter_at_the_same_field():
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    for spec, field, message in [
        ({"learner": {"name": "PA", "hyperParameters": {"C": -1}}},
         "learner.hyperParameters.C", "C must be > 0, got -1"),
        ({"learner": {"name": "MLP", "hyperParameters": {"hidden_layers": [0]}}},
         "learner.hyperParameters.hidden_layers",
         "hidden_layers must be a list of integers >= 1, got [0]"),
        ({"learner": {"name": "PA"}, "preProcessors": [
            {"name": "StandardScaler", "hyperParameters": {"with_std": "no"}}]},
         "preProcessors[0].hyperParameters.with_std", "with_std must be true or false, got 'no'"),
    ]:
        doc = {"id": 1, "request": "Create", **spec}
        errors = list(jsonschema.Draft202012Validator(schema).iter_errors(doc))
        assert errors, field
        error = jsonschema.exceptions.best_match(errors)
        path = ""
        for part in error.absolute_path:
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else part)
        assert path == field or path.startswith(f"{field}[")  # the schema names the item
        with pytest.raises(RequestError) as e:
            parse_request(doc)
        assert (e.value.code, e.value.field, e.value.message) == (
            "invalid_hyperparameter", field, message)
    unknown = {"id": 1, "request": "Create",
               "learner": {"name": "PA", "hyperParameters": {"c": 1}}}
    assert not jsonschema.Draft202012Validator(schema).is_valid(unknown)
    with pytest.raises(RequestError) as e:
        parse_request(unknown)
    assert e.value.field == "learner.hyperParameters.c"


def test_an_integral_number_is_an_integer_in_a_request():
    km = make_learner({"name": "KMeans", "hyperParameters": {"n_clusters": 4.0}})
    assert km.n_clusters == 4 and type(km.n_clusters) is int
    with pytest.raises(RequestError):
        make_learner({"name": "KMeans", "hyperParameters": {"n_clusters": 4.5}})


def test_a_declaration_that_contradicts_itself_is_refused():
    with pytest.raises(ValueError, match="default"):
        hp.Hyperparameter("C", float, -1.0, "x", interval="(0, inf)")
    with pytest.raises(ValueError, match="one line"):
        hp.Hyperparameter("C", float, 1.0, "two\nlines")
    with pytest.raises(ValueError, match="type"):
        hp.Hyperparameter("C", dict, {}, "x")


def test_an_update_takes_an_integral_number_for_an_integer_hyperparameter():
    """JSON writers may send ``2.0`` for an integer: a Create takes it, and so does an
    Update (the declaration's ``typed``), both as the int ``2``."""
    from operators.local import LocalNetwork

    net = LocalNetwork(n_spokes=2, n_hubs=1)
    net.request({"id": 0, "request": "Create", "requestId": "c",
                 "learner": {"name": "PA", "hyperParameters": {"mode": 1.0}}})
    net.request({"id": 0, "request": "Update", "requestId": "u",
                 "learner": {"hyperParameters": {"mode": 2.0}}})
    net.request({"id": 0, "request": "Query", "requestId": "q"})
    answers = {r["requestId"]: r for r in net.outputs["responses"]}
    assert answers["c"]["status"] == "ok" and answers["u"]["status"] == "ok", answers["u"]
    mode = answers["q"]["learner"]["hyperParameters"]["mode"]
    assert mode == 2 and type(mode) is int
