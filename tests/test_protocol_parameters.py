"""Each protocol declares its ``trainingConfiguration`` parameters once
(:mod:`learning.protocols.parameters`), and the validator, the JSON Schema and the README's
table are made from the declarations (issue 16, item 4)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pytest

import learning.protocols as registry
from learning.errors import RequestError
from learning.protocols import PROTOCOLS, register_protocol
from learning.protocols import parameters as params_module
from learning.protocols.parameters import (TRAINING_DEFAULTS, TRAINING_PARAMETERS, Param,
                                           ProtocolParams, Rule, configuration_schema,
                                           declared, parameter_table,
                                           validate_training_configuration)
from learning.protocols.synchronous import SynchronousHub, SynchronousSpoke
from learning.requests import SCHEMA_PATH, parse_request, request_schema

ROOT = Path(__file__).resolve().parents[1]


def built_in() -> dict[str, ProtocolParams]:
    """The declarations of the protocols that ship with omldm (a test module may have
    registered its own)."""
    return {n: d for n, d in declared().items()
            if PROTOCOLS[n][0].__module__.startswith("learning.protocols.")}


def create(protocol: str | None = None, **config) -> dict:
    tc = dict(config, **({"protocol": protocol} if protocol else {}))
    return {"id": 1, "request": "Create", "learner": {"name": "PA"}, "trainingConfiguration": tc}


def error_of(doc: dict) -> RequestError:
    with pytest.raises(RequestError) as e:
        parse_request(doc)
    return e.value


# -- one declaration, everything derived from it ---------------------------------------------
def test_every_registered_protocol_is_declared_and_every_declaration_is_complete():
    assert set(declared()) == set(PROTOCOLS)
    for name, decl in [("(common)", TRAINING_PARAMETERS), *declared().items()]:
        for p in decl.params:
            assert p.description and "\n" not in p.description, (name, p.name)
            assert p.required or p.default is None or p.validate(p.default) == p.default
    assert declared()["SSP"] is declared()["StaleSynchronous"]  # an alias, one declaration
    assert declared()["FDA"]["threshold"] is declared()["EVENFLOW"]["threshold"]  # shared Θ / T


def test_the_schema_file_is_what_the_declarations_make():
    on_disk = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    assert on_disk == request_schema(built_in()), (
        "learning/schema/request.schema.json is stale: run "
        "`python -c 'from learning.requests import write_schema; write_schema()'`")
    jsonschema.Draft202012Validator.check_schema(on_disk)


def test_the_readme_table_is_what_the_declarations_make():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = parameter_table(built_in())
    assert table in readme, (
        "README.md's parameter table is stale: paste the output of `python -c 'from "
        "learning.protocols.parameters import parameter_table; "
        "print(parameter_table(), end=\"\")'`")
    assert "| `SSP`, `StaleSynchronous` | `staleness` | `2` | an integer in [0, 100000] |" in table
    assert "| required | a number > 0 |" in table
    assert "alpha * rho <= 1" in table


def _probes(p: Param, choices: tuple[str, ...]) -> list:
    values: list = [None, True, "x", "", [], {}, 0, -1, 1, 1.5, 64.0, 10**9, *choices, "nope"]
    lo, hi = p.bounds()
    for b in (lo, hi):
        if b is not None:
            values += [b, b - 1, b + 1, b - 1e-9, b + 1e-9, int(b)]
    return values


def _ok(fn) -> bool:
    try:
        fn()
        return True
    except (RequestError, jsonschema.ValidationError):
        return False


@pytest.mark.parametrize("name", sorted({n for n, d in declared().items() if d.params}))
def test_schema_and_validator_agree_on_every_value(name):
    """For every parameter of every protocol, a value passes the published schema exactly
    when it passes the declaration's validator."""
    schema = request_schema(built_in())
    decl = declared()[name]
    all_choices = tuple(c for d in declared().values() for p in d.params for c in p.choices or ())
    for p in decl.params:
        for value in _probes(p, all_choices):
            doc = {"id": 1, "request": "Update",
                   "trainingConfiguration": {"protocol": name, p.name: value}}
            by_schema = _ok(lambda: jsonschema.validate(doc, schema))
            by_param = _ok(lambda: p.validate(value))
            assert by_schema == by_param, (name, p.name, value, by_schema, by_param)


def test_schema_and_validator_agree_on_the_common_keys():
    schema = configuration_schema(built_in())
    for p in TRAINING_PARAMETERS.params:
        for value in _probes(p, ("average", "sum", "SSP", "x" * 129)):
            by_schema = _ok(lambda: jsonschema.validate({p.name: value}, schema))
            by_param = _ok(lambda: p.validate(value))
            assert by_schema == by_param, (p.name, value, by_schema, by_param)


# -- the one validator -----------------------------------------------------------------------
def test_a_create_gets_typed_values_and_the_common_defaults_only():
    r = parse_request(create("FDA", threshold=1, miniBatchSize=64.0))
    tc = r.training_configuration
    assert tc == {**TRAINING_DEFAULTS, "protocol": "FDA", "threshold": 1.0}
    assert type(tc["threshold"]) is float and type(tc["miniBatchSize"]) is int


@pytest.mark.parametrize("doc,field,message", [
    (create("FDA", threshold=1, staleness=3), "staleness",
     "trainingConfiguration.staleness is a parameter of SSP, not of protocol 'FDA', which "
     "would ignore it (its own: variant, threshold, precision, waitOnIncrement)"),
    (create("Synchronous", threshold=0.1), "threshold", "trainingConfiguration.threshold is "
     "a parameter of FDA, EVENFLOW, not of protocol 'Synchronous', which would ignore it (it "
     "has none of its own)"),
    (create("Asynchronous", variant="naive"), "variant", "is a parameter of FDA, EVENFLOW, not"),
    (create("ElasticAveraging", staleness=1), "staleness",
     "is a parameter of SSP, not of protocol 'ElasticAveraging'"),
])
def test_another_protocols_key_is_refused_not_kept_and_ignored(doc, field, message):
    """A pipeline's protocol cannot change, so a key only another protocol reads did
    nothing: ``staleness`` on TAP or ``threshold`` on BSP was accepted, shown by a Query
    and ignored. A Create and an Update naming the protocol refuse it; an Update that does
    not is refused by the nodes, which check the merged configuration."""
    e = error_of(doc)
    assert (e.code, e.field) == ("schema", f"trainingConfiguration.{field}")
    assert message in e.message
    update = {"id": 1, "request": "Update", "trainingConfiguration": {"protocol": "SSP",
                                                                      "threshold": 1}}
    assert "is a parameter of FDA, EVENFLOW, not of protocol 'SSP'" in error_of(update).message
    from operators.local import LocalNetwork

    net = LocalNetwork(network=1, n_spokes=2, n_hubs=1)
    net.request(create("Synchronous"))
    net.request({"id": 1, "request": "Update", "requestId": "u",
                 "trainingConfiguration": {"staleness": 3}})
    answer = net.outputs["responses"][-1]
    assert answer["requestId"] == "u" and answer["error"]["field"] == \
        "trainingConfiguration.staleness", answer
    assert "staleness" not in net.query()["trainingConfiguration"]


def test_an_update_of_a_pipeline_that_kept_another_protocols_key_drops_the_key():
    """Pipelines created before another protocol's keys were refused kept them (ignored):
    restored from a snapshot, every later Update was refused, naming a key the Update did
    not hold, since the merged configuration is checked whole. The Update now drops them
    and applies."""
    from dataclasses import replace

    from learning.registry import make_pipeline
    from learning.update import apply_update

    current = parse_request(create("Synchronous", miniBatchSize=8))
    old = replace(current, training_configuration={**current.training_configuration,
                                                   "threshold": 0.1, "staleness": 2})
    update = parse_request({"id": 1, "request": "Update",
                            "trainingConfiguration": {"miniBatchSize": 16}})
    new = apply_update(old, update, make_pipeline(old.pre_processors, old.learner))
    assert new.training_configuration == {**current.training_configuration,
                                          "miniBatchSize": 16}


def test_an_update_applies_or_refuses_every_protocol_parameter_it_names():
    """An Update answered ok changes what it names: EVENFLOW's variant, monitored function
    and coefficients were accepted and ignored (its spokes read only the threshold again);
    now its spokes test with them and its Query shows them. FDA's variant and precision
    shape the spokes' states and the coordinator's safe function mid-round: an Update that
    changes them is refused (``unsupported``), nothing changed; the same values pass."""
    from operators.local import LocalNetwork

    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, 3))

    def run(config: dict, update: dict) -> tuple[LocalNetwork, dict, dict]:
        net = LocalNetwork(n_spokes=2, n_hubs=1, network=1)
        net.request({"id": 1, "request": "Create", "requestId": "c", "learner": {"name": "PA"},
                     "trainingConfiguration": {"miniBatchSize": 4, **config}})
        records = [(True, {"id": i, "features": x.tolist(), "label": int(x[0] > 0)})
                   for i, x in enumerate(X)]
        net.stream(records[:100])
        net.request({"id": 1, "request": "Update", "requestId": "u",
                     "trainingConfiguration": update})
        net.stream(records[100:])
        answer = next(r for r in net.outputs["responses"] if r["requestId"] == "u")
        return net, answer, net.query()

    net, answer, q = run({"protocol": "EVENFLOW", "variant": "fast", "threshold": 0.05,
                          "coefficients": 8},
                         {"variant": "basic", "monitoredFunction": "kl", "coefficients": 16})
    assert answer["status"] == "ok"
    assert (q["protocol"]["variant"], q["protocol"]["monitoredFunction"]) == ("basic", "kl")
    assert {(s.variant, s.function, s.coefficients) for s in net.spokes} == {("basic", "kl", 16)}
    for update, field in (({"variant": "sketch"}, "variant"), ({"precision": 0.5}, "precision")):
        net, answer, q = run({"protocol": "FDA", "threshold": 0.05}, update)
        assert answer["status"] == "error" and answer["error"]["code"] == "unsupported"
        assert answer["error"]["field"] == f"trainingConfiguration.{field}"
        assert q["protocol"]["variant"] == "naive" and q["fitted"] == 200
        assert {(s.variant, s.eps) for s in net.spokes} == {("naive", 0.25)}
    _, answer, _ = run({"protocol": "FDA", "threshold": 0.05},
                       {"variant": "naive", "precision": 0.25, "threshold": 0.1})
    assert answer["status"] == "ok"


@pytest.mark.parametrize("doc,field", [
    (create("FDA"), "threshold"),                                   # required
    (create("EVENFLOW", variant="basic"), "threshold"),
    (create("FDA", threshold=1, variant="fast"), "variant"),        # EVENFLOW's, not FDA's
    (create("EVENFLOW", threshold=1, variant="sketch"), "variant"),
    (create("EASGD", alpha=0.9, rho=2.0), "rho"),                   # the rule
    (create("Adaptive", alpha=1.0, rho=1.5), "rho"),
    (create("SSP", staleness=-1), "staleness"),
    (create("SSP", staleness=1.5), "staleness"),
    (create("FDA", threshold=0), "threshold"),
    (create("FDA", threshold=1, precision=1), "precision"),
    (create("EVENFLOW", threshold=1, coefficients=0), "coefficients"),
    (create("Adaptive", lossThreshold=-1), "lossThreshold"),
    (create(aggregation="median"), "aggregation"),
    (create(layoutQuorum=1), "layoutQuorum"),
])
def test_a_bad_value_is_answered_when_the_request_arrives(doc, field):
    e = error_of(doc)
    assert (e.code, e.field) == ("schema", f"trainingConfiguration.{field}"), e.message
    assert field in e.message


def test_messages_name_the_parameter_the_value_and_what_is_allowed():
    e = error_of(create("EASGD", alpha=0.9, rho=2.0))
    assert e.message == ("alpha * rho <= 1 must hold (the elastic step would overshoot), "
                         "got alpha = 0.9, rho = 2.0")
    e = error_of(create("FDA"))
    assert e.message == "protocol 'FDA' needs trainingConfiguration.threshold, a number > 0"
    with pytest.raises(RequestError) as err:
        declared()["SSP"]["staleness"].validate(-1)
    assert err.value.message == "staleness must be an integer in [0, 100000], got -1"
    with pytest.raises(RequestError) as err:
        declared()["FDA"]["variant"].validate("fast")
    assert err.value.message == "variant must be one of naive, linear, sketch, got 'fast'"


def test_an_update_is_checked_against_the_protocol_it_names_or_any_that_declares_the_key():
    update = {"id": 1, "request": "Update"}
    r = parse_request({**update, "trainingConfiguration": {"variant": "fast", "threshold": 2}})
    assert r.training_configuration == {"variant": "fast", "threshold": 2.0}  # EVENFLOW's
    for tc, field in (({"variant": "bogus"}, "variant"), ({"staleness": -2}, "staleness"),
                      ({"protocol": "FDA", "variant": "fast"}, "variant"),
                      ({"protocol": "EASGD", "alpha": 1.0, "rho": 2.0}, "rho"),
                      ({"rhoo": 1}, "rhoo")):
        e = error_of({**update, "trainingConfiguration": tc})
        assert (e.code, e.field) == ("schema", f"trainingConfiguration.{field}")
    # one of the pair may change alone: the nodes check the rule on the merged configuration
    assert parse_request({**update, "trainingConfiguration": {"rho": 2.0}})


def test_the_validator_alone_checks_what_the_schema_checks():
    with pytest.raises(RequestError) as e:
        validate_training_configuration({"minibatchSize": 8}, create=True)
    assert e.value.field == "trainingConfiguration.minibatchSize"
    assert "allowed here" in e.value.message and "miniBatchSize" in e.value.message
    with pytest.raises(RequestError) as e:
        validate_training_configuration({"miniBatches": "4"}, create=False)
    assert e.value.field == "trainingConfiguration.miniBatches"
    assert validate_training_configuration({}, create=True) == dict(TRAINING_DEFAULTS)
    assert validate_training_configuration(None, create=False) == {}


def test_the_nodes_read_the_declaration():
    from learning.protocols import easgd, evenflow, fda, ssp

    assert ssp.STALENESS.of({}) == 2 and ssp.STALENESS.of({"staleness": 7.0}) == 7
    assert easgd.elastic_rate({"alpha": 0.5, "rho": 0.5}) == 0.25
    assert fda.PARAMETERS.of({"threshold": 2}) == {"variant": "naive", "threshold": 2.0,
                                                   "precision": 0.25, "waitOnIncrement": True}
    assert evenflow.PARAMETERS.of({"threshold": 1})["coefficients"] == 50
    with pytest.raises(RequestError):
        evenflow.PARAMETERS.of({"protocol": "EVENFLOW"})
    for module, gone in ((ssp, "staleness_of"), (fda, "threshold_of"), (fda, "variant_of"),
                         (fda, "precision_of"), (evenflow, "coefficients_of"),
                         (evenflow, "function_of")):
        assert not hasattr(module, gone), f"{module.__name__}.{gone} should read the declaration"
    import learning.requests

    assert not hasattr(learning.requests, "IMPLEMENTED_PROTOCOLS")
    assert not hasattr(learning.requests, "KNOWN_PROTOCOLS")
    assert not hasattr(learning.requests, "_INTEGER_KEYS")


# -- declarations ----------------------------------------------------------------------------
def test_a_declaration_that_contradicts_itself_is_refused():
    with pytest.raises(ValueError):
        Param("x", int, 0, "d", interval="[1, 10]")        # default not allowed
    with pytest.raises(ValueError):
        Param("x", int, 1.5, "d")                           # default of another type
    with pytest.raises(ValueError):
        Param("x", int, None, "d", interval="1, 10")        # not an interval
    with pytest.raises(ValueError):
        Param("x", int, None, "d", interval="[10, 1]")      # empty
    with pytest.raises(ValueError):
        Param("x", float, None, "d", choices=("a",))        # choices of a number
    with pytest.raises(ValueError):
        Param("x", list, None, "d")
    with pytest.raises(ValueError):
        Param("x", float, 1.0, "d", required=True)          # required with a default
    x = Param("x", int, 1, "d")
    with pytest.raises(ValueError):
        ProtocolParams(params=(x, x))
    with pytest.raises(ValueError):
        ProtocolParams(params=(x,), rules=(Rule(("x", "y"), "x < y", lambda a, b: a < b),))


def test_intervals_in_words_and_in_the_schema():
    p = Param("p", float, 0.5, "d", interval="(0, 1]")
    assert p.allowed() == "a number in (0, 1]"
    assert p.schema() == {"description": "d", "type": "number", "exclusiveMinimum": 0,
                          "maximum": 1, "default": 0.5}
    assert Param("q", float, None, "d", interval="(-inf, 0)").allowed() == "a number < 0"
    assert Param("r", int, 3, "d", interval="[2, inf)").allowed() == "an integer >= 2"
    assert Param("s", str, "a", "d", choices=("a", "b")).allowed() == "one of a, b"
    assert Param("t", float, None, "d").allowed() == "a number"


def test_a_user_protocol_brings_its_own_parameters(monkeypatch):
    monkeypatch.setattr(registry, "PROTOCOLS", dict(PROTOCOLS))
    monkeypatch.setattr(params_module, "_DECLARED", dict(params_module._DECLARED))
    monkeypatch.setattr(params_module, "_generation", [params_module.generation()])
    period = Param("period", int, 8, "mini-batches per barrier", interval="[1, 1000]")
    register_protocol("PeriodProbe", SynchronousSpoke, SynchronousHub,
                      ProtocolParams(reference="tests", params=(period,)))
    r = parse_request(create("PeriodProbe", period=3.0))
    assert r.training_configuration["period"] == 3
    e = error_of(create("PeriodProbe", period=0))
    assert (e.code, e.field) == ("schema", "trainingConfiguration.period")
    assert "`PeriodProbe`" in parameter_table()
    with pytest.raises(ValueError):  # the common keys are everybody's
        register_protocol("Clash", SynchronousSpoke, SynchronousHub,
                          ProtocolParams(params=(Param("miniBatches", int, 1, "d"),)))


def test_a_registered_protocol_that_is_not_served_is_not_implemented_yet():
    assert parse_request(create("FDA", threshold=1), protocols={"FDA"})
    with pytest.raises(RequestError) as err:
        parse_request(create("FDA", threshold=1), protocols={"Asynchronous"})
    assert err.value.message == "protocol 'FDA' is not implemented yet"


# -- no import circle ------------------------------------------------------------------------
def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / "learning").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``path`` imports anywhere (functions and ``TYPE_CHECKING``
    blocks included), as tests/test_architecture.py counts them."""
    def resolve(dotted: str) -> str | None:
        parts = dotted.split(".")
        return next((".".join(parts[:n]) for n in range(len(parts), 0, -1)
                     if ".".join(parts[:n]) in modules), None)

    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(resolve(a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.update(resolve(f"{node.module}.{a.name}") for a in node.names)
    return out - {None}


def test_the_declarations_do_not_import_the_registry():
    modules = _modules()
    assert _imports(modules["learning.protocols.parameters"], modules) <= {
        "learning.errors", "learning.layout", "learning.hyperparameters"}
    # the declarations of learners' hyperparameters share its interval notation, not more
    assert _imports(modules["learning.hyperparameters"], modules) <= {"learning.errors"}


def test_requests_and_the_protocols_are_in_no_import_circle():
    modules = _modules()
    graph = {m: _imports(p, modules) for m, p in modules.items()}
    for start in ("learning.requests", "learning.protocols", "learning.protocols.parameters",
                  "learning.update", "learning.protocols.base"):
        seen, todo = set(), list(graph[start])
        while todo:
            m = todo.pop()
            assert m != start, f"{start} imports itself back"
            if m not in seen:
                seen.add(m)
                todo.extend(graph.get(m, ()))


@pytest.mark.parametrize("first", ["learning.requests", "learning.protocols",
                                   "learning.protocols.parameters", "learning.update",
                                   "learning.protocols.base", "learning.protocols.fda"])
def test_any_module_can_be_imported_first(first):
    doc = create("SSP", staleness=1)
    code = (f"import {first}; from learning.requests import parse_request; "
            f"print(parse_request({doc!r}).training_configuration['staleness'])")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "1", out.stderr[-2000:]


def test_an_update_that_breaks_a_rule_once_merged_is_refused_whole():
    """EASGD at α = 0.25: an Update of ρ alone to 8 breaks α·ρ ≤ 1 only with the running
    α. It is answered with the rule's error and nothing changes, the learner's C included
    (through the job's kernels, in process)."""
    from operators.local import LocalNetwork

    net = LocalNetwork(n_spokes=2, n_hubs=1, network=3)
    net.request({"id": 3, "request": "Create", "learner": {"name": "PA", "hyperParameters": {"C": 0.01}},
                 "trainingConfiguration": {"protocol": "EASGD", "alpha": 0.25, "rho": 1.0}})
    assert net.outputs["responses"][-1]["status"] == "ok"
    net.request({"id": 3, "request": "Update", "requestId": "u",
                 "learner": {"hyperParameters": {"C": 0.5}}, "trainingConfiguration": {"rho": 8.0}})
    answer = net.outputs["responses"][-1]
    assert answer["requestId"] == "u" and answer["status"] == "error"
    assert answer["error"]["field"] == "trainingConfiguration.rho"
    for node in net.spokes + net.hubs:
        assert node.request.training_configuration["rho"] == 1.0
    assert all(s.pipeline.learner.hyperparameters()["C"] == 0.01 for s in net.spokes)
    net.request({"id": 3, "request": "Update", "requestId": "v", "trainingConfiguration": {"rho": 2.0}})
    assert net.outputs["responses"][-1]["status"] == "ok"
    assert all(n.request.training_configuration["rho"] == 2.0 for n in net.spokes + net.hubs)


def test_a_boolean_parameter_takes_json_true_and_false_only():
    p = Param("b", bool, True, "d")
    assert p.validate(True) is True and p.validate(False) is False
    for bad in (1, 0, "true", None, 1.0, []):
        with pytest.raises(RequestError, match="b must be true or false"):
            p.validate(bad)
    assert p.schema() == {"description": "d", "type": "boolean", "default": True}
    assert p.of({}) is True and p.of({"b": False}) is False
    with pytest.raises(ValueError):
        Param("b", bool, True, "d", interval="[0, 1]")
    with pytest.raises(ValueError):
        Param("b", bool, 1, "d")  # a default of another type
    r = parse_request(create("FDA", threshold=1, waitOnIncrement=False))
    assert r.training_configuration["waitOnIncrement"] is False
    with pytest.raises(RequestError, match="waitOnIncrement"):
        parse_request(create("FDA", threshold=1, waitOnIncrement=1))
