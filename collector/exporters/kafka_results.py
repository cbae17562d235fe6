"""Kafka results exporter: one score record (docs/FORMATS.md) per decision `evaluated` or
`failed`, as JSON, to `--kafka-results-topic`, keyed by trace id (a trace's records stay in one
partition, in order). The record's `id` is the idempotency key and is also sent as the header
`ctxprec.record_id`, so consumers can de-duplicate replays without parsing the value. With cluster
learning each record also names the replica that made it and carries what the other replicas
learn from beside the record (kafka/score_headers.py).

`emit` never blocks (it is called by the scoring workers): records wait in a bounded queue that a
sender task drains. A send that fails is retried with backoff — at-least-once, since the Kafka
receiver's commits wait on `flush()` — and records are only dropped (and counted in
`ctxprec_export_dropped_total{exporter="kafka_results"}`) when the queue is full or the broker
refuses one for good (too large, not authorized). `flush()` returns once every record emitted
before the call has been delivered (or given up).
"""
from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError, KafkaTimeoutError
from ctxprec.collector.components import Deadline, cancelled
from ctxprec.collector.kafka.config import KafkaTopic
from ctxprec.collector.kafka.connect import start_producer
from ctxprec.collector.kafka.offsets import SequenceTracker
from ctxprec.collector.kafka.score_headers import score_headers
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.model import Outcome
from ctxprec.scorer.retry import Backoff

log = logging.getLogger(__name__)

EXPORTER = "kafka_results"
# A record waits for delivery this many at a time; aiokafka batches them per partition.
MAX_IN_FLIGHT = 1000
MAX_REFUSALS = 3
SEND_BACKOFF = Backoff(base_s=0.2, cap_s=5.0)


class KafkaResultsExporter:
    def __init__(self, settings: KafkaTopic, metrics: Metrics, *, queue_size: int = 10_000,
                 producer: AIOKafkaProducer | None = None, replica: str | None = None,
                 slice_attributes: tuple[str, ...] = ()) -> None:
        """`replica`: this replica's name in each record's headers, with what the other replicas
        learn from (cluster learning); `slice_attributes`: the drift-slice attributes they need."""
        self.topic = settings.topic
        self.settings = settings
        self.metrics = metrics
        self._producer = producer
        self._own_producer = producer is None
        self._queue: asyncio.Queue[tuple[int, bytes, bytes, list[tuple[str, bytes]]]] = asyncio.Queue(queue_size)
        self._seq = SequenceTracker()
        self._changed = asyncio.Event()  # set whenever a record is delivered or given up
        self._sender: asyncio.Task[None] | None = None
        self._slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        self._deliveries: set[asyncio.Task[None]] = set()
        self._stopped = False
        self.replica = replica
        self.slice_attributes = slice_attributes
        self.sent = 0
        self.dropped = 0

    async def start(self) -> None:
        """Connects in the background (records queue meanwhile), like the receiver."""
        self._sender = asyncio.create_task(self._run(), name="kafka-results")

    async def _connect(self) -> None:
        self._producer = await start_producer(self.settings.connection, "results", "kafka results")

    async def finish(self, deadline: Deadline) -> None:
        """Deliver what is queued, until `deadline`."""
        try:
            await asyncio.wait_for(self.flush(), timeout=deadline.left())
        except asyncio.TimeoutError:
            log.warning("kafka results: %d records not delivered at shutdown", self._seq.outstanding)

    async def close(self) -> None:
        """Stop sending and close the producer (after the receiver's last commit, which waits on
        `flush`)."""
        await cancelled(self._sender)
        self._sender = None
        self._stopped = True  # sends the producer fails while closing are not retried
        await cancelled(*self._deliveries)
        if self._own_producer and self._producer is not None:
            await self._producer.stop()
            self._producer = None

    # -- ResultSink -------------------------------------------------------------------------------

    def emit(self, outcome: Outcome) -> None:
        record = outcome.record
        if record is None:  # a decision without a score: nothing to write
            return
        key = str(record.get("trace_id") or "").encode()
        value = json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        headers = self._headers(outcome, str(record.get("id") or ""))
        if self._queue.full():
            self.dropped += 1
            self.metrics.export_dropped.labels(exporter=EXPORTER, reason="queue_full").inc()
            log.warning("kafka results queue full; record %s dropped", record.get("id"))
            return
        seq = self._seq.issue()
        self._queue.put_nowait((seq, key or b"", value, headers))

    def _headers(self, outcome: Outcome, record_id: str) -> list[tuple[str, bytes]]:
        if self.replica is None:
            return score_headers(record_id, None, (), None)
        r = outcome.retrieval
        slices: dict[str, Any] = {}
        for name in self.slice_attributes:
            value = r.attributes.get(name)
            if value is None:
                value = r.resource.get(name)
            if value is not None:
                slices[name] = value
        return score_headers(record_id, self.replica, [len(c.content) for c in r.contexts], slices)

    async def flush(self) -> None:
        """Wait until every record emitted so far has been delivered."""
        mark = self._seq.issued
        while True:
            # Clear before checking: a delivery after the check sets the event again.
            self._changed.clear()
            if self._seq.all_done_below(mark):
                return
            await self._changed.wait()

    # -- delivery -------------------------------------------------------------------------------------

    async def _run(self) -> None:
        """One task hands every record to the producer in turn; delivery is reported through the
        producer's future. (A task per record awaiting `send_and_wait` made every one of up to
        MAX_IN_FLIGHT tasks wake up and retry each time a full batch drained: most of the CPU of
        a scored event went there.) Only a record whose delivery fails gets a task of its own,
        which retries it with backoff."""
        await self._connect()
        producer = self._producer
        assert producer is not None
        while True:
            item = await self._queue.get()
            await self._slots.acquire()
            seq, key, value, headers = item
            try:
                future = await producer.send(self.topic, value, key=key or None, headers=headers)
            except KafkaError as exc:
                self._retry(item, exc)
                continue
            future.add_done_callback(lambda f, item=item: self._sent(item, f))  # type: ignore[misc]

    def _sent(self, item: tuple[int, bytes, bytes, list[tuple[str, bytes]]], future: "asyncio.Future[Any]") -> None:
        error = None if future.cancelled() else future.exception()
        if future.cancelled() or error is not None:
            if self._stopped:
                self._finished(item[0])
                return
            self._retry(item, error if isinstance(error, KafkaError) else KafkaTimeoutError(str(error)))
            return
        self.sent += 1
        self._finished(item[0])

    def _finished(self, seq: int) -> None:
        self._slots.release()
        self._seq.done(seq)
        self._changed.set()

    def _retry(self, item: tuple[int, bytes, bytes, list[tuple[str, bytes]]], error: KafkaError) -> None:
        task = asyncio.get_running_loop().create_task(self._deliver(item, error))
        self._deliveries.add(task)
        task.add_done_callback(self._deliveries.discard)

    async def _deliver(self, item: tuple[int, bytes, bytes, list[tuple[str, bytes]]], error: KafkaError) -> None:
        """A record whose first send failed: retried one at a time with backoff until delivered or
        refused for good."""
        seq, key, value, headers = item
        attempt = 0
        refusals = 0
        try:
            while True:
                # Broker away or the topic not there yet: keep the record and try again. A refusal
                # that retrying cannot fix (too large, not authorized) is given up after a few
                # tries, counted, so that it cannot hold every commit back.
                if not error.retriable and not isinstance(error, KafkaTimeoutError):
                    refusals += 1
                    if refusals >= MAX_REFUSALS:
                        self.dropped += 1
                        self.metrics.export_dropped.labels(exporter=EXPORTER, reason=type(error).__name__).inc()
                        log.error("kafka results: record dropped after %d refusals: %s", refusals, error)
                        break
                delay = SEND_BACKOFF.delay(attempt)
                attempt += 1
                log.warning("kafka results send failed (%s); retrying in %.1fs", error, delay)
                await asyncio.sleep(delay)
                assert self._producer is not None
                try:
                    await self._producer.send_and_wait(self.topic, value, key=key or None, headers=headers)
                    self.sent += 1
                    break
                except KafkaError as exc:
                    error = exc
        finally:
            self._finished(seq)
