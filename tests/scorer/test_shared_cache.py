"""The verdict cache shared by replicas, on a real redis-server: a context judged by one engine is
not judged again by another; the key covers model, prompt version, reference, query and context;
a store that is down or comes back costs judge calls, never a failed score, and sets the store
aside after a few failures (counted)."""
from __future__ import annotations

import time
from pathlib import Path
from typing import AsyncIterator

import pytest

from ctxprec.scorer.config import JudgeConfig
from ctxprec.scorer.engine import ContextPrecisionEngine, build_engine
from ctxprec.scorer.judge.shared_cache import PREFIX, TTL_S, CacheEvent, SharedVerdictCache

from tests.helpers.redis_server import RedisServer

CONTEXTS = ["[relevant] reset it under settings", "[irrelevant] spring sale", "[relevant] security tab"]


@pytest.fixture
def redis_server(tmp_path: Path) -> AsyncIterator[RedisServer]:
    server = RedisServer(tmp_path / "redis.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _engine(stub_url: str, cache_url: str, events: list[CacheEvent], *, model: str = "openai/stub"
            ) -> ContextPrecisionEngine:
    config = JudgeConfig(model=model, api_base=stub_url, api_key="test", structured_output="json_schema",
                         cache_url=cache_url)
    return build_engine(config, cache_observer=events.append)


def _outcomes(events: list[CacheEvent], operation: str) -> dict[str, int]:
    totals: dict[str, int] = {}
    for event in events:
        if event.operation == operation:
            totals[event.outcome] = totals.get(event.outcome, 0) + event.contexts
    return totals


async def _settle(engine: ContextPrecisionEngine) -> None:
    """Stores run in the background: wait for them (a test of what another replica then finds)."""
    import asyncio

    shared = engine.judge.shared
    while shared._writes:
        await asyncio.gather(*shared._writes, return_exceptions=True)


@pytest.mark.slow  # a real redis-server
async def test_a_context_judged_by_one_replica_is_not_judged_by_another(redis_server: RedisServer,
                                                                       stub_judge) -> None:
    events_a: list[CacheEvent] = []
    events_b: list[CacheEvent] = []
    a = _engine(stub_judge.url, redis_server.url, events_a)
    b = _engine(stub_judge.url, redis_server.url, events_b)
    try:
        first = await a.score("how do I reset my password?", CONTEXTS, output="open settings")
        await _settle(a)
        judged = stub_judge.stats.requests
        assert first.usage.cached_contexts == 0 and judged >= 1
        again = await b.score("how do I reset my password?", CONTEXTS, output="open settings")
        assert stub_judge.stats.requests == judged  # nothing sent to the judge
        assert again.usage.cached_contexts == 3 and all(v.cached for v in again.verdicts)
        assert [v.relevant for v in again.verdicts] == [v.relevant for v in first.verdicts]
        assert _outcomes(events_a, "write") == {"ok": 3}
        assert _outcomes(events_b, "read") == {"hit": 3}
        # Another query, another reference, another model: each is judged anew.
        await b.score("how do I change my e-mail?", CONTEXTS, output="open settings")
        await b.score("how do I reset my password?", CONTEXTS, output="call support")
        other = _engine(stub_judge.url, redis_server.url, [], model="openai/stub-2")
        try:
            await other.score("how do I reset my password?", CONTEXTS, output="open settings")
            await _settle(other)
        finally:
            await other.aclose()
        assert stub_judge.stats.requests == judged + 3
        await _settle(b)
        # What the store holds: four samples of three contexts, as hashed keys (no text), with an expiry.
        keys = await a.judge.shared.client.keys(PREFIX + b"*")
        assert len(keys) == 4 * 3 and all(len(k) == len(PREFIX) + 64 for k in keys)
        assert 0 < await a.judge.shared.client.ttl(keys[0]) <= TTL_S
    finally:
        await a.aclose()
        await b.aclose()


@pytest.mark.slow  # a real redis-server
async def test_a_store_that_is_down_costs_judge_calls_never_a_score(redis_server: RedisServer, stub_judge) -> None:
    events: list[CacheEvent] = []
    engine = _engine(stub_judge.url, redis_server.url, events)
    shared = engine.judge.shared
    assert isinstance(shared, SharedVerdictCache)
    shared.breaker.cooldown_s = 0.5  # the test's own: the default rests the store for seconds
    try:
        await engine.score("warm the connection", CONTEXTS, output="x")
        await _settle(engine)
        redis_server.stop()
        before = stub_judge.stats.requests
        started = time.monotonic()
        for i in range(8):
            result = await engine.score(f"question {i} while the store is down", CONTEXTS, output="x")
            assert len(result.verdicts) == 3
        await _settle(engine)
        assert time.monotonic() - started < 8 * 0.5  # no store timeouts piling up per score
        assert stub_judge.stats.requests - before == 8
        reads = _outcomes(events, "read")
        assert reads.get("error", 0) >= 3 and reads.get("skipped", 0) > 0
        assert sum(1 for e in events if e.breaker_opened) == 1  # set aside once, not per failure
        # Back again: after the cooldown one probe closes the breaker and the store is used.
        redis_server.start()
        time.sleep(0.6)
        await engine.score("a question after the store came back", CONTEXTS, output="x")
        await _settle(engine)
        count = stub_judge.stats.requests
        fresh: list[CacheEvent] = []
        other = _engine(stub_judge.url, redis_server.url, fresh)
        try:
            again = await other.score("a question after the store came back", CONTEXTS, output="x")
        finally:
            await other.aclose()
        assert stub_judge.stats.requests == count and again.usage.cached_contexts == 3
    finally:
        await engine.aclose()


def test_the_url_must_name_a_redis_store() -> None:
    with pytest.raises(ValueError, match="cache_url: must be a Redis URL"):
        JudgeConfig(model="openai/x", cache_url="http://localhost:6379")
    assert JudgeConfig(model="openai/x", cache_url=" ").cache_url is None
    assert "hunter2" not in repr(JudgeConfig(model="openai/x", cache_url="redis://:hunter2@h:6379/0"))
