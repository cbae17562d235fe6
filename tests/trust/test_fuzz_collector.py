"""Fuzzing the collector's parsers of untrusted wire data: OTLP body decoding
(collector/receivers/otlp_decode.py), Kafka message values (receivers/kafka_messages.py), span
copying and retrieval extraction (assembly/spans.py, conventions.py) fed arbitrary protobuf
spans, and the byte-level span cutter of span mode (otlp/wire.py). Each may raise only its
documented error type (DecodeError, MessageError; nothing at all for extraction and cutting),
must finish well within the deadline, and must return output bounded by its input and its
configured limits."""
from __future__ import annotations

import gzip
import json
import zlib
from typing import Any

import pytest

from ctxprec.collector.assembly.conventions import (
    ALL_CONVENTIONS,
    AttributeMapping,
    ConventionConfig,
    Conventions,
)
from ctxprec.collector.assembly.spans import span_record
from ctxprec.collector.otlp.wire import remove_spans
from ctxprec.collector.receivers.kafka_messages import (
    MessageError,
    check_size,
    decode_otlp,
    decode_rag_event,
    retrieval_from_event,
)
from ctxprec.collector.receivers.otlp_decode import DecodeError, decode_export_request
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.trust.fuzz_strategies import deep, dumps, json_values

pytestmark = pytest.mark.slow

FUZZ = settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
# Generating whole protobuf traces dominates the run time: fewer, still varied, examples.
FUZZ_SPANS = settings(FUZZ, max_examples=150)

# --- protobuf values ----------------------------------------------------------------------------


def _scalar(kind: str, value: Any) -> AnyValue:
    out = AnyValue()
    setattr(out, kind, value)
    return out


def _array(values: list[AnyValue]) -> AnyValue:
    out = AnyValue()
    out.array_value.values.extend(values)
    return out


def _kvlist(items: dict[str, AnyValue]) -> AnyValue:
    out = AnyValue()
    out.kvlist_value.values.extend(KeyValue(key=k, value=v) for k, v in items.items())
    return out


any_values = st.recursive(
    st.one_of(
        st.text(max_size=60).map(lambda s: _scalar("string_value", s)),
        st.one_of(json_values.map(dumps), st.text(max_size=5)).map(lambda s: _scalar("string_value", s)),
        st.integers(-(2**63), 2**63 - 1).map(lambda i: _scalar("int_value", i)),
        st.floats(allow_nan=True).map(lambda f: _scalar("double_value", f)),
        st.booleans().map(lambda b: _scalar("bool_value", b)),
        st.binary(max_size=20).map(lambda b: _scalar("bytes_value", b)),
        st.just(AnyValue()),  # no value set at all
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4).map(_array),
        st.dictionaries(st.text(max_size=8), children, max_size=4).map(_kvlist),
    ),
    max_leaves=8,
)

documents_json = st.lists(
    st.one_of(
        st.fixed_dictionaries(
            {"content": st.one_of(st.text(max_size=40), json_values)},
            optional={"id": json_values, "score": json_values, "metadata": json_values, "text": json_values},
        ),
        json_values,
    ),
    max_size=6,
).map(dumps)

KEYS = [
    "openinference.span.kind", "input.value", "output.value", "gen_ai.operation.name",
    "gen_ai.retrieval.query.text", "gen_ai.retrieval.documents", "gen_ai.output.messages",
    "gen_ai.completion.0.content", "traceloop.entity.input", "traceloop.entity.output",
    "traceloop.entity.name", "db.query.text", "app.request", "app.docs", "app.answer", "app.expected",
    "retriever.name",
] + [f"retrieval.documents.{i}.document.{f}" for i in (0, 1, 2, 7, 999999999) for f in ("content", "id", "score", "metadata")]
MARKERS = {
    "openinference.span.kind": ["RETRIEVER", "LLM", "llm", "CHAIN"],
    "gen_ai.operation.name": ["retrieval", "chat", "text_completion"],
    "traceloop.entity.name": ["retriever", "my_retriever", "other"],
}

key_values = st.one_of(
    st.sampled_from(KEYS).flatmap(
        lambda key: st.tuples(
            st.just(key),
            st.one_of(
                any_values,
                st.sampled_from(MARKERS.get(key, [""])).map(lambda s: _scalar("string_value", s)),
                documents_json.map(lambda s: _scalar("string_value", s)),
            ),
        )
    ),
    st.tuples(st.text(max_size=30), any_values),
)

ids = st.sampled_from([b"", b"\x01" * 8, b"\x02" * 8, b"\x03" * 8, b"\x04" * 8])


@st.composite
def spans(draw: st.DrawFn) -> Span:
    span = Span(
        trace_id=draw(st.sampled_from([b"\xaa" * 16, b"", b"\x01\x02"])),
        span_id=draw(ids),
        parent_span_id=draw(ids),
        name=draw(st.sampled_from(["retrieve", "llm", "root", "vector_search.retriever", ""]) | st.text(max_size=10)),
        start_time_unix_nano=draw(st.integers(0, 2**64 - 1)),
        end_time_unix_nano=draw(st.integers(0, 2**64 - 1)),
    )
    span.attributes.extend(KeyValue(key=k, value=v) for k, v in draw(st.lists(key_values, max_size=8)))
    for _ in range(draw(st.integers(0, 3))):
        event = span.events.add(name=draw(st.sampled_from(["db.query.result", "other"])))
        event.attributes.extend(
            KeyValue(key=k, value=v)
            for k, v in draw(st.lists(st.tuples(st.sampled_from(
                ["db.query.result.document", "db.query.result.id", "db.query.result.score",
                 "db.query.result.distance", "db.query.result.metadata"]) | st.text(max_size=8), any_values),
                max_size=5))
        )
    return span


def request_of(span_list: list[Span]) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.add(key="service.name").value.string_value = "fuzz"
    resource_spans.scope_spans.add().spans.extend(span_list)
    return request


# --- OTLP decoding ----------------------------------------------------------------------------

CONTENT_TYPES = ["application/x-protobuf", "application/json", "application/json; charset=utf-8",
                 "application/octet-stream", "text/plain", "", "APPLICATION/X-PROTOBUF"]
ENCODINGS = [None, "gzip", "deflate", "identity", "br", "GZIP "]


def encode(body: bytes, encoding: str | None, how: str) -> bytes:
    if how == "raw" or encoding is None:
        return body
    name = encoding.strip().lower()
    if name == "gzip":
        packed = gzip.compress(body)
    elif name == "deflate":
        packed = zlib.compress(body)
    else:
        return body
    return packed[: len(packed) // 2] if how == "truncated" else packed


def mutate(data: bytes, flips: list[tuple[int, int]]) -> bytes:
    buf = bytearray(data)
    for position, value in flips:
        if buf:
            buf[position % len(buf)] = value
    return bytes(buf)


otlp_json_docs = st.one_of(
    json_values,
    st.fixed_dictionaries({"resourceSpans": st.lists(st.fixed_dictionaries(
        {"scopeSpans": st.lists(st.fixed_dictionaries(
            {"spans": st.lists(st.fixed_dictionaries(
                {},
                optional={"traceId": st.one_of(st.text("0123456789abcdef", max_size=34), json_values),
                          "spanId": st.one_of(st.text("0123456789abcdef", max_size=18), json_values),
                          "name": json_values, "startTimeUnixNano": json_values,
                          "attributes": st.lists(st.fixed_dictionaries(
                              {"key": json_values, "value": st.one_of(json_values, st.fixed_dictionaries(
                                  {}, optional={"stringValue": json_values, "intValue": json_values,
                                                "arrayValue": json_values, "kvlistValue": json_values}))}),
                              max_size=3),
                          "links": json_values}),
                max_size=3)}), max_size=2)}), max_size=2)}),
)

bodies = st.one_of(
    st.binary(max_size=600),
    st.builds(mutate, st.lists(spans(), max_size=3).map(lambda s: request_of(s).SerializeToString()),
              st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=4)),
    st.lists(spans(), max_size=3).map(lambda s: request_of(s).SerializeToString()),
    otlp_json_docs.map(lambda d: dumps(d).encode()),
    st.text(max_size=200).map(lambda s: s.encode("utf-8", "surrogatepass")),
)


@FUZZ
@given(bodies, st.sampled_from(CONTENT_TYPES), st.sampled_from(ENCODINGS),
       st.sampled_from(["packed", "raw", "truncated"]), st.integers(0, 50_000))
@example(b"[" * 100_000, "application/json", None, "raw", 200_000)
@example(("{\"resourceSpans\": " + deep(5000) + "}").encode(), "application/json", None, "raw", 200_000)
@example(b"\x0a\xff\xff\xff\xff\x0f", "application/x-protobuf", None, "raw", 1000)  # length past the end
@example(b"\x0a\x02" * 5000, "application/x-protobuf", None, "raw", 50_000)  # nesting past the limit
@example(b"\x00" * 1_000_000, "application/x-protobuf", "gzip", "packed", 4096)  # a gzip bomb
def test_otlp_bodies_only_raise_decode_error(body: bytes, content_type: str, encoding: str | None,
                                             how: str, max_bytes: int) -> None:
    wire = encode(body, encoding, how)
    try:
        request = decode_export_request(wire, content_type=content_type, content_encoding=encoding,
                                        max_bytes=max_bytes)
    except DecodeError as exc:
        assert exc.http_status in (400, 413, 415)
        assert exc.message and exc.reason
        return
    assert isinstance(request, ExportTraceServiceRequest)
    assert len(wire) <= max_bytes
    # The decoded request is no larger than what was accepted (after decompression).
    assert request.ByteSize() <= max_bytes


@FUZZ_SPANS
@given(st.lists(spans(), min_size=1, max_size=4))
def test_valid_protobuf_round_trips(span_list: list[Span]) -> None:
    request = request_of(span_list)
    raw = request.SerializeToString()
    packed = gzip.compress(raw)
    decoded = decode_export_request(packed, content_type="application/x-protobuf",
                                    content_encoding="gzip", max_bytes=max(len(raw), len(packed)))
    assert decoded == request


# --- retrieval extraction from arbitrary spans --------------------------------------------------

def genai_span(documents: str) -> Span:
    span = Span(trace_id=b"\xaa" * 16, span_id=b"\x01" * 8, name="retrieve")
    span.attributes.add(key="gen_ai.operation.name").value.string_value = "retrieval"
    span.attributes.add(key="gen_ai.retrieval.documents").value.string_value = documents
    return span


MAPPING = AttributeMapping(query="app.request$.question", contexts="app.docs$[*].text", output="app.answer")
ITEM_MAPPING = AttributeMapping(query="app.request", contexts="retrieval.documents.{i}.document.content")


@FUZZ_SPANS
@given(
    st.lists(spans(), min_size=1, max_size=5),
    st.permutations(ALL_CONVENTIONS),
    st.sampled_from([None, MAPPING, ITEM_MAPPING]),
    st.integers(1, 4),
    st.integers(1, 200),
)
@example([genai_span('[{"content": "a", "score": 1' + "0" * 400 + "}]")], list(ALL_CONVENTIONS), None, 4, 1000)
@example([genai_span("[" * 5000)], list(ALL_CONVENTIONS), None, 4, 20_000)
@example([genai_span('[{"content": "a", "metadata": ' + deep(3000, "{") + "}]")], list(ALL_CONVENTIONS), None, 4, 20_000)
def test_extraction_from_arbitrary_spans_is_total_and_bounded(
    span_list: list[Span], order: list[str], mapping: AttributeMapping | None, max_contexts: int, max_chars: int
) -> None:
    records = [span_record(span, "fuzz", max_chars) for span in span_list]
    for record in records:
        assert all(not isinstance(v, str) or len(v) <= max_chars for v in record.attributes.values())
    conventions = Conventions(ConventionConfig(
        order=tuple(order), mapping=mapping, retriever_attribute="retriever.name",
        expected_output_attribute="app.expected", max_contexts=max_contexts, max_attribute_chars=max_chars))
    extracted = conventions.extract(records)
    assert len(extracted) <= len(records)
    for item in extracted:
        retrieval = item.retrieval
        assert retrieval.convention in ALL_CONVENTIONS
        assert isinstance(retrieval.query, str)
        assert len(retrieval.contexts) <= max_contexts
        assert item.dropped_contexts >= 0
        for context in retrieval.contexts:
            assert isinstance(context.content, str)
            assert context.score is None or isinstance(context.score, float)
        assert retrieval.output is None or isinstance(retrieval.output, str)
        assert retrieval.expected_output is None or isinstance(retrieval.expected_output, str)
        assert len(retrieval.attributes) <= 64
        json.dumps(retrieval.attributes)  # rule attributes are plain scalars


# --- span mode's byte-level span cutter ----------------------------------------------------------


@FUZZ_SPANS
@given(st.lists(spans(), min_size=1, max_size=5), st.data())
def test_cutting_spans_from_a_valid_request_keeps_the_rest(span_list: list[Span], data: st.DataObject) -> None:
    request = request_of(span_list)
    raw = request.SerializeToString()
    chosen = data.draw(st.sets(st.integers(0, len(span_list) - 1)))
    held = [span_list[i].SerializeToString() for i in sorted(chosen)]
    out = remove_spans(raw, held)
    if out is None:
        return  # allowed: the caller re-serializes instead
    rest = ExportTraceServiceRequest.FromString(out)
    remaining = [s.SerializeToString() for rs in rest.resource_spans for ss in rs.scope_spans for s in ss.spans]
    # Identical spans cannot be told apart in the bytes; compare as multisets.
    expected = [s.SerializeToString() for s in span_list]
    for span in held:
        expected.remove(span)
    assert sorted(remaining) == sorted(expected)


@FUZZ_SPANS
@given(st.lists(spans(), min_size=1, max_size=4), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)),
                                                            min_size=1, max_size=4), st.binary(max_size=60))
def test_cutting_spans_from_damaged_bytes_never_raises(span_list: list[Span], flips: list[tuple[int, int]],
                                                       extra: bytes) -> None:
    raw = mutate(request_of(span_list).SerializeToString(), flips)
    out = remove_spans(raw, [span_list[0].SerializeToString(), extra])
    assert out is None or len(out) <= len(raw)


# --- Kafka message values -------------------------------------------------------------------------

kafka_values = st.one_of(
    st.none(),
    bodies,
    st.builds(lambda e: dumps(e).encode(), st.fixed_dictionaries(
        {"query": st.one_of(st.text(max_size=30), json_values),
         "contexts": st.one_of(st.lists(st.one_of(st.text(max_size=30), json_values), max_size=4), json_values)},
        optional={"trace_id": st.text("0123456789abcdef", max_size=33), "timestamp": json_values,
                  "attributes": json_values, "service": json_values})),
)


@FUZZ
@given(kafka_values, st.sampled_from(["otlp_proto", "otlp_json", "rag_event"]), st.integers(0, 20_000),
       st.one_of(st.none(), st.integers(-(2**63), 2**63)))
@example(b"[" * 100_000, "rag_event", 200_000, None)
@example(b"\xff\xfe{}", "rag_event", 100, None)
def test_kafka_values_only_raise_message_error(value: bytes | None, fmt: str, max_bytes: int,
                                               message_time_ms: int | None) -> None:
    try:
        body = check_size(value, max_bytes)
        if fmt == "rag_event":
            retrieval = retrieval_from_event(decode_rag_event(body), message_time_ms=message_time_ms)
            assert len(retrieval.trace_id) == 32 and len(retrieval.span_id) == 16
            assert isinstance(retrieval.end_time_unix_nano, int)
        else:
            request = decode_otlp(body, fmt, max_bytes)
            assert request.ByteSize() <= max_bytes
    except MessageError as exc:
        assert exc.reason and exc.message
