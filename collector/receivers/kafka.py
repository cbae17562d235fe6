"""The Kafka receiver (docs/KAFKA.md): an aiokafka consumer in a consumer group that hands each
message to the pipeline. Its parts: this module consumes (connect, the read loop, hand-over,
back-pressure, rebalance); `kafka_commits.py` is the at-least-once commit point (per partition,
commit only up to the lowest message whose samples have not all reached a decision; score records
carry an idempotency key, so a replay after a crash is harmless downstream); `kafka_dlq.py`
writes the dead letters; `kafka_messages.py` reads message values.

Per message handed to the pipeline: a `PendingAck` whose completion marks the offset done at the
commit point. OTLP formats go through the `TraceConsumer` (`OtlpIngest.ingest(..., ack=...)`),
which holds the ack for every retrieval or buffered trace it takes on; `rag_event` messages become
one `Retrieval` that carries the ack to its decision. The ack is sealed once the message is handed
over, so a message with nothing to score is done at once.

rag_event head sampling is the gate's (sampling/decide.py); the receiver only asks the same
sampler, through the byte peek (`kafka_event_peek`), which messages the head decision drops: at
1% almost every message is only counted `not_sampled`, so it must cost far less than parsing it.
A run of messages it drops becomes one ledger step and one `not_sampled(service, n)` per service
per fetched batch, with no per-message objects. Everything else (kept traces, anything the peek
is unsure of) is parsed, validated and decided by the gate. Trade-off, see `kafka_event_peek`: a
dropped message is checked only for looking like a JSON object (so garbage, protobuf and
truncated messages are still dead-lettered); invalid JSON inside the braces is counted.

- Back-pressure: a partition with `max_undone_per_partition` messages not yet done is paused and
  resumed at half that (checked as decisions arrive, not only between fetches), and all are
  paused while `max_undone_total` are not done (kept below the scoring queue, so Kafka input
  waits instead of being shed as `overloaded`): a slow judge costs lag, not memory.
- A fetched batch is taken whole (so aiokafka's next fetch overlaps our work) and handed over in
  slices of `HAND_OVER_SLICE`, yielding between them so that scores keep flowing.
- Rebalance: see `kafka_commits.CommitPoint.revoked`.
- Poison: a message that cannot be decoded goes to the dead-letter topic, and its offset counts as
  done once the dead letter is written: it never stalls the partition.
- Shutdown: `finish` stops reading (nothing more is handed over; periodic commits go on and the
  consumer stays in its group while the rest of the pipeline finishes) and lets dead letters
  being written finish; `close`, after every stage finished, freezes the commit point, commits
  what was decided and leaves the group. So everything scored before the exit is committed, and
  what shutdown cut short (`failed`/`shutdown`, which never acknowledges its input) is read again
  after a restart.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import IllegalStateError, KafkaError
from ctxprec.collector.components import Deadline, RetrievalSink, TraceConsumer, cancelled
from ctxprec.collector.kafka.config import KafkaReceiverSettings
from ctxprec.collector.kafka.connect import until_connected
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.model import PendingAck
from ctxprec.collector.receivers.kafka_commits import (
    REVOKE_DRAIN_S,
    Barrier,
    CommitPoint,
    Partition,
)
from ctxprec.collector.receivers.kafka_dlq import DeadLetters, DeadLetterWriter
from ctxprec.collector.receivers.kafka_event_peek import EventPeek
from ctxprec.collector.receivers.kafka_messages import (
    MessageError,
    check_size,
    decode_otlp,
    load_json,
    parse_event,
    retrieval_from_event,
)
from ctxprec.collector.sampling.sampler import TraceSampler
from ctxprec.scorer.retry import Backoff

log = logging.getLogger(__name__)

RECEIVER = "kafka"
FETCH_TIMEOUT_MS = 100
READ_BACKOFF = Backoff(base_s=0.1, cap_s=5.0)
# Take everything the fetcher holds at once: aiokafka sends a node its next fetch only when no
# partition of that node has records left, so draining the buffer lets the broker round trip
# overlap our work. The work itself goes in slices with a yield between them, so that scores
# and judge requests keep moving while a large batch is handed over.
MAX_RECORDS_PER_FETCH = 100_000
HAND_OVER_SLICE = 500
LAG_INTERVAL_S = 0.5


class KafkaReceiver:
    def __init__(self, settings: KafkaReceiverSettings, *, sink: RetrievalSink, metrics: Metrics,
                 ingest: TraceConsumer | None = None, sampler: TraceSampler | None = None) -> None:
        """`sink` takes rag_event retrievals (and the counts of those the head sampling drops),
        `ingest` OTLP requests; `sampler` (the gate's) lets the byte peek find what head sampling
        drops."""
        if settings.format != "rag_event" and ingest is None:
            raise ValueError(f"kafka format {settings.format} needs the OTLP ingest stage")
        self.settings = settings
        self._total_cap = settings.max_undone_total
        self.sink = sink
        self.ingest = ingest
        self.metrics = metrics
        self.commits = CommitPoint(settings, metrics, on_done=self._resume_if_room)
        self._peek = EventPeek(sampler) if sampler is not None else None
        self._not_sampled: Counter[str] = Counter()
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: AIOKafkaProducer | None = None
        self._dead_letters: DeadLetters | None = None
        self._stopped: set[TopicPartition] = set()  # rewound by back-pressure during this batch
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._last_lag = 0.0
        self.handed_over = 0  # messages handed to the pipeline (for benchmarks and tests)

    def commit_after(self, barrier: Barrier) -> None:
        """Run `barrier` before each commit (the results producer's flush)."""
        self.commits.barrier = barrier

    @property
    def _partitions(self) -> dict[TopicPartition, Partition]:
        return self.commits.partitions

    @property
    def dead_lettered(self) -> int:
        return self._dead_letters.count if self._dead_letters is not None else 0

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Connected to the broker and reading."""
        return self._consumer is not None and self._task is not None and not self._task.done()

    @property
    def assignment(self) -> set[TopicPartition]:
        return set(self._partitions)

    async def start(self) -> None:
        """Connects in the background: a broker that is not up yet (a common start-up order in
        Kubernetes) is retried with backoff and shows as not ready, not as a failed start."""
        s = self.settings
        log.info("kafka receiver for %s (format %s, group %s) at %s", s.topic, s.format, s.group,
                 s.connection.bootstrap)
        self._task = asyncio.create_task(self._main(), name="kafka-receiver")

    async def _main(self) -> None:
        async def connect() -> None:
            if not self._stopping:
                await self._connect()

        await until_connected(connect, self.settings.connection, "kafka receiver")
        if not self._stopping:
            assert self._consumer is not None
            self.commits.run(self._consumer)
            await self._run()

    async def _connect(self) -> None:
        s = self.settings
        common = s.connection.client_options()
        consumer = AIOKafkaConsumer(
            group_id=s.group, enable_auto_commit=False, auto_offset_reset=s.auto_offset_reset,
            session_timeout_ms=s.session_timeout_ms, heartbeat_interval_ms=s.heartbeat_interval_ms,
            # The coordinator waits this long for members to rejoin; our revocation drain is short.
            rebalance_timeout_ms=max(s.session_timeout_ms, int(REVOKE_DRAIN_S * 1000) + 5_000),
            # How long the broker may hold a fetch for partitions with no new data. While it holds
            # one, no other fetch goes to that broker, so a partition resumed after back-pressure
            # waits for it: aiokafka's 500 ms default showed as stalls; 100 ms costs a few more
            # idle fetches.
            fetch_max_wait_ms=100,
            max_partition_fetch_bytes=max(1024 * 1024, s.max_message_bytes + 1024),
            fetch_max_bytes=max(50 * 1024 * 1024, s.max_message_bytes + 1024), **common)
        consumer.subscribe([s.topic], listener=_Rebalance(self.commits))
        dlq_topic = s.dead_letter_topic
        producer = None
        if dlq_topic:
            producer = AIOKafkaProducer(acks="all", max_request_size=max(1024 * 1024, 2 * s.max_message_bytes),
                                        **common)
        try:
            if producer is not None:
                await producer.start()
            await consumer.start()
        except BaseException:
            if producer is not None:
                await producer.stop()
            await consumer.stop()
            raise
        self._consumer, self._producer = consumer, producer
        self._dead_letters = DeadLetters(DeadLetterWriter(producer, dlq_topic, self.metrics))
        log.info("kafka receiver connected to %s", s.connection.bootstrap)

    async def finish(self, deadline: Deadline) -> None:
        """Hand nothing more to the pipeline, and let dead letters being written finish. Periodic
        commits go on, and the consumer stays in its group, until `close`."""
        self._stopping = True
        await cancelled(self._task)
        self._task = None
        if self._dead_letters is not None:
            await self._dead_letters.wait(deadline)

    async def close(self) -> None:
        """Freeze the commit point, commit what was decided, leave the group."""
        if self._task is not None:  # closed without finishing (a failed start)
            await self.finish(Deadline.after(0.0))
        await self.commits.close()
        consumer, producer = self._consumer, self._producer
        self._consumer = self._producer = None
        try:
            if consumer is not None:
                await consumer.stop()
        finally:
            if producer is not None:
                await producer.stop()

    # -- the read loop ------------------------------------------------------------------------

    async def _run(self) -> None:
        assert self._consumer is not None
        consumer = self._consumer
        failures = 0  # in a row: the backoff grows with them and starts over after a good round
        while not self._stopping:
            try:
                batch = await consumer.getmany(timeout_ms=FETCH_TIMEOUT_MS, max_records=MAX_RECORDS_PER_FETCH)
                # Let the fetcher send its next requests before this batch is worked through, so
                # the broker round trip overlaps the work instead of following it.
                await asyncio.sleep(0)
                self._stopped.clear()
                for tp, records in batch.items():
                    for start in range(0, len(records), HAND_OVER_SLICE):
                        if start:
                            await asyncio.sleep(0)
                        await self._hand_over_batch(tp, records[start:start + HAND_OVER_SLICE])
                        if tp in self._stopped:
                            break  # rewound: the rest is fetched again once the partition resumes
                self._flow_control()
                if time.monotonic() - self._last_lag >= LAG_INTERVAL_S:
                    self._last_lag = time.monotonic()
                    await self.commits.update_lag()
                failures = 0
            except asyncio.CancelledError:
                raise
            except KafkaError as exc:
                # Broker gone or the group in flux: aiokafka reconnects; keep trying.
                delay = READ_BACKOFF.delay(failures)
                failures += 1
                log.warning("kafka receiver: %s; retrying in %.1fs", exc, delay)
                await asyncio.sleep(delay)
            except Exception:
                delay = READ_BACKOFF.delay(failures)
                failures += 1
                log.exception("kafka receiver loop failed; retrying in %.1fs", delay)
                await asyncio.sleep(delay)

    async def _hand_over_batch(self, tp: TopicPartition, records: list[ConsumerRecord]) -> None:
        handed = 0
        try:
            if self.settings.format == "rag_event":
                handed = self._hand_over_events(tp, records)
            else:
                handed = await self._hand_over_otlp_batch(tp, records)
        finally:
            self.handed_over += handed
            if handed:
                self.metrics.kafka_messages.labels(format=self.settings.format).inc(handed)
            self._flush_not_sampled()

    def _full(self, part: Partition, total: int) -> bool:
        return part.offsets.undone >= self.settings.max_undone_per_partition or total >= self._total_cap

    def _stop_at(self, part: Partition, record: ConsumerRecord) -> None:
        """Full: rewind to the first message not handed over and pause until it drains, so the
        bound holds whatever the fetch size."""
        assert self._consumer is not None
        self._stopped.add(part.tp)
        try:
            self._consumer.seek(part.tp, record.offset)
        except IllegalStateError:
            return
        self._pause(part)

    def _hand_over_events(self, tp: TopicPartition, records: list[ConsumerRecord]) -> int:
        """rag_event messages. Nothing here awaits, so a revocation cannot land mid-batch. Runs of
        messages that head sampling drops are decided from their bytes (`kafka_event_peek`): counted
        per service once per batch and passed to the ledger in one step, with no per-message
        objects. Back-pressure only needs checking before the others (only they can stay undone)."""
        part = self._partitions.get(tp)
        if part is None or part.offsets.revoked:
            return 0  # revoked while this batch was in hand: the new owner reads it
        offsets = part.offsets
        n = len(records)
        if self._peek is not None:
            services = self._peek.unsampled_services([r.value for r in records])
            # The messages that go the full way; the ones between are runs of dropped messages.
            full_way = [i for i, service in enumerate(services) if service is None]
        else:
            services, full_way = [], list(range(n))
        full_way.append(n)  # ends the last run
        total = self.commits.undone()
        handed = 0
        start = 0
        for i in full_way:
            if i > start:
                self._not_sampled.update(services[start:i])
                offsets.track_done(records[i - 1].offset)
                handed += i - start
            if i == n:
                break
            record = records[i]
            if self._full(part, total):
                self._stop_at(part, record)
                break
            undone = offsets.undone
            self._hand_over_event(part, record)
            handed += 1
            total += offsets.undone - undone
            start = i + 1
        if handed:
            self.commits.progressed()
        return handed

    async def _hand_over_otlp_batch(self, tp: TopicPartition, records: list[ConsumerRecord]) -> int:
        total = self.commits.undone()
        handed = 0
        for record in records:
            part = self._partitions.get(tp)
            if part is None or part.offsets.revoked:
                return handed  # revoked while this batch was in hand: the new owner reads it
            if self._full(part, total):
                self._stop_at(part, record)
                return handed
            undone = part.offsets.undone
            handed += 1
            await self._hand_over_otlp(part, record)
            total += part.offsets.undone - undone
        return handed

    def _pause(self, part: Partition) -> None:
        assert self._consumer is not None
        if not part.paused:
            part.paused = True
            try:
                self._consumer.pause(part.tp)
            except IllegalStateError:
                pass

    def _hand_over_event(self, part: Partition, record: ConsumerRecord) -> None:
        offsets = part.offsets
        offset = record.offset
        offsets.track(offset)
        ack = self.commits.ack_for(part, offset)
        try:
            event = parse_event(load_json(check_size(record.value, self.settings.max_message_bytes)))
        except MessageError as exc:
            self._dead_letter(record, ack, exc.reason, exc.message)
            return
        retrieval = retrieval_from_event(event, message_time_ms=record.timestamp)
        ack.hold()
        retrieval.ack = ack  # released by the last stage, once the retrieval has its decision
        try:
            self.sink.submit(retrieval)
        except Exception as exc:  # the pipeline refused it: dead-letter rather than stall
            log.exception("kafka message %s[%d]@%d could not be handed over", record.topic, record.partition, offset)
            if retrieval.ack is not None:  # never decided: do not hold the offset
                retrieval.ack = None
                ack.release()
            self._dead_letter(record, ack, "ingest_error", f"{type(exc).__name__}: {exc}")
            return
        ack.seal()

    def _flush_not_sampled(self) -> None:
        if self._not_sampled:
            counts, self._not_sampled = self._not_sampled, Counter()
            for service, n in counts.items():
                self.sink.not_sampled(service, n)

    async def _hand_over_otlp(self, part: Partition, record: ConsumerRecord) -> None:
        offsets = part.offsets
        offset = record.offset
        offsets.track(offset)
        ack = self.commits.ack_for(part, offset)
        try:
            value = check_size(record.value, self.settings.max_message_bytes)
            request = decode_otlp(value, self.settings.format, self.settings.max_message_bytes)
            assert self.ingest is not None
            # A TracesData message is also a valid ExportTraceServiceRequest encoding, so the
            # protobuf bytes can be forwarded untouched when nothing in them is held.
            raw = value if self.settings.format == "otlp_proto" else None
            await self.ingest.ingest(request, receiver=RECEIVER, raw=raw, ack=ack)
        except MessageError as exc:
            self._dead_letter(record, ack, exc.reason, exc.message)
            return
        except Exception as exc:  # the pipeline refused it: dead-letter rather than stall
            log.exception("kafka message %s[%d]@%d could not be handed over", record.topic, record.partition, offset)
            self._dead_letter(record, ack, "ingest_error", f"{type(exc).__name__}: {exc}")
            return
        ack.seal()

    def _dead_letter(self, record: ConsumerRecord, ack: PendingAck, reason: str, error: str) -> None:
        """Copy the message to the dead-letter topic; its offset is done once that is written."""
        assert self._dead_letters is not None
        self._dead_letters.send(record, ack, reason, error)

    def _resume_if_room(self, part: Partition) -> None:
        """A message of a paused partition was done: resume as soon as there is room rather than
        at the next turn of the read loop, which may be waiting out a fetch timeout."""
        if self._consumer is not None:
            self._flow_control()

    # -- back-pressure ------------------------------------------------------------------------

    def _flow_control(self) -> None:
        """Pause a partition at its bound (or every partition at the total bound); resume it once
        half of that has drained."""
        assert self._consumer is not None
        high = self.settings.max_undone_per_partition
        total_cap = self._total_cap
        total = self.commits.undone()
        for part in self._partitions.values():
            undone = part.offsets.undone
            if not part.paused and (undone >= high or total >= total_cap):
                self._pause(part)
            elif part.paused and undone <= high // 2 and total <= total_cap // 2:
                part.paused = False
                try:
                    self._consumer.resume(part.tp)
                except IllegalStateError:
                    pass  # revoked in between; the next assignment starts unpaused


class _Rebalance(ConsumerRebalanceListener):
    def __init__(self, commits: CommitPoint) -> None:
        self.commits = commits

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self.commits.revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.commits.assigned(set(assigned))

