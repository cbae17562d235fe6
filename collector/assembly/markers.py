"""Counting unsampled retrievals in a request's bytes, every enabled convention in one pass.

SPEC's rule is that every retrieval ends in exactly one decision, `not_sampled` included, so the
99% of spans that are never decoded must still be counted, from the first request, for every
convention. One search per convention cost a full pass over the bytes each (four passes for the
default conventions); an Aho-Corasick automaton finds all markers in a single pass instead
(`ahocorasick_rs`, packed SIMD for a handful of patterns: faster than one `bytes.count`).

Two kinds of marker:
- exact: the canonical encoding of the span attribute `openinference.span.kind=RETRIEVER` /
  `gen_ai.operation.name=retrieval` (or `vector_db_retrieve`), framed as a `Span.attributes`
  entry (tag 0x4a and the KeyValue's fixed length), so the same attribute on a resource, scope,
  event or link is not counted. One match is one retrieval span. Beside the OpenInference kind,
  the key of a first document (`retrieval.documents.0.document.content`) is counted: when every
  retriever span carries documents the two counts agree and the kind count is exact; when they
  differ (LlamaIndex nests a retriever span without documents inside the one with them, and
  nested retriever spans are one retrieval) the resource gets the per-span look.
- look: conventions that no single byte pattern decides (OpenLLMetry's `db.query.result` event
  or `traceloop.entity.output` attribute, the user mapping's query key), matched as their
  length-prefixed key. Any match means the caller decodes that resource's unsampled spans.

Both exact conventions in one resource also ask for the per-span look (one span may carry
both). The look applies the extraction rules (nested retrievals count once) to the spans of the
request; a nest whose spans are exported in different requests is seen in parts. What the bytes cannot show: a span listing the same retrieval attribute twice, or a
string value that contains a whole framed marker, would be counted twice; an encoder that
writes the attribute in a non-canonical form (value before key) is not counted by its marker.
"""
from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass
from operator import itemgetter
from typing import Sequence

from ahocorasick_rs import BytesAhoCorasick

from ctxprec.collector.assembly.conventions import RETRIEVAL_OPERATIONS
from ctxprec.collector.assembly.documents import (
    GENAI,
    GENAI_OPERATION,
    MAPPING,
    OI_FIRST_DOCUMENT,
    OI_KIND,
    OLLM_EVENT,
    OPENINFERENCE,
    OPENLLMETRY,
    TRACELOOP_OUTPUT,
)
from ctxprec.collector.otlp.wire import encode_varint

_SPAN_ATTRIBUTE_TAG = 0x4A  # Span.attributes: field 9, length-delimited
LOOK = "look"  # a marker that only says: decode these spans and match them one by one


def framed(text: str) -> bytes:
    """`text` as protobuf writes a string field's body: length varint, then UTF-8."""
    raw = text.encode()
    return encode_varint(len(raw)) + raw


def _key_value(key: str, value: str) -> bytes:
    """Body of KeyValue{key, value={string_value}}: field 1 then field 2, as encoders write it."""
    any_value = b"\x0a" + framed(value)
    return b"\x0a" + framed(key) + b"\x12" + encode_varint(len(any_value)) + any_value


OPENINFERENCE_MARKER = _key_value(OI_KIND, "RETRIEVER")
OPENINFERENCE_DOCUMENTS_MARKER = b"\x0a" + framed(OI_FIRST_DOCUMENT)
GENAI_MARKERS = tuple(_key_value(GENAI_OPERATION, operation) for operation in sorted(RETRIEVAL_OPERATIONS))
OPENLLMETRY_MARKERS = (framed(OLLM_EVENT), framed(TRACELOOP_OUTPUT))


@dataclass(slots=True)
class ResourceCount:
    """What one ResourceSpans' bytes say: exact retrieval spans per convention, and whether its
    spans need a per-span look before any count can be trusted."""

    openinference: int = 0
    genai: int = 0
    needs_look: bool = False
    openinference_documents: int = 0  # spans whose first OpenInference document key was seen


class MarkerScanner:
    def __init__(self, conventions: Sequence[str], mapping_query_key: str | None = None) -> None:
        """`conventions`: the enabled ones (Conventions.order); markers of the others are not
        searched, so their spans are not counted, exactly as extraction would ignore them."""
        patterns: list[bytes] = []
        kinds: list[str] = []  # per pattern: OPENINFERENCE, GENAI or LOOK
        for name in conventions:
            if name == OPENINFERENCE:
                patterns.append(_span_attribute(OPENINFERENCE_MARKER))
                kinds.append(OPENINFERENCE)
            elif name == GENAI:
                patterns.extend(_span_attribute(marker) for marker in GENAI_MARKERS)
                kinds.extend(GENAI for _ in GENAI_MARKERS)
            elif name == OPENLLMETRY:
                if GENAI not in conventions:  # OpenLLMetry's retriever spans declare these operations too
                    patterns.extend(_span_attribute(marker) for marker in GENAI_MARKERS)
                    kinds.extend(GENAI for _ in GENAI_MARKERS)
                patterns.extend(OPENLLMETRY_MARKERS)
                kinds.extend(LOOK for _ in OPENLLMETRY_MARKERS)
            elif name == MAPPING and mapping_query_key:
                patterns.append(framed(mapping_query_key))
                kinds.append(LOOK)
        self._kinds = tuple(kinds)
        self._automaton = BytesAhoCorasick(patterns) if patterns else None
        # The documents key is searched on its own: inside the automaton it slows the whole pass
        # tenfold (its prefix is common in OpenInference payloads). Alone, the automaton searches
        # it by its rarest bytes, faster than `bytes.count`.
        self._documents = BytesAhoCorasick([OPENINFERENCE_DOCUMENTS_MARKER]) if OPENINFERENCE in conventions else None

    def scan(self, data: bytes, ranges: Sequence[tuple[int, int]]) -> list[ResourceCount]:
        """One `ResourceCount` per (start, end) range of `data` (the ResourceSpans bodies, in
        order, not overlapping). Matches outside every range are ignored."""
        counts = [ResourceCount() for _ in ranges]
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
            if self._documents is not None:
                whole = start == 0 and end == len(data)
                count.openinference_documents = len(self._documents.find_matches_as_indexes(
                    data if whole else memoryview(data)[start:end]))
            self._check(count)
        return counts

    def _add(self, count: ResourceCount, tally: Counter[int]) -> None:
        for pattern, hits in tally.items():
            kind = self._kinds[pattern]
            if kind == OPENINFERENCE:
                count.openinference += hits
            elif kind == GENAI:
                count.genai += hits
            else:
                count.needs_look = True

    @staticmethod
    def _check(count: ResourceCount) -> None:
        if count.openinference and count.genai:
            # One span may carry both: only a per-span look avoids counting it twice.
            count.needs_look = True
        if count.openinference != count.openinference_documents:
            # Retriever spans without documents (nested ones count once), or documents on spans
            # that do not declare a kind: only the spans themselves tell.
            count.needs_look = True


def _span_attribute(key_value: bytes) -> bytes:
    """A KeyValue body framed as a `Span.attributes` entry. The frame keeps resource, scope,
    event and link attributes (other field numbers) out of the count."""
    return bytes([_SPAN_ATTRIBUTE_TAG]) + encode_varint(len(key_value)) + key_value
