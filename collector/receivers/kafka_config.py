"""Kafka settings (SPEC.md sections 8 and 9): what the receiver, the dead-letter producer and the
results producer need, validated up front so that a bad value is refused at start with a message
that names the key.

Keys are the flag names without `--` and with `_` (`kafka_bootstrap`, ...), which is also how the
YAML config and `CTXPREC_KAFKA_*` variables spell them; `from_mapping` reads such a mapping."""
from __future__ import annotations

import dataclasses
import os
import ssl
from dataclasses import dataclass, field
from typing import Any, Mapping

FORMATS = ("otlp_proto", "otlp_json", "rag_event")
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
DEFAULT_GROUP = "ctxprec"


class KafkaConfigError(ValueError):
    """A Kafka setting that cannot work; the message names the key."""


@dataclass(slots=True)
class KafkaSecurity:
    protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "PLAIN"
    username: str | None = None
    password: str | None = field(default=None, repr=False)  # never logged
    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    check_hostname: bool = True

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments shared by aiokafka's consumer, producer and admin client."""
        options: dict[str, Any] = {"security_protocol": self.protocol}
        if self.protocol.startswith("SASL"):
            options.update(
                sasl_mechanism=self.sasl_mechanism,
                sasl_plain_username=self.username,
                sasl_plain_password=self.password,
            )
        if self.protocol in ("SSL", "SASL_SSL"):
            options["ssl_context"] = self.ssl_context()
        return options

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.cafile)
        context.check_hostname = self.check_hostname
        if self.certfile:
            context.load_cert_chain(self.certfile, self.keyfile)
        return context


@dataclass(slots=True)
class KafkaSettings:
    bootstrap: str
    topic: str
    format: str = "otlp_proto"
    group: str = DEFAULT_GROUP
    results_topic: str | None = None
    dlq_topic: str | None = None  # None -> "<topic>.dlq"; "" disables dead-lettering (counted, skipped)
    security: KafkaSecurity = field(default_factory=KafkaSecurity)
    max_undone_per_partition: int = 200  # back-pressure: pause a partition past this many
    # ... and every partition past this many in all. None: half the scoring queue
    # (`with_queue_size`), so that Kafka input waits rather than being shed as `overloaded`.
    max_undone_total: int | None = None
    max_message_bytes: int = 8 * 1024 * 1024  # larger messages are dead-lettered unread
    commit_interval_s: float = 1.0
    shutdown_drain_s: float = 10.0  # how long stop() waits for in-flight messages to be decided
    auto_offset_reset: str = "earliest"
    # Group liveness: how soon a crashed replica's partitions move to the others.
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 3_000
    client_id: str = "ctxprec"

    @property
    def dead_letter_topic(self) -> str | None:
        if self.dlq_topic is None:
            return f"{self.topic}.dlq"
        return self.dlq_topic or None

    def with_queue_size(self, queue_size: int) -> "KafkaSettings":
        """These settings with `max_undone_total` derived from the scoring queue when not given:
        half of it, since undone messages sit in that queue (a rag_event is one retrieval) and
        OTLP receivers may share it."""
        if self.max_undone_total is not None:
            return self
        return dataclasses.replace(self, max_undone_total=max(1, queue_size // 2))

    @property
    def bootstrap_servers(self) -> list[str]:
        return [h.strip() for h in self.bootstrap.split(",") if h.strip()]

    def validate(self) -> "KafkaSettings":
        if not self.bootstrap_servers:
            raise KafkaConfigError("kafka_bootstrap: give at least one host:port")
        for host in self.bootstrap_servers:
            name, _, port = host.rpartition(":")
            if not name or not port.isdigit():
                raise KafkaConfigError(f"kafka_bootstrap: {host!r} is not host:port")
        if not self.topic:
            raise KafkaConfigError("kafka_topic: required with kafka_bootstrap")
        if self.format not in FORMATS:
            raise KafkaConfigError(f"kafka_format: {self.format!r} is not one of {', '.join(FORMATS)}")
        if not self.group:
            raise KafkaConfigError("kafka_group: must not be empty")
        if self.dead_letter_topic == self.topic:
            raise KafkaConfigError("kafka_dlq_topic: must differ from kafka_topic")
        if self.results_topic == self.topic:
            raise KafkaConfigError("kafka_results_topic: must differ from kafka_topic")
        if self.max_undone_per_partition < 1:
            raise KafkaConfigError("kafka_max_undone_per_partition: must be at least 1")
        if self.max_undone_total is not None and self.max_undone_total < 1:
            raise KafkaConfigError("kafka_max_undone_total: must be at least 1")
        if self.max_message_bytes < 1024:
            raise KafkaConfigError("kafka_max_message_bytes: must be at least 1024")
        if self.commit_interval_s <= 0:
            raise KafkaConfigError("kafka_commit_interval_s: must be positive")
        if self.heartbeat_interval_ms <= 0 or self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise KafkaConfigError("kafka_heartbeat_interval_ms: must be positive and below kafka_session_timeout_ms")
        if self.auto_offset_reset not in ("earliest", "latest"):
            raise KafkaConfigError("kafka_auto_offset_reset: must be earliest or latest")
        sec = self.security
        if sec.protocol not in SECURITY_PROTOCOLS:
            raise KafkaConfigError(
                f"kafka_security_protocol: {sec.protocol!r} is not one of {', '.join(SECURITY_PROTOCOLS)}")
        if sec.protocol.startswith("SASL"):
            if sec.sasl_mechanism not in SASL_MECHANISMS:
                raise KafkaConfigError(
                    f"kafka_sasl_mechanism: {sec.sasl_mechanism!r} is not one of {', '.join(SASL_MECHANISMS)}")
            if not sec.username or sec.password is None:
                raise KafkaConfigError(
                    f"kafka_sasl_username/kafka_sasl_password: required with security protocol {sec.protocol}")
        if sec.keyfile and not sec.certfile:
            raise KafkaConfigError("kafka_ssl_keyfile: needs kafka_ssl_certfile")
        for key, path in (("kafka_ssl_cafile", sec.cafile), ("kafka_ssl_certfile", sec.certfile),
                          ("kafka_ssl_keyfile", sec.keyfile)):
            if path and not os.path.isfile(path):
                raise KafkaConfigError(f"{key}: file not found: {path!r}")
        return self


# mapping key -> (where it goes, converter). Security keys go to KafkaSecurity.
_TOP_KEYS: dict[str, tuple[str, type]] = {
    "kafka_bootstrap": ("bootstrap", str),
    "kafka_topic": ("topic", str),
    "kafka_format": ("format", str),
    "kafka_group": ("group", str),
    "kafka_results_topic": ("results_topic", str),
    "kafka_dlq_topic": ("dlq_topic", str),
    "kafka_max_undone_per_partition": ("max_undone_per_partition", int),
    "kafka_max_undone_total": ("max_undone_total", int),
    "kafka_max_message_bytes": ("max_message_bytes", int),
    "kafka_commit_interval_s": ("commit_interval_s", float),
    "kafka_shutdown_drain_s": ("shutdown_drain_s", float),
    "kafka_auto_offset_reset": ("auto_offset_reset", str),
    "kafka_session_timeout_ms": ("session_timeout_ms", int),
    "kafka_heartbeat_interval_ms": ("heartbeat_interval_ms", int),
    "kafka_client_id": ("client_id", str),
}
_SECURITY_KEYS: dict[str, tuple[str, type]] = {
    "kafka_security_protocol": ("protocol", str),
    "kafka_sasl_mechanism": ("sasl_mechanism", str),
    "kafka_sasl_username": ("username", str),
    "kafka_sasl_password": ("password", str),
    "kafka_ssl_cafile": ("cafile", str),
    "kafka_ssl_certfile": ("certfile", str),
    "kafka_ssl_keyfile": ("keyfile", str),
    "kafka_ssl_check_hostname": ("check_hostname", bool),
}
KEYS: tuple[str, ...] = tuple(_TOP_KEYS) + tuple(_SECURITY_KEYS)


def from_mapping(values: Mapping[str, Any]) -> KafkaSettings | None:
    """Settings from flat `kafka_*` keys (None values are "not given"); None when Kafka is off
    (no bootstrap). Raises KafkaConfigError naming the key."""
    given = {k: v for k, v in values.items() if k in KEYS and v is not None}
    if not given.get("kafka_bootstrap"):
        if given.get("kafka_topic"):
            raise KafkaConfigError("kafka_bootstrap: required with kafka_topic")
        return None
    top: dict[str, Any] = {}
    sec: dict[str, Any] = {}
    for key, value in given.items():
        target, where = (_TOP_KEYS[key], top) if key in _TOP_KEYS else (_SECURITY_KEYS[key], sec)
        name, kind = target
        where[name] = _convert(key, value, kind)
    if "protocol" in sec:
        sec["protocol"] = str(sec["protocol"]).upper()
    if "sasl_mechanism" in sec:
        sec["sasl_mechanism"] = str(sec["sasl_mechanism"]).upper()
    if "topic" not in top:
        raise KafkaConfigError("kafka_topic: required with kafka_bootstrap")
    return KafkaSettings(security=KafkaSecurity(**sec), **top).validate()


def _convert(key: str, value: Any, kind: type) -> Any:
    # The converters every other `ctxprec serve` setting goes through (imported here: config.py
    # imports this module), so that Kafka numbers are refused the same way (not truncated, not NaN).
    from ctxprec.collector.config import boolean, parse_number

    try:
        if kind is bool:
            return boolean(value)
        if kind in (int, float):
            return parse_number(value, integer=kind is int)
    except ValueError as exc:
        raise KafkaConfigError(f"{key}: {exc}") from None
    if not isinstance(value, (str, int, float)):
        raise KafkaConfigError(f"{key}: expected text, got {type(value).__name__}")
    return str(value)
