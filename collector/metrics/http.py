"""`/metrics`, `/healthz`, `/readyz` (and the diagnostics under `/diagnostics/`) on one port.

Readiness is a list of named async checks (receivers listening, judge reachable); `/readyz`
answers 200 only when every one passes, and its body says which failed.

Access: the probes are always open (a kubelet sends no token). With a token configured,
`/metrics` needs it unless `metrics.open`, and `/diagnostics/` always does. Without a token,
`/diagnostics/` answers only on a loopback address: it names documents and may quote them, which
is more than a scrape of numbers. `POST /labels` (people's labels in, collector/judging/) keeps the
same rule as `/diagnostics/`: it changes what the sidecar reports.

Connections keep the listeners' limits (collector/listeners.py): slow, idle or surplus clients
are closed, so that they cannot take the port from the probes; no endpoint takes a body, and a
request that declares one over 1 MB is refused before it is read; `POST /labels` reads its body within
the listeners' body timeout and the same 1 MB."""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping, Protocol
from urllib.parse import urlsplit

from aiohttp import web
from ctxprec.collector.components import Deadline
from ctxprec.collector.listener_limits import ListenersConfig
from ctxprec.collector.listener_security import ListenerSecurity, is_loopback
from ctxprec.collector.listeners import BodyRefused, ListenerGuard
from ctxprec.collector.metrics.registry import Metrics
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.openmetrics import exposition as openmetrics

log = logging.getLogger(__name__)

ReadyCheck = Callable[[], Awaitable[bool]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

PROBES = ("/healthz", "/readyz")
DIAGNOSTICS = "/diagnostics"
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="ctxprec"'}
LISTENER = "metrics"
_MAX_BODY_BYTES = 1024 * 1024  # aiohttp's default; only the POST routes (/labels) read a body


class JsonAnswer(Protocol):
    """What a JSON route's handler returns (collector/diagnostics/views.py `JsonResponse`)."""

    status: int
    body: Any


# Called with the request's query parameters; runs on the event loop, so it must not block.
JsonHandler = Callable[[Mapping[str, str]], JsonAnswer]
# Called with a POST request's body and its Content-Type; runs on the event loop.
BodyHandler = Callable[[bytes, str], JsonAnswer]


@dataclass(slots=True)
class NamedCheck:
    name: str
    check: ReadyCheck


class JudgeReachable:
    """Cheap reachability of the judge: the local judge always is; an `api_base` must accept a TCP
    connection (no request, so no tokens spent); a hosted provider without `api_base` is taken as
    reachable (checking it would cost a request). Cached for `ttl_s`."""

    def __init__(self, model: str, api_base: str | None, *, ttl_s: float = 5.0, timeout_s: float = 1.0) -> None:
        self.model = model
        self.api_base = api_base
        self.ttl_s = ttl_s
        self.timeout_s = timeout_s
        self._at = float("-inf")
        self._ok = False

    async def __call__(self) -> bool:
        if self.model == "local" or not self.api_base:
            return True
        now = time.monotonic()
        if now - self._at < self.ttl_s:
            return self._ok
        parts = urlsplit(self.api_base)
        host = parts.hostname or "127.0.0.1"
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), self.timeout_s)
            writer.close()
            self._ok = True
        except (OSError, asyncio.TimeoutError):
            self._ok = False
        self._at = now
        return self._ok


class MetricsServer:
    def __init__(self, metrics: Metrics, *, host: str, port: int, security: ListenerSecurity | None = None,
                 metrics_open: bool = False, limits: ListenersConfig | None = None) -> None:
        self.metrics = metrics
        self.guard = ListenerGuard(LISTENER, limits or ListenersConfig(), metrics, max_body_bytes=_MAX_BODY_BYTES)
        self.host = host
        self.port = port
        self.security = security or ListenerSecurity(name="metrics")
        self.metrics_open = metrics_open
        self.checks: list[NamedCheck] = []
        self.json_routes: dict[str, JsonHandler] = {}
        self.post_routes: dict[str, BodyHandler] = {}  # behind the /diagnostics/ access rule
        self.about: dict[str, str] = {}  # path -> what it answers, for the /diagnostics/ index
        self._runner: web.AppRunner | None = None

    def add_check(self, name: str, check: ReadyCheck) -> None:
        self.checks.append(NamedCheck(name, check))

    def add_json_route(self, path: str, handler: JsonHandler, about: str = "") -> None:
        """GET `path` answers `handler(query parameters)` as JSON (the diagnostics). Before `start`.
        `about` says what it answers in the `/diagnostics/` index."""
        self.json_routes[path] = handler
        self.about[path] = about

    def add_post_route(self, path: str, handler: BodyHandler) -> None:
        """POST `path` answers `handler(body, content type)` as JSON; the route keeps the access
        rule of `/diagnostics/` (a token when one is set; loopback only without one). Before `start`."""
        self.post_routes[path] = handler

    async def _diagnostics_index(self, request: web.Request) -> web.Response:
        """`/diagnostics/`: every diagnostics endpoint with what it answers (behind the same access
        rule as the endpoints themselves)."""
        endpoints = [{"path": path, "about": self.about.get(path, "")} for path in sorted(self.json_routes)
                     if path.startswith(DIAGNOSTICS + "/")]
        return web.json_response({"endpoints": endpoints})

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "", "::") else self.host
        return f"{'https' if self.security.tls else 'http'}://{host}:{self.port}"

    @web.middleware
    async def _access(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        path = request.path
        if path in PROBES:
            return await handler(request)
        header = request.headers.get("Authorization")
        if path == DIAGNOSTICS or path.startswith(DIAGNOSTICS + "/") or path in self.post_routes:
            if self.security.bearer_token is None:
                if not is_loopback(self.host):
                    return web.Response(status=403, text=f"forbidden: {path} on a non-loopback address needs "
                                                         "a metrics token (CTXPREC_METRICS_TOKEN or "
                                                         "--metrics-token-file)\n")
            elif not self.security.token_matches(header):
                return _unauthorized()
        elif not self.metrics_open and not self.security.authorized(header):
            return _unauthorized()
        return await handler(request)

    async def start(self) -> None:
        app = web.Application(client_max_size=_MAX_BODY_BYTES, middlewares=[self.guard.middleware, self._access])
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        for path, handler in self.json_routes.items():
            app.router.add_get(path, _json_route(handler))
        for path, body_handler in self.post_routes.items():
            app.router.add_post(path, self._body_route(body_handler))
        if any(path.startswith(DIAGNOSTICS + "/") for path in self.json_routes):
            for path in (DIAGNOSTICS, DIAGNOSTICS + "/"):
                app.router.add_get(path, self._diagnostics_index)
        self._runner = web.AppRunner(app, access_log=None, **self.guard.runner_options())
        await self._runner.setup()
        self.port = await self.guard.serve(self._runner, self.host, self.port, self.security.server_ssl_context())

    def _body_route(self, handler: BodyHandler) -> Callable[[web.Request], Awaitable[web.Response]]:
        return _body_route_of(self.guard, handler)

    async def finish(self, deadline: Deadline) -> None:
        return None  # it answers until the end: scrapes and probes during shutdown see it stopping

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _metrics(self, request: web.Request) -> web.Response:
        # Exemplars (trace ids on the precision histogram) only exist in the OpenMetrics format,
        # which Prometheus asks for in its Accept header; plain clients get the text format.
        if "application/openmetrics-text" in request.headers.get("Accept", ""):
            body = openmetrics.generate_latest(self.metrics.registry)
            return web.Response(body=body, headers={"Content-Type": openmetrics.CONTENT_TYPE_LATEST})
        body = generate_latest(self.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, request: web.Request) -> web.Response:
        failing: list[str] = []
        for named in self.checks:
            try:
                ok = await named.check()
            except Exception:
                log.exception("readiness check %s raised", named.name)
                ok = False
            if not ok:
                failing.append(named.name)
        if failing:
            return web.Response(status=503, text="not ready: " + ", ".join(failing) + "\n")
        return web.Response(text="ready\n")


def _body_route_of(guard: ListenerGuard, handler: BodyHandler) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def answer(request: web.Request) -> web.Response:
        try:
            body = await guard.read_body(request)
        except BodyRefused as exc:
            return web.json_response({"error": exc.message}, status=exc.status)
        reply = handler(body, request.headers.get("Content-Type", ""))
        return web.json_response(reply.body, status=reply.status)

    return answer


def _json_route(handler: JsonHandler) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def answer(request: web.Request) -> web.Response:
        reply = handler(request.query)
        return web.json_response(reply.body, status=reply.status)

    return answer


def _unauthorized() -> web.Response:
    # What the client sent is not repeated: a wrong token may be another system's real one.
    return web.Response(status=401, text="unauthorized: send 'Authorization: Bearer <metrics token>'\n",
                        headers=_CHALLENGE)
