"""Shared fixtures: the stub judge, in-process on 127.0.0.1 and a free port, always stopped."""
from __future__ import annotations

from typing import Any, AsyncIterator, Awaitable, Callable

import pytest

from ctxprec.collector.stub_judge import StubJudge, StubSettings

# One real Arize Phoenix server per test session, for the modules that ask for it.
pytest_plugins = ["tests.helpers.phoenix_fixture"]

# End-to-end tests that start brokers, servers or apps in other processes, and the property tests
# that run for many seconds: `make test` runs them after the rest; `make test-fast` leaves them out.
SLOW = ("tests/kafka/", "tests/chaos/", "tests/realtraffic/", "tests/deploy/test_live_prometheus.py",
        "tests/deploy/test_demo.py", "tests/deploy/test_synthetic_app.py", "tests/trust/test_fuzz_",
        # A real redis-server per test.
        "tests/scorer/test_shared_cache.py::test_a_",
        "tests/docs/test_readme_dry_run.py", "tests/collector/test_listener_security.py::test_serve_with_no",
        "tests/scorer/test_prices.py", "tests/collector/test_engine_process.py",
        "tests/scorer/test_judge_client.py::test_cost_of_a_known_model_matches_litellm_cost_map",
        # Whole sidecars, litellm imports and promtool: seconds each, out of the inner loop.
        "tests/diagnostics/test_serve_diagnostics.py", "tests/scorer/test_judge_client.py::test_api_key_never_in",
        "tests/deploy/test_prometheus.py::test_promtool_unit_tests_pass",
        "tests/collector/test_langfuse_sink.py::test_the_sink_never_holds_up_scoring",
        # A real model server (llama-cpp-python, built by make llama-server).
        "tests/llm_judge/test_real_server.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith(SLOW):  # node ids are paths from the root, then ::test
            item.add_marker(pytest.mark.slow)


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
