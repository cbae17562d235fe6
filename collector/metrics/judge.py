"""The judge's `RequestObserver`: one `RequestEvent` per HTTP attempt -> the judge_* metrics."""
from __future__ import annotations

from ctxprec.collector.metrics.children import Children
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.scorer.judge.chat import RequestEvent


class JudgeMetricsObserver:
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._requests = Children(metrics.judge_requests)
        self._latency = Children(metrics.judge_latency)
        self._tokens = Children(metrics.judge_tokens)
        self._cost = Children(metrics.judge_cost)

    def __call__(self, event: RequestEvent) -> None:
        model = event.model or "unknown"
        self._requests(model, event.outcome or "unknown").inc()
        if event.latency_s >= 0 and event.outcome != "circuit_open":
            self._latency(model).observe(event.latency_s)
        if event.prompt_tokens:
            self._tokens(model, "prompt").inc(event.prompt_tokens)
        if event.completion_tokens:
            self._tokens(model, "completion").inc(event.completion_tokens)
        if event.cost_usd > 0:
            self._cost(model).inc(event.cost_usd)
