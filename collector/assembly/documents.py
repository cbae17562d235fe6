"""The documents and the query of a retrieval span, read by the rules of the conventions table.

A rule (table.py: a built-in convention's `retrieval` entry, or a user mapping) names where the
documents are: an `{i}` pattern (one attribute per document, OpenInference), a list attribute
(structured, or JSON text; GenAI, user mappings), a JSON path into an attribute (Mastra's tool
results), or span events (OpenLLMetry's `db.query.result`). Documents are texts or document
objects (LangChain `page_content`, LlamaIndex NodeWithScore `node.text`, generic
`content`/`text`, Haystack `Document(...)` reprs); ids and scores come from their own specs when
the rule gives them, else from each document.

A document with an id or a score but no text (GenAI spans recorded without content capture), or
whose text an instrumentor replaced with a placeholder (`__REDACTED__`), is counted in
`Found.without_text` and kept, with its id, score and rank, in `Found.textless`: such a retrieval
is decided `no_content`, never scored as if empty, unless a resolver looks its documents' text
up by id (collector/resolving/). A source may name ids and no text at all (OpenLLMetry's
`db.search.result` events, a user mapping's `ids` alone): all its documents are textless.

Work is bounded on hostile input: at most `limit` contexts per retrieval (the rest are counted
in `Found.dropped`); strings were already cut when spans were copied.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from ctxprec.collector.assembly.spans import SpanRecord
from ctxprec.collector.assembly.specs import Spec
from ctxprec.collector.assembly.table import RetrievalRule, Source, ToolMatch, table
from ctxprec.collector.assembly.values import (
    as_text,
    literal,
    loads,
    query_text,
    repr_message_text,
)
from ctxprec.collector.model import RetrievedContext

_ID_FIELDS = ("id", "document_id", "id_", "doc_id")
_CONTAINERS = table().document_containers
_TEXT_FIELDS = table().document_text_fields
_REDACTED = table().redacted_texts
# The start of a value that can hold documents: a list, or an object whose first key is one of
# the containers. Checked before any JSON is parsed (a task's output may be large and not documents).
_DOCUMENTS_PREFIX = re.compile(r'^\s*(\[|\{\s*"(' + "|".join(map(re.escape, _CONTAINERS)) + r')"\s*:\s*\[)')


@dataclass(slots=True)
class Found:
    """What one span says about a retrieval."""

    convention: str
    query: str
    contexts: list[RetrievedContext] = field(default_factory=list)
    dropped: int = 0
    output: str | None = None  # only a user mapping reads an answer off the retrieval span
    declared: bool = False  # an attribute (or a mapping's `when`) says the span is a retrieval
    without_text: int = 0  # documents that carry an id or a score but no text
    content_off: bool = False  # declared, but neither a query nor a documents key was recorded
    # Those documents in rank order (content ""; their id, score and position), at most `limit`.
    textless: list[RetrievedContext] = field(default_factory=list)


@dataclass(slots=True)
class _Read:
    present: bool
    contexts: list[RetrievedContext]
    dropped: int = 0
    without_text: int = 0
    textless: list[RetrievedContext] = field(default_factory=list)


_ABSENT = _Read(False, [])


def read_documents(span: SpanRecord, rules: Sequence[RetrievalRule], limit: int) -> Found | None:
    """The documents of `span` under the first rule (of `rules`, in order) that finds any, else
    what the first rule that recognises the span says (a retrieval that returned nothing, or
    only documents without text), else None."""
    empty: Found | None = None
    index_building: bool | None = None
    attributes = span.attributes
    for rule in rules:
        if rule.when and not all(c.holds(span.name, attributes) for c in rule.when):
            continue
        found = read_rule(rule, span, limit)
        if found is None:
            continue
        if rule.built_in:  # asked only of the few spans a rule recognises
            if index_building is None:
                index_building = table().index_building(span.name, attributes)
            if index_building:
                continue
        if found.contexts:
            return found
        empty = empty or found
    return empty


def read_rule(rule: RetrievalRule, span: SpanRecord, limit: int) -> Found | None:
    """`span` read by one rule (its `when` already holds); None when the rule does not
    recognise the span."""
    if rule.tool is not None:
        return read_tool(rule, rule.tool, span, limit)
    attributes = span.attributes
    declared = (rule.when_declares and bool(rule.when)) or any(c.holds(span.name, attributes) for c in rule.declared)
    present = False
    without_text = 0
    textless: list[RetrievedContext] = []
    chosen: _Read | None = None
    for source in rule.sources:
        read = _read_source(source, span, limit)
        present = present or read.present
        if read.without_text > without_text:
            without_text, textless = read.without_text, read.textless
        if read.contexts:
            chosen = read
            break
    if chosen is None and not (declared or present):
        return None
    query = ""
    for spec in rule.query:
        query = query_text(spec.resolve(attributes))
        if query:
            break
    output = as_text(rule.output.resolve(attributes)) if rule.output is not None else None
    if chosen is None:
        # Content capture off: the span says it is a retrieval and records neither its question
        # nor a documents key. Not "returned nothing": nothing was recorded.
        content_off = declared and not present and not query
        return Found(rule.name, query, [], 0, output, declared, without_text, content_off, textless)
    return Found(rule.name, query, chosen.contexts, chosen.dropped, output, declared, 0)


def read_tool(rule: RetrievalRule, tool: ToolMatch, span: SpanRecord, limit: int) -> Found | None:
    """A tool-call span as a retrieval: its result is a list of document-shaped items (or the
    tool is in `conventions.tools.include`, whatever its result); None otherwise."""
    attributes = span.attributes
    if not tool.is_tool(span.name, attributes):
        return None
    name = tool.tool_name(span.name, attributes)
    if tool.excluded(name) or tool.internal_tool(name):
        return None
    included = tool.included(name)
    chosen: _Read | None = None
    recorded = False
    for source in rule.sources:
        value = source.contexts.resolve(attributes)
        if value is None:
            continue
        recorded = True
        items = tool_documents(value)
        if items is not None:
            contexts, dropped, without_text = _contexts(items, limit)
            chosen = _Read(True, contexts, dropped, without_text)
            break
        if included:
            items, whole = _any_documents(value)
            if whole is not None:  # the result itself, as text: not opened again
                chosen = _Read(True, [RetrievedContext(content=whole)])
            else:
                contexts, dropped, without_text = _contexts(items, limit)
                chosen = _Read(True, contexts, dropped, without_text)
            break
    if chosen is None and not included:
        return None
    query = ""
    for spec in rule.query:
        query = argument_query(spec.resolve(attributes), tool.query_fields)
        if query:
            break
    if chosen is None:
        return Found(rule.name, query, [], 0, None, True, 0, not (recorded or query))
    return Found(rule.name, query, chosen.contexts, chosen.dropped, None, included,
                 0 if chosen.contexts else chosen.without_text)


def tool_documents(value: Any) -> list[Any] | None:
    """The documents of a tool's result when it is a non-empty list of document-shaped items
    (texts, or objects with a text field, optional id, score and metadata), as it stands or
    under one of the containers; None for any other result (a weather report, a number)."""
    items = documents_in(literal(value))
    if not items:
        return None
    for item in items:
        if isinstance(item, str):
            if item.lstrip()[:1] == "{":
                item = loads(item)
            elif not item.strip():
                return None
        if not isinstance(item, str) and document_text(item) is None:
            return None
    return items


def _any_documents(value: Any) -> tuple[list[Any], str | None]:
    """A named tool's result read as leniently as it comes: its documents, else the first list
    of them among an object's values, else (second) the whole result as one text."""
    decoded = literal(value)
    items = documents_in(decoded)
    if any(isinstance(i, str) or document_text(i) is not None for i in items):
        return items, None
    if isinstance(decoded, dict):
        for inner in decoded.values():
            inner = loads(inner)
            if isinstance(inner, list) and any(document_text(i) is not None for i in inner):
                return inner, None
    if decoded in (None, [], {}, ""):
        return [], None
    text = value if isinstance(value, str) else json.dumps(decoded, ensure_ascii=False, default=str)
    return [], text if text.strip() else None


def document_text(item: Any) -> str | None:
    """The text of a document object (the shapes `context_from_item` reads), None when the
    item is not one. Only text counts: an object whose fields hold numbers is no document."""
    if not isinstance(item, dict):
        return None
    node = item.get("node")
    if isinstance(node, dict):
        text = node.get("text")
        return text if isinstance(text, str) else None
    body = item.get("kwargs") if isinstance(item.get("kwargs"), dict) else item
    for key in _TEXT_FIELDS:
        text = body.get(key)
        if isinstance(text, str):
            return text
    return None


def argument_query(value: Any, fields: Sequence[str]) -> str:
    """The question among a tool call's arguments: the first argument named in `fields`, else
    the only text argument; the arguments as a JSON object (or a Python literal), wrapped in
    `{"args": [...], "kwargs": {...}}` by some instrumentors, or plain text."""
    decoded = literal(value)
    if isinstance(decoded, str):
        return decoded.strip()
    if not isinstance(decoded, dict):
        return ""
    arguments = _arguments(decoded)
    for name in fields:
        found = arguments.get(name)
        if isinstance(found, str) and found.strip():
            return found
    texts = [v for v in arguments.values() if isinstance(v, str) and v.strip()]
    return texts[0] if len(texts) == 1 else ""


def _arguments(decoded: dict[str, Any]) -> dict[str, Any]:
    """Named arguments, unwrapped from an instrumentor's envelope (smolagents' and CrewAI's
    bound `args`/`kwargs`, an `arguments` or `input` object)."""
    out: dict[str, Any] = {}
    for key in ("kwargs", "arguments", "input", "args"):
        inner = loads(decoded.get(key))
        if isinstance(inner, dict):
            out.update(inner)
        elif key == "args" and isinstance(inner, list) and len(inner) == 1:
            only = loads(inner[0])
            if isinstance(only, dict):
                out.update(only)
            elif isinstance(only, str):
                out.setdefault("args", only)
    for key, item in decoded.items():
        if key not in ("kwargs", "arguments", "args") and key not in out:
            out[key] = item
    return out


def _read_source(source: Source, span: SpanRecord, limit: int) -> _Read:
    if source.events is not None:
        return _read_events(source, span, limit)
    listed = source.contexts or source.ids  # a user mapping may name ids alone
    if listed is not None and listed.pattern:
        return _read_ranks(source, span.attributes, limit)
    return _read_list(source, span.attributes, limit)


def _read_events(source: Source, span: SpanRecord, limit: int) -> _Read:
    events = [e for e in span.events if e.name == source.events]
    if not events:
        return _ABSENT
    contexts: list[RetrievedContext] = []
    textless: list[RetrievedContext] = []
    usable = without_text = 0
    for event in events:
        values = event.attributes
        text = as_text(values.get(source.contexts.key)) if source.contexts is not None else None
        doc_id = values.get(source.ids.key) if source.ids is not None else None
        score = next((values[s.key] for s in source.scores if s.key in values), None)
        if text is None or text in _REDACTED:
            if text is not None or doc_id is not None or score is not None:
                without_text += 1
                _keep_textless(textless, limit, doc_id, score)
            continue
        usable += 1
        if len(contexts) < limit:
            metadata = values.get(source.metadata.key) if source.metadata is not None else None
            contexts.append(_context(text, doc_id, score, metadata))
    return _Read(True, contexts, usable - len(contexts), without_text, textless)


def _keep_textless(textless: list[RetrievedContext], limit: int, doc_id: Any, score: Any,
                   position: int | None = None) -> None:
    """A document without text, kept (up to `limit`) for a resolver to look its text up by id."""
    if len(textless) < limit:
        textless.append(_context("", doc_id, score, None, position=position))


def _read_ranks(source: Source, attributes: dict[str, Any], limit: int) -> _Read:
    """One attribute per document (`prefix.{i}.suffix`), in rank order; gaps are skipped."""
    texts, ids, scores, metadata = _rank_fields(source, attributes)
    if not (texts or ids or any(scores) or metadata):
        return _ABSENT
    redacted = {i for i, value in texts.items() if isinstance(value, str) and value in _REDACTED}
    indices = sorted(i for i, value in texts.items()
                     if i not in redacted and (as_text(value) is not None or isinstance(value, dict)))
    contexts: list[RetrievedContext] = []
    for i in indices[:limit]:
        value = texts[i]
        score = next((s[i] for s in scores if i in s), None)
        if isinstance(value, dict):  # a structured document in one attribute
            context = context_from_item(value)
            if context is None:
                continue
            context.position = i
            _override(context, ids.get(i), score)
            contexts.append(context)
        else:
            contexts.append(_context(value, ids.get(i), score, metadata.get(i), position=i))
    ranks = sorted((set(ids) | {i for s in scores for i in s} | redacted) - set(indices))
    textless: list[RetrievedContext] = []
    for i in ranks:
        _keep_textless(textless, limit, ids.get(i), next((s[i] for s in scores if i in s), None), position=i)
    return _Read(True, contexts, max(0, len(indices) - limit), len(ranks), textless)


def _rank_fields(source: Source, attributes: dict[str, Any]
                 ) -> tuple[dict[int, Any], dict[int, Any], list[dict[int, Any]], dict[int, Any]]:
    """The texts, ids, scores and metadata of a pattern source by rank, in one pass over the
    attributes with one regex for all of its patterns (every span of a sampled trace is read,
    most of them without any such key: nothing is allocated for those)."""
    specs = source.rank_specs
    found: list[dict[int, Any]] | None = None
    prefix, pattern = source.rank_prefix, source.rank_regex
    for key, value in attributes.items():
        if key.startswith(prefix):
            match = pattern.match(key)
            if match is not None:
                if found is None:
                    found = [{} for _ in specs]
                group = match.lastindex
                assert group is not None
                found[group - 1][int(match.group(group))] = value
    if source.rank_mixed:
        found = found or [{} for _ in specs]
        for n, spec in enumerate(specs):
            if spec is not None and not spec.pattern:
                found[n] = _ranked(spec, attributes)
    if found is None:
        return _NO_RANKS
    return found[0], found[1], found[2:2 + len(source.scores)], found[-1]


_NO_RANKS: tuple[dict[int, Any], dict[int, Any], list[dict[int, Any]], dict[int, Any]] = ({}, {}, [], {})


def _ranked(spec: Spec | None, attributes: dict[str, Any]) -> dict[int, Any]:
    if spec is None:
        return {}
    if spec.pattern:
        return spec.ranks(attributes)
    value = spec.resolve(attributes)
    return dict(enumerate(value)) if isinstance(value, list) else {}


def _read_list(source: Source, attributes: dict[str, Any], limit: int) -> _Read:
    """A list of documents: an attribute (structured, or JSON text), or a JSON path into one."""
    spec = source.contexts if source.contexts is not None else source.ids
    if spec is None or spec.key not in attributes:
        return _ABSENT
    raw = attributes[spec.key]
    if source.documents_only and not (isinstance(raw, str) and _DOCUMENTS_PREFIX.match(raw)) \
            and not isinstance(raw, list):
        return _ABSENT
    value = spec.resolve(attributes)
    items = documents_in(loads(value))
    if source.require == "list" and not isinstance(loads(value), list):
        return _ABSENT
    ids = _ranked(source.ids, attributes)
    scores = [_ranked(s, attributes) for s in source.scores]
    textless: list[RetrievedContext] = []
    if source.contexts is None:  # ids alone: every document is known by its id only
        items = [{"id": doc_id} for doc_id in items]
    contexts, dropped, without_text = _contexts(items, limit, documents_only=source.documents_only, ids=ids,
                                                scores=scores, textless=textless)
    if source.require == "documents" and not contexts:
        return _ABSENT
    return _Read(True, contexts, dropped, without_text, textless)


def documents_in(value: Any) -> list[Any]:
    """The list of documents inside a value: a list, or a list under one of the containers
    (documents/outputs/output/result/results/nodes), a few levels deep."""
    for _ in range(3):
        if isinstance(value, list):
            return value
        if not isinstance(value, dict):
            return []
        for key in _CONTAINERS:
            if key in value:
                value = loads(value[key])
                break
        else:
            return []
    return value if isinstance(value, list) else []


def _contexts(items: Sequence[Any], limit: int, *, documents_only: bool = False,
              ids: dict[int, Any] | None = None,
              scores: Sequence[dict[int, Any]] = (),
              textless: list[RetrievedContext] | None = None) -> tuple[list[RetrievedContext], int, int]:
    """Contexts from a list of documents, how many usable ones were over `limit`, and how many
    documents carried no text (kept in `textless`, when given, with their ids and scores).
    `documents_only` takes only document-shaped items (objects, `Document(...)` reprs): a task's
    list of plain strings (a text splitter's chunks) is not one."""
    contexts: list[RetrievedContext] = []
    usable = without_text = 0
    for rank, item in enumerate(items):
        if isinstance(item, str) and item.lstrip()[:1] == "{":
            item = loads(item)
        if documents_only and isinstance(item, str) and not item.lstrip().startswith("Document("):
            continue
        context = context_from_item(item)
        if context is None or context.content in _REDACTED:
            if context is not None or _textless_document(item):
                without_text += 1
                if textless is not None:
                    doc_id, score = _identity(item)
                    own_id = (ids or {}).get(rank)
                    own_score = next((s[rank] for s in scores if rank in s), None)
                    _keep_textless(textless, limit, own_id if own_id not in (None, "") else doc_id,
                                   own_score if own_score is not None else score)
            continue
        usable += 1
        if len(contexts) < limit:
            score = next((s[rank] for s in scores if rank in s), None)
            _override(context, (ids or {}).get(rank), score)
            contexts.append(context)
    return contexts, usable - len(contexts), without_text


def _override(context: RetrievedContext, doc_id: Any, score: Any) -> None:
    """Ids and scores the rule reads from their own place win over the document's own."""
    if doc_id is not None and doc_id != "":
        context.id = str(doc_id)
    numeric = _number(score)
    if numeric is not None:
        context.score = numeric


def _identity(item: Any) -> tuple[Any, Any]:
    """The id and score a document object carries (its own, or its LlamaIndex node's id)."""
    if not isinstance(item, dict):
        return None, None
    body = next((item[k] for k in ("node", "kwargs") if isinstance(item.get(k), dict)), item)
    doc_id = next((body.get(k) for k in _ID_FIELDS if body.get(k) not in (None, "")), None)
    return doc_id, item.get("score")


def _textless_document(item: Any) -> bool:
    """A document object that identifies a document (id or score) but carries no text."""
    if not isinstance(item, dict):
        return False
    body = item.get("node") if isinstance(item.get("node"), dict) else item
    return any(body.get(k) not in (None, "") for k in _ID_FIELDS) or item.get("score") is not None


def context_from_item(item: Any) -> RetrievedContext | None:
    """One document: text, a Haystack `Document(...)` repr, or a dict in the LangChain (plain or
    serialised), LlamaIndex NodeWithScore or generic {content|text|...} shape."""
    if isinstance(item, str):
        if item.lstrip().startswith("Document("):
            text = repr_message_text(item)
            return RetrievedContext(content=text) if text is not None else None
        return RetrievedContext(content=item)
    if not isinstance(item, dict):
        return None
    node = item.get("node")
    if isinstance(node, dict):  # LlamaIndex NodeWithScore
        text = as_text(node.get("text"))
        if text is None:
            return None
        return _context(text, node.get("id_", node.get("id")), item.get("score"), node.get("metadata"))
    body = item.get("kwargs") if isinstance(item.get("kwargs"), dict) else item  # LangChain serialised form
    for key in _TEXT_FIELDS:
        text = as_text(body.get(key))
        if text is not None:
            metadata = body.get("metadata")
            doc_id = body.get("id", item.get("id"))
            if doc_id is None and isinstance(metadata, dict):
                doc_id = metadata.get("id")
            return _context(text, doc_id, body.get("score", item.get("score")), metadata)
    return None


def _number(score: Any) -> float | None:
    try:
        return float(score) if score is not None and not isinstance(score, bool) else None
    except (TypeError, ValueError, OverflowError):  # OverflowError: a JSON int beyond float range
        return None


def _context(content: Any, doc_id: Any, score: Any, metadata: Any, position: int | None = None) -> RetrievedContext:
    meta = loads(metadata)
    return RetrievedContext(
        content=as_text(content) or "",
        id=str(doc_id) if doc_id is not None and doc_id != "" else None,
        score=_number(score),
        metadata=meta if isinstance(meta, dict) else None,
        position=position,
    )
