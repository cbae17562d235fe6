"""Every knob of the judge, declared once: its default, what it means, its parser and, for those a
user sets, its command-line flag. The library (`JudgeConfig(...)`), `ctxprec score` (its flags are
built from these fields, scorer/batch.py) and `ctxprec serve` (its `judge` YAML section, its flags
and `CTXPREC_*` variables, collector/scoring/config.py) all read this one declaration, so a value
means the same and is refused with the same words wherever it is given (docs/INTERNALS.md,
"Scorer seams").

A flag's environment variable is `CTXPREC_<FLAG>` (`--judge-timeout` -> `CTXPREC_JUDGE_TIMEOUT`)."""
from __future__ import annotations

from dataclasses import Field, dataclass, field, fields
from typing import Any, Callable, Iterator

from ctxprec.scorer.values import (
    choice,
    number_between,
    parse_bool,
    parse_count,
    parse_count0,
    parse_non_negative,
    parse_optional_positive,
    parse_optional_text,
    parse_positive,
    parse_price_pair,
    parse_text,
)

REASON_MODES = ("template", "llm")
TRANSPORTS = ("auto", "direct", "litellm")
# How the answer's JSON schema is sent (scorer/judge/structured.py); auto finds the first form
# the endpoint takes, in this order.
STRUCTURED_OUTPUTS = ("auto", "json_schema", "json_object_schema", "json_object", "off")


def parse_model(raw: Any) -> str:
    value = parse_text(raw).strip() if raw is not None else ""
    if not value:
        raise ValueError("must be a non-empty model string (e.g. 'openai/gpt-4o-mini' or 'local')")
    return value


def parse_api_key(raw: Any) -> str | None:
    if raw is not None and not isinstance(raw, str):
        raise ValueError("must be a string or None")  # the value itself is never echoed: it may be a secret
    return parse_optional_text(raw)


def parse_api_base(raw: Any) -> str | None:
    """An http(s) URL: a base without its scheme (`127.0.0.1:8000/v1`) would be refused by every
    request instead of once, at start."""
    value = parse_optional_text(raw)
    if value is None:
        return None
    scheme, sep, rest = value.strip().partition("://")
    if not sep or scheme.lower() not in ("http", "https") or not rest.strip("/"):
        raise ValueError(f"must be an http:// or https:// URL such as http://127.0.0.1:8000/v1, got {value[:80]!r}")
    return value.strip()


def parse_cache_url(raw: Any) -> str | None:
    value = parse_optional_text(raw)
    if value is None:
        return None
    from ctxprec.scorer.judge.shared_cache import check_url

    return check_url(value)


def judge_setting(default: Any, help: str, parse: Callable[[Any], Any], *, flag: str | None = None,
                  secret: bool = False, metavar: str | None = None) -> Any:
    """A JudgeConfig field: default, help, the parser every source's value goes through, and the
    flag of `ctxprec score` and `ctxprec serve` (None: library and YAML only). `secret` keeps the
    value out of repr."""
    return field(default=default, repr=not secret,
                 metadata={"help": help, "parse": parse, "flag": flag, "metavar": metavar, "secret": secret})


@dataclass
class JudgeConfig:
    model: str = judge_setting(
        "local", "litellm model string (openai/gpt-4o-mini, anthropic/..., ollama_chat/..., hosted_vllm/...), or "
                 "local, the offline judge (the default)", parse_model, flag="--judge-model")
    api_base: str | None = judge_setting(
        None, "base URL of an OpenAI-compatible server for the judge (with --judge-model openai/NAME): http:// or "
              "https://", parse_api_base, flag="--judge-api-base", metavar="URL")
    api_key: str | None = judge_setting(
        None, "judge API key (else the provider's usual environment variable, e.g. OPENAI_API_KEY)", parse_api_key,
        flag="--judge-api-key", secret=True, metavar="TEXT")
    reason_mode: str = judge_setting(
        "template", "template: reasons built from the verdicts; llm: the judge writes them (a second call)",
        choice(*REASON_MODES), flag="--judge-reason-mode")
    max_contexts_per_call: int = judge_setting(
        20, "contexts judged in one call; more are split into batches judged concurrently", parse_count,
        flag="--judge-max-contexts-per-call")
    max_context_chars: int = judge_setting(
        4000, "characters of a context sent to the judge", parse_count, flag="--judge-max-context-chars")
    cache_size: int = judge_setting(10_000, "verdict cache entries (0: no cache)", parse_count0,
                                    flag="--judge-cache-size")
    cache_url: str | None = judge_setting(
        None, "a verdict cache shared by replicas, behind the local one: redis://host:port/db (rediss:// for TLS; "
              "needs ctxprec[redis]); a store that is down costs judge calls, never a score", parse_cache_url,
        flag="--judge-cache-url", secret=True, metavar="URL")
    concurrency: int = judge_setting(
        16, "judge requests in flight at most (suits hosted APIs); with adaptive concurrency the judge "
            "keeps fewer in flight while its latency climbs (a local server that answers one at a time "
            "gets about one)", parse_count, flag="--judge-concurrency")
    adaptive_concurrency: bool = judge_setting(
        True, "lower the judge requests in flight when latency climbs with them or timeouts begin, raise "
              "them again while it stays flat (docs/JUDGES.md)", parse_bool,
        flag="--judge-adaptive-concurrency")
    requests_per_minute: float | None = judge_setting(None, "judge requests per minute at most",
                                                      parse_optional_positive, flag="--judge-rpm")
    tokens_per_minute: float | None = judge_setting(None, "judge tokens per minute at most",
                                                    parse_optional_positive, flag="--judge-tpm")
    timeout_s: float = judge_setting(
        30.0, "judge request timeout, seconds, counted from when the request leaves our own queue",
        parse_positive, flag="--judge-timeout")
    max_retries: int = judge_setting(
        4, "retries per judge request (backoff with jitter, honouring Retry-After)", parse_count0,
        flag="--judge-max-retries")
    max_tokens: int = judge_setting(
        2048, "answer tokens per judge call at most: a call asks for room for its verdicts' short reasons, and "
              "a cut-off answer is asked again with twice the room, up to this", parse_count,
        flag="--judge-max-tokens")
    structured_output: str = judge_setting(
        "auto", "how the answer's JSON schema is sent: json_schema (OpenAI's form), json_object_schema "
                "(json_object with a schema, as llama-cpp-python takes), json_object (no schema), off (no "
                "response_format); auto probes the endpoint once and steps down a form on a 400, 422 or 500",
        choice(*STRUCTURED_OUTPUTS), flag="--judge-structured-output")
    max_response_mb: float = judge_setting(
        1.0, "largest judge answer read, MB (a verdict answer is a few KB); a longer one is cut off there and "
             "the attempt fails as judge_response_too_large (direct path; litellm reads answers itself)",
        parse_positive, flag="--judge-max-response-mb")
    price_per_mtok: tuple[float, float] | None = judge_setting(
        None, "judge price, USD per million prompt and completion tokens, for models litellm's cost map does "
              "not price (local servers, fine-tunes, proxies); feeds the cost metrics and the daily budget",
        parse_price_pair, flag="--judge-price-per-mtok", metavar="INPUT,OUTPUT")
    breaker_threshold: int = judge_setting(10, "consecutive judge failures that open the circuit breaker",
                                           parse_count)
    breaker_cooldown_s: float = judge_setting(30.0, "how long an open breaker waits before trying again, seconds",
                                              parse_non_negative)
    temperature: float = judge_setting(0.0, "judge sampling temperature", number_between(0.0, 2.0))
    transport: str = judge_setting(
        "auto", "direct: pooled HTTP to OpenAI-compatible endpoints; litellm: through litellm; auto: direct where "
                "it applies", choice(*TRANSPORTS))
    redact_pii: bool = judge_setting(
        False, "replace e-mail addresses, phone and card numbers with placeholders before text reaches the judge, "
               "and in all text ctxprec writes out (reasons, records, sinks, diagnostics, logs)", parse_bool,
        flag="--redact-pii")

    record_text_chars: int = judge_setting(
        300, "characters of text each score record keeps: the question (`query`) and, for a document without "
             "an id, its first words (`preview` in its verdict, at most 80); redacted with --redact-pii; 0: "
             "records keep no text", parse_count0, flag="--record-text-chars")

    def __post_init__(self) -> None:
        for setting in fields(self):
            parse, value = setting.metadata["parse"], getattr(self, setting.name)
            try:
                if parse is parse_bool and not isinstance(value, bool):
                    # Text such as "yes" is read by the flags' and the config file's parsers; a
                    # library caller passes a bool.
                    raise ValueError(f"must be true or false, got {value!r}")
                setattr(self, setting.name, parse(value))
            except ValueError as exc:
                raise ValueError(f"{setting.name}: {exc}") from None


def judge_settings() -> Iterator[Field[Any]]:
    """The declared fields, in order (for flags, the sidecar's config section and the docs)."""
    return iter(fields(JudgeConfig))


def setting_flag(setting: Field[Any]) -> str | None:
    return setting.metadata.get("flag")
