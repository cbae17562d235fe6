"""Scenario 1: the judge gets slow (10 s per answer against a 0.5 s timeout), then fails half of
its requests, then answers garbage (malformed JSON, wrong verdict counts), then recovers.

Through all of it: every sampled retrieval ends in exactly one decision (the sum of
ctxprec_samples_total over decisions equals the retrievals sent), a failure carries a typed
`error.type` and no score, every score is the one the stub's rule implies (contexts are pinned
with [relevant]/[irrelevant] markers), the circuit breaker opens and closes again (the
`circuit_open` outcome moves, then stops moving), and after recovery new traffic is scored.
Metrics are read over HTTP from /metrics; results from a real OTLP receiver downstream."""
from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable

import pytest

from ctxprec.collector.stub_judge import StubJudge
from tests.chaos.scrape_http import healthy, scrape_metrics, total
from tests.collector.rag_app import RagApp, running, serve_config
from tests.collector.test_judge_faults import expected_map
from tests.helpers.otlp_capture import OtlpCapture

pytestmark = pytest.mark.slow

MakeStub = Callable[..., Awaitable[StubJudge]]
BREAKER_THRESHOLD = 3
BREAKER_COOLDOWN_S = 1.5
JUDGE_TIMEOUT_S = 0.5
# What a failed sample may say: each is a JudgeError kind of the real client.
TYPED_ERRORS = {"timeout", "circuit_open", "server_error", "bad_response"}


@dataclass
class Sent:
    phase: str
    span_id: str
    pattern: list[bool]


class Traffic:
    """Emits RAG traces whose verdicts the stub's markers pin, and remembers what it sent."""

    def __init__(self, app: RagApp) -> None:
        self.app = app
        self.sent: list[Sent] = []
        self.rng = random.Random(5)

    async def send(self, phase: str, n: int, gap_s: float = 0.0) -> list[Sent]:
        """`gap_s` spreads the traces out, so that a breaker that opens lets later ones probe."""
        batch = []
        for _ in range(n):
            i = len(self.sent)
            pattern = [self.rng.random() < 0.5 for _ in range(self.rng.randint(1, 4))]
            docs = [f"{'[relevant]' if rel else '[irrelevant]'} passage {i}-{j}" for j, rel in enumerate(pattern)]
            emitted = self.app.openinference(f"question {i}", docs, "an answer")
            item = Sent(phase, emitted.retriever_span_id, pattern)
            self.sent.append(item)
            batch.append(item)
            if gap_s:
                await asyncio.sleep(gap_s)
        await self.app.flush()
        return batch


async def wait_decided(metrics_url: str, n: int, capture: OtlpCapture, span_ids: list[str],
                       timeout: float = 30.0) -> None:
    """Until the sidecar counted `n` decisions and every span in `span_ids` is downstream."""
    deadline = time.monotonic() + timeout
    while True:
        decided = total(await scrape_metrics(metrics_url), "ctxprec_samples_total")
        if decided >= n and all(capture.span(s) is not None for s in span_ids):
            return
        assert time.monotonic() < deadline, f"{decided} of {n} decided within {timeout}s"
        await asyncio.sleep(0.1)


def outcome(capture: OtlpCapture, item: Sent) -> str:
    """'evaluated' or the error type, after checking the span went out once and no score was made up."""
    copies = [s for s in capture.spans if s.span_id == item.span_id]
    assert len(copies) == 1, f"retrieval span {item.span_id} went downstream {len(copies)} times"
    attrs = copies[0].attributes
    if "error.type" in attrs:
        assert "gen_ai.evaluation.score.value" not in attrs and "evaluations.0.evaluation.score" not in attrs
        assert attrs["error.type"] in TYPED_ERRORS, attrs["error.type"]
        return str(attrs["error.type"])
    assert attrs["gen_ai.evaluation.score.value"] == expected_map(item.pattern), (item, attrs)
    return "evaluated"


async def test_judge_slow_failing_garbage_then_recovered(make_stub_judge: MakeStub, tmp_path: Path) -> None:
    stub = await make_stub_judge(seed=11)
    capture = await OtlpCapture().start()
    config_file = tmp_path / "ctxprec.yaml"
    config_file.write_text(f"judge:\n  breaker_threshold: {BREAKER_THRESHOLD}\n"
                           f"  breaker_cooldown_s: {BREAKER_COOLDOWN_S}\n")
    config = serve_config("--config", str(config_file), "--judge-model", "openai/stub", "--judge-api-base", stub.url,
                          "--judge-api-key", "k", "--judge-timeout", str(JUDGE_TIMEOUT_S),
                          "--judge-max-retries", "0", "--judge-cache-size", "0",
                          "--forward-to", capture.http_url, "--workers", "4",
                          "--judge-canary-mode", "off")  # the scores' requests alone are counted
    try:
        async with running(config) as pipeline:
            url = pipeline.metrics_url
            assert url is not None
            app = RagApp(protocol="grpc", port=pipeline.otlp_grpc_port)
            traffic = Traffic(app)

            async def phase(name: str, n: int, gap_s: float = 0.0) -> list[str]:
                batch = await traffic.send(name, n, gap_s)
                await wait_decided(url, len(traffic.sent), capture, [b.span_id for b in batch])
                return [outcome(capture, b) for b in batch]

            # 1. Slow: every answer takes 10 s, the client gives up at 0.5 s. Three timeouts open
            # the breaker (the limit keeps one request in flight after the first timeout, so the
            # fourth waits for its slot and finds the breaker open); what comes within the
            # cooldown fails fast without reaching the judge.
            stub.configure(latency_ms=10_000)
            slow = await phase("slow", 4)
            assert sorted(slow) == ["circuit_open"] + ["timeout"] * BREAKER_THRESHOLD, slow
            requests_before = stub.stats.requests
            fast_fail = await phase("slow, breaker open", 4)
            assert set(fast_fail) == {"circuit_open"}, fast_fail
            assert stub.stats.requests == requests_before, "an open breaker must not call the judge"
            m = await scrape_metrics(url)
            assert total(m, "ctxprec_judge_requests_total", outcome="timeout") >= BREAKER_THRESHOLD
            assert total(m, "ctxprec_judge_requests_total", outcome="circuit_open") >= 4

            # 2. Half the requests fail with HTTP 500.
            stub.configure(latency_ms=0, error_rate=0.5, fault_kinds="server_error")
            await asyncio.sleep(BREAKER_COOLDOWN_S)
            # A failed half-open probe reopens the breaker for a cooldown, which can swallow a whole
            # wave; waves go on (bounded) until both a score and a failure were seen.
            failing: list[str] = []
            for _ in range(8):
                failing += await phase("failing", 6, gap_s=0.2)
                if "evaluated" in failing and set(failing) - {"evaluated"}:
                    break
            assert "evaluated" in failing and set(failing) - {"evaluated"}, failing
            assert set(failing) <= {"evaluated", "server_error", "circuit_open"}, failing

            # 3. Garbage: answers that are not JSON, or miss/duplicate a verdict (HTTP 200 both).
            stub.configure(error_rate=0.6, fault_kinds="malformed,wrong_count")
            await asyncio.sleep(BREAKER_COOLDOWN_S)
            garbage = await phase("garbage", 24, gap_s=0.1)
            faults = stub.stats.faults
            assert faults.get("malformed", 0) > 0 and faults.get("wrong_count", 0) > 0, faults
            assert "bad_response" in garbage, garbage
            assert set(garbage) <= {"evaluated", "bad_response", "circuit_open"}, garbage

            # 4. Recovered: the breaker is closed (no more circuit_open) and everything scores.
            stub.configure(error_rate=0.0)
            await asyncio.sleep(BREAKER_COOLDOWN_S)
            open_before = total(await scrape_metrics(url), "ctxprec_judge_requests_total", outcome="circuit_open")
            recovered = await phase("recovered", 12)
            assert set(recovered) == {"evaluated"}, recovered

            m = await scrape_metrics(url)
            assert total(m, "ctxprec_judge_requests_total", outcome="circuit_open") == open_before
            outcomes = [outcome(capture, s) for s in traffic.sent]
            assert total(m, "ctxprec_samples_total") == len(traffic.sent)
            assert total(m, "ctxprec_samples_total", decision="evaluated") == outcomes.count("evaluated")
            assert total(m, "ctxprec_samples_total", decision="failed") == len(outcomes) - outcomes.count("evaluated")
            assert await healthy(url)
            await app.close()
    finally:
        await capture.stop()
