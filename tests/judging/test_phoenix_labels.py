"""People's annotations in a real Phoenix become labels: `ctxprec serve` forwards a RAG app's spans
to Phoenix and writes its scores there (`--sink phoenix=URL`); human annotations are added through
Phoenix's own REST API (document annotations per context, a span annotation carrying a whole
list), read back on the schedule, and the agreement on /diagnostics/judge equals the test's own
count over the same labels. The sidecar's own (LLM) annotations are never taken for labels."""
from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import aiohttp
import pytest
from ctxprec.collector.stub_judge import StubJudge
from ctxprec.scorer.agreement import Confusion

from tests.collector.rag_app import RagApp, running, serve_config, wait_until
from tests.helpers.phoenix import PhoenixClient, PhoenixServer, poll

pytestmark = pytest.mark.slow

QUERY = "How do I reset my password?"
ANSWER = "Open settings and choose reset password."


def _docs(verdicts: list[bool]) -> list[str]:
    return [("[relevant] " if v else "[irrelevant] ") + f"passage {i}" for i, v in enumerate(verdicts)]


async def _judge_view(pipeline: Any) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session, session.get(f"{pipeline.metrics_url}/diagnostics/judge") as r:
        return json.loads(await r.text())


def _contexts(body: dict[str, Any], judge: str) -> int:
    return next((e["contexts"] for e in body["agreement"] if e["judge"] == judge and e["against"] == "human"), 0)


async def test_human_annotations_in_phoenix_are_read_back_as_labels(
        stub_judge: StubJudge, phoenix_server: PhoenixServer) -> None:
    client = PhoenixClient(phoenix_server.url)
    rng = random.Random(19)
    verdicts = [[rng.random() < 0.5 for _ in range(3)] for _ in range(4)]
    config = serve_config("--judge-model", "openai/stub", "--judge-api-base", stub_judge.url, "--judge-api-key", "k",
                          "--forward-to", phoenix_server.url, "--write-back", "span",
                          "--sink", f"phoenix={phoenix_server.url}", "--labels-phoenix-interval", "1")
    async with running(config) as pipeline:
        app = RagApp(protocol="http", port=pipeline.otlp_http_port, service="phoenix-labels")
        try:
            spans = [app.openinference(QUERY, _docs(v), ANSWER).retriever_span_id for v in verdicts]
            await app.flush()
        finally:
            await app.close()
        await wait_until(lambda: pipeline.fanout.counts.get("evaluated", 0) == len(verdicts), timeout=60,
                         what="every retrieval scored")
        # ctxprec's own (LLM) document annotations are in Phoenix: the spans are stored there.
        await poll(lambda: client.document_annotations(spans), lambda found: all(len(found[s]) == 3 for s in spans),
                   60, "the sidecar's own document annotations")

        expected = Confusion()
        documents = []
        for k in (0, 1):  # people's verdicts per document, some against the judge's
            for position, said in enumerate(verdicts[k]):
                human = said if (k + position) % 3 else not said
                documents.append({"name": "human_relevance", "span_id": spans[k], "document_position": position,
                                  "annotator_kind": "HUMAN",
                                  "result": {"label": "relevant" if human else "irrelevant"}})
                expected.add(said, human)
        # A score instead of a label, for one context of the third retrieval.
        documents.append({"name": "human_relevance", "span_id": spans[2], "document_position": 1,
                          "annotator_kind": "HUMAN", "result": {"score": 0.9}})
        expected.add(verdicts[2][1], True)
        # An LLM's annotation is not a person's: left out.
        documents.append({"name": "other_judge", "span_id": spans[3], "document_position": 0,
                          "annotator_kind": "LLM", "result": {"label": "irrelevant"}})
        done = await asyncio.to_thread(client.request, "POST", "/v1/document_annotations", {"sync": "true"},
                                       {"data": documents})
        assert done.status == 200, done.body
        whole = [not v for v in verdicts[3]]
        span_label = {"name": "context_labels", "span_id": spans[3], "annotator_kind": "HUMAN",
                      "result": {"label": "labelled"}, "metadata": {"relevant": whole}}
        done = await asyncio.to_thread(client.request, "POST", "/v1/span_annotations", {"sync": "true"},
                                       {"data": [span_label]})
        assert done.status == 200, done.body
        for said, human in zip(verdicts[3], whole):
            expected.add(said, human)

        live = pipeline.identity.identifier
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        body = await _judge_view(pipeline)
        while _contexts(body, live) < expected.total and loop.time() < deadline:
            await asyncio.sleep(0.5)
            body = await _judge_view(pipeline)
        # A few rounds more: re-reading the same annotations counts nothing twice.
        rounds = pipeline.phoenix_labels.rounds
        await wait_until(lambda: pipeline.phoenix_labels.rounds >= rounds + 2, timeout=30, what="two more rounds")
        body = await _judge_view(pipeline)
    entry = next(e for e in body["agreement"] if e["judge"] == live and e["against"] == "human")
    assert entry["contexts"] == expected.total == 10
    assert entry["confusion"] == expected.as_dict()["confusion"]
    assert entry["kappa"] == expected.as_dict()["kappa"]
    assert set(entry["annotators"]) == {"phoenix:human_relevance", "phoenix:context_labels"}
