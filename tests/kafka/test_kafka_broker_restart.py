"""The broker goes away mid-stream and comes back: the sidecar reconnects and finishes.

The test broker keeps everything in memory, so a restart loses topics, data and the group's
committed offsets. The test therefore plays the part of durable storage itself: after the
restart it re-creates the topics and produces the whole stream again (same keys, so the same
partitions), plus a remainder that only exists after the restart. What must hold:
- the sidecar, still running, consumes again without being restarted;
- every remainder event gets its score record on the new results topic;
- every event of the first part was decided (scored before the outage, or again after it)."""
from __future__ import annotations

import asyncio
import json
import time

import pytest

from tests.kafka.inprocess import kafka_flags, running
from tests.kafka.tansu import Broker, create_topic, produce, rag_event, read_all

pytestmark = pytest.mark.slow

FIRST = 300
REMAINDER = 200
PARTITIONS = 2


class Collect:
    """A result sink beside the Kafka one: what was scored, whichever broker was up."""

    def __init__(self) -> None:
        self.traces: list[str] = []

    def emit(self, outcome) -> None:
        self.traces.append(outcome.retrieval.trace_id)


async def test_sidecar_survives_a_broker_restart(broker: Broker, unique_topic: str, make_stub_judge) -> None:
    stub = await make_stub_judge(latency_ms=40, jitter_ms=20, seed=9)
    topic, results = unique_topic, unique_topic + ".scores"

    async def create_topics() -> None:
        await create_topic(broker.bootstrap, topic, PARTITIONS)
        await create_topic(broker.bootstrap, results, 1)

    first = [rag_event(i) for i in range(FIRST)]
    remainder = [rag_event(i) for i in range(FIRST, FIRST + REMAINDER)]

    def messages(events: list[dict]) -> list[tuple[bytes, bytes]]:
        return [(e["trace_id"].encode(), json.dumps(e).encode()) for e in events]

    await create_topics()
    await produce(broker.bootstrap, topic, messages(first))
    collected = Collect()
    flags = kafka_flags(broker.bootstrap, topic, results, stub.url, fmt="rag_event", group=f"g-{unique_topic}",
                        extra=["--workers", "4", "--kafka-max-undone-per-partition", "50"])
    async with running(flags) as pipeline:
        pipeline.add_sink(collected)
        deadline = time.monotonic() + 30
        while len(collected.traces) < FIRST // 4:
            assert time.monotonic() < deadline, "nothing scored before the restart"
            await asyncio.sleep(0.05)
        before = len(set(collected.traces))
        assert before < FIRST, "the first part was done before the broker restart; nothing was tested"

        await asyncio.to_thread(broker.restart)
        await asyncio.sleep(1.0)  # the sidecar sees the outage
        await create_topics()
        await produce(broker.bootstrap, topic, messages(first + remainder))

        wanted = {e["trace_id"] for e in remainder}
        deadline = time.monotonic() + 90
        seen: set[str] = set()
        while not wanted <= seen:
            assert time.monotonic() < deadline, f"{len(wanted - seen)} remainder events not scored after the restart"
            records = await read_all(broker.bootstrap, results, expect=10**9, timeout_s=1.0)
            seen = {json.loads(r.value)["trace_id"] for r in records}
        assert pipeline.kafka_receiver.ready

    assert {e["trace_id"] for e in first} <= set(collected.traces)
    assert len(set(collected.traces)) == FIRST + REMAINDER
