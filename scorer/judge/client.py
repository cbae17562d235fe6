"""LimitedChatClient: the ChatClient that wraps a transport (direct aiohttp or litellm) with the
judge's limits: a concurrency cap, requests/tokens per minute, a per-attempt timeout, retries with
backoff that honours Retry-After, a circuit breaker, one RequestEvent per attempt, token usage
and cost.

Transports make exactly one HTTP attempt per `send` and report failures as AttemptError with an
outcome label; every policy decision (retry or not, how long to wait) is made here."""
from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass
from typing import Protocol, Sequence

from ctxprec.scorer.config import JudgeConfig
from ctxprec.scorer.judge.chat import (
    ChatMessage,
    ChatResponse,
    JudgeBadResponse,
    JudgeError,
    JudgeRateLimited,
    JudgeTimeout,
    JudgeUnavailable,
    RequestEvent,
    RequestObserver,
)
from ctxprec.scorer.judge.limits import CircuitBreaker, RateLimiter

# Prices come from litellm's bundled cost map, read without importing litellm.
from ctxprec.scorer.judge.prices import PriceSchedule, model_schedule
from ctxprec.scorer.retry import Backoff

log = logging.getLogger(__name__)

# Outcomes worth another attempt. A client error (400, 401, 404...) would fail the same way again.
RETRYABLE = frozenset({"rate_limited", "server_error", "timeout", "connection_error", "bad_response"})


class AttemptError(Exception):
    """One attempt failed. `outcome` is a RequestEvent outcome label; `retry_after_s` is the
    server's Retry-After, when it gave one. The message must not carry credentials or headers."""

    def __init__(self, outcome: str, message: str, *, status: int | None = None, retry_after_s: float | None = None):
        super().__init__(message)
        self.outcome = outcome
        self.status = status
        self.retry_after_s = retry_after_s


@dataclass(frozen=True, slots=True)
class TransportReply:
    text: str
    prompt_tokens: int | None  # None when the server sent no usage
    completion_tokens: int | None


class ChatTransport(Protocol):
    """One HTTP attempt. Raises AttemptError for anything but a usable first choice."""

    secrets: tuple[str, ...]  # strings to scrub from any error text (the API key)

    async def send(
        self, messages: Sequence[ChatMessage], *, max_tokens: int | None, json_mode: bool, temperature: float
    ) -> TransportReply: ...

    async def aclose(self) -> None: ...


def status_outcome(status: int) -> str:
    """The RequestEvent outcome of a non-200 HTTP status."""
    if status == 429:
        return "rate_limited"
    if status == 408:
        return "timeout"
    if status == 409 or status >= 500:
        return "server_error"
    return "client_error"


def _estimate_tokens(messages: Sequence[ChatMessage]) -> int:
    return -(-sum(len(m.content) for m in messages) // 4)


# --- the client ---------------------------------------------------------------------------------


class LimitedChatClient:
    def __init__(
        self,
        transport: ChatTransport,
        *,
        model: str,
        config: JudgeConfig,
        observer: RequestObserver | None = None,
        backoff: Backoff | None = None,
        breaker: CircuitBreaker | None = None,
        limiter: RateLimiter | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.model = model
        self._transport = transport
        self._observer = observer
        self._timeout_s = config.timeout_s
        self._max_retries = config.max_retries
        self._temperature = config.temperature
        self._backoff = backoff or Backoff()
        self._breaker = breaker or CircuitBreaker(config.breaker_threshold, config.breaker_cooldown_s)
        limiter = limiter or RateLimiter(config.requests_per_minute, config.tokens_per_minute)
        self._limiter = limiter if limiter.active else None
        self._semaphore = asyncio.Semaphore(config.concurrency)
        self._random = (rng or random.Random()).random
        self._secrets = tuple(s for s in (config.api_key, *getattr(transport, "secrets", ())) if s)
        self._prices: PriceSchedule | None = None
        self._price_lookup: asyncio.Future[PriceSchedule] | None = None

    @property
    def breaker(self) -> CircuitBreaker:
        return self._breaker

    @property
    def transport(self) -> ChatTransport:
        return self._transport

    async def warm_up(self) -> None:
        """Start-up work that the first request would otherwise pay for while scoring: the
        transport's session, and the model's prices (litellm's cost map file, read in a thread
        without importing litellm). The look-up is not awaited; the first success awaits it if
        it is still running."""
        warm = getattr(self._transport, "warm_up", None)
        if warm is not None:
            await warm()
        if self._prices is None and self._price_lookup is None:
            self._price_lookup = asyncio.ensure_future(self._lookup_prices())

    async def _resolve_prices(self) -> PriceSchedule:
        if self._prices is None:
            if self._price_lookup is None:
                self._price_lookup = asyncio.ensure_future(self._lookup_prices())
            # Shielded: a cancelled request must not cancel the look-up that others share.
            self._prices = await asyncio.shield(self._price_lookup)
        return self._prices

    async def _lookup_prices(self) -> PriceSchedule:
        # The first look-up reads a JSON file of a few MB: keep it off the event loop.
        return await asyncio.to_thread(model_schedule, self.model)

    def _emit(self, outcome: str, latency_s: float, prompt_tokens: int = 0, completion_tokens: int = 0, cost: float = 0.0) -> None:
        if self._observer is None:
            return
        try:
            self._observer(RequestEvent(self.model, outcome, latency_s, prompt_tokens, completion_tokens, cost))
        except Exception:  # metrics must never break judging
            log.exception("judge request observer failed")

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, "***")
        return text

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        max_tokens: int | None = None,
        json_mode: bool = True,
    ) -> ChatResponse:
        try:
            probe = self._breaker.before_call(self.model)
        except JudgeUnavailable:
            self._emit("circuit_open", 0.0)
            raise
        estimate = _estimate_tokens(messages) if self._limiter is not None else 0
        settled = False
        attempts = 0
        try:
            while True:
                attempts += 1
                if attempts > 1:
                    try:
                        self._breaker.check(self.model)
                    except JudgeUnavailable:
                        self._emit("circuit_open", 0.0)
                        settled = True  # the breaker already knows; this call does not count again
                        raise
                if self._limiter is not None:
                    await self._limiter.acquire(estimate)
                error: AttemptError | None = None
                prepare = getattr(self._transport, "prepare", None)
                if prepare is not None:
                    # One-time setup (litellm's cold import: seconds, more on a busy machine) is
                    # not the judge's answer time: keep it out of the attempt's timeout.
                    prepare()
                async with self._semaphore:
                    started = time.perf_counter()
                    try:
                        async with asyncio.timeout(self._timeout_s):
                            reply = await self._transport.send(
                                messages, max_tokens=max_tokens, json_mode=json_mode, temperature=self._temperature
                            )
                    except AttemptError as exc:
                        error = exc
                    except TimeoutError:
                        error = AttemptError("timeout", f"no answer within {self._timeout_s:g}s")
                    latency_s = time.perf_counter() - started
                if error is None:
                    return await self._succeeded(reply, messages, estimate, latency_s, attempts)
                self._emit(error.outcome, latency_s)
                if error.outcome not in RETRYABLE or attempts > self._max_retries or probe:
                    break
                await asyncio.sleep(self._backoff.delay(attempts - 1, error.retry_after_s, self._random))
            if error.outcome in RETRYABLE:
                self._breaker.record_failure()
                settled = True
            raise self._judge_error(error, attempts)
        except BaseException:
            if probe and not settled:
                self._breaker.release_probe()
            raise

    async def _succeeded(
        self, reply: TransportReply, messages: Sequence[ChatMessage], estimate: int, latency_s: float, attempts: int
    ) -> ChatResponse:
        self._breaker.record_success()
        prompt_tokens = reply.prompt_tokens
        if prompt_tokens is None:
            prompt_tokens = estimate or _estimate_tokens(messages)
        completion_tokens = reply.completion_tokens
        if completion_tokens is None:
            completion_tokens = -(-len(reply.text) // 4)
        if self._limiter is not None:
            self._limiter.settle(estimate, prompt_tokens + completion_tokens)
        # Priced at the rate in force now: some providers bill less at night and on weekends.
        prompt_price, completion_price = (self._prices or await self._resolve_prices()).at()
        cost = prompt_tokens * prompt_price + completion_tokens * completion_price
        self._emit("ok", latency_s, prompt_tokens, completion_tokens, cost)
        return ChatResponse(reply.text, prompt_tokens, completion_tokens, cost, latency_s * 1000.0, attempts)

    def _judge_error(self, error: AttemptError, attempts: int) -> JudgeError:
        tries = f"after {attempts} attempt{'s' if attempts != 1 else ''}"
        message = self._scrub(f"judge {self.model}: {error} ({tries})")
        if error.outcome == "rate_limited":
            return JudgeRateLimited(message)
        if error.outcome == "timeout":
            return JudgeTimeout(message)
        if error.outcome == "bad_response":
            return JudgeBadResponse(message)
        return JudgeError(message, kind=error.outcome)

    async def aclose(self) -> None:
        if self._price_lookup is not None and not self._price_lookup.done():
            self._price_lookup.cancel()
            await asyncio.gather(self._price_lookup, return_exceptions=True)
        await self._transport.aclose()
