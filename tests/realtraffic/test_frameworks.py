"""Real traffic: LangChain, LlamaIndex and Haystack apps, instrumented by the real OpenInference and
OpenLLMetry instrumentors, each in three shapes (the chain called directly; inside the HTTP
server span of a real ASGI app; retriever and model called one after the other under an app
span), export with the real OTLP exporter to `ctxprec serve`, which scores against the stub judge
over HTTP and forwards to a real OTLP receiver.

For every app and shape: one decision per retrieval, the contexts in rank order, the answer equal
to what the fake model returned, `reference_kind=output`, and the score equal to `ctxprec score`
on the same query, contexts and answer given as an event. A second sidecar that samples nothing
receives the same spans and must count each retrieval once as `not_sampled` (the byte-level path).
"""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Awaitable, Callable

import pytest

from ctxprec.collector.stub_judge import StubJudge
from tests.collector.rag_app import running, scrape, serve_config, value, wait_until
from tests.helpers.framework_apps import COMBINATIONS, SHAPES, run_app
from tests.helpers.otlp_capture import OtlpCapture
from tests.helpers.scored_like_batch import (
    BatchScores,
    Outcomes,
    assert_scored_like_the_batch,
    judge_flags,
    metrics_text,
)

pytestmark = pytest.mark.slow

MakeStub = Callable[..., Awaitable[StubJudge]]
batch_scores = BatchScores()


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("framework", "instrumentor"), COMBINATIONS)
async def test_real_framework_traffic_is_scored_like_the_batch(
        framework: str, instrumentor: str, shape: str, make_stub_judge: MakeStub, tmp_path: Path) -> None:
    stub = await make_stub_judge()
    capture = await OtlpCapture().start()
    service = f"rt-{framework}-{instrumentor}-{shape}"
    scoring = serve_config(*judge_flags(stub), "--forward-to", capture.http_url, "--write-back", "span")
    counting = serve_config(*judge_flags(stub), "--sample-rate", "0")
    outcomes = Outcomes()
    try:
        async with running(scoring) as pipeline, running(counting) as counter:
            pipeline.add_sink(outcomes)
            runs = await run_app(framework, instrumentor, shape, service=service, endpoints=[
                f"http://127.0.0.1:{pipeline.otlp_http_port}/v1/traces",
                f"http://127.0.0.1:{counter.otlp_http_port}/v1/traces"])
            assert len(runs) == 3
            await wait_until(lambda: sum(pipeline.fanout.counts.values()) >= len(runs), timeout=30,
                             what="a decision for every retrieval")
            await wait_until(lambda: sum(counter.fanout.counts.values()) >= len(runs), timeout=30,
                             what="every unsampled retrieval counted")
            await wait_until(lambda: len(capture.find_spans("gen_ai.evaluation.name", "context_precision")) >= 3,
                             timeout=30, what="scored spans downstream")
            await asyncio.sleep(0.5)  # a second (wrong) decision would show up now
            metrics = scrape(await metrics_text(pipeline))
        # One decision per retrieval, nested retriever spans included; nothing without contexts.
        assert pipeline.fanout.counts == {"evaluated": 3}
        assert counter.fanout.counts == {"not_sampled": 3}
        assert value(metrics, "ctxprec_reference_kind_total", service=service, reference_kind="output") == 3

        batch = await batch_scores(stub, runs, tmp_path)
        assert_scored_like_the_batch(runs, outcomes.items, batch, capture, service)
    finally:
        await capture.stop()

