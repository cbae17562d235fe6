"""Scenario 4: SIGTERM while `ctxprec serve` (a child process, Kafka rag_event input) is at full
load: a slow judge (1.5 s per answer), 2 workers, and as much work taken in as the sidecar will
hold: the Kafka back-pressure bound (10 undone messages) is reached and intake paused, 2 scoring,
8 queued. The queue holds 10, as many as the bound, so nothing is shed as `overloaded` (with a
queue smaller than the bound, the surplus of a fetch is decided `overloaded` at once: counted,
committed, never scored; see docs/RESILIENCE.md).

Measured: the process exits 0 within the configured shutdown deadline (plus a small allowance
for closing the Kafka clients); every message it had taken in got a decision record (scored, or
`failed` with error type `shutdown`); the committed offset covers only messages scored before
the exit, and every message scored before the exit is committed (shutdown order: stop fetching,
let the workers drain, commit, close; with the default `--kafka-shutdown-drain-s`, which no longer
has to match the deadline); a restart scores every remaining message, and no message is scored
twice."""
from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

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
EVENTS = 40
WORKERS = 2
MAX_UNDONE = 10
QUEUE = MAX_UNDONE  # not smaller than the back-pressure bound: nothing shed
SHUTDOWN_TIMEOUT_S = 2.0
EXIT_ALLOWANCE_S = 2.5  # closing the Kafka consumer and producer after the deadline


async def wait_for(predicate: Callable[[], bool], serve: ServeProcess, what: str, timeout: float = 40.0) -> None:
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(predicate):
        assert serve.alive(), serve.log_tail()
        assert time.monotonic() < deadline, f"timed out waiting for {what}\n{serve.log_tail()}"
        await asyncio.sleep(0.1)


async def test_sigterm_at_full_load_decides_commits_and_resumes(broker: Broker, make_stub_judge: MakeStub,
                                                                tmp_path: Path) -> None:
    stub = await make_stub_judge(latency_ms=1500)
    topic, results = "chaos-sigterm", "chaos-sigterm.scores"
    await create_topic(broker.bootstrap, topic, 1)
    await create_topic(broker.bootstrap, results, 1)
    events = [rag_event(i, relevant=1 + i % 3) for i in range(EVENTS)]
    offset_of = {e["trace_id"]: i for i, e in enumerate(events)}  # one partition, produced in order
    await produce(broker.bootstrap, topic, ((None, json.dumps(e).encode()) for e in events))

    extra = ["--workers", str(WORKERS), "--queue-size", str(QUEUE),
             "--kafka-max-undone-per-partition", str(MAX_UNDONE), "--kafka-max-undone-total", str(MAX_UNDONE),
             "--shutdown-timeout", str(SHUTDOWN_TIMEOUT_S),
             "--judge-timeout", "10", "--judge-cache-size", "0"]
    serve = ServeProcess(broker.bootstrap, topic, results, stub.url, tmp_path / "serve.log", extra=extra)
    try:
        serve.start()
        await asyncio.to_thread(serve.wait_ready)
        await wait_for(lambda: serve.metric("ctxprec_queue_depth") == MAX_UNDONE - WORKERS, serve, "intake at its bound")
        assert serve.metric("ctxprec_samples_total", decision="overloaded") == 0

        started = time.monotonic()
        code = await asyncio.to_thread(serve.terminate, 30.0)
        exit_s = time.monotonic() - started
        assert code == 0, serve.log_tail()
        assert exit_s <= SHUTDOWN_TIMEOUT_S + EXIT_ALLOWANCE_S, f"exit took {exit_s:.2f}s"

        committed = await committed_total(broker.bootstrap, topic, serve.group, 1)
        first = [json.loads(r.value) for r in await read_all(broker.bootstrap, results, expect=EVENTS, timeout_s=3)]
        decided = {offset_of[r["trace_id"]]: r for r in first}
        assert len(decided) == len(first), "a message was decided twice in one run"
        shutdown = sorted(o for o, r in decided.items() if r["decision"] == "failed")
        scored = sorted(o for o, r in decided.items() if r["decision"] == "evaluated")
        assert all(decided[o]["error"]["type"] == "shutdown" and decided[o]["score"] is None for o in shutdown)
        # Everything taken in was decided: the records cover offsets 0..n-1 without a hole, and
        # n is at most what back-pressure lets in beyond the last commit.
        assert sorted(decided) == list(range(len(decided))), sorted(decided)
        assert shutdown, "SIGTERM caught no work in flight; nothing was tested"
        # Committed exactly what was scored: everything scored before the exit (a prefix, one
        # partition) is below the commit, and every `shutdown` failure lies at or above it (it
        # will be read again).
        assert scored == list(range(len(scored))), scored
        assert committed == len(scored) > 0, (committed, scored)
        assert all(o >= committed for o in shutdown), (committed, shutdown)
        assert len(decided) <= committed + MAX_UNDONE

        # A restart with the judge back to speed scores the rest; nothing lost, nothing twice.
        stub.configure(latency_ms=10)
        serve.start()
        await asyncio.to_thread(serve.wait_ready)

        async def all_committed() -> bool:
            return await committed_total(broker.bootstrap, topic, serve.group, 1) >= EVENTS

        deadline = time.monotonic() + 40
        while not await all_committed():
            assert serve.alive() and time.monotonic() < deadline, serve.log_tail()
            await asyncio.sleep(0.3)
        assert await asyncio.to_thread(serve.terminate, 30.0) == 0, serve.log_tail()
    finally:
        serve.kill()

    records = [json.loads(r.value) for r in await read_all(broker.bootstrap, results, expect=10**6, timeout_s=3)]
    evaluated: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        if r["decision"] == "evaluated":
            evaluated.setdefault(offset_of[r["trace_id"]], []).append(r)
    assert sorted(evaluated) == list(range(EVENTS)), "an event has no score after the restart"
    # Everything scored before the exit was committed, so no event is scored twice.
    assert all(len(v) == 1 for v in evaluated.values()), {o: len(v) for o, v in evaluated.items() if len(v) > 1}
    assert all(v[0]["relevant_count"] == 1 + o % 3 and v[0]["score"] == 1 for o, v in evaluated.items())
