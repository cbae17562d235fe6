"""A sampled span, copied out of its protobuf request into plain Python.

Only spans of sampled traces (1% of traffic at a 1% rate) become `SpanRecord`s, so the cost of
decoding every attribute is paid rarely. Values are bounded on the way in: strings are cut to
`max_chars`, nesting of arrays/maps stops at a fixed depth, so a hostile span costs at most
what its (already size-limited) request cost to parse.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable

from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    KeyValue,
    KeyValueList,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

MAX_DEPTH = 6
_SPAN_OVERHEAD = 256  # Python objects around each record, for the buffer's byte budget


@dataclass(slots=True)
class SpanEvent:
    name: str
    attributes: dict[str, Any]


@dataclass(slots=True)
class SpanRecord:
    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes
    name: str
    start_time_unix_nano: int
    end_time_unix_nano: int
    service: str
    attributes: dict[str, Any]
    events: list[SpanEvent] = field(default_factory=list)
    size: int = 0  # approximate bytes, for the trace buffer's bound
    # Resource attributes, one dict shared by the spans of a ResourceSpans.
    resource: dict[str, Any] = field(default_factory=dict)

    @property
    def is_root(self) -> bool:
        return not self.parent_span_id


def any_value(value: AnyValue, max_chars: int, depth: int = 0) -> Any:
    kind = value.WhichOneof("value")
    if kind == "string_value":
        text = value.string_value
        return text if len(text) <= max_chars else text[:max_chars]
    if kind == "int_value":
        return value.int_value
    if kind == "double_value":
        return value.double_value
    if kind == "bool_value":
        return value.bool_value
    if depth >= MAX_DEPTH:
        return None
    if kind == "array_value":
        return [any_value(v, max_chars, depth + 1) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value, max_chars, depth + 1) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return value.bytes_value[: max_chars // 2].hex()
    return None


def attributes_dict(attributes: Iterable[KeyValue], max_chars: int) -> dict[str, Any]:
    return {kv.key: any_value(kv.value, max_chars) for kv in attributes}


def service_name(resource: Resource) -> str:
    for kv in resource.attributes:
        if kv.key == "service.name":
            return kv.value.string_value or "unknown"
    return "unknown"


def span_record(span: Any, service: str, max_chars: int, resource: dict[str, Any] | None = None) -> SpanRecord:
    """`span` is an `opentelemetry.proto.trace.v1.Span`; `resource` its resource's attributes."""
    events = [SpanEvent(e.name, attributes_dict(e.attributes, max_chars)) for e in span.events]
    return SpanRecord(
        trace_id=span.trace_id,
        span_id=span.span_id,
        parent_span_id=span.parent_span_id,
        name=span.name,
        start_time_unix_nano=span.start_time_unix_nano,
        end_time_unix_nano=span.end_time_unix_nano,
        service=service,
        attributes=attributes_dict(span.attributes, max_chars),
        events=events,
        size=span.ByteSize() + _SPAN_OVERHEAD,
        resource=resource if resource is not None else {},
    )


def set_any_value(target: AnyValue, value: Any) -> None:
    """Python value -> AnyValue, for write-back attributes (str, bool, int, float, lists; other
    values are written as JSON text)."""
    if isinstance(value, bool):
        target.bool_value = value
    elif isinstance(value, int):
        target.int_value = value
    elif isinstance(value, float):
        target.double_value = value
    elif isinstance(value, str):
        target.string_value = value
    elif isinstance(value, (list, tuple)):
        array = ArrayValue()
        for item in value:
            set_any_value(array.values.add(), item)
        target.array_value.CopyFrom(array)
    elif isinstance(value, dict):
        kvlist = KeyValueList()
        for key, item in value.items():
            set_any_value(kvlist.values.add(key=str(key)).value, item)
        target.kvlist_value.CopyFrom(kvlist)
    else:
        target.string_value = json.dumps(value, default=str, ensure_ascii=False)


def set_attributes(span: Any, attributes: dict[str, Any]) -> None:
    """Adds `attributes` to a protobuf span, replacing any existing value of the same key."""
    positions = {kv.key: i for i, kv in enumerate(span.attributes)}
    for key, value in attributes.items():
        if value is None:
            continue
        index = positions.get(key)
        if index is not None:
            target = span.attributes[index].value
            target.Clear()
        else:
            target = span.attributes.add(key=key).value
        set_any_value(target, value)
