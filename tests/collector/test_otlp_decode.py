"""decode_export_request: protobuf and OTLP/JSON, compression bounds, clear errors."""
from __future__ import annotations

import gzip
import json
import time
import zlib

import pytest
from ctxprec.collector.receivers.otlp_decode import (
    DecodeError,
    decode_export_request,
    decode_with_raw,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.helpers.rag_traces import rag_trace, request_of, trace_id

PB = "application/x-protobuf"
MAX = 1024 * 1024


def _body() -> tuple[bytes, object]:
    request = request_of(rag_trace(trace_id(True)))
    return request.SerializeToString(), request


def test_protobuf_roundtrip_with_content_type_parameters() -> None:
    body, request = _body()
    decoded, raw = decode_with_raw(body, content_type="application/x-protobuf; charset=binary",
                                   content_encoding=None, max_bytes=MAX)
    assert decoded == request
    assert raw == body


@pytest.mark.parametrize("encoding,compress", [
    ("gzip", gzip.compress),
    ("GZIP", gzip.compress),
    ("deflate", zlib.compress),
])
def test_compressed_protobuf(encoding: str, compress: object) -> None:
    body, request = _body()
    decoded, raw = decode_with_raw(compress(body), content_type=PB, content_encoding=encoding,  # type: ignore[operator]
                                   max_bytes=MAX)
    assert decoded == request
    assert raw == body  # the uncompressed bytes, for untouched forwarding


def test_gzip_bomb_is_refused_without_inflating_it() -> None:
    bomb = gzip.compress(b"\0" * (200 * 1024 * 1024), compresslevel=9)  # 200 MiB -> ~200 KiB
    assert len(bomb) < MAX
    started = time.perf_counter()
    with pytest.raises(DecodeError) as info:
        decode_export_request(bomb, content_type=PB, content_encoding="gzip", max_bytes=MAX)
    assert info.value.http_status == 413
    assert "decompressed" in info.value.message and str(MAX) in info.value.message
    assert time.perf_counter() - started < 2.0  # stopped at the limit, not after 200 MiB


def test_truncated_and_corrupt_gzip() -> None:
    body, _ = _body()
    packed = gzip.compress(body)
    with pytest.raises(DecodeError) as truncated:
        decode_export_request(packed[: len(packed) // 2], content_type=PB, content_encoding="gzip", max_bytes=MAX)
    assert truncated.value.http_status == 400 and "truncated" in truncated.value.message
    with pytest.raises(DecodeError) as corrupt:
        decode_export_request(b"not gzip at all", content_type=PB, content_encoding="gzip", max_bytes=MAX)
    assert corrupt.value.http_status == 400 and "gzip" in corrupt.value.message


def test_truncated_protobuf_is_a_400_that_says_so() -> None:
    body, _ = _body()
    with pytest.raises(DecodeError) as info:
        decode_export_request(body[:-7], content_type=PB, content_encoding=None, max_bytes=MAX)
    assert info.value.http_status == 400
    assert info.value.reason == "bad_body"
    assert "protobuf" in info.value.message


def test_body_over_limit_is_413() -> None:
    body, _ = _body()
    with pytest.raises(DecodeError) as info:
        decode_export_request(body, content_type=PB, content_encoding=None, max_bytes=len(body) - 1)
    assert info.value.http_status == 413 and info.value.reason == "too_large"


def test_unsupported_content_type_and_encoding_are_415() -> None:
    body, _ = _body()
    with pytest.raises(DecodeError) as ctype:
        decode_export_request(body, content_type="text/plain", content_encoding=None, max_bytes=MAX)
    assert ctype.value.http_status == 415 and "text/plain" in ctype.value.message
    with pytest.raises(DecodeError) as enc:
        decode_export_request(body, content_type=PB, content_encoding="br", max_bytes=MAX)
    assert enc.value.http_status == 415 and "br" in enc.value.message


def _json_doc() -> dict:
    return {"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "support-bot"}}]},
        "scopeSpans": [{"scope": {"name": "manual"}, "spans": [{
            "traceId": "5b8efff798038103d269b633813fc60c",
            "spanId": "eee19b7ec3c1b174",
            "parentSpanId": "eee19b7ec3c1b173",
            "name": "retrieve",
            "kind": "SPAN_KIND_SERVER",
            "startTimeUnixNano": "1544712660000000000",
            "endTimeUnixNano": 1544712661000000000,
            "attributes": [
                {"key": "s", "value": {"stringValue": "text"}},
                {"key": "i", "value": {"intValue": "42"}},
                {"key": "d", "value": {"doubleValue": 0.5}},
                {"key": "b", "value": {"boolValue": True}},
                {"key": "a", "value": {"arrayValue": {"values": [{"stringValue": "x"}, {"intValue": 7}]}}},
                {"key": "m", "value": {"kvlistValue": {"values": [{"key": "k", "value": {"stringValue": "v"}}]}}},
            ],
            "links": [{"traceId": "5b8efff798038103d269b633813fc60d", "spanId": "eee19b7ec3c1b175"}],
            "status": {"code": 2, "message": "boom"},
        }]}],
    }]}


def test_otlp_json_hex_ids_enums_and_anyvalues() -> None:
    request = decode_export_request(json.dumps(_json_doc()).encode(), content_type="application/json",
                                    content_encoding=None, max_bytes=MAX)
    span = request.resource_spans[0].scope_spans[0].spans[0]
    assert span.trace_id == bytes.fromhex("5b8efff798038103d269b633813fc60c")
    assert span.span_id == bytes.fromhex("eee19b7ec3c1b174")
    assert span.parent_span_id == bytes.fromhex("eee19b7ec3c1b173")
    assert span.links[0].trace_id == bytes.fromhex("5b8efff798038103d269b633813fc60d")
    assert span.kind == Span.SPAN_KIND_SERVER
    assert span.status.code == 2  # enum as an integer
    assert span.start_time_unix_nano == 1544712660000000000
    attrs = {kv.key: kv.value for kv in span.attributes}
    assert attrs["s"].string_value == "text"
    assert attrs["i"].int_value == 42
    assert attrs["d"].double_value == 0.5
    assert attrs["b"].bool_value is True
    assert [v.WhichOneof("value") for v in attrs["a"].array_value.values] == ["string_value", "int_value"]
    assert attrs["m"].kvlist_value.values[0].value.string_value == "v"


def test_json_is_returned_without_raw_bytes_and_gzip_works() -> None:
    body = gzip.compress(json.dumps(_json_doc()).encode())
    request, raw = decode_with_raw(body, content_type="application/json; charset=utf-8", content_encoding="gzip",
                                   max_bytes=MAX)
    assert raw is None
    assert request.resource_spans[0].scope_spans[0].spans[0].name == "retrieve"


@pytest.mark.parametrize("mutate,expected", [
    (lambda d: d["resourceSpans"][0]["scopeSpans"][0]["spans"][0].update(traceId="zz" * 16), "traceId"),
    (lambda d: d["resourceSpans"][0]["scopeSpans"][0]["spans"][0].update(spanId="abcd"), "16 hex digits"),
    (lambda d: d["resourceSpans"][0]["scopeSpans"][0]["spans"][0].update(traceId=12), "hex string"),
    (lambda d: d["resourceSpans"][0]["scopeSpans"][0]["spans"][0].update(name=["not", "a", "string"]), "name"),
    (lambda d: d["resourceSpans"][0]["scopeSpans"][0]["spans"][0].update(startTimeUnixNano="yesterday"),
     "startTimeUnixNano"),
    (lambda d: d["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"][1].update(
        value={"intValue": "forty-two"}), "intValue"),
    (lambda d: d["resourceSpans"][0]["scopeSpans"][0].update(spans="nope"), "spans"),
])
def test_json_with_wrong_types_names_the_field(mutate: object, expected: str) -> None:
    doc = _json_doc()
    mutate(doc)  # type: ignore[operator]
    with pytest.raises(DecodeError) as info:
        decode_export_request(json.dumps(doc).encode(), content_type="application/json", content_encoding=None,
                              max_bytes=MAX)
    assert info.value.http_status == 400
    assert expected in info.value.message


@pytest.mark.parametrize("body,expected", [
    (b"{not json", "not valid JSON"),
    (b"[1, 2, 3]", "must be an object"),
    (b"\xff\xfe\x00", "UTF-8"),
    (b"[" * 100_000 + b"]" * 100_000, "JSON"),
    # Python refuses to read an integer of more than 4,300 digits (a ValueError, not a JSON error).
    (b'{"resourceSpans": ' + b"1" * 4_301 + b"}", "4300 digits"),
])
def test_json_that_is_not_otlp(body: bytes, expected: str) -> None:
    with pytest.raises(DecodeError) as info:
        decode_export_request(body, content_type="application/json", content_encoding=None, max_bytes=MAX)
    assert info.value.http_status == 400
    assert expected in info.value.message


def test_huge_integer_inside_an_otlp_value_is_a_400() -> None:
    doc = _json_doc()
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"][1]["value"] = {"intValue": int("9" * 4_000)}
    body = json.dumps(doc).encode()
    with pytest.raises(DecodeError) as info:
        decode_export_request(body, content_type="application/json", content_encoding=None, max_bytes=MAX)
    assert info.value.http_status == 400 and "intValue" in info.value.message


def test_empty_body_is_an_empty_request() -> None:
    assert len(decode_export_request(b"", content_type=PB, content_encoding=None, max_bytes=MAX).resource_spans) == 0
    assert len(decode_export_request(b"{}", content_type="application/json", content_encoding=None,
                                     max_bytes=MAX).resource_spans) == 0
