"""A judge that answers far more than any verdict list (200 MB, streamed by a real local HTTP
server, with and without a Content-Length) is cut off at `max_response_mb`: the call fails as
`judge_response_too_large`, and the process's memory never holds the answer."""
from __future__ import annotations

import asyncio
import contextlib
from typing import AsyncIterator

import pytest
from aiohttp import web
from ctxprec.collector.memory import anonymous_rss_bytes
from ctxprec.scorer.config import JudgeConfig
from ctxprec.scorer.judge.chat import ChatMessage, JudgeResponseTooLarge, RequestEvent
from ctxprec.scorer.judge.factory import make_chat_client

ANSWER_BYTES = 200 * 1024 * 1024
_BLOCK = b'{"choices": [' + b" " * (1024 * 1024 - 13)


@contextlib.asynccontextmanager
async def huge_judge(*, declare_length: bool) -> AsyncIterator[str]:
    """An OpenAI-style endpoint whose answer is 200 MB of one unfinished JSON document."""
    async def answer(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        if declare_length:
            response.content_length = ANSWER_BYTES
        await response.prepare(request)
        with contextlib.suppress(ConnectionError):
            for _ in range(ANSWER_BYTES // len(_BLOCK)):
                await response.write(_BLOCK)
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/v1"  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("declare_length", [False, True], ids=["streamed", "content-length"])
async def test_a_200_mb_answer_fails_at_the_limit_without_being_held(declare_length: bool) -> None:
    events: list[RequestEvent] = []
    peak = start = anonymous_rss_bytes()
    done = asyncio.Event()

    async def watch() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, anonymous_rss_bytes())
            await asyncio.sleep(0.005)

    async with huge_judge(declare_length=declare_length) as url:
        config = JudgeConfig(model="openai/huge", api_base=url, api_key="k", max_retries=1,
                             structured_output="json_object", max_response_mb=1.0, timeout_s=60.0)
        client = make_chat_client(config, observer=events.append)
        watcher = asyncio.create_task(watch())
        try:
            with pytest.raises(JudgeResponseTooLarge) as failure:
                await client.complete([ChatMessage("user", "judge this")])
        finally:
            done.set()
            await watcher
            await client.aclose()
    assert failure.value.kind == "judge_response_too_large"
    assert "limit of 1048576 bytes" in str(failure.value)
    assert failure.value.attempts == 2  # tried again like any unusable answer, each cut off at the limit
    assert [e.outcome for e in events] == ["response_too_large"] * 2
    assert peak < 2 * start, (start, peak)
