"""Span mode: everything received goes to --forward-to; unsampled bytes untouched, a sampled
trace's retrieval span held until decided (or its hold deadline), then sent with attributes.
Downstream is tests/helpers/otlp_capture.py, a real OTLP receiver."""
from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from ctxprec.collector.assembly.config import AssemblyConfig
from ctxprec.collector.assembly.ingest import IngestSettings, OtlpIngest
from ctxprec.collector.components import shutdown
from ctxprec.collector.exporters.otlp_sender import OtlpSender, SenderSettings
from ctxprec.collector.exporters.span_writeback import SpanWriteBack
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.model import Decision, PendingAck
from ctxprec.collector.otlp.wire import remove_spans
from ctxprec.collector.receivers.config import ReceiversConfig
from ctxprec.collector.receivers.otlp_grpc import OtlpGrpcReceiver
from ctxprec.collector.receivers.otlp_http import OtlpHttpReceiver
from ctxprec.collector.sampling.sampler import Sampler
from ctxprec.collector.scoring.identity import ScorerIdentity
from ctxprec.scorer.retry import Backoff
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)

from tests.helpers.otlp_capture import OtlpCapture
from tests.helpers.rag_traces import (
    CollectingSink,
    kv,
    rag_trace,
    request_of,
    span,
    trace_id,
)

PB = "application/x-protobuf"
IDENTITY = ScorerIdentity(model="openai/stub", prompt_version="test", annotator_kind="LLM", identifier="f1")


@dataclass
class Mode:
    capture: OtlpCapture
    metrics: Metrics
    sink: CollectingSink
    writeback: SpanWriteBack
    ingest: OtlpIngest
    http: OtlpHttpReceiver
    grpc: OtlpGrpcReceiver

    def value(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0

    async def post(self, request: ExportTraceServiceRequest) -> bytes:
        body = request.SerializeToString()
        async with aiohttp.ClientSession() as session:
            async with session.post(f"http://127.0.0.1:{self.http.port}/v1/traces", data=body,
                                    headers={"Content-Type": PB}) as response:
                assert response.status == 200, await response.text()
        return body


@pytest.fixture
async def make_mode(capture: OtlpCapture) -> AsyncIterator[Callable[..., Awaitable[Mode]]]:
    modes: list[Mode] = []

    async def make(*, rate: float = 0.5, downstream: str = "http", hold_deadline_s: float = 30.0,
                   quiet_s: float = 0.05, **forwarder: Any) -> Mode:
        metrics = Metrics()
        url = capture.http_url if downstream == "http" else capture.grpc_url
        writeback = SpanWriteBack(OtlpSender(SenderSettings(url, **forwarder), metrics=metrics), IDENTITY,
                                  metrics=metrics, hold_deadline_s=hold_deadline_s, check_interval_s=0.02)
        await writeback.start()
        sink = CollectingSink(writeback)
        ingest = OtlpIngest(keep_trace=Sampler(rate).keep_trace, sink=sink, metrics=metrics, passthrough=writeback,
                            settings=IngestSettings(buffer=AssemblyConfig(quiet_period_s=quiet_s, max_wait_s=max(30.0, quiet_s)),
                                                    flush_interval_s=0.02))
        await ingest.start()
        listen = ReceiversConfig(otlp_http="127.0.0.1:0", otlp_grpc="127.0.0.1:0")
        http = OtlpHttpReceiver(ingest, metrics=metrics, settings=listen.http())
        grpc_receiver = OtlpGrpcReceiver(ingest, metrics=metrics, settings=listen.grpc())
        await http.start()
        await grpc_receiver.start()
        mode = Mode(capture, metrics, sink, writeback, ingest, http, grpc_receiver)
        modes.append(mode)
        return mode

    try:
        yield make
    finally:
        for mode in modes:
            await shutdown(mode.http, 1.0)
            await shutdown(mode.grpc, 1.0)
            await shutdown(mode.ingest, 0.0)
            await shutdown(mode.writeback, 0.0)


@pytest.mark.parametrize("downstream", ["http", "grpc"])
async def test_unsampled_traffic_reaches_downstream_byte_for_byte(
        make_mode: Callable[..., Awaitable[Mode]], downstream: str) -> None:
    mode = await make_mode(rate=0.0, downstream=downstream)
    request = request_of([s for _ in range(3) for s in rag_trace(trace_id(False), extra_spans=2)])
    body = await mode.post(request)
    await mode.capture.wait_for_spans(15)
    assert mode.capture.bodies == [body]
    assert mode.sink.not_sampled_counts == {"support-bot": 3}
    assert mode.sink.retrievals == []
    assert mode.writeback.held_count == 0
    await asyncio.sleep(0.1)
    assert mode.value("ctxprec_exported_spans_total", exporter="span_forwarder", outcome="ok") == 15


async def test_unsampled_retrievals_counted_from_the_first_request(make_mode: Callable[..., Awaitable[Mode]]) -> None:
    exact = await make_mode(rate=0.5)
    genai = span(trace_id(False), "search", {"gen_ai.operation.name": "retrieval",
                                             "gen_ai.retrieval.documents": "[\"d\"]"})
    events = span(trace_id(False), "chroma", {}, events=[("db.query.result", {"db.query.result.document": "x"}),
                                                          ("db.query.result", {"db.query.result.document": "y"})])
    both = span(trace_id(False), "both", {"openinference.span.kind": "RETRIEVER", "gen_ai.operation.name": "retrieval"})
    await exact.post(request_of(rag_trace(trace_id(False)) + [genai, events, both]))
    # one each: OpenInference, GenAI, OpenLLMetry (two events, one span) and a span with two markers
    assert exact.sink.not_sampled_counts == {"support-bot": 4}
    other = request_of([genai], service="other-bot")
    other.resource_spans.extend(request_of(rag_trace(trace_id(False))).resource_spans)
    await exact.post(other)
    assert exact.sink.not_sampled_counts == {"support-bot": 5, "other-bot": 1}


async def test_grpc_input_is_forwarded_untouched_too(make_mode: Callable[..., Awaitable[Mode]]) -> None:
    import grpc
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceResponse,
    )

    mode = await make_mode(rate=0.0)
    body = request_of(rag_trace(trace_id(False))).SerializeToString()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{mode.grpc.port}") as channel:
        export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                                     request_serializer=None, response_deserializer=ExportTraceServiceResponse.FromString)
        await export(body)
    await mode.capture.wait_for_spans(3)
    assert mode.capture.bodies == [body]


async def test_sampled_retrieval_span_is_held_until_decided(make_mode: Callable[..., Awaitable[Mode]]) -> None:
    mode = await make_mode(rate=0.5)
    sampled = rag_trace(trace_id(True), extra_spans=2)
    unsampled = rag_trace(trace_id(False))
    retriever = sampled[1]
    request = request_of(sampled + unsampled)
    await mode.post(request)

    # Everything but the held retrieval span goes out at once, as one request.
    await mode.capture.wait_for_spans(len(sampled) + len(unsampled) - 1)
    expected = request_of([s for s in sampled + unsampled if s is not retriever])
    assert ExportTraceServiceRequest.FromString(mode.capture.bodies[0]) == expected
    assert mode.capture.span(retriever.span_id.hex()) is None
    assert mode.sink.not_sampled_counts == {"support-bot": 1}

    await mode.sink.wait_retrievals(1)
    [retrieval] = mode.sink.retrievals
    assert retrieval.span_id == retriever.span_id.hex()
    await asyncio.sleep(0.2)
    assert mode.capture.span(retriever.span_id.hex()) is None  # still held while undecided

    mode.sink.decide_all(Decision.EVALUATED)
    scored = await mode.capture.wait_for_span("gen_ai.evaluation.score.value", 0.83)
    assert scored.span_id == retriever.span_id.hex()
    assert scored.attributes["ctxprec.k"] == 3 and scored.attributes["ctxprec.hit"] is True
    assert scored.attributes["openinference.span.kind"] == "RETRIEVER"  # original attributes kept
    assert scored.resource["service.name"] == "support-bot"
    assert mode.value("ctxprec_exported_spans_total", exporter="span_hold", outcome="scored") == 1
    assert mode.writeback.held_count == 0


async def test_hold_deadline_sends_the_span_unscored_once(make_mode: Callable[..., Awaitable[Mode]]) -> None:
    mode = await make_mode(rate=1.0, hold_deadline_s=0.3)
    spans = rag_trace(trace_id(True))
    retriever_id = spans[1].span_id.hex()
    await mode.post(request_of(spans))
    await mode.sink.wait_retrievals(1)
    late = await mode.capture.wait_for_span("openinference.span.kind", "RETRIEVER", timeout=5)
    assert late.span_id == retriever_id
    assert "gen_ai.evaluation.score.value" not in late.attributes
    assert mode.value("ctxprec_exported_spans_total", exporter="span_hold", outcome="expired") == 1

    mode.sink.decide_all(Decision.EVALUATED)  # too late: nothing more is sent
    await asyncio.sleep(0.2)
    assert [s.span_id for s in mode.capture.spans].count(retriever_id) == 1


async def test_decision_without_attributes_releases_the_span_as_is(make_mode: Callable[..., Awaitable[Mode]]) -> None:
    mode = await make_mode(rate=1.0)
    spans = rag_trace(trace_id(True))
    await mode.post(request_of(spans))
    await mode.sink.wait_retrievals(1)
    mode.sink.decide_all(Decision.THROTTLED)
    released = await mode.capture.wait_for_span("openinference.span.kind", "RETRIEVER")
    assert released.span == spans[1]
    assert mode.value("ctxprec_exported_spans_total", exporter="span_hold", outcome="unscored") == 1


async def test_late_span_joins_its_trace_and_is_forwarded(make_mode: Callable[..., Awaitable[Mode]]) -> None:
    mode = await make_mode(rate=1.0)
    trace = trace_id(True)
    spans = rag_trace(trace)
    await mode.post(request_of(spans))
    await mode.sink.wait_retrievals(1)
    straggler = span(trace, "late-step", {"http.method": "GET"}, parent=spans[0].span_id)
    await mode.post(request_of([straggler]))
    arrived = await mode.capture.wait_for_span("http.method", "GET")
    assert arrived.span == straggler
    # Within the trace's grace: read with it (counted as joined, not late), no second decision.
    assert mode.value("ctxprec_late_spans_joined_total") == 1 and mode.value("ctxprec_late_spans_total") == 0
    await asyncio.sleep(0.2)
    assert len(mode.sink.retrievals) == 1 and len(mode.ingest.buffer) == 0


@pytest.mark.parametrize("pause_s", [0.0, 0.3])
async def test_a_re_sent_trace_is_decided_once_and_forwarded_twice_with_the_score(
        make_mode: Callable[..., Awaitable[Mode]], pause_s: float) -> None:
    """An exporter's retry after a lost acknowledgement: every acknowledged copy goes on, the
    retrieval is decided once, and both copies of its span carry the score."""
    mode = await make_mode(rate=1.0, quiet_s=0.5)
    spans = rag_trace(trace_id(True))
    retriever_id = spans[1].span_id.hex()
    await mode.post(request_of(spans))
    await asyncio.sleep(pause_s)
    await mode.post(request_of(spans))
    await mode.sink.wait_retrievals(1)
    assert mode.value("ctxprec_resent_spans_total") == len(spans)
    mode.sink.decide_all(Decision.EVALUATED)
    await mode.capture.wait_for_spans(2 * len(spans))
    copies = [s for s in mode.capture.spans if s.span_id == retriever_id]
    assert len(copies) == 2
    assert all(c.attributes["gen_ai.evaluation.score.value"] == 0.83 for c in copies)
    await asyncio.sleep(0.3)
    assert len(mode.sink.retrievals) == 1 and len(mode.capture.spans) == 2 * len(spans)
    assert mode.value("ctxprec_exported_spans_total", exporter="span_hold", outcome="scored") == 2


async def test_acks_are_released_when_retrievals_are_decided(make_mode: Callable[..., Awaitable[Mode]]) -> None:
    mode = await make_mode(rate=0.5)
    fired: list[str] = []
    sampled_ack = PendingAck(lambda: fired.append("sampled"))
    await mode.ingest.ingest(request_of(rag_trace(trace_id(True))), receiver="kafka", ack=sampled_ack)
    sampled_ack.seal()
    unsampled_ack = PendingAck(lambda: fired.append("unsampled"))
    await mode.ingest.ingest(request_of(rag_trace(trace_id(False))), receiver="kafka", ack=unsampled_ack)
    unsampled_ack.seal()
    assert fired == ["unsampled"]
    await mode.sink.wait_retrievals(1)
    assert not sampled_ack.done
    mode.sink.decide_all(Decision.EVALUATED)
    assert fired == ["unsampled", "sampled"]
    assert mode.value("ctxprec_spans_received_total", receiver="kafka") == 6


async def test_stop_hands_buffered_traces_to_the_sink(make_mode: Callable[..., Awaitable[Mode]]) -> None:
    mode = await make_mode(rate=1.0, quiet_s=60.0)
    await mode.post(request_of(rag_trace(trace_id(True))))
    await asyncio.sleep(0.1)
    assert mode.sink.retrievals == []
    await shutdown(mode.ingest, 0.0)
    assert len(mode.sink.retrievals) == 1
    await shutdown(mode.writeback, 0.0)  # the write-back, stopped undecided, sends it unscored
    unscored = await mode.capture.wait_for_span("openinference.span.kind", "RETRIEVER")  # not lost either
    assert "gen_ai.evaluation.score.value" not in unscored.attributes


@pytest.mark.parametrize("downstream", ["http", "grpc"])
async def test_forwarder_retries_through_transient_failures(
        capture: OtlpCapture, downstream: str) -> None:
    metrics = Metrics()
    url = capture.http_url if downstream == "http" else capture.grpc_url
    fw = OtlpSender(SenderSettings(url, backoff=Backoff(base_s=0.01, cap_s=5.0)), metrics=metrics)
    await fw.start()
    try:
        capture.fail_next(2)
        assert fw.forward_raw(request_of(rag_trace(trace_id(False))).SerializeToString(), 3)
        await capture.wait_for_spans(3)
        await asyncio.sleep(0.05)
        assert metrics.registry.get_sample_value(
            "ctxprec_exported_spans_total", {"exporter": "span_forwarder", "outcome": "ok"}) == 3
    finally:
        await shutdown(fw, 5.0)


async def test_forwarder_drops_are_bounded_and_counted(capture: OtlpCapture) -> None:
    metrics = Metrics()

    def dropped(reason: str) -> float:
        return metrics.registry.get_sample_value(
            "ctxprec_export_dropped_total", {"exporter": "span_forwarder", "reason": reason}) or 0.0

    bodies = [request_of(rag_trace(trace_id(False))).SerializeToString() for _ in range(10)]
    # Nothing listens on the port: every attempt fails; the queue keeps the newest two requests
    # (the oldest make room), and those wait until their deadline.
    with __import__("socket").socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead_port = sock.getsockname()[1]
    fw = OtlpSender(SenderSettings(f"http://127.0.0.1:{dead_port}", max_queue_bytes=max(map(len, bodies)) * 2,
                                   backoff=Backoff(base_s=0.01, cap_s=0.02), deadline_s=0.5, senders=1),
                    metrics=metrics)
    await fw.start()
    try:
        assert all(fw.forward_raw(body, 3) for body in bodies)
        assert dropped("queue_full") == 24
        assert fw.queued() == bodies[-2:]
        await asyncio.sleep(0.3)
        assert dropped("expired") == 0 and fw.queued_bytes == len(bodies[-2]) + len(bodies[-1])
        deadline = time.monotonic() + 10
        while dropped("expired") < 6:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        assert fw.queued_bytes == 0
    finally:
        await shutdown(fw, 5.0)

    rejecting = OtlpSender(SenderSettings(capture.http_url), metrics=metrics)
    await rejecting.start()
    try:
        capture.fail_next(1, http_status=400)
        rejecting.forward_raw(bodies[0], 3)
        deadline = time.monotonic() + 5
        while dropped("rejected") < 3:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
    finally:
        await shutdown(rejecting, 5.0)


def test_forwarder_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="forward_to"):
        SenderSettings("ftp://collector:4317")
    with pytest.raises(ValueError, match="no host"):
        SenderSettings("http://")


def test_remove_spans_rewrites_only_the_enclosing_frames() -> None:
    request = ExportTraceServiceRequest()
    victims = []
    for service in ("a", "b"):
        rs = request.resource_spans.add()
        rs.resource.attributes.append(kv("service.name", service))
        rs.schema_url = "https://opentelemetry.io/schemas/1.26.0"
        for scope in ("s1", "s2"):
            ss = rs.scope_spans.add()
            ss.scope.name = scope
            ss.spans.extend(rag_trace(trace_id(True)))
            victims.append(ss.spans[1].SerializeToString())
    raw = request.SerializeToString()
    chosen = [victims[0], victims[3]]
    cut = remove_spans(raw, chosen)
    assert cut is not None
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            keep = [s for s in ss.spans if s.SerializeToString() not in chosen]
            del ss.spans[:]
            ss.spans.extend(keep)
    assert ExportTraceServiceRequest.FromString(cut) == request
    assert remove_spans(raw, [span(os.urandom(16), "absent", {}).SerializeToString()]) is None
