"""The noisy-document summaries written to a Kafka topic of their own, on a real broker: while
`serve` reads rag_events, each round carries one message per service and retriever naming the
planted noisy document; the results topic holds score records only; a last round is written at
shutdown."""
from __future__ import annotations

import json

import pytest

from ctxprec.collector.serve import describe

from tests.kafka.inprocess import kafka_flags, running
from tests.kafka.tansu import Broker, create_topic, produce, read_all, records_json

pytestmark = pytest.mark.slow

EVENTS = 30


def _event(i: int) -> bytes:
    trace = f"{i + 1:032x}"
    contexts = [{"id": "kb-reset", "content": "[relevant] reset it under settings"},
                {"id": f"kb-{i}", "content": f"[relevant] passage {i}"},
                {"id": "promo-banner", "content": "[irrelevant] spring sale: 20% off everything"}]
    return json.dumps({"trace_id": trace, "span_id": trace[:16], "service": "kb-bot", "query": f"question {i}",
                       "contexts": contexts, "output": f"answer {i}", "attributes": {"retriever": "kb-v2"}}).encode()


async def test_summaries_go_to_their_own_topic(broker: Broker, unique_topic: str, stub_judge) -> None:
    topic, results, diagnostics = unique_topic, unique_topic + ".scores", unique_topic + ".diagnostics"
    for t in (topic, results, diagnostics, topic + ".dlq"):
        await create_topic(broker.bootstrap, t, 1)
    flags = kafka_flags(broker.bootstrap, topic, results, stub_judge.url, fmt="rag_event", group=f"g-{unique_topic}",
                        extra=["--kafka-diagnostics-topic", diagnostics, "--kafka-diagnostics-interval-s", "0.5"])
    async with running(flags) as pipeline:
        # Alone in its group it owns partition 0, so it is the replica that publishes for the cluster.
        assert (f"output: noisy-document summaries to Kafka topic {diagnostics} every 0.5s (by the replica owning "
                "partition 0)") in describe(pipeline)
        await produce(broker.bootstrap, topic, [(None, _event(i)) for i in range(EVENTS)])
        scored = await read_all(broker.bootstrap, results, expect=EVENTS)
        # Written periodically while serving: a round taken after every event was scored.
        while_serving: list = []
        for _ in range(20):
            while_serving = await read_all(broker.bootstrap, diagnostics, expect=10**6, timeout_s=1.0)
            if while_serving and json.loads(while_serving[-1].value)["documents"][0]["irrelevant"] == EVENTS:
                break
        assert while_serving and json.loads(while_serving[-1].value)["documents"][0]["irrelevant"] == EVENTS
        assert pipeline.kafka_diagnostics.rounds >= 1

    records = records_json(scored)
    assert len(records) == EVENTS and all("verdicts" in r and "kind" not in r for r in records)
    everything = await read_all(broker.bootstrap, diagnostics, expect=10**6, timeout_s=2.0)
    assert len(everything) >= len(while_serving) + 1  # the last round, at shutdown
    last = everything[-1]
    assert last.key == b"kb-bot/kb-v2"
    body = json.loads(last.value)
    assert body["kind"] == "ctxprec.noisy_documents" and body["service"] == "kb-bot" and body["retriever"] == "kb-v2"
    assert body["previews"] is False and isinstance(body["at"], float)
    top = body["documents"][0]
    assert top["document"] == "promo-banner" and top["irrelevant"] == EVENTS and top["irrelevant_rate"] == 1.0
    assert {d["document"] for d in body["documents"]} == {"promo-banner"}  # only irrelevant ones take slots
    assert "spring sale" not in last.value.decode()  # previews are off: no text
