"""OTLP/HTTP receiver: POST /v1/traces, protobuf or JSON (port 4318 by default).

Responses follow OTLP/HTTP: an `ExportTraceServiceResponse` in the request's encoding on
success, a `google.rpc.Status` with a message on error (400 bad body, 401 missing token, 413 too
large, 415 unsupported type). aiohttp's own request decompression is off: the decoder inflates
gzip itself with a bound on the output, so a small body cannot expand without limit.
"""
from __future__ import annotations

import json
import logging
from aiohttp import web
from ctxprec.collector.components import Deadline, TraceConsumer
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.receivers.config import ReceiversConfig
from ctxprec.collector.receivers.otlp_decode import (
    DecodeError,
    decode_with_raw,
    is_json,
    media_type,
)
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceResponse,
)

log = logging.getLogger(__name__)

RECEIVER = "otlp_http"
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_GRPC_CODE = {400: code_pb2.INVALID_ARGUMENT, 401: code_pb2.UNAUTHENTICATED, 413: code_pb2.RESOURCE_EXHAUSTED,
              415: code_pb2.INVALID_ARGUMENT, 500: code_pb2.INTERNAL}


class OtlpHttpReceiver:
    def __init__(self, target: TraceConsumer, *, metrics: Metrics, config: ReceiversConfig | None = None) -> None:
        """Listens on `config.otlp_http`, with the receivers' auth, TLS and size limit."""
        config = config or ReceiversConfig()
        if config.otlp_http is None:
            raise ValueError("receivers.otlp_http: the OTLP/HTTP receiver needs a listen address")
        self.host, self.requested_port = config.otlp_http
        self.max_bytes = config.max_request_bytes  # per request, compressed and decompressed
        self.security = config.security()
        self._target = target
        self._metrics = metrics
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self.port: int | None = None

    async def start(self) -> None:
        app = web.Application(client_max_size=self.max_bytes)
        app.router.add_post("/v1/traces", self._traces)
        self._runner = web.AppRunner(app, access_log=None, auto_decompress=False, handle_signals=False)
        await self._runner.setup()
        self._site = web.TCPSite(self._runner, self.host, self.requested_port,
                                 ssl_context=self.security.server_ssl_context())
        await self._site.start()
        server = self._site._server  # the bound socket tells the real port when 0 was asked for
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else self.requested_port

    async def finish(self, deadline: Deadline) -> None:
        """Stop listening; requests being handled run to their end (they are short)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def close(self) -> None:
        return None

    @property
    def listening(self) -> bool:
        return self._runner is not None

    async def _traces(self, request: web.Request) -> web.Response:
        content_type = request.headers.get("Content-Type", "")
        as_json = is_json(content_type)
        if not self.security.authorized(request.headers.get("Authorization")):
            return self._error(401, "missing or invalid bearer token", as_json, "unauthenticated")
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._error(413, f"request body is over the limit of {self.max_bytes} bytes",
                               as_json, "too_large")
        try:
            decoded, raw = decode_with_raw(body, content_type=content_type,
                                           content_encoding=request.headers.get("Content-Encoding"),
                                           max_bytes=self.max_bytes)
        except DecodeError as exc:
            unsupported = exc.http_status == 415 and media_type(content_type) not in (PROTOBUF, JSON)
            return self._error(exc.http_status, exc.message, as_json or unsupported, exc.reason)
        try:
            await self._target.ingest(decoded, receiver=RECEIVER, raw=raw)
        except Exception:
            log.exception("OTLP/HTTP: ingest failed")
            return self._error(500, "internal error while ingesting spans; see the sidecar log", as_json, "internal")
        if as_json:
            return web.Response(body=b"{}", content_type=JSON)
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(), content_type=PROTOBUF)

    def _error(self, status: int, message: str, as_json: bool, reason: str) -> web.Response:
        self._metrics.receiver_errors.labels(receiver=RECEIVER, reason=reason).inc()
        code = _GRPC_CODE.get(status, code_pb2.UNKNOWN)
        if as_json:
            body = json.dumps({"code": code, "message": message}).encode()
            return web.Response(status=status, body=body, content_type=JSON)
        payload = status_pb2.Status(code=code, message=message).SerializeToString()
        return web.Response(status=status, body=payload, content_type=PROTOBUF)
