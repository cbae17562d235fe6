"""The shadow judge's own budget and the canary's share of the judge's, in process over real HTTP
to stub judges: a sample offered while the shadow is full is skipped, never queued; past its daily
budget it is skipped too; the canary's rounds are charged to the judge's daily budget, and a round
is skipped while that budget is spent."""
from __future__ import annotations

import asyncio

from ctxprec.collector.canary.runner import JudgeCanary
from ctxprec.collector.canary.samples import load_canary
from ctxprec.collector.canary.watch import JudgeWatch
from ctxprec.collector.judging.agreement import JudgeAgreement
from ctxprec.collector.metrics.judge import JudgeMetricsObserver
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.model import Decision, Outcome, Retrieval, RetrievedContext
from ctxprec.collector.sampling.decide import DailyBudget
from ctxprec.collector.shadow.shadow import ShadowJudge
from ctxprec.scorer.config import JudgeConfig
from ctxprec.scorer.engine import build_engine
from tests.collector.rag_app import wait_until

PRICE = (1000.0, 1000.0)  # USD per million tokens: a cost the budgets can see


async def scored(live, i: int) -> Outcome:
    contexts = [f"To reset a password (case {i}) open Settings.", f"Offices (case {i}) close on holidays."]
    result = await live.score("How do I reset my password?", contexts, output="Open Settings to reset a password.")
    retrieval = Retrieval(trace_id=f"{i + 1:032x}", span_id=f"{i + 1:016x}", service="shop",
                          query="How do I reset my password?", contexts=[RetrievedContext(c) for c in contexts],
                          output="Open Settings to reset a password.")
    return Outcome(retrieval, Decision.EVALUATED, result)


async def test_a_full_shadow_skips_and_never_queues_and_its_budget_stops_it(make_stub_judge) -> None:
    live_stub, shadow_stub = await make_stub_judge(), await make_stub_judge(latency_ms=300)
    live = build_engine(JudgeConfig(model="openai/stub", api_base=live_stub.url, api_key="k"))
    metrics = Metrics()
    agreement = JudgeAgreement(metrics)
    engine = build_engine(JudgeConfig(model="openai/shadow", api_base=shadow_stub.url, api_key="k",
                                      price_per_mtok=PRICE), observer=JudgeMetricsObserver(metrics, "shadow"))
    shadow = ShadowJudge(engine, agreement=agreement, live_judge=str(live.fingerprint), sample_rate=1.0,
                         max_in_flight=1, metrics=metrics, budget=DailyBudget(1e-9))
    try:
        outcomes = [await scored(live, i) for i in range(4)]
        shadow.emit(outcomes[0])
        shadow.emit(outcomes[1])  # the first still runs (300 ms): skipped, not queued
        assert shadow.counts == {"judged": 0, "failed": 0, "skipped_busy": 1, "skipped_budget": 0}
        await wait_until(lambda: shadow.counts["judged"] == 1, what="the shadow's judgment")
        assert shadow.budget is not None and shadow.budget.spent > 1e-9  # priced, so past its tiny budget
        shadow.emit(outcomes[2])
        assert shadow.counts["skipped_budget"] == 1 and shadow.in_flight == 0
        assert shadow_stub.stats.requests == 1
        assert agreement.confusion(shadow.fingerprint, "live").total == 2
        assert metrics.registry.get_sample_value(
            "ctxprec_judge_requests_total", {"model": "openai/shadow", "outcome": "ok", "judge": "shadow"}) == 1
        # Failed outcomes and other decisions are not the shadow's business.
        shadow.emit(Outcome(outcomes[3].retrieval, Decision.FAILED))
        assert shadow.in_flight == 0 and sum(shadow.counts.values()) == 3
    finally:
        await shadow.finish(None)  # type: ignore[arg-type]
        await shadow.close()
        await live.aclose()


async def test_canary_rounds_are_charged_to_the_judge_budget_and_skipped_when_it_is_spent(make_stub_judge) -> None:
    stub = await make_stub_judge()
    metrics = Metrics()
    budget = DailyBudget(1000.0)
    canary = JudgeCanary.build(load_canary(None), JudgeConfig(model="openai/stub", api_base=stub.url, api_key="k",
                                                             price_per_mtok=PRICE),
                               scale=1.0, observer=JudgeMetricsObserver(metrics, "canary"),
                               watch=JudgeWatch(metrics, window_s=60), interval_s=5, false_alarm_rate=0.001,
                               metrics=metrics, budget=budget)
    try:
        await canary._take_baseline()
        assert canary.baseline is not None and stub.stats.requests == 60
        spent = budget.spent
        assert spent > 0 and budget._scored == 0  # charged, not counted as scores
        budget.charge(budget.usd_per_day)  # the day's budget spent
        before = stub.stats.requests
        assert await canary.round() is None
        assert stub.stats.requests == before
        assert metrics.registry.get_sample_value("ctxprec_judge_canary_rounds_total",
                                                 {"outcome": "skipped_budget"}) == 1
    finally:
        await canary.close()
