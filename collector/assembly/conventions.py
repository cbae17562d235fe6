"""Finding the retrievals of an assembled trace, with their query, contexts and answer.

A span is taken as a retrieval by a kind or operation attribute
(`openinference.span.kind = RETRIEVER`, `gen_ai.operation.name` = `retrieval` or
`vector_db_retrieve`) or by carrying documents under an enabled convention (documents.py), never
by its name. Retrieval spans nested in one another are one retrieval, as frameworks wrap their
retrievers (LlamaIndex's `retrieve` around `_retrieve`, a multi-query retriever around its
searches): the retrieval is read from the outermost span of the nest that carries documents,
preferring spans that say they are retrievals, and when no span of the nest has documents it is
one retrieval without contexts (decided `no_contexts`). The answer comes from answers.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ctxprec.collector.assembly.answers import (
    CHAIN_OUTPUT,
    NO_ANSWER,
    Answer,
    find_answer,
)
from ctxprec.collector.assembly.documents import (
    ALL_CONVENTIONS,
    GENAI,
    GENAI_OPERATION,
    MAPPING,
    OI_KIND,
    OPENINFERENCE,
    OPENLLMETRY,
    TRACELOOP_INPUT,
    TRACELOOP_NAME,
    TRACELOOP_OUTPUT,
    AttributeMapping,
    Found,
    read_documents,
)
from ctxprec.collector.assembly.spans import SpanRecord
from ctxprec.collector.assembly.trace_tree import TraceTree
from ctxprec.collector.assembly.values import query_text
from ctxprec.collector.config_types import Count, OptionalText, setting
from ctxprec.collector.model import Retrieval
from pydantic import BaseModel, ConfigDict, field_validator

RETRIEVAL_OPERATIONS = frozenset({"retrieval", "vector_db_retrieve"})
# Attributes that hold documents: kept out of `Retrieval.attributes`, which sampling rules read.
_DOC_PREFIXES = ("retrieval.documents.", "gen_ai.retrieval.documents", TRACELOOP_OUTPUT, TRACELOOP_INPUT,
                 "gen_ai.task.output", "gen_ai.task.input")
_MAX_RULE_ATTRIBUTES = 64
_MAX_RULE_VALUE_CHARS = 256

__all__ = ["ALL_CONVENTIONS", "AttributeMapping", "ConventionConfig", "Conventions", "Extracted",
           "GENAI", "MAPPING", "OPENINFERENCE", "OPENLLMETRY", "RETRIEVAL_OPERATIONS", "rule_attributes"]


class ConventionConfig(BaseModel):
    """How retrievals are read from spans (YAML section `conventions`)."""

    model_config = ConfigDict(extra="forbid", validate_default=True)

    order: tuple[str, ...] = setting((OPENINFERENCE, GENAI, OPENLLMETRY, MAPPING),
                                     "conventions tried per span, first that finds documents wins (YAML only)")
    mapping: AttributeMapping | None = setting(None, "your own attribute keys or JSON paths: {query, contexts, "
                                                     "output} (YAML only)")
    retriever_attribute: OptionalText = setting(None, "span attribute naming the retriever (metrics label); "
                                                      "default: traceloop.entity.name, else the span name")
    expected_output_attribute: OptionalText = setting(None, "span attribute holding a reference answer",
                                                      flag="--expected-output-attribute")
    max_contexts: Count = setting(100, "contexts scored per retrieval at most; the rest are counted, not scored")
    max_attribute_chars: Count = setting(20_000, "characters kept of each span attribute value of sampled traces")

    @field_validator("order", mode="before")
    @classmethod
    def _known(cls, raw: Any) -> Any:
        if isinstance(raw, str) or not isinstance(raw, (list, tuple)):
            raise ValueError(f"must be a list of {', '.join(ALL_CONVENTIONS)}")
        unknown = [name for name in raw if name not in ALL_CONVENTIONS]
        if unknown:
            raise ValueError(f"unknown convention {unknown[0]!r}; known: {', '.join(ALL_CONVENTIONS)}")
        return tuple(raw)


@dataclass(slots=True)
class Extracted:
    retrieval: Retrieval
    span: SpanRecord
    dropped_contexts: int = 0


@dataclass(slots=True)
class _Candidate:
    span: SpanRecord
    found: Found
    declared: bool  # a kind/operation attribute says it is a retrieval


class Conventions:
    def __init__(self, config: ConventionConfig | None = None) -> None:
        self.config = config or ConventionConfig()
        order = [name for name in self.config.order if name != MAPPING or self.config.mapping is not None]
        self.order: tuple[str, ...] = tuple(order)
        self._oi = OPENINFERENCE in self.order
        self._operations = GENAI in self.order or OPENLLMETRY in self.order

    # -- detection (per span) --

    def declared(self, span: SpanRecord) -> bool:
        """A kind or operation attribute says `span` is a retrieval."""
        attributes = span.attributes
        return ((self._oi and attributes.get(OI_KIND) == "RETRIEVER")
                or (self._operations and str(attributes.get(GENAI_OPERATION)) in RETRIEVAL_OPERATIONS))

    def is_retrieval(self, span: SpanRecord) -> bool:
        """Declared, or carrying documents under an enabled convention."""
        return self.declared(span) or self._read(span) is not None

    def _read(self, span: SpanRecord) -> Found | None:
        return read_documents(span, self.order, self.config.max_contexts, self.config.mapping)

    # -- a trace's retrievals --

    def extract(self, spans: Sequence[SpanRecord]) -> list[Extracted]:
        tree = TraceTree(spans)
        candidates = self._candidates(spans)
        out: list[Extracted] = []
        for group in _nests(candidates, tree):
            for chosen in _representatives(group, tree):
                out.append(self._extracted(chosen, group, tree))
        out.sort(key=lambda e: e.span.start_time_unix_nano)
        return out

    def count(self, spans: Sequence[SpanRecord]) -> int:
        """How many retrievals `spans` hold, by the same rules as `extract` (for spans that are
        counted, not scored: only what is in `spans` is seen)."""
        tree = TraceTree(spans)
        return sum(len(_representatives(group, tree)) for group in _nests(self._candidates(spans), tree))

    def _candidates(self, spans: Sequence[SpanRecord]) -> list[_Candidate]:
        candidates: list[_Candidate] = []
        for span in spans:
            declared = self.declared(span)
            found = self._read(span)
            if found is None and declared:
                found = Found(OPENINFERENCE if span.attributes.get(OI_KIND) else GENAI, _any_query(span))
            if found is not None:
                candidates.append(_Candidate(span, found, declared))
        return candidates

    def _extracted(self, chosen: _Candidate, group: list[_Candidate], tree: TraceTree) -> Extracted:
        span, found = chosen.span, chosen.found
        query = found.query or next((c.found.query for c in group if c.found.query), "")
        if found.output is not None:
            answer = Answer(found.output, CHAIN_OUTPUT)
        elif found.contexts:
            answer = find_answer(span, found.contexts, tree)
        else:
            answer = NO_ANSWER
        retrieval = Retrieval(
            trace_id=span.trace_id.hex(),
            span_id=span.span_id.hex(),
            service=span.service,
            query=query,
            contexts=found.contexts,
            retriever=self._retriever_name(span),
            output=answer.text,
            expected_output=self._expected_output(span, tree),
            attributes=rule_attributes(span.attributes),
            end_time_unix_nano=span.end_time_unix_nano,
            convention=found.convention,
            answer_source=answer.source,
            answer_clean=answer.clean,
            resource=span.resource,
        )
        return Extracted(retrieval, span, found.dropped)

    def _retriever_name(self, span: SpanRecord) -> str:
        key = self.config.retriever_attribute
        for candidate in (key, TRACELOOP_NAME):
            if candidate:
                value = span.attributes.get(candidate)
                if value is not None and value != "":
                    return str(value)
        return span.name

    def _expected_output(self, span: SpanRecord, tree: TraceTree) -> str | None:
        key = self.config.expected_output_attribute
        if not key:
            return None
        for candidate in (span, *tree.roots(), *(s for s in tree.spans if s is not span and not s.is_root)):
            value = candidate.attributes.get(key)
            if isinstance(value, str) and value:
                return value
        return None


def _any_query(span: SpanRecord) -> str:
    for key in ("input.value", "gen_ai.retrieval.query.text", TRACELOOP_INPUT):
        if key in span.attributes:
            text = query_text(span.attributes[key])
            if text:
                return text
    return ""


def _nests(candidates: list[_Candidate], tree: TraceTree) -> list[list[_Candidate]]:
    """Candidates grouped by nesting (one contains the other, transitively)."""
    parent = list(range(len(candidates)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    index = {c.span.span_id: i for i, c in enumerate(candidates)}
    for i, candidate in enumerate(candidates):
        for ancestor in tree.ancestors(candidate.span):
            j = index.get(ancestor.span_id)
            if j is not None:
                parent[find(i)] = find(j)
    groups: dict[int, list[_Candidate]] = {}
    for i, candidate in enumerate(candidates):
        groups.setdefault(find(i), []).append(candidate)
    return list(groups.values())


def _representatives(group: list[_Candidate], tree: TraceTree) -> list[_Candidate]:
    """The spans a nest is read from: its outermost spans with documents (declared ones first),
    or, when none has documents, its outermost span."""
    with_documents = [c for c in group if c.found.contexts]
    pool = [c for c in with_documents if c.declared] or with_documents or group
    ids = {c.span.span_id for c in pool}
    # `or pool[:1]`: hostile ids (repeated span ids, cycles) can leave no span without an ancestor.
    outermost = [c for c in pool if not any(a.span_id in ids for a in tree.ancestors(c.span))] or pool[:1]
    if with_documents:
        return outermost
    return [min(outermost, key=lambda c: c.span.start_time_unix_nano)]


def rule_attributes(attributes: dict[str, Any]) -> dict[str, Any]:
    """Small scalar attributes of the retrieval span (what sampling rules match on)."""
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        if key.startswith(_DOC_PREFIXES):
            continue
        if isinstance(value, str):
            if len(value) > _MAX_RULE_VALUE_CHARS:
                continue
        elif not isinstance(value, (bool, int, float)):
            continue
        out[key] = value
        if len(out) >= _MAX_RULE_ATTRIBUTES:
            break
    return out
