"""At-least-once through crashes: 2,000 rag_event events, `ctxprec serve` killed with SIGKILL three
times at random points while it scores, restarted each time. Afterwards every event has a score
record (none lost) and the replays are bounded by what can be in flight at a kill."""
from __future__ import annotations

import asyncio
import json
import random
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

EVENTS = 2000
PARTITIONS = 2
MAX_UNDONE = 50  # per partition
COMMIT_INTERVAL_S = 0.5
KILLS = 3
WORKERS = 8


async def test_kill_9_three_times_loses_nothing(broker: Broker, unique_topic: str, make_stub_judge,
                                               tmp_path: Path) -> None:
    rnd = random.Random(20261129)
    stub = await make_stub_judge(latency_ms=20, jitter_ms=20, seed=3)
    topic, results = unique_topic, unique_topic + ".scores"
    await create_topic(broker.bootstrap, topic, PARTITIONS)
    await create_topic(broker.bootstrap, results, 1)
    events = [rag_event(i, relevant=1 + i % 3) for i in range(EVENTS)]
    await produce(broker.bootstrap, topic, ((e["trace_id"].encode(), json.dumps(e).encode()) for e in events))

    serve = ServeProcess(broker.bootstrap, topic, results, stub.url, tmp_path / "serve.log",
                         extra=["--workers", str(WORKERS), "--kafka-max-undone-per-partition", str(MAX_UNDONE),
                                "--kafka-commit-interval-s", str(COMMIT_INTERVAL_S)])
    evaluated_before_kill: list[float] = []
    try:
        for _ in range(KILLS):
            serve.start()
            await asyncio.to_thread(serve.wait_ready)
            # Wait until this run is scoring, then kill it a random moment later.
            deadline = time.monotonic() + 40
            while serve.metric("ctxprec_samples_total", decision="evaluated") < 1:
                assert time.monotonic() < deadline, serve.log_tail()
                assert serve.alive(), serve.log_tail()
                await asyncio.sleep(0.05)
            await asyncio.sleep(rnd.uniform(0.3, 1.5))
            evaluated_before_kill.append(serve.metric("ctxprec_samples_total", decision="evaluated"))
            serve.kill()

        serve.start()
        await asyncio.to_thread(serve.wait_ready)
        deadline = time.monotonic() + 90
        while await committed_total(broker.bootstrap, topic, serve.group, PARTITIONS) < EVENTS:
            assert time.monotonic() < deadline, serve.log_tail()
            assert serve.alive(), serve.log_tail()
            await asyncio.sleep(0.5)
        assert await asyncio.to_thread(serve.terminate) == 0, serve.log_tail()
    finally:
        serve.kill()

    # Each killed run really was killed mid-way (it had scored some but not all).
    assert all(0 < n < EVENTS for n in evaluated_before_kill), evaluated_before_kill
    records = [json.loads(r.value) for r in await read_all(broker.bootstrap, results, expect=EVENTS * 2, timeout_s=8)]
    by_trace: dict[str, list[dict]] = {}
    for rec in records:
        by_trace.setdefault(rec["trace_id"], []).append(rec)
    missing = {e["trace_id"] for e in events} - set(by_trace)
    assert not missing, f"{len(missing)} events have no score record"
    for trace, recs in by_trace.items():
        assert {r["decision"] for r in recs} == {"evaluated"}, recs[0]
        assert len({r["id"] for r in recs}) == 1, "a replay must carry the same idempotency key"
        assert len({r["score"] for r in recs}) == 1
    relevant = {e["trace_id"]: 1 + i % 3 for i, e in enumerate(events)}
    assert all(recs[0]["relevant_count"] == relevant[t] and recs[0]["score"] == 1 for t, recs in by_trace.items())
    duplicates = len(records) - EVENTS
    # What a kill can replay: the undone messages of each partition, plus what was decided since
    # the last commit. Scoring is at most WORKERS / judge latency (20 ms minimum) per second, and
    # a commit happens every COMMIT_INTERVAL_S (doubled: a commit in progress at the kill).
    max_rate = WORKERS / 0.020
    bound = KILLS * (PARTITIONS * MAX_UNDONE + int(max_rate * COMMIT_INTERVAL_S * 2))
    assert 0 <= duplicates <= bound, (duplicates, bound)
