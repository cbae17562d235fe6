"""Answers of the servers the sidecar sends to (a result sink's backend, the OTLP forward target)
are read with a bound: a server answering 64 MB of error text (a real local HTTP server) costs at
most the bound, and its status still decides what happens to the items."""
from __future__ import annotations

import contextlib
from typing import AsyncIterator

from aiohttp import web
from ctxprec.collector.exporters.phoenix_annotations import Annotations, PhoenixAnnotations
from ctxprec.collector.exporters.sink_queue import Fate
from ctxprec.collector.exporters.http_backend import MAX_ANSWER_BYTES

ANSWER_BYTES = 64 * 1024 * 1024
_BLOCK = b"error " * (1024 * 1024 // 6)


@contextlib.asynccontextmanager
async def babbling_server(status: int) -> AsyncIterator[str]:
    """Answers every POST with `status` and 64 MB of text, streamed."""
    sent: list[int] = [0]

    async def answer(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(status=status, headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        with contextlib.suppress(ConnectionError):
            while sent[0] < ANSWER_BYTES:
                await response.write(_BLOCK)
                sent[0] += len(_BLOCK)
        return response

    app = web.Application()
    app.router.add_route("POST", "/{tail:.*}", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


async def test_a_sink_backend_answer_is_read_up_to_its_bound_and_its_status_decides() -> None:
    item = Annotations("0123456789abcdef", {"name": "context_precision", "span_id": "0123456789abcdef"})
    async with babbling_server(400) as url:
        backend = PhoenixAnnotations(url, timeout_s=30.0)
        await backend.start()
        try:
            [result] = await backend.deliver([item])
        finally:
            await backend.close()
    assert result.fate is Fate.DROPPED and result.reason == "rejected"
    assert "answer not read" in result.detail and str(MAX_ANSWER_BYTES) in result.detail
