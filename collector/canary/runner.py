"""JudgeCanary: the pipeline stage that re-judges the canary set on a schedule.

At start it judges the set twice (the baseline and the judge's run-to-run variation,
detector.py), then once every `interval_s`. Every round really asks the judge: the canary has its
own engine, built from the live judge's configuration with no verdict cache (local or shared),
reporting its requests under `judge="canary"`; what a round costs is charged to the judge's daily
budget, and a round is skipped while that budget is spent. A round that fails (the judge
unreachable, a bad answer) is counted and compared with nothing: a judge that does not answer is
the failure metrics' business, not a change.

`acknowledge()` (POST /diagnostics/judge/acknowledge) accepts the judge as it answers now: the
change is cleared and a new baseline is taken at once."""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any, Callable, Protocol

from ctxprec.collector.canary.detector import CanaryBaseline, CanaryRound, take_baseline
from ctxprec.collector.canary.samples import CanarySample
from ctxprec.collector.canary.watch import JudgeChange, JudgeWatch
from ctxprec.collector.components import Deadline, cancelled
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.scorer.config import JudgeConfig
from ctxprec.scorer.engine import ContextPrecisionEngine, build_engine
from ctxprec.scorer.judge.chat import JudgeError, RequestObserver

log = logging.getLogger("ctxprec.judge")

Run = list[tuple[bool, ...]]


class Charges(Protocol):
    """The judge's daily budget, as the canary uses it."""

    def spent_out(self) -> bool: ...

    def charge(self, cost_usd: float) -> None: ...


def canary_judge_config(live: JudgeConfig) -> JudgeConfig:
    """The live judge's configuration with every verdict cache off: a round must ask the judge."""
    return dataclasses.replace(live, cache_size=0, cache_url=None, reason_mode="template")


class JudgeCanary:
    def __init__(self, samples: list[CanarySample], engine: ContextPrecisionEngine, *, watch: JudgeWatch,
                 interval_s: float, false_alarm_rate: float, metrics: Metrics | None = None,
                 budget: Charges | None = None, live_fingerprint: Callable[[], str] | None = None,
                 alarmed_services: Callable[[], list[str]] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.samples = samples
        self.engine = engine
        self.watch = watch
        self.interval_s = interval_s
        self.false_alarm_rate = false_alarm_rate
        self.metrics = metrics
        self.budget = budget
        self._fingerprint = live_fingerprint or (lambda: str(engine.fingerprint))
        self._alarmed = alarmed_services or (lambda: [])
        self.clock = clock
        self.baseline: CanaryBaseline | None = None
        self.last_round: CanaryRound | None = None
        self.last_round_at: float | None = None
        self.rounds = 0
        self._task: asyncio.Task[None] | None = None
        self._rebase = asyncio.Event()
        self._known = [s.relevant for s in samples]

    @classmethod
    def build(cls, samples: list[CanarySample], live: JudgeConfig, *, scale: float, observer: RequestObserver,
              **kwargs: Any) -> "JudgeCanary":
        engine = build_engine(canary_judge_config(live), scale=scale, observer=observer)
        return cls(samples, engine, **kwargs)

    # -- lifecycle --

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="ctxprec-judge-canary")

    async def finish(self, deadline: Deadline) -> None:
        if self._task is not None:
            await cancelled(self._task)
            self._task = None

    async def close(self) -> None:
        await self.engine.aclose()

    def acknowledge(self) -> None:
        """The operator accepts the judge as it answers now: clear the change, take a new baseline."""
        self.watch.cleared("acknowledged; a new canary baseline is being taken")
        self._rebase.set()

    # -- the rounds --

    async def _loop(self) -> None:
        while True:
            try:
                if self.baseline is None or self._rebase.is_set():
                    self._rebase.clear()
                    await self._take_baseline()
                else:
                    await self.round()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug must not end the schedule: logged, counted, tried again
                self._count("failed")
                log.exception("judge canary round failed")
            try:  # woken early by an acknowledgement
                await asyncio.wait_for(self._rebase.wait(), self.interval_s if self.baseline is not None
                                       else min(self.interval_s, 60.0))
            except asyncio.TimeoutError:
                pass

    async def _judge_set(self) -> Run | None:
        """One run over the set, or None when it failed or the budget is spent."""
        if self.budget is not None and self.budget.spent_out():
            self._count("skipped_budget")
            return None
        cost = 0.0
        try:
            results = await asyncio.gather(*(self.engine.score(s.query, list(s.contexts), output=s.output,
                                                               expected_output=s.expected_output)
                                             for s in self.samples), return_exceptions=True)
        except asyncio.CancelledError:
            raise
        run: Run = []
        failed: BaseException | None = None
        for result in results:
            if isinstance(result, BaseException):
                failed = failed or result
                usage = getattr(result, "usage", None)
                cost += usage.cost_usd if usage is not None else 0.0
                continue
            cost += result.usage.cost_usd
            run.append(tuple(v.relevant for v in result.verdicts))
        if self.budget is not None and cost > 0:
            self.budget.charge(cost)
        if failed is not None:
            self._count("failed")
            kind = failed.kind if isinstance(failed, JudgeError) else type(failed).__name__
            log.warning("judge canary round failed (%s: %s); compared with nothing", kind, failed)
            return None
        return run

    async def _take_baseline(self) -> None:
        first = await self._judge_set()
        second = await self._judge_set() if first is not None else None
        if first is None or second is None:
            return  # tried again at the next interval
        before = self.baseline
        fingerprint = self._fingerprint()
        self.baseline = take_baseline(first, second, fingerprint=fingerprint, false_alarm_rate=self.false_alarm_rate,
                                      taken_at=self.clock(), known=self._known)
        self._count("baseline")
        if self.metrics is not None:
            self.metrics.judge_canary_allowed.set(self.baseline.allowed)
            self.metrics.judge_canary_moved.set(0)
        b = self.baseline
        log.info("judge canary baseline: %d contexts judged twice, %d answered differently (run-to-run variation "
                 "%.3f per verdict); a round may move %d of %d stable verdicts", b.contexts, b.disagreements,
                 b.noise_rate, b.allowed, b.stable)
        if before is not None and self.watch.changed:
            self.watch.cleared("a new canary baseline was taken")

    async def round(self) -> CanaryRound | None:
        """One scheduled round: compare the judge's answers now with the baseline."""
        assert self.baseline is not None
        fingerprint = self._fingerprint()
        if fingerprint != self.baseline.fingerprint:
            before = self.baseline.fingerprint
            self.watch.report(JudgeChange(self.clock(), "fingerprint",
                                          f"fingerprint {before} -> {fingerprint} (model, prompt version or settings "
                                          "changed): a new drift baseline, and a new canary baseline",
                                          before, fingerprint), alarmed_services=self._alarmed())
            self.baseline = None
            await self._take_baseline()
            return None
        run = await self._judge_set()
        if run is None:
            return None
        result = self.baseline.compare(run, self._known)
        self.rounds += 1
        self.last_round, self.last_round_at = result, self.clock()
        if self.metrics is not None:
            self.metrics.judge_canary_moved.set(len(result.moved))
        if not result.changed:
            self._count("unchanged")
            log.debug("judge canary: %s", result.words())
            return result
        self._count("changed")
        already = self.watch.changed and self.watch.last is not None and self.watch.last.fingerprint_after == fingerprint
        if not already:
            self.watch.report(JudgeChange(self.clock(), "answers", f"the same fingerprint {fingerprint} answers "
                                          f"differently: {result.words()}", fingerprint, fingerprint,
                                          len(result.moved), result.allowed,
                                          [m.to_dict() for m in result.moved]), alarmed_services=self._alarmed())
        return result

    def _count(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.judge_canary_rounds.labels(outcome=outcome).inc()

    def view(self) -> dict[str, Any]:
        """The canary's part of /diagnostics/judge."""
        last = self.last_round
        return {
            "samples": len(self.samples),
            "interval_s": self.interval_s,
            "false_alarm_rate": self.false_alarm_rate,
            "baseline": None if self.baseline is None else self.baseline.to_dict(),
            "rounds": self.rounds,
            "last_round": None if last is None else {
                "at": round(self.last_round_at or 0.0, 3), "moved_contexts": len(last.moved),
                "allowed_moves": last.allowed, "changed": last.changed,
                "known_agreement": None if last.known_agreement is None else round(last.known_agreement, 4)},
            "changed": self.watch.changed,
            "changes": [c.to_dict() for c in self.watch.changes],
        }
