"""How every omldm command reaches Kafka: bootstrap servers and security settings, from
flags or environment variables, plus any Kafka client property (``--kafka-config FILE``,
``-X key=value``), for both kafka-python (the command line) and the Java Kafka clients of
the Flink job.

Precedence, lowest first: the dedicated flags (``--security-protocol`` … ``--ssl-cafile``,
or their ``OMLDM_*`` variables), then the properties file, then ``-X`` (the last ``-X`` of a
key wins). The properties go verbatim to the job's Java clients (after the job's own
settings such as ``fetch.max.wait.ms``, so they override those too) and, translated by
:data:`PYTHON_PROPERTIES`, to kafka-python; :data:`PYTHON_UNSUPPORTED` lists what
kafka-python cannot take (those reach only the job, with a warning logged once).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
from dataclasses import dataclass
from typing import Callable

__all__ = ["KafkaConnection", "load_properties", "parse_properties", "PYTHON_PROPERTIES",
           "PYTHON_UNSUPPORTED", "RESERVED_PROPERTIES"]

log = logging.getLogger(__name__)

_ENV = {
    "bootstrap_servers": "OMLDM_BOOTSTRAP_SERVERS", "security_protocol": "OMLDM_SECURITY_PROTOCOL",
    "sasl_mechanism": "OMLDM_SASL_MECHANISM", "sasl_username": "OMLDM_SASL_USERNAME",
    "sasl_password": "OMLDM_SASL_PASSWORD", "ssl_cafile": "OMLDM_SSL_CAFILE",
    "kafka_config": "OMLDM_KAFKA_CONFIG",
}
_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

#: Properties the job sets itself, per source or sink, and which a user value would break:
#: the key and where its value comes from instead.
RESERVED_PROPERTIES = {
    "bootstrap.servers": "--bootstrap-servers",
    "group.id": "the job's group_id (--group-id), one consumer group per source",
    "transactional.id": "the job (--exactly-once-outputs: one prefix per sink)",
    "key.serializer": "the job", "value.serializer": "the job",
    "key.deserializer": "the job", "value.deserializer": "the job",
}


# -- java.util.Properties syntax -------------------------------------------------------------
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str):
    """Natural lines joined into logical lines as ``java.util.Properties.load`` does: blank
    and comment (``#``, ``!``) lines skipped, a line ending in an odd number of backslashes
    continued on the next with that line's leading white space dropped."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1:
            line = line[:-1]
            if i >= len(lines):
                break
            line += lines[i].lstrip(" \t\f")
            i += 1
        yield line


def _unescape(s: str) -> str:
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c != "\\" or i + 1 == len(s):
            out.append(c)
            i += 1
            continue
        c = s[i + 1]
        if c == "u":
            digits = s[i + 2:i + 6]
            if not re.fullmatch(r"[0-9A-Fa-f]{4}", digits):
                raise ValueError(f"malformed \\uxxxx escape in properties: {s[i:i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
        else:  # \t \n \r \f; any other escaped character stands for itself (\= \: \# \\ ...)
            out.append(_ESCAPES.get(c, c))
            i += 2
    return "".join(out)


def parse_properties(text: str) -> tuple[tuple[str, str], ...]:
    """Key/value pairs of a Java properties text, in file order (a repeated key keeps every
    occurrence; the last wins wherever they are applied).

    The syntax of ``java.util.Properties.load`` (what Kafka's own tools read with
    ``--command-config``): ``key=value``, ``key: value`` or ``key value``; ``#`` and ``!``
    comment lines; a trailing ``\\`` continues the line; escapes ``\\t \\n \\r \\f
    \\uXXXX`` and ``\\`` before any other character (``\\=``, ``\\:``, ``\\ ``, ``\\\\``).

    Raises
    ------
    ValueError
        On a malformed ``\\uXXXX`` escape.
    """
    pairs = []
    for line in _logical_lines(text):
        i = 0
        while i < len(line):  # the key ends at the first unescaped separator or white space
            c = line[i]
            if c == "\\":
                i += 2
                continue
            if c in "=: \t\f":
                break
            i += 1
        key, rest = line[:i], line[i:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        pairs.append((_unescape(key), _unescape(rest)))
    return tuple(pairs)


def load_properties(path: str) -> tuple[tuple[str, str], ...]:
    """:func:`parse_properties` of a file, read as UTF-8 (Java's ``Properties.load`` of a
    stream reads ISO-8859-1; the two agree on ASCII and on ``\\uXXXX`` escapes).

    Raises
    ------
    ValueError
        When the file cannot be read (naming ``--kafka-config`` and the path).
    """
    try:
        with open(path, encoding="utf-8") as f:
            return parse_properties(f.read())
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"--kafka-config {path!r}: {exc}") from exc


def _key_value(text: str) -> tuple[str, str]:
    """argparse type of ``-X``: ``key=value``."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"-X takes key=value, got {text!r}")
    return key.strip(), value


# -- Java property -> kafka-python keyword ----------------------------------------------------
def _int(v: str) -> int:
    return int(v)


def _bool(v: str) -> bool:
    if v.lower() not in ("true", "false"):
        raise ValueError(f"expected true or false, got {v!r}")
    return v.lower() == "true"


def _acks(v: str):
    return "all" if v in ("all", "-1") else int(v)


def _compression(v: str):
    return None if v == "none" else v


_ALL, _PRODUCER, _CONSUMER = "all", "producer", "consumer"

#: Java (and librdkafka) property → (kafka-python keyword, value conversion, roles). Roles:
#: ``all`` for every client (admin included), else ``producer`` or ``consumer`` only.
#: ``sasl.jaas.config``, ``ssl.truststore.*`` and ``ssl.keystore.*`` are translated apart
#: (see :meth:`KafkaConnection.client_kwargs`).
PYTHON_PROPERTIES: dict[str, tuple[str, Callable, str]] = {
    "security.protocol": ("security_protocol", str, _ALL),
    "sasl.mechanism": ("sasl_mechanism", str, _ALL),
    "sasl.username": ("sasl_plain_username", str, _ALL),  # librdkafka's name
    "sasl.password": ("sasl_plain_password", str, _ALL),  # librdkafka's name
    "sasl.kerberos.service.name": ("sasl_kerberos_service_name", str, _ALL),
    "ssl.ca.location": ("ssl_cafile", str, _ALL),  # librdkafka's name
    "ssl.cafile": ("ssl_cafile", str, _ALL),
    "ssl.certificate.location": ("ssl_certfile", str, _ALL),  # librdkafka's name
    "ssl.key.location": ("ssl_keyfile", str, _ALL),  # librdkafka's name
    "ssl.key.password": ("ssl_password", str, _ALL),
    "ssl.cipher.suites": ("ssl_ciphers", str, _ALL),
    "ssl.endpoint.identification.algorithm": ("ssl_check_hostname", lambda v: v != "", _ALL),
    "client.id": ("client_id", str, _ALL),
    "client.dns.lookup": ("client_dns_lookup", str, _ALL),
    "request.timeout.ms": ("request_timeout_ms", _int, _ALL),
    "retry.backoff.ms": ("retry_backoff_ms", _int, _ALL),
    "reconnect.backoff.ms": ("reconnect_backoff_ms", _int, _ALL),
    "reconnect.backoff.max.ms": ("reconnect_backoff_max_ms", _int, _ALL),
    "connections.max.idle.ms": ("connections_max_idle_ms", _int, _ALL),
    "metadata.max.age.ms": ("metadata_max_age_ms", _int, _ALL),
    "receive.buffer.bytes": ("receive_buffer_bytes", _int, _ALL),
    "send.buffer.bytes": ("send_buffer_bytes", _int, _ALL),
    "acks": ("acks", _acks, _PRODUCER),
    "compression.type": ("compression_type", _compression, _PRODUCER),
    "linger.ms": ("linger_ms", _int, _PRODUCER),
    "batch.size": ("batch_size", _int, _PRODUCER),
    "max.request.size": ("max_request_size", _int, _PRODUCER),
    "retries": ("retries", _int, _PRODUCER),
    "delivery.timeout.ms": ("delivery_timeout_ms", _int, _PRODUCER),
    "max.block.ms": ("max_block_ms", _int, _PRODUCER),
    "enable.idempotence": ("enable_idempotence", _bool, _PRODUCER),
    "max.in.flight.requests.per.connection": ("max_in_flight_requests_per_connection", _int,
                                              _PRODUCER),
    "fetch.min.bytes": ("fetch_min_bytes", _int, _CONSUMER),
    "fetch.max.bytes": ("fetch_max_bytes", _int, _CONSUMER),
    "max.partition.fetch.bytes": ("max_partition_fetch_bytes", _int, _CONSUMER),
    "max.poll.records": ("max_poll_records", _int, _CONSUMER),
    "session.timeout.ms": ("session_timeout_ms", _int, _CONSUMER),
    "heartbeat.interval.ms": ("heartbeat_interval_ms", _int, _CONSUMER),
    "client.rack": ("client_rack", str, _CONSUMER),
}

#: Properties the Python clients cannot take, and why: they reach only the job's Java
#: clients (a warning is logged once per key). Any other key that neither this table nor
#: :data:`PYTHON_PROPERTIES` names is treated the same way.
PYTHON_UNSUPPORTED = {
    "ssl.truststore.location": "kafka-python reads PEM files only: use ssl.truststore.type=PEM "
                               "(or --ssl-cafile) for a PEM file; JKS/PKCS12 stores are Java-only",
    "ssl.truststore.password": "JKS/PKCS12 stores are Java-only",
    "ssl.keystore.location": "kafka-python reads PEM files only: use ssl.keystore.type=PEM "
                             "(certificate and key in one file); JKS/PKCS12 stores are Java-only",
    "ssl.keystore.password": "JKS/PKCS12 stores are Java-only",
    "ssl.truststore.certificates": "inline PEM is Java-only: give a file",
    "ssl.keystore.certificate.chain": "inline PEM is Java-only: give a file",
    "ssl.keystore.key": "inline PEM is Java-only: give a file",
    "ssl.protocol": "kafka-python negotiates the TLS version itself",
    "ssl.enabled.protocols": "kafka-python negotiates the TLS version itself",
    "sasl.jaas.config": "only PlainLoginModule and ScramLoginModule with username and "
                        "password are translated",
    "sasl.login.callback.handler.class": "a Java class",
    "sasl.client.callback.handler.class": "a Java class",
    "sasl.oauthbearer.token.endpoint.url": "OAUTHBEARER needs a Python token provider",
    "interceptor.classes": "Java classes", "partitioner.class": "a Java class",
    "partition.assignment.strategy": "Java class names",
    "metric.reporters": "Java classes",
    "isolation.level": "the Python readers choose their own (read_committed where the job "
                       "writes transactions)",
    "auto.offset.reset": "the Python readers choose their own start",
    "enable.auto.commit": "the Python readers never commit",
    "fetch.max.wait.ms": "the Python readers choose their own wait",
    "transaction.timeout.ms": "the job's setting; the Python producers are not transactional",
}

_warned: set[str] = set()


def _warn_once(key: str, why: str) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning("Kafka property %s goes only to the Flink job, not to the Python clients: %s",
                    key, why)


_JAAS = re.compile(r"^\s*org\.apache\.kafka\.common\.security\.(?:plain\.PlainLoginModule|"
                   r"scram\.ScramLoginModule)\s+required\b(?P<opts>.*?);?\s*$", re.S)
_JAAS_OPT = re.compile(r'(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|(\S+?))(?=\s|;|$)', re.S)


def _jaas_credentials(value: str) -> tuple[str, str] | None:
    """Username and password of a Plain/Scram ``sasl.jaas.config``, else None."""
    m = _JAAS.match(value)
    if not m:
        return None
    opts = {k: (re.sub(r"\\(.)", r"\1", q) if q or not bare else bare)
            for k, q, bare in _JAAS_OPT.findall(m["opts"])}
    if "username" in opts and "password" in opts:
        return opts["username"], opts["password"]
    return None


@dataclass(frozen=True)
class KafkaConnection:
    """Kafka connection settings.

    Attributes
    ----------
    bootstrap_servers : str or None
        ``host:port[,host:port]``; None when the command starts the embedded broker.
    security_protocol : str
        ``PLAINTEXT`` (default), ``SSL``, ``SASL_PLAINTEXT`` or ``SASL_SSL``.
    sasl_mechanism : str or None
        ``PLAIN``, ``SCRAM-SHA-256`` or ``SCRAM-SHA-512``.
    sasl_username, sasl_password : str or None
    ssl_cafile : str or None
        A PEM file of trusted certificate authorities.
    properties : tuple[tuple[str, str], ...]
        Further Kafka client properties (Java names), in order; a later pair of the same key
        wins, and every pair wins over what the fields above set (module docstring).

    Raises
    ------
    ValueError
        On an unknown protocol or mechanism, SASL without a username and password, or a
        property the job sets itself (:data:`RESERVED_PROPERTIES`).
    """

    bootstrap_servers: str | None = None
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None
    ssl_cafile: str | None = None
    properties: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.security_protocol not in _PROTOCOLS:
            raise ValueError(f"security_protocol must be one of {_PROTOCOLS}, got "
                             f"{self.security_protocol!r}")
        object.__setattr__(self, "properties", tuple((str(k), str(v)) for k, v in self.properties))
        given = {k for k, _ in self.properties}
        if self.security_protocol.startswith("SASL"):  # unless the properties say it
            if self.sasl_mechanism not in _MECHANISMS and "sasl.mechanism" not in given:
                raise ValueError(f"sasl_mechanism must be one of {_MECHANISMS}, got "
                                 f"{self.sasl_mechanism!r}")
            if not (self.sasl_username and self.sasl_password) and "sasl.jaas.config" not in given:
                raise ValueError("SASL needs sasl_username and sasl_password")
        for key, _ in self.properties:
            if key in RESERVED_PROPERTIES:
                raise ValueError(f"Kafka property {key} is set by {RESERVED_PROPERTIES[key]}; "
                                 f"it cannot be given with --kafka-config or -X")

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """The connection flags every subcommand shares (defaults from the environment)."""
        g = parser.add_argument_group("Kafka connection (flags, or the OMLDM_* variables)")
        g.add_argument("--bootstrap-servers", default=os.environ.get(_ENV["bootstrap_servers"]),
                       help="host:port[,host:port] ($OMLDM_BOOTSTRAP_SERVERS)")
        g.add_argument("--security-protocol", choices=_PROTOCOLS,
                       default=os.environ.get(_ENV["security_protocol"], "PLAINTEXT"))
        g.add_argument("--sasl-mechanism", choices=_MECHANISMS,
                       default=os.environ.get(_ENV["sasl_mechanism"]))
        g.add_argument("--sasl-username", default=os.environ.get(_ENV["sasl_username"]))
        g.add_argument("--sasl-password", default=os.environ.get(_ENV["sasl_password"]),
                       help="better given as $OMLDM_SASL_PASSWORD")
        g.add_argument("--ssl-cafile", default=os.environ.get(_ENV["ssl_cafile"]))
        g.add_argument("--kafka-config", metavar="FILE",
                       default=os.environ.get(_ENV["kafka_config"]),
                       help="a Java properties file of Kafka client properties, as Kafka's "
                            "tools take with --command-config; wins over the flags above "
                            "($OMLDM_KAFKA_CONFIG)")
        g.add_argument("-X", dest="kafka_property", action="append", type=_key_value,
                       default=[], metavar="KEY=VALUE",
                       help="a Kafka client property (repeatable); wins over --kafka-config")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "KafkaConnection":
        """The connection :meth:`add_arguments`' options describe.

        Raises
        ------
        ValueError
            When ``--kafka-config`` cannot be read, or on an invalid setting.
        """
        props = load_properties(args.kafka_config) if args.kafka_config else ()
        return cls(args.bootstrap_servers, args.security_protocol, args.sasl_mechanism,
                   args.sasl_username, args.sasl_password, args.ssl_cafile,
                   props + tuple(args.kafka_property))

    def java_properties(self) -> dict[str, str]:
        """Kafka client properties for the job's Java sources and sinks: those of the
        dedicated fields, then :attr:`properties` in order (a later key wins)."""
        props = {"security.protocol": self.security_protocol}
        if self.sasl_mechanism:
            props["sasl.mechanism"] = self.sasl_mechanism
        if self.sasl_mechanism and self.sasl_username and self.sasl_password:
            module = ("org.apache.kafka.common.security.plain.PlainLoginModule"
                      if self.sasl_mechanism == "PLAIN"
                      else "org.apache.kafka.common.security.scram.ScramLoginModule")
            user = self.sasl_username.replace('"', '\\"')
            password = self.sasl_password.replace('"', '\\"')
            props["sasl.jaas.config"] = (f'{module} required username="{user}" '
                                         f'password="{password}";')
        if self.ssl_cafile:
            props.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": self.ssl_cafile})
        props.update(self.properties)
        return props

    def client_kwargs(self, role: str | None = None) -> dict:
        """Keyword arguments for kafka-python clients (without bootstrap_servers).

        Parameters
        ----------
        role : {None, "producer", "consumer"}
            None: the settings every client takes (``KafkaAdminClient`` included);
            ``"producer"`` or ``"consumer"`` add the properties only that client takes
            (:data:`PYTHON_PROPERTIES`).

        The Java properties (:meth:`java_properties`) are translated by
        :data:`PYTHON_PROPERTIES`; ``sasl.jaas.config`` gives the username and password
        when it names PlainLoginModule or ScramLoginModule; a ``PEM``
        ``ssl.truststore.location`` is ``ssl_cafile`` and a ``PEM``
        ``ssl.keystore.location`` is ``ssl_certfile``. What cannot be translated is left
        out, with a warning logged once per key.

        Raises
        ------
        ValueError
            On an unknown role, or a property value the conversion refuses (naming the
            property).
        """
        if role not in (None, _PRODUCER, _CONSUMER):
            raise ValueError(f"role must be None, 'producer' or 'consumer', got {role!r}")
        java = self.java_properties()
        kw: dict = {}
        for key, value in java.items():
            if key in PYTHON_PROPERTIES:
                name, convert, roles = PYTHON_PROPERTIES[key]
                if roles != _ALL and roles != role:
                    continue
                try:
                    kw[name] = convert(value)
                except ValueError as exc:
                    raise ValueError(f"Kafka property {key}={value!r}: {exc}") from None
            elif key == "sasl.jaas.config" and _jaas_credentials(value):
                kw["sasl_plain_username"], kw["sasl_plain_password"] = _jaas_credentials(value)
            elif (key in ("ssl.truststore.location", "ssl.keystore.location")
                  and java.get(key.replace("location", "type"), "").upper() == "PEM"):
                kw["ssl_cafile" if "truststore" in key else "ssl_certfile"] = value
            elif key in ("ssl.truststore.type", "ssl.keystore.type"):
                if value.upper() != "PEM":
                    _warn_once(key, "kafka-python reads PEM files only")
            else:
                _warn_once(key, PYTHON_UNSUPPORTED.get(key, "no kafka-python equivalent known"))
        return kw
