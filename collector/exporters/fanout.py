"""Where every retrieval's one decision goes: to each result sink, into
`ctxprec_samples_total{service,decision}`, and then its input is acknowledged.

The order is the point: results are handed on first and the input released after, so that
whoever acknowledges input on the decision (Kafka offsets) only does so once the results have
been handed to the exporters. A retrieval that shutdown cut short (`Outcome.cut_short`) keeps its
input unacknowledged: the Kafka message is read again after a restart, and scored then.
"""
from __future__ import annotations

import logging
from typing import Sequence

from ctxprec.collector.components import ResultSink, Stateless
from ctxprec.collector.metrics.children import Children
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.model import Decision, Outcome

log = logging.getLogger(__name__)


class ResultFanout(Stateless):
    """A `ResultSink` that hands each outcome to its sinks."""

    def __init__(self, metrics: Metrics | None, sinks: Sequence[ResultSink] = ()) -> None:
        self.metrics = metrics
        self.sinks: list[ResultSink] = list(sinks)
        self._counts: dict[str, int] = {}
        self._samples = Children(metrics.samples, metrics.budget) if metrics is not None else None

    def add(self, sink: ResultSink) -> None:
        self.sinks.append(sink)

    @property
    def counts(self) -> dict[str, int]:
        """Decisions so far, by decision."""
        return dict(self._counts)

    def count(self, service: str, decision: Decision, n: int = 1) -> None:
        """Decisions reached without a retrieval object (unsampled spans counted in bulk)."""
        if n <= 0:
            return
        self._counts[decision.value] = self._counts.get(decision.value, 0) + n
        if self._samples is not None and self.metrics is not None:
            self._samples(self.metrics.service(service), decision.value).inc(n)

    def emit(self, outcome: Outcome) -> None:
        for sink in self.sinks:
            try:
                sink.emit(outcome)
            except Exception:  # one broken sink must not cost the others their result
                log.exception("result sink %s failed", type(sink).__name__)
        retrieval = outcome.retrieval
        self.count(retrieval.service, outcome.decision)
        ack = retrieval.ack
        if ack is not None:
            retrieval.ack = None  # cleared first: a second outcome can never release twice
            if outcome.cut_short:
                return
            try:
                ack.release()
            except Exception:  # the input's bookkeeping must not break the pipeline
                log.exception("releasing the input of trace %s span %s failed", retrieval.trace_id,
                              retrieval.span_id)
