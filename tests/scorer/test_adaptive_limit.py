"""AdaptiveLimit against simulated servers (no sleeping: latencies are computed, the clock is
injected): one that serves one request at a time, one whose latency does not grow with load."""
from __future__ import annotations

import asyncio

import pytest

from ctxprec.scorer.judge.limits import AdaptiveLimit


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run(limit: AdaptiveLimit, clock: Clock, service_s: float, *, one_slot: bool, answers: int) -> list[int]:
    """Answers `answers` requests of 100 units each, always keeping as many in flight as the
    limit allows; a one-slot server's latency is service time x requests in flight. Returns
    the limit in force at each answer."""
    seen = []
    for _ in range(answers):
        in_flight = limit.allowed
        latency = service_s * (in_flight if one_slot else 1.0)
        clock.now += latency / in_flight
        limit.answered(latency, 100.0, in_flight)
        seen.append(limit.allowed)
    return seen


def test_a_one_slot_server_is_kept_to_three_in_flight_at_most() -> None:
    clock = Clock()
    limit = AdaptiveLimit(16, clock=clock)
    seen = run(limit, clock, 2.0, one_slot=True, answers=200)
    assert max(seen[20:]) <= 3 and min(seen) >= 1  # an answer waits for two others at most


def test_jitter_that_does_not_grow_with_load_does_not_hold_the_limit_down() -> None:
    clock = Clock()
    limit = AdaptiveLimit(16, clock=clock)
    for i in range(200):
        in_flight = limit.allowed
        latency = (0.2, 0.5, 0.3, 0.45, 0.25)[i % 5]  # 0.2 to 0.5 s whatever the load
        clock.now += latency / in_flight
        limit.answered(latency, 100.0, in_flight)
    assert limit.allowed == 16


def test_a_server_that_scales_gets_the_ceiling_within_a_few_round_trips() -> None:
    clock = Clock()
    limit = AdaptiveLimit(16, clock=clock)
    seen = run(limit, clock, 2.0, one_slot=False, answers=40)
    assert seen[:1] == [2] and 16 in seen[:16] and seen[-1] == 16


def test_a_timeout_halves_the_limit_once_per_latency() -> None:
    clock = Clock()
    limit = AdaptiveLimit(16, clock=clock)
    run(limit, clock, 1.0, one_slot=False, answers=30)
    assert limit.allowed == 16
    limit.overloaded(30.0)
    limit.overloaded(30.0)  # the same queue, answered at once: counts once
    assert limit.allowed == 8
    clock.now += 31
    limit.overloaded(30.0)
    assert limit.allowed == 4


def test_answers_that_did_not_use_the_limit_do_not_raise_it() -> None:
    limit = AdaptiveLimit(16)
    limit.answered(1.0, 100.0, 1)
    assert limit.allowed == 2
    for _ in range(10):
        limit.answered(1.0, 100.0, 1)  # only one in flight: the limit of 2 was not tested
    assert limit.allowed == 2


def test_without_adaptation_the_ceiling_holds() -> None:
    limit = AdaptiveLimit(16, adaptive=False)
    limit.overloaded(1.0)
    limit.answered(100.0, 1.0, 16)
    assert limit.allowed == 16


async def test_waiters_are_served_in_order_and_a_cancelled_one_gives_its_turn_on() -> None:
    limit = AdaptiveLimit(1)
    assert await limit.acquire() == 1
    order: list[str] = []

    async def take(name: str) -> None:
        await limit.acquire()
        order.append(name)

    first = asyncio.ensure_future(take("first"))
    second = asyncio.ensure_future(take("second"))
    third = asyncio.ensure_future(take("third"))
    await asyncio.sleep(0)
    second.cancel()
    limit.release()
    await asyncio.sleep(0)
    limit.release()
    await asyncio.gather(first, third, second, return_exceptions=True)
    assert order == ["first", "third"] and limit.in_flight == 1
    with pytest.raises(asyncio.CancelledError):
        await second
