"""Scenario: the judge is an https:// address whose server accepts TCP and never answers the TLS
hello (a hung proxy, a port forward to nowhere). 40 retrievals reach a serving sidecar (judge
timeout 1 s, 4 retries). Every one is decided `failed` within the judge timeout x (retries + 1)
(plus the queue wait: here one round of timeouts), as `timeout` where its attempt timed out and
`circuit_open` where the breaker, opened by consecutive timeouts across calls, refused it; the
judge saw about one timeout per retrieval in flight, not ten calls of five attempts each (before:
0 of 40 decided in 120 s)."""
from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import AsyncIterator

import pytest

from tests.chaos.scrape_http import scrape_metrics, total
from tests.chaos.test_judge_chaos import TYPED_ERRORS
from tests.collector.rag_app import RagApp, running, serve_config
from tests.helpers.otlp_capture import OtlpCapture

pytestmark = pytest.mark.slow

RETRIEVALS = 40
JUDGE_TIMEOUT_S = 1.0
MAX_RETRIES = 4
BREAKER_THRESHOLD = 10
CONCURRENCY = 16


@pytest.fixture
async def silent_tls_port() -> AsyncIterator[int]:
    """A port that accepts connections and never sends a byte (the TLS hello goes unanswered)."""
    held: list[asyncio.StreamWriter] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        for writer in held:
            writer.transport.abort()
        server.close()
        await server.wait_closed()


async def test_a_judge_that_never_answers_the_tls_hello_is_given_up_on_in_bounded_time(
        silent_tls_port: int, tmp_path: Path) -> None:
    capture = await OtlpCapture().start()
    config = serve_config("--judge-model", "openai/judge",
                          "--judge-api-base", f"https://127.0.0.1:{silent_tls_port}/v1", "--judge-api-key", "k",
                          "--judge-timeout", str(JUDGE_TIMEOUT_S),
                          "--judge-max-retries", str(MAX_RETRIES), "--judge-concurrency", str(CONCURRENCY),
                          "--workers", "16", "--forward-to", capture.http_url, "--sample-rate", "1",
                          "--judge-canary-mode", "off")  # the scores' requests alone are counted
    try:
        async with running(config) as pipeline:
            url = pipeline.metrics_url
            assert url is not None
            app = RagApp(protocol="grpc", port=pipeline.otlp_grpc_port)
            spans = [app.openinference(f"question {i}", ["a passage"], "an answer").retriever_span_id
                     for i in range(RETRIEVALS)]
            await app.flush()
            sent = time.monotonic()
            bound = JUDGE_TIMEOUT_S * (MAX_RETRIES + 1) + JUDGE_TIMEOUT_S  # one round of the queue ahead
            while total(await scrape_metrics(url), "ctxprec_samples_total", decision="failed") < RETRIEVALS:
                assert time.monotonic() - sent < bound + 5, "retrievals still undecided"
                await asyncio.sleep(0.1)
            decided_in = time.monotonic() - sent
            await app.close()
            metrics = await scrape_metrics(url)
            await capture.wait_for_spans(3 * RETRIEVALS, timeout=10)
    finally:
        await capture.stop()
    assert decided_in < bound + 1.5, decided_in  # assembly's quiet period and the scrape's pace on top
    assert total(metrics, "ctxprec_samples_total") == RETRIEVALS
    timeouts = total(metrics, "ctxprec_judge_requests_total", outcome="timeout")
    # The first round (as many as are let in flight) times out together, and opens the breaker.
    assert BREAKER_THRESHOLD <= timeouts <= CONCURRENCY + 2, timeouts
    assert total(metrics, "ctxprec_judge_requests_total", outcome="circuit_open") >= RETRIEVALS - timeouts
    kinds = [str(capture.span(s).attributes["error.type"]) for s in spans]  # type: ignore[union-attr]
    assert set(kinds) <= TYPED_ERRORS and set(kinds) == {"timeout", "circuit_open"}, kinds
