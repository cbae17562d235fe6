"""`ctxprec serve` configuration: file < env < flags, and bad values refused with the key named."""
from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pytest
from ctxprec.collector import config as config_module
from ctxprec.collector import serve as serve_module
from ctxprec.collector.config import ConfigError

from tests.collector.rag_app import running, serve_config


def parse(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    config_module.add_arguments(parser)
    return parser.parse_args(list(flags))


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "ctxprec.yaml"
    path.write_text(text)
    return str(path)


def test_defaults_are_loopback_listeners_and_documented_values() -> None:
    c = config_module.load(parse(), environ={})
    assert c.receivers.otlp_grpc == ("127.0.0.1", 4317) and c.receivers.otlp_http == ("127.0.0.1", 4318)
    assert c.metrics.listen == ("127.0.0.1", 9464)
    assert c.judge.judge_config().model == "local" and c.judge.defaulted
    assert c.write_back == "span" and c.export.forward_to is None and not c.kafka.enabled
    assert c.scoring.max_rss_mb == 512 and c.export.threshold == 0.5
    assert c.assembly.quiet_period_s == 2.0 and c.assembly.max_wait_s == 30.0
    assert c.export.max_queue_bytes == 64 * 1024 * 1024


def test_forward_queue_bound_from_file_env_and_flag(tmp_path: Path) -> None:
    path = write(tmp_path, "export:\n  max_queue_mb: 8\n")
    assert config_module.load(parse("--config", path), environ={}).export.max_queue_bytes == 8 * 2**20
    c = config_module.load(parse("--config", path), environ={"CTXPREC_FORWARD_MAX_QUEUE_MB": "0.5"})
    assert c.export.max_queue_bytes == 2**19
    c = config_module.load(parse("--config", path, "--forward-max-queue-mb", "0.25"), environ={})
    assert c.export.max_queue_bytes == 2**18


def test_flags_beat_env_and_env_beats_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "sampling:\n  default_rate: 0.1\njudge:\n  model: openai/gpt-4o-mini\nscoring:\n  workers: 3\n")
    env = {"CTXPREC_SAMPLE_RATE": "0.2", "CTXPREC_WORKERS": "5"}
    c = config_module.load(parse("--config", path, "--sample-rate", "0.3"), environ=env)
    assert (c.sampling.default_rate, c.scoring.workers, c.judge.model, c.judge.defaulted) == (
        0.3, 5, "openai/gpt-4o-mini", False)
    c = config_module.load(parse("--config", path), environ=env)
    assert (c.sampling.default_rate, c.scoring.workers) == (0.2, 5)
    c = config_module.load(parse("--config", path), environ={})
    assert (c.sampling.default_rate, c.scoring.workers) == (0.1, 3)
    c = config_module.load(parse(), environ={"CTXPREC_CONFIG": path})  # the file itself from the env
    assert c.sampling.default_rate == 0.1


def test_rules_drift_conventions_and_kafka_from_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, """
sampling:
  default_rate: 0.05
  rules:
    - {service: checkout, attributes: {retriever: kb-v2, tier: 1}, rate: 1.0}
    - {service: "internal-*", rate: 0}
drift: {warmup: 20, threshold: 6}
conventions:
  order: [genai, openinference]
  mapping: {query: app.question, contexts: "app.docs$[*].text"}
kafka:
  bootstrap: 127.0.0.1:9092
  topic: rag_events
  format: rag_event
""")
    c = config_module.load(parse("--config", path), environ={})
    assert [r.rate for r in c.sampling.rules] == [1.0, 0.0]
    assert c.sampling.rules[0].attributes == {"retriever": "kb-v2", "tier": "1"}
    assert c.drift.warmup == 20 and c.drift.threshold == 6.0
    assert c.conventions.order == ("genai", "openinference") and c.conventions.mapping is not None
    assert c.kafka.enabled and c.kafka.topic == "rag_events" and c.kafka.format == "rag_event"
    assert c.write_back == "evaluator"  # the default for Kafka input


@pytest.mark.parametrize(("text", "flags", "env", "message"), [
    ("sampling:\n  rules:\n    - {rate: 0.1}\n    - {rate: 0.2}\n    - {service: x, rate: 1.5}\n", (), {},
     "config key sampling.rules[2].rate: must be between 0 and 1, got 1.5"),
    ("", ("--sample-rate", "2"), {}, "config key sampling.default_rate (from --sample-rate): must be between 0 and 1"),
    ("", (), {"CTXPREC_WORKERS": "many"}, "config key scoring.workers (from env CTXPREC_WORKERS): must be an integer"),
    ("samplng:\n  default_rate: 0.5\n", (), {}, "config key samplng: unknown key; did you mean sampling?"),
    ("sample_rate: 0.5\n", (), {}, "config key sample_rate: unknown key; did you mean sampling.default_rate?"),
    ("sampling:\n  rules: {rate: 1}\n", (), {}, "config key sampling.rules: must be a list"),
    ("sampling:\n  rules:\n    - {rate: 1, servce: x}\n", (), {}, "config key sampling.rules[0].servce: unknown key"),
    ("", ("--otlp-grpc", "localhost"), {}, "config key receivers.otlp_grpc (from --otlp-grpc): must be HOST:PORT"),
    ("", ("--forward-to", "ftp://x:1"), {}, "config key export.forward_to (from --forward-to): must be a URL"),
    ("", ("--write-back", "inline"), {}, "config key export.write_back (from --write-back): must be one of span, evaluator"),
    ("", ("--kafka-bootstrap", "127.0.0.1:9092"), {}, "config key kafka.topic: required"),
    ("drift:\n  slack: -1\n", (), {}, "config key drift.slack: must be a number > 0"),
    ("", ("--forward-max-queue-mb", "0"), {},
     "config key export.max_queue_mb (from --forward-max-queue-mb): must be a number > 0"),
    ("conventions:\n  order: [openinference, zipkin]\n", (), {}, "config key conventions.order: unknown convention 'zipkin'"),
    ("assembly:\n  quiet_period_s: 5\n  max_wait_s: 1\n", (), {}, "config key assembly.max_wait_s: must be >="),
    ("judge:\n  reason_mode: poem\n", (), {}, "config key judge.reason_mode: must be one of template, llm"),
    ("", ("--judge-redact-pii", "maybe"), {}, "config key judge.redact_pii (from --judge-redact-pii): must be true or false"),
    ("sampling: [1, 2\n", (), {}, "not valid YAML at line"),
    ("- just\n- a list\n", (), {}, "the top level must be a mapping"),
])
def test_bad_config_names_the_key(tmp_path: Path, text: str, flags: tuple[str, ...], env: dict[str, str],
                                  message: str) -> None:
    args = parse("--config", write(tmp_path, text), *flags)
    with pytest.raises(ConfigError) as info:
        config_module.load(args, environ=env)
    assert message in str(info.value)


def test_run_exits_2_with_one_line_and_no_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = parse("--config", write(tmp_path, "sampling:\n  rules:\n    - {rate: 7}\n"))
    assert serve_module.run(args) == 2
    err = capsys.readouterr().err
    assert err.strip() == "ctxprec serve: config key sampling.rules[0].rate: must be between 0 and 1, got 7"
    assert serve_module.run(parse("--config", str(tmp_path / "missing.yaml"))) == 2
    assert "cannot read it" in capsys.readouterr().err


def test_listeners_can_be_switched_off() -> None:
    c = config_module.load(parse("--otlp-grpc", "off", "--metrics", "none"), environ={})
    assert c.receivers.otlp_grpc is None and c.metrics.listen is None and c.receivers.otlp_http == ("127.0.0.1", 4318)


async def test_no_judge_configured_warns_how_to_set_one(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    config = serve_config()
    assert config.judge.defaulted
    async with running(config) as pipeline:
        assert pipeline.engine.annotator_kind == "CODE"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("local judge" in w and "--judge-model" in w and "CTXPREC_JUDGE_MODEL" in w for w in warnings)


def test_redaction_switch_reaches_the_judge_and_secrets_stay_out_of_repr(tmp_path: Path) -> None:
    assert config_module.load(parse(), environ={}).judge.redact_pii is False
    c = config_module.load(parse("--config", write(tmp_path, "judge:\n  redact_pii: true\n")), environ={})
    assert c.judge.redact_pii is True
    c = config_module.load(parse("--judge-redact-pii", "off", "--receiver-auth-token", "tok-SECRET-42",
                                 "--judge-api-key", "sk-SECRET-43"), environ={"CTXPREC_JUDGE_REDACT_PII": "yes"})
    assert c.judge.redact_pii is False  # the flag wins over the env
    assert c.receivers.auth_token == "tok-SECRET-42"
    assert "tok-SECRET-42" not in repr(c) and "sk-SECRET-43" not in repr(c)


def test_config_reference_is_generated_from_the_code() -> None:
    from ctxprec.collector import config_docs

    assert config_docs.PATH.read_text(encoding="utf-8") == config_docs.render(), (
        "docs/CONFIG.md is out of date: run python -m ctxprec.collector.config_docs")
    text = config_docs.render()
    for setting in config_module.SETTINGS:  # every key, flag and variable is on the page
        assert f"`{setting.key}`" in text
        if setting.flag:
            assert f"`{setting.flag}`" in text and f"`{setting.env}`" in text
