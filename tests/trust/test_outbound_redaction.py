"""With --redact-pii, personal data in the app's traffic does not leave through anything ctxprec
writes: the attributes it adds in span mode, evaluator spans and logs, score records (the Kafka
results topic writes these), the outcomes every result sink gets, and the log. Real OTLP in and
out, the stub judge over HTTP."""
from __future__ import annotations

import json
import logging
from typing import Any, Awaitable, Callable

import pytest
from ctxprec.collector.model import Outcome
from ctxprec.collector.stub_judge import StubJudge

from tests.collector.rag_app import RagApp, running, serve_config, wait_until
from tests.helpers.otlp_capture import OtlpCapture

MakeStub = Callable[..., Awaitable[StubJudge]]
EMAIL = "jane.doe@example.com"
PHONE = "+44 20 7946 0958"
QUERY = f"Why was the refund for {EMAIL} refused?"
ANSWER = f"The refund for {EMAIL} was refused because the order was older than 30 days; call {PHONE}."
DOCS = [f"Refunds for {EMAIL}: orders older than 30 days are refused.",
        "Our office is closed on public holidays.",
        f"Support line {PHONE} handles refund disputes for {EMAIL}."]
OWN_KEYS = ("gen_ai.evaluation.", "evaluations.", "ctxprec.")


class Recorder:
    """A result sink, as an embedding app would add one."""

    def __init__(self) -> None:
        self.outcomes: list[Outcome] = []

    def emit(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)


def _flags(stub: StubJudge, *more: str) -> list[str]:
    return ["--judge-model", "openai/stub", "--judge-api-base", stub.url, "--judge-api-key", "k", *more]


def _texts_of(outcome: Outcome) -> str:
    r = outcome.retrieval
    parts: list[Any] = [r.query, r.output, r.expected_output, [c.content for c in r.contexts], outcome.record,
                        outcome.error]
    if outcome.result is not None:
        parts += [outcome.result.reason, [v.reason for v in outcome.result.verdicts]]
    return json.dumps(parts, default=str)


@pytest.mark.parametrize("redact", [True, False])
async def test_span_mode_adds_no_personal_data_and_sinks_get_redacted_outcomes(
        make_stub_judge: MakeStub, caplog: pytest.LogCaptureFixture, redact: bool) -> None:
    stub = await make_stub_judge()
    capture = await OtlpCapture().start()
    config = serve_config(*_flags(stub, "--forward-to", capture.http_url, "--write-back", "span",
                                  *(["--redact-pii"] if redact else [])))
    recorder = Recorder()
    caplog.set_level(logging.DEBUG, logger="ctxprec")
    try:
        async with running(config) as pipeline:
            pipeline.add_sink(recorder)
            app = RagApp(protocol="http", port=pipeline.otlp_http_port)
            emitted = app.openinference(QUERY, DOCS, ANSWER)
            await app.flush()
            await app.close()
            await wait_until(lambda: any("gen_ai.evaluation.name" in s.attributes for s in capture.spans),
                             what="the scored span downstream")
            await wait_until(lambda: bool(recorder.outcomes), what="the outcome at the sink")
    finally:
        await capture.stop()
    scored = next(s for s in capture.spans if s.span_id == emitted.retriever_span_id)
    own = {k: v for k, v in scored.attributes.items() if k.startswith(OWN_KEYS)}
    assert own["gen_ai.evaluation.score.value"] is not None
    # The app's own attributes are forwarded as they came: ctxprec does not rewrite the app's spans.
    assert EMAIL in scored.attributes["retrieval.documents.0.document.content"]
    (outcome,) = recorder.outcomes
    sink_text = _texts_of(outcome)
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "scored support-bot" in logged  # the per-score DEBUG line is there to be checked
    if redact:
        assert EMAIL not in json.dumps(own) and PHONE not in json.dumps(own)
        assert EMAIL not in sink_text and PHONE not in sink_text, sink_text
        assert "[EMAIL]" in sink_text  # the contexts the sinks see are the redacted ones
        assert EMAIL not in json.dumps(outcome.record)
        assert EMAIL not in logged
    else:
        # Without redaction the same outcome does carry it: the check above can fail.
        assert EMAIL in sink_text


async def test_evaluator_spans_and_logs_carry_no_personal_data(make_stub_judge: MakeStub) -> None:
    stub = await make_stub_judge()
    capture = await OtlpCapture().start()
    config = serve_config(*_flags(stub, "--forward-to", capture.http_url, "--write-back", "evaluator",
                                  "--evaluation-logs", "on", "--redact-pii"))
    try:
        async with running(config) as pipeline:
            app = RagApp(protocol="grpc", port=pipeline.otlp_grpc_port)
            app.openinference(QUERY, DOCS, ANSWER)
            await app.flush()
            await app.close()
            evaluator = await capture.wait_for_span("openinference.span.kind", "EVALUATOR", timeout=20)
            (log_record,) = await capture.wait_for_logs(1, timeout=20)
    finally:
        await capture.stop()
    assert evaluator.attributes["gen_ai.evaluation.explanation"].startswith("The score is")
    everything = repr([s.span for s in capture.spans]) + repr([entry.__dict__ for entry in capture.logs])
    assert EMAIL not in everything and PHONE not in everything
    assert log_record is not None
