"""AdaptiveLimit against simulated servers (no sleeping: latencies are computed, the clock is
injected): one that serves one request at a time, one whose latency does not grow with load."""
from __future__ import annotations

import asyncio
import time
from typing import Callable

import pytest

from ctxprec.scorer.judge.limits import AdaptiveLimit


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run(limit: AdaptiveLimit, clock: Clock, service_s: float, *, one_slot: bool, answers: int,
        latency: Callable[[int], float] | None = None) -> list[int]:
    """Answers `answers` requests of 100 units each, always keeping as many in flight as the
    limit allows (the first ones sent together, with 1, 2, ... in flight); a one-slot server
    serves them in turn (latency: its queue ahead plus its own service time), another answers
    each in `service_s` (or `latency(i)` for the i-th). Returns the limit in force at each answer."""
    pending: list[tuple[float, int, float]] = []  # (answered at, sent with, sent at)
    free_at = 0.0
    sent = 0
    seen = []
    while len(seen) < answers:
        while len(pending) < limit.allowed:
            own = latency(sent) if latency is not None else service_s
            sent += 1
            if one_slot:
                free_at = max(clock.now, free_at) + own
                done = free_at
            else:
                done = clock.now + own
            pending.append((done, len(pending) + 1, clock.now))
        pending.sort()
        done, load, sent_at = pending.pop(0)
        clock.now = done
        limit.answered(done - sent_at, 100.0, load)
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
    seen = run(limit, clock, 0.0, one_slot=False, answers=200,
               latency=lambda i: (0.2, 0.5, 0.3, 0.45, 0.25)[i % 5])  # 0.2 to 0.5 s whatever the load
    assert seen[-1] == 16


def test_a_server_that_scales_gets_the_ceiling_within_two_round_trips() -> None:
    clock = Clock()
    limit = AdaptiveLimit(32, clock=clock)
    seen = run(limit, clock, 2.0, one_slot=False, answers=60)
    # One alone, then eight at once: their answers at loads 2, 3, 4 open the ceiling. The round
    # trips are what a short batch pays for finding the pace.
    assert seen[:5] == [8, 8, 16, 24, 32] and clock.now >= 2 * 2.0
    assert seen[-1] == 32


def test_a_hosted_judge_starts_at_the_ceiling() -> None:
    clock = Clock()
    limit = AdaptiveLimit(32, initial=32, clock=clock)
    assert limit.allowed == 32
    assert run(limit, clock, 2.0, one_slot=False, answers=100)[-1] == 32


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
    limit = AdaptiveLimit(64)
    assert limit.allowed == 1
    limit.answered(1.0, 100.0, 1)
    assert limit.allowed == 8  # one in flight was fine: eight may be
    for _ in range(10):
        limit.answered(1.0, 100.0, 1)  # only one in flight: the limit of 8 was not tested
    assert limit.allowed == 8
    limit.answered(1.0, 100.0, 4)
    assert limit.allowed == 32


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


def test_the_clients_own_delay_is_not_taken_for_the_judges_queue() -> None:
    # A judge at a constant 1 s, read by a busy client whose own delay grows with the answers it
    # handles (0.05 s per request in flight): as measured, the latency looks like a queue.
    def run_with(subtract: bool) -> list[int]:
        clock = Clock()
        limit = AdaptiveLimit(32, clock=clock)
        seen = []
        for _ in range(300):
            load = limit.allowed
            client_s = 0.05 * load
            clock.now += 1.0 / load
            limit.answered(1.0 + client_s, 100.0, load, client_s=client_s if subtract else 0.0)
            seen.append(limit.allowed)
        return seen

    assert run_with(subtract=True)[-1] == 32
    assert max(run_with(subtract=False)[-100:]) < 32  # the comparison: the same delay, read as the judge's


async def test_the_loop_lag_is_measured_while_requests_are_in_flight_only() -> None:
    limit = AdaptiveLimit(4)
    assert limit.lag._handle is None
    await limit.acquire()
    for _ in range(20):  # the loop blocked 20 ms at a time, as by a burst of answers to parse
        time.sleep(0.02)
        await asyncio.sleep(0)
    assert limit.lag.lag_s >= 0.005 and limit.lag.client_delay_s == 2 * limit.lag.lag_s
    limit.release()
    assert limit.lag._handle is None  # nothing in flight: no timer
