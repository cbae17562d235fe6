"""Scaling out is more replicas in one group: two `ctxprec serve` processes share a 6-partition
topic keyed by trace id, every trace is scored exactly once, and when one replica stops the other
takes over its partitions and finishes."""
from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

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

PARTITIONS = 6
EVENTS = 900


def _partitions_owned(serve: ServeProcess) -> int:
    """Partitions this replica reports lag for (one lag series per assigned partition)."""
    import re
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{serve.metrics_port}/metrics", timeout=2) as r:
        text = r.read().decode()
    return len(set(re.findall(r'^ctxprec_kafka_consumer_lag\{[^}]*partition="(\d+)"', text, re.M)))


async def _wait(predicate, timeout_s: float, what: str, *procs: ServeProcess) -> None:
    deadline = time.monotonic() + timeout_s
    while not await asyncio.to_thread(predicate):
        for p in procs:
            assert p.alive(), f"a replica died while waiting for {what}:\n{p.log_tail()}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}:\n" + "\n".join(p.log_tail(15) for p in procs)
        await asyncio.sleep(0.2)


async def test_two_replicas_share_the_work_and_one_takes_over(broker: Broker, unique_topic: str, make_stub_judge,
                                                             tmp_path: Path) -> None:
    stub = await make_stub_judge(latency_ms=30, jitter_ms=20, seed=5)
    topic, results = unique_topic, unique_topic + ".scores"
    await create_topic(broker.bootstrap, topic, PARTITIONS)
    await create_topic(broker.bootstrap, results, 1)
    a = ServeProcess(broker.bootstrap, topic, results, stub.url, tmp_path / "a.log", extra=["--workers", "4", "--kafka-max-undone-per-partition", "20"])
    b = ServeProcess(broker.bootstrap, topic, results, stub.url, tmp_path / "b.log", extra=["--workers", "4", "--kafka-max-undone-per-partition", "20"])
    try:
        a.start()
        b.start()
        await asyncio.gather(asyncio.to_thread(a.wait_ready), asyncio.to_thread(b.wait_ready))
        # Both in the group with a share each (a group settles in a few seconds).
        await _wait(lambda: _partitions_owned(a) >= 1 and _partitions_owned(b) >= 1
                    and _partitions_owned(a) + _partitions_owned(b) == PARTITIONS, 40, "the group to settle", a, b)

        events = [rag_event(i, relevant=1 + i % 2) for i in range(EVENTS)]
        await produce(broker.bootstrap, topic, ((e["trace_id"].encode(), json.dumps(e).encode()) for e in events))

        # Let both work for a while, then stop A mid-stream: B must take A's partitions and finish.
        await _wait(lambda: a.metric("ctxprec_samples_total", decision="evaluated") >= 60
                    and b.metric("ctxprec_samples_total", decision="evaluated") >= 60, 40, "both replicas to score", a, b)
        scored_by_a = a.metric("ctxprec_samples_total", decision="evaluated")
        assert scored_by_a < EVENTS / 2, "A finished its share before it was stopped; nothing to take over"
        assert await asyncio.to_thread(a.terminate) == 0, a.log_tail()
        await _wait(lambda: _partitions_owned(b) == PARTITIONS, 40, "B to own every partition", b)
        deadline = time.monotonic() + 60
        while await committed_total(broker.bootstrap, topic, b.group, PARTITIONS) < EVENTS:
            assert b.alive() and time.monotonic() < deadline, b.log_tail()
            await asyncio.sleep(0.5)
        assert await asyncio.to_thread(b.terminate) == 0, b.log_tail()
    finally:
        a.kill()
        b.kill()

    records = [json.loads(r.value) for r in await read_all(broker.bootstrap, results, expect=EVENTS + 1, timeout_s=6)]
    traces = [r["trace_id"] for r in records]
    assert sorted(traces) == sorted(e["trace_id"] for e in events), (
        f"{len(traces)} records for {EVENTS} events, {len(set(traces))} distinct")
    assert {r["decision"] for r in records} == {"evaluated"}

