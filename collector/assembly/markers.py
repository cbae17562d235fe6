"""Counting unsampled retrievals in a request's bytes, every enabled rule in one pass.

Every retrieval ends in exactly one decision, `not_sampled` included, so the 99% of spans that
are never decoded must still be counted, from the first request, for every convention. One
search per convention cost a full pass over the bytes each; an Aho-Corasick automaton finds all
markers in a single pass instead (`ahocorasick_rs`, packed SIMD for a handful of patterns:
faster than one `bytes.count`). The markers are derived from the rules (table.py and the user's
mappings), so a convention added to the table is counted here without code:

- exact: a rule's `declared` attribute (`openinference.span.kind=RETRIEVER`,
  `gen_ai.operation.name=retrieval`) in its canonical encoding, framed as a `Span.attributes`
  entry (tag 0x4a and the KeyValue's fixed length), so the same attribute on a resource, scope,
  event or link is not counted. One match is one retrieval span. Rules that declare the same
  attributes (GenAI and OpenLLMetry) share one count. A source with `marker: count` adds the key
  of its first document (`retrieval.documents.0.document.content`): when every declared span
  carries documents the two counts agree and the exact count holds; when they differ (LlamaIndex
  nests a retriever span without documents inside the one with them, and nested retrieval spans
  are one retrieval) the resource gets the per-span look.
- look: what no single byte pattern decides: a rule's `when` (its first attribute and value as a
  `Span.attributes` entry, or the key alone when the value could be written as a number or a
  boolean), a tool rule's `declared` attributes (a tool span is a retrieval by its result's
  shape), a source with
  `marker: look` (its attribute key or event name, length-prefixed). Any match means the caller
  decodes that resource's unsampled spans.

Exact matches of two different counts in one resource also ask for the per-span look (one span
may carry both). The look applies the extraction rules (nested retrievals count once) to the
spans of the request, and remembers the nests it counted, so a nest whose spans are exported in
two requests counts once when one of its spans is the other's ancestor (or parent) there; spans
counted by an exact marker are not remembered (a nest split between an exact count and a look
can still count twice).
What the bytes cannot show: a span listing the same retrieval attribute twice, or a string value
that contains a whole framed marker, would be counted twice; an encoder that writes the attribute
in a non-canonical form (value before key) is not counted by its marker; a document source with
`marker: none` (GenAI's documents) is not counted on a span that does not declare itself.
"""
from __future__ import annotations

import re
from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, Mapping, Sequence

from ahocorasick_rs import BytesAhoCorasick

from ctxprec.collector.assembly.specs import SPAN_NAME, Condition
from ctxprec.collector.assembly.table import RetrievalRule
from ctxprec.collector.otlp.wire import encode_varint

_SPAN_ATTRIBUTE_TAG = 0x4A  # Span.attributes: field 9, length-delimited
_LOOK = -1  # a pattern that only says: decode these spans and match them one by one
# Text that an attribute could hold as a number or a boolean: its string encoding is not a marker.
_NOT_ONLY_TEXT = re.compile(r"^(true|false|[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?)$", re.I)


def framed(text: str) -> bytes:
    """`text` as protobuf writes a string field's body: length varint, then UTF-8."""
    raw = text.encode()
    return encode_varint(len(raw)) + raw


def key_value(key: str, value: str) -> bytes:
    """Body of KeyValue{key, value={string_value}}: field 1 then field 2, as encoders write it."""
    any_value = b"\x0a" + framed(value)
    return b"\x0a" + framed(key) + b"\x12" + encode_varint(len(any_value)) + any_value


def span_attribute(key_value_body: bytes) -> bytes:
    """A KeyValue body framed as a `Span.attributes` entry. The frame keeps resource, scope,
    event and link attributes (other field numbers) out of the count."""
    return bytes([_SPAN_ATTRIBUTE_TAG]) + encode_varint(len(key_value_body)) + key_value_body


@dataclass(frozen=True, slots=True)
class ExactCount:
    """Spans declared by the same attributes (one or more rules), counted by their markers."""

    declared: tuple[Condition, ...]
    check_key: str | None  # the first document's key, counted beside (None: not checked)


@dataclass(slots=True)
class ResourceCount:
    """What one ResourceSpans' bytes say: exact retrieval spans per count, and whether its spans
    need a per-span look before any count can be trusted."""

    exact: dict[int, int] = field(default_factory=dict)  # ExactCount index -> declared spans
    needs_look: bool = False
    checked: dict[int, int] = field(default_factory=dict)  # ExactCount index -> first-document keys seen

    @property
    def total(self) -> int:
        return sum(self.exact.values())


def look_markers(rule: RetrievalRule) -> list[bytes]:
    """The byte patterns whose presence makes a resource worth decoding for `rule`."""
    if rule.tool is not None:
        # A tool span is a retrieval by its result's shape, which no byte pattern shows: any
        # tool span (`gen_ai.operation.name=execute_tool`, `openinference.span.kind=TOOL`) is
        # looked at. Resources without one (most traffic) cost nothing more.
        return [span_attribute(key_value(c.key, v)) for c in rule.tool.declared for v in sorted(c.values or ())]
    if rule.when:
        condition = rule.when[0]
        if condition.key == SPAN_NAME:
            return [framed(v) for v in sorted(condition.values or ())] if condition.values else [b""]
        if condition.values is None or any(_NOT_ONLY_TEXT.match(v) for v in condition.values):
            return [framed(condition.key)]
        # Framed as a Span.attributes entry: its first byte (the tag 0x4a) is rare in OTLP bytes,
        # which keeps the automaton's SIMD prefilter fast; a marker starting with a common byte
        # (0x0a, 0x10, a quote) slows the whole pass sevenfold.
        return [span_attribute(key_value(condition.key, v)) for v in sorted(condition.values)]
    out: list[bytes] = []
    for source in rule.sources:
        if source.marker != "look":
            continue
        spec = source.contexts or source.ids  # a user mapping may name ids alone
        key = source.events if source.events is not None else spec.key if spec is not None else None
        if key:
            out.append(framed(key))
    return out


class MarkerScanner:
    def __init__(self, rules: Sequence[RetrievalRule]) -> None:
        """`rules`: the enabled ones, in order (Conventions.rules); markers of the others are not
        searched, so their spans are not counted, exactly as extraction would ignore them."""
        self.counts: list[ExactCount] = []
        self.count_names: list[str] = []
        patterns: list[bytes] = []
        kinds: list[int] = []  # per pattern: an ExactCount index, or _LOOK
        self._always_look = False
        for rule in rules:
            if rule.when or not rule.declared:
                for marker in look_markers(rule):
                    if not marker:
                        self._always_look = True
                    elif marker not in patterns:
                        patterns.append(marker)
                        kinds.append(_LOOK)
                continue
            index = self._count_for(rule)
            for condition in rule.declared:
                for value in sorted(condition.values or ()):
                    marker = span_attribute(key_value(condition.key, value))
                    if marker not in patterns:
                        patterns.append(marker)
                        kinds.append(index)
            for marker in look_markers(rule):
                if marker not in patterns:
                    patterns.append(marker)
                    kinds.append(_LOOK)
        self._kinds = tuple(kinds)
        self._automaton = BytesAhoCorasick(patterns) if patterns else None
        # First-document keys are searched on their own: inside the automaton they slow the whole
        # pass tenfold (their prefix is common in OpenInference payloads). Alone, the automaton
        # searches them by their rarest bytes, faster than `bytes.count`.
        checks = [(i, c.check_key) for i, c in enumerate(self.counts) if c.check_key]
        self._check_index = tuple(i for i, _ in checks)
        self._checks = BytesAhoCorasick([b"\x0a" + framed(key) for _, key in checks]) if checks else None

    def _count_for(self, rule: RetrievalRule) -> int:
        check = next((s.contexts.first_key() for s in rule.sources if s.marker == "count" and s.contexts), None)
        for i, existing in enumerate(self.counts):
            if set(existing.declared) == set(rule.declared):
                if check and not existing.check_key:
                    self.counts[i] = ExactCount(existing.declared, check)
                return i
        self.counts.append(ExactCount(rule.declared, check))
        self.count_names.append(rule.name)  # rules sharing the count: the first in order names it
        return len(self.counts) - 1

    def declared_counts(self, name: str, attributes: Mapping[str, Any]) -> list[int]:
        """The exact counts a decoded span adds to (to take routed spans out of the bytes' count)."""
        return [i for i, c in enumerate(self.counts) if any(d.holds(name, attributes) for d in c.declared)]

    def may_hold_retrieval(self, span_bytes: bytes) -> bool:
        """Whether one span's encoding holds any marker (declared, look or first-document key): a
        span without one is no retrieval under any enabled rule (the same reading as `scan`), so
        the per-span look keeps only its ids and parent, not its attributes."""
        if self._always_look:
            return True
        automaton, checks = self._automaton, self._checks
        return bool((automaton is not None and automaton.find_matches_as_indexes(span_bytes))
                    or (checks is not None and checks.find_matches_as_indexes(span_bytes)))

    def scan(self, data: bytes, ranges: Sequence[tuple[int, int]]) -> list[ResourceCount]:
        """One `ResourceCount` per (start, end) range of `data` (the ResourceSpans bodies, in
        order, not overlapping). Matches outside every range are ignored."""
        counts = [ResourceCount(needs_look=self._always_look) for _ in ranges]
        tallies: list[Counter[int]] = [Counter() for _ in ranges]
        matches = self._automaton.find_matches_as_indexes(data, overlapping=True) if self._automaton and ranges else []
        if matches and len(ranges) == 1 and ranges[0] == (0, len(data)):
            # The usual single-resource request: tally in C, no Python work per match.
            tallies[0] = Counter(map(itemgetter(0), matches))
        elif matches:
            starts = [start for start, _ in ranges]
            for pattern, start, end in matches:
                index = bisect_right(starts, start) - 1
                if index >= 0 and end <= ranges[index][1]:
                    tallies[index][pattern] += 1
        for count, tally, (start, end) in zip(counts, tallies, ranges):
            self._add(count, tally)
            if self._checks is not None:
                whole = start == 0 and end == len(data)
                found = self._checks.find_matches_as_indexes(data if whole else memoryview(data)[start:end])
                if len(self._check_index) == 1:  # the usual case: OpenInference's first document
                    if found:
                        count.checked[self._check_index[0]] = len(found)
                else:
                    for pattern, hits in Counter(map(itemgetter(0), found)).items():
                        count.checked[self._check_index[pattern]] = hits
            self._check(count)
        return counts

    def _add(self, count: ResourceCount, tally: Counter[int]) -> None:
        for pattern, hits in tally.items():
            kind = self._kinds[pattern]
            if kind == _LOOK:
                count.needs_look = True
            else:
                count.exact[kind] = count.exact.get(kind, 0) + hits

    def _check(self, count: ResourceCount) -> None:
        if len(count.exact) > 1:
            # One span may carry both: only a per-span look avoids counting it twice.
            count.needs_look = True
        for index in self._check_index:
            if count.exact.get(index, 0) != count.checked.get(index, 0):
                # Declared spans without documents (nested ones count once), or documents on
                # spans that do not declare themselves: only the spans themselves tell.
                count.needs_look = True
