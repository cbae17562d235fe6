"""Kafka diagnostics exporter: every `kafka.diagnostics_interval_s`, the noisy-document summaries
(docs/DIAGNOSTICS.md), one message per service and retriever, to `--kafka-diagnostics-topic`: a
topic of their own, never the score records' topic, so that consumers of score records never see
them. A last round is written at shutdown, so that a short run leaves its summary too.

Each message is the `/diagnostics/documents` entry of one pair plus when it was taken:

    {"kind": "ctxprec.noisy_documents", "at": 1764417600.0, "slots": 1000, "previews": false,
     "limit": 20, "service": "shop", "retriever": "dense", "irrelevant_verdicts": 3929, ...,
     "documents": [{"document": "doc-0002", "irrelevant": 692, ...}, ...]}

keyed by `service/retriever` (a compacted topic keeps the latest summary of each pair).

With cluster learning every replica's summaries cover the whole service, so one replica publishes
them for the cluster: `publishing` (wired by the pipeline: the replica that owns partition 0 of
the input topic in the scoring group) is asked before each round, and the others skip theirs.
When partition 0 moves (a replica stopped, the group rebalanced), its new owner takes over.

A summary replaces the one before it, so a round that cannot be delivered is not retried: it is
logged, counted in `ctxprec_export_dropped_total{exporter="kafka_diagnostics"}`, and the next
round carries the newer numbers.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any, Callable

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from ctxprec.collector.components import Deadline, cancelled
from ctxprec.collector.kafka.config import KafkaTopic
from ctxprec.collector.kafka.connect import start_producer
from ctxprec.collector.metrics.registry import Metrics

log = logging.getLogger(__name__)

EXPORTER = "kafka_diagnostics"
KIND = "ctxprec.noisy_documents"
# The body of /diagnostics/documents for every pair: {"slots", "previews", "limit", "summaries": [...]}.
Summaries = Callable[[], dict[str, Any]]


class KafkaDiagnosticsExporter:
    def __init__(self, settings: KafkaTopic, summaries: Summaries, metrics: Metrics, *, interval_s: float,
                 producer: AIOKafkaProducer | None = None, publishing: Callable[[], bool] | None = None) -> None:
        """A round of summaries every `interval_s`; `publishing`: whether this replica writes the
        rounds now (None: always)."""
        self.topic = settings.topic
        self.settings = settings
        self.interval_s = interval_s
        self._summaries = summaries
        self.metrics = metrics
        self._producer = producer
        self._own_producer = producer is None
        self._task: asyncio.Task[None] | None = None
        self.publishing = publishing
        self.rounds = 0  # rounds delivered
        self.sent = 0  # messages delivered

    async def start(self) -> None:
        """Connects in the background, like the results exporter: a broker that is away delays
        the summaries, never the sidecar's start."""
        self._task = asyncio.create_task(self._run(), name="kafka-diagnostics")

    async def finish(self, deadline: Deadline) -> None:
        """The last round (when connected), within `deadline`: it runs after scoring finished,
        so it counts every score."""
        await cancelled(self._task)
        self._task = None
        if self._producer is not None:
            try:
                await asyncio.wait_for(self.write_round(), deadline.left())
            except asyncio.TimeoutError:
                log.warning("kafka diagnostics: the last summary was not delivered at shutdown")

    async def close(self) -> None:
        if self._own_producer and self._producer is not None:
            await self._producer.stop()
            self._producer = None

    async def _run(self) -> None:
        await self._connect()
        while True:
            await asyncio.sleep(self.interval_s)
            await self.write_round()

    async def _connect(self) -> None:
        if self._producer is None:
            self._producer = await start_producer(self.settings.connection, "diagnostics", "kafka diagnostics")

    def messages(self) -> list[tuple[bytes, bytes]]:
        """(key, value) of each pair's summary as of now."""
        body = self._summaries()
        head = {"kind": KIND, "at": round(time.time(), 3), "slots": body.get("slots"),
                "previews": body.get("previews"), "limit": body.get("limit")}
        out = []
        for summary in body.get("summaries", []):
            key = f"{summary.get('service')}/{summary.get('retriever')}".encode()
            value = json.dumps({**head, **summary}, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
            out.append((key, value))
        return out

    async def write_round(self) -> None:
        producer = self._producer
        if producer is None:
            return
        publishing = self.publishing is None or self.publishing()
        self.metrics.kafka_diagnostics_publisher.set(1 if publishing else 0)
        if not publishing:
            return
        messages = self.messages()
        try:
            futures = [await producer.send(self.topic, value, key=key) for key, value in messages]
            await asyncio.gather(*futures)
        except KafkaError as exc:
            self.metrics.export_dropped.labels(exporter=EXPORTER, reason=type(exc).__name__).inc()
            log.warning("kafka diagnostics: summary not delivered (%s); the next round carries newer numbers", exc)
            return
        self.sent += len(messages)
        self.rounds += 1
