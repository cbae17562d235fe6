"""End to end: a RAG app's OpenTelemetry SDK -> OTLP (gRPC/HTTP) -> ctxprec serve (in-process) ->
stub judge over HTTP -> scores written back to a real OTLP receiver, and metrics over HTTP."""
from __future__ import annotations

import json
import logging
from typing import Any, Awaitable, Callable

import aiohttp
import pytest
from ctxprec.collector.sampling.sampler import Sampler
from ctxprec.collector.stub_judge import StubJudge

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
QUERY = "How do I reset my password?"
ANSWER = "Open settings and choose reset password."
# The stub judges [relevant]/[irrelevant] markers: MAP(yes, no, yes) = (1 + 2/3) / 2 = 0.83.
DOCS_083 = ["[relevant] Reset it under Settings > Security.", "[irrelevant] Our pricing plans.",
            "[relevant] A reset link is emailed to you."]
DOCS_050 = ["[irrelevant] Office opening hours.", "[relevant] Use the reset link."]
DOCS_000 = ["[irrelevant] Holiday schedule.", "[irrelevant] Careers page."]
EVAL_KEYS = ("gen_ai.evaluation.name", "gen_ai.evaluation.score.value", "gen_ai.evaluation.score.label",
             "gen_ai.evaluation.explanation", "evaluations.0.evaluation.name", "evaluations.0.evaluation.score",
             "evaluations.0.evaluation.label", "evaluations.0.evaluation.explanation",
             "evaluations.0.evaluation.annotator_kind", "evaluations.0.evaluation.identifier", "ctxprec.verdicts",
             "ctxprec.precision_at_k", "ctxprec.hit", "ctxprec.k", "ctxprec.judge.model", "ctxprec.prompt_version",
             "ctxprec.sample_rate", "ctxprec.reference_kind")


async def fetch(url: str, accept: str | None = None) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session:
        async with session.get(url, headers={"Accept": accept} if accept else None) as response:
            return response.status, await response.text()


def judge_flags(stub: StubJudge) -> list[str]:
    return ["--judge-model", "openai/stub", "--judge-api-base", stub.url, "--judge-api-key", "test-key"]


async def test_span_mode_grpc_in_http_out_openinference(make_stub_judge: MakeStub) -> None:
    stub = await make_stub_judge()
    capture = await OtlpCapture().start()
    config = serve_config(*judge_flags(stub), "--forward-to", capture.http_url, "--write-back", "span")
    try:
        async with running(config) as pipeline:
            status, _ = await fetch(f"{pipeline.metrics_url}/healthz")
            assert status == 200
            status, body = await fetch(f"{pipeline.metrics_url}/readyz")
            assert status == 200, body
            app = RagApp(protocol="grpc", port=pipeline.otlp_grpc_port)
            high = app.openinference(QUERY, DOCS_083, ANSWER)
            low = app.openinference(QUERY, DOCS_050, ANSWER, retriever="kb-v1")
            await app.flush()
            await app.close()
            await wait_until(lambda: all(capture.span(e.retriever_span_id) is not None for e in (high, low)),
                             what="scored retriever spans downstream")
            await wait_until(lambda: len(capture.spans) >= 6, what="all six spans forwarded")

            scored = capture.span(high.retriever_span_id)
            assert scored is not None
            a = scored.attributes
            assert all(key in a for key in EVAL_KEYS), [k for k in EVAL_KEYS if k not in a]
            assert a["gen_ai.evaluation.name"] == "context_precision"
            assert a["gen_ai.evaluation.score.value"] == 0.83 == a["evaluations.0.evaluation.score"]
            assert a["gen_ai.evaluation.score.label"] == "high" == a["evaluations.0.evaluation.label"]
            assert a["gen_ai.evaluation.explanation"].startswith("The score is 0.83")
            assert a["evaluations.0.evaluation.annotator_kind"] == "LLM"
            assert a["evaluations.0.evaluation.identifier"] == pipeline.engine.fingerprint
            assert [(v["index"], v["relevant"]) for v in json.loads(a["ctxprec.verdicts"])] == [
                (0, True), (1, False), (2, True)]
            assert a["ctxprec.first_relevant_rank"] == 1 and a["ctxprec.k"] == 3 and a["ctxprec.hit"] is True
            assert a["ctxprec.sample_rate"] == 1.0 and a["ctxprec.reference_kind"] == "output"
            # The original attributes are still there.
            assert a["retrieval.documents.1.document.content"] == DOCS_083[1]

            other = capture.span(low.retriever_span_id)
            assert other is not None and other.attributes["gen_ai.evaluation.score.value"] == 0.5
            # Spans that are not retrievals pass through without score attributes.
            passthrough = [s for s in capture.spans if s.span_id not in (high.retriever_span_id, low.retriever_span_id)]
            assert len(passthrough) == 4
            assert not any("gen_ai.evaluation.name" in s.attributes for s in passthrough)

            status, text = await fetch(f"{pipeline.metrics_url}/metrics")
            assert status == 200
            m = scrape(text)
            assert value(m, "ctxprec_spans_received_total", receiver="otlp_grpc") == 6
            assert value(m, "ctxprec_samples_total", service="support-bot", decision="evaluated") == 2
            assert value(m, "ctxprec_context_precision_count", service="support-bot", retriever="kb-v2") == 1
            assert value(m, "ctxprec_context_precision_count", service="support-bot", retriever="kb-v1") == 1
            # 0.83 is in the 0.9 bucket, not the 0.8 one; 0.5 lands in 0.5.
            assert value(m, "ctxprec_context_precision_bucket", service="support-bot", retriever="kb-v2", le="0.8") == 0
            assert value(m, "ctxprec_context_precision_bucket", service="support-bot", retriever="kb-v2", le="0.9") == 1
            assert value(m, "ctxprec_context_precision_bucket", service="support-bot", retriever="kb-v1", le="0.5") == 1
            assert value(m, "ctxprec_rank_judged_total", service="support-bot", rank="2", relevant="false") == 1
            assert value(m, "ctxprec_rank_judged_total", service="support-bot", rank="2", relevant="true") == 1
            assert value(m, "ctxprec_judge_requests_total", model="openai/stub", outcome="ok", judge="live") >= 2
            assert value(m, "ctxprec_score_delay_seconds_count") == 2

            # Prometheus asks for OpenMetrics; then each precision bucket carries the trace that
            # landed in it as an exemplar, the way from a low bucket to a trace.
            _, om = await fetch(f"{pipeline.metrics_url}/metrics", accept="application/openmetrics-text; version=1.0.0")
            bucket = next(line for line in om.splitlines() if line.startswith("ctxprec_context_precision_bucket")
                          and 'retriever="kb-v2"' in line and 'le="0.9"' in line)
            assert f'trace_id="{high.trace_id}"' in bucket and f'span_id="{high.retriever_span_id}"' in bucket
            assert "# {" not in text  # the plain text format has no exemplars
    finally:
        await capture.stop()


async def test_span_mode_http_in_grpc_out_genai_and_openllmetry(make_stub_judge: MakeStub) -> None:
    stub = await make_stub_judge()
    capture = await OtlpCapture().start()
    config = serve_config(*judge_flags(stub), "--forward-to", capture.grpc_url, "--threshold", "0.9")
    assert config.write_back == "span"  # the default for OTLP input
    try:
        async with running(config) as pipeline:
            app = RagApp(protocol="http", port=pipeline.otlp_http_port, service="search-app")
            genai = app.genai(QUERY, DOCS_083, ANSWER)
            ollm = app.openllmetry(QUERY, DOCS_000, ANSWER)
            await app.flush()
            await app.close()
            await wait_until(lambda: len(capture.spans) >= 6, what="six spans downstream over gRPC")
            await wait_until(lambda: all("gen_ai.evaluation.name" in (capture.span(e.retriever_span_id) or
                                                                      _Empty).attributes for e in (genai, ollm)),
                             what="scored spans")
            g = capture.span(genai.retriever_span_id).attributes  # type: ignore[union-attr]
            assert g["gen_ai.evaluation.score.value"] == 0.83
            assert g["gen_ai.evaluation.score.label"] == "low"  # below the 0.9 threshold
            o = capture.span(ollm.retriever_span_id).attributes  # type: ignore[union-attr]
            assert o["gen_ai.evaluation.score.value"] == 0.0 and o["ctxprec.hit"] is False
            assert "ctxprec.first_relevant_rank" not in o  # no relevant item: no rank
            assert all(s.via == "grpc" for s in capture.spans)
            _, text = await fetch(f"{pipeline.metrics_url}/metrics")
            m = scrape(text)
            assert value(m, "ctxprec_spans_received_total", receiver="otlp_http") == 6
            assert value(m, "ctxprec_samples_total", service="search-app", decision="evaluated") == 2
            assert value(m, "ctxprec_precision_at_k_count", service="search-app", retriever="retrieval kb") == 1
    finally:
        await capture.stop()


class _Empty:
    attributes: dict[str, Any] = {}


async def test_genai_v140_structured_documents_are_scored_and_documents_without_text_are_no_content(
        make_stub_judge: MakeStub) -> None:
    """The structured form of gen_ai.retrieval.documents (OTLP array of kvlists), with content and
    with only id and score (content capture off): the first is scored, the second decided
    `no_content` (not `no_contexts`, never a score), in the metrics and on the forwarded span;
    a second sidecar that samples nothing counts both as `not_sampled`."""
    stub = await make_stub_judge()
    capture = await OtlpCapture().start()
    try:
        async with running(serve_config(*judge_flags(stub), "--forward-to", capture.http_url)) as pipeline, \
                running(serve_config(*judge_flags(stub), "--sample-rate", "0")) as counter:
            apps = [RagApp(protocol="http", port=p.otlp_http_port, service="v140-app") for p in (pipeline, counter)]
            emitted = [(app.genai_v140(QUERY, DOCS_083, ANSWER), app.genai_v140(QUERY, DOCS_083, ANSWER, content=False))
                       for app in apps]
            for app in apps:
                await app.flush()
                await app.close()
            await wait_until(lambda: sum(pipeline.fanout.counts.values()) >= 2, what="two decisions")
            await wait_until(lambda: sum(counter.fanout.counts.values()) >= 2, what="two unsampled retrievals")
            with_text, without_text = emitted[0]
            await wait_until(lambda: capture.span(without_text.retriever_span_id) is not None
                             and capture.span(with_text.retriever_span_id) is not None, what="both spans downstream")
            _, text = await fetch(f"{pipeline.metrics_url}/metrics")
            m = scrape(text)
            assert pipeline.fanout.counts == {"evaluated": 1, "no_content": 1}
            assert counter.fanout.counts == {"not_sampled": 2}
            assert value(m, "ctxprec_samples_total", service="v140-app", decision="no_content") == 1
            scored = capture.span(with_text.retriever_span_id).attributes  # type: ignore[union-attr]
            assert scored["gen_ai.evaluation.score.value"] == 0.83
            assert scored["ctxprec.reference_kind"] == "output"
            unscored = capture.span(without_text.retriever_span_id).attributes  # type: ignore[union-attr]
            assert "gen_ai.evaluation.score.value" not in unscored
    finally:
        await capture.stop()


@pytest.mark.parametrize("downstream", ["http", "grpc"])
async def test_evaluator_mode_emits_linked_evaluator_span_and_log(make_stub_judge: MakeStub, downstream: str) -> None:
    stub = await make_stub_judge()
    capture = await OtlpCapture().start()
    url = capture.http_url if downstream == "http" else capture.grpc_url
    config = serve_config(*judge_flags(stub), "--forward-to", url, "--write-back", "evaluator")
    try:
        async with running(config) as pipeline:
            app = RagApp(protocol="grpc", port=pipeline.otlp_grpc_port)
            emitted = app.openinference(QUERY, DOCS_083, ANSWER)
            await app.flush()
            await app.close()
            evaluator = await capture.wait_for_span("openinference.span.kind", "EVALUATOR", timeout=20)
            (log_record,) = await capture.wait_for_logs(1, timeout=20)
            # Out of band: the application's own spans are not forwarded in this mode.
            assert [s.span_id for s in capture.spans] == [evaluator.span_id]
            assert evaluator.trace_id == emitted.trace_id
            assert evaluator.span.parent_span_id.hex() == emitted.retriever_span_id
            (link,) = evaluator.span.links
            assert link.trace_id.hex() == emitted.trace_id and link.span_id.hex() == emitted.retriever_span_id
            a = evaluator.attributes
            assert all(key in a for key in EVAL_KEYS)
            assert a["gen_ai.evaluation.score.value"] == 0.83 and a["gen_ai.evaluation.score.label"] == "high"
            assert a["evaluations.0.evaluation.identifier"] == pipeline.engine.fingerprint
            assert log_record.event_name == "gen_ai.evaluation.result"
            assert log_record.record.trace_id.hex() == emitted.trace_id
            assert log_record.record.span_id.hex() == emitted.retriever_span_id
            assert log_record.attributes["gen_ai.evaluation.score.value"] == 0.83
            assert log_record.attributes["gen_ai.evaluation.name"] == "context_precision"
            assert evaluator.via == downstream and log_record.via == downstream
            # Filed with the app, not under a service of ctxprec's own.
            assert evaluator.resource["service.name"] == "support-bot"
            assert log_record.resource["service.name"] == "support-bot"
            assert evaluator.scope == "ctxprec.evaluator"
            assert a["ctxprec.answer_source"] == "llm_span"
    finally:
        await capture.stop()


@pytest.mark.parametrize("downstream", ["http", "grpc"])
async def test_evaluation_logs_stop_with_one_warning_when_the_backend_takes_no_logs(
        make_stub_judge: MakeStub, downstream: str, caplog: pytest.LogCaptureFixture) -> None:
    stub = await make_stub_judge()
    capture = await OtlpCapture(logs=False).start()
    url = capture.http_url if downstream == "http" else capture.grpc_url
    config = serve_config(*judge_flags(stub), "--forward-to", url, "--write-back", "evaluator")
    caplog.set_level(logging.INFO)
    try:
        async with running(config) as pipeline:
            app = RagApp(protocol="http", port=pipeline.otlp_http_port)
            for i in range(3):
                app.openinference(f"{QUERY} #{i}", DOCS_083, ANSWER)
                await app.flush()
                await wait_until(lambda n=i: len(capture.find_spans("openinference.span.kind", "EVALUATOR")) > n,
                                 what=f"evaluator span {i + 1}")
            await app.close()
            assert pipeline.evaluator is not None and not pipeline.evaluator.logs_enabled
            _, text = await fetch(f"{pipeline.metrics_url}/metrics")
            dropped = value(scrape(text), "ctxprec_export_dropped_total", exporter="evaluator_logs", reason="unsupported")
    finally:
        await capture.stop()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "does not take OTLP logs" in r.getMessage()]
    assert len(warnings) == 1
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert capture.logs == []
    assert dropped >= 1
    if downstream == "http":
        assert capture.log_requests == 1  # probed once, then never again


async def test_evaluation_logs_off_sends_none(make_stub_judge: MakeStub) -> None:
    stub = await make_stub_judge()
    capture = await OtlpCapture().start()
    config = serve_config(*judge_flags(stub), "--forward-to", capture.http_url, "--write-back", "evaluator",
                          "--evaluation-logs", "off")
    try:
        async with running(config) as pipeline:
            app = RagApp(protocol="http", port=pipeline.otlp_http_port)
            app.openinference(QUERY, DOCS_083, ANSWER)
            await app.flush()
            await app.close()
            await capture.wait_for_span("openinference.span.kind", "EVALUATOR", timeout=20)
    finally:
        await capture.stop()
    assert capture.log_requests == 0 and capture.logs == []


async def test_head_sampling_is_deterministic_and_every_retrieval_is_decided(make_stub_judge: MakeStub) -> None:
    stub = await make_stub_judge()
    capture = await OtlpCapture().start()
    config = serve_config(*judge_flags(stub), "--forward-to", capture.http_url, "--sample-rate", "0.4")
    try:
        async with running(config) as pipeline:
            app = RagApp(protocol="http", port=pipeline.otlp_http_port)
            emitted = [app.openinference(f"{QUERY} #{i}", DOCS_050, ANSWER) for i in range(30)]
            await app.flush()
            await app.close()
            await wait_until(lambda: len(capture.spans) >= 90, what="all spans forwarded")
            expected = {e.retriever_span_id for e in emitted
                        if Sampler(0.4).keep_trace(bytes.fromhex(e.trace_id), "support-bot")}
            scored = {s.span_id for s in capture.find_spans("gen_ai.evaluation.name", "context_precision")}
            assert scored == expected and 0 < len(expected) < 30
            assert all(capture.span(s).attributes["ctxprec.sample_rate"] == 0.4 for s in scored)  # type: ignore[union-attr]
            _, text = await fetch(f"{pipeline.metrics_url}/metrics")
            m = scrape(text)
            evaluated = value(m, "ctxprec_samples_total", service="support-bot", decision="evaluated")
            not_sampled = value(m, "ctxprec_samples_total", service="support-bot", decision="not_sampled")
            assert evaluated == len(expected) and evaluated + not_sampled == 30
    finally:
        await capture.stop()


async def test_readyz_fails_while_the_judge_is_unreachable() -> None:
    import socket

    with socket.socket() as s:  # a port that nothing listens on once this closes
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]
    config = serve_config("--judge-model", "openai/stub", "--judge-api-base", f"http://127.0.0.1:{dead_port}/v1",
                          "--judge-api-key", "k")
    async with running(config) as pipeline:
        status, body = await fetch(f"{pipeline.metrics_url}/readyz")
        assert status == 503 and "judge" in body and "Otlp" not in body
        status, _ = await fetch(f"{pipeline.metrics_url}/healthz")
        assert status == 200


async def test_shutdown_decides_in_flight_work_failed_and_still_forwards_it(make_stub_judge: MakeStub) -> None:
    stub = await make_stub_judge(latency_ms=5000)
    capture = await OtlpCapture().start()
    config = serve_config(*judge_flags(stub), "--forward-to", capture.http_url, "--shutdown-timeout", "0.5")
    try:
        async with running(config) as pipeline:
            app = RagApp(protocol="grpc", port=pipeline.otlp_grpc_port)
            emitted = app.openinference(QUERY, DOCS_083, ANSWER)
            await app.flush()
            await app.close()
            await wait_until(lambda: pipeline.workers.in_flight == 1, what="the retrieval with the judge")
            await wait_until(lambda: len(capture.spans) >= 2, what="the unheld spans forwarded")
        # Stopped: the slow judge never answered, so the retrieval was decided failed/shutdown.
        assert pipeline.fanout.counts == {"failed": 1}
        span = await capture.wait_for_span("error.type", "shutdown", timeout=5)
        assert span.span_id == emitted.retriever_span_id
        assert "gen_ai.evaluation.score.value" not in span.attributes
    finally:
        await capture.stop()
