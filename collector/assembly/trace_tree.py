"""Parent/child relations among the spans of one assembled trace, indexed once.

A trace of an agent can hold 20,000 spans and 500 retrievals; everything asked per retrieval
(its ancestors, the spans beside it, the LLM spans after it) must cost what the retrieval's own
part of the tree holds, not the whole trace. So the tree is walked once, depth first, children in
start order: every span gets an interval [enter, leave) of that order, and a span's subtree is
the spans whose `enter` falls in its interval. A question such as "the LLM spans under this
ancestor but not under that child" is then two slices of a sorted list.

Spans whose parent never arrived (or that have no parent) are the tops of the forest, in start
order; spans caught in a cycle of hostile ids are taken as tops too, so every span is in the
order once. Per-span facts that cost something to read (is it an LLM span, its prompt text)
are kept in `memo`, computed once per tree."""
from __future__ import annotations

from bisect import bisect_left
from typing import Any, Iterator, Sequence

from ctxprec.collector.assembly.spans import SpanRecord
from ctxprec.collector.loop_turns import CHUNK


def _start(span: SpanRecord) -> tuple[int, int]:
    return span.start_time_unix_nano, span.end_time_unix_nano


class TraceTree:
    def __init__(self, spans: Sequence[SpanRecord]) -> None:
        self.spans = list(spans)
        self._by_id = {span.span_id: span for span in self.spans}
        # Caches of answers.py and reranking.py: key -> value, per tree.
        self.memo: dict[Any, Any] = {}
        self._enter: dict[int, int] | None = None  # id(span) -> position in the depth-first order
        self._leave: dict[int, int] = {}
        self._order: list[SpanRecord] = []
        self._roots: list[SpanRecord] | None = None

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
        if self._roots is None:
            self._roots = [span for span in self.spans if span.is_root]
        return self._roots

    # -- the depth-first order --

    def _index(self) -> dict[int, int]:
        if self._enter is None:
            for _ in self.index_steps():
                pass
        assert self._enter is not None
        return self._enter

    def index_steps(self, every: int = CHUNK) -> Iterator[None]:
        """Builds the depth-first order, yielding every `every` spans (a caller that shares the
        event loop turns between them); nothing to do once built."""
        if self._enter is not None:
            return
        children: dict[bytes, list[SpanRecord]] = {}
        tops: list[SpanRecord] = []
        for n, span in enumerate(self.spans, 1):
            parent = span.parent_span_id
            if parent and parent in self._by_id and parent != span.span_id:
                children.setdefault(parent, []).append(span)
            else:
                tops.append(span)
            if n % every == 0:
                yield
        for group in children.values():
            group.sort(key=_start)
        tops.sort(key=_start)
        yield
        enter: dict[int, int] = {}
        leave: dict[int, int] = {}
        order: list[SpanRecord] = []
        expanded: set[bytes] = set()  # a repeated span id has its children once
        stack: list[tuple[SpanRecord, bool]] = []
        # Iterative: a chain of 20,000 spans must not hit the recursion limit. Spans in a cycle
        # of ids (no top leads to them) are walked last, as tops of their own.
        for top in [*tops, None]:
            if top is None:
                stack.extend((s, False) for s in sorted((s for s in self.spans if id(s) not in enter),
                                                        key=_start, reverse=True))
            else:
                stack.append((top, False))
            while stack:
                span, done = stack.pop()
                if done:
                    leave[id(span)] = len(order)
                    continue
                if id(span) in enter:
                    continue
                enter[id(span)] = len(order)
                order.append(span)
                if len(order) % every == 0:
                    yield
                stack.append((span, True))
                if span.span_id not in expanded:
                    expanded.add(span.span_id)
                    for child in reversed(children.get(span.span_id, ())):
                        if id(child) not in enter:
                            stack.append((child, False))
        self._leave, self._order = leave, order
        self._enter = enter

    def interval(self, span: SpanRecord) -> tuple[int, int]:
        """[enter, leave) of `span` in the depth-first order: its subtree."""
        enter = self._index()
        return enter[id(span)], self._leave[id(span)]

    def position(self, span: SpanRecord) -> int:
        return self._index()[id(span)]

    def size(self) -> int:
        self._index()
        return len(self._order)

    def order(self) -> list[SpanRecord]:
        """Every span once, depth first, children in start order."""
        self._index()
        return self._order

    def chain(self, span: SpanRecord) -> list[SpanRecord]:
        """`span` and the ancestors the depth-first order placed it under, nearest first (the
        parents as the walk followed them: a repeated or cyclic id does not loop)."""
        out = [span]
        enter, leave = self.interval(span)
        for ancestor in self.ancestors(span):
            a_enter, a_leave = self.interval(ancestor)
            if not (a_enter < enter and leave <= a_leave):
                break
            out.append(ancestor)
            enter, leave = a_enter, a_leave
        return out

    def rings(self, span: SpanRecord) -> Iterator[list[tuple[int, int]]]:
        """The rest of the trace around `span`, nearest part first: for its parent, the parent's
        subtree less `span`'s own and less the parent itself; then the same for each ancestor
        further up; last the other tops of the forest. Each ring is a list of [from, to) ranges
        of the depth-first order; together they cover every span that is neither `span`, one of
        its descendants, nor one of its ancestors."""
        inner = self.interval(span)
        for ancestor in self.chain(span)[1:]:
            a_enter, a_leave = self.interval(ancestor)
            yield [(a_enter + 1, inner[0]), (inner[1], a_leave)]
            inner = (a_enter, a_leave)
        yield [(0, inner[0]), (inner[1], self.size())]

    def in_ranges(self, positions: list[int], ranges: list[tuple[int, int]]) -> Iterator[int]:
        """Indices into the sorted `positions` that fall in `ranges`."""
        for low, high in ranges:
            if low < high:
                yield from range(bisect_left(positions, low), bisect_left(positions, high))
