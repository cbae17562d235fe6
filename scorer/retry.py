"""How everything in ctxprec that retries waits between attempts: one policy, on tenacity.

Exponential backoff with jitter: attempt n (0-based) waits a delay drawn uniformly between
(1 - jitter) and 1 times min(cap, base * 2**n), so that many clients failing together do not come
back together. Full jitter (1.0, the default) spreads them most; a sender that must ride out a
short outage with few attempts takes less (0.5 keeps every wait at least half its step). A
server's Retry-After wins over the computed delay (plus a little jitter, so that the callers told
the same Retry-After do not return in one herd), still capped.

`Backoff.retrying(...)` is the tenacity loop for "try until it works or we give up" (the span
forwarder, Kafka connections and sends); `Backoff.delay(...)` serves loops that count attempts
themselves because each attempt also consults something else (the judge client's circuit
breaker, the Kafka read loop)."""
from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from datetime import timezone
from email.utils import parsedate_to_datetime
from typing import Any, Callable

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    stop_never,
)


@dataclass(frozen=True, slots=True)
class Backoff:
    base_s: float = 0.5
    cap_s: float = 30.0
    jitter: float = 1.0

    def delay(self, attempt: int, retry_after_s: float | None = None,
              rng: Callable[[], float] = random.random) -> float:
        """Seconds to wait after failed attempt `attempt` (0-based)."""
        if retry_after_s is not None:
            return min(self.cap_s, retry_after_s + rng() * min(1.0, 0.1 * retry_after_s))
        ceiling = min(self.cap_s, self.base_s * (2.0 ** min(attempt, 62)))
        return ceiling * (1.0 - self.jitter + self.jitter * rng())

    def wait(self, state: RetryCallState) -> float:
        """tenacity's `wait`: this policy, with the Retry-After an exception carries
        (`retry_after_s`) when it has one."""
        error = state.outcome.exception() if state.outcome is not None and state.outcome.failed else None
        return self.delay(state.attempt_number - 1, getattr(error, "retry_after_s", None))

    def retrying(self, *, retry_on: type[BaseException] | tuple[type[BaseException], ...],
                 attempts: int | None = None, on_retry: Callable[[RetryCallState], Any] | None = None
                 ) -> AsyncRetrying:
        """`async for attempt in backoff.retrying(...): with attempt: ...`: retries on `retry_on`
        for at most `attempts` tries (forever when None), re-raising the last error."""
        return AsyncRetrying(
            retry=retry_if_exception_type(retry_on),
            stop=stop_after_attempt(attempts) if attempts is not None else stop_never,
            wait=self.wait,
            before_sleep=on_retry,
            reraise=True,
        )


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
