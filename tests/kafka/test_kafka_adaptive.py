"""Adaptive sampling on rag_event input from a real broker: the byte peek caches each service's
threshold, and must drop it when a boost raises the rate. Otherwise it would go on dropping, at
the stale base rate, the events that the raised rate (recorded on every score the gate keeps)
says were sampled, and the weights 1 / rate would overstate the boosted service's traffic."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.kafka.inprocess import kafka_flags, running
from tests.kafka.tansu import Broker, create_topic, produce, read_all

pytestmark = pytest.mark.slow

BASE_RATE = 0.05
WARMUP = 16
SPACE = 1 << 64
KEPT_LOW = 1  # far below 5% of 2**64: kept at any rate
BAND_LOW = SPACE - 1000  # far above: kept only at a raised rate
HIGH = ["[relevant] reset it under settings", "[irrelevant] our pricing plans"]  # MAP 1.0
LOW = ["[irrelevant] office opening hours", "[relevant] use the reset link"]  # MAP 0.5


def _event(i: int, low: int, contexts: list[str], service: str = "shop") -> bytes:
    trace = f"{i + 1:016x}{low:016x}"
    # json.dumps writes trace_id, span_id and service first: the peek's fast path.
    return json.dumps({"trace_id": trace, "span_id": trace[:16], "service": service,
                       "query": "how do I reset my password", "contexts": contexts,
                       "output": "open settings and reset the password",
                       "attributes": {"retriever": "kb-v2"}}).encode()


def _evaluated(pipeline, service: str) -> float:
    return pipeline.metrics.samples.labels(service=service, decision="evaluated")._value.get()


async def _until(predicate, what: str, timeout_s: float = 30.0) -> None:
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("adaptive", [True, False], ids=["on", "off"])
async def test_the_peek_follows_a_raised_rate(broker: Broker, unique_topic: str, stub_judge, tmp_path: Path,
                                              adaptive: bool) -> None:
    topic, results = unique_topic, unique_topic + ".scores"
    for t in (topic, results, topic + ".dlq"):
        await create_topic(broker.bootstrap, t, 1)
    config = tmp_path / "ctxprec.yaml"
    config.write_text(f"drift:\n  warmup: {WARMUP}\n", encoding="utf-8")
    extra = ["--config", str(config), "--sample-rate", str(BASE_RATE)]
    if adaptive:
        extra += ["--adaptive-sampling", "on"]
    flags = kafka_flags(broker.bootstrap, topic, results, stub_judge.url, fmt="rag_event",
                        group=f"g-{unique_topic}", extra=extra)
    async with running(flags) as pipeline:
        # Warm-up at the base rate: the peek learns shop's threshold (5%) from these.
        await produce(broker.bootstrap, topic, [
            (None, _event(i, KEPT_LOW, LOW if i % 4 == 3 else HIGH)) for i in range(WARMUP)])
        await _until(lambda: _evaluated(pipeline, "shop") == WARMUP, "the warm-up scored")
        generation = pipeline.sampler.generation
        # One detector block at 0.5: shop's drift statistic passes the warning level.
        await produce(broker.bootstrap, topic, [
            (None, _event(WARMUP + i, KEPT_LOW, LOW)) for i in range(8)])
        await _until(lambda: _evaluated(pipeline, "shop") == WARMUP + 8, "the degraded block scored")
        rate = pipeline.metrics.registry.get_sample_value("ctxprec_sample_rate", {"service": "shop"})
        assert rate == (1.0 if adaptive else BASE_RATE)
        assert (pipeline.sampler.generation > generation) is adaptive

        # Events only the raised rate keeps; another service's go on being dropped by the peek.
        band = [(None, _event(100 + i, BAND_LOW, HIGH)) for i in range(4)]
        others = [(None, _event(200 + i, BAND_LOW, HIGH, service="search")) for i in range(4)]
        await produce(broker.bootstrap, topic, band + others)
        samples = pipeline.metrics.samples
        await _until(lambda: samples.labels(service="search", decision="not_sampled")._value.get() == 4
                     and _evaluated(pipeline, "shop") + samples.labels(service="shop", decision="not_sampled")._value.get()
                     == WARMUP + 8 + 4, "the last events decided")
        scored = await read_all(broker.bootstrap, results, expect=WARMUP + 8 + (4 if adaptive else 0))

    records = [json.loads(r.value) for r in scored]
    raised = [r for r in records if r["trace_id"].endswith(f"{BAND_LOW:016x}")]
    if adaptive:
        assert len(raised) == 4 and {r["sample_rate"] for r in raised} == {1.0}
    else:
        assert raised == []
    assert {r["sample_rate"] for r in records if r not in raised} == {BASE_RATE}
