"""Kafka settings: refused at start with a message that names the key; security settings reach
aiokafka's client options. Set the way users set them: `CTXPREC_KAFKA_*` variables."""
from __future__ import annotations

import ssl
from typing import Any

import pytest
from ctxprec.collector import config as config_module
from ctxprec.collector.config import ConfigError
from ctxprec.collector.kafka.config import KafkaConfig

pytestmark = pytest.mark.slow


def kafka(**values: str) -> KafkaConfig:
    """The Kafka settings from CTXPREC_KAFKA_<NAME> variables."""
    env = {f"CTXPREC_KAFKA_{name.upper()}": value for name, value in values.items()}
    return config_module.load(None, environ=env).kafka


def test_kafka_is_off_without_bootstrap() -> None:
    assert not kafka().enabled
    assert not kafka(group="g").enabled


def test_defaults_and_dead_letter_topic() -> None:
    s = kafka(bootstrap="a:9092, b:9092", topic="otlp_spans")
    assert s.enabled and s.bootstrap_servers == ["a:9092", "b:9092"]
    assert s.format == "otlp_proto" and s.group == "ctxprec"
    assert s.dead_letter_topic == "otlp_spans.dlq"
    assert KafkaConfig(bootstrap="a:1", topic="t", dlq_topic="").dead_letter_topic is None
    assert s.security.client_options() == {"security_protocol": "PLAINTEXT"}


def test_each_component_gets_its_own_settings_over_one_connection() -> None:
    s = kafka(bootstrap="a:9092", topic="spans", results_topic="scores", diagnostics_topic="diag", client_id="cx")
    receiver = s.receiver(queue_size=1000)
    assert (receiver.topic, receiver.group, receiver.dead_letter_topic) == ("spans", "ctxprec", "spans.dlq")
    assert receiver.max_undone_total == 500  # half the scoring queue when not given
    assert kafka(bootstrap="a:1", topic="t", max_undone_total="7").receiver(1000).max_undone_total == 7
    results, diagnostics = s.results(), s.diagnostics()
    assert results is not None and diagnostics is not None
    assert (results.topic, diagnostics.topic) == ("scores", "diag")
    assert results.connection == diagnostics.connection == receiver.connection
    assert receiver.connection.client_options("results") == {
        "bootstrap_servers": ["a:9092"], "client_id": "cx-results", "security_protocol": "PLAINTEXT"}
    assert kafka(bootstrap="a:1", topic="t").results() is None


@pytest.mark.parametrize("values, key", [
    ({"topic": "t"}, "kafka.bootstrap"),
    ({"bootstrap": "a:1"}, "kafka.topic"),
    ({"bootstrap": "nohostport", "topic": "t"}, "kafka.bootstrap"),
    ({"bootstrap": "a:1", "topic": "t", "format": "avro"}, "kafka.format"),
    ({"bootstrap": "a:1", "topic": "t", "dlq_topic": "t"}, "kafka.dlq_topic"),
    ({"bootstrap": "a:1", "topic": "t", "max_undone_per_partition": "0"}, "kafka.max_undone_per_partition"),
    ({"bootstrap": "a:1", "topic": "t", "commit_interval_s": "soon"}, "kafka.commit_interval_s"),
    ({"bootstrap": "a:1", "topic": "t", "security_protocol": "TLS"}, "kafka.security_protocol"),
    ({"bootstrap": "a:1", "topic": "t", "security_protocol": "SASL_SSL"}, "kafka.sasl_username"),
    ({"bootstrap": "a:1", "topic": "t", "security_protocol": "sasl_plaintext", "sasl_mechanism": "GSSAPI",
      "sasl_username": "u", "sasl_password": "p"}, "kafka.sasl_mechanism"),
    ({"bootstrap": "a:1", "topic": "t", "ssl_keyfile": "/etc/hostname"}, "kafka.ssl_keyfile"),
    ({"bootstrap": "a:1", "topic": "t", "ssl_certfile": "/no/such/cert.pem"}, "kafka.ssl_certfile"),
    ({"bootstrap": "a:1", "topic": "t", "session_timeout_ms": "1000", "heartbeat_interval_ms": "1000"},
     "kafka.heartbeat_interval_ms"),
    # The noisy-document summaries go to a topic of their own, never mixed into another.
    ({"diagnostics_topic": "diag"}, "kafka.bootstrap"),
    ({"bootstrap": "a:1", "topic": "t", "results_topic": "r", "diagnostics_topic": "r"}, "kafka.diagnostics_topic"),
    ({"bootstrap": "a:1", "topic": "t", "diagnostics_topic": "t"}, "kafka.diagnostics_topic"),
    ({"bootstrap": "a:1", "topic": "t", "diagnostics_topic": "t.dlq"}, "kafka.diagnostics_topic"),
    ({"bootstrap": "a:1", "topic": "t", "diagnostics_topic": "d", "diagnostics_interval_s": "0"},
     "kafka.diagnostics_interval_s"),
])
def test_bad_settings_name_the_key(values: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=f"^config key {key}"):
        kafka(**values)


def test_sasl_scram_pass_through_never_shows_the_password() -> None:
    s = kafka(bootstrap="a:1", topic="t", security_protocol="sasl_plaintext", sasl_mechanism="scram-sha-512",
              sasl_username="svc", sasl_password="s3cret")
    assert s.security.client_options() == {
        "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "svc", "sasl_plain_password": "s3cret"}
    assert "s3cret" not in repr(s) and "s3cret" not in repr(s.security)


def test_ssl_builds_a_context_from_the_ca_file(tmp_path: Any) -> None:
    # The system CA bundle stands in for a private CA file: loading it must work as any PEM does.
    cafile = ssl.get_default_verify_paths().cafile or ssl.get_default_verify_paths().openssl_cafile
    s = kafka(bootstrap="a:1", topic="t", security_protocol="SSL", ssl_cafile=cafile, ssl_check_hostname="false")
    options = s.security.client_options()
    assert options["security_protocol"] == "SSL"
    context = options["ssl_context"]
    assert isinstance(context, ssl.SSLContext) and context.check_hostname is False
    assert context.cert_store_stats()["x509_ca"] > 0
    with pytest.raises(ConfigError, match="^config key kafka.ssl_cafile .from env CTXPREC_KAFKA_SSL_CAFILE.: file not found"):
        kafka(bootstrap="a:1", topic="t", security_protocol="SSL", ssl_cafile=str(tmp_path / "nope.pem"))
