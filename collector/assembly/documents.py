"""The documents and the query of a retrieval span, per convention.

- OpenInference: `retrieval.documents.{i}.document.content` (`.id`, `.score`, `.metadata`), query
  in `input.value`.
- OTel GenAI: `gen_ai.retrieval.documents` (JSON list; text under `content` or `text`), query in
  `gen_ai.retrieval.query.text`.
- OpenLLMetry: `db.query.result` span events (`db.query.result.document`, in event order), or the
  JSON of `traceloop.entity.output`: LangChain documents (`page_content`), LlamaIndex
  NodeWithScore items (`node.text`, `node.id_`, `score`; each item may itself be a JSON string);
  query in `traceloop.entity.input`.
- The user mapping: attribute keys or JSON paths.

Work is bounded on hostile input: at most `limit` contexts per retrieval (the rest are counted
in `Found.dropped`); strings were already cut when spans were copied.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from ctxprec.collector.assembly.spans import SpanRecord
from ctxprec.collector.assembly.values import (
    as_text,
    loads,
    query_text,
    repr_message_text,
)
from ctxprec.collector.model import RetrievedContext
from pydantic import BaseModel, ConfigDict, Field

OPENINFERENCE = "openinference"
GENAI = "genai"
OPENLLMETRY = "openllmetry"
MAPPING = "mapping"
ALL_CONVENTIONS = (OPENINFERENCE, GENAI, OPENLLMETRY, MAPPING)

OI_KIND = "openinference.span.kind"
GENAI_OPERATION = "gen_ai.operation.name"
GENAI_DOCUMENTS = "gen_ai.retrieval.documents"
GENAI_QUERY = "gen_ai.retrieval.query.text"
OLLM_EVENT = "db.query.result"
OLLM_DOCUMENT = "db.query.result.document"
TRACELOOP_INPUT = "traceloop.entity.input"
TRACELOOP_OUTPUT = "traceloop.entity.output"
TRACELOOP_NAME = "traceloop.entity.name"
TRACELOOP_KIND = "traceloop.span.kind"
OI_FIRST_DOCUMENT = "retrieval.documents.0.document.content"

_OI_DOC = re.compile(r"^retrieval\.documents\.(\d{1,9})\.document\.(content|id|score|metadata)$")
_TEXT_FIELDS = ("content", "text", "page_content", "document", "pageContent")
# The start of a traceloop.entity.output that can hold documents: a list, or an object whose
# first key is one of the documents' containers. Checked before any JSON is parsed.
_DOCUMENTS_PREFIX = re.compile(r'^\s*(\[|\{\s*"(documents|outputs|output|result|results|nodes|source_nodes)"\s*:\s*\[)')


class AttributeMapping(BaseModel):
    """The user mapping. Each field is an attribute key, optionally followed by a JSON path into
    that attribute's (JSON) value: `"app.request$.question"`, `"app.docs$[*].text"`.
    `contexts` may instead be a per-item pattern with `{i}`: `"app.docs.{i}.text"`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    query: str = Field(description="attribute key (or key$json.path) of the query", min_length=1)
    contexts: str = Field(description="attribute key (or key$json.path, or a key pattern with {i}) of the "
                                      "contexts", min_length=1)
    output: str | None = Field(None, description="attribute key (or key$json.path) of the answer")

    def query_key(self) -> str:
        return self.query.split("$", 1)[0]


@dataclass(slots=True)
class Found:
    """What one span says about a retrieval."""

    convention: str
    query: str
    contexts: list[RetrievedContext] = field(default_factory=list)
    dropped: int = 0
    output: str | None = None  # only the user mapping reads an answer off the retrieval span


def read_documents(span: SpanRecord, order: Sequence[str], limit: int,
                   mapping: AttributeMapping | None = None) -> Found | None:
    """The documents of `span` under the first convention (of `order`) that finds any, else the
    query of the first convention that recognises the span at all (a retrieval that returned
    nothing), else None."""
    empty: Found | None = None
    for convention in order:
        found = _READERS[convention](span, limit, mapping)
        if found is None:
            continue
        if found.contexts:
            return found
        empty = empty or found
    return empty


def _openinference(span: SpanRecord, limit: int, _: AttributeMapping | None) -> Found | None:
    attributes = span.attributes
    fields: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        if not key.startswith("retrieval.documents."):
            continue
        match = _OI_DOC.match(key)
        if match:
            fields.setdefault(int(match.group(1)), {})[match.group(2)] = value
    if not fields and attributes.get(OI_KIND) != "RETRIEVER":
        return None
    indices = sorted(i for i, f in fields.items() if as_text(f.get("content")) is not None)
    contexts = [_context(fields[i].get("content"), fields[i].get("id"), fields[i].get("score"),
                         fields[i].get("metadata"), position=i) for i in indices[:limit]]
    return Found(OPENINFERENCE, query_text(attributes.get("input.value")), contexts, max(0, len(indices) - limit))


def _genai(span: SpanRecord, limit: int, _: AttributeMapping | None) -> Found | None:
    attributes = span.attributes
    if GENAI_DOCUMENTS not in attributes and GENAI_QUERY not in attributes:
        return None
    items = _json_list(attributes.get(GENAI_DOCUMENTS))
    contexts, dropped = contexts_from_items(items, limit)
    return Found(GENAI, query_text(attributes.get(GENAI_QUERY)), contexts, dropped)


def _openllmetry(span: SpanRecord, limit: int, _: AttributeMapping | None) -> Found | None:
    attributes = span.attributes
    events = [e for e in span.events if e.name == OLLM_EVENT]
    if events:
        documents = [e for e in events if as_text(e.attributes.get(OLLM_DOCUMENT)) is not None]
        contexts = [
            _context(e.attributes.get(OLLM_DOCUMENT), e.attributes.get("db.query.result.id"),
                     e.attributes.get("db.query.result.score", e.attributes.get("db.query.result.distance")),
                     e.attributes.get("db.query.result.metadata"))
            for e in documents[:limit]
        ]
        query = ""
        for key in ("db.query.text", "db.vector.query.text", "db.query.embeddings.text", "input.value", TRACELOOP_INPUT):
            if key in attributes:
                query = query_text(attributes[key])
                if query:
                    break
        return Found(OPENLLMETRY, query, contexts, max(0, len(documents) - limit))
    output = attributes.get(TRACELOOP_OUTPUT)
    if not isinstance(output, str) or not _DOCUMENTS_PREFIX.match(output):
        return None
    # Only document-shaped items: a task's list of plain strings (a text splitter's chunks) is not
    # a retrieval.
    contexts, dropped = contexts_from_items(documents_in(loads(output)), limit, plain_text=False)
    if not contexts:
        return None
    return Found(OPENLLMETRY, query_text(attributes.get(TRACELOOP_INPUT)), contexts, dropped)


def _mapping(span: SpanRecord, limit: int, mapping: AttributeMapping | None) -> Found | None:
    if mapping is None or mapping.query_key() not in span.attributes:
        return None
    attributes = span.attributes
    query = as_text(resolve(attributes, mapping.query)) or ""
    if "{i}" in mapping.contexts:
        items: list[Any] = []
        for i in range(limit + 1):
            key = mapping.contexts.replace("{i}", str(i))
            if key not in attributes:
                break
            items.append(attributes[key])
        contexts, dropped = contexts_from_items(items, limit)
        if len(items) > limit:
            # Count every further index without materializing more than a boolean each.
            prefix, _, suffix = mapping.contexts.partition("{i}")
            dropped = sum(1 for k in attributes if k.startswith(prefix) and k.endswith(suffix)) - limit
    else:
        value = resolve(attributes, mapping.contexts)
        items = value if isinstance(value, list) else _json_list(value)
        contexts, dropped = contexts_from_items(items, limit)
    output = as_text(resolve(attributes, mapping.output)) if mapping.output else None
    return Found(MAPPING, query, contexts, max(0, dropped), output)


_READERS = {OPENINFERENCE: _openinference, GENAI: _genai, OPENLLMETRY: _openllmetry, MAPPING: _mapping}


def documents_in(value: Any) -> list[Any]:
    """The list of documents inside a retriever's JSON output, in the shapes LangChain, LlamaIndex
    and traceloop write: a list, or a list under documents/outputs/output/result/nodes."""
    for _ in range(3):
        if isinstance(value, list):
            return value
        if not isinstance(value, dict):
            return []
        for key in ("documents", "outputs", "output", "result", "results", "nodes"):
            if key in value:
                value = loads(value[key])
                break
        else:
            return []
    return value if isinstance(value, list) else []


def contexts_from_items(items: Sequence[Any], limit: int, *,
                        plain_text: bool = True) -> tuple[list[RetrievedContext], int]:
    """Contexts from a list of documents, and how many usable ones were over `limit`.
    `plain_text=False` takes only document-shaped items (objects, `Document(...)` reprs)."""
    contexts: list[RetrievedContext] = []
    usable = 0
    for item in items:
        if isinstance(item, str) and item.lstrip()[:1] == "{":
            item = loads(item)
        if not plain_text and isinstance(item, str) and not item.lstrip().startswith("Document("):
            continue
        context = context_from_item(item)
        if context is None:
            continue
        usable += 1
        if len(contexts) < limit:
            contexts.append(context)
    return contexts, usable - len(contexts)


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


def _context(content: Any, doc_id: Any, score: Any, metadata: Any, position: int | None = None) -> RetrievedContext:
    meta = loads(metadata)
    try:
        numeric = float(score) if score is not None and not isinstance(score, bool) else None
    except (TypeError, ValueError, OverflowError):  # OverflowError: a JSON int beyond float range
        numeric = None
    return RetrievedContext(
        content=as_text(content) or "",
        id=str(doc_id) if doc_id is not None and doc_id != "" else None,
        score=numeric,
        metadata=meta if isinstance(meta, dict) else None,
        position=position,
    )


def _json_list(value: Any) -> list[Any]:
    value = loads(value)
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        return documents_in(value)
    return []


_PATH_TOKEN = re.compile(r"\.([^.\[\]]+)|\[(\d+|\*)\]")


def resolve(attributes: dict[str, Any], spec: str | None) -> Any:
    """`key` or `key$.a.b[0]` / `key$[*].text` -> value (None when absent). `[*]` maps the rest
    of the path over a list."""
    if not spec:
        return None
    key, sep, path = spec.partition("$")
    value = attributes.get(key)
    if not sep or value is None:
        return value
    tokens = [(m.group(1), m.group(2)) for m in _PATH_TOKEN.finditer(path)]
    return _walk(loads(value), tokens)


def _walk(value: Any, tokens: list[tuple[str | None, str | None]]) -> Any:
    for position, (name, index) in enumerate(tokens):
        value = loads(value)
        if name is not None:
            value = value.get(name) if isinstance(value, dict) else None
        elif index == "*":
            if not isinstance(value, list):
                return None
            rest = tokens[position + 1:]
            return [_walk(item, rest) for item in value]
        else:
            assert index is not None
            i = int(index)
            value = value[i] if isinstance(value, list) and i < len(value) else None
        if value is None:
            return None
    return value
