"""How every omldm command reaches Kafka: bootstrap servers and security settings, from
flags or environment variables, for both kafka-python (the command line) and the Java
Kafka clients of the Flink job."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

__all__ = ["KafkaConnection"]

_ENV = {
    "bootstrap_servers": "OMLDM_BOOTSTRAP_SERVERS", "security_protocol": "OMLDM_SECURITY_PROTOCOL",
    "sasl_mechanism": "OMLDM_SASL_MECHANISM", "sasl_username": "OMLDM_SASL_USERNAME",
    "sasl_password": "OMLDM_SASL_PASSWORD", "ssl_cafile": "OMLDM_SSL_CAFILE",
}
_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


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

    Raises
    ------
    ValueError
        On an unknown protocol or mechanism, or SASL without a username and password.
    """

    bootstrap_servers: str | None = None
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None
    ssl_cafile: str | None = None

    def __post_init__(self) -> None:
        if self.security_protocol not in _PROTOCOLS:
            raise ValueError(f"security_protocol must be one of {_PROTOCOLS}, got "
                             f"{self.security_protocol!r}")
        if self.security_protocol.startswith("SASL"):
            if self.sasl_mechanism not in _MECHANISMS:
                raise ValueError(f"sasl_mechanism must be one of {_MECHANISMS}, got "
                                 f"{self.sasl_mechanism!r}")
            if not (self.sasl_username and self.sasl_password):
                raise ValueError("SASL needs sasl_username and sasl_password")

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

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "KafkaConnection":
        return cls(args.bootstrap_servers, args.security_protocol, args.sasl_mechanism,
                   args.sasl_username, args.sasl_password, args.ssl_cafile)

    def client_kwargs(self) -> dict:
        """Keyword arguments for kafka-python clients (without bootstrap_servers)."""
        kw: dict = {"security_protocol": self.security_protocol}
        if self.sasl_mechanism:
            kw.update(sasl_mechanism=self.sasl_mechanism, sasl_plain_username=self.sasl_username,
                      sasl_plain_password=self.sasl_password)
        if self.ssl_cafile:
            kw["ssl_cafile"] = self.ssl_cafile
        return kw

    def java_properties(self) -> dict[str, str]:
        """Kafka client properties for the job's Java sources and sinks."""
        props = {"security.protocol": self.security_protocol}
        if self.sasl_mechanism:
            module = ("org.apache.kafka.common.security.plain.PlainLoginModule"
                      if self.sasl_mechanism == "PLAIN"
                      else "org.apache.kafka.common.security.scram.ScramLoginModule")
            user = self.sasl_username.replace('"', '\\"')
            password = self.sasl_password.replace('"', '\\"')
            props.update({"sasl.mechanism": self.sasl_mechanism,
                          "sasl.jaas.config": f'{module} required username="{user}" '
                                              f'password="{password}";'})
        if self.ssl_cafile:
            props.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": self.ssl_cafile})
        return props
