"""The cluster feed: this replica reads every replica's score records back from the Kafka results
topic and hands the other replicas' scores to its drift monitor and diagnostics (`PeerScores`),
so that its detector, its adaptive sample rate and its /diagnostics follow the whole service, not
the share of the partitions it happens to own (docs/KAFKA.md, "Many replicas, one view").

- Outside the scoring group: a consumer without a group id, assigned every partition of the
  results topic and starting at its end (what was scored before this replica started is not
  replayed: its detector warms up on new scores, as after any restart). Nothing is committed and
  no group state is left on the broker.
- Each score counts once per replica: a record whose `ctxprec.replica` header is this replica's is
  skipped (its own scores reached its detector directly, at once, through the metrics sink);
  records seen again (a producer retry) are skipped by their `ctxprec.record_id`.
- Never in the way of scoring: the feed is its own task and reads in slices, yielding between
  them; a results topic that is slow, away or broken only delays learning (connection retried with
  backoff, failures logged once a minute). A partition more than `max_lag_records` behind skips
  to its end (counted `skipped`), so learning stays current and memory bounded. A record that
  cannot be read is counted `malformed` and skipped.

Counted in `ctxprec_cluster_records_total{outcome}` (records.OUTCOMES).
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from typing import Sequence

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaError
from ctxprec.collector.cluster.records import Malformed, NotEvaluated, OtherScorer, peer_score
from ctxprec.collector.components import Deadline, PeerScores, cancelled
from ctxprec.collector.failure_log import FailureLog
from ctxprec.collector.kafka.config import KafkaTopic
from ctxprec.collector.kafka.connect import until_connected
from ctxprec.collector.kafka.score_headers import RECORD_ID, read_headers
from ctxprec.collector.metrics.children import Children
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.scorer.retry import Backoff

log = logging.getLogger(__name__)

# Records handled per turn of the event loop: scoring's own work waits at most one slice.
SLICE = 200
FETCH_TIMEOUT_MS = 200
# Record ids remembered against duplicates (a producer's retry lands within seconds).
REMEMBERED_IDS = 20_000
PARTITIONS_REFRESH_S = 30.0
READ_BACKOFF = Backoff(base_s=0.2, cap_s=10.0)


class ClusterFeed:
    def __init__(self, settings: KafkaTopic, *, replica: str, model: str, prompt_version: str, metrics: Metrics,
                 max_lag_records: int = 10_000, sinks: Sequence[PeerScores] = ()) -> None:
        """`replica`: this replica's name in the records' headers; `model`, `prompt_version`: the
        scorer whose scores it learns from; `sinks`: where the other replicas' scores go (wired by
        the pipeline)."""
        self.settings = settings
        self.topic = settings.topic
        self.replica = replica
        self.model = model
        self.prompt_version = prompt_version
        self.max_lag_records = max_lag_records
        self.sinks: list[PeerScores] = list(sinks)
        self.metrics = metrics
        self._outcomes = Children(metrics.cluster_records)
        self.failures = FailureLog("cluster feed", log)
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None
        self._seen: OrderedDict[bytes, None] = OrderedDict()
        self._next: dict[TopicPartition, int] = {}  # per partition, the offset after the last record read
        self.applied = 0

    @property
    def assigned(self) -> bool:
        """Reading the results topic (for tests and benchmarks: records produced from now on count)."""
        return bool(self._next) or (self._consumer is not None and bool(self._consumer.assignment()))

    # -- lifecycle --

    async def start(self) -> None:
        """Connects in the background: a results topic that is away delays learning, never the start."""
        self._task = asyncio.create_task(self._main(), name="cluster-feed")

    async def finish(self, deadline: Deadline) -> None:
        """Stop learning: nothing downstream waits for it."""
        await cancelled(self._task)
        self._task = None

    async def close(self) -> None:
        await self.finish(Deadline.after(0.0))
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()

    # -- reading --

    async def _main(self) -> None:
        await until_connected(self._connect, self.settings.connection, "cluster feed")
        await self._run()

    async def _connect(self) -> None:
        consumer = AIOKafkaConsumer(
            group_id=None, enable_auto_commit=False, fetch_max_wait_ms=100, max_partition_fetch_bytes=1024 * 1024,
            fetch_max_bytes=8 * 1024 * 1024, **self.settings.connection.client_options("cluster"))
        try:
            await consumer.start()
        except KafkaError:
            await consumer.stop()
            raise
        self._consumer = consumer

    async def _run(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        failures = 0
        refreshed = float("-inf")
        while True:
            try:
                if time.monotonic() - refreshed >= PARTITIONS_REFRESH_S or not self._next:
                    await self._assign(consumer)
                    refreshed = time.monotonic()
                    if not self._next:  # the topic is not there yet
                        await asyncio.sleep(READ_BACKOFF.delay(failures))
                        failures += 1
                        continue
                batch = await consumer.getmany(timeout_ms=FETCH_TIMEOUT_MS, max_records=SLICE)
                for tp, records in batch.items():
                    self._take(tp, records)
                    await asyncio.sleep(0)
                self._skip_if_behind(consumer)
                failures = 0
            except asyncio.CancelledError:
                raise
            except KafkaError as exc:
                delay = READ_BACKOFF.delay(failures)
                failures += 1
                self.failures.failed(type(exc).__name__, f"{exc}; retrying in {delay:.1f}s")
                await asyncio.sleep(delay)
            except Exception as exc:  # never let learning die silently, never let it touch scoring
                delay = READ_BACKOFF.delay(failures)
                failures += 1
                log.exception("cluster feed failed; retrying in %.1fs", delay)
                self.failures.failed(type(exc).__name__)
                await asyncio.sleep(delay)

    async def _assign(self, consumer: AIOKafkaConsumer) -> None:
        """Every partition of the results topic: the ones known so far keep their place; those at
        the first assignment start at the end, those added later (new partitions) at their start."""
        await consumer.topics()  # refreshes the metadata
        partitions = consumer.partitions_for_topic(self.topic) or set()
        wanted = {TopicPartition(self.topic, p) for p in partitions}
        new = wanted - set(self._next)
        if not new:
            return
        first = not self._next
        consumer.assign(sorted(wanted))
        if first:
            await consumer.seek_to_end(*new)
        else:
            await consumer.seek_to_beginning(*new)
        for tp in new:
            self._next[tp] = await consumer.position(tp)
        log.info("cluster feed reads %s (%d partitions) from replica %s", self.topic, len(wanted), self.replica)

    def _take(self, tp: TopicPartition, records: list[ConsumerRecord]) -> None:
        count = self._outcomes
        now = time.time()
        for record in records:
            self._next[tp] = record.offset + 1
            try:
                headers = read_headers(record.headers)
            except ValueError:
                count("malformed").inc()
                continue
            if headers.replica == self.replica:
                count("own").inc()
                continue
            record_id = next((value for name, value in record.headers or () if name == RECORD_ID and value), None)
            if record_id is not None:
                if record_id in self._seen:
                    count("duplicate").inc()
                    continue
                self._seen[record_id] = None
                if len(self._seen) > REMEMBERED_IDS:
                    self._seen.popitem(last=False)
            try:
                score = peer_score(record.value, headers, model=self.model, prompt_version=self.prompt_version)
            except Malformed:
                count("malformed").inc()
                continue
            except NotEvaluated:
                count("not_evaluated").inc()
                continue
            except OtherScorer:
                count("other_scorer").inc()
                continue
            for sink in self.sinks:
                try:
                    sink.peer_score(score)
                except Exception:  # a sink's bug must not stop the others learning
                    log.exception("cluster feed: %s refused a peer score", type(sink).__name__)
            self.applied += 1
            count("applied").inc()
            if record.timestamp:
                self.metrics.cluster_feed_delay.set(max(0.0, now - record.timestamp / 1000))

    def _skip_if_behind(self, consumer: AIOKafkaConsumer) -> None:
        for tp, position in self._next.items():
            high = consumer.highwater(tp)
            if high is not None and high - position > self.max_lag_records:
                consumer.seek(tp, high)
                self._outcomes("skipped").inc(high - position)
                self._next[tp] = high
                self.failures.failed("behind", f"{high - position} records of {tp.topic}[{tp.partition}] skipped")
