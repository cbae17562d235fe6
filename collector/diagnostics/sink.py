"""DiagnosticsSink: the ResultSink that feeds the noisy-document summaries, the top-k counts and
the slice statistics from every evaluated outcome, sets the top-k gauges, and answers the
diagnostics endpoints.

With cluster learning the scores other replicas made arrive through `peer_score` (a
`PeerScores`: document names, context sizes and slice values read back from the Kafka results
topic, no text), so that every replica's summaries cover the whole service.

Wiring (what the pipeline does with it):

    sink = DiagnosticsSink(settings, metrics=metrics, drift=drift_monitor, redact=redactor)
    fanout.add(sink)                            # a ResultSink, after the MetricsSink
    drift_monitor.on_alarm = sink.explainer     # the "diagnostics hooks the drift alarm" link
    GET /diagnostics/documents -> sink.documents_json(request.query)
    GET /diagnostics/drift     -> sink.drift_json(request.query)
    GET /diagnostics/top_k     -> sink.top_k_json(request.query)

The drift monitor is read for the alarms `/diagnostics/drift` shows; its alarm calls the sink's
explainer, so that an alarm rising for a service logs one line naming the retriever and slice
values behind the change.
Service and retriever labels go through the metrics' label caps, so diagnostics and metrics fold
the same values into `other` and the number of (service, retriever) pairs stays bounded."""
from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from ctxprec.collector.components import Stateless
from ctxprec.collector.diagnostics.drift_explain import DriftExplainer
from ctxprec.collector.diagnostics.noisy_documents import NoisyDocuments
from ctxprec.collector.diagnostics.settings import DiagnosticsSettings
from ctxprec.collector.diagnostics.slices import SliceTracker
from ctxprec.collector.diagnostics.top_k import TopKTracker
from ctxprec.collector.diagnostics.views import JsonResponse, documents_view, drift_view, top_k_view
from ctxprec.collector.metrics.registry import LabelCap, Metrics
from ctxprec.collector.model import Decision, Outcome, PeerScore, RetrievedContext
from ctxprec.scorer.documents import identity
from ctxprec.scorer.result import Verdict

if TYPE_CHECKING:
    from ctxprec.collector.metrics.drift import DriftMonitor
    from ctxprec.scorer.drift import DriftDetector


class DiagnosticsSink(Stateless):
    def __init__(self, settings: DiagnosticsSettings | None = None, *, metrics: Metrics | None = None,
                 drift: "DriftMonitor | None" = None, redact: Callable[[str], str] | None = None,
                 logger: logging.Logger | None = None) -> None:
        s = self.settings = settings or DiagnosticsSettings()
        self.metrics = metrics
        self.drift = drift
        self._service: Callable[[str | None], str] = metrics.service if metrics is not None else LabelCap(s.max_services)
        self._retriever: Callable[[str | None], str] = (
            metrics.retriever if metrics is not None else LabelCap(s.max_retrievers))
        self.noisy = NoisyDocuments(s.slots, previews=s.previews, redact=redact, preview_chars=s.preview_chars)
        self.top_k = TopKTracker(max_rank=s.top_k_max_rank, keep=s.top_k_keep, min_relevant=s.top_k_min_relevant,
                                 halve_every=s.top_k_halve_every)
        self.slices = SliceTracker(s.slice_attributes, max_values=s.max_slice_values,
                                   recent_half_life=s.recent_half_life, baseline_half_life=s.baseline_half_life)
        self.explainer = DriftExplainer(self.slices, logger=logger, detector=self._detector)

    def emit(self, outcome: Outcome) -> None:
        """Every decision comes here; only evaluated ones carry verdicts to count."""
        result = outcome.result
        if outcome.decision is not Decision.EVALUATED or result is None:
            return
        r = outcome.retrieval
        contexts = r.contexts
        self._observe(r.service, r.retriever, result.verdicts, _documents(outcome.record, contexts),
                      [len(c.content) for c in contexts], result.normalized_score, r.attributes, r.resource,
                      [c.content for c in contexts] if self.noisy.previews else None)

    def peer_score(self, score: PeerScore) -> None:
        """A score another replica made (no text: its documents take a slot without a preview)."""
        self._observe(score.service, score.retriever, score.verdicts, score.documents, score.context_chars,
                      score.score, score.slices, None, None)

    def _observe(self, service_name: str, retriever_name: str, verdicts: Sequence[Verdict], documents: Sequence[str],
                 sizes: Sequence[int], score: float, attributes: Mapping[str, Any],
                 resource: Mapping[str, Any] | None, contents: Sequence[str] | None) -> None:
        service = self._service(service_name)
        retriever = self._retriever(retriever_name)
        self.noisy.observe(service, retriever, verdicts, documents, contents)
        if self.top_k.observe(service, retriever, verdicts, sizes):
            self._add_gauges(service, retriever)
        self.slices.observe(service, retriever, score, attributes, resource)

    def _add_gauges(self, service: str, retriever: str) -> None:
        """The pair's two gauges read the tracker when scraped: nothing is computed per score."""
        if self.metrics is None:
            return
        tracker = self.top_k

        def recommended_k() -> float:
            advice = tracker.advice(service, retriever)
            return math.nan if advice is None or advice.recommended_k is None else float(advice.recommended_k)

        def saved_tokens() -> float:
            advice = tracker.advice(service, retriever)
            if advice is None or advice.recommended_k is None or advice.saved_tokens_per_request is None:
                return math.nan
            return advice.saved_tokens_per_request

        self.metrics.recommended_k.labels(service, retriever).set_function(recommended_k)
        self.metrics.recommended_k_saved_tokens.labels(service, retriever).set_function(saved_tokens)

    # -- the endpoints' bodies --

    def documents_json(self, params: Mapping[str, str]) -> JsonResponse:
        return documents_view(self.noisy, params)

    def _detector(self, service: str) -> "DriftDetector | None":
        return self.drift.detectors.get(service) if self.drift is not None else None

    def drift_json(self, params: Mapping[str, str]) -> JsonResponse:
        def alarmed(service: str) -> bool | None:
            detector = self._detector(service)
            return None if detector is None else detector.alarmed

        return drift_view(self.explainer, params, alarmed if self.drift is not None else None)

    def top_k_json(self, params: Mapping[str, str]) -> JsonResponse:
        return top_k_view(self.top_k, params)


def _documents(record: Mapping[str, Any] | None, contexts: Sequence[RetrievedContext]) -> list[str]:
    """The contexts' identities: read back from the score record's verdicts when it names them
    (the scoring workers already hashed the texts), else computed."""
    verdicts = record.get("verdicts") if record else None
    if verdicts and len(verdicts) == len(contexts):
        names = []
        for i, verdict in enumerate(verdicts):
            name = verdict.get("document")
            if name is None or verdict.get("index") != i:
                break
            names.append(name)
        else:
            return names
    return [identity(c) for c in contexts]
