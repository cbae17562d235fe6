"""The Kafka receiver's commit point (at-least-once): which offsets of which partition are done,
and committing them.

Each message handed to the pipeline gets a `PendingAck`; when it completes, the message's offset
is done in its partition's ledger (`kafka/offsets.py`), and a partition's offset is committed up
to the lowest message not yet done. Before each commit the `barrier` runs (the results producer's
flush: the "results flushed before a Kafka commit" link of the service graph), so an offset is
committed only after the score records of the messages below it reached the broker.

Commits run every `commit_interval_s` beside the read loop (waiting on the barrier must not hold
up reading), once more on revocation and at close. Once frozen (the receiver's close), decisions
no longer move the commit point: what shutdown left undecided is read again after a restart.
Consumer lag (`ctxprec_kafka_consumer_lag`) is measured from the same ledgers.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError
from ctxprec.collector.components import cancelled
from ctxprec.collector.kafka.config import KafkaReceiverSettings
from ctxprec.collector.kafka.offsets import PartitionOffsets
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.model import PendingAck

log = logging.getLogger(__name__)

REVOKE_DRAIN_S = 5.0
CLOSE_BARRIER_S = 1.0  # the results were flushed when their exporter finished; this is a last check
Barrier = Callable[[], Awaitable[None]]


@dataclass(slots=True)
class Partition:
    """One assigned partition: its ledger for this assignment, and whether back-pressure paused it."""

    tp: TopicPartition
    offsets: PartitionOffsets = field(default_factory=PartitionOffsets)
    paused: bool = False


class CommitPoint:
    def __init__(self, settings: KafkaReceiverSettings, metrics: Metrics, *, barrier: Barrier | None = None,
                 on_done: Callable[[Partition], None] | None = None) -> None:
        self.settings = settings
        self.metrics = metrics
        self.barrier = barrier
        self._on_done = on_done  # the receiver resumes a paused partition as soon as there is room
        self.partitions: dict[TopicPartition, Partition] = {}
        self._consumer: AIOKafkaConsumer | None = None
        self._lock = asyncio.Lock()
        self._progress = asyncio.Event()  # set whenever some message is done
        self._loop: asyncio.Task[None] | None = None
        self.frozen = False

    # -- acks -----------------------------------------------------------------------------------

    def ack_for(self, part: Partition, offset: int) -> PendingAck:
        return PendingAck(lambda: self.done(part, offset))

    def done(self, part: Partition, offset: int) -> None:
        if self.frozen:
            return  # decided after the receiver closed its commit point: read again after a restart
        part.offsets.done(offset)
        self._progress.set()
        if part.paused and not part.offsets.revoked and self._on_done is not None:
            self._on_done(part)

    def progressed(self) -> None:
        """Messages were done in bulk (a run the head sampling dropped)."""
        self._progress.set()

    def undone(self, parts: list[Partition] | None = None) -> int:
        chosen = parts if parts is not None else list(self.partitions.values())
        return sum(p.offsets.undone for p in chosen)

    async def wait_progress(self, timeout: float) -> None:
        self._progress.clear()
        try:
            await asyncio.wait_for(self._progress.wait(), timeout=max(0.01, min(timeout, 0.5)))
        except asyncio.TimeoutError:
            pass

    # -- commits --------------------------------------------------------------------------------

    def run(self, consumer: AIOKafkaConsumer) -> None:
        """Commit periodically through `consumer` (connected)."""
        self._consumer = consumer
        self._loop = asyncio.create_task(self._commit_loop(), name="kafka-commits")

    async def _commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.commit_interval_s)
            await self.commit(barrier_timeout_s=max(5.0, 10 * self.settings.commit_interval_s))

    async def commit(self, parts: list[Partition] | None = None, *, barrier_timeout_s: float) -> None:
        """Commit every partition whose done-offset moved. Failures are logged and retried at the
        next interval (a failed commit only means more replays after a crash)."""
        if self._consumer is None:
            return
        async with self._lock:
            chosen = parts if parts is not None else list(self.partitions.values())
            offsets = {p.tp: p.offsets.pending_commit() for p in chosen}
            offsets = {tp: off for tp, off in offsets.items() if off is not None}
            if not offsets:
                return
            try:
                if self.barrier is not None:
                    # Records of the messages below these offsets must be out before they commit.
                    await asyncio.wait_for(self.barrier(), barrier_timeout_s)
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

    async def close(self) -> None:
        """Freeze and commit what is done: the last commit before the consumer leaves its group."""
        self.frozen = True
        await cancelled(self._loop)
        self._loop = None
        await self.commit(barrier_timeout_s=CLOSE_BARRIER_S)
        left = self.undone()
        if left:
            log.warning("kafka receiver stopped with %d messages not yet decided; they will be read again", left)
        self._consumer = None

    # -- lag ------------------------------------------------------------------------------------

    async def update_lag(self) -> None:
        """`ctxprec_kafka_consumer_lag`: messages from the lowest one not yet decided to the end."""
        consumer = self._consumer
        if consumer is None:
            return
        for part in list(self.partitions.values()):
            high = consumer.highwater(part.tp)
            if high is None:
                continue  # no fetch answer for it yet
            done_upto = part.offsets.low_watermark
            if done_upto is None:
                try:  # nothing read in this assignment: measure from where reading starts
                    done_upto = await asyncio.wait_for(consumer.position(part.tp), 1.0)
                except (IllegalStateError, asyncio.TimeoutError, KafkaError):
                    continue
            self.metrics.kafka_lag.labels(topic=part.tp.topic, partition=str(part.tp.partition)).set(
                max(0, high - done_upto))

    # -- rebalance ------------------------------------------------------------------------------

    async def revoked(self, revoked: set[TopicPartition]) -> None:
        """Hand over nothing more of these, wait briefly for what is in flight (fewer replays for
        the next owner), commit, and drop their ledgers (late completions land on the dropped
        ledger and are ignored)."""
        parts = [self.partitions[tp] for tp in revoked if tp in self.partitions]
        for part in parts:
            part.offsets.revoked = True
        # Frozen (closing): nothing can move the commit point any more, so do not wait.
        deadline = time.monotonic() + (0.0 if self._consumer is None or self.frozen else min(
            REVOKE_DRAIN_S, self.settings.shutdown_drain_s))
        while self.undone(parts) and time.monotonic() < deadline:
            await self.wait_progress(deadline - time.monotonic())
        await self.commit(parts, barrier_timeout_s=REVOKE_DRAIN_S)
        for part in parts:
            self.partitions.pop(part.tp, None)
            try:
                self.metrics.kafka_lag.remove(part.tp.topic, str(part.tp.partition))
            except KeyError:
                pass
        if parts:
            log.info("kafka partitions revoked: %s", sorted(p.tp.partition for p in parts))

    def assigned(self, assigned: set[TopicPartition]) -> None:
        for tp in assigned:
            self.partitions[tp] = Partition(tp)
        if assigned:
            log.info("kafka partitions assigned: %s", sorted(tp.partition for tp in assigned))
