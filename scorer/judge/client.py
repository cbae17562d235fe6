"""LimitedChatClient: the ChatClient that wraps a transport (direct aiohttp or litellm) with the
judge's limits: requests in flight (adaptive, limits.py AdaptiveLimit), requests/tokens per
minute, a per-attempt timeout counted from when the request leaves our own queue, retries with
backoff that honours Retry-After, a circuit breaker, the structured-output form the endpoint
takes (structured.py), one RequestEvent per attempt, token usage and cost.

Transports make exactly one HTTP attempt per `send` and report failures as AttemptError with an
outcome label; every policy decision (retry or not, how long to wait) is made here."""
from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

from ctxprec.scorer.config import JudgeConfig
from ctxprec.scorer.judge.chat import (
    ChatMessage,
    ChatResponse,
    JudgeBadResponse,
    JudgeError,
    JudgeRateLimited,
    JudgeResponseTooLarge,
    JudgeTimeout,
    JudgeUnavailable,
    RequestEvent,
    RequestObserver,
)
from ctxprec.scorer.judge.limits import AdaptiveLimit, CircuitBreaker, RateLimiter

# Prices come from litellm's bundled cost map, read without importing litellm.
from ctxprec.scorer.judge.prices import PriceSchedule, judge_schedule
from ctxprec.scorer.judge.prompt import verdict_messages
from ctxprec.scorer.judge.structured import REJECTING_STATUSES, FormChooser, response_format, verdict_schema
from ctxprec.scorer.retry import Backoff

log = logging.getLogger(__name__)

# Outcomes worth another attempt. A client error (400, 401, 404...) would fail the same way again.
# An answer over the size limit is tried again like any other unusable answer: each attempt reads
# at most the limit, and a judge that keeps doing it opens the breaker.
RETRYABLE = frozenset({"rate_limited", "server_error", "timeout", "connection_error", "bad_response",
                       "response_too_large"})
# Prompt tokens per unit of work for the adaptive limit: reading a token costs about a tenth of
# writing one.
_PROMPT_TOKENS_PER_UNIT = 10
# The structured-output probe: the judge's own request for one tiny context (so that a server
# that reads the data block, like the stub judge, answers it); only the status of its answer counts.
_PROBE_MESSAGES = tuple(verdict_messages(query="ping", reference_kind="query", reference="", items=[(0, "pong")]))
_PROBE_MAX_TOKENS = 16


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
    finish_reason: str | None = None  # "length": cut off at max_tokens


class ChatTransport(Protocol):
    """One HTTP attempt. Raises AttemptError for anything but a usable first choice."""

    secrets: tuple[str, ...]  # strings to scrub from any error text (the API key)

    async def send(
        self,
        messages: Sequence[ChatMessage],
        *,
        max_tokens: int | None,
        response_format: dict[str, Any] | None,
        temperature: float,
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


class _CallBudget:
    """What a call may spend on the judge: one timeout per attempt allowed, in attempts and the
    waits between them. Waiting in our own queue (a slot, the rate limit) and in the judge's
    queue behind our own requests (the queue allowance) is not spent."""

    __slots__ = ("left",)

    def __init__(self, seconds: float) -> None:
        self.left = seconds

    def spend(self, seconds: float) -> None:
        self.left -= max(0.0, seconds)


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
        hosted: bool = False,
    ) -> None:
        """`hosted`: a provider's API, whose latency does not depend on our load: the adaptive
        limit starts at the ceiling instead of finding it from a few requests."""
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
        self._in_flight = AdaptiveLimit(config.concurrency, adaptive=config.adaptive_concurrency,
                                        initial=config.concurrency if hosted else None)
        self._forms = FormChooser(config.structured_output, model=model)
        self._random = (rng or random.Random()).random
        self._secrets = tuple(s for s in (config.api_key, *getattr(transport, "secrets", ())) if s)
        self._price_per_mtok = config.price_per_mtok
        self._prices: PriceSchedule | None = None
        self._price_lookup: asyncio.Future[PriceSchedule] | None = None

    @property
    def breaker(self) -> CircuitBreaker:
        return self._breaker

    @property
    def in_flight_limit(self) -> AdaptiveLimit:
        return self._in_flight

    @property
    def forms(self) -> FormChooser:
        return self._forms

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
        return await asyncio.to_thread(judge_schedule, self.model, self._price_per_mtok)

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
        schema: dict[str, Any] | None = None,
    ) -> ChatResponse:
        try:
            probe = self._breaker.before_call(self.model)
        except JudgeUnavailable:
            self._emit("circuit_open", 0.0)
            raise
        estimate = _estimate_tokens(messages) if self._limiter is not None else 0
        # A judge that hangs is given up on within one timeout per attempt allowed, however the
        # backoff falls (after a timeout there is none: the timeout was the wait).
        budget = _CallBudget(self._timeout_s * (self._max_retries + 1))
        settled = False
        attempts = 0
        error: AttemptError | None = None
        try:
            while True:
                attempts += 1
                if self._limiter is not None:
                    await self._limiter.acquire(estimate)
                prepare = getattr(self._transport, "prepare", None)
                if prepare is not None:
                    # One-time setup (litellm's cold import: seconds, more on a busy machine) is
                    # not the judge's answer time: keep it out of the attempt's timeout.
                    prepare()
                before = error
                reply, error, latency_s, form, doubted = await self._attempt(
                    messages, max_tokens, schema if json_mode else False, budget=budget, probe=probe)
                if error is None:
                    assert reply is not None
                    if json_mode:
                        self._forms.accepted(form)
                    return await self._succeeded(reply, messages, estimate, latency_s, attempts)
                if error.outcome == "circuit_open":  # it opened while this call waited (its slot, a retry)
                    self._emit("circuit_open", 0.0)
                    settled = True  # the breaker already knows; this call does not count again
                    if before is None:
                        raise JudgeUnavailable(str(error))
                    # What the call met was its last attempt's failure; the breaker only stopped
                    # it being tried again.
                    raise self._judge_error(before, attempts - 1, "not tried again: the circuit breaker opened") \
                        from None
                self._emit(error.outcome, latency_s)
                if doubted and error.status is not None \
                        and await self._forms.rejected(form, error.status, self._probe):
                    # The endpoint does not take this form: again in the one it takes, at once.
                    continue
                if error.outcome not in RETRYABLE or attempts > self._max_retries or probe:
                    break
                pause = 0.0 if error.outcome == "timeout" else \
                    self._backoff.delay(attempts - 1, error.retry_after_s, self._random)
                if budget.left <= pause:
                    break  # no time left for another attempt
                budget.spend(pause)
                await asyncio.sleep(pause)
            if error.outcome in RETRYABLE and (error.outcome != "timeout" or probe):
                self._breaker.record_failure()  # timeouts were counted attempt by attempt
            settled = error.outcome in RETRYABLE
            raise self._judge_error(error, attempts)
        except BaseException:
            if probe and not settled:
                self._breaker.release_probe()
            raise

    async def _attempt(
        self, messages: Sequence[ChatMessage], max_tokens: int | None, schema: dict[str, Any] | None | bool,
        form: str | None = None, *, budget: "_CallBudget | None" = None, probe: bool = True,
    ) -> tuple[TransportReply | None, AttemptError | None, float, str, bool]:
        """One HTTP attempt inside the in-flight limit; its timeout starts when it leaves our queue.
        `schema` False: no response_format. The form is read once the request leaves the queue
        (calls that waited there go out in the form settled meanwhile) unless `form` is given.
        Unless `probe`, a breaker that opened while the call waited for its slot fails it there
        (an AttemptError `circuit_open`, nothing sent). `budget`: the call's time left, which
        caps the attempt's timeout. Returns the reply or the error, the latency, the form used,
        and whether the answer put the form in doubt (then the caller must call
        FormChooser.rejected)."""
        reply: TransportReply | None = None
        error: AttemptError | None = None
        doubted = False
        form_given = form
        while True:
            if form is None:
                await self._forms.sweep_done()  # a call must not go out in a form being probed
            sent_with = await self._in_flight.acquire()
            if form is not None or not self._forms.in_doubt:
                break
            self._in_flight.release()  # the form came in doubt while this call waited for its slot
        if not probe and self._breaker.open:
            self._in_flight.release()
            try:
                self._breaker.check(self.model)
            except JudgeUnavailable as exc:
                return None, AttemptError("circuit_open", str(exc)), 0.0, form or self._forms.form, False
        if schema is False:
            form, body_format = "off", None
        else:
            form = form or self._forms.form
            body_format = response_format(form, schema or None)
        allowance = self._in_flight.queue_allowance(sent_with)
        own_s = self._timeout_s if budget is None else max(0.001, min(self._timeout_s, budget.left))
        timeout_s = own_s + allowance
        started = time.perf_counter()
        try:
            async with asyncio.timeout(timeout_s):
                reply = await self._transport.send(
                    messages, max_tokens=max_tokens, response_format=body_format, temperature=self._temperature
                )
        except AttemptError as exc:
            error = exc
        except TimeoutError:
            error = AttemptError("timeout", f"no answer within {timeout_s:.3g}s")
        finally:
            latency_s = time.perf_counter() - started
            if budget is not None:
                budget.spend(min(own_s, latency_s))
            if error is not None and error.outcome == "timeout":
                # Before the slot goes to the next call: it must find the breaker opened by this.
                self._breaker.record_timeout(probe=probe)
            if error is not None and error.status is not None and form_given is None and schema is not False:
                doubted = self._forms.doubt(form, error.status)  # before the slot goes to the next call
            self._in_flight.release()
        if reply is not None and form_given is None:
            # (A form probe's tiny answer is no measure of the judge's pace: it would make the
            # time alone, and with it the queue allowance, far too short.)
            units = (reply.prompt_tokens or _estimate_tokens(messages)) / _PROMPT_TOKENS_PER_UNIT + (
                reply.completion_tokens or -(-len(reply.text) // 4))
            self._in_flight.answered(latency_s, units, sent_with)
        elif error is not None and (error.outcome in ("timeout", "rate_limited") or error.status == 503):
            self._in_flight.overloaded(latency_s)
        return reply, error, latency_s, form, doubted

    async def _probe(self, form: str) -> int | None:
        """Send the structured-output probe in `form`: the HTTP status of the answer, or None
        when the attempt proved nothing about the form."""
        reply, error, latency_s, _, _ = await self._attempt(_PROBE_MESSAGES, _PROBE_MAX_TOKENS, verdict_schema([0]), form)
        if reply is not None:
            prompt_tokens, completion_tokens = reply.prompt_tokens or 0, reply.completion_tokens or 0
            prompt_price, completion_price = (self._prices or await self._resolve_prices()).at()
            self._emit("ok", latency_s, prompt_tokens, completion_tokens,
                       prompt_tokens * prompt_price + completion_tokens * completion_price)
            return 200
        assert error is not None
        self._emit(error.outcome, latency_s)
        if error.outcome == "bad_response":
            return 200  # the server took the form; a 16-token answer need not be readable
        if error.status is not None and error.status in REJECTING_STATUSES:
            return error.status
        return None

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
        return ChatResponse(reply.text, prompt_tokens, completion_tokens, cost, latency_s * 1000.0, attempts,
                            reply.finish_reason)

    def _judge_error(self, error: AttemptError, attempts: int, note: str = "") -> JudgeError:
        tries = f"after {attempts} attempt{'s' if attempts != 1 else ''}" + (f"; {note}" if note else "")
        message = self._scrub(f"judge {self.model}: {error} ({tries})")
        failure: JudgeError
        if error.outcome == "rate_limited":
            failure = JudgeRateLimited(message)
        elif error.outcome == "timeout":
            failure = JudgeTimeout(message)
        elif error.outcome == "bad_response":
            failure = JudgeBadResponse(message)
        elif error.outcome == "response_too_large":
            failure = JudgeResponseTooLarge(message)
        else:
            failure = JudgeError(message, kind=error.outcome)
        failure.attempts = attempts
        return failure

    async def aclose(self) -> None:
        self._in_flight.lag.stop()
        if self._price_lookup is not None and not self._price_lookup.done():
            self._price_lookup.cancel()
            await asyncio.gather(self._price_lookup, return_exceptions=True)
        await self._transport.aclose()
