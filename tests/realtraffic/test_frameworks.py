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
import json
import os
import sys
from pathlib import Path
from typing import Awaitable, Callable

import pytest

from ctxprec.collector.pipeline import Pipeline
from ctxprec.collector.model import Outcome
from ctxprec.collector.stub_judge import StubJudge
from tests.collector.rag_app import running, scrape, serve_config, value, wait_until
from tests.helpers.framework_apps import COMBINATIONS, SHAPES, AppRun, run_app
from tests.helpers.otlp_capture import OtlpCapture

pytestmark = pytest.mark.slow

MakeStub = Callable[..., Awaitable[StubJudge]]
ROOT = Path(__file__).resolve().parents[2]


class Outcomes:
    """A result sink that keeps every outcome, to compare with what the app did."""

    def __init__(self) -> None:
        self.items: list[Outcome] = []

    def emit(self, outcome: Outcome) -> None:
        self.items.append(outcome)


def judge_flags(stub: StubJudge) -> list[str]:
    return ["--judge-model", "openai/stub", "--judge-api-base", stub.url, "--judge-api-key", "test-key"]


async def batch_scores(stub: StubJudge, runs: list[AppRun], tmp_path: Path) -> dict[str, float]:
    """`ctxprec score` (the CLI, in its own process) on the same query, contexts and answer."""
    events = tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps({"query": r.query, "contexts": r.contexts, "output": r.answer}) + "\n"
                              for r in runs), encoding="utf-8")
    out = tmp_path / "scores.jsonl"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ctxprec.collector.cli", "score", str(events), "-o", str(out),
        "--judge-model", "openai/stub", "--judge-api-base", stub.url,
        env={**os.environ, "OPENAI_API_KEY": "test-key"}, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, stderr = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, stderr.decode()
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert all(r["reference_kind"] == "output" for r in records)
    return {run.query: record["score"] for run, record in zip(runs, records)}


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
            metrics = scrape(await _metrics(pipeline))
        # One decision per retrieval, nested retriever spans included; nothing without contexts.
        assert pipeline.fanout.counts == {"evaluated": 3}
        assert counter.fanout.counts == {"not_sampled": 3}
        assert value(metrics, "ctxprec_reference_kind_total", service=service, reference_kind="output") == 3

        batch = await batch_scores(stub, runs, tmp_path)
        by_query = {o.retrieval.query: o for o in outcomes.items}
        assert sorted(by_query) == sorted(r.query for r in runs)
        for run in runs:
            outcome = by_query[run.query]
            r, result = outcome.retrieval, outcome.result
            assert result is not None
            assert [c.content for c in r.contexts] == run.contexts  # rank order
            assert r.output == run.answer
            assert (r.answer_source, r.answer_clean, result.reference_kind) == ("llm_span", True, "output")
            assert result.score == batch[run.query]
            scored = capture.span(r.span_id)
            assert scored is not None, f"scored span {r.span_id} not forwarded"
            attributes = scored.attributes
            assert attributes["gen_ai.evaluation.score.value"] == result.score
            assert attributes["ctxprec.reference_kind"] == "output"
            assert attributes["ctxprec.answer_source"] == "llm_span"
            assert scored.resource["service.name"] == service
    finally:
        await capture.stop()


async def _metrics(pipeline: Pipeline) -> str:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        async with session.get(f"{pipeline.metrics_url}/metrics") as response:
            return await response.text()
