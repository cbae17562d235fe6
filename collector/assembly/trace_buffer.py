"""The state of sampled traces whose spans arrive in many batches (docs/INTERNALS.md, assembly).

A trace is never one unit that must end: assembly looks at a trace (`pop_ready`) whenever it may
hold a retrieval to decide, and decides each retrieval as its own nest completes (ingest.py).
The buffer says when a look is due:

- `complete`: the root span arrived (OTLP carries ended spans only) and no span came for
  `quiet_period_s`, or `max_wait_s` passed since the trace's first span;
- new spans came and the trace has been quiet for `quiet_period_s`, or a look is
  `quiet_period_s` old (a trace that never ends, one agent step a second, is looked at every
  quiet period, not never);
- a retrieval's own deadline passed (`due`, set by the last look: its span's arrival plus
  `answer_wait_s`).

A trace with nothing left to decide stays `late_grace_s` past its last span (in grace), so that a
retrieval span arriving after its trace was assembled is decided like any other and a re-sent span
is recognised (`add` returns False: forwarded, never decided twice). The buffer holds at most
`max_traces` traces and about `max_buffer_mb` of spans (and of the GenAI event log records read
for them, which join their trace whether they come before or after its spans), traces in grace
included: past either, traces in grace are dropped first (oldest first), then the oldest trace
being assembled is handed out early (its retrievals decided now, partial) and counted in
`ctxprec_trace_evictions_total{reason}`; its later spans start its state again, knowing which of
its retrievals were decided (a trace longer than the buffer is decided step by step, within the
byte bound). Traces past their grace go into a small LRU of decided trace ids, so a span that
arrives after that is recognised as late instead of starting a new, partial trace.
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
# Evicted traces whose decided retrievals are remembered, so the rest of a trace too long for the
# buffer goes on being decided (never a retrieval twice); each costs its few retrieval span ids.
EVICTED_REMEMBERED = 10_000
EVICT_MAX_TRACES = "max_traces"
EVICT_MAX_BYTES = "max_bytes"
EVICTION_REASONS = (EVICT_MAX_TRACES, EVICT_MAX_BYTES)
LOOK_PACING = 10  # a growing trace's next look waits at least this many times its last look's cost


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
    span_ids: set[bytes] = field(default_factory=set)  # for re-sent spans
    # When each retrieval span arrived (its answer deadline counts from there).
    arrivals: dict[bytes, float] = field(default_factory=dict)
    changed: bool = True  # spans or events came since the last look
    looked_at: float = 0.0
    look_s: float = 0.0  # how long the last look took (a trace still growing is looked at paced by it)
    due: float | None = None  # the earliest deadline of a retrieval still waiting
    done: bool = False  # nothing left to decide: in grace
    final: bool = False  # handed out for good (evicted, shut down): decide everything now
    # Kept by assembly between looks (ingest.py): the retrievals decided, and the ones decided
    # without an LLM span's answer (a later one is counted as a late answer).
    decided: set[bytes] = field(default_factory=set)
    unanswered: list[Any] = field(default_factory=list)
    surveyed: bool = False  # what the trace showed was counted (silence.py)


class TraceBuffer:
    def __init__(self, config: AssemblyConfig | None = None, *, metrics: Metrics | None = None,
                 recent_decisions: int = RECENT_DECISIONS, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config or AssemblyConfig()
        self.recent_decisions = recent_decisions
        self._metrics = metrics
        self._clock = clock
        self._traces: OrderedDict[bytes, BufferedTrace] = OrderedDict()  # insertion = first-seen order
        self._grace: OrderedDict[bytes, BufferedTrace] = OrderedDict()  # in order of entering grace
        self._recent: OrderedDict[bytes, None] = OrderedDict()
        self._evicted: OrderedDict[bytes, set[bytes]] = OrderedDict()  # trace id -> its decided retrievals
        self._bytes = 0
        self._overflow: list[BufferedTrace] = []
        # Every reason's series exists at 0 from the start (a dashboard shows 0, not "no data");
        # the children are kept, as a flood of new traces can evict on every span.
        self._evictions = ({reason: metrics.trace_evictions.labels(reason=reason) for reason in EVICTION_REASONS}
                           if metrics is not None else {})

    # -- state --

    def __len__(self) -> int:
        """Traces being assembled (not those in grace)."""
        return len(self._traces)

    def __contains__(self, trace_id: bytes) -> bool:
        return trace_id in self._traces or trace_id in self._grace

    @property
    def bytes(self) -> int:
        return self._bytes

    @property
    def in_grace(self) -> int:
        return len(self._grace)

    def is_decided(self, trace_id: bytes) -> bool:
        """True when the trace was handed out for good (its later spans are late)."""
        return trace_id in self._recent

    # -- input --

    def add(self, span: SpanRecord, ack: Any = None, *, retrieval: bool = False) -> bool:
        """Buffers `span` (the caller has checked `is_decided` first); False, and nothing kept,
        when the trace holds a span of the same id already (a re-send). `retrieval`: the span
        is one (its arrival starts its answer wait). `ack` is held by the trace until its
        retrievals are decided; the same ack is recorded once per trace."""
        now = self._clock()
        known = self._traces.get(span.trace_id) or self._grace.get(span.trace_id)
        if known is not None and span.span_id in known.span_ids:
            return False
        trace = self._trace(span.trace_id, now)
        trace.span_ids.add(span.span_id)
        if trace.surveyed and self._metrics is not None:  # it was complete: before, a late span
            self._metrics.late_spans_joined.inc()
        trace.spans.append(span)
        trace.last_seen = now
        trace.changed = True
        trace.size += span.size
        self._bytes += span.size
        if retrieval:
            trace.arrivals.setdefault(span.span_id, now)
        if span.is_root:
            trace.root_seen = True
        if ack is not None and not any(a is ack for a in trace.acks):
            ack.hold()
            trace.acks.append(ack)
        self._enforce_bounds()
        self._update_gauges()
        return True

    def add_log_events(self, trace_id: bytes, events: list[Any], size: int) -> None:
        """Joins log events to their trace (the caller has checked `is_decided` first), under the
        same bounds as spans. Events that come first start the trace; they never make it wait
        longer (its quiet period counts from its spans)."""
        trace = self._trace(trace_id, self._clock())
        trace.log_events.extend(events)
        trace.changed = True
        trace.size += size
        self._bytes += size
        self._enforce_bounds()
        self._update_gauges()

    def _trace(self, trace_id: bytes, now: float) -> BufferedTrace:
        trace = self._traces.get(trace_id)
        if trace is None:
            trace = self._grace.pop(trace_id, None)
            if trace is not None:  # a late span: the trace is being assembled again
                trace.done = False
            else:
                trace = BufferedTrace(trace_id, now, now, looked_at=now)
                decided = self._evicted.pop(trace_id, None)
                if decided is not None:  # the rest of an evicted trace: its decisions carry on
                    trace.decided = decided
                    trace.surveyed = True
            self._traces[trace_id] = trace
        return trace

    def _enforce_bounds(self) -> None:
        s = self.config
        while len(self._traces) + len(self._grace) > s.max_traces:
            if not self._drop_grace():
                self._evict(EVICT_MAX_TRACES)
        # The trace just added goes last among equals: evict older traces first, then itself
        # if it alone is over the byte budget.
        while self._bytes > s.max_buffer_bytes and (self._traces or self._grace):
            if not self._drop_grace():
                self._evict(EVICT_MAX_BYTES)

    def _drop_grace(self) -> bool:
        if not self._grace:
            return False
        _, trace = self._grace.popitem(last=False)
        self._forget(trace)
        return True

    def _evict(self, reason: str) -> None:
        trace_id, trace = self._traces.popitem(last=False)
        trace.evicted = reason
        trace.final = True
        # Not forgotten as late: its later spans start its state again, which knows what was
        # decided (the set is filled when the evicted part is decided, before any later look).
        self._bytes -= trace.size
        self._evicted[trace_id] = trace.decided
        self._evicted.move_to_end(trace_id)
        while len(self._evicted) > EVICTED_REMEMBERED:
            self._evicted.popitem(last=False)
        self._overflow.append(trace)
        counter = self._evictions.get(reason)
        if counter is not None:
            counter.inc()

    # -- output --

    def complete(self, trace: BufferedTrace, now: float | None = None) -> bool:
        """Root seen and quiet, or waited `max_wait_s` since its first span."""
        now = self._clock() if now is None else now
        s = self.config
        return ((trace.root_seen and now - trace.last_seen >= s.quiet_period_s)
                or now - trace.first_seen >= s.max_wait_s)

    def pop_ready(self) -> list[BufferedTrace]:
        """Traces to look at now (they stay buffered: `looked_at` says what the look found), plus
        those evicted since the last call (`final`, no longer buffered). Traces whose grace is
        over are dropped."""
        now = self._clock()
        s = self.config
        out, self._overflow = self._overflow, []
        for trace in self._traces.values():
            if trace.changed:
                # A trace still growing is looked at again a quiet period later, or later still
                # when a look costs much (LOOK_PACING): a 20,000-span trace sent over seconds
                # spends a bounded share of that time on looks, not a look per quiet period.
                again = max(s.quiet_period_s, LOOK_PACING * trace.look_s)
                ready = (now - trace.last_seen >= s.quiet_period_s or now - trace.looked_at >= again
                         or self.complete(trace, now))
            elif trace.due is not None:
                ready = now >= trace.due
            else:  # nothing waits: once complete, the trace goes into grace
                ready = self.complete(trace, now)
            if ready:
                out.append(trace)
        while self._grace:
            trace = next(iter(self._grace.values()))
            if now - trace.last_seen < s.late_grace_s:
                break
            self._grace.popitem(last=False)
            self._forget(trace)
        if out or self._overflow:
            self._update_gauges()
        return out

    def looked_at(self, trace: BufferedTrace, due: float | None) -> None:
        """Assembly looked at `trace` (from `pop_ready`): `due` is the earliest deadline of a
        retrieval still waiting, None when none waits. A complete trace with nothing waiting
        goes into grace (or is forgotten without one)."""
        trace.looked_at = self._clock()
        trace.changed = False
        trace.due = due
        if trace.final or due is not None or not self.complete(trace, trace.looked_at):
            return
        if self._traces.pop(trace.trace_id, None) is None:
            return
        trace.done = True
        if self.config.late_grace_s > 0:
            self._grace[trace.trace_id] = trace
        else:
            self._forget(trace)
        self._update_gauges()

    def pop_all(self) -> list[BufferedTrace]:
        """Everything being assembled, ready or not (shutdown), each `final`; those in grace are
        forgotten."""
        out, self._overflow = self._overflow, []
        while self._traces:
            _, trace = self._traces.popitem(last=False)
            trace.final = True
            self._forget(trace)
            out.append(trace)
        while self._drop_grace():
            pass
        self._update_gauges()
        return out

    def _forget(self, trace: BufferedTrace) -> None:
        self._bytes -= trace.size
        self._recent[trace.trace_id] = None
        self._recent.move_to_end(trace.trace_id)
        while len(self._recent) > self.recent_decisions:
            self._recent.popitem(last=False)

    def _update_gauges(self) -> None:
        if self._metrics is not None:
            self._metrics.traces_buffered.set(len(self._traces))
            self._metrics.buffered_bytes.set(self._bytes)
