"""The Kafka receiver (docs/KAFKA.md): an aiokafka consumer in a consumer group that hands each
message to the pipeline and commits, per partition, only up to the lowest message whose samples
have not all reached a decision (at-least-once; score records carry an idempotency key, so a
replay after a crash is harmless downstream).

Per message handed to the pipeline: a `PendingAck` whose completion marks the offset done in the
partition's ledger (`collector/kafka/offsets.py`). OTLP formats go through
`OtlpIngest.ingest(..., ack=...)`, which holds the ack for every retrieval or buffered trace it
takes on; `rag_event` messages become one `Retrieval` that carries the ack to its decision. The ack
is sealed once the message is handed over, so a message with nothing to score is done at once.

rag_event head sampling happens here, with the gate's sampler (the pipeline passes it): at 1%
almost every message is only counted `not_sampled`, so it must cost far less than parsing it.
`kafka_event_peek` reads `trace_id` and `service` from the raw bytes; a run of messages it drops
becomes one ledger step and one `not_sampled(service, n)` per service per fetched batch, with no
per-message objects. Everything else (kept traces, anything the peek is unsure of) is parsed,
validated and decided by the gate as before. Trade-off, see `kafka_event_peek`: a dropped message
is checked only for looking like a JSON object (so garbage, protobuf and truncated messages are
still dead-lettered); invalid JSON or a bad event inside the braces is counted `not_sampled`.

- Back-pressure: a partition with `max_undone_per_partition` messages not yet done is paused and
  resumed at half that (checked as decisions arrive, not only between fetches), and all are
  paused while `max_undone_total` are not done (kept below the scoring queue, so Kafka input
  waits instead of being shed as `overloaded`): a slow judge costs lag, not memory.
- A fetched batch is taken whole (so aiokafka's next fetch overlaps our work) and handed over in
  slices of `HAND_OVER_SLICE`, yielding between them so that scores keep flowing.
- Rebalance: on revocation the receiver stops handing over that partition's messages, waits
  briefly for what is in flight to be decided (fewer replays for the next owner), commits, and
  drops the partition's ledger; late completions land on the dropped ledger and are ignored.
- Poison: a message that cannot be decoded goes to the dead-letter topic (`kafka_dlq`), and its
  offset counts as done once the dead letter is written: it never stalls the partition.
- `commit_barrier` (e.g. the results producer's flush) runs before each commit, so an offset is
  committed only after the score records of the messages below it reached the broker.
- Shutdown (driven by the pipeline): `stop_reading` (nothing more is handed over; periodic
  commits go on), the scoring workers drain, `freeze` (later decisions no longer move the commit
  point) immediately before the workers still running are cancelled, then `stop` commits and
  leaves the group. So everything scored before the exit is committed, and what shutdown cut
  short (`failed`/`shutdown`) is read again after a restart. Used on its own, `stop` waits up to
  `shutdown_drain_s` for in-flight messages instead.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Protocol

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError
from ctxprec.collector.kafka.config import KafkaConfig
from ctxprec.collector.kafka.connect import until_connected
from ctxprec.collector.kafka.offsets import PartitionOffsets
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.model import PendingAck
from ctxprec.collector.receivers.kafka_dlq import DeadLetterWriter
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
REVOKE_DRAIN_S = 5.0
LAG_INTERVAL_S = 0.5
STANDALONE_QUEUE_SIZE = 1000  # `--queue-size`'s default


class Ingest(Protocol):
    def ingest(self, request: Any, *, receiver: str, raw: bytes | None = None, ack: PendingAck | None = None) -> Any: ...


class RetrievalSink(Protocol):
    def submit(self, retrieval: Any) -> None: ...
    def not_sampled(self, service: str, count: int) -> None: ...


@dataclass(slots=True)
class _Partition:
    tp: TopicPartition
    offsets: PartitionOffsets = field(default_factory=PartitionOffsets)
    paused: bool = False


class KafkaReceiver:
    def __init__(self, settings: KafkaConfig, *, sink: RetrievalSink, metrics: Metrics,
                 ingest: Ingest | None = None, commit_barrier: Callable[[], Awaitable[None]] | None = None,
                 sampler: TraceSampler | None = None) -> None:
        if settings.format != "rag_event" and ingest is None:
            raise ValueError(f"kafka format {settings.format} needs the OTLP ingest stage")
        if settings.max_undone_total is None:  # used on its own: the pipeline derives it from --queue-size
            settings = settings.with_queue_size(STANDALONE_QUEUE_SIZE)
        self.settings = settings
        self._total_cap: int = settings.max_undone_total or 1
        self.sink = sink
        self.ingest = ingest
        self.metrics = metrics
        self.commit_barrier = commit_barrier
        # rag_event head sampling, the same sampler as the gate's (the pipeline passes it).
        self._sampler = sampler
        self._peek = EventPeek(sampler) if sampler is not None else None
        self._not_sampled: Counter[str] = Counter()
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: AIOKafkaProducer | None = None
        self._dlq: DeadLetterWriter | None = None
        self._partitions: dict[TopicPartition, _Partition] = {}
        self._stopped: set[TopicPartition] = set()  # rewound by back-pressure during this batch
        self._task: asyncio.Task[None] | None = None
        self._dlq_tasks: set[asyncio.Task[None]] = set()
        self._commit_lock = asyncio.Lock()
        self._progress = asyncio.Event()  # set whenever some message is done
        self._stopping = False
        self._frozen = False
        self._committer: asyncio.Task[None] | None = None
        self._last_lag = 0.0
        self.handed_over = 0  # messages handed to the pipeline (for benchmarks and tests)
        self.dead_lettered = 0

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
        log.info("kafka receiver for %s (format %s, group %s) at %s", s.topic, s.format, s.group, s.bootstrap)
        self._task = asyncio.create_task(self._main(), name="kafka-receiver")

    async def _main(self) -> None:
        async def connect() -> None:
            if not self._stopping:
                await self._connect()

        await until_connected(connect, self.settings, "kafka receiver")
        if not self._stopping:
            self._committer = asyncio.create_task(self._commit_loop(), name="kafka-commits")
            await self._run()

    async def _connect(self) -> None:
        s = self.settings
        common = dict(bootstrap_servers=s.bootstrap_servers, client_id=s.client_id, **s.security.client_options())
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
        consumer.subscribe([s.topic], listener=_Rebalance(self))
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
        self._dlq = DeadLetterWriter(producer, dlq_topic, self.metrics)
        log.info("kafka receiver connected to %s", s.bootstrap)

    async def stop_reading(self) -> None:
        """Hand nothing more to the pipeline (the first step of shutdown). Periodic commits go on,
        and the consumer stays in its group, until `stop`."""
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._task = None

    async def wait_dead_letters(self, timeout_s: float) -> None:
        """Let dead letters being written finish, so that their offsets count as done."""
        if self._dlq_tasks:
            await asyncio.wait(set(self._dlq_tasks), timeout=max(0.1, timeout_s))

    def freeze(self) -> None:
        """From now on, decisions no longer move the commit point. Shutdown calls this after the
        scoring workers drained and just before it cancels them: the final commit then covers
        everything scored, and nothing cut short by shutdown (`failed`/`shutdown`), which is read
        and scored again after a restart. Synchronous, so nothing can be decided in between."""
        self._frozen = True

    async def stop(self) -> None:
        """Stop reading, commit what was decided, leave the group. Without a prior `freeze` (the
        receiver used on its own) in-flight messages first get `shutdown_drain_s` to be decided."""
        await self.stop_reading()
        if self._committer is not None:
            self._committer.cancel()
            await asyncio.gather(self._committer, return_exceptions=True)
            self._committer = None
        if self._consumer is None:
            return
        deadline = time.monotonic() + (0.0 if self._frozen else self.settings.shutdown_drain_s)
        while not self._frozen and self._undone() and time.monotonic() < deadline:
            await self._wait_progress(deadline - time.monotonic())
        if not self._frozen:
            await self.wait_dead_letters(deadline - time.monotonic())
        await self._commit(barrier_timeout_s=max(1.0, deadline - time.monotonic()))
        left = self._undone()
        if left:
            log.warning("kafka receiver stopped with %d messages not yet decided; they will be read again", left)
        consumer, producer = self._consumer, self._producer
        self._consumer = self._producer = None
        try:
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
                    await self._update_lag()
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

    def _full(self, part: _Partition, total: int) -> bool:
        return part.offsets.undone >= self.settings.max_undone_per_partition or total >= self._total_cap

    def _stop_at(self, part: _Partition, record: ConsumerRecord) -> None:
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
        total = self._undone()
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
            self._progress.set()
        return handed

    async def _hand_over_otlp_batch(self, tp: TopicPartition, records: list[ConsumerRecord]) -> int:
        total = self._undone()
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

    def _pause(self, part: _Partition) -> None:
        assert self._consumer is not None
        if not part.paused:
            part.paused = True
            try:
                self._consumer.pause(part.tp)
            except IllegalStateError:
                pass

    def _ack_for(self, part: _Partition, offset: int) -> PendingAck:
        return PendingAck(lambda: self._done(part, offset))

    def _hand_over_event(self, part: _Partition, record: ConsumerRecord) -> None:
        offsets = part.offsets
        offset = record.offset
        offsets.track(offset)
        try:
            obj = load_json(check_size(record.value, self.settings.max_message_bytes))
            if self._head_unsampled(obj):
                offsets.done(offset)
                return
            event = parse_event(obj)
        except MessageError as exc:
            self._dead_letter(record, self._ack_for(part, offset), exc.reason, exc.message)
            return
        retrieval = retrieval_from_event(event, message_time_ms=record.timestamp)
        ack = self._ack_for(part, offset)
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

    def _head_unsampled(self, obj: Any) -> bool:
        """The head sampling decision on the two fields it needs, before validating the rest:
        at 1% sampling, 99% of events are only counted (as `not_sampled`, which the gate would
        decide for them too). Anything unusual goes the full way through the gate."""
        sampler = self._sampler
        if sampler is None or type(obj) is not dict:
            return False
        trace_id = obj.get("trace_id")
        service = obj.get("service") or ""
        if type(trace_id) is not str or len(trace_id) != 32 or type(service) is not str:
            return False
        try:
            raw = bytes.fromhex(trace_id)
        except ValueError:
            return False
        # A rate of 0 is a rule's "filtered", which the gate decides and names.
        if sampler.head_rate(service) <= 0 or sampler.keep_trace(raw, service):
            return False
        self._not_sampled[service] = self._not_sampled.get(service, 0) + 1
        return True

    def _flush_not_sampled(self) -> None:
        if self._not_sampled:
            counts, self._not_sampled = self._not_sampled, Counter()
            for service, n in counts.items():
                self.sink.not_sampled(service, n)

    async def _hand_over_otlp(self, part: _Partition, record: ConsumerRecord) -> None:
        offsets = part.offsets
        offset = record.offset
        offsets.track(offset)
        ack = self._ack_for(part, offset)
        try:
            value = check_size(record.value, self.settings.max_message_bytes)
            request = decode_otlp(value, self.settings.format, self.settings.max_message_bytes)
            assert self.ingest is not None
            # A TracesData message is also a valid ExportTraceServiceRequest encoding, so the
            # protobuf bytes can be forwarded untouched when nothing in them is held.
            raw = value if self.settings.format == "otlp_proto" else None
            result = self.ingest.ingest(request, receiver=RECEIVER, raw=raw, ack=ack)
            if inspect.isawaitable(result):
                await result
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
        assert self._dlq is not None
        log.warning("kafka message %s[%d]@%d dead-lettered (%s): %s",
                    record.topic, record.partition, record.offset, reason, error[:300])
        self.dead_lettered += 1
        ack.hold()
        ack.seal()

        async def send() -> None:
            try:
                await self._dlq.send(  # type: ignore[union-attr]
                    key=record.key, value=record.value, headers=list(record.headers or ()),
                    source_topic=record.topic, partition=record.partition, offset=record.offset,
                    reason=reason, error=error)
            finally:
                ack.release()

        task = asyncio.get_running_loop().create_task(send())
        self._dlq_tasks.add(task)
        task.add_done_callback(self._dlq_tasks.discard)

    def _done(self, part: _Partition, offset: int) -> None:
        if self._frozen:
            return  # decided after shutdown froze the commit point: read again after a restart
        part.offsets.done(offset)
        self._progress.set()
        if part.paused and self._consumer is not None and not part.offsets.revoked:
            # Resume as soon as there is room rather than at the next turn of the read loop,
            # which may be waiting out a fetch timeout.
            self._flow_control()

    # -- back-pressure, lag, commits ------------------------------------------------------------

    def _flow_control(self) -> None:
        """Pause a partition at its bound (or every partition at the total bound); resume it once
        half of that has drained."""
        assert self._consumer is not None
        high = self.settings.max_undone_per_partition
        total_cap = self._total_cap
        total = self._undone()
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

    async def _update_lag(self) -> None:
        """`ctxprec_kafka_consumer_lag`: messages from the lowest one not yet decided to the end."""
        assert self._consumer is not None
        for part in list(self._partitions.values()):
            high = self._consumer.highwater(part.tp)
            if high is None:
                continue  # no fetch answer for it yet
            done_upto = part.offsets.low_watermark
            if done_upto is None:
                try:  # nothing read in this assignment: measure from where reading starts
                    done_upto = await asyncio.wait_for(self._consumer.position(part.tp), 1.0)
                except (IllegalStateError, asyncio.TimeoutError, KafkaError):
                    continue
            self.metrics.kafka_lag.labels(topic=part.tp.topic, partition=str(part.tp.partition)).set(
                max(0, high - done_upto))

    async def _commit_loop(self) -> None:
        """Periodic commits, beside the read loop: waiting on the barrier (results delivery) must
        not hold up reading."""
        while True:
            await asyncio.sleep(self.settings.commit_interval_s)
            await self._commit(barrier_timeout_s=max(5.0, 10 * self.settings.commit_interval_s))

    async def _commit(self, parts: list[_Partition] | None = None, *, barrier_timeout_s: float) -> None:
        """Commit every partition whose done-offset moved. Failures are logged and retried at the
        next interval (a failed commit only means more replays after a crash)."""
        if self._consumer is None:
            return
        async with self._commit_lock:
            chosen = parts if parts is not None else list(self._partitions.values())
            offsets = {p.tp: p.offsets.pending_commit() for p in chosen}
            offsets = {tp: off for tp, off in offsets.items() if off is not None}
            if not offsets:
                return
            try:
                if self.commit_barrier is not None:
                    # Records of the messages below these offsets must be out before they commit.
                    await asyncio.wait_for(self.commit_barrier(), barrier_timeout_s)
                await self._consumer.commit(offsets)
            except asyncio.TimeoutError:
                log.warning("kafka commit postponed: score records not yet delivered after %.0fs", barrier_timeout_s)
                return
            except (CommitFailedError, IllegalStateError, KafkaError) as exc:
                log.warning("kafka commit of %d partitions failed: %s", len(offsets), exc)
                return
            by_tp = {p.tp: p for p in chosen}
            for tp, off in offsets.items():
                by_tp[tp].offsets.mark_committed(off)

    def _undone(self, parts: list[_Partition] | None = None) -> int:
        chosen = parts if parts is not None else list(self._partitions.values())
        return sum(p.offsets.undone for p in chosen)

    async def _wait_progress(self, timeout: float) -> None:
        self._progress.clear()
        try:
            await asyncio.wait_for(self._progress.wait(), timeout=max(0.01, min(timeout, 0.5)))
        except asyncio.TimeoutError:
            pass

    # -- rebalance ------------------------------------------------------------------------------

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        parts = [self._partitions[tp] for tp in revoked if tp in self._partitions]
        for part in parts:
            part.offsets.revoked = True  # the read loop hands over nothing more of these
        # Frozen (shutting down): nothing can move the commit point any more, so do not wait.
        deadline = time.monotonic() + (0.0 if self._consumer is None or self._frozen else min(
            REVOKE_DRAIN_S, self.settings.shutdown_drain_s))
        while self._undone(parts) and time.monotonic() < deadline:
            await self._wait_progress(deadline - time.monotonic())
        await self._commit(parts, barrier_timeout_s=REVOKE_DRAIN_S)
        for part in parts:
            self._partitions.pop(part.tp, None)
            try:
                self.metrics.kafka_lag.remove(part.tp.topic, str(part.tp.partition))
            except KeyError:
                pass
        if parts:
            log.info("kafka partitions revoked: %s", sorted(p.tp.partition for p in parts))

    async def on_assigned(self, assigned: set[TopicPartition]) -> None:
        for tp in assigned:
            self._partitions[tp] = _Partition(tp)
        if assigned:
            log.info("kafka partitions assigned: %s", sorted(tp.partition for tp in assigned))


class _Rebalance(ConsumerRebalanceListener):
    def __init__(self, receiver: KafkaReceiver) -> None:
        self.receiver = receiver

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self.receiver.on_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        await self.receiver.on_assigned(set(assigned))

