"""Shared fixtures: the stub judge and a real OTLP receiver (`capture`, tests/helpers/otlp_capture.py),
in-process on 127.0.0.1 and free ports, always stopped.

Tiers: a test that starts brokers, servers, apps or other processes, or runs for many seconds, is
marked `slow` where it is written (`pytestmark = pytest.mark.slow` for a whole module, or
`@pytest.mark.slow` on one test). `make test` runs the slow tier after the rest, one test at a
time; `make test-fast` leaves it out."""
from __future__ import annotations

from typing import Any, AsyncIterator, Awaitable, Callable

import pytest

from ctxprec.collector.stub_judge import StubJudge, StubSettings

from tests.helpers.otlp_capture import OtlpCapture

# One real Arize Phoenix server per test session, for the modules that ask for it.
pytest_plugins = ["tests.helpers.phoenix_fixture"]

# Every test in these folders runs against real brokers, servers or apps.
ALWAYS_SLOW = ("tests/kafka/", "tests/chaos/", "tests/realtraffic/")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unmarked = [item.nodeid for item in items
                if item.nodeid.startswith(ALWAYS_SLOW) and item.get_closest_marker("slow") is None]
    if unmarked:
        raise pytest.UsageError(f"mark these slow (pytestmark = pytest.mark.slow): {', '.join(unmarked[:5])}")


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


@pytest.fixture
async def capture() -> AsyncIterator[OtlpCapture]:
    cap = await OtlpCapture().start()
    try:
        yield cap
    finally:
        await cap.stop()
