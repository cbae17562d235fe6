"""OTLP spans -> sampled, assembled traces -> `Retrieval`s (and span-mode forwarding).

The hot path is written for traffic that is 99% unsampled. Per span it reads the trace id and
nothing else; the head decision (`keep_trace`) is made once per trace id per request. A request
with no sampled trace is forwarded as the very bytes that came in, and its retrievals are
counted as `not_sampled` by one pass over those bytes for the markers of every enabled
convention (markers.py, derived from the rules): the exact protobuf encoding of the attributes
that declare a retrieval (OpenInference, GenAI) is counted, no attribute is decoded. Rules that
cannot be recognised from one byte pattern (OpenLLMetry events, Mastra tool spans, user
mappings) fall back to decoding the unsampled spans of a resource, but only when their marker
occurs in it at all. Every retrieval is counted from
the first request on, whatever the service sent before.

Spans of sampled traces are copied into `SpanRecord`s and buffered (trace_buffer.py); each
retrieval is extracted and handed to the `RetrievalSink` once, as its own nest completes (its
answer came, or its deadline passed: a long trace is decided step by step, a late retrieval span
joins its trace), carrying the trace's input acknowledgements (released with the decisions that
leave none of the trace's retrievals waiting). A re-sent span is recognised and never decided
twice. In span mode
every request is handed on to the span write-back (`SpanPassThrough`), naming the retrieval spans
of sampled traces, which wait there for their results; assembly itself never sees a result.

OTLP logs and metrics (`ingest_signal`) are counted and passed on to the forwarder
(`SignalPassThrough`) at once, as they came. On their way, the GenAI event log records of sampled
traces (event_logs.py: an LLM call's answer and prompt, written as logs) join their trace in the
buffer, before or after its spans, and are written on their LLM span when the trace is read. A
request with no GenAI event in its bytes costs one byte search.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Callable

from ctxprec.collector.assembly import event_logs
from ctxprec.collector.assembly.answers import LLM_SPAN, find_answer
from ctxprec.collector.assembly.config import AssemblyConfig
from ctxprec.collector.assembly.conventions import ConventionConfig, Conventions, CountedNests, Extracted
from ctxprec.collector.assembly.markers import MarkerScanner
from ctxprec.collector.assembly.silence import ConventionStats, TraceSeen
from ctxprec.collector.assembly.spans import SpanRecord, bare_record, span_record
from ctxprec.collector.assembly.trace_buffer import BufferedTrace, TraceBuffer
from ctxprec.collector.assembly.trace_tree import TraceTree
from ctxprec.collector.components import (
    Deadline,
    RetrievalSink,
    SignalPassThrough,
    SpanPassThrough,
    cancelled,
)
from ctxprec.collector.loop_turns import CHUNK, LoopTurns
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.model import Countdown, HeldSpan, PendingAck
from ctxprec.collector.otlp.signals import LOGS, SIGNALS
from ctxprec.collector.otlp.values import attributes_dict, service_name
from ctxprec.collector.otlp.wire import resource_ranges
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)

log = logging.getLogger(__name__)

_UNSAMPLED, _BUFFER, _LATE = 0, 1, 2
_TRACE_ID = attrgetter("trace_id")
_RESOURCE_VALUE_CHARS = 1024  # resource attributes are names and versions, not payloads


@dataclass(slots=True)
class IngestSettings:
    conventions: ConventionConfig = field(default_factory=ConventionConfig)
    buffer: AssemblyConfig = field(default_factory=AssemblyConfig)
    flush_interval_s: float = 0.1

    def __post_init__(self) -> None:
        if self.flush_interval_s <= 0:
            raise ValueError(f"flush_interval_s: must be positive, got {self.flush_interval_s}")


class OtlpIngest:
    def __init__(self, *, keep_trace: Callable[[bytes, str], bool], sink: RetrievalSink | None, metrics: Metrics,
                 settings: IngestSettings | None = None, passthrough: SpanPassThrough | None = None,
                 signals: SignalPassThrough | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        """`passthrough` set = span mode (every received span goes downstream); `signals` takes
        the OTLP logs and metrics on (without it they are counted and go no further)."""
        self.settings = settings or IngestSettings()
        self._keep = keep_trace
        self._sink = sink
        self._metrics = metrics
        self._passthrough = passthrough
        self._signals = signals
        self._clock = clock
        self.conventions = Conventions(self.settings.conventions,
                                       clock_tolerance_s=self.settings.buffer.clock_tolerance_s)
        self.buffer = TraceBuffer(self.settings.buffer, metrics=metrics, clock=clock)
        self._max_chars = self.settings.conventions.max_attribute_chars
        self._received: dict[str, Any] = {}
        self._signals_received: dict[tuple[str, str], Any] = {}
        self._task: asyncio.Task[None] | None = None
        self._ready: deque[BufferedTrace] = deque()  # taken from the buffer, not yet handed out
        self._markers = MarkerScanner(self.conventions.rules)
        self._counted = CountedNests()
        self.stats = ConventionStats(metrics, tools_on=self.conventions.tools_on)

    @property
    def span_mode(self) -> bool:
        return self._passthrough is not None

    # -- the hot path --

    async def ingest(self, request: ExportTraceServiceRequest, *, receiver: str, raw: bytes | None = None,
                     ack: PendingAck | None = None) -> None:
        """Takes one decoded request. `raw` is its uncompressed protobuf encoding when the caller
        has it (forwarded as is when nothing in it is held; without it the request is encoded
        once). Counts the spans under `receiver`. `ack` (a PendingAck) is held by each sampled
        trace until its retrievals are decided. In span mode the request goes on to the span
        write-back, which may cut the held retrieval spans out of it."""
        routes: dict[bytes, int] = {}
        routed: list[tuple[int, Any, Any, str, int]] = []
        total = 0
        turns = LoopTurns()
        for ri, rs in enumerate(request.resource_spans):
            service = service_name(rs.resource)
            for ss in rs.scope_spans:
                spans = ss.spans
                count = len(spans)
                total += count
                # In chunks, the loop shared between them: a request of 100,000 spans must not
                # hold /healthz and the other clients (loop_turns.py). The usual request is one chunk.
                for start in range(0, count, CHUNK):
                    part = spans if count <= CHUNK else spans[start:start + CHUNK]
                    # One pass over the spans for their ids (reading a span is what costs: each read
                    # makes a message object); routing is Python work per trace, not per span.
                    ids = list(map(_TRACE_ID, part))
                    hit = False
                    for trace_id in set(ids):
                        route = routes.get(trace_id)
                        if route is None:
                            route = routes[trace_id] = self._route(trace_id, service, receiver)
                        if route:
                            hit = True
                    if hit:  # only the routed spans are read again
                        routed.extend((ri, ss, part[i], service, route) for i, trace_id in enumerate(ids)
                                      if (route := routes[trace_id]))
                    await turns.share()
        counter = self._received.get(receiver)
        if counter is None:
            counter = self._received[receiver] = self._metrics.spans_received.labels(receiver=receiver)
        counter.inc(total)
        if total == 0:
            return

        data = raw
        if data is None and (self._passthrough is not None or self._sink is not None):
            data = request.SerializeToString()
        held = await self._take_routed(request, routed, data, ack, turns) if routed else []
        if not routed and self._sink is not None and data is not None:
            await self._count_not_sampled(request, data, {}, set(), turns)
        if self._passthrough is not None:
            self._passthrough.pass_through(request, data, total, held)

    async def ingest_signal(self, signal: str, request: Any, *, receiver: str, raw: bytes | None = None) -> None:
        """Takes one decoded logs or metrics request: counts its items under `receiver`, reads the
        GenAI events of sampled traces out of a logs request, and passes it on as it came."""
        items = SIGNALS[signal].count(request)
        counter = self._signals_received.get((signal, receiver))
        if counter is None:
            counter = self._signals_received[signal, receiver] = self._metrics.signal_received(signal, receiver)
        counter.inc(items)
        if items == 0:
            return
        data = raw if raw is not None else request.SerializeToString()
        if signal == LOGS and self._sink is not None and event_logs.MARKER in data:
            await self._read_log_events(request, receiver)
        if self._signals is not None:
            self._signals.pass_signal(signal, data, items)

    async def _read_log_events(self, request: Any, receiver: str) -> None:
        """The GenAI events of sampled traces join their trace; those of a trace already handed
        out are late (counted: their answer was not used). As for spans, a record is read past
        its trace id only when its trace is routed."""
        turns = LoopTurns()
        routes: dict[bytes, int] = {}
        for rl in request.resource_logs:
            service = service_name(rl.resource)
            for sl in rl.scope_logs:
                records = sl.log_records
                for start in range(0, len(records), CHUNK):
                    part = records if len(records) <= CHUNK else records[start:start + CHUNK]
                    ids = list(map(_TRACE_ID, part))
                    hit = False
                    for trace_id in set(ids):
                        route = routes.get(trace_id)
                        if route is None:
                            route = routes[trace_id] = (self._route(trace_id, service, receiver)
                                                        if len(trace_id) == 16 and any(trace_id) else _UNSAMPLED)
                        if route:
                            hit = True
                    for i in [i for i, trace_id in enumerate(ids) if routes[trace_id]] if hit else ():
                        record, trace_id = part[i], ids[i]
                        if not event_logs.is_genai_event(record):
                            continue
                        if routes[trace_id] == _LATE:
                            self._metrics.late_log_records.inc()
                            continue
                        event = event_logs.read_event(record, self._max_chars)
                        if event is not None:
                            self.buffer.add_log_events(trace_id, [event], event.size)
                    await turns.share()

    def _route(self, trace_id: bytes, service: str, receiver: str) -> int:
        buffer = self.buffer
        if trace_id in buffer:
            return _BUFFER
        if buffer.is_decided(trace_id):
            return _LATE
        if not self._keep(trace_id, service):
            return _UNSAMPLED
        if len(trace_id) == 16 and any(trace_id):
            return _BUFFER
        # An empty or malformed id would merge unrelated spans into one "trace".
        self._metrics.receiver_errors.labels(receiver=receiver, reason="invalid_trace_id").inc()
        return _UNSAMPLED

    async def _take_routed(self, request: ExportTraceServiceRequest, routed: list[tuple[int, Any, Any, str, int]],
                           data: bytes | None, ack: Any, turns: LoopTurns) -> list[HeldSpan]:
        """Copies the spans of sampled traces into the buffer; in span mode, returns their
        retrieval spans, to be held until scored."""
        span_mode = self._passthrough is not None
        fast_routed: dict[tuple[int, int], int] = {}
        routed_ids: set[tuple[bytes, bytes]] = set()
        held: list[HeldSpan] = []
        resources: dict[int, dict[str, Any]] = {}
        for n, (ri, ss, span, service, route) in enumerate(routed, 1):
            if n % CHUNK == 0:
                await turns.share()
            resource = resources.get(ri)
            if resource is None:
                resource = resources[ri] = attributes_dict(request.resource_spans[ri].resource.attributes,
                                                           _RESOURCE_VALUE_CHARS)
            record = span_record(span, service, self._max_chars, resource)
            routed_ids.add((record.trace_id, record.span_id))
            for index in self._markers.declared_counts(record.name, record.attributes):
                fast_routed[ri, index] = fast_routed.get((ri, index), 0) + 1
            if route == _LATE:
                self._metrics.late_spans.inc()
                continue
            retrieval = self.conventions.is_retrieval(record)
            fresh = self.buffer.add(record, ack, retrieval=retrieval)
            if not fresh:
                self._metrics.resent_spans.inc()
            if span_mode and retrieval:
                held.append(HeldSpan(record.trace_id, record.span_id, span, ss, request.resource_spans[ri],
                                     resent=not fresh))
        if self._sink is not None and data is not None:
            await self._count_not_sampled(request, data, fast_routed, routed_ids, turns)
        return held

    async def _count_not_sampled(self, request: ExportTraceServiceRequest, data: bytes,
                                 fast_routed: dict[tuple[int, int], int], routed_ids: set[tuple[bytes, bytes]],
                                 turns: LoopTurns) -> None:
        """Counts the retrievals among the spans that were not routed to the buffer, for every
        enabled rule: one marker pass over the request bytes gives exact counts of the spans
        that declare themselves retrievals (less those routed, in `fast_routed`); a resource
        where another rule's marker occurs, or where the bytes do not read plainly, gets a
        per-span look instead."""
        assert self._sink is not None
        resources = request.resource_spans
        ranges: list[tuple[int, int]] | None = [(0, len(data))]
        if len(resources) > 1:
            ranges = resource_ranges(data)
            if ranges is None or len(ranges) != len(resources):
                ranges = None
        if ranges is not None:
            counts = self._markers.scan(data, ranges)
        else:  # bytes not in the canonical layout: each resource re-encoded on its own
            counts = [self._markers.scan(chunk, [(0, len(chunk))])[0]
                      for chunk in (rs.SerializeToString() for rs in resources)]
        for ri, count in enumerate(counts):
            if fast_routed:
                indices = set(count.exact) | {index for r, index in fast_routed if r == ri}
                exact = [count.exact.get(i, 0) - fast_routed.get((ri, i), 0) for i in indices]
            else:
                exact = list(count.exact.values())
            # < 0: a routed retrieval the bytes did not show
            if count.needs_look or any(n < 0 for n in exact) or (
                    exact and self._counted.pending and self._waited_for(data, ranges, ri, resources[ri])):
                total = await self._scan_unsampled(resources[ri], routed_ids, turns)
            else:
                total = sum(exact)
                if total > 0:
                    self._note_counted(resources[ri], count.exact, fast_routed, ri)
            if total > 0:
                self._sink.not_sampled(service_name(resources[ri].resource), total)

    def _note_counted(self, rs: Any, exact: dict[int, int], fast_routed: dict[tuple[int, int], int], ri: int) -> None:
        """Spans counted by their bytes, under the convention whose marker counted them."""
        service = service_name(rs.resource)
        for index, hits in exact.items():
            hits -= fast_routed.get((ri, index), 0)
            if hits > 0:
                self.stats.counted(service, self._markers.count_names[index], hits)

    def _waited_for(self, data: bytes, ranges: list[tuple[int, int]] | None, ri: int, rs: Any) -> bool:
        """A resource holds the outer span of a nest counted in an earlier request."""
        if ranges is None:
            return self._counted.waited_for_in(rs.SerializeToString())
        start, end = ranges[ri]
        return self._counted.waited_for_in(memoryview(data)[start:end] if (start, end) != (0, len(data)) else data)

    async def _scan_unsampled(self, rs: Any, routed_ids: set[tuple[bytes, bytes]], turns: LoopTurns) -> int:
        """Retrievals among a resource's spans that were not routed, by the extraction rules
        (nested retrieval spans count once, also when the nest came in two requests). Long values
        are kept whole: whether a span carries documents can depend on a JSON value's shape."""
        service = service_name(rs.resource)
        records: list[SpanRecord] = []
        may_hold = self._markers.may_hold_retrieval
        for ss in rs.scope_spans:
            for n, span in enumerate(ss.spans, 1):
                if (span.trace_id, span.span_id) not in routed_ids:
                    # Agent traces are mostly model and agent spans: only the ones with a marker
                    # are decoded, the others kept as links of the trace's tree.
                    records.append(span_record(span, service, self._max_chars) if may_hold(span.SerializeToString())
                                   else bare_record(span, service))
                if n % CHUNK == 0:
                    await turns.share()
        if not records:
            return 0
        seen = TraceSeen()
        total = self.conventions.count(records, self._counted, seen)
        self.stats.add(seen)
        return total

    # -- ready traces --

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._flush_loop(), name="otlp-ingest-flush")

    async def finish(self, deadline: Deadline) -> None:
        """Hands every buffered trace to the sink now: no more spans can come for them (the
        receivers finished first), and scoring has what is left of the deadline for them."""
        await cancelled(self._task)
        self._task = None
        self._ready.extend(self.buffer.pop_all())
        while self._ready:
            self._finish(self._ready.popleft())

    async def close(self) -> None:
        return None

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.flush_interval_s)
            try:
                await self._hand_out_ready()
            except Exception:  # one bad trace must not stop assembly for all the others
                log.exception("trace assembly flush failed")

    async def _hand_out_ready(self) -> None:
        """Hands out the ready traces, sharing the loop: a flood of new traces can evict
        thousands at once. Popped traces wait in `_ready`, so that none is lost if the task is
        cancelled between two of them (finish hands out the rest)."""
        self._ready.extend(self.buffer.pop_ready())
        turns = LoopTurns()
        while self._ready:
            trace = self._ready[0]
            # A trace of 20,000 spans is read in slices of the loop (conventions.extract_sharing);
            # it leaves `_ready` only once read, so a cancel in between loses nothing.
            started = time.perf_counter()
            read = await self._extract_sharing(trace, turns)
            if not self._ready or self._ready[0] is not trace:
                continue  # handed out meanwhile (a `flush()` while this one shared the loop)
            self._ready.popleft()
            self._finish(trace, read)
            trace.look_s = time.perf_counter() - started  # paces the next look while it grows
            await turns.share()

    def flush(self) -> int:
        """Processes ready traces now, in one go; returns the number of traces handed out."""
        self._ready.extend(self.buffer.pop_ready())
        count = len(self._ready)
        while self._ready:
            self._finish(self._ready.popleft())
        return count

    async def _extract_sharing(self, trace: BufferedTrace, turns: LoopTurns) -> tuple[list[Extracted], TraceSeen]:
        seen = TraceSeen()
        try:
            if trace.log_events:
                event_logs.apply(trace.spans, trace.log_events)
            return await self.conventions.extract_sharing(trace.spans, seen, turns, trace.decided), seen
        except Exception:
            log.exception("retrieval extraction failed for trace %s", trace.trace_id.hex())
            return [], seen

    def _finish(self, trace: BufferedTrace, read: tuple[list[Extracted], TraceSeen] | None = None) -> None:
        """Decides the retrievals of `trace` whose nest is complete (each once in the trace's
        life): one with an LLM span's answer (or needing none) once the trace is quiet or a quiet
        period after its span came, any one at its deadline (`answer_wait_s`, at most
        `max_wait_s`, from its span's arrival), all of them when the trace is handed out for
        good. The others wait for a later look. `read`: the trace's retrievals and survey when
        already read (`_extract_sharing`, sharing the loop)."""
        buffer = self.buffer
        config = buffer.config
        now = self._clock()
        complete = trace.final or buffer.complete(trace, now)
        quiet = complete or now - trace.last_seen >= config.quiet_period_s
        survey = complete and not trace.surveyed
        if read is not None:
            extracted, seen = read
        else:
            seen = TraceSeen()
            try:
                if trace.log_events:
                    event_logs.apply(trace.spans, trace.log_events)
                extracted = self.conventions.extract(trace.spans, seen if survey else None, trace.decided)
            except Exception:
                log.exception("retrieval extraction failed for trace %s", trace.trace_id.hex())
                extracted = []
        if trace.unanswered:
            self._late_answers(trace)
        wait = min(config.answer_wait_s, config.max_wait_s)
        ready: list[Any] = []
        due: float | None = None
        for item in extracted:
            span_id = item.span.span_id
            if span_id in trace.decided or not trace.decided.isdisjoint(item.inner):
                continue  # decided already (a nest whose outer span came later is the same retrieval)
            retrieval = item.retrieval
            needs_answer = bool(retrieval.contexts or retrieval.textless)
            arrived = min((trace.arrivals.get(i, trace.first_seen) for i in (span_id, *item.inner)),
                          default=trace.first_seen)
            deadline = arrived + wait
            # Complete: its answer (or no need of one), and a quiet period since its span came or
            # since the trace's last span (a refine chain's later calls come within it).
            settled = quiet or now - arrived >= config.quiet_period_s
            if trace.final or now >= deadline or (settled and (not needs_answer or retrieval.answer_source == LLM_SPAN)):
                ready.append(item)
            else:
                due = deadline if due is None else min(due, deadline)
        if survey:
            trace.surveyed = True
            self.stats.trace(trace.spans, len(extracted) + len(trace.decided), seen)
        # The messages that brought the trace's spans are acknowledged with the last decisions
        # of what they brought: held while a retrieval of the trace still waits.
        acks: list[Any] = []
        if due is None:
            acks, trace.acks = trace.acks, []
        countdown = Countdown(len(ready), acks)
        for item in ready:
            trace.decided.add(item.span.span_id)
            if item.dropped_contexts:
                self._metrics.contexts_dropped.inc(item.dropped_contexts)
            retrieval = item.retrieval
            if retrieval.answer_source != LLM_SPAN and (retrieval.contexts or retrieval.textless) and not trace.final:
                trace.unanswered.append(item)
            retrieval.ack = countdown
            if self._sink is None:
                countdown.release()
                continue
            try:
                self._sink.submit(retrieval)
            except Exception:
                # The sink must not raise; if it does, the input is released all the same.
                log.exception("retrieval sink refused trace %s span %s", retrieval.trace_id, retrieval.span_id)
                if retrieval.ack is not None:
                    retrieval.ack = None
                    countdown.release()
        if not trace.final:
            buffer.looked_at(trace, due)
        if self._passthrough is not None:
            # Held spans of this trace that are not retrievals in the sink's hands go on unscored:
            # the inner spans of decided nests now, the rest when the trace is done with.
            if trace.final or trace.done:
                self._passthrough.trace_done(trace.trace_id, trace.decided)
            else:
                inner = {i for item in ready for i in item.inner}
                if inner:
                    self._passthrough.nest_done(trace.trace_id, inner)

    def _late_answers(self, trace: BufferedTrace) -> None:
        """Retrievals decided without an LLM span's answer whose answer has come since (counted
        `ctxprec_late_answers_total`: scored against the query, the answer came too late)."""
        tree = TraceTree(trace.spans)
        waiting = []
        for item in trace.unanswered:
            try:
                answer = find_answer(item.span, item.retrieval.contexts or item.retrieval.textless, tree,
                                     self.conventions.tolerance_ns)
            except Exception:
                log.exception("late answer check failed for trace %s", trace.trace_id.hex())
                continue
            if answer.source == LLM_SPAN:
                self._metrics.late_answers.inc()
            else:
                waiting.append(item)
        trace.unanswered = waiting
