"""A deployment in one file: ``omldm serve --config FILE`` and ``flink_run.py --config
FILE`` read every :class:`~flink_jobs.config.JobConfig` setting from YAML (``.yaml``,
``.yml``) or TOML (``.toml``).

The file is a mapping of :class:`JobConfig` field names (``spokes``, ``hubs``,
``execution_mode``, ``checkpoint_interval_ms``, ``max_pipelines``, ``sharding`` ...) with
three sections and one shorthand::

    spokes: 4
    hubs: 2
    execution_mode: process
    checkpoint_interval_ms: 10000
    max_pipelines: 32            # the service limits are fields too
    topic_prefix: prod-          # shorthand: every topic name gets it
    topics: {predictions: scores} # or name topics one by one (after the prefix)
    kafka:                       # flink_jobs.connection.KafkaConnection
      bootstrap_servers: broker-1:9092,broker-2:9092
      security_protocol: SASL_SSL
      sasl_mechanism: SCRAM-SHA-512
      properties: {compression.type: lz4, client.id: omldm}
    flink:                       # JobConfig.flink_options: any Flink configuration key
      metrics.reporter.prom.factory.class: org.apache.flink.metrics.prometheus.PrometheusReporterFactory

Precedence, lowest first: the command's defaults, environment variables
(``$OMLDM_BOOTSTRAP_SERVERS`` ...), the file, then flags given on the command line.
Settings with a flag become that flag's default (:func:`apply_to_parser`); the others go
to :class:`JobConfig` as they are (:func:`job_settings`). Every key is checked when the
file is read: an unknown key (with the closest known one suggested), a value of the wrong
type, or a file that is neither YAML nor TOML is a :class:`ValueError` naming the file and
the key. The values themselves are checked by :class:`JobConfig` and
:class:`KafkaConnection`, as for flags.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import tomllib
from pathlib import Path
from typing import Any, Mapping

import yaml

from flink_jobs.config import JobConfig, Topics

__all__ = ["load_config_file", "apply_to_parser", "job_settings", "read_config_argument",
           "FLAG_DESTS"]

#: JobConfig fields set by a flag of ``omldm serve`` / ``flink_run.py`` whose argparse
#: destination has another name
FLAG_DESTS = {"execution_mode": "mode", "protocol_modules": "protocol_module"}
#: keys of the ``kafka`` section → argparse destinations of the connection flags
_KAFKA_DESTS = {"bootstrap_servers": "bootstrap_servers", "security_protocol": "security_protocol",
                "sasl_mechanism": "sasl_mechanism", "sasl_username": "sasl_username",
                "sasl_password": "sasl_password", "ssl_cafile": "ssl_cafile"}
#: fields a file cannot set: derived from other keys, or the job's own
_NOT_IN_FILES = {"topics", "connection", "flink_options", "jars"}
_JOB_FIELDS = {f.name: f for f in dataclasses.fields(JobConfig)}
_TOP_KEYS = (sorted(set(_JOB_FIELDS) - _NOT_IN_FILES)
             + ["topic_prefix", "topics", "kafka", "flink", "job_name"])
_TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _suggest(key: str, known) -> str:
    close = difflib.get_close_matches(key, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _check_type(where: str, value: Any, kind: type) -> Any:
    ok = (isinstance(value, bool) if kind is bool
          else isinstance(value, (int, float)) and not isinstance(value, bool) and (
              kind is float or float(value).is_integer()) if kind in (int, float)
          else isinstance(value, kind))
    if not ok:
        raise ValueError(f"{where} must be {_TYPE_NAMES[kind]}, got {value!r}")
    return int(value) if kind is int else value


def _string_map(where: str, value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} must be a mapping of keys to values, got {value!r}")
    out = {}
    for k, v in value.items():
        if isinstance(v, (Mapping, list)) or v is None:
            raise ValueError(f"{where}.{k} must be a string, number or boolean, got {v!r}")
        out[str(k)] = ("true" if v else "false") if isinstance(v, bool) else str(v)
    return out


def _flatten(value: Any, prefix: str = "") -> Any:
    """Nested mappings as dotted keys: TOML's ``[flink.metrics]`` tables and YAML's
    nesting both give ``metrics.reporter...`` keys."""
    if not isinstance(value, Mapping):
        return value
    out: dict = {}
    for k, v in value.items():
        if isinstance(v, Mapping):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def load_config_file(path: str | Path) -> dict[str, Any]:
    """The settings of a YAML or TOML deployment file, checked and normalised.

    Parameters
    ----------
    path : str or Path
        ``.yaml`` / ``.yml`` (YAML 1.1, safe loader: no Python objects) or ``.toml``.

    Returns
    -------
    dict
        JobConfig field → value (``protocol_modules`` a tuple), plus ``topic_prefix``
        (str), ``topics`` (Topics field → name), ``kafka`` (connection key → value, with
        ``properties`` a dict of str → str), ``flink`` (str → str) and ``job_name``, each
        only where the file has it.

    Raises
    ------
    ValueError
        The file cannot be read or parsed, has another suffix, is not a mapping, or has an
        unknown key or a value of the wrong type (the message names the file and the key).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte order mark dropped
    except OSError as exc:
        raise ValueError(f"--config {path}: cannot read it: {exc.strerror or exc}") from None
    suffix = path.suffix.lower()
    try:
        if suffix in (".yaml", ".yml"):
            raw = yaml.safe_load(text)
        elif suffix == ".toml":
            raw = tomllib.loads(text)
        else:
            raise ValueError(f"--config {path}: the name must end in .yaml, .yml or .toml")
    except (yaml.YAMLError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"--config {path}: not valid {suffix[1:].upper()}: "
                         f"{' '.join(str(exc).split())}") from None
    raw = {} if raw is None else raw
    if not isinstance(raw, Mapping):
        raise ValueError(f"--config {path}: must be a mapping of settings, got {type(raw).__name__}")
    out: dict[str, Any] = {}
    for key, value in raw.items():
        where = f"--config {path}: {key}"
        if key not in _TOP_KEYS:
            raise ValueError(f"--config {path}: unknown setting {key!r}{_suggest(str(key), _TOP_KEYS)}; "
                             f"the settings are JobConfig's fields and the sections kafka, "
                             f"flink, topics (docs/operations.md)")
        if key in ("topic_prefix", "job_name"):
            out[key] = _check_type(where, value, str)
        elif key == "topics":
            names = _string_map(where, value)
            for name in names:
                if name not in Topics.__dataclass_fields__:
                    raise ValueError(f"{where}.{name}: not a topic"
                                     f"{_suggest(name, Topics.__dataclass_fields__)}; the topics "
                                     f"are {', '.join(Topics.__dataclass_fields__)}")
            out[key] = names
        elif key == "flink":
            out[key] = _string_map(where, _flatten(value))
        elif key == "kafka":
            if not isinstance(value, Mapping):
                raise ValueError(f"{where} must be a mapping, got {value!r}")
            kafka: dict[str, Any] = {}
            for k, v in value.items():
                if k == "properties":
                    kafka[k] = _string_map(f"{where}.properties", _flatten(v))
                elif k in _KAFKA_DESTS:
                    kafka[k] = None if v is None else _check_type(f"{where}.{k}", v, str)
                else:
                    known = list(_KAFKA_DESTS) + ["properties"]
                    raise ValueError(f"{where}.{k}: unknown Kafka setting{_suggest(k, known)}; "
                                     f"they are {', '.join(known)}")
            out[key] = kafka
        elif key == "protocol_modules":
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list) or not all(isinstance(m, str) for m in value):
                raise ValueError(f"{where} must be a list of module names, got {value!r}")
            out[key] = tuple(value)
        else:
            default = _JOB_FIELDS[key].default
            out[key] = _check_type(where, value, type(default))
    return out


def apply_to_parser(parser: argparse.ArgumentParser, settings: Mapping[str, Any]) -> None:
    """Make the file's settings the defaults of ``parser``'s flags, so that a flag given on
    the command line wins over the file: JobConfig fields (through :data:`FLAG_DESTS`),
    ``topic_prefix``, ``job_name``, the ``kafka`` section's fields (``properties``
    go before every ``-X``). Settings without a flag stay for :func:`job_settings`."""
    dests = {a.dest for a in parser._actions}
    defaults: dict[str, Any] = {}
    for key, value in settings.items():
        dest = FLAG_DESTS.get(key, key)
        if key == "kafka":
            for k, v in value.items():
                if k == "properties":
                    defaults["kafka_property"] = list(v.items())
                else:
                    defaults[_KAFKA_DESTS[k]] = v
        elif dest in dests:
            defaults[dest] = list(value) if key == "protocol_modules" else value
    parser.set_defaults(**defaults)


def job_settings(settings: Mapping[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`JobConfig` keyword arguments of a file that no flag of the command
    parsed into ``args`` set: limits, Kafka client tuning, ``flink`` options (as
    ``flink_options`` pairs), named ``topics`` (with the prefix in force)."""
    given = vars(args)
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if key in _JOB_FIELDS and FLAG_DESTS.get(key, key) not in given:
            out[key] = value
    if "flink" in settings:
        out["flink_options"] = tuple(settings["flink"].items())
    if "topics" in settings:
        prefix = given.get("topic_prefix") or settings.get("topic_prefix", "")
        out["topics"] = Topics.prefixed(prefix, **settings["topics"])
    return out


def read_config_argument(argv: list[str] | None) -> tuple[str | None, dict[str, Any]]:
    """``--config FILE`` (or ``--config=FILE``) from a command line, loaded: (path, settings);
    (None, {}) without one.

    Raises
    ------
    ValueError
        From :func:`load_config_file`.
    """
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(argv)
    if not known.config:
        return None, {}
    return known.config, load_config_file(known.config)

