"""A recording HTTP proxy for a judge: forwards every request to the judge unchanged and keeps the
request and answer bodies, so that a test can compute from a judge's own answers what it said."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web


@dataclass
class RecordingProxy:
    target: str  # the judge's base URL, ending in /v1
    exchanges: list[tuple[dict[str, Any], int, dict[str, Any] | None]] = field(default_factory=list)
    url: str = ""
    _runner: web.AppRunner | None = None
    _session: aiohttp.ClientSession | None = None

    async def start(self) -> "RecordingProxy":
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600))
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/v1"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _forward(self, request: web.Request) -> web.Response:
        assert self._session is not None
        body = await request.read()
        base = self.target.rsplit("/v1", 1)[0]
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("authorization", "content-type")}
        async with self._session.request(request.method, base + request.path, data=body, headers=headers) as reply:
            answer = await reply.read()
            status, content_type = reply.status, reply.headers.get("Content-Type", "application/json")
        if request.method == "POST" and request.path.endswith("/chat/completions"):
            try:
                parsed = json.loads(answer)
            except ValueError:
                parsed = None
            self.exchanges.append((json.loads(body), status, parsed))
        return web.Response(body=answer, status=status, content_type=content_type.split(";")[0])
