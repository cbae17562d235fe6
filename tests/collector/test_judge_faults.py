"""A judge that fails 30% of the time, in every way it can: every sampled retrieval still ends in
exactly one decision, and every score is the one the judge's verdicts imply (none invented)."""
from __future__ import annotations

import random
from typing import Awaitable, Callable

import aiohttp
from ctxprec.collector.stub_judge import FAULT_KINDS, StubJudge

from tests.collector.rag_app import (
    RagApp,
    running,
    scrape,
    serve_config,
    value,
    wait_until,
)
from tests.helpers.otlp_capture import OtlpCapture

MakeStub = Callable[..., Awaitable[StubJudge]]
TRACES = 40


def expected_map(relevant: list[bool]) -> float:
    """MAP as docs/FORMATS.md (How the score is computed) defines it, rounded half up to two decimals."""
    hits, total = 0, 0.0
    for i, rel in enumerate(relevant):
        if rel:
            hits += 1
            total += hits / (i + 1)
    score = total / hits if hits else 0.0
    return int(score * 100 + 0.5 + 1e-9) / 100


async def test_every_retrieval_decided_once_and_no_score_invented(make_stub_judge: MakeStub) -> None:
    stub = await make_stub_judge(error_rate=0.3, fault_kinds=FAULT_KINDS, hang_s=1.5, retry_after_s=0.05, seed=42)
    capture = await OtlpCapture().start()
    config = serve_config("--judge-model", "openai/stub", "--judge-api-base", stub.url, "--judge-api-key", "k",
                          "--judge-timeout", "0.5", "--judge-max-retries", "0", "--judge-cache-size", "0",
                          "--forward-to", capture.http_url, "--workers", "8")
    rng = random.Random(7)
    patterns = [[rng.random() < 0.5 for _ in range(rng.randint(1, 5))] for _ in range(TRACES)]
    try:
        async with running(config) as pipeline:
            app = RagApp(protocol="grpc", port=pipeline.otlp_grpc_port)
            emitted = []
            for i, pattern in enumerate(patterns):
                docs = [f"{'[relevant]' if rel else '[irrelevant]'} document {i}-{j}" for j, rel in enumerate(pattern)]
                emitted.append(app.openinference(f"question {i}", docs, "an answer"))
            await app.flush()
            await app.close()
            ids = [e.retriever_span_id for e in emitted]
            await wait_until(lambda: all(capture.span(s) is not None for s in ids), timeout=60,
                             what="every retriever span downstream")

            scored = failed = 0
            for span_id, pattern in zip(ids, patterns):
                copies = [s for s in capture.spans if s.span_id == span_id]
                assert len(copies) == 1, "a retrieval span went downstream more than once"
                attrs = copies[0].attributes
                if "error.type" in attrs:
                    failed += 1
                    assert "gen_ai.evaluation.score.value" not in attrs
                    assert "evaluations.0.evaluation.score" not in attrs
                else:
                    scored += 1
                    assert attrs["gen_ai.evaluation.score.value"] == expected_map(pattern), (pattern, attrs)
            assert scored + failed == TRACES
            # Without client retries about 30% fail; the chance that none (or all) do is negligible.
            assert scored > 0 and failed > 0, (scored, failed)

            async with aiohttp.ClientSession() as session:
                async with session.get(f"{pipeline.metrics_url}/metrics") as response:
                    m = scrape(await response.text())
            evaluated = value(m, "ctxprec_samples_total", service="support-bot", decision="evaluated")
            failed_metric = value(m, "ctxprec_samples_total", service="support-bot", decision="failed")
            assert (evaluated, failed_metric) == (scored, failed)
            decided = sum(v for (name, _), v in m.items() if name == "ctxprec_samples_total")
            assert decided == TRACES
            # The faults really happened, and the judge metrics saw them.
            stats = stub.stats.to_dict()
            assert sum(stats.get("faults", {}).values()) > 0, stats
            outcomes = {dict(labels)["outcome"] for (name, labels), v in m.items()
                        if name == "ctxprec_judge_requests_total" and v > 0}
            assert "ok" in outcomes and len(outcomes) >= 3, outcomes
    finally:
        await capture.stop()
