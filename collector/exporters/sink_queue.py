"""How a result sink gets its items to a backend without ever holding up the pipeline.

`emit()` only builds an item and `offer()`s it here: a bounded queue (a full one drops the new
item). One task sends what is ready in batches through the sink's `Backend`, which says per item
whether it went (`SENT`), must wait for something on the backend's side and be tried again alone
(`later`: Phoenix does not know the span yet), or was refused (`dropped`). A backend that cannot
take anything now (connection refused, HTTP 5xx or 429) raises `Unavailable`: the batch goes back
to the front of the queue and the whole sink pauses for a backoff delay, or the backend's
Retry-After, before it tries again, so that an outage costs one request per backoff step and not
one per score. Every item has a deadline (`--sink-deadline`); one that cannot go by then is
dropped with the reason it was waiting for.

Delays come from the shared policy (`scorer/retry.Backoff.delay`). Every drop is counted in
`ctxprec_export_dropped_total{exporter,reason}`, every item that went in
`ctxprec_exported_spans_total{exporter,outcome="ok"}` (one per scored span); failures are logged
through a `FailureLog`: a WARNING the first time, then a count once a minute, and one INFO line
when the backend takes data again.
"""
from __future__ import annotations

import asyncio
import enum
import heapq
import itertools
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Generic, Protocol, Sequence, TypeVar

from ctxprec.collector.components import Deadline, cancelled
from ctxprec.collector.failure_log import FailureLog
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.scorer.retry import Backoff

log = logging.getLogger(__name__)

T = TypeVar("T")

# Reasons the queue itself counts (backends add their own: rejected, unauthorized, ...).
QUEUE_FULL, SHUTDOWN, UNAVAILABLE, ERROR = "queue_full", "shutdown", "unavailable", "error"


class Fate(enum.Enum):
    SENT = "sent"
    LATER = "later"
    DROPPED = "dropped"


@dataclass(frozen=True, slots=True)
class Result:
    """What became of one item of a batch. `reason` is the drop reason (for `later`: the reason
    it is dropped under if its deadline passes); `detail` is what the backend said, for the log."""

    fate: Fate
    reason: str = ""
    detail: str = ""


SENT = Result(Fate.SENT)


def later(reason: str, detail: str = "") -> Result:
    return Result(Fate.LATER, reason, detail)


def dropped(reason: str, detail: str = "") -> Result:
    return Result(Fate.DROPPED, reason, detail)


class Unavailable(Exception):
    """The backend takes nothing now; `retry_after_s` is its Retry-After when it sent one."""

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Backend(Protocol[T]):
    async def start(self) -> None: ...

    async def deliver(self, batch: Sequence[T]) -> list[Result]:
        """One result per item, in order; raises `Unavailable`. Items may be changed in place to
        remember what part of them already went (a retry then sends only the rest)."""
        ...

    async def close(self) -> None: ...


@dataclass(slots=True)
class _Entry(Generic[T]):
    item: T
    deadline: float
    not_before: float
    attempts: int = 0  # `later` answers so far
    waiting_for: str = UNAVAILABLE  # the drop reason if the deadline passes first


@dataclass(slots=True)
class QueueSettings:
    max_items: int = 10_000
    max_batch: int = 100
    deadline_s: float = 120.0
    # A new item waits this long before its first try: more items per batch, and a span that
    # was forwarded at the same moment has time to be stored by the backend.
    linger_s: float = 0.0
    backoff: Backoff = field(default_factory=lambda: Backoff(base_s=0.5, cap_s=5.0))
    # Items waiting for a retry that fall due within this much of the first go together: their
    # jittered delays would otherwise cost a request each.
    coalesce_s: float = 0.5
    report_interval_s: float = 60.0


class SinkQueue(Generic[T]):
    def __init__(self, backend: Backend[T], *, exporter: str, what: str, metrics: Metrics,
                 settings: QueueSettings | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        """`exporter` labels the counters; `what` names the sink in log lines (no credentials)."""
        self.backend = backend
        self.exporter = exporter
        self.settings = settings or QueueSettings()
        self.failures = FailureLog(what, log, interval_s=self.settings.report_interval_s, clock=clock)
        self._what = what
        self._metrics = metrics
        self._clock = clock
        self._ready: deque[_Entry[T]] = deque()
        self._parked: list[tuple[float, int, _Entry[T]]] = []  # heap on not_before
        self._order = itertools.count()
        self._flying: list[_Entry[T]] = []
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._paused_until = 0.0
        self._failing_since: float | None = None
        self._consecutive = 0
        self._last_report = clock()
        self._ok = metrics.exported_spans.labels(exporter=exporter, outcome="ok")
        self._failed = metrics.exported_spans.labels(exporter=exporter, outcome="failed")
        for reason in (QUEUE_FULL, UNAVAILABLE, SHUTDOWN):  # at 0 from the start, for rate()
            metrics.export_dropped.labels(exporter=exporter, reason=reason)

    @property
    def pending(self) -> int:
        """Items not yet sent or dropped (queued, waiting for a retry, or in flight)."""
        return len(self._ready) + len(self._parked) + len(self._flying)

    # -- input: never blocks --

    def offer(self, item: T) -> bool:
        if self._closing:
            self._drop(SHUTDOWN, 1)
            return False
        if self.pending >= self.settings.max_items:
            self._drop(QUEUE_FULL, 1)
            self.failures.failed(QUEUE_FULL, f"{self.settings.max_items} scores waiting")
            return False
        now = self._clock()
        self._ready.append(_Entry(item, now + self.settings.deadline_s, now + self.settings.linger_s))
        self._wakeup.set()
        return True

    # -- lifecycle --

    async def start(self) -> None:
        if self._task is None:
            await self.backend.start()
            self._task = asyncio.create_task(self._run(), name=f"sink-{self.exporter}")

    async def finish(self, deadline: Deadline) -> None:
        """Sends what is waiting until `deadline`, then drops the rest as `shutdown`."""
        self._closing = True
        for entry in self._ready:  # no more lingering: everything may go now
            entry.not_before = 0.0
        self._wakeup.set()
        while self.pending and deadline.left() > 0 and self._task is not None and not self._task.done():
            await asyncio.sleep(0.02)
        await cancelled(self._task)
        self._task = None
        left = self.pending
        self._ready.clear()
        self._parked.clear()
        self._flying = []
        if left:
            self._drop(SHUTDOWN, left)
            self.failures.failed(SHUTDOWN, f"{left} scores not sent before the shutdown deadline")
        self.failures.flush()

    async def close(self) -> None:
        await self.backend.close()

    # -- sending --

    async def _run(self) -> None:
        while True:
            self._wakeup.clear()
            now = self._clock()
            self._report(now)
            self._expire(now)
            batch = self._take(now)
            if not batch:
                await self._sleep(now)
                continue
            self._flying = batch
            try:
                results = await self.backend.deliver([entry.item for entry in batch])
            except Unavailable as exc:
                self._flying = []
                self._unavailable(batch, exc)
                continue
            except Exception as exc:  # a fault of ours must not stop the sink: this batch is lost
                self._flying = []
                log.debug("%s: delivering a batch failed", self._what, exc_info=True)
                self._drop(ERROR, len(batch))
                self.failures.failed(ERROR, f"{type(exc).__name__}: {exc}")
                continue
            self._flying = []
            self._recovered()
            self._settle(batch, results)

    def _take(self, now: float) -> list[_Entry[T]]:
        if now < self._paused_until:
            return []
        batch: list[_Entry[T]] = []
        limit = self.settings.max_batch
        due = now + self.settings.coalesce_s if self._parked and self._parked[0][0] <= now else now
        while self._parked and self._parked[0][0] <= due and len(batch) < limit:
            entry = heapq.heappop(self._parked)[2]
            if entry.deadline <= now:
                self._give_up(entry)
            else:
                batch.append(entry)
        while self._ready and self._ready[0].not_before <= now and len(batch) < limit:
            batch.append(self._ready.popleft())
        return batch

    def _expire(self, now: float) -> None:
        """Queued items past their deadline are dropped (the oldest are at the front); items
        waiting for a retry are checked when their turn comes."""
        while self._ready and self._ready[0].deadline <= now:
            self._give_up(self._ready.popleft())

    async def _sleep(self, now: float) -> None:
        """Until something may go (or the next failure report), or a new item comes."""
        wake = self._last_report + self.settings.report_interval_s
        if self._ready or self._parked:
            if self._paused_until > now:
                wake = min(wake, self._paused_until)
            else:
                if self._ready:
                    wake = min(wake, self._ready[0].not_before)
                if self._parked:
                    wake = min(wake, self._parked[0][0])
        # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel that arrives as
        # the event is set (stop() does both), and the task would then never end.
        try:
            async with asyncio.timeout(max(0.001, wake - now)):
                await self._wakeup.wait()
        except TimeoutError:
            pass

    def _unavailable(self, batch: list[_Entry[T]], exc: Unavailable) -> None:
        now = self._clock()
        if self._failing_since is None:
            self._failing_since = now
        self._paused_until = now + self.settings.backoff.delay(self._consecutive, exc.retry_after_s)
        self._consecutive += 1
        for entry in reversed(batch):  # back to the front, in their order
            entry.waiting_for = UNAVAILABLE
            self._ready.appendleft(entry)
        self.failures.failed(UNAVAILABLE, str(exc))

    def _recovered(self) -> None:
        self._consecutive = 0
        if self._failing_since is not None:
            log.info("%s: taking data again after %.1fs unavailable", self._what, self._clock() - self._failing_since)
            self._failing_since = None

    def _settle(self, batch: list[_Entry[T]], results: list[Result]) -> None:
        now = self._clock()
        for entry, result in zip(batch, results, strict=True):
            if result.fate is Fate.SENT:
                self._ok.inc()
            elif result.fate is Fate.DROPPED:
                self._drop(result.reason, 1)
                self.failures.failed(result.reason, result.detail)
            else:
                entry.waiting_for = result.reason
                entry.not_before = now + self.settings.backoff.delay(entry.attempts)
                entry.attempts += 1
                if entry.not_before >= entry.deadline:
                    self._give_up(entry)
                else:
                    heapq.heappush(self._parked, (entry.not_before, next(self._order), entry))

    def _give_up(self, entry: _Entry[T]) -> None:
        self._drop(entry.waiting_for, 1)
        self.failures.failed(entry.waiting_for, f"not delivered within {self.settings.deadline_s:g}s")

    def _drop(self, reason: str, n: int) -> None:
        self._metrics.export_dropped.labels(exporter=self.exporter, reason=reason).inc(n)
        self._failed.inc(n)

    def _report(self, now: float) -> None:
        if now - self._last_report >= self.settings.report_interval_s:
            self._last_report = now
            self.failures.flush()
