"""Every retrieval reaching the gate ends in exactly one decision, counted once."""
from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
from typing import Any

from ctxprec.collector.components import shutdown
from ctxprec.collector.memory import anonymous_rss_bytes
from ctxprec.collector.exporters.fanout import ResultFanout
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.model import (
    Decision,
    Outcome,
    PendingAck,
    Retrieval,
    RetrievedContext,
)
from ctxprec.collector.sampling.decide import (
    DailyBudget,
    RecentKeys,
    RetrievalGate,
    RssGuard,
    score_throttle,
)
from ctxprec.collector.sampling.sampler import Sampler, SamplingRule
from ctxprec.collector.scoring.identity import ScorerIdentity
from ctxprec.collector.scoring.workers import ScoringWorkers
from ctxprec.scorer.config import JudgeConfig
from ctxprec.scorer.engine import build_engine

from tests.helpers.rag_traces import DecisionLog

# Low 8 bytes zero: sampled at any rate > 0. Low 8 bytes max: sampled only at rate 1.
LUCKY = "ab" * 8 + "00" * 8
UNLUCKY = "ab" * 8 + "ff" * 8


class FakeClock:
    def __init__(self, start: float = 1_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def retrieval(span: int, *, trace: str = LUCKY, service: str = "svc", contexts: list[str] | None = None,
              attributes: dict[str, Any] | None = None) -> Retrieval:
    return Retrieval(trace_id=trace, span_id=f"{span:016x}", service=service, query="reset password",
                     contexts=[RetrievedContext(c) for c in (contexts if contexts is not None else ["reset your password"])],
                     attributes=attributes or {})


def make_gate(*, queue_size: int = 100, rate: float = 1.0, rules: list[SamplingRule] | None = None,
              log: list[tuple[str, Decision, Any]] | None = None,
              **kwargs: Any) -> tuple[RetrievalGate, ScoringWorkers, Metrics]:
    """`log` gets (span id, decision, attributes the span write-back would write) per decision."""
    metrics = Metrics()
    engine = build_engine(JudgeConfig(model="local"))
    identity = ScorerIdentity.of_engine(engine)
    fanout = ResultFanout(metrics, [DecisionLog(log, identity)] if log is not None else [])
    # Workers are never started here: the queue fills and stays full, which is what we test.
    workers = ScoringWorkers(engine, downstream=fanout, identity=identity, queue_size=queue_size, workers=1,
                             metrics=metrics)
    gate = RetrievalGate(sampler=Sampler(rate, rules), queue=workers, decisions=fanout, **kwargs)
    return gate, workers, metrics


def sample_count(metrics: Metrics, service: str, decision: str) -> float:
    value = metrics.registry.get_sample_value("ctxprec_samples_total", {"service": service, "decision": decision})
    return value or 0.0


async def test_each_path_gives_exactly_one_decision() -> None:
    log: list[tuple[str, Decision, Any]] = []
    gate, workers, metrics = make_gate(
        queue_size=1, rate=0.5, rules=[SamplingRule(rate=0.0, service="muted")], log=log)
    gate.submit(retrieval(1, trace=UNLUCKY))                  # hash above the rate
    gate.submit(retrieval(2, service="muted"))                # a rule excludes it
    gate.submit(retrieval(3, contexts=[]))
    gate.submit(retrieval(4, contexts=["  ", ""]))
    gate.submit(retrieval(5))                                 # queued
    gate.submit(retrieval(5))                                 # same trace+span again
    gate.submit(retrieval(6))                                 # queue (size 1) is full
    gate.not_sampled("svc", 3)

    decided = {(span, d) for span, d, _ in log}
    assert decided == {
        (f"{1:016x}", Decision.NOT_SAMPLED), (f"{2:016x}", Decision.FILTERED), (f"{3:016x}", Decision.NO_CONTEXTS),
        (f"{4:016x}", Decision.NO_CONTEXTS), (f"{5:016x}", Decision.DUPLICATE), (f"{6:016x}", Decision.OVERLOADED)}
    assert len(log) == 6 and all(attrs is None for _, _, attrs in log)
    assert workers.depth == 1
    assert sample_count(metrics, "svc", "not_sampled") == 4
    assert sample_count(metrics, "muted", "filtered") == 1
    assert sample_count(metrics, "svc", "overloaded") == 1
    assert sample_count(metrics, "svc", "duplicate") == 1

    # Shutting down: the queued one is decided failed/shutdown, later arrivals too.
    await shutdown(workers, 0.1)
    gate.closed = True
    gate.submit(retrieval(7))
    cut = [(span, d, attrs) for span, d, attrs in log if d is Decision.FAILED]
    assert [s for s, _, _ in cut] == [f"{5:016x}", f"{7:016x}"]
    assert all(attrs["error.type"] == "shutdown" for _, _, attrs in cut)
    assert sample_count(metrics, "svc", "failed") == 2


async def test_sample_rate_applied_is_recorded_on_the_retrieval() -> None:
    gate, workers, _ = make_gate(rate=0.25, rules=[SamplingRule(rate=0.75, attributes={"retriever": "kb"})])
    a, b = retrieval(1), retrieval(2, attributes={"retriever": "kb"})
    gate.submit(a)
    gate.submit(b)
    assert (a.sample_rate, b.sample_rate) == (0.25, 0.75)
    assert workers.depth == 2


async def test_throttle_is_a_token_bucket_per_minute() -> None:
    clock = FakeClock()
    log: list[tuple[str, Decision, Any]] = []
    gate, workers, metrics = make_gate(throttle=score_throttle(60, clock=clock), log=log)  # 1/s, burst 10
    for i in range(12):
        gate.submit(retrieval(i))
    assert workers.depth == 10
    assert [d for _, d, _ in log] == [Decision.THROTTLED, Decision.THROTTLED]
    clock.now += 1.0
    gate.submit(retrieval(100))
    gate.submit(retrieval(101))
    assert workers.depth == 11
    assert sample_count(metrics, "svc", "throttled") == 3
    await shutdown(workers, 0)


async def test_daily_budget_stops_scoring_until_the_next_utc_day() -> None:
    day = dt.datetime(2026, 11, 29, 23, 59, tzinfo=dt.timezone.utc).timestamp()
    clock = FakeClock(day)
    budget = DailyBudget(0.05, clock=clock)
    log: list[tuple[str, Decision, Any]] = []
    gate, workers, metrics = make_gate(budget=budget, log=log)
    for i in range(4):  # each score costs 0.02: the third would take the day past 0.05
        before = workers.depth
        gate.submit(retrieval(i))
        if workers.depth > before:
            budget.settle(0.02)
    assert [d for _, d, _ in log] == [Decision.OVER_BUDGET, Decision.OVER_BUDGET]
    assert abs(budget.spent - 0.04) < 1e-9 and workers.depth == 2
    clock.now += 120  # past midnight UTC
    gate.submit(retrieval(10))
    assert len(log) == 2 and workers.depth == 3
    assert budget.spent == 0.0
    assert sample_count(metrics, "svc", "over_budget") == 2
    await shutdown(workers, 0)


async def test_budget_reserves_in_flight_scores_at_the_average_cost() -> None:
    budget = DailyBudget(0.10, clock=FakeClock())
    assert budget.try_reserve()
    budget.settle(0.04)  # average cost is now 0.04
    assert budget.try_reserve()  # 0.04 spent + 1 in flight x 0.04 <= 0.10
    assert not budget.try_reserve()  # 0.04 spent + 2 in flight x 0.04 > 0.10
    budget.cancel()
    assert budget.try_reserve()


async def test_rss_over_the_cap_sheds_as_overloaded() -> None:
    assert anonymous_rss_bytes() > 10_000_000  # a Python process is well over 10 MB
    log: list[tuple[str, Decision, Any]] = []
    gate, workers, _ = make_gate(rss_guard=RssGuard(1_000_000), log=log)
    gate.submit(retrieval(1))
    assert [d for _, d, _ in log] == [Decision.OVERLOADED] and workers.depth == 0
    gate2, workers2, _ = make_gate(rss_guard=RssGuard(anonymous_rss_bytes() * 4), log=log)
    gate2.submit(retrieval(2))
    assert workers2.depth == 1
    await shutdown(workers2, 0)


def test_recent_keys_forget_after_the_window_and_stay_bounded() -> None:
    clock = FakeClock()
    recent = RecentKeys(window_s=10, max_entries=3, clock=clock)
    assert not recent.seen_before(("t", "1"))
    assert recent.seen_before(("t", "1"))
    clock.now += 11
    assert not recent.seen_before(("t", "1"))
    for i in range(2, 7):
        recent.seen_before(("t", str(i)))
    assert len(recent._seen) <= 3


def test_the_input_is_released_once_even_if_decided_twice() -> None:
    metrics = Metrics()
    log: list[tuple[str, Decision, Any]] = []
    fanout = ResultFanout(metrics, [DecisionLog(log)])
    released: list[str] = []
    r = retrieval(1)
    r.ack = PendingAck(lambda: released.append("done"))
    r.ack.hold()
    r.ack.seal()
    fanout.emit(Outcome(r, Decision.EVALUATED))
    fanout.emit(Outcome(r, Decision.FAILED))
    assert released == ["done"]
    assert [d for _, d, _ in log] == [Decision.EVALUATED, Decision.FAILED]  # both seen: the sinks decide
    assert sample_count(metrics, "svc", "evaluated") == 1


class PricedEngine:
    """The local judge, each score priced at `cost_usd` (as a paid model's usage would say)."""

    def __init__(self, cost_usd: float) -> None:
        self.inner = build_engine(JudgeConfig(model="local"))
        self.cost_usd = cost_usd

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def score(self, *args: Any, **kwargs: Any) -> Any:
        result = await self.inner.score(*args, **kwargs)
        return dataclasses.replace(result, usage=dataclasses.replace(result.usage, cost_usd=self.cost_usd))


async def test_the_workers_report_each_score_s_cost_to_the_gate_s_budget() -> None:
    metrics = Metrics()
    engine = PricedEngine(0.02)
    log: list[tuple[str, Decision, Any]] = []
    fanout = ResultFanout(metrics, [DecisionLog(log, ScorerIdentity.of_engine(engine.inner))])
    workers = ScoringWorkers(engine, downstream=fanout, identity=ScorerIdentity.of_engine(engine.inner), workers=1,
                             metrics=metrics)
    gate = RetrievalGate(sampler=Sampler(1.0), queue=workers, decisions=fanout, budget=DailyBudget(0.05))
    workers.costs = gate  # the pipeline's "what each score cost" link
    await workers.start()
    for i in range(3):
        gate.submit(retrieval(i, contexts=["[relevant] reset your password"]))
        for _ in range(200):
            if len(log) > i:
                break
            await asyncio.sleep(0.01)
    # 0.04 spent after two; a third at the average cost would take the day to 0.06.
    assert [d for _, d, _ in log] == [Decision.EVALUATED, Decision.EVALUATED, Decision.OVER_BUDGET]
    assert gate.budget is not None and abs(gate.budget.spent - 0.04) < 1e-9
    await shutdown(workers, 1.0)
