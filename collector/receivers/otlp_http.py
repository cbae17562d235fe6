"""OTLP/HTTP receiver: POST /v1/traces, /v1/logs and /v1/metrics, protobuf or JSON (port 4318 by
default). Logs and metrics get the same size limit, auth and TLS as traces and go to the
`SignalConsumer` (assembly, which passes them on to the forwarder).

Responses follow OTLP/HTTP: the signal's export response in the request's encoding on
success, a `google.rpc.Status` with a message on error (400 bad body, 401 missing token, 408 body
too slow, 413 too large or too many spans, 415 unsupported type). aiohttp's own request
decompression is off: the decoder inflates gzip itself with a bound on the output, so a small
body cannot expand without limit. Connections keep the listeners' limits (collector/listeners.py:
header, body and idle timeouts, a cap on open connections, a Content-Length over the limit
refused before it is read).
"""
from __future__ import annotations

import json
import logging
from typing import Any

from aiohttp import web
from ctxprec.collector.components import Deadline, SignalConsumer, TraceConsumer
from ctxprec.collector.listeners import BodyRefused, ListenerGuard
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.otlp.signals import LOGS, METRICS, SIGNALS, TRACES, Signal
from ctxprec.collector.receivers.config import OtlpReceiverSettings
from ctxprec.collector.receivers.otlp_decode import (
    DecodeError,
    decode_sharing_loop,
    is_json,
    media_type,
)
from google.rpc import code_pb2, status_pb2

log = logging.getLogger(__name__)

RECEIVER = "otlp_http"
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_GRPC_CODE = {400: code_pb2.INVALID_ARGUMENT, 401: code_pb2.UNAUTHENTICATED, 408: code_pb2.DEADLINE_EXCEEDED,
              413: code_pb2.RESOURCE_EXHAUSTED, 415: code_pb2.INVALID_ARGUMENT, 500: code_pb2.INTERNAL}


class OtlpHttpReceiver:
    def __init__(self, target: TraceConsumer, *, metrics: Metrics, settings: OtlpReceiverSettings,
                 signals: SignalConsumer | None = None) -> None:
        """`signals` takes logs and metrics (/v1/logs, /v1/metrics); without it only traces are served."""
        self.host, self.requested_port = settings.host, settings.port
        self.max_bytes = settings.max_bytes
        self.max_spans = settings.max_spans
        self.security = settings.security
        self.guard = ListenerGuard(RECEIVER, settings.limits, metrics, max_body_bytes=self.max_bytes,
                                   refusal=self._refusal)
        self._target = target
        self._signals = signals
        self._metrics = metrics
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    async def start(self) -> None:
        app = web.Application(client_max_size=self.max_bytes, middlewares=[self.guard.middleware])
        for name in (TRACES, LOGS, METRICS) if self._signals is not None else (TRACES,):
            app.router.add_post(SIGNALS[name].http_path, self._export_handler(SIGNALS[name]))
        self._runner = web.AppRunner(app, access_log=None, auto_decompress=False, handle_signals=False,
                                     **self.guard.runner_options())
        await self._runner.setup()
        self.port = await self.guard.serve(self._runner, self.host, self.requested_port,
                                           self.security.server_ssl_context())

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

    def _export_handler(self, signal: Signal) -> Any:
        async def handle(request: web.Request) -> web.Response:
            return await self._export(request, signal)

        return handle

    async def _export(self, request: web.Request, signal: Signal) -> web.Response:
        content_type = request.headers.get("Content-Type", "")
        as_json = is_json(content_type)
        if not self.security.authorized(request.headers.get("Authorization")):
            return self._error(401, "missing or invalid bearer token", as_json, "unauthenticated")
        try:
            body = await self.guard.read_body(request)
        except BodyRefused as exc:
            return self._error(exc.status, exc.message, as_json, exc.reason)
        try:
            decoded, raw = await decode_sharing_loop(body, content_type=content_type,
                                                     content_encoding=request.headers.get("Content-Encoding"),
                                                     max_bytes=self.max_bytes, max_spans=self.max_spans,
                                                     signal=signal)
        except DecodeError as exc:
            unsupported = exc.http_status == 415 and media_type(content_type) not in (PROTOBUF, JSON)
            return self._error(exc.http_status, exc.message, as_json or unsupported, exc.reason)
        try:
            if signal.name == TRACES:
                await self._target.ingest(decoded, receiver=RECEIVER, raw=raw)
            else:
                assert self._signals is not None
                await self._signals.ingest_signal(signal.name, decoded, receiver=RECEIVER, raw=raw)
        except Exception:
            log.exception("OTLP/HTTP: ingest of %s failed", signal.name)
            return self._error(500, f"internal error while ingesting {signal.items}; see the sidecar log", as_json,
                               "internal")
        if as_json:
            return web.Response(body=b"{}", content_type=JSON)
        return web.Response(body=signal.response().SerializeToString(), content_type=PROTOBUF)

    def _refusal(self, request: web.Request, status: int, message: str) -> web.Response:
        """A request the listener refused before reading it (a Content-Length over the limit)."""
        return self._error(status, message, is_json(request.headers.get("Content-Type")), "too_large")

    def _error(self, status: int, message: str, as_json: bool, reason: str) -> web.Response:
        self._metrics.receiver_errors.labels(receiver=RECEIVER, reason=reason).inc()
        code = _GRPC_CODE.get(status, code_pb2.UNKNOWN)
        if as_json:
            body = json.dumps({"code": code, "message": message}).encode()
            return web.Response(status=status, body=body, content_type=JSON)
        payload = status_pb2.Status(code=code, message=message).SerializeToString()
        return web.Response(status=status, body=payload, content_type=PROTOBUF)
