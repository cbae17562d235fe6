"""A bounded queue and a pool of workers over the scoring engine.

Ingestion only ever calls `try_submit`, which never waits: a full queue is the overload signal
(the gate decides `overloaded`). Each queued retrieval ends in `evaluated` or `failed`; a judge
failure is a `failed` decision with the error's kind, never an invented score. The outcome, with
its score record, goes on to the `ResultSink` downstream; scoring knows nothing of exporters.

The queue takes turns between traces (`TraceTurnsQueue`): an agent trace that brings 500
retrievals at once has them scored one per turn among the other traces' retrievals, not all of
them ahead of everything that comes after.

Shutdown (`finish(deadline)`) stops taking work, lets the queue drain until the deadline, then
cancels what is still running; everything not finished by then is decided `failed` with error
type `shutdown`, so nothing is silently lost.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict, deque
from datetime import datetime, timezone
from typing import Any, Callable

from ctxprec.collector.components import Deadline, ResultSink, ScoreCosts, cancelled
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.model import SHUTDOWN, Decision, Outcome, Retrieval
from ctxprec.collector.scoring.identity import ScorerIdentity
from ctxprec.scorer.judge.chat import JudgeError
from ctxprec.scorer.records import document_names, failure_record, record_id, record_text, rfc3339, score_record
from ctxprec.scorer.result import JudgeUsage, ScoreResult

log = logging.getLogger(__name__)


class _TraceTurns:
    """Retrievals waiting, per trace, taken in turns: the trace whose retrieval was taken goes
    to the back of the line. What asyncio.Queue keeps in `_queue` (append, popleft, len)."""

    __slots__ = ("_traces", "_count")

    def __init__(self) -> None:
        self._traces: OrderedDict[str, deque[Retrieval]] = OrderedDict()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def append(self, retrieval: Retrieval) -> None:
        waiting = self._traces.get(retrieval.trace_id)
        if waiting is None:
            waiting = self._traces[retrieval.trace_id] = deque()
        waiting.append(retrieval)
        self._count += 1

    def popleft(self) -> Retrieval:
        trace, waiting = next(iter(self._traces.items()))
        retrieval = waiting.popleft()
        self._count -= 1
        if waiting:
            self._traces.move_to_end(trace)
        else:
            del self._traces[trace]
        return retrieval


class TraceTurnsQueue(asyncio.Queue):  # type: ignore[type-arg]
    """A bounded asyncio queue of retrievals that takes turns between traces."""

    def _init(self, maxsize: int) -> None:
        self._queue = _TraceTurns()


class ScoringWorkers:
    def __init__(
        self,
        engine: Any,
        *,
        downstream: ResultSink,
        identity: ScorerIdentity,
        queue_size: int = 1000,
        workers: int = 8,
        metrics: Metrics | None = None,
        costs: ScoreCosts | None = None,
        record_text_chars: int = 0,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        """`costs` is told what each score cost (the gate's daily budget), when there is one.
        `record_text_chars` is how much of the question and of unnamed documents' text records
        keep, after `redact` (set with --redact-pii: redacted before it is cut, so that an address
        cut in two is still found)."""
        self.engine = engine
        self.record_text_chars = record_text_chars
        self._redact = redact
        self.downstream = downstream
        self.identity = identity
        self.queue_size = queue_size
        self.worker_count = workers
        self.metrics = metrics
        self.costs = costs
        self._queue: asyncio.Queue[Retrieval] = TraceTurnsQueue(maxsize=queue_size)
        if metrics is not None:
            # Read at scrape time: setting it on every put and get cost more than the rest of a put.
            metrics.queue_depth.set_function(self._queue.qsize)
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False
        self.in_flight = 0

    @property
    def depth(self) -> int:
        return self._queue.qsize()

    async def start(self) -> None:
        if self._tasks:
            return
        self._tasks = [asyncio.create_task(self._run(), name=f"ctxprec-scorer-{i}") for i in range(self.worker_count)]

    def try_submit(self, retrieval: Retrieval) -> bool:
        if self._closing:
            return False
        try:
            self._queue.put_nowait(retrieval)
        except asyncio.QueueFull:
            return False
        return True

    async def _run(self) -> None:
        while True:
            retrieval = await self._queue.get()
            self.in_flight += 1
            try:
                await self._score(retrieval)
            finally:
                self.in_flight -= 1
                self._queue.task_done()

    async def _score(self, r: Retrieval) -> None:
        try:
            result = await self.engine.score(
                r.query, [c.content for c in r.contexts], output=r.output, expected_output=r.expected_output)
        except asyncio.CancelledError:
            self._fail(r, SHUTDOWN, "scoring was cancelled by shutdown before the judge answered")
            raise
        except JudgeError as exc:
            self._fail(r, exc.kind, str(exc), exc.usage)
        except ValueError as exc:
            self._fail(r, "invalid_input", str(exc))
        except Exception as exc:  # a bug or an unexpected library error: still one decision
            log.exception("scoring trace %s span %s failed", r.trace_id, r.span_id)
            self._fail(r, type(exc).__name__, str(exc) or type(exc).__name__)
        else:
            self._succeed(r, result)

    def _text(self, text: str | None) -> str | None:
        return record_text(text, self.record_text_chars, self._redact)

    def _rid(self, r: Retrieval) -> str:
        return record_id(r.trace_id, r.span_id, str(self.engine.fingerprint))

    def _succeed(self, r: Retrieval, result: ScoreResult) -> None:
        now = time.time()
        names, previews = document_names(r.contexts, self.record_text_chars, self._redact)
        record = score_record(
            result, record_id=self._rid(r), trace_id=r.trace_id, span_id=r.span_id, service=r.service,
            retriever=r.retriever, model=self.identity.model, prompt_version=self.identity.prompt_version,
            sample_rate=r.sample_rate, answer_source=r.answer_source,
            scored_at=datetime.fromtimestamp(now, tz=timezone.utc), timestamp=_timestamp(r),
            document_ids=names, previews=previews, query=self._text(r.query),
            documents_resolved=r.documents_resolved)
        if self.costs is not None:
            self.costs.settled(result.usage.cost_usd)
        self.downstream.emit(Outcome(r, Decision.EVALUATED, result, None, record, now))

    def _fail(self, r: Retrieval, error_type: str, message: str, usage: JudgeUsage | None = None) -> None:
        """`usage`: what the judge calls of a failed sample still cost (its record keeps it, and
        the budget pays it)."""
        now = time.time()
        record = failure_record(
            error_type=error_type, message=message, record_id=self._rid(r), trace_id=r.trace_id,
            span_id=r.span_id, service=r.service, retriever=r.retriever, scale=self.identity.scale,
            model=self.identity.model, prompt_version=self.identity.prompt_version, k=len(r.contexts),
            usage=usage, sample_rate=r.sample_rate, answer_source=r.answer_source,
            scored_at=datetime.fromtimestamp(now, tz=timezone.utc), timestamp=_timestamp(r), query=self._text(r.query),
            documents_resolved=r.documents_resolved)
        if self.costs is not None:
            self.costs.settled(usage.cost_usd if usage is not None else 0.0)
        self.downstream.emit(Outcome(r, Decision.FAILED, None, (error_type, message), record, now))

    async def finish(self, deadline: Deadline) -> None:
        """Take no more work, let the queue drain until `deadline`, then cancel what is still
        running: every retrieval taken in gets its decision, those cut short `failed` with error
        type `shutdown` (their input stays unacknowledged, so a Kafka message is read again)."""
        self._closing = True
        # Nothing taken in (a start that failed early, with a deadline of 0): nothing to wait for.
        if self._tasks and (self.in_flight or not self._queue.empty()):
            try:
                await asyncio.wait_for(self._queue.join(), timeout=deadline.left())
            except asyncio.TimeoutError:
                log.warning("shutdown deadline reached with %d queued and %d in flight; deciding them failed",
                            self._queue.qsize(), self.in_flight)
        if self._tasks:
            await cancelled(*self._tasks)
            self._tasks = []
        while not self._queue.empty():
            r = self._queue.get_nowait()
            self._queue.task_done()
            self._fail(r, SHUTDOWN, "the sidecar shut down before this retrieval was scored")

    async def close(self) -> None:
        return None


def _timestamp(r: Retrieval) -> str | None:
    """When the retrieval happened (its span's end, or the event's own time), for the record."""
    if not r.end_time_unix_nano:
        return None
    return rfc3339(datetime.fromtimestamp(r.end_time_unix_nano / 1e9, tz=timezone.utc))
