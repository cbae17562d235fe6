"""Evaluator mode into a real Arize Phoenix server: a real LangChain app sends its spans to Phoenix
and to `ctxprec serve`; ctxprec sends its evaluator spans to Phoenix. They must be filed in the
app's project (not in Phoenix's `default` project under ctxprec's own service), and Phoenix's
refusal of OTLP logs (HTTP 405) must cost one WARNING, not an ERROR per batch."""
from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

import pytest

from ctxprec.collector.stub_judge import StubJudge
from tests.collector.rag_app import running, serve_config, wait_until
from tests.helpers.framework_apps import run_app
from tests.helpers.phoenix import PhoenixClient, PhoenixServer

pytestmark = pytest.mark.slow

MakeStub = Callable[..., Awaitable[StubJudge]]


async def test_evaluator_spans_land_in_the_apps_phoenix_project_without_errors(
        make_stub_judge: MakeStub, phoenix_server: PhoenixServer, caplog: pytest.LogCaptureFixture) -> None:
    stub = await make_stub_judge()
    client = PhoenixClient(phoenix_server.url)
    project = "rt-evaluator-langchain"
    config = serve_config("--judge-model", "openai/stub", "--judge-api-base", stub.url, "--judge-api-key", "k",
                          "--forward-to", phoenix_server.url, "--write-back", "evaluator")
    caplog.set_level(logging.INFO)
    async with running(config) as pipeline:
        runs = await run_app("langchain", "openinference", "asgi", service="shop-api", project=project, endpoints=[
            phoenix_server.otlp_http_traces_url, f"http://127.0.0.1:{pipeline.otlp_http_port}/v1/traces"])
        await wait_until(lambda: pipeline.fanout.counts.get("evaluated", 0) >= len(runs), timeout=30,
                         what="every retrieval scored")
        evaluators = await asyncio.to_thread(
            client.wait_for_spans, project, lambda s: s.get("name") == "context_precision evaluation",
            count=len(runs), timeout=60)
    # The app exported its own spans straight to Phoenix: stored in their own time.
    retrievers = await asyncio.to_thread(client.wait_for_spans, project, count=len(runs), timeout=60,
                                         span_kind=["RETRIEVER"])
    assert len(retrievers) == len(runs)
    retriever_ids = {s["context"]["span_id"] for s in retrievers}
    assert {s["parent_id"] for s in evaluators} == retriever_ids
    for span in evaluators:
        assert span["attributes"]["gen_ai.evaluation.name"] == "context_precision"
        assert span["attributes"]["ctxprec.reference_kind"] == "output"
    default = [s for s in client.spans("default") if s.get("name") == "context_precision evaluation"]
    assert default == []
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []
    warnings = [r for r in caplog.records if "does not take OTLP logs" in r.getMessage()]
    assert len(warnings) == 1
