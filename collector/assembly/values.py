"""Reading clean text out of the values instrumentors write: JSON of known shapes, message lists,
and the Python reprs some frameworks serialise their objects as.

Instrumentors record inputs and outputs as whatever the framework passed around: LangChain's
`{"generations": [[{"text": ...}]]}`, Haystack's `{"replies": ["ChatMessage(... text='...')"]}`,
LlamaIndex's `{"query_bundle": {"query_str": ...}}`, GenAI message parts, OpenLLMetry's
`{"outputs": ...}`. The judge must see the answer and the question as text, never a container,
so each known shape is unwrapped; an unknown JSON shape is used as it stands and reported as not
clean (`Text.clean`), so that callers can mark it.
"""
from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any, Iterator

_MAX_DEPTH = 8

# Keys under which frameworks put a question, most specific first.
QUERY_KEYS = ("query_str", "query", "question", "str_or_query_bundle", "query_bundle", "input", "inputs",
              "user_input", "text", "prompt")
# Keys under which frameworks put an answer, most specific first.
_ANSWER_KEYS = ("generations", "replies", "choices", "response", "answer", "outputs", "output", "messages",
                "message", "content", "text", "result")
_REPR_TEXT = re.compile(r"""\btext=('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""", re.S)
_REPR_CONTENT = re.compile(r"""\bcontent(?:=|: )('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""", re.S)
_WHITESPACE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class Text:
    value: str
    clean: bool = True  # False: an unknown shape, used as it stood


def loads(value: Any) -> Any:
    """JSON text -> value; anything else (or text that is not JSON) unchanged."""
    if not isinstance(value, str):
        return value
    stripped = value.lstrip()
    if not stripped or stripped[0] not in "[{\"":
        return value
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return value


def literal(value: Any) -> Any:
    """`loads`, and text that is a Python literal (`str()` of a list or a dict, as Semantic
    Kernel records a tool's result) read as one; anything else unchanged. The text was already
    cut to the attribute limit, and the parser refuses deep nesting."""
    decoded = loads(value)
    if not isinstance(decoded, str) or decoded is not value:
        return decoded
    stripped = decoded.strip()
    if stripped[:1] not in ("[", "{") or stripped[-1:] not in ("]", "}"):
        return decoded
    try:
        return ast.literal_eval(stripped)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return decoded


def as_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return None


def normalize(text: str) -> str:
    """Whitespace folded to single spaces: how context text is compared with prompts."""
    return _WHITESPACE.sub(" ", text).strip()


def strings_in(value: Any, depth: int = 0) -> Iterator[str]:
    """Every string inside a (JSON-decoded) value, JSON strings opened on the way."""
    if depth > _MAX_DEPTH:
        return
    value = loads(value)
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings_in(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            yield from strings_in(item, depth + 1)


def query_text(value: Any) -> str:
    """The question in an input value: plain text, or JSON with it under a usual key
    (`query`, `question`, `input`, `query_bundle.query_str`, `str_or_query_bundle`, ...)."""
    found = _find_query(loads(value), 0)
    if found is not None:
        return found
    text = as_text(value)
    return text if text is not None else ""


def _find_query(value: Any, depth: int) -> str | None:
    if depth > _MAX_DEPTH:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        for key in QUERY_KEYS:
            if key in value:
                found = _find_query(loads(value[key]), depth + 1)
                if found:
                    return found
        if "kwargs" in value:  # OpenLLMetry wraps call arguments as {"args": [...], "kwargs": {...}}
            found = _find_query(value["kwargs"], depth + 1)
            if found:
                return found
        args = value.get("args")
        if isinstance(args, list) and args:
            return _find_query(loads(args[0]), depth + 1)
    if isinstance(value, list) and len(value) == 1:
        return _find_query(loads(value[0]), depth + 1)
    return None


def answer_text(value: Any) -> Text | None:
    """The answer in an output value. Plain text stays as it is; JSON of a known shape (LangChain
    generations, Haystack replies, OpenAI choices, GenAI message parts, OpenLLMetry outputs,
    LlamaIndex responses) gives its text; another JSON shape is returned whole, not clean."""
    if value is None:
        return None
    decoded = loads(value)
    if isinstance(decoded, str):
        text = repr_message_text(decoded)
        if text is not None:
            return Text(text)
        return Text(decoded) if decoded.strip() else None
    found = _find_answer(decoded, 0)
    if found:
        return Text(found)
    if _messages_without_text(decoded):
        return None  # a turn that only called tools: no answer, not an unknown shape
    raw = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return Text(raw, clean=False) if raw.strip() else None


def _find_answer(value: Any, depth: int) -> str | None:
    if depth > _MAX_DEPTH:
        return None
    if isinstance(value, str):
        return repr_message_text(value) or value
    if isinstance(value, list):
        texts = [t for t in (_find_answer(loads(item), depth + 1) for item in _last_turn(value)) if t]
        return "\n".join(texts) if texts else None
    if not isinstance(value, dict):
        return None
    parts = value.get("parts")
    if isinstance(parts, list):  # GenAI message {role, parts: [{type: text, content}]}; Gemini's [{text}]
        texts = [t for t in (_part_text(p) for p in parts) if t is not None]
        return "\n".join(texts) if texts else None
    blocks = value.get("blocks")
    if isinstance(blocks, list):  # LlamaIndex ChatMessage: {role, blocks: [{block_type: text, text}]}
        texts = [b["text"] for b in blocks if isinstance(b, dict) and isinstance(b.get("text"), str)]
        if texts:
            return "\n".join(texts)
    if isinstance(value.get("kwargs"), dict) and value.get("lc") is not None:  # LangChain serialised object
        return _find_answer(value["kwargs"], depth + 1)
    for key in _ANSWER_KEYS:
        if key in value:
            found = _find_answer(loads(value[key]), depth + 1)
            if found:
                return found
    return None


def _part_text(part: Any) -> str | None:
    if not isinstance(part, dict):
        return None
    for key in ("content", "text"):
        if isinstance(part.get(key), str):
            return part[key]
    return None


def _messages_without_text(value: Any) -> bool:
    """Messages whose turn only called tools: GenAI messages ({role, parts}) whose parts hold no
    text, or chat messages with `tool_calls` and no content (smolagents' `final_answer` call)."""
    items = value if isinstance(value, list) else [value]
    return bool(items) and all(isinstance(m, dict) and (isinstance(m.get("parts"), list) or (
        bool(m.get("tool_calls")) and not m.get("content"))) for m in items)


def _last_turn(items: list[Any]) -> list[Any]:
    """Of a message list, the assistant's messages when roles are given (an output list may
    repeat the conversation); otherwise every item."""
    roles = [item.get("role") if isinstance(item, dict) else None for item in items]
    if any(role in ("assistant", "ai", "model") for role in roles):
        return [item for item, role in zip(items, roles) if role in ("assistant", "ai", "model")]
    return items


def repr_message_text(text: str) -> str | None:
    """Text of a framework object serialised with repr(): Haystack's
    `ChatMessage(_role=<ChatRole.ASSISTANT: 'assistant'>, _content=[TextContent(text='...')])`,
    LlamaIndex's `ChatMessage(role=<MessageRole.ASSISTANT: 'assistant'>, blocks=[TextBlock(text="...")])`,
    or Haystack's `Document(id=..., content: '...')`. None when `text` is not such a repr."""
    head = text.lstrip()[:40]
    if not head.startswith(("ChatMessage(", "Document(", "ChatResponse(", "CompletionResponse(")):
        return None
    pieces = [_unquote(m.group(1)) for m in _REPR_TEXT.finditer(text)]
    if not pieces:
        pieces = [_unquote(m.group(1)) for m in _REPR_CONTENT.finditer(text)]
    pieces = [p for p in pieces if p]
    return "\n".join(pieces) if pieces else None


def _unquote(literal: str) -> str:
    try:
        value = ast.literal_eval(literal)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return literal[1:-1]
    return value if isinstance(value, str) else literal[1:-1]
