"""One huge agent trace, and a trace whose LLM host's clock is behind, built as OTLP protobuf
from the spans a real framework emitted (tests/fixtures/otlp: Pydantic AI's own
instrumentation), replicated: the shapes and attributes are the captured ones, only ids and
times are new.

The huge trace: one outer agent span over `runs` units of 40 spans each: one run of the support
agent (`invoke_agent` > `chat`, `execute_tool search_docs` (the retrieval), `chat` that answers
from the documents), then nine runs of the weather agent (no retrieval). 500 units make the
20,001-span, 500-retrieval trace of issue 32. Spans are sent as an exporter sends them: ended
ones first (children before parents, the outer span last), in requests of 512 spans."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
from opentelemetry.proto.trace.v1.trace_pb2 import Span

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "otlp"
SUPPORT = "pydantic-ai-genai"  # three runs of the support agent, each retrieving three documents
WEATHER = "pydantic-ai-weather"  # one run of the weather agent: its tool is no retrieval
SPANS_PER_UNIT = 40
WEATHER_RUNS_PER_UNIT = 9
BATCH = 512  # the SDK's default max_export_batch_size
_UNIT_NS = 100_000_000  # 0.1 s of agent work per unit


@dataclass(frozen=True, slots=True)
class Capture:
    resource: Resource
    scope: InstrumentationScope
    runs: list[list[Span]]  # per trace of the capture, its spans in export order (root last)


def capture(folder: str) -> Capture:
    request = ExportTraceServiceRequest.FromString((FIXTURES / folder / "000.pb").read_bytes())
    rs = request.resource_spans[0]
    ss = rs.scope_spans[0]
    runs: dict[bytes, list[Span]] = {}
    for span in ss.spans:
        runs.setdefault(span.trace_id, []).append(span)
    return Capture(rs.resource, ss.scope, list(runs.values()))


def _root(run: list[Span]) -> Span:
    return next(s for s in run if not s.parent_span_id)


def _copy(run: list[Span], trace: bytes, parent: bytes, shift_ns: int) -> list[Span]:
    """The spans of one captured run under `parent` in trace `trace`, new span ids, times moved
    so that the run starts `shift_ns` after the capture's start."""
    ids = {s.span_id: os.urandom(8) for s in run}
    out = []
    for s in run:
        copy = Span()
        copy.CopyFrom(s)
        copy.trace_id = trace
        copy.span_id = ids[s.span_id]
        copy.parent_span_id = ids.get(s.parent_span_id, parent) if s.parent_span_id else parent
        copy.start_time_unix_nano = s.start_time_unix_nano + shift_ns
        copy.end_time_unix_nano = s.end_time_unix_nano + shift_ns
        out.append(copy)
    return out


def huge_trace(units: int = 500) -> tuple[bytes, list[Span]]:
    """A trace of 1 + 40 * `units` spans with `units` retrievals, in export order."""
    support, weather = capture(SUPPORT), capture(WEATHER)
    trace = os.urandom(16)
    outer = Span()
    outer.CopyFrom(_root(support.runs[0]))
    outer.trace_id, outer.span_id = trace, os.urandom(8)
    base = outer.start_time_unix_nano
    spans: list[Span] = []
    weather_run = weather.runs[0]
    weather_start = _root(weather_run).start_time_unix_nano
    for unit in range(units):
        run = support.runs[unit % len(support.runs)]
        at = base + 1_000_000 + unit * _UNIT_NS
        spans += _copy(run, trace, outer.span_id, at - _root(run).start_time_unix_nano)
        for n in range(WEATHER_RUNS_PER_UNIT):
            at_weather = at + (n + 1) * _UNIT_NS // (WEATHER_RUNS_PER_UNIT + 1)
            spans += _copy(weather_run, trace, outer.span_id, at_weather - weather_start)
    outer.end_time_unix_nano = base + (units + 1) * _UNIT_NS
    spans.append(outer)
    return trace, spans


def requests_of(spans: list[Span], resource: Resource | None = None, scope: InstrumentationScope | None = None,
                batch: int = BATCH) -> list[bytes]:
    """The spans as OTLP/HTTP protobuf bodies of `batch` spans, in order."""
    support = capture(SUPPORT)
    out = []
    for start in range(0, len(spans), batch):
        request = ExportTraceServiceRequest()
        rs = request.resource_spans.add()
        rs.resource.CopyFrom(resource or support.resource)
        ss = rs.scope_spans.add()
        ss.scope.CopyFrom(scope or support.scope)
        ss.spans.extend(spans[start:start + batch])
        out.append(request.SerializeToString())
    return out


def skewed_traces(count: int, behind_ms: float = 50.0, early_ms: float = 20.0) -> list[tuple[bytes, list[Span]]]:
    """`count` traces of one support-agent run each, the LLM spans written by a host whose clock
    is `behind_ms` behind the retriever's: the answering `chat` span "starts" `early_ms` before
    the retrieval it consumed (the model call really began `behind_ms - early_ms` after it).
    Returns (trace id, spans in export order) per trace."""
    support = capture(SUPPORT)
    out = []
    for n in range(count):
        run = support.runs[n % len(support.runs)]
        trace = os.urandom(16)
        spans = _copy(run, trace, b"", 0)
        tool = next(s for s in spans if s.name.startswith("execute_tool"))
        chats = [s for s in spans if s.name.startswith("chat")]
        answer = chats[-1]
        # The LLM host's spans, as its clock put them: the answering call began
        # (behind - early) ms after the retrieval started, and reads `early` ms before it.
        shift = tool.start_time_unix_nano + int((behind_ms - early_ms) * 1e6) - answer.start_time_unix_nano
        for chat in chats:
            chat.start_time_unix_nano += shift - int(behind_ms * 1e6)
            chat.end_time_unix_nano += shift - int(behind_ms * 1e6)
        assert answer.start_time_unix_nano == tool.start_time_unix_nano - int(early_ms * 1e6)
        out.append((trace, spans))
    return out
