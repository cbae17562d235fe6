"""The list of documents the model saw: a retrieval's documents as a re-ranker or post-processor
later in its nest left them (a subset, a new order), matched by document id.

A retrieval span records what the retriever returned; apps often re-rank or filter it before the
model sees it (OpenInference `RERANKER` spans, LlamaIndex node post-processors such as
`LLMRerank`). Context precision must judge the list the model saw, in its order. The spans that
say so are described in the conventions table (`reranking`); a span is taken when it starts
after the retrieval started, sits under the same parent as the retrieval's nest (not inside it),
and lists only ids the current list holds. Several (a filter, then a re-ranker) are applied in
the order they started. A retrieval whose documents carry no ids is scored as it was returned.
"""
from __future__ import annotations

from typing import Any, Sequence

from ctxprec.collector.assembly.spans import SpanRecord
from ctxprec.collector.assembly.table import Reranking, table
from ctxprec.collector.assembly.trace_tree import TraceTree
from ctxprec.collector.model import RetrievedContext

_RULES = table().reranking
_MAX_IDS = 1000


def output_ids(span: SpanRecord, rules: Sequence[Reranking] = _RULES) -> list[str] | None:
    """The document ids a span outputs, in order, by the first rule that reads any."""
    attributes = span.attributes
    for rule in rules:
        if rule.declared and not any(c.holds(span.name, attributes) for c in rule.declared):
            continue
        ids = _ids(rule, attributes)
        if ids:
            return ids
    return None


def _ids(rule: Reranking, attributes: dict[str, Any]) -> list[str]:
    if rule.ids is not None:
        if rule.ids.pattern:
            ranked = rule.ids.ranks(attributes)
            return [str(ranked[i]) for i in sorted(ranked)[:_MAX_IDS] if ranked[i] not in (None, "")]
        value = rule.ids.resolve(attributes)
        return [str(v) for v in value[:_MAX_IDS] if v not in (None, "")] if isinstance(value, list) else []
    assert rule.ids_in_text is not None and rule.text_key is not None
    text = attributes.get(rule.text_key)
    if not isinstance(text, str) or (rule.text_marker is not None and rule.text_marker not in text):
        return []
    out: list[str] = []
    for match in rule.ids_in_text.finditer(text):
        out.append(match.group(1))
        if len(out) == _MAX_IDS:
            break
    return out


_RERANKERS = "reranking.spans"


def _rerankers(tree: TraceTree) -> tuple[list[int], list[tuple[SpanRecord, list[str]]]]:
    """The trace's spans that output document ids, as positions in its depth-first order (read
    once per trace: most traces have none)."""
    found = tree.memo.get(_RERANKERS)
    if found is None:
        positions: list[int] = []
        entries: list[tuple[SpanRecord, list[str]]] = []
        for position, span in enumerate(tree.order()):
            wanted = output_ids(span)
            if wanted:
                positions.append(position)
                entries.append((span, wanted))
        found = tree.memo[_RERANKERS] = (positions, entries)
    return found


def seen_by_model(contexts: list[RetrievedContext], nest: Sequence[SpanRecord], tree: TraceTree
                  ) -> list[RetrievedContext]:
    """`contexts` as the re-rankers after the nest left them (unchanged without any)."""
    if not _RULES or not any(c.id for c in contexts):
        return contexts
    positions, entries = _rerankers(tree)
    if not entries:
        return contexts
    ids = {s.span_id for s in nest}
    top = next((s for s in nest if not any(a.span_id in ids for a in tree.ancestors(s))), nest[0])
    parent = tree.parent(top)
    start = min(s.start_time_unix_nano for s in nest)
    # Under the nest's parent (the parent itself, an ancestor, left out), or anywhere without one.
    scope = [(tree.position(parent) + 1, tree.interval(parent)[1])] if parent is not None else [(0, tree.size())]
    inside = [tree.interval(s) for s in nest]
    later = sorted((entries[i] for i in tree.in_ranges(positions, scope)
                    if entries[i][0].span_id not in ids and entries[i][0].start_time_unix_nano >= start
                    and not any(low <= positions[i] < high for low, high in inside)),
                   key=lambda e: (e[0].start_time_unix_nano, e[0].end_time_unix_nano))
    current = contexts
    for span, wanted in later:
        if len(set(wanted)) != len(wanted):
            continue
        by_id = {c.id: c for c in current if c.id}
        if all(i in by_id for i in wanted):
            current = [by_id[i] for i in wanted]
    return current
