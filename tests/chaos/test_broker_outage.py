"""Scenario 3: the Kafka broker goes away while `ctxprec serve` (a child process) consumes.
tests/kafka/test_kafka_broker_restart.py already proves the in-process sidecar reconnects and
scores after a restart; this test watches the counters, the process and the commits.

1. Frozen (SIGSTOP for 4 s, then SIGCONT): the broker keeps its data, so the commits can be
   checked: the process stays alive and healthy through it, every event is scored, and the group
   commits every message, each decided (no failed, no overloaded, no dead letter).
2. Restarted (stopped, started again on the same port): the test broker keeps nothing in
   memory, so topics are made again and new events produced; the same process, never restarted,
   scores them and commits them on the new broker, and its counters move by what it decided."""
from __future__ import annotations

import asyncio
import json
import signal
import time
import urllib.request
from pathlib import Path
from typing import Awaitable, Callable

import pytest

from ctxprec.collector.stub_judge import StubJudge

from tests.kafka.serve_proc import ServeProcess
from tests.kafka.tansu import (
    Broker,
    committed_total,
    create_topic,
    produce,
    rag_event,
    read_all,
)

pytestmark = pytest.mark.slow

MakeStub = Callable[..., Awaitable[StubJudge]]
PARTITIONS = 2
FIRST = 200
AFTER_RESTART = 60
FREEZE_S = 4.0


def healthz(serve: ServeProcess) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{serve.metrics_port}/healthz", timeout=2) as response:
        return response.status


async def until_committed(broker: Broker, topic: str, serve: ServeProcess, n: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while await committed_total(broker.bootstrap, topic, serve.group, PARTITIONS) < n:
        assert serve.alive(), serve.log_tail()
        assert time.monotonic() < deadline, f"fewer than {n} committed\n{serve.log_tail()}"
        await asyncio.sleep(0.3)


async def scored_traces(broker: Broker, results: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in await read_all(broker.bootstrap, results, expect=10**6, timeout_s=2):
        record = json.loads(r.value)
        out.setdefault(record["trace_id"], []).append(record)
    return out


async def make_topics(broker: Broker, topic: str, results: str) -> None:
    await create_topic(broker.bootstrap, topic, PARTITIONS)
    await create_topic(broker.bootstrap, results, 1)


async def test_broker_frozen_then_restarted(broker: Broker, make_stub_judge: MakeStub, tmp_path: Path) -> None:
    stub = await make_stub_judge(latency_ms=30, jitter_ms=20, seed=4)
    topic, results = "chaos-broker", "chaos-broker.scores"
    await make_topics(broker, topic, results)
    first = [rag_event(i) for i in range(FIRST)]
    await produce(broker.bootstrap, topic, ((e["trace_id"].encode(), json.dumps(e).encode()) for e in first))
    serve = ServeProcess(broker.bootstrap, topic, results, stub.url, tmp_path / "serve.log",
                         extra=["--workers", "4", "--kafka-max-undone-per-partition", "20"])
    try:
        serve.start()
        await asyncio.to_thread(serve.wait_ready)
        deadline = time.monotonic() + 30
        while serve.metric("ctxprec_samples_total", decision="evaluated") < 20:
            assert serve.alive() and time.monotonic() < deadline, serve.log_tail()
            await asyncio.sleep(0.05)

        # 1. Frozen mid-stream.
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGSTOP)
        try:
            frozen_at = serve.metric("ctxprec_samples_total", decision="evaluated")
            assert frozen_at < FIRST, "all scored before the outage; nothing was tested"
            for _ in range(int(FREEZE_S / 0.5)):
                await asyncio.sleep(0.5)
                assert serve.alive(), serve.log_tail()
                assert await asyncio.to_thread(healthz, serve) == 200
        finally:
            broker.proc.send_signal(signal.SIGCONT)
        await until_committed(broker, topic, serve, FIRST)
        scored = await scored_traces(broker, results)
        assert {e["trace_id"] for e in first} <= set(scored)
        assert all(r["decision"] == "evaluated" for rs in scored.values() for r in rs)
        evaluated = serve.metric("ctxprec_samples_total", decision="evaluated")
        assert evaluated >= FIRST and serve.metric("ctxprec_samples_total") == evaluated
        assert serve.metric("ctxprec_kafka_messages_total") >= FIRST
        assert serve.metric("ctxprec_kafka_dead_letters_total") == 0

        # 2. Restarted: everything the broker held is gone; the process carries on.
        await asyncio.to_thread(broker.restart)
        await asyncio.sleep(1.0)
        assert serve.alive(), serve.log_tail()
        await make_topics(broker, topic, results)
        later = [rag_event(i) for i in range(FIRST, FIRST + AFTER_RESTART)]
        await produce(broker.bootstrap, topic, ((e["trace_id"].encode(), json.dumps(e).encode()) for e in later))
        await until_committed(broker, topic, serve, AFTER_RESTART, timeout=90)
        scored = await scored_traces(broker, results)
        assert {e["trace_id"] for e in later} <= set(scored), "an event produced after the restart was not scored"
        assert serve.metric("ctxprec_samples_total", decision="evaluated") >= evaluated + AFTER_RESTART
        assert serve.metric("ctxprec_samples_total") == serve.metric("ctxprec_samples_total", decision="evaluated")
        assert await asyncio.to_thread(healthz, serve) == 200
        assert await asyncio.to_thread(serve.terminate, 30.0) == 0, serve.log_tail()
    finally:
        serve.kill()
