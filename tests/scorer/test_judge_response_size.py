"""A judge that streams far more than any verdict list (the stub judge answering 200 MB over real
HTTP) is cut off at `max_response_mb`: the call fails as `judge_response_too_large`, and the
process's memory never holds the answer. (A declared Content-Length over the bound is refused
before reading: tests/collector/test_bounded_answers.py.)"""
from __future__ import annotations

import asyncio

import pytest
from ctxprec.collector.memory import anonymous_rss_bytes
from ctxprec.scorer.config import JudgeConfig
from ctxprec.scorer.judge.chat import ChatMessage, JudgeResponseTooLarge, RequestEvent
from ctxprec.scorer.judge.factory import make_chat_client


async def test_a_200_mb_answer_fails_at_the_limit_without_being_held(make_stub_judge) -> None:
    stub = await make_stub_judge(huge_answer_mb=200)
    events: list[RequestEvent] = []
    peak = start = anonymous_rss_bytes()
    done = asyncio.Event()

    async def watch() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, anonymous_rss_bytes())
            await asyncio.sleep(0.005)

    config = JudgeConfig(model="openai/huge", api_base=stub.url, api_key="k", max_retries=1,
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
