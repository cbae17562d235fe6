"""OTLP/gRPC receiver: the `Export` methods of opentelemetry.proto.collector's TraceService,
LogsService and MetricsService on `--otlp-grpc` (default 127.0.0.1:4317). Logs and metrics get
the same limits, auth and TLS as traces and go to the `SignalConsumer`.

The methods are registered with no request deserializer, so the handler gets the message bytes:
they are decoded by the same function as every other input (one set of error messages) and
passed on to forwarding untouched.

The listeners' limits (listener_limits.py) become gRPC's own connection settings: a client must
finish the connection handshake within the header timeout, a connection with no call for the
idle timeout is closed (GOAWAY), open connections are capped, and every connection is renewed
after half an hour, so a client cannot hold one forever and a scaled-out sidecar gets its share.
gRPC enforces these itself, so they are not counted in `ctxprec_listener_connections_refused_total`.
"""
from __future__ import annotations

import logging
from typing import Any

import grpc
from ctxprec.collector.components import Deadline, SignalConsumer, TraceConsumer
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.otlp.signals import LOGS, METRICS, SIGNALS, TRACES, Signal
from ctxprec.collector.receivers.config import OtlpReceiverSettings
from ctxprec.collector.receivers.otlp_decode import DecodeError, decode_with_raw

log = logging.getLogger(__name__)

RECEIVER = "otlp_grpc"
_PROTOBUF = "application/x-protobuf"
# Messages a little over the limit still reach the handler, so they are counted and answered
# with our message; far bigger ones are refused by gRPC itself.
_SLACK = 1024 * 1024
# Export calls in flight when the receiver stops get this long to end, whatever the shutdown
# deadline: they are short, and what they bring in still has the deadline to be scored.
GRACE_S = 1.0
# A connection is renewed after this long (GOAWAY; calls under way get the grace to finish).
MAX_CONNECTION_AGE_S = 30 * 60
MAX_CONNECTION_AGE_GRACE_S = 30
# Unanswered keepalive pings close a connection whose peer is gone after this long.
KEEPALIVE_TIMEOUT_S = 20


class OtlpGrpcReceiver:
    def __init__(self, target: TraceConsumer, *, metrics: Metrics, settings: OtlpReceiverSettings,
                 signals: SignalConsumer | None = None) -> None:
        """`signals` takes logs and metrics (LogsService, MetricsService); without it only traces are served."""
        self.host, self.requested_port = settings.host, settings.port
        self.max_bytes = settings.max_bytes
        self.max_spans = settings.max_spans
        self.limits = settings.limits
        self.security = settings.security
        self._target = target
        self._signals = signals
        self._metrics = metrics
        self._server: grpc.aio.Server | None = None
        self.port: int | None = None

    async def start(self) -> None:
        limits = self.limits
        server = grpc.aio.server(options=[
            ("grpc.max_receive_message_length", self.max_bytes + _SLACK),
            ("grpc.max_send_message_length", 4 * 1024 * 1024),
            ("grpc.server_handshake_timeout_ms", _ms(limits.header_timeout_s)),
            ("grpc.max_connection_idle_ms", _ms(limits.idle_timeout_s)),
            ("grpc.keepalive_time_ms", _ms(limits.idle_timeout_s)),
            ("grpc.keepalive_timeout_ms", _ms(KEEPALIVE_TIMEOUT_S)),
            ("grpc.max_connection_age_ms", _ms(MAX_CONNECTION_AGE_S)),
            ("grpc.max_connection_age_grace_ms", _ms(MAX_CONNECTION_AGE_GRACE_S)),
            ("grpc.max_allowed_incoming_connections", limits.max_connections),
        ])
        signals = (TRACES, LOGS, METRICS) if self._signals is not None else (TRACES,)
        server.add_generic_rpc_handlers(tuple(self._handler(SIGNALS[name]) for name in signals))
        address = f"{self.host}:{self.requested_port}"
        credentials = self.security.grpc_server_credentials()
        if credentials is not None:
            self.port = server.add_secure_port(address, credentials)  # type: ignore[arg-type]
        else:
            self.port = server.add_insecure_port(address)
        if not self.port:
            raise OSError(f"OTLP/gRPC: cannot listen on {address}")
        await server.start()
        self._server = server

    async def finish(self, deadline: Deadline) -> None:
        if self._server is not None:
            await self._server.stop(GRACE_S)
            self._server = None

    async def close(self) -> None:
        return None

    @property
    def listening(self) -> bool:
        return self._server is not None

    def _handler(self, signal: Signal) -> grpc.GenericRpcHandler:
        async def export(body: bytes, context: grpc.aio.ServicerContext) -> Any:
            return await self._export(body, context, signal)

        return grpc.method_handlers_generic_handler(signal.grpc_service, {
            "Export": grpc.unary_unary_rpc_method_handler(
                export, request_deserializer=None, response_serializer=signal.response.SerializeToString),
        })

    async def _export(self, body: bytes, context: grpc.aio.ServicerContext, signal: Signal) -> Any:
        security = self.security
        if security.bearer_token is not None:
            header = next((v for k, v in context.invocation_metadata() or () if k == "authorization"), None)
            if not security.authorized(header if isinstance(header, str) else None):
                await self._abort(context, grpc.StatusCode.UNAUTHENTICATED, "missing or invalid bearer token",
                                  "unauthenticated")
        try:
            request, raw = decode_with_raw(body, content_type=_PROTOBUF, content_encoding=None,
                                           max_bytes=self.max_bytes, max_spans=self.max_spans, signal=signal)
        except DecodeError as exc:
            code = grpc.StatusCode.RESOURCE_EXHAUSTED if exc.http_status == 413 else grpc.StatusCode.INVALID_ARGUMENT
            await self._abort(context, code, exc.message, exc.reason)
        try:
            if signal.name == TRACES:
                await self._target.ingest(request, receiver=RECEIVER, raw=raw)
            else:
                assert self._signals is not None
                await self._signals.ingest_signal(signal.name, request, receiver=RECEIVER, raw=raw)
        except Exception:
            log.exception("OTLP/gRPC: ingest of %s failed", signal.name)
            await self._abort(context, grpc.StatusCode.INTERNAL,
                              f"internal error while ingesting {signal.items}; see the sidecar log", "internal")
        return signal.response()

    async def _abort(self, context: Any, code: grpc.StatusCode, message: str, reason: str) -> None:
        self._metrics.receiver_errors.labels(receiver=RECEIVER, reason=reason).inc()
        await context.abort(code, message)


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))
