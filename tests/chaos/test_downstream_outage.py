"""Scenario 2: the downstream OTLP endpoint (a real OTLP receiver behind a TCP proxy that is
taken down) goes away and comes back while the sidecar forwards in span mode.

Through an outage spans wait in the forward queue (bounded in bytes) until it is full or their
deadline (`--forward-queue-deadline`) passes; the forwarder keeps trying, at most 5 s apart:
- 1 s: every span is delivered once it is back;
- 15 s under steady load, with a queue that has room for all of it: nothing is dropped, every
  span sent is delivered;
- 6 s with an 8 KiB queue and a 2 s deadline: the full queue drops its oldest spans
  (`queue_full`), what is still queued at its deadline is dropped as `expired`, the queue never
  passes its bound, and new spans flow again once the endpoint is back.
In each, every span received is accounted for: delivered + counted drops == received."""
from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable

import pytest

from ctxprec.collector.memory import anonymous_rss_bytes as current_rss_bytes
from ctxprec.collector.stub_judge import StubJudge
from tests.chaos.scrape_http import healthy, scrape_metrics, total
from tests.chaos.tcp_proxy import TcpProxy
from tests.collector.rag_app import RagApp, running, serve_config
from tests.helpers.otlp_capture import OtlpCapture

pytestmark = pytest.mark.slow

MakeStub = Callable[..., Awaitable[StubJudge]]
SPANS_PER_TRACE = 3  # root, retriever, llm
SMALL_QUEUE_BYTES = 8 * 1024
EXPORTER = "span_forwarder"


def send(app: RagApp, n: int, start: int) -> list[str]:
    """n traces; returns their retriever span ids."""
    return [app.openinference(f"question {start + i}", [f"[relevant] passage {start + i}", "[irrelevant] filler"],
                              "an answer").retriever_span_id for i in range(n)]


async def accounted(url: str, timeout: float = 30.0) -> dict[str, float]:
    """Waits until every span received was delivered or dropped-and-counted; returns the figures."""
    deadline = time.monotonic() + timeout
    while True:
        m = await scrape_metrics(url)
        figures = {"received": total(m, "ctxprec_spans_received_total"),
                   "ok": total(m, "ctxprec_exported_spans_total", exporter=EXPORTER, outcome="ok"),
                   "dropped": total(m, "ctxprec_export_dropped_total", exporter=EXPORTER)}
        for (name, labels), v in m.items():
            if name == "ctxprec_export_dropped_total":
                figures["dropped:" + dict(labels)["reason"]] = v
        if figures["received"] and figures["ok"] + figures["dropped"] == figures["received"]:
            return figures
        assert time.monotonic() < deadline, f"spans not accounted for: {figures}"
        await asyncio.sleep(0.1)


def delivered(capture: OtlpCapture, cut_at: float) -> set[str]:
    """Span ids delivered downstream. A span may arrive twice only when the cut caught its request
    after the receiver had it but before the answer came back (at-least-once, as any OTLP
    exporter): its first copy then arrived at the cut."""
    first: dict[str, float] = {}
    for s in capture.spans:
        if s.span_id in first:
            assert abs(first[s.span_id] - cut_at) < 0.25, f"span {s.span_id} delivered twice, not at the cut"
        else:
            first[s.span_id] = s.received_at
    return set(first)


async def with_sidecar(make_stub_judge: MakeStub, body: Callable[[Any, RagApp, TcpProxy, OtlpCapture], Awaitable[None]],
                       *extra: str) -> None:
    stub = await make_stub_judge(seed=2)
    capture = await OtlpCapture().start()
    proxy = TcpProxy(capture.http_port)
    await proxy.up()
    config = serve_config("--judge-model", "openai/stub", "--judge-api-base", stub.url, "--judge-api-key", "k",
                          "--forward-to", proxy.url, "--write-back", "span", "--sample-rate", "1", *extra)
    try:
        async with running(config) as pipeline:
            app = RagApp(protocol="grpc", port=pipeline.otlp_grpc_port)
            try:
                await body(pipeline, app, proxy, capture)
            finally:
                await app.close()
    finally:
        await proxy.down()
        await capture.stop()


async def test_short_outage_is_buffered_and_delivered(make_stub_judge: MakeStub) -> None:
    async def body(pipeline: Any, app: RagApp, proxy: TcpProxy, capture: OtlpCapture) -> None:
        send(app, 5, 0)
        await app.flush()
        await capture.wait_for_spans(5 * SPANS_PER_TRACE)

        await proxy.down()
        went_down, cut_at = time.monotonic(), time.perf_counter()
        during = send(app, 20, 5)
        await app.flush()
        max_queued = 0
        while time.monotonic() - went_down < 1.0:
            max_queued = max(max_queued, pipeline.writeback.sender.queued_bytes)
            await asyncio.sleep(0.02)
        await proxy.up()

        figures = await accounted(pipeline.metrics_url)
        assert figures["dropped"] == 0, figures
        assert figures["ok"] == figures["received"] == 25 * SPANS_PER_TRACE, figures
        assert len(delivered(capture, cut_at)) == 25 * SPANS_PER_TRACE
        assert max_queued <= pipeline.writeback.sender.settings.max_queue_bytes
        # Sampled retrieval spans came through the outage with their scores on.
        for span_id in during:
            span = capture.span(span_id)
            assert span is not None and span.attributes["gen_ai.evaluation.score.value"] == 1.0, span_id
        m = await scrape_metrics(pipeline.metrics_url)
        assert total(m, "ctxprec_samples_total", decision="evaluated") == 25

    await with_sidecar(make_stub_judge, body)


async def take_down(app: RagApp, proxy: TcpProxy, capture: OtlpCapture) -> tuple[float, float, int]:
    """Three traces delivered, then the endpoint down: when (monotonic, perf_counter) and the RSS
    just before."""
    send(app, 3, 0)
    await app.flush()
    await capture.wait_for_spans(3 * SPANS_PER_TRACE)
    rss_before = current_rss_bytes()
    await proxy.down()
    return time.monotonic(), time.perf_counter(), rss_before


async def test_outage_the_queue_can_hold_loses_nothing(make_stub_judge: MakeStub) -> None:
    async def body(pipeline: Any, app: RagApp, proxy: TcpProxy, capture: OtlpCapture) -> None:
        went_down, cut_at, rss_before = await take_down(app, proxy, capture)
        sent, max_queued = 3, 0
        while time.monotonic() - went_down < 15.0:  # steady load for the whole outage
            send(app, 5, sent)
            sent += 5
            max_queued = max(max_queued, pipeline.writeback.sender.queued_bytes)
            await asyncio.sleep(0.1)
        await app.flush()
        rss_growth_mb = (current_rss_bytes() - rss_before) / 2**20
        await proxy.up()

        figures = await accounted(pipeline.metrics_url, timeout=60.0)
        assert figures["received"] == sent * SPANS_PER_TRACE, figures
        assert figures["dropped"] == 0, figures  # the queue had room for the whole outage
        assert figures["ok"] == figures["received"], figures
        assert len(delivered(capture, cut_at)) == sent * SPANS_PER_TRACE
        assert 0 < max_queued <= pipeline.writeback.sender.settings.max_queue_bytes
        assert rss_growth_mb < 64, rss_growth_mb
        m = await scrape_metrics(pipeline.metrics_url)
        assert total(m, "ctxprec_samples_total", decision="evaluated") == sent

    await with_sidecar(make_stub_judge, body)


async def test_full_queue_drops_oldest_and_deadline_drops_the_rest(make_stub_judge: MakeStub) -> None:
    async def body(pipeline: Any, app: RagApp, proxy: TcpProxy, capture: OtlpCapture) -> None:
        # The bound comes from `--forward-max-queue-mb` (see with_sidecar's flags below).
        assert pipeline.writeback.sender.settings.max_queue_bytes == SMALL_QUEUE_BYTES
        went_down, cut_at, rss_before = await take_down(app, proxy, capture)
        max_queued = 0
        sent = 3
        while time.monotonic() - went_down < 6.0:
            if time.monotonic() - went_down < 3.0:
                send(app, 10, sent)
                sent += 10
            max_queued = max(max_queued, pipeline.writeback.sender.queued_bytes)
            await asyncio.sleep(0.1)
        rss_growth_mb = (current_rss_bytes() - rss_before) / 2**20
        await proxy.up()
        # Once what was queued at the end of the outage is settled (sent or dropped), new spans flow.
        await accounted(pipeline.metrics_url)
        after: list[str] = []
        for _ in range(5):  # one at a time: a burst could overflow the 8 KiB queue by design
            after += send(app, 1, sent)
            sent += 1
            await app.flush()
            await asyncio.sleep(0.2)
        for span_id in after:  # the endpoint is back: new spans flow, scored
            assert await _eventually(lambda: capture.span(span_id) is not None), span_id
            assert capture.span(span_id).attributes["gen_ai.evaluation.score.value"] == 1.0  # type: ignore[union-attr]

        figures = await accounted(pipeline.metrics_url)
        assert figures["received"] == sent * SPANS_PER_TRACE, figures
        # Dropped spans are not downstream, apart from any whose request the cut caught.
        in_flight_at_cut = len([s for s in capture.spans if abs(s.received_at - cut_at) < 0.25])
        assert figures["ok"] <= len(delivered(capture, cut_at)) <= figures["ok"] + in_flight_at_cut, figures
        assert figures.get("dropped:queue_full", 0) > 0, figures
        assert figures.get("dropped:expired", 0) > 0, figures  # sending stopped at 3 s, deadline 2 s
        assert 0 < max_queued <= SMALL_QUEUE_BYTES, max_queued
        assert rss_growth_mb < 64, rss_growth_mb
        m = await scrape_metrics(pipeline.metrics_url)
        # Scoring never depended on the downstream: every retrieval was decided.
        assert total(m, "ctxprec_samples_total") == sent
        assert total(m, "ctxprec_samples_total", decision="evaluated") == sent
        assert await healthy(pipeline.metrics_url)

    await with_sidecar(make_stub_judge, body, "--forward-max-queue-mb", str(SMALL_QUEUE_BYTES / 2**20),
                       "--forward-queue-deadline", "2")


async def _eventually(predicate: Callable[[], bool], timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True
