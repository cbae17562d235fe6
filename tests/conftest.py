"""Shared fixtures: the stub judge, in-process on 127.0.0.1 and a free port, always stopped."""
from __future__ import annotations

from typing import Any, AsyncIterator, Awaitable, Callable

import pytest

from ctxprec.collector.stub_judge import StubJudge, StubSettings

# One real Arize Phoenix server per test session, for the modules that ask for it.
pytest_plugins = ["tests.helpers.phoenix_fixture"]


@pytest.fixture
async def stub_judge() -> AsyncIterator[StubJudge]:
    stub = StubJudge(StubSettings())
    await stub.start(host="127.0.0.1", port=0)
    try:
        yield stub
    finally:
        await stub.stop()


@pytest.fixture
async def make_stub_judge() -> AsyncIterator[Callable[..., Awaitable[StubJudge]]]:
    """`stub = await make_stub_judge(latency_ms=50, error_rate=0.2, seed=1)`."""
    started: list[StubJudge] = []

    async def make(**settings: Any) -> StubJudge:
        stub = StubJudge(StubSettings(**settings))
        await stub.start(host="127.0.0.1", port=0)
        started.append(stub)
        return stub

    try:
        yield make
    finally:
        for stub in started:
            await stub.stop()
