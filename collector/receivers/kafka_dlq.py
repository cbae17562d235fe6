"""Dead-letter topic writer: a message that cannot be decoded is copied, key, value and headers
untouched, to the dead-letter topic with headers that say why and where it came from:

    ctxprec.error             what is wrong (text)
    ctxprec.error.reason      the bounded reason label (too_large, bad_json, ...)
    ctxprec.source.topic / ctxprec.source.partition / ctxprec.source.offset

The source partition must never stall on a bad message, so a send that keeps failing is given up
after a few tries (counted in `ctxprec_export_dropped_total{exporter="kafka_dlq"}`). A value the
broker refuses as too large is sent again cut to `TRUNCATED_BYTES`, marked `ctxprec.truncated`.

`DeadLetters` is the receiver's side: a message is dead-lettered in the background, and its
offset counts as done once the dead letter is written (or given up), so a bad message never
stalls its partition; at shutdown the receiver lets the letters being written finish.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Sequence

from aiokafka import ConsumerRecord
from aiokafka.errors import KafkaError, MessageSizeTooLargeError

from ctxprec.collector.components import Deadline
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.model import PendingAck

log = logging.getLogger(__name__)

TRUNCATED_BYTES = 64 * 1024
MAX_ERROR_CHARS = 1000


class DeadLetterWriter:
    def __init__(self, producer: Any, topic: str | None, metrics: Metrics, *, attempts: int = 3,
                 retry_backoff_s: float = 0.5) -> None:
        self.producer = producer  # AIOKafkaProducer, started by the owner; None when topic is None
        self.topic = topic
        self.metrics = metrics
        self.attempts = attempts
        self.retry_backoff_s = retry_backoff_s
        self.sent = 0
        self.dropped = 0

    async def send(self, *, key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes]],
                   source_topic: str, partition: int, offset: int, reason: str, error: str) -> bool:
        """Returns True once the broker has the dead letter; False when it was given up."""
        self.metrics.receiver_errors.labels(receiver="kafka", reason=reason).inc()
        if self.topic is None or self.producer is None:
            self.dropped += 1
            self.metrics.export_dropped.labels(exporter="kafka_dlq", reason="disabled").inc()
            return False
        extra = [
            ("ctxprec.error", error[:MAX_ERROR_CHARS].encode("utf-8", "replace")),
            ("ctxprec.error.reason", reason.encode()),
            ("ctxprec.source.topic", source_topic.encode()),
            ("ctxprec.source.partition", str(partition).encode()),
            ("ctxprec.source.offset", str(offset).encode()),
        ]
        out_headers = [(k, v if v is not None else b"") for k, v in headers] + extra
        payload = value
        for attempt in range(1, self.attempts + 1):
            try:
                await self.producer.send_and_wait(self.topic, payload, key=key, headers=out_headers)
            except MessageSizeTooLargeError:
                if payload is None or len(payload) <= TRUNCATED_BYTES:
                    break
                log.warning("dead letter from %s[%d]@%d is too large for the broker; sending it truncated",
                            source_topic, partition, offset)
                payload = payload[:TRUNCATED_BYTES]
                out_headers.append(("ctxprec.truncated", str(len(value or b"")).encode()))
                continue
            except KafkaError as exc:
                log.warning("dead letter to %s failed (attempt %d/%d): %s", self.topic, attempt, self.attempts, exc)
                await asyncio.sleep(self.retry_backoff_s * attempt)
                continue
            self.sent += 1
            self.metrics.kafka_dead_letters.labels(reason=reason).inc()
            return True
        self.dropped += 1
        self.metrics.export_dropped.labels(exporter="kafka_dlq", reason="send_failed").inc()
        log.error("gave up dead-lettering %s[%d]@%d (%s): the message is skipped", source_topic, partition, offset, reason)
        return False


class DeadLetters:
    """Dead-letters consumed messages in the background; each one's ack is done once written."""

    def __init__(self, writer: DeadLetterWriter) -> None:
        self.writer = writer
        self._tasks: set[asyncio.Task[None]] = set()
        self.count = 0

    def send(self, record: ConsumerRecord, ack: PendingAck, reason: str, error: str) -> None:
        log.warning("kafka message %s[%d]@%d dead-lettered (%s): %s",
                    record.topic, record.partition, record.offset, reason, error[:300])
        self.count += 1
        ack.hold()
        ack.seal()

        async def send() -> None:
            try:
                await self.writer.send(
                    key=record.key, value=record.value, headers=list(record.headers or ()),
                    source_topic=record.topic, partition=record.partition, offset=record.offset,
                    reason=reason, error=error)
            finally:
                ack.release()

        task = asyncio.get_running_loop().create_task(send())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def wait(self, deadline: Deadline) -> None:
        """Let the dead letters being written finish, so that their offsets count as done."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=max(0.1, deadline.left()))
