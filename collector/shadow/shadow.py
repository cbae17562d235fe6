"""ShadowJudge: the result sink that has a candidate judge judge a share of the scored retrievals
beside the live judge.

It sees each evaluated outcome after the live judge scored it (it sits behind the fan-out, like
every exporter), draws `sample_rate`, and judges the same query, contexts and answer with its own
engine (its own HTTP client, connection pool, verdict cache and request limit; requests counted
under `judge="shadow"`). Its verdicts go only into the agreement registry, against the live
judge's for the same contexts (`ctxprec_judge_agreement_ratio{against="live"}`,
`/diagnostics/judge`): never into a score, a span, a record or a precision metric.

It never delays live scoring: `emit` only starts a task and returns; at most `max_in_flight`
shadow judgments run at once and a sample offered while they all run is skipped (counted
`skipped_busy`), never queued; with a daily budget, a sample past it is skipped too
(`skipped_budget`). On shutdown what is still running is cancelled: live decisions never wait
for the shadow."""
from __future__ import annotations

import asyncio
import logging
import random
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from ctxprec.collector.components import Deadline, cancelled
from ctxprec.collector.judging.agreement import JudgeAgreement
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.model import Decision, Outcome
from ctxprec.collector.sampling.decide import DailyBudget
from ctxprec.scorer.judge.chat import JudgeError

log = logging.getLogger("ctxprec.shadow")

OUTCOMES = ("judged", "failed", "skipped_busy", "skipped_budget")
RECENT = 256


@dataclass(frozen=True, slots=True)
class ShadowAnswer:
    """One retrieval both judges answered: what each said per context, in rank order."""

    trace_id: str
    span_id: str
    live: tuple[bool, ...]
    shadow: tuple[bool, ...]


class ShadowJudge:
    def __init__(self, engine: Any, *, agreement: JudgeAgreement, live_judge: str, sample_rate: float,
                 max_in_flight: int, metrics: Metrics | None = None, budget: DailyBudget | None = None,
                 book: Any = None, draw: Callable[[], float] = random.random) -> None:
        """`book`: the label book (collector/judging/labels.py), where the shadow's verdicts wait for
        people's labels too, under its own fingerprint (its agreement against `human`)."""
        self.engine = engine
        self.agreement = agreement
        self.live_judge = live_judge  # the live judge's fingerprint
        self.fingerprint = str(engine.fingerprint)
        self.sample_rate = sample_rate
        self.max_in_flight = max_in_flight
        self.metrics = metrics
        self.budget = budget
        self.book = book
        self._draw = draw
        self.counts = dict.fromkeys(OUTCOMES, 0)
        self.recent: deque[ShadowAnswer] = deque(maxlen=RECENT)  # for /diagnostics/judge and tests
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False
        if metrics is not None:
            for outcome in OUTCOMES:
                metrics.shadow_samples.labels(outcome=outcome)
        agreement.describe(self.fingerprint, model=engine.model, prompt_version=engine.prompt_version, role="shadow")

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    def emit(self, outcome: Outcome) -> None:
        result = outcome.result
        if self._closing or outcome.decision is not Decision.EVALUATED or result is None or not result.verdicts:
            return
        if self._draw() >= self.sample_rate:
            return
        if len(self._tasks) >= self.max_in_flight:
            self._count("skipped_busy")
            return
        if self.budget is not None and not self.budget.try_reserve():
            self._count("skipped_budget")
            return
        task = asyncio.get_running_loop().create_task(self._judge(outcome), name="ctxprec-shadow-judge")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _judge(self, outcome: Outcome) -> None:
        r, result = outcome.retrieval, outcome.result
        assert result is not None
        try:
            shadow = await self.engine.score(r.query, [c.content for c in r.contexts], output=r.output,
                                             expected_output=r.expected_output)
        except asyncio.CancelledError:
            if self.budget is not None:
                self.budget.cancel()
            raise
        except Exception as exc:  # the shadow's failure never reaches the live path: counted
            usage = getattr(exc, "usage", None)
            self._settle(usage.cost_usd if usage is not None else 0.0)
            self._count("failed")
            if isinstance(exc, (JudgeError, ValueError)):
                log.debug("shadow judge failed on trace %s span %s: %s", r.trace_id, r.span_id, exc)
            else:
                log.exception("shadow judging trace %s span %s failed", r.trace_id, r.span_id)
            return
        self._settle(shadow.usage.cost_usd)
        live = tuple(v.relevant for v in result.verdicts)
        said = tuple(v.relevant for v in shadow.verdicts)
        if len(said) != len(live):
            self._count("failed")
            return
        self.agreement.add(self.fingerprint, "live", said, live)
        if self.book is not None and r.trace_id and r.span_id:
            ordered = sorted(shadow.verdicts, key=lambda v: v.index)
            self.book.verdicts(r.trace_id, r.span_id, self.fingerprint, [v.relevant for v in ordered])
        self.recent.append(ShadowAnswer(r.trace_id, r.span_id, live, said))
        self._count("judged")

    def _settle(self, cost_usd: float) -> None:
        if self.budget is not None:
            self.budget.settle(cost_usd)

    def _count(self, outcome: str) -> None:
        self.counts[outcome] += 1
        if self.metrics is not None:
            self.metrics.shadow_samples.labels(outcome=outcome).inc()

    def view(self) -> dict[str, Any]:
        """The shadow's part of /diagnostics/judge."""
        confusion = self.agreement.confusion(self.fingerprint, "live")
        return {"judge": self.fingerprint, "model": self.engine.model, "against_live_judge": self.live_judge,
                "sample_rate": self.sample_rate, "max_in_flight": self.max_in_flight, "in_flight": self.in_flight,
                "samples": dict(self.counts),
                "daily_budget_usd": None if self.budget is None else self.budget.usd_per_day,
                "spent_today_usd": None if self.budget is None else round(self.budget.spent, 6),
                "agreement_with_live": confusion.as_dict()}

    # -- lifecycle --

    async def start(self) -> None:
        return None

    async def finish(self, deadline: Deadline) -> None:
        """Live decisions never wait for the shadow: what still runs is cancelled."""
        self._closing = True
        await cancelled(*list(self._tasks))

    async def close(self) -> None:
        await self.engine.aclose()
