"""A trace that keeps growing is looked at again a quiet period after its last look, or later
when its looks cost much: a 20,000-span trace sent over seconds spends a bounded share of that
time being re-read (each look reads the whole trace), not one look per quiet period. A trace
that goes quiet is looked at as before. A settable clock stands in for time."""
from __future__ import annotations

from ctxprec.collector.assembly.config import AssemblyConfig
from ctxprec.collector.assembly.trace_buffer import LOOK_PACING, TraceBuffer

from tests.collector.test_trace_buffer import Clock, record


def _looked(buffer: TraceBuffer, trace_id: bytes) -> bool:
    ready = buffer.pop_ready()
    for trace in ready:
        buffer.looked_at(trace, None)
    return any(t.trace_id == trace_id for t in ready)


def test_a_growing_trace_whose_looks_cost_much_is_looked_at_less_often() -> None:
    clock = Clock()
    buffer = TraceBuffer(AssemblyConfig(quiet_period_s=0.2, max_wait_s=30.0), clock=clock)
    cheap, costly = b"\x01" * 16, b"\x02" * 16
    for trace_id in (cheap, costly):
        buffer.add(record(trace_id))
    clock.now += 0.2
    assert _looked(buffer, cheap)  # both looked at once; the costly trace's look took 0.1 s
    buffer._traces[costly].look_s = 0.1
    steps = round(LOOK_PACING * 0.1 / 0.2)  # its next look: 10 x 0.1 s later, 5 quiet periods
    for step in range(1, steps + 1):
        clock.now += 0.2
        for trace_id in (cheap, costly):
            buffer.add(record(trace_id))  # spans keep coming: neither goes quiet
        looked = buffer.pop_ready()
        for trace in looked:
            buffer.looked_at(trace, None)
        ids = {t.trace_id for t in looked}
        assert cheap in ids  # a quiet period since its last look
        assert (costly in ids) == (step == steps)


def test_a_costly_trace_that_goes_quiet_is_looked_at_a_quiet_period_later() -> None:
    clock = Clock()
    buffer = TraceBuffer(AssemblyConfig(quiet_period_s=0.2, max_wait_s=30.0), clock=clock)
    trace_id = b"\x03" * 16
    buffer.add(record(trace_id))
    clock.now += 0.2
    assert _looked(buffer, trace_id)
    buffer._traces[trace_id].look_s = 5.0
    buffer.add(record(trace_id, root=True))
    clock.now += 0.2
    assert _looked(buffer, trace_id)
