"""Limits that keep the judge within a provider's quotas and stop us hammering a judge that is down
or queueing: a requests/tokens-per-minute rate limiter over token buckets, the requests in flight
(adapted to the judge's latency), and a circuit breaker. (Backoff between attempts is
scorer/retry.py's.)

Both take an injectable clock so that their arithmetic is testable without sleeping."""
from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Callable

from ctxprec.scorer.judge.chat import JudgeUnavailable

Clock = Callable[[], float]


class TokenBucket:
    """A rate per minute with a burst of `burst_s` seconds' worth (at least one). The one token
    bucket of ctxprec: the judge's requests and tokens per minute, the sidecar's scores per
    minute.

    It may go into debt (`take`): a request larger than the burst is let through when the bucket
    is full, and the debt delays the next ones. Without debt such a request (a prompt bigger than
    a second's worth of tokens/min) would wait forever."""

    __slots__ = ("rate", "capacity", "level", "stamp", "_clock")

    def __init__(self, per_minute: float, *, burst_s: float = 1.0, clock: Clock = time.monotonic) -> None:
        self.rate = per_minute / 60.0
        self.capacity = max(1.0, self.rate * burst_s)
        self.level = self.capacity
        self._clock = clock
        self.stamp = clock()

    def refill(self) -> None:
        now = self._clock()
        if now > self.stamp:
            self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
            self.stamp = now

    def wait_for(self, amount: float = 1.0) -> float:
        """Seconds until `amount` may be taken (0 when it may be taken now)."""
        self.refill()
        need = min(amount, self.capacity)
        if self.level >= need:
            return 0.0
        return (need - self.level) / self.rate

    def take(self, amount: float = 1.0) -> None:
        """Takes `amount`, into debt if need be (callers wait with `wait_for` first)."""
        self.level -= amount

    def try_take(self, amount: float = 1.0) -> bool:
        """Takes `amount` if it is there now."""
        if self.wait_for(amount) > 0.0 or self.level < amount:
            return False
        self.level -= amount
        return True

    def give_back(self, amount: float = 1.0) -> None:
        self.level = min(self.capacity, self.level + amount)


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
        # One second's worth of burst: enough to absorb scheduling noise, small enough that a
        # burst of concurrent calls is spread out rather than fired at once.
        self._requests = TokenBucket(requests_per_minute, clock=clock) if requests_per_minute else None
        self._tokens = TokenBucket(tokens_per_minute, clock=clock) if tokens_per_minute else None
        self._lock = asyncio.Lock()

    @property
    def active(self) -> bool:
        return self._requests is not None or self._tokens is not None

    def _delay(self, tokens: float) -> float:
        delay = 0.0
        if self._requests is not None:
            delay = max(delay, self._requests.wait_for(1.0))
        if self._tokens is not None:
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
                self._requests.take(1.0)
            if self._tokens is not None:
                self._tokens.take(estimated_tokens)

    def settle(self, estimated_tokens: float, actual_tokens: float) -> None:
        """Replace the estimate taken by `acquire` with what the call really used."""
        if self._tokens is not None:
            self._tokens.refill()
            self._tokens.level = min(self._tokens.capacity, self._tokens.level + estimated_tokens - actual_tokens)


class CircuitBreaker:
    """Opens after `threshold` consecutive failures; while open (for `cooldown_s`) calls fail
    fast with JudgeUnavailable; after the cooldown exactly one call is let through as a probe
    (half-open): its success closes the breaker, its failure opens it for another cooldown.

    A failure is a call that failed after its retries, or one attempt that timed out
    (`record_timeout`): a judge that hangs costs a whole timeout per attempt, so its timeouts
    count as they happen, across calls, rather than once per call after all its retries (ten
    calls of five attempts at 30 s each before it opened, with calls queued behind them)."""

    CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"

    def __init__(self, threshold: int, cooldown_s: float, *, clock: Clock = time.monotonic) -> None:
        self.threshold = threshold
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._failures = 0
        self._timeouts = 0  # of the consecutive failures, how many were timed-out attempts
        self._opened_at: float | None = None
        self._probe_in_flight = False

    @property
    def state(self) -> str:
        if self._opened_at is None:
            return self.CLOSED
        if self._probe_in_flight or self._clock() - self._opened_at >= self.cooldown_s:
            return self.HALF_OPEN
        return self.OPEN

    def _why(self) -> str:
        if self._timeouts and self._timeouts == self._failures:
            return f"{self._failures} consecutive timeouts"
        return f"{self._failures} consecutive failures"

    def before_call(self, model: str = "judge") -> bool:
        """Admit a call or raise JudgeUnavailable. Returns True when the call is the half-open
        probe (the caller then makes a single attempt and must report its outcome)."""
        if self._opened_at is None:
            return False
        remaining = self.cooldown_s - (self._clock() - self._opened_at)
        if self._probe_in_flight or remaining > 0:
            wait = f"; next probe in {remaining:.1f}s" if remaining > 0 else "; a probe call is in flight"
            raise JudgeUnavailable(f"judge {model}: circuit breaker open after {self._why()}{wait}")
        self._probe_in_flight = True
        return True

    def check(self, model: str = "judge") -> None:
        """For a call already admitted (retry attempts, a call that waited for its slot): fail
        fast if the breaker opened meanwhile."""
        if self._opened_at is not None and not self._probe_in_flight:
            remaining = self.cooldown_s - (self._clock() - self._opened_at)
            if remaining > 0:
                raise JudgeUnavailable(f"judge {model}: circuit breaker opened after {self._why()}")

    @property
    def open(self) -> bool:
        """Open and not letting anything through (a probe in flight counts as open)."""
        return self._opened_at is not None and (
            self._probe_in_flight or self._clock() - self._opened_at < self.cooldown_s)

    def record_success(self) -> None:
        self._failures = 0
        self._timeouts = 0
        self._opened_at = None
        self._probe_in_flight = False

    def record_failure(self) -> None:
        self._failures += 1
        if self._probe_in_flight or self._failures >= self.threshold:
            self._opened_at = self._clock()
        self._probe_in_flight = False

    def record_timeout(self, *, probe: bool = False) -> None:
        """One attempt timed out. The half-open probe's call reports its own outcome."""
        if probe:
            return
        self._timeouts += 1
        self._failures += 1
        if self._failures >= self.threshold and self._opened_at is None:
            self._opened_at = self._clock()

    def release_probe(self) -> None:
        """The probe ended without a verdict on the judge (cancelled, or a client error): let the
        next caller probe instead."""
        self._probe_in_flight = False


class LoopLag:
    """How late this process's event loop runs what is due: the client-side part of a judge
    answer's latency. An answer that arrived is read only when the loop gets to it, so on a busy
    client (two cores, a pod with half a core, many answers at once) latency grows with the load
    even though the judge does not queue; read as the judge's queue, that held the limit down
    against a judge whose latency never changed. A timer every PERIOD_S, only while requests are
    in flight, measures how late it fires (smoothed); an answer passes through the loop's queue
    about HOPS times (the socket's data, then the task waiting for it), so HOPS x the lag is taken
    off each answer's latency before it is compared by load."""

    PERIOD_S = 0.02
    HOPS = 2.0
    SMOOTHING = 0.2

    def __init__(self) -> None:
        self.lag_s = 0.0
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0

    @property
    def client_delay_s(self) -> float:
        return self.HOPS * self.lag_s

    def start(self) -> None:
        if self._handle is None:
            loop = asyncio.get_running_loop()
            self._due = loop.time() + self.PERIOD_S
            self._handle = loop.call_at(self._due, self._tick, loop)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        late = max(0.0, loop.time() - self._due)
        self.lag_s += self.SMOOTHING * (late - self.lag_s)
        self._due = loop.time() + self.PERIOD_S
        self._handle = loop.call_at(self._due, self._tick, loop)


class AdaptiveLimit:
    """How many judge requests may be in flight: at most `ceiling`, and with `adaptive` fewer
    while the judge's latency says it is queueing them.

    A server that answers one request at a time (llama.cpp's, llama-cpp-python's, a small vLLM)
    queues the others, and each one's latency grows with the requests in flight; past the
    timeout they are abandoned while the server still works on them. A hosted API's latency
    varies too, but not with the requests in flight. So what is compared is latency by load:
    for each answer, its latency less the client's own delay (`LoopLag`) per unit of work
    (prompt tokens / 10 + completion tokens: writing a token costs about ten times reading one,
    so large and small requests compare), averaged (EWMA) per number of requests in flight when
    it was sent (`by_load`):

    - the base is the average at the lowest load seen; while it has fewer than MIN_SAMPLES
      answers, LOOSE_TOLERANCE stands for TOLERANCE in the decrease below (one answer may have
      been a lucky one);
    - until the first decrease (slow start), a load whose average is within TOLERANCE x the base
      lets GROWTH x that load in flight: the requests sent together at the start (loads 1..n)
      answer together, and a judge that took n at once without slowing is asked for GROWTH x n
      a round trip later; after it, an answer sent with the limit in use raises it by 1/limit
      (one a round trip);
    - once a load above the base has MIN_SAMPLES answers and its average is past the tolerance
      x the base, the limit is scaled by TOLERANCE x base / that average (at most halved); on a
      timeout, a 429 or a 503 it is halved. After a decrease there is none again for one
      latency, so a burst of answers from the same queue counts once.

    The limit starts at `initial`: INITIAL for a judge that may answer one at a time (a server
    on the network or this machine), the ceiling for a hosted API (factory.py decides), whose
    latency does not depend on our load. Against a one-slot server (latency proportional to the
    load) the limit settles between 1 and 3 (between 1 and 2 once the base has its answers);
    against an API whose latency does not grow with load, however much it varies, it reaches
    `ceiling` within two round trips. Waiters are served in arrival order."""

    TOLERANCE = 1.5
    LOOSE_TOLERANCE = 2.0
    SMOOTHING = 0.3
    MIN_SAMPLES = 3
    INITIAL = 1
    GROWTH = 8

    def __init__(self, ceiling: int, *, adaptive: bool = True, initial: int | None = None,
                 clock: Clock = time.monotonic) -> None:
        self.ceiling = ceiling
        self.adaptive = adaptive
        start = self.INITIAL if initial is None else initial
        self.limit = float(max(1, min(ceiling, start))) if adaptive else float(ceiling)
        self.in_flight = 0
        self.slow_start = adaptive
        self._clock = clock
        self.by_load: dict[int, float] = {}  # requests in flight when sent -> EWMA unit latency
        self.alone_s: float | None = None  # EWMA latency in seconds of answers sent alone
        self.lag = LoopLag()
        self._samples: dict[int, int] = {}
        self._over = 0  # answers over the bound since the last decrease
        self._hold_until = 0.0
        self._waiters: deque[asyncio.Future[int]] = deque()

    @property
    def allowed(self) -> int:
        return max(1, min(self.ceiling, int(self.limit)))

    @property
    def base(self) -> float | None:
        return self.by_load[min(self.by_load)] if self.by_load else None

    async def acquire(self) -> int:
        """Wait for a slot; returns the requests in flight with this one (what it tests)."""
        if self.in_flight < self.allowed and not self._waiters:
            self._take()
            return self.in_flight
        waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            # The load when granted: waiters granted together must not all report the last one's.
            return await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._release_slot()  # granted and cancelled at once: hand the slot on
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        self._release_slot()

    def _take(self) -> None:
        self.in_flight += 1
        if self.adaptive:
            self.lag.start()  # only while something is in flight: an idle sidecar wakes for nothing

    def _release_slot(self) -> None:
        self.in_flight -= 1
        self._wake()
        if self.in_flight == 0:
            self.lag.stop()

    def _wake(self) -> None:
        while self._waiters and self.in_flight < self.allowed:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self._take()
                waiter.set_result(self.in_flight)

    def answered(self, latency_s: float, units: float, sent_with: int, *, client_s: float | None = None) -> None:
        """A usable answer after `latency_s` for `units` of work, sent with `sent_with` requests
        in flight (itself included). `client_s`: the part of the latency spent in this process
        (default: what `lag` measures now)."""
        if sent_with <= 1:
            self.alone_s = latency_s if self.alone_s is None else self.alone_s + self.SMOOTHING * (latency_s - self.alone_s)
        if not self.adaptive:
            return
        client = self.lag.client_delay_s if client_s is None else client_s
        # Never below a tenth: a lag measured in a burst must not make a slow answer look instant.
        server_s = max(latency_s - client, latency_s * 0.1)
        unit = server_s / max(units, 1.0)
        load = max(1, sent_with)
        previous = self.by_load.get(load)
        average = unit if previous is None else previous + self.SMOOTHING * (unit - previous)
        self.by_load[load] = average
        self._samples[load] = self._samples.get(load, 0) + 1
        lowest = min(self.by_load)
        base = self.by_load[lowest]
        if average <= self.TOLERANCE * base:
            if self.slow_start:
                grown = min(float(self.ceiling), float(load * self.GROWTH))
                if grown > self.limit:
                    self.limit = grown
                    self._wake()
            elif load >= self.allowed:
                self.limit = min(float(self.ceiling), self.limit + 1.0 / self.limit)
                self._wake()
            return
        # A base of few answers may be one lucky one: allow more until it has MIN_SAMPLES.
        tolerance = self.TOLERANCE if self._samples[lowest] >= self.MIN_SAMPLES else self.LOOSE_TOLERANCE
        bound = tolerance * base
        if load > lowest and average > bound:
            # Answers over the bound at any load above the base count together: the requests
            # sent at once answer at loads 2, 3, 4... one each, and a one-slot server shows in
            # all of them.
            self._over += 1
            if self._over >= self.MIN_SAMPLES and self._clock() >= self._hold_until:
                self._decrease(max(0.5, bound / average), latency_s)

    def queue_allowance(self, sent_with: int) -> float:
        """Seconds a request sent with `sent_with` in flight may wait, beyond its own timeout,
        for the requests of ours ahead of it: a server that answers one at a time serves them
        first, each in about the latency seen alone. What it spends in the server's queue is
        then not taken for a hung request (nor abandoned, to be sent again behind the others)."""
        if self.alone_s is None or sent_with <= 1:
            return 0.0
        return (sent_with - 1) * self.alone_s

    def overloaded(self, latency_s: float) -> None:
        """A timeout, a 429 or a 503: the judge has more than it can take."""
        if self.adaptive and self._clock() >= self._hold_until:
            self._decrease(0.5, latency_s)

    def _decrease(self, factor: float, latency_s: float) -> None:
        self._over = 0
        self.slow_start = False
        self.limit = max(1.0, self.limit * factor)
        self._hold_until = self._clock() + latency_s
