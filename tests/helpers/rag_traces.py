"""RAG traces for the tests and the benchmarks, built in one place: protobuf builders for
hand-made (and hostile) input, realistic traces and whole OTLP requests for the benchmarks, SDK
emitters for real OpenTelemetry traffic, and a collecting RetrievalSink (the downstream stage of
`OtlpIngest`, not the thing under test)."""
from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections import Counter
from typing import Any, Callable, Iterable, Mapping, Sequence

from ctxprec.collector.exporters.attributes import outcome_attributes
from ctxprec.collector.exporters.fanout import ResultFanout
from ctxprec.collector.model import Decision, Outcome, Retrieval
from ctxprec.scorer.precision import summarize
from ctxprec.scorer.result import ScoreResult, Verdict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

QUERY = "How do I reset my password?"
DOCUMENTS = [
    "To reset your password, open Settings > Security and choose Reset password.",
    "Our office is closed on public holidays.",
    "A reset link is emailed to you and expires after 24 hours.",
]
ANSWER = "Open Settings > Security, choose Reset password and follow the emailed link."


def any_value(value: Any) -> AnyValue:
    out = AnyValue()
    if isinstance(value, bool):
        out.bool_value = value
    elif isinstance(value, int):
        out.int_value = value
    elif isinstance(value, float):
        out.double_value = value
    elif isinstance(value, (list, tuple)):
        out.array_value.values.extend(any_value(v) for v in value)
    else:
        out.string_value = str(value)
    return out


def kv(key: str, value: Any) -> KeyValue:
    return KeyValue(key=key, value=any_value(value))


def trace_id(sampled: bool) -> bytes:
    """A trace id that the trace-id sampler keeps at rate 0.5 iff `sampled` (low 8 bytes below
    or above half the hash space)."""
    low = int.from_bytes(os.urandom(8), "big") >> 1
    if not sampled:
        low |= 1 << 63
    return os.urandom(8) + low.to_bytes(8, "big")


def span(trace: bytes, name: str, attributes: dict[str, Any], *, parent: bytes = b"", span_id: bytes | None = None,
         start: int = 1_000, end: int = 2_000, events: Iterable[tuple[str, dict[str, Any]]] = ()) -> Span:
    out = Span(trace_id=trace, span_id=span_id or os.urandom(8), parent_span_id=parent, name=name,
               start_time_unix_nano=start, end_time_unix_nano=end, kind=Span.SPAN_KIND_INTERNAL)
    out.attributes.extend(kv(k, v) for k, v in attributes.items())
    for event_name, event_attrs in events:
        event = out.events.add(name=event_name, time_unix_nano=start)
        event.attributes.extend(kv(k, v) for k, v in event_attrs.items())
    return out


def openinference_retriever(trace: bytes, parent: bytes, documents: Sequence[str] = DOCUMENTS, *,
                            query: str = QUERY, start: int = 1_100) -> Span:
    attrs: dict[str, Any] = {"openinference.span.kind": "RETRIEVER", "input.value": query}
    for i, text in enumerate(documents):
        attrs[f"retrieval.documents.{i}.document.content"] = text
        attrs[f"retrieval.documents.{i}.document.id"] = f"doc-{i}"
        attrs[f"retrieval.documents.{i}.document.score"] = round(1.0 - i / 10, 2)
    return span(trace, "retrieve", attrs, parent=parent, start=start, end=start + 100)


def rag_trace(trace: bytes, *, documents: Sequence[str] = DOCUMENTS, answer: str = ANSWER,
              extra_spans: int = 0) -> list[Span]:
    """Root chain span, an OpenInference retriever, an LLM span after it under the same parent,
    and `extra_spans` plain spans."""
    root = span(trace, "rag.query", {"openinference.span.kind": "CHAIN", "input.value": QUERY,
                                     "output.value": answer}, start=1_000, end=9_000)
    spans = [root, openinference_retriever(trace, root.span_id, documents),
             span(trace, "llm", {"openinference.span.kind": "LLM", "output.value": answer}, parent=root.span_id,
                  start=1_300, end=1_900)]
    spans += [span(trace, f"step-{i}", {"http.method": "GET"}, parent=root.span_id) for i in range(extra_spans)]
    return spans


def request_of(spans: Sequence[Span], *, service: str = "support-bot") -> ExportTraceServiceRequest:
    return request_with([(service, list(spans))])


def request_with(resources: Sequence[tuple[str, Sequence[Span]]], resource_attrs: Mapping[str, str] | None = None
                 ) -> ExportTraceServiceRequest:
    """One request with a resource (named `service`, with `resource_attrs`) per entry."""
    request = ExportTraceServiceRequest()
    for service, spans in resources:
        rs = request.resource_spans.add()
        rs.resource.attributes.append(kv("service.name", service))
        rs.resource.attributes.extend(kv(k, v) for k, v in (resource_attrs or {}).items())
        ss = rs.scope_spans.add()
        ss.scope.name = "tests"
        ss.spans.extend(spans)
    return request


# -- realistic traffic, for the benchmarks ----------------------------------------------------

SPANS_PER_REALISTIC_TRACE = 8
_WORDS = ("password reset account billing invoice refund shipping order login security email "
          "settings profile support ticket subscription plan upgrade cancel device mobile app").split()


def words(rng: random.Random, chars: int) -> str:
    """Words from a small support-desk vocabulary, about `chars` characters of them."""
    out: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(_WORDS)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)


def realistic_rag_trace(rng: random.Random, start: int = 1_764_000_000_000_000_000) -> list[Span]:
    """8 spans as an instrumented RAG service sends them: root chain, embedding, retriever (5
    documents, OpenInference), LLM call, and four plumbing spans (HTTP client, cache, DB,
    guardrail)."""
    trace = rng.randbytes(16)
    query = words(rng, 60)
    answer = words(rng, 400)

    def child(name: str, attrs: dict[str, Any], offset: int, duration: int) -> Span:
        return span(trace, name, attrs, parent=root.span_id, span_id=rng.randbytes(8), start=start + offset,
                    end=start + offset + duration)

    root = span(trace, "rag.query", {"openinference.span.kind": "CHAIN", "input.value": query, "output.value": answer,
                                     "session.id": rng.randbytes(8).hex(), "user.id": f"user-{rng.randrange(10_000)}"},
                span_id=rng.randbytes(8), start=start, end=start + 2_000_000_000)
    retriever: dict[str, Any] = {"openinference.span.kind": "RETRIEVER", "input.value": query}
    for i in range(5):
        retriever[f"retrieval.documents.{i}.document.content"] = words(rng, 500)
        retriever[f"retrieval.documents.{i}.document.id"] = f"kb-{rng.randrange(100_000)}"
        retriever[f"retrieval.documents.{i}.document.score"] = rng.random()
        retriever[f"retrieval.documents.{i}.document.metadata"] = json.dumps(
            {"source": f"kb/{rng.randrange(1000)}.md", "section": rng.randrange(20)})
    spans = [
        root,
        child("embed", {"openinference.span.kind": "EMBEDDING", "embedding.model_name": "text-embedding-3-small",
                        "embedding.embeddings.0.embedding.text": query}, 1_000, 30_000_000),
        child("retrieve", retriever, 40_000_000, 50_000_000),
        child("llm", {"openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini",
                      "llm.input_messages.0.message.role": "system",
                      "llm.input_messages.0.message.content": words(rng, 300),
                      "llm.input_messages.1.message.role": "user", "llm.input_messages.1.message.content": query,
                      "llm.token_count.prompt": 1_800, "llm.token_count.completion": 120, "output.value": answer},
              100_000_000, 1_500_000_000),
        child("POST", {"http.request.method": "POST", "url.full": "https://api.openai.com/v1/chat/completions",
                       "http.response.status_code": 200, "server.address": "api.openai.com"}, 110_000_000, 1_400_000_000),
        child("cache.get", {"db.system": "redis", "db.operation.name": "GET",
                            "db.query.text": "GET answer:" + rng.randbytes(6).hex()}, 2_000, 1_000_000),
        child("SELECT kb", {"db.system": "postgresql", "db.operation.name": "SELECT",
                            "db.query.text": "SELECT id, body FROM kb WHERE id = ANY($1)"}, 60_000_000, 8_000_000),
        child("guardrail", {"openinference.span.kind": "GUARDRAIL", "guardrail.passed": 1}, 1_700_000_000, 20_000_000),
    ]
    assert len(spans) == SPANS_PER_REALISTIC_TRACE
    return spans


Documents = Callable[[], list[tuple[str | None, str]]]  # (document id or None, content), in rank order


def rag_request(rng: random.Random, traces: int, *, resource: Mapping[str, str], documents: Documents,
                retriever: Callable[[], tuple[str, Mapping[str, str]]] = lambda: ("retrieve", {}),
                root_kind: str | None = None) -> bytes:
    """`traces` OpenInference RAG traces (root, retriever, LLM), ended now, in one serialized OTLP
    request. `documents()` gives each retriever's documents, `retriever()` its span's name and
    extra attributes."""
    answer = "Open settings and reset the password."
    request = ExportTraceServiceRequest()
    rs = request.resource_spans.add()
    rs.resource.attributes.extend(kv(key, value) for key, value in resource.items())
    ss = rs.scope_spans.add()
    ss.scope.name = "bench"
    now = time.time_ns()
    for _ in range(traces):
        trace = rng.getrandbits(128).to_bytes(16, "big")
        root_id, retriever_id, llm_id = (rng.getrandbits(64).to_bytes(8, "big") for _ in range(3))
        root = span(trace, "rag", {**({"openinference.span.kind": root_kind} if root_kind else {}),
                                   "output.value": answer}, span_id=root_id, start=now - 50_000_000, end=now)
        name, extra = retriever()
        attrs: dict[str, Any] = {"openinference.span.kind": "RETRIEVER", "input.value": QUERY, **extra}
        for rank, (doc_id, content) in enumerate(documents()):
            if doc_id is not None:
                attrs[f"retrieval.documents.{rank}.document.id"] = doc_id
            attrs[f"retrieval.documents.{rank}.document.content"] = content
        ss.spans.extend([
            root,
            span(trace, name, attrs, parent=root_id, span_id=retriever_id, start=now - 40_000_000, end=now - 30_000_000),
            span(trace, "llm", {"openinference.span.kind": "LLM", "output.value": answer}, parent=root_id,
                 span_id=llm_id, start=now - 25_000_000, end=now - 1_000_000),
        ])
    return request.SerializeToString()


def emit_sdk_rag_trace(tracer: Any, *, documents: Sequence[str] = DOCUMENTS, answer: str = ANSWER) -> tuple[str, str]:
    """Emits a RAG trace through the real OpenTelemetry SDK. Returns (trace id, retriever span id) in hex."""
    with tracer.start_as_current_span("rag.query", attributes={"openinference.span.kind": "CHAIN",
                                                               "input.value": QUERY}) as root:
        attrs: dict[str, Any] = {"openinference.span.kind": "RETRIEVER", "input.value": QUERY}
        for i, text in enumerate(documents):
            attrs[f"retrieval.documents.{i}.document.content"] = text
            attrs[f"retrieval.documents.{i}.document.id"] = f"doc-{i}"
            attrs[f"retrieval.documents.{i}.document.metadata"] = json.dumps({"source": f"kb/{i}.md"})
        with tracer.start_as_current_span("retrieve", attributes=attrs) as retriever:
            pass
        with tracer.start_as_current_span("llm", attributes={"openinference.span.kind": "LLM", "output.value": answer}):
            pass
        root.set_attribute("output.value", answer)
    ctx = retriever.get_span_context()
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


class CollectingSink:
    """A RetrievalSink that keeps what it gets; `decide_all` plays the decision stage, handing
    each outcome to `downstream` (e.g. the span write-back) and releasing the retrieval's input."""

    def __init__(self, downstream: Any = None) -> None:
        self.retrievals: list[Retrieval] = []
        self.not_sampled_counts: Counter[str] = Counter()
        self.fanout = ResultFanout(None, [downstream] if downstream is not None else [])

    def submit(self, retrieval: Retrieval) -> None:
        self.retrievals.append(retrieval)

    def not_sampled(self, service: str, count: int) -> None:
        self.not_sampled_counts[service] += count

    async def wait_retrievals(self, n: int, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.retrievals) < n:
            assert time.monotonic() < deadline, f"waited for {n} retrievals, got {len(self.retrievals)}"
            await asyncio.sleep(0.02)

    def decide_all(self, decision: Decision = Decision.EVALUATED, relevance: Sequence[bool] = (True, False, True)) -> None:
        """Each retrieval gets `decision`; an evaluated one a real score from `relevance`
        (the default gives MAP 0.83 over three contexts)."""
        for retrieval in self.retrievals:
            result = score_of(relevance) if decision is Decision.EVALUATED else None
            record = {"id": retrieval.span_id} if decision in (Decision.EVALUATED, Decision.FAILED) else None
            error = ("judge_error", "test failure") if decision is Decision.FAILED else None
            self.fanout.emit(Outcome(retrieval, decision, result, error, record))


def score_of(relevance: Sequence[bool]) -> ScoreResult:
    summary = summarize(list(relevance))
    verdicts = [Verdict(i, relevant, "relevant" if relevant else "not relevant") for i, relevant in enumerate(relevance)]
    return ScoreResult(score=summary.score, reason=f"The score is {summary.score} because of the test.",
                       verdicts=verdicts, precision_at_k=summary.precision_at_k, hit=summary.hit,
                       first_relevant_rank=summary.first_relevant_rank, relevant_count=summary.relevant_count,
                       k=summary.k, scale=1.0, reference_kind="output")


class DecisionLog:
    """A result sink that notes (span id, decision, attributes written back) per outcome, as the
    span write-back would write them."""

    def __init__(self, entries: list[tuple[str, Decision, Any]], identity: Any = None, threshold: float = 0.5) -> None:
        self.entries = entries
        self.identity = identity
        self.threshold = threshold

    def emit(self, outcome: Outcome) -> None:
        attributes = None
        if self.identity is not None:
            attributes = outcome_attributes(outcome, self.identity, threshold=self.threshold)
        self.entries.append((outcome.retrieval.span_id, outcome.decision, attributes))
