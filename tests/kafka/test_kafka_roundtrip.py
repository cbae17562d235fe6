"""Kafka in, scores out, for each `--kafka-format`: messages produced to a real broker, `serve`
in-process judging through the stub judge over HTTP, score records read back from the results
topic, offsets committed to the end."""
from __future__ import annotations

import json

import pytest

from ctxprec.scorer.records import record_id
from tests.kafka.inprocess import kafka_flags, running
from tests.kafka.otel_data import PATTERNS, marker, otel_traces, otlp_json
from tests.kafka.tansu import Broker, committed_total, create_topic, produce, read_all

pytestmark = pytest.mark.slow

TRACES = 12
PARTITIONS = 2


def _messages(fmt: str) -> tuple[list[tuple[bytes, bytes]], dict[str, tuple[str, float]]]:
    """(key, value) messages and {trace id: (span id, expected score)}."""
    expected: dict[str, tuple[str, float]] = {}
    messages: list[tuple[bytes, bytes]] = []
    if fmt == "rag_event":
        for i in range(TRACES):
            pattern, score = PATTERNS[i % len(PATTERNS)]
            trace, span = f"{i + 1:032x}", f"{i + 1:016x}"
            event = {"trace_id": trace, "span_id": span, "service": "kb-bot", "query": f"question {i}",
                     "contexts": [{"content": f"{marker(r)} document {k}", "id": f"doc-{k}"}
                                  for k, r in enumerate(pattern)],
                     "output": f"answer {i}", "attributes": {"retriever": "kb-v2"}}
            messages.append((trace.encode(), json.dumps(event).encode()))
            expected[trace] = (span, score)
        return messages, expected
    for trace, span, score, request in otel_traces(TRACES):
        value = request.SerializeToString() if fmt == "otlp_proto" else otlp_json(request)
        # partition_traces_by_id: the key is the trace id in hex.
        messages.append((trace.encode(), value))
        expected[trace] = (span, score)
    return messages, expected


@pytest.mark.parametrize("fmt", ["otlp_proto", "otlp_json", "rag_event"])
async def test_each_format_is_scored_into_the_results_topic(fmt: str, broker: Broker, unique_topic: str,
                                                            stub_judge, tmp_path) -> None:
    topic, results = unique_topic, unique_topic + ".scores"
    await create_topic(broker.bootstrap, topic, PARTITIONS)
    await create_topic(broker.bootstrap, results, 1)
    messages, expected = _messages(fmt)
    await produce(broker.bootstrap, topic, messages)

    group = f"g-{unique_topic}"
    flags = kafka_flags(broker.bootstrap, topic, results, stub_judge.url, fmt=fmt, group=group)
    async with running(flags) as pipeline:
        raw = await read_all(broker.bootstrap, results, expect=TRACES)
        records = [json.loads(r.value) for r in raw]
        fingerprint = str(pipeline.engine.fingerprint)
        metrics = pipeline.metrics
        assert metrics.kafka_messages.labels(format=fmt)._value.get() == TRACES
        if fmt != "rag_event":
            assert metrics.spans_received.labels(receiver="kafka")._value.get() == 2 * TRACES
    # Stopped gracefully: everything decided is committed.
    assert await committed_total(broker.bootstrap, topic, group, PARTITIONS) == TRACES

    assert len(records) == TRACES
    for r, rec in zip(raw, records):  # keyed by trace id, idempotency key also in a header
        assert r.key == rec["trace_id"].encode()
        assert dict(r.headers)["ctxprec.record_id"] == rec["id"].encode()
    by_trace = {r["trace_id"]: r for r in records}
    assert set(by_trace) == set(expected)
    for trace, (span, score) in expected.items():
        rec = by_trace[trace]
        assert rec["decision"] == "evaluated" and rec["error"] is None
        assert rec["span_id"] == span
        assert rec["score"] == score, rec
        assert rec["service"] == "kb-bot"
        assert rec["id"] == record_id(trace, span, fingerprint)
    assert stub_judge.stats.requests >= TRACES  # judged over HTTP by the stub, not made up
