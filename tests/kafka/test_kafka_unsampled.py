"""rag_event at sample rate 1% on a real broker: the unsampled majority is decided from the bytes
(with or without a key), counted per service, and committed through; sampled events are scored;
a malformed message is handled as documented in `kafka_event_peek`."""
from __future__ import annotations

import json

import pytest

from tests.kafka.inprocess import kafka_flags, running
from tests.kafka.tansu import (
    Broker,
    committed_total,
    create_topic,
    produce,
    rag_event,
    read_all,
)

pytestmark = pytest.mark.slow

PARTITIONS = 2
KEPT_LOW = 1  # low 64 bits of the trace id far below 1% of 2**64: sampled
DROPPED_LOW = 0xFFFF_FFFF_FFFF_0000


def _trace(i: int, low: int) -> str:
    return f"{i + 1:016x}{low:016x}"


async def test_unsampled_runs_are_counted_per_service_and_committed(broker: Broker, unique_topic: str,
                                                                    stub_judge) -> None:
    topic, results, dlq = unique_topic, unique_topic + ".scores", unique_topic + ".dlq"
    await create_topic(broker.bootstrap, topic, PARTITIONS)
    for t in (results, dlq):
        await create_topic(broker.bootstrap, t, 1)
    messages: list[tuple[bytes | None, bytes | None]] = []
    sampled: list[str] = []
    dropped = {"kb-bot": 0, "support": 0}
    for i in range(300):
        service = "kb-bot" if i % 3 else "support"
        kept = i % 40 == 0
        event = rag_event(i, service=service)
        event["trace_id"] = _trace(i, KEPT_LOW if kept else DROPPED_LOW)
        event["span_id"] = f"{i + 1:016x}"
        if kept:
            sampled.append(event["trace_id"])
        else:
            dropped[service] += 1
        # Half keyed by trace id (partition_traces_by_id), half without a key.
        key = event["trace_id"].encode() if i % 2 else None
        messages.append((key, json.dumps(event).encode()))
    # Keyed by an unrelated 32-hex id (a session id) that would be dropped: the trace id, which
    # is sampled, decides, so it is scored.
    odd = rag_event(1000, service="kb-bot")
    odd["trace_id"] = _trace(1000, KEPT_LOW)
    sampled.append(odd["trace_id"])
    messages.append((_trace(2000, DROPPED_LOW).encode(), json.dumps(odd).encode()))
    # Malformed inside the braces, trace dropped: counted not_sampled (the documented trade-off).
    messages.append((None, b'{"trace_id": "' + _trace(3000, DROPPED_LOW).encode()
                     + b'", "service": "support", "query": ]}'))
    dropped["support"] += 1
    # Not an object at all: dead-lettered even at 1%.
    messages.append((b"garbage", b"\xff\xfe not json"))
    await produce(broker.bootstrap, topic, messages)

    group = f"g-{unique_topic}"
    flags = kafka_flags(broker.bootstrap, topic, results, stub_judge.url, fmt="rag_event", group=group,
                        extra=["--sample-rate", "0.01"])
    async with running(flags) as pipeline:
        scored = await read_all(broker.bootstrap, results, expect=len(sampled))
        dead = await read_all(broker.bootstrap, dlq, expect=1)
        samples = pipeline.metrics.samples
        counted = {s: samples.labels(service=s, decision="not_sampled")._value.get() for s in dropped}
        evaluated = sum(samples.labels(service=s, decision="evaluated")._value.get() for s in dropped)
        assert pipeline.kafka_receiver.handed_over == len(messages)
    assert await committed_total(broker.bootstrap, topic, group, PARTITIONS) == len(messages)

    assert counted == dropped
    assert evaluated == len(sampled)
    assert sorted(json.loads(r.value)["trace_id"] for r in scored) == sorted(sampled)
    assert [r.key for r in dead] == [b"garbage"]
    assert dict(dead[0].headers)["ctxprec.error.reason"] == b"bad_json"
