"""Assembly of sampled traces whose spans arrive in many batches (docs/INTERNALS.md, assembly).

A trace is ready when its root span has arrived (OTLP carries ended spans only) and no span
came for `quiet_period_s`, or `max_wait_s` after its first span. The buffer holds at most
`max_traces` traces and about `max_buffer_mb` of spans (and of the GenAI event log records read
for them, which join their trace whether they come before or after its spans): past either, the
oldest trace is handed out early (partial) and counted in `ctxprec_trace_evictions_total{reason}`.
Ready and evicted traces go into a small LRU of decided trace ids, so a span that arrives after
its trace was handed out is recognised as late instead of starting a new, partial trace.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

from ctxprec.collector.assembly.config import AssemblyConfig
from ctxprec.collector.assembly.spans import SpanRecord
from ctxprec.collector.metrics.registry import Metrics

RECENT_DECISIONS = 100_000  # trace ids remembered as decided, so late spans are recognised
EVICT_MAX_TRACES = "max_traces"
EVICT_MAX_BYTES = "max_bytes"
EVICTION_REASONS = (EVICT_MAX_TRACES, EVICT_MAX_BYTES)


@dataclass(slots=True)
class BufferedTrace:
    trace_id: bytes
    first_seen: float
    last_seen: float
    spans: list[SpanRecord] = field(default_factory=list)
    root_seen: bool = False
    size: int = 0
    # Opaque per-input-message handles (PendingAck) that wait for this trace's decisions.
    acks: list[Any] = field(default_factory=list)
    evicted: str | None = None  # eviction reason when handed out early
    # What GenAI event log records said about the trace's LLM calls (assembly/event_logs.py).
    log_events: list[Any] = field(default_factory=list)


class TraceBuffer:
    def __init__(self, config: AssemblyConfig | None = None, *, metrics: Metrics | None = None,
                 recent_decisions: int = RECENT_DECISIONS, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config or AssemblyConfig()
        self.recent_decisions = recent_decisions
        self._metrics = metrics
        self._clock = clock
        self._traces: OrderedDict[bytes, BufferedTrace] = OrderedDict()  # insertion = first-seen order
        self._recent: OrderedDict[bytes, None] = OrderedDict()
        self._bytes = 0
        self._overflow: list[BufferedTrace] = []
        # Every reason's series exists at 0 from the start (a dashboard shows 0, not "no data");
        # the children are kept, as a flood of new traces can evict on every span.
        self._evictions = ({reason: metrics.trace_evictions.labels(reason=reason) for reason in EVICTION_REASONS}
                           if metrics is not None else {})

    # -- state --

    def __len__(self) -> int:
        return len(self._traces)

    def __contains__(self, trace_id: bytes) -> bool:
        return trace_id in self._traces

    @property
    def bytes(self) -> int:
        return self._bytes

    def is_decided(self, trace_id: bytes) -> bool:
        """True when the trace was already handed out (its later spans are late)."""
        return trace_id in self._recent

    # -- input --

    def add(self, span: SpanRecord, ack: Any = None) -> BufferedTrace:
        """Buffers `span` (the caller has checked `is_decided` first). `ack` is held by the trace
        until it is handed out; the same ack is recorded once per trace."""
        now = self._clock()
        trace = self._traces.get(span.trace_id)
        if trace is None:
            trace = self._traces[span.trace_id] = BufferedTrace(span.trace_id, now, now)
        trace.spans.append(span)
        trace.last_seen = now
        trace.size += span.size
        self._bytes += span.size
        if span.is_root:
            trace.root_seen = True
        if ack is not None and not any(a is ack for a in trace.acks):
            ack.hold()
            trace.acks.append(ack)
        self._enforce_bounds()
        self._update_gauges()
        return trace

    def add_log_events(self, trace_id: bytes, events: list[Any], size: int) -> None:
        """Joins log events to their trace (the caller has checked `is_decided` first), under the
        same bounds as spans. Events that come first start the trace; they never make it wait
        longer (its quiet period counts from its spans)."""
        now = self._clock()
        trace = self._traces.get(trace_id)
        if trace is None:
            trace = self._traces[trace_id] = BufferedTrace(trace_id, now, now)
        trace.log_events.extend(events)
        trace.size += size
        self._bytes += size
        self._enforce_bounds()
        self._update_gauges()

    def _enforce_bounds(self) -> None:
        s = self.config
        while len(self._traces) > s.max_traces:
            self._evict(EVICT_MAX_TRACES)
        # The trace just added goes last among equals: evict older traces first, then itself
        # if it alone is over the byte budget.
        while self._bytes > s.max_buffer_bytes and self._traces:
            self._evict(EVICT_MAX_BYTES)

    def _evict(self, reason: str) -> None:
        trace_id, trace = self._traces.popitem(last=False)
        trace.evicted = reason
        self._hand_out(trace)
        self._overflow.append(trace)
        counter = self._evictions.get(reason)
        if counter is not None:
            counter.inc()

    # -- output --

    def pop_ready(self) -> list[BufferedTrace]:
        """Traces that are complete (root seen and quiet) or waited long enough, plus any that
        were evicted since the last call."""
        now = self._clock()
        s = self.config
        out, self._overflow = self._overflow, []
        ready = [
            trace_id for trace_id, trace in self._traces.items()
            if (trace.root_seen and now - trace.last_seen >= s.quiet_period_s) or now - trace.first_seen >= s.max_wait_s
        ]
        for trace_id in ready:
            trace = self._traces.pop(trace_id)
            self._hand_out(trace)
            out.append(trace)
        if out:
            self._update_gauges()
        return out

    def pop_all(self) -> list[BufferedTrace]:
        """Everything, ready or not (shutdown)."""
        out, self._overflow = self._overflow, []
        while self._traces:
            _, trace = self._traces.popitem(last=False)
            self._hand_out(trace)
            out.append(trace)
        self._update_gauges()
        return out

    def _hand_out(self, trace: BufferedTrace) -> None:
        self._bytes -= trace.size
        self._recent[trace.trace_id] = None
        self._recent.move_to_end(trace.trace_id)
        while len(self._recent) > self.recent_decisions:
            self._recent.popitem(last=False)

    def _update_gauges(self) -> None:
        if self._metrics is not None:
            self._metrics.traces_buffered.set(len(self._traces))
            self._metrics.buffered_bytes.set(self._bytes)
