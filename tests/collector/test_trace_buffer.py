"""TraceBuffer: readiness (root + quiet period, max wait), bounds with counted evictions, late
spans via the recent-decisions cache. A settable clock stands in for time."""
from __future__ import annotations

import os

import pytest
from ctxprec.collector.assembly.config import AssemblyConfig
from ctxprec.collector.assembly.spans import SpanRecord
from ctxprec.collector.assembly.trace_buffer import TraceBuffer
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.model import PendingAck


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def record(trace: bytes, *, root: bool = False, size: int = 100) -> SpanRecord:
    return SpanRecord(trace_id=trace, span_id=os.urandom(8), parent_span_id=b"" if root else os.urandom(8),
                      name="s", start_time_unix_nano=1, end_time_unix_nano=2, service="svc", attributes={},
                      size=size)


def evictions(metrics: Metrics, reason: str) -> float:
    return metrics.registry.get_sample_value("ctxprec_trace_evictions_total", {"reason": reason}) or 0.0


@pytest.fixture
def clock() -> Clock:
    return Clock()


def look(buffer: TraceBuffer) -> list[bytes]:
    """What assembly does with the traces due for a look, when none of their retrievals waits."""
    ready = buffer.pop_ready()
    for trace in ready:
        if not trace.final:
            buffer.looked_at(trace, None)
    return [trace.trace_id for trace in ready]


def test_ready_after_root_and_quiet_period(clock: Clock) -> None:
    metrics = Metrics()
    buffer = TraceBuffer(AssemblyConfig(quiet_period_s=2.0, max_wait_s=30.0), metrics=metrics, clock=clock)
    trace = os.urandom(16)
    buffer.add(record(trace))
    buffer.add(record(trace, root=True))
    assert metrics.registry.get_sample_value("ctxprec_traces_buffered") == 1
    clock.now += 1.9
    assert buffer.pop_ready() == []
    buffer.add(record(trace))  # a new span restarts the quiet period
    clock.now += 1.9
    # A quiet period since the trace began: looked at (a trace that never ends is looked at
    # every quiet period), not complete.
    [early] = buffer.pop_ready()
    assert not buffer.complete(early)
    buffer.looked_at(early, None)
    assert len(buffer) == 1 and buffer.pop_ready() == []
    clock.now += 0.2
    [ready] = buffer.pop_ready()
    assert ready.trace_id == trace and len(ready.spans) == 3 and ready.evicted is None
    assert buffer.complete(ready)
    buffer.looked_at(ready, None)
    # Nothing waits: the trace is kept for late spans (its bytes too), no longer assembled.
    assert len(buffer) == 0 and buffer.in_grace == 1 and trace in buffer and not buffer.is_decided(trace)
    assert metrics.registry.get_sample_value("ctxprec_traces_buffered") == 0


def test_without_root_the_trace_is_looked_at_each_quiet_period(clock: Clock) -> None:
    """A trace that never ends (no root) is looked at when it is quiet or a quiet period after
    its last look, whatever its length, and complete only at max_wait."""
    buffer = TraceBuffer(AssemblyConfig(quiet_period_s=2.0, max_wait_s=30.0), clock=clock)
    trace = os.urandom(16)
    looks = 0
    for _ in range(20):
        buffer.add(record(trace))
        clock.now += 1.0
        for ready in buffer.pop_ready():
            looks += 1
            assert not buffer.complete(ready)
            buffer.looked_at(ready, None)
    assert looks == 10 and len(buffer) == 1
    clock.now += 10
    [ready] = buffer.pop_ready()
    assert buffer.complete(ready) and len(ready.spans) == 20


def test_a_waiting_retrieval_brings_its_trace_back_at_its_deadline(clock: Clock) -> None:
    buffer = TraceBuffer(AssemblyConfig(quiet_period_s=0.0), clock=clock)
    trace = os.urandom(16)
    buffer.add(record(trace, root=True), retrieval=True)
    [ready] = buffer.pop_ready()
    buffer.looked_at(ready, clock.now + 5.0)
    assert buffer.pop_ready() == [] and len(buffer) == 1
    clock.now += 5.0
    assert [t.trace_id for t in buffer.pop_ready()] == [trace]


def test_late_spans_join_within_the_grace_and_are_late_after_it(clock: Clock) -> None:
    metrics = Metrics()
    buffer = TraceBuffer(AssemblyConfig(quiet_period_s=0.0, late_grace_s=60.0), metrics=metrics, clock=clock)
    trace = os.urandom(16)
    buffer.add(record(trace, root=True))
    assert look(buffer) == [trace]
    clock.now += 59
    late = record(trace)
    assert buffer.add(late, retrieval=True)  # back to assembly, its arrival noted
    assert len(buffer) == 1 and buffer.in_grace == 0
    [ready] = buffer.pop_ready()
    assert late in ready.spans and ready.arrivals[late.span_id] == clock.now
    buffer.looked_at(ready, None)
    clock.now += 59.9
    assert look(buffer) == [] and not buffer.is_decided(trace)
    clock.now += 0.2
    assert look(buffer) == []
    assert buffer.is_decided(trace) and trace not in buffer and buffer.bytes == 0


def test_a_re_sent_span_is_kept_once(clock: Clock) -> None:
    buffer = TraceBuffer(AssemblyConfig(quiet_period_s=0.0), clock=clock)
    trace = os.urandom(16)
    span = record(trace, root=True)
    assert buffer.add(span)
    assert not buffer.add(span)
    assert look(buffer) == [trace]
    assert not buffer.add(span)  # in grace, still known
    [kept] = [t for t in buffer._grace.values()]
    assert kept.spans == [span] and buffer.bytes == span.size


def test_traces_in_grace_make_room_first(clock: Clock) -> None:
    metrics = Metrics()
    buffer = TraceBuffer(AssemblyConfig(quiet_period_s=0.0, max_traces=2), metrics=metrics, clock=clock)
    done, active = os.urandom(16), os.urandom(16)
    buffer.add(record(done, root=True))
    look(buffer)
    buffer.add(record(active))
    buffer.add(record(os.urandom(16)))  # one trace too many: the one in grace goes, uncounted
    assert buffer.is_decided(done) and len(buffer) == 2 and evictions(metrics, "max_traces") == 0


def test_without_grace_late_spans_are_recognised_after_hand_out(clock: Clock) -> None:
    buffer = TraceBuffer(AssemblyConfig(quiet_period_s=0.0, late_grace_s=0.0), clock=clock)
    trace = os.urandom(16)
    buffer.add(record(trace, root=True))
    assert not buffer.is_decided(trace)
    assert look(buffer) == [trace]
    assert buffer.is_decided(trace)
    assert trace not in buffer


def test_recent_decisions_are_bounded(clock: Clock) -> None:
    buffer = TraceBuffer(AssemblyConfig(quiet_period_s=0.0, late_grace_s=0.0), recent_decisions=3, clock=clock)
    traces = [os.urandom(16) for _ in range(5)]
    for trace in traces:
        buffer.add(record(trace, root=True))
    assert len(look(buffer)) == 5
    assert [buffer.is_decided(t) for t in traces] == [False, False, True, True, True]


def test_trace_count_bound_evicts_oldest_first_and_counts(clock: Clock) -> None:
    metrics = Metrics()
    buffer = TraceBuffer(AssemblyConfig(max_traces=3), metrics=metrics, clock=clock)
    traces = [os.urandom(16) for _ in range(5)]
    for trace in traces:
        buffer.add(record(trace))
        clock.now += 0.01
    assert len(buffer) == 3
    assert evictions(metrics, "max_traces") == 2
    evicted = buffer.pop_ready()  # evicted traces are handed out (partial), not lost
    assert [t.trace_id for t in evicted] == traces[:2]
    assert all(t.evicted == "max_traces" for t in evicted)
    # A later span of an evicted trace starts its state again, with what was decided of it.
    evicted[0].decided.add(b"decided!")
    assert not buffer.is_decided(traces[0])
    buffer.add(record(traces[0]))
    again = buffer._traces[traces[0]]
    assert again is not evicted[0] and again.decided == {b"decided!"} and again.spans != evicted[0].spans


def test_byte_bound_evicts_and_tracks_bytes(clock: Clock) -> None:
    metrics = Metrics()
    buffer = TraceBuffer(AssemblyConfig(max_buffer_mb=1_000 / 2**20), metrics=metrics, clock=clock)
    a, b = os.urandom(16), os.urandom(16)
    for _ in range(4):
        buffer.add(record(a, size=200))
    assert buffer.bytes == 800
    buffer.add(record(b, size=300))  # 1100 > 1000: the older trace goes
    assert evictions(metrics, "max_bytes") == 1
    assert buffer.bytes == 300
    assert metrics.registry.get_sample_value("ctxprec_buffered_bytes") == 300
    assert [t.trace_id for t in buffer.pop_ready()] == [a]
    buffer.add(record(b, size=5_000))  # one trace alone over the budget is handed out too
    assert len(buffer) == 0 and buffer.bytes == 0
    assert evictions(metrics, "max_bytes") == 2


def test_acks_are_held_once_per_trace_and_handed_out(clock: Clock) -> None:
    fired: list[bool] = []
    ack = PendingAck(lambda: fired.append(True))
    buffer = TraceBuffer(AssemblyConfig(quiet_period_s=0.0), clock=clock)
    trace = os.urandom(16)
    buffer.add(record(trace), ack)
    buffer.add(record(trace, root=True), ack)
    ack.seal()
    assert not ack.done
    [ready] = buffer.pop_ready()
    assert ready.acks == [ack]
    for held in ready.acks:
        held.release()
    assert ack.done and fired == [True]


def test_pop_all_hands_out_everything(clock: Clock) -> None:
    buffer = TraceBuffer(clock=clock)
    for _ in range(3):
        buffer.add(record(os.urandom(16)))
    assert len(buffer.pop_all()) == 3
    assert len(buffer) == 0


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="max_traces"):
        AssemblyConfig(max_traces=0)
    with pytest.raises(ValueError, match="quiet_period_s"):
        AssemblyConfig(quiet_period_s=-1)
