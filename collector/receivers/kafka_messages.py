"""Kafka message values -> pipeline input, per `--kafka-format` (docs/FORMATS.md).

- `otlp_proto` / `otlp_json`: one `TracesData` per message, as the OpenTelemetry Collector's Kafka
  exporter writes it; it has the wire form of `ExportTraceServiceRequest`, so the OTLP decoder
  reads it as is.
- `rag_event`: one RAG event (docs/FORMATS.md) as JSON, turned into a `Retrieval`.

Anything that cannot be read raises `MessageError` with a bounded `reason` (the dead-letter
counter's label) and a message that says what is wrong.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

from ctxprec.collector.model import RAG_EVENT, Retrieval, RetrievedContext
from ctxprec.collector.receivers.otlp_decode import DecodeError, decode_export_request
from ctxprec.scorer.events import EventError, RagEvent, parse_rag_event, parse_rfc3339

_CONTENT_TYPES = {"otlp_proto": "application/x-protobuf", "otlp_json": "application/json"}


class MessageError(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def check_size(value: bytes | None, max_bytes: int) -> bytes:
    if value is None:
        raise MessageError("empty", "message has no value (a tombstone?)")
    if len(value) > max_bytes:
        raise MessageError("too_large", f"message of {len(value)} bytes is over the limit of {max_bytes} bytes")
    return value


def decode_otlp(value: bytes, fmt: str, max_bytes: int) -> Any:
    """The `ExportTraceServiceRequest` in a message of format `otlp_proto` or `otlp_json`."""
    try:
        return decode_export_request(value, content_type=_CONTENT_TYPES[fmt], content_encoding=None, max_bytes=max_bytes)
    except DecodeError as exc:
        raise MessageError(exc.reason, f"{fmt}: {exc.message}") from None


def load_json(value: bytes) -> Any:
    try:
        return json.loads(value)
    except UnicodeDecodeError:
        raise MessageError("bad_json", "rag_event: message is not UTF-8 text") from None
    except ValueError as exc:
        raise MessageError("bad_json", f"rag_event: not valid JSON ({exc})") from None
    except RecursionError:
        raise MessageError("bad_json", "rag_event: not valid JSON (nested too deeply)") from None


def parse_event(obj: Any) -> RagEvent:
    try:
        return parse_rag_event(obj)
    except EventError as exc:
        raise MessageError("bad_event", f"rag_event: {exc.message}") from None


def decode_rag_event(value: bytes) -> RagEvent:
    return parse_event(load_json(value))


def retrieval_from_event(event: RagEvent, *, message_time_ms: int | None = None) -> Retrieval:
    """A `Retrieval` for a RAG event. An event without trace/span ids gets ids derived from its
    content: sampling and de-duplication need an id, and a replay of the same event must get the
    same one (so the same sampling decision and the same record id)."""
    trace_id, span_id = event.trace_id, event.span_id
    if not trace_id or not span_id:
        digest = _content_digest(event)
        trace_id = trace_id or digest[:32]
        span_id = span_id or digest[32:48]
    end_ns = 0
    if event.timestamp:
        seconds = parse_rfc3339(event.timestamp)
        if seconds is not None:
            end_ns = int(seconds * 1e9)
    if not end_ns and message_time_ms and message_time_ms > 0:
        end_ns = message_time_ms * 1_000_000
    return Retrieval(
        trace_id=trace_id,
        span_id=span_id,
        service=event.service,
        query=event.query,
        contexts=[RetrievedContext(c.content, c.id, c.score, c.metadata) for c in event.contexts],
        retriever=event.retriever,
        output=event.output,
        expected_output=event.expected_output,
        attributes=dict(event.attributes),
        end_time_unix_nano=end_ns,
        convention=RAG_EVENT,
        answer_source="event" if event.output else "none",
        resource={"service.name": event.service} if event.service else {},
    )


def _content_digest(event: RagEvent) -> str:
    h = hashlib.blake2b(digest_size=24)
    for part in (event.service, event.query, *event.context_texts, event.output or ""):
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x1f")
    return h.hexdigest()
