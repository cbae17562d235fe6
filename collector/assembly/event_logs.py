"""Answers and prompts from GenAI event logs: what an LLM call said, when its instrumentor wrote
it as OTLP log records tied to the call's span instead of as span attributes.

OpenTelemetry's OpenAI instrumentation (`opentelemetry-instrumentation-openai-v2`) has two paths.
Its v1.30 path (the default over `opentelemetry-util-genai` before 1.0, content capture on with
`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`) writes one event per message:
`gen_ai.system.message`, `gen_ai.user.message`, `gen_ai.assistant.message` (an earlier assistant
turn sent back in the prompt) and `gen_ai.tool.message` for what went into the model, the message
in the body (`{"content": ...}`), and one `gen_ai.choice` per choice the model answered (body
`{"index", "finish_reason", "message": {"role", "content", "tool_calls"}}`). Its current path
(over util-genai 1.0 and later always, before that with
`OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental`; content mode `event_only` or
`span_and_event`) writes one `gen_ai.client.inference.operation.details` event per call, with
`gen_ai.input.messages`, `gen_ai.system_instructions` and `gen_ai.output.messages` as
attributes, in the GenAI message shape (`{"role", "parts": [{"type": "text", "content"}]}`).
The event name is the log record's `event_name`, or its `event.name` attribute (older SDKs).

Every such record that carries a trace id and a span id (`is_genai_event`) becomes a `GenAiEvent`: the messages in
the GenAI message shape, bounded as span attributes are. Assembly keeps the events of sampled
traces with their trace and, when the trace is read, `apply` writes them on the span they name
as `gen_ai.input.messages` / `gen_ai.output.messages`, where the span carries none: the answer and
prompt are then read by the conventions table as if the instrumentor had put them on the span.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ctxprec.collector.assembly.spans import SpanRecord
from ctxprec.collector.otlp.values import any_value, attributes_dict

# Present in the bytes of every request that holds a GenAI event (its name, or its attributes):
# a request without it is passed on without a look at its records.
MARKER = b"gen_ai."
CHOICE = "gen_ai.choice"
DETAILS = "gen_ai.client.inference.operation.details"
# Prompt events of the v1.30 conventions, by the role their name gives.
_PROMPT_ROLES = {"gen_ai.system.message": "system", "gen_ai.user.message": "user",
                 "gen_ai.assistant.message": "assistant", "gen_ai.tool.message": "tool"}
EVENT_NAMES = frozenset({CHOICE, DETAILS, *_PROMPT_ROLES})
INPUT_KEY = "gen_ai.input.messages"
OUTPUT_KEY = "gen_ai.output.messages"
_SYSTEM_KEY = "gen_ai.system_instructions"
_OVERHEAD = 256  # Python objects around each event, for the buffer's byte budget


@dataclass(slots=True)
class GenAiEvent:
    """What one GenAI event log record says about the LLM call of its span."""

    trace_id: bytes
    span_id: bytes
    inputs: list[dict[str, Any]] = field(default_factory=list)  # GenAI messages that went in
    outputs: list[dict[str, Any]] = field(default_factory=list)  # and came out
    index: int = 0  # a choice's index: choices are answered in this order
    size: int = 0  # approximate bytes, for the trace buffer's bound


def event_name(record: Any) -> str:
    if record.event_name:
        return str(record.event_name)
    for kv in record.attributes:
        if kv.key == "event.name":
            return kv.value.string_value
    return ""


def is_genai_event(record: Any) -> bool:
    """A GenAI event record that names its span (a span id of 8 bytes, not all zero)."""
    span_id = record.span_id
    return len(span_id) == 8 and any(span_id) and event_name(record) in EVENT_NAMES


def read_event(record: Any, max_chars: int) -> GenAiEvent | None:
    """The messages a GenAI event record carries; None when it carries none (a prompt event with
    content capture off has no body). A choice without text (a tool call, or capture off) is kept
    as an answer turn without text: the span then reads as a turn that gave no answer."""
    name = event_name(record)
    event = GenAiEvent(record.trace_id, record.span_id, size=record.ByteSize() + _OVERHEAD)
    if name == DETAILS:
        attributes = attributes_dict(record.attributes, max_chars)
        system = attributes.get(_SYSTEM_KEY)
        if isinstance(system, list) and system:
            event.inputs.append({"role": "system", "parts": system})
        event.inputs.extend(_messages(attributes.get(INPUT_KEY)))
        event.outputs.extend(_messages(attributes.get(OUTPUT_KEY)))
    else:
        body = any_value(record.body, max_chars) if record.HasField("body") else None
        if not isinstance(body, dict):
            return None
        if name == CHOICE:
            message = body.get("message")
            if not isinstance(message, dict):
                return None
            index = body.get("index")
            event.index = index if isinstance(index, int) else 0
            event.outputs.append(_message(message.get("role") or "assistant", message.get("content"),
                                          body.get("finish_reason")))
        else:
            event.inputs.append(_message(_PROMPT_ROLES[name], body.get("content")))
    return event if event.inputs or event.outputs else None


def _message(role: Any, content: Any, finish_reason: Any = None) -> dict[str, Any]:
    """A v1.30 event's message in the GenAI message shape: its text as text parts (a content list
    of OpenAI parts gives one part each); no content (a tool call, capture off) gives no part."""
    parts: list[dict[str, Any]] = []
    if isinstance(content, str):
        if content:
            parts.append({"type": "text", "content": content})
    elif isinstance(content, list):
        for item in content:
            text = item.get("text") if isinstance(item, dict) else item
            if isinstance(text, str) and text:
                parts.append({"type": "text", "content": text})
    message: dict[str, Any] = {"role": str(role), "parts": parts}
    if isinstance(finish_reason, str):
        message["finish_reason"] = finish_reason
    return message


def _messages(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        return []
    return [m for m in value if isinstance(m, dict)]


def apply(spans: list[SpanRecord], events: list[GenAiEvent]) -> int:
    """Writes the events' messages on the spans they name (`gen_ai.input.messages`,
    `gen_ai.output.messages`), each only where the span carries no such attribute of its own.
    Prompt messages keep their arrival order, choices go in index order. Returns the number of
    spans given an answer or a prompt."""
    by_span: dict[bytes, list[GenAiEvent]] = {}
    for event in events:
        by_span.setdefault(event.span_id, []).append(event)
    changed = 0
    for span in spans:
        found = by_span.get(span.span_id)
        if not found or span.trace_id != found[0].trace_id:
            continue
        inputs = [m for e in found for m in e.inputs]
        outputs = [m for e in sorted(found, key=lambda e: e.index) for m in e.outputs]
        wrote = False
        if inputs and INPUT_KEY not in span.attributes:
            span.attributes[INPUT_KEY] = inputs
            wrote = True
        if outputs and OUTPUT_KEY not in span.attributes:
            span.attributes[OUTPUT_KEY] = outputs
            wrote = True
        changed += wrote
    return changed
