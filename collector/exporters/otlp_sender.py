"""Sends serialized OTLP export requests (traces, logs or metrics) to `--forward-to`.

Items are serialized `ExportTraceServiceRequest` (or logs, metrics export request) bytes. Two
serialized requests concatenated are the serialization of their merge (repeated fields append),
so a batch is just the queued bytes of one signal joined: unsampled traffic goes out byte for
byte as it came in, and batching costs no protobuf work. Senders take whatever is queued the
moment they are free, so an idle sender adds no delay.

A sender has its own signal and may carry others (`SenderSettings.carries`): the span forwarder
carries the app's logs and metrics to the same endpoint, each signal to its own path or gRPC
service, all in one queue with one byte bound, one deadline and one backoff. They are counted
apart, each under its own exporter name (`log_forwarder`, `metric_forwarder`), in its own items
(log records, data points).

Through a downstream outage the data waits: a batch that fails goes back to the head of the
queue and every sender pauses for the backoff (0.1 s doubling to 5 s), then tries again. What is
held (queued and in flight) is bounded in bytes (`--forward-max-queue-mb`); a full queue drops
its oldest items first (`queue_full`), an item still unsent at its deadline
(`--forward-queue-deadline`) is dropped as `expired`, and a permanent rejection as `rejected`,
each counted in `ctxprec_export_dropped_total{exporter,reason}`. So an outage costs only what
the queue cannot hold, and memory never grows past the bound.

A receiver that does not take a signal at all (HTTP 404, 405 or 415; gRPC UNIMPLEMENTED) is told
apart from other rejections: with `on_unsupported` set, the sender calls it once and drops what
it was sending without logging, so the owner can turn the signal off with one message. A carried
signal the receiver does not take gets one WARNING and is dropped as `unsupported` for five
minutes, then tried again.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol
from urllib.parse import urlsplit

import aiohttp
import aiohttp.abc
import aiohttp.payload
import grpc
from ctxprec.collector.components import Deadline, cancelled
from ctxprec.collector.exporters.config import ExportConfig
from ctxprec.collector.exporters.headers import export_headers
from ctxprec.collector.failure_log import FailureLog
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.otlp.signals import LOGS, METRICS, SIGNALS, TRACES
from ctxprec.scorer.http_body import BodyTooLarge, read_body
from ctxprec.scorer.retry import Backoff, parse_retry_after

log = logging.getLogger(__name__)

EXPORTER = "span_forwarder"
# The exporter name a carried signal is counted under (its items: log records, data points).
CARRIED_EXPORTERS = {TRACES: EXPORTER, LOGS: "log_forwarder", METRICS: "metric_forwarder"}
# A carried signal the receiver does not take is dropped this long before it is tried again.
UNSUPPORTED_RETRY_S = 300.0
_UNSUPPORTED_HTTP = frozenset({404, 405, 415})
_MAX_ANSWER_BYTES = 64 * 1024  # an export answer is a few bytes (a partial-success message at most)
_RETRY_HTTP = frozenset({429, 502, 503, 504})
_RETRY_GRPC = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED,
                         grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.ABORTED})


_EXPORT = ExportConfig()


@dataclass(frozen=True, slots=True)
class ClientTls:
    """The TLS block of an outbound OTLP connection (https:// or grpcs://): a CA to trust instead
    of the system store, and a client certificate for mTLS. Shared by every sender."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.ca_file)
        if self.cert_file:
            context.load_cert_chain(self.cert_file, self.key_file)
        return context

    def grpc_credentials(self) -> grpc.ChannelCredentials:
        def read(path: str | None) -> bytes | None:
            return Path(path).read_bytes() if path else None

        return grpc.ssl_channel_credentials(read(self.ca_file), read(self.key_file), read(self.cert_file))


@dataclass(slots=True)
class SenderSettings:
    url: str
    signal: str = TRACES  # "traces" | "logs" | "metrics"
    headers: dict[str, str] = field(default_factory=dict, repr=False)  # may hold credentials
    # Other signals this sender's queue carries to the same endpoint, with their own headers.
    carries: dict[str, dict[str, str]] = field(default_factory=dict, repr=False)
    max_queue_bytes: int = _EXPORT.max_queue_bytes
    max_batch_bytes: int = 3 * 1024 * 1024  # under the usual 4 MiB gRPC message limit
    senders: int = 2
    # Through an outage data waits this long at most (and while the queue has room), then it is
    # dropped as `expired`; attempts go on meanwhile, every 5 s at most apart.
    deadline_s: float = _EXPORT.queue_deadline_s
    backoff: Backoff = Backoff(base_s=0.1, cap_s=5.0, jitter=0.5)
    timeout_s: float = 10.0
    tls: ClientTls = ClientTls()

    @classmethod
    def of(cls, export: ExportConfig, signal: str = TRACES, carries: tuple[str, ...] = ()) -> "SenderSettings":
        """`--forward-to` and its TLS files, queue bound and headers (`--forward-header` over
        `OTEL_EXPORTER_OTLP_HEADERS`), for `signal` and the signals it `carries`."""
        assert export.forward_to is not None
        return cls(url=export.forward_to, signal=signal, max_queue_bytes=export.max_queue_bytes,
                   deadline_s=export.queue_deadline_s,
                   headers=export_headers(export.forward_headers, signal),
                   carries={other: export_headers(export.forward_headers, other) for other in carries},
                   tls=ClientTls(export.ca_file, export.cert_file, export.key_file))

    @property
    def signals(self) -> tuple[str, ...]:
        return (self.signal, *self.carries)

    def headers_for(self, signal: str) -> dict[str, str]:
        return self.headers if signal == self.signal else self.carries[signal]

    def __post_init__(self) -> None:
        scheme = urlsplit(self.url).scheme
        if scheme not in ("http", "https", "grpc", "grpcs"):
            raise ValueError(f"forward_to: {self.url!r} must start with http://, https://, grpc:// or grpcs://")
        if not urlsplit(self.url).hostname:
            raise ValueError(f"forward_to: {self.url!r} has no host")
        if self.senders < 1 or self.max_queue_bytes < 1 or self.max_batch_bytes < 1 or self.deadline_s <= 0:
            raise ValueError("forward_to: senders, max_queue_bytes, max_batch_bytes and deadline_s must be positive")
        for signal in self.signals:
            if signal not in SIGNALS:
                raise ValueError(f"signal: must be one of {', '.join(SIGNALS)}, got {signal!r}")
        if self.signal in self.carries:
            raise ValueError(f"carries: {self.signal!r} is this sender's own signal")


def signal_url(url: str, signal: str) -> str:
    """The endpoint for `signal` under `--forward-to`: `/v1/traces`, `/v1/logs` or `/v1/metrics`
    when the URL has no path; a URL ending in one of these swaps its last part; any other path is
    a prefix (a collector behind a reverse proxy)."""
    parts = urlsplit(url)
    own = SIGNALS[signal].http_path
    path = parts.path.rstrip("/")
    if not path:
        path = own
    elif path.endswith(tuple(s.http_path for s in SIGNALS.values())):
        path = path.rsplit("/v1/", 1)[0] + own
    else:
        path += own
    return parts._replace(path=path).geturl()


class _Retryable(Exception):
    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s  # the receiver's Retry-After, which the backoff honours


class _Rejected(Exception):
    def __init__(self, message: str, unsupported: bool = False) -> None:
        super().__init__(message)
        self.unsupported = unsupported


class _Transport(Protocol):
    async def send(self, signal: str, parts: list[bytes]) -> None: ...
    async def close(self) -> None: ...


class _PartsPayload(aiohttp.payload.Payload):
    """A request body written part by part with one Content-Length: batching without a copy."""

    _autoclose = True

    def __init__(self, parts: list[bytes]) -> None:
        super().__init__(parts, content_type="application/x-protobuf")
        self._parts = parts
        self._size = sum(len(part) for part in parts)

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        raise TypeError("protobuf payload is binary")

    async def write(self, writer: aiohttp.abc.AbstractStreamWriter) -> None:
        for part in self._parts:
            await writer.write(part)


class _HttpTransport:
    def __init__(self, settings: SenderSettings) -> None:
        parts = urlsplit(settings.url)
        self.urls = {signal: signal_url(settings.url, signal) for signal in settings.signals}
        self.headers = {signal: {"Content-Type": "application/x-protobuf", **settings.headers_for(signal)}
                        for signal in settings.signals}
        context = settings.tls.ssl_context() if parts.scheme == "https" else None
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=settings.timeout_s),
            connector=aiohttp.TCPConnector(ssl=context if context is not None else False, limit=settings.senders * 2),
        )

    async def send(self, signal: str, parts: list[bytes]) -> None:
        body: Any = parts[0] if len(parts) == 1 else _PartsPayload(parts)
        try:
            async with self._session.post(self.urls[signal], data=body, headers=self.headers[signal]) as response:
                # The answer (an ExportTraceServiceResponse) is not used: read up to a bound so
                # that the connection is reused, never more.
                with contextlib.suppress(BodyTooLarge):
                    await read_body(response, _MAX_ANSWER_BYTES)
                if response.status < 300:
                    return
                if response.status in _RETRY_HTTP:
                    raise _Retryable(f"HTTP {response.status}", parse_retry_after(response.headers.get("Retry-After")))
                raise _Rejected(f"HTTP {response.status}", unsupported=response.status in _UNSUPPORTED_HTTP)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise _Retryable(f"{type(exc).__name__}: {exc}") from None

    async def close(self) -> None:
        await self._session.close()


class _GrpcTransport:
    def __init__(self, settings: SenderSettings) -> None:
        parts = urlsplit(settings.url)
        target = f"{parts.hostname}:{parts.port or 4317}"
        options = [("grpc.max_send_message_length", settings.max_batch_bytes * 2 + 1024)]
        if parts.scheme == "grpcs":
            self._channel = grpc.aio.secure_channel(target, settings.tls.grpc_credentials(), options=options)
        else:
            self._channel = grpc.aio.insecure_channel(target, options=options)
        # The service stub would serialize a message; the identity serializer sends the queued
        # bytes as they are (same method, same wire format).
        self._exports = {signal: self._channel.unary_unary(
            SIGNALS[signal].grpc_method, request_serializer=None,
            response_deserializer=SIGNALS[signal].response.FromString) for signal in settings.signals}
        self._metadata = {signal: tuple((k.lower(), v) for k, v in settings.headers_for(signal).items())
                          for signal in settings.signals}
        self._timeout = settings.timeout_s

    async def send(self, signal: str, parts: list[bytes]) -> None:
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        try:
            await self._exports[signal](body, timeout=self._timeout, metadata=self._metadata[signal] or None)
        except grpc.aio.AioRpcError as exc:
            if exc.code() in _RETRY_GRPC:
                raise _Retryable(f"gRPC {exc.code().name}: {exc.details()}") from None
            raise _Rejected(f"gRPC {exc.code().name}: {exc.details()}",
                            unsupported=exc.code() == grpc.StatusCode.UNIMPLEMENTED) from None

    async def close(self) -> None:
        await self._channel.close()


@dataclass(slots=True)
class _Item:
    body: bytes
    spans: int  # items it holds: spans, log records or data points
    deadline: float  # monotonic; still unsent then, it is dropped as `expired`
    signal: str


class OtlpSender:
    def __init__(self, settings: SenderSettings, *, metrics: Metrics, exporter: str = EXPORTER,
                 on_unsupported: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`exporter` names this sender's own signal in the exported/dropped counters (carried
        signals are counted under `CARRIED_EXPORTERS`). `on_unsupported(reason)` is called once if
        the receiver does not take the own signal; later items are dropped as `unsupported`."""
        self.settings = settings
        self.exporter = exporter
        self._metrics = metrics
        self._on_unsupported = on_unsupported
        self._clock = clock
        self.unsupported: str | None = None
        # Carried signals the receiver said it does not take: until when they are dropped.
        self._refused_until: dict[str, float] = {}
        # Sending failures: the first as a WARNING at once, then a count per minute.
        self.failures = FailureLog(f"{exporter} to {settings.url}", log)
        # One queue per signal, in deadline order each; together they are one queue with one
        # bound: the oldest item of any signal is the next sent and the first dropped.
        self._queues: dict[str, deque[_Item]] = {signal: deque() for signal in settings.signals}
        # Bytes held: queued and in flight. A batch that fails goes back to the head of the queue
        # still counted, so the bound covers everything the sender holds through an outage.
        self._held_bytes = 0
        self._wakeup = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._transport: _Transport | None = None
        self._in_flight = 0
        self._closing = False
        self._failed_in_a_row = 0
        self._paused_until = 0.0  # after a failed attempt every sender waits until then
        self._exporters = {signal: exporter if signal == settings.signal else CARRIED_EXPORTERS[signal]
                           for signal in settings.signals}
        self._ok = {signal: metrics.exported_spans.labels(exporter=name, outcome="ok")
                    for signal, name in self._exporters.items()}
        self._failed = {signal: metrics.exported_spans.labels(exporter=name, outcome="failed")
                        for signal, name in self._exporters.items()}

    # -- input (never blocks, never grows past the bound) --

    def forward_raw(self, body: bytes, spans: int, signal: str | None = None) -> bool:
        """Queues a serialized export request of `signal` (the sender's own by default) holding
        `spans` items. False when dropped. A full queue makes room by dropping its oldest items
        (`queue_full`): the newest data is what a downstream that comes back most wants."""
        signal = signal or self.settings.signal
        if signal not in self._queues:
            raise ValueError(f"this sender does not carry {signal}")
        if self._closing:
            self._drop(signal, "shutdown", spans)
            return False
        if self._refused(signal):
            self._drop(signal, "unsupported", spans)
            return False
        limit = self.settings.max_queue_bytes
        if len(body) > limit:  # could never fit: the queued data stays
            self._drop(signal, "queue_full", spans)
            return False
        self._expire()
        while self._held_bytes + len(body) > limit:
            oldest = self._oldest()
            if oldest is None:
                break
            item = oldest.popleft()
            self._held_bytes -= len(item.body)
            self._drop(item.signal, "queue_full", item.spans)
        if self._held_bytes + len(body) > limit:  # what is left is in flight
            self._drop(signal, "queue_full", spans)
            return False
        self._queues[signal].append(_Item(body, spans, self._clock() + self.settings.deadline_s, signal))
        self._held_bytes += len(body)
        self._wakeup.set()
        return True

    @property
    def queued_bytes(self) -> int:
        """Bytes held: waiting in the queue or being sent."""
        return self._held_bytes

    def queued(self, signal: str | None = None) -> list[bytes]:
        """The bodies waiting to be sent, oldest first (of `signal`, the own one by default)."""
        return [item.body for item in self._queues[signal or self.settings.signal]]

    def _refused(self, signal: str) -> bool:
        if signal == self.settings.signal:
            return self.unsupported is not None
        until = self._refused_until.get(signal)
        return until is not None and self._clock() < until

    # -- lifecycle --

    async def start(self) -> None:
        if self._tasks:
            return
        scheme = urlsplit(self.settings.url).scheme
        self._transport = _GrpcTransport(self.settings) if scheme.startswith("grpc") else _HttpTransport(self.settings)
        self._tasks = [asyncio.create_task(self._sender(), name=f"span-forwarder-{i}")
                       for i in range(self.settings.senders)]

    async def finish(self, deadline: Deadline) -> None:
        """Sends what is queued (until `deadline`), then drops the rest as `shutdown`."""
        self._closing = True
        self._paused_until = min(self._paused_until, self._clock())  # one more try for what is queued
        self._wakeup.set()
        while (self._waiting() or self._in_flight) and deadline.left() > 0 and self._tasks:
            await asyncio.sleep(0.01)
        await cancelled(*self._tasks)
        self._tasks = []
        for queue in self._queues.values():
            while queue:
                item = queue.popleft()
                self._drop(item.signal, "shutdown", item.spans)
        self._held_bytes = 0

    async def close(self) -> None:
        if self._transport is not None:
            await self._transport.close()
            self._transport = None

    # -- sending --

    def _waiting(self) -> bool:
        return any(self._queues.values())

    def _oldest(self) -> deque[_Item] | None:
        """The queue whose head was queued first (deadlines are queueing time + one constant)."""
        oldest: deque[_Item] | None = None
        for queue in self._queues.values():
            if queue and (oldest is None or queue[0].deadline < oldest[0].deadline):
                oldest = queue
        return oldest

    def _expire(self) -> None:
        """Drops the items at the heads whose deadline passed (each queue is in deadline order)."""
        now = self._clock()
        for queue in self._queues.values():
            while queue and queue[0].deadline <= now:
                item = queue.popleft()
                self._held_bytes -= len(item.body)
                self._drop(item.signal, "expired", item.spans)

    def _take_batch(self) -> list[_Item]:
        """The oldest item and those of its signal queued after it, up to the batch size."""
        self._expire()
        queue = self._oldest()
        batch: list[_Item] = []
        if queue is None:
            return batch
        size = 0
        limit = self.settings.max_batch_bytes
        while queue and (not batch or size + len(queue[0].body) <= limit):
            item = queue.popleft()
            batch.append(item)
            size += len(item.body)
        return batch

    def _give_back(self, batch: list[_Item]) -> None:
        """A batch that could not go returns to the head of its queue, oldest first, still counted."""
        if batch:
            self._queues[batch[0].signal].extendleft(reversed(batch))
        self._wakeup.set()

    def _settle(self, batch: list[_Item]) -> int:
        """The batch left the sender (sent or dropped): its bytes are no longer held."""
        self._held_bytes -= sum(len(item.body) for item in batch)
        return sum(item.spans for item in batch)

    async def _sender(self) -> None:
        while True:
            while not self._waiting() or self._paused_until > self._clock():
                self._wakeup.clear()
                wait = self._paused_until - self._clock() if self._waiting() else None
                # Woken by new data, or when the pause ends (the queue's deadlines are checked then).
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), wait)
                self._expire()
            batch = self._take_batch()
            if not batch:
                continue
            self._in_flight += 1
            try:
                await self._send(batch)
            except asyncio.CancelledError:
                self._give_back(batch)  # finish() drops what is left as `shutdown`
                raise
            finally:
                self._in_flight -= 1

    async def _send(self, batch: list[_Item]) -> None:
        """One attempt. A failure worth retrying puts the batch back and pauses every sender for
        the backoff; the batch's items then wait for the endpoint until their deadline."""
        assert self._transport is not None
        signal = batch[0].signal
        try:
            await self._transport.send(signal, [item.body for item in batch])
        except _Rejected as exc:
            spans = self._settle(batch)
            if exc.unsupported and signal != self.settings.signal:
                self._drop(signal, "unsupported", spans)
                self._refuse(signal, str(exc))
                return
            if exc.unsupported and self._on_unsupported is not None:
                self._drop(signal, "unsupported", spans)
                if self.unsupported is None:
                    self.unsupported = str(exc)
                    self._on_unsupported(str(exc))
                return
            self.failures.failed("rejected", f"{spans} {SIGNALS[signal].items}: {exc}")
            self._failed[signal].inc(spans)
            self._drop(signal, "rejected", spans)
        except _Retryable as exc:
            delay = self.settings.backoff.delay(self._failed_in_a_row, exc.retry_after_s)
            self._failed_in_a_row += 1
            self._paused_until = max(self._paused_until, self._clock() + delay)
            self._give_back(batch)
            self.failures.failed("unreachable", f"{exc}; {self._held_bytes} bytes wait in the queue for at most "
                                                f"{self.settings.deadline_s:g} s")
        else:
            self._failed_in_a_row = 0
            self._ok[signal].inc(self._settle(batch))
            if self._refused_until.pop(signal, None) is not None:
                log.info("%s: %s takes OTLP %s again", self.exporter, self.settings.url, signal)

    def _refuse(self, signal: str, reason: str) -> None:
        """The receiver does not take a carried signal: one WARNING, then what is queued of it and
        what comes for the next few minutes is dropped (counted), and it is tried again."""
        if signal not in self._refused_until:
            log.warning("%s does not take OTLP %s (%s): the app's %s are dropped, counted in "
                        "ctxprec_export_dropped_total{exporter=\"%s\",reason=\"unsupported\"}; tried again every "
                        "%g s (point --forward-to at an OpenTelemetry Collector to keep them)", self.settings.url,
                        signal, reason, signal, CARRIED_EXPORTERS[signal], UNSUPPORTED_RETRY_S)
        self._refused_until[signal] = self._clock() + UNSUPPORTED_RETRY_S
        queue = self._queues[signal]
        while queue:
            item = queue.popleft()
            self._held_bytes -= len(item.body)
            self._drop(signal, "unsupported", item.spans)

    def _drop(self, signal: str, reason: str, spans: int) -> None:
        self._metrics.export_dropped.labels(exporter=self._exporters[signal], reason=reason).inc(spans)
