"""A sampled span, copied out of its protobuf request into plain Python.

Only spans of sampled traces (1% of traffic at a 1% rate) become `SpanRecord`s, so the cost of
decoding every attribute is paid rarely. Values are bounded on the way in (`otlp/values.py`):
strings are cut to `max_chars`, nesting of arrays/maps stops at a fixed depth, so a hostile span
costs at most what its (already size-limited) request cost to parse.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ctxprec.collector.otlp.values import attributes_dict
_SPAN_OVERHEAD = 256  # Python objects around each record, for the buffer's byte budget


@dataclass(slots=True)
class SpanEvent:
    name: str
    attributes: dict[str, Any]


@dataclass(slots=True)
class SpanRecord:
    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes
    name: str
    start_time_unix_nano: int
    end_time_unix_nano: int
    service: str
    attributes: dict[str, Any]
    events: list[SpanEvent] = field(default_factory=list)
    size: int = 0  # approximate bytes, for the trace buffer's bound
    # Resource attributes, one dict shared by the spans of a ResourceSpans.
    resource: dict[str, Any] = field(default_factory=dict)
    # Only the span's place in its trace was kept (`bare_record`): never a retrieval itself.
    link_only: bool = False

    @property
    def is_root(self) -> bool:
        return not self.parent_span_id


def span_record(span: Any, service: str, max_chars: int, resource: dict[str, Any] | None = None) -> SpanRecord:
    """`span` is an `opentelemetry.proto.trace.v1.Span`; `resource` its resource's attributes."""
    events = [SpanEvent(e.name, attributes_dict(e.attributes, max_chars)) for e in span.events]
    return SpanRecord(
        trace_id=span.trace_id,
        span_id=span.span_id,
        parent_span_id=span.parent_span_id,
        name=span.name,
        start_time_unix_nano=span.start_time_unix_nano,
        end_time_unix_nano=span.end_time_unix_nano,
        service=service,
        attributes=attributes_dict(span.attributes, max_chars),
        events=events,
        size=span.ByteSize() + _SPAN_OVERHEAD,
        resource=resource if resource is not None else {},
    )


def bare_record(span: Any, service: str) -> SpanRecord:
    """`span`'s place in its trace (ids, parent, name, times) without its attributes or events:
    for spans that only link others into a nest."""
    return SpanRecord(trace_id=span.trace_id, span_id=span.span_id, parent_span_id=span.parent_span_id, name=span.name,
                      start_time_unix_nano=span.start_time_unix_nano, end_time_unix_nano=span.end_time_unix_nano,
                      service=service, attributes={}, link_only=True)
