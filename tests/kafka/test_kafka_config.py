"""Kafka settings: refused at start with a message that names the key; security settings reach
aiokafka's client options."""
from __future__ import annotations

import ssl

import pytest

from ctxprec.collector.receivers.kafka_config import KafkaConfigError, from_mapping


def test_kafka_is_off_without_bootstrap() -> None:
    assert from_mapping({}) is None
    assert from_mapping({"kafka_group": "g"}) is None


def test_defaults_and_dead_letter_topic() -> None:
    s = from_mapping({"kafka_bootstrap": "a:9092, b:9092", "kafka_topic": "otlp_spans"})
    assert s is not None
    assert s.bootstrap_servers == ["a:9092", "b:9092"]
    assert s.format == "otlp_proto" and s.group == "ctxprec"
    assert s.dead_letter_topic == "otlp_spans.dlq"
    assert from_mapping({"kafka_bootstrap": "a:1", "kafka_topic": "t", "kafka_dlq_topic": ""}).dead_letter_topic is None
    assert s.security.client_options() == {"security_protocol": "PLAINTEXT"}


@pytest.mark.parametrize("values, key", [
    ({"kafka_topic": "t"}, "kafka_bootstrap"),
    ({"kafka_bootstrap": "a:1"}, "kafka_topic"),
    ({"kafka_bootstrap": "nohostport", "kafka_topic": "t"}, "kafka_bootstrap"),
    ({"kafka_bootstrap": "a:1", "kafka_topic": "t", "kafka_format": "avro"}, "kafka_format"),
    ({"kafka_bootstrap": "a:1", "kafka_topic": "t", "kafka_dlq_topic": "t"}, "kafka_dlq_topic"),
    ({"kafka_bootstrap": "a:1", "kafka_topic": "t", "kafka_max_undone_per_partition": "0"},
     "kafka_max_undone_per_partition"),
    ({"kafka_bootstrap": "a:1", "kafka_topic": "t", "kafka_commit_interval_s": "soon"}, "kafka_commit_interval_s"),
    ({"kafka_bootstrap": "a:1", "kafka_topic": "t", "kafka_security_protocol": "TLS"}, "kafka_security_protocol"),
    ({"kafka_bootstrap": "a:1", "kafka_topic": "t", "kafka_security_protocol": "SASL_SSL"},
     "kafka_sasl_username"),
    ({"kafka_bootstrap": "a:1", "kafka_topic": "t", "kafka_security_protocol": "sasl_plaintext",
      "kafka_sasl_mechanism": "GSSAPI", "kafka_sasl_username": "u", "kafka_sasl_password": "p"},
     "kafka_sasl_mechanism"),
    ({"kafka_bootstrap": "a:1", "kafka_topic": "t", "kafka_ssl_keyfile": "k.pem"}, "kafka_ssl_keyfile"),
    ({"kafka_bootstrap": "a:1", "kafka_topic": "t", "kafka_ssl_certfile": "/no/such/cert.pem"}, "kafka_ssl_certfile"),
    ({"kafka_bootstrap": "a:1", "kafka_topic": "t", "kafka_session_timeout_ms": "1000",
      "kafka_heartbeat_interval_ms": "1000"}, "kafka_heartbeat_interval_ms"),
])
def test_bad_settings_name_the_key(values: dict, key: str) -> None:
    with pytest.raises(KafkaConfigError, match=f"^{key}"):
        from_mapping(values)


def test_sasl_scram_pass_through_never_shows_the_password() -> None:
    s = from_mapping({"kafka_bootstrap": "a:1", "kafka_topic": "t", "kafka_security_protocol": "sasl_plaintext",
                      "kafka_sasl_mechanism": "scram-sha-512", "kafka_sasl_username": "svc",
                      "kafka_sasl_password": "s3cret"})
    assert s.security.client_options() == {
        "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "svc", "sasl_plain_password": "s3cret"}
    assert "s3cret" not in repr(s)


def test_ssl_builds_a_context_from_the_ca_file(tmp_path) -> None:
    # The system CA bundle stands in for a private CA file: loading it must work as any PEM does.
    cafile = ssl.get_default_verify_paths().cafile or ssl.get_default_verify_paths().openssl_cafile
    s = from_mapping({"kafka_bootstrap": "a:1", "kafka_topic": "t", "kafka_security_protocol": "SSL",
                      "kafka_ssl_cafile": cafile, "kafka_ssl_check_hostname": "false"})
    options = s.security.client_options()
    assert options["security_protocol"] == "SSL"
    context = options["ssl_context"]
    assert isinstance(context, ssl.SSLContext) and context.check_hostname is False
    assert context.cert_store_stats()["x509_ca"] > 0
    with pytest.raises(KafkaConfigError, match="^kafka_ssl_cafile: file not found"):
        from_mapping({"kafka_bootstrap": "a:1", "kafka_topic": "t", "kafka_security_protocol": "SSL",
                      "kafka_ssl_cafile": str(tmp_path / "nope.pem")})
