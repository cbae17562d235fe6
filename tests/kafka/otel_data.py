"""Test data for the Kafka OTLP formats: traces made with the real OpenTelemetry SDK (a root span
with the answer and an OpenInference retriever span whose documents carry the stub judge's
relevance markers), encoded as the Collector's Kafka exporter writes them."""
from __future__ import annotations

import base64
import json
from typing import Any

from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

# Relevance patterns (the stub judge reads the markers) and the MAP each one must score.
PATTERNS: list[tuple[list[bool], float]] = [
    ([True, False, True], 0.83),
    ([False, True, True], 0.58),
    ([True, True, False], 1.0),
    ([False, False, False], 0.0),
]


def marker(relevant: bool) -> str:
    return "[relevant]" if relevant else "[irrelevant]"


def otel_traces(n: int) -> list[tuple[str, str, float, Any]]:
    """n traces made with the real OpenTelemetry SDK: a root span with the answer and an
    OpenInference retriever span. Returns (trace id hex, retriever span id hex, expected score,
    ExportTraceServiceRequest of that trace)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "kb-bot"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("rag-app")
    out = []
    for i in range(n):
        pattern, score = PATTERNS[i % len(PATTERNS)]
        exporter.clear()
        with tracer.start_as_current_span("rag") as root:
            with tracer.start_as_current_span("retrieve") as span:
                span.set_attribute("openinference.span.kind", "RETRIEVER")
                span.set_attribute("input.value", f"question {i}")
                for rank, relevant in enumerate(pattern):
                    span.set_attribute(f"retrieval.documents.{rank}.document.content",
                                       f"{marker(relevant)} document {rank} of trace {i}")
                retriever_ctx = span.get_span_context()
            root.set_attribute("output.value", f"answer {i}")
        request = encode_spans(exporter.get_finished_spans())
        out.append((f"{retriever_ctx.trace_id:032x}", f"{retriever_ctx.span_id:016x}", score, request))
    provider.shutdown()
    return out


def otlp_json(request: Any) -> bytes:
    """OTLP/JSON as the Collector writes it: proto3 JSON with hex (not base64) ids."""
    doc = json_format.MessageToDict(request)

    def hexify(obj: Any) -> None:
        if isinstance(obj, dict):
            for key, value in obj.items():
                if key in ("traceId", "spanId", "parentSpanId") and isinstance(value, str):
                    obj[key] = base64.b64decode(value).hex()
                else:
                    hexify(value)
        elif isinstance(obj, list):
            for item in obj:
                hexify(item)

    hexify(doc)
    return json.dumps(doc).encode()
