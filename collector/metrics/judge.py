"""The judge's `RequestObserver`: one `RequestEvent` per HTTP attempt -> the judge_* metrics
(and, from the local judge, its fallbacks -> ctxprec_local_judge_fallback_total); the shared
verdict cache's `CacheObserver`: its lookups and stores -> ctxprec_judge_shared_cache_*."""
from __future__ import annotations

from typing import Callable

from ctxprec.collector.failure_log import FailureLog
from ctxprec.collector.metrics.children import Children
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.scorer.judge.chat import RequestEvent
from ctxprec.scorer.judge.shared_cache import CacheEvent


class JudgeMetricsObserver:
    """`judge`: which judge's requests these are (live, canary or shadow: the `judge` label)."""

    def __init__(self, metrics: Metrics, judge: str = "live") -> None:
        self.metrics = metrics
        self.judge = judge
        self._requests = Children(metrics.judge_requests)
        self._latency = Children(metrics.judge_latency)
        self._tokens = Children(metrics.judge_tokens)
        self._cost = Children(metrics.judge_cost)
        self._fallback = Children(metrics.local_judge_fallback)

    def __call__(self, event: RequestEvent) -> None:
        model = event.model or "unknown"
        judge = self.judge
        self._requests(model, event.outcome or "unknown", judge).inc()
        if event.latency_s >= 0 and event.outcome != "circuit_open":
            self._latency(model, judge).observe(event.latency_s)
        if event.prompt_tokens:
            self._tokens(model, "prompt", judge).inc(event.prompt_tokens)
        if event.completion_tokens:
            self._tokens(model, "completion", judge).inc(event.completion_tokens)
        if event.cost_usd > 0:
            self._cost(model, judge).inc(event.cost_usd)
        for reason in event.local_fallbacks:
            self._fallback(reason).inc()


class SharedCacheMetricsObserver:
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._contexts = Children(metrics.shared_cache)

    def __call__(self, event: CacheEvent) -> None:
        self._contexts(event.operation, event.outcome).inc(event.contexts)
        if event.breaker_opened:
            self.metrics.shared_cache_breaker.inc()


class JudgeFailureLog:
    """A `RequestObserver` that logs failed judge attempts: the first at once as a WARNING with
    its kind (timeout, rate_limited, server_error, ...), then a count per minute."""

    def __init__(self, failures: FailureLog) -> None:
        self.failures = failures

    def __call__(self, event: RequestEvent) -> None:
        if event.outcome != "ok":
            self.failures.failed(event.outcome or "unknown")


class Observers:
    """Several request observers as one."""

    def __init__(self, *observers: Callable[[RequestEvent], None]) -> None:
        self.observers = observers

    def __call__(self, event: RequestEvent) -> None:
        for observer in self.observers:
            observer(event)
