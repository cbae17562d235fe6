"""Kafka settings: the YAML section `kafka` as users write it (`KafkaConfig`: the topic read, its
format, the consumer group, the results, diagnostics and dead-letter topics, how to connect),
validated up front so that a bad value is refused at start with a message that names the key;
and what each Kafka component is built with (`KafkaReceiverSettings` for the receiver and its
dead letters, `KafkaTopic` for the producers and the cluster feed), each sharing one
`KafkaConnection` block, as the OpenTelemetry Collector's components share their TLS block.
Kafka is on when `bootstrap` is set."""
from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Annotated, Any

from ctxprec.collector.config_types import (
    Count,
    OptionalText,
    Positive,
    ReadableFile,
    Switch,
    choice,
    setting,
)
from pydantic import BaseModel, BeforeValidator, ConfigDict, model_validator

FORMATS = ("otlp_proto", "otlp_json", "rag_event")
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
OFFSET_RESETS = ("earliest", "latest")


def _upper_choice(*choices: str) -> Any:
    parse = choice(*(c.lower() for c in choices))
    return BeforeValidator(lambda raw: str(parse(raw)).upper())


@dataclass(frozen=True, slots=True)
class KafkaSecurity:
    """How to connect: aiokafka's security options, built from the settings."""

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
            options.update(sasl_mechanism=self.sasl_mechanism, sasl_plain_username=self.username,
                           sasl_plain_password=self.password)
        if self.protocol in ("SSL", "SASL_SSL"):
            options["ssl_context"] = self.ssl_context()
        return options

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.cafile)
        context.check_hostname = self.check_hostname
        if self.certfile:
            context.load_cert_chain(self.certfile, self.keyfile)
        return context


@dataclass(frozen=True, slots=True)
class KafkaConnection:
    """How every Kafka component reaches the brokers."""

    bootstrap_servers: tuple[str, ...]
    client_id: str
    security: KafkaSecurity

    @property
    def bootstrap(self) -> str:
        return ",".join(self.bootstrap_servers)

    def client_options(self, role: str | None = None) -> dict[str, Any]:
        """aiokafka's connection keywords; `role` tells this component's client id apart."""
        return {"bootstrap_servers": list(self.bootstrap_servers),
                "client_id": f"{self.client_id}-{role}" if role else self.client_id,
                **self.security.client_options()}


@dataclass(frozen=True, slots=True)
class KafkaTopic:
    """One topic that a component writes or reads on its own (the results and diagnostics
    producers, the cluster feed)."""

    connection: KafkaConnection
    topic: str


@dataclass(frozen=True, slots=True)
class KafkaReceiverSettings:
    """The receiver: its topic and group, back-pressure, commits and dead letters."""

    connection: KafkaConnection
    topic: str
    format: str
    group: str
    dead_letter_topic: str | None
    max_undone_per_partition: int
    max_undone_total: int
    max_message_bytes: int
    commit_interval_s: float
    shutdown_drain_s: float
    auto_offset_reset: str
    session_timeout_ms: int
    heartbeat_interval_ms: int


class KafkaConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)

    bootstrap: OptionalText = setting(None, "Kafka bootstrap servers, host:port[,host:port...]; set: read from Kafka",
                                      flag="--kafka-bootstrap")
    topic: OptionalText = setting(None, "topic to read", flag="--kafka-topic")
    format: Annotated[str, BeforeValidator(choice(*FORMATS))] = setting(
        "otlp_proto", "what the messages hold: otlp_proto or otlp_json (the OpenTelemetry Collector's Kafka "
                      "exporter) or rag_event (one RAG event per message)", flag="--kafka-format", choices=FORMATS)
    group: OptionalText = setting("ctxprec", "consumer group; more replicas in the same group share the partitions",
                                  flag="--kafka-group")
    results_topic: OptionalText = setting(None, "topic to write score records to (off: none)",
                                          flag="--kafka-results-topic")
    diagnostics_topic: OptionalText = setting(None, "topic to write the noisy-document summaries to, one message per "
                                                    "service and retriever, periodically (off: none; never the "
                                                    "results topic)", flag="--kafka-diagnostics-topic")
    diagnostics_interval_s: Positive = setting(60.0, "how often the noisy-document summaries are written to "
                                                     "kafka.diagnostics_topic, seconds",
                                               flag="--kafka-diagnostics-interval-s")
    dlq_topic: str | None = setting(None, "dead-letter topic for messages that cannot be decoded (default: "
                                          "<topic>.dlq; empty: count and skip them)", flag="--kafka-dlq-topic")
    max_undone_per_partition: Count = setting(200, "back-pressure: a partition pauses past this many messages not "
                                                   "yet decided", flag="--kafka-max-undone-per-partition")
    max_undone_total: Count | None = setting(None, "back-pressure over all partitions (default: half of "
                                                   "scoring.queue_size)", flag="--kafka-max-undone-total")
    max_message_bytes: Count = setting(8 * 1024 * 1024, "larger messages are dead-lettered unread, bytes",
                                       flag="--kafka-max-message-bytes")
    commit_interval_s: Positive = setting(1.0, "how often offsets are committed, seconds",
                                          flag="--kafka-commit-interval-s")
    shutdown_drain_s: Positive = setting(10.0, "on shutdown, how long to wait for messages in flight, seconds",
                                         flag="--kafka-shutdown-drain-s")
    auto_offset_reset: Annotated[str, BeforeValidator(choice(*OFFSET_RESETS))] = setting(
        "earliest", "where a new consumer group starts", flag="--kafka-auto-offset-reset", choices=OFFSET_RESETS)
    session_timeout_ms: Count = setting(10_000, "group liveness: how soon a crashed replica's partitions move",
                                        flag="--kafka-session-timeout-ms")
    heartbeat_interval_ms: Count = setting(3_000, "group heartbeat interval, below the session timeout",
                                           flag="--kafka-heartbeat-interval-ms")
    client_id: OptionalText = setting("ctxprec", "Kafka client id", flag="--kafka-client-id")
    security_protocol: Annotated[str, _upper_choice(*SECURITY_PROTOCOLS)] = setting(
        "PLAINTEXT", "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL", flag="--kafka-security-protocol",
        choices=SECURITY_PROTOCOLS)
    sasl_mechanism: Annotated[str, _upper_choice(*SASL_MECHANISMS)] = setting(
        "PLAIN", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", flag="--kafka-sasl-mechanism", choices=SASL_MECHANISMS)
    sasl_username: OptionalText = setting(None, "SASL user name", flag="--kafka-sasl-username")
    sasl_password: OptionalText = setting(None, "SASL password", flag="--kafka-sasl-password", secret=True)
    ssl_cafile: ReadableFile = setting(None, "CA bundle (PEM) to trust for SSL", flag="--kafka-ssl-cafile")
    ssl_certfile: ReadableFile = setting(None, "client certificate (PEM) for SSL", flag="--kafka-ssl-certfile")
    ssl_keyfile: ReadableFile = setting(None, "client key (PEM) for SSL", flag="--kafka-ssl-keyfile")
    ssl_check_hostname: Switch = setting(True, "check the broker's host name against its certificate",
                                         flag="--kafka-ssl-check-hostname")

    @property
    def enabled(self) -> bool:
        return self.bootstrap is not None

    @property
    def bootstrap_servers(self) -> list[str]:
        return [h.strip() for h in (self.bootstrap or "").split(",") if h.strip()]

    @property
    def dead_letter_topic(self) -> str | None:
        if self.dlq_topic is None:
            return f"{self.topic}.dlq"
        return self.dlq_topic or None

    @property
    def security(self) -> KafkaSecurity:
        return KafkaSecurity(protocol=self.security_protocol, sasl_mechanism=self.sasl_mechanism,
                             username=self.sasl_username, password=self.sasl_password, cafile=self.ssl_cafile,
                             certfile=self.ssl_certfile, keyfile=self.ssl_keyfile,
                             check_hostname=self.ssl_check_hostname)

    def connection(self) -> KafkaConnection:
        return KafkaConnection(tuple(self.bootstrap_servers), self.client_id or "ctxprec", self.security)

    def receiver(self, queue_size: int) -> KafkaReceiverSettings:
        """The receiver's settings. `max_undone_total`, when not given, is half of the scoring
        queue (`queue_size`): undone messages sit in that queue (a rag_event is one retrieval)
        and OTLP receivers may share it."""
        assert self.topic and self.group, "validated: a Kafka input has a topic and a group"
        return KafkaReceiverSettings(
            connection=self.connection(), topic=self.topic, format=self.format, group=self.group,
            dead_letter_topic=self.dead_letter_topic, max_undone_per_partition=self.max_undone_per_partition,
            max_undone_total=self.max_undone_total or max(1, queue_size // 2),
            max_message_bytes=self.max_message_bytes, commit_interval_s=self.commit_interval_s,
            shutdown_drain_s=self.shutdown_drain_s, auto_offset_reset=self.auto_offset_reset,
            session_timeout_ms=self.session_timeout_ms, heartbeat_interval_ms=self.heartbeat_interval_ms)

    def results(self) -> KafkaTopic | None:
        return KafkaTopic(self.connection(), self.results_topic) if self.results_topic else None

    def diagnostics(self) -> KafkaTopic | None:
        return KafkaTopic(self.connection(), self.diagnostics_topic) if self.diagnostics_topic else None

    @model_validator(mode="after")
    def _consistent(self) -> "KafkaConfig":
        if not self.enabled:
            if self.topic:
                raise ValueError("[bootstrap] required with kafka.topic")
            if self.diagnostics_topic:
                raise ValueError("[bootstrap] required with kafka.diagnostics_topic")
            return self
        for host in self.bootstrap_servers or [""]:
            name, _, port = host.rpartition(":")
            if not name or not port.isdigit():
                raise ValueError(f"[bootstrap] {host!r} is not host:port")
        if not self.topic:
            raise ValueError("[topic] required with kafka.bootstrap")
        if not self.group:
            raise ValueError("[group] must not be empty")
        if self.dead_letter_topic == self.topic:
            raise ValueError("[dlq_topic] must differ from kafka.topic")
        if self.results_topic == self.topic:
            raise ValueError("[results_topic] must differ from kafka.topic")
        if self.diagnostics_topic and self.diagnostics_topic in (self.topic, self.results_topic,
                                                                 self.dead_letter_topic):
            raise ValueError("[diagnostics_topic] must be a topic of its own (not kafka.topic, the results or the "
                             "dead-letter topic)")
        if self.max_message_bytes < 1024:
            raise ValueError("[max_message_bytes] must be at least 1024")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError("[heartbeat_interval_ms] must be below kafka.session_timeout_ms")
        if self.security_protocol.startswith("SASL") and (not self.sasl_username or self.sasl_password is None):
            raise ValueError(f"[sasl_username / sasl_password] required with security protocol "
                             f"{self.security_protocol}")
        if self.ssl_keyfile and not self.ssl_certfile:
            raise ValueError("[ssl_keyfile] needs kafka.ssl_certfile")
        return self
