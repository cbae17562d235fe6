"""A real app with content capture off whose spans keep only ids: LangChain over a Milvus Lite
server, traced by OpenLLMetry's LangChain and Milvus instrumentors with
`TRACELOOP_TRACE_CONTENT=false`. Its retriever span holds neither question nor documents; the
Milvus search span under it keeps each hit's id and distance, in rank order. A Milvus resolver
looks the texts up in the same collection the app searched; the question comes from the app's
own request span, through a `conventions.mappings` entry that names only the query.

Each retrieval is scored with the texts the app retrieved, in its order, as `ctxprec score`
scores the same question and texts (no answer: the model span holds none); a sidecar without the
resolver decides the same retrievals `no_content`."""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Awaitable, Callable

import pytest

from ctxprec.collector.stub_judge import StubJudge
from tests.collector.rag_app import running, scrape, value, wait_until
from tests.helpers.framework_apps import AppRun, run_app_module
from tests.helpers.scored_like_batch import BatchScores, Outcomes, judge_flags, metrics_text
from tests.helpers.stores import MilvusLiteServer
from tests.resolving.stores_fixture import outcome_verdicts, resolver_config

pytestmark = pytest.mark.slow

MakeStub = Callable[..., Awaitable[StubJudge]]
QUESTION_SPAN = {"name": "question", "when": {"span.name": "handle_question"}, "query": "app.question"}


async def test_langchain_over_milvus_lite_with_openllmetry_content_off_is_scored_from_the_ids_it_kept(
        make_stub_judge: MakeStub, tmp_path: Path) -> None:
    milvus = MilvusLiteServer(tmp_path / "milvus")
    milvus.start()
    stub = await make_stub_judge()
    source = {"name": "kb-milvus", "kind": "milvus", "when": {"db.system": "milvus"}, "uri": milvus.uri,
              "collection": "kb_docs", "text_field": "text"}
    outcomes = Outcomes()
    try:
        # The app creates and loads its collection at start: the resolver starts without it.
        config = resolver_config(tmp_path, [source], *judge_flags(stub), "--resolver-required", "off",
                                 mappings=[QUESTION_SPAN])
        plain = resolver_config(tmp_path, [], *judge_flags(stub), mappings=[QUESTION_SPAN])
        async with running(config) as pipeline, running(plain) as without:
            pipeline.add_sink(outcomes)
            runs = await run_app_module(
                "milvus_app", service="kb-content-off", env={"TRACELOOP_TRACE_CONTENT": "false"},
                args=["--milvus-uri", milvus.uri, "--collection", "kb_docs"],
                endpoints=[f"http://127.0.0.1:{p.otlp_http_port}/v1/traces" for p in (pipeline, without)])
            for p in (pipeline, without):
                await wait_until(lambda p=p: sum(p.fanout.counts.values()) >= 3, timeout=30, what="every decision")
            await asyncio.sleep(0.3)
            metrics = scrape(await metrics_text(pipeline))
    finally:
        milvus.stop()
    assert without.fanout.counts == {"no_content": 3}
    assert pipeline.fanout.counts == {"evaluated": 3}
    assert [r.context_ids for r in runs] == [["kb-01", "kb-02", "kb-04"], ["kb-03", "kb-08", "kb-04"],
                                            ["kb-07", "kb-03", "kb-05"]]
    # No answer in the traces: judged against the question, as the batch judges it without one.
    unanswered = [AppRun(r.query, r.contexts, r.context_ids, "") for r in runs]
    records = await BatchScores().records(stub, unanswered, tmp_path)
    by_query = {o.retrieval.query: o for o in outcomes.items}
    assert sorted(by_query) == sorted(r.query for r in runs)
    for run in runs:
        outcome = by_query[run.query]
        r = outcome.retrieval
        assert outcome.record is not None and outcome.result is not None
        assert (r.documents_resolved, r.convention, r.answer_source) == (True, "openllmetry", "none")
        assert [c.content for c in r.contexts] == run.contexts
        assert [c.id for c in r.contexts] == run.context_ids
        assert all(c.score is not None for c in r.contexts)  # the distances, kept
        assert outcome_verdicts(outcome.record) == outcome_verdicts(records[run.query])
        assert outcome.result.score == records[run.query]["score"]
        assert outcome.result.reference_kind == "query"
    assert value(metrics, "ctxprec_resolver_ids_total", source="kb-milvus", outcome="found") == 7
