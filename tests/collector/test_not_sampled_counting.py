"""Every retrieval ends in exactly one decision: unsampled ones are counted as `not_sampled` from
the very first request, for every enabled convention, without decoding their attributes. The
truth each count is checked against is `Conventions.match`, the matcher extraction uses."""
from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

from ctxprec.collector.assembly.conventions import (
    GENAI,
    OPENINFERENCE,
    AttributeMapping,
    ConventionConfig,
    Conventions,
)
from ctxprec.collector.assembly.ingest import IngestSettings, OtlpIngest
from ctxprec.collector.assembly.spans import span_record
from ctxprec.collector.components import shutdown
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.otlp.values import service_name
from ctxprec.collector.receivers.config import ReceiversConfig
from ctxprec.collector.receivers.otlp_http import OtlpHttpReceiver
from ctxprec.collector.sampling.sampler import Sampler
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from tests.helpers.rag_traces import CollectingSink, request_with, span, trace_id

MAPPING = AttributeMapping(query="app.question", contexts="app.docs")
DOCS = json.dumps(["first document", "second document"])
LANGCHAIN_DOCS = json.dumps({"documents": [{"page_content": "first document", "metadata": {}},
                                           {"page_content": "second document", "metadata": {}}]})

# Retrieval spans of each convention, and look-alikes that are not retrievals.
KINDS: dict[str, tuple[str, dict[str, Any], list[tuple[str, dict[str, Any]]]]] = {
    "openinference": ("retrieve", {"openinference.span.kind": "RETRIEVER", "input.value": "q",
                                   "retrieval.documents.0.document.content": "d"}, []),
    "genai": ("search", {"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.query.text": "q",
                         "gen_ai.retrieval.documents": DOCS}, []),
    "openllmetry_events": ("chroma.query", {"db.system": "chroma"},
                           [("db.query.result", {"db.query.result.document": "a"}),
                            ("db.query.result", {"db.query.result.document": "b"})]),
    "traceloop": ("langchain.retriever", {"traceloop.entity.name": "VectorStoreRetriever",
                                          "traceloop.entity.input": "q", "traceloop.entity.output": LANGCHAIN_DOCS}, []),
    "mapping": ("lookup", {"app.question": "q", "app.docs": DOCS}, []),
    "both_exact": ("hybrid", {"openinference.span.kind": "RETRIEVER", "gen_ai.operation.name": "retrieval"}, []),
    # not retrievals:
    "oi_llm": ("llm", {"openinference.span.kind": "LLM", "output.value": "RETRIEVER"}, []),
    "genai_chat": ("chat", {"gen_ai.operation.name": "chat"}, []),
    "oi_in_event": ("log", {"note": "openinference.span.kind"},
                    [("annotation", {"openinference.span.kind": "RETRIEVER"})]),
    "traceloop_task": ("chain.task", {"traceloop.entity.name": "formatter", "traceloop.entity.output": "{}"}, []),
    "event_name_lookalike": ("db", {"db.query.result.document": "x"}, [("db.query.results", {})]),
    "mapping_lookalike": ("other", {"app.question_id": "7"}, []),
    "plain": ("GET /", {"http.request.method": "GET"}, []),
}


def make_span(kind: str, trace: bytes) -> Span:
    name, attributes, events = KINDS[kind]
    return span(trace, name, attributes, events=events)


def truth(request: ExportTraceServiceRequest, conventions: Conventions) -> Counter[str]:
    """Retrievals per service by the extraction rules, on fully decoded spans."""
    out: Counter[str] = Counter()
    for rs in request.resource_spans:
        service = service_name(rs.resource)
        records = [span_record(one, service, 20_000) for ss in rs.scope_spans for one in ss.spans]
        if conventions.count(records):
            out[service] += conventions.count(records)
    return out


def make_ingest(rate: float, config: ConventionConfig | None = None) -> tuple[OtlpIngest, CollectingSink]:
    sink = CollectingSink()
    ingest = OtlpIngest(keep_trace=Sampler(rate).keep_trace, sink=sink, metrics=Metrics(),
                        settings=IngestSettings(conventions=config or ConventionConfig(mapping=MAPPING)))
    return ingest, sink


async def run(ingest: OtlpIngest, request: ExportTraceServiceRequest) -> None:
    await ingest.ingest(request, receiver="otlp_http", raw=request.SerializeToString())
    await shutdown(ingest, 0.0)  # hands every buffered (sampled) trace to the sink


async def test_each_convention_is_counted_from_the_first_request() -> None:
    positives = ("openinference", "genai", "openllmetry_events", "traceloop", "mapping")
    decoys = [k for k in KINDS if k not in positives and k != "both_exact"]
    for kind in positives:
        ingest, sink = make_ingest(rate=0.0)  # a fresh ingest: nothing learned about the service
        spans = [make_span(kind, trace_id(False)) for _ in range(3)]
        spans += [make_span(decoy, trace_id(False)) for decoy in decoys]
        request = request_with([("svc", spans)])
        assert truth(request, ingest.conventions) == {"svc": 3}, kind
        await run(ingest, request)
        assert sink.not_sampled_counts == {"svc": 3}, kind
        assert sink.retrievals == []


async def test_decoys_alone_count_nothing() -> None:
    ingest, sink = make_ingest(rate=0.0)
    spans = [make_span(kind, trace_id(False)) for kind in
             ("oi_llm", "genai_chat", "oi_in_event", "traceloop_task", "event_name_lookalike", "mapping_lookalike")]
    # Retrieval attributes on the resource describe no span.
    await run(ingest, request_with([("svc", spans)], {"openinference.span.kind": "RETRIEVER",
                                                      "gen_ai.operation.name": "retrieval"}))
    assert sink.not_sampled_counts == {}


async def test_mixed_conventions_resources_and_sampled_traces() -> None:
    ingest, sink = make_ingest(rate=0.5)
    sampled, unsampled = trace_id(True), trace_id(False)
    a = [make_span(k, unsampled) for k in ("openinference", "genai", "both_exact", "openllmetry_events", "plain")]
    a += [make_span(k, sampled) for k in ("openinference", "genai", "traceloop")]
    b = [make_span(k, trace_id(False)) for k in ("genai", "both_exact", "genai_chat")]
    b += [make_span("openinference", sampled)]
    c = [make_span(k, trace_id(False)) for k in ("mapping", "oi_llm", "plain")]
    d = [make_span("plain", trace_id(False))]
    request = request_with([("a", a), ("b", b), ("c", c), ("d", d)])
    await run(ingest, request)
    # The hybrid span is one retrieval, not two; the sampled ones are the sink's, not counted.
    assert sink.not_sampled_counts == {"a": 4, "b": 2, "c": 1}
    assert Counter(r.service for r in sink.retrievals) == {"a": 3, "b": 1}
    assert sink.not_sampled_counts + Counter(r.service for r in sink.retrievals) == truth(request, ingest.conventions)


def nested_retrieval(trace: bytes) -> list[Span]:
    """LlamaIndex's shape: a RETRIEVER span with documents around one without."""
    outer = make_span("openinference", trace)
    inner = span(trace, "_retrieve", {"openinference.span.kind": "RETRIEVER", "input.value": "q"},
                 parent=outer.span_id)
    return [inner, outer]  # the inner span ends first, and is exported first


async def test_nested_retriever_spans_count_once_sampled_or_not() -> None:
    ingest, sink = make_ingest(rate=0.5)
    unsampled = [s for _ in range(4) for s in nested_retrieval(trace_id(False))]
    sampled = [s for _ in range(2) for s in nested_retrieval(trace_id(True))]
    plain = [make_span("openinference", trace_id(False)) for _ in range(3)]
    request = request_with([("svc", unsampled + sampled + plain)])
    await run(ingest, request)
    assert sink.not_sampled_counts == {"svc": 4 + 3}
    assert len(sink.retrievals) == 2
    assert all(len(r.contexts) == 1 for r in sink.retrievals)


async def test_a_nest_exported_in_two_requests_counts_once_and_siblings_count_twice() -> None:
    """OpenLLMetry's LlamaIndex retriever: a VectorIndexRetriever.task span with documents inside
    another. The inner one ends first and may leave in an earlier export batch than the outer one
    (either order is seen); two retrievals side by side under one root stay two."""
    def nest(trace: bytes) -> list[Span]:
        outer = make_span("traceloop", trace)
        name, attributes, _ = KINDS["traceloop"]
        return [span(trace, name, attributes, parent=outer.span_id), outer]

    for order in ((0, 1), (1, 0)):
        ingest, sink = make_ingest(rate=0.0)
        halves = [nest(trace_id(False)) for _ in range(3)]
        for index in order:
            await ingest.ingest(request_with([("svc", [pair[index] for pair in halves])]), receiver="otlp_http")
        assert sink.not_sampled_counts == {"svc": 3}, order
    # LlamaIndex under OpenInference: the inner span (no documents) in one request, the outer one
    # (documents, counted by its exact marker) in the next.
    ingest, sink = make_ingest(rate=0.0)
    pairs = [nested_retrieval(trace_id(False)) for _ in range(3)]
    for index in (0, 1):
        await ingest.ingest(request_with([("svc", [pair[index] for pair in pairs])]), receiver="otlp_http")
    await ingest.ingest(request_with([("svc", [make_span("openinference", trace_id(False))])]), receiver="otlp_http")
    assert sink.not_sampled_counts == {"svc": 4}
    ingest, sink = make_ingest(rate=0.0)
    trace = trace_id(False)
    root = span(trace, "handle", {"http.request.method": "POST"})
    name, attributes, _ = KINDS["traceloop"]
    first, second = (span(trace, name, attributes, parent=root.span_id) for _ in range(2))
    for batch in ([first], [second, root]):
        await ingest.ingest(request_with([("svc", batch)]), receiver="otlp_http")
    assert sink.not_sampled_counts == {"svc": 2}


async def test_a_disabled_convention_is_neither_counted_nor_extracted() -> None:
    ingest, sink = make_ingest(rate=0.5, config=ConventionConfig(order=(OPENINFERENCE,)))
    spans = [make_span(k, trace_id(False)) for k in ("openinference", "genai", "traceloop")]
    spans += [make_span("genai", trace_id(True))]
    await run(ingest, request_with([("svc", spans)]))
    assert sink.not_sampled_counts == {"svc": 1}
    assert sink.retrievals == []
    ingest, sink = make_ingest(rate=0.0, config=ConventionConfig(order=(GENAI, OPENINFERENCE)))
    await run(ingest, request_with([("svc", [make_span(k, trace_id(False)) for k in ("genai", "openinference")])]))
    assert sink.not_sampled_counts == {"svc": 2}


SAMPLED_TRACES = [trace_id(True) for _ in range(3)]
UNSAMPLED_TRACES = [trace_id(False) for _ in range(3)]
span_spec = st.tuples(st.sampled_from(sorted(KINDS)), st.sampled_from(SAMPLED_TRACES + UNSAMPLED_TRACES))
resource_spec = st.tuples(st.sampled_from(["a", "b", "c"]), st.lists(span_spec, max_size=8))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(resource_spec, min_size=1, max_size=4))
def test_sampled_plus_not_sampled_is_every_retrieval(resources: list[tuple[str, list[tuple[str, bytes]]]]) -> None:
    ingest, sink = make_ingest(rate=0.5)
    request = request_with([(service, [make_span(kind, trace) for kind, trace in spans])
                            for service, spans in resources])
    asyncio.run(run(ingest, request))
    decided = sink.not_sampled_counts + Counter(r.service for r in sink.retrievals)
    assert decided == truth(request, ingest.conventions)


async def test_real_sdk_export_counts_every_convention() -> None:
    """Bytes as the OpenTelemetry SDK's OTLP/HTTP exporter writes them, through the receiver."""
    ingest, sink = make_ingest(rate=0.0)
    await ingest.start()
    receiver = OtlpHttpReceiver(ingest, metrics=Metrics(), settings=ReceiversConfig(otlp_http="127.0.0.1:0").http())
    await receiver.start()
    try:
        provider = TracerProvider(resource=Resource.create({"service.name": "sdk-app"}))
        processor = BatchSpanProcessor(OTLPSpanExporter(endpoint=f"http://127.0.0.1:{receiver.port}/v1/traces"))
        provider.add_span_processor(processor)
        tracer = provider.get_tracer("rag-app")
        for kind in KINDS:
            name, attributes, events = KINDS[kind]
            with tracer.start_as_current_span(name, attributes=attributes) as current:
                for event_name, event_attributes in events:
                    current.add_event(event_name, event_attributes)
        assert await asyncio.to_thread(processor.force_flush, 10_000)
        await asyncio.to_thread(provider.shutdown)
        # openinference, genai, openllmetry_events, traceloop, mapping, both_exact
        for _ in range(100):
            if sink.not_sampled_counts:
                break
            await asyncio.sleep(0.02)
        assert sink.not_sampled_counts == {"sdk-app": 6}
    finally:
        await shutdown(receiver, 1.0)
        await shutdown(ingest, 0.0)
