"""Real traffic from the JavaScript ecosystem: Mastra (Agent with its vector and GraphRAG tools,
@mastra/core 1.71 and 1.70; a plain tool and a workflow read through user mappings), the Vercel
AI SDK 6 (`generateText`, `streamText`, `generateObject`) and 7 (both @ai-sdk/otel integrations)
after a retrieval span the app writes itself (OpenInference or GenAI keys), and LangChain.js with
OpenInference. Each app runs in Node.js with offline mock models, directly and inside the server
span of an instrumented node:http server, and exports with the real OTLP exporters (protobuf, or
JSON) to `ctxprec serve`, which scores against the stub judge over HTTP and forwards to a real
OTLP receiver (tests/realtraffic/js_matrix.py runs a cell).

For every cell: one decision per retrieval, the contexts in rank order, the answer equal to what
the mock model returned, `reference_kind=output`, and the score equal to `ctxprec score` on the
same query, contexts and answer. A second sidecar that samples nothing counts each retrieval once
as `not_sampled` (the byte-level path).
"""
from __future__ import annotations

from pathlib import Path
from typing import Awaitable, Callable

import pytest

from ctxprec.collector.stub_judge import StubJudge
from tests.collector.rag_app import value
from tests.helpers.js_apps import JsCell
from tests.realtraffic.apps.corpus import QUESTIONS
from tests.helpers.scored_like_batch import BatchScores, assert_scored_like_the_batch
from tests.realtraffic.js_matrix import CELLS, NO_CONTENT_CELLS, observe

pytestmark = pytest.mark.slow

MakeStub = Callable[..., Awaitable[StubJudge]]
batch_scores = BatchScores()


@pytest.mark.parametrize("cell", CELLS, ids=[c.name for c in CELLS])
async def test_js_app_traffic_is_scored_like_the_batch(cell: JsCell, make_stub_judge: MakeStub,
                                                       tmp_path: Path) -> None:
    stub = await make_stub_judge()
    seen = await observe(cell, stub, tmp_path)
    try:
        # The app's own retrieval, through its framework's store and tools, is the corpus' order.
        assert [r.context_ids for r in seen.runs] == [list(q.retrieved_ids) for q in QUESTIONS]
        assert seen.decisions == {"evaluated": 3}, seen.notes
        assert seen.unsampled == {"not_sampled": 3}, seen.notes
        assert value(seen.metrics, "ctxprec_reference_kind_total", service=seen.service,
                     reference_kind="output") == 3

        batch = await batch_scores(stub, seen.runs, tmp_path)
        assert_scored_like_the_batch(seen.runs, seen.outcomes, batch, seen.capture, seen.service)
    finally:
        await seen.capture.stop()


@pytest.mark.parametrize("cell", NO_CONTENT_CELLS, ids=[c.name for c in NO_CONTENT_CELLS])
async def test_genai_retrieval_documents_without_text_are_no_content(cell: JsCell, make_stub_judge: MakeStub,
                                                                      tmp_path: Path) -> None:
    """A GenAI retrieval span whose documents carry only `id` and `score` (content capture off):
    one `no_content` decision per retrieval, nothing judged as if it were empty."""
    stub = await make_stub_judge()
    seen = await observe(cell, stub, tmp_path)
    try:
        assert seen.decisions == {"no_content": 3}, seen.notes
        assert value(seen.metrics, "ctxprec_samples_total", service=seen.service, decision="no_content") == 3
        assert seen.capture.find_spans("gen_ai.evaluation.name", "context_precision") == []
        assert stub.stats.requests == 0
    finally:
        await seen.capture.stop()
