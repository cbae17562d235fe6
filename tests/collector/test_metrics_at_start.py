"""Series whose label values are known at start exist at 0 from the first scrape, and the local
judge feeds the judge request metrics like a remote judge (a sidecar over real OTLP and HTTP)."""
from __future__ import annotations

import asyncio

import aiohttp
from prometheus_client import generate_latest

from ctxprec.collector.assembly.trace_buffer import EVICTION_REASONS
from ctxprec.collector.metrics.registry import RECEIVER_ERROR_REASONS, Metrics
from ctxprec.scorer.judge.chat import REQUEST_OUTCOMES
from ctxprec.scorer.judge.local import FALLBACK_REASONS, LOCAL_OUTCOMES
from tests.collector.rag_app import RagApp, running, scrape, serve_config, value

QUERY = "How do I reset my password?"
ANSWER = "Open Settings, choose Security and click Reset Password; the emailed link expires after 30 minutes."
DOCS = ["To reset a password open Settings, choose Security and click Reset Password.",
        "Our offices are closed on public holidays."]


async def metrics_text(url: str) -> str:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{url}/metrics") as response:
            assert response.status == 200
            return await response.text()


def series(samples: dict, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: v for (sample, labels), v in samples.items() if sample == name}


def test_start_at_zero_creates_only_the_configured_series() -> None:
    metrics = Metrics()
    metrics.start_at_zero(receivers=["otlp_http"], judge_model="openai/gpt-4o-mini", judge_outcomes=REQUEST_OUTCOMES)
    samples = scrape(generate_latest(metrics.registry).decode())
    errors = series(samples, "ctxprec_receiver_errors_total")
    assert {dict(k)["reason"] for k in errors} == set(RECEIVER_ERROR_REASONS["otlp_http"])
    assert {dict(k)["receiver"] for k in errors} == {"otlp_http"} and set(errors.values()) == {0.0}
    requests = series(samples, "ctxprec_judge_requests_total")
    assert {dict(k)["outcome"] for k in requests} == set(REQUEST_OUTCOMES) and set(requests.values()) == {0.0}
    assert value(samples, "ctxprec_judge_latency_seconds_count", model="openai/gpt-4o-mini", judge="live") == 0.0
    # Per-service series are not invented: they appear with their service.
    assert not series(samples, "ctxprec_samples_total")


async def test_local_judge_requests_are_counted_and_known_series_start_at_zero() -> None:
    async with running(serve_config()) as pipeline:
        assert pipeline.metrics_url is not None
        before = scrape(await metrics_text(pipeline.metrics_url))
        for receiver in ("otlp_grpc", "otlp_http"):
            for reason in RECEIVER_ERROR_REASONS[receiver]:
                assert ("ctxprec_receiver_errors_total", (("reason", reason), ("receiver", receiver))) in before
        assert "kafka" not in {dict(k)["receiver"] for k in series(before, "ctxprec_receiver_errors_total")}
        for outcome in LOCAL_OUTCOMES:
            assert ("ctxprec_judge_requests_total", (("judge", "live"), ("model", "local"), ("outcome", outcome))) in before
        assert value(before, "ctxprec_judge_requests_total", model="local", outcome="ok", judge="live") == 0
        for reason in FALLBACK_REASONS:
            assert value(before, "ctxprec_local_judge_fallback_total", reason=reason) == 0
        for reason in EVICTION_REASONS:
            assert ("ctxprec_trace_evictions_total", (("reason", reason),)) in before

        app = RagApp(protocol="grpc", port=pipeline.otlp_grpc_port)
        app.openinference(QUERY, DOCS, ANSWER)
        app.openinference(QUERY, list(reversed(DOCS)), ANSWER)
        await app.flush()
        await app.close()

        after = before
        for _ in range(200):  # the traces are scored after the quiet period
            after = scrape(await metrics_text(pipeline.metrics_url))
            if value(after, "ctxprec_judge_requests_total", model="local", outcome="ok", judge="live") >= 2:
                break
            await asyncio.sleep(0.1)
        assert value(after, "ctxprec_judge_requests_total", model="local", outcome="ok", judge="live") == 2
        assert value(after, "ctxprec_judge_latency_seconds_count", model="local", judge="live") >= 2
        assert value(after, "ctxprec_judge_requests_total", model="local", outcome="error", judge="live") == 0
