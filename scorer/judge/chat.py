"""The seam between judging logic and the wire: one chat completion in, text and usage out.

`ChatClient` implementations own transport, limits, retries and the circuit breaker; the judge
(`ctxprec.scorer.judge.llm`) owns prompts, parsing, batching and the cache."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

from ctxprec.scorer.result import JudgeUsage


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: str  # "system" | "user" | "assistant"
    content: str


@dataclass(frozen=True, slots=True)
class ChatResponse:
    text: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    latency_ms: float  # wall time of the successful attempt, retries excluded
    attempts: int = 1
    finish_reason: str | None = None  # "length": the answer was cut off at max_tokens


class JudgeError(Exception):
    """The judge could not produce an answer. `kind` is a short machine-readable label used as
    the score record's error type and as the `outcome` label of judge metrics."""

    kind: str = "judge_error"
    attempts: int = 0  # HTTP attempts the failed call made
    # What judging the sample had cost when it failed (calls, tokens, cost), set by the judge.
    usage: JudgeUsage | None = None

    def __init__(self, message: str, *, kind: str | None = None) -> None:
        super().__init__(message)
        if kind is not None:
            self.kind = kind


class JudgeTimeout(JudgeError):
    kind = "timeout"


class JudgeRateLimited(JudgeError):
    kind = "rate_limited"


class JudgeUnavailable(JudgeError):
    """The circuit breaker is open: the judge failed too often in a row and is being rested."""

    kind = "circuit_open"


class JudgeBadResponse(JudgeError):
    """The judge answered, but not with usable verdicts."""

    kind = "bad_response"


class JudgeResponseTooLarge(JudgeError):
    """The judge's answer was longer than `max_response_mb`: cut off there and not read."""

    kind = "judge_response_too_large"


@dataclass(frozen=True, slots=True)
class RequestEvent:
    """Reported once per HTTP attempt, so that the collector can count requests by outcome
    without the scorer knowing about Prometheus. outcome: ok | rate_limited | server_error |
    timeout | client_error | connection_error | circuit_open | bad_response | response_too_large."""

    model: str
    outcome: str
    latency_s: float
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    # The local judge only: one reason per context it judged by its language-independent
    # fallback ("unsupported_language", "language_mismatch"), for the fallback counter.
    local_fallbacks: tuple[str, ...] = ()


RequestObserver = Callable[[RequestEvent], None]

# Every outcome a remote judge's RequestEvent can carry (metrics start each at 0).
REQUEST_OUTCOMES = (
    "ok", "rate_limited", "server_error", "timeout", "client_error", "connection_error", "circuit_open", "bad_response",
    "response_too_large",
)


class ChatClient(Protocol):
    model: str

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        max_tokens: int | None = None,
        json_mode: bool = True,
        schema: dict[str, Any] | None = None,
    ) -> ChatResponse:
        """Return the first choice's text. With `json_mode`, asks for JSON, in the schema `schema`
        when given (structured outputs, in the form the endpoint takes). Raises JudgeError (or a
        subclass) after retries."""
        ...

    async def aclose(self) -> None: ...
