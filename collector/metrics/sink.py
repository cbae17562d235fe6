"""The metrics sink: a `ResultSink` that turns every evaluated outcome into the precision
metrics (score histograms, precision@k, per-rank relevance, score delay, the sample-weighted
sums) and hands the score to the drift monitor (metrics/drift.py)."""
from __future__ import annotations

from ctxprec.collector.components import Stateless
from ctxprec.collector.metrics.children import Children
from ctxprec.collector.metrics.drift import DriftMonitor
from ctxprec.collector.metrics.registry import Metrics, rank_label
from ctxprec.collector.model import Decision, Outcome


class MetricsSink(Stateless):
    """A `ResultSink`: score histograms, per-rank relevance, score delay and drift."""

    def __init__(self, metrics: Metrics, drift: DriftMonitor | None = None) -> None:
        self.metrics = metrics
        self.drift = drift if drift is not None else DriftMonitor(metrics)
        self._precision = Children(metrics.context_precision, metrics.budget)
        self._precision_at_k = Children(metrics.precision_at_k, metrics.budget)
        self._rank_judged = Children(metrics.rank_judged, metrics.budget)
        self._reference_kind = Children(metrics.reference_kind, metrics.budget)
        self._weight = Children(metrics.precision_weight, metrics.budget)
        self._weighted_sum = Children(metrics.precision_weighted_sum, metrics.budget)
        self._weighted_squares = Children(metrics.precision_weighted_squares, metrics.budget)
        self._weight_squares = Children(metrics.precision_weight_squares, metrics.budget)

    def emit(self, outcome: Outcome) -> None:
        m = self.metrics
        r = outcome.retrieval
        result = outcome.result
        if outcome.decision is not Decision.EVALUATED or result is None:
            return
        if r.end_time_unix_nano:
            delay = outcome.scored_at - r.end_time_unix_nano / 1e9
            if delay >= 0:  # clocks of the app and the sidecar can disagree
                m.score_delay.observe(delay)
        service = m.service(r.service)
        retriever = m.retriever(r.retriever)
        score = result.normalized_score
        # The exemplar is how a dashboard gets from a low bucket to the trace that landed there.
        exemplar = {"trace_id": r.trace_id, "span_id": r.span_id} if r.trace_id else None
        self._precision(service, retriever).observe(score, exemplar)
        self._precision_at_k(service, retriever).observe(result.precision_at_k)
        self._reference_kind(service, result.reference_kind or "query").inc()
        rank_judged = self._rank_judged
        for verdict in result.verdicts:
            rank_judged(service, rank_label(verdict.index + 1), "true" if verdict.relevant else "false").inc()
        self._observe_weighted(service, retriever, score, r.sample_rate)
        self.drift.update(service, score)

    def _observe_weighted(self, service: str, retriever: str, score: float, sample_rate: float) -> None:
        # A score taken at rate p stands for 1/p retrievals (Horvitz-Thompson); a rate that is
        # not a probability (unset, 0) counts once rather than dividing by zero.
        weight = 1.0 / sample_rate if 0.0 < sample_rate <= 1.0 else 1.0
        self._weight(service, retriever).inc(weight)
        self._weighted_sum(service, retriever).inc(weight * score)
        self._weighted_squares(service, retriever).inc(weight * score * score)
        self._weight_squares(service, retriever).inc(weight * weight)


