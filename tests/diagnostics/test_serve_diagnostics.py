"""The diagnostics through `ctxprec serve` end to end: a RAG app's OpenTelemetry SDK sends OTLP to
the sidecar (in-process), the stub judge scores over HTTP, and the answers are read over HTTP from
the metrics port: /diagnostics/documents names the planted noisy documents within 2,000 scores in
the configured slots, `ctxprec_recommended_k` and /diagnostics/top_k give k = 5 for a retriever
whose ranks 6-10 are rarely relevant, previews follow `--diagnostics-previews` and the PII
redaction, and `--diagnostics off` serves none of it."""
from __future__ import annotations

import json
import random
from typing import Any

import aiohttp
import pytest
from ctxprec.collector.pipeline import Pipeline
from ctxprec.collector.stub_judge import StubJudge

from tests.collector.rag_app import RagApp, running, scrape, serve_config, value, wait_until
from tests.diagnostics.streams import NOISY, zipf_stream

pytestmark = pytest.mark.slow

QUERY = "How do I reset my password?"
ANSWER = "Open settings and choose reset password."
SLOTS = 200
STREAM = 2000
DEEP = 300  # retrievals of the retriever that returns 10 contexts
DEEP_CHARS = 200


async def _get(url: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        text = await response.text()
        return response.status, (json.loads(text) if response.content_type == "application/json" else text)


def _judge_flags(stub: StubJudge) -> list[str]:
    return ["--judge-model", "openai/stub", "--judge-api-base", stub.url, "--judge-api-key", "test-key"]


def _evaluated(pipeline: Any) -> int:
    return pipeline.fanout.counts.get("evaluated", 0)


def _marked(relevant: bool, text: str) -> str:
    return ("[relevant] " if relevant else "[irrelevant] ") + text


async def test_noisy_documents_top_k_and_slices_through_serve(stub_judge: StubJudge) -> None:
    config = serve_config(*_judge_flags(stub_judge), "--diagnostics-slots", str(SLOTS),
                          "--diagnostics-slice-attributes", "index.version, tenant.tier")
    async with running(config) as pipeline:
        app = RagApp(protocol="http", port=pipeline.otlp_http_port)
        rng = random.Random(5)
        sent = 0

        async def paced() -> None:
            # Sent in steps the scoring queue can hold: a retrieval that finds it full is
            # decided `overloaded`, and this test wants every one scored.
            await app.flush()
            await wait_until(lambda: _evaluated(pipeline) == sent, timeout=60, what=f"{sent} retrievals scored")

        try:
            # 2,000 retrievals of 5 out of 5,000 documents (Zipf), 5 popular ones planted noisy.
            for scored in zipf_stream(STREAM):
                app.openinference(QUERY, [_marked(r, c) for r, c in zip(scored.relevant, scored.contents)], ANSWER,
                                  ids=scored.documents, attributes={"index.version": "v1", "tenant.tier": "pro"})
                sent += 1
                if sent % 100 == 0:
                    await paced()
            # A retriever returning 10 contexts whose ranks 6-10 are relevant 2% of the time.
            for i in range(DEEP):
                relevant = [rng.random() < 0.6 for _ in range(5)] + [rng.random() < 0.02 for _ in range(5)]
                docs = [_marked(r, f"passage {i}-{rank} ".ljust(DEEP_CHARS, "x")) for rank, r in enumerate(relevant)]
                app.openinference(QUERY, docs, ANSWER, retriever="kb-deep", ids=[f"deep-{i}-{r}" for r in range(10)])
                sent += 1
                if sent % 100 == 0:
                    await paced()
            await paced()
        finally:
            await app.close()
        assert pipeline.fanout.counts == {"evaluated": STREAM + DEEP}
        base = pipeline.metrics_url

        status, body = await _get(f"{base}/diagnostics/documents?service=support-bot&retriever=kb-v2&limit=5")
        assert status == 200
        assert body["slots"] == SLOTS and body["previews"] is False and body["limit"] == 5
        (summary,) = body["summaries"]
        assert {d["document"] for d in summary["documents"]} == NOISY
        assert summary["exact_top"] is True and summary["tracked"] == SLOTS and summary["evictions"] > 0
        for row in summary["documents"]:
            assert row["kind"] == "id" and row["irrelevant_rate"] > 0.8 and "preview" not in row
        # Previews are off: ids only, never the documents' text (which holds e-mail addresses).
        assert "example.com" not in json.dumps(body) and "reset a password" not in json.dumps(body)

        status, body = await _get(f"{base}/diagnostics/documents?limit=0")
        assert status == 400 and "limit" in body["error"]
        status, body = await _get(f"{base}/diagnostics/documents")
        assert {(s["service"], s["retriever"]) for s in body["summaries"]} == {
            ("support-bot", "kb-v2"), ("support-bot", "kb-deep")}

        status, body = await _get(f"{base}/diagnostics/top_k?retriever=kb-deep")
        assert status == 200
        (pair,) = body["pairs"]
        assert pair["recommended_k"] == 5 and pair["max_rank"] == 10
        # Cutting to 5 saves the 5 contexts after it: their characters / 4 as tokens.
        assert pair["saved_contexts_per_request"] == pytest.approx(5.0)
        assert pair["saved_tokens_per_request"] == pytest.approx(5 * (DEEP_CHARS + len("[relevant] ")) / 4, rel=0.05)
        _, text = await _get(f"{base}/metrics")
        m = scrape(text)
        assert value(m, "ctxprec_recommended_k", service="support-bot", retriever="kb-deep") == 5
        assert value(m, "ctxprec_recommended_k_saved_tokens", service="support-bot",
                     retriever="kb-deep") == pytest.approx(pair["saved_tokens_per_request"])
        assert "doc-0002" not in text  # no document ever becomes a label

        status, body = await _get(f"{base}/diagnostics/drift?service=support-bot")
        assert status == 200 and body["attributes"] == ["index.version", "tenant.tier"]
        (service,) = body["services"]
        assert service["service"] == "support-bot" and service["alarmed"] is False
        assert service["at_alarm"] is None


@pytest.mark.parametrize("redact", [True, False], ids=["redacted", "as-is"])
async def test_previews_only_when_asked_and_through_the_pii_redaction(stub_judge: StubJudge, redact: bool) -> None:
    flags = [*_judge_flags(stub_judge), "--diagnostics-previews", "on"] + (["--redact-pii"] if redact else [])
    async with running(serve_config(*flags)) as pipeline:
        app = RagApp(protocol="http", port=pipeline.otlp_http_port)
        try:
            for _ in range(3):
                app.openinference(QUERY, ["[relevant] Reset it under Settings.",
                                          "[irrelevant] Promotions: write to deals@example.com for a coupon."],
                                  ANSWER, ids=["kb-1", "promo"])
            await app.flush()
        finally:
            await app.close()
        await wait_until(lambda: _evaluated(pipeline) == 3, what="the retrievals scored")
        status, body = await _get(f"{pipeline.metrics_url}/diagnostics/documents")
    assert status == 200 and body["previews"] is True
    (row,) = body["summaries"][0]["documents"]
    assert row["document"] == "promo" and row["irrelevant"] == 3
    assert row["preview"].startswith("[irrelevant] Promotions: write to")
    assert ("deals@example.com" in row["preview"]) is not redact


async def test_diagnostics_off_serves_none_of_it() -> None:
    async with running(serve_config("--diagnostics", "off")) as pipeline:
        assert pipeline.diagnostics is None
        status, _ = await _get(f"{pipeline.metrics_url}/diagnostics/documents")
        assert status == 404
        status, _ = await _get(f"{pipeline.metrics_url}/metrics")
        assert status == 200


def test_a_kafka_diagnostics_topic_needs_the_diagnostics_on() -> None:
    config = serve_config("--kafka-bootstrap", "127.0.0.1:9", "--kafka-topic", "t", "--kafka-diagnostics-topic", "d",
                          "--diagnostics", "off")
    with pytest.raises(ValueError, match="kafka.diagnostics_topic needs the diagnostics on"):
        Pipeline(config)
