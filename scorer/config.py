"""Every knob of the judge, with defaults. One dataclass so that the library, the batch CLI and the
sidecar's config loader all speak the same names (docs/INTERNALS.md, "Scorer seams")."""
from __future__ import annotations

from dataclasses import dataclass, field

REASON_MODES = ("template", "llm")
TRANSPORTS = ("auto", "direct", "litellm")


@dataclass
class JudgeConfig:
    model: str = "local"
    api_base: str | None = None
    # Never logged (kept out of repr); when None, the provider's usual env variable is used.
    api_key: str | None = field(default=None, repr=False)
    reason_mode: str = "template"  # "template" | "llm"
    max_contexts_per_call: int = 20
    max_context_chars: int = 4000
    cache_size: int = 10_000  # contexts; 0 disables
    concurrency: int = 16
    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None
    timeout_s: float = 30.0
    max_retries: int = 4
    breaker_threshold: int = 10  # consecutive failures that open the breaker
    breaker_cooldown_s: float = 30.0
    temperature: float = 0.0
    transport: str = "auto"  # "auto" | "direct" (pooled aiohttp, OpenAI-compatible) | "litellm"
    redact_pii: bool = False  # replace e-mails, phones, card numbers before judging (scorer/redact.py)

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model.strip():
            raise ValueError("model: must be a non-empty model string (e.g. 'openai/gpt-4o-mini' or 'local')")
        if self.api_base is not None and (not isinstance(self.api_base, str) or not self.api_base.strip()):
            raise ValueError("api_base: must be a URL string or None")
        if self.api_key is not None and not isinstance(self.api_key, str):
            # The value itself is never echoed: it may be a secret.
            raise ValueError("api_key: must be a string or None")
        if self.reason_mode not in REASON_MODES:
            raise ValueError(f"reason_mode: must be one of {', '.join(REASON_MODES)}, got {self.reason_mode!r}")
        if self.transport not in TRANSPORTS:
            raise ValueError(f"transport: must be one of {', '.join(TRANSPORTS)}, got {self.transport!r}")
        if not isinstance(self.redact_pii, bool):
            raise ValueError(f"redact_pii: must be true or false, got {self.redact_pii!r}")
        _int_at_least("max_contexts_per_call", self.max_contexts_per_call, 1)
        _int_at_least("max_context_chars", self.max_context_chars, 1)
        _int_at_least("cache_size", self.cache_size, 0)
        _int_at_least("concurrency", self.concurrency, 1)
        _int_at_least("max_retries", self.max_retries, 0)
        _int_at_least("breaker_threshold", self.breaker_threshold, 1)
        _optional_positive("requests_per_minute", self.requests_per_minute)
        _optional_positive("tokens_per_minute", self.tokens_per_minute)
        _number_in("timeout_s", self.timeout_s, low=0.0, low_inclusive=False)
        _number_in("breaker_cooldown_s", self.breaker_cooldown_s, low=0.0, low_inclusive=True)
        _number_in("temperature", self.temperature, low=0.0, low_inclusive=True, high=2.0)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value  # NaN != NaN


def _int_at_least(name: str, value: object, low: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{name}: must be an integer >= {low}, got {value!r}")


def _optional_positive(name: str, value: object) -> None:
    if value is None:
        return
    if not _is_number(value) or value <= 0:  # type: ignore[operator]
        raise ValueError(f"{name}: must be a number > 0 or None (no limit), got {value!r}")


def _number_in(name: str, value: object, *, low: float, low_inclusive: bool, high: float | None = None) -> None:
    ok = _is_number(value)
    if ok:
        v = float(value)  # type: ignore[arg-type]
        ok = (v >= low if low_inclusive else v > low) and (high is None or v <= high) and v != float("inf")
    if not ok:
        bound = f"{'>=' if low_inclusive else '>'} {low:g}" + (f" and <= {high:g}" if high is not None else "")
        raise ValueError(f"{name}: must be a finite number {bound}, got {value!r}")
