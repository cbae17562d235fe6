"""OTLP protobuf values, read and written: `AnyValue` and attribute lists to plain Python and
back, and a resource's service name. Shared by the stages that touch OTLP messages (assembly
reads sampled spans, the span write-back and the evaluator exporter write attributes), so that
each reads and writes them one way.

Reading is bounded: strings are cut to `max_chars` and nesting of arrays/maps stops at
`MAX_DEPTH`, so a hostile span costs at most what its (already size-limited) request cost to
parse.
"""
from __future__ import annotations

import json
from typing import Any, Iterable

from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    KeyValue,
    KeyValueList,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

MAX_DEPTH = 6


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
