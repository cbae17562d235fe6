"""Wire bytes -> `ExportTraceServiceRequest` (or the logs and metrics export requests: `signal`),
for OTLP/HTTP, OTLP/gRPC and Kafka payloads.

Protobuf and OTLP/JSON are accepted. OTLP/JSON differs from the generic proto3 JSON mapping in
one way that matters: trace and span ids (of spans, links, log records, metric exemplars) are
hex strings, not base64, so they are rewritten before `json_format` reads the document. Everything that can go wrong with untrusted input ends
in a `DecodeError` that names the problem and carries the HTTP status to answer with; the gzip
path stops at `max_bytes` of output so a small compressed body cannot expand without bound.
"""
from __future__ import annotations

import asyncio
import base64
import json
import zlib
from typing import Any, Iterator

from google.protobuf import json_format
from google.protobuf.message import DecodeError as ProtobufDecodeError
from ctxprec.collector.otlp.signals import LOGS, METRICS, SIGNALS, TRACES, Signal
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)

PROTOBUF_TYPES = frozenset({"application/x-protobuf", "application/protobuf", "application/octet-stream"})
JSON_TYPES = frozenset({"application/json"})

# Id fields of spans and links, in both the camelCase the OTLP spec uses and the proto names
# that json_format also accepts.
_ID_KEYS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")
# OTLP/JSON bodies up to this size are converted on the event loop (a few ms at most).
JSON_ON_LOOP_BYTES = 64 * 1024
_ID_LENGTHS = {"traceId": 16, "trace_id": 16, "spanId": 8, "span_id": 8, "parentSpanId": 8, "parent_span_id": 8}


class DecodeError(Exception):
    """Input that cannot be turned into spans (log records, data points). `http_status` is 400, 413 or 415; `reason` is the
    bounded label used for `ctxprec_receiver_errors_total{reason}`."""

    def __init__(self, message: str, http_status: int = 400, reason: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.http_status = http_status
        self.reason = reason or {400: "bad_body", 413: "too_large", 415: "unsupported_media_type"}.get(
            http_status, "bad_body")


def media_type(content_type: str | None) -> str:
    """`application/json; charset=utf-8` -> `application/json`."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def is_json(content_type: str | None) -> bool:
    return media_type(content_type) in JSON_TYPES


def decode_export_request(body: bytes, *, content_type: str, content_encoding: str | None,
                          max_bytes: int) -> ExportTraceServiceRequest:
    return decode_with_raw(body, content_type=content_type, content_encoding=content_encoding,
                           max_bytes=max_bytes)[0]


def decode_with_raw(body: bytes, *, content_type: str, content_encoding: str | None,
                    max_bytes: int, max_spans: int | None = None,
                    signal: Signal = SIGNALS[TRACES]) -> tuple[Any, bytes | None]:
    """Like `decode_export_request`, also returning the uncompressed protobuf bytes (None for
    JSON) so that span-mode forwarding can pass them on untouched. A request of more than
    `max_spans` spans is a 413 (`too_many_spans`); OTLP/JSON is counted before it is converted.
    `signal` names the export request to read (traces by default); `max_spans` counts spans only."""
    kind = media_type(content_type)
    if kind not in PROTOBUF_TYPES and kind not in JSON_TYPES:
        raise DecodeError(
            f"unsupported content type {content_type!r}: send application/x-protobuf or application/json", 415)
    if len(body) > max_bytes:
        raise DecodeError(f"request body of {len(body)} bytes is over the limit of {max_bytes} bytes", 413)
    body = decompress(body, content_encoding, max_bytes)
    if signal.name != TRACES:
        max_spans = None
    if kind in JSON_TYPES:
        return _decode_json(body, max_spans, signal), None
    request = _decode_protobuf(body, signal)
    if max_spans is not None:
        _check_span_count(signal.count(request), max_spans)
    return request, body


async def decode_sharing_loop(body: bytes, *, content_type: str, content_encoding: str | None,
                              max_bytes: int, max_spans: int | None = None,
                              signal: Signal = SIGNALS[TRACES]) -> tuple[Any, bytes | None]:
    """`decode_with_raw` for the receivers, which run on the event loop. Protobuf is parsed in C
    (16 MB in about 40 ms) and stays on the loop; OTLP/JSON above a few KB is converted in a
    worker thread: json_format is Python, seconds for a large request, and in a thread the
    interpreter still hands the loop its turns."""
    if is_json(content_type) and (len(body) > JSON_ON_LOOP_BYTES or (content_encoding or "identity") != "identity"):
        return await asyncio.to_thread(decode_with_raw, body, content_type=content_type,
                                       content_encoding=content_encoding, max_bytes=max_bytes, max_spans=max_spans,
                                       signal=signal)
    return decode_with_raw(body, content_type=content_type, content_encoding=content_encoding, max_bytes=max_bytes,
                           max_spans=max_spans, signal=signal)


def _check_span_count(count: int, max_spans: int) -> None:
    if count > max_spans:
        raise DecodeError(f"request of {count} spans is over the limit of {max_spans} spans per request; send "
                          f"smaller batches", 413, reason="too_many_spans")


def decompress(body: bytes, content_encoding: str | None, max_bytes: int) -> bytes:
    encoding = (content_encoding or "identity").strip().lower()
    if encoding in ("identity", ""):
        return body
    if encoding == "gzip":
        wbits = 16 + zlib.MAX_WBITS
    elif encoding == "deflate":
        wbits = zlib.MAX_WBITS
    else:
        raise DecodeError(f"unsupported content encoding {content_encoding!r}: send gzip, deflate or none", 415)
    inflater = zlib.decompressobj(wbits)
    try:
        # One byte past the limit tells "exactly at the limit" from "over it" without inflating more.
        out = inflater.decompress(body, max_bytes + 1)
    except zlib.error as exc:
        raise DecodeError(f"body is not valid {encoding} data: {exc}", 400) from None
    if len(out) > max_bytes:
        raise DecodeError(f"decompressed body is over the limit of {max_bytes} bytes", 413)
    if not inflater.eof:
        raise DecodeError(f"{encoding} body is truncated", 400)
    return out


def _decode_protobuf(body: bytes, signal: Signal) -> Any:
    request = signal.request()
    name = signal.request.__name__
    try:
        request.ParseFromString(body)
    except ProtobufDecodeError as exc:
        raise DecodeError(f"body is not a valid protobuf {name} ({exc}); truncated or not protobuf?", 400) from None
    except Exception as exc:  # noqa: BLE001 - whatever the parser raises, the body is what is wrong
        raise DecodeError(f"body is not a valid protobuf {name} ({type(exc).__name__}: {str(exc)[:200]})",
                          400) from None
    return request


def _decode_json(body: bytes, max_spans: int | None, signal: Signal) -> Any:
    try:
        document = json.loads(body)
    except UnicodeDecodeError as exc:
        raise DecodeError(f"JSON body is not UTF-8: {exc}", 400) from None
    except json.JSONDecodeError as exc:
        raise DecodeError(f"body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", 400) from None
    except RecursionError:
        raise DecodeError("JSON body is nested too deeply", 400) from None
    except ValueError as exc:
        # Python's own limits while reading a number: an integer of more than 4,300 digits
        # ("Exceeds the limit (4300 digits) for integer string conversion").
        raise DecodeError(f"body is not valid JSON: {str(exc)[:200]}", 400) from None
    if not isinstance(document, dict):
        raise DecodeError(f"OTLP/JSON body must be an object, got {type(document).__name__}", 400)
    if max_spans is not None:  # before any work per span
        _check_span_count(sum(len(_list(ss, "spans")) for rs in _list(document, "resourceSpans", "resource_spans")
                              if isinstance(rs, dict) for ss in _list(rs, "scopeSpans", "scope_spans")
                              if isinstance(ss, dict)), max_spans)
    _rewrite_ids(document, signal)
    request = signal.request()
    try:
        json_format.ParseDict(document, request, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise DecodeError(f"invalid OTLP/JSON: {exc}", 400) from None
    except RecursionError:
        raise DecodeError("OTLP/JSON body is nested too deeply", 400) from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise DecodeError(f"invalid OTLP/JSON: {str(exc)[:300]}", 400) from None
    except Exception as exc:  # noqa: BLE001 - whatever the converter raises, the document is what is wrong
        raise DecodeError(f"invalid OTLP/JSON ({type(exc).__name__}: {str(exc)[:200]})", 400) from None
    return request


def _rewrite_ids(document: dict[str, Any], signal: Signal) -> None:
    """Hex ids -> base64 in place: of spans and their links, of log records, of metric data
    points' exemplars. Wrong shapes are left alone for json_format to report with its field path."""
    for where, item in _items(document, signal):
        if signal.name == TRACES:
            _hex_ids_to_base64(item, where)
            for li, link in enumerate(_list(item, "links")):
                if isinstance(link, dict):
                    _hex_ids_to_base64(link, f"{where}.links[{li}]")
        elif signal.name == LOGS:
            _hex_ids_to_base64(item, where)
        elif signal.name == METRICS:
            for kind in _METRIC_KINDS:
                data = item.get(kind)
                if not isinstance(data, dict):
                    continue
                for pi, point in enumerate(_list(data, "dataPoints", "data_points")):
                    if not isinstance(point, dict):
                        continue
                    for ei, exemplar in enumerate(_list(point, "exemplars")):
                        if isinstance(exemplar, dict):
                            _hex_ids_to_base64(exemplar, f"{where}.{kind}.dataPoints[{pi}].exemplars[{ei}]")


_METRIC_KINDS = ("gauge", "sum", "histogram", "exponentialHistogram", "exponential_histogram", "summary")


def _items(document: dict[str, Any], signal: Signal) -> Iterator[tuple[str, dict[str, Any]]]:
    """(path, item) of every span, log record or metric of an OTLP/JSON document."""
    (outer, outer_proto), (scope, scope_proto), (items, items_proto) = signal.json_lists
    for ri, resource in enumerate(_list(document, outer, outer_proto)):
        if not isinstance(resource, dict):
            continue
        for si, scoped in enumerate(_list(resource, scope, scope_proto)):
            if not isinstance(scoped, dict):
                continue
            for pi, item in enumerate(_list(scoped, items, items_proto)):
                if isinstance(item, dict):
                    yield f"{outer}[{ri}].{scope}[{si}].{items}[{pi}]", item


def _list(obj: dict[str, Any], *keys: str) -> list[Any]:
    for key in keys:
        value = obj.get(key)
        if isinstance(value, list):
            return value
    return []


def _hex_ids_to_base64(obj: dict[str, Any], where: str) -> None:
    for key in _ID_KEYS:
        value = obj.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise DecodeError(f"{where}.{key}: expected a hex string, got {type(value).__name__}", 400)
        if not value:
            continue
        try:
            raw = bytes.fromhex(value)
        except ValueError:
            raise DecodeError(f"{where}.{key}: {value[:40]!r} is not hex", 400) from None
        if len(raw) != _ID_LENGTHS[key]:
            raise DecodeError(f"{where}.{key}: expected {_ID_LENGTHS[key] * 2} hex digits, got {len(value)}", 400)
        obj[key] = base64.b64encode(raw).decode("ascii")
