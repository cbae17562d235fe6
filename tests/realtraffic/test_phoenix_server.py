"""A real Phoenix server takes spans from the real OpenTelemetry SDK, and its REST API shows them.

Also pins the Phoenix behaviours ctxprec relies on (project routing, annotation upserts), so a
Phoenix upgrade that changes them fails here rather than in a harder-to-read end-to-end test.
"""
from __future__ import annotations

import uuid
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import pytest

from tests.helpers.phoenix import PhoenixClient, PhoenixServer

pytestmark = pytest.mark.slow

PROJECT = "shop-rag"


def send_retrieval(server: PhoenixServer, resource: dict[str, Any]) -> tuple[str, str]:
    """Export one OpenInference RETRIEVER span with two documents; return (trace_id, span_id)."""
    provider = TracerProvider(resource=Resource.create(resource))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=server.otlp_http_traces_url)))
    try:
        attributes: dict[str, str | float] = {
            "openinference.span.kind": "RETRIEVER",
            "input.value": "what is the return policy?",
            "retrieval.documents.0.document.id": "policy-1",
            "retrieval.documents.0.document.content": "Items can be returned within 30 days.",
            "retrieval.documents.0.document.score": 0.91,
            "retrieval.documents.1.document.id": "shipping-4",
            "retrieval.documents.1.document.content": "Shipping is free over $50.",
            "retrieval.documents.1.document.score": 0.42,
            "test.run": uuid.uuid4().hex,
        }
        with provider.get_tracer("ctxprec.tests").start_as_current_span("retrieve", attributes=attributes) as span:
            ctx = span.get_span_context()
    finally:
        provider.shutdown()  # flushes the batch processor, so the export has happened
    return format(ctx.trace_id, "032x"), format(ctx.span_id, "016x")


def test_span_from_otel_sdk_is_listed_in_its_project(phoenix_server: PhoenixServer) -> None:
    client = PhoenixClient(phoenix_server.url)
    trace_id, span_id = send_retrieval(
        phoenix_server, {"service.name": PROJECT, "openinference.project.name": PROJECT}
    )

    [span] = client.wait_for_spans(PROJECT, span_id=[span_id], timeout=30)

    assert span["context"] == {"trace_id": trace_id, "span_id": span_id}
    assert span["name"] == "retrieve"
    assert span["span_kind"] == "RETRIEVER"
    # Phoenix returns attributes flattened, as sent (the span kind moves to span_kind).
    assert span["attributes"]["retrieval.documents.1.document.id"] == "shipping-4"
    assert span["attributes"]["input.value"] == "what is the return policy?"
    assert PROJECT in {p["name"] for p in client.list_projects()}


def test_project_comes_from_openinference_project_name_not_service_name(phoenix_server: PhoenixServer) -> None:
    client = PhoenixClient(phoenix_server.url)
    service_name = f"svc-{uuid.uuid4().hex[:8]}"
    _, span_id = send_retrieval(phoenix_server, {"service.name": service_name})

    client.wait_for_spans("default", span_id=[span_id])
    assert service_name not in {p["name"] for p in client.list_projects()}


def test_span_annotation_upserts_on_name_span_and_identifier(phoenix_server: PhoenixServer) -> None:
    client = PhoenixClient(phoenix_server.url)
    _, span_id = send_retrieval(phoenix_server, {"openinference.project.name": PROJECT})
    client.wait_for_spans(PROJECT, span_id=[span_id])

    def annotate(score: float) -> Any:
        body = {"data": [{
            "name": "context_precision", "span_id": span_id, "annotator_kind": "LLM",
            "identifier": "ctxprec", "metadata": {"k": 2},
            "result": {"label": "partial", "score": score, "explanation": "1 of 2 relevant"},
        }]}
        return client.request("POST", "/v1/span_annotations", {"sync": "true"}, body).json()

    first, second = annotate(0.5), annotate(0.75)

    assert first["data"][0]["id"] == second["data"][0]["id"]
    [stored] = client.span_annotations(PROJECT, [span_id])
    assert stored["result"] == {"label": "partial", "score": 0.75, "explanation": "1 of 2 relevant"}
    assert (stored["identifier"], stored["metadata"], stored["source"]) == ("ctxprec", {"k": 2}, "API")

    missing = client.request("POST", "/v1/span_annotations", {"sync": "true"}, {"data": [{
        "name": "context_precision", "span_id": "00000000deadbeef", "annotator_kind": "LLM",
    }]})
    assert missing.status == 404


def test_document_annotations_are_checked_against_retrieval_documents(phoenix_server: PhoenixServer) -> None:
    client = PhoenixClient(phoenix_server.url)
    _, span_id = send_retrieval(phoenix_server, {"openinference.project.name": PROJECT})
    client.wait_for_spans(PROJECT, span_id=[span_id])

    def annotate(position: int, score: float, **extra: Any) -> Any:
        body = {"data": [{
            "name": "relevance", "span_id": span_id, "document_position": position,
            "annotator_kind": "LLM", "result": {"score": score}, **extra,
        }]}
        return client.request("POST", "/v1/document_annotations", {"sync": "true"}, body)

    assert annotate(0, 1.0).status == 200
    assert annotate(0, 0.0).status == 200  # same (name, span, position): an update
    assert annotate(2, 1.0).status == 422  # only documents 0 and 1 exist
    assert annotate(1, 1.0, identifier="ctxprec").status == 422  # identifiers are refused here

    [stored] = client.document_annotations([span_id])[span_id]
    assert (stored["documentPosition"], stored["score"]) == (0, 0.0)
