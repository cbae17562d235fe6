"""Settings of scoring (YAML section `scoring`) and of the judge (YAML section `judge`).

The judge's own knobs and their defaults are the scorer library's (`JudgeConfig`); this section
only adds how the sidecar's users set them (flags, help) and the score scale."""
from __future__ import annotations

from typing import Annotated, Any

from ctxprec.collector.config_types import (
    Count,
    Count0,
    NonNegative,
    OptionalPositive,
    OptionalText,
    Positive,
    Switch,
    choice,
    setting,
)
from ctxprec.scorer.config import REASON_MODES, TRANSPORTS, JudgeConfig
from pydantic import BaseModel, BeforeValidator, ConfigDict

PROCESS_MODES = ("auto", "on", "off")
_JUDGE = JudgeConfig()  # the library's defaults, declared once there


class ScoringConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)

    queue_size: Count = setting(1000, "retrievals waiting for a scoring worker at most; past it new ones are shed "
                                      "as `overloaded`", flag="--queue-size")
    workers: Count = setting(8, "retrievals scored at once", flag="--workers")
    max_rss_mb: OptionalPositive = setting(512.0, "shed new work while the resident memory of the sidecar and its "
                                                  "scoring process is above this, MB (off: no cap)",
                                           flag="--max-rss-mb")
    process: Annotated[str, BeforeValidator(choice(*PROCESS_MODES))] = setting(
        "auto", "judge in a separate scoring process on another core; auto: on for Kafka input with 2+ CPUs",
        flag="--scoring-process", choices=PROCESS_MODES)
    shutdown_timeout_s: NonNegative = setting(10.0, "on SIGTERM, seconds to finish the scoring in flight",
                                              flag="--shutdown-timeout")


class JudgeSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)

    model: OptionalText = setting(None, "litellm model string (openai/gpt-4o-mini, anthropic/..., ollama_chat/..., "
                                        "hosted_vllm/...), or local, the offline judge (the default)",
                                  flag="--judge-model")
    api_base: OptionalText = setting(_JUDGE.api_base, "base URL of an OpenAI-compatible server for the judge",
                                     flag="--judge-api-base")
    api_key: OptionalText = setting(_JUDGE.api_key, "judge API key (else the provider's usual environment variable, "
                                                    "e.g. OPENAI_API_KEY)", flag="--judge-api-key", secret=True)
    scale: NonNegative = setting(1.0, "scores are multiplied by this", flag="--scale")
    reason_mode: Annotated[str, BeforeValidator(choice(*REASON_MODES))] = setting(
        _JUDGE.reason_mode, "template: reasons built from the verdicts; llm: the judge writes them (a second call)",
        flag="--judge-reason-mode", choices=REASON_MODES)
    concurrency: Count = setting(_JUDGE.concurrency, "judge requests in flight at most", flag="--judge-concurrency")
    requests_per_minute: OptionalPositive = setting(_JUDGE.requests_per_minute, "judge requests per minute at most",
                                                    flag="--judge-rpm")
    tokens_per_minute: OptionalPositive = setting(_JUDGE.tokens_per_minute, "judge tokens per minute at most",
                                                  flag="--judge-tpm")
    timeout_s: Positive = setting(_JUDGE.timeout_s, "judge request timeout, seconds", flag="--judge-timeout")
    max_retries: Count0 = setting(_JUDGE.max_retries, "retries per judge request (backoff with jitter, honouring "
                                                      "Retry-After)", flag="--judge-max-retries")
    max_contexts_per_call: Count = setting(_JUDGE.max_contexts_per_call, "contexts judged in one call; more are "
                                                                         "split into batches judged concurrently",
                                           flag="--judge-max-contexts-per-call")
    max_context_chars: Count = setting(_JUDGE.max_context_chars, "characters of a context sent to the judge",
                                       flag="--judge-max-context-chars")
    cache_size: Count0 = setting(_JUDGE.cache_size, "verdict cache entries (0: no cache)", flag="--judge-cache-size")
    redact_pii: Switch = setting(_JUDGE.redact_pii, "replace e-mail addresses, phone and card numbers with "
                                                    "placeholders before text reaches the judge, and in all "
                                                    "text the sidecar writes out (reasons, records, sinks, "
                                                    "diagnostics, logs)",
                                 flag="--redact-pii")
    breaker_threshold: Count = setting(_JUDGE.breaker_threshold, "consecutive judge failures that open the circuit "
                                                                 "breaker")
    breaker_cooldown_s: NonNegative = setting(_JUDGE.breaker_cooldown_s, "how long an open breaker waits before "
                                                                         "trying again, seconds")
    temperature: NonNegative = setting(_JUDGE.temperature, "judge sampling temperature")
    transport: Annotated[str, BeforeValidator(choice(*TRANSPORTS))] = setting(
        _JUDGE.transport, "direct: pooled HTTP to OpenAI-compatible endpoints; litellm: through litellm; auto: "
                          "direct where it applies", choices=TRANSPORTS)

    @property
    def defaulted(self) -> bool:
        """No judge configured: the local judge stands in."""
        return self.model is None

    def judge_config(self) -> JudgeConfig:
        values: dict[str, Any] = self.model_dump(exclude={"scale"})
        values["model"] = self.model or "local"
        return JudgeConfig(**values)
