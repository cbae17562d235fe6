"""The `RetrievalSink`: every retrieval that reaches it ends in exactly one `Decision`.

Checks run cheapest-and-most-final first, so that a retrieval that could never be scored does
not use up a throttle token or a budget share:

    [head decision, for a RAG event] -> not_sampled / filtered -> no_contexts (no_content) -> duplicate -> throttled -> over_budget -> overloaded
    -> the scoring queue (which later decides evaluated / failed)

A retrieval whose documents carry ids and no text is `no_content` unless `resolvable` says a
document resolver will look their text up (collector/resolving/): then it goes on like one with
text, to the resolver, which is this gate's scoring queue.

`submit` never blocks and never awaits: it runs on the receivers' path.
"""
from __future__ import annotations

import datetime as _dt
import logging
import time
from collections import OrderedDict
from typing import Callable

from ctxprec.collector.components import Deadline, Decisions, ScoringQueue, Stateless
from ctxprec.collector.memory import anonymous_rss_bytes, release_freed
from ctxprec.collector.model import RAG_EVENT, SHUTDOWN, Decision, Outcome, Retrieval
from ctxprec.collector.sampling.config import SamplingConfig
from ctxprec.collector.sampling.sampler import TraceSampler, trace_id_bytes
from ctxprec.scorer.judge.limits import TokenBucket

THROTTLE_BURST_S = 10.0  # the score throttle lets ten seconds' worth through at once


def score_throttle(per_minute: float, *, clock: Clock = time.monotonic) -> TokenBucket:
    """The `max_scores_per_minute` throttle."""
    return TokenBucket(per_minute, burst_s=THROTTLE_BURST_S, clock=clock)

log = logging.getLogger(__name__)

Clock = Callable[[], float]


class DailyBudget:
    """A USD budget per UTC day, kept by the gate alone (scoring reports costs back to it). Spend is what finished scores cost; scores still in flight are
    reserved at the running average cost so that a burst cannot overshoot by a whole queue."""

    def __init__(self, usd_per_day: float, *, clock: Callable[[], float] = time.time) -> None:
        self.usd_per_day = usd_per_day
        self._clock = clock
        self._day = self._today()
        self.spent = 0.0
        self._scored = 0
        self._in_flight = 0

    def _today(self) -> _dt.date:
        return _dt.datetime.fromtimestamp(self._clock(), tz=_dt.timezone.utc).date()

    def _roll(self) -> None:
        today = self._today()
        if today != self._day:
            self._day = today
            self.spent = 0.0
            self._scored = 0

    def _average(self) -> float:
        return self.spent / self._scored if self._scored else 0.0

    def try_reserve(self) -> bool:
        self._roll()
        if self.spent + (self._in_flight + 1) * self._average() > self.usd_per_day or self.spent >= self.usd_per_day:
            return False
        self._in_flight += 1
        return True

    def cancel(self) -> None:
        self._in_flight = max(0, self._in_flight - 1)

    def settle(self, cost_usd: float) -> None:
        self._in_flight = max(0, self._in_flight - 1)
        self._roll()
        self.spent += max(0.0, cost_usd)
        self._scored += 1

    def charge(self, cost_usd: float) -> None:
        """Judge calls that were not a retrieval's score (the canary's rounds): spent all the same,
        not counted in the average cost of a score."""
        self._roll()
        self.spent += max(0.0, cost_usd)

    def spent_out(self) -> bool:
        self._roll()
        return self.spent >= self.usd_per_day


class RssGuard:
    """True while the memory the sidecar's work holds is over the cap (anonymous resident memory,
    collector/memory.py). Reads /proc at most every `interval_s` (submit is hot). Over the cap, it
    first has the allocator give back what Python has freed (at most every `release_interval_s`)
    and reads again: a spike that has passed does not keep shedding healthy work."""

    def __init__(self, limit_bytes: int | None, *, interval_s: float = 0.25, release_interval_s: float = 5.0,
                 clock: Clock = time.monotonic, probe: Callable[[], int] = anonymous_rss_bytes,
                 release: Callable[[], object] = release_freed) -> None:
        self.limit_bytes = limit_bytes
        self.interval_s = interval_s
        self.release_interval_s = release_interval_s
        self._clock = clock
        self._probe = probe
        self._release = release
        self._checked_at = float("-inf")
        self._released_at = float("-inf")
        self._over = False
        self.last_rss = 0

    def over(self) -> bool:
        if not self.limit_bytes:
            return False
        now = self._clock()
        if now - self._checked_at >= self.interval_s:
            self._checked_at = now
            self.last_rss = self._probe()
            if self.last_rss > self.limit_bytes and now - self._released_at >= self.release_interval_s:
                self._released_at = now
                self._release()
                self.last_rss = self._probe()
            self._over = self.last_rss > self.limit_bytes
        return self._over


class RecentKeys:
    """(trace id, span id) pairs seen within `window_s`, at most `max_entries` of them."""

    def __init__(self, window_s: float = SamplingConfig().duplicate_window_s, max_entries: int = 100_000, *,
                 clock: Clock = time.monotonic) -> None:
        self.window_s = window_s
        self.max_entries = max_entries
        self._clock = clock
        self._seen: OrderedDict[tuple[str, str], float] = OrderedDict()

    def seen_before(self, key: tuple[str, str]) -> bool:
        """Records `key` and says whether it was already there."""
        now = self._clock()
        while self._seen:
            _, at = next(iter(self._seen.items()))
            if now - at <= self.window_s and len(self._seen) < self.max_entries:
                break
            self._seen.popitem(last=False)
        if key in self._seen:
            return True
        self._seen[key] = now
        return False


class RetrievalGate(Stateless):
    """The pipeline's `RetrievalSink` (docs/INTERNALS.md). Once finished, whatever still
    reaches it is decided `failed` with error type `shutdown`."""

    def __init__(
        self,
        *,
        sampler: TraceSampler,
        queue: ScoringQueue,
        decisions: Decisions,
        throttle: TokenBucket | None = None,
        budget: DailyBudget | None = None,
        rss_guard: RssGuard | None = None,
        recent: RecentKeys | None = None,
        resolvable: Callable[[Retrieval], bool] | None = None,
    ) -> None:
        self.sampler = sampler
        self.queue = queue
        self.decisions = decisions
        self.throttle = throttle
        self.budget = budget
        self.rss_guard = rss_guard
        self.recent = recent if recent is not None else RecentKeys()
        self.resolvable = resolvable
        self.closed = False

    async def finish(self, deadline: Deadline) -> None:
        self.closed = True

    def settled(self, cost_usd: float) -> None:
        """A retrieval this gate queued was scored (or failed) at `cost_usd` (`ScoreCosts`, told
        by the scoring workers): its budget reservation becomes spend."""
        if self.budget is not None:
            self.budget.settle(cost_usd)

    def unspent(self) -> None:
        """A retrieval this gate queued was decided without being scored (`ScoreCosts`, told by
        the resolver): its throttle token and budget reservation come back."""
        if self.throttle is not None:
            self.throttle.give_back()
        if self.budget is not None:
            self.budget.cancel()

    def not_sampled(self, service: str, count: int) -> None:
        """Retrievals that the head decision dropped without reading them."""
        if count > 0:
            self.decisions.count(service, Decision.NOT_SAMPLED, count)

    def submit(self, retrieval: Retrieval) -> None:
        decision = self._decide(retrieval)
        if decision is not None:
            error = (SHUTDOWN, "the sidecar was shutting down") if decision is Decision.FAILED else None
            self.decisions.emit(Outcome(retrieval, decision, error=error))

    def _head_kept(self, r: Retrieval) -> bool:
        """The head decision for a RAG event's trace, which sampling sees first (an OTLP trace's
        was taken by assembly at its first span). An adaptive sampler remembers the rate a
        boosted trace was kept at, which the exact decision below then records. A head rate of 0
        is a rule's `filtered`: the exact decision names it. (The Kafka receiver's byte peek asks
        this sampler the same question to count, unparsed, the events it drops.)"""
        sampler = self.sampler
        return sampler.head_rate(r.service) <= 0 or sampler.keep_trace(trace_id_bytes(r.trace_id), r.service)

    def _decide(self, r: Retrieval) -> Decision | None:
        """The decision, or None when the retrieval was queued for scoring."""
        if self.closed:
            return Decision.FAILED
        if r.convention == RAG_EVENT and not self._head_kept(r):
            return Decision.NOT_SAMPLED
        sample = self.sampler.decide(r.trace_id, r.service, r.attributes)
        r.sample_rate = sample.rate
        if not sample.sampled:
            # A rule that gives rate 0 excludes on purpose; a hash above the rate is chance.
            return Decision.FILTERED if sample.rule_index is not None and sample.rate <= 0 else Decision.NOT_SAMPLED
        if not any(c.content and c.content.strip() for c in r.contexts) and not (
                self.resolvable is not None and r.textless and self.resolvable(r)):
            return Decision.NO_CONTENT if r.documents_without_text else Decision.NO_CONTEXTS
        if self.recent.seen_before((r.trace_id, r.span_id)):
            return Decision.DUPLICATE
        if self.throttle is not None and not self.throttle.try_take():
            return Decision.THROTTLED
        if self.budget is not None and not self.budget.try_reserve():
            if self.throttle is not None:
                self.throttle.give_back()
            return Decision.OVER_BUDGET
        if (self.rss_guard is not None and self.rss_guard.over()) or not self.queue.try_submit(r):
            if self.throttle is not None:
                self.throttle.give_back()
            if self.budget is not None:
                self.budget.cancel()
            return Decision.OVERLOADED
        return None

