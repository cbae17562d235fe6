"""RAG events: the JSON that `ctxprec score` reads line by line (or row by row from CSV) and that
Kafka carries in format `rag_event` (docs/FORMATS.md, "RAG event"). Parsing is strict and every
error names the field and what is wrong with it, so that one bad event can be reported without
losing the others.

The field names of the datasets people already have (Ragas, DeepEval, question/answer/ground_truth)
are accepted as aliases of the event's own names; `FIELD_ALIASES` is the one table of them, used by
every reader (JSONL, CSV, Kafka) and listed in docs/BATCH.md."""
from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import dataclass, field
from typing import Any

_TRACE_ID_RE = re.compile(r"^[0-9a-f]{32}$")
_SPAN_ID_RE = re.compile(r"^[0-9a-f]{16}$")

# The fields an event may carry under their own names. Other keys are not an error (producers add
# their own), but `ctxprec score` reports them: a misspelt field would otherwise vanish unnoticed.
EVENT_FIELDS: tuple[str, ...] = (
    "id",
    "trace_id",
    "span_id",
    "service",
    "query",
    "contexts",
    "output",
    "expected_output",
    "attributes",
    "timestamp",
)

# Other names of event fields, in the order they are tried when several are present without the
# event's own name. Ragas: user_input, retrieved_contexts, response, reference. DeepEval: input,
# retrieval_context, actual_output (expected_output is already ours). Older RAG datasets:
# question, answer, ground_truth (contexts is already ours).
FIELD_ALIASES: dict[str, tuple[str, ...]] = {
    "query": ("user_input", "input", "question"),
    "contexts": ("retrieved_contexts", "retrieval_context"),
    "output": ("response", "actual_output", "answer"),
    "expected_output": ("reference", "ground_truth"),
}

# alias -> the event field it stands for
ALIAS_OF: dict[str, str] = {alias: name for name, aliases in FIELD_ALIASES.items() for alias in aliases}

_OPTIONAL_TEXT = ("service", "output", "expected_output")


class EventError(ValueError):
    """A RAG event that cannot be scored. The message names the field and the problem."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(slots=True)
class EventContext:
    """One retrieved context, in rank order."""

    content: str
    id: str | None = None
    score: float | None = None
    metadata: dict[str, Any] | None = None


@dataclass(slots=True)
class RagEvent:
    query: str
    contexts: list[EventContext]
    trace_id: str = ""  # 32 lowercase hex, or "" when the producer gave none
    span_id: str = ""  # 16 lowercase hex, or ""
    service: str = ""
    output: str | None = None
    expected_output: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    timestamp: str | None = None
    id: str | None = None  # the event's own id in its dataset, when it has one (score records' `event_id`)

    @property
    def retriever(self) -> str:
        """The retriever's name, read from `attributes.retriever` (what the score record carries)."""
        value = self.attributes.get("retriever")
        return value if isinstance(value, str) else ""

    @property
    def context_texts(self) -> list[str]:
        return [c.content for c in self.contexts]


@dataclass(slots=True)
class RawEvent:
    """One event as a file reader found it, before validation: the decoded object, or why it could
    not be decoded (then `value` keeps what could be read, for the ids of its error record)."""

    line_no: int  # where it starts in the file, 1-based
    value: Any = None
    error: str | None = None  # without the "line N: " prefix
    text: str = ""  # the input as read; keys the record id of an event that cannot be read


@dataclass(frozen=True, slots=True)
class AliasConflict:
    """Several names of one field in one event: `used` gave the value, `ignored` did not."""

    event_field: str
    used: str
    ignored: tuple[str, ...]

    def describe(self) -> str:
        if self.used == self.event_field:
            alias = "its alias" if len(self.ignored) == 1 else "its aliases"
            return f"both '{self.event_field}' and {alias} {quoted(self.ignored)} are given"
        return f"{quoted((self.used, *self.ignored))} all stand for '{self.event_field}'"


def quoted(names: tuple[str, ...] | list[str], conjunction: str = "and") -> str:
    """('a', 'b', 'c') -> "'a', 'b' and 'c'"."""
    shown = [f"'{n}'" for n in names]
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + f" {conjunction} " + shown[-1]


@dataclass(frozen=True, slots=True)
class KeyNotes:
    """What the keys of one event said beyond its fields, for readers to report."""

    aliases: tuple[tuple[str, str], ...] = ()  # (alias, field) for each alias whose value was used
    conflicts: tuple[AliasConflict, ...] = ()
    unknown: tuple[str, ...] = ()  # keys that are neither a field nor an alias, in input order

    def strict_problems(self, key_noun: str = "key") -> str:
        """Why strict reading rejects the event, or "" when it does not. `key_noun` is what the
        input calls a field name ("column" in CSV)."""
        parts = []
        if self.unknown:
            parts.append(f"unknown {key_noun}{'s' if len(self.unknown) > 1 else ''} {quoted(self.unknown)}")
        parts += [c.describe() for c in self.conflicts]
        return "; ".join(parts)


@dataclass(frozen=True, slots=True)
class ParsedEvent:
    event: RagEvent
    notes: KeyNotes


def resolve_aliases(obj: dict[str, Any]) -> tuple[dict[str, Any], KeyNotes]:
    """The event's fields under their own names, and what the keys said. A key whose value is null
    counts as absent (as it does for the fields themselves), so it neither wins nor conflicts."""
    fields: dict[str, Any] = {name: obj[name] for name in EVENT_FIELDS if name in obj}
    used: list[tuple[str, str]] = []
    conflicts: list[AliasConflict] = []
    for name, aliases in FIELD_ALIASES.items():
        given = [a for a in aliases if obj.get(a) is not None]
        if not given:
            continue
        if obj.get(name) is not None:
            conflicts.append(AliasConflict(name, name, tuple(given)))
            continue
        fields[name] = obj[given[0]]
        used.append((given[0], name))
        if len(given) > 1:
            conflicts.append(AliasConflict(name, given[0], tuple(given[1:])))
    unknown = tuple(k for k in obj if k not in ALIAS_OF and k not in EVENT_FIELDS)
    return fields, KeyNotes(tuple(used), tuple(conflicts), unknown)


def parse_rag_event(obj: Any) -> RagEvent:
    """Validate a decoded JSON value as a RAG event, aliases accepted. Raises EventError."""
    return parse_rag_event_with_notes(obj).event


def parse_rag_event_with_notes(obj: Any, *, strict: bool = False, key_noun: str = "key") -> ParsedEvent:
    """Validate a decoded JSON value as a RAG event and say what its keys did. With `strict`, an
    unknown key or two names of one field make the event an error that names them."""
    if not isinstance(obj, dict):
        raise EventError(f"an event must be a JSON object, got {_json_type(obj)}")
    fields, notes = resolve_aliases(obj)
    problems = notes.strict_problems(key_noun) if strict else ""
    if problems:
        raise EventError(f"{problems} (strict mode)")
    return ParsedEvent(_parse_fields(fields, _Names(dict((f, a) for a, f in notes.aliases))), notes)


@dataclass(frozen=True, slots=True)
class _Names:
    """How errors name a field: as the input wrote it, so that a user of `retrieved_contexts`
    is not told about a `contexts` key they never wrote."""

    written: dict[str, str]  # field -> the alias it was read from

    def __call__(self, name: str) -> str:
        alias = self.written.get(name)
        return f"'{alias}' (read as '{name}')" if alias else f"'{name}'"


def _parse_fields(obj: dict[str, Any], label: _Names) -> RagEvent:
    for name in ("query", "contexts"):
        if name not in obj or obj[name] is None:
            raise EventError(f"missing required field '{name}' (or an alias: {quoted(FIELD_ALIASES[name], 'or')})")
    query = obj["query"]
    if not isinstance(query, str):
        raise EventError(f"{label('query')} must be a string, got {_json_type(query)}")
    contexts = _parse_contexts(obj["contexts"], label("contexts"))

    texts: dict[str, str | None] = {}
    for name in _OPTIONAL_TEXT:
        value = obj.get(name)
        if value is not None and not isinstance(value, str):
            raise EventError(f"{label(name)} must be a string, got {_json_type(value)}")
        texts[name] = value

    attributes = obj.get("attributes")
    if attributes is None:
        attributes = {}
    elif not isinstance(attributes, dict):
        raise EventError(f"'attributes' must be an object, got {_json_type(attributes)}")

    return RagEvent(
        query=query,
        contexts=contexts,
        trace_id=_parse_id(obj, "trace_id", _TRACE_ID_RE, 32),
        span_id=_parse_id(obj, "span_id", _SPAN_ID_RE, 16),
        service=texts["service"] or "",
        output=texts["output"],
        expected_output=texts["expected_output"],
        attributes=attributes,
        timestamp=_parse_timestamp(obj.get("timestamp")),
        id=_parse_event_id(obj.get("id")),
    )


def _parse_event_id(value: Any) -> str | None:
    """A dataset's own row id: text or a whole number, kept as text."""
    if value is None:
        return None
    if isinstance(value, str) or isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
        if len(text) > 200:
            raise EventError(f"'id' is {len(text)} characters long; an id is at most 200")
        return text
    raise EventError(f"'id' must be a string or a whole number, got {_json_type(value)}")


def parse_rag_event_line(line: str, line_no: int) -> RagEvent:
    """Parse one JSONL line; the error message starts with `line N: `."""
    try:
        obj = json.loads(line)
    except ValueError as exc:
        raise EventError(f"line {line_no}: not valid JSON ({json_error_text(exc)})") from None
    except RecursionError:
        raise EventError(f"line {line_no}: not valid JSON (nested too deeply)") from None
    try:
        return parse_rag_event(obj)
    except EventError as exc:
        raise EventError(f"line {line_no}: {exc.message}") from None


def _parse_contexts(value: Any, label: str) -> list[EventContext]:
    shape = f"{label} must be a list of strings or objects with 'content'"
    if not isinstance(value, list):
        raise EventError(f"{shape}, got {_json_type(value)}")
    out: list[EventContext] = []
    for i, item in enumerate(value):
        if isinstance(item, str):
            out.append(EventContext(content=item))
            continue
        if not isinstance(item, dict):
            raise EventError(f"{shape}; item {i} is {_json_type(item)}")
        content = item.get("content")
        if not isinstance(content, str):
            problem = "has no 'content'" if content is None else f"has 'content' of type {_json_type(content)}"
            raise EventError(f"{shape}; item {i} {problem}")
        doc_id = item.get("id")
        if doc_id is not None and (isinstance(doc_id, bool) or not isinstance(doc_id, (str, int))):
            raise EventError(f"{label} item {i}: 'id' must be a string, got {_json_type(doc_id)}")
        score = item.get("score")
        if score is not None and (not _is_finite_number(score)):
            raise EventError(f"{label} item {i}: 'score' must be a number, got {_json_type(score)}")
        metadata = item.get("metadata")
        if metadata is not None and not isinstance(metadata, dict):
            raise EventError(f"{label} item {i}: 'metadata' must be an object, got {_json_type(metadata)}")
        out.append(
            EventContext(
                content=content,
                id=None if doc_id is None else str(doc_id),
                score=None if score is None else float(score),
                metadata=metadata,
            )
        )
    return out


def _parse_id(obj: dict[str, Any], name: str, pattern: re.Pattern[str], hex_len: int) -> str:
    value = obj.get(name)
    if value is None or value == "":
        return ""
    if not isinstance(value, str) or not pattern.match(value.lower()):
        shown = repr(value[:80]) if isinstance(value, str) else _json_type(value)
        raise EventError(f"'{name}' must be {hex_len} hex characters, got {shown}")
    # Trace/span ids are compared and hashed: one canonical (lowercase) spelling.
    return value.lower()


def _parse_timestamp(value: Any) -> str | None:
    """RFC 3339 text is kept as given; epoch seconds (a number) are accepted too, since many
    producers emit those, and turned into RFC 3339 so consumers see one form."""
    if value is None:
        return None
    if isinstance(value, str):
        if parse_rfc3339(value) is None:
            raise EventError(f"'timestamp' must be an RFC 3339 time such as 2026-11-29T12:00:00Z, got {value[:80]!r}")
        return value
    if _is_finite_number(value):
        from datetime import datetime, timezone

        try:
            moment = datetime.fromtimestamp(float(value), tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            raise EventError(f"'timestamp' is out of range: {value!r}") from None
        return moment.isoformat().replace("+00:00", "Z")
    raise EventError(f"'timestamp' must be an RFC 3339 string or epoch seconds, got {_json_type(value)}")


def parse_rfc3339(text: str) -> float | None:
    """Epoch seconds of an RFC 3339 time, or None when it is not one."""
    from datetime import datetime, timezone

    candidate = text.strip()
    if len(candidate) < 10 or candidate[4:5] != "-":
        return None
    if candidate.endswith(("Z", "z")):
        candidate = candidate[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(candidate)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def _is_finite_number(value: Any) -> bool:
    if isinstance(value, int) and not isinstance(value, bool):
        return abs(value) <= _MAX_FLOAT_INT  # JSON ints can be too large for a float
    return isinstance(value, float) and math.isfinite(value)


_MAX_FLOAT_INT = int(sys.float_info.max)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def json_error_text(exc: ValueError) -> str:
    """json's error, said as `message at column N`."""
    msg = getattr(exc, "msg", None)
    pos = getattr(exc, "colno", None)
    return f"{msg} at column {pos}" if msg and pos else str(exc)
