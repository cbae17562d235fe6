"""The verdict cache shared by replicas (`JudgeConfig.cache_url`, a Redis URL), behind each
process's own LRU cache (cache.py): a context judged by one replica is not judged again by the
others. Optional: without it nothing changes.

Keys are the local cache's (a SHA-256 over model, prompt version, reference, query and context
text as sent), hex-encoded under `ctxprec:verdict:v1:`; a value is `1` or `0` (relevant or not)
followed by the reason, and expires after `TTL_S`, so the store holds what is recent.

A store that is slow or down costs judge calls, never a failed score or a stalled pipeline:

- a lookup waits `timeout_s` at most (one round trip: MGET of the contexts still missing) and
  any failure is a miss; stores run in the background, a bounded number at a time (more are
  skipped), so a score never waits on them;
- after `BREAKER_FAILURES` failures in a row the store is set aside for `BREAKER_COOLDOWN_S`
  (limits.CircuitBreaker, the judge's breaker): lookups and stores are skipped without a round
  trip until one probe succeeds.

Every lookup and store reports a `CacheEvent` (per operation: how many contexts, the outcome) to
the cache observer, so that the sidecar counts them without the scorer knowing Prometheus.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ctxprec.scorer.judge.cache import CachedVerdict
from ctxprec.scorer.judge.chat import JudgeUnavailable
from ctxprec.scorer.judge.limits import CircuitBreaker

log = logging.getLogger(__name__)

PREFIX = b"ctxprec:verdict:v1:"
TTL_S = 7 * 24 * 3600
BREAKER_FAILURES = 3
BREAKER_COOLDOWN_S = 5.0
MAX_PENDING_WRITES = 64
SCHEMES = ("redis://", "rediss://", "unix://")

# (operation, outcome) pairs a CacheEvent can carry.
READ_OUTCOMES = ("hit", "miss", "error", "skipped")
WRITE_OUTCOMES = ("ok", "error", "skipped")
OUTCOMES = tuple(("read", o) for o in READ_OUTCOMES) + tuple(("write", o) for o in WRITE_OUTCOMES)


@dataclass(frozen=True, slots=True)
class CacheEvent:
    """One lookup or store of the shared cache: `contexts` of them had `outcome`; `breaker_opened`
    when this failure set the store aside."""

    operation: str  # read | write
    outcome: str  # read: hit | miss | error | skipped; write: ok | error | skipped
    contexts: int
    breaker_opened: bool = False


CacheObserver = Callable[[CacheEvent], None]


def check_url(url: str) -> str:
    if not url.startswith(SCHEMES):
        raise ValueError(f"must be a Redis URL ({', '.join(s + '...' for s in SCHEMES)})")
    return url


class SharedVerdictCache:
    def __init__(self, url: str, *, timeout_s: float = 0.2, observer: CacheObserver | None = None,
                 client: Any = None) -> None:
        """`client`: a redis.asyncio.Redis already made (tests); else one is made from `url`."""
        check_url(url)
        if client is None:
            try:
                from redis.asyncio import Redis
                from redis.asyncio.retry import Retry
                from redis.backoff import NoBackoff
            except ImportError:
                raise ValueError("a shared verdict cache needs redis-py: pip install 'ctxprec[redis]'") from None
            # No retries inside the client: a failure is a miss now, and the breaker decides when to ask again.
            client = Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
                                    retry=Retry(NoBackoff(), 0), health_check_interval=0)
        self.client = client
        self.timeout_s = timeout_s
        self.observer = observer
        self.breaker = CircuitBreaker(BREAKER_FAILURES, BREAKER_COOLDOWN_S)
        self._writes: set[asyncio.Task[None]] = set()

    async def get_many(self, keys: Sequence[bytes]) -> dict[int, CachedVerdict]:
        """The verdicts found, by position in `keys`; never raises, waits `timeout_s` at most."""
        if not keys:
            return {}
        probe = self._admit()
        if probe is None:
            self._report("read", "skipped", len(keys))
            return {}
        try:
            values = await asyncio.wait_for(self.client.mget([PREFIX + key.hex().encode() for key in keys]),
                                            self.timeout_s)
        except Exception as exc:  # a store that is away or slow: every key is a miss
            self._failed("read", len(keys), exc)
            return {}
        self.breaker.record_success()
        found: dict[int, CachedVerdict] = {}
        for position, value in enumerate(values):
            verdict = _decode(value)
            if verdict is not None:
                found[position] = verdict
        if found:
            self._report("read", "hit", len(found))
        if len(found) < len(keys):
            self._report("read", "miss", len(keys) - len(found))
        return found

    def put_many(self, items: Sequence[tuple[bytes, CachedVerdict]]) -> None:
        """Store in the background; never waits, never raises."""
        if not items:
            return
        if len(self._writes) >= MAX_PENDING_WRITES or self.breaker.state == CircuitBreaker.OPEN:
            self._report("write", "skipped", len(items))
            return
        task = asyncio.get_running_loop().create_task(self._put(list(items)))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _put(self, items: list[tuple[bytes, CachedVerdict]]) -> None:
        if self._admit() is None:
            self._report("write", "skipped", len(items))
            return
        try:
            pipe = self.client.pipeline(transaction=False)
            for key, verdict in items:
                pipe.set(PREFIX + key.hex().encode(), _encode(verdict), ex=TTL_S)
            await asyncio.wait_for(pipe.execute(), max(self.timeout_s, 1.0))
        except Exception as exc:
            self._failed("write", len(items), exc)
            return
        self.breaker.record_success()
        self._report("write", "ok", len(items))

    async def aclose(self) -> None:
        for task in list(self._writes):
            task.cancel()
        await asyncio.gather(*self._writes, return_exceptions=True)
        try:
            await self.client.aclose()
        except Exception:  # closing a client whose store is gone
            log.debug("shared verdict cache: close failed", exc_info=True)

    # -- the breaker --

    def _admit(self) -> bool | None:
        """None when the store is set aside; else whether this call is the probe."""
        try:
            return self.breaker.before_call("shared verdict cache")
        except JudgeUnavailable:
            return None

    def _failed(self, operation: str, contexts: int, exc: BaseException) -> None:
        was_closed = self.breaker.state == CircuitBreaker.CLOSED
        self.breaker.record_failure()
        opened = self.breaker.state == CircuitBreaker.OPEN and was_closed
        if opened:
            log.warning("shared verdict cache unavailable (%s: %s); set aside for %.0fs, judging meanwhile",
                        type(exc).__name__, exc, BREAKER_COOLDOWN_S)
        self._report(operation, "error", contexts, breaker_opened=opened)

    def _report(self, operation: str, outcome: str, contexts: int, *, breaker_opened: bool = False) -> None:
        if self.observer is not None:
            self.observer(CacheEvent(operation, outcome, contexts, breaker_opened))


def _encode(verdict: CachedVerdict) -> bytes:
    return (b"1" if verdict.relevant else b"0") + verdict.reason.encode("utf-8", "surrogatepass")


def _decode(value: bytes | None) -> CachedVerdict | None:
    if not value or value[:1] not in (b"0", b"1"):
        return None  # absent, or not written by this version
    return CachedVerdict(value[:1] == b"1", value[1:].decode("utf-8", "replace"))
