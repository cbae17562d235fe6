"""A retrieval is decided once in its trace's life, whatever comes after: its nest's outer span
arriving after the inner one was decided, a re-sent copy, a late answer. Captured LlamaIndex spans
(a `retrieve` span around the retriever's own span, with a reranker after) and LangChain spans."""
from __future__ import annotations

from pathlib import Path

from ctxprec.collector.assembly.config import AssemblyConfig
from ctxprec.collector.assembly.conventions import Conventions
from ctxprec.collector.assembly.ingest import IngestSettings, OtlpIngest
from ctxprec.collector.assembly.spans import span_record
from ctxprec.collector.assembly.trace_tree import TraceTree
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.sampling.sampler import Sampler
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.helpers import arrivals
from tests.helpers.rag_traces import CollectingSink

CAPTURE = Path(__file__).resolve().parents[1] / "fixtures" / "otlp" / "llamaindex-rerank-openinference"


def captured() -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    for path in sorted(CAPTURE.glob("[0-9]*.pb")):
        request.MergeFrom(ExportTraceServiceRequest.FromString(path.read_bytes()))
    return request


def outer_spans(request: ExportTraceServiceRequest) -> set[bytes]:
    """The outer retrieval span of each nest (a retrieval span whose ancestor is none)."""
    conventions = Conventions()
    records = [span_record(s, "svc", 8192) for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    tree = TraceTree(records)
    candidates = [r for r in records if conventions.is_retrieval(r)]
    ids = {c.span_id for c in candidates}
    outer = {c.span_id for c in candidates if not any(a.span_id in ids for a in tree.ancestors(c))}
    assert len(outer) < len(candidates), "the capture holds nests"
    return outer


def split(request: ExportTraceServiceRequest, keep: set[bytes], *, into_keep: bool) -> ExportTraceServiceRequest:
    out = ExportTraceServiceRequest()
    out.CopyFrom(request)
    for rs in out.resource_spans:
        for ss in rs.scope_spans:
            spans: list[Span] = [s for s in ss.spans if (s.span_id in keep) == into_keep]
            del ss.spans[:]
            ss.spans.extend(spans)
    return out


def make_ingest(**buffer: float) -> tuple[OtlpIngest, CollectingSink, Metrics]:
    sink, metrics = CollectingSink(), Metrics()
    ingest = OtlpIngest(keep_trace=Sampler(1.0).keep_trace, sink=sink, metrics=metrics,
                        settings=IngestSettings(buffer=AssemblyConfig(quiet_period_s=0.0, **buffer)))
    return ingest, sink, metrics


async def test_a_nest_decided_through_its_inner_span_is_not_decided_again_when_the_outer_one_comes() -> None:
    request = captured()
    outer = outer_spans(request)
    ingest, sink, metrics = make_ingest(answer_wait_s=0.0)
    await ingest.ingest(split(request, outer, into_keep=False), receiver="otlp_http")
    ingest.flush()
    first = len(sink.retrievals)
    assert first == len(outer)  # each nest decided through its inner span, the outer one missing
    await ingest.ingest(split(request, outer, into_keep=True), receiver="otlp_http")
    ingest.flush()
    assert len(sink.retrievals) == first
    assert metrics.registry.get_sample_value("ctxprec_late_spans_joined_total") == len(outer)


async def test_a_whole_nest_re_sent_is_decided_once() -> None:
    request = captured()
    outer = outer_spans(request)
    ingest, sink, metrics = make_ingest()
    await ingest.ingest(request, receiver="otlp_http")
    await ingest.ingest(request, receiver="otlp_http")
    ingest.flush()
    spans = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
    assert len(sink.retrievals) == len(outer)
    assert metrics.registry.get_sample_value("ctxprec_resent_spans_total") == spans
    await ingest.ingest(request, receiver="otlp_http")  # after its decision, within the grace
    ingest.flush()
    assert len(sink.retrievals) == len(outer)
    assert metrics.registry.get_sample_value("ctxprec_resent_spans_total") == 2 * spans


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_retrieval_waits_for_its_answer_and_one_past_the_wait_is_counted_late() -> None:
    template = arrivals.templates()[0]
    waits = arrivals.clone(template, arrivals.new_trace_id())
    late = arrivals.clone(template, arrivals.new_trace_id())
    clock, sink, metrics = Clock(), CollectingSink(), Metrics()
    ingest = OtlpIngest(keep_trace=Sampler(1.0).keep_trace, sink=sink, metrics=metrics, clock=clock,
                        settings=IngestSettings(buffer=AssemblyConfig(quiet_period_s=0.5, answer_wait_s=10.0)))

    async def send(spans: list[Span]) -> None:
        request = ExportTraceServiceRequest()
        request.resource_spans.add().scope_spans.add().spans.extend(spans)
        await ingest.ingest(request, receiver="otlp_http")

    for trace in (waits, late):
        await send(trace.without(*trace.of_kind(arrivals.LLM)))
    clock.now += 3.0
    ingest.flush()
    assert sink.retrievals == []  # the root came, quiet: the retrievals wait for their answer
    await send(waits.of_kind(arrivals.LLM))
    clock.now += 0.5
    ingest.flush()
    assert [(r.trace_id, r.answer_source) for r in sink.retrievals] == [(waits.root.trace_id.hex(), "llm_span")]
    clock.now += 6.5  # 10 s since the retrieval span came: scored without the answer
    ingest.flush()
    assert [(r.trace_id, r.answer_source) for r in sink.retrievals[1:]] == [(late.root.trace_id.hex(), "chain_output")]
    await send(late.of_kind(arrivals.LLM))
    clock.now += 0.5
    ingest.flush()
    assert len(sink.retrievals) == 2
    assert metrics.registry.get_sample_value("ctxprec_late_answers_total") == 1


async def test_a_trace_longer_than_the_buffer_is_decided_step_by_step_within_its_bytes() -> None:
    """One agent step a second, no root, the buffer's byte bound a few steps: the trace is evicted
    again and again, each step decided once, memory within the bound."""
    case = arrivals.agent_steps(12, 1.0, root_at_end=False, name="long")
    step_bytes = sum(s.ByteSize() + 256 for s in case.sends[0].spans)
    limit_mb = 3.5 * step_bytes / 2**20
    clock, sink, metrics = Clock(), CollectingSink(), Metrics()
    ingest = OtlpIngest(keep_trace=Sampler(1.0).keep_trace, sink=sink, metrics=metrics, clock=clock,
                        settings=IngestSettings(buffer=AssemblyConfig(quiet_period_s=2.0, answer_wait_s=10.0,
                                                                      max_buffer_mb=limit_mb)))
    peak = 0
    for send in case.sends:
        request = ExportTraceServiceRequest()
        request.resource_spans.add().scope_spans.add().spans.extend(send.spans)
        await ingest.ingest(request, receiver="otlp_http")
        peak = max(peak, ingest.buffer.bytes)
        clock.now += 1.0
        ingest.flush()
    clock.now += 10.0
    ingest.flush()
    assert peak <= limit_mb * 2**20
    assert metrics.registry.get_sample_value("ctxprec_trace_evictions_total", {"reason": "max_bytes"}) >= 2
    assert sorted(r.span_id for r in sink.retrievals) == sorted(span_id for _, span_id in case.retrievals)
    assert metrics.registry.get_sample_value("ctxprec_late_spans_total") == 0
