"""The delivery queue every result sink sends through: never blocks the caller, batches, pauses the
whole sink while the backend is unavailable (honouring Retry-After), retries one item that must
wait alone until its deadline, counts every drop by reason, logs a failure once and then counts,
and drains on stop within its time."""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Sequence

import pytest
from ctxprec.collector.components import shutdown
from ctxprec.collector.exporters.sink_queue import (
    SENT,
    QueueSettings,
    Result,
    SinkQueue,
    Unavailable,
    dropped,
    later,
)
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.scorer.retry import Backoff

FAST = Backoff(base_s=0.05, cap_s=0.2)


@dataclass
class Scripted:
    """A backend that answers as told: `down` raises Unavailable, `missing` items answer `later`
    until they are in `known`, `refused` items are dropped."""

    down: bool = False
    retry_after_s: float | None = None
    missing: set[int] = field(default_factory=set)
    refused: set[int] = field(default_factory=set)
    delay_s: float = 0.0
    calls: list[tuple[float, list[int]]] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)
    closed: bool = False

    async def start(self) -> None:
        pass

    async def deliver(self, batch: Sequence[int]) -> list[Result]:
        self.calls.append((time.monotonic(), list(batch)))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.down:
            raise Unavailable("HTTP 503", self.retry_after_s)
        out: list[Result] = []
        for item in batch:
            if item in self.missing:
                out.append(later("span_not_found", f"span {item} unknown"))
            elif item in self.refused:
                out.append(dropped("rejected", "HTTP 422"))
            else:
                self.sent.append(item)
                out.append(SENT)
        return out

    async def close(self) -> None:
        self.closed = True


def value(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def dropped_count(metrics: Metrics, reason: str) -> float:
    return value(metrics, "ctxprec_export_dropped_total", exporter="test", reason=reason)


async def until(predicate: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


def make(backend: Scripted, **settings: object) -> tuple[SinkQueue[int], Metrics]:
    metrics = Metrics()
    options = {"backoff": FAST, **settings}
    return SinkQueue(backend, exporter="test", what="test sink", metrics=metrics,
                     settings=QueueSettings(**options)), metrics  # type: ignore[arg-type]


async def test_items_go_in_batches_and_offering_never_waits_for_the_backend() -> None:
    backend = Scripted(delay_s=0.2)
    queue, metrics = make(backend, max_batch=10)
    await queue.start()
    began = time.perf_counter()
    for i in range(25):
        assert queue.offer(i)
    assert time.perf_counter() - began < 0.05  # the backend takes 0.2 s a call; offering did not wait
    await until(lambda: len(backend.sent) == 25)
    await shutdown(queue, 1.0)
    assert backend.sent == list(range(25))  # in order
    assert max(len(batch) for _, batch in backend.calls) == 10
    assert value(metrics, "ctxprec_exported_spans_total", exporter="test", outcome="ok") == 25
    assert backend.closed


async def test_a_full_queue_drops_the_new_item_and_counts_it() -> None:
    backend = Scripted(down=True)
    queue, metrics = make(backend, max_items=3)
    await queue.start()
    assert [queue.offer(i) for i in range(5)] == [True, True, True, False, False]
    assert dropped_count(metrics, "queue_full") == 2
    await shutdown(queue, 0.0)
    assert dropped_count(metrics, "shutdown") == 3


async def test_an_unavailable_backend_pauses_the_sink_for_its_retry_after_and_loses_nothing() -> None:
    backend = Scripted(down=True, retry_after_s=0.6)
    queue, metrics = make(backend, backoff=Backoff(base_s=0.01, cap_s=2.0))
    await queue.start()
    for i in range(5):
        queue.offer(i)
    await until(lambda: len(backend.calls) >= 2)
    backend.down = False
    await until(lambda: len(backend.sent) == 5)
    await shutdown(queue, 1.0)
    (first, batch), (second, _) = backend.calls[0], backend.calls[1]
    assert batch == [0, 1, 2, 3, 4]  # one request for all while down, not one per item
    assert second - first >= 0.6  # Retry-After honoured (the backoff alone would be ~10 ms)
    assert backend.sent == [0, 1, 2, 3, 4]
    assert dropped_count(metrics, "unavailable") == 0


async def test_what_cannot_go_before_the_deadline_is_dropped_as_unavailable() -> None:
    backend = Scripted(down=True)
    queue, metrics = make(backend, deadline_s=0.5)
    await queue.start()
    for i in range(4):
        queue.offer(i)
    await until(lambda: dropped_count(metrics, "unavailable") == 4, timeout=3)
    assert queue.pending == 0
    # Still working for what comes after the backend is back.
    backend.down = False
    queue.offer(9)
    await until(lambda: backend.sent == [9])
    await shutdown(queue, 1.0)


async def test_an_item_that_must_wait_is_retried_alone_while_the_others_go() -> None:
    backend = Scripted(missing={2})
    queue, metrics = make(backend, deadline_s=5.0)
    await queue.start()
    for i in range(4):
        queue.offer(i)
    await until(lambda: sorted(backend.sent) == [0, 1, 3])
    await until(lambda: len(backend.calls) >= 3)  # item 2 tried again, alone
    assert all(batch == [2] for _, batch in backend.calls[1:])
    backend.missing.clear()  # the span arrived in the backend
    await until(lambda: 2 in backend.sent)
    await shutdown(queue, 1.0)
    assert dropped_count(metrics, "span_not_found") == 0


async def test_an_item_still_waiting_at_its_deadline_is_dropped_with_its_reason() -> None:
    backend = Scripted(missing={1}, refused={2})
    queue, metrics = make(backend, deadline_s=0.6)
    await queue.start()
    for i in range(3):
        queue.offer(i)
    await until(lambda: dropped_count(metrics, "span_not_found") == 1, timeout=3)
    await shutdown(queue, 1.0)
    assert backend.sent == [0]
    assert dropped_count(metrics, "rejected") == 1
    assert value(metrics, "ctxprec_exported_spans_total", exporter="test", outcome="failed") == 2


async def test_stop_sends_what_is_queued_then_drops_the_rest_as_shutdown() -> None:
    backend = Scripted()
    queue, metrics = make(backend, linger_s=30.0)  # would wait 30 s before a first try
    await queue.start()
    for i in range(3):
        queue.offer(i)
    began = time.monotonic()
    await shutdown(queue, 2.0)
    assert time.monotonic() - began < 1.0  # stop does not linger
    assert backend.sent == [0, 1, 2]

    down = Scripted(down=True)
    queue, metrics = make(down)
    await queue.start()
    queue.offer(1)
    began = time.monotonic()
    await shutdown(queue, 0.3)
    assert 0.25 <= time.monotonic() - began < 1.0  # within its time
    assert dropped_count(metrics, "shutdown") == 1
    assert not queue.offer(2) and dropped_count(metrics, "shutdown") == 2


async def test_a_failure_is_a_warning_once_then_a_count_and_recovery_is_one_info_line(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ctxprec.collector.exporters.sink_queue")
    backend = Scripted(down=True)
    queue, _ = make(backend, report_interval_s=0.4, backoff=Backoff(base_s=0.01, cap_s=0.05))
    await queue.start()
    queue.offer(1)
    await until(lambda: len(backend.calls) >= 5)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["test sink: unavailable (HTTP 503)"]
    await asyncio.sleep(0.5)  # the next report: one line with the count
    backend.down = False
    await until(lambda: backend.sent == [1])
    await shutdown(queue, 1.0)
    lines = [r.getMessage() for r in caplog.records]
    assert any(line.startswith("test sink: ") and "more failures in the last minute (unavailable" in line
               for line in lines)
    assert sum("taking data again after" in line for line in lines) == 1
