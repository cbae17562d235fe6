"""Answers from GenAI event logs, on captured requests of a real app (tests/fixtures/otlp/README.md):
a LangChain retriever and the OpenAI SDK under `opentelemetry-instrumentation-openai-v2`, whose
prompt and completion travel only as OTLP log records: `gen_ai.client.inference.operation.details`
(`otel-genai-events`) or the v1.30 events `gen_ai.system.message` / `gen_ai.user.message` /
`gen_ai.choice` (`otel-genai-events-legacy`).

The requests go through the receiver's decoder and `OtlpIngest` in either order (the SDK exports
logs and spans on their own schedules): each retrieval gets the answer the app's model returned;
the prompt messages make the chat span the one that consumed the retrieval; unsampled logs are
passed on without a look; logs of a trace already handed out are counted late; the records join
the buffer within its bounds."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ctxprec.collector.assembly import answers, event_logs
from ctxprec.collector.assembly.config import AssemblyConfig
from ctxprec.collector.assembly.ingest import IngestSettings, OtlpIngest
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.model import RetrievedContext
from ctxprec.collector.otlp.signals import LOGS, SIGNALS, TRACES
from ctxprec.collector.receivers.otlp_decode import decode_with_raw
from ctxprec.collector.sampling.sampler import Sampler

from tests.helpers.rag_traces import CollectingSink

ROOT = Path(__file__).resolve().parents[1] / "fixtures"
CASES = ["otel-genai-events", "otel-genai-events-legacy"]


class Forwarded:
    """The forwarder's side of `SignalPassThrough`: what assembly passed on, in order."""

    def __init__(self) -> None:
        self.items: list[tuple[str, bytes, int]] = []

    def pass_signal(self, signal: str, data: bytes, items: int) -> None:
        self.items.append((signal, data, items))


def requests(case: str, signal: str) -> list[tuple[Any, bytes]]:
    prefix = "logs-" if signal == LOGS else ""
    files = sorted(p for p in (ROOT / "otlp" / case).glob("*.pb")
                   if p.name.startswith(prefix) and (signal == LOGS or not p.name.startswith(("logs-", "metrics-"))))
    assert files, f"no {signal} requests in {case}"
    out = []
    for path in files:
        request, raw = decode_with_raw(path.read_bytes(), content_type="application/x-protobuf", content_encoding=None,
                                       max_bytes=1 << 24, signal=SIGNALS[signal])
        assert raw is not None
        out.append((request, raw))
    return out


def app_runs(case: str) -> list[dict[str, Any]]:
    return json.loads((ROOT / "agent_runs" / f"{case}.json").read_text())["runs"]


def make_ingest(rate: float = 1.0, **buffer: Any) -> tuple[OtlpIngest, CollectingSink, Forwarded, Metrics]:
    sink, forwarded, metrics = CollectingSink(), Forwarded(), Metrics()
    ingest = OtlpIngest(keep_trace=Sampler(rate).keep_trace, sink=sink, metrics=metrics, signals=forwarded,
                        settings=IngestSettings(buffer=AssemblyConfig(quiet_period_s=0.0, **buffer)))
    return ingest, sink, forwarded, metrics


async def send(ingest: OtlpIngest, case: str, signals: tuple[str, ...]) -> None:
    for signal in signals:
        for request, raw in requests(case, signal):
            if signal == LOGS:
                await ingest.ingest_signal(LOGS, request, receiver="otlp_http", raw=raw)
            else:
                await ingest.ingest(request, receiver="otlp_http", raw=raw)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("order", [(LOGS, TRACES), (TRACES, LOGS)], ids=["logs-first", "spans-first"])
async def test_the_answer_comes_from_the_chat_spans_event_logs(case: str, order: tuple[str, str]) -> None:
    ingest, sink, forwarded, metrics = make_ingest()
    await send(ingest, case, order)
    assert ingest.flush() == 3
    runs = app_runs(case)
    assert [(r.query, [c.content for c in r.contexts], r.output, r.answer_source) for r in sink.retrievals] == [
        (run["query"], run["contexts"], run["answer"], "llm_span") for run in runs]
    # Every log request went on at once, as it came.
    assert [(signal, data) for signal, data, _ in forwarded.items] == [(LOGS, raw) for _, raw in requests(case, LOGS)]
    assert metrics.registry.get_sample_value("ctxprec_late_log_records_total") == 0


@pytest.mark.parametrize("case", CASES)
async def test_without_its_logs_the_chat_span_has_no_answer(case: str) -> None:
    ingest, sink, _, _ = make_ingest(answer_wait_s=0.0)
    await send(ingest, case, (TRACES,))
    ingest.flush()
    assert len(sink.retrievals) == 3 and {r.output for r in sink.retrievals} == {None}


@pytest.mark.parametrize("case", CASES)
async def test_the_prompt_events_show_the_call_consumed_the_retrieval(case: str) -> None:
    """The chat span's prompt (system message with the contexts) comes from its events, so the
    "consumed the retrieval" rule can see the contexts in it."""
    ingest, sink, _, _ = make_ingest()
    await send(ingest, case, (LOGS, TRACES))
    traces = ingest.buffer.pop_all()
    assert len(traces) == 3
    for trace in traces:
        assert event_logs.apply(trace.spans, trace.log_events) == 1
        [chat] = [s for s in trace.spans if answers.is_llm_span(s)]
        prompt = answers.llm_input_text(chat, answers.llm_rule(chat))
        run = next(r for r in app_runs(case) if r["query"] in prompt)
        assert answers.consumed(prompt, answers.context_needles([RetrievedContext(text) for text in run["contexts"]]))
        assert chat.attributes[event_logs.OUTPUT_KEY][0]["parts"][0]["content"] == run["answer"]


async def test_unsampled_logs_pass_on_without_a_look() -> None:
    ingest, sink, forwarded, _ = make_ingest(rate=0.0)
    await send(ingest, "otel-genai-events", (LOGS, TRACES))
    assert len(ingest.buffer) == 0 and ingest.buffer.bytes == 0
    assert [signal for signal, _, _ in forwarded.items] == [LOGS]
    assert sum(sink.not_sampled_counts.values()) == 3  # the retrievals, counted unsampled


async def test_logs_after_their_trace_was_forgotten_are_counted_late() -> None:
    ingest, sink, forwarded, metrics = make_ingest(answer_wait_s=0.0, late_grace_s=0.0)
    await send(ingest, "otel-genai-events", (TRACES,))
    ingest.flush()
    await send(ingest, "otel-genai-events", (LOGS,))
    assert {r.output for r in sink.retrievals} == {None}
    assert metrics.registry.get_sample_value("ctxprec_late_log_records_total") == 3  # one details record per call
    assert len(ingest.buffer) == 0 and len(forwarded.items) == 1


async def test_logs_after_their_retrievals_were_decided_are_late_answers() -> None:
    """Within the trace's grace the answer's records still join it: the retrievals were scored
    against the query already (decided once), and the answers that came after are counted."""
    ingest, sink, forwarded, metrics = make_ingest(answer_wait_s=0.0)
    await send(ingest, "otel-genai-events", (TRACES,))
    ingest.flush()
    assert len(sink.retrievals) == 3 and len(ingest.buffer) == 0 and ingest.buffer.in_grace == 3
    await send(ingest, "otel-genai-events", (LOGS,))
    ingest.flush()
    assert len(sink.retrievals) == 3 and {r.output for r in sink.retrievals} == {None}
    assert metrics.registry.get_sample_value("ctxprec_late_answers_total") == 3
    assert metrics.registry.get_sample_value("ctxprec_late_log_records_total") == 0


async def test_log_records_join_the_buffer_within_its_bounds() -> None:
    ingest, _, _, metrics = make_ingest(max_traces=1)
    await send(ingest, "otel-genai-events", (LOGS,))
    # Three traces' records, one trace of room: the two oldest are handed out early, counted.
    assert len(ingest.buffer) == 1 and ingest.buffer.bytes > 0
    assert metrics.registry.get_sample_value("ctxprec_trace_evictions_total", {"reason": "max_traces"}) == 2
    assert metrics.registry.get_sample_value("ctxprec_buffered_bytes") == ingest.buffer.bytes


@pytest.mark.parametrize("case", CASES)
def test_each_event_record_is_read_as_its_messages(case: str) -> None:
    [(request, _)] = requests(case, LOGS)
    records = [r for rl in request.resource_logs for sl in rl.scope_logs for r in sl.log_records]
    events = [event_logs.read_event(record, 20_000) for record in records if event_logs.is_genai_event(record)]
    assert all(e is not None for e in events)
    outputs = [m for e in events if e is not None for m in e.outputs]
    assert [m["role"] for m in outputs] == ["assistant"] * 3
    assert [m["parts"][0]["content"] for m in outputs] == [run["answer"] for run in app_runs(case)]
    inputs = [m["role"] for e in events if e is not None for m in e.inputs]
    assert inputs == ["system", "user"] * 3
