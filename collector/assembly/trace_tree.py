"""Parent/child relations among the spans of one assembled trace."""
from __future__ import annotations

from typing import Iterator, Sequence

from ctxprec.collector.assembly.spans import SpanRecord


class TraceTree:
    def __init__(self, spans: Sequence[SpanRecord]) -> None:
        self.spans = list(spans)
        self._by_id = {span.span_id: span for span in self.spans}

    def parent(self, span: SpanRecord) -> SpanRecord | None:
        if not span.parent_span_id:
            return None
        return self._by_id.get(span.parent_span_id)

    def ancestors(self, span: SpanRecord) -> Iterator[SpanRecord]:
        """Parent first, root last. Stops at a span that is missing from the trace (the chain of
        parents may be broken by a span that never arrived) and at a cycle (hostile ids)."""
        seen = {span.span_id}
        current = self.parent(span)
        while current is not None and current.span_id not in seen:
            yield current
            seen.add(current.span_id)
            current = self.parent(current)

    def is_ancestor(self, candidate: SpanRecord, of: SpanRecord) -> bool:
        return any(a.span_id == candidate.span_id for a in self.ancestors(of))

    def nested(self, a: SpanRecord, b: SpanRecord) -> bool:
        """One of the two contains the other."""
        return self.is_ancestor(a, of=b) or self.is_ancestor(b, of=a)

    def roots(self) -> list[SpanRecord]:
        return [span for span in self.spans if span.is_root]
