"""Traces as production sends them: late, long, never-ending, re-sent (issue 32's table).

Every case is built from a captured trace (`tests/fixtures/otlp/langchain-openinference-genai`:
LangChain under OpenInference, the instrumentor's own spans), cloned with fresh ids, and sent on
a schedule with the real OpenTelemetry SDK exporters (OTLP/HTTP and gRPC, alternating per trace):
the captured spans become SDK `ReadableSpan`s, which the exporter encodes as it would an app's.
Each case's spans carry their own `service.name` (`case-<name>`), so a sidecar's
`ctxprec_samples_total{service}` gives the decisions per case; what the downstream receiver got
gives the forwarded copies, scores and answers per retrieval span.

Used by the slow test (tests/collector/test_arrivals.py, times shortened) and by
bench/arrival_cases.py (the issue's times, before and after).
"""
from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode

CAPTURE = Path(__file__).resolve().parents[1] / "fixtures" / "otlp" / "langchain-openinference-genai" / "000.pb"
RETRIEVER, LLM = "RETRIEVER", "LLM"
HTTP, GRPC = "http", "grpc"


def _plain(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_plain(v) for v in value.array_value.values)
    return None if kind is None else getattr(value, kind)


def _attributes(kvs: Iterable[Any]) -> dict[str, Any]:
    return {kv.key: _plain(kv.value) for kv in kvs}


def _kind(span: Span) -> str:
    return next((kv.value.string_value for kv in span.attributes if kv.key == "openinference.span.kind"), "")


@dataclass(frozen=True)
class Template:
    """One captured trace: its spans (root last), resource attributes and scope."""

    spans: tuple[Span, ...]
    resource: dict[str, Any]
    scope: tuple[str, str]

    @property
    def root(self) -> Span:
        return next(s for s in self.spans if not s.parent_span_id)


def templates() -> list[Template]:
    request = ExportTraceServiceRequest.FromString(CAPTURE.read_bytes())
    out: list[Template] = []
    for rs in request.resource_spans:
        resource = _attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            by_trace: dict[bytes, list[Span]] = {}
            for span in ss.spans:
                by_trace.setdefault(span.trace_id, []).append(span)
            for spans in by_trace.values():
                out.append(Template(tuple(spans), resource, (ss.scope.name, ss.scope.version)))
    return out


@dataclass
class Clone:
    """A template's spans under new ids (one trace, or one step of a longer trace)."""

    spans: list[Span]

    def of_kind(self, kind: str) -> list[Span]:
        return [s for s in self.spans if _kind(s) == kind]

    def without(self, *drop: Span) -> list[Span]:
        ids = {s.span_id for s in drop}
        return [s for s in self.spans if s.span_id not in ids]

    @property
    def root(self) -> Span:
        return next(s for s in self.spans if not s.parent_span_id)


def clone(template: Template, trace_id: bytes, *, shift_ns: int = 0, parent: bytes | None = None,
          keep_root: bool = True) -> Clone:
    """`template`'s spans in trace `trace_id`, with new span ids, times moved by `shift_ns`; with
    `parent`, the template's root is dropped and its children hang under `parent` (one step of
    an agent trace)."""
    ids = {s.span_id: os.urandom(8) for s in template.spans}
    out: list[Span] = []
    for s in template.spans:
        if not s.parent_span_id and parent is not None:
            continue
        copy = Span()
        copy.CopyFrom(s)
        copy.trace_id = trace_id
        copy.span_id = ids[s.span_id]
        if s.parent_span_id:
            copy.parent_span_id = ids.get(s.parent_span_id, s.parent_span_id)
            if parent is not None and s.parent_span_id == template.root.span_id:
                copy.parent_span_id = parent
        copy.start_time_unix_nano = s.start_time_unix_nano + shift_ns
        copy.end_time_unix_nano = s.end_time_unix_nano + shift_ns
        out.append(copy)
    return Clone(out)


def new_trace_id() -> bytes:
    return os.urandom(16)


@dataclass
class Send:
    at: float  # seconds after the run starts
    spans: list[Span]
    protocol: str


@dataclass
class Case:
    name: str
    sends: list[Send] = field(default_factory=list)
    retrievals: set[tuple[str, str]] = field(default_factory=set)  # (trace id, span id) hex
    copies: dict[str, int] = field(default_factory=dict)  # span id hex -> copies sent

    @property
    def service(self) -> str:
        return f"case-{self.name}"

    def add(self, at: float, spans: list[Span], protocol: str) -> None:
        self.sends.append(Send(at, spans, protocol))
        for s in spans:
            self.copies[s.span_id.hex()] = self.copies.get(s.span_id.hex(), 0) + 1
            if _kind(s) == RETRIEVER:
                self.retrievals.add((s.trace_id.hex(), s.span_id.hex()))

    @property
    def spans_sent(self) -> int:
        return sum(self.copies.values())

    @property
    def last_send(self) -> float:
        return max((s.at for s in self.sends), default=0.0)


def _protocol(i: int) -> str:
    return GRPC if i % 2 else HTTP


def _now_ns() -> int:
    return time.time_ns()


def late_retrieval(traces: int, delay_s: float, name: str = "late_retrieval") -> Case:
    """The retrieval span comes `delay_s` after the rest of its trace (another service's batch
    exporter)."""
    case, base = Case(name), templates()
    for i in range(traces):
        c = clone(base[i % len(base)], new_trace_id(), shift_ns=_now_ns() - base[i % len(base)].root.start_time_unix_nano)
        [retriever] = c.of_kind(RETRIEVER)
        case.add(0.0, c.without(retriever), _protocol(i))
        case.add(delay_s, [retriever], _protocol(i + 1))
    return case


def late_answer(traces: int, delay_s: float, name: str = "late_answer") -> Case:
    """The LLM span (the answer) comes `delay_s` after a trace whose root came first (an LLM
    gateway's own exporter)."""
    case, base = Case(name), templates()
    for i in range(traces):
        t = base[i % len(base)]
        c = clone(t, new_trace_id(), shift_ns=_now_ns() - t.root.start_time_unix_nano)
        [llm] = c.of_kind(LLM)
        case.add(0.0, c.without(llm), _protocol(i))
        case.add(delay_s, [llm], _protocol(i + 1))
    return case


def agent_steps(steps: int, every_s: float, *, root_at_end: bool, name: str, per_send: int = 1) -> Case:
    """One trace of `steps` agent steps (a retrieval and the LLM call that used it, with their
    chain spans), `per_send` steps exported every `every_s`; the root is sent after the last step
    (`root_at_end`) or never (a trace that never ends)."""
    case, base = Case(name), templates()
    trace = new_trace_id()
    t0 = base[0]
    root = Span()
    root.CopyFrom(t0.root)
    root.trace_id, root.span_id = trace, os.urandom(8)
    start = _now_ns()
    span_ns = t0.root.end_time_unix_nano - t0.root.start_time_unix_nano
    batch: list[Span] = []
    for step in range(steps):
        t = base[step % len(base)]
        c = clone(t, trace, shift_ns=start + step * span_ns * 2 - t.root.start_time_unix_nano, parent=root.span_id)
        batch.extend(c.spans)
        if len(batch) >= per_send * len(c.spans) or step == steps - 1:
            case.add(step // per_send * every_s, batch, _protocol(step // per_send))
            batch = []
    if root_at_end:
        root.start_time_unix_nano = start
        root.end_time_unix_nano = start + steps * span_ns * 2
        case.add(case.last_send + every_s, [root], HTTP)
    return case


def resent(traces: int, pause_s: float, name: str = "resend") -> Case:
    """A whole trace sent twice, `pause_s` apart (an exporter's retry after a lost acknowledgement)."""
    case, base = Case(name), templates()
    for i in range(traces):
        t = base[i % len(base)]
        c = clone(t, new_trace_id(), shift_ns=_now_ns() - t.root.start_time_unix_nano)
        case.add(0.0, c.spans, _protocol(i))
        case.add(pause_s, list(c.spans), _protocol(i))
    return case


# -- sending with the SDK exporters ---------------------------------------------------------------

def readable(span: Span, resource: dict[str, Any], scope: tuple[str, str]) -> ReadableSpan:
    """A captured span as the SDK holds an ended span, for its exporter to encode."""
    context = SpanContext(int.from_bytes(span.trace_id, "big"), int.from_bytes(span.span_id, "big"), is_remote=False,
                          trace_flags=TraceFlags(TraceFlags.SAMPLED))
    parent = (SpanContext(int.from_bytes(span.trace_id, "big"), int.from_bytes(span.parent_span_id, "big"),
                          is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))
              if span.parent_span_id else None)
    status = Status(StatusCode(span.status.code), span.status.message or None) if span.status.code else Status()
    return ReadableSpan(
        name=span.name, context=context, parent=parent, resource=Resource(resource),
        attributes=_attributes(span.attributes),
        events=[Event(e.name, _attributes(e.attributes), e.time_unix_nano) for e in span.events],
        kind=SpanKind(max(span.kind - 1, 0)), status=status, start_time=span.start_time_unix_nano,
        end_time=span.end_time_unix_nano, instrumentation_scope=InstrumentationScope(*scope))


class Exporters:
    """One OTLP/HTTP and one OTLP/gRPC SDK span exporter into a sidecar."""

    def __init__(self, http_port: int, grpc_port: int) -> None:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpExporter,
        )

        self.by_protocol: dict[str, Any] = {
            HTTP: HttpExporter(endpoint=f"http://127.0.0.1:{http_port}/v1/traces", timeout=30),
            GRPC: GrpcExporter(endpoint=f"127.0.0.1:{grpc_port}", insecure=True, timeout=30),
        }

    def export(self, spans: list[ReadableSpan], protocol: str) -> bool:
        return self.by_protocol[protocol].export(spans) is SpanExportResult.SUCCESS

    def close(self) -> None:
        for exporter in self.by_protocol.values():
            exporter.shutdown()


async def send_all(cases: list[Case], exporters: Exporters, *, on_sent: Callable[[Case, int], None] | None = None
                   ) -> dict[str, int]:
    """Sends every case's spans on its schedule (all cases at once, from now), each export in a
    thread (the SDK exporters block). Returns the spans acknowledged per case; a refused export
    fails the run."""
    scope = templates()[0].scope
    resource_base = templates()[0].resource
    start = time.monotonic()
    acknowledged: dict[str, int] = {case.name: 0 for case in cases}

    async def one(case: Case, send: Send) -> None:
        delay = start + send.at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        resource = {**resource_base, "service.name": case.service}
        spans = [readable(s, resource, scope) for s in send.spans]
        if not await asyncio.to_thread(exporters.export, spans, send.protocol):
            raise AssertionError(f"case {case.name}: an export of {len(spans)} spans was refused")
        acknowledged[case.name] += len(spans)
        if on_sent is not None:
            on_sent(case, len(spans))

    await asyncio.gather(*(one(case, send) for case in cases for send in case.sends))
    return acknowledged


@dataclass
class Tally:
    """What one case came to, from the sidecar's metrics and the downstream receiver."""

    retrievals: int
    decisions: int
    decisions_by_kind: dict[str, int]
    scored_retrievals: int  # retrieval spans forwarded with a score
    answers_used: int  # of those, scored against an LLM span's answer
    spans_sent: int
    spans_forwarded: int
    retrieval_copies_sent: int
    retrieval_copies_scored: int

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def tally(case: Case, samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], forwarded: list[Any]) -> Tally:
    """`samples`: the sidecar's Prometheus samples; `forwarded`: the downstream's CapturedSpans."""
    kinds: dict[str, int] = {}
    for (name, labels), value in samples.items():
        label = dict(labels)
        if name == "ctxprec_samples_total" and label.get("service") == case.service and value:
            kinds[label["decision"]] = kinds.get(label["decision"], 0) + int(value)
    ids = {span_id for _, span_id in case.retrievals}
    mine = [s for s in forwarded if s.resource.get("service.name") == case.service]
    scored = [s for s in mine if s.span_id in ids and "gen_ai.evaluation.score.value" in s.attributes]
    return Tally(
        retrievals=len(case.retrievals), decisions=sum(kinds.values()), decisions_by_kind=kinds,
        scored_retrievals=len({s.span_id for s in scored}),
        answers_used=len({s.span_id for s in scored if s.attributes.get("ctxprec.answer_source") == "llm_span"}),
        spans_sent=case.spans_sent, spans_forwarded=len(mine),
        retrieval_copies_sent=sum(case.copies[i] for i in ids), retrieval_copies_scored=len(scored))
