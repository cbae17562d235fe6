"""OTLP logs and metrics pass through: the real SDK exporters (HTTP and gRPC) into the receivers,
on through the forward queue the spans use to a real OTLP receiver (tests/helpers/otlp_capture.py),
byte for byte where they came as protobuf; bad bodies refused with a message that names the
problem while good ones beside them still arrive; the queue's one bound shared by all three
signals, each dropped item counted under its own exporter name; a downstream that does not take
a signal; no --forward-to at all."""
from __future__ import annotations

import asyncio
import gzip
import json
import logging
import socket
import time
from dataclasses import dataclass
from typing import AsyncIterator, Awaitable, Callable

import aiohttp
import grpc
import pytest
from ctxprec.collector.assembly.config import AssemblyConfig
from ctxprec.collector.assembly.ingest import IngestSettings, OtlpIngest
from ctxprec.collector.components import shutdown
from ctxprec.collector.exporters.config import ExportConfig
from ctxprec.collector.exporters.otlp_sender import LOGS, METRICS, TRACES, OtlpSender, SenderSettings, signal_url
from ctxprec.collector.exporters.signal_forward import SignalForwarder
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.receivers.config import ReceiversConfig
from ctxprec.collector.receivers.otlp_grpc import OtlpGrpcReceiver
from ctxprec.collector.receivers.otlp_http import OtlpHttpReceiver
from ctxprec.collector.sampling.sampler import Sampler
from ctxprec.scorer.retry import Backoff
from google.rpc import status_pb2
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogExporter
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetricExporter
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogExporter
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetricExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceResponse

from tests.chaos.tcp_proxy import TcpProxy
from tests.helpers.otlp_capture import OtlpCapture
from tests.helpers.otlp_signals import emit_logs, emit_metrics, logs_request, metrics_request
from tests.helpers.rag_traces import CollectingSink, rag_trace, request_of, trace_id

PB = "application/x-protobuf"
JSON = "application/json"


@dataclass
class Stack:
    capture: OtlpCapture
    metrics: Metrics
    sender: OtlpSender | None
    ingest: OtlpIngest
    http: OtlpHttpReceiver
    grpc: OtlpGrpcReceiver

    def url(self, signal: str) -> str:
        return f"http://127.0.0.1:{self.http.port}/v1/{signal}"

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc.port}"

    def value(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0


@pytest.fixture
async def make_stack(capture: OtlpCapture) -> AsyncIterator[Callable[..., Awaitable[Stack]]]:
    stacks: list[Stack] = []

    async def make(*, downstream: str | None = "http", auth_token: str | None = None) -> Stack:
        """Receivers -> assembly -> the forwarder, over a sender that carries logs and metrics
        beside its spans (`downstream` None: no --forward-to)."""
        metrics = Metrics()
        sender = None
        if downstream is not None:
            url = capture.http_url if downstream == "http" else capture.grpc_url
            sender = OtlpSender(SenderSettings(url, carries={LOGS: {}, METRICS: {}}), metrics=metrics)
            await sender.start()
        ingest = OtlpIngest(keep_trace=Sampler(1.0).keep_trace, sink=CollectingSink(), metrics=metrics,
                            settings=IngestSettings(buffer=AssemblyConfig(quiet_period_s=0.05), flush_interval_s=0.02),
                            signals=SignalForwarder(sender, metrics=metrics))
        await ingest.start()
        config = ReceiversConfig(otlp_http="127.0.0.1:0", otlp_grpc="127.0.0.1:0", auth_token=auth_token)
        http = OtlpHttpReceiver(ingest, metrics=metrics, settings=config.http(), signals=ingest)
        grpc_receiver = OtlpGrpcReceiver(ingest, metrics=metrics, settings=config.grpc(), signals=ingest)
        await http.start()
        await grpc_receiver.start()
        stack = Stack(capture, metrics, sender, ingest, http, grpc_receiver)
        stacks.append(stack)
        return stack

    try:
        yield make
    finally:
        for stack in stacks:
            await shutdown(stack.http, 1.0)
            await shutdown(stack.grpc, 1.0)
            await shutdown(stack.ingest, 0.0)
            if stack.sender is not None:
                await shutdown(stack.sender, 2.0)


async def post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes, str]:
    async with aiohttp.ClientSession() as session:
        async with session.post(url, data=body, headers=headers) as response:
            return response.status, await response.read(), response.headers.get("Content-Type", "")


def message(body: bytes, content_type: str) -> str:
    if content_type.startswith(JSON):
        return json.loads(body)["message"]
    return status_pb2.Status.FromString(body).message


async def until(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"waited {timeout}s for {what}"
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("ingress,downstream", [("http", "http"), ("grpc", "grpc"), ("http", "grpc")])
async def test_sdk_logs_and_metrics_reach_downstream(make_stack: Callable[..., Awaitable[Stack]],
                                                     ingress: str, downstream: str) -> None:
    stack = await make_stack(downstream=downstream)
    if ingress == "http":
        logs = HttpLogExporter(endpoint=stack.url("logs"), compression=Compression.Gzip)
        metrics = HttpMetricExporter(endpoint=stack.url("metrics"))
    else:
        logs = GrpcLogExporter(endpoint=stack.grpc_target, insecure=True)
        metrics = GrpcMetricExporter(endpoint=stack.grpc_target, insecure=True)
    bodies = await asyncio.to_thread(emit_logs, logs, 7)
    points = await asyncio.to_thread(emit_metrics, metrics)

    arrived = await stack.capture.wait_for_logs(7)
    assert [log.record.body.string_value for log in arrived] == bodies
    assert {log.via for log in arrived} == {downstream}
    assert arrived[1].event_name == "app.line" and arrived[1].attributes == {"app.line": 1}
    assert arrived[0].resource["service.name"] == "signals-app"
    await stack.capture.wait_for_metrics(sum(points.values()))
    assert {m.name: m.data_points for m in stack.capture.metrics} == points
    receiver = f"otlp_{ingress}"
    assert stack.value("ctxprec_log_records_received_total", receiver=receiver) == 7
    assert stack.value("ctxprec_metric_data_points_received_total", receiver=receiver) == 4
    await until(lambda: stack.value("ctxprec_exported_spans_total", exporter="metric_forwarder", outcome="ok") == 4,
                "the forwarded data points counted")
    assert stack.value("ctxprec_exported_spans_total", exporter="log_forwarder", outcome="ok") == 7
    assert stack.value("ctxprec_spans_received_total", receiver=receiver) == 0  # logs are not spans


async def test_protobuf_bodies_go_on_byte_for_byte(make_stack: Callable[..., Awaitable[Stack]]) -> None:
    stack = await make_stack()
    logs = logs_request(4).SerializeToString()
    metrics = metrics_request().SerializeToString()
    status, answer, ctype = await post(stack.url("logs"), gzip.compress(logs), {"Content-Type": PB,
                                                                                 "Content-Encoding": "gzip"})
    assert status == 200 and ctype.startswith(PB)
    assert ExportLogsServiceResponse.FromString(answer) == ExportLogsServiceResponse()
    status, answer, _ = await post(stack.url("metrics"), metrics, {"Content-Type": PB})
    assert status == 200 and ExportMetricsServiceResponse.FromString(answer) == ExportMetricsServiceResponse()
    await stack.capture.wait_for_logs(4)
    await stack.capture.wait_for_metrics(4)
    assert stack.capture.log_bodies == [logs]
    assert stack.capture.metric_bodies == [metrics]


async def test_otlp_json_logs_and_metrics_with_hex_ids(make_stack: Callable[..., Awaitable[Stack]]) -> None:
    stack = await make_stack()
    trace, span = "5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174"
    logs = {"resourceLogs": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "js"}}]},
                              "scopeLogs": [{"logRecords": [{"timeUnixNano": "1700000000000000000",
                                                             "severityNumber": 9, "body": {"stringValue": "hello"},
                                                             "traceId": trace, "spanId": span}]}]}]}
    metrics = {"resourceMetrics": [{"scopeMetrics": [{"metrics": [{
        "name": "app.requests", "sum": {"aggregationTemporality": 2, "isMonotonic": True, "dataPoints": [
            {"asInt": "3", "timeUnixNano": "1700000000000000000",
             "exemplars": [{"asInt": "1", "traceId": trace, "spanId": span}]}]}}]}]}]}
    for signal, doc in (("logs", logs), ("metrics", metrics)):
        status, answer, ctype = await post(stack.url(signal), json.dumps(doc).encode(), {"Content-Type": JSON})
        assert (status, answer) == (200, b"{}") and ctype.startswith(JSON)
    [log] = await stack.capture.wait_for_logs(1)
    assert (log.record.trace_id.hex(), log.record.span_id.hex(), log.record.body.string_value) == (trace, span, "hello")
    [metric] = await stack.capture.wait_for_metrics(1)
    exemplar = metric.metric.sum.data_points[0].exemplars[0]
    assert (exemplar.trace_id.hex(), exemplar.span_id.hex()) == (trace, span)


async def test_bad_bodies_are_400s_naming_the_problem_and_good_ones_still_arrive(
        make_stack: Callable[..., Awaitable[Stack]]) -> None:
    stack = await make_stack()
    good = logs_request(2, prefix="good").SerializeToString()
    assert (await post(stack.url("logs"), good, {"Content-Type": PB}))[0] == 200

    status, answer, ctype = await post(stack.url("logs"), good[:-7], {"Content-Type": PB})
    assert status == 400 and "ExportLogsServiceRequest" in message(answer, ctype)
    status, answer, ctype = await post(stack.url("metrics"), b"\x0a\xff\xff\xff\x0f garbage", {"Content-Type": PB})
    assert status == 400 and "ExportMetricsServiceRequest" in message(answer, ctype)
    bad_id = {"resourceLogs": [{"scopeLogs": [{"logRecords": [{"body": {"stringValue": "x"}, "traceId": "xyz"}]}]}]}
    status, answer, ctype = await post(stack.url("logs"), json.dumps(bad_id).encode(), {"Content-Type": JSON})
    assert status == 400 and ctype.startswith(JSON)
    assert "resourceLogs[0].scopeLogs[0].logRecords[0].traceId" in message(answer, ctype)
    bad_exemplar = {"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": "m", "gauge": {"dataPoints": [
        {"asDouble": 1.0, "exemplars": [{"spanId": "abcd"}]}]}}]}]}]}
    status, answer, ctype = await post(stack.url("metrics"), json.dumps(bad_exemplar).encode(), {"Content-Type": JSON})
    assert status == 400 and "exemplars[0].spanId: expected 16 hex digits" in message(answer, ctype)
    status, answer, ctype = await post(stack.url("logs"), b"{not json", {"Content-Type": JSON})
    assert status == 400 and "not valid JSON" in message(answer, ctype)
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        export = channel.unary_unary("/opentelemetry.proto.collector.logs.v1.LogsService/Export",
                                     request_serializer=None, response_deserializer=ExportLogsServiceResponse.FromString)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await export(good[:-7])
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "ExportLogsServiceRequest" in (refused.value.details() or "")
        assert await export(logs_request(3, prefix="after").SerializeToString()) == ExportLogsServiceResponse()

    arrived = await stack.capture.wait_for_logs(5)
    assert [log.record.body.string_value for log in arrived] == ["good 0", "good 1", "after 0", "after 1", "after 2"]
    assert stack.value("ctxprec_receiver_errors_total", receiver="otlp_http", reason="bad_body") == 5
    assert stack.value("ctxprec_receiver_errors_total", receiver="otlp_grpc", reason="bad_body") == 1
    assert stack.value("ctxprec_receiver_errors_total", receiver="otlp_http", reason="internal") == 0


async def test_logs_and_metrics_need_the_receivers_token(make_stack: Callable[..., Awaitable[Stack]]) -> None:
    stack = await make_stack(auth_token="s3cret")
    body = logs_request(1).SerializeToString()
    status, answer, ctype = await post(stack.url("logs"), body, {"Content-Type": PB})
    assert status == 401 and "bearer token" in message(answer, ctype)
    status, _, _ = await post(stack.url("metrics"), metrics_request().SerializeToString(), {"Content-Type": PB})
    assert status == 401
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        export = channel.unary_unary("/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
                                     request_serializer=None,
                                     response_deserializer=ExportMetricsServiceResponse.FromString)
        with pytest.raises(grpc.aio.AioRpcError) as denied:
            await export(metrics_request().SerializeToString())
        assert denied.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert stack.value("ctxprec_log_records_received_total", receiver="otlp_http") == 0
    await asyncio.to_thread(emit_logs, HttpLogExporter(endpoint=stack.url("logs"),
                                                       headers={"Authorization": "Bearer s3cret"}), 2)
    await stack.capture.wait_for_logs(2)


async def test_without_forward_to_they_are_counted_as_dropped_and_one_line_says_what_to_set(
        make_stack: Callable[..., Awaitable[Stack]], caplog: pytest.LogCaptureFixture) -> None:
    stack = await make_stack(downstream=None)
    with caplog.at_level(logging.WARNING, logger="ctxprec.collector.exporters.signal_forward"):
        for _ in range(3):
            await asyncio.to_thread(emit_logs, HttpLogExporter(endpoint=stack.url("logs")), 2)
            await asyncio.to_thread(emit_metrics, HttpMetricExporter(endpoint=stack.url("metrics")))
    assert stack.value("ctxprec_log_records_received_total", receiver="otlp_http") == 6
    assert stack.value("ctxprec_export_dropped_total", exporter="log_forwarder", reason="no_forward_to") == 6
    assert stack.value("ctxprec_export_dropped_total", exporter="metric_forwarder", reason="no_forward_to") == 12
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert all("--forward-to is not set" in line for line in lines)
    assert stack.capture.logs == [] and stack.capture.metrics == []


def test_each_signal_has_its_path_under_forward_to() -> None:
    assert signal_url("http://collector:4318", METRICS) == "http://collector:4318/v1/metrics"
    assert signal_url("https://collector:4318/v1/traces", LOGS) == "https://collector:4318/v1/logs"
    assert signal_url("http://proxy/otlp/v1/metrics", TRACES) == "http://proxy/otlp/v1/traces"
    assert signal_url("http://proxy/otlp/", METRICS) == "http://proxy/otlp/v1/metrics"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_one_queue_one_bound_for_every_signal_through_an_outage(capture: OtlpCapture) -> None:
    """Through an outage the three signals wait in one queue: its byte bound holds them all, the
    oldest item of any signal is dropped first and counted under its own exporter; once the
    endpoint is back everything left arrives, each signal at its own path."""
    metrics = Metrics()

    def dropped(exporter: str) -> float:
        return metrics.registry.get_sample_value(
            "ctxprec_export_dropped_total", {"exporter": exporter, "reason": "queue_full"}) or 0.0

    proxy = TcpProxy(capture.http_port)
    proxy.port = _free_port()  # nothing listens there until the proxy comes up
    spans = request_of(rag_trace(trace_id(False))).SerializeToString()
    logs = logs_request(3).SerializeToString()
    points = metrics_request().SerializeToString()
    bound = len(spans) + len(logs) + len(points)
    sender = OtlpSender(SenderSettings(proxy.url, carries={LOGS: {}, METRICS: {}}, max_queue_bytes=bound,
                                       backoff=Backoff(base_s=0.01, cap_s=0.05)), metrics=metrics)
    await sender.start()
    try:
        assert sender.forward_raw(spans, 3) and sender.forward_raw(logs, 3, LOGS) and sender.forward_raw(points, 4, METRICS)
        await asyncio.sleep(0.2)  # attempts fail: nothing listens yet
        assert sender.queued_bytes == bound
        # One more log request: the oldest item (the spans) makes room, whatever its signal.
        assert sender.forward_raw(logs, 3, LOGS)
        assert (dropped("span_forwarder"), dropped("log_forwarder"), dropped("metric_forwarder")) == (3, 0, 0)
        assert sender.queued_bytes <= bound
        assert sender.queued(LOGS) == [logs, logs] and sender.queued(METRICS) == [points]
        await proxy.up()
        await capture.wait_for_logs(6)
        await capture.wait_for_metrics(4)
        assert capture.spans == []
        assert capture.log_bodies == [logs + logs] or capture.log_bodies == [logs, logs]
    finally:
        await shutdown(sender, 2.0)
        await proxy.down()


async def test_a_downstream_that_does_not_take_logs_gets_spans_still(caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics()
    traces_only = await OtlpCapture(logs=False, metrics=False).start()
    sender = OtlpSender(SenderSettings(traces_only.http_url, carries={LOGS: {}, METRICS: {}}), metrics=metrics)
    await sender.start()
    try:
        with caplog.at_level(logging.WARNING, logger="ctxprec.collector.exporters.otlp_sender"):
            sender.forward_raw(logs_request(2).SerializeToString(), 2, LOGS)
            await until(lambda: (metrics.registry.get_sample_value(
                "ctxprec_export_dropped_total", {"exporter": "log_forwarder", "reason": "unsupported"}) or 0) == 2,
                "the refused logs counted")
            sender.forward_raw(logs_request(5).SerializeToString(), 5, LOGS)  # not tried again for a while
            sender.forward_raw(request_of(rag_trace(trace_id(False))).SerializeToString(), 3)
            await traces_only.wait_for_spans(3)
        assert metrics.registry.get_sample_value(
            "ctxprec_export_dropped_total", {"exporter": "log_forwarder", "reason": "unsupported"}) == 7
        assert traces_only.log_requests == 1
        [warning] = [r.getMessage() for r in caplog.records]
        assert "does not take OTLP logs (HTTP 405)" in warning and "unsupported" in warning
    finally:
        await shutdown(sender, 2.0)
        await traces_only.stop()


def test_a_sender_refuses_signals_it_does_not_carry() -> None:
    sender = OtlpSender(SenderSettings("http://collector:4318"), metrics=Metrics())
    with pytest.raises(ValueError, match="does not carry logs"):
        sender.forward_raw(b"", 1, LOGS)
    with pytest.raises(ValueError, match="own signal"):
        SenderSettings("http://collector:4318", carries={TRACES: {}})


def test_carried_signals_take_their_own_otel_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-all=1")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "x-metrics=2")
    settings = SenderSettings.of(ExportConfig(forward_to="http://collector:4318", forward_headers=["x-mine=3"]),
                                 carries=(LOGS, METRICS))
    assert settings.signals == (TRACES, LOGS, METRICS)
    assert settings.headers_for(TRACES) == settings.headers_for(LOGS) == {"x-all": "1", "x-mine": "3"}
    assert settings.headers_for(METRICS) == {"x-metrics": "2", "x-mine": "3"}
