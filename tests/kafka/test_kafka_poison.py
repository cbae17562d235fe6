"""Poison messages: garbage bytes, the wrong format, an event missing a field, a huge message and
a tombstone are dead-lettered (original key, value and headers, plus the error and source headers),
counted, and never stall the partition: every good message around them is scored and the offset
is committed to the end."""
from __future__ import annotations

import json

from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

import pytest

from tests.kafka.inprocess import kafka_flags, running
from tests.kafka.otel_data import otel_traces
from tests.kafka.tansu import (
    Broker,
    committed_total,
    create_topic,
    produce,
    rag_event,
    read_all,
)

pytestmark = pytest.mark.slow

MAX_MESSAGE_BYTES = 64 * 1024


def _huge_event() -> bytes:
    event = rag_event(10_000)
    event["contexts"] = ["[relevant] " + "x" * (3 * MAX_MESSAGE_BYTES)]
    return json.dumps(event).encode()


async def test_poison_is_dead_lettered_and_the_rest_is_scored(broker: Broker, unique_topic: str, stub_judge) -> None:
    topic, results, dlq = unique_topic, unique_topic + ".scores", unique_topic + ".dlq"
    for t in (topic, results, dlq):
        await create_topic(broker.bootstrap, t, 1)
    good = [rag_event(i) for i in range(40)]
    poison: dict[int, tuple[bytes | None, str]] = {  # position in the stream -> (value, reason)
        3: (b"\xff\xfe\x00 not json at all", "bad_json"),
        11: (TracesData().SerializeToString() + b"\x0a\x02\x08\x01", "bad_json"),  # OTLP on a rag_event topic
        17: (json.dumps({"query": "where are the contexts?"}).encode(), "bad_event"),
        25: (_huge_event(), "too_large"),
        33: (None, "empty"),
    }
    stream: list[tuple[bytes | None, bytes | None]] = []
    poison_keys: dict[bytes, tuple[bytes | None, str]] = {}
    g = iter(good)
    for pos in range(len(good) + len(poison)):
        if pos in poison:
            key = f"poison-{pos}".encode()
            poison_keys[key] = poison[pos]
            stream.append((key, poison[pos][0]))
        else:
            e = next(g)
            stream.append((e["trace_id"].encode(), json.dumps(e).encode()))
    await produce(broker.bootstrap, topic, stream, headers=[("app.origin", b"rag-app")],
                  max_request_size=4 * 1024 * 1024)

    group = f"g-{unique_topic}"
    flags = kafka_flags(broker.bootstrap, topic, results, stub_judge.url, fmt="rag_event", group=group,
                        extra=["--kafka-max-message-bytes", str(MAX_MESSAGE_BYTES)])
    async with running(flags) as pipeline:
        scored = await read_all(broker.bootstrap, results, expect=len(good))
        dead = await read_all(broker.bootstrap, dlq, expect=len(poison))
        metrics = pipeline.metrics
        counted = {reason: metrics.kafka_dead_letters.labels(reason=reason)._value.get()
                   for reason in {r for _, r in poison.values()}}
    assert await committed_total(broker.bootstrap, topic, group, 1) == len(stream)

    assert sorted(json.loads(r.value)["trace_id"] for r in scored) == sorted(e["trace_id"] for e in good)
    assert len(dead) == len(poison)
    expected_counts: dict[str, int] = {}
    for _, reason in poison.values():
        expected_counts[reason] = expected_counts.get(reason, 0) + 1
    assert counted == expected_counts
    offsets = {key: pos for pos, (key, _) in enumerate(stream)}
    for record in dead:
        value, reason = poison_keys[record.key]
        headers = dict(record.headers)
        assert record.value == value  # the original bytes, untouched (even the huge one)
        assert headers["app.origin"] == b"rag-app"  # the producer's headers are kept
        assert headers["ctxprec.error.reason"] == reason.encode()
        assert headers["ctxprec.error"], "the error header says what is wrong"
        assert headers["ctxprec.source.topic"] == topic.encode()
        assert headers["ctxprec.source.partition"] == b"0"
        assert headers["ctxprec.source.offset"] == str(offsets[record.key]).encode()
    errors = {k: dict(r.headers)["ctxprec.error"].decode() for k, r in ((r.key, r) for r in dead)}
    assert "contexts" in errors[b"poison-17"]
    assert str(MAX_MESSAGE_BYTES) in errors[b"poison-25"]


async def test_wrong_format_on_an_otlp_topic_is_dead_lettered(broker: Broker, unique_topic: str, stub_judge) -> None:
    topic, results, dlq = unique_topic, unique_topic + ".scores", unique_topic + ".dlq"
    for t in (topic, results, dlq):
        await create_topic(broker.bootstrap, t, 1)
    traces = otel_traces(4)
    stream: list[tuple[bytes | None, bytes | None]] = [(t.encode(), req.SerializeToString()) for t, _, _, req in traces]
    stream.insert(1, (b"rag-json", json.dumps(rag_event(1)).encode()))  # a rag_event on an otlp_proto topic
    stream.insert(3, (b"garbage", b"\xff" * 40))
    await produce(broker.bootstrap, topic, stream)

    group = f"g-{unique_topic}"
    flags = kafka_flags(broker.bootstrap, topic, results, stub_judge.url, fmt="otlp_proto", group=group)
    async with running(flags) as pipeline:
        scored = await read_all(broker.bootstrap, results, expect=len(traces))
        dead = await read_all(broker.bootstrap, dlq, expect=2)
        assert pipeline.metrics.kafka_dead_letters.labels(reason="bad_body")._value.get() == 2
    assert await committed_total(broker.bootstrap, topic, group, 1) == len(stream)
    assert sorted(json.loads(r.value)["trace_id"] for r in scored) == sorted(t for t, _, _, _ in traces)
    assert sorted(r.key for r in dead) == [b"garbage", b"rag-json"]
    for record in dead:
        assert b"protobuf" in dict(record.headers)["ctxprec.error"]
