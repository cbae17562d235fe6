"""Answers of the servers the sidecar sends to (here a result sink's backend, a real local HTTP
server) are read with a bound: one declaring or streaming 64 MB of error text costs at most the
bound, and its status still decides what happens to the items."""
from __future__ import annotations

import contextlib

import pytest
from aiohttp import web
from ctxprec.collector.exporters.http_backend import MAX_ANSWER_BYTES
from ctxprec.collector.exporters.phoenix_annotations import Annotations, PhoenixAnnotations
from ctxprec.collector.exporters.sink_queue import Fate

from tests.helpers.local_http import serving

ANSWER_BYTES = 64 * 1024 * 1024
_BLOCK = b"error " * (1024 * 1024 // 6)


def babbling(status: int, *, declare_length: bool) -> web.Application:
    """Answers every POST with `status` and 64 MB of text, streamed, its length declared or not."""
    async def answer(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(status=status, headers={"Content-Type": "text/plain"})
        if declare_length:
            response.content_length = ANSWER_BYTES
        await response.prepare(request)
        sent = 0
        with contextlib.suppress(ConnectionError):
            while sent < ANSWER_BYTES:
                await response.write(_BLOCK[:ANSWER_BYTES - sent])
                sent += len(_BLOCK)
        return response

    app = web.Application()
    app.router.add_route("POST", "/{tail:.*}", answer)
    return app


@pytest.mark.parametrize("declare_length", [False, True], ids=["streamed", "content-length"])
async def test_a_sink_backend_answer_is_read_up_to_its_bound_and_its_status_decides(declare_length: bool) -> None:
    item = Annotations("0123456789abcdef", {"name": "context_precision", "span_id": "0123456789abcdef"})
    async with serving(babbling(400, declare_length=declare_length)) as url:
        backend = PhoenixAnnotations(url, timeout_s=30.0)
        await backend.start()
        try:
            [result] = await backend.deliver([item])
        finally:
            await backend.close()
    assert result.fate is Fate.DROPPED and result.reason == "rejected"
    assert "answer not read" in result.detail and str(MAX_ANSWER_BYTES) in result.detail
    if declare_length:
        assert f"declared {ANSWER_BYTES} bytes" in result.detail
