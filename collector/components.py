"""The seams between the stages of the pipeline, in the order data crosses them:

    receivers --TraceConsumer--> assembly --RetrievalSink--> sampling --> scoring
              --ResultSink--> exporters (metrics, span write-back, evaluator spans, Kafka results, ...)

and, in span mode, assembly --SpanPassThrough--> the span write-back exporter (every span goes
downstream; the retrieval spans of sampled traces wait there for their results).

Data only moves forward across these interfaces: no stage calls back into the one before it. A
retrieval's input acknowledgement (a Kafka offset) travels with it (`Retrieval.ack`) and is
released by the last stage. Only pipeline.py wires the stages together.
"""
from __future__ import annotations

from typing import Any, Protocol

from ctxprec.collector.model import Outcome, PendingAck, Retrieval


class Component(Protocol):
    """Something with a lifetime: started before the inputs open, stopped after they close."""

    async def start(self) -> None: ...


class TraceConsumer(Protocol):
    """Takes decoded OTLP trace requests (receivers -> assembly)."""

    async def ingest(self, request: Any, *, receiver: str, raw: bytes | None = None,
                     ack: PendingAck | None = None) -> None: ...


class RetrievalSink(Protocol):
    """Takes retrievals to decide on (assembly and the Kafka event receiver -> sampling)."""

    def submit(self, retrieval: Retrieval) -> None: ...

    def not_sampled(self, service: str, count: int) -> None: ...


class ResultSink(Protocol):
    """Takes every retrieval's one decision, scored or not (sampling and scoring -> exporters).
    Must not block and must not raise."""

    def emit(self, outcome: Outcome) -> None: ...


class SpanPassThrough(Protocol):
    """Span mode (assembly -> span write-back): every received request goes downstream; the
    listed retrieval spans are held back until their results come."""

    def pass_through(self, request: Any, raw: bytes | None, total_spans: int, held: list[Any]) -> None: ...

    def trace_done(self, trace_id: bytes, retrieval_span_ids: set[bytes]) -> None: ...
