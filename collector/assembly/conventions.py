"""Finding retrievals in a trace's spans (SPEC.md section 4).

Four conventions, tried per span in a configurable order, first match wins:
OpenInference, OTel GenAI, OpenLLMetry (db.query.result events, or LangChain retriever spans with
traceloop.entity.* JSON) and a user mapping of attribute keys / simple JSON paths. The answer is
read from the LLM span that follows the retrieval under the same parent, else from the root span.

Work is bounded on hostile input: at most `max_contexts` contexts per retrieval (the rest are
counted in `Extracted.dropped_contexts`), strings were already cut when spans were copied.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from ctxprec.collector.assembly.spans import SpanRecord
from ctxprec.collector.model import Retrieval, RetrievedContext

OPENINFERENCE = "openinference"
GENAI = "genai"
OPENLLMETRY = "openllmetry"
MAPPING = "mapping"
ALL_CONVENTIONS = (OPENINFERENCE, GENAI, OPENLLMETRY, MAPPING)

OI_KIND = "openinference.span.kind"
GENAI_OPERATION = "gen_ai.operation.name"
OLLM_EVENT = "db.query.result"
OLLM_DOCUMENT = "db.query.result.document"
TRACELOOP_INPUT = "traceloop.entity.input"
TRACELOOP_OUTPUT = "traceloop.entity.output"
TRACELOOP_NAME = "traceloop.entity.name"

_OI_DOC = re.compile(r"^retrieval\.documents\.(\d{1,9})\.document\.(content|id|score|metadata)$")
_TEXT_FIELDS = ("content", "text", "page_content", "document", "pageContent")
# Attributes that hold documents: kept out of `Retrieval.attributes`, which sampling rules read.
_DOC_PREFIXES = ("retrieval.documents.", "gen_ai.retrieval.documents", TRACELOOP_OUTPUT, TRACELOOP_INPUT)
_MAX_RULE_ATTRIBUTES = 64
_MAX_RULE_VALUE_CHARS = 256


@dataclass(frozen=True, slots=True)
class AttributeMapping:
    """The user mapping. Each field is an attribute key, optionally followed by a JSON path into
    that attribute's (JSON) value: `"app.request$.question"`, `"app.docs$[*].text"`.
    `contexts` may instead be a per-item pattern with `{i}`: `"app.docs.{i}.text"`."""

    query: str
    contexts: str
    output: str | None = None

    def query_key(self) -> str:
        return self.query.split("$", 1)[0]


@dataclass(slots=True)
class ConventionConfig:
    order: tuple[str, ...] = (OPENINFERENCE, GENAI, OPENLLMETRY, MAPPING)
    mapping: AttributeMapping | None = None
    retriever_attribute: str | None = None  # None: the span name names the retriever
    expected_output_attribute: str | None = None
    max_contexts: int = 100
    max_attribute_chars: int = 20_000

    def __post_init__(self) -> None:
        unknown = [name for name in self.order if name not in ALL_CONVENTIONS]
        if unknown:
            raise ValueError(f"conventions.order: unknown convention(s) {unknown}; known: {list(ALL_CONVENTIONS)}")
        if self.max_contexts < 1:
            raise ValueError(f"conventions.max_contexts: must be at least 1, got {self.max_contexts}")


@dataclass(slots=True)
class Extracted:
    retrieval: Retrieval
    span: SpanRecord
    dropped_contexts: int = 0


@dataclass(slots=True)
class _Found:
    query: str
    contexts: list[RetrievedContext] = field(default_factory=list)
    dropped: int = 0
    output: str | None = None


class Conventions:
    def __init__(self, config: ConventionConfig | None = None) -> None:
        self.config = config or ConventionConfig()
        order = [name for name in self.config.order if name != MAPPING or self.config.mapping is not None]
        self.order: tuple[str, ...] = tuple(order)
        self._matchers: dict[str, Callable[[SpanRecord], bool]] = {
            OPENINFERENCE: is_openinference_retrieval, GENAI: is_genai_retrieval, OPENLLMETRY: _is_openllmetry,
            MAPPING: self._is_mapping,
        }

    # -- detection (cheap, per span) --

    def match(self, span: SpanRecord) -> str | None:
        """The first convention under which `span` is a retrieval, or None."""
        for name in self.order:
            if self._matchers[name](span):
                return name
        return None

    def _is_mapping(self, span: SpanRecord) -> bool:
        mapping = self.config.mapping
        return mapping is not None and mapping.query_key() in span.attributes

    # -- extraction (per ready trace) --

    def extract(self, spans: Sequence[SpanRecord]) -> list[Extracted]:
        out: list[Extracted] = []
        for span in spans:
            convention = self.match(span)
            if convention is None:
                continue
            found = self._extract_one(convention, span)
            retrieval = Retrieval(
                trace_id=span.trace_id.hex(),
                span_id=span.span_id.hex(),
                service=span.service,
                query=found.query,
                contexts=found.contexts,
                retriever=self._retriever_name(span),
                output=found.output if found.output is not None else answer_for(span, spans),
                expected_output=self._expected_output(span, spans),
                attributes=rule_attributes(span.attributes),
                end_time_unix_nano=span.end_time_unix_nano,
                convention=convention,
            )
            out.append(Extracted(retrieval, span, found.dropped))
        return out

    def _extract_one(self, convention: str, span: SpanRecord) -> _Found:
        limit = self.config.max_contexts
        if convention == OPENINFERENCE:
            return _openinference(span, limit)
        if convention == GENAI:
            return _genai(span, limit)
        if convention == OPENLLMETRY:
            return _openllmetry(span, limit)
        assert self.config.mapping is not None
        return _mapping(span, self.config.mapping, limit)

    def _retriever_name(self, span: SpanRecord) -> str:
        key = self.config.retriever_attribute
        if key:
            value = span.attributes.get(key)
            if value is not None and value != "":
                return str(value)
        return span.name

    def _expected_output(self, span: SpanRecord, spans: Sequence[SpanRecord]) -> str | None:
        key = self.config.expected_output_attribute
        if not key:
            return None
        for candidate in _retrieval_then_root_then_rest(span, spans):
            value = candidate.attributes.get(key)
            if isinstance(value, str) and value:
                return value
        return None


# -- matchers --

def is_openinference_retrieval(span: SpanRecord) -> bool:
    # Exact value, as the spec writes it: the ingest fast path counts this exact encoding.
    return span.attributes.get(OI_KIND) == "RETRIEVER"


def is_genai_retrieval(span: SpanRecord) -> bool:
    return span.attributes.get(GENAI_OPERATION) == "retrieval"


def _is_openllmetry(span: SpanRecord) -> bool:
    if any(event.name == OLLM_EVENT for event in span.events):
        return True
    if TRACELOOP_OUTPUT not in span.attributes:
        return False
    label = f"{span.name} {span.attributes.get(TRACELOOP_NAME, '')}".lower()
    return "retriev" in label


# -- extractors --

def _openinference(span: SpanRecord, limit: int) -> _Found:
    fields: dict[int, dict[str, Any]] = {}
    for key, value in span.attributes.items():
        if not key.startswith("retrieval.documents."):
            continue
        match = _OI_DOC.match(key)
        if match:
            fields.setdefault(int(match.group(1)), {})[match.group(2)] = value
    indices = sorted(i for i, f in fields.items() if _text(f.get("content")) is not None)
    contexts = [_context(fields[i].get("content"), fields[i].get("id"), fields[i].get("score"),
                         fields[i].get("metadata")) for i in indices[:limit]]
    query = _query_text(span.attributes.get("input.value"))
    return _Found(query, contexts, max(0, len(indices) - limit))


def _genai(span: SpanRecord, limit: int) -> _Found:
    query = _text(span.attributes.get("gen_ai.retrieval.query.text")) or ""
    items = _json_list(span.attributes.get("gen_ai.retrieval.documents"))
    contexts, dropped = _contexts_from_items(items, limit)
    return _Found(query, contexts, dropped)


def _openllmetry(span: SpanRecord, limit: int) -> _Found:
    events = [e for e in span.events if e.name == OLLM_EVENT]
    if events:
        documents = [e for e in events if _text(e.attributes.get(OLLM_DOCUMENT)) is not None]
        contexts = [
            _context(e.attributes.get(OLLM_DOCUMENT), e.attributes.get("db.query.result.id"),
                     e.attributes.get("db.query.result.score", e.attributes.get("db.query.result.distance")),
                     e.attributes.get("db.query.result.metadata"))
            for e in documents[:limit]
        ]
        query = ""
        for key in ("db.query.text", "db.vector.query.text", "db.query.embeddings.text", "input.value",
                    TRACELOOP_INPUT):
            if key in span.attributes:
                query = _query_text(span.attributes[key])
                if query:
                    break
        return _Found(query, contexts, max(0, len(documents) - limit))
    query = _query_text(span.attributes.get(TRACELOOP_INPUT))
    items = _documents_in(_loads(span.attributes.get(TRACELOOP_OUTPUT)))
    contexts, dropped = _contexts_from_items(items, limit)
    return _Found(query, contexts, dropped)


def _mapping(span: SpanRecord, mapping: AttributeMapping, limit: int) -> _Found:
    query_value = resolve(span.attributes, mapping.query)
    query = _text(query_value) or ""
    if "{i}" in mapping.contexts:
        items: list[Any] = []
        for i in range(limit + 1):
            key = mapping.contexts.replace("{i}", str(i))
            if key not in span.attributes:
                break
            items.append(span.attributes[key])
        contexts, dropped = _contexts_from_items(items, limit)
        if len(items) > limit:
            # Count every further index without materializing more than a boolean each.
            prefix, _, suffix = mapping.contexts.partition("{i}")
            dropped = sum(1 for k in span.attributes if k.startswith(prefix) and k.endswith(suffix)) - limit
    else:
        value = resolve(span.attributes, mapping.contexts)
        items = value if isinstance(value, list) else _json_list(value)
        contexts, dropped = _contexts_from_items(items, limit)
    output = _text(resolve(span.attributes, mapping.output)) if mapping.output else None
    return _Found(query, contexts, max(0, dropped), output)


# -- the answer --

def answer_for(retrieval: SpanRecord, spans: Sequence[SpanRecord]) -> str | None:
    """Output of the LLM span that follows the retrieval under the same parent, else the root
    span's `output.value`."""
    followers = [
        s for s in spans
        if s.parent_span_id == retrieval.parent_span_id and s.span_id != retrieval.span_id
        and s.start_time_unix_nano >= retrieval.start_time_unix_nano and _is_llm(s)
    ]
    for span in sorted(followers, key=lambda s: s.start_time_unix_nano):
        text = llm_output(span)
        if text:
            return text
    for span in spans:
        if span.is_root:
            text = _text(span.attributes.get("output.value"))
            if text:
                return text
    return None


def _is_llm(span: SpanRecord) -> bool:
    attrs = span.attributes
    kind = attrs.get(OI_KIND)
    if isinstance(kind, str) and kind.upper() == "LLM":
        return True
    if attrs.get(GENAI_OPERATION) in ("chat", "text_completion", "generate_content"):
        return True
    return any(key.startswith("gen_ai.completion.") or key == "gen_ai.output.messages" for key in attrs)


def llm_output(span: SpanRecord) -> str | None:
    attrs = span.attributes
    text = _text(attrs.get("output.value"))
    if text:
        return _message_text(_loads(text)) or text
    messages = attrs.get("gen_ai.output.messages")
    if messages is not None:
        text = _message_text(_loads(messages))
        if text:
            return text
    # OpenLLMetry: gen_ai.completion.{i}.content, in index order
    indexed = []
    for key, value in attrs.items():
        if key.startswith("gen_ai.completion.") and key.endswith(".content") and isinstance(value, str):
            middle = key[len("gen_ai.completion."):-len(".content")]
            if middle.isdigit():
                indexed.append((int(middle), value))
    if indexed:
        return "\n".join(v for _, v in sorted(indexed))
    return None


def _message_text(value: Any) -> str | None:
    """Text of an output message list in GenAI form ({role, parts:[{type, content}]}) or the
    common {role, content} / OpenAI choices forms."""
    if isinstance(value, dict):
        for key in ("choices", "messages", "output", "message"):
            if key in value:
                return _message_text(value[key])
        return _text(value.get("content")) or _text(value.get("text"))
    if isinstance(value, list):
        texts: list[str] = []
        for item in value:
            if isinstance(item, dict):
                parts = item.get("parts")
                if isinstance(parts, list):
                    texts.extend(p["content"] for p in parts
                                 if isinstance(p, dict) and isinstance(p.get("content"), str))
                    continue
                text = _message_text(item.get("message")) if "message" in item else None
                text = text or _text(item.get("content")) or _text(item.get("text"))
                if text:
                    texts.append(text)
            elif isinstance(item, str):
                texts.append(item)
        return "\n".join(texts) if texts else None
    return None


# -- helpers --

def _retrieval_then_root_then_rest(span: SpanRecord, spans: Sequence[SpanRecord]) -> Iterable[SpanRecord]:
    yield span
    roots = [s for s in spans if s.is_root]
    yield from roots
    yield from (s for s in spans if s is not span and not s.is_root)


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


def _text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return None


def _loads(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    stripped = value.lstrip()
    if not stripped or stripped[0] not in "[{\"":
        return value
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return value


def _json_list(value: Any) -> list[Any]:
    value = _loads(value)
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        return _documents_in(value)
    return []


def _documents_in(value: Any) -> list[Any]:
    """The list of documents inside a retriever's JSON output, in the shapes LangChain and
    traceloop write: a list, or a list under outputs/documents/output/result."""
    for _ in range(3):
        if isinstance(value, list):
            return value
        if not isinstance(value, dict):
            return []
        for key in ("outputs", "documents", "output", "result", "results"):
            if key in value:
                value = value[key]
                break
        else:
            return []
    return value if isinstance(value, list) else []


def _query_text(value: Any) -> str:
    """The query from `input.value` / `traceloop.entity.input`: a plain string, or JSON with the
    query under a usual key."""
    parsed = _loads(value)
    for _ in range(3):
        if isinstance(parsed, str):
            return parsed
        if isinstance(parsed, dict):
            for key in ("query", "input", "question", "inputs", "text"):
                if key in parsed:
                    parsed = parsed[key]
                    break
            else:
                break
        else:
            break
    text = _text(value)
    return text if text is not None else ""


def _contexts_from_items(items: Sequence[Any], limit: int) -> tuple[list[RetrievedContext], int]:
    contexts: list[RetrievedContext] = []
    usable = 0
    for item in items:
        context = _context_from_item(_loads(item) if isinstance(item, str) and item[:1] == "{" else item)
        if context is None:
            continue
        usable += 1
        if len(contexts) < limit:
            contexts.append(context)
    return contexts, usable - len(contexts)


def _context_from_item(item: Any) -> RetrievedContext | None:
    if isinstance(item, str):
        return RetrievedContext(content=item)
    if not isinstance(item, dict):
        return None
    body = item.get("kwargs") if isinstance(item.get("kwargs"), dict) else item  # LangChain serialized form
    for key in _TEXT_FIELDS:
        text = _text(body.get(key))
        if text is not None:
            return _context(text, body.get("id", item.get("id")), body.get("score", item.get("score")),
                            body.get("metadata"))
    return None


def _context(content: Any, doc_id: Any, score: Any, metadata: Any) -> RetrievedContext:
    meta = _loads(metadata)
    try:
        numeric = float(score) if score is not None and not isinstance(score, bool) else None
    except (TypeError, ValueError, OverflowError):  # OverflowError: a JSON int beyond float range
        numeric = None
    return RetrievedContext(
        content=_text(content) or "",
        id=str(doc_id) if doc_id is not None else None,
        score=numeric,
        metadata=meta if isinstance(meta, dict) else None,
    )


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
    return _walk(_loads(value), tokens)


def _walk(value: Any, tokens: list[tuple[str | None, str | None]]) -> Any:
    for position, (name, index) in enumerate(tokens):
        value = _loads(value)
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
