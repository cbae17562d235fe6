"""Limits that keep the judge within a provider's quotas and stop us hammering a judge that is down:
a requests/tokens-per-minute rate limiter, a circuit breaker, and backoff that honours Retry-After.

All three take an injectable clock so that their arithmetic is testable without sleeping."""
from __future__ import annotations

import asyncio
import math
import random
import time
from dataclasses import dataclass
from datetime import timezone
from email.utils import parsedate_to_datetime
from typing import Callable

from ctxprec.scorer.judge.chat import JudgeUnavailable

Clock = Callable[[], float]


class _Bucket:
    """A token bucket that may go into debt: a request larger than the burst is let through when
    the bucket is full, and the debt delays the next ones. Without debt such a request (a prompt
    bigger than a second's worth of tokens/min) would wait forever."""

    __slots__ = ("rate", "capacity", "level", "stamp")

    def __init__(self, per_minute: float, now: float) -> None:
        self.rate = per_minute / 60.0
        # One second's worth of burst: enough to absorb scheduling noise, small enough that a
        # burst of concurrent calls is spread out rather than fired at once.
        self.capacity = max(1.0, self.rate)
        self.level = self.capacity
        self.stamp = now

    def refill(self, now: float) -> None:
        if now > self.stamp:
            self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
            self.stamp = now

    def wait_for(self, amount: float) -> float:
        """Seconds until `amount` may be taken (0 when it may be taken now)."""
        need = min(amount, self.capacity)
        if self.level >= need:
            return 0.0
        return (need - self.level) / self.rate


class RateLimiter:
    """Requests/min and tokens/min, as token buckets. Callers queue in FIFO order (one lock), so a
    large request is not starved by a stream of small ones. Tokens are estimated before the call
    and corrected with the real usage after it (`settle`)."""

    def __init__(
        self,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
        *,
        clock: Clock = time.monotonic,
    ) -> None:
        now = clock()
        self._clock = clock
        self._requests = _Bucket(requests_per_minute, now) if requests_per_minute else None
        self._tokens = _Bucket(tokens_per_minute, now) if tokens_per_minute else None
        self._lock = asyncio.Lock()

    @property
    def active(self) -> bool:
        return self._requests is not None or self._tokens is not None

    def _delay(self, tokens: float) -> float:
        now = self._clock()
        delay = 0.0
        if self._requests is not None:
            self._requests.refill(now)
            delay = max(delay, self._requests.wait_for(1.0))
        if self._tokens is not None:
            self._tokens.refill(now)
            delay = max(delay, self._tokens.wait_for(tokens))
        return delay

    async def acquire(self, estimated_tokens: float = 0.0) -> None:
        async with self._lock:
            while True:
                delay = self._delay(estimated_tokens)
                if delay <= 0.0:
                    break
                await asyncio.sleep(delay)
            if self._requests is not None:
                self._requests.level -= 1.0
            if self._tokens is not None:
                self._tokens.level -= estimated_tokens

    def settle(self, estimated_tokens: float, actual_tokens: float) -> None:
        """Replace the estimate taken by `acquire` with what the call really used."""
        if self._tokens is not None:
            self._tokens.refill(self._clock())
            self._tokens.level = min(self._tokens.capacity, self._tokens.level + estimated_tokens - actual_tokens)


class CircuitBreaker:
    """Opens after `threshold` consecutive failed calls; while open (for `cooldown_s`) calls fail
    fast with JudgeUnavailable; after the cooldown exactly one call is let through as a probe
    (half-open): its success closes the breaker, its failure opens it for another cooldown."""

    CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"

    def __init__(self, threshold: int, cooldown_s: float, *, clock: Clock = time.monotonic) -> None:
        self.threshold = threshold
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._failures = 0
        self._opened_at: float | None = None
        self._probe_in_flight = False

    @property
    def state(self) -> str:
        if self._opened_at is None:
            return self.CLOSED
        if self._probe_in_flight or self._clock() - self._opened_at >= self.cooldown_s:
            return self.HALF_OPEN
        return self.OPEN

    @property
    def consecutive_failures(self) -> int:
        return self._failures

    def before_call(self, model: str = "judge") -> bool:
        """Admit a call or raise JudgeUnavailable. Returns True when the call is the half-open
        probe (the caller then makes a single attempt and must report its outcome)."""
        if self._opened_at is None:
            return False
        remaining = self.cooldown_s - (self._clock() - self._opened_at)
        if self._probe_in_flight or remaining > 0:
            wait = f"; next probe in {remaining:.1f}s" if remaining > 0 else "; a probe call is in flight"
            raise JudgeUnavailable(
                f"judge {model}: circuit breaker open after {self._failures} consecutive failed calls{wait}"
            )
        self._probe_in_flight = True
        return True

    def check(self, model: str = "judge") -> None:
        """For a call already admitted (retry attempts): fail fast if the breaker opened meanwhile."""
        if self._opened_at is not None and not self._probe_in_flight:
            remaining = self.cooldown_s - (self._clock() - self._opened_at)
            if remaining > 0:
                raise JudgeUnavailable(
                    f"judge {model}: circuit breaker opened after {self._failures} consecutive failed calls"
                )

    def record_success(self) -> None:
        self._failures = 0
        self._opened_at = None
        self._probe_in_flight = False

    def record_failure(self) -> None:
        self._failures += 1
        if self._probe_in_flight or self._failures >= self.threshold:
            self._opened_at = self._clock()
        self._probe_in_flight = False

    def release_probe(self) -> None:
        """The probe ended without a verdict on the judge (cancelled, or a client error): let the
        next caller probe instead."""
        self._probe_in_flight = False


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with full jitter (delay uniform in 0..min(cap, base * 2**attempt)).
    A server's Retry-After wins over the computed delay, still capped by `cap_s`."""

    base_s: float = 0.5
    cap_s: float = 30.0

    def delay(self, attempt: int, retry_after_s: float | None = None, rng: Callable[[], float] = random.random) -> float:
        if retry_after_s is not None:
            # A little jitter on top so that the many callers told the same Retry-After do not
            # return in one thundering herd.
            return min(self.cap_s, retry_after_s + rng() * min(1.0, 0.1 * retry_after_s))
        ceiling = min(self.cap_s, self.base_s * (2.0 ** min(attempt, 62)))
        return rng() * ceiling


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header: delta-seconds (fractions accepted) or an HTTP
    date. None when absent or unreadable; never negative."""
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        if when.tzinfo is None:  # "-0000" parses naive; HTTP dates are always GMT
            when = when.replace(tzinfo=timezone.utc)
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)
