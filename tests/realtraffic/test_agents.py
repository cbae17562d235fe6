"""Real traffic from agent apps: Pydantic AI, the OpenAI Agents SDK (Responses and Chat
Completions, a tool marked RETRIEVER), OpenTelemetry's GenAI instrumentations (content on spans, in
log records only, and off), OpenLLMetry with content off, LlamaIndex with LLMRerank, DSPy,
smolagents and Google ADK (tests/realtraffic/agents/cases.py), each in its own process with its
real instrumentor and a fake offline model, exporting with the real OTLP/HTTP exporters through
`OTEL_EXPORTER_OTLP_ENDPOINT` into `ctxprec serve --sample-rate 1`, which scores against the stub
judge over HTTP and forwards to a real OTLP receiver.

Each app asks the corpus's three questions in one run. Retrieving apps: one decision per
retrieval, the contexts in the order the model saw them (the tool's result; LLMRerank's list),
the answer equal to what the fake model returned, the score equal to `ctxprec score` on the same
sample, the scored span forwarded. Content capture off: each retrieval decided `no_content`. An
agent whose only tool is not a retriever (weather): no decision at all, its spans forwarded.
"""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Awaitable, Callable

import pytest

from ctxprec.collector.stub_judge import StubJudge
from tests.collector.rag_app import running, scrape, serve_config, value, wait_until
from tests.helpers.framework_apps import runs_of
from tests.helpers.otlp_capture import OtlpCapture
from tests.helpers.scored_like_batch import (
    BatchScores,
    Outcomes,
    assert_scored_like_the_batch,
    judge_flags,
    metrics_text,
)
from tests.realtraffic.agents.cases import CASES, Case, run_case

pytestmark = pytest.mark.slow
CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

MakeStub = Callable[..., Awaitable[StubJudge]]
E2E_CASES = [case for case in CASES if not case.capture_only]
batch_scores = BatchScores()


@pytest.mark.parametrize("case", E2E_CASES, ids=lambda case: case.name)
async def test_agent_traffic_is_decided_as_the_app_retrieved(case: Case, make_stub_judge: MakeStub,
                                                             tmp_path: Path) -> None:
    stub = await make_stub_judge()
    capture = await OtlpCapture().start()
    service = f"agents-{case.name}"
    config = serve_config(*judge_flags(stub), "--sample-rate", "1", "--forward-to", capture.http_url,
                          "--write-back", "span")
    outcomes = Outcomes()
    try:
        async with running(config) as pipeline:
            pipeline.add_sink(outcomes)
            report = await run_case(case, endpoint=f"http://127.0.0.1:{pipeline.otlp_http_port}", service=service)
            runs = runs_of(report)
            retrieving = case.expect != "none"
            assert len(runs) == (3 if retrieving else 1)
            assert all(run.contexts for run in runs) == retrieving, report  # the app's own account
            await wait_until(lambda: sum(pipeline.fanout.counts.values()) >= (len(runs) if retrieving else 0),
                             timeout=30, what="a decision for every retrieval")
            await wait_until(lambda: len(capture.spans) > 0, timeout=30, what="the app's spans downstream")
            await asyncio.sleep(0.5)  # past the quiet period: a second (wrong) decision would show up now
            metrics = scrape(await metrics_text(pipeline))
        if case.expect == "none":
            assert pipeline.fanout.counts == {}, "a tool that is not a retriever was taken as one"
            assert capture.find_spans("gen_ai.tool.name", "get_weather"), "the tool's span was not forwarded"
            assert not capture.find_spans("gen_ai.evaluation.name")
            return
        assert pipeline.fanout.counts == {case.expect: len(runs)}
        assert value(metrics, "ctxprec_samples_total", service=service, decision=case.expect) == len(runs)
        if case.expect == "evaluated":
            batch = await batch_scores(stub, runs, tmp_path)
            assert_scored_like_the_batch(runs, outcomes.items, batch, capture, service, case.answer_source)
        if case.env.get(CONTENT) == "event_only":  # the answers travelled as log records: forwarded too
            details = [log for log in capture.logs if log.event_name == "gen_ai.client.inference.operation.details"]
            assert len(details) == len(runs)
    finally:
        await capture.stop()
