"""A real OTLP receiver for tests: traces, logs and metrics, over gRPC and HTTP (protobuf, gzip or
not).

It records what it receives and lets a test wait for it:

    capture = OtlpCapture()
    await capture.start()                 # 127.0.0.1, free ports
    ... point an exporter at capture.http_url or capture.grpc_url ...
    spans = await capture.wait_for_spans(3)
    capture.find_spans("gen_ai.evaluation.name", "context_precision")
    await capture.stop()

`fail_next(n, http_status=503)` makes the next n trace requests fail (retry tests). It decodes
with plain protobuf, independent of the code under test. Every request body is kept per signal
(`bodies`, `log_bodies`, `metric_bodies`, uncompressed), so a test can compare what arrived with
what was sent, byte for byte.
"""
from __future__ import annotations

import asyncio
import gzip
import time
from dataclasses import dataclass, field
from typing import Any

import grpc
from aiohttp import web
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

_ANY = object()


def plain(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [plain(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: plain(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind)


@dataclass
class CapturedSpan:
    span: Any  # opentelemetry.proto.trace.v1.Span
    resource: dict[str, Any]
    scope: str
    via: str  # "http" | "grpc"
    received_at: float  # time.perf_counter() on arrival
    attributes: dict[str, Any] = field(default_factory=dict)

    @property
    def trace_id(self) -> str:
        return self.span.trace_id.hex()

    @property
    def span_id(self) -> str:
        return self.span.span_id.hex()

    @property
    def name(self) -> str:
        return self.span.name


@dataclass
class CapturedLog:
    record: Any  # opentelemetry.proto.logs.v1.LogRecord
    resource: dict[str, Any]
    via: str
    attributes: dict[str, Any] = field(default_factory=dict)

    @property
    def event_name(self) -> str:
        return getattr(self.record, "event_name", "") or str(self.attributes.get("event.name", ""))


@dataclass
class CapturedMetric:
    metric: Any  # opentelemetry.proto.metrics.v1.Metric
    resource: dict[str, Any]
    via: str

    @property
    def name(self) -> str:
        return self.metric.name

    @property
    def data_points(self) -> int:
        kind = self.metric.WhichOneof("data")
        return len(getattr(self.metric, kind).data_points) if kind else 0


class OtlpCapture:
    def __init__(self, *, record_bodies: bool = True, logs: bool = True, metrics: bool = True) -> None:
        """`logs=False` acts as a traces-only backend (Arize Phoenix does): /v1/logs answers 405
        and the gRPC LogsService is UNIMPLEMENTED; `metrics=False` the same for metrics."""
        self.accept_logs = logs
        self.accept_metrics = metrics
        self.log_requests = 0  # log export attempts, refused ones included
        self.spans: list[CapturedSpan] = []
        self.logs: list[CapturedLog] = []
        self.metrics: list[CapturedMetric] = []
        self.bodies: list[bytes] = []  # uncompressed trace request bodies, in arrival order
        self.log_bodies: list[bytes] = []
        self.metric_bodies: list[bytes] = []
        # Request headers (HTTP) or metadata (gRPC) of each trace request, names in lower case.
        self.headers: list[dict[str, str]] = []
        self.requests = 0
        self.record_bodies = record_bodies
        self._fail_http: list[int] = []
        self._fail_grpc: list[grpc.StatusCode] = []
        self._changed = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._grpc: grpc.aio.Server | None = None
        self.http_port = 0
        self.grpc_port = 0

    # -- lifecycle --

    async def start(self, host: str = "127.0.0.1") -> "OtlpCapture":
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/traces", self._http_traces)
        if self.accept_logs:
            app.router.add_post("/v1/logs", self._http_logs)
        else:
            app.router.add_get("/v1/logs", self._get_only)
            app.middlewares.append(self._count_log_posts)
        if self.accept_metrics:
            app.router.add_post("/v1/metrics", self._http_metrics)
        else:
            app.router.add_get("/v1/metrics", self._get_only)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, 0)
        await site.start()
        self.http_port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

        server = grpc.aio.server(options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)])
        handlers = [grpc.method_handlers_generic_handler("opentelemetry.proto.collector.trace.v1.TraceService", {
            "Export": grpc.unary_unary_rpc_method_handler(
                self._grpc_traces, request_deserializer=None,
                response_serializer=ExportTraceServiceResponse.SerializeToString)})]
        if self.accept_logs:
            handlers.append(grpc.method_handlers_generic_handler("opentelemetry.proto.collector.logs.v1.LogsService", {
                "Export": grpc.unary_unary_rpc_method_handler(
                    self._grpc_logs, request_deserializer=None,
                    response_serializer=ExportLogsServiceResponse.SerializeToString)}))
        if self.accept_metrics:
            handlers.append(grpc.method_handlers_generic_handler(
                "opentelemetry.proto.collector.metrics.v1.MetricsService", {
                    "Export": grpc.unary_unary_rpc_method_handler(
                        self._grpc_metrics, request_deserializer=None,
                        response_serializer=ExportMetricsServiceResponse.SerializeToString)}))
        server.add_generic_rpc_handlers(tuple(handlers))
        self.grpc_port = server.add_insecure_port(f"{host}:0")
        await server.start()
        self._grpc = server
        self.host = host
        return self

    async def stop(self) -> None:
        if self._grpc is not None:
            await self._grpc.stop(0)
            self._grpc = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"grpc://{self.host}:{self.grpc_port}"

    def fail_next(self, n: int, *, http_status: int = 503,
                  grpc_code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE) -> None:
        self._fail_http.extend([http_status] * n)
        self._fail_grpc.extend([grpc_code] * n)

    # -- queries --

    def find_spans(self, key: str, value: Any = _ANY) -> list[CapturedSpan]:
        return [s for s in self.spans if key in s.attributes and (value is _ANY or s.attributes[key] == value)]

    def span(self, span_id: str) -> CapturedSpan | None:
        return next((s for s in self.spans if s.span_id == span_id), None)

    async def wait_for_spans(self, n: int, timeout: float = 10.0) -> list[CapturedSpan]:
        await self._wait(lambda: len(self.spans) >= n, timeout, lambda: f"{n} spans, got {len(self.spans)}")
        return self.spans

    async def wait_for_span(self, key: str, value: Any = _ANY, timeout: float = 10.0) -> CapturedSpan:
        await self._wait(lambda: bool(self.find_spans(key, value)), timeout, lambda: f"a span with {key}={value!r}")
        return self.find_spans(key, value)[0]

    async def wait_for_logs(self, n: int, timeout: float = 10.0) -> list[CapturedLog]:
        await self._wait(lambda: len(self.logs) >= n, timeout, lambda: f"{n} log records, got {len(self.logs)}")
        return self.logs

    async def wait_for_metrics(self, data_points: int, timeout: float = 10.0) -> list[CapturedMetric]:
        """Waits until at least `data_points` metric data points arrived."""
        def points() -> int:
            return sum(m.data_points for m in self.metrics)

        await self._wait(lambda: points() >= data_points, timeout,
                         lambda: f"{data_points} metric data points, got {points()}")
        return self.metrics

    async def _wait(self, ready: Any, timeout: float, what: Any) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"capture: waited {timeout}s for {what()}")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), min(remaining, 0.1))
            except asyncio.TimeoutError:
                pass

    # -- recording --

    def _record_traces(self, body: bytes, via: str) -> None:
        now = time.perf_counter()
        request = ExportTraceServiceRequest.FromString(body)
        self.requests += 1
        if self.record_bodies:
            self.bodies.append(body)
        for rs in request.resource_spans:
            resource = {kv.key: plain(kv.value) for kv in rs.resource.attributes}
            for ss in rs.scope_spans:
                for span in ss.spans:
                    self.spans.append(CapturedSpan(span, resource, ss.scope.name, via, now,
                                                   {kv.key: plain(kv.value) for kv in span.attributes}))
        self._changed.set()

    def _record_logs(self, body: bytes, via: str) -> None:
        request = ExportLogsServiceRequest.FromString(body)
        if self.record_bodies:
            self.log_bodies.append(body)
        for rl in request.resource_logs:
            resource = {kv.key: plain(kv.value) for kv in rl.resource.attributes}
            for sl in rl.scope_logs:
                for record in sl.log_records:
                    self.logs.append(CapturedLog(record, resource, via,
                                                 {kv.key: plain(kv.value) for kv in record.attributes}))
        self._changed.set()

    def _record_metrics(self, body: bytes, via: str) -> None:
        request = ExportMetricsServiceRequest.FromString(body)
        if self.record_bodies:
            self.metric_bodies.append(body)
        for rm in request.resource_metrics:
            resource = {kv.key: plain(kv.value) for kv in rm.resource.attributes}
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    self.metrics.append(CapturedMetric(metric, resource, via))
        self._changed.set()

    async def _http_body(self, request: web.Request) -> bytes:
        body = await request.read()
        if request.headers.get("Content-Encoding", "").lower() == "gzip" and body[:2] == b"\x1f\x8b":
            body = gzip.decompress(body)
        return body

    async def _http_traces(self, request: web.Request) -> web.Response:
        if self._fail_http:
            return web.Response(status=self._fail_http.pop(0), headers={"Retry-After": "0"})
        self.headers.append({k.lower(): v for k, v in request.headers.items()})
        self._record_traces(await self._http_body(request), "http")
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    @web.middleware
    async def _count_log_posts(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path == "/v1/logs":
            self.log_requests += 1
        return await handler(request)

    async def _get_only(self, request: web.Request) -> web.Response:
        """A signal refused: the path answers GET only, so an export (POST) gets 405."""
        return web.Response(status=200)

    async def _http_logs(self, request: web.Request) -> web.Response:
        self.log_requests += 1
        self._record_logs(await self._http_body(request), "http")
        return web.Response(body=ExportLogsServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    async def _http_metrics(self, request: web.Request) -> web.Response:
        self._record_metrics(await self._http_body(request), "http")
        return web.Response(body=ExportMetricsServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    async def _grpc_traces(self, body: bytes, context: grpc.aio.ServicerContext) -> ExportTraceServiceResponse:
        if self._fail_grpc:
            await context.abort(self._fail_grpc.pop(0), "capture: injected failure")
        self.headers.append({k.lower(): str(v) for k, v in (context.invocation_metadata() or ())})
        self._record_traces(body, "grpc")
        return ExportTraceServiceResponse()

    async def _grpc_logs(self, body: bytes, context: grpc.aio.ServicerContext) -> ExportLogsServiceResponse:
        self._record_logs(body, "grpc")
        return ExportLogsServiceResponse()

    async def _grpc_metrics(self, body: bytes, context: grpc.aio.ServicerContext) -> ExportMetricsServiceResponse:
        self._record_metrics(body, "grpc")
        return ExportMetricsServiceResponse()
