"""Connection limits of the sidecar's HTTP listeners (the OTLP/HTTP receiver and the metrics
endpoint), built once for both, and the process's file descriptors that every listener shares.

aiohttp has no timeout for a request's headers or body and takes any number of connections, so a
few hundred slow or idle clients could hold every file descriptor (and /healthz with them). Each
HTTP listener therefore serves through a `ListenerGuard` (settings: listener_limits.py):

- its protocol factory wraps aiohttp's, one `_Connection` per client: with `max_connections`
  open, a new one closes the oldest that has never completed a request (silent, or still
  dribbling its first headers), or is itself closed at once when there is none (`too_many`): a
  flood of connections that never send a request cannot keep a probe out, and cannot push out
  a client that is using its connection;
  a request's headers must be in within `header_timeout_s` of its first byte (`timeout`); a
  connection with no request is closed after `idle_timeout_s`, or `header_timeout_s` when it
  never sent anything (`idle`);
- its middleware stops the header clock once aiohttp has the headers and starts the idle clock
  when the handler is done; a Content-Length over the listener's body limit gets 413 before a
  byte of the body is read (`too_large`);
- `read_body` reads a body within `body_timeout_s` (408, `timeout`) and the limit (413).
A body refused as too large is answered (413, `Connection: close`) and then read and dropped, up to
DRAIN_FACTOR x the limit within the body timeout, so that the client is not reset while it sends;
aiohttp's own lingering read of any other body nobody read is off: such a connection is closed
after its answer instead of being drained.

Each refusal is counted in `ctxprec_listener_connections_refused_total{listener,reason}` and
logged through a FailureLog (a WARNING, then a count a minute while it goes on; `idle` closes are
ordinary and only counted). Running out of file descriptors shows up as asyncio's
"socket.accept() out of system resource", reported through the event loop's exception handler
with a traceback once a second per listener: `_AcceptFailures` takes those of guarded listeners
and counts them as `no_file_descriptors` instead. `raise_open_files_limit` lifts the soft limit
to the hard one at start, as Go's runtime does, so that the limit is the system's, not a shell's
default of 1024.
"""
from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import resource
import socket
import ssl
import weakref
from typing import Any, Awaitable, Callable

from aiohttp import web
from ctxprec.collector.failure_log import FailureLog
from ctxprec.collector.listener_limits import ListenersConfig
from ctxprec.collector.metrics.registry import Metrics

log = logging.getLogger(__name__)

REASONS = ("timeout", "idle", "too_many", "too_large", "no_file_descriptors")
_OUT_OF_RESOURCES = "socket.accept() out of system resource"  # asyncio's message (selector_events.py)
# File descriptors the sidecar needs beside its listeners' connections: the judge's pool, the
# forwarder, Kafka, log and data files, the scoring process's pipes.
FD_RESERVE = 128
# After refusing a body as too large, at most this many times the limit is read and dropped.
DRAIN_FACTOR = 4
_DRAIN = web.RequestKey("ctxprec_drain_body", bool)  # the refused body must be drained after the answer

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# Builds the answer to a refused request in the listener's own format (status, message).
Refusal = Callable[[web.Request, int, str], web.StreamResponse]


class AddressInUse(OSError):
    """A listener's address is taken: another process listens there."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__(errno.EADDRINUSE, f"{host}:{port} is already in use")
        self.host = host
        self.port = port


def check_free(host: str, port: int) -> None:
    """Raises AddressInUse when a listener could not bind `host:port`: bound as the listeners
    bind (SO_REUSEADDR, never SO_REUSEPORT, which would let a second process share the port and
    take half of its traffic). Port 0 is always free."""
    if port == 0:
        return
    try:
        addresses = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return  # the listener itself reports an address it cannot resolve
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise AddressInUse(host, port) from None
                return  # another problem (no IPv6 here, say): the listener itself reports it


class BodyRefused(Exception):
    """A request body that did not arrive in time (408) or is over the limit (413); already counted."""

    def __init__(self, status: int, message: str, reason: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.reason = reason


class ListenerGuard:
    def __init__(self, name: str, limits: ListenersConfig, metrics: Metrics, *, max_body_bytes: int,
                 refusal: Refusal | None = None) -> None:
        """`name` labels the counter (`otlp_http`, `metrics`); `refusal` answers a refused request
        in the listener's format (plain text by default)."""
        self.name = name
        self.limits = limits
        self.max_body_bytes = max_body_bytes
        self._refusal = refusal or _plain_refusal
        # Every reason's series exists at 0 from the start.
        self._counters = {reason: metrics.listener_refused.labels(listener=name, reason=reason) for reason in REASONS}
        self.failures = FailureLog(f"listener {name}", log)
        self._open: dict[asyncio.BaseTransport, _Connection] = {}

    @property
    def open_connections(self) -> int:
        return len(self._open)

    def runner_options(self) -> dict[str, Any]:
        """AppRunner keyword arguments: aiohttp's own idle close stays behind ours as a backstop,
        and an unread body is not drained (its connection closes after the answer)."""
        return {"keepalive_timeout": self.limits.idle_timeout_s + self.limits.header_timeout_s,
                "lingering_time": 0}

    async def serve(self, runner: web.AppRunner, host: str, port: int,
                    ssl_context: ssl.SSLContext | None = None) -> int:
        """Listens with `runner` (set up with `runner_options()`); returns the bound port."""
        site = _GuardedSite(runner, self, host, port, ssl_context)
        await site.start()
        return site.port

    def refused(self, reason: str, detail: str = "") -> None:
        self._counters[reason].inc()
        if reason != "idle":
            self.failures.failed(f"closed connections ({reason})", detail)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        connection = self._open.get(request.transport) if request.transport is not None else None
        if connection is not None:
            connection.request_started()
        try:
            length = request.content_length
            if length is not None and length > self.max_body_bytes:
                self.refused("too_large", f"Content-Length {length} over {self.max_body_bytes}")
                return await self._answer_then_drain(request, self._refusal(
                    request, 413, f"request body of {length} bytes is over the limit of {self.max_body_bytes} bytes"))
            response = await handler(request)
            if request.get(_DRAIN):
                return await self._answer_then_drain(request, response)
            return response
        finally:
            if connection is not None:
                connection.request_done()

    async def _answer_then_drain(self, request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
        """Answers a body refused as too large with `Connection: close`, ends the answer (FIN),
        then reads and drops what the client still sends, within the body timeout and
        DRAIN_FACTOR x the limit, before the connection closes. Closed with the body still
        arriving, the connection was reset (the kernel's answer to unread data) while the client
        was sending: a client that cannot read the 413 then takes the reset for a network error
        and sends the same body again. As the OpenTelemetry Collector (Go's server) and nginx
        linger, so does this."""
        response.force_close()
        await response.prepare(request)
        await response.write_eof()
        transport = request.transport
        if transport is not None and transport.can_write_eof():
            transport.write_eof()
        drained, cap = 0, self.max_body_bytes * DRAIN_FACTOR
        with contextlib.suppress(Exception):  # the client went, the body was broken: close all the same
            async with asyncio.timeout(self.limits.body_timeout_s):
                while drained < cap:
                    chunk = await request.content.readany()
                    if not chunk:
                        break
                    drained += len(chunk)
        return response

    async def read_body(self, request: web.Request) -> bytes:
        """The request's body, within `body_timeout_s` and the body limit (the app's
        client_max_size, which must be `max_body_bytes`); else BodyRefused."""
        timeout_s = self.limits.body_timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                return await request.read()
        except TimeoutError:
            self.refused("timeout", f"request body not in within {timeout_s:g} s")
            raise BodyRefused(408, f"request body not received within {timeout_s:g} s", "timeout") from None
        except web.HTTPRequestEntityTooLarge:
            self.refused("too_large", f"body over {self.max_body_bytes}")
            request[_DRAIN] = True  # the rest of it is still coming
            raise BodyRefused(413, f"request body is over the limit of {self.max_body_bytes} bytes",
                              "too_large") from None


class _Connection(asyncio.Protocol):
    """One client connection: between the event loop's transport and aiohttp's handler, keeping
    the clocks (see the module docstring). `_waiting` is True while no request is under way."""

    __slots__ = ("_guard", "_make", "_inner", "_transport", "_timer", "_waiting", "_served")

    def __init__(self, guard: ListenerGuard, make: Callable[[], asyncio.Protocol]) -> None:
        self._guard = guard
        self._make = make
        self._inner: asyncio.Protocol | None = None
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._waiting = True
        self._served = False  # a request of its own completed: a client, not a squatter

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        guard = self._guard
        if len(guard._open) >= guard.limits.max_connections:
            # The oldest connection that never completed a request makes room.
            spare = next((c for c in guard._open.values() if not c._served and c._timer is not None), None)
            guard.refused("too_many", f"{guard.limits.max_connections} connections open")
            if spare is None:
                transport.abort()
                return
            spare._close()
        self._transport = transport  # type: ignore[assignment]
        guard._open[transport] = self
        self._inner = self._make()
        self._arm(guard.limits.header_timeout_s)  # a new connection is there to send a request now
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._inner is None:
            return
        if self._waiting:  # a request's first bytes: its headers must follow in time
            self._waiting = False
            self._arm(self._guard.limits.header_timeout_s)
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._inner is not None else None

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        inner, self._inner = self._inner, None
        if inner is None:
            return
        self._guard._open.pop(self._transport, None)  # type: ignore[arg-type]
        inner.connection_lost(exc)

    # -- from the middleware --

    def request_started(self) -> None:
        """The headers are in: the handler (and `read_body`) keep their own time."""
        self._waiting = False
        self._disarm()

    def request_done(self) -> None:
        if self._inner is None:  # the handler ended because the connection was lost
            return
        self._waiting = True
        self._served = True
        self._arm(self._guard.limits.idle_timeout_s)

    # -- the clock --

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._timer = asyncio.get_running_loop().call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        if self._transport is None or self._inner is None:
            return
        limits = self._guard.limits
        if self._waiting:
            self._guard.refused("idle")
        else:
            self._guard.refused("timeout", f"request headers not in within {limits.header_timeout_s:g} s")
        self._close()

    def _close(self) -> None:
        # abort, not close: a client that does not read would keep a closing connection open.
        # It leaves the open connections now, not when the loop reports it lost.
        self._disarm()
        self._guard._open.pop(self._transport, None)  # type: ignore[arg-type]
        if self._transport is not None:
            self._transport.abort()


class _GuardedSite(web.BaseSite):
    """aiohttp's TCP site with the guard's protocol factory around the runner's."""

    __slots__ = ("_guard", "_host", "_port", "_bound_port")

    def __init__(self, runner: web.AppRunner, guard: ListenerGuard, host: str, port: int,
                 ssl_context: ssl.SSLContext | None) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self._guard = guard
        self._host = host
        self._port = port
        self._bound_port = port

    @property
    def name(self) -> str:
        return f"{'https' if self._ssl_context else 'http'}://{self._host}:{self.port}"

    @property
    def port(self) -> int:
        return self._bound_port

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None
        guard = self._guard
        try:
            self._server = await loop.create_server(
                lambda: _Connection(guard, server), self._host, self._port, ssl=self._ssl_context,
                backlog=self._backlog, reuse_port=False,
                ssl_handshake_timeout=guard.limits.header_timeout_s if self._ssl_context else None)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise AddressInUse(self._host, self._port) from None
            raise
        sockets = self._server.sockets
        if sockets:
            self._bound_port = sockets[0].getsockname()[1]
        _AcceptFailures.watch(loop, guard, [s.fileno() for s in sockets])

    async def stop(self) -> None:
        sockets = self._server.sockets if self._server is not None else ()
        _AcceptFailures.forget(asyncio.get_running_loop(), [s.fileno() for s in sockets])
        await super().stop()


class _AcceptFailures:
    """The event loop's exception handler while guarded listeners run: their failed accepts for
    want of file descriptors are counted (`no_file_descriptors`), everything else goes to the
    handler that was there before."""

    _of_loop: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _AcceptFailures]" = weakref.WeakKeyDictionary()

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.previous = loop.get_exception_handler()
        self.guards: dict[int, ListenerGuard] = {}  # listening socket's fd -> its listener

    @classmethod
    def watch(cls, loop: asyncio.AbstractEventLoop, guard: ListenerGuard, fds: list[int]) -> None:
        watcher = cls._of_loop.get(loop)
        if watcher is None:
            watcher = cls._of_loop[loop] = cls(loop)
            loop.set_exception_handler(watcher.handle)
        for fd in fds:
            watcher.guards[fd] = guard

    @classmethod
    def forget(cls, loop: asyncio.AbstractEventLoop, fds: list[int]) -> None:
        watcher = cls._of_loop.get(loop)
        if watcher is None:
            return
        for fd in fds:
            watcher.guards.pop(fd, None)
        if not watcher.guards:
            del cls._of_loop[loop]
            if loop.get_exception_handler() == watcher.handle:
                loop.set_exception_handler(watcher.previous)

    def handle(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") == _OUT_OF_RESOURCES:
            sock = context.get("socket")
            guard = self.guards.get(sock.fileno()) if sock is not None else None
            if guard is not None:
                guard.refused("no_file_descriptors", f"{context.get('exception')}; accepting again in a second")
                return
        if self.previous is not None:
            self.previous(loop, context)
        else:
            loop.default_exception_handler(context)


def _plain_refusal(request: web.Request, status: int, message: str) -> web.StreamResponse:
    return web.Response(status=status, text=message + "\n")


def raise_open_files_limit() -> tuple[int, int]:
    """Lifts the soft limit on open files to the hard one (as Go's runtime does at start), so the
    listeners' caps, not a login shell's default of 1024, decide when connections are refused.
    Returns the soft limit before and after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        return soft, soft
    return soft, target


def descriptor_shortfall(listeners: int, limits: ListenersConfig) -> str | None:
    """A warning when the listeners' connection caps could use up the open-file limit (then a
    flood ends in `no_file_descriptors`, /healthz unanswered, instead of `too_many`)."""
    if listeners == 0:
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = listeners * limits.max_connections + FD_RESERVE
    if soft == resource.RLIM_INFINITY or needed <= soft:
        return None
    return (f"the open-file limit is {soft}, and {listeners} listeners of up to {limits.max_connections} "
            f"connections each (--listener-max-connections) could need {needed} with what the sidecar itself "
            f"uses: raise the limit (ulimit -n, or the container's nofile) or lower the cap to "
            f"{max(1, (soft - FD_RESERVE) // listeners)}")
