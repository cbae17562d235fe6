"""A minimal OTLP receiver for tests: OTLP/HTTP protobuf (aiohttp) and OTLP/gRPC (grpc.aio) on
127.0.0.1 free ports, collecting every span it is sent. Real servers, so the SDK exporters under
test go through their real network path."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import grpc
from aiohttp import web
from opentelemetry.proto.collector.trace.v1 import (
    trace_service_pb2,
    trace_service_pb2_grpc,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


@dataclass
class ReceivedSpan:
    service: str
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    attributes: dict[str, Any]
    start_ns: int
    end_ns: int


@dataclass
class OtlpSink:
    spans: list[ReceivedSpan] = field(default_factory=list)
    requests: int = 0
    http_port: int = 0
    grpc_port: int = 0
    _runner: web.AppRunner | None = None
    _grpc: grpc.aio.Server | None = None

    def _ingest(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        self.requests += 1
        for rs in request.resource_spans:
            resource = {a.key: _value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    self.spans.append(ReceivedSpan(
                        service=str(resource.get("service.name")), trace_id=s.trace_id.hex(), span_id=s.span_id.hex(),
                        parent_span_id=s.parent_span_id.hex(), name=s.name,
                        attributes={a.key: _value(a.value) for a in s.attributes},
                        start_ns=s.start_time_unix_nano, end_ns=s.end_time_unix_nano))

    async def _http(self, request: web.Request) -> web.Response:
        body = await request.read()
        message = trace_service_pb2.ExportTraceServiceRequest()
        message.ParseFromString(body)
        self._ingest(message)
        reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=reply, content_type="application/x-protobuf")

    async def start(self) -> "OtlpSink":
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/traces", self._http)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.http_port = site._server.sockets[0].getsockname()[1]  # aiohttp exposes no public getter

        sink = self

        class Servicer(trace_service_pb2_grpc.TraceServiceServicer):
            async def Export(self, request, context):  # noqa: N802 - gRPC method name
                sink._ingest(request)
                return trace_service_pb2.ExportTraceServiceResponse()

        self._grpc = grpc.aio.server()
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Servicer(), self._grpc)
        self.grpc_port = self._grpc.add_insecure_port("127.0.0.1:0")
        await self._grpc.start()
        return self

    async def stop(self) -> None:
        if self._grpc is not None:
            await self._grpc.stop(grace=None)
        if self._runner is not None:
            await self._runner.cleanup()

    async def wait_for(self, count: int, timeout_s: float = 15.0) -> None:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while len(self.spans) < count:
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"received {len(self.spans)} spans, expected {count}")
            await asyncio.sleep(0.05)
