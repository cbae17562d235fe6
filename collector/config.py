"""`ServeConfig`: what `ctxprec serve` runs with, from the YAML file (`--config`), `CTXPREC_*`
environment variables and flags; flags win over the environment, the environment over the file.

Every setting is an `Option` with a dotted key (its place in the YAML file), a flag and a
validator. A bad value is refused before anything starts, with a message that names the key and
where the value came from, e.g.

    config key sampling.rules[2].rate: must be between 0 and 1, got 1.5
    config key sampling.default_rate (from --sample-rate): must be between 0 and 1, got '2'
"""
from __future__ import annotations

import argparse
import math
import os
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Mapping

import yaml

from ctxprec.collector.assembly.conventions import ALL_CONVENTIONS, AttributeMapping, ConventionConfig
from ctxprec.collector.metrics.drift import DriftSettings
from ctxprec.collector.receivers import kafka_config
from ctxprec.collector.receivers.kafka_config import KafkaConfigError, KafkaSettings
from ctxprec.collector.sampling.sampler import SamplingRule
from ctxprec.scorer.config import JudgeConfig

ENV_PREFIX = "CTXPREC_"
WRITE_BACK_MODES = ("span", "evaluator")
OFF = ("", "off", "none", "disabled", "false", "0")


class ConfigError(ValueError):
    """A setting that cannot work; the message names the key."""


# -- converters: raw value (YAML scalar or text) -> value, or ValueError with what is wrong -------

def parse_number(raw: Any, *, integer: bool = False) -> float | int:
    if isinstance(raw, bool):
        raise ValueError(f"must be a number, got {raw!r}")
    try:
        value = int(raw) if integer and not isinstance(raw, float) else float(raw)
    except (TypeError, ValueError):
        raise ValueError(f"must be {'an integer' if integer else 'a number'}, got {raw!r}") from None
    if integer and isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"must be an integer, got {raw!r}")
        value = int(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"must be a finite number, got {raw!r}")
    return value


def rate(raw: Any) -> float:
    value = float(parse_number(raw))
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"must be between 0 and 1, got {raw!r}")
    return value


def positive(raw: Any) -> float:
    value = float(parse_number(raw))
    if value <= 0:
        raise ValueError(f"must be a number > 0, got {raw!r}")
    return value


def non_negative(raw: Any) -> float:
    value = float(parse_number(raw))
    if value < 0:
        raise ValueError(f"must be a number >= 0, got {raw!r}")
    return value


def optional_positive(raw: Any) -> float | None:
    if raw is None or (isinstance(raw, str) and raw.strip().lower() in OFF):
        return None
    return positive(raw)


def count(raw: Any) -> int:
    value = int(parse_number(raw, integer=True))
    if value < 1:
        raise ValueError(f"must be an integer >= 1, got {raw!r}")
    return value


def count0(raw: Any) -> int:
    value = int(parse_number(raw, integer=True))
    if value < 0:
        raise ValueError(f"must be an integer >= 0, got {raw!r}")
    return value


def boolean(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    word = str(raw).strip().lower()
    if word in ("true", "yes", "on", "1"):
        return True
    if word in ("false", "no", "off", "0"):
        return False
    raise ValueError(f"must be true or false, got {raw!r}")


def text(raw: Any) -> str:
    if isinstance(raw, (dict, list)):
        raise ValueError(f"must be text, got a {type(raw).__name__}")
    return str(raw)


def optional_text(raw: Any) -> str | None:
    if raw is None:
        return None
    value = text(raw).strip()
    return value or None


def listen(raw: Any) -> tuple[str, int] | None:
    """`host:port` (`[v6]:port` too); `off` disables the listener."""
    if raw is None or text(raw).strip().lower() in OFF:
        return None
    value = text(raw).strip()
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"must be HOST:PORT (or off), got {raw!r}")
    number = int(port)
    if number > 65535:
        raise ValueError(f"port must be 0..65535, got {raw!r}")
    host = host.strip("[]") or "0.0.0.0"
    return host, number


def forward_url(raw: Any) -> str | None:
    value = optional_text(raw)
    if value is None or value.lower() in OFF:
        return None
    from urllib.parse import urlsplit

    parts = urlsplit(value)
    if parts.scheme not in ("http", "https", "grpc", "grpcs") or not parts.hostname:
        raise ValueError(f"must be a URL like http://host:4318, https://..., grpc://host:4317 or grpcs://..., got {raw!r}")
    return value


def choice(*choices: str, optional: bool = False) -> Callable[[Any], str | None]:
    def convert(raw: Any) -> str | None:
        if optional and (raw is None or text(raw).strip().lower() in ("", "auto")):
            return None
        value = text(raw).strip().lower()
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}, got {raw!r}")
        return value
    convert.metavar = "|".join(choices)  # type: ignore[attr-defined]  # read by --help
    return convert


def readable_file(raw: Any) -> str | None:
    value = optional_text(raw)
    if value is not None and not os.path.isfile(value):
        raise ValueError(f"file not found: {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Option:
    key: str  # dotted place in the YAML file
    flag: str | None
    convert: Callable[[Any], Any]
    default: Any
    help: str

    @property
    def env(self) -> str | None:
        return ENV_PREFIX + self.flag.lstrip("-").replace("-", "_").upper() if self.flag else None


OPTIONS: tuple[Option, ...] = (
    # receivers
    Option("receivers.otlp_grpc", "--otlp-grpc", listen, "0.0.0.0:4317", "OTLP/gRPC listen address, or off"),
    Option("receivers.otlp_http", "--otlp-http", listen, "0.0.0.0:4318", "OTLP/HTTP listen address (/v1/traces), or off"),
    Option("receivers.auth_token", "--receiver-auth-token", optional_text, None,
           "require 'Authorization: Bearer TOKEN' on OTLP requests"),
    Option("receivers.tls_cert", "--receiver-tls-cert", readable_file, None, "TLS certificate (PEM) for the OTLP receivers"),
    Option("receivers.tls_key", "--receiver-tls-key", readable_file, None, "TLS private key (PEM) for the OTLP receivers"),
    Option("receivers.tls_client_ca", "--receiver-tls-client-ca", readable_file, None,
           "CA (PEM) that OTLP clients' certificates must be signed by (mTLS); needs --receiver-tls-cert"),
    Option("receivers.max_request_mb", "--max-request-mb", positive, 16.0, "largest OTLP request accepted, in MB"),
    # metrics
    Option("metrics.listen", "--metrics", listen, "0.0.0.0:9464", "Prometheus /metrics, /healthz, /readyz address"),
    Option("metrics.max_services", "--max-services", count, 50, "distinct service label values before 'other'"),
    Option("metrics.max_retrievers", "--max-retrievers", count, 50, "distinct retriever label values before 'other'"),
    # write-back
    Option("export.forward_to", "--forward-to", forward_url, None, "downstream OTLP endpoint (http[s]:// or grpc[s]://)"),
    Option("export.write_back", "--write-back", choice(*WRITE_BACK_MODES, optional=True), None,
           "span (in-line) or evaluator (out-of-band); default: span for OTLP input, evaluator for Kafka"),
    Option("export.threshold", "--threshold", rate, 0.5, "score label is 'high' at or above this fraction of scale"),
    Option("export.hold_deadline_s", "--hold-deadline", positive, 60.0,
           "span mode: longest a sampled retrieval span is held waiting for its score, seconds"),
    Option("export.ca_file", "--forward-ca-file", readable_file, None, "CA bundle to trust for https:// or grpcs://"),
    Option("export.cert_file", "--forward-cert-file", readable_file, None, "client certificate for mTLS to --forward-to"),
    Option("export.key_file", "--forward-key-file", readable_file, None, "client key for mTLS to --forward-to"),
    Option("export.evaluation_logs", "--evaluation-logs", choice("auto", "on", "off"), "auto",
           "evaluator mode: also send a gen_ai.evaluation.result log record per score; auto stops (one "
           "WARNING) when --forward-to does not take OTLP logs"),
    Option("export.max_queue_mb", "--forward-max-queue-mb", positive, 64.0,
           "span mode: spans queued for --forward-to at most, MB; beyond it new spans are dropped and counted"),
    # judge
    Option("judge.model", "--judge-model", optional_text, None, "litellm model string, or 'local' (the default)"),
    Option("judge.api_base", "--judge-api-base", optional_text, None, "OpenAI-compatible base URL of the judge"),
    Option("judge.api_key", "--judge-api-key", optional_text, None, "judge API key (else the provider's env variable)"),
    Option("judge.scale", "--scale", non_negative, 1.0, "score scale"),
    Option("judge.reason_mode", "--judge-reason-mode", choice("template", "llm"), "template", "template or llm"),
    Option("judge.concurrency", "--judge-concurrency", count, 16, "judge requests in flight at most"),
    Option("judge.requests_per_minute", "--judge-rpm", optional_positive, None, "judge requests per minute"),
    Option("judge.tokens_per_minute", "--judge-tpm", optional_positive, None, "judge tokens per minute"),
    Option("judge.timeout_s", "--judge-timeout", positive, 30.0, "judge request timeout, seconds"),
    Option("judge.max_retries", "--judge-max-retries", count0, 4, "retries per judge request"),
    Option("judge.max_contexts_per_call", "--judge-max-contexts-per-call", count, 20, "contexts judged per call"),
    Option("judge.max_context_chars", "--judge-max-context-chars", count, 4000, "characters of a context sent"),
    Option("judge.cache_size", "--judge-cache-size", count0, 10_000, "verdict cache entries (0 disables)"),
    Option("judge.redact_pii", "--judge-redact-pii", boolean, False,
           "replace e-mail addresses, phone and card numbers with placeholders before text reaches the judge"),
    Option("judge.breaker_threshold", None, count, 10, ""),
    Option("judge.breaker_cooldown_s", None, non_negative, 30.0, ""),
    Option("judge.temperature", None, non_negative, 0.0, ""),
    Option("judge.transport", None, choice("auto", "direct", "litellm"), "auto", ""),
    # sampling and budgets
    Option("sampling.default_rate", "--sample-rate", rate, 1.0, "fraction of traces scored when no rule matches"),
    Option("sampling.max_scores_per_minute", "--max-scores-per-minute", optional_positive, None,
           "throttle: scores per minute at most"),
    Option("sampling.daily_budget_usd", "--daily-budget-usd", optional_positive, None, "judge spend per UTC day at most"),
    Option("sampling.duplicate_window_s", None, positive, 600.0, ""),
    # scoring
    Option("scoring.queue_size", "--queue-size", count, 1000, "retrievals waiting for a worker; more are shed"),
    Option("scoring.workers", "--workers", count, 8, "concurrent scorings"),
    Option("scoring.max_rss_mb", "--max-rss-mb", optional_positive, 512.0,
           "shed new work while RSS (sidecar and scoring process) is above this"),
    Option("scoring.process", "--scoring-process", choice("auto", "on", "off"), "auto",
           "judge in a separate scoring process (a second core); auto: on for Kafka input with 2+ CPUs"),
    Option("scoring.shutdown_timeout_s", "--shutdown-timeout", non_negative, 10.0,
           "on SIGTERM, seconds to finish scoring in flight"),
    # assembly
    Option("assembly.quiet_period_s", "--quiet-period", non_negative, 2.0, "trace is ready this long after its root span"),
    Option("assembly.max_wait_s", "--max-wait", non_negative, 30.0, "trace is ready at most this long after its first span"),
    Option("assembly.max_traces", "--max-buffered-traces", count, 10_000, "traces being assembled at most"),
    Option("assembly.max_buffer_mb", "--max-buffer-mb", positive, 128.0, "bytes of traces being assembled at most, MB"),
    # conventions (YAML has more: order, mapping)
    Option("conventions.retriever_attribute", None, optional_text, None, ""),
    Option("conventions.expected_output_attribute", "--expected-output-attribute", optional_text, None,
           "span attribute holding the reference answer"),
    Option("conventions.max_contexts", None, count, 100, ""),
    Option("log_level", "--log-level", choice("debug", "info", "warning", "error"), "info", "log level"),
) + tuple(
    Option("kafka." + key.removeprefix("kafka_"), "--" + key.replace("_", "-"), lambda raw: raw, None,
           "Kafka: " + key.removeprefix("kafka_").replace("_", " "))
    for key in kafka_config.KEYS
)
_BY_KEY = {o.key: o for o in OPTIONS}
# YAML keys that hold structures rather than one value.
_STRUCTURED = {"sampling.rules", "conventions.order", "conventions.mapping", "drift"}


@dataclass(slots=True)
class ServeConfig:
    otlp_grpc: tuple[str, int] | None
    otlp_http: tuple[str, int] | None
    receiver_auth_token: str | None = field(repr=False)  # a secret: kept out of repr and logs
    receiver_tls_cert: str | None
    receiver_tls_key: str | None
    max_request_bytes: int
    metrics_listen: tuple[str, int] | None
    max_services: int
    max_retrievers: int
    forward_to: str | None
    write_back: str  # "span" | "evaluator"
    threshold: float
    hold_deadline_s: float
    forward_ca_file: str | None
    forward_cert_file: str | None
    forward_key_file: str | None
    judge: JudgeConfig
    judge_defaulted: bool  # no judge configured: the local judge stands in
    scale: float
    sample_rate: float
    sampling_rules: list[SamplingRule]
    max_scores_per_minute: float | None
    daily_budget_usd: float | None
    duplicate_window_s: float
    queue_size: int
    workers: int
    max_rss_mb: float | None
    shutdown_timeout_s: float
    quiet_period_s: float
    max_wait_s: float
    max_traces: int
    max_buffer_bytes: int
    conventions: ConventionConfig
    drift: DriftSettings
    kafka: KafkaSettings | None
    log_level: str = "info"
    evaluation_logs: str = "auto"  # evaluator mode: auto | on | off
    receiver_tls_client_ca: str | None = None  # set: OTLP clients must present a certificate it signed
    forward_max_queue_bytes: int = 64 * 1024 * 1024  # span mode: the forwarder's queue bound
    scoring_process: str = "auto"  # "auto" | "on" | "off": see collector/scoring/placement.py
    sources: dict[str, str] = field(default_factory=dict)  # key -> "default" | "file" | "env" | "flag"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=None, help="YAML config file (flags > CTXPREC_* env > file)")
    for option in OPTIONS:
        if option.flag is None:
            continue
        default = f" (default {option.default})" if option.default is not None else ""
        parser.add_argument(option.flag, dest=_dest(option), default=None, type=str, metavar=_metavar(option),
                            help=f"{option.help}{default}")  # the CLI adds "[env CTXPREC_...]"


def _metavar(option: Option) -> str:
    named = {listen: "HOST:PORT", rate: "R", forward_url: "URL", readable_file: "FILE", count: "N", count0: "N",
             boolean: "true|false", positive: "NUM", non_negative: "NUM", optional_positive: "NUM",
             optional_text: "TEXT", text: "TEXT"}
    if option.convert in named:
        return named[option.convert]
    # Kafka options pass through unconverted (kafka_config validates them); name them by their tail.
    return getattr(option.convert, "metavar", None) or (option.flag or "VALUE").split("-")[-1].upper()


def _dest(option: Option) -> str:
    assert option.flag is not None
    return option.flag.lstrip("-").replace("-", "_")


def _flatten(data: Mapping[str, Any], prefix: str, out: dict[str, Any]) -> None:
    for key, value in data.items():
        if not isinstance(key, str):
            raise ConfigError(f"config key {prefix}{key!r}: keys must be text")
        dotted = prefix + key
        if dotted in _STRUCTURED or dotted.startswith("drift."):
            out[dotted] = value
        elif isinstance(value, dict) and dotted not in _BY_KEY:
            _flatten(value, dotted + ".", out)
        else:
            out[dotted] = value


def read_file(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as exc:
        raise ConfigError(f"config file {path}: cannot read it ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"config file {path}: not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: the top level must be a mapping of keys, got {type(data).__name__}")
    flat: dict[str, Any] = {}
    _flatten(data, "", flat)
    known = set(_BY_KEY) | _STRUCTURED
    for key in flat:
        if key not in known and not key.startswith("drift."):
            raise ConfigError(f"config key {key}: unknown key (check the spelling; see `ctxprec serve --help`)")
    return flat


def load(args: argparse.Namespace | None = None, *, environ: Mapping[str, str] | None = None,
         file_values: Mapping[str, Any] | None = None) -> ServeConfig:
    """Merge file, environment and flags, then validate. Raises ConfigError."""
    env = os.environ if environ is None else environ
    config_path = getattr(args, "config", None) if args is not None else None
    if config_path is None:
        config_path = env.get(ENV_PREFIX + "CONFIG") or None
    flat: dict[str, Any] = dict(file_values or {})
    if config_path:
        flat.update(read_file(config_path))
    raw: dict[str, tuple[Any, str]] = {}
    for option in OPTIONS:
        value: Any = None
        source = "default"
        if option.key in flat:
            value, source = flat[option.key], "file"
        if option.env and option.env in env:
            value, source = env[option.env], f"env {option.env}"
        given = getattr(args, _dest(option), None) if (args is not None and option.flag) else None
        if given is not None:
            # The CLI may have turned CTXPREC_* into flag defaults: name the variable then.
            from_env = option.env is not None and env.get(option.env) == given
            value, source = given, (f"env {option.env}" if from_env else f"{option.flag}")
        raw[option.key] = (value, source)
    return _build(raw, flat)


def _value(raw: Mapping[str, tuple[Any, str]], key: str) -> Any:
    option = _BY_KEY[key]
    value, source = raw[key]
    if source == "default":
        return option.default if option.default is None else option.convert(option.default)
    try:
        return option.convert(value)
    except ValueError as exc:
        where = "" if source == "file" else f" (from {source})"
        raise ConfigError(f"config key {key}{where}: {exc}") from None


def _build(raw: Mapping[str, tuple[Any, str]], flat: Mapping[str, Any]) -> ServeConfig:
    v = lambda key: _value(raw, key)  # noqa: E731 - local shorthand
    model = v("judge.model")
    judge_defaulted = model is None
    try:
        judge = JudgeConfig(
            model=model or "local", api_base=v("judge.api_base"), api_key=v("judge.api_key"),
            reason_mode=v("judge.reason_mode"), max_contexts_per_call=v("judge.max_contexts_per_call"),
            max_context_chars=v("judge.max_context_chars"), cache_size=v("judge.cache_size"),
            concurrency=v("judge.concurrency"), requests_per_minute=v("judge.requests_per_minute"),
            tokens_per_minute=v("judge.tokens_per_minute"), timeout_s=v("judge.timeout_s"),
            max_retries=v("judge.max_retries"), breaker_threshold=v("judge.breaker_threshold"),
            breaker_cooldown_s=v("judge.breaker_cooldown_s"), temperature=v("judge.temperature"),
            transport=v("judge.transport"), redact_pii=v("judge.redact_pii"))
    except ValueError as exc:
        raise ConfigError(f"config key judge.{exc}") from None

    kafka = _kafka(raw)
    forward_to = v("export.forward_to")
    write_back = v("export.write_back")
    if write_back is None:
        write_back = "evaluator" if kafka is not None else "span"
    if (v("receivers.tls_cert") is None) != (v("receivers.tls_key") is None):
        raise ConfigError("config key receivers.tls_cert / receivers.tls_key: give both or neither")
    if v("receivers.tls_client_ca") is not None and v("receivers.tls_cert") is None:
        raise ConfigError("config key receivers.tls_client_ca: needs receivers.tls_cert and receivers.tls_key "
                          "(client certificates are checked during the TLS handshake)")
    if (v("export.cert_file") is None) != (v("export.key_file") is None):
        raise ConfigError("config key export.cert_file / export.key_file: give both or neither")
    if v("assembly.max_wait_s") < v("assembly.quiet_period_s"):
        raise ConfigError(
            f"config key assembly.max_wait_s: must be >= assembly.quiet_period_s ({v('assembly.quiet_period_s')}), "
            f"got {v('assembly.max_wait_s')}")

    return ServeConfig(
        otlp_grpc=v("receivers.otlp_grpc"), otlp_http=v("receivers.otlp_http"),
        receiver_auth_token=v("receivers.auth_token"), receiver_tls_cert=v("receivers.tls_cert"),
        receiver_tls_key=v("receivers.tls_key"), max_request_bytes=int(v("receivers.max_request_mb") * 1024 * 1024),
        metrics_listen=v("metrics.listen"), max_services=v("metrics.max_services"),
        max_retrievers=v("metrics.max_retrievers"), forward_to=forward_to, write_back=write_back,
        threshold=v("export.threshold"), hold_deadline_s=v("export.hold_deadline_s"),
        forward_ca_file=v("export.ca_file"), forward_cert_file=v("export.cert_file"),
        forward_key_file=v("export.key_file"), judge=judge, judge_defaulted=judge_defaulted,
        scale=v("judge.scale"), sample_rate=v("sampling.default_rate"), sampling_rules=_rules(flat),
        max_scores_per_minute=v("sampling.max_scores_per_minute"), daily_budget_usd=v("sampling.daily_budget_usd"),
        duplicate_window_s=v("sampling.duplicate_window_s"), queue_size=v("scoring.queue_size"),
        workers=v("scoring.workers"), max_rss_mb=v("scoring.max_rss_mb"),
        shutdown_timeout_s=v("scoring.shutdown_timeout_s"), quiet_period_s=v("assembly.quiet_period_s"),
        max_wait_s=v("assembly.max_wait_s"), max_traces=v("assembly.max_traces"),
        max_buffer_bytes=int(v("assembly.max_buffer_mb") * 1024 * 1024),
        conventions=_conventions(raw, flat), drift=_drift(flat), kafka=kafka, log_level=v("log_level"),
        receiver_tls_client_ca=v("receivers.tls_client_ca"),
        forward_max_queue_bytes=max(1, int(v("export.max_queue_mb") * 1024 * 1024)),
        scoring_process=v("scoring.process"), evaluation_logs=v("export.evaluation_logs"), sources={key: source for key, (_, source) in raw.items()})


def _kafka(raw: Mapping[str, tuple[Any, str]]) -> KafkaSettings | None:
    values = {"kafka_" + key.removeprefix("kafka."): value for key, (value, _) in raw.items()
              if key.startswith("kafka.")}
    try:
        return kafka_config.from_mapping(values)
    except KafkaConfigError as exc:
        raise ConfigError(f"config key kafka.{str(exc).removeprefix('kafka_')}") from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"config key kafka: {exc}") from None


def _rules(flat: Mapping[str, Any]) -> list[SamplingRule]:
    rules_raw = flat.get("sampling.rules")
    if rules_raw is None:
        return []
    if not isinstance(rules_raw, list):
        raise ConfigError(f"config key sampling.rules: must be a list of rules, got {type(rules_raw).__name__}")
    rules: list[SamplingRule] = []
    for i, item in enumerate(rules_raw):
        key = f"sampling.rules[{i}]"
        if not isinstance(item, dict):
            raise ConfigError(f"config key {key}: must be a mapping with rate, service, attributes")
        unknown = set(item) - {"rate", "service", "attributes"}
        if unknown:
            raise ConfigError(f"config key {key}.{sorted(unknown)[0]}: unknown key (a rule has rate, service, attributes)")
        if "rate" not in item:
            raise ConfigError(f"config key {key}.rate: required")
        try:
            rule_rate = rate(item["rate"])
        except ValueError as exc:
            raise ConfigError(f"config key {key}.rate: {exc}") from None
        service = item.get("service")
        if service is not None and (not isinstance(service, str) or not service):
            raise ConfigError(f"config key {key}.service: must be a service name or glob, got {service!r}")
        attributes = item.get("attributes") or {}
        if not isinstance(attributes, dict) or any(isinstance(x, (dict, list)) for x in attributes.values()):
            raise ConfigError(f"config key {key}.attributes: must map attribute keys to plain values")
        rules.append(SamplingRule(rate=rule_rate, service=service,
                                  attributes={str(k): _plain(x) for k, x in attributes.items()}))
    return rules


def _plain(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _conventions(raw: Mapping[str, tuple[Any, str]], flat: Mapping[str, Any]) -> ConventionConfig:
    v = lambda key: _value(raw, key)  # noqa: E731
    order_raw = flat.get("conventions.order")
    order = tuple(ALL_CONVENTIONS)
    if order_raw is not None:
        if not isinstance(order_raw, list) or not all(isinstance(x, str) for x in order_raw):
            raise ConfigError(f"config key conventions.order: must be a list of {', '.join(ALL_CONVENTIONS)}")
        unknown = [x for x in order_raw if x not in ALL_CONVENTIONS]
        if unknown:
            raise ConfigError(f"config key conventions.order: unknown convention {unknown[0]!r}; "
                              f"known: {', '.join(ALL_CONVENTIONS)}")
        order = tuple(order_raw)
    mapping = None
    mapping_raw = flat.get("conventions.mapping")
    if mapping_raw is not None:
        if not isinstance(mapping_raw, dict):
            raise ConfigError("config key conventions.mapping: must be a mapping with query, contexts, output")
        unknown_keys = set(mapping_raw) - {"query", "contexts", "output"}
        if unknown_keys:
            raise ConfigError(f"config key conventions.mapping.{sorted(unknown_keys)[0]}: unknown key "
                              "(the mapping has query, contexts, output)")
        for required in ("query", "contexts"):
            if not isinstance(mapping_raw.get(required), str) or not mapping_raw[required]:
                raise ConfigError(f"config key conventions.mapping.{required}: required (an attribute key or key$json.path)")
        output = mapping_raw.get("output")
        if output is not None and not isinstance(output, str):
            raise ConfigError("config key conventions.mapping.output: must be an attribute key or key$json.path")
        mapping = AttributeMapping(query=mapping_raw["query"], contexts=mapping_raw["contexts"], output=output)
    try:
        return ConventionConfig(order=order, mapping=mapping, retriever_attribute=v("conventions.retriever_attribute"),
                                expected_output_attribute=v("conventions.expected_output_attribute"),
                                max_contexts=v("conventions.max_contexts"))
    except ValueError as exc:
        raise ConfigError(f"config key {exc}") from None


def _drift(flat: Mapping[str, Any]) -> DriftSettings:
    values: dict[str, Any] = {}
    block = flat.get("drift")
    items = dict(block) if isinstance(block, dict) else {}
    if block is not None and not isinstance(block, dict):
        raise ConfigError("config key drift: must be a mapping")
    items.update({k.removeprefix("drift."): x for k, x in flat.items() if k.startswith("drift.")})
    known = {f.name: f for f in fields(DriftSettings)}
    for name, raw_value in items.items():
        if name not in known:
            raise ConfigError(f"config key drift.{name}: unknown key; known: {', '.join(known)}")
        try:
            if name in ("warmup", "batch"):
                values[name] = count(raw_value)
            elif name in ("baseline_alpha", "recent_alpha", "clear_ratio"):
                values[name] = rate(raw_value)
                if values[name] <= 0:
                    raise ValueError(f"must be > 0, got {raw_value!r}")
            else:
                values[name] = positive(raw_value)
        except ValueError as exc:
            raise ConfigError(f"config key drift.{name}: {exc}") from None
    return DriftSettings(**values)


NO_JUDGE_WARNING = (
    "no judge configured: scoring with the offline local judge (lexical, deterministic). "
    "Set a real one with --judge-model (or CTXPREC_JUDGE_MODEL, or judge.model in the config file), "
    "e.g. --judge-model openai/gpt-4o-mini with OPENAI_API_KEY set, or --judge-api-base for an "
    "OpenAI-compatible server.")
