"""The judge's `RequestObserver`: one `RequestEvent` per HTTP attempt -> the judge_* metrics."""
from __future__ import annotations

from collector.metrics.registry import Metrics
from scorer.judge.chat import RequestEvent


class JudgeMetricsObserver:
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def __call__(self, event: RequestEvent) -> None:
        m = self.metrics
        model = event.model or "unknown"
        m.judge_requests.labels(model=model, outcome=event.outcome or "unknown").inc()
        if event.latency_s >= 0 and event.outcome != "circuit_open":
            m.judge_latency.labels(model=model).observe(event.latency_s)
        if event.prompt_tokens:
            m.judge_tokens.labels(model=model, kind="prompt").inc(event.prompt_tokens)
        if event.completion_tokens:
            m.judge_tokens.labels(model=model, kind="completion").inc(event.completion_tokens)
        if event.cost_usd > 0:
            m.judge_cost.labels(model=model).inc(event.cost_usd)
